// libFuzzer target for the safetensors header parser (reliability-checklist.md: "Fuzz target").
// Any input must either parse into tensors that lie inside the buffer or throw LoadError.
// Build: clang++ -std=c++20 -fsanitize=fuzzer,address,undefined -I. tests/fuzz/fuzz_safetensors.cpp <engine io+core
// sources>
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    hl::SafetensorsFile f = hl::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    for (const hl::TensorInfo& t : f.tensors()) {
      if (t.data < data || t.data + t.nbytes() > data + size) std::abort();  // a view outside the input
    }
  } catch (const hl::LoadError&) {
  }
  return 0;
}
