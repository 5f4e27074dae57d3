// The tokenizer of a GGUF file, from its tokenizer.ggml.* metadata (tools/reference/gguf/GGUF.md §6),
// built on the project's own tokenizers: "llama" vocabularies become a SentencePiece BPE model
// (a ModelProto serialized here, loaded by libsentencepiece as a tokenizer.model is), "gpt2"
// vocabularies a byte-level BPE of the tokenizer.json pipeline (hf_*.cpp) with the split regex
// that tokenizer.ggml.pre names. The metadata is untrusted: every array, id, type and merge is
// checked before use, and a defect is a LoadError "FILE: KEY: PROBLEM (allowed RANGE)".
// Not the GGUF reader (io/gguf.h) and not the model mapping. Reference: llama.cpp
// src/llama-vocab.cpp (what the keys mean, its defaults, its pre-tokenizer names and regexes).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/io/gguf.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl {

// Largest vocabulary accepted (real ones are below 300k tokens) and longest token (bytes).
constexpr int64_t kMaxGgufTokens = int64_t{1} << 22;
constexpr size_t kMaxGgufTokenBytes = size_t{16} << 10;
constexpr int64_t kMaxGgufMerges = int64_t{1} << 22;

// What the metadata says besides the vocabulary. Ids are -1 when absent.
struct GgufVocabInfo {
  std::string model;        // "llama" or "gpt2"
  std::string pre;          // gpt2: the pre-tokenizer name ("default" when absent); llama: ""
  int64_t vocab_size = 0;   // V, the length of tokenizer.ggml.tokens
  int32_t bos = -1, eos = -1, unk = -1, pad = -1, eot = -1, eom = -1, sep = -1, mask = -1;
  bool add_bos = false, add_eos = false;
  bool add_space_prefix = false;          // llama: SentencePiece's add_dummy_prefix
  bool remove_extra_whitespaces = false;  // llama
  bool ignore_merges = false;             // gpt2: whole pre-tokenized words found in the vocabulary
};

// A GGUF vocabulary as a Tokenizer. encode() is the plain tokenization; encode_special() adds
// bos / eos as tokenizer.ggml.add_bos_token / add_eos_token say (with llama.cpp's defaults when
// absent), so callers never prepend config.json's bos_token_id (adds_special_tokens() is true).
class GgufTokenizer final : public Tokenizer {
 public:
  GgufTokenizer(std::unique_ptr<Tokenizer> inner, GgufVocabInfo info);
  std::vector<int32_t> encode(const std::string& text) const override { return inner_->encode(text); }
  std::vector<int32_t> encode_special(const std::string& text) const override;
  bool adds_special_tokens() const override { return true; }
  std::string piece(int32_t id) const override { return inner_->piece(id); }
  std::string raw_piece(int32_t id) const override { return inner_->raw_piece(id); }
  std::string token_bytes(int32_t id) const override { return inner_->token_bytes(id); }
  bool is_special(int32_t id) const override { return inner_->is_special(id); }
  std::string decode(const std::vector<int32_t>& ids) const override { return inner_->decode(ids); }
  int64_t vocab_size() const override { return info_.vocab_size; }
  std::string kind() const override { return "gguf (" + info_.model + ")"; }
  const GgufVocabInfo& info() const { return info_; }

 private:
  std::unique_ptr<Tokenizer> inner_;
  GgufVocabInfo info_;
};

// The tokenizer of a checked GGUF file's metadata; null when it has no tokenizer.ggml.model (or
// "none" / "no_vocab"). Throws LoadError naming the file and the key on bad metadata, and for the
// models other than llama and gpt2 (bert, t5, rwkv, ...).
std::unique_ptr<GgufTokenizer> tokenizer_from_gguf(const GgufFile& f);
// The same from a metadata map; `name` names the file in messages.
std::unique_ptr<GgufTokenizer> tokenizer_from_gguf(const std::map<std::string, GgufValue>& kv, const std::string& name);
// Opens a GGUF file (any shard of a split: the metadata is in the first) and reads its tokenizer;
// null when it has none. Throws LoadError (GgufError for an unreadable or malformed file).
std::unique_ptr<GgufTokenizer> load_gguf_tokenizer(const std::string& path);

// A "llama" vocabulary as the serialized SentencePiece ModelProto the tokenizer loads (BPE model,
// identity normalizer): what a tokenizer.model for the file would hold. Throws as above.
std::string gguf_sentencepiece_proto(const std::map<std::string, GgufValue>& kv, const std::string& name);

// The tokenizer.ggml.pre names a gpt2 vocabulary may have, sorted.
std::vector<std::string> gguf_pre_tokenizer_names();

}  // namespace hl
