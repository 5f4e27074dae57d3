// The Vulkan backend against the CPU reference backend and the golden reference traces (issue 7)
// on every golden checkpoint and run: logits and every trace tensor, decode and prefill, the
// normalizers and registers. Built only into hl_vulkan_tests (label vulkan, HL_VULKAN_TESTS
// defined; test_vulkan_runs.cpp has the rest); skips where no Vulkan device exists.

// Tolerances: as stated in backend_test_util.h (kVsCpu, kVsGolden, kPrefillVsDecode, shared with
// the CUDA tests), and one of the Vulkan backend's own:
//   F32 matrices stored as F16 (VulkanOptions::f32_as_f16), logits vs CPU: |Δ| ≤ 2e-2·scale, same argmax
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::backend_test;
using namespace hl::vktest;

namespace {

const auto* const g_keep = ::testing::AddGlobalTestEnvironment(
    new KeepDevice(have_vulkan, [](std::shared_ptr<const Model> m) { return make_vulkan_backend(std::move(m)); }));

}  // namespace

class VulkanGolden : public ::testing::TestWithParam<GoldenRun> {
 protected:
  void SetUp() override {
    if (!have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  }
};

TEST_P(VulkanGolden, DecodeMatchesCpuBackend) {
  expect_decode_matches_cpu(GetParam(), "vulkan");
}

TEST_P(VulkanGolden, PrefillMatchesCpuAndDecode) {
  expect_prefill_matches_cpu_and_decode(GetParam(), "vulkan");
}

TEST_P(VulkanGolden, TraceMatchesReferenceFile) {
  expect_trace_matches_reference_file(GetParam(), "vulkan");
}

INSTANTIATE_TEST_SUITE_P(Golden, VulkanGolden, ::testing::ValuesIn(golden_runs()), golden_run_name);

#endif  // HL_VULKAN_TESTS
