// SessionIo: session files saved and read off the GUI thread (sessions/session_file.h does the
// atomic write and the checked read). Each job runs on a short-lived thread with its own snapshot
// of the recording and reports back on the GUI thread through a callback. Not engine work, so it
// does not queue behind a running model on the engine thread.
#pragma once
#include <QObject>
#include <QString>
#include <functional>
#include <memory>

#include "sessions/recording.h"

namespace hl::app {

class SessionIo : public QObject {
  Q_OBJECT

 public:
  using SaveDone = std::function<void(const QString& error)>;
  using LoadDone = std::function<void(std::shared_ptr<hl::Recording> rec, const QString& error)>;

  explicit SessionIo(QObject* parent = nullptr);
  ~SessionIo() override;  // waits for saves in flight: a file being written is finished, not lost

  void save(const QString& path, std::shared_ptr<const hl::Recording> rec, SaveDone done);
  void load(const QString& path, LoadDone done);
  int jobsInFlight() const { return jobs_; }
  void waitAll();  // blocks until every job's file work is done (at exit); callbacks follow later

  // The same, synchronously (the "save before discarding" answer and tests).
  static QString saveNow(const QString& path, const hl::Recording& rec);

 private:
  int jobs_ = 0;
};

}  // namespace hl::app
