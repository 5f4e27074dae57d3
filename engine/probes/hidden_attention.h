// The hidden attention of a Mamba-2 layer (Ali, Zimerman & Wolf 2024, "The Hidden Attention of Mamba
// Models"; the state-space duality of Dao & Gu 2024): unrolling the recurrence
// S_t = exp(Δ_t A) S_{t−1} + Δ_t x_t B_tᵀ, y_t = S_t C_t + D x_t gives, for head h with B/C group g,
//   y_t = Σ_{s≤t} M_h[t, s] x_s + D_h x_t,   M_h[t, s] = (C_t · B_s) · exp(A_h Σ_{r=s+1..t} Δ_{r,h}) · Δ_{s,h}.
// Row t of M_h is computed on demand from the per-row B, C and Δ of a run, which the collector takes
// from the backend's named intermediates (ssm_conv: x|B|C after the conv; ssm_delta: Δ per head)
// and A from the weights: O(t · N) per row and head. Rows are run rows (registers first, then tokens),
// the key axis of attn_rows. A Mamba-1 layer (Jamba) has a decay per channel d and state entry n:
//   M_d[t, s] = Σ_n C_t[n] B_s[n] exp(A[d, n] Σ_{r=s+1..t} Δ_{r,d}) Δ_{s,d},   y_t[d] = Σ_s M_d[t, s] u_s[d] + D_d u_t[d];
// its "heads" are its Di channels, and its B and C (after Jamba's inner norms) are recomputed from the
// reported ssm_conv rows u with the layer's x_proj and norms. Definitions: trace-format.md §5.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model/intermediates.h"
#include "engine/model/weights.h"

namespace hl {

// One Mamba-2 layer's inputs to its hidden attention over the rows seen so far.
struct SsmRows {
  bool mamba1 = false;           // Mamba-1: "heads" are the channels, A per channel and state entry
  int64_t nh = 0, N = 0, G = 1;  // heads (Mamba-1: Di), state size, B/C groups (head h reads group h / (nh / G))
  std::vector<float> A;          // (nh,) = −exp(A_log); Mamba-1 (Di, N)
  std::vector<float> B, C;       // (rows, G·N)
  std::vector<float> delta;      // (rows, nh) Δ after the softplus and clamp
  int64_t rows() const { return nh > 0 ? static_cast<int64_t>(delta.size()) / nh : 0; }
};

// Row t of M_h: out[s] for s = 0..t (t + 1 floats). Requires 0 ≤ h < nh, 0 ≤ t < rows().
void hidden_attention_row(const SsmRows& in, int64_t h, int64_t t, float* out);
// The layer's row t aggregated over its heads (Mamba-1: channels): out[s] = mean_h |M_h[t, s]|, the heads
// spread over the thread pool.
void hidden_attention_mean_abs_row(const SsmRows& in, int64_t t, float* out);

// Statistics of one row as the attention rows have them (trace-format.md §5): the row's |M| normalised
// to sum 1 (all zero: uniform), its entropy in nats, that entropy ÷ ln(n) (0 for n = 1), and the share
// of the first key.
struct HiddenRowStats {
  double entropy = 0, entropy_norm = 0, first_mass = 0, abs_sum = 0;
};
HiddenRowStats hidden_row_stats(const float* row, int64_t n);

// Collects SsmRows for every Mamba-2 part of a model from the intermediates a backend reports while it
// runs (the CPU backend and the reference forward report both names). Attach observer() before
// start(); each start() of the backend begins a new sequence, so call reset() with it.
class HiddenAttentionCollector {
 public:
  explicit HiddenAttentionCollector(std::shared_ptr<const Model> model);
  IntermediateObserver observer();
  void reset();
  // The rows of SSM layer `ssm_index` (the M_n axis). Throws Error for an index out of range.
  const SsmRows& layer(int64_t ssm_index) const;

 private:
  void take(const Intermediate& im);
  std::shared_ptr<const Model> model_;
  std::vector<SsmRows> layers_;  // per SSM layer; nh 0 for a non-Mamba-2 one
};

}  // namespace hl
