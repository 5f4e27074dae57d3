// KV-cache and state byte formulas (see memory.h). Checked against Lieber et al. 2024: Jamba-v0.1 at 262,144
// tokens in 2-byte elements holds 4 GiB of KV cache, 32 GiB if every layer were attention.
#include "engine/probes/memory.h"

#include <unistd.h>

#include "engine/model/mixer_ops.h"

namespace hl {

int64_t kv_cache_bytes(const JambaConfig& c, int64_t attention_layers, int64_t tokens, int64_t bytes_per_element) {
  return 2 * attention_layers * c.num_key_value_heads * c.head_dim() * tokens * bytes_per_element;
}

int64_t ssm_state_bytes(const JambaConfig& c, int64_t mamba_layers, int64_t bytes_per_element) {
  // The family's SSM kind: Mamba-2 for Bamba (mixer_mamba2.cpp), Mamba-1 for Jamba (mixer_mamba1.cpp).
  const MixerKind kind = c.family == Family::Jamba ? MixerKind::Mamba1 : MixerKind::Mamba2;
  return mamba_layers * mixer_ops(kind).state_elements(c) * bytes_per_element;
}

int64_t state_bytes(const JambaConfig& c, const LayerSchedule& s, int64_t bytes_per_element) {
  int64_t n = 0;  // model/mixer_<kind>.cpp
  for (const LayerSpec& l : s.layers()) n += mixer_ops(l.mixer).state_elements(c) * bytes_per_element;
  return n;
}

MemoryReport memory_report(const JambaConfig& c, const LayerSchedule& s, int64_t context, int64_t bytes_per_element) {
  MemoryReport r;
  r.context = context;
  r.bytes_per_element = bytes_per_element;
  const int64_t L = s.size();
  r.kv_bytes = kv_cache_bytes(c, s.num_attention(), context, bytes_per_element);
  r.kv_bytes_all_attention = kv_cache_bytes(c, L, context, bytes_per_element);
  r.kv_bytes_all_mamba = 0;
  r.state_bytes = state_bytes(c, s, bytes_per_element);
  r.state_bytes_all_mamba = ssm_state_bytes(c, L, bytes_per_element);
  return r;
}

}  // namespace hl
