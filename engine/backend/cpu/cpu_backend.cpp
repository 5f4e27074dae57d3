// CPU reference backend: run state, registers, the decoder-layer loop (jamba-spec.md §3.1, §3.3),
// the feed-forwards (§3.8 dense SwiGLU, §3.9 MoE without renormalisation) and the residual-stream
// instruments (rank-to-1 distance, largest |activation|, first non-finite layer). Mixers: cpu_mixers.cpp.
// Decode fuses gate+up+SiLU of all chosen experts into one threaded pass; buffers live in sc_.
#include "engine/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "engine/backend/backend_util.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/backend/run_plan.h"
#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/memory.h"
#include "engine/probes/residual_probe.h"
#include "engine/probes/router_probe.h"

namespace hl::cpu {

CpuBackend::CpuBackend(std::shared_ptr<const Model> model)
    : model_(std::move(model)), cfg_(model_->config), sched_(model_->schedule) {
  const int64_t di = cfg_.mamba_inner(), W = cfg_.mamba_d_conv, N = cfg_.mamba_d_state;
  conv_wT_.resize(static_cast<size_t>(sched_.num_ssm()));
  A_tiled_.resize(static_cast<size_t>(sched_.num_ssm()));
  for (int64_t i : sched_.ssm_layers()) {
    const std::vector<float>& cw = model_->w.layers[i].mamba.conv_w;  // (Di, W)
    std::vector<float>& t = conv_wT_[sched_[i].ssm_index];            // (W, Di)
    t.resize(static_cast<size_t>(W * di));
    for (int64_t d = 0; d < di; ++d)
      for (int64_t k = 0; k < W; ++k) t[k * di + d] = cw[d * W + k];
    const std::vector<float>& A = model_->w.layers[i].mamba.A;  // (Di, N)
    std::vector<float>& At = A_tiled_[sched_[i].ssm_index];     // tiled (simd::tile_index)
    At.assign(static_cast<size_t>(simd::tiled_size(di, N)), 0.0f);
    for (int64_t d = 0; d < di; ++d)
      for (int64_t n = 0; n < N; ++n) At[simd::tile_index(d, n, N)] = A[d * N + n];
  }
  start(RunOptions{});
}

void CpuBackend::start(const RunOptions& opts) {
  const int64_t H = cfg_.hidden_size;
  const RunPlan plan = plan_run(*model_, opts);
  const int64_t trained = plan.trained_registers;
  opts_ = opts;
  n_reg_ = plan.registers;
  position_ = 0;
  // States keep their buffers from run to run: a restart allocates nothing once warm.
  attn_.resize(static_cast<size_t>(sched_.num_attention()));
  mamba_.resize(static_cast<size_t>(sched_.num_ssm()));
  const int64_t di = cfg_.mamba_inner(), nh = cfg_.num_attention_heads;
  const int64_t kvw = cfg_.num_key_value_heads * cfg_.head_dim();
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    if (sched_[i].has_attention()) {
      AttnState& a = attn_[sched_[i].attn_index];
      a.len = 0;
      grow(a.k, (n_reg_ + 256) * kvw);  // reserved KV rows; attention() doubles them when full
      grow(a.v, (n_reg_ + 256) * kvw);
      a.norm = plan.normalizer[i];
      a.null_logit.assign(static_cast<size_t>(nh), 0.0f);
      if (plan.sinks[i]) a.null_logit = lw.attn.sinks;
    } else {
      MambaState& m = mamba_[sched_[i].ssm_index];
      m.conv.assign(static_cast<size_t>(di * cfg_.mamba_d_conv), 0.0f);
      m.ssm.assign(static_cast<size_t>(simd::tiled_size(di, cfg_.mamba_d_state)), 0.0f);
    }
  }
  rank1_.assign(static_cast<size_t>(cfg_.num_hidden_layers + 1), Rank1Tracker(H));
  sc_.thread_rows.resize(static_cast<size_t>(ThreadPool::global().size()));
  for (std::vector<float>& t : sc_.thread_rows) grow(t, 2 * (n_reg_ + 256));  // as the KV rows reserved
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
  init_token_trace(r, cfg_, sched_, n_reg_, opts_, token, t);
}

