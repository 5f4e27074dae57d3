// RunController: the run logic of the app (issue 17 item 1), split from the main window as
// RenderDoc's qrenderdoc splits its CaptureContext from its main window. It owns what the engine is
// doing for the open recording: the loaded model and adapter, run ids and busy flags, run A's
// stepping, the compare runs (one change from A each), the hidden-attention request queue, the
// prompt tokens not fed yet and the change counters that save and autosave read. It talks to the
// EngineThread and the InspectorContext and says what happened through signals; it has no widget.
// The main window builds requests from its controls (RunPanel), shows the signals (status bar,
// token strip, dialogs) and keeps the frame, menus and docks.
#pragma once
#include <QObject>
#include <QString>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/engine_types.h"

namespace hl::app {

class EngineThread;
class InspectorContext;

// A run's normalizer in words: its name when overridden, else "as trained".
QString normalizerText(const hl::RunSettings& s);
// What run `b` changes against run `a`, in words: "normalizer softmax-1", "registers 0 → 3",
// "adapter", several joined by ", "; "same settings" when none.
QString changeFromA(const hl::RunSettings& a, const hl::RunSettings& b);

// The prompt as the controls describe it; the live run keeps the one it was started with, so that an
// edited prompt box is noticed (issue 17 finding 1).
struct PromptKey {
  QString text;
  bool ids = false, bos = true;
  bool operator==(const PromptKey& o) const { return text == o.text && ids == o.ids && (ids || bos == o.bos); }
};

class RunController : public QObject {
  Q_OBJECT

 public:
  // Connects to the engine's worker; neither `engine` nor `ctx` is owned.
  RunController(EngineThread* engine, InspectorContext* ctx, QObject* parent = nullptr);

  // --- The model at hand (loads are the main window's: it reports them here) ---
  void setModel(const ModelInfo& info);  // a new model: the adapter and the run's backend go
  const ModelInfo* model() const { return model_ ? &*model_ : nullptr; }
  bool hasModel() const { return model_.has_value(); }
  void setAdapter(const AdapterInfo& info);
  const AdapterInfo* adapter() const { return adapter_ ? &*adapter_ : nullptr; }
  void setLoading(bool on);
  bool isLoading() const { return loading_; }
  // What the controls show now, read when a command is sent: the toggles (after togglesShown, as the
  // controls took them: an unavailable adapter stays off) and Run-to-end's limit. Unset: the toggles
  // last shown and 64 tokens.
  struct Inputs {
    std::function<Toggles()> toggles;
    std::function<int64_t()> maxNewTokens;
  };
  void setInputs(Inputs in) { inputs_ = std::move(in); }

  // --- State ---
  bool isBusy() const { return busy_ || compareBusy_; }
  bool engineBusy() const { return busy_; }  // a start, step or resume command is with the engine
  bool isComparing() const { return compareBusy_; }
  bool isViewOnly() const { return viewOnly_; }
  bool canStep() const;
  QString runBackend() const { return runBackend_; }  // the live run's resolved backend

  // --- Run A ---
  // A new run A from `r` (its id and toggles are filled here): A keeps the old A's settings and the
  // toggles `shown` differing from them become run B once A starts (finding 13). False when a
  // command is running or no model is at hand.
  bool start(RunRequest r, const PromptKey& prompt, const Toggles& shown);
  // The run being started came from loading a model: if it fails, autoStartFailed instead of an error.
  void setAutoStarted(bool on) { autoStarted_ = on; }
  void stepAfterStart(int64_t n) { stepAfterStart_ = n; }  // stepWanted(n) once the run has started
  bool step(int64_t n);                                    // n < 0: to the end
  void stop();
  // A fresh, empty recording of the model (drawn before any step: finding 2); no run yet.
  void newRecording();
  bool promptDiffers(const PromptKey& k) const { return runPrompt_ && !viewOnly_ && hasModel() && !(k == *runPrompt_); }
  void setRunPrompt(const PromptKey& k) { runPrompt_ = k; }
  struct PendingPrompt {  // prompt tokens not fed yet, as the engine tokenised them
    std::vector<int32_t> tokens;
    std::vector<std::string> texts;
    std::vector<char> special;
  };
  const PendingPrompt& pending() const { return pending_; }

