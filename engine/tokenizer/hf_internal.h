// Internals of the Hugging Face tokenizer.json pipeline (hf_*.cpp): the component interfaces
// (normalizer, pre-tokenizer, model, post-processor, decoder), UTF-8 and Unicode helpers, the PCRE2
// regex wrapper. Not a public API: the rest of the engine uses hl::Tokenizer (tokenizer.h).
// Reference: the `tokenizers` library's documentation (huggingface.co/docs/tokenizers), "Components".
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hl::hf {

// ---- errors: one line naming the file, the object and what is allowed -------------------------
struct Where {
  std::string file;  // "…/tokenizer.json"
  std::string path;  // "pre_tokenizer.pretokenizers[1]"
  Where at(const std::string& key) const { return {file, path.empty() ? key : path + "." + key}; }
  Where at(size_t index) const { return {file, path + "[" + std::to_string(index) + "]"}; }
};
[[noreturn]] void fail(const Where& w, const std::string& what);

// Typed field access on a JSON object with one-line errors (hf_reader.cpp).
const nlohmann::json* field(const nlohmann::json& obj, const char* key);  // null when absent or null
std::string get_string(const nlohmann::json& obj, const char* key, const Where& w, size_t max_bytes = 1 << 16);
std::string opt_string(const nlohmann::json& obj, const char* key, const std::string& def, const Where& w);
bool opt_bool(const nlohmann::json& obj, const char* key, bool def, const Where& w);
int64_t opt_int(const nlohmann::json& obj, const char* key, int64_t def, int64_t lo, int64_t hi, const Where& w);

// ---- UTF-8 and Unicode (hf_text.cpp) ---------------------------------------------------------
// Decodes the code point at s[i] (advancing i); invalid bytes give U+FFFD and advance one byte.
char32_t next_cp(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t c);
size_t cp_len_at(std::string_view s, size_t i);  // bytes of the code point at i (1 for a bad byte)
bool is_valid_utf8(std::string_view s);
std::string utf8_lossy(std::string_view bytes);  // invalid subsequences → U+FFFD, as Rust's from_utf8_lossy
bool is_whitespace(char32_t c);                  // Unicode White_Space (Rust char::is_whitespace)
bool is_alphanumeric(char32_t c);                // Alphabetic or Numeric (Rust char::is_alphanumeric)
bool is_word_char(char32_t c);                   // regex \w: Alphabetic, M, Nd, Pc, Join_Control
bool is_punctuation(char32_t c);                 // ASCII punctuation or general category P*
bool is_numeric(char32_t c);                     // Nd, Nl, No
bool is_other(char32_t c);                       // Cc, Cf, Co, Cs (unassigned code points are
                                                 // kept: Hugging Face's BERT cleaning keeps them)
bool is_mark_nonspacing(char32_t c);             // Mn
bool is_cjk(char32_t c);                         // the CJK ideograph blocks BERT pads with spaces
void append_lower(std::string& out, char32_t c); // full lowercase mapping of one code point
enum class NormForm { NFC, NFD, NFKC, NFKD };
std::string unicode_normalize(std::string_view s, NormForm f);
// Extended grapheme cluster boundaries of s, as byte offsets (0 and s.size() included).
std::vector<size_t> grapheme_bounds(std::string_view s);

// GPT-2's byte ↔ printable-character map used by ByteLevel (each byte one code point).
const std::string& byte_to_char_utf8(uint8_t b);
int byte_of_char(char32_t c);  // -1 when c is not in the map

// A PCRE2 regex compiled with UTF + UCP (+ JIT), with match limits so no pattern can hang.
class Regex {
 public:
  Regex(const std::string& pattern, const Where& w);  // Oniguruma-style pattern; throws LoadError
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Every match of the pattern in s, left to right, as [start, end) byte offsets (an empty match
  // advances one code point). Throws Error if a match limit is reached.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A pattern of Split / Replace: a literal string or a regex.
struct Pattern {
  std::string literal;
  std::shared_ptr<Regex> regex;  // set for {"Regex": ...}
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
};
Pattern read_pattern(const nlohmann::json& j, const Where& w);

// ---- pipeline pieces -------------------------------------------------------------------------
// A piece of the input between normalization and the model. id >= 0: an added token already.
// `first`: the piece starts at offset 0 of the input (Metaspace prepend_scheme "first").
struct Split {
  std::string text;
  int32_t id = -1;
  bool first = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every split with id < 0 by its pieces (empty pieces dropped).
  virtual void pre_tokenize(std::vector<Split>& splits) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  virtual int32_t token_to_id(std::string_view token) const = 0;  // -1 when absent
  virtual std::optional<std::string_view> id_to_token(int32_t id) const = 0;  // nullopt when absent
  virtual int64_t vocab_size() const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Adds the special tokens of a single sequence (only called with add_special_tokens).
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Component factories from tokenizer.json objects (null JSON → nullptr).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const Where& w, int depth = 0);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const Where& w, int depth = 0);
struct RawModelParts;  // hf_tables.h
class StringIds;
std::unique_ptr<Model> make_bpe(const nlohmann::json& j, const Where& w, const RawModelParts& raw);
std::unique_ptr<Model> make_unigram(const nlohmann::json& j, const Where& w);
std::unique_ptr<Model> make_wordpiece(const nlohmann::json& j, const Where& w, const RawModelParts& raw);
// model.vocab {token: id} (from `raw` when the parser set it aside) into `ids`; returns the largest
// id, -1 for an empty vocabulary. Ids must lie in [0, 2^22).
int32_t read_vocab_map(const nlohmann::json& j, const Where& w, const RawModelParts& raw, StringIds& ids);
// Inverse of a vocabulary: views into `ids` by id (holes: nullopt).
std::vector<std::optional<std::string_view>> invert_vocab(const StringIds& ids, int32_t max_id);
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j, const Where& w, int depth = 0);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const Where& w, int depth = 0);
// A TemplateProcessing for `bos? $A eos?` (tokenizer_config.json add_bos_token/add_eos_token).
std::unique_ptr<PostProcessor> make_bos_eos_template(int32_t bos, int32_t eos);

