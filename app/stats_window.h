// The "Sweep statistics" window (issue 21 item 2): a window of its own beside the main window, so
// that opening a stats file leaves the model, the runs and the session as they are. Controls: the
// instrument (every entry of sweep_instruments(), with its meaning), the layer, Open, Compare with,
// End compare and Export figure; a header with each sweep's checkpoint, prompts, tokens and options
// and what differs between A and B; tabs with the views of views/stats_views.h, all drawing from
// one StatsDocument. Files are chosen and errors reported by the main window.
#pragma once
#include <QWidget>

#include "app/stats_document.h"

class QComboBox;
class QLabel;
class QPushButton;
class QTabWidget;

namespace hl::app {

class StatsWindow : public QWidget {
  Q_OBJECT

 public:
  explicit StatsWindow(QWidget* parent = nullptr);
  StatsDocument* document() const { return doc_; }
  const std::vector<hl::views::StatsView*>& views() const { return views_; }
  hl::views::StatsView* currentView() const;
  void applyTheme(bool dark);
  QString headerText() const;

 signals:
  void openRequested(bool asB);  // the user wants to choose a file (A, or B to compare)
  void exportRequested(hl::views::InstrumentView* view);

 private:
  void onChanged();
  void fillRows();
  StatsDocument* doc_ = nullptr;
  std::vector<hl::views::StatsView*> views_;
  QComboBox *instrument_ = nullptr, *row_ = nullptr;
  QLabel *meaning_ = nullptr, *header_ = nullptr;
  QPushButton *compare_ = nullptr, *endCompare_ = nullptr, *export_ = nullptr;
  QTabWidget* tabs_ = nullptr;
};

}  // namespace hl::app
