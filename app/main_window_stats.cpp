// The main window's sweep statistics side (issue 21 item 2; see main_window.h): File > Open sweep
// statistics…, .hlstats files dropped on the window or given on the command line, and the
// "Sweep statistics" window's requests (choose a file, export a figure). Nothing here touches the
// model, the runs or the session.
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QStatusBar>

#include "app/main_window.h"
#include "app/stats_window.h"
#include "sessions/sweep_file.h"
#include "views/instrument_view.h"

namespace hl::app {

StatsWindow* MainWindow::statsWindow() {
  if (stats_) return stats_;
  stats_ = new StatsWindow(this);
  stats_->applyTheme(dark_);
  connect(stats_->document(), &StatsDocument::failed, this, &MainWindow::reportError);
  connect(stats_->document(), &StatsDocument::changed, this, [this] {
    const hl::views::StatsState& s = stats_->document()->state();
    if (s.a)
      statusBar()->showMessage(
          s.b ? tr("Sweep statistics: %1 vs %2").arg(s.nameA, s.nameB) : tr("Sweep statistics: %1").arg(s.nameA), 8000);
  });
  connect(stats_, &StatsWindow::openRequested, this, &MainWindow::chooseStats);
  connect(stats_, &StatsWindow::exportRequested, this,
          [this](hl::views::InstrumentView* v) { exportDialog({v}, v->title()); });
  return stats_;
}

bool MainWindow::openStats(const QString& path) {
  StatsWindow* w = statsWindow();
  w->show();
  w->raise();
  statusBar()->showMessage(tr("Opening %1…").arg(QDir::toNativeSeparators(path)));
  w->document()->open(path, false);
  return true;
}

bool MainWindow::compareStats(const QString& path) {
  StatsWindow* w = statsWindow();
  if (!w->document()->state().a) {
    reportError(tr("Cannot compare the sweeps"), tr("%1: open sweep A first").arg(path));
    return false;
  }
  w->show();
  w->raise();
  statusBar()->showMessage(tr("Opening %1…").arg(QDir::toNativeSeparators(path)));
  w->document()->open(path, true);
  return true;
}

void MainWindow::chooseStats(bool asB) {
  const QString title = asB ? tr("Compare with sweep statistics") : tr("Open sweep statistics");
  const QString last = stats_ ? stats_->document()->pathA() : QString();
  const QString p =
      fileHook_ ? fileHook_(title)
                : QFileDialog::getOpenFileName(
                      stats_ && stats_->isVisible() ? static_cast<QWidget*>(stats_) : this, title,
                      last.isEmpty() ? QDir::homePath() : QFileInfo(last).absolutePath(),
                      tr("HybridLens sweep statistics (*%1);;All files (*)").arg(QLatin1String(hl::kStatsExtension)));
  if (p.isEmpty()) return;
  if (asB)
    compareStats(p);
  else
    openStats(p);
}

}  // namespace hl::app
