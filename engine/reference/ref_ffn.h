// The reference feed-forwards (jamba-spec.md §3.8 dense SwiGLU, §3.9 MoE) and the router with its
// instruments (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022), one token at a time as plain loops.
// Not the fast path (cpu_backend.cpp, probes/router_probe.h): the oracle they are checked against.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/layer_schedule.h"
#include "engine/model/weights.h"

namespace hl::ref {

// logits (E,) → probs (E,) = softmax in fp64, topk (k,) the k most probable experts, highest first
// (ties: the lower index); returns the log-sum-exp of the logits (the z-loss's term).
float router(const float* logits, int64_t E, int64_t k, float* probs, int32_t* topk);

// y (H,) = down · (silu(gate · x) ⊙ (up · x)) for x (H,).
// gate_mult scales the gate inside the SiLU, down_mult the output (Falcon-H1's mlp_multipliers).
void swiglu(const MlpWeights& w, const float* x, float* y, double gate_mult = 1.0, double down_mult = 1.0);
// y (H,) = down · relu(up · x + b_up)² + b_down for x (H,): Nemotron-H's MLP (HF NemotronHMLP, act "relu2"; So et
// al. 2021, "Primer"), no gate.
void relu2_mlp(const MlpWeights& w, const float* x, float* y);
// The dense MLP a layer's FfnParams::gated names: swiglu or relu2_mlp.
inline void mlp(const MlpWeights& w, const FfnParams& p, const float* x, float* y) {
  p.gated ? swiglu(w, x, y, p.gate_multiplier, p.down_multiplier) : relu2_mlp(w, x, y);
}

// DeepSeek-V3's sigmoid router (Nemotron-H; HF DeepseekV3MoE.route_tokens_to_experts), from its
// definition with full sorts: s = sigmoid(logits), choice = s + bias (bias empty: 0), groups scored by
// their two largest choices, experts outside the p.topk_groups best groups set to 0, the k largest
// choices (ties: lower index), weights their s (÷ (Σ + 1e-20) when p.renormalize) × p.routed_scaling.
// probs (E,) = s / Σ s (the instruments' view); returns the lse of the logits.
float sigmoid_router(const float* logits, const std::vector<float>& bias, const FfnParams& p, float* probs,
                     int32_t* topk, float* weights);

// One token through an MoE block: router, the top-k experts in ascending index, each output scaled by
// its weight and summed, plus the shared expert's output when w has one. The softmax router (Jamba,
// Granite): the weight is the probability (Jamba: not renormalised, jamba-spec.md §3.9; p.renormalize:
// divided by the sum of the k chosen, Granite's top-k gating), probs (E,) the softmax over all E. The
// sigmoid router (p.sigmoid_router, Nemotron-H): sigmoid_router's weights; relu² experts
// (p.gated false) between the latent projections when w has them. x (H,) → y (H,); topk (k,); the
// return value the lse.
float moe(const MoeWeights& w, const FfnParams& p, const float* x, float* y, float* probs, int32_t* topk);

}  // namespace hl::ref
