// The CUDA backend against the plain-loop reference forward (engine/reference) layer by layer: every
// named intermediate it reports (model/intermediates.h, set_cuda_observer) of every layer and row, by
// decode steps and by one prefill, over oracle_cases.h, through the body shared with Vulkan
// (intermediates_test_util.h). Unlike Vulkan, CUDA materialises mixer_out and ffn_out in blocks of
// more than one row (the prefill products write y before the residual add) and reports them there;
// only one-row blocks (decode) add them straight into h (cuda_reports_intermediate).
//
// Tolerance as the Vulkan test's (|Δ| ≤ 1e-5·|ref| + 1e-5·scale, scale = max(1, max |ref|) per tensor
// and layer): fp32 kernels and cuBLAS products (CUBLAS_COMPUTE_32F_PEDANTIC) in their own summation
// orders against the reference's fp64 sums. Not yet measured on a device (HL_REFERENCE_REPORT=1 prints
// the worst per tensor). Device tests skip without a CUDA device; the host-side ones run everywhere.
// Built only into hl_cuda_tests (label cuda, HL_CUDA_TESTS defined).
#ifdef HL_CUDA_TESTS
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "engine/backend/cuda/cuda_backend.h"
#include "tests/engine/backend_test_util.h"
#include "tests/engine/intermediates_test_util.h"

using namespace hl;
using namespace hl::reftest;

namespace {

constexpr double kRel = 1e-5, kAbs = 1e-5;

ObservedBackend cuda() {
  return {"cuda", [](std::shared_ptr<const Model> m) { return make_cuda_backend(std::move(m)); }, set_cuda_observer,
          [](const std::string& name, int64_t rows) { return cuda_reports_intermediate(name.c_str(), rows); }};
}

class CudaIntermediates : public ::testing::TestWithParam<OracleCase> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
    if (const std::string lacks = golden_test::backend_lacks("cuda", case_dir(GetParam().dir)); !lacks.empty()) GTEST_SKIP() << lacks;
  }
};

TEST_P(CudaIntermediates, Decode_EveryReportedIntermediateMatchesTheReference) {
  expect_intermediates_match_reference(cuda(), GetParam(), false, kRel, kAbs);
}

TEST_P(CudaIntermediates, Prefill_EveryReportedIntermediateMatchesTheReference) {
  expect_intermediates_match_reference(cuda(), GetParam(), true, kRel, kAbs);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CudaIntermediates, ::testing::ValuesIn(oracle_cases()), case_name);

// Observing runs the decode step as plain launches instead of its graph: the same kernels, so the
// records are bit for bit those of the graph.
TEST(CudaObserver, ObservingLeavesTheRecordsUnchanged_ClearingStopsTheReports) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  expect_observing_leaves_records_unchanged(cuda(), oracle_cases().back());  // softmax-1, 3 registers
}

// Host side, no device needed from here on.

// One-row blocks lack exactly the outputs the decode products add into h (o_proj, out_proj, down);
// longer blocks report every name.
TEST(CudaObserver, OneRowBlocksLackTheAccumulatedOutputs_LongerBlocksReportEveryName) {
  for (const IntermediateName& n : kIntermediates) {
    const std::string name = n.name;
    const bool added_into_h = name == "mixer_out" || name == "ffn_out";
    EXPECT_EQ(cuda_reports_intermediate(n.name, 1), !added_into_h) << name;
    EXPECT_TRUE(cuda_reports_intermediate(n.name, 2)) << name;
    EXPECT_TRUE(cuda_reports_intermediate(n.name, 256)) << name;
  }
}

// The rows the device tests expect: mixer_out of the register rows (one block of 3) and of a prefill
// of 2 tokens, not of decode steps or a one-token prefill; a one-register block lacks it too.
TEST(CudaObserver, ExpectedRows_MixerOutOnlyFromBlocksOfMoreThanOneRow) {
  Recording all;
  for (int64_t row = 0; row < 5; ++row) {
    all[Key{"mixer_out", 1, row}] = {1.0f};
    all[Key{"layer_out", 1, row}] = {2.0f};
  }
  auto rows_of = [](const Recording& r, const std::string& name) {
    std::vector<int64_t> rows;
    for (const auto& [k, v] : r)
      if (std::get<0>(k) == name) rows.push_back(std::get<2>(k));
    return rows;
  };
  using R = std::vector<int64_t>;
  // 3 registers, then 2 tokens.
  EXPECT_EQ(rows_of(reported_rows(all, cuda(), 3, 2, false), "mixer_out"), (R{0, 1, 2}));
  EXPECT_EQ(rows_of(reported_rows(all, cuda(), 3, 2, true), "mixer_out"), (R{0, 1, 2, 3, 4}));
  EXPECT_EQ(rows_of(reported_rows(all, cuda(), 3, 2, false), "layer_out"), (R{0, 1, 2, 3, 4}));
  // 1 register, then 4 tokens; 4 registers, then 1 token.
  EXPECT_EQ(rows_of(reported_rows(all, cuda(), 1, 4, true), "mixer_out"), (R{1, 2, 3, 4}));
  EXPECT_EQ(rows_of(reported_rows(all, cuda(), 4, 1, true), "mixer_out"), (R{0, 1, 2, 3}));
}

TEST(CudaObserver, AnotherBackend_InvalidArgumentNamingIt) {
  auto model = load_model(backend_test::golden_case("gqa_basic"));
  std::unique_ptr<Backend> cpu = make_backend("cpu", model);
  try {
    set_cuda_observer(*cpu, [](const Intermediate&) {});
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'cpu' is not the CUDA backend"), std::string::npos) << e.what();
  }
}

}  // namespace

#endif  // HL_CUDA_TESTS
