#include "engine/backend/backend_util.h"

#include <cfloat>
#include <cmath>

namespace hl {

void flag_nonfinite_head(TokenTrace& r, const Model& m, const RunOptions& opts) {
  const int64_t L = m.config.num_hidden_layers;
  finish_record(r, L, opts);
  if (r.nonfinite_layer != nonfinite_lm_head(L)) return;
  const float limit = FLT_MAX / std::sqrt(static_cast<float>(m.config.hidden_size));
  for (float w : m.w.final_norm)
    if (!(std::fabs(w) <= limit)) {  // NaN, Inf or large enough to overflow
      r.nonfinite_layer = nonfinite_final_norm(L);
      return;
    }
}

}  // namespace hl
