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

float sigmoid_router(const float* logits, const std::vector<float>& bias, const FfnParams& p, float* probs,
                     int32_t* topk, float* weights) {
  const int64_t E = p.experts, K = p.top_k, G = p.groups, per = E / G;
  std::vector<float> s(static_cast<size_t>(E)), choice(static_cast<size_t>(E));  // sigmoids in fp32, as HF's
  double ssum = 0, m = -INFINITY;
  for (int64_t e = 0; e < E; ++e) {
    s[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(logits[e]))));
    choice[e] = s[e] + (bias.empty() ? 0.0f : bias[e]);
    ssum += s[e];
    m = std::max(m, static_cast<double>(logits[e]));
  }
  // Descending order of v over [0, n), equal values keeping the lower index first.
  auto order = [](const std::vector<float>& v) {
    std::vector<int32_t> o(v.size());
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
    return o;
  };
  std::vector<float> group_score(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) {
    std::vector<float> members(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    const std::vector<int32_t> o = order(members);
    group_score[g] = members[o[0]] + (per > 1 ? members[o[1]] : 0.0f);
  }
  const std::vector<int32_t> gorder = order(group_score);
  for (int64_t r = p.topk_groups; r < G; ++r)  // the groups not kept: their experts' choice is 0
    std::fill(choice.begin() + gorder[r] * per, choice.begin() + (gorder[r] + 1) * per, 0.0f);
  const std::vector<int32_t> eorder = order(choice);
  double wsum = 0;
  for (int64_t j = 0; j < K; ++j) {
    topk[j] = eorder[j];
    wsum += s[eorder[j]];
  }
  for (int64_t j = 0; j < K; ++j) {
    const double sj = s[topk[j]];
    weights[j] = static_cast<float>((p.renormalize ? sj / (wsum + 1e-20) : sj) * p.routed_scaling);
  }
  for (int64_t e = 0; e < E; ++e) probs[e] = static_cast<float>(s[e] / ssum);
  double lsum = 0;
  for (int64_t e = 0; e < E; ++e) lsum += std::exp(logits[e] - m);
  return static_cast<float>(m + std::log(lsum));
}

float moe(const MoeWeights& w, const FfnParams& p, const float* x, float* y, float* probs, int32_t* topk) {
  const int64_t E = static_cast<int64_t>(w.experts.size()), H = w.router.cols, k = p.top_k;
  std::vector<float> logits(static_cast<size_t>(E)), wf(static_cast<size_t>(k));  // (E,), (k,)
  std::vector<double> weight(static_cast<size_t>(k));                               // (k,)
  linear(w.router, x, logits.data());
  float lse = 0;
  if (p.sigmoid_router) {
    lse = sigmoid_router(logits.data(), w.router_bias, p, probs, topk, wf.data());
    std::copy(wf.begin(), wf.end(), weight.begin());
  } else {
    lse = router(logits.data(), E, k, probs, topk);
    double chosen_mass = 0;  // Σ of the k chosen probabilities
    for (int64_t j = 0; j < k; ++j) chosen_mass += probs[topk[j]];
    for (int64_t j = 0; j < k; ++j) weight[j] = probs[topk[j]] / (p.renormalize ? chosen_mass : 1.0);
  }
  // The experts' input: x, or its latent projection (Nemotron-H's fc1_latent_proj).
  const bool latent = !w.latent_in.empty();
  const int64_t Hin = latent ? w.latent_in.rows : H;
  std::vector<float> xin(x, x + H);
  if (latent) {
    xin.resize(static_cast<size_t>(Hin));
    linear(w.latent_in, x, xin.data(), w.latent_in_bias);
  }
  std::vector<int32_t> chosen(static_cast<size_t>(k));  // positions in topk, by ascending expert index
  std::iota(chosen.begin(), chosen.end(), 0);
  std::sort(chosen.begin(), chosen.end(), [&](int32_t a, int32_t b) { return topk[a] < topk[b]; });
  std::vector<double> acc(static_cast<size_t>(Hin), 0.0);
  std::vector<float> ye(static_cast<size_t>(std::max(H, Hin)));
  const FfnParams expert{.gated = p.gated};
  for (int32_t j : chosen) {  // experts in ascending index (jamba-spec.md §3.9)
    mlp(w.experts[topk[j]], expert, xin.data(), ye.data());
    for (int64_t c = 0; c < Hin; ++c) acc[c] += weight[j] * ye[c];
  }
  std::vector<float> out(static_cast<size_t>(H));
  if (latent) {  // fc2_latent_proj on the weighted sum
    std::vector<float> sum(acc.begin(), acc.end());
    linear(w.latent_out, sum.data(), out.data(), w.latent_out_bias);
  } else {
    for (int64_t c = 0; c < H; ++c) out[c] = static_cast<float>(acc[c]);
  }
  if (!w.shared.down.empty()) {  // the shared expert on x, unweighted (Granite's shared_mlp, Nemotron-H's)
    mlp(w.shared, expert, x, ye.data());
    for (int64_t c = 0; c < H; ++c) out[c] += ye[c];
  }
  std::copy(out.begin(), out.end(), y);
  return lse;
}

}  // namespace hl::ref
