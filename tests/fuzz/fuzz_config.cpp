// libFuzzer target for config.json parsing: any text either parses into a config whose derived
// values are usable (positive sizes, offsets below periods) or throws LoadError. Build as fuzz_safetensors.cpp.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/io/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    hl::JambaConfig c = hl::parse_config(std::string(reinterpret_cast<const char*>(data), size));
    if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.hidden_size % c.num_attention_heads != 0) std::abort();
    if (c.attn_layer_offset >= c.attn_layer_period || c.expert_layer_offset >= c.expert_layer_period) std::abort();
    if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts) std::abort();
    hl::JambaConfig r = hl::parse_config(hl::config_to_json(c));  // the writer's output must read back
    if (r.hidden_size != c.hidden_size || r.mamba_dt_rank != c.mamba_dt_rank) std::abort();
  } catch (const hl::LoadError&) {
  }
  return 0;
}