void CpuBackend::forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) {
  if (S <= 0) return;
  check_context(opts_, cfg_, position_, S);  // RunOptions::max_context, before any state changes
  model_->check_files();                     // the checkpoint still the one loaded (Model::files)
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  for (int64_t s = 0; s < S; ++s)
    if (tokens[s] < 0 || tokens[s] >= V)
      throw Error("token id " + std::to_string(tokens[s]) + " is out of range [0, " + std::to_string(V) + ")");
  float* h = grow(sc_.h, S * H);  // (S, H)
  for (int64_t s = 0; s < S; ++s) widen_row(model_->w.embed, tokens[s], &h[s * H]);
  const size_t first = out->size();
  out->resize(first + static_cast<size_t>(S));
  TokenTrace** recs = grow(sc_.recs, S);  // (S,)
  for (int64_t s = 0; s < S; ++s) recs[s] = &(*out)[first + s];
  // A prefill's records are S·V logits to allocate and zero: spread over the pool.
  ThreadPool::global().parallel_for(S, 16, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) init_record(*recs[s], tokens[s], position_ + s);
  });
  run_block(h, S, recs);
  // Final norm and LM head, written straight into the records' logits (V,) each.
  rmsnorm(h, model_->w.final_norm.data(), S, H, cfg_.rms_norm_eps, h);
  observe("final_norm", -1, h, S, H, recs);
  float** rows = grow(sc_.logit_rows, S);
  for (int64_t s = 0; s < S; ++s) rows[s] = recs[s]->logits.data();
  linear_to_rows(model_->w.lm_head, h, S, rows);
  if (observer_)
    for (int64_t s = 0; s < S; ++s) observe("logits", -1, rows[s], 1, V, recs + s);
  // nonfinite_layer L: the final norm's output, L + 1: the logits (token_trace.h).
  const int64_t L = cfg_.num_hidden_layers;
  for (int64_t s = 0; s < S; ++s) {
    TokenTrace& r = *recs[s];
    if (r.nonfinite_layer < 0 && !all_finite(h + s * H, H)) r.nonfinite_layer = nonfinite_final_norm(L);
    flag_nonfinite_logits(r, L);
  }
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t s = 0; s < S; ++s) recs[s]->step_seconds = dt / static_cast<double>(S);
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
    if (!opts_.instruments) continue;
    r->resid_max_abs[column] = residual_max_abs(x, H);
    r->rank1_distance[column] = rank1_[column].add(x);
  }
}

void CpuBackend::run_block(float* h, int64_t S, TokenTrace* const* recs) {
  const int64_t H = cfg_.hidden_size;
  float* x = grow(sc_.x, S * H);  // (S, H)
  float* y = grow(sc_.y, S * H);  // (S, H)
  observe("embed", -1, h, S, H, recs);
  observe_residual(0, h, S, recs);
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const LayerWeights& lw = model_->w.layers[i];
    rmsnorm(h, lw.input_norm.data(), S, H, cfg_.rms_norm_eps, x);
    observe("attn_norm", i, x, S, H, recs);
    if (sched_[i].has_attention())
      attention(i, x, S, y, recs);
    else
      mamba(i, x, S, y, recs);
    observe("mixer_out", i, y, S, H, recs);
    for (int64_t j = 0; j < S * H; ++j) h[j] += y[j];
    rmsnorm(h, lw.pre_ff_norm.data(), S, H, cfg_.rms_norm_eps, x);
    observe("ffn_norm", i, x, S, H, recs);
    feed_forward(i, x, S, y, recs);
    observe("ffn_out", i, y, S, H, recs);
    for (int64_t j = 0; j < S * H; ++j) h[j] += y[j];
    observe("layer_out", i, h, S, H, recs);
    observe_residual(i + 1, h, S, recs);
  }
}

// SwiGLU on n rows: y (n, H) = (silu(x Wgᵀ) ⊙ (x Wuᵀ)) Wdᵀ. gate/up may be row ranges of one tensor.
void CpuBackend::swiglu(const MlpWeights& w, const float* x, int64_t n, float* y) {
  const int64_t I = w.gate.rows;
  float* g = grow(sc_.g, n * I);     // (n, I)
  float* u = grow(sc_.u_ff, n * I);  // (n, I)
  linear(w.gate, x, n, g);
  linear(w.up, x, n, u);
  const simd::Kernels& k = simd::kernels();
  ThreadPool::global().parallel_for(n * I, 8192, [&](int64_t b, int64_t e) { k.silu_mul(g + b, u + b, e - b); });
  linear(w.down, g, n, y);
}

