// The run controller (run_controller.h): run A grows by one record per queued StepResult; a
// toggle change makes a compare run with that one change from A (or selects the run that already
// has it) instead of stacking into one B (issue 17 finding 13), and the engine steps the chosen run
// along with A, re-running it over A's tokens when it is chosen; Reset keeps A's settings as the
// baseline. Results of a run that has been replaced carry an old run id and are dropped.
#include "app/run_controller.h"

#include <QStringList>
#include <utility>

#include "app/engine_thread.h"
#include "app/engine_worker.h"
#include "app/inspector_context.h"
#include "engine/io/config.h"
#include "views/view_util.h"

namespace hl::app {

namespace {
QString describe(const hl::RunSettings& s) {
  QString t = QObject::tr("normalizer %1, %2 registers").arg(normalizerText(s)).arg(s.registers_used);
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
int changedSettings(const Toggles& x, const Toggles& y) {
  const bool norm = x.normalizerOverride != y.normalizerOverride ||
                    (x.normalizerOverride && y.normalizerOverride && x.normalizer != y.normalizer);
  return int(norm) + int(x.registers != y.registers) + int(x.adapter != y.adapter);
}
}  // namespace

QString normalizerText(const hl::RunSettings& s) {
  return s.normalizer_override ? QString::fromLatin1(hl::normalizer_name(s.normalizer)) : QObject::tr("as trained");
}

QString changeFromA(const hl::RunSettings& a, const hl::RunSettings& b) {
  QStringList d;
  if (normalizerText(a) != normalizerText(b)) d << QObject::tr("normalizer %1").arg(normalizerText(b));
  if (a.registers_used != b.registers_used)
    d << QObject::tr("registers %1 → %2").arg(a.registers_used).arg(b.registers_used);
  if (a.adapter != b.adapter) d << (b.adapter.empty() ? QObject::tr("no adapter") : QObject::tr("adapter"));
  if (a.backend != b.backend) d << QObject::tr("backend %1").arg(QString::fromStdString(b.backend));
  return d.isEmpty() ? QObject::tr("same settings") : d.join(QStringLiteral(", "));
}

RunController::RunController(EngineThread* engine, InspectorContext* ctx, QObject* parent)
    : QObject(parent), engine_(engine), ctx_(ctx) {
  connectEngine();
}

void RunController::connectEngine() {
  EngineWorker* w = engine_->worker();
  connect(w, &EngineWorker::runStarted, this, &RunController::onRunStarted);
  connect(w, &EngineWorker::runFailed, this, &RunController::onRunFailed);
  connect(w, &EngineWorker::stepped, this, &RunController::onStepped);
  connect(w, &EngineWorker::stepDone, this, [this](int, const QString& reason) { onStepDone(reason); });
  connect(w, &EngineWorker::compareProgress, this, [this](int runId, int compareId, qint64 done, qint64 total) {
    if (runId == runId_ && compareId == compareId_) emit status(tr("Run B: %1 of %2 tokens").arg(done).arg(total), 0);
  });
  connect(w, &EngineWorker::compareReady, this, &RunController::onCompareReady);
  connect(w, &EngineWorker::compareFailed, this, &RunController::onCompareFailed);
  connect(w, &EngineWorker::resumed, this, &RunController::onResumed);
  connect(w, &EngineWorker::hiddenAttentionReady, this, &RunController::onHiddenAttention);
}

hl::Recording* RunController::rec() const {
  return ctx_->mutableRecording();
}

void RunController::setModel(const ModelInfo& info) {
  model_ = info;  // assigned in place: the context's vocabulary pointer into it stays valid
  adapter_.reset();
  runBackend_.clear();
}

void RunController::setAdapter(const AdapterInfo& info) {
  adapter_ = info;
}

void RunController::setLoading(bool on) {
  loading_ = on;
}

bool RunController::canStep() const {
  return hasModel() && !viewOnly_ && !loading_ && ctx_->runA() != nullptr;
}

// ---------------------------------------------------------------------------------------------
// Run A

bool RunController::start(RunRequest r, const PromptKey& prompt, const Toggles& shown) {
  if (!hasModel() || loading_ || isBusy()) return false;
  requestedPrompt_ = prompt;
  const hl::Run* oldA = ctx_->runA();
  r.toggles = oldA ? togglesOf(oldA->settings) : shown;
  resetCompare_ = shown;
  r.runId = ++runId_;
  ++compareId_;
  ctx_->clearComparedSession();
  busy_ = true;  // until runStarted or runFailed
  engine_->post([r](EngineWorker& w) { w.startRun(r); });
  emit stateChanged();
  return true;
}

void RunController::newRecording() {
  auto fresh = std::make_shared<hl::Recording>();
  fresh->config = model_->config;
  fresh->checkpoint = model_->identity;
  ctx_->openRecording(std::move(fresh), true);
  viewOnly_ = false;
  changes_ = savedChanges_ = autosavedChanges_ = 0;
  pending_.tokens.clear();
  runPrompt_.reset();
}

void RunController::onRunStarted(const RunStart& s) {
  busy_ = false;  // commands run in order: this ends the startRun that set busy_, stale or not
  if (s.runId != runId_ || !model_) {
    emit stateChanged();
    return;
  }
  autoStarted_ = false;
  runPrompt_ = requestedPrompt_;
  auto r = std::make_shared<hl::Recording>();
  r->checkpoint = model_->identity;
  r->config = model_->config;
  r->prompt = s.prompt.toStdString();
  r->engine_version = HL_VERSION;
  if (!s.settings.adapter.empty() && adapter_) r->adapter_identity = adapter_->identity;
  r->weights = model_->weights.toStdString();
  r->runs.reserve(2);
  hl::Run a;
  a.label = "A";
  a.settings = s.settings;
  r->runs.push_back(std::move(a));
  pending_ = {s.tokens, s.texts, s.special};
  runBackend_ = s.backend;
  viewOnly_ = false;
  savedChanges_ = autosavedChanges_ = ++changes_;  // an empty run is nothing to lose yet
  ctx_->openRecording(std::move(r), false);
  emit runOpened(s);
  shownToggles_ = togglesOf(s.settings);
  liveRun_ = -1;
  const Toggles wanted = std::exchange(resetCompare_, shownToggles_);
  emit togglesShown(shownToggles_);
  if (wanted != shownToggles_) {
    emit togglesShown(wanted);
    togglesChanged(shownNow(wanted));  // run B of the new run: the toggles the controls showed
    emit status(tr("Reset: run A keeps its settings; the toggles that differ run as run B"), 8000);
  }
  emit started();
  if (const int64_t n = std::exchange(stepAfterStart_, 0)) emit stepWanted(n);
}

void RunController::onRunFailed(int runId, const QString& message) {
  busy_ = false;
  stepAfterStart_ = 0;
  if (runId == runId_ && std::exchange(autoStarted_, false)) {
    emit autoStartFailed(message);  // the remembered prompt fails on this model (finding 8)
    return;
  }
  emit stateChanged();
  if (runId == runId_) emit errorReported(tr("Run failed"), message);
}

bool RunController::step(int64_t n) {
  if (!canStep() || isBusy() || n == 0) return false;
  busy_ = true;
  ctx_->setStep(-1);  // follow the new tokens
  const int id = runId_, epoch = engine_->stopEpoch();
  const int64_t maxNew = maxNewTokens();  // the limit as the controls show it now
  engine_->post([id, n, epoch, maxNew](EngineWorker& w) { w.step(id, n, epoch, maxNew); });
  emit stateChanged();
  return true;
}

void RunController::stop() {
  if (!isBusy()) return;
  engine_->requestStop();
  emit status(tr("Stopping after the current token…"), 0);
}

void RunController::onStepped(const StepResult& r) {
  if (r.runId != runId_ || !rec() || rec()->runs.empty()) return;
  hl::Run& a = rec()->runs[0];
  a.records.push_back(r.a);
  a.run_seconds = r.runSecondsA;
  if (!r.generated) a.prompt_tokens = static_cast<int64_t>(a.records.size());
  rec()->tokens.push_back(r.a->token_id);
  if (model_ && model_->hasTokenizer) rec()->token_text.push_back(r.text);
  const size_t t = a.records.size() - 1;
  if (t < pending_.tokens.size() && pending_.tokens[t] != r.a->token_id) pending_.tokens.resize(t);
  if (r.hasB && r.compareId == compareId_ && liveRun_ >= 1 && liveRun_ < static_cast<int>(rec()->runs.size())) {
    hl::Run& b = rec()->runs[liveRun_];
    if (b.records.size() == t) {
      b.records.push_back(r.b);
      b.run_seconds = r.runSecondsB;
      b.prompt_tokens = a.prompt_tokens;
    }
  }
  emit tokenAppended(static_cast<int>(t), r);
  ++changes_;
  ctx_->recordsAppended(static_cast<int>(t));
  emit stepped(static_cast<int>(a.records.size()));
}

void RunController::onStepDone(const QString& reason) {
  busy_ = false;  // commands run in order: this ends the step command that set busy_
  emit stepFinished(reason);
  emit idle();
}

// ---------------------------------------------------------------------------------------------
// Compare runs

void RunController::togglesChanged(const Toggles& t) {
  if (!rec() || rec()->runs.empty() || viewOnly_ || !hasModel()) {
    shownToggles_ = t;
    emit stateChanged();
    return;  // with no run the toggles apply to the next run A
  }
  const Toggles base = togglesOf(rec()->runs[0].settings);
  // One change from A per run (finding 13): the control just changed, applied to A's settings. A
  // programmatic change of several settings at once is taken as given.
  Toggles one = base;
  if (changedSettings(t, shownToggles_) != 1) {
    one = t;
  } else if (t.normalizerOverride != shownToggles_.normalizerOverride || t.normalizer != shownToggles_.normalizer) {
    one.normalizerOverride = t.normalizerOverride;
    one.normalizer = t.normalizer;
  } else if (t.registers != shownToggles_.registers) {
    one.registers = t.registers;
  } else {
    one.adapter = t.adapter;
  }
  if (one != t) emit togglesShown(one);
  shownToggles_ = one;
  ctx_->clearComparedSession();
  if (one == base) {
    liveRun_ = -1;
    ++compareId_;
    const int id = runId_, cid = compareId_;
    engine_->post([id, cid](EngineWorker& w) { w.setCompare(id, cid, false, {}, 0); });
    ctx_->setCompareIndex(-1);
    emit status(tr("Toggles match run A: no compare run (the runs stay in the run list)"), 5000);
    emit marksChanged();
    emit stateChanged();
    emit compareChanged();
    return;
  }
  int index = static_cast<int>(rec()->runs.size());  // a new run
  for (size_t i = 1; i < rec()->runs.size(); ++i)
    if (togglesOf(rec()->runs[i].settings) == one) index = static_cast<int>(i);
  startCompare(index, one);
}

void RunController::startCompare(int index, const Toggles& t) {
  liveRun_ = index;
  ++compareId_;
  compareBusy_ = true;
  const int id = runId_, cid = compareId_, epoch = engine_->stopEpoch();
  engine_->post([id, cid, t, epoch](EngineWorker& w) { w.setCompare(id, cid, true, t, epoch); });
  if (index < static_cast<int>(rec()->runs.size())) ctx_->setCompareIndex(index);
  const QString label = index < static_cast<int>(rec()->runs.size())
                            ? QString::fromStdString(rec()->runs[index].label)
                            : QString::fromStdString(nextRunLabel(*rec()));
  emit status(tr("Re-running %1 as run %2…")
                  .arg(hl::views::tokensText(static_cast<long long>(rec()->runs[0].records.size())))
                  .arg(label),
              0);
  emit marksChanged();
  emit stateChanged();
}

bool RunController::chooseRun(int index) {
  if (!rec() || rec()->runs.empty() || isBusy()) return false;
  if (index >= static_cast<int>(rec()->runs.size())) return true;
  ctx_->clearComparedSession();
  if (index <= 0) {
    shownToggles_ = togglesOf(rec()->runs[0].settings);
    emit togglesShown(shownToggles_);
    togglesChanged(shownNow(shownToggles_));
    return true;
  }
  shownToggles_ = togglesOf(rec()->runs[index].settings);
  emit togglesShown(shownToggles_);
  if (viewOnly_ || !hasModel()) {
    ctx_->setCompareIndex(index);  // a stored run: shown as it is
    emit marksChanged();
    emit stateChanged();
    emit compareChanged();
    return true;
  }
  startCompare(index, shownToggles_);  // re-run so that it steps along with A
  return true;
}

void RunController::syncToggles() {
  const hl::Recording* r = rec();
  if (!r || r->runs.empty() || compareBusy_) return;
  const hl::Run* b = ctx_->hasComparedSession() ? nullptr : ctx_->runB();
  shownToggles_ = togglesOf(b ? b->settings : r->runs[0].settings);
  emit togglesShown(shownToggles_);
}

void RunController::onCompareReady(int runId, int compareId, const hl::Run& b) {
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
    emit status(tr("Run %1: %2 — %3 tokens")
                    .arg(QString::fromStdString(shown.label))
                    .arg(changeFromA(rec()->runs[0].settings, shown.settings))
                    .arg(shown.records.size()),
                8000);
    ctx_->setCompareIndex(liveRun_);
  }
  ++changes_;
  emit marksChanged();
  ctx_->runsChanged();
  emit stateChanged();
  emit compareChanged();
  emit idle();
}

void RunController::onCompareFailed(int runId, int compareId, const QString& message) {
  if (runId != runId_ || compareId != compareId_) return;
  compareBusy_ = false;
  liveRun_ = -1;
  if (const hl::Run* b = ctx_->runB())
    shownToggles_ = togglesOf(b->settings);  // the controls show the compared run again
  else if (const hl::Run* a = ctx_->runA())
    shownToggles_ = togglesOf(a->settings);
  emit togglesShown(shownToggles_);
  emit marksChanged();
  ctx_->runsChanged();
  emit stateChanged();
  if (message == tr("stopped"))
    emit status(tr("The compare run stopped"), 5000);
  else
    emit errorReported(tr("Compare run failed"), message);
  emit compareChanged();
  emit idle();
}

void RunController::compareWithStored(std::shared_ptr<const hl::Recording> other, std::unique_ptr<hl::Run> run,
                                      const QString& name) {
  liveRun_ = -1;
  ctx_->setCompareIndex(-1);
  ++compareId_;
  const int id = runId_, cid = compareId_;
  if (hasModel() && !viewOnly_) engine_->post([id, cid](EngineWorker& w) { w.setCompare(id, cid, false, {}, 0); });
  emit togglesShown(togglesOf(rec()->runs[0].settings));  // A's; the stored run has its own settings
  ctx_->setComparedSession(std::move(other), std::move(run), name);
  emit marksChanged();
  emit stateChanged();
}

QString RunController::summary() const {
  const hl::Run* a = ctx_->runA();
  if (!a) return QString();
  QString s = tr("A: %1").arg(describe(a->settings));
  if (ctx_->hasComparedSession())
    s += tr("  —  B: %1 (%2)").arg(ctx_->comparedName(), describe(ctx_->runB()->settings));
  else if (const hl::Run* b = ctx_->runB())
    s += tr("  —  %1: %2").arg(QString::fromStdString(b->label), changeFromA(a->settings, b->settings));
  else if (compareBusy_)
    s += tr("  —  compare run: running…");
  if (rec() && rec()->runs.size() > 2) s += tr("  (%1 runs: see the run list)").arg(rec()->runs.size());
  return s;
}

// ---------------------------------------------------------------------------------------------
// Sessions

void RunController::openStored(std::shared_ptr<hl::Recording> loaded, bool recovered) {
  engine_->requestStop();  // a run of the previous recording ends; its late results are dropped
  engine_->post([](EngineWorker& w) { w.endRun(); });  // and the engine lets go of its records (finding 14)
  ++runId_;
  ++compareId_;
  ctx_->openRecording(std::move(loaded), true);
  pending_ = {};
  viewOnly_ = true;
  savedChanges_ = ++changes_;
  if (recovered) ++changes_;  // recovered work is unsaved until saved
}

void RunController::resume(const QString& backend) {
  if (!rec() || rec()->runs.empty()) return;
  const hl::Run& a = rec()->runs[0];
  // The compare run the views show steps along with A; the other runs stay as stored.
  const int k = ctx_->compareIndex();
  const bool hasB = k >= 1 && k < static_cast<int>(rec()->runs.size());
  busy_ = true;
  const int id = runId_, cid = compareId_, epoch = engine_->stopEpoch();
  const int64_t maxNew = maxNewTokens();
  hl::Run b = hasB ? rec()->runs[k] : hl::Run{};  // shares the records (record_list.h)
  liveRun_ = hasB ? k : -1;
  engine_->post([id, cid, epoch, backend, maxNew, a, hasB, b](EngineWorker& w) {
    w.resume(id, a, hasB, b, cid, backend, maxNew, epoch);
  });
  emit status(tr("Replaying %1 so that stepping can continue…")
                  .arg(hl::views::tokensText(static_cast<long long>(a.records.size()))),
              0);
  emit stateChanged();
}

void RunController::onResumed(int runId, const QString& error) {
  busy_ = false;
  if (runId != runId_) {
    emit stateChanged();
    return;
  }
  viewOnly_ = !error.isEmpty();
  syncToggles();
  emit resumed(error);
  emit idle();
}

// ---------------------------------------------------------------------------------------------
// Hidden attention

void RunController::requestHiddenAttention(int layer, int token, int head) {
  hiddenWanted_ = std::array<int, 3>{layer, token, head};
  if (!hiddenInFlight_) sendHiddenRequest();
}

void RunController::sendHiddenRequest() {
  if (!hiddenWanted_) return;
  const auto [layer, token, head] = *std::exchange(hiddenWanted_, std::nullopt);
  hiddenInFlight_ = true;
  const int id = runId_;
  engine_->post([id, layer, token, head](EngineWorker& w) { w.hiddenAttention(id, layer, token, head); });
}

void RunController::onHiddenAttention(int runId, const hl::views::HiddenPattern& p) {
  if (p.complete || !p.error.empty()) hiddenInFlight_ = false;
  if (runId == runId_) ctx_->setHiddenPattern(p);
  if (!hiddenInFlight_) sendHiddenRequest();
}

}  // namespace hl::app
