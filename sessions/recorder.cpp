// The recorder (recorder.h): one backend decode step per token, records appended to a Run with the
// settings that produced them; sampled generation through hl::Sampler. Not the backends' math
// (engine/backend/) and not file I/O (session_file.h).
#include "sessions/recorder.h"

#include <chrono>
#include <string>

#include "engine/core/error.h"
#include "engine/model/quantize.h"
#include "engine/tokenizer/tokenizer.h"
#include "sessions/identity.h"

namespace hl {

RunOptions run_options(const RunSettings& s) {
  RunOptions o;
  o.normalizer_override = s.normalizer_override;
  o.normalizer = s.normalizer;
  o.registers = s.registers;
  o.instruments = true;
  o.full = s.full;
  o.max_context = s.max_context;
  return o;
}

Recorder::Recorder(std::unique_ptr<Backend> backend, const RunOptions& opts, const SamplingOptions& sampling,
                   std::string label)
    : backend_(std::move(backend)), sampler_(sampling) {
  if (!backend_) throw Error("recorder: no backend");
  backend_->start(opts);
  run_.label = std::move(label);
  RunSettings& s = run_.settings;
  s.normalizer_override = opts.normalizer_override;
  s.normalizer = opts.normalizer;
  s.registers = opts.registers;
  s.registers_used = backend_->registers();
  s.adapter = backend_->model().adapter;
  s.backend = backend_->name();
  s.sampling = sampling;
  s.full = opts.full;
  s.max_context = opts.max_context;
}

void Recorder::step(int32_t token) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<TokenTrace> out;  // (1,) then shared by the run
  backend_->forward(&token, 1, &out);
  for (TokenTrace& r : out) run_.records.push_back(std::move(r));
  run_.run_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool Recorder::feed(const std::vector<int32_t>& tokens, const StepCallback& cb) {
  for (int32_t id : tokens) {
    step(id);
    if (!generated_any_) run_.prompt_tokens = static_cast<int64_t>(run_.records.size());
    if (cb && !cb(run_.records.back())) return false;
  }
  return true;
}

int32_t Recorder::generate_one() {
  if (run_.records.empty()) throw Error("recorder: generation needs at least one token fed first");
  const std::vector<float>& logits = run_.records.back().logits;  // (V,)
  const int64_t V = backend_->model().config.vocab_size;
  if (static_cast<int64_t>(logits.size()) != V) {
    throw Error("backend " + backend_->name() + " returned " + std::to_string(logits.size()) +
                " logits, expected vocab_size " + std::to_string(V));
  }
  require_finite_logits(run_.records.back(), backend_->model().config.num_hidden_layers);
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t next = sampler_.sample(logits.data(), V);
  run_.run_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  generated_any_ = true;
  step(next);
  eos_ = backend_->model().config.is_eos(next);
  return next;
}

int64_t Recorder::generate(int64_t n, const StepCallback& cb) {
  int64_t done = 0;
  while (done < n) {
    generate_one();
    ++done;
    if (cb && !cb(run_.records.back())) break;
    if (eos_ && !sampler_.options().ignore_eos) break;
  }
  return done;
}

bool Recorder::replay(const Run& stored, const StepCallback& cb) {
  if (!run_.records.empty()) throw Error("recorder: replay needs a fresh recorder");
  const int64_t V = backend_->model().config.vocab_size;
  for (size_t t = 0; t < stored.records.size(); ++t) {
    const int64_t ti = static_cast<int64_t>(t);
    if (ti >= stored.prompt_tokens && !run_.records.empty()) {
      sampler_.sample(run_.records.back().logits.data(), V);  // advance the stream as when it was generated
      generated_any_ = true;
    }
    step(stored.records[t].token_id);
    if (!generated_any_) run_.prompt_tokens = static_cast<int64_t>(run_.records.size());
    if (cb && !cb(run_.records.back())) return false;
  }
  return true;
}

Run record_run(std::shared_ptr<const Model> model, const RecordRequest& req, const StepCallback& cb) {
  if (req.prompt.empty()) throw Error("record: no tokens to feed");
  Recorder r(make_backend(req.backend, std::move(model)), req.options, req.sampling, req.label);
  if (r.feed(req.prompt, cb) && req.generate > 0) r.generate(req.generate, cb);
  return r.take_run();
}

Recording make_recording(const Model& model, const CheckpointIdentity& id, const std::string& prompt,
                         const std::vector<int32_t>& tokens, const Tokenizer* tokenizer) {
  Recording rec;
  rec.checkpoint = id;
  rec.adapter_identity = model.adapter.empty() ? std::string() : adapter_identity(model.adapter);
  rec.weights = weights_label(model);
  rec.config = model.config;
  rec.prompt = prompt;
  rec.tokens = tokens;
  if (tokenizer) {
    rec.token_text.reserve(tokens.size());
    rec.token_text = display_pieces(*tokenizer, tokens);
  }
  rec.engine_version = HL_VERSION;
  return rec;
}

}  // namespace hl
