// EngineWorker: the QObject that lives on the one engine thread (DESIGN.md) and owns the model,
// the adapter-merged copy, the tokenizer and the recorders of runs A and B. Its methods are called
// only through EngineThread::post; results leave as value copies through queued signals. Stop and
// Cancel are epochs in EngineFlags checked between tokens and in the load progress callback.
#pragma once
#include <QObject>
#include <memory>
#include <string>
#include <vector>

#include "app/engine_types.h"

namespace hl {
class HiddenAttentionTracker;
struct Model;
class Recorder;
class Tokenizer;
}  // namespace hl

namespace hl::app {

class EngineWorker : public QObject {
  Q_OBJECT

 public:
  explicit EngineWorker(std::shared_ptr<EngineFlags> flags, QObject* parent = nullptr);
  ~EngineWorker() override;

  // Loads a checkpoint; on success it replaces the current model (and ends any run), on failure
  // or cancel the current model stays.
  // `weights`: a --weights format to quantise to on load ("q8_0"), empty for as stored.
  void loadModel(int requestId, int cancelEpoch, const QString& dir, const QString& weights = QString());
  // A PEFT adapter checked against the current model: its DoRA rows and a merged copy of the model
  // for the adapter toggle. Or a fine-tuned checkpoint (loadTuned): DoRA rows only.
  void loadAdapter(const QString& dir);
  void loadTuned(const QString& dir);
  void measureHardware();
  // A fresh run A (tokenized, not stepped); ends any compare run.
  void startRun(const RunRequest& r);
  // Up to n steps (n < 0: until an EOS or maxNewTokens generated tokens, as the run panel says at
  // the time of this command). A single step (n == 1) always steps.
  void step(int runId, int64_t n, int stopEpoch, int64_t maxNewTokens);
  // Starts run B with `t` over every token run A has seen (enabled), or ends it.
  void setCompare(int runId, int compareId, bool enabled, const Toggles& t, int stopEpoch);
  // Ends the live run and lets go of its records (a recording was closed or replaced by a session):
  // the memory goes back to the system (issue 17 finding 14).
  void endRun();
  // A reopened session with its checkpoint: replays the stored runs so that stepping continues.
  void resume(int runId, const hl::Run& a, bool hasB, const hl::Run& b, int compareId, const QString& backend,
              int64_t maxNewTokens, int stopEpoch);
  // The SSM hidden attention of decoder layer `layer` at token `token` of the live run A (head −1: the
  // mean |M| over the heads or Mamba-1 channels), from a tracker that follows run A on the CPU
  // (engine/probes/hidden_attention.h). Emits the current row at once (complete false), then with
  // the rows of the earlier queries that fit kHiddenWindowBudget multiply-adds. No live run, or a layer
  // without an SSM part: a pattern with an error.
  void hiddenAttention(int runId, int layer, int token, int head);

 signals:
  void loadProgress(int requestId, qint64 done, qint64 total, const QString& what);
  void modelLoaded(const hl::app::ModelInfo& info);
  void loadFailed(int requestId, const QString& dir, const QString& message, bool cancelled);
  void hardwareMeasured(double bandwidthGBs);
  void adapterLoaded(const hl::app::AdapterInfo& info);
  void adapterFailed(const QString& dir, const QString& message);
  void runStarted(const hl::app::RunStart& start);
  void runFailed(int runId, const QString& message);
  void stepped(const hl::app::StepResult& r);
  void stepDone(int runId, const QString& reason);  // idle again; reason: why it stopped
  void compareProgress(int runId, int compareId, qint64 done, qint64 total);
  void compareReady(int runId, int compareId, const hl::Run& b);  // empty label: B ended
  void compareFailed(int runId, int compareId, const QString& message);
  void resumed(int runId, const QString& error);  // empty error: stepping can continue
  void hiddenAttentionReady(int runId, const hl::views::HiddenPattern& p);

 private:
  std::shared_ptr<const hl::Model> modelFor(const Toggles& t) const;
  std::unique_ptr<hl::Recorder> makeRecorder(const Toggles& t, const QString& label) const;
  std::string tokenText(int32_t id) const;
  bool stopped(int epoch) const;

  std::shared_ptr<EngineFlags> flags_;
  std::shared_ptr<const hl::Model> model_, merged_;  // base; base + adapter merged (or null)
  std::unique_ptr<hl::Tokenizer> tokenizer_;
  QString adapterDir_;
  // The live run.
  int runId_ = -1, compareId_ = 0;
  QString backend_ = QStringLiteral("auto");
  hl::SamplingOptions sampling_;
  int64_t maxNewTokens_ = 64;
  std::vector<int32_t> prompt_;  // (P,) tokens to feed before generating
  std::unique_ptr<hl::Recorder> recA_, recB_;
  std::unique_ptr<hl::HiddenAttentionTracker> hidden_;  // follows recA_ once the hidden attention is asked for
  double bandwidth_ = 0;
};

// Toggles of a stored run's settings, and the inverse.
Toggles togglesOf(const hl::RunSettings& s);

}  // namespace hl::app
