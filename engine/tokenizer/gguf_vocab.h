// Internals of the GGUF tokenizer (gguf_tokenizer.h): the checked vocabulary shared by the
// metadata reader (gguf_tokenizer.cpp) and the two builders (gguf_tokenizer_models.cpp), and the
// table of gpt2 pre-tokenizers. Not a public API.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/tokenizer/gguf_tokenizer.h"

namespace hl::gguf_vocab {

// tokenizer.ggml.token_type values (SentencePiece's piece types).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// A vocabulary whose arrays have passed the common checks: V tokens, each 1..kMaxGgufTokenBytes
// bytes of UTF-8 without NUL and unique; V scores (finite) when present; V types in 1..6; special
// ids below V; merges (gpt2) each two tokens separated by one space.
struct Vocab {
  std::string name;  // the file, for messages
  GgufVocabInfo info;
  const std::vector<std::string>* tokens = nullptr;  // into the metadata, which outlives the build
  std::vector<float> scores;                          // empty when the file has none
  std::vector<int32_t> types;                         // V entries (kNormal where the file has none)
  const std::vector<std::string>* merges = nullptr;   // gpt2
};

// One line "FILE: KEY: PROBLEM".
[[noreturn]] void fail(const Vocab& v, const std::string& key, const std::string& problem);
// A string from the file as messages show it: quote_name's quoting, and bytes >= 0x80 escaped too
// when the string is not UTF-8 (a message stays valid UTF-8).
std::string shown(const std::string& s);

// A gpt2 pre-tokenizer: llama.cpp's names for it and the tokenizer.json pre_tokenizer of the
// models that use it (regexes as in their tokenizer.json; llama.cpp's llm_tokenizer_bpe adapts
// the same ones), run as a Sequence: Digits (individual) when `digits`, a Split (Isolated) per
// regex, then ByteLevel (with its GPT-2 regex when `gpt2_regex`). Plus what llama.cpp sets with it.
struct PreTokenizer {
  std::vector<const char*> names;
  std::vector<const char*> splits;
  bool digits = false;
  bool gpt2_regex = false;
  bool nfc = false;            // the model's tokenizer.json normalizes to NFC first (Qwen2)
  bool ignore_merges = false;  // llama.cpp's ignore_merges for this pre type
  bool add_bos = false;        // llama.cpp's add_bos default for this pre type
};
// null for an unknown name.
const PreTokenizer* find_pre_tokenizer(const std::string& name);
std::vector<std::string> pre_tokenizer_names();

// The builders; `v` has passed the common checks.
std::string llama_proto(const Vocab& v);                 // the SentencePiece ModelProto
std::unique_ptr<Tokenizer> build_llama(const Vocab& v);  // libsentencepiece on that proto
std::unique_ptr<Tokenizer> build_gpt2(const Vocab& v);   // the tokenizer.json pipeline

}  // namespace hl::gguf_vocab
