// HF NemotronHConfig (transformers models/nemotron_h/configuration_nemotron_h.py): its defaults and its
// own field names — the layer pattern (hybrid_override_pattern, or the layers_block_type list with the
// older or newer kind names), the Mamba-2 heads, groups and Δ clamps (with HF's legacy mamba_* aliases),
// the explicit head_dim, the MLP's activation, NoPE attention, the MoE layers' DeepSeek-V3 router. Not the shared fields (config.cpp), not
// the schedule the pattern gives (model/layer_schedule.cpp).
#include <cmath>

#include "engine/io/config_families.h"
#include "engine/io/input_limits.h"
#include "engine/io/json_util.h"

namespace hl {

using nlohmann::json;

JambaConfig nemotron_h_defaults() {
  JambaConfig c;
  c.family = Family::NemotronH;
  c.vocab_size = 131072;
  c.hidden_size = 4096;
  c.intermediate_size = 21504;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim_explicit = 128;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-5;  // layer_norm_epsilon
  c.mlp_hidden_act = "relu2";
  c.mamba_d_state = 128;  // ssm_state_size
  c.mamba_n_heads = 128;
  c.mamba_d_head = 64;
  c.mamba_n_groups = 8;
  c.mamba_d_conv = 4;
  c.mamba_expand = 2;  // read and kept; Di is mamba_num_heads · mamba_head_dim
  c.mamba_chunk_size = 128;
  c.mamba_conv_bias = true;
  c.mamba_proj_bias = false;
  c.num_experts = 8;  // n_routed_experts; 1 (no router) once a pattern without E is read
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 7688;
  c.shared_intermediate_size = 7688;  // moe_shared_expert_intermediate_size
  c.moe_sigmoid_router = true;
  c.moe_renormalize = true;  // norm_topk_prob
  c.layer_pattern = "ME*-";  // HF's default layers_block_type
  c.num_hidden_layers = 4;
  return c;
}

namespace {

// The pattern letter of a layers_block_type name: HF's older names and the newer ones.
char kind_letter(const std::string& s) {
  if (s == "mamba" || s == "linear_attention") return 'M';
  if (s == "attention" || s == "full_attention") return '*';
  if (s == "mlp") return '-';
  if (s == "moe") return 'E';
  return 0;
}

// Reads `key`, or its legacy alias when present: HF pops the alias over the field, so a field given
// beside its alias is noted among the ignored ones.
template <class Read>
void field_or_alias(const JsonReader& r, JambaConfig& c, const char* key, const char* alias, Read read) {
  const bool by_alias = r.find(alias) != nullptr;
  if (by_alias && r.find(key))
    c.ignored_fields.push_back(std::string(key) + " (its legacy alias " + alias + " wins, as in HF)");
  read(by_alias ? alias : key);
}

void read_pattern(const JsonReader& r, JambaConfig& c) {
  const json* list = r.find("layers_block_type");
  if (!list || list->is_null()) list = r.find("layer_types");  // HF's attribute_map alias
  const json* pat = r.find("hybrid_override_pattern");
  if (list && !list->is_null()) {  // HF: an explicit list wins over the pattern
    const char* key = r.find("layers_block_type") ? "layers_block_type" : "layer_types";
    const json& a = r.array(key, static_cast<size_t>(limits::kMaxLayers));
    c.layer_pattern.clear();
    for (size_t i = 0; i < a.size(); ++i) {
      const char k = a[i].is_string() ? kind_letter(a[i].get<std::string>()) : 0;
      if (!k)
        r.expected(std::string(key) + "[" + std::to_string(i) + "]",
                   "\"mamba\", \"attention\", \"mlp\" or \"moe\" (or linear_attention / full_attention)", a[i]);
      c.layer_pattern += k;
    }
  } else if (pat && !pat->is_null()) {
    if (!pat->is_string()) r.expected("hybrid_override_pattern", "a string of M, *, - and E", *pat);
    const std::string s = pat->get<std::string>();
    if (s.size() > static_cast<size_t>(limits::kMaxLayers))
      r.fail("hybrid_override_pattern", "expected at most " + std::to_string(limits::kMaxLayers) + " layers, got " +
                                            std::to_string(s.size()));
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] != 'M' && s[i] != '*' && s[i] != '-' && s[i] != 'E')
        r.fail("hybrid_override_pattern", std::string("character ") + std::to_string(i) + " is '" + s[i] +
                                              "'; expected M (Mamba-2), * (attention), - (MLP) or E (MoE)");
    c.layer_pattern = s;
  }
  if (c.layer_pattern.empty()) r.fail("hybrid_override_pattern", "expected at least one layer, got none");
  // HF derives the layer count from the pattern and only warns about a different num_hidden_layers.
  const int64_t L = static_cast<int64_t>(c.layer_pattern.size());
  if (r.find("num_hidden_layers") && c.num_hidden_layers != L)
    c.ignored_fields.push_back("num_hidden_layers (" + std::to_string(c.num_hidden_layers) + "; the pattern has " +
                               std::to_string(L) + " layers)");
  c.num_hidden_layers = L;
}

