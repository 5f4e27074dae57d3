// The recorder: runs a model over tokens through a backend (one decode step per token, as
// trace-format.md §3 asks) and collects the per-token records into a session Run; generation is
// greedy or sampled (hl::Sampler). Used by `hybridlens record` and by the app's engine thread.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/sampling.h"
#include "sessions/recording.h"

namespace hl {

class Tokenizer;

// Called after every step with the new record; return false to stop (what was recorded stays).
using StepCallback = std::function<bool(const TokenTrace&)>;

// The run options a stored run was recorded with (instruments on).
RunOptions run_options(const RunSettings& s);

class Recorder {
 public:
  // Starts a fresh run on the backend (Backend::start). Throws Error on bad options.
  Recorder(std::unique_ptr<Backend> backend, const RunOptions& opts, const SamplingOptions& sampling,
           std::string label = "A");
  // Feeds tokens one at a time. Tokens fed before the first generated one count as the prompt.
  // Returns false when the callback stopped it.
  bool feed(const std::vector<int32_t>& tokens, const StepCallback& cb = {});
  // Samples the next token from the last record's logits (greedy at temperature 0) and feeds it.
  // Needs at least one record. Returns the token.
  int32_t generate_one();
  // Up to n tokens; stops after an EOS (unless sampling.ignore_eos) or when cb returns false.
  // Returns the number generated.
  int64_t generate(int64_t n, const StepCallback& cb = {});
  // Continues a stored run (a reopened session): feeds its tokens again, recomputing the records,
  // and advances the sampler over its generated tokens so that further sampling continues the stream.
  // The recorder must be fresh (no records yet).
  bool replay(const Run& stored, const StepCallback& cb = {});

  const Run& run() const { return run_; }
  Run take_run() { return std::move(run_); }  // the recorder is spent afterwards
  Backend& backend() { return *backend_; }
  bool stopped_at_eos() const { return eos_; }

 private:
  void step(int32_t token);
  std::unique_ptr<Backend> backend_;
  Sampler sampler_;
  Run run_;
  bool generated_any_ = false;
  bool eos_ = false;
};

struct RecordRequest {
  std::vector<int32_t> prompt;  // tokens fed (BOS already prepended when wanted)
  int64_t generate = 0;         // up to this many sampled tokens after the prompt
  SamplingOptions sampling;     // temperature 0: greedy
  RunOptions options;           // normalizer, registers, full
  std::string backend = "auto";
  std::string label = "A";
};

// One run of `model`: make_backend(req.backend), feed the prompt, generate. Throws Error.
Run record_run(std::shared_ptr<const Model> model, const RecordRequest& req, const StepCallback& cb = {});

// A recording for `model` with its identity, config and adapter identity (model.adapter), the prompt
// text and the tokens with their text (tokenizer pieces; no text without a tokenizer). No runs yet.
Recording make_recording(const Model& model, const CheckpointIdentity& id, const std::string& prompt,
                         const std::vector<int32_t>& tokens, const Tokenizer* tokenizer);

}  // namespace hl
