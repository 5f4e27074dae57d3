// Next-token sampling (sampling.h): greedy argmax (lowest id on ties), temperature, top-p nucleus
// (Holtzman et al. 2019: the smallest set, by descending probability, whose mass reaches top_p).
// Own splitmix64 stream per Sampler, so a seed reproduces a run on every platform. NaN logits never
// win and never get sampled. Not beam search, not top-k, not repetition penalties.
#include "engine/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/core/error.h"

namespace hl {

int32_t argmax(const float* x, int64_t n) {
  if (n <= 0 || n > std::numeric_limits<int32_t>::max())
    throw Error("argmax: vector length " + std::to_string(n) + ", allowed 1..2147483647");
  int64_t best = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) continue;
    if (best < 0 || x[i] > x[best]) best = i;  // strict: the lowest id wins ties
  }
  return static_cast<int32_t>(best < 0 ? 0 : best);
}

double Sampler::uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);  // splitmix64
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(const float* logits, int64_t V) {
  const int32_t greedy = argmax(logits, V);  // also checks V
  if (!(opts_.temperature > 0.0f)) return greedy;
  const float mx = logits[greedy];                      // (V,) logits; mx is the largest non-NaN one
  if (std::isnan(mx) || std::isinf(mx)) return greedy;  // all NaN, +inf present, or all -inf

  // Unnormalised probabilities w_i = exp((l_i - max) / T) in (0, 1]; zero / NaN entries dropped.
  const double inv_t = 1.0 / static_cast<double>(opts_.temperature);
  scratch_.clear();
  double total = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (std::isnan(logits[i])) continue;
    const float w = static_cast<float>(std::exp((static_cast<double>(logits[i]) - mx) * inv_t));
    if (w > 0.0f) {
      scratch_.emplace_back(w, static_cast<int32_t>(i));
      total += w;
    }
  }
  if (scratch_.empty() || !(total > 0)) return greedy;

  size_t keep = scratch_.size();
  if (opts_.top_p < 1.0f) {
    // (w desc, id asc): a total order, so ties never depend on the sort algorithm.
    std::sort(scratch_.begin(), scratch_.end(),
              [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
                return a.first != b.first ? a.first > b.first : a.second < b.second;
              });
    const double target = static_cast<double>(opts_.top_p) * total;
    double cum = 0;
    for (keep = 0; keep < scratch_.size();) {
      cum += scratch_[keep].first;
      ++keep;
      if (cum >= target) break;
    }
    total = cum;  // renormalise over the nucleus
  }
  const double u = uniform() * total;
  double cum = 0;
  for (size_t j = 0; j < keep; ++j) {
    cum += scratch_[j].first;
    if (u < cum) return scratch_[j].second;
  }
  return scratch_[keep - 1].second;  // rounding at the very end of the range
}

}  // namespace hl