// The MoE fields (HF NemotronHMoE over DeepSeek-V3's router and MoE): read always, used by the 'E'
// layers; without any, the expert count stays 1 (no router in the records).
void read_moe(const JsonReader& r, JambaConfig& c) {
  int64_t E = 8, k = 2;
  field_or_alias(r, c, "n_routed_experts", "num_local_experts",
                 [&](const char* f) { r.optional_integer(f, &E, 1, limits::kMaxExperts); });
  r.optional_integer("num_experts_per_tok", &k, 1, limits::kMaxExperts);
  r.optional_integer("moe_intermediate_size", &c.moe_intermediate_size, 1, int64_t{1} << 20);
  r.optional_integer("moe_shared_expert_intermediate_size", &c.shared_intermediate_size, 1, int64_t{1} << 20);
  if (const json* v = r.find("moe_latent_size"); v && !v->is_null())
    c.moe_latent_size = r.integer("moe_latent_size", 1, limits::kMaxHidden);
  r.optional_number("routed_scaling_factor", &c.moe_routed_scaling, 0.0, 1e6);
  r.optional_integer("n_group", &c.moe_n_group, 1, limits::kMaxExperts);
  r.optional_integer("topk_group", &c.moe_topk_group, 1, limits::kMaxExperts);
  r.optional_boolean("norm_topk_prob", &c.moe_renormalize);
  if (c.layer_pattern.find('E') == std::string::npos) {  // no MoE layer: the fields change nothing
    c.num_experts = c.num_experts_per_tok = 1;
    return;
  }
  const std::string e_key = r.find("num_local_experts") ? "num_local_experts" : "n_routed_experts";
  if (E < 2) r.fail(e_key, "expected at least 2 experts for the MoE (E) layers, got " + std::to_string(E));
  if (k > E) r.fail("num_experts_per_tok", "expected 1.." + std::to_string(E) + " (the experts), got " + std::to_string(k));
  const int64_t G = c.moe_n_group;
  if (E % G != 0 || (G > 1 && E / G < 2))
    r.fail("n_group", "expected a divisor of the " + std::to_string(E) +
                          " experts leaving at least 2 in each group, got " + std::to_string(G));
  if (c.moe_topk_group > G)
    r.fail("topk_group", "expected 1.." + std::to_string(G) + " (n_group), got " + std::to_string(c.moe_topk_group));
  c.num_experts = E;
  c.num_experts_per_tok = k;
}

}  // namespace

