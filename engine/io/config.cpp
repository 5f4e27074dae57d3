// config.json reader and writer for Jamba (jamba-spec.md §1.1 fields and defaults, §1.2 schedules)
// plus the HybridLens extensions (trace-format.md §1). Every field is type- and range-checked; the
// message names the file, the field and the allowed range. Mirrors HF JambaConfig.__init__.
#include "engine/io/config.h"
#include "engine/io/config_families.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/input_limits.h"
#include "engine/io/json_reader.h"
#include "engine/io/json_util.h"
#include "engine/io/safetensors.h"

namespace hl {

const char* normalizer_name(Normalizer n) {
  switch (n) {
    case Normalizer::Softmax:
      return "softmax";
    case Normalizer::Softmax1:
      return "softmax1";
    case Normalizer::Sink:
      return "sink";
  }
  return "?";
}

bool parse_normalizer(const std::string& s, Normalizer* out) {
  for (Normalizer n : {Normalizer::Softmax, Normalizer::Softmax1, Normalizer::Sink}) {
    if (s == normalizer_name(n)) {
      *out = n;
      return true;
    }
  }
  return false;
}

const char* family_name(Family f) {
  switch (f) {
    case Family::Jamba: return "jamba";
    case Family::Bamba: return "bamba";
    case Family::NemotronH: return "nemotron_h";
    case Family::GraniteH: return "granitemoehybrid";
    case Family::FalconH1: return "falcon_h1";
  }
  return "?";
}

bool JambaConfig::is_eos(int64_t id) const {
  for (int64_t e : eos_token_ids) {
    if (e == id) return true;
  }
  return false;
}

namespace {

using nlohmann::json;

// Fields read by HF or by HybridLens whose values do not change the math; accepted silently.
const std::set<std::string> kHarmless = {"architectures",
                                         "transformers_version",
                                         "_name_or_path",
                                         "use_cache",
                                         "output_router_logits",
                                         "use_mamba_kernels",
                                         "attention_dropout",
                                         "num_logits_to_keep",
                                         "sliding_window",
                                         "torch_dtype",
                                         "dtype",
                                         "use_mambapy",
                                         "use_associative_scan",
                                         "num_local_experts"};

// Jamba's experts, its period/offset schedule (jamba-spec.md §1.2) and its dt rank.
void read_jamba_schedule(const JsonReader& r, JambaConfig& c) {
  // Experts and schedules.
  const json* ne = r.find("num_experts");
  const json* nle = r.find("num_local_experts");  // v5 attribute_map alias
  if (ne && nle && *ne != *nle) r.expected("num_local_experts", "num_experts " + ne->dump() + " (an alias)", *nle);
  r.optional_integer(ne ? "num_experts" : "num_local_experts", &c.num_experts, 1, limits::kMaxExperts);
  r.optional_integer("num_experts_per_tok", &c.num_experts_per_tok, 1, c.num_experts);
  if (!r.find("num_experts_per_tok") && c.num_experts_per_tok > c.num_experts)
    r.fail("num_experts_per_tok", "expected " + JsonReader::integer_range(1, c.num_experts) +
                                      " (at most num_experts), got the default 2; set it");
  r.optional_integer("expert_layer_period", &c.expert_layer_period, 1, 1024);
  r.optional_integer("expert_layer_offset", &c.expert_layer_offset, 0, c.expert_layer_period - 1);
  r.optional_integer("attn_layer_period", &c.attn_layer_period, 1, 1024);
  r.optional_integer("attn_layer_offset", &c.attn_layer_offset, 0, c.attn_layer_period - 1);
  if (!r.find("expert_layer_offset") && c.expert_layer_offset >= c.expert_layer_period)
    r.fail("expert_layer_offset", "expected " + JsonReader::integer_range(0, c.expert_layer_period - 1) +
                                      " (below expert_layer_period), got the default 1; set it");
  if (!r.find("attn_layer_offset") && c.attn_layer_offset >= c.attn_layer_period)
    r.fail("attn_layer_offset", "expected " + JsonReader::integer_range(0, c.attn_layer_period - 1) +
                                    " (below attn_layer_period), got the default 4; set it");

  c.mamba_dt_rank_auto = true;  // JambaConfig default is "auto"
  if (const json* v = r.find("mamba_dt_rank")) {
    if (v->is_string()) {
      if (v->get<std::string>() != "auto") r.expected("mamba_dt_rank", "\"auto\" or an integer in [1, 65536]", *v);
    } else {
      c.mamba_dt_rank_auto = false;
      r.optional_integer("mamba_dt_rank", &c.mamba_dt_rank, 1, 65536);
    }
  }
  if (c.mamba_dt_rank_auto) c.mamba_dt_rank = (c.hidden_size + 15) / 16;  // math.ceil(H / 16)
}

}  // namespace

JambaConfig parse_config(const std::string& json_text, const std::string& source) {
  json j = parse_json_checked(json_text, source, 16, JsonDialect::Python);  // Python writes Infinity/NaN
  const JsonReader r = JsonReader::top(j, source);
  const std::string kTypes =
      "\"jamba\", \"bamba\", \"nemotron_h\", \"granitemoehybrid\" or \"falcon_h1\" (the model types supported)";
  const json& mt = r.require("model_type", kTypes);
  const std::string type = mt.is_string() ? mt.get<std::string>() : "";
  JambaConfig c = type == "jamba"              ? JambaConfig{}
                  : type == "bamba"            ? bamba_defaults()
                  : type == "nemotron_h"       ? nemotron_h_defaults()
                  : type == "granitemoehybrid" ? granite_h_defaults()
                  : type == "falcon_h1"        ? falcon_h1_defaults()
                                               : (r.expected("model_type", kTypes, mt), JambaConfig{});
  // Nemotron-H names the norm epsilon, the activations and the Mamba fields its own way
  // (config_nemotron_h.cpp); an explicit head_dim frees the heads from dividing hidden_size.
  const bool own_names = c.family == Family::NemotronH;

  // Sizes first: later checks refer to them.
  r.optional_integer("vocab_size", &c.vocab_size, 1, limits::kMaxVocab);
  r.optional_integer("hidden_size", &c.hidden_size, 1, limits::kMaxHidden);
  r.optional_integer("intermediate_size", &c.intermediate_size, 1, int64_t{1} << 20);
  r.optional_integer("num_hidden_layers", &c.num_hidden_layers, 1, limits::kMaxLayers);
  r.optional_integer("num_attention_heads", &c.num_attention_heads, 1, c.hidden_size);
  if (!r.find("num_attention_heads") && c.num_attention_heads > c.hidden_size)
    r.fail("num_attention_heads", "expected " + JsonReader::integer_range(1, c.hidden_size) + " (at most hidden_size), got the default " +
                                      std::to_string(c.num_attention_heads) + "; set it");
  // Falcon-H1's explicit head_dim frees the heads too (its published 0.5B: 8 heads of 64 in 1024).
  const bool free_heads = own_names || (c.family == Family::FalconH1 && r.find("head_dim") && !r.find("head_dim")->is_null());
  if (!free_heads && c.hidden_size % c.num_attention_heads != 0)
    r.expected("num_attention_heads", "a divisor of hidden_size " + std::to_string(c.hidden_size),
               json(c.num_attention_heads));
  const json* kv = r.find("num_key_value_heads");
  if (kv && kv->is_null())
    c.num_key_value_heads = c.num_attention_heads;  // HF: None → num_attention_heads
  else
    r.optional_integer("num_key_value_heads", &c.num_key_value_heads, 1, c.num_attention_heads);
  if (c.num_key_value_heads > c.num_attention_heads || c.num_attention_heads % c.num_key_value_heads != 0)
    r.fail("num_key_value_heads", "expected a divisor of num_attention_heads " + std::to_string(c.num_attention_heads) +
                                      ", got " + std::to_string(c.num_key_value_heads) + (kv ? "" : " (the default)"));

  if (!own_names) {
    r.optional_string("hidden_act", &c.hidden_act);
    if (c.hidden_act != "silu") r.expected("hidden_act", "\"silu\" (the only activation supported)", json(c.hidden_act));
    r.optional_number("rms_norm_eps", &c.rms_norm_eps, 0.0, 1.0, true);
    r.optional_number("router_aux_loss_coef", &c.router_aux_loss_coef, 0.0, 1e6);
    r.optional_boolean("mamba_conv_bias", &c.mamba_conv_bias);
    r.optional_boolean("mamba_proj_bias", &c.mamba_proj_bias);
  }
  r.optional_number("initializer_range", &c.initializer_range, 0.0, 1e3);
  r.optional_boolean("tie_word_embeddings", &c.tie_word_embeddings);

  // Token ids: pad/bos may be null (-1 = none); eos is an int, a list of ints, or null (empty).
  for (auto [f, out] : {std::pair<const char*, int64_t*>{"pad_token_id", &c.pad_token_id},
                        std::pair<const char*, int64_t*>{"bos_token_id", &c.bos_token_id}}) {
    const json* v = r.find(f);
    if (v && v->is_null())
      *out = -1;
    else
      r.optional_integer(f, out, 0, c.vocab_size - 1);
  }
  if (const json* v = r.find("eos_token_id")) {
    c.eos_token_ids.clear();
    if (v->is_array()) {
      if (v->size() > 1024) r.fail("eos_token_id", "expected at most 1024 ids, got " + std::to_string(v->size()));
      for (size_t i = 0; i < v->size(); ++i)
        c.eos_token_ids.push_back(
            r.integer_value((*v)[i], "eos_token_id[" + std::to_string(i) + "]", 0, c.vocab_size - 1));
    } else if (!v->is_null()) {
      c.eos_token_ids.push_back(r.integer_value(*v, "eos_token_id", 0, c.vocab_size - 1));
    }
  }
  // A family default the file does not set (Nemotron-H's eos 2) that lies outside a vocabulary this
  // small names no token: none, as the written config then says (null), so it reads back the same.
  if (!r.find("pad_token_id") && c.pad_token_id >= c.vocab_size) c.pad_token_id = -1;
  if (!r.find("bos_token_id") && c.bos_token_id >= c.vocab_size) c.bos_token_id = -1;
  if (!r.find("eos_token_id")) {
    std::vector<int64_t> kept;
    for (int64_t e : c.eos_token_ids)
      if (e < c.vocab_size) kept.push_back(e);
    c.eos_token_ids = kept;
  }
  r.optional_integer("max_position_embeddings", &c.max_position_embeddings, 1, INT64_MAX);

  // Mamba.
  if (!own_names) {
    r.optional_integer("mamba_d_state", &c.mamba_d_state, 1, 1024);
    r.optional_integer("mamba_d_conv", &c.mamba_d_conv, 1, 64);
    r.optional_integer("mamba_expand", &c.mamba_expand, 1, limits::kMaxMambaExpand);
  }
  if (c.family == Family::Jamba)
    read_jamba_schedule(r, c);
  else if (c.family == Family::Bamba)
    read_bamba_fields(r, c);
  else if (c.family == Family::NemotronH)
    read_nemotron_h_fields(r, c);
  else if (c.family == Family::GraniteH)
    read_granite_h_fields(r, c);
  else
    read_falcon_h1_fields(r, c);

  // Type checks of fields that do not change the math.
  auto check_type = [&](const char* f, bool (*ok)(const json&), const char* expected) {
    if (const json* v = r.find(f); v && !ok(*v)) r.expected(f, expected, *v);
  };
  for (const char* f :
       {"use_cache", "output_router_logits", "use_mamba_kernels", "use_mambapy", "use_associative_scan"})
    check_type(
        f, [](const json& v) { return v.is_boolean(); }, "true or false");
  for (const char* f : {"num_logits_to_keep", "sliding_window"})
    check_type(
        f, [](const json& v) { return v.is_null() || (v.is_number_integer() && v.get<int64_t>() >= 0); },
        "null or a non-negative integer");
  check_type(
      "attention_dropout", [](const json& v) { return v.is_number() && v.get<double>() >= 0 && v.get<double>() <= 1; },
      "a number in [0, 1]");
  check_type(
      "architectures",
      [](const json& v) {
        bool ok = v.is_array();
        for (const json& e : ok ? v : json::array()) ok = ok && e.is_string();
        return ok;
      },
      "a list of strings");
  for (const char* f : {"torch_dtype", "dtype"}) {
    const json* v = r.find(f);
    if (v && v->is_string() && c.torch_dtype.empty()) c.torch_dtype = v->get<std::string>();
    check_type(
        f, [](const json& x) { return x.is_string() || x.is_null(); }, "a string or null");
  }

  // Extensions (trace-format.md §1).
  if (const json* v = r.find("attention_normalizer")) {
    const std::string allowed = "\"softmax\" or \"softmax1\"";
    if (!v->is_string()) r.expected("attention_normalizer", allowed, *v);
    const std::string s = v->get<std::string>();
    if (s == "softmax")
      c.attention_normalizer = Normalizer::Softmax;
    else if (s == "softmax1")
      c.attention_normalizer = Normalizer::Softmax1;
    else if (s == "sink")
      r.fail("attention_normalizer", "expected " + allowed +
                                         ", got string \"sink\" (a sink layer is marked by its self_attn.sinks tensor, "
                                         "not by config.json)");
    else
      r.expected("attention_normalizer", allowed, *v);
  }
  r.optional_integer("num_register_tokens", &c.num_register_tokens, 0, 1024);

  // Everything else: recorded for `info`, never acted on.
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (r.read_keys().count(k) || kHarmless.count(k)) continue;
    // Legacy AI21 remote-code fields (auto_map, n_ctx, mamba_inner_layernorms,
    // calc_logits_for_entire_prompt) and unknown fields alike: remote code is never run.
    c.ignored_fields.push_back(k);
  }
  std::sort(c.ignored_fields.begin(), c.ignored_fields.end());
  return c;
}

