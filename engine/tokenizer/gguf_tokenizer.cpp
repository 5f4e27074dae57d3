// The GGUF tokenizer (gguf_tokenizer.h): reads and checks the tokenizer.ggml.* metadata
// (tools/reference/gguf/GGUF.md §6), applies llama.cpp's defaults for absent keys, and hands the
// checked vocabulary to the llama or gpt2 builder (gguf_tokenizer_models.cpp). Not the builders.
// Reference: llama.cpp src/llama-vocab.cpp (llama_vocab::impl::load: defaults and key types).
#include "engine/tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/io/file_check.h"
#include "engine/io/json_util.h"
#include "engine/tokenizer/gguf_vocab.h"

namespace hl {
namespace gguf_vocab {

void fail(const Vocab& v, const std::string& key, const std::string& problem) {
  throw LoadError(v.name + ": " + key + ": " + problem);
}

std::string shown(const std::string& s) {
  if (find_invalid_utf8(s.data(), s.size()) == SIZE_MAX) return quote_name(s);
  std::string out = "'";  // as quote_name, every byte >= 0x80 escaped too
  const size_t n = std::min<size_t>(s.size(), 200);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (s.size() > n ? "'..." : "'");
}

}  // namespace gguf_vocab

namespace {

using gguf_vocab::fail;
using gguf_vocab::shown;
using gguf_vocab::Vocab;

const char* const kTypes = "1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte";

bool is_int_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16: case GgufValueType::I16:
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::U64: case GgufValueType::I64:
      return true;
    default:
      return false;
  }
}
bool is_signed_type(GgufValueType t) {
  return t == GgufValueType::I8 || t == GgufValueType::I16 || t == GgufValueType::I32 || t == GgufValueType::I64;
}

std::string type_name(const GgufValue& v) {
  if (v.type != GgufValueType::ARRAY) return gguf_value_type_name(v.type);
  return std::string("ARRAY of ") + gguf_value_type_name(v.elem);
}

class Meta {
 public:
  Meta(const std::map<std::string, GgufValue>& kv, Vocab& v) : kv_(kv), v_(v) {}

  const GgufValue* find(const std::string& key) const {
    auto it = kv_.find(key);
    return it == kv_.end() ? nullptr : &it->second;
  }

  // A STRING value, or `def` when absent.
  std::string str(const std::string& key, const std::string& def) const {
    const GgufValue* x = find(key);
    if (!x) return def;
    if (x->type != GgufValueType::STRING) fail(v_, key, "is " + type_name(*x) + ", expected STRING");
    return x->s;
  }

  // A BOOL value, or `def` when absent.
  bool boolean(const std::string& key, bool def) const {
    const GgufValue* x = find(key);
    if (!x) return def;
    if (x->type != GgufValueType::BOOL) fail(v_, key, "is " + type_name(*x) + ", expected BOOL");
    return x->u != 0;
  }

  // A token id (any integer type) in 0..V-1, or `def` when absent.
  int32_t id(const std::string& key, int32_t def) const {
    const GgufValue* x = find(key);
    if (!x) return def;
    const int64_t n = v_.info.vocab_size;
    const std::string range = " (allowed 0.." + std::to_string(n - 1) + ", an id of tokenizer.ggml.tokens)";
    if (!is_int_type(x->type)) fail(v_, key, "is " + type_name(*x) + ", expected an integer" + range);
    if (is_signed_type(x->type)) {
      if (x->i < 0 || x->i >= n) fail(v_, key, std::to_string(x->i) + range);
      return static_cast<int32_t>(x->i);
    }
    if (x->u >= static_cast<uint64_t>(n)) fail(v_, key, std::to_string(x->u) + range);
    return static_cast<int32_t>(x->u);
  }

  // An array of `count` elements whose element type passes `ok`; `what` describes the expected type.
  const GgufValue& array(const std::string& key, bool (*ok)(GgufValueType), const char* what, int64_t count) const {
    const GgufValue* x = find(key);
    if (!x) fail(v_, key, "is missing");
    if (x->type != GgufValueType::ARRAY || !ok(x->elem)) fail(v_, key, "is " + type_name(*x) + ", expected " + what);
    if (count >= 0 && static_cast<int64_t>(x->count) != count)
      fail(v_, key, "has " + std::to_string(x->count) + " entries, expected " + std::to_string(count) +
                        " (one per token of tokenizer.ggml.tokens)");
    return *x;
  }

