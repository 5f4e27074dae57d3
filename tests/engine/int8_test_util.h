// Inputs for the decode products' tests (test_int8_matvec.cpp, test_rows16.cpp).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

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

}  // namespace hl::test
