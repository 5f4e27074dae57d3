// Shared by the hl-bench-* tools: the median of a set of timings (even count: the mean of the middle two).
#pragma once
#include <algorithm>
#include <vector>

namespace hl::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace hl::bench
