// HF FalconH1Config (transformers models/falcon_h1/configuration_falcon_h1.py), TII Falcon-H1: its
// defaults and its own fields — the Mamba-2 side (mamba_d_ssm, heads, groups, the optional gated
// norm and its order, the Δ clamp), RoPE over the head, and the µP multipliers (embedding, attention
// in/out, keys, SSM in/out, the five in_proj segments, the MLP's gate and down, the LM head). Every
// layer runs attention and the SSM side by side, so no layer list is read. Not the schedule
// (model/layer_schedule.cpp).
#include <cmath>

#include "engine/io/config_families.h"
#include "engine/io/input_limits.h"

namespace hl {

using nlohmann::json;

JambaConfig falcon_h1_defaults() {
  JambaConfig c;
  c.family = Family::FalconH1;
  c.vocab_size = 128000;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.rms_norm_eps = 1e-5;
  c.max_position_embeddings = 8192;
  c.mamba_d_ssm = 1024;
  c.mamba_n_heads = 128;
  c.mamba_d_head = 8;  // "auto": mamba_d_ssm / mamba_n_heads
  c.mamba_n_groups = 1;
  c.mamba_d_state = 256;
  c.mamba_d_conv = 4;
  c.mamba_expand = 2;
  c.mamba_chunk_size = 256;
  c.mamba_conv_bias = true;
  c.mamba_proj_bias = false;
  c.mamba_rms_norm = false;
  c.mamba_norm_before_gate = true;
  c.rope_theta = 10000.0;
  c.partial_rotary_factor = 1.0;
  c.num_experts = 1;
  c.num_experts_per_tok = 1;
  return c;
}

namespace {

// A multiplier: a positive number (µP), HF's default 1.0 when absent or null.
void read_multiplier(const JsonReader& r, const char* key, double* out) {
  if (const json* v = r.find(key); v && v->is_null()) return;
  r.optional_number(key, out, 0.0, 1e6, true);
}

// A list of n multipliers, or null (all 1.0, HF's default).
void read_multiplier_list(const JsonReader& r, const char* key, size_t n, std::vector<double>* out) {
  if (const json* v = r.find(key); !v || v->is_null()) return;
  *out = r.number_list(key, n, n, 0.0, 1e6, true);
}

// The Mamba-2 side: Di = mamba_d_ssm (null: mamba_expand · hidden_size) = heads · head dim
// (mamba_d_head "auto": Di / heads), groups dividing the heads, the chunk size and the Δ clamp.
void read_ssm(const JsonReader& r, JambaConfig& c) {
  if (const json* v = r.find("mamba_d_ssm"); v && v->is_null())
    c.mamba_d_ssm = 0;
  else
    r.optional_integer("mamba_d_ssm", &c.mamba_d_ssm, 1, limits::kMaxHidden * limits::kMaxMambaExpand);
  const int64_t Di = c.mamba_d_ssm > 0 ? c.mamba_d_ssm : c.mamba_expand * c.hidden_size;
  const std::string di_text = std::to_string(Di) + (c.mamba_d_ssm > 0 ? " (mamba_d_ssm)" : " (mamba_expand · hidden_size)");
  r.optional_integer("mamba_n_heads", &c.mamba_n_heads, 1, Di);
  if (Di % c.mamba_n_heads != 0)
    r.fail("mamba_n_heads", "expected a divisor of the SSM width " + di_text + ", got " + std::to_string(c.mamba_n_heads) +
                                (r.find("mamba_n_heads") ? "" : " (the default)"));
  c.mamba_d_head = Di / c.mamba_n_heads;
  if (const json* v = r.find("mamba_d_head"); v && !(v->is_string() && v->get<std::string>() == "auto")) {
    if (!v->is_number_integer() || v->get<int64_t>() != c.mamba_d_head)
      r.expected("mamba_d_head", "\"auto\" or " + std::to_string(c.mamba_d_head) + " (the SSM width " + di_text +
                                     " / mamba_n_heads)",
                 *v);
  }
  r.optional_integer("mamba_n_groups", &c.mamba_n_groups, 1, c.mamba_n_heads);
  if (c.mamba_n_heads % c.mamba_n_groups != 0)
    r.fail("mamba_n_groups", "expected a divisor of mamba_n_heads " + std::to_string(c.mamba_n_heads) + ", got " +
                                 std::to_string(c.mamba_n_groups));
  r.optional_integer("mamba_chunk_size", &c.mamba_chunk_size, 1, int64_t{1} << 20);
  r.optional_boolean("mamba_rms_norm", &c.mamba_rms_norm);
  r.optional_boolean("mamba_norm_before_gate", &c.mamba_norm_before_gate);
  r.optional_boolean("projectors_bias", &c.projectors_bias);
  // HF's torch path clamps Δ to time_step_limit only; time_step_min/max are dt_bias's init range.
  read_time_step_limit(r, "time_step_limit", c);
  r.optional_number("time_step_min", &c.time_step_min, 0.0, 1e6);
  r.optional_number("time_step_max", &c.time_step_max, 0.0, 1e6);
}

}  // namespace

void read_falcon_h1_fields(const JsonReader& r, JambaConfig& c) {
  read_ssm(r, c);
  if (const json* v = r.find("head_dim"); v && !v->is_null()) r.optional_integer("head_dim", &c.head_dim_explicit, 1, 4096);
  r.optional_boolean("attention_bias", &c.attention_bias);  // q, k, v, o biases
  r.optional_boolean("mlp_bias", &c.mlp_bias);              // gate, up and down biases
  // RoPE (LlamaRotaryEmbedding): θ as the other families read it, on head_dim · partial_rotary_factor dims.
  read_rope_theta(r, c);
  if (c.rope_theta <= 0) r.fail("rope_theta", "expected a number > 0 (Falcon-H1's attention always uses RoPE), got 0");
  c.partial_rotary_factor = 1.0;
  r.optional_number("partial_rotary_factor", &c.partial_rotary_factor, 0.0, 1.0, true);
  if (const json* p = r.find("rope_parameters"); p && p->is_object())
    r.object("rope_parameters").optional_number("partial_rotary_factor", &c.partial_rotary_factor, 0.0, 1.0, true);
  if (c.rotary_dim() % 2 != 0 || c.rotary_dim() == 0)
    r.fail("head_dim", "head_dim " + std::to_string(c.head_dim()) + " × partial_rotary_factor gives " +
                           std::to_string(c.rotary_dim()) + " rotary dims; RoPE rotates a positive even number");
  // µP multipliers (HF's defaults 1.0; the lists [gate, down] and [z, x, B, C, dt]).
  read_multiplier(r, "embedding_multiplier", &c.embedding_multiplier);
  read_multiplier(r, "lm_head_multiplier", &c.lm_head_multiplier);
  read_multiplier(r, "key_multiplier", &c.key_multiplier);
  read_multiplier(r, "attention_in_multiplier", &c.attention_in_multiplier);
  read_multiplier(r, "attention_out_multiplier", &c.attention_out_multiplier);
  read_multiplier(r, "ssm_in_multiplier", &c.ssm_in_multiplier);
  read_multiplier(r, "ssm_out_multiplier", &c.ssm_out_multiplier);
  read_multiplier_list(r, "ssm_multipliers", 5, &c.ssm_multipliers);
  std::vector<double> mlp = {c.mlp_gate_multiplier, c.mlp_down_multiplier};
  read_multiplier_list(r, "mlp_multipliers", 2, &mlp);
  c.mlp_gate_multiplier = mlp[0];
  c.mlp_down_multiplier = mlp[1];
  c.num_experts = 1;  // every layer's feed-forward is one SwiGLU MLP
  c.num_experts_per_tok = 1;
}

void falcon_h1_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j) {
  j["mamba_d_ssm"] = c.mamba_d_ssm > 0 ? nlohmann::ordered_json(c.mamba_d_ssm) : nlohmann::ordered_json();
  j["mamba_n_heads"] = c.mamba_n_heads;
  j["mamba_d_head"] = c.mamba_d_head;
  j["mamba_n_groups"] = c.mamba_n_groups;
  j["mamba_chunk_size"] = c.mamba_chunk_size;
  j["mamba_rms_norm"] = c.mamba_rms_norm;
  j["mamba_norm_before_gate"] = c.mamba_norm_before_gate;
  j["projectors_bias"] = c.projectors_bias;
  j["time_step_min"] = c.time_step_min;
  j["time_step_max"] = c.time_step_max;
  j["time_step_limit"] = {c.time_step_limit_min, c.time_step_limit_max};  // ∞ written as Infinity
  if (c.head_dim_explicit > 0) j["head_dim"] = c.head_dim_explicit;
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  j["rope_theta"] = c.rope_theta;
  if (c.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = c.partial_rotary_factor;
  j["embedding_multiplier"] = c.embedding_multiplier;
  j["lm_head_multiplier"] = c.lm_head_multiplier;
  j["key_multiplier"] = c.key_multiplier;
  j["attention_in_multiplier"] = c.attention_in_multiplier;
  j["attention_out_multiplier"] = c.attention_out_multiplier;
  j["ssm_in_multiplier"] = c.ssm_in_multiplier;
  j["ssm_out_multiplier"] = c.ssm_out_multiplier;
  j["ssm_multipliers"] = c.ssm_multipliers;
  j["mlp_multipliers"] = {c.mlp_gate_multiplier, c.mlp_down_multiplier};
}

}  // namespace hl
