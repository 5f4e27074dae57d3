// MoE router instruments (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022; jamba-spec.md §3.9, trace-format.md §3): fp32 softmax over all E
// experts, top-k by probability (ties: lower index first; weights NOT renormalised), log-sum-exp of
// the logits; and the derived window statistics: load f_i over the window's T·k assignments,
// importance P_i, balance loss N·Σ f_i P_i (N = E), z-loss mean(lse²), and the largest load.
#pragma once
#include <cstdint>
#include <vector>

namespace hl {

// logits (E,) → probs (E,), topk (k,) expert indices highest probability first; returns lse.
float route(const float* logits, int64_t E, int64_t k, float* probs, int32_t* topk);

// DeepSeek-V3's router (Liu et al. 2024; HF DeepseekV3MoE.route_tokens_to_experts, Nemotron-H's MoE):
// scores s = sigmoid(logits); the choice c = s + bias (bias (E,) or null); each of `groups` equal expert
// groups scored by the sum of its two largest c; the experts outside the `topk_groups` best groups
// get c = 0 (as HF masks them); topk (k,) the k largest c, highest first (ties: lower index first);
// weights (k,) their s, divided by (Σ + 1e-20) when `renormalize`, times `scale`. probs (E,) gets the
// instruments' view: the normalised affinities s_e / Σ s. Returns the log-sum-exp of the logits.
float route_sigmoid(const float* logits, const float* bias, int64_t E, int64_t k, int64_t groups, int64_t topk_groups,
                    bool renormalize, double scale, float* probs, int32_t* topk, float* weights);

struct RouterWindowStats {
  std::vector<double> load;        // (E,) f_i, Σ f_i = 1
  std::vector<double> importance;  // (E,) P_i = mean probability
  double balance_loss = 0;         // E · Σ f_i P_i
  double z_loss = 0;               // mean of lse²
  double max_load = 0;             // max_i f_i
  int64_t tokens = 0;
};

// Over T tokens of one MoE layer: probs (T, E) row stride `probs_stride`, topk (T, k) stride
// `topk_stride`, lse (T,) stride `lse_stride` — strides let callers pass one layer of a (T, X_n, ·) tensor.
RouterWindowStats router_window(const float* probs, int64_t probs_stride, const int32_t* topk, int64_t topk_stride,
                                const float* lse, int64_t lse_stride, int64_t T, int64_t E, int64_t k);

// The same statistics from the window's sums: count (E,) top-k selections of each expert, psum (E,)
// its summed probabilities, zsum Σ lse², over T tokens routed to k experts each. router_window, the
// app's windows (sessions/run_stats.h) and sweep files (sessions/sweep_file.h) all end here.
RouterWindowStats router_stats_from_sums(const double* count, const double* psum, double zsum, int64_t T, int64_t E,
                                         int64_t k);

// Largest max_i f_i over every contiguous window of `window` tokens (the worst burst of imbalance).
double router_max_window_load(const int32_t* topk, int64_t topk_stride, int64_t T, int64_t E, int64_t k,
                              int64_t window);

}  // namespace hl
