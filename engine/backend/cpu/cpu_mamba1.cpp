// The Mamba-1 mixer of the CPU backend (jamba-spec.md §3.5/§3.6): in_proj split x|z, causal depthwise
// conv + bias + SiLU over the cached raw window, x_proj → dt|B|C with Jamba's inner RMSNorms,
// softplus(dt_proj + bias), selective scan h = exp(Δ·A)·h + Δ·B·u, y = h·C + D·u, y·silu(z), out_proj.
// The unit owns its layer's conv window and SSM state and its weights re-laid for the kernels; the
// scan runs over cache-sized chunks of tokens, each chunk parallel over channel tiles.
#include "engine/backend/cpu/cpu_module.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/ssm_probe.h"

namespace hl::cpu {
namespace {

struct MambaScratch {
  std::vector<float> xz, u, p, dtr, Bm, Cm, dt;  // (S, 2Di), (S, Di), (S, R+2N), (S, R), (S, N) ×2, (S, Di)
  std::vector<float> gated, retained;            // (S, Di)
};

class CpuMamba1 final : public CpuMixer {
 public:
  CpuMamba1(CpuRun& run, int64_t layer)
      : run_(run), layer_(layer), w_(run.model.w.layers[layer].mamba), mi_(run.sched[layer].ssm_index) {
    const int64_t Di = run.cfg.mamba_inner(), W = run.cfg.mamba_d_conv, N = run.cfg.mamba_d_state;
    conv_wT_.resize(static_cast<size_t>(W * Di));  // (W, Di) from conv_w (Di, W)
    for (int64_t d = 0; d < Di; ++d)
      for (int64_t k = 0; k < W; ++k) conv_wT_[k * Di + d] = w_.conv_w[d * W + k];
    A_tiled_.assign(static_cast<size_t>(simd::tiled_size(Di, N)), 0.0f);  // A (Di, N) in channel tiles
    for (int64_t d = 0; d < Di; ++d)
      for (int64_t n = 0; n < N; ++n) A_tiled_[simd::tile_index(d, n, N)] = w_.A[d * N + n];
  }

  void start(const RunPlan&) override {
    const int64_t Di = run_.cfg.mamba_inner();
    conv_.assign(static_cast<size_t>(Di * run_.cfg.mamba_d_conv), 0.0f);
    ssm_.assign(static_cast<size_t>(simd::tiled_size(Di, run_.cfg.mamba_d_state)), 0.0f);
  }

  void forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) override;

