// One attention row under the three normalizers of trace-format.md §2 (softmax, softmax-1 with a
// virtual null key of logit 0, sink with a learned logit s_h), computed stably, with the row's
// instruments: entropy over keys plus null share (Zhai et al. 2023 H(a_i) = −Σ a_ij log a_ij, extended by the
// null slot of Miller 2023; Xiao et al. 2023), normalized entropy, mass on keys, and the largest |logit| (Miller 2023; Xiao et al. 2023, Sun et al. 2024).
#pragma once
#include <cstdint>

#include "engine/io/config.h"

namespace hl {

struct AttnRowStats {
  float entropy = 0;       // nats, keys + null share
  float entropy_norm = 0;  // entropy / ln(n_keys + [normalizer != softmax]); 0 when that is ln 1
  float mass = 0;          // Σ_j p_j
  float p_null = 0;        // 1 − mass (0 for softmax)
  float max_abs_logit = 0; // max_j |z_j|
};

// z: (n,) logits of the visible keys; p: (n,) receives the probabilities. `null_logit` is used
// for Softmax1 (0) and Sink (s_h) and ignored for Softmax. Stats are computed when `stats` is non-null.
void attention_row(const float* z, int64_t n, Normalizer norm, float null_logit, float* p, AttnRowStats* stats);

}  // namespace hl
