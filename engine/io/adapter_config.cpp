// adapter_config.json of a PEFT LoRA / DoRA adapter (jamba-spec.md §5.2, PEFT LoraConfig): keys,
// ranges, the rank_pattern / alpha_pattern rule of PEFT get_pattern_key (re.match(rf"(.*\.)?({key})$"))
// and target_modules matching (PEFT check_target_module_exists). Not the tensors: see adapter.cpp.
// Patterns are untrusted: bounded length, count and repetition, polynomial-time matching.
#include <algorithm>
#include <cmath>
#include <set>

#include "engine/core/error.h"
#include "engine/io/adapter.h"
#include "engine/io/json_reader.h"
#include "engine/io/json_util.h"

namespace hl {
namespace {

bool is_literal_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

// '.' in the key matches any one character (it is a regex metacharacter in PEFT's rule).
bool wildcard_equal(const char* name, const std::string& key) {
  for (size_t i = 0; i < key.size(); ++i)
    if (key[i] != '.' && key[i] != name[i]) return false;
  return true;
}

// Product of the {n}, {n,}, {n,m} repetition counts outside character classes; stops early past `limit`.
int64_t repeat_product(const std::string& p, int64_t limit) {
  int64_t product = 1;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      continue;
    }
    if (c == '[') {
      in_class = true;
      continue;
    }
    if (c != '{') continue;
    // {n}, {n,} or {n,m}: the compiler unrolls max(n, m) copies of the repeated atom.
    int64_t count = 0, number = 0;
    size_t k = i + 1;
    bool digits = false;
    for (; k < p.size() && ((p[k] >= '0' && p[k] <= '9') || p[k] == ','); ++k) {
      if (p[k] == ',') {
        count = std::max(count, number);
        number = 0;
        continue;
      }
      digits = true;
      number = std::min<int64_t>(number * 10 + (p[k] - '0'), limit + 1);
    }
    count = std::max(count, number);
    if (!digits || k >= p.size() || p[k] != '}') continue;
    product = std::min<int64_t>(product * std::max<int64_t>(count, 1), limit + 1);
  }
  return product;
}

std::regex compile_regex(const std::string& pattern) {
  auto flags = std::regex::ECMAScript;
#if defined(__GLIBCXX__)
  flags |= std::regex_constants::__polynomial;  // breadth-first executor: no exponential backtracking
#endif
  return std::regex(pattern, flags);
}

}  // namespace

ModulePattern ModulePattern::compile(const std::string& text, const std::string& source, const std::string& what) {
  const std::string where = source + ": " + what + " '" + (text.size() > 64 ? text.substr(0, 64) + "…" : text) + "'";
  if (text.empty()) throw LoadError(where + ": empty pattern");
  if (text.size() > kMaxChars)
    throw LoadError(where + ": " + std::to_string(text.size()) + " characters, at most " + std::to_string(kMaxChars) +
                    " allowed");
  ModulePattern p;
  p.text_ = text;
  p.literal_ = std::all_of(text.begin(), text.end(), is_literal_char);
  if (p.literal_) return p;
  // A backslash before a digit is a backreference (\1) or a legacy octal escape: module patterns
  // need neither, and libstdc++ parses the digits of a long one into an overflowing integer
  // (found by fuzz_adapter: "\7777…").
  for (size_t k = 0; k + 1 < text.size(); ++k) {
    if (text[k] != '\\') continue;
    if (text[k + 1] >= '0' && text[k + 1] <= '9')
      throw LoadError(where + ": backreferences and octal escapes (\\" + std::string(1, text[k + 1]) +
                      "…) are not supported in module patterns");
    ++k;  // skip the escaped character: in \\1 the backslash is escaped and the 1 is literal
  }
  if (repeat_product(text, kMaxRepeat) > kMaxRepeat)
    throw LoadError(where + ": repetition counts {n,m} multiply to more than " + std::to_string(kMaxRepeat));
  try {
    p.suffix_re_ = std::make_shared<const std::regex>(compile_regex("(.*\\.)?(" + text + ")"));
    p.full_re_ = std::make_shared<const std::regex>(compile_regex(text));
  } catch (const std::regex_error& e) {
    throw LoadError(where + ": invalid regular expression (ECMAScript syntax; Python-only forms such as " +
                    "(?P<name>...) and look-behind are not supported): " + e.what());
  }
  return p;
}

