// The inspector context (inspector_context.h): state, change bits per viewer, and the coalescing
// timer. A change marks every viewer; a flush tells the visible ones (hidden ones keep their bits
// until shown). Reference: RenderDoc's capture context / viewer split; issue 17 items 1 and 2.
#include "app/inspector_context.h"

#include <QDateTime>
#include <QTimer>
#include <algorithm>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hl::app {

namespace {
constexpr int kFlushIntervalMs = 33;  // at most ~30 view updates per second
namespace ch = hl::views::change;
}  // namespace

InspectorContext::InspectorContext(QObject* parent) : QObject(parent) {
  timer_ = new QTimer(this);
  timer_->setSingleShot(true);
  connect(timer_, &QTimer::timeout, this, [this] { flush(false); });
}

InspectorContext::~InspectorContext() = default;

void InspectorContext::releaseMemory() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

void InspectorContext::openRecording(std::shared_ptr<hl::Recording> rec, bool resetSelection) {
  const bool had = rec_ != nullptr;
  comparedRec_.reset();
  comparedRun_.reset();
  comparedName_.clear();
  rec_ = std::move(rec);
  step_ = -1;
  compareIndex_ = rec_ && rec_->runs.size() > 1 ? 1 : -1;
  if (resetSelection) {
    layer_ = -1;
    head_ = 0;
  }
  ++dataVersion_;
  hidden_.reset();
  if (had) releaseMemory();
  mark(ch::All);
  flush(true);
  emit recordingOpened();
}

void InspectorContext::closeRecording() {
  if (!rec_ && !comparedRun_) return;
  comparedRec_.reset();
  comparedRun_.reset();
  comparedName_.clear();
  rec_.reset();
  step_ = -1;
  ++dataVersion_;
  hidden_.reset();
  releaseMemory();
  mark(ch::All);
  flush(true);
  emit recordingClosed();
}

std::shared_ptr<const hl::Recording> InspectorContext::snapshot() const {
  return rec_ ? std::make_shared<const hl::Recording>(*rec_) : nullptr;
}

const hl::Run* InspectorContext::runA() const {
  return rec_ && !rec_->runs.empty() ? &rec_->runs[0] : nullptr;
}

const hl::Run* InspectorContext::runB() const {
  if (comparedRun_) return comparedRun_.get();
  return rec_ && compareIndex_ >= 1 && compareIndex_ < static_cast<int>(rec_->runs.size()) ? &rec_->runs[compareIndex_]
                                                                                          : nullptr;
}

void InspectorContext::setCompareIndex(int index) {
  if (index == compareIndex_) return;
  compareIndex_ = index;
  runsChanged();
}

void InspectorContext::recordsAppended(int from) {
  mark(ch::Records | (step_ < 0 ? ch::Step : 0u), from);
  schedule();
  emit recordsAdded(from);
}

void InspectorContext::runsChanged() {
  ++dataVersion_;
  hidden_.reset();
  mark(ch::Runs);
  flush(true);
  emit runsUpdated();
}

void InspectorContext::setComparedSession(std::shared_ptr<const hl::Recording> other, std::unique_ptr<hl::Run> run,
                                          const QString& name) {
  comparedRec_ = std::move(other);
  comparedRun_ = std::move(run);
  comparedName_ = name;
  runsChanged();
}

void InspectorContext::clearComparedSession() {
  if (!comparedRun_) return;
  comparedRec_.reset();
  comparedRun_.reset();
  comparedName_.clear();
  releaseMemory();
  runsChanged();
}

int InspectorContext::currentStep() const {
  const hl::Run* a = runA();
  if (!a || a->records.empty()) return -1;
  const int last = static_cast<int>(a->records.size()) - 1;
  return step_ < 0 || step_ > last ? last : step_;
}

void InspectorContext::setStep(int step) {
  const hl::Run* a = runA();
  const int last = a ? static_cast<int>(a->records.size()) - 1 : -1;
  const int s = step < 0 || step >= last ? -1 : step;
  if (s == step_) return;
  step_ = s;
  mark(ch::Step);
  flush(false);
  emit stepChanged(currentStep());
}

void InspectorContext::setLayer(int layer) {
  layer_ = layer;
  mark(ch::Selection);
  flush(false);
  emit selectionChanged();
}

void InspectorContext::setHead(int head) {
  head_ = std::max(0, head);
  mark(ch::Selection);
  flush(false);
  emit selectionChanged();
}

void InspectorContext::setShowDiff(bool on) {
  showDiff_ = on;
  mark(ch::Settings);
  flush(true);
}

void InspectorContext::setDora(std::vector<hl::DoraRow> rows, const QString& label) {
  dora_ = std::move(rows);
  doraLabel_ = label.toStdString();
  ++dataVersion_;
  mark(ch::Settings);
  flush(true);
}

void InspectorContext::setHardware(const hl::views::HardwareInfo& hw) {
  hw_ = hw;
  mark(ch::Settings);
  schedule();
}

void InspectorContext::setVocabulary(const std::vector<std::string>* vocab) {
  vocab_ = vocab;
  mark(ch::Settings);
  schedule();
}

hl::views::ViewState InspectorContext::viewState() const {
  hl::views::ViewState s;
  s.rec = rec_.get();
  s.a = runA();
  s.b = runB();
  s.step = step_;
  s.layer = layer_;
  s.head = head_;
  s.showDiff = showDiff_;
  s.dora = dora_.empty() ? nullptr : &dora_;
  s.doraLabel = doraLabel_;
  s.hw = hw_;
  s.vocab = vocab_ && !vocab_->empty() ? vocab_ : nullptr;
  s.dataVersion = dataVersion_;
  s.hidden = hidden_.get();
  s.hiddenOnDemand = true;  // the main window answers the attention view's requests
  return s;
}

void InspectorContext::setHiddenPattern(hl::views::HiddenPattern p) {
  p.dataVersion = dataVersion_;
  hidden_ = std::make_unique<hl::views::HiddenPattern>(std::move(p));
  mark(ch::Hidden);
  schedule();
}

void InspectorContext::addViewer(hl::views::InspectorViewer* v) {
  viewers_.push_back({v, ch::All, 0});
}

void InspectorContext::mark(unsigned what, int from) {
  for (Slot& s : viewers_) {
    if (what & ch::Records) s.from = (s.pending & ch::Records) ? std::min(s.from, from) : from;
    s.pending |= what;
  }
}

void InspectorContext::schedule() {
  if (timer_->isActive()) return;
  const qint64 since = QDateTime::currentMSecsSinceEpoch() - lastFlushMs_;
  timer_->start(static_cast<int>(std::max<qint64>(0, kFlushIntervalMs - since)));
}

void InspectorContext::flush(bool all) {
  timer_->stop();
  lastFlushMs_ = QDateTime::currentMSecsSinceEpoch();
  const hl::views::ViewState st = viewState();
  for (Slot& s : viewers_) {
    if (!s.pending || (!all && !s.viewer->viewerVisible())) continue;
    const unsigned what = s.pending;
    s.pending = 0;
    s.viewer->contextChanged(st, what, s.from);
  }
  emit viewersUpdated();
}

void InspectorContext::viewerShown(hl::views::InspectorViewer* v) {
  for (Slot& s : viewers_) {
    if (s.viewer != v || !s.pending) continue;
    const unsigned what = s.pending;
    s.pending = 0;
    v->contextChanged(viewState(), what, s.from);
  }
}

}  // namespace hl::app