void read_nemotron_h_fields(const JsonReader& r, JambaConfig& c) {
  read_pattern(r, c);
  // Attention: an explicit head_dim (null: hidden_size / heads), no bias, no positional encoding.
  if (const json* v = r.find("head_dim"); v && v->is_null()) {
    if (c.hidden_size % c.num_attention_heads != 0)
      r.fail("head_dim", "is null, and num_attention_heads " + std::to_string(c.num_attention_heads) +
                             " does not divide hidden_size " + std::to_string(c.hidden_size));
    c.head_dim_explicit = c.hidden_size / c.num_attention_heads;
  } else {
    r.optional_integer("head_dim", &c.head_dim_explicit, 1, 4096);
  }
  // Attention biases: HF's NemotronHAttention (from JambaAttention) has none whatever attention_bias
  // says, NVIDIA's remote code adds them; no published checkpoint has them: refused by name.
  bool attention_bias = false;
  r.optional_boolean("attention_bias", &attention_bias);
  if (attention_bias)
    r.fail("attention_bias", "expected false (biases on Nemotron-H's attention projections are not supported), got true");
  r.optional_boolean("mlp_bias", &c.mlp_bias);
  r.optional_string("mlp_hidden_act", &c.mlp_hidden_act);
  if (c.mlp_hidden_act != "relu2")
    r.expected("mlp_hidden_act", "\"relu2\" (the Nemotron-H MLP activation supported)", json(c.mlp_hidden_act));
  std::string mamba_act = "silu";
  r.optional_string("mamba_hidden_act", &mamba_act);
  if (mamba_act != "silu") r.expected("mamba_hidden_act", "\"silu\" (the only activation supported)", json(mamba_act));
  r.optional_number("layer_norm_epsilon", &c.rms_norm_eps, 0.0, 1.0, true);

  // Mamba-2: Di = mamba_num_heads · mamba_head_dim; B/C in n_groups groups, which also group the norm.
  r.optional_integer("ssm_state_size", &c.mamba_d_state, 1, 1024);
  r.optional_integer("mamba_num_heads", &c.mamba_n_heads, 1, 1 << 16);
  r.optional_integer("mamba_head_dim", &c.mamba_d_head, 1, 4096);
  if (c.mamba_n_heads * c.mamba_d_head > limits::kMaxHidden * limits::kMaxMambaExpand)
    r.fail("mamba_num_heads", "mamba_num_heads · mamba_head_dim = " + std::to_string(c.mamba_n_heads * c.mamba_d_head) +
                                  " is above " + std::to_string(limits::kMaxHidden * limits::kMaxMambaExpand));
  field_or_alias(r, c, "n_groups", "mamba_n_groups",
                 [&](const char* k) { r.optional_integer(k, &c.mamba_n_groups, 1, c.mamba_n_heads); });
  if (c.mamba_n_heads % c.mamba_n_groups != 0)
    r.fail(r.find("mamba_n_groups") ? "mamba_n_groups" : "n_groups",
           "expected a divisor of mamba_num_heads " + std::to_string(c.mamba_n_heads) + ", got " +
               std::to_string(c.mamba_n_groups));
  field_or_alias(r, c, "conv_kernel", "mamba_d_conv", [&](const char* k) { r.optional_integer(k, &c.mamba_d_conv, 1, 64); });
  field_or_alias(r, c, "expand", "mamba_expand",
                 [&](const char* k) { r.optional_integer(k, &c.mamba_expand, 1, limits::kMaxMambaExpand); });
  field_or_alias(r, c, "use_conv_bias", "mamba_conv_bias", [&](const char* k) { r.optional_boolean(k, &c.mamba_conv_bias); });
  field_or_alias(r, c, "chunk_size", "mamba_chunk_size",
                 [&](const char* k) { r.optional_integer(k, &c.mamba_chunk_size, 1, int64_t{1} << 20); });
  // in_proj / out_proj biases: HF's mixer reads use_bias; mamba_proj_bias is a field it keeps unused.
  r.optional_boolean("use_bias", &c.mamba_proj_bias);
  bool legacy_proj_bias = false;
  r.optional_boolean("mamba_proj_bias", &legacy_proj_bias);
  if (legacy_proj_bias != c.mamba_proj_bias)
    c.ignored_fields.push_back("mamba_proj_bias (Nemotron-H's in_proj/out_proj biases follow use_bias)");
  field_or_alias(r, c, "time_step_min", "mamba_dt_min", [&](const char* k) { r.optional_number(k, &c.time_step_min, 0.0, 1e6); });
  field_or_alias(r, c, "time_step_max", "mamba_dt_max", [&](const char* k) { r.optional_number(k, &c.time_step_max, 0.0, 1e6); });
  double floor = 1e-4;
  field_or_alias(r, c, "time_step_floor", "mamba_dt_init_floor", [&](const char* k) { r.optional_number(k, &floor, 0.0, 1e6); });
  field_or_alias(r, c, "time_step_limit", "mamba_dt_limit", [&](const char* k) { read_time_step_limit(r, k, c); });

  // Fields HF reads that change nothing here: type-checked, then dropped.
  read_moe(r, c);
  for (const char* f : {"residual_in_fp32", "rescale_prenorm_residual", "moe_shared_expert_overlap"}) {
    bool b = false;
    r.optional_boolean(f, &b);
  }
  for (const char* f : {"n_shared_experts", "num_nextn_predict_layers"}) {  // n_shared_experts: HF's module ignores it
    int64_t n = 0;
    r.optional_integer(f, &n, 0, int64_t{1} << 30);
  }
  double dropout = 0;
  r.optional_number("hidden_dropout", &dropout, 0.0, 1e6);
  for (const char* f : {"mamba_ssm_cache_dtype", "mtp_hybrid_override_pattern"})
    if (const json* v = r.find(f); v && !v->is_string() && !v->is_null()) r.expected(f, "a string or null", *v);
  (void)r.find("mtp_layers_block_type");  // multi-token-prediction layers: not part of the forward pass
  c.rope_theta = 0;  // NoPE: Nemotron-H's attention has no positional encoding
}

