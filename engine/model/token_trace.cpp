// The run-length bound of token_trace.h (RunOptions::max_context): one check shared by every
// backend's forward(), so a long generation stops with a message instead of growing the KV cache
// until memory runs out. Not the memory budget of loading (model/loader.cpp).
#include "engine/model/token_trace.h"

#include <cstdint>
#include <limits>
#include <string>

#include "engine/core/error.h"

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

}  // namespace hl
