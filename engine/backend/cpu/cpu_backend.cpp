// CPU reference backend: run state, registers and the model loop (jamba-spec.md §3.1, §3.3) over the
// layers' units (cpu_module.h: attention and Mamba-1 mixers, dense and MoE feed-forwards, made
// through cpu_modules.cpp), and the residual-stream instruments (rank-to-1 distance, largest
// |activation|, first non-finite layer). Names no layer kind.
#include "engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "engine/backend/backend_util.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/run_plan.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/memory.h"
#include "engine/probes/residual_probe.h"

namespace hl::cpu {

namespace {
// h += m · y over n floats (m = 1: a plain residual add).
void add_residual(float* h, const float* y, int64_t n, float m) {
  if (m == 1.0f) {
    for (int64_t j = 0; j < n; ++j) h[j] += y[j];
  } else {
    for (int64_t j = 0; j < n; ++j) h[j] += m * y[j];
  }
}
}  // namespace

CpuBackend::CpuBackend(std::shared_ptr<const Model> model) : CpuBackend(std::move(model), nullptr, {}) {}

CpuBackend::CpuBackend(std::shared_ptr<const Model> model, StageLink* link, std::vector<LayerRange> ranges)
    : model_(std::move(model)), cfg_(model_->config), run_(*model_), link_(link), ranges_(std::move(ranges)) {
  const int64_t L = cfg_.num_hidden_layers;
  mine_ = stage_layers(*model_, link_, &ranges_);
  mixers_.resize(static_cast<size_t>(L));
  ffns_.resize(static_cast<size_t>(L));
  for (int64_t i = mine_.begin; i < mine_.end; ++i) {
    mixers_[static_cast<size_t>(i)] = make_mixer(run_, i);
    ffns_[static_cast<size_t>(i)] = make_ffn(run_, i);
  }
  start(RunOptions{});
}

void CpuBackend::start(const RunOptions& opts) {
  const int64_t H = cfg_.hidden_size;
  const RunPlan plan = plan_run(*model_, opts);
  const int64_t trained = plan.trained_registers;
  run_.opts = opts;
  run_.n_reg = plan.registers;
  const int n_reg = plan.registers;
  position_ = 0;
  // The units keep their buffers from run to run: a restart allocates nothing once warm.
  for (std::unique_ptr<CpuMixer>& m : mixers_)
    if (m) m->start(plan);
  rank1_.assign(static_cast<size_t>(cfg_.num_hidden_layers + 1), Rank1Tracker(H));
  run_.thread_rows.resize(static_cast<size_t>(ThreadPool::global().size()));
  for (std::vector<float>& t : run_.thread_rows) grow(t, 2 * (n_reg + 256));  // as the KV rows reserved
  if (n_reg == 0) return;
  // Registers: trained rows first, then the mean embedding row (test-time registers); a later
  // stage receives them from the stage before.
  std::vector<float> h(static_cast<size_t>(n_reg * H));  // (n_reg, H)
  if (first_stage()) {
    for (int64_t r = 0; r < n_reg; ++r) {
      const float* src = r < trained ? &model_->w.register_rows[r * H] : model_->w.mean_embedding.data();
      std::copy(src, src + H, &h[r * H]);
    }
  } else {
    link_->recv(link_->rank() - 1, h.data(), h.size() * sizeof(float));
  }
  std::vector<TokenTrace*> none(static_cast<size_t>(n_reg), nullptr);
  run_block(h.data(), n_reg, none.data());
  if (!last_stage()) link_->send(link_->rank() + 1, h.data(), h.size() * sizeof(float));
}

void CpuBackend::forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) {
  if (S <= 0) return;
  check_context(run_.opts, cfg_, position_, S);  // RunOptions::max_context, before any state changes
  model_->check_files();                     // the checkpoint still the one loaded (Model::files)
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  for (int64_t s = 0; s < S; ++s)
    if (tokens[s] < 0 || tokens[s] >= V)
      throw Error("token id " + std::to_string(tokens[s]) + " is out of range [0, " + std::to_string(V) + ")");
  float* h = grow(sc_.h, S * H);  // (S, H)
  if (first_stage())
    for (int64_t s = 0; s < S; ++s) widen_row(model_->w.embed, tokens[s], &h[s * H]);
  else
    link_->recv(link_->rank() - 1, h, static_cast<size_t>(S * H) * sizeof(float));
  const size_t first = out->size();
  out->resize(first + static_cast<size_t>(S));
  TokenTrace** recs = grow(sc_.recs, S);  // (S,)
  for (int64_t s = 0; s < S; ++s) recs[s] = &(*out)[first + s];
  // A prefill's records are S·V logits to allocate and zero: spread over the pool.
  ThreadPool::global().parallel_for(S, 16, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s)
      init_token_trace(*recs[s], cfg_, run_.sched, run_.n_reg, run_.opts, tokens[s], position_ + s);
  });
  run_block(h, S, recs);
  if (!last_stage()) {
    link_->send(link_->rank() + 1, h, static_cast<size_t>(S * H) * sizeof(float));
    finish_stage(t0, S, recs);
    return;
  }
  // Final norm and LM head, written straight into the records' logits (V,) each.
  rmsnorm(h, model_->w.final_norm.data(), S, H, cfg_.rms_norm_eps, h);
  run_.observe("final_norm", -1, h, S, H, recs);
  float** rows = grow(sc_.logit_rows, S);
  for (int64_t s = 0; s < S; ++s) rows[s] = recs[s]->logits.data();
  linear_to_rows(model_->w.lm_head, h, S, rows);
  if (cfg_.logits_scaling != 1.0) {  // Granite: logits ÷ logits_scaling
    const float ls = static_cast<float>(cfg_.logits_scaling);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t v = 0; v < V; ++v) rows[s][v] /= ls;
  }
  if (cfg_.lm_head_multiplier != 1.0) {  // Falcon-H1: logits × lm_head_multiplier
    const float lm = static_cast<float>(cfg_.lm_head_multiplier);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t v = 0; v < V; ++v) rows[s][v] *= lm;
  }
  if (run_.observer)
    for (int64_t s = 0; s < S; ++s) run_.observe("logits", -1, rows[s], 1, V, recs + s);
  // nonfinite_layer L: the final norm's output, L + 1: the logits (token_trace.h); then the fields
  // derived from the logits, a prefill's records spread over the pool.
  const int64_t L = cfg_.num_hidden_layers;
  ThreadPool::global().parallel_for(S, 1, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      TokenTrace& r = *recs[s];
      if (r.nonfinite_layer < 0 && !all_finite(h + s * H, H)) r.nonfinite_layer = nonfinite_final_norm(L);
      finish_record(r, L, run_.opts);
    }
  });
  finish_stage(t0, S, recs);
}

