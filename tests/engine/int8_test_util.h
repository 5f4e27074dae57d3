// Inputs for the decode products' tests: activations and block rows (test_int8_matvec.cpp, test_rows16.cpp).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/dtype.h"

namespace hl::test {

// Activations as a decode step sees them: mostly small, a few outliers, a zero block, and values
// that land exactly on a rounding tie (x·127/amax = k + 0.5).
inline std::vector<float> decode_activations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = g(rng);
  for (int64_t i = 0; i < n; i += 97) x[static_cast<size_t>(i)] *= 20.0f;  // outliers
  if (n >= 96)
    for (int64_t i = 32; i < 64; ++i) x[static_cast<size_t>(i)] = 0.0f;  // one zero block of 32
  if (n >= 128) {  // block 3 of 32: amax 127, so x·127/amax = x exactly; 2.5 and -3.5 are ties
    for (int64_t i = 96; i < 128; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
    x[96] = 127.0f, x[97] = 2.5f, x[98] = -3.5f, x[99] = 0.5f;
  }
  return x;
}

// Block rows of `rows` × `cols` in format t: ggml's reference quantiser on Gaussian weights, then
// (random_codes) every code byte random, the block scales kept finite. Q8_0 then holds −128 too.
inline std::vector<uint8_t> block_rows(DType t, int64_t rows, int64_t cols, uint32_t seed, bool random_codes) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = g(rng);
  std::vector<uint8_t> q(static_cast<size_t>(rows * dtype_row_bytes(t, cols)));
  from_float(t, w.data(), q.data(), w.size());
  if (!random_codes) return q;
  const int64_t bb = dtype_block_bytes(t);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t at = 0; at < q.size(); at += static_cast<size_t>(bb)) {
    uint8_t* b = q.data() + at;
    // The fp16 scales: d of the blocks of 32 and d, dmin of Q4_K / Q5_K at the start, d of Q6_K at
    // the end.
    const int keep0 = t == DType::Q6_K ? 0 : (t == DType::Q4_K || t == DType::Q5_K ? 4 : 2);
    const int keep1 = t == DType::Q6_K ? 2 : 0;
    for (int64_t i = keep0; i < bb - keep1; ++i) b[i] = static_cast<uint8_t>(byte(rng));
  }
  return q;
}

}  // namespace hl::test
