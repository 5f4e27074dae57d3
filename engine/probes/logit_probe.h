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

// The entropy's pieces (next_token_entropy): blocks of kBlock logits from the first, over the
// first n − n % 4 logits (the last block may be shorter); the n % 4 after them go one by one.
constexpr size_t kBlock = 1024;
inline size_t blocks_of(size_t n) {
  return (n - n % 4 + kBlock - 1) / kBlock;
}
inline size_t block_end(size_t n, size_t k) {
  return std::min(n - n % 4, (k + 1) * kBlock);
}

// The largest logit of block k, and whether all of its logits are finite: x − x is 0 for a finite
// lane and NaN for ±Inf or NaN, so one sum of them says it.
struct BlockMax {
  float m;
  bool finite;
};
inline BlockMax block_max(const float* z, size_t n, size_t k) {
  const float inf = std::numeric_limits<float>::infinity();
  f4 mx = f4{} - inf, bad = {};
  for (size_t v = k * kBlock, end = block_end(n, k); v < end; v += 4) {
    f4 x;
    std::memcpy(&x, z + v, sizeof x);
    bad += x - x;
    mx = x > mx ? x : mx;
  }
  return {std::max(std::max(mx[0], mx[1]), std::max(mx[2], mx[3])), bad[0] + bad[1] + bad[2] + bad[3] == 0.0f};
}

// Block k's Σ e^(z−m) and Σ e^(z−m)·(z−m), four float lanes each.
struct BlockSums {
  f4 s, sz;
};
inline BlockSums block_sums(const float* z, size_t n, size_t k, float m) {
  f4 bs = {}, bz = {};
  for (size_t v = k * kBlock, end = block_end(n, k); v < end; v += 4) {
    f4 d;
    std::memcpy(&d, z + v, sizeof d);
    d = d - m;
    const f4 e = exp_nonpositive(d);
    bs += e;
    bz += e * d;
  }
  return {bs, bz};
}

// Folds a block's maximum into m; false when the block has a logit that is not finite.
inline bool fold_max(const BlockMax& b, float& m) {
  m = std::max(m, b.m);
  return b.finite;
}
// m with the n % 4 logits after the blocks; NaN when one of them is not finite.
inline float tail_max(const float* z, size_t n, float m) {
  for (size_t v = n - n % 4; v < n; ++v) {
    if (!std::isfinite(z[v])) return std::numeric_limits<float>::quiet_NaN();
    m = std::max(m, z[v]);
  }
  return m;
}
// Adds a block's float lanes into the double sums, lane by lane (blocks in order).
inline void fold_sums(const BlockSums& b, double& s, double& sz) {
  for (int l = 0; l < 4; ++l) {
    s += b.s[l];
    sz += b.sz[l];
  }
}
// The entropy from the blocks' sums and the tail's logits, one by one in double.
inline float entropy_of(const float* z, size_t n, float m, double s, double sz) {
  for (size_t v = n - n % 4; v < n; ++v) {
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
// Computed for every token with the instruments on, so four logits at a time: the exponentials in
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
// same order: the same bits. A decode step's 65,536 logits cost ~100 µs on one core of the
// development machine, a step of the ~317M model ~3 ms.
float next_token_entropy_pooled(const float* z, size_t n);

// The index of the first logit that is NaN or ±Inf, −1 when all are finite: blocks checked four
// lanes at a time, one by one only in a block that has one.
inline int64_t first_nonfinite(const float* z, size_t n) {
  using namespace logit_detail;
  for (size_t k = 0, nb = blocks_of(n); k < nb; ++k)
    if (!block_max(z, n, k).finite)
      for (size_t v = k * kBlock; v < block_end(n, k); ++v)
        if (!std::isfinite(z[v])) return static_cast<int64_t>(v);
  for (size_t v = n - n % 4; v < n; ++v)
    if (!std::isfinite(z[v])) return static_cast<int64_t>(v);
  return -1;
}

}  // namespace hl
