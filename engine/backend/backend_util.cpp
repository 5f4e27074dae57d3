#include "engine/backend/backend_util.h"

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

}  // namespace hl
