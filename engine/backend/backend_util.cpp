#include "engine/backend/backend_util.h"

#include <cfloat>
#include <cmath>

namespace hl {

void index_layers(const JambaConfig& c, std::vector<int64_t>* kind_index, std::vector<int64_t>* moe_index,
                  int64_t* n_attn, int64_t* n_mamba, int64_t* n_moe) {
  const int64_t L = c.num_hidden_layers;
  *n_attn = *n_mamba = *n_moe = 0;
  kind_index->resize(L);
  moe_index->resize(L);
  for (int64_t i = 0; i < L; ++i) {
    (*kind_index)[i] = c.is_attention_layer(i) ? (*n_attn)++ : (*n_mamba)++;
    (*moe_index)[i] = c.is_moe_layer(i) ? (*n_moe)++ : -1;
  }
}

void flag_nonfinite_head(TokenTrace& r, const Model& m) {
  const int64_t L = m.config.num_hidden_layers;
  flag_nonfinite_logits(r, L);
  if (r.nonfinite_layer != nonfinite_lm_head(L)) return;
  const float limit = FLT_MAX / std::sqrt(static_cast<float>(m.config.hidden_size));
  for (float w : m.w.final_norm)
    if (!(std::fabs(w) <= limit)) {  // NaN, Inf or large enough to overflow
      r.nonfinite_layer = nonfinite_final_norm(L);
      return;
    }
}

}  // namespace hl
