// The feed-forwards of the CPU backend: dense SwiGLU (jamba-spec.md §3.8) or relu² (Nemotron-H), and the
// mixture of experts without renormalisation (§3.9) or with it and a shared expert (Granite), or with
// DeepSeek-V3's sigmoid router, relu² experts and latent projections (Nemotron-H), router
// instruments of probes/router_probe.h. Decode fuses gate+up+SiLU of all chosen experts into one
// threaded pass; a prefill runs each expert once over the tokens routed to it. Stateless between
// tokens; buffers shared by all FFN units (FfnScratch).
#include <algorithm>

#include "engine/backend/cpu/cpu_module.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/router_probe.h"

namespace hl::cpu {
namespace {

// Most experts per token the fused decode path takes (more fall back to the prefill path).
constexpr int kMaxDecodeExperts = 16;

struct FfnScratch {
  std::vector<float> g, u, xe, ye, ye_k;  // hidden (n, I) ×2, gathered rows (n, H), (n, H), (K, H)
  std::vector<float> rlogits, rprobs;     // (S, E)
  std::vector<int32_t> topk;              // (S, K)
  std::vector<float> gate_w;              // (S, K) renormalised weights of the chosen experts
  std::vector<int64_t> rows;              // tokens routed to one expert
  std::vector<float> weights;             // their routing probabilities
  std::vector<float> lat_in, lat_out;     // (S, Lat) ×2: the experts' latent input and weighted sum
};

// g (n,) ×= m, skipped for m = 1 (Falcon-H1's gate multiplier, inside the SiLU).
void scale_rows(float* g, int64_t n, float m) {
  if (m != 1.0f)
    for (int64_t i = 0; i < n; ++i) g[i] *= m;
}

// v (n,) += b[first, first + n), skipped when b is empty.
void add_bias(float* v, const std::vector<float>& b, int64_t first, int64_t n) {
  if (b.empty()) return;
  for (int64_t i = 0; i < n; ++i) v[i] += b[static_cast<size_t>(first + i)];
}

// SwiGLU on n rows: y (n, H) = (silu(gm · x Wgᵀ) ⊙ (x Wuᵀ)) Wdᵀ. gate/up may be row ranges of one tensor.
void swiglu(FfnScratch& sc, const MlpWeights& w, const float* x, int64_t n, float* y, float gm = 1.0f) {
  const int64_t I = w.gate.rows;
  float* g = grow(sc.g, n * I);  // (n, I)
  float* u = grow(sc.u, n * I);  // (n, I)
  linear(w.gate, x, n, g, w.gate_bias);
  linear(w.up, x, n, u, w.up_bias);
  const simd::Kernels& k = simd::kernels();
  ThreadPool::global().parallel_for(n * I, 8192, [&](int64_t b, int64_t e) {
    scale_rows(g + b, e - b, gm);
    k.silu_mul(g + b, u + b, e - b);
  });
  linear(w.down, g, n, y, w.down_bias);
}

// Decode: SwiGLU of one row through k MLPs, y (H,) = Σ_j weight_j · mlp_j(x) in the order given
// (weights null: k == 1, no scaling). Gate and up of all k in one threaded pass, then the downs.
void swiglu_decode(FfnScratch& sc, int64_t H, const MlpWeights* const* mlps, const float* weights, int k,
                   const float* x, float* y, float gm = 1.0f) {
  int64_t off[kMaxDecodeExperts + 1] = {0};  // hidden rows of MLP j: [off[j], off[j+1])
  for (int j = 0; j < k; ++j) off[j + 1] = off[j] + mlps[j]->gate.rows;
  float* g = grow(sc.g, off[k]);  // (Σ I_j,) → silu(g)·u
  float* u = grow(sc.u, off[k]);  // (Σ I_j,)
  const simd::Kernels& kern = simd::kernels();
  const Mat& g0 = mlps[0]->gate;
  const int64_t grain = std::max<int64_t>(1, matvec_grain(g0) / 2);  // two rows per hidden unit
  ThreadPool::global().parallel_for(off[k], grain, [&](int64_t b, int64_t e) {
    for (int j = 0; j < k; ++j) {
      const int64_t lo = std::max(b, off[j]), hi = std::min(e, off[j + 1]);
      if (lo >= hi) continue;
      matvec_rows(mlps[j]->gate, lo - off[j], hi - lo, x, g + lo);
      matvec_rows(mlps[j]->up, lo - off[j], hi - lo, x, u + lo);
      add_bias(g + lo, mlps[j]->gate_bias, lo - off[j], hi - lo);  // mlp_bias (Falcon-H1); experts have none
      add_bias(u + lo, mlps[j]->up_bias, lo - off[j], hi - lo);
      scale_rows(g + lo, hi - lo, gm);
      kern.silu_mul(g + lo, u + lo, hi - lo);
    }
  });
  if (!weights) {
    const MatvecJob job{&mlps[0]->down, 0, H, g, y};
    matvec(&job, 1);
    add_bias(y, mlps[0]->down_bias, 0, H);
    return;
  }
  float* ye = grow(sc.ye_k, k * H);  // (k, H)
  MatvecJob jobs[kMaxDecodeExperts];
  for (int j = 0; j < k; ++j) jobs[j] = MatvecJob{&mlps[j]->down, 0, H, g + off[j], ye + j * H};
  matvec(jobs, k);
  std::fill(y, y + H, 0.0f);
  for (int j = 0; j < k; ++j)
    for (int64_t c = 0; c < H; ++c) y[c] += weights[j] * ye[j * H + c];
}

// Nemotron-H's MLP on n rows (HF NemotronHMLP with relu2; no gate): y (n, H) = relu(x Wuᵀ)² Wdᵀ.
void relu2_mlp(FfnScratch& sc, const MlpWeights& w, const float* x, int64_t n, float* y) {
  const int64_t I = w.up.rows;
  float* u = grow(sc.u, n * I);  // (n, I)
  linear(w.up, x, n, u, w.up_bias);
  ThreadPool::global().parallel_for(n * I, 8192, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float r = u[i] > 0.0f ? u[i] : 0.0f;
      u[i] = r * r;
    }
  });
  linear(w.down, u, n, y, w.down_bias);
}

