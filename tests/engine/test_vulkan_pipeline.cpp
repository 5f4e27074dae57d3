// Pipeline stages on the Vulkan backend (issue 21 item 3, pipeline.h make_stage_backend): N stages
// in threads over the in-process StageLink, each on its own Vulkan backend holding only its layers,
// give records equal bit for bit to one Vulkan backend running the whole model (the residual rows
// cross the stages in float32 exactly; each stage computes its own layers' slots and residual
// points, the last one the logits) — decode steps, a prefill chunk, trained and test-time registers,
// full traces, every family; a pipeline that mixes a CPU stage and a Vulkan stage agrees with the CPU
// within the device tolerance (kVsCpu).
// Built only into hl_vulkan_tests (HL_VULKAN_TESTS); skips without a Vulkan device (lavapipe counts).
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include "tests/engine/pipeline_test_util.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::pipeline_test;

namespace {

const std::string kModels = std::string(HL_SOURCE_DIR) + "/resources/models/";
const std::vector<int32_t> kIds = {1, 17, 400, 9, 33}, kChunk = {250, 12, 7};

void expect_vulkan_pipeline_equals_one_vulkan(const std::string& dir, const RunOptions& opts,
                                              const std::vector<int>& ns) {
  std::unique_ptr<Backend> one = make_vulkan_backend(load_model(dir));
  expect_pipeline_equals_one(*one, "vulkan", dir, opts, ns, kIds, kChunk);
}

class VulkanPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  }
};

}  // namespace

TEST_F(VulkanPipeline, RecordsEqualOneVulkanBackend_DemoModels) {
  RunOptions opts;
  opts.full = true;  // attention rows, Δ and retained fractions merged too
  expect_vulkan_pipeline_equals_one_vulkan(kModels + "baseline", opts, {2, 3});
  expect_vulkan_pipeline_equals_one_vulkan(kModels + "registers", opts, {2});  // trained registers cross the stages
  opts.registers = 3;                                                        // test-time registers
  opts.normalizer = Normalizer::Softmax1;
  expect_vulkan_pipeline_equals_one_vulkan(kModels + "baseline", opts, {3});
  RunOptions lean;
  lean.instruments = false;
  expect_vulkan_pipeline_equals_one_vulkan(kModels + "no-attention", lean, {2});
}

TEST_F(VulkanPipeline, RecordsEqualOneVulkanBackend_OtherFamilies) {
  RunOptions opts;
  opts.full = true;
  for_each_family({"bamba-tiny", "nemotron-h-moe-tiny", "granite-h-tiny", "falcon-h1-tiny"},
                  [&](const std::string& dir) { expect_vulkan_pipeline_equals_one_vulkan(dir, opts, {2, 3}); });
}

TEST_F(VulkanPipeline, MixedCpuAndVulkanStages_MatchCpu) {
  expect_mixed_with_cpu_stage_matches_cpu("vulkan", kModels + "baseline", kIds, kChunk);
}

TEST_F(VulkanPipeline, StageOfAnotherRange_Refused) {
  expect_stage_of_another_range_refused("vulkan", kModels + "baseline");
}

#endif  // HL_VULKAN_TESTS
