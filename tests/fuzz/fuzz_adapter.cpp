// libFuzzer target for PEFT adapter folders (engine/io/adapter.h, reliability-checklist.md): the
// input is the text of adapter_config.json, then optionally a NUL byte and the bytes of
// adapter_model.safetensors (JSON text holds no NUL, so the split is unambiguous). Any input either
// reads into modules whose factors have the declared shapes and finite values, or throws LoadError.
// Not the merge into a base model (check_adapter / merge_adapter need a Model; tests cover them).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/core/error.h"
#include "engine/io/adapter.h"

namespace {

// Module paths of a small Jamba, to exercise target_modules / rank_pattern / alpha_pattern matching.
const char* const kPaths[] = {"model.layers.0.mamba.in_proj", "model.layers.1.self_attn.q_proj",
                              "model.layers.3.feed_forward.experts.2.down_proj", "lm_head"};

void check_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) std::abort();  // read_adapter promises finite factors
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t config_len = nul ? static_cast<size_t>(nul - data) : size;
  const std::string config(reinterpret_cast<const char*>(data), config_len);
  try {
    if (!nul) {
      hl::AdapterConfig c = hl::parse_adapter_config(config, "adapter_config.json");
      for (const char* p : kPaths) {
        const int64_t r = c.rank_for(p);
        const double s = c.scaling_for(p);
        if (r < 1 || r > hl::AdapterConfig::kMaxRank || !std::isfinite(s)) std::abort();
        (void)c.targets(p);
      }
      return 0;
    }
    hl::Adapter a = hl::parse_adapter(config, nul + 1, size - config_len - 1, "fuzz-adapter");
    for (size_t i = 0; i < a.modules.size(); ++i) {
      const hl::AdapterModule& m = a.modules[i];
      if (i > 0 && !(a.modules[i - 1].path < m.path)) std::abort();  // sorted, unique
      if (m.rank < 1 || m.rows < 1 || m.cols < 1) std::abort();
      if (m.A.size() != static_cast<size_t>(m.rank * m.cols) || m.B.size() != static_cast<size_t>(m.rows * m.rank))
        std::abort();
      if (!m.B_bias.empty() && m.B_bias.size() != static_cast<size_t>(m.rows)) std::abort();
      if (!m.magnitude.empty() && m.magnitude.size() != static_cast<size_t>(m.rows)) std::abort();
      if (!std::isfinite(m.scaling)) std::abort();
      check_finite(m.A);
      check_finite(m.B);
      check_finite(m.B_bias);
      check_finite(m.magnitude);
      if (a.find(m.path) != &m) std::abort();
    }
  } catch (const hl::LoadError&) {
  }
  return 0;
}
