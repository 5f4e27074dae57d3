// ReferenceModel (ref_model.h): the decoder-layer loop over the plain-loop mixers and feed-forwards,
// the registers of trace-format.md §2 and the residual instruments of §3 from their definitions.
#include "engine/reference/ref_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/backend/run_plan.h"
#include "engine/core/error.h"
#include "engine/reference/ref_ffn.h"
#include "engine/reference/ref_ops.h"

namespace hl::ref {

// Dong, Cordonnier & Loukas 2021: res(X) = X − 1x̄ᵀ; the trace reports ‖res(X)‖_F / ‖X‖_F.
float rank1_distance(const float* X, int64_t T, int64_t H) {
  if (T < 2) return 0.0f;
  std::vector<double> mean(static_cast<size_t>(H), 0.0);  // x̄ (H,)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) mean[i] += X[t * H + i];
  for (double& m : mean) m /= static_cast<double>(T);
  double res = 0, all = 0;  // ‖X − 1x̄ᵀ‖²_F, ‖X‖²_F
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) {
      const double x = X[t * H + i];
      res += (x - mean[i]) * (x - mean[i]);
      all += x * x;
    }
  return all > 0 ? static_cast<float>(std::sqrt(res / all)) : 0.0f;
}

ReferenceModel::ReferenceModel(std::shared_ptr<const Model> model) : model_(std::move(model)), cfg_(model_->config) {}

void ReferenceModel::observe(const char* name, int64_t layer, int64_t row, const float* data, int64_t n) const {
  observe_row(observer_, name, layer, row, data, n);
}

void ReferenceModel::start(const RunOptions& opts) {
  const int64_t H = cfg_.hidden_size, L = cfg_.num_hidden_layers;
  // The run-start rules (registers, each attention layer's normalizer and sinks) are policy, not
  // math: the backends' own plan_run, so that the oracle checks the forward, not a second copy.
  const RunPlan plan = plan_run(*model_, opts);
  const int64_t trained = plan.trained_registers;
  opts_ = opts;
  n_reg_ = plan.registers;
  fed_ = 0;
  mixers_.clear();  // each kind's unit, its state empty (ref_attention.cpp, ref_mamba.cpp, ...)
  for (int64_t i = 0; i < L; ++i)
    mixers_.push_back(mixer_present(model_->schedule[i].mixer)
                          ? find_module(RefMixerTable::entries(), model_->schedule[i].mixer, "reference", i)(*model_, i, plan)
                          : nullptr);
  columns_.assign(static_cast<size_t>(L + 1), {});
  std::vector<float> x(static_cast<size_t>(H));  // (H,)
  for (int64_t r = 0; r < n_reg_; ++r) {
    const float* src = r < trained ? &model_->w.register_rows[r * H] : model_->w.mean_embedding.data();
    std::copy(src, src + H, x.begin());
    layers(x.data(), r, nullptr);
  }
}

void ReferenceModel::residual_column(int64_t column, const float* x, TokenTrace* r) {
  const int64_t H = cfg_.hidden_size;
  // The first layer whose output has a NaN or Inf (column c ≥ 1 is layer c − 1's output).
  if (column > 0 && r->nonfinite_layer < 0)
    for (int64_t i = 0; i < H; ++i)
      if (!std::isfinite(x[i])) {
        r->nonfinite_layer = static_cast<int32_t>(column - 1);
        break;
      }
  if (!opts_.instruments) return;
  std::vector<float>& X = columns_[column];  // (t+1, H): this column over tokens 0..t
  X.insert(X.end(), x, x + H);
  // resid_max_abs = max_i |x_i| (outliers, Sun et al. 2024), NaN entries skipped as fmax does.
  float mx = 0;
  for (int64_t i = 0; i < H; ++i)
    if (std::fabs(x[i]) > mx) mx = std::fabs(x[i]);
  r->resid_max_abs[column] = mx;
  r->rank1_distance[column] = rank1_distance(X.data(), static_cast<int64_t>(X.size()) / H, H);
}

