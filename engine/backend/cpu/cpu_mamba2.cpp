// The Mamba-2 mixer of the CPU backend (HF BambaMixer's slow path; Dao & Gu 2024): in_proj into the
// gate z, x|B|C and dt; causal depthwise conv + bias + SiLU over x|B|C with the cached raw window;
// Δ = clamp(softplus(dt + dt_bias), time_step_limit); per head h (group g = h / (nh/G)) the state
// S_h (P, N) ← exp(Δ_h A_h) S_h + Δ_h x_h B_gᵀ, y_h = S_h C_g + D_h x_h; the gated RMSNorm
// (y · silu(z), RMS over the norm group); out_proj. A decode step and a short block run the recurrence
// in token order, heads spread over the pool (each head's state is its own), which equals decode
// steps exactly; a longer block runs the chunked form (cpu_ssd.h), equal to the steps up to rounding.
#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/cpu_module.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/backend/cpu/cpu_ssd.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/ssm_probe.h"

namespace hl::cpu {
namespace {

struct Mamba2Scratch {
  std::vector<float> proj, xbc, delta, y, retained;  // (S, Di+conv+nh), (S, conv), (S, nh), (S, Di), (S, nh)
};

class CpuMamba2 final : public CpuMixer {
 public:
  CpuMamba2(CpuRun& run, int64_t layer)
      : run_(run), layer_(layer), w_(run.model.w.layers[layer].mamba2), mi_(run.sched[layer].ssm_index) {
    const JambaConfig& c = run.cfg;
    Di_ = c.mamba_inner();
    conv_ = c.mamba2_conv_dim();
    nh_ = c.mamba_n_heads;
    P_ = c.mamba_d_head;
    N_ = c.mamba_d_state;
    G_ = c.mamba_n_groups;
    W_ = c.mamba_d_conv;
    mup_ = mamba2_mup_vector(c);
    Q_ = ssd_chunk(c.mamba_chunk_size);
    conv_wT_.resize(static_cast<size_t>(W_ * conv_));  // (W, conv_dim) from conv_w (conv_dim, W)
    for (int64_t ch = 0; ch < conv_; ++ch)
      for (int64_t k = 0; k < W_; ++k) conv_wT_[k * conv_ + ch] = w_.conv_w[ch * W_ + k];
  }

  void start(const RunPlan&) override {
    win_.assign(static_cast<size_t>(W_ * conv_), 0.0f);
    state_.assign(static_cast<size_t>(Di_ * N_), 0.0f);
  }

  void forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) override;

 private:
  void scan_head(int64_t h, int64_t S, const float* xbc, const float* delta, float* out, float* retained);

