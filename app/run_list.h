// RunList: the runs of the open recording as a list (issue 17 item 5): run A (the baseline), every
// compare run with its change from A and its token count, and a compared session's run. The
// selected row is the run the views compare with A; choosing a row asks the main window for it.
// A view of the recording only: no engine calls, no model math.
#pragma once
#include <QListWidget>
#include <QString>

#include "sessions/recording.h"

namespace hl::app {

class RunList : public QListWidget {
  Q_OBJECT

 public:
  explicit RunList(QWidget* parent = nullptr);
  // One row per run of `rec` (row i: rec->runs[i]) and, with `compared`, one more for it; the row
  // of run `selected` (or the compared one when `comparedSelected`) is highlighted.
  void setRuns(const hl::Recording* rec, int selected, const hl::Run* compared, const QString& comparedName);
  // The texts of the rows (tests).
  QStringList rowTexts() const;

 signals:
  void runChosen(int index);  // index into the recording's runs; 0: compare with nothing

 private:
  bool filling_ = false;
};

}  // namespace hl::app