 private:
  const std::map<std::string, GgufValue>& kv_;
  Vocab& v_;
};

bool elem_string(GgufValueType t) { return t == GgufValueType::STRING; }
bool elem_score(GgufValueType t) { return t == GgufValueType::F32 || t == GgufValueType::F64 || t == GgufValueType::I32; }
bool elem_int(GgufValueType t) { return is_int_type(t); }

void read_tokens(const Meta& m, Vocab& v) {
  const std::string key = "tokenizer.ggml.tokens";
  const GgufValue* x = m.find(key);
  if (!x) fail(v, key, "is missing (a vocabulary needs its tokens)");
  if (x->type != GgufValueType::ARRAY || x->elem != GgufValueType::STRING)
    fail(v, key, "is " + type_name(*x) + ", expected ARRAY of STRING");
  const int64_t n = static_cast<int64_t>(x->strings.size());
  if (n < 1 || n > kMaxGgufTokens || x->count != x->strings.size())
    fail(v, key, "has " + std::to_string(x->count) + " tokens (allowed 1.." + std::to_string(kMaxGgufTokens) + ")");
  v.tokens = &x->strings;
  v.info.vocab_size = n;
  std::unordered_map<std::string_view, int32_t> seen;
  seen.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const std::string& t = x->strings[static_cast<size_t>(i)];
    const std::string at = key + "[" + std::to_string(i) + "]";
    if (t.empty()) fail(v, at, "is empty (allowed 1.." + std::to_string(kMaxGgufTokenBytes) + " bytes)");
    if (t.size() > kMaxGgufTokenBytes)
      fail(v, at, "is " + std::to_string(t.size()) + " bytes (allowed 1.." + std::to_string(kMaxGgufTokenBytes) + ")");
    if (std::memchr(t.data(), 0, t.size())) fail(v, at, shown(t) + " contains a NUL byte");
    const size_t bad = find_invalid_utf8(t.data(), t.size());
    if (bad != SIZE_MAX) fail(v, at, "is not UTF-8 (byte " + std::to_string(bad) + " of " + std::to_string(t.size()) + ")");
    const auto [it, fresh] = seen.emplace(std::string_view(t), static_cast<int32_t>(i));
    if (!fresh) fail(v, at, shown(t) + " repeats token " + std::to_string(it->second) + " (each token once)");
  }
}

void read_scores_and_types(const Meta& m, Vocab& v) {
  const int64_t n = v.info.vocab_size;
  if (m.find("tokenizer.ggml.scores")) {
    const GgufValue& s = m.array("tokenizer.ggml.scores", elem_score, "ARRAY of FLOAT32", n);
    v.scores.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      const double d = s.elem == GgufValueType::I32 ? (k < s.ints.size() ? static_cast<double>(s.ints[k]) : NAN)
                                                     : (k < s.floats.size() ? s.floats[k] : NAN);
      if (!std::isfinite(d) || std::fabs(d) > 3.0e38)
        fail(v, "tokenizer.ggml.scores[" + std::to_string(i) + "]", "is not a finite float32 number");
      v.scores[k] = static_cast<float>(d);
    }
  }
  v.types.assign(static_cast<size_t>(n), gguf_vocab::kNormal);
  if (m.find("tokenizer.ggml.token_type")) {
    const GgufValue& t = m.array("tokenizer.ggml.token_type", elem_int, "ARRAY of INT32", n);
    if (t.ints.size() != static_cast<size_t>(n)) fail(v, "tokenizer.ggml.token_type", "holds fewer values than its count");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t ty = t.ints[static_cast<size_t>(i)];
      if (ty < 1 || ty > 6)
        fail(v, "tokenizer.ggml.token_type[" + std::to_string(i) + "]", std::to_string(ty) + " (allowed " + kTypes + ")");
      v.types[static_cast<size_t>(i)] = static_cast<int32_t>(ty);
    }
  }
}

