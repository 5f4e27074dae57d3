// JambaConfig: the fields of a Jamba config.json (jamba-spec.md §1) plus HybridLens extensions
// (trace-format.md §1). Parsing checks every range and reports the file, the field and the allowed
// range. Not the layer schedule the period/offset fields describe (model/layer_schedule.h), not the
// weights (model/weights.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace hl {

enum class Normalizer : uint8_t { Softmax, Softmax1, Sink };
const char* normalizer_name(Normalizer n);                     // "softmax", "softmax1", "sink"
bool parse_normalizer(const std::string& s, Normalizer* out);  // inverse of normalizer_name

// The families config.json may name in model_type. Jamba's fields and defaults are the struct's own;
// Bamba (HF BambaConfig) and Nemotron-H (HF NemotronHConfig) start from their defaults
// (bamba_defaults, nemotron_h_defaults, ...) and read their own fields (config_<family>.cpp).
enum class Family : uint8_t { Jamba, Bamba, NemotronH, GraniteH, FalconH1 };
// the model_type: "jamba", "bamba", "nemotron_h", "granitemoehybrid", "falcon_h1"
const char* family_name(Family f);

struct JambaConfig {
  Family family = Family::Jamba;
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
  // Bamba (HF BambaConfig): the attention layers by index (the others are Mamba-2), the Mamba-2
  // SSM's heads of mamba_d_head channels, B/C groups, the Δ clamp of time_step_limit (after the
  // softplus; (0, ∞) is no clamp) and the chunk size of HF's prefill scan (kept for `info`); RoPE on
  // the first head_dim · partial_rotary_factor dims of q and k (rope_theta 0: no positional encoding).
  std::vector<int64_t> attn_layer_indices;
  int64_t mamba_n_heads = 0, mamba_d_head = 0, mamba_n_groups = 1, mamba_chunk_size = 256;
  double time_step_limit_min = 0.0, time_step_limit_max = std::numeric_limits<double>::infinity();
  double time_step_min = 0.001, time_step_max = 0.1;  // HF's init range of dt_bias (not the math)
  double rope_theta = 0.0, partial_rotary_factor = 0.0;
  // Nemotron-H (HF NemotronHConfig): one letter a layer, 'M' Mamba-2, '*' attention, '-' MLP (from
  // hybrid_override_pattern or layers_block_type); an explicit head_dim (0: hidden_size / heads); the
  // MLP's activation (relu2: down(relu(up x)²), no gate; silu: SwiGLU); the Mamba-2 gated norm in
  // mamba_n_groups groups; and the Δ floor time_step_min of HF's torch path.
  std::string layer_pattern;
  int64_t head_dim_explicit = 0;
  std::string mlp_hidden_act = "silu";
  bool mlp_bias = false;  // Nemotron-H: biases on the MLP's up and down projections (Falcon-H1: gate too)
  bool attention_bias = false;  // Falcon-H1, Granite 4.0-H: biases on q, k, v and o
  // Granite 4.0-H (HF GraniteMoeHybridConfig): the embeddings × embedding_multiplier, each residual
  // branch × residual_multiplier, logits ÷ logits_scaling, the attention's softmax scale
  // attention_multiplier (0: 1/√head_dim); a shared expert of shared_intermediate_size beside the
  // routed ones (0: none) and the routing weights renormalised over the chosen experts.
  double embedding_multiplier = 1.0, residual_multiplier = 1.0, logits_scaling = 1.0;
  double attention_multiplier = 0.0;
  int64_t shared_intermediate_size = 0;
  bool moe_renormalize = false;
  // Nemotron-H's MoE layers (HF NemotronHMoE, DeepSeek-V3's router; Liu et al. 2024): the routed
  // experts' width moe_intermediate_size (0: intermediate_size); a sigmoid router whose top-k is chosen
  // on sigmoid + e_score_correction_bias within the moe_topk_group best of moe_n_group expert groups,
  // the k weights the plain sigmoids (renormalised when moe_renormalize: norm_topk_prob) times
  // moe_routed_scaling; the experts working in moe_latent_size dims between two projections (0: none).
  int64_t moe_intermediate_size = 0;
  bool moe_sigmoid_router = false;
  int64_t moe_n_group = 1, moe_topk_group = 1;
  double moe_routed_scaling = 1.0;
  int64_t moe_latent_size = 0;
  // Falcon-H1 (HF FalconH1Config): attention and a Mamba-2 SSM side by side in every layer, with µP
  // multipliers — the attention's input and output, its keys (key_multiplier), the SSM's input and
  // output, the five segments z | x | B | C | dt of the SSM's in_proj output (ssm_multipliers), the
  // MLP's gate (inside the SiLU) and down projection, and the logits (× lm_head_multiplier). The SSM
  // width Di is mamba_d_ssm (= heads · head dim); its gated RMSNorm is optional (mamba_rms_norm),
  // per B/C group, before or after the gate (mamba_norm_before_gate); out_proj's bias is
  // projectors_bias, in_proj's mamba_proj_bias.
  double attention_in_multiplier = 1.0, attention_out_multiplier = 1.0, key_multiplier = 1.0;
  double ssm_in_multiplier = 1.0, ssm_out_multiplier = 1.0;
  std::vector<double> ssm_multipliers = {1.0, 1.0, 1.0, 1.0, 1.0};  // z, x, B, C, dt
  double mlp_gate_multiplier = 1.0, mlp_down_multiplier = 1.0;
  double lm_head_multiplier = 1.0;
  bool mamba_rms_norm = true;           // the Mamba-2 gated RMSNorm (every family but Falcon-H1 has it)
  bool mamba_norm_before_gate = false;  // normalise y, then × silu(z) (Falcon-H1's default)
  bool projectors_bias = false;         // Falcon-H1: the SSM's out_proj bias
  int64_t mamba_d_ssm = 0;              // Falcon-H1: as written (0: null, mamba_expand · hidden_size)
  // Extensions (trace-format.md §1).
  Normalizer attention_normalizer = Normalizer::Softmax;
  int64_t num_register_tokens = 0;
  // Fields present but ignored, reported by `info` (e.g. auto_map: remote code is never run), sorted.
  // Legacy remote-code fields and unknown fields land here; HF fields that do not change the math
  // (use_cache, use_mamba_kernels, transformers_version, ...) are type-checked and dropped silently.
  std::vector<std::string> ignored_fields;

