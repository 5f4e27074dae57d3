// Instruments of a token's logits, computed on the host once the record is finished (the trace
// field table's derived fields, trace_fields.h): the same code for every backend, the reference and
// files written before a field existed. Sums in fp64; not the logits themselves.
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
  // Σ e^(z−m) and Σ e^(z−m)·(z−m): z − m and its exponential in float (relative error ~1e-7 a
  // term, far below the 1e-4 the traces are checked to), the sums in double; one expf per logit.
  const float mf = static_cast<float>(m);
  double s = 0, sz = 0;
  for (size_t v = 0; v < n; ++v) {
    const float d = z[v] - mf;
    const double e = std::exp(d);
    s += e;
    sz += e * static_cast<double>(d);
  }
  return static_cast<float>(std::log(s) - sz / s);
}

}  // namespace hl