// Nesting of Sequence objects allowed (normalizers, pre-tokenizers, processors, decoders).
constexpr int kMaxDepth = 8;

}  // namespace hl::hf

// ---- the tokenizer (hf_tokenizer.cpp; filled by hf_reader.cpp) ----------------------------------
#include "engine/tokenizer/tokenizer.h"

namespace hl::hf {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false, lstrip = false, rstrip = false, normalized = true, single_word = false;
};

// Leftmost-longest matching of added-token contents in a text (a byte trie).
class AddedMatcher {
 public:
  void add(const std::string& pattern, int32_t index);
  bool empty() const { return nodes_.size() <= 1; }
  // The longest pattern starting at s[i]: its index and length, or index -1.
  std::pair<int32_t, size_t> longest_at(std::string_view s, size_t i) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;
    int32_t index = -1;
  };
  std::vector<Node> nodes_{Node{}};
  int32_t root_[256];
  bool root_ready_ = false;
  friend class HfTokenizer;
};

class HfTokenizer final : public hl::Tokenizer {
 public:
  std::string name;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;
  bool byte_level_pieces = false;  // pieces are GPT-2 byte characters (display)
  // Builds the added-token matchers and the id → added token map; call once after filling.
  void finish();

  std::vector<int32_t> encode(const std::string& text) const override { return run(text, false); }
  std::vector<int32_t> encode_special(const std::string& text) const override { return run(text, true); }
  bool adds_special_tokens() const override { return true; }
  std::string piece(int32_t id) const override;
  std::string raw_piece(int32_t id) const override;
  std::string token_bytes(int32_t id) const override;
  bool is_special(int32_t id) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::string kind() const override { return "tokenizer.json"; }

 private:
  std::vector<int32_t> run(const std::string& text, bool add_special) const;
  void split_added(const Split& in, const AddedMatcher& m, std::vector<Split>& out) const;
  const AddedToken* added_by_id(int32_t id) const;
  AddedMatcher raw_, normalized_;
  std::vector<std::pair<int32_t, int32_t>> by_id_;  // (id, index into added), sorted
};

}  // namespace hl::hf