bool ModulePattern::matches_suffix(const std::string& name) const {
  if (literal_) {
    if (text_.size() > name.size()) return false;
    const size_t start = name.size() - text_.size();
    if (start > 0 && name[start - 1] != '.') return false;
    return wildcard_equal(name.data() + start, text_);
  }
  return suffix_re_ && std::regex_match(name, *suffix_re_);
}

bool ModulePattern::matches_full(const std::string& name) const {
  if (literal_) return name.size() == text_.size() && wildcard_equal(name.data(), text_);
  return full_re_ && std::regex_match(name, *full_re_);
}

bool ModuleSelector::matches(const std::string& path) const {
  switch (kind) {
    case Kind::None:
      return false;
    case Kind::AllLinear:
      return path != "lm_head";  // PEFT "all-linear" leaves out the output layer
    case Kind::Regex:
      return !regex.empty() && regex.front().matches_full(path);
    case Kind::List:
      for (const std::string& e : names) {
        if (path == e) return true;
        if (path.size() > e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0 &&
            path[path.size() - e.size() - 1] == '.')
          return true;
      }
      return false;
  }
  return false;
}

int64_t AdapterConfig::rank_for(const std::string& path) const {
  for (const auto& [pattern, value] : rank_pattern)
    if (pattern.matches_suffix(path)) return value;
  return r;
}

double AdapterConfig::alpha_for(const std::string& path) const {
  for (const auto& [pattern, value] : alpha_pattern)
    if (pattern.matches_suffix(path)) return value;
  return lora_alpha;
}

double AdapterConfig::scaling_for(const std::string& path) const {
  const double rank = static_cast<double>(rank_for(path));
  const double alpha = alpha_for(path);
  return use_rslora ? alpha / std::sqrt(rank) : alpha / rank;
}

bool AdapterConfig::targets(const std::string& path) const {
  if (target_modules.kind != ModuleSelector::Kind::None && !target_modules.matches(path)) return false;
  if (exclude_modules.matches(path)) return false;
  if (!layers_to_transform.empty()) {
    const std::string prefix = "model.layers.";
    if (path.rfind(prefix, 0) != 0) return false;
    int64_t layer = 0;
    size_t i = prefix.size();
    if (i >= path.size() || path[i] < '0' || path[i] > '9') return false;
    for (; i < path.size() && path[i] >= '0' && path[i] <= '9' && layer < 100000000; ++i)
      layer = layer * 10 + (path[i] - '0');
    return std::find(layers_to_transform.begin(), layers_to_transform.end(), layer) != layers_to_transform.end();
  }
  return true;
}

namespace {

using Json = nlohmann::json;

// adapter_config.json's fields through the shared reader (json_reader.h), plus PEFT's rules.
struct Reader : JsonReader {
  using JsonReader::JsonReader;
  explicit Reader(JsonReader r) : JsonReader(std::move(r)) {}

