// config.json reader and writer for Jamba (jamba-spec.md §1.1 fields and defaults, §1.2 schedules)
// plus the HybridLens extensions (trace-format.md §1). Every field is type- and range-checked; the
// message names the file, the field and the allowed range. Mirrors HF JambaConfig.__init__.
#include "engine/io/config.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/input_limits.h"
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

class Reader {
 public:
  Reader(const json& j, const std::string& src) : j_(j), src_(src) {}

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throw LoadError(src_ + ": field '" + field + "' " + msg);
  }
  const json* get(const std::string& f) const {
    auto it = j_.find(f);
    return it == j_.end() ? nullptr : &*it;
  }
  std::string got(const json& v) const {
    std::string d = v.dump();
    if (d.size() > 40) d = d.substr(0, 40) + "...";
    return std::string(json_type_name(v)) + " " + d;
  }
  int64_t as_int(const std::string& f, const json& v) const {
    if (!v.is_number_integer()) fail(f, "must be an integer, got " + got(v));
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail(f, "is too large: " + v.dump());
    }
    return v.get<int64_t>();
  }
  // Integer field in [lo, hi]; absent → default.
  void integer(const std::string& f, int64_t* out, int64_t lo, int64_t hi) const {
    if (const json* v = get(f)) {
      int64_t x = as_int(f, *v);
      if (x < lo || x > hi) {
        fail(f, "is " + std::to_string(x) + ", allowed range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
      *out = x;
    }
  }
  void boolean(const std::string& f, bool* out) const {
    if (const json* v = get(f)) {
      if (!v->is_boolean()) fail(f, "must be true or false, got " + got(*v));
      *out = v->get<bool>();
    }
  }
  // Finite real in [lo, hi] (lo_open: lo excluded).
  void real(const std::string& f, double* out, double lo, double hi, bool lo_open) const {
    if (const json* v = get(f)) {
      if (!v->is_number()) fail(f, "must be a number, got " + got(*v));
      double x = v->get<double>();
      if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
        fail(f, "is " + v->dump() + ", allowed range " + (lo_open ? "(" : "[") + json(lo).dump() + ", " +
                    json(hi).dump() + "]");
      }
      *out = x;
    }
  }
  void string(const std::string& f, std::string* out) const {
    if (const json* v = get(f)) {
      if (!v->is_string()) fail(f, "must be a string, got " + got(*v));
      *out = v->get<std::string>();
    }
  }
  void check_type(const std::string& f, bool ok, const char* expected) const {
    if (const json* v = get(f)) {
      if (!ok) fail(f, std::string("must be ") + expected + ", got " + got(*v));
    }
  }

 private:
  const json& j_;
  const std::string& src_;
};

}  // namespace

