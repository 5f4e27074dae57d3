// The module lookup every backend's table uses (engine/backend/layer_modules.h): a kind with a line
// gets that line's maker; a kind without one (only Attention and Mamba1 exist, so a table missing a
// line stands in for the Vulkan table meeting a new kind) throws the one-line BackendFailure.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "engine/backend/layer_modules.h"
#include "tests/engine/module_test_util.h"

using namespace hl;
using hl::backend_test::backend_failure_of;

namespace {

int make_attention_unit(int64_t layer) {
  return 100 + static_cast<int>(layer);
}
int make_moe_unit(int64_t layer) {
  return 200 + static_cast<int>(layer);
}
using Make = int (*)(int64_t);
// As vk_modules.cpp's tables, each with one line left out.
const ModuleEntry<MixerKind, Make> kVkMixersLackingMamba[] = {{MixerKind::Attention, make_attention_unit}};
const ModuleEntry<FfnKind, Make> kVkFfnsLackingDense[] = {{FfnKind::MoE, make_moe_unit}};

}  // namespace

TEST(LayerModules, KindWithALineGetsItsMaker) {
  EXPECT_EQ(find_module(kVkMixersLackingMamba, MixerKind::Attention, "vulkan", 6)(6), 106);
  EXPECT_EQ(find_module(kVkFfnsLackingDense, FfnKind::MoE, "vulkan", 1)(1), 201);
}

TEST(LayerModules, KindWithoutUnitIsOneLineBackendFailureNamingKindAndLayer) {
  const std::string mixer = backend_failure_of([] { find_module(kVkMixersLackingMamba, MixerKind::Mamba1, "vulkan", 3); });
  EXPECT_EQ(mixer, std::string("vulkan: no module for mixer kind '") + mixer_name(MixerKind::Mamba1) + "' (layer 3)");
  const std::string ffn = backend_failure_of([] { find_module(kVkFfnsLackingDense, FfnKind::Dense, "vulkan", 0); });
  EXPECT_EQ(ffn, std::string("vulkan: no module for feed-forward kind '") + ffn_name(FfnKind::Dense) + "' (layer 0)");
  EXPECT_EQ(mixer.find('\n'), std::string::npos);
}
