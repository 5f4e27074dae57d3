// The main window's run side (see main_window.h): the run panel, the token strip, the run list and
// the status bar wired to the RunController, which does the run logic. Here: the requests built from
// the controls (Reset, Step, Run N, Run to end, Stop, the toggles), the prompt box checked against
// the live run (finding 1), a remembered prompt that cannot run replaced once (finding 8), the strip
// fed and marked where A's and B's top-1 differ, scrubbing and layer/head selection.
#include <QLabel>
#include <QSettings>
#include <QStatusBar>
#include <utility>

#include "app/chat_panel.h"
#include "app/inspector_context.h"
#include "app/main_window.h"
#include "app/run_controller.h"
#include "app/run_list.h"
#include "app/run_panel.h"
#include "app/token_strip.h"
#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"
#include "views/view_util.h"

namespace hl::app {

void MainWindow::connectController() {
  RunController* c = ctl_;
  c->setInputs({[this] { return panel_->toggles(); }, [this] { return panel_->maxNewTokens(); }});
  connect(c, &RunController::stateChanged, this, &MainWindow::updateActions);
  connect(c, &RunController::status, this, [this](const QString& text, int ms) { statusBar()->showMessage(text, ms); });
  connect(c, &RunController::errorReported, this, &MainWindow::reportError);
  connect(c, &RunController::togglesShown, panel_, &RunPanel::setToggles);
  connect(c, &RunController::runOpened, this, &MainWindow::onRunOpened);
  connect(c, &RunController::started, this, &MainWindow::runStarted);
  connect(c, &RunController::stepWanted, this, &MainWindow::stepRun);
  connect(c, &RunController::autoStartFailed, this, &MainWindow::onAutoStartFailed);
  connect(c, &RunController::tokenAppended, this, [this](int t, const StepResult& r) {
    strip_->feed({QString::fromStdString(r.text), r.a->token_id, r.generated, false, r.special});
    markDifferences(t);
  });
  connect(c, &RunController::stepped, this, &MainWindow::stepped);
  connect(c, &RunController::stepFinished, this, &MainWindow::onStepFinished);
  connect(c, &RunController::marksChanged, this, [this] { markDifferences(0); });
  connect(c, &RunController::compareChanged, this, &MainWindow::compareChanged);
  connect(c, &RunController::resumed, this, &MainWindow::onResumed);
  connect(c, &RunController::idle, this, &MainWindow::idle);
  // A guided-tour stop moves on when the engine is done with its load, run A or run B (queued: from
  // the event loop, not inside the controller's own signal).
  connect(c, &RunController::idle, this, &MainWindow::advanceTour, Qt::QueuedConnection);
  connect(c, &RunController::stateChanged, this, &MainWindow::advanceTour, Qt::QueuedConnection);
  connect(c, &RunController::started, this, &MainWindow::advanceTour, Qt::QueuedConnection);
  connect(this, &MainWindow::errorReported, this, [this] { tour_.reset(); });
  connect(this, &MainWindow::loadFailed, this, [this] { tour_.reset(); });  // a cancelled load too
}

bool MainWindow::isLoading() const {
  return ctl_->isLoading();
}

bool MainWindow::hasModel() const {
  return ctl_->hasModel();
}

const ModelInfo* MainWindow::modelInfo() const {
  return ctl_->model();
}

bool MainWindow::isBusy() const {
  return ctl_->isBusy();
}

bool MainWindow::canStep() const {
  return ctl_->canStep();
}

bool MainWindow::isViewOnly() const {
  return ctl_->isViewOnly();
}

bool MainWindow::isDirty() const {
  return ctl_->isDirty();
}

void MainWindow::defaultPrompt() {
  const ModelInfo* m = modelInfo();
  const bool tok = m && m->hasTokenizer;
  const QString text = panel_->promptText().trimmed();
  bool idsOk = !text.isEmpty();
  QString why;
  try {
    if (idsOk) {
      const int64_t V = m ? m->config.vocab_size : 0;
      for (int32_t id : hl::parse_id_list(text.toStdString())) {
        if (V > 0 && (id < 0 || id >= V)) {
          why = tr("token id %1 is outside the vocabulary [0, %2) of %3").arg(id).arg(V).arg(m->name);
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

PromptKey MainWindow::promptKey() const {
  return {panel_->promptText(), panel_->idsMode(), panel_->addBos()};
}

bool MainWindow::promptEdited() const {
  return ctl_->promptDiffers(promptKey());
}

void MainWindow::onPromptEdited() {
  if (!promptEdited()) {
    panel_->setPromptNote(QString());
    return;
  }
  tourNote_->hide();  // the tour's sentence was about its own prompt
  const hl::Run* a = runA();
  panel_->setPromptNote(a && !a->records.empty()
                            ? tr("Prompt edited: run A was fed the previous prompt. Step restarts with the new "
                                 "prompt (Reset does the same)")
                            : tr("Prompt edited: Step starts a new run A with it"));
}

bool MainWindow::resetRun() {
  if (!hasModel() || isLoading() || isBusy()) return false;
  if (!maybeDiscard()) return false;
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
  r.backend = backend_;
  r.sampling = panel_->sampling();
  r.maxNewTokens = panel_->maxNewTokens();
  return ctl_->start(std::move(r), promptKey(), panel_->toggles());
}

void MainWindow::onRunOpened(const RunStart& s) {
  setProperty("hlRunRequestedBackend", backend_);  // what the status bar compares the choice with
  sessionPath_.clear();
  setStripFromRecording();
  updateActions();
  const QString note = std::exchange(startNote_, QString());
  statusBar()->showMessage(
      tr("Run A: %1 ready — Step (F10), Run N (F8) or Run to end (F5)")
              .arg(hl::views::countOf(static_cast<long long>(s.tokens.size()), tr("prompt token"), tr("prompt tokens"))) +
          (note.isEmpty() ? QString() : QStringLiteral(" — ") + note),
      note.isEmpty() ? 8000 : 30000);
  onPromptEdited();
}

void MainWindow::onAutoStartFailed(const QString& message) {
  // The remembered prompt fails on this model: the default replaces it, once, and is remembered
  // (finding 8); the failure is said when the new run starts instead of at every start.
  const QString old = panel_->promptText();
  panel_->setPromptText(QString());
  defaultPrompt();
  startNote_ = tr("the prompt \"%1\" could not run (%2) and was replaced by the default").arg(old.left(60), message);
  QSettings s;
  panel_->saveSettings(s);
  resetRun();
}

bool MainWindow::stepRun(int64_t n) {
  if (n != 0 && !isBusy() && promptEdited()) {
    // The prompt box and the run disagree: Step restarts with what the box says (finding 1).
    if (!resetRun()) return false;
    ctl_->stepAfterStart(n);
    statusBar()->showMessage(tr("The prompt was edited: a new run A starts with it"), 8000);
    return true;
  }
  return ctl_->step(n);
}

void MainWindow::stopRun() {
  ctl_->stop();
}

void MainWindow::onStepFinished(const QString& reason) {
  refreshViews(false);
  updateActions();
  const hl::Run* a = runA();
  const QString count = a ? tr("%1 (%2 prompt)").arg(hl::views::tokensText(static_cast<long long>(a->records.size()))).arg(a->prompt_tokens) : QString();
  statusBar()->showMessage(reason.isEmpty() ? count : tr("%1 — %2").arg(count, reason), 8000);
}

void MainWindow::scrubTo(int step) {
  const hl::Run* a = runA();
  if (!a || a->records.empty()) return;
  ctx_->setStep(step);
}

void MainWindow::selectLayer(int layer) {
  ctx_->setLayer(layer);
}

void MainWindow::selectHead(int head) {
  ctx_->setHead(head);
}

void MainWindow::onTogglesChanged() {
  ctl_->togglesChanged(panel_->toggles());
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

void MainWindow::chooseRun(int index) {
  if (!ctl_->chooseRun(index)) refreshRunList();  // refused: the list shows what is compared
}

void MainWindow::refreshRunList() {
  runList_->setRuns(rec(), ctx_->compareIndex(), ctx_->hasComparedSession() ? runB() : nullptr, ctx_->comparedName());
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
  const ModelInfo* m = modelInfo();
  const hl::Tokenizer* tok =
      m && m->chatTokenizer && m->config.vocab_size == rec()->config.vocab_size ? m->chatTokenizer.get() : nullptr;
  for (size_t i = 0; i < fed; ++i) {
    const QString text = i < rec()->token_text.size() ? QString::fromStdString(rec()->token_text[i]) : QString();
    const int32_t id = rec()->tokens[i];
    chips.push_back({text, id, static_cast<int64_t>(i) >= prompt, false, tok && tok->is_special(id)});
  }
  const RunController::PendingPrompt& p = ctl_->pending();
  for (size_t i = fed; i < p.tokens.size(); ++i) {
    const QString text = i < p.texts.size() ? QString::fromStdString(p.texts[i]) : QString();
    chips.push_back({text, p.tokens[i], false, false, i < p.special.size() && p.special[i] != 0});
  }
  strip_->setTokens(chips, static_cast<int>(fed));
  markDifferences(0);
}

void MainWindow::markDifferences(int from) {
  const hl::Run* a = runA();
  const hl::Run* b = runB();
  if (!a) return;
  const ModelInfo* m = modelInfo();
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
        auto name = [m](int64_t id) {
          const bool known = m && id < static_cast<int64_t>(m->vocab.size());
          return known ? QStringLiteral("“%1” (#%2)").arg(QString::fromStdString(m->vocab[id])).arg(id)
                       : QStringLiteral("#%1").arg(id);
        };
        if (differs) note = tr("A predicts %1, B predicts %2").arg(name(ia), name(ib));
      }
    }
    strip_->setDiffers(t, differs, note);
  }
}

}  // namespace hl::app