JambaConfig load_config_file(const std::string& path) {
  std::string text = read_file_limited(path, 1 << 20, path);
  return parse_config(text, base_name(path));
}

std::string config_to_json(const JambaConfig& c) {
  nlohmann::ordered_json j;
  const bool jamba = c.family == Family::Jamba, nemotron = c.family == Family::NemotronH;
  const bool granite = c.family == Family::GraniteH, falcon = c.family == Family::FalconH1;
  j["architectures"] = {jamba      ? "JambaForCausalLM"
                        : nemotron ? "NemotronHForCausalLM"
                        : granite  ? "GraniteMoeHybridForCausalLM"
                        : falcon   ? "FalconH1ForCausalLM"
                                   : "BambaForCausalLM"};
  j["model_type"] = family_name(c.family);
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  if (!nemotron) j["hidden_act"] = c.hidden_act;
  j["initializer_range"] = c.initializer_range;
  if (!nemotron) j["rms_norm_eps"] = c.rms_norm_eps;
  j["pad_token_id"] = c.pad_token_id < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(c.pad_token_id);
  j["bos_token_id"] = c.bos_token_id < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(c.bos_token_id);
  if (c.eos_token_ids.empty())
    j["eos_token_id"] = nullptr;
  else if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids[0];
  else
    j["eos_token_id"] = c.eos_token_ids;
  j["max_position_embeddings"] = c.max_position_embeddings;
  if (jamba) {
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["num_experts"] = c.num_experts;
    j["expert_layer_period"] = c.expert_layer_period;
    j["expert_layer_offset"] = c.expert_layer_offset;
    j["attn_layer_period"] = c.attn_layer_period;
    j["attn_layer_offset"] = c.attn_layer_offset;
  }
  if (!nemotron) {
    j["mamba_d_state"] = c.mamba_d_state;
    j["mamba_d_conv"] = c.mamba_d_conv;
    j["mamba_expand"] = c.mamba_expand;
  }
  if (jamba) {
    if (c.mamba_dt_rank_auto)
      j["mamba_dt_rank"] = "auto";
    else
      j["mamba_dt_rank"] = c.mamba_dt_rank;
  }
  if (!nemotron) {  // Nemotron-H names its biases use_conv_bias / use_bias (its own writer)
    j["mamba_conv_bias"] = c.mamba_conv_bias;
    j["mamba_proj_bias"] = c.mamba_proj_bias;
  }
  if (jamba) {
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
    j["use_mamba_kernels"] = false;
  } else if (nemotron) {
    nemotron_h_fields_to_json(c, j);
  } else if (granite) {
    granite_h_fields_to_json(c, j);
  } else if (falcon) {
    falcon_h1_fields_to_json(c, j);
  } else {
    bamba_fields_to_json(c, j);
  }
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  // Extensions only when they differ from a standard Jamba checkpoint.
  if (c.attention_normalizer != Normalizer::Softmax)
    j["attention_normalizer"] = normalizer_name(c.attention_normalizer);
  if (c.num_register_tokens != 0) j["num_register_tokens"] = c.num_register_tokens;
  return json_text_python(j, 2) + "\n";  // dump(2)'s text, with ∞ as Python's Infinity (time_step_limit)
}

}  // namespace hl
