// The Vulkan backend against the plain-loop reference forward (engine/reference) layer by layer: every
// named intermediate it reports (model/intermediates.h; not mixer_out / ffn_out, which its kernels add
// straight into h) of every layer and row, by decode steps and by one prefill, on every golden run and
// the demo-random preset (oracle_cases.h). A mismatch names the tensor, the layer and the row.
//
// Tolerance (scale = max(1, max |ref|) over all rows of one tensor of one layer): |Δ| ≤ kRel·|ref| +
// kAbs·scale. Why: the kernels compute in fp32 (lavapipe here) in their own summation orders (8-lane
// matrix–vector rows, 64-wide reductions, the chunked prefill scan), the reference sums in fp64 and
// rounds once. The measured worst over every case, tensor, layer and row on lavapipe is 1.0e-6·scale
// (ssm_y of dense_no_moe by prefill, ssm_in of the demo with softmax-1 and 3 registers; embed exact;
// HL_REFERENCE_REPORT=1 prints it per tensor), so 1e-5 leaves a factor 10; a wrong eps, a skipped bias
// or a norm weight left out moves the tensor it enters by ≥ 1e-3·scale.
// Built only into hl_vulkan_tests (HL_VULKAN_TESTS).
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/model/loader.h"
#include "engine/reference/ref_model.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/oracle_cases.h"
#include "tests/engine/reference_test_util.h"
#include "tests/engine/vulkan_test_util.h"

using namespace hl;
using namespace hl::reftest;

namespace {

constexpr double kRel = 1e-5, kAbs = 1e-5;

bool accumulated(const std::string& name) {
  for (const char* n : kAccumulatedIntermediates)
    if (name == n) return true;
  return false;
}

std::set<std::string> names_of(const Recording& r) {
  std::set<std::string> s;
  for (const auto& [k, v] : r) s.insert(std::get<0>(k));
  return s;
}

class VulkanIntermediates : public ::testing::TestWithParam<OracleCase> {
 protected:
  // The reference's intermediates without those the Vulkan kernels never materialise.
  Recording reference() const {
    Recording all;
    ref::ReferenceModel r(load_model(case_dir(GetParam().dir)));
    r.set_observer(recorder(&all));
    r.run(GetParam().ids, GetParam().opts);
    Recording kept;
    for (auto& [k, v] : all)
      if (!accumulated(std::get<0>(k))) kept.emplace(k, std::move(v));
    return kept;
  }
  // The Vulkan backend's, by decode steps or one prefill, with its records.
  Recording vulkan(bool prefill, std::vector<TokenTrace>* recs = nullptr) const {
    Recording got;
    std::unique_ptr<Backend> b = make_vulkan_backend(load_model(case_dir(GetParam().dir)));
    set_vulkan_observer(*b, recorder(&got));
    std::vector<TokenTrace> t = golden_test::run_tokens(*b, GetParam().ids, GetParam().opts, prefill);
    if (recs) *recs = std::move(t);
    return got;
  }
  void expect_close(bool prefill) {
    const Recording want = reference();
    const Recording got = vulkan(prefill);
    const std::string what = std::string("vulkan ") + (prefill ? "prefill" : "decode") + " vs reference";
    ASSERT_FALSE(want.empty());
    // Exactly the reference's names less the accumulated ones: a name the recording loses fails here.
    EXPECT_EQ(names_of(got), names_of(want)) << what;
    report(GetParam().name + (prefill ? " prefill" : " decode"), expect_recordings_close(got, want, kRel, kAbs, what));
  }
};

TEST_P(VulkanIntermediates, Decode_EveryReportedIntermediateMatchesTheReference) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  expect_close(false);
}

TEST_P(VulkanIntermediates, Prefill_EveryReportedIntermediateMatchesTheReference) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  expect_close(true);
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, VulkanIntermediates, ::testing::ValuesIn(oracle_cases()), case_name);

// Observing changes no result: the records with an observer are bit for bit those without, and
// clearing the observer stops the reports.
TEST(VulkanObserver, ObservingLeavesTheRecordsUnchanged_ClearingStopsTheReports) {
  if (!vktest::have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  const OracleCase c = oracle_cases().back();  // the demo with softmax-1 and registers
  auto model = load_model(case_dir(c.dir));
  for (bool prefill : {false, true}) {
    std::unique_ptr<Backend> b = make_vulkan_backend(model);
    const std::vector<TokenTrace> plain = golden_test::run_tokens(*b, c.ids, c.opts, prefill);
    Recording rec;
    set_vulkan_observer(*b, recorder(&rec));
    const std::vector<TokenTrace> seen = golden_test::run_tokens(*b, c.ids, c.opts, prefill);
    ASSERT_FALSE(rec.empty());
    ASSERT_EQ(seen.size(), plain.size());
    for (size_t t = 0; t < plain.size(); ++t)
      EXPECT_EQ(0, std::memcmp(seen[t].logits.data(), plain[t].logits.data(), plain[t].logits.size() * 4))
          << "token " << t << (prefill ? " prefill" : " decode");
    set_vulkan_observer(*b, {});
    rec.clear();
    golden_test::run_tokens(*b, c.ids, c.opts, prefill);
    EXPECT_TRUE(rec.empty());
  }
}

}  // namespace

#endif  // HL_VULKAN_TESTS