  // An optional switch; null counts as absent.
  bool boolean_or(const std::string& key, bool fallback) const {
    const Json* v = find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_boolean()) expected(key, "true or false", *v);
    return v->get<bool>();
  }
  // A finite number with |x| <= bound.
  double magnitude(const std::string& key, const Json& v, double bound) const {
    return number_value(v, key, -bound, bound);
  }
  // A value that must be null, absent, false, or empty for HybridLens to apply the adapter.
  void reject_if_set(const std::string& key, const std::string& why) const {
    const Json* v = find(key);
    if (!v || v->is_null()) return;
    if (v->is_boolean() && !v->get<bool>()) return;
    if ((v->is_array() || v->is_object()) && v->empty()) return;
    fail(key, "expected it unset (null, false or empty), got " + shown(*v) + ": " + why);
  }
  ModuleSelector selector(const std::string& key, bool allow_all_linear) const {
    ModuleSelector s;
    const Json* v = find(key);
    if (!v || v->is_null()) return s;
    if (v->is_string()) {
      const std::string text = v->get<std::string>();
      if (allow_all_linear && text == "all-linear") {
        s.kind = ModuleSelector::Kind::AllLinear;
        return s;
      }
      s.kind = ModuleSelector::Kind::Regex;
      s.regex.push_back(ModulePattern::compile(text, source(), key));
      return s;
    }
    if (!v->is_array()) expected(key, "a list of module names or a regular expression string", *v);
    if (v->size() > AdapterConfig::kMaxPatternKeys)
      fail(key, "expected at most " + std::to_string(AdapterConfig::kMaxPatternKeys) + " entries, got " +
                    std::to_string(v->size()));
    s.kind = ModuleSelector::Kind::List;
    for (size_t i = 0; i < v->size(); ++i) {
      const Json& e = (*v)[i];
      const std::string name = key + "[" + std::to_string(i) + "]";
      if (!e.is_string()) expected(name, "a module name (a string)", e);
      const std::string text = e.get<std::string>();
      if (text.empty() || text.size() > ModulePattern::kMaxChars)
        expected(name, "a module name of 1 to " + std::to_string(ModulePattern::kMaxChars) + " characters", e);
      s.names.push_back(text);
    }
    return s;
  }
};

}  // namespace