// gpt2: each merge "left right", both tokens of the vocabulary (split at the first space after
// the first byte, as llama.cpp and the tokenizers library split them).
void read_merges(const Meta& m, Vocab& v) {
  const std::string key = "tokenizer.ggml.merges";
  if (!m.find(key)) fail(v, key, "is missing (a gpt2 vocabulary needs its merges)");
  const GgufValue& x = m.array(key, elem_string, "ARRAY of STRING", -1);
  if (x.strings.size() != x.count || static_cast<int64_t>(x.count) > kMaxGgufMerges)
    fail(v, key, "has " + std::to_string(x.count) + " merges (allowed 0.." + std::to_string(kMaxGgufMerges) + ")");
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(v.tokens->size());
  for (size_t i = 0; i < v.tokens->size(); ++i) ids.emplace((*v.tokens)[i], static_cast<int32_t>(i));
  const char* const allowed = " (allowed: two tokens of tokenizer.ggml.tokens separated by one space)";
  for (size_t r = 0; r < x.strings.size(); ++r) {
    const std::string& s = x.strings[r];
    const std::string at = key + "[" + std::to_string(r) + "]";
    const size_t sp = s.size() < 2 ? std::string::npos : s.find(' ', 1);
    if (sp == std::string::npos || sp + 1 >= s.size()) fail(v, at, shown(s) + " is not two tokens" + allowed);
    const std::string_view a = std::string_view(s).substr(0, sp), b = std::string_view(s).substr(sp + 1);
    if (!ids.count(a)) fail(v, at, shown(s) + ": " + shown(std::string(a)) + " is not a token" + allowed);
    if (!ids.count(b)) fail(v, at, shown(s) + ": " + shown(std::string(b)) + " is not a token" + allowed);
  }
  v.merges = &x.strings;
}

}  // namespace

GgufTokenizer::GgufTokenizer(std::unique_ptr<Tokenizer> inner, GgufVocabInfo info)
    : inner_(std::move(inner)), info_(std::move(info)) {}

std::vector<int32_t> GgufTokenizer::encode_special(const std::string& text) const {
  std::vector<int32_t> ids;
  if (info_.add_bos && info_.bos >= 0) ids.push_back(info_.bos);
  const std::vector<int32_t> body = inner_->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  if (info_.add_eos && info_.eos >= 0) ids.push_back(info_.eos);
  return ids;
}

