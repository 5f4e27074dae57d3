// A Hugging Face tokenizer.json as an hl::Tokenizer (hf_tokenizer.cpp, read by hf_reader.cpp): the
// entry points for the loader, the fuzzer and the tests. Not SentencePiece (tokenizer.cpp).
#pragma once
#include <memory>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace hl {

// Size limits of the untrusted files.
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{256} << 20;  // the largest real ones are ~35 MB
constexpr uint64_t kMaxTokenizerConfigBytes = uint64_t{16} << 20;

// tokenizer.json at `json_path`, with tokenizer_config.json at `config_path` when not empty.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path, const std::string& config_path);
// The same from the files' contents; `name` / `config_name` name them in messages. An empty
// `config` means no tokenizer_config.json.
std::unique_ptr<Tokenizer> hf_tokenizer_from_bytes(const std::string& json, const std::string& name,
                                                   const std::string& config, const std::string& config_name);

}  // namespace hl
