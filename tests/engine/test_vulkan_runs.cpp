// The Vulkan backend's own checks beyond the shared body (backend_suite.h, test_vulkan.cpp): `auto`
// never picks a CPU device, long prefills in blocks across a KV-cache growth, both prefill kernels,
// F32 stored as F16, not enough memory (BackendFailure, `auto` → CPU) and the command line's fallbacks.
// Built only into hl_vulkan_tests (HL_VULKAN_TESTS); tolerances as stated in backend_test_util.h and test_vulkan.cpp.
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>

#include "tests/engine/vulkan_test_util.h"

namespace fs = std::filesystem;
using namespace hl;
using namespace hl::backend_test;
using namespace hl::vktest;

namespace {

class Vulkan : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_vulkan()) GTEST_SKIP() << "no Vulkan device";
  }
};

}  // namespace

TEST_F(Vulkan, AvailableBackendsListIt_AutoNeverPicksACpuDevice) {
  const std::vector<std::string> b = available_backends();
  EXPECT_NE(std::find(b.begin(), b.end(), "vulkan"), b.end());
  auto model = load_model(golden_case("gqa_basic"));
  std::string note;
  auto a = make_backend("auto", model, &note);
  if (!vulkan_available(true)) EXPECT_EQ(a->name(), "cpu") << "auto must not take lavapipe or another CPU device";
}

TEST_F(Vulkan, LongPrefillInBlocks_AcrossKvGrowth_MatchesCpu) {
  // 300 tokens with 2 registers pass the 258 rows reserved at start(); blocks of 7 tokens.
  auto model = load_model(golden_case("gqa_basic"));
  VulkanOptions vo;
  vo.max_block = 7;
  auto vk = make_vulkan_backend(model, vo);
  auto cpu = make_backend("cpu", model);
  std::vector<int32_t> ids = random_ids(300, model->config.vocab_size, 11);
  RunOptions o;
  o.full = true;
  o.registers = 2;
  const std::vector<TokenTrace> ref = run(*cpu, ids, o, true);
  std::vector<TokenTrace> got = run(*vk, std::vector<int32_t>(ids.begin(), ids.end() - 2), o, true);
  vk->forward(&ids[298], 1, &got);  // and decode on from there
  vk->forward(&ids[299], 1, &got);
  EXPECT_EQ(vk->position(), 300);
  expect_traces_close(got, ref, kVsCpu, "vulkan blocks vs cpu");
}

TEST_F(Vulkan, BothPrefillProductKernels_MatchCpu) {
  // The device picks one of the two prefill kernels (tiled on GPUs, barrier-free rows on CPU
  // devices); both are checked here on every MoE layout: per-expert and fused experts, mixed dtypes.
  for (const char* c : {"gqa_basic", "mixed_sharded", "mqa_tied_bias"}) {
    auto model = load_model(golden_case(c));
    auto cpu = make_backend("cpu", model);
    const std::vector<int32_t> ids = random_ids(37, model->config.vocab_size, 21);  // > 2 tiles of 16 tokens
    RunOptions o;
    o.full = true;
    const std::vector<TokenTrace> ref = run(*cpu, ids, o, false);
    for (VulkanOptions::Matmul m : {VulkanOptions::Matmul::Tiled, VulkanOptions::Matmul::Rows}) {
      VulkanOptions vo;
      vo.matmul = m;
      auto vk = make_vulkan_backend(model, vo);
      expect_traces_close(run(*vk, ids, o, true), ref, kVsCpu,
                          std::string(c) + (m == VulkanOptions::Matmul::Tiled ? " tiled" : " rows"));
    }
  }
}

TEST_F(Vulkan, F32StoredAsF16_LogitsWithinHalfPrecision) {
  auto model = load_model(golden_case("gqa_basic"));
  VulkanOptions vo;
  vo.f32_as_f16 = true;
  auto vk = make_vulkan_backend(model, vo);
  auto cpu = make_backend("cpu", model);
  const std::vector<int32_t> ids = random_ids(12, model->config.vocab_size, 5);
  const std::vector<TokenTrace> ref = run(*cpu, ids, RunOptions{}, false);
  const std::vector<TokenTrace> got = run(*vk, ids, RunOptions{}, false);
  for (size_t t = 0; t < ref.size(); ++t) {
    double scale = 1;
    for (float v : ref[t].logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < ref[t].logits.size(); ++i)
      ASSERT_NEAR(got[t].logits[i], ref[t].logits[i], 2e-2 * scale) << "token " << t << " logit " << i;
    const auto top = [](const std::vector<float>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); };
    EXPECT_EQ(top(got[t].logits), top(ref[t].logits)) << "token " << t;
  }
}

TEST_F(Vulkan, NotEnoughDeviceMemory_ClearBackendFailure) {
  auto model = load_model(golden_case("gqa_basic"));
  ScopedEnv limit("HL_VULKAN_MEMORY_LIMIT", "4096");
  try {
    make_vulkan_backend(model);
    FAIL() << "expected BackendFailure";
  } catch (const BackendFailure& e) {
    EXPECT_NE(std::string(e.what()).find("not enough device memory"), std::string::npos) << e.what();
  }
  // `auto` takes the CPU instead (lavapipe counts as a GPU here so that auto tries Vulkan at all).
  ScopedEnv cpu_ok("HL_VULKAN_ALLOW_CPU_DEVICE", "1");
  std::string note;
  auto b = make_backend("auto", model, &note);
  EXPECT_EQ(b->name(), "cpu");
  EXPECT_NE(note.find("not enough device memory"), std::string::npos) << note;
}

TEST_F(Vulkan, CliTraceAuto_DeviceLostMidRun_FallsBackToCpu) {
  const std::string out = temp_path("cli_auto.safetensors");
  const Cmd c =
      hybridlens("HL_VULKAN_ALLOW_CPU_DEVICE=1 HL_VULKAN_FAIL_AFTER=3",
                 "trace --checkpoint " + golden_case("dense_no_moe") + " --ids 3,4,5,6,7 --backend auto --out " + out);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("device lost"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("falling back to the CPU"), std::string::npos) << c.err;
  SafetensorsFile got = SafetensorsFile::open(out);
  EXPECT_EQ(got.metadata().at("backend"), "cpu");
  ASSERT_NE(got.find("logits"), nullptr);
  EXPECT_EQ(got.find("logits")->shape, (std::vector<int64_t>{5, 64}));
  fs::remove(out);
}

TEST_F(Vulkan, CliTraceExplicitVulkan_NotEnoughMemory_OneLineError) {
  const std::string out = temp_path("cli_nomem.safetensors");
  const Cmd c = hybridlens("HL_VULKAN_MEMORY_LIMIT=1024", "trace --checkpoint " + golden_case("gqa_basic") +
                                                              " --ids 1,2 --backend vulkan --out " + out);
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.err.find("not enough device memory"), std::string::npos) << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Vulkan, CliBenchVulkanJson) {
  const Cmd c = hybridlens("", "bench --checkpoint " + golden_case("mixed_sharded") +
                                   " --backend vulkan --json --tokens 8 --rounds 1 --prefill 40");
  ASSERT_EQ(c.status, 0) << c.err;
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j.at("backend"), "vulkan");
  EXPECT_GT(j.at("decode_tok_s_on").get<double>(), 0.0);
  EXPECT_GT(j.at("decode_tok_s_off").get<double>(), 0.0);
  EXPECT_GT(j.at("prefill_tok_s").get<double>(), 0.0);
}

#endif  // HL_VULKAN_TESTS
