// JambaConfig: the fields of a Jamba config.json (jamba-spec.md §1) plus HybridLens extensions
// (trace-format.md §1). Parsing checks every range and reports the file, the field and the allowed
// range. Not the layer schedule the period/offset fields describe (model/layer_schedule.h), not the
// weights (model/weights.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hl {

enum class Normalizer : uint8_t { Softmax, Softmax1, Sink };
const char* normalizer_name(Normalizer n);                     // "softmax", "softmax1", "sink"
bool parse_normalizer(const std::string& s, Normalizer* out);  // inverse of normalizer_name

struct JambaConfig {
  // jamba-spec.md §1.1 (defaults are JambaConfig's).
  int64_t vocab_size = 65536;
  bool tie_word_embeddings = false;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 14336;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 8;  // null in JSON → num_attention_heads
  std::string hidden_act = "silu";
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-6;
  int64_t pad_token_id = 0;                  // null in JSON → -1 (none)
  int64_t bos_token_id = 1;                  // null in JSON → -1 (none)
  std::vector<int64_t> eos_token_ids = {2};  // int or list in JSON; may be empty (null)
  int64_t max_position_embeddings = 262144;
  int64_t num_experts_per_tok = 2;
  int64_t num_experts = 16;
  int64_t expert_layer_period = 2;
  int64_t expert_layer_offset = 1;
  int64_t attn_layer_period = 8;
  int64_t attn_layer_offset = 4;
  int64_t mamba_d_state = 16;
  int64_t mamba_d_conv = 4;
  int64_t mamba_expand = 2;
  int64_t mamba_dt_rank = 256;  // "auto" → ceil(hidden_size / 16)
  bool mamba_dt_rank_auto = false;
  bool mamba_conv_bias = true;
  bool mamba_proj_bias = false;
  double router_aux_loss_coef = 0.001;
  std::string torch_dtype;  // hint only
  // Extensions (trace-format.md §1).
  Normalizer attention_normalizer = Normalizer::Softmax;
  int64_t num_register_tokens = 0;
  // Fields present but ignored, reported by `info` (e.g. auto_map: remote code is never run), sorted.
  // Legacy remote-code fields and unknown fields land here; HF fields that do not change the math
  // (use_cache, use_mamba_kernels, transformers_version, ...) are type-checked and dropped silently.
  std::vector<std::string> ignored_fields;

  // Derived.
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t mamba_inner() const { return mamba_expand * hidden_size; }  // Di
  bool is_eos(int64_t id) const;
};

// Parses config.json text. `source` names the file in messages. Throws LoadError: invalid UTF-8/JSON,
// duplicate keys, nesting deeper than 16, model_type other than "jamba", a wrong JSON type or a value
// out of range (the message names the field and the allowed range).
JambaConfig parse_config(const std::string& json_text, const std::string& source = "config.json");
// Reads and parses a file (size-limited: a config.json larger than 1 MiB is refused).
JambaConfig load_config_file(const std::string& path);
// Serialises to config.json text (used by the checkpoint generator and tests).
std::string config_to_json(const JambaConfig& c);

}  // namespace hl
