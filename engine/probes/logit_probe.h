// Instruments of a token's logits, computed on the host once the record is finished (the trace
// field table's derived fields, trace_fields.h): the same code for every backend, the reference and
// files written before a field existed. Sums in fp64; not the logits themselves.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace hl {

namespace logit_detail {

// Four floats in one register (GCC/clang vector extensions: SSE2 on x86-64, NEON on ARM).
typedef float f4 __attribute__((vector_size(16)));
typedef int32_t i4 __attribute__((vector_size(16)));

// e^x lane by lane for x ≤ 0: x = k·ln2 + r with ln2 in two parts (Cody–Waite), |r| ≤ ln2/2,
// e^r by its Taylor polynomial of degree 7 (relative error below 1e-7), times 2^k through the
// exponent bits; 0 below −87, where e^x < 2e−38 adds nothing a sum of at least 1 can hold.
inline f4 exp_nonpositive(f4 x) {
  const f4 low = x < -87.0f ? x - x : x - x + 1.0f;  // 0 where x < −87, else 1 (a lane mask as floats)
  const f4 lim = f4{} - 87.0f;
  x = x < lim ? lim : x;
  const f4 k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const f4 r = (x - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
  f4 p = f4{} + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const i4 e = (i4)p + (__builtin_convertvector(k, i4) << 23);  // vector casts keep the bits
  return (f4)e * low;
}

}  // namespace logit_detail

// Entropy in nats of the next-token distribution p = softmax(z) over z (n,):
// H = −Σ_v p_v ln p_v = ln Σ_v e^(z_v − m) − Σ_v p_v (z_v − m) with m = max z (Shannon 1948).
// 0 for one certain token, ln n for uniform logits; NaN when a logit is NaN or ±Inf, or n = 0.
// Computed for every token with the instruments on, so four logits at a time: the exponentials in
// float (relative error ~1e-7 a term, far below the 1e-4 the traces are checked to), the sums in
// float over blocks of 1024 logits and in double across blocks.
inline float next_token_entropy(const float* z, size_t n) {
  using logit_detail::f4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (n == 0) return nan;
  // m = max z, four at a time; x − x is 0 for a finite lane and NaN for ±Inf or NaN, so one sum of
  // them says whether every logit is finite.
  const float inf = std::numeric_limits<float>::infinity();
  f4 mx = f4{} - inf, bad = {};
  const size_t n4 = n - n % 4;
  for (size_t v = 0; v < n4; v += 4) {
    f4 x;
    std::memcpy(&x, z + v, sizeof x);
    bad += x - x;
    mx = x > mx ? x : mx;
  }
  if (!(bad[0] + bad[1] + bad[2] + bad[3] == 0.0f)) return nan;
  float m = std::max(std::max(mx[0], mx[1]), std::max(mx[2], mx[3]));
  for (size_t v = n4; v < n; ++v) {
    if (!std::isfinite(z[v])) return nan;
    m = std::max(m, z[v]);
  }
  double s = 0, sz = 0;  // Σ e^(z−m), Σ e^(z−m)·(z−m)
  size_t v = 0;
  while (n - v >= 4) {
    const size_t end = std::min(n - (n - v) % 4, v + 1024);
    f4 bs = {}, bz = {};
    for (; v < end; v += 4) {
      f4 d;
      std::memcpy(&d, z + v, sizeof d);
      d = d - m;
      const f4 e = logit_detail::exp_nonpositive(d);
      bs += e;
      bz += e * d;
    }
    for (int l = 0; l < 4; ++l) {
      s += bs[l];
      sz += bz[l];
    }
  }
  for (; v < n; ++v) {
    const double d = static_cast<double>(z[v] - m), e = std::exp(d);
    s += e;
    sz += e * d;
  }
  return static_cast<float>(std::log(s) - sz / s);
}

}  // namespace hl
