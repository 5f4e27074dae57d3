// SSM gate instruments of a Mamba layer (Gu & Dao 2023, selective state spaces: Δ decides skip (small
// Δ) vs write (large Δ), exp(Δ·A) is the state kept): the mean Δ over channels (trace ssm_delta_mean)
// and the retained state of one channel (trace ssm_retained). The CPU scan kernels fuse the retained
// sum into their state update (cpu_simd.h ScanArgs::retained); this file is its definition.
#pragma once
#include <cmath>
#include <cstdint>

namespace hl {

// mean_d Δ[d] over delta (Di,), Δ after softplus; summed in fp64.
inline float ssm_delta_mean(const float* delta, int64_t Di) {
  double sum = 0;
  for (int64_t d = 0; d < Di; ++d) sum += delta[d];
  return static_cast<float>(sum / static_cast<double>(Di));
}

// (1/N) Σ_n exp(Δ·A[n]) for one channel: A_row (N,) = A[d, :] = −exp(A_log[d, :]).
inline float ssm_retained(float delta, const float* A_row, int64_t N) {
  float keep = 0;
  for (int64_t n = 0; n < N; ++n) keep += std::exp(delta * A_row[n]);
  return keep / static_cast<float>(N);
}

}  // namespace hl
