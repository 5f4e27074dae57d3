// libFuzzer target for the tokenizer.json reader (engine/tokenizer/hf_reader.cpp) and the pipeline
// it builds: the input is a tokenizer.json, optionally followed by a NUL byte and a
// tokenizer_config.json. Bad input throws hl::Error (LoadError when reading); what loads encodes
// hard strings with and without special tokens, decodes them and shows their pieces.
// Not SentencePiece files (fuzz_tokenizer).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string json = in.substr(0, nul);
  const std::string config = nul == std::string::npos ? std::string() : in.substr(nul + 1);
  try {
    std::unique_ptr<hl::Tokenizer> t = hl::hf_tokenizer_from_bytes(json, "fuzz/tokenizer.json", config, "fuzz/tokenizer_config.json");
    if (!t->encode("").empty()) std::abort();  // nothing in, nothing out (without special tokens)
    for (const char* text : {"Hello world, it's 123 \xC3\xA9 e\xCC\x81 \xE2\x96\x81x  \t\n\r\n<s></s>",
                             "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xD9\x85\xD8\xB1 \xFF\xFE bad",
                             "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa 1234567 !!?? [CLS] <unk> <0x41>"}) {
      for (bool special : {false, true}) {
        const std::vector<int32_t> ids = special ? t->encode_special(text) : t->encode(text);
        (void)t->decode(ids);
        const std::vector<std::string> shown = hl::display_pieces(*t, ids);
        if (shown.size() != ids.size()) std::abort();
      }
    }
    std::vector<int32_t> all;
    for (int64_t i = 0; i < t->vocab_size() && i < 300; ++i) all.push_back(static_cast<int32_t>(i));
    all.push_back(-1);
    all.push_back(1 << 30);
    (void)t->decode(all);
    (void)hl::display_pieces(*t, all);
  } catch (const hl::Error&) {
  }
  return 0;
}
