// The main window's stepping side (see main_window.h): Reset, Step, Run N, Run to end, Stop; the
// recording grows by one record per queued StepResult; scrubbing and layer/head selection; the
// toggles (issue 5 item 4): a setting that differs from run A's re-runs the same tokens as run B on
// the engine thread, and B then steps along with A.
#include <QStatusBar>

#include "app/engine_thread.h"
#include "app/engine_worker.h"
#include "app/main_window.h"
#include "app/run_panel.h"
#include "app/token_strip.h"
#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "views/view_util.h"

namespace hl::app {

namespace {
QString describe(const hl::RunSettings& s) {
  QString n =
      s.normalizer_override ? QString::fromLatin1(hl::normalizer_name(s.normalizer)) : QObject::tr("as trained");
  QString t = QObject::tr("normalizer %1, %2 registers").arg(n).arg(s.registers_used);
  if (!s.adapter.empty()) t += QObject::tr(", adapter");
  return t;
}
}  // namespace

bool MainWindow::canStep() const {
  return hasModel() && !viewOnly_ && !loading_ && runA() != nullptr;
}

void MainWindow::defaultPrompt() {
  const bool tok = modelInfo_ && modelInfo_->hasTokenizer;
  const QString text = panel_->promptText().trimmed();
  bool idsOk = !text.isEmpty();
  try {
    if (idsOk) hl::parse_id_list(text.toStdString());
  } catch (const hl::Error&) {
    idsOk = false;
  }
  if (!tok) {
    panel_->setIdsMode(true);
    if (!idsOk) panel_->setPromptText(QStringLiteral("1, 5, 9, 13, 17, 21"));
  } else if (text.isEmpty() || (idsOk && !panel_->idsMode())) {
    panel_->setIdsMode(false);
    panel_->setPromptText(QStringLiteral("The file is saved in the buffer"));
  }
}

bool MainWindow::resetRun() {
  if (!hasModel() || loading_ || isBusy()) return false;
  if (!maybeDiscard()) return false;
  RunRequest r;
  r.useText = !panel_->idsMode();
  r.text = panel_->promptText();
  if (!r.useText) {
    try {
      r.ids = hl::parse_id_list(r.text.toStdString());
    } catch (const hl::Error& e) {
      reportError(tr("Bad token ids"), QString::fromUtf8(e.what()));
      return false;
    }
  }
  r.addBos = panel_->addBos();
  r.toggles = panel_->toggles();
  r.backend = backend_;
  r.sampling = panel_->sampling();
  r.maxNewTokens = panel_->maxNewTokens();
  r.runId = ++runId_;
  ++compareId_;
  compareRec_.reset();
  compareRun_.reset();
  busy_ = true;  // until runStarted or runFailed
  engine_->post([r](EngineWorker& w) { w.startRun(r); });
  updateActions();
  return true;
}

void MainWindow::onRunStarted(const RunStart& s) {
  busy_ = false;  // commands run in order: this ends the startRun that set busy_, stale or not
  if (s.runId != runId_ || !modelInfo_) {
    updateActions();
    return;
  }
  auto rec = std::make_unique<hl::Recording>();
  rec->checkpoint = modelInfo_->identity;
  rec->config = modelInfo_->config;
  rec->prompt = s.prompt.toStdString();
  rec->engine_version = HL_VERSION;
  if (!s.settings.adapter.empty() && adapter_) rec->adapter_identity = adapter_->identity;
  rec->runs.reserve(2);
  hl::Run a;
  a.label = "A";
  a.settings = s.settings;
  rec->runs.push_back(std::move(a));
  rec_ = std::move(rec);
  pendingPrompt_ = s.tokens;
  pendingText_ = s.texts;
  runBackend_ = s.backend;
  setProperty("hlRunRequestedBackend", backend_);  // what the status bar compares the choice with
  viewOnly_ = false;
  sessionPath_.clear();
  savedChanges_ = autosavedChanges_ = ++changes_;  // an empty run is nothing to lose yet
  step_ = -1;
  ++dataVersion_;
  setStripFromRecording();
  refreshViews(true);
  updateActions();
  statusBar()->showMessage(
      tr("Run A: %1 ready — Step (F10), Run N (F8) or Run to end (F5)")
          .arg(hl::views::countOf(static_cast<long long>(s.tokens.size()), tr("prompt token"), tr("prompt tokens"))), 8000);
  emit runStarted();
}

bool MainWindow::stepRun(int64_t n) {
  if (!canStep() || isBusy() || n == 0) return false;
  busy_ = true;
  step_ = -1;  // follow the new tokens
  const int id = runId_, epoch = engine_->stopEpoch();
  const int64_t maxNew = panel_->maxNewTokens();  // the limit as the panel shows it now
  engine_->post([id, n, epoch, maxNew](EngineWorker& w) { w.step(id, n, epoch, maxNew); });
  updateActions();
  return true;
}

void MainWindow::stopRun() {
  if (!isBusy()) return;
  engine_->requestStop();
  statusBar()->showMessage(tr("Stopping after the current token…"));
}

void MainWindow::onStepped(const StepResult& r) {
  if (r.runId != runId_ || !rec_ || rec_->runs.empty()) return;
  hl::Run& a = rec_->runs[0];
  a.records.push_back(r.a);
  a.run_seconds = r.runSecondsA;
  if (!r.generated) a.prompt_tokens = static_cast<int64_t>(a.records.size());
  rec_->tokens.push_back(r.a.token_id);
  if (modelInfo_ && modelInfo_->hasTokenizer) rec_->token_text.push_back(r.text);
  const size_t t = a.records.size() - 1;
  if (t < pendingPrompt_.size() && pendingPrompt_[t] != r.a.token_id) pendingPrompt_.resize(t);
  if (r.hasB && r.compareId == compareId_ && rec_->runs.size() > 1) {
    hl::Run& b = rec_->runs[1];
    if (b.records.size() == t) {
      b.records.push_back(r.b);
      b.run_seconds = r.runSecondsB;
      b.prompt_tokens = a.prompt_tokens;
    }
  }
  strip_->feed({QString::fromStdString(r.text), r.a.token_id, r.generated, false});
  markDifferences(static_cast<int>(t));
  ++changes_;
  scheduleRefresh();
  emit stepped(static_cast<int>(a.records.size()));
}

void MainWindow::onStepDone(int runId, const QString& reason) {
  Q_UNUSED(runId);
  busy_ = false;  // commands run in order: this ends the step command that set busy_
  refreshViews(false);
  updateActions();
  const hl::Run* a = runA();
  const QString count = a ? tr("%1 (%2 prompt)").arg(hl::views::tokensText(static_cast<long long>(a->records.size()))).arg(a->prompt_tokens) : QString();
  statusBar()->showMessage(reason.isEmpty() ? count : tr("%1 — %2").arg(count, reason), 8000);
  emit idle();
}

void MainWindow::scrubTo(int step) {
  const hl::Run* a = runA();
  if (!a || a->records.empty()) return;
  const int last = static_cast<int>(a->records.size()) - 1;
  step_ = step < 0 || step >= last ? -1 : step;
  refreshViews(false);
}

void MainWindow::selectLayer(int layer) {
  layer_ = layer;
  refreshViews(false);
}

void MainWindow::selectHead(int head) {
  head_ = std::max(0, head);
  refreshViews(false);
}

void MainWindow::setToggles(const Toggles& t) {
  panel_->setToggles(t);
  onTogglesChanged();
}

void MainWindow::setShowDiff(bool on) {
  if (panel_->showDiff() != on)
    panel_->setShowDiff(on);  // emits showDiffChanged → refresh
  else
    refreshViews(true);
}

void MainWindow::clearLiveCompare() {
  if (rec_ && rec_->runs.size() > 1) rec_->runs.resize(1);
}

void MainWindow::onTogglesChanged() {
  if (!rec_ || rec_->runs.empty() || viewOnly_ || !hasModel()) {
    updateActions();
    return;  // with no run the toggles apply to the next run A
  }
  const Toggles t = panel_->toggles();
  const bool differs = t != togglesOf(rec_->runs[0].settings);
  compareRec_.reset();
  compareRun_.reset();
  clearLiveCompare();
  ++compareId_;
  ++dataVersion_;
  const int id = runId_, cid = compareId_, epoch = engine_->stopEpoch();
  compareBusy_ = differs;
  engine_->post([id, cid, differs, t, epoch](EngineWorker& w) { w.setCompare(id, cid, differs, t, epoch); });
  if (differs) {
    statusBar()->showMessage(tr("Re-running %1 as run B…").arg(hl::views::tokensText(static_cast<long long>(rec_->runs[0].records.size()))));
  } else {
    ++changes_;
    statusBar()->showMessage(tr("Toggles match run A: no run B"), 5000);
  }
  markDifferences(0);
  refreshViews(true);
  updateActions();
  if (!differs) emit compareChanged();
}

void MainWindow::onCompareReady(int runId, int compareId, const hl::Run& b) {
  if (runId != runId_ || compareId != compareId_ || !rec_ || rec_->runs.empty()) return;
  compareBusy_ = false;
  clearLiveCompare();
  if (!b.label.empty()) {
    hl::Run run = b;
    run.label.assign(1, 'B');  // not = "B": g++ 12 -Wrestrict false positive (GCC bug 105329)
    run.prompt_tokens = std::min<int64_t>(rec_->runs[0].prompt_tokens, static_cast<int64_t>(run.records.size()));
    if (!run.settings.adapter.empty() && adapter_) rec_->adapter_identity = adapter_->identity;
    rec_->runs.push_back(std::move(run));
    statusBar()->showMessage(tr("Run B: %1 — %2").arg(describe(rec_->runs[1].settings)).arg(hl::views::tokensText(static_cast<long long>(b.records.size()))),
                             8000);
  }
  ++changes_;
  ++dataVersion_;
  markDifferences(0);
  refreshViews(true);
  updateActions();
  emit compareChanged();
  emit idle();
}

void MainWindow::onCompareFailed(int runId, int compareId, const QString& message) {
  if (runId != runId_ || compareId != compareId_) return;
  compareBusy_ = false;
  clearLiveCompare();
  if (rec_ && !rec_->runs.empty()) panel_->setToggles(togglesOf(rec_->runs[0].settings));  // no B: A's toggles
  ++dataVersion_;
  markDifferences(0);
  refreshViews(true);
  updateActions();
  if (message == tr("stopped"))
    statusBar()->showMessage(tr("Run B stopped"), 5000);
  else
    reportError(tr("Run B failed"), message);
  emit compareChanged();
  emit idle();
}

void MainWindow::setStripFromRecording() {
  std::vector<TokenStrip::Chip> chips;
  if (!rec_) {
    strip_->clear();
    return;
  }
  const hl::Run* a = runA();
  const size_t fed = rec_->tokens.size();
  const int64_t prompt = a ? a->prompt_tokens : static_cast<int64_t>(fed);
  for (size_t i = 0; i < fed; ++i) {
    const QString text = i < rec_->token_text.size() ? QString::fromStdString(rec_->token_text[i]) : QString();
    chips.push_back({text, rec_->tokens[i], static_cast<int64_t>(i) >= prompt, false});
  }
  for (size_t i = fed; i < pendingPrompt_.size(); ++i) {
    const QString text = i < pendingText_.size() ? QString::fromStdString(pendingText_[i]) : QString();
    chips.push_back({text, pendingPrompt_[i], false, false});
  }
  strip_->setTokens(chips, static_cast<int>(fed));
  markDifferences(0);
}

void MainWindow::markDifferences(int from) {
  const hl::Run* a = runA();
  const hl::Run* b = runB();
  if (!a) return;
  const int n = std::min(strip_->fedCount(), static_cast<int>(a->records.size()));
  for (int t = std::max(0, from); t < n; ++t) {
    bool differs = false;
    QString note;
    if (b && t < static_cast<int>(b->records.size())) {
      const auto& la = a->records[t].logits;
      const auto& lb = b->records[t].logits;
      if (!la.empty() && la.size() == lb.size()) {
        const int64_t ia = hl::argmax(la.data(), static_cast<int64_t>(la.size()));
        const int64_t ib = hl::argmax(lb.data(), static_cast<int64_t>(lb.size()));
        differs = ia != ib;
        auto name = [this](int64_t id) {
          const bool known = modelInfo_ && id < static_cast<int64_t>(modelInfo_->vocab.size());
          return known ? QStringLiteral("“%1” (#%2)").arg(QString::fromStdString(modelInfo_->vocab[id])).arg(id)
                       : QStringLiteral("#%1").arg(id);
        };
        if (differs) note = tr("A predicts %1, B predicts %2").arg(name(ia), name(ib));
      }
    }
    strip_->setDiffers(t, differs, note);
  }
}

QString MainWindow::runSummary() const {
  const hl::Run* a = runA();
  if (!a) return QString();
  QString s = tr("A: %1").arg(describe(a->settings));
  if (compareRun_)
    s += tr("  —  B: %1 (%2)").arg(compareName_, describe(compareRun_->settings));
  else if (const hl::Run* b = runB())
    s += tr("  —  B: %1").arg(describe(b->settings));
  else if (compareBusy_)
    s += tr("  —  B: running…");
  return s;
}

}  // namespace hl::app
