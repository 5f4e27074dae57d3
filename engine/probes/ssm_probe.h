// SSM gate instruments of a Mamba layer (Gu & Dao 2023, selective state spaces: Δ decides skip (small
// Δ) vs write (large Δ), exp(Δ·A) is the state kept): the mean Δ over channels (trace ssm_delta_mean).
// The retained share of a channel, (1/N) Σ_n exp(Δ·A[d, n]) (trace ssm_retained), reuses the exp(Δ·A)
// of the state update, so the scan kernels compute it (cpu_simd.h ScanArgs::retained), not this file.
#pragma once
#include <cstdint>

namespace hl {

// mean_d Δ[d] over delta (Di,), Δ after softplus; summed in fp64.
inline float ssm_delta_mean(const float* delta, int64_t Di) {
  double sum = 0;
  for (int64_t d = 0; d < Di; ++d) sum += delta[d];
  return static_cast<float>(sum / static_cast<double>(Di));
}

}  // namespace hl
