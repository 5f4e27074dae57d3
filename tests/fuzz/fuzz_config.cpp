// libFuzzer target for config.json parsing: any text either parses into a config whose derived
// values are usable (positive sizes, offsets below periods) and whose written form reads back, or
// throws LoadError. Also the JSON dialect config.json is read in: Python's (Infinity, NaN) accepts
// every strict JSON text with the same value. Build as fuzz_safetensors.cpp.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/io/config.h"
#include "engine/io/json_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const nlohmann::json strict = hl::parse_json_checked(text, "config.json", 16);
    nlohmann::json python;
    try {
      python = hl::parse_json_checked(text, "config.json", 16, hl::JsonDialect::Python);
    } catch (const hl::LoadError&) {
      std::abort();  // the Python dialect is a superset of JSON
    }
    if (python != strict) std::abort();  // strict JSON holds no NaN, so == is exact here
  } catch (const hl::LoadError&) {
  }
  hl::JambaConfig c;
  try {
    c = hl::parse_config(text);
  } catch (const hl::LoadError&) {
    return 0;
  }
  if (c.hidden_size <= 0 || c.num_attention_heads <= 0 || c.head_dim() <= 0) std::abort();
  // Without an explicit head_dim (Nemotron-H's) the heads divide the hidden size.
  if (c.head_dim_explicit == 0 && c.hidden_size % c.num_attention_heads != 0) std::abort();
  if (c.mamba_inner() <= 0 || c.mamba_n_groups <= 0 || c.mamba2_norm_group() <= 0) std::abort();
  if (c.attn_layer_offset >= c.attn_layer_period || c.expert_layer_offset >= c.expert_layer_period) std::abort();
  if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts) std::abort();
  hl::JambaConfig r;
  try {
    r = hl::parse_config(hl::config_to_json(c));  // the writer's output must read back
  } catch (const hl::LoadError&) {
    std::abort();
  }
  if (r.hidden_size != c.hidden_size || r.mamba_dt_rank != c.mamba_dt_rank) std::abort();
  if (r.family != c.family || r.num_hidden_layers != c.num_hidden_layers || r.layer_pattern != c.layer_pattern ||
      r.attn_layer_indices != c.attn_layer_indices || r.head_dim() != c.head_dim() || r.num_experts != c.num_experts)
    std::abort();
  if (r.mamba_inner() != c.mamba_inner() || r.ssm_multipliers != c.ssm_multipliers ||
      r.lm_head_multiplier != c.lm_head_multiplier || r.mamba_rms_norm != c.mamba_rms_norm ||
      r.rotary_dim() != c.rotary_dim())
    std::abort();
  if (c.family == hl::Family::FalconH1 && (c.rotary_dim() <= 0 || c.rotary_dim() % 2 != 0 ||
                                           c.mamba_n_heads * c.mamba_d_head != c.mamba_inner()))
    std::abort();
  return 0;
}
