// Layer modules (issue 14 item 2): on each backend, one unit per mixer kind and per FFN kind behind
// that backend's small interface (cpu/cpu_module.h, vulkan/vk_module.h, cuda/cuda_module.h), found
// through that backend's module table, to which each unit's own file adds its line
// (HL_REGISTER_MODULE). Adding a kind adds its files and edits no table and no model loop. This
// header is the lookup every table shares. Shape after llama.cpp's per-architecture graph builders.
#pragma once
#include <cstddef>
#include <iterator>
#include <string>
#include <type_traits>

#include "engine/backend/backend.h"
#include "engine/core/registry.h"
#include "engine/model/layer_schedule.h"

namespace hl {

// One line of a backend's module table: the kind and the function that makes its unit.
template <class Kind, class Make>
struct ModuleEntry {
  Kind kind;
  Make make;
};
// A backend's table of the units of one part (mixers or feed-forwards); Tag tells the tables apart.
template <class Kind, class Make, class Tag>
using ModuleTable = Registry<ModuleEntry<Kind, Make>, Tag>;

#define HL_MODULE_CONCAT2(a, b) a##b
#define HL_MODULE_CONCAT(a, b) HL_MODULE_CONCAT2(a, b)
// At namespace scope in a unit's own file: adds {kind, make} to the ModuleTable `Table`.
#define HL_REGISTER_MODULE(Table, kind, make) \
  static const Table::Add HL_MODULE_CONCAT(hl_module_line_, __LINE__) { {kind, make} }

inline const char* kind_name(MixerKind k) {
  return mixer_name(k);
}
inline const char* kind_name(FfnKind k) {
  return ffn_name(k);
}

// The maker of `kind` in `table`. A kind the backend has no unit for throws BackendFailure, one
// line naming the backend, the kind and the layer ("vulkan: no module for mixer kind 'mamba2'
// (layer 3)"), so the caller can fall back to another backend as for any device failure.
// The first line of a kind wins (a test checks that no table holds a kind twice).
template <class Table, class Kind>
auto find_module(const Table& table, Kind kind, const char* backend, int64_t layer) -> decltype(std::begin(table)->make) {
  for (const auto& e : table)
    if (e.kind == kind) return e.make;
  const char* what = std::is_same_v<Kind, MixerKind> ? "mixer" : "feed-forward";
  throw BackendFailure(std::string(backend) + ": no module for " + what + " kind '" + kind_name(kind) +
                       "' (layer " + std::to_string(layer) + ")");
}

// Model-level factors a backend's loop does not apply yet: multipliers (Granite's embedding, residual,
// attention and logits ones unless `granite_ok`; Falcon-H1's µP set unless `falcon_ok`: Vulkan applies
// both), attention projection biases unless `falcon_ok`, MLP biases unless `mlp_bias_ok` (Vulkan takes
// those of dense MLPs): one-line BackendFailure before anything is uploaded.
inline void check_model_params(const JambaConfig& c, const char* backend, bool mlp_bias_ok = false,
                               bool granite_ok = false, bool falcon_ok = false) {
  JambaConfig rest = c;
  if (granite_ok) {
    rest.embedding_multiplier = rest.residual_multiplier = rest.logits_scaling = 1.0;
    rest.attention_multiplier = 0.0;
  }
  if (falcon_ok) {
    rest.key_multiplier = rest.lm_head_multiplier = rest.attention_in_multiplier = rest.attention_out_multiplier = 1.0;
    rest.ssm_in_multiplier = rest.ssm_out_multiplier = rest.mlp_gate_multiplier = rest.mlp_down_multiplier = 1.0;
    rest.ssm_multipliers.clear();
    rest.attention_bias = false;
  }
  if (rest.has_multipliers())
    throw BackendFailure(std::string(backend) +
                         ": no kernel for the embedding / residual / attention / logits multipliers; use the cpu backend");
  if (rest.attention_bias || (c.mlp_bias && !mlp_bias_ok))
    throw BackendFailure(std::string(backend) + ": no kernel for " + (rest.attention_bias ? "attention" : "MLP") +
                         " projection biases; use the cpu backend");
}

}  // namespace hl