AdapterConfig parse_adapter_config(const std::string& text, const std::string& source) {
  if (text.size() > AdapterConfig::kMaxBytes)
    throw LoadError(source + ": " + std::to_string(text.size()) + " bytes, larger than the limit of " +
                    std::to_string(AdapterConfig::kMaxBytes) + " bytes");
  // PEFT writes this file with Python's json.dumps (allow_nan by default), so a float field may hold
  // Infinity or NaN: read them as numbers, and let each field's range reject them where it must.
  // The pattern dictionaries are matched in file order (Python dict order), so the file is parsed
  // keeping that order; nlohmann::json (sorted keys) is the reader's view of the same values.
  const nlohmann::ordered_json ordered =
      parse_json_checked_ordered(text, source, AdapterConfig::kMaxDepth, JsonDialect::Python);
  const Json j(ordered);
  const Reader rd(JsonReader::top(j, source));
  AdapterConfig c;

  const std::string lora = "\"LORA\" (LoRA and DoRA adapters only)";
  const Json& peft_type = rd.require("peft_type", lora);
  if (!peft_type.is_string() || peft_type.get<std::string>() != "LORA") rd.expected("peft_type", lora, peft_type);

  if (const Json* v = rd.find("r"); v && !v->is_null()) c.r = rd.integer_value(*v, "r", 1, AdapterConfig::kMaxRank);
  if (const Json* v = rd.find("lora_alpha"); v && !v->is_null())
    c.lora_alpha = rd.magnitude("lora_alpha", *v, AdapterConfig::kMaxAlpha);
  c.use_rslora = rd.boolean_or("use_rslora", false);
  c.use_dora = rd.boolean_or("use_dora", false);
  c.lora_bias = rd.boolean_or("lora_bias", false);
  if (rd.boolean_or("fan_in_fan_out", false))
    rd.expected("fan_in_fan_out", "false (only nn.Linear weights stored (out, in) are supported)", Json(true));

  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    const Json* v = rd.find(key);
    if (!v || v->is_null()) continue;
    if (!v->is_object()) rd.expected(key, "an object mapping module patterns to values", *v);
    if (v->size() > AdapterConfig::kMaxPatternKeys)
      rd.fail(key, "expected at most " + std::to_string(AdapterConfig::kMaxPatternKeys) + " keys, got " +
                       std::to_string(v->size()));
    for (const auto& [k, value] : ordered.at(key).items()) {
      const Json val(value);  // a converted copy: NaN and Infinity stay numbers (dump() would write null)
      const std::string what = std::string(key) + " key";
      ModulePattern p = ModulePattern::compile(k, source, what);
      const std::string entry = std::string(key) + "['" + k.substr(0, 64) + "']";
      if (std::string(key) == "rank_pattern")
        c.rank_pattern.emplace_back(std::move(p), rd.integer_value(val, entry, 1, AdapterConfig::kMaxRank));
      else
        c.alpha_pattern.emplace_back(std::move(p), rd.magnitude(entry, val, AdapterConfig::kMaxAlpha));
    }
  }

  c.target_modules = rd.selector("target_modules", true);
  c.exclude_modules = rd.selector("exclude_modules", false);
  if (const Json* v = rd.find("layers_to_transform"); v && !v->is_null()) {
    const std::string layers = "a layer index or a non-empty list of at most 100000 of them";
    if (v->is_array()) {
      if (v->empty() || v->size() > 100000)
        rd.fail("layers_to_transform", "expected " + layers + ", got " + std::to_string(v->size()) + " entries");
      for (size_t i = 0; i < v->size(); ++i)
        c.layers_to_transform.push_back(
            rd.integer_value((*v)[i], "layers_to_transform[" + std::to_string(i) + "]", 0, 1000000));
    } else {
      c.layers_to_transform.push_back(rd.integer_value(*v, "layers_to_transform", 0, 1000000));
    }
  }
  if (const Json* v = rd.find("base_model_name_or_path"); v && v->is_string())
    c.base_model_name_or_path = v->get<std::string>();

  if (const Json* v = rd.find("bias"); v && !v->is_null()) {
    if (!v->is_string() || v->get<std::string>() != "none")
      rd.expected("bias", "\"none\" (adapters that train the base biases are not supported)", *v);
  }
  if (const Json* v = rd.find("init_lora_weights"); v && v->is_string()) {
    const std::string init = v->get<std::string>();
    for (const char* changes_base : {"pissa", "olora", "loftq", "corda"})
      if (init.rfind(changes_base, 0) == 0)
        rd.fail("init_lora_weights", "expected an initialisation that leaves the base weights as they are, got " +
                                         JsonReader::shown(*v) +
                                         "; convert the adapter to a plain LoRA "
                                         "(path_initial_model_for_weight_conversion) first");
  }
  rd.reject_if_set("layer_replication", "layer replication changes the base model's layer stack (not supported)");
  rd.reject_if_set("modules_to_save", "full module copies in the adapter are not supported");
  rd.reject_if_set("target_parameters", "LoRA on nn.Parameter (ParamWrapper) is not supported");
  rd.reject_if_set("trainable_token_indices", "trainable token embeddings are not supported");
  rd.reject_if_set("megatron_config", "Megatron-parallel LoRA layers are not supported");
  rd.reject_if_set("alora_invocation_tokens", "the aLoRA variant is not supported");
  rd.reject_if_set("arrow_config", "the Arrow variant is not supported");
  rd.reject_if_set("use_qalora", "the QA-LoRA variant is not supported");
  // Any other LoRA variant switch (use_*) that is on: reject rather than apply it as plain LoRA.
  for (const auto& [key, value] : j.items()) {
    if (rd.read_keys().count(key) || key.rfind("use_", 0) != 0) continue;
    rd.find(key);  // read: not an ignored field
    if (value.is_boolean() && value.get<bool>())
      rd.expected(key, "false: an unknown LoRA variant (supported: plain LoRA, use_rslora, use_dora)", value);
  }
  for (const auto& [key, value] : j.items())
    if (!rd.read_keys().count(key)) c.ignored_fields.push_back(key);
  // Literal keys match in linear time; regular expressions are bounded in number so that matching
  // every module of a large model stays fast (read_adapter also stops after kMaxMatchSeconds).
  size_t regex_keys = c.target_modules.regex.size() + c.exclude_modules.regex.size();
  for (const auto& kv : c.rank_pattern) regex_keys += kv.first.is_regex() ? 1 : 0;
  for (const auto& kv : c.alpha_pattern) regex_keys += kv.first.is_regex() ? 1 : 0;
  if (regex_keys > AdapterConfig::kMaxRegexKeys)
    throw LoadError(source + ": " + std::to_string(regex_keys) + " regular-expression keys in rank_pattern, " +
                    "alpha_pattern, target_modules and exclude_modules, at most " +
                    std::to_string(AdapterConfig::kMaxRegexKeys) + " (plain module names are not limited)");
  return c;
}

}  // namespace hl
