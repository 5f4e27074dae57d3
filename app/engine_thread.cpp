// EngineThread (see engine_thread.h): starts the engine QThread with its worker, posts commands
// as queued functor calls, and at exit stops and cancels whatever runs before joining the thread.
#include "app/engine_thread.h"

#include <QMetaObject>
#include <QThread>

#include "app/engine_worker.h"

namespace hl::app {

EngineThread::EngineThread(QObject* parent) : QObject(parent), flags_(std::make_shared<EngineFlags>()) {
  qRegisterMetaType<hl::app::ModelInfo>();
  qRegisterMetaType<hl::app::RunStart>();
  qRegisterMetaType<hl::app::StepResult>();
  qRegisterMetaType<hl::app::AdapterInfo>();
  qRegisterMetaType<hl::Run>();
  qRegisterMetaType<hl::views::HiddenPattern>();
  thread_ = new QThread;
  thread_->setObjectName(QStringLiteral("hl-engine"));
  worker_ = new EngineWorker(flags_);
  worker_->moveToThread(thread_);
  thread_->start();
}

EngineThread::~EngineThread() {
  requestStop();
  cancelLoad();
  thread_->quit();
  thread_->wait();  // the running command ends at its next token or load step
  delete worker_;   // the thread has finished: deleting from here is safe
  delete thread_;
}

void EngineThread::post(std::function<void(EngineWorker&)> f) {
  EngineWorker* w = worker_;
  QMetaObject::invokeMethod(
      w, [w, f = std::move(f)] { f(*w); }, Qt::QueuedConnection);
}

}  // namespace hl::app
