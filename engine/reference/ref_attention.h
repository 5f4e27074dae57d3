// The reference attention (jamba-spec.md §3.4; trace-format.md §2) as plain loops: one query row at a
// time under the three normalizers, the row's instruments straight from their definitions, and one
// token through an attention mixer with its KV cache. Not the fast path (backend/cpu/cpu_mixers.cpp,
// probes/attention_probe.h): the oracle they are checked against.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/io/config.h"
#include "engine/model/weights.h"

namespace hl::ref {

// The instruments of one attention row (trace-format.md §3).
struct AttnRow {
  float entropy = 0;        // attn_entropy
  float entropy_norm = 0;   // attn_entropy_norm
  float mass = 0;           // attn_mass
  float p_null = 0;         // the last column of attn_rows
  float max_abs_logit = 0;  // attn_max_logit
};

// z (n,) logits of the visible keys → p (n,) and the row's instruments. `null_logit` is s_h for
// Sink, ignored otherwise (0 for Softmax1, absent for Softmax).
AttnRow attention_row(const float* z, int64_t n, Normalizer norm, float null_logit, float* p);

// The KV cache of one attention layer: rows of registers, then tokens.
struct KvCache {
  std::vector<float> k, v;  // (len, nkv*hd) each
  int64_t len = 0;
};

// One query per head over n cached keys (GQA: query head h reads kv head h / (nh/nkv)): q (nh*hd,),
// K, V (n, nkv*hd) → heads (nh*hd,) = Σ_j p_j v_j per head, rows (nh,) the row instruments, probs
// (nh, n) each head's weights when non-null. z_j = q·k_j / sqrt(hd); null_logits (nh,) s_h.
// `scale` multiplies q·k (0: 1/√hd; Granite's attention_multiplier otherwise).
void attention_heads(const float* q, const float* K, const float* V, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                     Normalizer norm, const float* null_logits, float* heads, AttnRow* rows, float* probs,
                     double scale = 0);

// One token through an attention mixer: x (H,) → y (H,), appending its key and value to `kv`.
// heads (nh*hd,) receives Σ_j p_j v_j before o_proj; rows (nh,) the instruments of each head's row;
// probs, when non-null, (nh, len) each head's weights over the keys. null_logits (nh,) s_h.
void attention_token(const AttentionWeights& w, const JambaConfig& c, Normalizer norm, const float* null_logits,
                     const float* x, KvCache& kv, float* heads, float* y, AttnRow* rows, std::vector<float>* probs);

}  // namespace hl::ref
