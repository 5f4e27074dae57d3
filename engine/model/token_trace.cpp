// What every backend shares around its records (token_trace.h): the run-length bound
// (RunOptions::max_context) checked at the top of forward(), so a long generation stops with a
// message instead of growing the KV cache until memory runs out (not the memory budget of loading,
// model/loader.cpp), the sizing of a fresh record, and the non-finite flags of the final norm and
// the LM head with the refusal to sample from non-finite logits.
#include "engine/model/token_trace.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "engine/core/error.h"
#include "engine/probes/logit_probe.h"
#include "engine/probes/memory.h"
#include "engine/trace/trace_fields.h"

namespace hl {

int64_t context_limit(const RunOptions& opts, const JambaConfig& c) {
  return opts.max_context > 0 ? opts.max_context : c.max_position_embeddings;
}

void check_context(const RunOptions& opts, const JambaConfig& c, int64_t position, int64_t S) {
  // Positions are stored as int32 (TokenTrace::position), so no setting reaches past that.
  constexpr int64_t kMaxPositions = std::numeric_limits<int32_t>::max();
  if (opts.max_context < 0 || opts.max_context > kMaxPositions)
    throw Error("max_context " + std::to_string(opts.max_context) + " is out of range [0, " +
                std::to_string(kMaxPositions) + "] (0: config.json max_position_embeddings)");
  const int64_t limit = context_limit(opts, c);
  if (S > kMaxPositions - position || position + S > limit) {
    const std::string source = opts.max_context > 0
                                   ? "the max_context setting"
                                   : "config.json max_position_embeddings, the default of the max_context setting";
    throw Error("context length limit reached: the run holds " + std::to_string(position) + " tokens, " +
                std::to_string(S) + " more would pass the limit of " + std::to_string(limit) + " tokens (" + source +
                "); raise it with --max-context N (RunOptions::max_context) or start a new run");
  }
}

void init_token_trace(TokenTrace& r, const JambaConfig& c, const LayerSchedule& s, int64_t registers,
                      const RunOptions& opts, int32_t token, int64_t t) {
  r.token_id = token;
  r.position = static_cast<int32_t>(t);
  r.kv_cache_bytes = kv_cache_bytes(c, s.num_attention(), registers + t + 1, 4);
  r.ssm_state_bytes = state_bytes(c, s, 4);
  r.nonfinite_layer = -1;
  // Every vector field the run carries, sized from the field table (assign keeps a reused
  // record's capacity: no allocation once the record has held a token of this length).
  const TraceDims d = TraceDims::of(c, s);
  for (const TraceField& f : trace_fields()) {
    if (f.f32) r.*f.f32 = 0;  // a derived scalar: set by finish_record when carried
    if (f.shape == FieldShape::Scalar || !carried(f, opts)) continue;
    int64_t n = token_size(f, d);
    if (f.shape == FieldShape::Ragged) n *= attn_row_len(registers, t);
    if (f.fvec)
      (r.*f.fvec).assign(static_cast<size_t>(n), 0.0f);
    else
      (r.*f.ivec).assign(static_cast<size_t>(n), 0);
  }
}

std::string nonfinite_where(int32_t layer, int64_t L) {
  if (layer == nonfinite_final_norm(L)) return "the final norm";
  if (layer == nonfinite_lm_head(L)) return "the LM head";
  return "layer " + std::to_string(layer);
}

void flag_nonfinite_logits(TokenTrace& r, int64_t L) {
  if (r.nonfinite_layer < 0 && first_nonfinite(r.logits.data(), r.logits.size()) >= 0)
    r.nonfinite_layer = nonfinite_lm_head(L);
}

void finish_record(TokenTrace& r, int64_t L, const RunOptions& opts) {
  flag_nonfinite_logits(r, L);
  for (const TraceField& f : trace_fields())
    if (f.derive && carried(f, opts)) f.derive(r);
}

void require_finite_logits(const TokenTrace& r, int64_t L) {
  const int64_t i = first_nonfinite(r.logits.data(), r.logits.size());
  if (i < 0) return;
  const float v = r.logits[static_cast<size_t>(i)];
  const std::string what = std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
  const std::string where = r.nonfinite_layer >= 0 ? "; non-finite from " + nonfinite_where(r.nonfinite_layer, L) : "";
  throw Error("cannot sample the token after position " + std::to_string(r.position) + ": its logits are not finite (" +
              what + " at token id " + std::to_string(i) + where + ")");
}

}  // namespace hl
