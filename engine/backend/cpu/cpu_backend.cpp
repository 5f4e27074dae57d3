// CPU reference backend: run state, registers, the decoder-layer loop (jamba-spec.md §3.1, §3.3),
// the feed-forwards (§3.8 dense SwiGLU, §3.9 MoE without renormalisation) and the residual-stream
// instruments (rank-to-1 distance, largest |activation|, first non-finite layer). Mixers: cpu_mixers.cpp.
#include "engine/backend/cpu/cpu_backend.h"

#include <chrono>
#include <cmath>
#include <string>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/core/error.h"
#include "engine/probes/memory.h"
#include "engine/probes/router_probe.h"

namespace hl::cpu {

CpuBackend::CpuBackend(std::shared_ptr<const Model> model) : model_(std::move(model)), cfg_(model_->config) {
  const int64_t L = cfg_.num_hidden_layers;
  kind_index_.resize(L);
  moe_index_.resize(L);
  for (int64_t i = 0; i < L; ++i) {
    kind_index_[i] = cfg_.is_attention_layer(i) ? n_attn_++ : n_mamba_++;
    moe_index_[i] = cfg_.is_moe_layer(i) ? n_moe_++ : -1;
  }
  start(RunOptions{});
}

void CpuBackend::start(const RunOptions& opts) {
  const int64_t H = cfg_.hidden_size;
  const int64_t trained = static_cast<int64_t>(model_->w.register_rows.size()) / H;
  if (opts.registers > 1024) throw Error("registers: " + std::to_string(opts.registers) + " is out of range [0, 1024]");
  opts_ = opts;
  n_reg_ = opts.registers < 0 ? static_cast<int>(trained) : opts.registers;
  position_ = 0;
  attn_.assign(static_cast<size_t>(n_attn_), AttnState{});
  mamba_.assign(static_cast<size_t>(n_mamba_), MambaState{});
  const int64_t di = cfg_.mamba_inner(), nh = cfg_.num_attention_heads;
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    if (lw.is_attention) {
      AttnState& a = attn_[kind_index_[i]];
      const bool has_sinks = !lw.attn.sinks.empty();
      if (opts.normalizer_override)
        a.norm = opts.normalizer;
      else
        a.norm = has_sinks ? Normalizer::Sink : cfg_.attention_normalizer;
      a.null_logit.assign(static_cast<size_t>(nh), 0.0f);
      if (a.norm == Normalizer::Sink && has_sinks) a.null_logit = lw.attn.sinks;
    } else {
      MambaState& m = mamba_[kind_index_[i]];
      m.conv.assign(static_cast<size_t>(di * cfg_.mamba_d_conv), 0.0f);
      m.ssm.assign(static_cast<size_t>(di * cfg_.mamba_d_state), 0.0f);
    }
  }
  rank1_.assign(static_cast<size_t>(cfg_.num_hidden_layers + 1), Rank1Tracker(H));
  if (n_reg_ == 0) return;
  // Registers: trained rows first, then the mean embedding row (test-time registers).
  std::vector<float> h(static_cast<size_t>(n_reg_ * H));  // (n_reg, H)
  for (int64_t r = 0; r < n_reg_; ++r) {
    const float* src = r < trained ? &model_->w.register_rows[r * H] : model_->w.mean_embedding.data();
    std::copy(src, src + H, &h[r * H]);
  }
  std::vector<TokenTrace*> none(static_cast<size_t>(n_reg_), nullptr);
  run_block(h.data(), n_reg_, none.data());
}

void CpuBackend::init_record(TokenTrace& r, int32_t token, int64_t t) const {
  const int64_t nh = cfg_.num_attention_heads, L = cfg_.num_hidden_layers;
  r.token_id = token;
  r.position = static_cast<int32_t>(t);
  r.logits.assign(static_cast<size_t>(cfg_.vocab_size), 0.0f);
  r.kv_cache_bytes = kv_cache_bytes(cfg_, n_attn_, n_reg_ + t + 1, 4);
  r.ssm_state_bytes = ssm_state_bytes(cfg_, n_mamba_, 4);
  r.nonfinite_layer = -1;
  if (!opts_.instruments) return;
  const size_t an = static_cast<size_t>(n_attn_ * nh);
  r.attn_entropy.assign(an, 0.0f);
  r.attn_entropy_norm.assign(an, 0.0f);
  r.attn_mass.assign(an, 0.0f);
  r.attn_max_logit.assign(an, 0.0f);
  r.ssm_delta_mean.assign(static_cast<size_t>(n_mamba_), 0.0f);
  r.router_probs.assign(static_cast<size_t>(n_moe_ * cfg_.num_experts), 0.0f);
  r.router_topk.assign(static_cast<size_t>(n_moe_ * cfg_.num_experts_per_tok), 0);
  r.router_lse.assign(static_cast<size_t>(n_moe_), 0.0f);
  r.rank1_distance.assign(static_cast<size_t>(L + 1), 0.0f);
  r.resid_max_abs.assign(static_cast<size_t>(L + 1), 0.0f);
  if (!opts_.full) return;
  const size_t md = static_cast<size_t>(n_mamba_ * cfg_.mamba_inner());
  r.ssm_delta.assign(md, 0.0f);
  r.ssm_retained.assign(md, 0.0f);
  r.attn_rows.assign(an * static_cast<size_t>(n_reg_ + t + 2), 0.0f);
}

