// Plain loops of ref_ffn.h: the router's softmax, top-k and log-sum-exp from their definitions, the
// SwiGLU and relu² MLPs, and the MoE sum over the chosen experts in ascending index (jamba-spec.md §3.9).
#include "engine/reference/ref_ffn.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/reference/ref_ops.h"

namespace hl::ref {

float router(const float* logits, int64_t E, int64_t k, float* probs, int32_t* topk) {
  double m = -INFINITY;
  for (int64_t e = 0; e < E; ++e) m = std::max(m, static_cast<double>(logits[e]));
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[e] - m);
  // Router probabilities p_e = softmax(logits)_e over all E experts (Fedus, Zoph & Shazeer 2022: the
  // importance P_i and load f_i of the balance loss are taken over these and the top-k below).
  for (int64_t e = 0; e < E; ++e) probs[e] = static_cast<float>(std::exp(logits[e] - m) / sum);
  // Top-k by probability, highest first; equal probabilities keep the lower index first.
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  std::copy(order.begin(), order.begin() + k, topk);
  // lse = ln Σ_e e^{logit_e}: the router z-loss is mean(lse²) (Zoph et al. 2022).
  return static_cast<float>(m + std::log(sum));
}

void swiglu(const MlpWeights& w, const float* x, float* y, double gate_mult, double down_mult) {
  const int64_t I = w.gate.rows;
  std::vector<float> g(static_cast<size_t>(I)), u(static_cast<size_t>(I));  // (I,) each
  linear(w.gate, x, g.data(), w.gate_bias);
  linear(w.up, x, u.data(), w.up_bias);
  for (int64_t i = 0; i < I; ++i) g[i] = silu(static_cast<float>(g[i] * gate_mult)) * u[i];
  linear(w.down, g.data(), y, w.down_bias);
  if (down_mult != 1.0)
    for (int64_t c = 0; c < w.down.rows; ++c) y[c] = static_cast<float>(y[c] * down_mult);
}

void relu2_mlp(const MlpWeights& w, const float* x, float* y) {
  const int64_t I = w.up.rows;
  std::vector<float> u(static_cast<size_t>(I));  // (I,)
  linear(w.up, x, u.data(), w.up_bias);
  for (int64_t i = 0; i < I; ++i) {
    const double r = std::max(0.0f, u[i]);  // relu(u)²
    u[i] = static_cast<float>(r * r);
  }
  linear(w.down, u.data(), y, w.down_bias);
}

float moe(const MoeWeights& w, int64_t k, bool renormalize, const float* x, float* y, float* probs, int32_t* topk) {
  const int64_t E = static_cast<int64_t>(w.experts.size()), H = w.router.cols;
  std::vector<float> logits(static_cast<size_t>(E));  // (E,)
  linear(w.router, x, logits.data());
  const float lse = router(logits.data(), E, k, probs, topk);
  std::vector<int32_t> chosen(topk, topk + k);
  std::sort(chosen.begin(), chosen.end());  // experts in ascending index (jamba-spec.md §3.9)
  double chosen_mass = 0;  // Σ of the k chosen probabilities
  for (int32_t e : chosen) chosen_mass += probs[e];
  const double div = renormalize ? chosen_mass : 1.0;
  std::vector<double> acc(static_cast<size_t>(H), 0.0);
  std::vector<float> ye(static_cast<size_t>(H));
  for (int32_t e : chosen) {
    swiglu(w.experts[e], x, ye.data());
    for (int64_t c = 0; c < H; ++c) acc[c] += static_cast<double>(probs[e]) / div * ye[c];
  }
  if (!w.shared.down.empty()) {  // the shared expert, unweighted (Granite's shared_mlp)
    swiglu(w.shared, x, ye.data());
    for (int64_t c = 0; c < H; ++c) acc[c] += ye[c];
  }
  for (int64_t c = 0; c < H; ++c) y[c] = static_cast<float>(acc[c]);
  return lse;
}

}  // namespace hl::ref
