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

#include "engine/backend/pipeline.h"
#include "engine/model/intermediates.h"
#include "engine/model/token_trace.h"
#include "engine/model/weights.h"

namespace hl {

class Backend;

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

// The row of one head, or with head −1 the mean |M| over the heads (Mamba-1: channels).
void hidden_attention_head_or_mean_row(const SsmRows& in, int64_t head, int64_t t, float* out);
// The first row r0 ≤ r1 such that rows r0..r1 of `head` (−1: the mean over heads) cost at most `budget`
// multiply-adds in all, counting (r + 1)·N per head for row r; r1 itself always counts. The app draws
// the rows of such a window when the whole matrix up to r1 would cost too much.
int64_t hidden_attention_window_start(const SsmRows& in, int64_t head, int64_t r1, double budget);
// The app's budget for the rows drawn besides the current one (about 0.1–0.3 s on one core).
inline constexpr double kHiddenWindowBudget = 1.5e8;

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

// Follows a run on a CPU backend of its own, whatever backend the run itself uses, and keeps every SSM
// layer's B, C and Δ rows (the collector above) so that rows of any token can be computed on demand:
// the app's attention view asks it for the scrubbed token. Tokens arrive as one prefill of what the
// run added since the last call (prefill agrees with decode to 1e-5, Backend::forward). The model
// and run options must be those of the run followed (registers, normaliser, adapter merged).
class HiddenAttentionTracker {
 public:
  HiddenAttentionTracker(std::shared_ptr<const Model> model, const RunOptions& opts);
  // One stage of a pipeline (pipeline.h): `model` loaded for ranges[link->rank()], followed on a CPU
  // stage backend in step with the other stages' trackers (every stage constructs and feeds its own
  // with the same tokens); only the stage's SSM layers get rows.
  HiddenAttentionTracker(std::shared_ptr<const Model> model, const RunOptions& opts, StageLink* link,
                         std::vector<LayerRange> ranges);
  ~HiddenAttentionTracker();
  // The run's first n tokens: feeds ids[fed()..n) (ids[0..fed()) must be the ones already fed).
  void follow(const int32_t* ids, int64_t n);
  int64_t fed() const;
  int registers() const;  // rows before token 0
  const SsmRows& layer(int64_t ssm_index) const { return collect_.layer(ssm_index); }

 private:
  HiddenAttentionCollector collect_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace hl