  CpuRun& run_;
  const int64_t layer_;
  const Mamba2Weights& w_;
  const int64_t mi_;  // among the SSM layers: the M_n slot of the records
  int64_t Di_ = 0, conv_ = 0, nh_ = 0, P_ = 0, N_ = 0, G_ = 1, W_ = 0;
  int64_t Q_ = 0;               // the chunk length of the chunked scan
  std::vector<float> conv_wT_;  // (W, conv_dim)
  std::vector<float> mup_;      // (Di + conv_dim + nh,) in_proj's output factors, or empty (all 1)
  std::vector<float> win_;      // (W, conv_dim): raw x|B|C of the last W tokens, oldest row first
  std::vector<float> state_;    // (nh, P, N)
};

// Head h through the block's S tokens in order: xbc (S, conv_dim), delta (S, nh); out (S, Di) gets
// the head's P channels before the gate; retained (S, nh) or null.
void CpuMamba2::scan_head(int64_t h, int64_t S, const float* xbc, const float* delta, float* out, float* retained) {
  const int64_t g = h / (nh_ / G_), GN = G_ * N_;
  scan_in_order(S, P_, N_, conv_, Di_, xbc + h * P_, xbc + Di_ + g * N_, xbc + Di_ + GN + g * N_, delta + h, nh_,
                w_.A[h], w_.D[h], &state_[h * P_ * N_], out + h * P_, retained ? retained + h : nullptr);
}

void CpuMamba2::forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const JambaConfig& cfg = run_.cfg;
  Mamba2Scratch& sc = run_.scratch<Mamba2Scratch>();
  const int64_t proj = Di_ + conv_ + nh_;
  float* zxd = grow(sc.proj, S * proj);  // (S, proj): z | x|B|C | dt
  float* xbc = grow(sc.xbc, S * conv_);  // (S, conv_dim) after the conv and SiLU
  const simd::Kernels& kern = simd::kernels();
  const float* cb = w_.conv_b.empty() ? nullptr : w_.conv_b.data();
  // Falcon-H1's µP factors of the segments z | x | B | C | dt on columns [k0, k1) of every row.
  const auto mup = [&](int64_t k0, int64_t k1) {
    if (!mup_.empty())
      for (int64_t s = 0; s < S; ++s)
        for (int64_t k = k0; k < k1; ++k) zxd[s * proj + k] *= mup_[k];
  };
  const auto conv = [&](int64_t c0, int64_t c1) {
    if (c0 < c1) causal_conv_silu(kern, zxd + Di_, proj, S, win_.data(), conv_wT_.data(), cb, conv_, W_, c0, c1, xbc);
  };
  if (S == 1) {  // a decode step convolves each chunk of x|B|C channels in in_proj's job, after its rows
    matvec_then(w_.in_proj, x, zxd, w_.in_bias.empty() ? nullptr : w_.in_bias.data(), [&](int64_t r0, int64_t r1) {
      mup(r0, r1);
      conv(std::max<int64_t>(r0 - Di_, 0), std::min(r1 - Di_, conv_));
    });
  } else {
    linear(w_.in_proj, x, S, zxd, w_.in_bias);
    mup(0, proj);
    ThreadPool::global().parallel_for(conv_, std::max<int64_t>(64, 16384 / S), conv);
  }
  run_.observe("ssm_in", layer_, zxd, S, proj, recs);
  run_.observe("ssm_conv", layer_, xbc, S, conv_, recs);
  // Δ (S, nh) = clamp(softplus(dt + dt_bias), time_step_limit).
  float* delta = grow(sc.delta, S * nh_);
  const float lo = static_cast<float>(cfg.mamba2_dt_lo()), hi = static_cast<float>(cfg.mamba2_dt_hi());
  for (int64_t s = 0; s < S; ++s) {
    float* d = delta + s * nh_;
    const float* dt = zxd + s * proj + Di_ + conv_;
    for (int64_t h = 0; h < nh_; ++h) d[h] = dt[h] + w_.dt_bias[h];
    kern.softplus(d, nh_);
    for (int64_t h = 0; h < nh_; ++h) d[h] = std::clamp(d[h], lo, hi);
  }
  const bool instr = run_.opts.instruments, full = instr && run_.opts.full;
  float* out = grow(sc.y, S * Di_);                               // (S, Di)
  float* retained = full ? grow(sc.retained, S * nh_) : nullptr;  // (S, nh)
  const Mamba2Scan mode = mamba2_scan();
  if (S > 1 && (mode == Mamba2Scan::Chunked || (mode == Mamba2Scan::Auto && ssd_pays(S, P_, N_))))
    ssd_scan(SsdDims{nh_, P_, N_, G_, conv_}, Q_, S, xbc, delta, w_.A.data(), w_.D.data(), state_.data(), out, retained,
             run_.scratch<SsdScratch>());
  else
    ThreadPool::global().parallel_for(nh_, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, S * P_ * N_ / 64)),
                                      [&](int64_t h0, int64_t h1) {
                                        for (int64_t h = h0; h < h1; ++h) scan_head(h, S, xbc, delta, out, retained);
                                      });
  // Gated RMSNorm per row: v = y · silu(z), then v / RMS(v over each group) · w. Falcon-H1 may
  // normalise first and gate after (norm_before_gate), or have no norm (y · silu(z) alone).
  const int64_t group = cfg.mamba2_norm_group();
  const double eps = cfg.rms_norm_eps;
  const bool norm = !w_.norm_w.empty(), before = norm && cfg.mamba_norm_before_gate;
  auto normalise = [&](const float* in, float* v) {  // v = in / RMS(in over each group) · w
    for (int64_t g0 = 0; g0 < Di_; g0 += group) {
      double ss = 0;
      for (int64_t c = g0; c < g0 + group; ++c) ss += static_cast<double>(in[c]) * in[c];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(group) + eps));
      for (int64_t c = g0; c < g0 + group; ++c) v[c] = w_.norm_w[c] * (in[c] * inv);
    }
  };
  ThreadPool::global().parallel_for(S, std::max<int64_t>(1, 8192 / Di_), [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      float* v = out + s * Di_;
      float* z = zxd + s * proj;  // the gate, no longer needed: becomes silu(z) · v
      if (before) normalise(v, v);
      kern.silu_mul(z, v, Di_);
      if (norm && !before)
        normalise(z, v);
      else
        std::copy(z, z + Di_, v);
    }
  });
  if (instr) {
    for (int64_t s = 0; s < S; ++s) {
      TokenTrace* r = recs[s];
      if (!r) continue;
      r->ssm_delta_mean[mi_] = ssm_delta_mean(delta + s * nh_, nh_);  // the mean over the heads
      if (!full) continue;
      for (int64_t ch = 0; ch < Di_; ++ch) {  // per channel: its head's Δ and exp(Δ A) (trace-format.md §3)
        r->ssm_delta[mi_ * Di_ + ch] = delta[s * nh_ + ch / P_];
        r->ssm_retained[mi_ * Di_ + ch] = retained[s * nh_ + ch / P_];
      }
    }
  }
  run_.observe("ssm_delta", layer_, delta, S, nh_, recs);
  run_.observe("ssm_y", layer_, out, S, Di_, recs);
  linear(w_.out_proj, out, S, y, w_.out_bias);
}

}  // namespace

std::unique_ptr<CpuMixer> make_cpu_mamba2(CpuRun& run, int64_t layer) {
  return std::make_unique<CpuMamba2>(run, layer);
}

HL_REGISTER_MODULE(CpuMixerTable, MixerKind::Mamba2, make_cpu_mamba2);

}  // namespace hl::cpu
