// The main window's stepping side (see main_window.h): Reset, Step, Run N, Run to end, Stop; the
// recording grows by one record per queued StepResult; scrubbing and layer/head selection; the
// toggles (issue 5 item 4): a setting that differs from run A's re-runs the same tokens as run B on
// the engine thread, and B then steps along with A.
#include <QSettings>
#include <QStatusBar>
#include <utility>

#include "app/engine_thread.h"
#include "app/engine_worker.h"
#include "app/inspector_context.h"
#include "app/main_window.h"
#include "app/run_panel.h"
#include "app/token_strip.h"
#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "app/chat_panel.h"
#include "views/view_util.h"

namespace hl::app {


bool MainWindow::canStep() const {
  return hasModel() && !viewOnly_ && !loading_ && runA() != nullptr;
}

void MainWindow::defaultPrompt() {
  const bool tok = modelInfo_ && modelInfo_->hasTokenizer;
  const QString text = panel_->promptText().trimmed();
  bool idsOk = !text.isEmpty();
  QString why;
  try {
    if (idsOk) {
      const int64_t V = modelInfo_ ? modelInfo_->config.vocab_size : 0;
      for (int32_t id : hl::parse_id_list(text.toStdString())) {
        if (V > 0 && (id < 0 || id >= V)) {
          why = tr("token id %1 is outside the vocabulary [0, %2) of %3").arg(id).arg(V).arg(modelInfo_->name);
          idsOk = false;
          break;
        }
      }
    }
  } catch (const hl::Error& e) {
    idsOk = false;
    why = QString::fromUtf8(e.what());
  }
  // A remembered prompt that cannot run on this model is replaced once, and said (finding 8).
  if (!why.isEmpty() && panel_->idsMode()) {
    startNote_ = tr("the prompt \"%1\" could not run (%2) and was replaced by the default").arg(text.left(60), why);
    panel_->setPromptText(QString());
    defaultPrompt();
    QSettings s;
    panel_->saveSettings(s);
    return;
  }
  if (!tok) {
    panel_->setIdsMode(true);
    if (!idsOk) panel_->setPromptText(QStringLiteral("1, 5, 9, 13, 17, 21"));
  } else if (text.isEmpty() || (idsOk && !panel_->idsMode())) {
    panel_->setIdsMode(false);
    panel_->setPromptText(QStringLiteral("The file is saved in the buffer"));
  }
}

MainWindow::PromptKey MainWindow::promptKey() const {
  return {panel_->promptText(), panel_->idsMode(), panel_->addBos()};
}

bool MainWindow::promptEdited() const {
  return runPrompt_ && !viewOnly_ && hasModel() && !(promptKey() == *runPrompt_);
}

void MainWindow::onPromptEdited() {
  if (!promptEdited()) {
    panel_->setPromptNote(QString());
    return;
  }
  const hl::Run* a = runA();
  panel_->setPromptNote(a && !a->records.empty()
                            ? tr("Prompt edited: run A was fed the previous prompt. Step restarts with the new "
                                 "prompt (Reset does the same)")
                            : tr("Prompt edited: Step starts a new run A with it"));
}

void MainWindow::syncTogglesToRecording() {
  const hl::Recording* r = rec();
  if (!r || r->runs.empty() || compareBusy_) return;
  const hl::Run* b = ctx_->hasComparedSession() ? nullptr : runB();
  shownToggles_ = togglesOf(b ? b->settings : r->runs[0].settings);
  panel_->setToggles(shownToggles_);
}

bool MainWindow::resetRun() {
  if (!hasModel() || loading_ || isBusy()) return false;
  if (!maybeDiscard()) return false;
  requestedPrompt_ = promptKey();
  RunRequest r;
  r.useText = !panel_->idsMode();
  r.text = panel_->promptText();  // Chat mode: the rendered chat, fed without an added BOS
  if (panel_->chatMode() && r.text.isEmpty()) {
    reportError(tr("Chat template"), panel_->chatPanel()->error());
    return false;
  }
  if (!r.useText) {
    try {
      r.ids = hl::parse_id_list(r.text.toStdString());
    } catch (const hl::Error& e) {
      reportError(tr("Bad token ids"), QString::fromUtf8(e.what()));
      return false;
    }
  }
  r.addBos = panel_->addBos();
  // Reset keeps run A's settings as the baseline (finding 13): toggles that differ make run B of
  // the new run, and the status bar says so.
  const hl::Run* oldA = runA();
  r.toggles = oldA ? togglesOf(oldA->settings) : panel_->toggles();
  resetCompare_ = panel_->toggles();
  r.backend = backend_;
  r.sampling = panel_->sampling();
  r.maxNewTokens = panel_->maxNewTokens();
  r.runId = ++runId_;
  ++compareId_;
  ctx_->clearComparedSession();
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
  autoStarted_ = false;
  runPrompt_ = requestedPrompt_;
  auto rec = std::make_shared<hl::Recording>();
  rec->checkpoint = modelInfo_->identity;
  rec->config = modelInfo_->config;
  rec->prompt = s.prompt.toStdString();
  rec->engine_version = HL_VERSION;
  if (!s.settings.adapter.empty() && adapter_) rec->adapter_identity = adapter_->identity;
  rec->weights = modelInfo_->weights.toStdString();
  rec->runs.reserve(2);
  hl::Run a;
  a.label = "A";
  a.settings = s.settings;
  rec->runs.push_back(std::move(a));
  pendingPrompt_ = s.tokens;
  pendingText_ = s.texts;
  pendingSpecial_ = s.special;
  runBackend_ = s.backend;
  setProperty("hlRunRequestedBackend", backend_);  // what the status bar compares the choice with
  viewOnly_ = false;
  sessionPath_.clear();
  savedChanges_ = autosavedChanges_ = ++changes_;  // an empty run is nothing to lose yet
  ctx_->openRecording(std::move(rec), false);
  setStripFromRecording();
  updateActions();
  const QString note = std::exchange(startNote_, QString());
  statusBar()->showMessage(
      tr("Run A: %1 ready — Step (F10), Run N (F8) or Run to end (F5)")
              .arg(hl::views::countOf(static_cast<long long>(s.tokens.size()), tr("prompt token"), tr("prompt tokens"))) +
          (note.isEmpty() ? QString() : QStringLiteral(" — ") + note),
      note.isEmpty() ? 8000 : 30000);
  onPromptEdited();
  shownToggles_ = togglesOf(s.settings);
  liveRun_ = -1;
  const Toggles wanted = std::exchange(resetCompare_, shownToggles_);
  panel_->setToggles(shownToggles_);
  if (wanted != shownToggles_) {
    panel_->setToggles(wanted);
    onTogglesChanged();  // run B of the new run: the toggles the panel showed
    statusBar()->showMessage(tr("Reset: run A keeps its settings; the toggles that differ run as run B"), 8000);
  }
  emit runStarted();
  if (const int64_t n = std::exchange(stepAfterStart_, 0)) stepRun(n);
}

bool MainWindow::stepRun(int64_t n) {
  if (n != 0 && !isBusy() && promptEdited()) {
    // The prompt box and the run disagree: Step restarts with what the box says (finding 1).
    if (!resetRun()) return false;
    stepAfterStart_ = n;
    statusBar()->showMessage(tr("The prompt was edited: a new run A starts with it"), 8000);
    return true;
  }
  if (!canStep() || isBusy() || n == 0) return false;
  busy_ = true;
  ctx_->setStep(-1);  // follow the new tokens
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
  if (r.runId != runId_ || !rec() || rec()->runs.empty()) return;
  hl::Run& a = rec()->runs[0];
  a.records.push_back(r.a);
  a.run_seconds = r.runSecondsA;
  if (!r.generated) a.prompt_tokens = static_cast<int64_t>(a.records.size());
  rec()->tokens.push_back(r.a->token_id);
  if (modelInfo_ && modelInfo_->hasTokenizer) rec()->token_text.push_back(r.text);
  const size_t t = a.records.size() - 1;
  if (t < pendingPrompt_.size() && pendingPrompt_[t] != r.a->token_id) pendingPrompt_.resize(t);
  if (r.hasB && r.compareId == compareId_ && liveRun_ >= 1 && liveRun_ < static_cast<int>(rec()->runs.size())) {
    hl::Run& b = rec()->runs[liveRun_];
    if (b.records.size() == t) {
      b.records.push_back(r.b);
      b.run_seconds = r.runSecondsB;
      b.prompt_tokens = a.prompt_tokens;
    }
  }
  strip_->feed({QString::fromStdString(r.text), r.a->token_id, r.generated, false, r.special});
  markDifferences(static_cast<int>(t));
  ++changes_;
  ctx_->recordsAppended(static_cast<int>(t));
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
  ctx_->setStep(step);
}

void MainWindow::selectLayer(int layer) {
  ctx_->setLayer(layer);
}

void MainWindow::requestHiddenAttention(int layer, int token, int head) {
  hiddenWanted_ = std::array<int, 3>{layer, token, head};
  if (!hiddenInFlight_) sendHiddenRequest();
}

void MainWindow::sendHiddenRequest() {
  if (!hiddenWanted_) return;
  const auto [layer, token, head] = *std::exchange(hiddenWanted_, std::nullopt);
  hiddenInFlight_ = true;
  const int id = runId_;
  engine_->post([id, layer, token, head](EngineWorker& w) { w.hiddenAttention(id, layer, token, head); });
}

void MainWindow::onHiddenAttention(int runId, const hl::views::HiddenPattern& p) {
  if (p.complete || !p.error.empty()) hiddenInFlight_ = false;
  if (runId == runId_) ctx_->setHiddenPattern(p);
  if (!hiddenInFlight_) sendHiddenRequest();
}

void MainWindow::selectHead(int head) {
  ctx_->setHead(head);
}

void MainWindow::setToggles(const Toggles& t) {
  panel_->setToggles(t);
  onTogglesChanged();
}

void MainWindow::setShowDiff(bool on) {
  if (panel_->showDiff() != on)
    panel_->setShowDiff(on);  // emits showDiffChanged → the context
  else
    ctx_->setShowDiff(on);
}

void MainWindow::setStripFromRecording() {
  std::vector<TokenStrip::Chip> chips;
  if (!rec()) {
    strip_->clear();
    return;
  }
  const hl::Run* a = runA();
  const size_t fed = rec()->tokens.size();
  const int64_t prompt = a ? a->prompt_tokens : static_cast<int64_t>(fed);
  // Fed tokens of a recording: the loaded model's tokenizer marks special ones when its vocabulary
  // is the recording's; otherwise no marks (a session of another model).
  const hl::Tokenizer* tok = modelInfo_ && modelInfo_->chatTokenizer &&
                                     modelInfo_->config.vocab_size == rec()->config.vocab_size
                                 ? modelInfo_->chatTokenizer.get()
                                 : nullptr;
  for (size_t i = 0; i < fed; ++i) {
    const QString text = i < rec()->token_text.size() ? QString::fromStdString(rec()->token_text[i]) : QString();
    const int32_t id = rec()->tokens[i];
    chips.push_back({text, id, static_cast<int64_t>(i) >= prompt, false, tok && tok->is_special(id)});
  }
  for (size_t i = fed; i < pendingPrompt_.size(); ++i) {
    const QString text = i < pendingText_.size() ? QString::fromStdString(pendingText_[i]) : QString();
    chips.push_back({text, pendingPrompt_[i], false, false, i < pendingSpecial_.size() && pendingSpecial_[i] != 0});
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

}  // namespace hl::app
