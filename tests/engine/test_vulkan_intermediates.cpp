// The Vulkan backend against the plain-loop reference forward (engine/reference) layer by layer: every
// named intermediate it reports (model/intermediates.h; not mixer_out / ffn_out, which its kernels add
// straight into h) of every layer and row, by decode steps and by one prefill, on every golden run and
// the demo-random preset (oracle_cases.h), through the body shared with CUDA (intermediates_test_util.h).
// A mismatch names the tensor, the layer and the row.
//
// Tolerance (scale = max(1, max |ref|) over all rows of one tensor of one layer): |Δ| ≤ kRel·|ref| +
// kAbs·scale. Why: the kernels compute in fp32 (lavapipe here) in their own summation orders (8-lane
// matrix–vector rows, 64-wide reductions, the chunked prefill scan), the reference sums in fp64 and
// rounds once. The measured worst over every case, tensor, layer and row on lavapipe is 2.0e-6·scale
// (ssm_y of nemotron_basic with 2 registers: the Mamba-2 output after its gated group norm; the Jamba
// cases reach 1.0e-6, ssm_y of dense_no_moe by prefill, ssm_in of the demo with softmax-1 and 3
// registers; embed exact; HL_REFERENCE_REPORT=1 prints it per tensor), so 1e-5 leaves a factor 5; a
// wrong eps, a skipped bias or a norm weight left out moves the tensor it enters by ≥ 1e-3·scale.
// Built only into hl_vulkan_tests (HL_VULKAN_TESTS).
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include <string>

#include "tests/engine/intermediates_test_util.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::reftest;

namespace {

constexpr double kRel = 1e-5, kAbs = 1e-5;

// Every name but kAccumulatedIntermediates, whatever the block.
ObservedBackend vulkan() {
  return {"vulkan", [](std::shared_ptr<const Model> m) { return make_vulkan_backend(std::move(m)); },
          set_vulkan_observer,
          [](const std::string& name, int64_t) {
            for (const char* n : kAccumulatedIntermediates)
              if (name == n) return false;
            return true;
          }};
}

class VulkanIntermediates : public ::testing::TestWithParam<OracleCase> {};

TEST_P(VulkanIntermediates, Decode_EveryReportedIntermediateMatchesTheReference) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  if (const std::string lacks = golden_test::backend_lacks("vulkan", case_dir(GetParam().dir)); !lacks.empty()) GTEST_SKIP() << lacks;
  expect_intermediates_match_reference(vulkan(), GetParam(), false, kRel, kAbs);
}

TEST_P(VulkanIntermediates, Prefill_EveryReportedIntermediateMatchesTheReference) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  if (const std::string lacks = golden_test::backend_lacks("vulkan", case_dir(GetParam().dir)); !lacks.empty()) GTEST_SKIP() << lacks;
  expect_intermediates_match_reference(vulkan(), GetParam(), true, kRel, kAbs);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, VulkanIntermediates, ::testing::ValuesIn(oracle_cases()), case_name);

TEST(VulkanObserver, ObservingLeavesTheRecordsUnchanged_ClearingStopsTheReports) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  expect_observing_leaves_records_unchanged(vulkan(), oracle_cases().back());  // softmax-1, 3 registers
}

}  // namespace

#endif  // HL_VULKAN_TESTS