void ReferenceModel::layers(float* h, int64_t row, TokenTrace* r) {
  const int64_t H = cfg_.hidden_size, E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
  const double eps = cfg_.rms_norm_eps;
  const bool instr = r && opts_.instruments;
  std::vector<float> x(static_cast<size_t>(H)), y(static_cast<size_t>(H));  // (H,) each
  // Granite's µP multipliers (1 elsewhere): the input row × embedding_multiplier (a register's too),
  // each residual branch × residual_multiplier before it is added.
  const double emb = cfg_.embedding_multiplier, res = cfg_.residual_multiplier;
  if (emb != 1.0)
    for (int64_t c = 0; c < H; ++c) h[c] = static_cast<float>(h[c] * emb);
  observe("embed", -1, row, h, H);
  if (r) residual_column(0, h, r);
  int64_t xi = 0;  // this layer's index among the MoE layers
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    if (RefMixer* mixer = mixers_[static_cast<size_t>(i)].get()) {  // none in an MLP-only layer (Nemotron-H's -)
      rmsnorm(h, lw.input_norm.data(), H, eps, x.data());
      observe("attn_norm", i, row, x.data(), H);
      RefRow at;
      at.layer = i;
      at.row = row;
      at.rec = r;
      at.instruments = instr;
      at.full = instr && opts_.full;
      at.observer = &observer_;
      mixer->token(x.data(), y.data(), at);
      observe("mixer_out", i, row, y.data(), H);
      for (int64_t c = 0; c < H; ++c) h[c] += static_cast<float>(res * y[c]);  // residual
    }
    if (model_->schedule[i].ffn == FfnKind::None) {  // a mixer-only layer (Nemotron-H's M, *)
      observe("layer_out", i, row, h, H);
      if (r) residual_column(i + 1, h, r);
      continue;
    }
    rmsnorm(h, lw.pre_ff_norm.data(), H, eps, x.data());
    observe("ffn_norm", i, row, x.data(), H);
    if (model_->schedule[i].is_moe()) {
      std::vector<float> probs(static_cast<size_t>(E));
      std::vector<int32_t> topk(static_cast<size_t>(K));
      const FfnParams& fp = model_->schedule[i].ffn_params;
      const float lse = moe(lw.moe, fp, x.data(), y.data(), probs.data(), topk.data());
      observe("router_probs", i, row, probs.data(), E);
      if (instr) {
        std::copy(probs.begin(), probs.end(), r->router_probs.begin() + xi * E);
        std::copy(topk.begin(), topk.end(), r->router_topk.begin() + xi * K);
        r->router_lse[xi] = lse;
      }
      ++xi;
    } else {
      mlp(lw.mlp, model_->schedule[i].ffn_params, x.data(), y.data());
    }
    observe("ffn_out", i, row, y.data(), H);
    for (int64_t c = 0; c < H; ++c) h[c] += static_cast<float>(res * y[c]);  // residual
    observe("layer_out", i, row, h, H);
    if (r) residual_column(i + 1, h, r);
  }
}

TokenTrace ReferenceModel::step(int32_t token) {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size, L = cfg_.num_hidden_layers;
  if (token < 0 || token >= V)
    throw Error("token id " + std::to_string(token) + " is out of range [0, " + std::to_string(V) + ")");
  TokenTrace r;
  init_token_trace(r, cfg_, model_->schedule, n_reg_, opts_, token, fed_);
  const int64_t row = n_reg_ + fed_;
  std::vector<float> h(static_cast<size_t>(H));  // (H,) the residual stream
  embedding(model_->w.embed, token, h.data());   // no scaling, no positions (jamba-spec.md §3.1)
  layers(h.data(), row, &r);
  rmsnorm(h.data(), model_->w.final_norm.data(), H, cfg_.rms_norm_eps, h.data());
  observe("final_norm", -1, row, h.data(), H);
  if (r.nonfinite_layer < 0 && !std::all_of(h.begin(), h.end(), [](float v) { return std::isfinite(v); }))
    r.nonfinite_layer = nonfinite_final_norm(L);
  linear(model_->w.lm_head, h.data(), r.logits.data());  // (V,)
  if (cfg_.logits_scaling != 1.0)  // Granite: logits ÷ logits_scaling
    for (float& v : r.logits) v = static_cast<float>(v / cfg_.logits_scaling);
  if (cfg_.lm_head_multiplier != 1.0)  // Falcon-H1: logits × lm_head_multiplier
    for (float& v : r.logits) v = static_cast<float>(v * cfg_.lm_head_multiplier);
  observe("logits", -1, row, r.logits.data(), V);
  finish_record(r, L, opts_);
  ++fed_;
  return r;
}

std::vector<TokenTrace> ReferenceModel::run(const std::vector<int32_t>& ids, const RunOptions& opts) {
  start(opts);
  std::vector<TokenTrace> out;
  out.reserve(ids.size());
  for (int32_t id : ids) out.push_back(step(id));
  return out;
}

}  // namespace hl::ref