void CpuBackend::forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) {
  if (S <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  std::vector<float> h(static_cast<size_t>(S * H));  // (S, H)
  for (int64_t s = 0; s < S; ++s) {
    if (tokens[s] < 0 || tokens[s] >= V)
      throw Error("token id " + std::to_string(tokens[s]) + " is out of range [0, " + std::to_string(V) + ")");
    widen_row(model_->w.embed, tokens[s], &h[s * H]);
  }
  const size_t first = out->size();
  out->resize(first + static_cast<size_t>(S));
  std::vector<TokenTrace*> recs(static_cast<size_t>(S));
  for (int64_t s = 0; s < S; ++s) {
    recs[s] = &(*out)[first + s];
    init_record(*recs[s], tokens[s], position_ + s);
  }
  run_block(h.data(), S, recs.data());
  // Final norm and LM head.
  rmsnorm(h.data(), model_->w.final_norm.data(), S, H, cfg_.rms_norm_eps, h.data());
  std::vector<float> logits(static_cast<size_t>(S * V));  // (S, V)
  linear(model_->w.lm_head, h.data(), S, logits.data());
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t s = 0; s < S; ++s) {
    std::copy(&logits[s * V], &logits[(s + 1) * V], recs[s]->logits.begin());
    recs[s]->step_seconds = dt / static_cast<double>(S);
  }
  position_ += S;
}

void CpuBackend::observe_residual(int64_t column, const float* h, int64_t S, TokenTrace* const* recs) {
  const int64_t H = cfg_.hidden_size;
  for (int64_t s = 0; s < S; ++s) {
    TokenTrace* r = recs[s];
    if (!r) continue;
    const float* x = h + s * H;
    if (column > 0 && r->nonfinite_layer < 0) {
      for (int64_t i = 0; i < H; ++i)
        if (!std::isfinite(x[i])) {
          r->nonfinite_layer = static_cast<int32_t>(column - 1);
          break;
        }
    }
    if (!opts_.instruments) continue;
    float mx = 0;
    for (int64_t i = 0; i < H; ++i) mx = std::fmax(mx, std::fabs(x[i]));
    r->resid_max_abs[column] = mx;
    r->rank1_distance[column] = rank1_[column].add(x);
  }
}

void CpuBackend::run_block(float* h, int64_t S, TokenTrace* const* recs) {
  const int64_t H = cfg_.hidden_size;
  std::vector<float> x(static_cast<size_t>(S * H)), y(static_cast<size_t>(S * H));  // (S, H)
  observe_residual(0, h, S, recs);
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    rmsnorm(h, lw.input_norm.data(), S, H, cfg_.rms_norm_eps, x.data());
    if (lw.is_attention)
      attention(i, x.data(), S, y.data(), recs);
    else
      mamba(i, x.data(), S, y.data(), recs);
    for (int64_t j = 0; j < S * H; ++j) h[j] += y[j];
    rmsnorm(h, lw.pre_ff_norm.data(), S, H, cfg_.rms_norm_eps, x.data());
    feed_forward(i, x.data(), S, y.data(), recs);
    for (int64_t j = 0; j < S * H; ++j) h[j] += y[j];
    observe_residual(i + 1, h, S, recs);
  }
}

namespace {
// SwiGLU on S rows: y (S, H) = (silu(x Wgᵀ) ⊙ (x Wuᵀ)) Wdᵀ. gate/up may be row ranges of one tensor.
void swiglu(const MlpWeights& w, const float* x, int64_t S, float* y, std::vector<float>& g, std::vector<float>& u) {
  const int64_t I = w.gate.rows;
  g.resize(static_cast<size_t>(S * I));
  u.resize(static_cast<size_t>(S * I));
  linear(w.gate, x, S, g.data());
  linear(w.up, x, S, u.data());
  for (int64_t j = 0; j < S * I; ++j) g[j] = silu(g[j]) * u[j];
  linear(w.down, g.data(), S, y);
}
}  // namespace

void CpuBackend::feed_forward(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const LayerWeights& lw = model_->w.layers[layer];
  const int64_t H = cfg_.hidden_size;
  std::vector<float> g, u;
  if (!lw.is_moe) {
    swiglu(lw.mlp, x, S, y, g, u);
    return;
  }
  const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok, xi = moe_index_[layer];
  std::vector<float> logits(static_cast<size_t>(S * E)), probs(static_cast<size_t>(S * E));  // (S, E)
  std::vector<int32_t> topk(static_cast<size_t>(S * K));                                      // (S, K)
  linear(lw.moe.router, x, S, logits.data());
  for (int64_t s = 0; s < S; ++s) {
    const float lse = route(&logits[s * E], E, K, &probs[s * E], &topk[s * K]);
    TokenTrace* r = recs[s];
    if (r && opts_.instruments) {
      std::copy(&probs[s * E], &probs[(s + 1) * E], r->router_probs.begin() + xi * E);
      std::copy(&topk[s * K], &topk[(s + 1) * K], r->router_topk.begin() + xi * K);
      r->router_lse[xi] = lse;
    }
  }
  // Experts in ascending index (jamba-spec.md §3.9): gather the tokens that chose e, run e once.
  std::fill(y, y + S * H, 0.0f);
  std::vector<float> xe, ye;
  std::vector<int64_t> rows;
  std::vector<float> weights;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear();
    weights.clear();
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        if (topk[s * K + k] == e) {
          rows.push_back(s);
          weights.push_back(probs[s * E + e]);
        }
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    xe.resize(static_cast<size_t>(n * H));
    ye.resize(static_cast<size_t>(n * H));
    for (int64_t j = 0; j < n; ++j) std::copy(x + rows[j] * H, x + (rows[j] + 1) * H, &xe[j * H]);
    swiglu(lw.moe.experts[e], xe.data(), n, ye.data(), g, u);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < H; ++c) y[rows[j] * H + c] += weights[j] * ye[j * H + c];
  }
}

}  // namespace hl::cpu