namespace {

// Reads and checks everything; null when the file has no vocabulary.
std::unique_ptr<Vocab> read_vocab(const std::map<std::string, GgufValue>& kv, const std::string& name) {
  auto v = std::make_unique<Vocab>();
  v->name = name;
  Meta m(kv, *v);
  const std::string model = m.str("tokenizer.ggml.model", "");
  if (!m.find("tokenizer.ggml.model") || model == "none" || model == "no_vocab") return nullptr;
  if (model != "llama" && model != "gpt2")
    fail(*v, "tokenizer.ggml.model", shown(model) + " is not supported (supported: llama = SentencePiece, gpt2 = byte-level BPE)");
  GgufVocabInfo& info = v->info;
  info.model = model;
  read_tokens(m, *v);
  read_scores_and_types(m, *v);
  const int64_t n = info.vocab_size;
  // llama.cpp's defaults: llama bos 1, eos 2, unk 0, add_bos, add_space_prefix; gpt2 none (its
  // own default ids 11 are a GPT-NeoX leftover, not used here), add_bos per pre-tokenizer.
  const auto def_id = [n](int32_t id) { return id < n ? id : -1; };
  bool add_bos_default = false;
  if (model == "llama") {
    info.bos = m.id("tokenizer.ggml.bos_token_id", def_id(1));
    info.eos = m.id("tokenizer.ggml.eos_token_id", def_id(2));
    info.unk = m.id("tokenizer.ggml.unknown_token_id", def_id(0));
    add_bos_default = true;
    info.add_space_prefix = m.boolean("tokenizer.ggml.add_space_prefix", true);
    info.remove_extra_whitespaces = m.boolean("tokenizer.ggml.remove_extra_whitespaces", false);
    if (v->scores.empty()) fail(*v, "tokenizer.ggml.scores", "is missing (a llama vocabulary needs a score per token)");
  } else {
    info.pre = m.str("tokenizer.ggml.pre", "default");
    const gguf_vocab::PreTokenizer* pre = gguf_vocab::find_pre_tokenizer(info.pre);
    if (!pre) {
      std::string known;
      for (const std::string& s : gguf_vocab::pre_tokenizer_names()) known += (known.empty() ? "" : ", ") + s;
      fail(*v, "tokenizer.ggml.pre", shown(info.pre) + " is not a known pre-tokenizer (known: " + known + ")");
    }
    add_bos_default = pre->add_bos;
    info.ignore_merges = pre->ignore_merges;
    info.bos = m.id("tokenizer.ggml.bos_token_id", -1);
    info.eos = m.id("tokenizer.ggml.eos_token_id", -1);
    info.unk = m.id("tokenizer.ggml.unknown_token_id", -1);
    m.boolean("tokenizer.ggml.add_space_prefix", false);  // type-checked; the byte-level pipeline has no prefix
    read_merges(m, *v);
  }
  info.pad = m.id("tokenizer.ggml.padding_token_id", -1);
  info.eot = m.id("tokenizer.ggml.eot_token_id", -1);
  info.eom = m.id("tokenizer.ggml.eom_token_id", -1);
  info.sep = m.id("tokenizer.ggml.seperator_token_id", -1);  // sic, as gguf-py spells it
  info.mask = m.id("tokenizer.ggml.mask_token_id", -1);
  // A default add_bos without a bos id is dropped; an explicit one is an error (as llama.cpp's).
  info.add_bos = m.boolean("tokenizer.ggml.add_bos_token", add_bos_default && info.bos >= 0);
  info.add_eos = m.boolean("tokenizer.ggml.add_eos_token", false);
  if (info.add_bos && info.bos < 0)
    fail(*v, "tokenizer.ggml.add_bos_token", "is true but tokenizer.ggml.bos_token_id is absent (allowed: false, or a bos id)");
  if (info.add_eos && info.eos < 0)
    fail(*v, "tokenizer.ggml.add_eos_token", "is true but tokenizer.ggml.eos_token_id is absent (allowed: false, or an eos id)");
  return v;
}

}  // namespace

std::unique_ptr<GgufTokenizer> tokenizer_from_gguf(const std::map<std::string, GgufValue>& kv, const std::string& name) {
  const std::unique_ptr<Vocab> v = read_vocab(kv, name);
  if (!v) return nullptr;
  std::unique_ptr<Tokenizer> inner = v->info.model == "llama" ? gguf_vocab::build_llama(*v) : gguf_vocab::build_gpt2(*v);
  return std::make_unique<GgufTokenizer>(std::move(inner), v->info);
}

std::unique_ptr<GgufTokenizer> tokenizer_from_gguf(const GgufFile& f) {
  return tokenizer_from_gguf(f.metadata(), f.path());
}

std::unique_ptr<GgufTokenizer> load_gguf_tokenizer(const std::string& path) {
  const GgufModelFiles files = GgufModelFiles::open(path);
  return tokenizer_from_gguf(files.first().metadata(), path);
}

std::string gguf_sentencepiece_proto(const std::map<std::string, GgufValue>& kv, const std::string& name) {
  const std::unique_ptr<Vocab> v = read_vocab(kv, name);
  if (!v) throw LoadError(name + ": tokenizer.ggml.model: is missing (the file has no vocabulary)");
  if (v->info.model != "llama")
    throw LoadError(name + ": tokenizer.ggml.model: '" + v->info.model + "' is not a SentencePiece vocabulary (allowed: llama)");
  return gguf_vocab::llama_proto(*v);
}

std::vector<std::string> gguf_pre_tokenizer_names() {
  return gguf_vocab::pre_tokenizer_names();
}

}  // namespace hl
