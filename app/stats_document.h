// StatsDocument: the sweep statistics the "Sweep statistics" window shows (issue 21 item 2) — sweep
// A, an optional sweep B to compare with, the instrument and layer chosen — and the views that draw
// them, told when any of it changes (one shared model, as the inspector context is for runs).
// Files are read off the GUI thread with the checked reader (sessions/sweep_file.h); a file that
// fails to load, or a B that cannot be drawn beside A, changes nothing and is reported through
// `failed` as one line naming the file.
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <memory>
#include <vector>

#include "sessions/sweep_file.h"
#include "views/stats_views.h"

namespace hl::app {

class StatsDocument : public QObject {
  Q_OBJECT

 public:
  explicit StatsDocument(QObject* parent = nullptr);
  ~StatsDocument() override;  // waits for reads in flight

  // Reads `path` in the background; it becomes sweep A (B is dropped when it no longer fits) or,
  // with asB, sweep B (refused with one line when its shapes differ from A's).
  void open(const QString& path, bool asB);
  int readsInFlight() const { return reads_; }
  // The same with a file already read (tests, and the background read's result).
  void setA(std::shared_ptr<const hl::SweepFile> f, const QString& path);
  bool setB(std::shared_ptr<const hl::SweepFile> f, const QString& path);  // false + failed() on mismatch
  void clearB();

  void setInstrument(int i);
  void setRow(int row);  // -1: every layer

  const hl::views::StatsState& state() const { return state_; }
  QString pathA() const { return pathA_; }
  QString pathB() const { return pathB_; }
  // What differs between A and B besides shape (options, checkpoint, prompts), one entry a line.
  const QStringList& differences() const { return differences_; }

  void addViewer(hl::views::StatsView* v);

 signals:
  void changed();  // after the viewers were told
  void failed(const QString& title, const QString& message);

 private:
  void publish();
  hl::views::StatsState state_;
  QString pathA_, pathB_;
  QStringList differences_;
  std::vector<hl::views::StatsView*> viewers_;
  int reads_ = 0;
};

}  // namespace hl::app
