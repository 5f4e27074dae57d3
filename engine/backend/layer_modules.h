// Layer modules (issue 14 item 2): on each backend, one unit per mixer kind and per FFN kind behind
// that backend's small interface (cpu/cpu_module.h, vulkan/vk_module.h, cuda/cuda_module.h), found
// through a table with one line per kind (cpu_modules.cpp, ...). Adding a kind adds its files and one
// line to each table; the model-level loop of a backend names no kind. This header is the lookup
// every table shares. Shape after llama.cpp's per-architecture graph builders over shared blocks.
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>

#include "engine/backend/backend.h"
#include "engine/model/layer_schedule.h"

namespace hl {

// One line of a backend's module table: the kind and the function that makes its unit.
template <class Kind, class Make>
struct ModuleEntry {
  Kind kind;
  Make make;
};

inline const char* kind_name(MixerKind k) {
  return mixer_name(k);
}
inline const char* kind_name(FfnKind k) {
  return ffn_name(k);
}

// The maker of `kind` in `table`. A kind the backend has no unit for throws BackendFailure, one
// line naming the backend, the kind and the layer ("vulkan: no module for mixer kind 'mamba2'
// (layer 3)"), so the caller can fall back to another backend as for any device failure.
template <class Kind, class Make, size_t N>
Make find_module(const ModuleEntry<Kind, Make> (&table)[N], Kind kind, const char* backend, int64_t layer) {
  for (const ModuleEntry<Kind, Make>& e : table)
    if (e.kind == kind) return e.make;
  const char* what = std::is_same_v<Kind, MixerKind> ? "mixer" : "feed-forward";
  throw BackendFailure(std::string(backend) + ": no module for " + what + " kind '" + kind_name(kind) +
                       "' (layer " + std::to_string(layer) + ")");
}

}  // namespace hl