  // Derived.
  int64_t head_dim() const { return head_dim_explicit > 0 ? head_dim_explicit : hidden_size / num_attention_heads; }
  int64_t mamba_inner() const {  // Di: Nemotron-H's and Falcon-H1's heads × head dim, elsewhere expand × hidden
    return family == Family::NemotronH || family == Family::FalconH1 ? mamba_n_heads * mamba_d_head
                                                                      : mamba_expand * hidden_size;
  }
  int64_t mamba2_conv_dim() const { return mamba_inner() + 2 * mamba_n_groups * mamba_d_state; }  // x|B|C
  // The gated RMSNorm's group: Bamba normalises over all Di channels at once, Nemotron-H and
  // Falcon-H1 per B/C group.
  int64_t mamba2_norm_group() const {
    return family == Family::NemotronH || family == Family::FalconH1 ? mamba_inner() / mamba_n_groups : mamba_inner();
  }
  bool mamba2_out_bias() const { return family == Family::FalconH1 ? projectors_bias : mamba_proj_bias; }
  // The µP factors of in_proj's output segments z | x|B|C | dt are not all 1 (Falcon-H1).
  bool has_ssm_multipliers() const {
    return std::any_of(ssm_multipliers.begin(), ssm_multipliers.end(), [](double m) { return m != 1.0; });
  }
  // The Δ clamp after the softplus: time_step_limit, raised for Nemotron-H to time_step_min (HF's
  // torch path clamps there from below; its kernel path applies time_step_limit, (0, ∞) published).
  double mamba2_dt_lo() const {
    return family == Family::NemotronH ? std::max(time_step_min, time_step_limit_min) : time_step_limit_min;
  }
  double mamba2_dt_hi() const { return time_step_limit_max; }
  bool mlp_gated() const { return mlp_hidden_act != "relu2"; }  // SwiGLU; relu2 has no gate
  // z = q·k · scale: 1/√head_dim or Granite's attention_multiplier, × Falcon-H1's key_multiplier
  // (it scales every key, so every score, before RoPE, which is linear).
  double attention_scale() const {
    return (attention_multiplier > 0 ? attention_multiplier : 1.0 / std::sqrt(static_cast<double>(head_dim()))) *
           key_multiplier;
  }
  // The backends' float scale: attention_scale() rounded once, or without key_multiplier the float
  // 1/√head_dim (or attention_multiplier) the kernels have always used.
  float attention_scale_f32() const {
    if (key_multiplier != 1.0) return static_cast<float>(attention_scale());
    return attention_multiplier > 0 ? static_cast<float>(attention_multiplier)
                                    : 1.0f / std::sqrt(static_cast<float>(head_dim()));
  }
  // Multipliers a plain Jamba-shaped forward pass does not apply (device backends refuse them).
  bool has_multipliers() const {
    return embedding_multiplier != 1.0 || residual_multiplier != 1.0 || logits_scaling != 1.0 ||
           attention_multiplier > 0 || key_multiplier != 1.0 || lm_head_multiplier != 1.0 ||
           attention_in_multiplier != 1.0 || attention_out_multiplier != 1.0 || ssm_in_multiplier != 1.0 ||
           ssm_out_multiplier != 1.0 || has_ssm_multipliers() || mlp_gate_multiplier != 1.0 ||
           mlp_down_multiplier != 1.0;
  }
  int64_t rotary_dim() const {  // HF: int(head_dim * partial_rotary_factor); 0 without RoPE
    return rope_theta > 0 ? static_cast<int64_t>(static_cast<double>(head_dim()) * partial_rotary_factor) : 0;
  }
  bool is_eos(int64_t id) const;
};

// Parses config.json text. `source` names the file in messages. Throws LoadError: invalid UTF-8/JSON,
// duplicate keys, nesting deeper than 16, model_type other than "jamba", "bamba", "nemotron_h", "granitemoehybrid" or "falcon_h1", a wrong JSON type or a value
// out of range (the message names the field and the allowed range).
JambaConfig parse_config(const std::string& json_text, const std::string& source = "config.json");
// Reads and parses a file (size-limited: a config.json larger than 1 MiB is refused).
JambaConfig load_config_file(const std::string& path);
// Serialises to config.json text (used by the checkpoint generator and tests).
std::string config_to_json(const JambaConfig& c);
// HF BambaConfig's defaults (model_type "bamba"), with RoPE θ 10000 and partial rotary 0.5.
JambaConfig bamba_defaults();
// HF NemotronHConfig's defaults (model_type "nemotron_h"), with its default pattern of M, -, * layers.
JambaConfig nemotron_h_defaults();
// HF GraniteMoeHybridConfig's defaults (model_type "granitemoehybrid").
JambaConfig granite_h_defaults();
// HF FalconH1Config's defaults (model_type "falcon_h1").
JambaConfig falcon_h1_defaults();

}  // namespace hl
