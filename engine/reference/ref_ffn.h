// The reference feed-forwards (jamba-spec.md §3.8 dense SwiGLU, §3.9 MoE) and the router with its
// instruments (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022), one token at a time as plain loops.
// Not the fast path (cpu_backend.cpp, probes/router_probe.h): the oracle they are checked against.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/model/weights.h"

namespace hl::ref {

// logits (E,) → probs (E,) = softmax in fp64, topk (k,) the k most probable experts, highest first
// (ties: the lower index); returns the log-sum-exp of the logits (the z-loss's term).
float router(const float* logits, int64_t E, int64_t k, float* probs, int32_t* topk);

// y (H,) = down · (silu(gate · x) ⊙ (up · x)) for x (H,).
void swiglu(const MlpWeights& w, const float* x, float* y);

// One token through an MoE block: router, the top-k experts in ascending index, each output scaled by
// its probability (not renormalised, jamba-spec.md §3.9) and summed. x (H,) → y (H,); probs (E,),
// topk (k,), the return value the lse.
float moe(const MoeWeights& w, int64_t k, const float* x, float* y, float* probs, int32_t* topk);

}  // namespace hl::ref
