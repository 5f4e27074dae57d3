// Tokenizer interface: a Hugging Face tokenizer.json (+ tokenizer_config.json) when the checkpoint
// has one (hf_tokenizer.cpp), a SentencePiece tokenizer.model otherwise (tokenizer.cpp, via
// libsentencepiece), plain token ids without either; a GGUF file's tokenizer.ggml.* vocabulary
// (gguf_tokenizer.h). BOS handling per trace-format.md §3: for a tokenizer.model callers prepend
// bos_token_id; a tokenizer.json or a GGUF vocabulary adds its own special tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hl {

class Tokenizer {
 public:
  // A tokenizer file or a folder holding one: tokenizer.json is preferred over tokenizer.model.
  // A GGUF file (recognised by its magic, any name) gives its tokenizer.ggml.* vocabulary.
  // Throws LoadError (names the file) on failure, and for a GGUF file without a vocabulary.
  static std::unique_ptr<Tokenizer> load(const std::string& path);
  // A SentencePiece model from the file's bytes (fuzzers, tests); `name` names it in messages.
  static std::unique_ptr<Tokenizer> from_bytes(const std::string& bytes, const std::string& name);
  virtual ~Tokenizer();

  // Text → ids, no special tokens added.
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Text → ids with the special tokens the tokenizer itself adds (a tokenizer.json's post-processor
  // or tokenizer_config.json add_bos_token/add_eos_token), as Hugging Face's
  // encode(text, add_special_tokens=True). A tokenizer.model adds none (see adds_special_tokens).
  virtual std::vector<int32_t> encode_special(const std::string& text) const { return encode(text); }
  // True when encode_special is the tokenizer's own rule (tokenizer.json): callers then do not
  // prepend config.json's bos_token_id themselves.
  virtual bool adds_special_tokens() const { return false; }
  // One id → its piece as display text (byte-level pieces decoded, SentencePiece '▁' shown as a
  // space, control characters escaped); ids outside the vocabulary give "<id N>" rather than failing.
  virtual std::string piece(int32_t id) const = 0;
  // The vocabulary entry of an id as stored ("Ġthe", "▁the", "<0x0A>"); "" when absent.
  virtual std::string raw_piece(int32_t id) const { return piece(id); }
  // The bytes an id stands for in decoded text ("Ġthe" → " the", "<0x0A>" → "\n"); special tokens
  // give their text. Used by display_pieces.
  virtual std::string token_bytes(int32_t id) const { return piece(id); }
  virtual bool is_special(int32_t id) const { (void)id; return false; }
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // "tokenizer.json", "tokenizer.model", "gguf (llama)" or "gguf (gpt2)" (for `hybridlens info`
  // and messages).
  virtual std::string kind() const = 0;

 protected:
  Tokenizer() = default;
};

// The tokenizer of a checkpoint folder (tokenizer.json, else tokenizer.model) or of a file (a GGUF
// file by its magic); null when a folder has neither or a GGUF file has no vocabulary. Throws
// LoadError when the file is unreadable.
std::unique_ptr<Tokenizer> load_tokenizer_for(const std::string& dir_or_file);

// The ids for a prompt: with `add_special` the tokenizer's own special tokens (tokenizer.json) or,
// for a tokenizer.model, config.json's bos_token_id when >= 0 (trace-format.md §3); without it none.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text, bool add_special, int64_t bos_token_id);

// One display string per token of `ids`, as people read it in context: byte-level and byte-fallback
// pieces decoded and merged into their characters (a character split across tokens is shown where
// it completes; the bytes before as "\xE2"-style escapes), '▁' as a space, \n \t \r escaped.
std::vector<std::string> display_pieces(const Tokenizer& tok, const std::vector<int32_t>& ids);

// Parses "1,2,3" (spaces allowed) into ids; throws Error naming the bad item.
std::vector<int32_t> parse_id_list(const std::string& s);

}  // namespace hl
