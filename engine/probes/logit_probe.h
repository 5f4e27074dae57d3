// Instruments of a token's logits, computed on the host once the record is finished (the trace
// field table's derived fields, trace_fields.h): the same code for every backend, the reference and
// files written before a field existed. Plain fp64 sums; not the logits themselves.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace hl {

// Entropy in nats of the next-token distribution p = softmax(z) over z (n,):
// H = −Σ_v p_v ln p_v = ln Σ_v e^(z_v − m) − Σ_v p_v (z_v − m) with m = max z (Shannon 1948).
// 0 for one certain token, ln n for uniform logits; NaN when a logit is NaN or ±Inf, or n = 0.
inline float next_token_entropy(const float* z, size_t n) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (n == 0) return nan;
  double m = -std::numeric_limits<double>::infinity();
  for (size_t v = 0; v < n; ++v) {
    if (!std::isfinite(z[v])) return nan;
    m = std::max(m, static_cast<double>(z[v]));
  }
  double s = 0, sz = 0;  // Σ e^(z−m), Σ e^(z−m)·(z−m)
  for (size_t v = 0; v < n; ++v) {
    const double d = static_cast<double>(z[v]) - m, e = std::exp(d);
    s += e;
    sz += e * d;
  }
  return static_cast<float>(std::log(s) - sz / s);
}

}  // namespace hl
