// The Vulkan backend against the CPU reference backend and the golden reference traces (issue 7)
// on every golden checkpoint and run: logits and every trace tensor, decode and prefill, the
// normalizers and registers. Built only into hl_vulkan_tests (label vulkan, HL_VULKAN_TESTS
// defined; test_vulkan_runs.cpp has the rest); skips where no Vulkan device exists.

// Tolerances (float tensors; integers exactly; scale = max(1, max |reference| over the tensor)):
//   Vulkan vs CPU, stored weights kept as they are (F32, F16, BF16 widened exactly on both sides,
//   so only the fp32 summation order and exp/log differ):  |Δ| ≤ 1e-5·|ref| + 2e-6·scale
//   Vulkan vs the golden reference traces (the golden suite's own bound):   |Δ| ≤ 1e-4·|ref| + 1e-5·scale
//   Vulkan prefill vs Vulkan decode (trace-format.md §3):                  |Δ| ≤ 1e-5·scale
//   F32 matrices stored as F16 (VulkanOptions::f32_as_f16), logits vs CPU: |Δ| ≤ 2e-2·scale, same argmax
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/trace/trace_file.h"
#include "tests/engine/vulkan_test_util.h"

namespace fs = std::filesystem;
using namespace hl;
using namespace hl::vktest;

namespace {

// Keeps one Vulkan backend (so one device, its compiled pipelines) alive across the suite.
class KeepDevice : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!have_vulkan()) return;
    const std::vector<VkRun> runs = golden_runs();
    if (!runs.empty()) keep_ = make_vulkan_backend(load_model(runs[0].case_dir));
  }
  void TearDown() override { keep_.reset(); }

 private:
  std::unique_ptr<Backend> keep_;
};
const auto* const g_keep = ::testing::AddGlobalTestEnvironment(new KeepDevice);

}  // namespace

class VulkanGolden : public ::testing::TestWithParam<VkRun> {
 protected:
  void SetUp() override {
    if (!have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  }
};

TEST_P(VulkanGolden, DecodeMatchesCpuBackend) {
  const VkRun& g = GetParam();
  auto model = load_model(g.case_dir);
  auto cpu = make_backend("cpu", model);
  auto vk = make_backend("vulkan", model);
  EXPECT_EQ(vk->name(), "vulkan");
  const std::vector<TokenTrace> ref = run(*cpu, g.ids, g.opts, false);
  const std::vector<TokenTrace> got = run(*vk, g.ids, g.opts, false);
  EXPECT_EQ(vk->registers(), cpu->registers());
  expect_traces_close(got, ref, 1e-5, 2e-6, "vulkan decode vs cpu");
}

TEST_P(VulkanGolden, PrefillMatchesCpuAndDecode) {
  const VkRun& g = GetParam();
  auto model = load_model(g.case_dir);
  auto cpu = make_backend("cpu", model);
  auto vk = make_backend("vulkan", model);
  const std::vector<TokenTrace> ref = run(*cpu, g.ids, g.opts, false);
  const std::vector<TokenTrace> pre = run(*vk, g.ids, g.opts, true);
  expect_traces_close(pre, ref, 1e-5, 2e-6, "vulkan prefill vs cpu");
  // Prefill against the backend's own step-by-step run (trace-format.md §3: 1e-5 relative).
  const std::vector<TokenTrace> step = run(*vk, g.ids, g.opts, false);
  expect_traces_close(pre, step, 0.0, 1e-5, "vulkan prefill vs vulkan decode");
}

TEST_P(VulkanGolden, TraceMatchesReferenceFile) {
  const VkRun& g = GetParam();
  auto model = load_model(g.case_dir);
  auto vk = make_backend("vulkan", model);
  const std::vector<TokenTrace> recs = run(*vk, g.ids, g.opts, false);
  const std::string path = temp_path(fs::path(g.case_dir).filename().string() + "_" + g.name + ".safetensors");
  write_trace(path, *model, vk->registers(), recs, TraceMeta{});
  SafetensorsFile got = SafetensorsFile::open(path);
  SafetensorsFile want = SafetensorsFile::open(g.case_dir + "/expected/" + g.name + ".safetensors");
  ASSERT_FALSE(want.tensors().empty());
  for (const TensorInfo& wt : want.tensors()) {
    const TensorInfo* gt = got.find(wt.name);
    ASSERT_NE(gt, nullptr) << "vulkan trace lacks '" << wt.name << "'";
    ASSERT_EQ(gt->shape, wt.shape) << wt.name;
    const std::vector<double> a = as_doubles(*gt), b = as_doubles(wt);
    if (wt.dtype == DType::I32 || wt.dtype == DType::I64) {
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << wt.name << " differs first at flat index " << i;
      continue;
    }
    double scale = 1.0;
    for (double v : b) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-4 * std::fabs(b[i]) + 1e-5 * scale) << wt.name << " differs first at flat index " << i;
  }
  fs::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Golden, VulkanGolden, ::testing::ValuesIn(golden_runs()),
                         [](const ::testing::TestParamInfo<VkRun>& info) {
                           std::string n = fs::path(info.param.case_dir).filename().string() + "_" + info.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

#endif  // HL_VULKAN_TESTS
