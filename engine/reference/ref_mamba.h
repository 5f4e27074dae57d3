// The reference Mamba-1 mixer (Gu & Dao 2023; jamba-spec.md §3.5/§3.6) one token at a time as plain
// loops: in_proj split x|z, causal depthwise conv + bias + SiLU over a window of raw inputs, x_proj
// → dt|B|C with Jamba's inner RMSNorms, Δ = softplus(dt_proj + bias), the selective-scan step,
// the gate, out_proj; with the Δ instruments. Not the fast path (cpu_mixers.cpp, cpu_simd.h scan).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/io/config.h"
#include "engine/model/weights.h"

namespace hl::ref {

// The recurrent state of one Mamba layer.
struct MambaCache {
  std::vector<float> window;  // (W, Di) raw inputs u0 of the last W tokens, oldest row first
  std::vector<float> h;       // (Di, N) SSM state
};
MambaCache make_mamba_cache(const JambaConfig& c);

// Causal depthwise conv of one step (causal_conv1d_update_ref): window (W, Di) ends with the current
// input; conv_w (Di, W) with conv_w[d, W−1] on the current token; bias (Di,) or null; u (Di,) =
// SiLU(bias + Σ_k conv_w[d, k] · window[k, d]).
void causal_conv_step(const float* window, const float* conv_w, const float* bias, int64_t Di, int64_t W, float* u);

// One selective-scan step (selective_state_update_ref, jamba-spec.md §6.2) for all channels:
//   h[d, n] ← exp(Δ_d A[d, n]) h[d, n] + Δ_d B[n] u_d
//   y_d = (Σ_n h[d, n] C[n] + D_d u_d) · silu(z_d)
//   retained_d = (1/N) Σ_n exp(Δ_d A[d, n])   (trace ssm_retained; when non-null)
// h (Di, N) in place, delta u z y retained (Di,), A (Di, N), B C (N,), D (Di,).
void scan_step(float* h, const float* delta, const float* A, const float* B, const float* C, const float* D,
               const float* u, const float* z, int64_t Di, int64_t N, float* y, float* retained);

// What one Mamba token leaves for the observer and the instruments.
struct MambaOut {
  std::vector<float> xz;        // (2*Di,) in_proj output: x | z
  std::vector<float> u;         // (Di,) conv output after SiLU
  std::vector<float> delta;     // (Di,) Δ after softplus
  std::vector<float> retained;  // (Di,)
  std::vector<float> gated;     // (Di,) before out_proj
  float delta_mean = 0;         // trace ssm_delta_mean
};

// One token through a Mamba mixer: x (H,) → y (H,), advancing `cache`.
void mamba_token(const MambaWeights& w, const JambaConfig& c, const float* x, MambaCache& cache, float* y,
                 MambaOut* out);

}  // namespace hl::ref