void nemotron_h_fields_to_json(const JambaConfig& c, nlohmann::ordered_json& j) {
  j["hybrid_override_pattern"] = c.layer_pattern;
  j["head_dim"] = c.head_dim();
  j["attention_bias"] = false;
  j["mlp_hidden_act"] = c.mlp_hidden_act;
  j["mlp_bias"] = c.mlp_bias;
  j["layer_norm_epsilon"] = c.rms_norm_eps;
  j["ssm_state_size"] = c.mamba_d_state;
  j["mamba_num_heads"] = c.mamba_n_heads;
  j["mamba_head_dim"] = c.mamba_d_head;
  j["mamba_hidden_act"] = "silu";
  j["n_groups"] = c.mamba_n_groups;
  j["conv_kernel"] = c.mamba_d_conv;
  j["expand"] = c.mamba_expand;
  j["use_conv_bias"] = c.mamba_conv_bias;
  j["use_bias"] = c.mamba_proj_bias;
  j["chunk_size"] = c.mamba_chunk_size;
  j["time_step_min"] = c.time_step_min;
  j["time_step_max"] = c.time_step_max;
  j["time_step_limit"] = {c.time_step_limit_min, c.time_step_limit_max};  // ∞ written as Infinity
  if (c.layer_pattern.find('E') == std::string::npos) return;
  j["n_routed_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["moe_shared_expert_intermediate_size"] = c.shared_intermediate_size;
  j["n_shared_experts"] = 1;
  j["moe_latent_size"] = c.moe_latent_size > 0 ? nlohmann::ordered_json(c.moe_latent_size) : nlohmann::ordered_json();
  j["routed_scaling_factor"] = c.moe_routed_scaling;
  j["n_group"] = c.moe_n_group;
  j["topk_group"] = c.moe_topk_group;
  j["norm_topk_prob"] = c.moe_renormalize;
}

}  // namespace hl