void CpuBackend::swiglu_decode(const MlpWeights* const* mlps, const float* weights, int k, const float* x, float* y) {
  const int64_t H = cfg_.hidden_size;
  int64_t off[kMaxDecodeExperts + 1] = {0};  // hidden rows of MLP j: [off[j], off[j+1])
  for (int j = 0; j < k; ++j) off[j + 1] = off[j] + mlps[j]->gate.rows;
  float* g = grow(sc_.g, off[k]);     // (Σ I_j,) → silu(g)·u
  float* u = grow(sc_.u_ff, off[k]);  // (Σ I_j,)
  const simd::Kernels& kern = simd::kernels();
  const Mat& g0 = mlps[0]->gate;
  const int64_t grain = std::max<int64_t>(1, matvec_grain(g0.cols, g0.dtype) / 2);  // two rows per hidden unit
  ThreadPool::global().parallel_for(off[k], grain, [&](int64_t b, int64_t e) {
    for (int j = 0; j < k; ++j) {
      const int64_t lo = std::max(b, off[j]), hi = std::min(e, off[j + 1]);
      if (lo >= hi) continue;
      const Mat& wg = mlps[j]->gate;
      const Mat& wu = mlps[j]->up;
      kern.matvec(wg.dtype, wg.row_ptr(lo - off[j]), hi - lo, wg.cols, x, g + lo);
      kern.matvec(wu.dtype, wu.row_ptr(lo - off[j]), hi - lo, wu.cols, x, u + lo);
      kern.silu_mul(g + lo, u + lo, hi - lo);
    }
  });
  if (!weights) {
    const MatvecJob job{&mlps[0]->down, 0, H, g, y};
    matvec(&job, 1);
    return;
  }
  float* ye = grow(sc_.ye_k, k * H);  // (k, H)
  MatvecJob jobs[kMaxDecodeExperts];
  for (int j = 0; j < k; ++j) jobs[j] = MatvecJob{&mlps[j]->down, 0, H, g + off[j], ye + j * H};
  matvec(jobs, k);
  std::fill(y, y + H, 0.0f);
  for (int j = 0; j < k; ++j)
    for (int64_t c = 0; c < H; ++c) y[c] += weights[j] * ye[j * H + c];
}

void CpuBackend::feed_forward(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const LayerWeights& lw = model_->w.layers[layer];
  const int64_t H = cfg_.hidden_size;
  if (!sched_[layer].is_moe()) {
    const MlpWeights* m = &lw.mlp;
    if (S == 1)
      swiglu_decode(&m, nullptr, 1, x, y);
    else
      swiglu(lw.mlp, x, S, y);
    return;
  }
  const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok, xi = sched_[layer].moe_index;
  float* logits = grow(sc_.rlogits, S * E);  // (S, E)
  float* probs = grow(sc_.rprobs, S * E);    // (S, E)
  int32_t* topk = grow(sc_.topk, S * K);     // (S, K)
  linear(lw.moe.router, x, S, logits);
  for (int64_t s = 0; s < S; ++s) {
    const float lse = route(&logits[s * E], E, K, &probs[s * E], &topk[s * K]);
    TokenTrace* r = recs[s];
    if (r && opts_.instruments) {
      std::copy(&probs[s * E], &probs[(s + 1) * E], r->router_probs.begin() + xi * E);
      std::copy(&topk[s * K], &topk[(s + 1) * K], r->router_topk.begin() + xi * K);
      r->router_lse[xi] = lse;
    }
  }
  observe("router_probs", layer, probs, S, E, recs);
  // Experts in ascending index (jamba-spec.md §3.9), each output the probability-weighted sum.
  if (S == 1 && K >= 1 && K <= kMaxDecodeExperts) {
    int32_t chosen[kMaxDecodeExperts];
    std::copy(topk, topk + K, chosen);
    std::sort(chosen, chosen + K);
    const MlpWeights* mlps[kMaxDecodeExperts];
    float w[kMaxDecodeExperts];
    for (int64_t j = 0; j < K; ++j) {
      mlps[j] = &lw.moe.experts[chosen[j]];
      w[j] = probs[chosen[j]];
    }
    swiglu_decode(mlps, w, static_cast<int>(K), x, y);
    return;
  }
  // Prefill: gather the tokens that chose e, run e once on all of them.
  std::fill(y, y + S * H, 0.0f);
  std::vector<int64_t>& rows = sc_.rows;
  std::vector<float>& weights = sc_.weights;
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
    float* xe = grow(sc_.xe, n * H);  // (n, H)
    float* ye = grow(sc_.ye, n * H);  // (n, H)
    // Gather and scatter over the pool: a token picks an expert at most once, so rows are distinct.
    const int64_t grain = std::max<int64_t>(1, 8192 / H);
    ThreadPool::global().parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) std::copy(x + rows[j] * H, x + (rows[j] + 1) * H, &xe[j * H]);
    });
    swiglu(lw.moe.experts[e], xe, n, ye);
    ThreadPool::global().parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t c = 0; c < H; ++c) y[rows[j] * H + c] += weights[j] * ye[j * H + c];
    });
  }
}

}  // namespace hl::cpu
