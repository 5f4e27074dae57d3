// SessionIo (see session_io.h): QThread::create jobs around save_session / load_session; the
// thread's finished signal delivers the result to the GUI thread.
#include "app/session_io.h"

#include <QFile>
#include <QPointer>
#include <QThread>
#include <exception>

#include "app/background_job.h"
#include "sessions/session_file.h"

namespace hl::app {

SessionIo::SessionIo(QObject* parent) : QObject(parent) {}

SessionIo::~SessionIo() {
  waitAll();
}

void SessionIo::waitAll() {
  for (QThread* t : findChildren<QThread*>()) t->wait();
}

QString SessionIo::saveNow(const QString& path, const hl::Recording& rec) {
  try {
    hl::save_session(QFile::encodeName(path).toStdString(), rec);
    return QString();
  } catch (const std::exception& e) {
    return QString::fromUtf8(e.what());
  }
}

void SessionIo::save(const QString& path, std::shared_ptr<const hl::Recording> rec, SaveDone done) {
  auto error = std::make_shared<QString>();
  QThread* t = QThread::create([path, rec, error] { *error = saveNow(path, *rec); });
  t->setParent(this);
  ++jobs_;
  connect(t, &QThread::finished, this, [this, t, error, done = std::move(done)] {
    --jobs_;
    t->deleteLater();
    if (done) done(*error);
  });
  t->start();
}

void SessionIo::load(const QString& path, LoadDone done) {
  run_in_background<hl::Recording>(
      this, &jobs_,
      [path] { return std::make_shared<hl::Recording>(hl::load_session(QFile::encodeName(path).toStdString())); },
      [done = std::move(done)](std::shared_ptr<hl::Recording> rec, const QString& error) {
        if (done) done(std::move(rec), error);
      });
}

}  // namespace hl::app