  // --- Compare runs ---
  // The toggles now show `t`: a run with that one change from A is made (or chosen), or none.
  void togglesChanged(const Toggles& t);
  // The run list chose run `index` (0: compare with nothing). False when refused (busy, no run).
  bool chooseRun(int index);
  void syncToggles();  // togglesShown with the recording's compared run (or A): finding 4
  // A stored session's run (aligned by the caller) as run B; the live compare run ends.
  void compareWithStored(std::shared_ptr<const hl::Recording> other, std::unique_ptr<hl::Run> run,
                         const QString& name);
  QString summary() const;  // "A: …  —  B: …" for the run panel

  // --- Sessions ---
  // A recording read from disk replaces the current one, view-only until resume() succeeds.
  void openStored(std::shared_ptr<hl::Recording> loaded, bool recovered);
  void resume(const QString& backend);  // replays A (and the compared run) so that stepping continues
  // Change counters: every appended token or compare run is one change; save and autosave record
  // the count they wrote.
  uint64_t changes() const { return changes_; }
  bool isDirty() const { return changes_ != savedChanges_; }
  bool autosaved() const { return changes_ == autosavedChanges_; }
  void markSaved(uint64_t at) { savedChanges_ = at; }
  void markAutosaved(uint64_t at) { autosavedChanges_ = at; }

  // The attention view wants an SSM layer's hidden attention: one request in flight, the latest next.
  void requestHiddenAttention(int layer, int token, int head);

 signals:
  void stateChanged();  // busy, view-only, the model or the runs changed: actions follow
  void status(const QString& text, int ms);
  void errorReported(const QString& title, const QString& message);
  void togglesShown(const hl::app::Toggles& t);  // the controls should show these toggles
  void runOpened(const hl::app::RunStart& s);    // run A's recording is open, before its compare run
  void started();
  void stepWanted(int64_t n);  // Step was pressed with an edited prompt: step the new run now
  void autoStartFailed(const QString& message);
  void tokenAppended(int t, const hl::app::StepResult& r);  // before the views are told
  void stepped(int tokens);
  void stepFinished(const QString& reason);
  void marksChanged();  // where A's and B's top-1 differ may have changed
  void compareChanged();
  void resumed(const QString& error);  // empty: stepping continues
  void idle();

 private:
  void connectEngine();
  Toggles shownNow(const Toggles& shown) const { return inputs_.toggles ? inputs_.toggles() : shown; }
  int64_t maxNewTokens() const { return inputs_.maxNewTokens ? inputs_.maxNewTokens() : 64; }
  hl::Recording* rec() const;
  void startCompare(int index, const Toggles& t);
  void onRunStarted(const RunStart& s);
  void onRunFailed(int runId, const QString& message);
  void onStepped(const StepResult& r);
  void onStepDone(const QString& reason);
  void onCompareReady(int runId, int compareId, const hl::Run& b);
  void onCompareFailed(int runId, int compareId, const QString& message);
  void onResumed(int runId, const QString& error);
  void sendHiddenRequest();
  void onHiddenAttention(int runId, const hl::views::HiddenPattern& p);

  EngineThread* engine_;
  InspectorContext* ctx_;  // the recording is the context's: run A, then the compare runs B, C, ...
  Inputs inputs_;
  std::optional<ModelInfo> model_;
  std::optional<AdapterInfo> adapter_;
  bool loading_ = false;
  QString runBackend_;
  int runId_ = 0, compareId_ = 0;
  bool busy_ = false, compareBusy_ = false, viewOnly_ = false;
  int liveRun_ = -1;      // the recording's run the engine steps along with A (== runs.size(): a new one)
  Toggles shownToggles_;  // what the toggles showed before the latest change
  Toggles resetCompare_;  // the toggles when Reset was pressed: run B of the new run when not A's
  std::optional<PromptKey> runPrompt_, requestedPrompt_;  // the live run's prompt; a start's, until it starts
  int64_t stepAfterStart_ = 0;
  bool autoStarted_ = false;
  bool hiddenInFlight_ = false;                     // a hidden-attention request is with the engine
  std::optional<std::array<int, 3>> hiddenWanted_;  // (layer, token, head) to ask for next
  PendingPrompt pending_;
  uint64_t changes_ = 0, savedChanges_ = 0, autosavedChanges_ = 0;
};

}  // namespace hl::app
