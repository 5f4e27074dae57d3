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

// The blocks: kBlock logits each from the first, over the first n − n % kLanes logits (the last
// block may be shorter); the n % kLanes after them go one by one.
constexpr size_t kBlock = 1024, kLanes = 16;
inline size_t blocks_of(size_t n) {
  return (n - n % kLanes + kBlock - 1) / kBlock;
}
inline size_t block_end(size_t n, size_t k) {
  return std::min(n - n % kLanes, (k + 1) * kBlock);
}

#include "engine/probes/logit_blocks_impl.h"

// m with the n % kLanes logits after the blocks; NaN when one of them is not finite.
inline float tail_max(const float* z, size_t n, float m) {
  for (size_t v = n - n % kLanes; v < n; ++v) {
    if (!std::isfinite(z[v])) return std::numeric_limits<float>::quiet_NaN();
    m = std::max(m, z[v]);
  }
  return m;
}
// The entropy from the blocks' sums and the tail's logits, one by one in double.
inline float entropy_of(const float* z, size_t n, float m, double s, double sz) {
  for (size_t v = n - n % kLanes; v < n; ++v) {
    const double d = static_cast<double>(z[v] - m), e = std::exp(d);
    s += e;
    sz += e * d;
  }
  return static_cast<float>(std::log(s) - sz / s);
}

}  // namespace logit_detail

// Entropy in nats of the next-token distribution p = softmax(z) over z (n,):
// H = −Σ_v p_v ln p_v = ln Σ_v e^(z_v − m) − Σ_v p_v (z_v − m) with m = max z (Shannon 1948).
// 0 for one certain token, ln n for uniform logits; NaN when a logit is NaN or ±Inf, or n = 0.
// Computed for every token with the instruments on, so 16 logits at a time: the exponentials in
// float (relative error ~1e-7 a term, far below the 1e-4 the traces are checked to), the sums in
// float over blocks of 1024 logits and in double across blocks.
inline float next_token_entropy(const float* z, size_t n) {
  using namespace logit_detail;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (n == 0) return nan;
  const size_t nb = blocks_of(n);
  float m = -std::numeric_limits<float>::infinity();
  for (size_t k = 0; k < nb; ++k)
    if (!fold_max(block_max(z, n, k), m)) return nan;
  m = tail_max(z, n, m);
  if (std::isnan(m)) return nan;
  double s = 0, sz = 0;
  for (size_t k = 0; k < nb; ++k) fold_sums(block_sums(z, n, k, m), s, sz);
  return entropy_of(z, n, m, s, sz);
}

// next_token_entropy with the blocks' maxima and sums computed on the thread pool
// (core/thread_pool.h; on the calling thread alone inside another parallel loop), added in the
// same order: the same bits, in 16 lanes of AVX-512, AVX2 or the baseline (logit_probe.cpp). A
// decode step's 65,536 logits cost ~100 µs on one core in four SSE lanes (2026-12-05), a step of the
// ~317M model ~3 ms.
float next_token_entropy_pooled(const float* z, size_t n);

// The index of the first logit that is NaN or ±Inf, −1 when all are finite: blocks checked 16
// lanes at a time, one by one only in a block that has one.
inline int64_t first_nonfinite(const float* z, size_t n) {
  using namespace logit_detail;
  for (size_t k = 0, nb = blocks_of(n); k < nb; ++k)
    if (!block_max(z, n, k).finite)
      for (size_t v = k * kBlock; v < block_end(n, k); ++v)
        if (!std::isfinite(z[v])) return static_cast<int64_t>(v);
  for (size_t v = n - n % kLanes; v < n; ++v)
    if (!std::isfinite(z[v])) return static_cast<int64_t>(v);
  return -1;
}

}  // namespace hl
