// The main window's compare runs (issue 17 item 5, finding 13; see main_window.h): any number of
// runs besides A, each changing one setting from A. A toggle change makes a new run (or selects the
// run that already has that change) instead of stacking into one B; the run list chooses which run
// the views compare with A; the engine steps the chosen run along with A, re-running it over A's
// tokens when it is chosen. Reset keeps A's settings as the baseline and says so.
#include <QStatusBar>

#include "views/view_util.h"
#include "app/engine_thread.h"
#include "app/engine_worker.h"
#include "app/inspector_context.h"
#include "app/main_window.h"
#include "app/run_list.h"
#include "app/run_panel.h"

namespace hl::app {

namespace {
QString describe(const hl::RunSettings& s) {
  QString n =
      s.normalizer_override ? QString::fromLatin1(hl::normalizer_name(s.normalizer)) : QObject::tr("as trained");
  QString t = QObject::tr("normalizer %1, %2 registers").arg(n).arg(s.registers_used);
  if (!s.adapter.empty()) t += QObject::tr(", adapter");
  return t;
}

// B, C, ..., Z, then R27, R28, ...: the first label no run of `r` has.
std::string nextRunLabel(const hl::Recording& r) {
  for (int i = 1;; ++i) {
    const std::string l = i < 26 ? std::string(1, static_cast<char>('A' + i)) : "R" + std::to_string(i + 1);
    if (!r.run(l)) return l;
  }
}

// How many of the toggles' settings differ.
int changes(const Toggles& x, const Toggles& y) {
  const bool norm = x.normalizerOverride != y.normalizerOverride ||
                    (x.normalizerOverride && y.normalizerOverride && x.normalizer != y.normalizer);
  return int(norm) + int(x.registers != y.registers) + int(x.adapter != y.adapter);
}
}  // namespace

void MainWindow::clearLiveCompare() {
  liveRun_ = -1;
}

void MainWindow::onTogglesChanged() {
  const Toggles t = panel_->toggles();
  if (!rec() || rec()->runs.empty() || viewOnly_ || !hasModel()) {
    shownToggles_ = t;
    updateActions();
    return;  // with no run the toggles apply to the next run A
  }
  const Toggles base = togglesOf(rec()->runs[0].settings);
  // One change from A per run (finding 13): the control just changed, applied to A's settings. A
  // programmatic change of several settings at once is taken as given.
  Toggles one = base;
  if (changes(t, shownToggles_) != 1) {
    one = t;
  } else if (t.normalizerOverride != shownToggles_.normalizerOverride || t.normalizer != shownToggles_.normalizer) {
    one.normalizerOverride = t.normalizerOverride;
    one.normalizer = t.normalizer;
  } else if (t.registers != shownToggles_.registers) {
    one.registers = t.registers;
  } else {
    one.adapter = t.adapter;
  }
  if (one != t) panel_->setToggles(one);
  shownToggles_ = one;
  ctx_->clearComparedSession();
  if (one == base) {
    clearLiveCompare();
    ++compareId_;
    const int id = runId_, cid = compareId_;
    engine_->post([id, cid](EngineWorker& w) { w.setCompare(id, cid, false, {}, 0); });
    ctx_->setCompareIndex(-1);
    statusBar()->showMessage(tr("Toggles match run A: no compare run (the runs stay in the run list)"), 5000);
    markDifferences(0);
    updateActions();
    emit compareChanged();
    return;
  }
  int index = static_cast<int>(rec()->runs.size());  // a new run
  for (size_t i = 1; i < rec()->runs.size(); ++i)
    if (togglesOf(rec()->runs[i].settings) == one) index = static_cast<int>(i);
  startCompare(index, one);
}

void MainWindow::startCompare(int index, const Toggles& t) {
  liveRun_ = index;
  ++compareId_;
  compareBusy_ = true;
  const int id = runId_, cid = compareId_, epoch = engine_->stopEpoch();
  engine_->post([id, cid, t, epoch](EngineWorker& w) { w.setCompare(id, cid, true, t, epoch); });
  if (index < static_cast<int>(rec()->runs.size())) ctx_->setCompareIndex(index);
  const QString label = index < static_cast<int>(rec()->runs.size())
                            ? QString::fromStdString(rec()->runs[index].label)
                            : QString::fromStdString(nextRunLabel(*rec()));
  statusBar()->showMessage(tr("Re-running %1 as run %2…").arg(hl::views::tokensText(static_cast<long long>(rec()->runs[0].records.size()))).arg(label));
  markDifferences(0);
  updateActions();
}

void MainWindow::chooseRun(int index) {
  if (!rec() || rec()->runs.empty() || isBusy()) {
    refreshRunList();  // the list shows what is compared
    return;
  }
  if (index >= static_cast<int>(rec()->runs.size())) return;
  ctx_->clearComparedSession();
  if (index <= 0) {
    shownToggles_ = togglesOf(rec()->runs[0].settings);
    panel_->setToggles(shownToggles_);
    onTogglesChanged();
    return;
  }
  shownToggles_ = togglesOf(rec()->runs[index].settings);
  panel_->setToggles(shownToggles_);
  if (viewOnly_ || !hasModel()) {
    ctx_->setCompareIndex(index);  // a stored run: shown as it is
    markDifferences(0);
    updateActions();
    emit compareChanged();
    return;
  }
  startCompare(index, shownToggles_);  // re-run so that it steps along with A
}

void MainWindow::refreshRunList() {
  runList_->setRuns(rec(), ctx_->compareIndex(), ctx_->hasComparedSession() ? runB() : nullptr, ctx_->comparedName());
}

void MainWindow::onCompareReady(int runId, int compareId, const hl::Run& b) {
  if (runId != runId_ || compareId != compareId_ || !rec() || rec()->runs.empty()) return;
  compareBusy_ = false;
  if (!b.label.empty() && liveRun_ >= 1 && liveRun_ <= static_cast<int>(rec()->runs.size())) {
    hl::Run run = b;
    const bool fresh = liveRun_ == static_cast<int>(rec()->runs.size());
    run.label = fresh ? nextRunLabel(*rec()) : rec()->runs[liveRun_].label;
    run.prompt_tokens = std::min<int64_t>(rec()->runs[0].prompt_tokens, static_cast<int64_t>(run.records.size()));
    if (!run.settings.adapter.empty() && adapter_) rec()->adapter_identity = adapter_->identity;
    if (fresh)
      rec()->runs.push_back(std::move(run));
    else
      rec()->runs[liveRun_] = std::move(run);
    const hl::Run& shown = rec()->runs[liveRun_];
    statusBar()->showMessage(tr("Run %1: %2 — %3 tokens")
                                 .arg(QString::fromStdString(shown.label))
                                 .arg(changeFromA(rec()->runs[0].settings, shown.settings))
                                 .arg(shown.records.size()),
                             8000);
    ctx_->setCompareIndex(liveRun_);
  }
  ++changes_;
  markDifferences(0);
  ctx_->runsChanged();
  updateActions();
  emit compareChanged();
  emit idle();
}

void MainWindow::onCompareFailed(int runId, int compareId, const QString& message) {
  if (runId != runId_ || compareId != compareId_) return;
  compareBusy_ = false;
  clearLiveCompare();
  if (const hl::Run* b = runB())
    shownToggles_ = togglesOf(b->settings);  // the panel shows the compared run again
  else if (const hl::Run* a = runA())
    shownToggles_ = togglesOf(a->settings);
  panel_->setToggles(shownToggles_);
  markDifferences(0);
  ctx_->runsChanged();
  updateActions();
  if (message == tr("stopped"))
    statusBar()->showMessage(tr("The compare run stopped"), 5000);
  else
    reportError(tr("Compare run failed"), message);
  emit compareChanged();
  emit idle();
}

QString MainWindow::runSummary() const {
  const hl::Run* a = runA();
  if (!a) return QString();
  QString s = tr("A: %1").arg(describe(a->settings));
  if (ctx_->hasComparedSession())
    s += tr("  —  B: %1 (%2)").arg(ctx_->comparedName(), describe(runB()->settings));
  else if (const hl::Run* b = runB())
    s += tr("  —  %1: %2").arg(QString::fromStdString(b->label), changeFromA(a->settings, b->settings));
  else if (compareBusy_)
    s += tr("  —  compare run: running…");
  if (rec() && rec()->runs.size() > 2) s += tr("  (%1 runs: see the run list)").arg(rec()->runs.size());
  return s;
}

}  // namespace hl::app