// An expert or shared MLP on n rows: SwiGLU, or relu² without gate (Nemotron-H).
void expert_mlp(FfnScratch& sc, const MlpWeights& w, bool gated, const float* x, int64_t n, float* y) {
  if (gated)
    swiglu(sc, w, x, n, y);
  else
    relu2_mlp(sc, w, x, n, y);
}

class CpuDense final : public CpuFfn {
 public:
  CpuDense(CpuRun& run, int64_t layer)
      : run_(run),
        w_(run.model.w.layers[layer].mlp),
        gated_(run.sched[layer].ffn_params.gated),
        gm_(static_cast<float>(run.sched[layer].ffn_params.gate_multiplier)),
        dm_(static_cast<float>(run.sched[layer].ffn_params.down_multiplier)) {}
  void forward(const float* x, int64_t S, float* y, TokenTrace* const*) override {
    FfnScratch& sc = run_.scratch<FfnScratch>();
    const MlpWeights* m = &w_;
    if (!gated_)
      relu2_mlp(sc, w_, x, S, y);
    else if (S == 1)
      swiglu_decode(sc, run_.cfg.hidden_size, &m, nullptr, 1, x, y, gm_);
    else
      swiglu(sc, w_, x, S, y, gm_);
    scale_rows(y, S * run_.cfg.hidden_size, dm_);  // Falcon-H1's down multiplier
  }

 private:
  CpuRun& run_;
  const MlpWeights& w_;
  const bool gated_;  // SwiGLU, or the relu² MLP without gate
  const float gm_, dm_;  // µP gate and down multipliers (1 but for Falcon-H1)
};

class CpuMoe final : public CpuFfn {
 public:
  CpuMoe(CpuRun& run, int64_t layer)
      : run_(run),
        layer_(layer),
        w_(run.model.w.layers[layer].moe),
        xi_(run.sched[layer].moe_index),
        fp_(run.sched[layer].ffn_params) {}
  void forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) override;

 private:
  // Each token's k experts and weights into sc.topk / sc.gate_w, the router instruments into probs.
  void route_tokens(FfnScratch& sc, const float* x, int64_t S, TokenTrace* const* recs);

  CpuRun& run_;
  const int64_t layer_;
  const MoeWeights& w_;
  const int64_t xi_;  // among the MoE layers: the X_n slot of the records
  const FfnParams& fp_;  // renormalize (Granite's top-k softmax), the sigmoid router, gated experts
};

void CpuMoe::route_tokens(FfnScratch& sc, const float* x, int64_t S, TokenTrace* const* recs) {
  const int64_t E = run_.cfg.num_experts, K = run_.cfg.num_experts_per_tok;
  float* logits = grow(sc.rlogits, S * E);  // (S, E)
  float* probs = grow(sc.rprobs, S * E);    // (S, E)
  int32_t* topk = grow(sc.topk, S * K);     // (S, K)
  float* gate_w = grow(sc.gate_w, S * K);   // (S, K)
  linear(w_.router, x, S, logits);
  const float* bias = w_.router_bias.empty() ? nullptr : w_.router_bias.data();
  for (int64_t s = 0; s < S; ++s) {
    float* p = &probs[s * E];
    int32_t* t = &topk[s * K];
    float* g = &gate_w[s * K];
    float lse = 0;
    if (fp_.sigmoid_router) {  // DeepSeek-V3's grouped sigmoid choice (Nemotron-H)
      lse = route_sigmoid(&logits[s * E], bias, E, K, fp_.groups, fp_.topk_groups, fp_.renormalize, fp_.routed_scaling,
                          p, t, g);
    } else {  // the probability, or (renormalize) that over the sum of the k chosen: a softmax over them
      lse = route(&logits[s * E], E, K, p, t);
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += p[t[k]];
      for (int64_t k = 0; k < K; ++k) g[k] = fp_.renormalize ? static_cast<float>(p[t[k]] / sum) : p[t[k]];
    }
    TokenTrace* r = recs[s];
    if (r && run_.opts.instruments) {
      std::copy(p, p + E, r->router_probs.begin() + xi_ * E);
      std::copy(t, t + K, r->router_topk.begin() + xi_ * K);
      r->router_lse[xi_] = lse;
    }
  }
  run_.observe("router_probs", layer_, probs, S, E, recs);
}