JambaConfig parse_config(const std::string& json_text, const std::string& source) {
  json j = parse_json_checked(json_text, source, 16);
  if (!j.is_object()) throw LoadError(source + ": top level must be a JSON object, got " + json_type_name(j));
  Reader r(j, source);
  JambaConfig c;

  const json* mt = r.get("model_type");
  if (!mt) throw LoadError(source + ": missing required field 'model_type' (must be \"jamba\")");
  if (!mt->is_string() || mt->get<std::string>() != "jamba") {
    r.fail("model_type", "is " + mt->dump() + ", only \"jamba\" is supported");
  }

  // Sizes first: later checks refer to them.
  r.integer("vocab_size", &c.vocab_size, 1, limits::kMaxVocab);
  r.integer("hidden_size", &c.hidden_size, 1, limits::kMaxHidden);
  r.integer("intermediate_size", &c.intermediate_size, 1, int64_t{1} << 20);
  r.integer("num_hidden_layers", &c.num_hidden_layers, 1, limits::kMaxLayers);
  r.integer("num_attention_heads", &c.num_attention_heads, 1, c.hidden_size);
  if (c.hidden_size % c.num_attention_heads != 0) {
    r.fail("num_attention_heads", "is " + std::to_string(c.num_attention_heads) + ", must divide hidden_size " +
                                      std::to_string(c.hidden_size));
  }
  const json* kv = r.get("num_key_value_heads");
  if (kv && kv->is_null())
    c.num_key_value_heads = c.num_attention_heads;  // HF: None → num_attention_heads
  else
    r.integer("num_key_value_heads", &c.num_key_value_heads, 1, c.num_attention_heads);
  if (c.num_key_value_heads > c.num_attention_heads || c.num_attention_heads % c.num_key_value_heads != 0) {
    r.fail("num_key_value_heads", std::string(kv ? "is " : "defaults to ") + std::to_string(c.num_key_value_heads) +
                                      ", must divide num_attention_heads " + std::to_string(c.num_attention_heads));
  }

  r.string("hidden_act", &c.hidden_act);
  if (c.hidden_act != "silu") r.fail("hidden_act", "is \"" + c.hidden_act + "\", only \"silu\" is supported");
  r.real("initializer_range", &c.initializer_range, 0.0, 1e3, false);
  r.real("rms_norm_eps", &c.rms_norm_eps, 0.0, 1.0, true);
  r.real("router_aux_loss_coef", &c.router_aux_loss_coef, 0.0, 1e6, false);
  r.boolean("tie_word_embeddings", &c.tie_word_embeddings);
  r.boolean("mamba_conv_bias", &c.mamba_conv_bias);
  r.boolean("mamba_proj_bias", &c.mamba_proj_bias);

  // Token ids: pad/bos may be null (-1 = none); eos is an int, a list of ints, or null (empty).
  for (auto [f, out] : {std::pair<const char*, int64_t*>{"pad_token_id", &c.pad_token_id},
                        std::pair<const char*, int64_t*>{"bos_token_id", &c.bos_token_id}}) {
    const json* v = r.get(f);
    if (v && v->is_null())
      *out = -1;
    else
      r.integer(f, out, 0, c.vocab_size - 1);
  }
  if (const json* v = r.get("eos_token_id")) {
    c.eos_token_ids.clear();
    auto one = [&](const json& e) {
      int64_t x = r.as_int("eos_token_id", e);
      if (x < 0 || x >= c.vocab_size) {
        r.fail("eos_token_id",
               "holds " + std::to_string(x) + ", allowed range [0, " + std::to_string(c.vocab_size - 1) + "]");
      }
      c.eos_token_ids.push_back(x);
    };
    if (v->is_array()) {
      if (v->size() > 1024) r.fail("eos_token_id", "lists " + std::to_string(v->size()) + " ids, at most 1024 allowed");
      for (const json& e : *v) one(e);
    } else if (!v->is_null()) {
      one(*v);
    }
  }
  r.integer("max_position_embeddings", &c.max_position_embeddings, 1, INT64_MAX);

  // Experts and schedules.
  const json* ne = r.get("num_experts");
  const json* nle = r.get("num_local_experts");  // v5 attribute_map alias
  if (ne && nle && *ne != *nle) r.fail("num_local_experts", "is " + nle->dump() + " but num_experts is " + ne->dump());
  r.integer(ne ? "num_experts" : "num_local_experts", &c.num_experts, 1, limits::kMaxExperts);
  r.integer("num_experts_per_tok", &c.num_experts_per_tok, 1, c.num_experts);
  if (!r.get("num_experts_per_tok") && c.num_experts_per_tok > c.num_experts) {
    r.fail("num_experts_per_tok",
           "defaults to 2, more than num_experts " + std::to_string(c.num_experts) + "; set it in [1, num_experts]");
  }
  r.integer("expert_layer_period", &c.expert_layer_period, 1, 1024);
  r.integer("expert_layer_offset", &c.expert_layer_offset, 0, c.expert_layer_period - 1);
  r.integer("attn_layer_period", &c.attn_layer_period, 1, 1024);
  r.integer("attn_layer_offset", &c.attn_layer_offset, 0, c.attn_layer_period - 1);
  if (!r.get("expert_layer_offset") && c.expert_layer_offset >= c.expert_layer_period) {
    r.fail("expert_layer_offset",
           "defaults to 1, must be < expert_layer_period " + std::to_string(c.expert_layer_period));
  }
  if (!r.get("attn_layer_offset") && c.attn_layer_offset >= c.attn_layer_period) {
    r.fail("attn_layer_offset", "defaults to 4, must be < attn_layer_period " + std::to_string(c.attn_layer_period));
  }

  // Mamba.
  r.integer("mamba_d_state", &c.mamba_d_state, 1, 1024);
  r.integer("mamba_d_conv", &c.mamba_d_conv, 1, 64);
  r.integer("mamba_expand", &c.mamba_expand, 1, limits::kMaxMambaExpand);
  c.mamba_dt_rank_auto = true;  // JambaConfig default is "auto"
  if (const json* v = r.get("mamba_dt_rank")) {
    if (v->is_string()) {
      if (v->get<std::string>() != "auto")
        r.fail("mamba_dt_rank", "is " + v->dump() + ", must be \"auto\" or an integer");
    } else {
      c.mamba_dt_rank_auto = false;
      r.integer("mamba_dt_rank", &c.mamba_dt_rank, 1, 65536);
    }
  }
  if (c.mamba_dt_rank_auto) c.mamba_dt_rank = (c.hidden_size + 15) / 16;  // math.ceil(H / 16)

  // Type checks of fields that do not change the math.
  for (const char* f :
       {"use_cache", "output_router_logits", "use_mamba_kernels", "use_mambapy", "use_associative_scan"}) {
    const json* v = r.get(f);
    r.check_type(f, v && v->is_boolean(), "true or false");
  }
  for (const char* f : {"num_logits_to_keep", "sliding_window"}) {
    const json* v = r.get(f);
    r.check_type(f, v && (v->is_null() || (v->is_number_integer() && v->get<int64_t>() >= 0)),
                 "null or a non-negative integer");
  }
  {
    const json* v = r.get("attention_dropout");
    r.check_type("attention_dropout", v && v->is_number() && v->get<double>() >= 0 && v->get<double>() <= 1,
                 "a number in [0, 1]");
  }
  {
    const json* v = r.get("architectures");
    bool ok = v && v->is_array();
    if (ok) {
      for (const json& e : *v) ok = ok && e.is_string();
    }
    r.check_type("architectures", ok, "a list of strings");
  }
  for (const char* f : {"torch_dtype", "dtype"}) {
    const json* v = r.get(f);
    if (v && v->is_string() && c.torch_dtype.empty()) c.torch_dtype = v->get<std::string>();
    r.check_type(f, v && (v->is_string() || v->is_null()), "a string or null");
  }

  // Extensions (trace-format.md §1).
  if (const json* v = r.get("attention_normalizer")) {
    if (!v->is_string()) r.fail("attention_normalizer", "must be a string, got " + r.got(*v));
    std::string s = v->get<std::string>();
    if (s == "softmax")
      c.attention_normalizer = Normalizer::Softmax;
    else if (s == "softmax1")
      c.attention_normalizer = Normalizer::Softmax1;
    else if (s == "sink")
      r.fail("attention_normalizer",
             "is \"sink\": allowed \"softmax\" or \"softmax1\" (a sink layer is marked by its "
             "self_attn.sinks tensor, not by config.json)");
    else
      r.fail("attention_normalizer", "is " + v->dump() + ", allowed \"softmax\" or \"softmax1\"");
  }
  r.integer("num_register_tokens", &c.num_register_tokens, 0, 1024);

  // Everything else: recorded for `info`, never acted on.
  static const std::set<std::string> kRead = {"model_type",          "vocab_size",           "hidden_size",
                                              "intermediate_size",   "num_hidden_layers",    "num_attention_heads",
                                              "num_key_value_heads", "hidden_act",           "initializer_range",
                                              "rms_norm_eps",        "router_aux_loss_coef", "tie_word_embeddings",
                                              "mamba_conv_bias",     "mamba_proj_bias",      "pad_token_id",
                                              "bos_token_id",        "eos_token_id",         "max_position_embeddings",
                                              "num_experts",         "num_experts_per_tok",  "expert_layer_period",
                                              "expert_layer_offset", "attn_layer_period",    "attn_layer_offset",
                                              "mamba_d_state",       "mamba_d_conv",         "mamba_expand",
                                              "mamba_dt_rank",       "attention_normalizer", "num_register_tokens"};
  for (const auto& [k, v] : j.items()) {
    (void)v;
    if (kRead.count(k) || kHarmless.count(k)) continue;
    // Legacy AI21 remote-code fields (auto_map, n_ctx, mamba_inner_layernorms,
    // calc_logits_for_entire_prompt) and unknown fields alike: remote code is never run.
    c.ignored_fields.push_back(k);
  }
  return c;
}

