// HF GraniteMoeHybridConfig (transformers models/granitemoehybrid/configuration_granitemoehybrid.py),
// IBM Granite 4.0-H: its defaults and its own fields — layer_types (attention or Mamba-2 per layer),
// the multipliers (embedding, residual, attention scale, logits), the routed experts with the shared
// MLP beside them (or the shared MLP alone with num_local_experts 0), NoPE or RoPE over the whole head.
// The Mamba-2 fields are Bamba's (config_bamba.cpp). Not the schedule (model/layer_schedule.cpp).
#include <algorithm>
#include <cmath>

#include "engine/io/config_families.h"
#include "engine/io/input_limits.h"

namespace hl {

using nlohmann::json;

JambaConfig granite_h_defaults() {
  JambaConfig c;
  c.family = Family::GraniteH;
  c.vocab_size = 32000;
  c.hidden_size = 4096;
  c.intermediate_size = 11008;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 32;  // null (HF's default) → num_attention_heads
  c.rms_norm_eps = 1e-6;
  c.mamba_d_state = 256;
  c.mamba_n_heads = 128;
  c.mamba_n_groups = 1;
  c.mamba_chunk_size = 256;
  c.num_experts = 8;  // num_local_experts
  c.num_experts_per_tok = 2;
  c.shared_intermediate_size = 1024;
  c.moe_renormalize = true;  // top-k over the logits, softmax over the k
  c.rope_theta = 0;          // position_embedding_type null: no positional encoding
  return c;
}

namespace {

// layer_types (or its alias layers_block_type): "mamba" or "attention" per layer; absent: all Mamba.
void read_layer_types(const JsonReader& r, JambaConfig& c) {
  const char* key = r.find("layer_types") ? "layer_types" : "layers_block_type";
  c.attn_layer_indices.clear();
  const json* v = r.find(key);
  if (!v || v->is_null()) return;
  const json& a = r.array(key, static_cast<size_t>(limits::kMaxLayers));
  if (static_cast<int64_t>(a.size()) != c.num_hidden_layers)
    r.fail(key, "expected " + std::to_string(c.num_hidden_layers) + " entries (num_hidden_layers), got " +
                    std::to_string(a.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string name = a[i].is_string() ? a[i].get<std::string>() : "";
    if (name != "mamba" && name != "attention")
      r.expected(std::string(key) + "[" + std::to_string(i) + "]", "\"mamba\" or \"attention\"", a[i]);
    if (name == "attention") c.attn_layer_indices.push_back(static_cast<int64_t>(i));
  }
}

}  // namespace

void read_granite_h_fields(const JsonReader& r, JambaConfig& c) {
  read_layer_types(r, c);
  read_mamba2_fields(r, c);
  if (const json* v = r.find("head_dim"); v && !v->is_null()) r.optional_integer("head_dim", &c.head_dim_explicit, 1, 4096);
  r.optional_boolean("attention_bias", &c.attention_bias);  // q, k, v, o biases (GraniteMoeHybridAttention)
  // Multipliers (µP; HF's defaults 1.0). attention_multiplier replaces 1/√head_dim as the softmax scale.
  r.optional_number("embedding_multiplier", &c.embedding_multiplier, 0.0, 1e6, true);
  r.optional_number("residual_multiplier", &c.residual_multiplier, 0.0, 1e6, true);
  r.optional_number("logits_scaling", &c.logits_scaling, 0.0, 1e6, true);
  c.attention_multiplier = 1.0;
  r.optional_number("attention_multiplier", &c.attention_multiplier, 0.0, 1e6, true);
  // Experts: num_local_experts routed ones (0: the shared MLP alone), top-k over the router's logits
  // and a softmax over the k; the shared MLP of shared_intermediate_size on every layer.
  int64_t experts = c.num_experts;
  r.optional_integer("num_local_experts", &experts, 0, limits::kMaxExperts);
  if (experts == 1)
    r.fail("num_local_experts", "expected 0 (the shared MLP alone) or at least 2 routed experts, got 1");
  r.optional_integer("num_experts_per_tok", &c.num_experts_per_tok, 0, std::max<int64_t>(experts, 0));
  if (experts >= 2 && c.num_experts_per_tok < 1)
    r.fail("num_experts_per_tok", "expected " + JsonReader::integer_range(1, experts) + " with " +
                                      std::to_string(experts) + " experts, got " + std::to_string(c.num_experts_per_tok));
  r.optional_integer("shared_intermediate_size", &c.shared_intermediate_size, 1, int64_t{1} << 20);
  c.num_experts = experts >= 2 ? experts : 1;  // 1: every layer's feed-forward is the shared MLP alone
  if (experts < 2) c.num_experts_per_tok = 1;
  c.moe_renormalize = true;
  double coef = 0;
  r.optional_number("router_aux_loss_coef", &coef, 0.0, 1e6);
  // Positions: "rope" rotates the whole head (θ from rope_scaling, rope_parameters or rope_theta,
  // 10000 by default); null or "nope" none.
  std::string pe = "nope";
  if (const json* v = r.find("position_embedding_type"); v && !v->is_null()) {
    if (!v->is_string() || (v->get<std::string>() != "rope" && v->get<std::string>() != "nope"))
      r.expected("position_embedding_type", "\"rope\", \"nope\" or null", *v);
    pe = v->get<std::string>();
  }
  c.rope_theta = 10000.0;
  read_rope_theta(r, c);
  if (pe == "rope") {
    c.partial_rotary_factor = 1.0;
    if (c.rotary_dim() % 2 != 0)
      r.fail("head_dim", "head_dim " + std::to_string(c.head_dim()) + " is odd; RoPE rotates pairs");
  } else {
    c.rope_theta = 0;
    c.partial_rotary_factor = 0;
  }
  if (const json* v = r.find("init_method"); v && !v->is_string()) r.expected("init_method", "a string", *v);
  (void)r.find("normalization_function");
}

void granite_h_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j) {
  std::vector<std::string> types;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    types.push_back(std::count(c.attn_layer_indices.begin(), c.attn_layer_indices.end(), i) ? "attention" : "mamba");
  j["layer_types"] = types;
  mamba2_fields_to_json(c, j);
  if (c.head_dim_explicit > 0) j["head_dim"] = c.head_dim_explicit;
  j["attention_bias"] = c.attention_bias;
  j["embedding_multiplier"] = c.embedding_multiplier;
  j["residual_multiplier"] = c.residual_multiplier;
  j["attention_multiplier"] = c.attention_multiplier;
  j["logits_scaling"] = c.logits_scaling;
  j["num_local_experts"] = c.num_experts >= 2 ? c.num_experts : 0;
  j["num_experts_per_tok"] = c.num_experts >= 2 ? c.num_experts_per_tok : 0;
  j["shared_intermediate_size"] = c.shared_intermediate_size;
  j["position_embedding_type"] = c.rope_theta > 0 ? "rope" : "nope";
  if (c.rope_theta > 0) j["rope_theta"] = c.rope_theta;
}

}  // namespace hl
