// The Vulkan backend's module tables: one line per mixer kind and per feed-forward kind naming the
// function that makes its unit (vk_module.h). A new kind adds its unit's file and two lines here
// (its maker's declaration and its row); the model loop (vk_record.cpp) names no kind. The lookup
// and its error: layer_modules.h.
#include "engine/backend/layer_modules.h"
#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {

// The makers, each defined in its kind's file.
std::unique_ptr<VkMixer> make_vk_attention(const VkModuleContext& c, int64_t layer);  // vk_attention.cpp
std::unique_ptr<VkMixer> make_vk_mamba1(const VkModuleContext& c, int64_t layer);     // vk_mamba1.cpp
std::unique_ptr<VkFfn> make_vk_dense(const VkModuleContext& c, int64_t layer);        // vk_ffn.cpp
std::unique_ptr<VkFfn> make_vk_moe(const VkModuleContext& c, int64_t layer);          // vk_ffn.cpp

namespace {

const ModuleEntry<MixerKind, MakeVkMixer> kVkMixers[] = {
    {MixerKind::Attention, make_vk_attention},
    {MixerKind::Mamba1, make_vk_mamba1},
};

const ModuleEntry<FfnKind, MakeVkFfn> kVkFfns[] = {
    {FfnKind::Dense, make_vk_dense},
    {FfnKind::MoE, make_vk_moe},
};

}  // namespace

std::unique_ptr<VkMixer> make_vk_mixer(const VkModuleContext& c, int64_t layer) {
  return find_module(kVkMixers, c.model.schedule[layer].mixer, "vulkan", layer)(c, layer);
}

std::unique_ptr<VkFfn> make_vk_ffn(const VkModuleContext& c, int64_t layer) {
  const FfnKind k = c.model.schedule[layer].ffn;
  if (k == FfnKind::None) return nullptr;  // the loop skips the layer's feed-forward
  return find_module(kVkFfns, k, "vulkan", layer)(c, layer);
}

}  // namespace hl::vk
