// The Vulkan backend's units of a model's layers, found in its module tables (vk_module.h), to which
// each unit's own file adds its line (vk_attention.cpp, vk_mamba1.cpp, vk_mamba2.cpp, vk_parallel.cpp,
// vk_ffn.cpp); a
// layer without a mixer has no unit, as on the CPU (cpu_modules.cpp). A new kind adds
// its unit's file; nothing here changes, and the model loop (vk_record.cpp) names no kind. The
// lookup and its error: layer_modules.h.
#include "engine/backend/layer_modules.h"
#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {

void check_vk_modules(const Model& m) {
  // MLP biases: a dense MLP's (Nemotron-H's relu², Falcon-H1's SwiGLU) and relu² experts' (Nemotron-H),
  // not a SwiGLU expert's. Granite's and Falcon-H1's multipliers (the residual one on MoE layers through
  // the routing weights, moe_route.comp); Falcon-H1's MLP multipliers are dense-only (FfnParams).
  bool expert_bias_ok = true;
  for (const LayerSpec& l : m.schedule.layers()) expert_bias_ok = expert_bias_ok && (!l.is_moe() || !l.ffn_params.gated);
  check_model_params(m.config, "vulkan", expert_bias_ok, /*granite_ok=*/true, /*falcon_ok=*/true);
  for (int64_t i = 0; i < m.schedule.size(); ++i) {
    if (mixer_present(m.schedule[i].mixer)) find_module(VkMixerTable::entries(), m.schedule[i].mixer, "vulkan", i);
    if (m.schedule[i].is_moe() && m.schedule[i].ffn_params.groups > 64)  // moe_route.comp's group mask
      throw BackendFailure("vulkan: the sigmoid router takes at most 64 expert groups (layer " + std::to_string(i) +
                           " has " + std::to_string(m.schedule[i].ffn_params.groups) + "); use the cpu backend");
    if (m.schedule[i].ffn != FfnKind::None) find_module(VkFfnTable::entries(), m.schedule[i].ffn, "vulkan", i);
  }
}

std::unique_ptr<VkMixer> make_vk_mixer(const VkModuleContext& c, int64_t layer) {
  const MixerKind k = c.model.schedule[layer].mixer;
  if (!mixer_present(k)) return nullptr;  // the loop skips the layer's mixer and its norm (Nemotron-H's '-')
  return find_module(VkMixerTable::entries(), k, "vulkan", layer)(c, layer);
}

std::unique_ptr<VkFfn> make_vk_ffn(const VkModuleContext& c, int64_t layer) {
  const FfnKind k = c.model.schedule[layer].ffn;
  if (k == FfnKind::None) return nullptr;  // the loop skips the layer's feed-forward
  return find_module(VkFfnTable::entries(), k, "vulkan", layer)(c, layer);
}

}  // namespace hl::vk
