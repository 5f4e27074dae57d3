// Router math (see router_probe.h). Top-k is a partial selection on the probabilities with a
// deterministic tie rule so every backend picks the same experts.
#include "engine/probes/router_probe.h"

#include <algorithm>
#include <cmath>

namespace hl {

float route(const float* logits, int64_t E, int64_t k, float* probs, int32_t* topk) {
  float m = -INFINITY;
  for (int64_t e = 0; e < E; ++e) m = std::fmax(m, logits[e]);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    probs[e] = std::exp(logits[e] - m);
    sum += probs[e];
  }
  const double inv = 1.0 / sum;
  for (int64_t e = 0; e < E; ++e) probs[e] = static_cast<float>(probs[e] * inv);
  for (int64_t r = 0; r < k; ++r) {  // k is small: selection by repeated scans
    int32_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t q = 0; q < r; ++q) taken |= topk[q] == e;
      if (taken) continue;
      if (best < 0 || probs[e] > probs[best]) best = static_cast<int32_t>(e);
    }
    topk[r] = best;
  }
  return static_cast<float>(m + std::log(sum));
}

RouterWindowStats router_window(const float* probs, int64_t probs_stride, const int32_t* topk, int64_t topk_stride,
                                const float* lse, int64_t lse_stride, int64_t T, int64_t E, int64_t k) {
  RouterWindowStats s;
  s.load.assign(static_cast<size_t>(E), 0.0);
  s.importance.assign(static_cast<size_t>(E), 0.0);
  s.tokens = T;
  if (T <= 0 || E <= 0) return s;
  double z = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) s.importance[e] += probs[t * probs_stride + e];
    for (int64_t r = 0; r < k; ++r) {
      const int32_t e = topk[t * topk_stride + r];
      if (e >= 0 && e < E) s.load[e] += 1.0;
    }
    const double l = lse[t * lse_stride];
    z += l * l;
  }
  const double assignments = static_cast<double>(T * k);
  for (int64_t e = 0; e < E; ++e) {
    s.load[e] /= assignments;
    s.importance[e] /= static_cast<double>(T);
    s.balance_loss += s.load[e] * s.importance[e];
    s.max_load = std::max(s.max_load, s.load[e]);
  }
  s.balance_loss *= static_cast<double>(E);
  s.z_loss = z / static_cast<double>(T);
  return s;
}

double router_max_window_load(const int32_t* topk, int64_t topk_stride, int64_t T, int64_t E, int64_t k,
                              int64_t window) {
  if (T <= 0 || window <= 0) return 0;
  window = std::min(window, T);
  std::vector<int64_t> count(static_cast<size_t>(E), 0);
  auto add = [&](int64_t t, int64_t d) {
    for (int64_t r = 0; r < k; ++r) {
      const int32_t e = topk[t * topk_stride + r];
      if (e >= 0 && e < E) count[e] += d;
    }
  };
  double best = 0;
  for (int64_t t = 0; t < T; ++t) {
    add(t, +1);
    if (t >= window) add(t - window, -1);
    if (t >= window - 1) {
      const int64_t mx = *std::max_element(count.begin(), count.end());
      best = std::max(best, static_cast<double>(mx) / static_cast<double>(window * k));
    }
  }
  return best;
}

}  // namespace hl