void CpuMoe::forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  FfnScratch& sc = run_.scratch<FfnScratch>();
  const int64_t H = run_.cfg.hidden_size, E = run_.cfg.num_experts, K = run_.cfg.num_experts_per_tok;
  route_tokens(sc, x, S, recs);
  const int32_t* topk = sc.topk.data();
  const float* gate_w = sc.gate_w.data();
  const bool shared = !w_.shared.down.empty();  // the shared expert, weight 1, beside the routed
  const bool latent = !w_.latent_in.empty();    // experts between Nemotron-H's latent projections
  // Decode of SwiGLU experts: experts in ascending index (jamba-spec.md §3.9), fused in one pass.
  if (S == 1 && fp_.gated && !latent && K >= 1 && K + shared <= kMaxDecodeExperts) {
    int32_t order[kMaxDecodeExperts];  // positions in topk, by expert index
    for (int64_t j = 0; j < K; ++j) order[j] = static_cast<int32_t>(j);
    std::sort(order, order + K, [&](int32_t a, int32_t b) { return topk[a] < topk[b]; });
    const MlpWeights* mlps[kMaxDecodeExperts];
    float w[kMaxDecodeExperts];
    for (int64_t j = 0; j < K; ++j) {
      mlps[j] = &w_.experts[topk[order[j]]];
      w[j] = gate_w[order[j]];
    }
    if (shared) {
      mlps[K] = &w_.shared;
      w[K] = 1.0f;
    }
    swiglu_decode(sc, H, mlps, w, static_cast<int>(K + shared), x, y);
    return;
  }
  // The experts' input xin (S, Hin): x, or its latent projection; their weighted sum into yin.
  const int64_t Hin = latent ? w_.latent_in.rows : H;
  const float* xin = x;
  float* yin = y;
  if (latent) {
    float* li = grow(sc.lat_in, S * Hin);
    linear(w_.latent_in, x, S, li, w_.latent_in_bias);
    xin = li;
    yin = grow(sc.lat_out, S * Hin);
  }
  // Gather the tokens that chose e, run e once on all of them.
  std::fill(yin, yin + S * Hin, 0.0f);
  std::vector<int64_t>& rows = sc.rows;
  std::vector<float>& weights = sc.weights;
  for (int64_t e = 0; e < E; ++e) {
    rows.clear();
    weights.clear();
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        if (topk[s * K + k] == e) {
          rows.push_back(s);
          weights.push_back(gate_w[s * K + k]);
        }
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    float* xe = grow(sc.xe, n * Hin);  // (n, Hin)
    float* ye = grow(sc.ye, n * Hin);  // (n, Hin)
    // Gather and scatter over the pool: a token picks an expert at most once, so rows are distinct.
    const int64_t grain = std::max<int64_t>(1, 8192 / Hin);
    ThreadPool::global().parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) std::copy(xin + rows[j] * Hin, xin + (rows[j] + 1) * Hin, &xe[j * Hin]);
    });
    expert_mlp(sc, w_.experts[e], fp_.gated, xe, n, ye);
    ThreadPool::global().parallel_for(n, grain, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t c = 0; c < Hin; ++c) yin[rows[j] * Hin + c] += weights[j] * ye[j * Hin + c];
    });
  }
  if (latent) linear(w_.latent_out, yin, S, y, w_.latent_out_bias);  // fc2_latent_proj on the weighted sum
  if (shared) {  // the shared expert on every token, added unweighted
    float* ys = grow(sc.ye, S * H);  // (S, H)
    expert_mlp(sc, w_.shared, fp_.gated, x, S, ys);
    ThreadPool::global().parallel_for(S * H, 8192, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) y[j] += ys[j];
    });
  }
}

}  // namespace

std::unique_ptr<CpuFfn> make_cpu_dense(CpuRun& run, int64_t layer) {
  return std::make_unique<CpuDense>(run, layer);
}

std::unique_ptr<CpuFfn> make_cpu_moe(CpuRun& run, int64_t layer) {
  return std::make_unique<CpuMoe>(run, layer);
}

HL_REGISTER_MODULE(CpuFfnTable, FfnKind::Dense, make_cpu_dense);
HL_REGISTER_MODULE(CpuFfnTable, FfnKind::MoE, make_cpu_moe);

}  // namespace hl::cpu
