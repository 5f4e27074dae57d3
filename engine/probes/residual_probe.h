// Residual-stream instruments of one token's vector (trace-format.md §3): the largest absolute
// activation (outliers; Sun et al. 2024, "Massive activations") and whether a NaN or Inf appeared (the
// first non-finite layer). Not the rank-to-1 distance (rank1.h). Used by the CPU backend per column.
#pragma once
#include <cmath>
#include <cstdint>

namespace hl {

// max_i |x_i| over x (n,); 0 for n = 0. A NaN is skipped by fmax (the non-finite flag reports it).
inline float residual_max_abs(const float* x, int64_t n) {
  float mx = 0;
  for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, std::fabs(x[i]));
  return mx;
}

// True when every entry of x (n,) is finite (no NaN, no ±Inf).
inline bool all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace hl
