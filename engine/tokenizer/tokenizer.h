// Tokenizer: SentencePiece (tokenizer.model, via libsentencepiece) when the checkpoint has one,
// plain token ids otherwise. BOS handling per trace-format.md §3 (prepend bos_token_id).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hl {

class Tokenizer {
 public:
  // Loads a SentencePiece model file; throws LoadError (names the file) on failure.
  static std::unique_ptr<Tokenizer> load(const std::string& model_path);
  // The same from the file's bytes (fuzzers, tests); `name` names it in messages.
  static std::unique_ptr<Tokenizer> from_bytes(const std::string& bytes, const std::string& name);
  ~Tokenizer();

  // Text → ids (no BOS added here; callers prepend bos_token_id unless --no-bos).
  std::vector<int32_t> encode(const std::string& text) const;
  // One id → its piece as display text (SentencePiece '▁' shown as a space); ids outside the
  // vocabulary give "<id N>" rather than failing.
  std::string piece(int32_t id) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int64_t vocab_size() const;

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Parses "1,2,3" (spaces allowed) into ids; throws Error naming the bad item.
std::vector<int32_t> parse_id_list(const std::string& s);

}  // namespace hl
