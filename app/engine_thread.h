// EngineThread: the one engine thread of the app (DESIGN.md) — a QThread running an EngineWorker.
// The GUI posts commands (post) and reads results from the worker's queued signals; Stop and
// Cancel bump epochs in EngineFlags and return at once. Nothing here waits on the engine, except
// the destructor at exit, after it has asked the running command to stop.
#pragma once
#include <QObject>
#include <functional>
#include <memory>

#include "app/engine_types.h"

class QThread;

namespace hl::app {

class EngineWorker;

class EngineThread : public QObject {
  Q_OBJECT

 public:
  explicit EngineThread(QObject* parent = nullptr);
  ~EngineThread() override;

  EngineWorker* worker() const { return worker_; }
  // Runs `f` on the engine thread, after the commands posted before it.
  void post(std::function<void(EngineWorker&)> f);
  // The epoch a command carries; requestStop() makes every command sent before it stop at the
  // next token boundary. cancelLoad() does the same for loads.
  int stopEpoch() const { return flags_->stopEpoch.load(); }
  int cancelEpoch() const { return flags_->cancelEpoch.load(); }
  void requestStop() { flags_->stopEpoch.fetch_add(1); }
  void cancelLoad() { flags_->cancelEpoch.fetch_add(1); }

 private:
  std::shared_ptr<EngineFlags> flags_;
  QThread* thread_ = nullptr;
  EngineWorker* worker_ = nullptr;
};

}  // namespace hl::app
