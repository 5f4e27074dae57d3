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
#include "engine/probes/memory.h"

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
  const int64_t nh = c.num_attention_heads, L = s.size();
  const int64_t An = s.num_attention(), Mn = s.num_ssm(), Xn = s.num_moe();
  r.token_id = token;
  r.position = static_cast<int32_t>(t);
  r.logits.assign(static_cast<size_t>(c.vocab_size), 0.0f);
  r.kv_cache_bytes = kv_cache_bytes(c, An, registers + t + 1, 4);
  r.ssm_state_bytes = ssm_state_bytes(c, Mn, 4);
  r.nonfinite_layer = -1;
  if (!opts.instruments) return;
  const size_t an = static_cast<size_t>(An * nh);
  r.attn_entropy.assign(an, 0.0f);
  r.attn_entropy_norm.assign(an, 0.0f);
  r.attn_mass.assign(an, 0.0f);
  r.attn_max_logit.assign(an, 0.0f);
  r.ssm_delta_mean.assign(static_cast<size_t>(Mn), 0.0f);
  r.router_probs.assign(static_cast<size_t>(Xn * c.num_experts), 0.0f);
  r.router_topk.assign(static_cast<size_t>(Xn * c.num_experts_per_tok), 0);
  r.router_lse.assign(static_cast<size_t>(Xn), 0.0f);
  r.rank1_distance.assign(static_cast<size_t>(L + 1), 0.0f);
  r.resid_max_abs.assign(static_cast<size_t>(L + 1), 0.0f);
  if (!opts.full) return;
  const size_t md = static_cast<size_t>(Mn * c.mamba_inner());
  r.ssm_delta.assign(md, 0.0f);
  r.ssm_retained.assign(md, 0.0f);
  r.attn_rows.assign(an * static_cast<size_t>(registers + t + 2), 0.0f);
}

std::string nonfinite_where(int32_t layer, int64_t L) {
  if (layer == nonfinite_final_norm(L)) return "the final norm";
  if (layer == nonfinite_lm_head(L)) return "the LM head";
  return "layer " + std::to_string(layer);
}

namespace {

int64_t first_nonfinite(const std::vector<float>& x) {
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace

void flag_nonfinite_logits(TokenTrace& r, int64_t L) {
  if (r.nonfinite_layer < 0 && first_nonfinite(r.logits) >= 0) r.nonfinite_layer = nonfinite_lm_head(L);
}

void require_finite_logits(const TokenTrace& r, int64_t L) {
  const int64_t i = first_nonfinite(r.logits);
  if (i < 0) return;
  const float v = r.logits[static_cast<size_t>(i)];
  const std::string what = std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf");
  const std::string where = r.nonfinite_layer >= 0 ? "; non-finite from " + nonfinite_where(r.nonfinite_layer, L) : "";
  throw Error("cannot sample the token after position " + std::to_string(r.position) + ": its logits are not finite (" +
              what + " at token id " + std::to_string(i) + where + ")");
}

}  // namespace hl