JambaConfig load_config_file(const std::string& path) {
  std::string text = read_file_limited(path, 1 << 20, path);
  return parse_config(text, base_name(path));
}

std::string config_to_json(const JambaConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"JambaForCausalLM"};
  j["model_type"] = "jamba";
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["hidden_act"] = c.hidden_act;
  j["initializer_range"] = c.initializer_range;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["pad_token_id"] = c.pad_token_id < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(c.pad_token_id);
  j["bos_token_id"] = c.bos_token_id < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(c.bos_token_id);
  if (c.eos_token_ids.empty())
    j["eos_token_id"] = nullptr;
  else if (c.eos_token_ids.size() == 1)
    j["eos_token_id"] = c.eos_token_ids[0];
  else
    j["eos_token_id"] = c.eos_token_ids;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["num_experts"] = c.num_experts;
  j["expert_layer_period"] = c.expert_layer_period;
  j["expert_layer_offset"] = c.expert_layer_offset;
  j["attn_layer_period"] = c.attn_layer_period;
  j["attn_layer_offset"] = c.attn_layer_offset;
  j["mamba_d_state"] = c.mamba_d_state;
  j["mamba_d_conv"] = c.mamba_d_conv;
  j["mamba_expand"] = c.mamba_expand;
  if (c.mamba_dt_rank_auto)
    j["mamba_dt_rank"] = "auto";
  else
    j["mamba_dt_rank"] = c.mamba_dt_rank;
  j["mamba_conv_bias"] = c.mamba_conv_bias;
  j["mamba_proj_bias"] = c.mamba_proj_bias;
  j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  j["use_mamba_kernels"] = false;
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  // Extensions only when they differ from a standard Jamba checkpoint.
  if (c.attention_normalizer != Normalizer::Softmax)
    j["attention_normalizer"] = normalizer_name(c.attention_normalizer);
  if (c.num_register_tokens != 0) j["num_register_tokens"] = c.num_register_tokens;
  return j.dump(2) + "\n";
}

}  // namespace hl
