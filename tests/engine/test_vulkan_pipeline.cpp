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

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/generator.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "tests/engine/pipeline_test_util.h"
#include "tests/engine/test_util.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::pipeline_test;
using hl::backend_test::expect_traces_close;
using hl::backend_test::kVsCpu;

namespace {

const std::string kModels = std::string(HL_SOURCE_DIR) + "/resources/models/";
const std::vector<int32_t> kIds = {1, 17, 400, 9, 33}, kChunk = {250, 12, 7};

std::unique_ptr<Backend> vulkan_stage(int, std::shared_ptr<const Model> m, StageLink* link,
                                      const std::vector<LayerRange>& ranges) {
  return make_stage_backend("vulkan", std::move(m), link, ranges);
}

void expect_vulkan_pipeline_equals_one_vulkan(const std::string& dir, const RunOptions& opts,
                                              const std::vector<int>& ns) {
  std::unique_ptr<Backend> one = make_vulkan_backend(load_model(dir));
  const std::vector<TokenTrace> want = feed(*one, opts, kIds, kChunk);
  for (int n : ns) {
    const std::vector<std::vector<TokenTrace>> got = run_pipeline(dir, n, opts, kIds, kChunk, {}, vulkan_stage);
    for (int r = 0; r < n; ++r) {
      SCOPED_TRACE(base_name(dir) + " " + std::to_string(n) + " stages, stage " + std::to_string(r));
      // step_seconds is each run's own time; every other field bit for bit.
      std::vector<TokenTrace> g = got[static_cast<size_t>(r)];
      ASSERT_EQ(g.size(), want.size());
      for (size_t t = 0; t < g.size(); ++t) g[t].step_seconds = want[t].step_seconds;
      expect_same(want, g, "vulkan pipeline");
    }
  }
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

// Stages on different backends exchange the same float32 rows: a CPU first stage and a Vulkan last
// stage (and the other way round) agree with the CPU within the device tolerance, on every stage.
TEST_F(VulkanPipeline, MixedCpuAndVulkanStages_MatchCpu) {
  const std::string dir = kModels + "baseline";
  RunOptions opts;
  opts.full = true;
  opts.registers = 2;
  cpu::CpuBackend cpu(load_model(dir));
  const std::vector<TokenTrace> want = feed(cpu, opts, kIds, kChunk);
  for (int vulkan_rank : {0, 1}) {
    const std::vector<std::vector<TokenTrace>> got = run_pipeline(
        dir, 2, opts, kIds, kChunk, {},
        [&](int rank, std::shared_ptr<const Model> m, StageLink* link, const std::vector<LayerRange>& ranges) {
          return make_stage_backend(rank == vulkan_rank ? "vulkan" : "cpu", std::move(m), link, ranges);
        });
    for (const std::vector<TokenTrace>& g : got)
      expect_traces_close(g, want, kVsCpu, "vulkan on stage " + std::to_string(vulkan_rank) + " vs cpu");
  }
}

// A Vulkan stage refuses a model loaded for another range, as the CPU stage does.
TEST_F(VulkanPipeline, StageOfAnotherRange_Refused) {
  const std::string dir = kModels + "baseline";
  Wires w;
  ThreadLink link(w, 1, 2);
  try {
    make_stage_backend("vulkan", load_stage(dir, {}, LayerRange{4, 8}), &link, {LayerRange{0, 3}, LayerRange{3, 8}});
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "pipeline: this stage runs layers [3, 8) but the model holds [4, 8)");
  }
}

#endif  // HL_VULKAN_TESTS
