// A job off the GUI thread for the documents that read or write files (SessionIo, StatsDocument):
// `work` runs on a QThread that `owner` owns (its destructor waits for it); `done(value, error)` runs
// on the owner's thread when the thread finishes: the value, or null and the exception's text.
// `*in_flight` counts the jobs not yet done (the tests and the window wait on it).
#pragma once
#include <QObject>
#include <QString>
#include <QThread>
#include <exception>
#include <functional>
#include <memory>

namespace hl::app {

template <class T>
void run_in_background(QObject* owner, int* in_flight, std::function<std::shared_ptr<T>()> work,
                       std::function<void(std::shared_ptr<T>, const QString&)> done) {
  struct Result {
    std::shared_ptr<T> value;
    QString error;
  };
  auto result = std::make_shared<Result>();
  QThread* t = QThread::create([work = std::move(work), result] {
    try {
      result->value = work();
    } catch (const std::exception& e) {
      result->error = QString::fromUtf8(e.what());
    }
  });
  t->setParent(owner);
  ++*in_flight;
  QObject::connect(t, &QThread::finished, owner, [t, result, in_flight, done = std::move(done)] {
    --*in_flight;
    t->deleteLater();
    if (done) done(result->value, result->error);
  });
  t->start();
}

}  // namespace hl::app
