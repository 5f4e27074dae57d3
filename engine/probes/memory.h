// Memory instrument (Lieber et al. 2024, Gu & Dao 2023, trace-format.md §3–§4): bytes of the attention KV cache and of
// the Mamba state for a config at a context length and element size, for the model itself, its
// all-attention counterfactual and a pure-Mamba stack of the same depth.
#pragma once
#include <cstdint>

#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"

namespace hl {

// 2 · A_n · nkv · head_dim · tokens · bytes.
int64_t kv_cache_bytes(const JambaConfig& c, int64_t attention_layers, int64_t tokens, int64_t bytes_per_element);
// Per SSM layer of the family's kind its state elements (Mamba-1: Di·d_conv + Di·d_state; Mamba-2:
// (Di + 2·G·N)·d_conv + Di·d_state), times bytes.
int64_t ssm_state_bytes(const JambaConfig& c, int64_t mamba_layers, int64_t bytes_per_element);
// The state the layers of `s` keep besides their KV caches, each as its kind keeps it
// (MixerOps::state_elements), times bytes.
int64_t state_bytes(const JambaConfig& c, const LayerSchedule& s, int64_t bytes_per_element);

struct MemoryReport {
  int64_t context = 0, bytes_per_element = 2;
  int64_t kv_bytes = 0, kv_bytes_all_attention = 0, kv_bytes_all_mamba = 0;
  int64_t state_bytes = 0, state_bytes_all_mamba = 0;
};
MemoryReport memory_report(const JambaConfig& c, const LayerSchedule& s, int64_t context, int64_t bytes_per_element);

}  // namespace hl
