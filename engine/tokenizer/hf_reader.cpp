// Reader of tokenizer.json and tokenizer_config.json (hf_tokenizer.h): untrusted files, read with a
// size limit, parsed by nlohmann-json, every defect a one-line LoadError naming the file, the JSON
// path of the object and what is allowed. Builds an HfTokenizer (hf_internal.h). Not the pipeline.
// Reference: the `tokenizers` serialization format (huggingface.co/docs/tokenizers) and
// transformers' tokenizer_config.json (add_bos_token / add_eos_token of the Llama/Gemma classes).
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/io/json_util.h"
#include "engine/tokenizer/hf_internal.h"
#include "engine/tokenizer/hf_tables.h"
#include "engine/tokenizer/hf_tokenizer.h"

namespace hl {
namespace hf {

void fail(const Where& w, const std::string& what) {
  throw LoadError(w.file + ": " + (w.path.empty() ? std::string() : w.path + ": ") + what);
}

const nlohmann::json* field(const nlohmann::json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string get_string(const nlohmann::json& obj, const char* key, const Where& w, size_t max_bytes) {
  const nlohmann::json* v = field(obj, key);
  if (!v) fail(w.at(key), "is missing");
  if (!v->is_string()) fail(w.at(key), "is not a string");
  const std::string& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) fail(w.at(key), "is " + std::to_string(s.size()) + " bytes (allowed at most " + std::to_string(max_bytes) + ")");
  return s;
}

std::string opt_string(const nlohmann::json& obj, const char* key, const std::string& def, const Where& w) {
  return field(obj, key) ? get_string(obj, key, w) : def;
}

bool opt_bool(const nlohmann::json& obj, const char* key, bool def, const Where& w) {
  const nlohmann::json* v = field(obj, key);
  if (!v) return def;
  if (!v->is_boolean()) fail(w.at(key), "is not true or false");
  return v->get<bool>();
}

int64_t opt_int(const nlohmann::json& obj, const char* key, int64_t def, int64_t lo, int64_t hi, const Where& w) {
  const nlohmann::json* v = field(obj, key);
  if (!v) return def;
  if (!v->is_number_integer()) fail(w.at(key), "is not an integer");
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) fail(w.at(key), std::to_string(x) + " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

namespace {

// Nesting deeper than 64 levels is refused before parsing (no real tokenizer file nests beyond 6).
void check_depth(const std::string& bytes, const std::string& name, const char* what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > 64) throw LoadError(name + ": " + what + " nests objects deeper than 64 levels");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

nlohmann::json parse(const std::string& bytes, const std::string& name, const char* what) {
  if (bytes.empty()) throw LoadError(name + ": " + what + " is empty");
  check_depth(bytes, name, what);
  try {
    return nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    throw LoadError(name + ": " + what + " is not valid JSON: " + e.what());
  }
}

// A SAX handler that builds the JSON tree, except model.vocab (an object) and model.merges, which
// go straight into RawModelParts: a 150k-token vocabulary then costs no tree nodes.
class Sax {
 public:
  Sax(nlohmann::json& root, RawModelParts& raw, const std::string& name) : root_(root), raw_(raw), name_(name) {}

  bool null() { return value(nlohmann::json()); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(int64_t v) { return number(v); }
  bool number_unsigned(uint64_t v) { return number(v > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(v)); }
  bool number_float(double v, const std::string&) { return value(v); }
  bool string(std::string& v) {
    if (mode_ == Mode::Merges && nested_ == 0) {
      const size_t sp = v.find(' ', 1);
      if (sp == std::string::npos) bad_merge(v);
      else if (raw_.merges_bad < 0) raw_.add_merge(std::string_view(v).substr(0, sp), std::string_view(v).substr(sp + 1));
      ++merge_index_;
      return true;
    }
    if (mode_ == Mode::Merges && nested_ == 1) {
      pair_.push_back(std::move(v));
      return true;
    }
    return value(std::move(v));
  }
  bool binary(nlohmann::json::binary_t&) { return false; }
  bool key(std::string& k) {
    key_ = std::move(k);
    return true;
  }
  bool start_object(size_t) { return start(nlohmann::json::object(), true); }
  bool start_array(size_t) { return start(nlohmann::json::array(), false); }
  bool end_object() { return end(); }
  bool end_array() { return end(); }
  bool parse_error(size_t, const std::string&, const nlohmann::json::exception& e) {
    throw LoadError(name_ + ": tokenizer.json is not valid JSON: " + e.what());
  }

 private:
  enum class Mode { Tree, Vocab, Merges };

  bool number(int64_t v) {
    if (mode_ == Mode::Vocab && nested_ == 0) {
      raw_.vocab.emplace_back(std::move(key_), v);
      return true;
    }
    return value(v);
  }
  bool value(nlohmann::json v) {
    if (mode_ == Mode::Vocab) {
      if (nested_ == 0) bad_vocab();
      return true;
    }
    if (mode_ == Mode::Merges) {
      if (nested_ == 0) {
        bad_merge(std::string());
        ++merge_index_;
      } else if (nested_ == 1) {
        pair_bad_ = true;
      }
      return true;
    }
    put(std::move(v));
    return true;
  }
  nlohmann::json* put(nlohmann::json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    nlohmann::json* parent = stack_.back();
    if (parent->is_object()) {
      nlohmann::json& slot = (*parent)[key_];
      slot = std::move(v);
      return &slot;
    }
    parent->push_back(std::move(v));
    return &parent->back();
  }
  bool start(nlohmann::json v, bool object) {
    if (mode_ != Mode::Tree) {
      if (mode_ == Mode::Vocab && nested_ == 0) bad_vocab();
      if (mode_ == Mode::Merges && nested_ == 0) {
        pair_.clear();
        pair_bad_ = object;
      }
      if (mode_ == Mode::Merges && nested_ == 1) pair_bad_ = true;
      ++nested_;
      return true;
    }
    // model.vocab / model.merges: the parent is the object under the root's "model" key.
    const bool in_model = stack_.size() == 2 && model_ == stack_.back();
    if (in_model && object && key_ == "vocab") {
      mode_ = Mode::Vocab;
      raw_.vocab_taken = true;
      return true;
    }
    if (in_model && !object && key_ == "merges") {
      mode_ = Mode::Merges;
      raw_.merges_taken = true;
      return true;
    }
    const bool is_model = stack_.size() == 1 && object && key_ == "model";
    if (is_model) raw_ = RawModelParts{};  // a repeated "model" key: the last one counts
    nlohmann::json* at = put(std::move(v));
    if (is_model) model_ = at;
    stack_.push_back(at);
    return true;
  }
  bool end() {
    if (mode_ != Mode::Tree) {
      if (nested_ == 0) {
        mode_ = Mode::Tree;
        return true;
      }
      --nested_;
      if (mode_ == Mode::Merges && nested_ == 0) {
        if (pair_bad_ || pair_.size() != 2) bad_merge(std::string());
        else if (raw_.merges_bad < 0) raw_.add_merge(pair_[0], pair_[1]);
        ++merge_index_;
      }
      return true;
    }
    stack_.pop_back();
    return true;
  }
  void bad_vocab() {
    if (raw_.vocab_bad) return;
    raw_.vocab_bad = true;
    raw_.vocab_bad_key = key_;
  }
  void bad_merge(const std::string& text) {
    if (raw_.merges_bad >= 0) return;
    raw_.merges_bad = merge_index_;
    raw_.merges_bad_text = text;
  }

  nlohmann::json& root_;
  RawModelParts& raw_;
  const std::string& name_;
  std::vector<nlohmann::json*> stack_;
  nlohmann::json* model_ = nullptr;
  std::string key_;
  Mode mode_ = Mode::Tree;
  int nested_ = 0;
  int64_t merge_index_ = 0;
  std::vector<std::string> pair_;
  bool pair_bad_ = false;
};

void read_added(const nlohmann::json& j, const Where& w, hf::HfTokenizer& t) {
  const nlohmann::json* a = field(j, "added_tokens");
  if (!a) return;
  if (!a->is_array()) fail(w.at("added_tokens"), "is not an array");
  if (a->size() > (1u << 20)) fail(w.at("added_tokens"), "has " + std::to_string(a->size()) + " tokens (allowed at most 1048576)");
  for (size_t k = 0; k < a->size(); ++k) {
    const nlohmann::json& e = (*a)[k];
    const Where wk = w.at("added_tokens").at(k);
    if (!e.is_object()) fail(wk, "is not an object");
    hf::AddedToken at;
    at.id = static_cast<int32_t>(opt_int(e, "id", -1, 0, INT32_MAX, wk));
    if (at.id < 0) fail(wk.at("id"), "is missing");
    at.content = get_string(e, "content", wk, 4096);
    if (at.content.empty()) continue;  // the reference ignores empty added tokens
    if (!is_valid_utf8(at.content)) fail(wk.at("content"), "is not valid UTF-8");
    at.special = opt_bool(e, "special", false, wk);
    at.lstrip = opt_bool(e, "lstrip", false, wk);
    at.rstrip = opt_bool(e, "rstrip", false, wk);
    at.normalized = opt_bool(e, "normalized", !at.special, wk);
    at.single_word = opt_bool(e, "single_word", false, wk);
    t.added.push_back(std::move(at));
  }
  // Ids as the reference assigns them when it loads the file: a content already known (an earlier
  // added token or a model token) keeps that id, any other takes the next id after the model's
  // vocabulary, in file order; the "id" fields only agree with this in well-formed files.
  std::unordered_map<std::string, int32_t> known;
  int64_t next_id = t.model->vocab_size();
  for (hf::AddedToken& a : t.added) {
    auto it = known.find(a.content);
    if (it != known.end()) {
      a.id = it->second;
    } else if (const int32_t mid = t.model->token_to_id(a.content); mid >= 0) {
      a.id = mid;
    } else {
      if (next_id > INT32_MAX) fail(w.at("added_tokens"), "gives ids beyond 2147483647");
      a.id = static_cast<int32_t>(next_id++);
    }
    known.emplace(a.content, a.id);
  }
}

// A token in tokenizer_config.json: "text" or {"content": "text", ...}; "" when absent.
std::string config_token(const nlohmann::json& c, const char* key, const Where& w) {
  const nlohmann::json* v = field(c, key);
  if (!v) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) return get_string(*v, "content", w.at(key), 4096);
  fail(w.at(key), "is neither a string nor an object with \"content\"");
}

int32_t token_id(const hf::HfTokenizer& t, const std::string& s) {
  for (const auto& a : t.added)
    if (a.content == s) return a.id;
  return t.model->token_to_id(s);
}

// transformers' Llama/Gemma tokenizers rebuild the post-processor from add_bos_token /
// add_eos_token; other classes leave tokenizer.json's post-processor as it is.
void apply_config(const std::string& config, const std::string& config_name, hf::HfTokenizer& t) {
  if (config.empty()) return;
  if (config.size() > kMaxTokenizerConfigBytes)
    throw LoadError(config_name + ": tokenizer config is " + std::to_string(config.size()) + " bytes, allowed at most " +
                    std::to_string(kMaxTokenizerConfigBytes));
  const nlohmann::json c = parse(config, config_name, "tokenizer config");
  const Where w{config_name, ""};
  if (!c.is_object()) fail(w, "is not a JSON object");
  const std::string cls = opt_string(c, "tokenizer_class", "", w);
  const bool rebuilds = cls.rfind("LlamaTokenizer", 0) == 0 || cls.rfind("CodeLlamaTokenizer", 0) == 0 ||
                        cls.rfind("GemmaTokenizer", 0) == 0;
  const bool has_bos = field(c, "add_bos_token") != nullptr, has_eos = field(c, "add_eos_token") != nullptr;
  if (!rebuilds || (!has_bos && !has_eos)) return;
  const bool add_bos = opt_bool(c, "add_bos_token", true, w), add_eos = opt_bool(c, "add_eos_token", false, w);
  int32_t bos = -1, eos = -1;
  if (const std::string b = config_token(c, "bos_token", w); add_bos && !b.empty()) {
    bos = token_id(t, b);
    if (bos < 0) fail(w.at("bos_token"), "'" + b + "' is not a token of the vocabulary (add_bos_token is true)");
  }
  if (const std::string e = config_token(c, "eos_token", w); add_eos && !e.empty()) {
    eos = token_id(t, e);
    if (eos < 0) fail(w.at("eos_token"), "'" + e + "' is not a token of the vocabulary (add_eos_token is true)");
  }
  t.post_processor = hf::make_bos_eos_template(bos, eos);
}

bool mentions_byte_level(const nlohmann::json& j) {
  if (j.is_object()) {
    const nlohmann::json* ty = field(j, "type");
    if (ty && ty->is_string() && ty->get<std::string>() == "ByteLevel") return true;
    for (const char* k : {"decoders", "pretokenizers"})
      if (const nlohmann::json* s = field(j, k))
        if (s->is_array())
          for (const auto& e : *s)
            if (mentions_byte_level(e)) return true;
  }
  return false;
}

}  // namespace
}  // namespace hf

std::unique_ptr<Tokenizer> hf_tokenizer_from_bytes(const std::string& json, const std::string& name,
                                                   const std::string& config, const std::string& config_name) {
  using namespace hf;
  if (json.size() > kMaxTokenizerJsonBytes)
    throw LoadError(name + ": tokenizer.json is " + std::to_string(json.size()) + " bytes, allowed at most " +
                    std::to_string(kMaxTokenizerJsonBytes));
  if (json.empty()) throw LoadError(name + ": tokenizer.json is empty");
  check_depth(json, name, "tokenizer.json");
  nlohmann::json j;
  RawModelParts raw;
  {
    Sax sax(j, raw, name);
    nlohmann::json::sax_parse(json, &sax);
  }
  const Where w{name, ""};
  if (!j.is_object()) fail(w, "is not a JSON object");
  auto t = std::make_unique<HfTokenizer>();
  t->name = name;
  const nlohmann::json* m = field(j, "model");
  if (!m || !m->is_object()) fail(w.at("model"), "is missing or not an object");
  const std::string type = opt_string(*m, "type", "", w.at("model"));
  if (type == "BPE" || (type.empty() && (field(*m, "merges") || raw.merges_taken))) t->model = make_bpe(*m, w.at("model"), raw);
  else if (type == "Unigram") t->model = make_unigram(*m, w.at("model"));
  else if (type == "WordPiece") t->model = make_wordpiece(*m, w.at("model"), raw);
  else fail(w.at("model").at("type"), "'" + type + "' is not a supported model (BPE, Unigram, WordPiece)");
  static const nlohmann::json null_json;
  const auto part = [&](const char* k) -> const nlohmann::json& {
    const nlohmann::json* p = field(j, k);
    return p ? *p : null_json;
  };
  t->normalizer = make_normalizer(part("normalizer"), w.at("normalizer"));
  t->pre_tokenizer = make_pre_tokenizer(part("pre_tokenizer"), w.at("pre_tokenizer"));
  t->post_processor = make_post_processor(part("post_processor"), w.at("post_processor"));
  t->decoder = make_decoder(part("decoder"), w.at("decoder"));
  t->byte_level_pieces = mentions_byte_level(part("decoder")) || mentions_byte_level(part("pre_tokenizer"));
  read_added(j, w, *t);
  apply_config(config, config_name, *t);
  t->finish();
  return t;
}

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path, const std::string& config_path) {
  const std::string json = read_file_limited(json_path, kMaxTokenizerJsonBytes, json_path);
  const std::string config =
      config_path.empty() ? std::string() : read_file_limited(config_path, kMaxTokenizerConfigBytes, config_path);
  if (!config_path.empty() && config.empty()) throw LoadError(config_path + ": tokenizer config is empty");
  return hf_tokenizer_from_bytes(json, json_path, config, config_path);
}

}  // namespace hl
