// The Vulkan backend's layer modules (engine/backend/vulkan/vk_module.h, issue 14 item 2): the model
// loop runs whatever units the schedule names, so schedules no Jamba config gives run as the plain
// reference says — layers without a feed-forward (against the same layers with a zero down
// projection) and attention moved to layer 0 — by decode steps and by one prefill.
// Built only into hl_vulkan_tests (HL_VULKAN_TESTS); tolerance kVsGolden (backend_test_util.h).
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "engine/model/generator.h"
#include "engine/reference/ref_model.h"
#include "tests/engine/test_util.h"
#include "tests/engine/module_test_util.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::backend_test;

namespace {

// Vulkan on `got` against the reference on `want`, decode and prefill.
void expect_vulkan_matches_reference(const std::shared_ptr<const Model>& got, const std::shared_ptr<const Model>& want,
                                     const std::string& what) {
  const std::vector<int32_t> ids = {3, 99, 1000, 7, 7, 2048};
  RunOptions opts;
  opts.full = true;
  opts.registers = 2;
  ref::ReferenceModel r(want);
  const std::vector<TokenTrace> ref = r.run(ids, opts);
  for (bool prefill : {false, true}) {
    std::unique_ptr<Backend> b = make_vulkan_backend(got);
    expect_traces_close(run(*b, ids, opts, prefill), ref, kVsGolden, what + (prefill ? " prefill" : " decode"));
  }
}

}  // namespace

TEST(VulkanModules, LayersWithoutFeedForward_AsTheSameLayersWithAZeroDownProjection) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  test::TempDir tmp;
  std::shared_ptr<Model> none = generated_demo_model(tmp.path, 11, GenerateOptions{}.dtype);
  ASSERT_FALSE(none->schedule[0].is_moe());
  ASSERT_TRUE(none->schedule[1].is_moe());
  // The oracle: layer 0 keeps its MLP, layer 1 gets its first expert as a dense MLP; both down
  // projections are zero, so h += 0 where the FFN-less layers add nothing.
  auto zero = std::make_shared<Model>(*none);
  zero->w.layers[1].mlp = zero->w.layers[1].moe.experts[0];
  std::vector<std::vector<uint8_t>> zeros;
  zeros.reserve(2);  // the Mats point into these buffers
  for (int64_t i : {0, 1}) {
    Mat& down = zero->w.layers[i].mlp.down;
    zeros.emplace_back(static_cast<size_t>(down.bytes()), 0);
    down.data = zeros.back().data();
  }
  std::vector<FfnKind> ffns = none->schedule.ffns();
  ffns[0] = ffns[1] = FfnKind::Dense;
  zero->schedule = LayerSchedule::from_lists(none->schedule.mixers(), ffns, none->schedule.params());
  ffns[0] = ffns[1] = FfnKind::None;
  none->schedule = LayerSchedule::from_lists(none->schedule.mixers(), ffns, none->schedule.params());
  ASSERT_EQ(none->schedule.num_moe(), 3);
  expect_vulkan_matches_reference(none, zero, "no FFN in layers 0, 1");
}

TEST(VulkanModules, AttentionMovedToLayerZero_RunsAsTheReference) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  test::TempDir tmp;
  std::shared_ptr<Model> m = generated_demo_model(tmp.path, 11, GenerateOptions{}.dtype);
  std::vector<MixerKind> mixers = m->schedule.mixers();
  std::vector<FfnKind> ffns = m->schedule.ffns();
  const int64_t a = m->schedule.attention_layers().at(0);
  std::swap(mixers[0], mixers[a]);  // the whole layer moves: its kinds with its weights
  std::swap(ffns[0], ffns[a]);
  std::swap(m->w.layers[0], m->w.layers[a]);
  m->schedule = LayerSchedule::from_lists(mixers, ffns, m->schedule.params());
  ASSERT_TRUE(m->schedule[0].has_attention());
  expect_vulkan_matches_reference(m, m, "attention first");
}

#endif  // HL_VULKAN_TESTS
