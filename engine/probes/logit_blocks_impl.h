// The per-block work of next_token_entropy (logit_probe.h) over 16 float lanes, written once and
// included twice: by logit_probe.h inside hl::logit_detail for every build, and by logit_probe.cpp
// inside `#pragma GCC target` regions (AVX2, AVX-512F) for the pooled version on CPUs that have them.
// Lane by lane the same IEEE operations in the same order (no fused multiply-add: logit_probe.cpp is
// compiled with -ffp-contract=off, and the baseline has none), so every instance gives the same bits.
// Needs kBlock and block_end in scope. Not a public header.

// 16 floats (GCC/clang vector extensions: four SSE registers on the x86-64 baseline, two AVX ones or
// one AVX-512 one where compiled for them).
typedef float fv __attribute__((vector_size(64)));
typedef int32_t iv __attribute__((vector_size(64)));

// e^x lane by lane for x ≤ 0: x = k·ln2 + r with ln2 in two parts (Cody–Waite), |r| ≤ ln2/2,
// e^r by its Taylor polynomial of degree 7 (relative error below 1e-7), times 2^k through the
// exponent bits; 0 below −87, where e^x < 2e−38 adds nothing a sum of at least 1 can hold.
// In place (a 64-byte vector by value would be passed differently with and without AVX-512).
inline void exp_nonpositive(fv& x) {
  const fv low = x < -87.0f ? x - x : x - x + 1.0f;  // 0 where x < −87, else 1 (a lane mask as floats)
  const fv lim = fv{} - 87.0f;
  x = x < lim ? lim : x;
  const fv k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const fv r = (x - k * 0.693145751953125f) - k * 1.428606765330187e-06f;
  fv p = fv{} + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const iv e = (iv)p + (__builtin_convertvector(k, iv) << 23);  // vector casts keep the bits
  x = (fv)e * low;
}

// The largest logit of block k, and whether all of its logits are finite: x − x is 0 for a finite
// lane and NaN for ±Inf or NaN, so one sum of them says it.
struct BlockMax {
  float m;
  bool finite;
};
inline BlockMax block_max(const float* z, size_t n, size_t k) {
  const float inf = std::numeric_limits<float>::infinity();
  fv mx = fv{} - inf, bad = {};
  for (size_t v = k * kBlock, end = block_end(n, k); v < end; v += kLanes) {
    fv x;
    std::memcpy(&x, z + v, sizeof x);
    bad += x - x;
    mx = x > mx ? x : mx;
  }
  float m = mx[0], b = bad[0];
  for (size_t l = 1; l < kLanes; ++l) {
    m = std::max(m, mx[l]);
    b += bad[l];
  }
  return {m, b == 0.0f};
}

// Block k's Σ e^(z−m) and Σ e^(z−m)·(z−m), 16 float lanes each.
struct BlockSums {
  fv s, sz;
};
inline BlockSums block_sums(const float* z, size_t n, size_t k, float m) {
  fv bs = {}, bz = {};
  for (size_t v = k * kBlock, end = block_end(n, k); v < end; v += kLanes) {
    fv d;
    std::memcpy(&d, z + v, sizeof d);
    d = d - m;
    fv e = d;
    exp_nonpositive(e);
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
// Adds a block's float lanes into the double sums, lane by lane (blocks in order).
inline void fold_sums(const BlockSums& b, double& s, double& sz) {
  for (size_t l = 0; l < kLanes; ++l) {
    s += b.s[l];
    sz += b.sz[l];
  }
}

// Blocks [b, e) into plain arrays, for the pooled version (logit_probe.cpp), whichever instance
// computed them: each block's maximum and finiteness, and its 16 + 16 lane sums at s + 16k, sz + 16k.
inline void maxima_of(const float* z, size_t n, size_t b, size_t e, float* m, unsigned char* finite) {
  for (size_t k = b; k < e; ++k) {
    const BlockMax x = block_max(z, n, k);
    m[k] = x.m;
    finite[k] = x.finite;
  }
}
inline void sums_of(const float* z, size_t n, size_t b, size_t e, float mx, float* s, float* sz) {
  for (size_t k = b; k < e; ++k) {
    const BlockSums x = block_sums(z, n, k, mx);
    for (size_t l = 0; l < kLanes; ++l) {
      s[kLanes * k + l] = x.s[l];
      sz[kLanes * k + l] = x.sz[l];
    }
  }
}
