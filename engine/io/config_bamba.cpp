// HF BambaConfig (transformers models/bamba/configuration_bamba.py): its defaults and the fields
// beyond the shared ones — the attention layer indices (the other layers are Mamba-2), the Mamba-2
// heads, groups and Δ clamp, and RoPE with the partial rotary factor HF fixes at 0.5. Not the shared
// fields (config.cpp), not the schedule (model/layer_schedule.cpp).
#include <cmath>
#include <set>

#include "engine/io/config_families.h"
#include "engine/io/json_util.h"

namespace hl {

using nlohmann::json;

JambaConfig bamba_defaults() {
  JambaConfig c;
  c.family = Family::Bamba;
  c.vocab_size = 128000;
  c.rms_norm_eps = 1e-5;
  c.mamba_d_state = 256;
  c.mamba_n_heads = 128;
  c.mamba_n_groups = 1;
  c.mamba_chunk_size = 256;
  c.num_experts = 1;  // every layer's feed-forward is one dense MLP
  c.num_experts_per_tok = 1;
  c.rope_theta = 10000.0;  // RotaryEmbeddingConfigMixin's default θ
  c.partial_rotary_factor = 0.5;
  return c;
}

void read_rope_theta(const JsonReader& r, JambaConfig& c) {
  r.optional_number("rope_theta", &c.rope_theta, 0.0, 1e12, true);
  auto read_type = [&](const JsonReader& o, const char* what) {
    const char* key = o.find("rope_type") ? "rope_type" : "type";  // "type": the older spelling
    const json* t = o.find(key);
    if (t && (!t->is_string() || t->get<std::string>() != "default"))
      o.expected(o.field(key), std::string("\"default\" (scaled RoPE is not supported in ") + what + ")", *t);
  };
  if (const json* v = r.find("rope_parameters"); v && !v->is_null()) {
    if (!v->is_object()) r.expected("rope_parameters", "an object or null", *v);
    const JsonReader o = r.object("rope_parameters");
    read_type(o, "rope_parameters");
    o.optional_number("rope_theta", &c.rope_theta, 0.0, 1e12, true);
    if (const json* f = o.find("partial_rotary_factor")) o.number_value(*f, o.field("partial_rotary_factor"), 0.0, 1.0);
  }
  if (const json* v = r.find("rope_scaling"); v && !v->is_null()) {
    if (!v->is_object()) r.expected("rope_scaling", "an object or null", *v);
    const JsonReader o = r.object("rope_scaling");
    read_type(o, "rope_scaling");
    o.optional_number("rope_theta", &c.rope_theta, 0.0, 1e12, true);
  }
}

namespace {

// RoPE as Bamba has it: θ (read_rope_theta) on the first half of each head.
void read_rope(const JsonReader& r, JambaConfig& c) {
  read_rope_theta(r, c);
  // HF's BambaConfig sets partial_rotary_factor = 0.5 whatever the file says; so does HybridLens,
  // and `info` lists a different value among the ignored fields.
  if (const json* f = r.find("partial_rotary_factor")) {
    const double v = r.number_value(*f, "partial_rotary_factor", 0.0, 1.0);
    if (v != 0.5) c.ignored_fields.push_back("partial_rotary_factor (Bamba always uses 0.5)");
  }
  c.partial_rotary_factor = 0.5;
  if (c.rotary_dim() % 2 != 0)
    r.fail("num_attention_heads", "head_dim " + std::to_string(c.head_dim()) +
                                      " gives an odd rotary dimension (head_dim / 2); RoPE rotates pairs");
}

}  // namespace

void read_time_step_limit(const JsonReader& r, const char* key, JambaConfig& c) {
  // [lo, hi] with 0 ≤ lo < hi ≤ ∞ (Python writes ∞ as Infinity); null: none.
  if (const json* v = r.find(key); v && !v->is_null()) {
    const std::vector<double> lim = r.number_list(key, 2, 2, 0.0, std::numeric_limits<double>::infinity());
    if (!(lim[0] < lim[1]))
      r.fail(key, "expected lo < hi, got [" + json_number_text(lim[0]) + ", " + json_number_text(lim[1]) + "]");
    c.time_step_limit_min = lim[0];
    c.time_step_limit_max = lim[1];
  }
}

void read_bamba_fields(const JsonReader& r, JambaConfig& c) {
  const int64_t L = c.num_hidden_layers;
  // Attention layers: null or absent means none (every layer Mamba-2), as HF's layers_block_type.
  c.attn_layer_indices.clear();
  if (const json* v = r.find("attn_layer_indices"); v && !v->is_null()) {
    const json& a = r.array("attn_layer_indices", static_cast<size_t>(L));
    std::set<int64_t> seen;
    for (size_t i = 0; i < a.size(); ++i) {
      const int64_t k = r.integer_value(a[i], "attn_layer_indices[" + std::to_string(i) + "]", 0, L - 1);
      if (!seen.insert(k).second)
        r.fail("attn_layer_indices[" + std::to_string(i) + "]", "layer " + std::to_string(k) + " is listed twice");
    }
    c.attn_layer_indices.assign(seen.begin(), seen.end());
  }
  read_mamba2_fields(r, c);
  double z_loss = 0;
  r.optional_number("z_loss_coefficient", &z_loss, 0.0, 1e6);
  r.optional_boolean("attention_bias", &c.attention_bias);  // q, k, v, o biases (BambaAttention)
  r.optional_boolean("mlp_bias", &c.mlp_bias);              // gate, up, down biases (BambaMLP)
  read_rope(r, c);
  c.num_experts = 1;
  c.num_experts_per_tok = 1;
}

void read_mamba2_fields(const JsonReader& r, JambaConfig& c) {
  const int64_t Di = c.mamba_inner();
  // Mamba-2 heads: Di = mamba_n_heads · mamba_d_head ("auto": Di / mamba_n_heads).
  r.optional_integer("mamba_n_heads", &c.mamba_n_heads, 1, Di);
  if (Di % c.mamba_n_heads != 0)
    r.fail("mamba_n_heads", "expected a divisor of mamba_expand · hidden_size = " + std::to_string(Di) + ", got " +
                                std::to_string(c.mamba_n_heads) + (r.find("mamba_n_heads") ? "" : " (the default)"));
  c.mamba_d_head = Di / c.mamba_n_heads;
  if (const json* v = r.find("mamba_d_head"); v && !(v->is_string() && v->get<std::string>() == "auto")) {
    if (!v->is_number_integer() || v->get<int64_t>() != c.mamba_d_head)
      r.expected("mamba_d_head", "\"auto\" or " + std::to_string(c.mamba_d_head) + " (mamba_expand · hidden_size / mamba_n_heads)",
                 *v);
  }
  r.optional_integer("mamba_n_groups", &c.mamba_n_groups, 1, c.mamba_n_heads);
  if (c.mamba_n_heads % c.mamba_n_groups != 0)
    r.fail("mamba_n_groups", "expected a divisor of mamba_n_heads " + std::to_string(c.mamba_n_heads) + ", got " +
                                 std::to_string(c.mamba_n_groups));
  r.optional_integer("mamba_chunk_size", &c.mamba_chunk_size, 1, int64_t{1} << 20);
  read_time_step_limit(r, "time_step_limit", c);
  r.optional_number("time_step_min", &c.time_step_min, 0.0, 1e6);
  r.optional_number("time_step_max", &c.time_step_max, 0.0, 1e6);
}

void mamba2_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j) {
  j["mamba_n_heads"] = c.mamba_n_heads;
  j["mamba_d_head"] = c.mamba_d_head;
  j["mamba_n_groups"] = c.mamba_n_groups;
  j["mamba_chunk_size"] = c.mamba_chunk_size;
  j["time_step_min"] = c.time_step_min;
  j["time_step_max"] = c.time_step_max;
  j["time_step_limit"] = {c.time_step_limit_min, c.time_step_limit_max};  // ∞ written as Infinity (config_to_json)
}

void bamba_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j) {
  j["attn_layer_indices"] = c.attn_layer_indices;
  j["attention_bias"] = c.attention_bias;
  j["mlp_bias"] = c.mlp_bias;
  mamba2_fields_to_json(c, j);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
}

}  // namespace hl
