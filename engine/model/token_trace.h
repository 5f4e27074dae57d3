// TokenTrace: the small value record the forward pass leaves per token (DESIGN.md), holding every
// instrument of trace-format.md §3. GUI views and sessions consume it; the trace writer stacks it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"

namespace hl {

struct RunOptions {
  bool normalizer_override = false;  // false: each layer as trained
  Normalizer normalizer = Normalizer::Softmax;
  int registers = -1;                // -1: the trained count
  bool instruments = true;           // compute the per-token instruments
  bool full = false;                 // also attn_rows, ssm_delta, ssm_retained
  // Most tokens a run may hold (registers excluded); 0: config.json's max_position_embeddings
  // (262144 when the file has none). Bounds the KV cache and the records; see check_context.
  int64_t max_context = 0;
};

// The context bound of a run: opts.max_context, or config.json's max_position_embeddings.
int64_t context_limit(const RunOptions& opts, const JambaConfig& c);
// Throws Error when feeding S more tokens after `position` would pass context_limit, naming the
// limit, where it comes from and how to raise it. Every backend calls it at the top of forward().
void check_context(const RunOptions& opts, const JambaConfig& c, int64_t position, int64_t S);

// Shapes use the trace-format.md §2 notation: A_n attention, M_n Mamba, X_n MoE layers.
struct TokenTrace {
  int32_t token_id = 0;
  int32_t position = 0;                 // t (registers excluded)
  std::vector<float> logits;            // (V,)
  float logit_entropy = 0;              // entropy in nats of softmax(logits) (derived, probes/logit_probe.h)
  std::vector<float> attn_entropy;      // (A_n, nh)
  std::vector<float> attn_entropy_norm; // (A_n, nh)
  std::vector<float> attn_mass;         // (A_n, nh)
  std::vector<float> attn_max_logit;    // (A_n, nh)
  std::vector<float> ssm_delta_mean;    // (M_n,)
  std::vector<float> router_probs;      // (X_n, E)
  std::vector<int32_t> router_topk;     // (X_n, k)
  std::vector<float> router_lse;        // (X_n,)
  std::vector<float> rank1_distance;    // (L+1,)
  std::vector<float> resid_max_abs;     // (L+1,)
  // Where a NaN or Inf first appeared in this token's pass (README "Trace file", trace-format.md §3):
  // i in [0, L) the output of layer i, L the final norm's output, L + 1 the logits (LM head)
  // while everything before them stayed finite; −1 when every value is finite.
  int32_t nonfinite_layer = -1;
  int64_t kv_cache_bytes = 0;
  int64_t ssm_state_bytes = 0;
  double step_seconds = 0;              // wall time of the forward step that produced it
  // With RunOptions::full:
  std::vector<float> ssm_delta;         // (M_n, Di)
  std::vector<float> ssm_retained;      // (M_n, Di)
  std::vector<float> attn_rows;         // (A_n, nh, n_reg + t + 1 + 1): keys so far, then p_null
};

// nonfinite_layer's values for the final norm and the LM head of an L-layer model.
inline int32_t nonfinite_final_norm(int64_t L) {
  return static_cast<int32_t>(L);
}
inline int32_t nonfinite_lm_head(int64_t L) {
  return static_cast<int32_t>(L + 1);
}
// "layer 3", "the final norm", "the LM head" for a nonfinite_layer value >= 0.
std::string nonfinite_where(int32_t nonfinite_layer, int64_t L);
// Sets r.nonfinite_layer to L + 1 when it is still −1 and a logit is NaN or Inf.
void flag_nonfinite_logits(TokenTrace& r, int64_t L);
// The one step after the logits of a record are in, the same on every backend and the reference:
// flag_nonfinite_logits, then the table's derived fields. A host-side instrument of the logits is a row of the
// trace field table with its derive function, and needs no edit here or in any backend.
// The derived fields are instruments: computed when opts.instruments is on (0 otherwise).
void finish_record(TokenTrace& r, int64_t L, const RunOptions& opts);
// Generation samples the next token from r's logits: throws Error (one line: the position, the first
// non-finite logit and where the values went non-finite) when any of them is NaN or Inf.
void require_finite_logits(const TokenTrace& r, int64_t L);

// Sizes and zero-fills `r` for `token` at position t, as every backend leaves it before its forward
// pass writes the values: logits, the KV / state byte counters (fp32 cache and state, as every
// backend keeps them), nonfinite_layer −1, the instruments when opts.instruments and the --full
// tensors when opts.full too. The layer axes (A_n, M_n, X_n) are the schedule's counts; `registers`
// is the run's register count. Fields a backend does not reach stay zero.
void init_token_trace(TokenTrace& r, const JambaConfig& c, const LayerSchedule& s, int64_t registers,
                      const RunOptions& opts, int32_t token, int64_t t);

}  // namespace hl
