// Router math (see router_probe.h). Top-k is a partial selection on the probabilities with a
// deterministic tie rule so every backend picks the same experts.
#include "engine/probes/router_probe.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hl {

namespace {

// The k largest of v (n,), highest first, ties to the lower index, by repeated scans (k is small).
void top_indices(const float* v, int64_t n, int64_t k, int32_t* out) {
  for (int64_t r = 0; r < k; ++r) {
    int32_t best = -1;
    for (int64_t e = 0; e < n; ++e) {
      bool taken = false;
      for (int64_t q = 0; q < r; ++q) taken |= out[q] == e;
      if (!taken && (best < 0 || v[e] > v[best])) best = static_cast<int32_t>(e);
    }
    out[r] = best;
  }
}

}  // namespace

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
  top_indices(probs, E, k, topk);
  return static_cast<float>(m + std::log(sum));
}


float route_sigmoid(const float* logits, const float* bias, int64_t E, int64_t k, int64_t groups, int64_t topk_groups,
                    bool renormalize, double scale, float* probs, int32_t* topk, float* weights) {
  thread_local std::vector<float> choice_v, gscore_v;  // (E,), (groups,): no allocation once grown
  thread_local std::vector<int32_t> gbest_v;
  choice_v.resize(static_cast<size_t>(E));
  gscore_v.resize(static_cast<size_t>(groups));
  gbest_v.resize(static_cast<size_t>(groups));
  float* choice = choice_v.data();
  float* gscore = gscore_v.data();
  int32_t* gbest = gbest_v.data();
  float m = -INFINITY;
  double ssum = 0;
  for (int64_t e = 0; e < E; ++e) {
    m = std::fmax(m, logits[e]);
    probs[e] = 1.0f / (1.0f + std::exp(-logits[e]));  // s_e, normalised below
    ssum += probs[e];
    choice[e] = probs[e] + (bias ? bias[e] : 0.0f);
  }
  const int64_t per = E / groups;
  for (int64_t g = 0; g < groups; ++g) {  // a group's score: its two largest choices
    int32_t two[2];
    top_indices(choice + g * per, per, std::min<int64_t>(2, per), two);
    gscore[g] = choice[g * per + two[0]] + (per > 1 ? choice[g * per + two[1]] : 0.0f);
  }
  top_indices(gscore, groups, topk_groups, gbest);
  for (int64_t g = 0; g < groups; ++g) {
    bool kept = false;
    for (int64_t q = 0; q < topk_groups; ++q) kept |= gbest[q] == g;
    if (!kept) std::fill(choice + g * per, choice + (g + 1) * per, 0.0f);
  }
  top_indices(choice, E, k, topk);
  double wsum = 0;
  for (int64_t j = 0; j < k; ++j) wsum += probs[topk[j]];
  const double div = renormalize ? wsum + 1e-20 : 1.0;
  for (int64_t j = 0; j < k; ++j) weights[j] = static_cast<float>(probs[topk[j]] / div * scale);
  for (int64_t e = 0; e < E; ++e) probs[e] = static_cast<float>(probs[e] / ssum);
  double lsum = 0;
  for (int64_t e = 0; e < E; ++e) lsum += std::exp(static_cast<double>(logits[e]) - m);
  return static_cast<float>(m + std::log(lsum));
}

RouterWindowStats router_window(const float* probs, int64_t probs_stride, const int32_t* topk, int64_t topk_stride,
                                const float* lse, int64_t lse_stride, int64_t T, int64_t E, int64_t k) {
  if (T <= 0 || E <= 0) return router_stats_from_sums(nullptr, nullptr, 0.0, T, E, k);
  std::vector<double> count(static_cast<size_t>(E), 0.0), psum(static_cast<size_t>(E), 0.0);
  double z = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) psum[e] += probs[t * probs_stride + e];
    for (int64_t r = 0; r < k; ++r) {
      const int32_t e = topk[t * topk_stride + r];
      if (e >= 0 && e < E) count[e] += 1.0;
    }
    const double l = lse[t * lse_stride];
    z += l * l;
  }
  return router_stats_from_sums(count.data(), psum.data(), z, T, E, k);
}

RouterWindowStats router_stats_from_sums(const double* count, const double* psum, double zsum, int64_t T, int64_t E,
                                         int64_t k) {
  RouterWindowStats s;
  s.load.assign(static_cast<size_t>(std::max<int64_t>(E, 0)), 0.0);
  s.importance.assign(static_cast<size_t>(std::max<int64_t>(E, 0)), 0.0);
  s.tokens = T;
  if (T <= 0 || E <= 0) return s;
  const double assignments = static_cast<double>(T * k);
  for (int64_t e = 0; e < E; ++e) {
    s.load[e] = count[e] / assignments;
    s.importance[e] = psum[e] / static_cast<double>(T);
    s.balance_loss += s.load[e] * s.importance[e];
    s.max_load = std::max(s.max_load, s.load[e]);
  }
  s.balance_loss *= static_cast<double>(E);
  s.z_loss = zsum / static_cast<double>(T);
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