 private:
  CpuRun& run_;
  const int64_t layer_;
  const MambaWeights& w_;
  const int64_t mi_;              // among the SSM layers: the M_n slot of the records
  std::vector<float> conv_wT_;    // (W, Di) conv_w transposed
  std::vector<float> A_tiled_;    // A (Di, N) in channel tiles (simd::tile_index)
  std::vector<float> conv_;       // (W, Di): raw inputs u0 of the last W tokens, oldest row first
  std::vector<float> ssm_;        // (Di, N) in channel tiles
};

void CpuMamba1::forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const JambaConfig& cfg = run_.cfg;
  MambaScratch& sc = run_.scratch<MambaScratch>();
  const int64_t Di = cfg.mamba_inner(), N = cfg.mamba_d_state, W = cfg.mamba_d_conv, R = cfg.mamba_dt_rank;
  float* xz = grow(sc.xz, S * 2 * Di);  // (S, 2Di): u0 | z
  // Causal depthwise conv over [cached window, block], then SiLU: u (S, Di), channels spread over the
  // pool; a decode step convolves each chunk of channels in in_proj's job, right after its rows.
  float* u = grow(sc.u, S * Di);
  const float* cwT = conv_wT_.data();  // (W, Di)
  float* win = conv_.data();           // (W, Di)
  const simd::Kernels& kern = simd::kernels();
  const float* cb = w_.conv_b.empty() ? nullptr : w_.conv_b.data();
  const auto conv = [&](int64_t d0, int64_t d1) {
    if (d0 < d1) causal_conv_silu(kern, xz, 2 * Di, S, win, cwT, cb, Di, W, d0, d1, u);
  };
  if (S == 1) {
    matvec_then(w_.in_proj, x, xz, w_.in_bias.empty() ? nullptr : w_.in_bias.data(),
                [&](int64_t r0, int64_t r1) { conv(r0, std::min(r1, Di)); });
  } else {
    linear(w_.in_proj, x, S, xz, w_.in_bias);
    ThreadPool::global().parallel_for(Di, std::max<int64_t>(64, 16384 / S), conv);
  }
  run_.observe("ssm_in", layer_, xz, S, 2 * Di, recs);
  run_.observe("ssm_conv", layer_, u, S, Di, recs);
  // Selective projections and Jamba's inner norms: p (S, R+2N) → dt_r (S, R), B (S, N), C (S, N).
  const int64_t P = R + 2 * N;
  float* p = grow(sc.p, S * P);
  linear(w_.x_proj, u, S, p);
  float* dtr = grow(sc.dtr, S * R);
  float* Bm = grow(sc.Bm, S * N);
  float* Cm = grow(sc.Cm, S * N);
  for (int64_t s = 0; s < S; ++s) {
    rmsnorm(&p[s * P], w_.dt_norm.data(), 1, R, cfg.rms_norm_eps, &dtr[s * R]);
    rmsnorm(&p[s * P + R], w_.b_norm.data(), 1, N, cfg.rms_norm_eps, &Bm[s * N]);
    rmsnorm(&p[s * P + R + N], w_.c_norm.data(), 1, N, cfg.rms_norm_eps, &Cm[s * N]);
  }
  // dt (S, Di) = dt_r · dt_projᵀ + bias, then Δ = softplus of it, per chunk in the scan's job below
  // (a decode step computes its dt rows there too: one threaded pass fewer).
  float* dt = grow(sc.dt, S * Di);
  if (S > 1) linear(w_.dt_proj, dtr, S, dt, w_.dt_bias.data());
  // Scan over chunks of kChunk tokens (their dt, u, z, out rows stay in L2), each chunk parallel
  // over blocks of kTile channels; every channel runs through the tokens in order.
  const bool full = run_.opts.instruments && run_.opts.full;
  float* gated = grow(sc.gated, S * Di);                         // (S, Di)
  float* retained = full ? grow(sc.retained, S * Di) : nullptr;  // (S, Di)
  constexpr int64_t kChunk = 64, kBlock = simd::kTile;
  const int64_t blocks = (Di + kBlock - 1) / kBlock;
  for (int64_t s0 = 0; s0 < S; s0 += kChunk) {
    const int64_t n = std::min(kChunk, S - s0);
    simd::ScanArgs a;
    a.S = n;
    a.Di = Di;
    a.N = N;
    a.dt = dt + s0 * Di;
    a.u = u + s0 * Di;
    a.z = xz + s0 * 2 * Di + Di;
    a.z_stride = 2 * Di;
    a.B = Bm + s0 * N;
    a.C = Cm + s0 * N;
    a.A = A_tiled_.data();
    a.D = w_.D.data();
    a.h = ssm_.data();
    a.out = gated + s0 * Di;
    a.retained = retained ? retained + s0 * Di : nullptr;
    ThreadPool::global().parallel_for(blocks, std::max<int64_t>(1, 16 / n), [&](int64_t b0, int64_t b1) {
      const int64_t d0 = b0 * kBlock, d1 = std::min(Di, b1 * kBlock);
      if (S == 1) {
        matvec_rows(w_.dt_proj, d0, d1 - d0, dtr, dt + d0);  // as stored, or in blocks from a GGUF file
        for (int64_t d = d0; d < d1; ++d) dt[d] += w_.dt_bias[d];
      }
      for (int64_t s = s0; s < s0 + n; ++s) kern.softplus(dt + s * Di + d0, d1 - d0);  // Δ = softplus(·)
      kern.scan(a, d0, d1);
    });
  }
  if (run_.opts.instruments) {
    ThreadPool::global().parallel_for(S, std::max<int64_t>(1, 8192 / Di), [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        TokenTrace* r = recs[s];
        if (!r) continue;
        r->ssm_delta_mean[mi_] = ssm_delta_mean(&dt[s * Di], Di);
        if (!full) continue;
        std::copy(&dt[s * Di], &dt[(s + 1) * Di], r->ssm_delta.begin() + mi_ * Di);
        std::copy(&retained[s * Di], &retained[(s + 1) * Di], r->ssm_retained.begin() + mi_ * Di);
      }
    });
  }
  run_.observe("ssm_delta", layer_, dt, S, Di, recs);
  run_.observe("ssm_y", layer_, gated, S, Di, recs);
  linear(w_.out_proj, gated, S, y, w_.out_bias);
}

}  // namespace

std::unique_ptr<CpuMixer> make_cpu_mamba1(CpuRun& run, int64_t layer) {
  return std::make_unique<CpuMamba1>(run, layer);
}

HL_REGISTER_MODULE(CpuMixerTable, MixerKind::Mamba1, make_cpu_mamba1);

}  // namespace hl::cpu