void CpuBackend::finish_stage(std::chrono::steady_clock::time_point t0, int64_t S, TokenTrace* const* recs) {
  finish_stage_records(link_, ranges_, run_.sched, recs, S, t0);
  position_ += S;
}

void CpuBackend::observe_residual(int64_t column, const float* h, int64_t S, TokenTrace* const* recs) {
  const int64_t H = cfg_.hidden_size;
  for (int64_t s = 0; s < S; ++s) {
    TokenTrace* r = recs[s];
    if (!r) continue;
    const float* x = h + s * H;
    if (column > 0 && r->nonfinite_layer < 0 && !all_finite(x, H))
      r->nonfinite_layer = static_cast<int32_t>(column - 1);
    if (!run_.opts.instruments) continue;
    r->resid_max_abs[column] = residual_max_abs(x, H);
    r->rank1_distance[column] = rank1_[column].add(x);
  }
}

void CpuBackend::run_block(float* h, int64_t S, TokenTrace* const* recs) {
  const int64_t H = cfg_.hidden_size;
  float* x = grow(sc_.x, S * H);  // (S, H)
  float* y = grow(sc_.y, S * H);  // (S, H)
  // Granite's µP multipliers (1 elsewhere): every input row × embedding_multiplier, registers too;
  // each residual branch × residual_multiplier.
  const float emb = static_cast<float>(cfg_.embedding_multiplier), res = static_cast<float>(cfg_.residual_multiplier);
  if (first_stage()) {
    if (emb != 1.0f)
      for (int64_t j = 0; j < S * H; ++j) h[j] *= emb;
    run_.observe("embed", -1, h, S, H, recs);
    observe_residual(0, h, S, recs);
  }
  for (int64_t i = mine_.begin; i < mine_.end; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    if (CpuMixer* m = mixers_[i].get()) {  // none in an MLP-only layer (Nemotron-H's -)
      rmsnorm(h, lw.input_norm.data(), S, H, cfg_.rms_norm_eps, x);
      run_.observe("attn_norm", i, x, S, H, recs);
      m->forward(x, S, y, recs);
      run_.observe("mixer_out", i, y, S, H, recs);
      add_residual(h, y, S * H, res);
    }
    if (CpuFfn* f = ffns_[i].get()) {
      rmsnorm(h, lw.pre_ff_norm.data(), S, H, cfg_.rms_norm_eps, x);
      run_.observe("ffn_norm", i, x, S, H, recs);
      f->forward(x, S, y, recs);
      run_.observe("ffn_out", i, y, S, H, recs);
      add_residual(h, y, S * H, res);
    }
    run_.observe("layer_out", i, h, S, H, recs);
    observe_residual(i + 1, h, S, recs);
  }
}

}  // namespace hl::cpu
