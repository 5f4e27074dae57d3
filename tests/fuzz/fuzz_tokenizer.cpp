// libFuzzer target for tokenizer input (engine/tokenizer/tokenizer.h): the first byte picks what
// the rest is — 0: a --ids list (parse_id_list), 1: prompt text of any bytes, encoded and decoded
// with tests/data/tiny_spm.model, 2: a SentencePiece model file (Tokenizer::from_bytes: checked by
// sp_model_check.h first), then encoding every byte value and text. Bad input throws hl::Error
// (LoadError for a model file); ids are always inside the vocabulary. libsentencepiece is the
// uninstrumented system library: a read it makes out of bounds shows only as a crash.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"

#ifndef HL_TINY_SPM
#error "HL_TINY_SPM must name tests/data/tiny_spm.model"
#endif

namespace {

const hl::Tokenizer& tiny() {
  static const std::unique_ptr<hl::Tokenizer> t = hl::Tokenizer::load(HL_TINY_SPM);
  return *t;
}

// Every id of `ids` is in the vocabulary; decoding and per-id pieces work.
void use(const hl::Tokenizer& t, const std::vector<int32_t>& ids) {
  for (int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) std::abort();
  (void)t.decode(ids);
  for (size_t i = 0; i < ids.size() && i < 64; ++i) (void)t.piece(ids[i]);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tiny();  // load once, outside the measured runs
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        const std::vector<int32_t> ids = hl::parse_id_list(rest);
        if (ids.empty()) std::abort();  // an empty list is an error, never an empty result
        for (int32_t id : ids)
          if (id < 0) std::abort();
        (void)tiny().decode(ids);  // out-of-vocabulary ids decode as "<id N>"
        for (size_t i = 0; i < ids.size() && i < 64; ++i) (void)tiny().piece(ids[i]);
        break;
      }
      case 1:
        use(tiny(), tiny().encode(rest));
        break;
      case 2: {
        std::unique_ptr<hl::Tokenizer> t = hl::Tokenizer::from_bytes(rest, "fuzz-tokenizer.model");
        if (t->vocab_size() <= 0) std::abort();
        // Encode right after loading, as the app does: a bad normaliser charsmap shows on the first
        // encode. Every byte value from the trie's root, then text that walks deeper.
        std::string every_byte;
        for (int b = 1; b < 256; ++b) every_byte += static_cast<char>(b);
        use(*t, t->encode(every_byte));
        use(*t, t->encode("Hello world, 123 \xC3\xA9\xE2\x96\x81 \xFF \xEF\xBC\xA1\xE2\x85\xA0 \xC2\xA0\xE3\x80\x80 AAA"));
        std::vector<int32_t> all;
        for (int64_t i = 0; i < t->vocab_size() && i < 256; ++i) all.push_back(static_cast<int32_t>(i));
        use(*t, all);
        break;
      }
    }
  } catch (const hl::Error&) {
  }
  return 0;
}
