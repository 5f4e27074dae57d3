// The Vulkan backend beyond the golden runs (issue 7): instruments off, restarts, long prefills in
// blocks across a KV-cache growth, both prefill kernels, F32 stored as F16, the failure paths (not
// enough memory, lost device: BackendFailure, records intact, `auto` → CPU) and the command line.
// Built only into hl_vulkan_tests (HL_VULKAN_TESTS); tolerances as stated in test_vulkan.cpp.
#ifdef HL_VULKAN_TESTS
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <random>
#include <sstream>

#include "tests/engine/vulkan_test_util.h"

namespace fs = std::filesystem;
using namespace hl;
using namespace hl::vktest;

namespace {

std::string golden(const std::string& leaf) {
  return std::string(HL_GOLDEN_DIR) + "/" + leaf;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = pick(rng);
  return ids;
}

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const std::string& n, const std::string& v) : name(n) { ::setenv(n.c_str(), v.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

struct Cmd {
  int status = -1;
  std::string out, err;
};

// Runs `hybridlens args` with extra environment assignments; captures stdout and stderr.
Cmd hybridlens(const std::string& env, const std::string& args) {
  const std::string err = temp_path("stderr.txt");
  const std::string line = "env " + env + " " + HL_HYBRIDLENS + " " + args + " 2>" + err;
  Cmd c;
  if (FILE* p = ::popen(line.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) c.out.append(buf, n);
    const int st = ::pclose(p);
    c.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  std::ifstream in(err);
  std::stringstream ss;
  ss << in.rdbuf();
  c.err = ss.str();
  fs::remove(err);
  return c;
}

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
  auto model = load_model(golden("gqa_basic"));
  std::string note;
  auto a = make_backend("auto", model, &note);
  if (!vulkan_available(true)) EXPECT_EQ(a->name(), "cpu") << "auto must not take lavapipe or another CPU device";
}

TEST_F(Vulkan, InstrumentsOff_SameLogitsAndNoInstruments) {
  auto model = load_model(golden("extensions"));
  auto vk = make_backend("vulkan", model);
  const std::vector<int32_t> ids = random_ids(9, model->config.vocab_size, 7);
  RunOptions on, off;
  off.instruments = false;
  const std::vector<TokenTrace> a = run(*vk, ids, on, false);
  const std::vector<TokenTrace> b = run(*vk, ids, off, false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    EXPECT_EQ(a[t].logits, b[t].logits) << "token " << t;
    EXPECT_TRUE(b[t].attn_entropy.empty() && b[t].rank1_distance.empty() && b[t].router_probs.empty());
    EXPECT_EQ(b[t].nonfinite_layer, -1);
  }
}

TEST_F(Vulkan, Restart_ReproducesTheRunBitForBit) {
  auto model = load_model(golden("mqa_tied_bias"));
  auto vk = make_backend("vulkan", model);
  const std::vector<int32_t> ids = random_ids(6, model->config.vocab_size, 3);
  RunOptions o;
  o.full = true;
  o.registers = 2;
  const std::vector<TokenTrace> a = run(*vk, ids, o, false);
  run(*vk, random_ids(5, model->config.vocab_size, 4), RunOptions{}, true);  // something else in between
  const std::vector<TokenTrace> b = run(*vk, ids, o, false);
  expect_traces_close(b, a, 0.0, 0.0, "second run");
}

TEST_F(Vulkan, LongPrefillInBlocks_AcrossKvGrowth_MatchesCpu) {
  // 300 tokens with 2 registers pass the 258 rows reserved at start(); blocks of 7 tokens.
  auto model = load_model(golden("gqa_basic"));
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
  expect_traces_close(got, ref, 1e-5, 2e-6, "vulkan blocks vs cpu");
}

TEST_F(Vulkan, BothPrefillProductKernels_MatchCpu) {
  // The device picks one of the two prefill kernels (tiled on GPUs, barrier-free rows on CPU
  // devices); both are checked here on every MoE layout: per-expert and fused experts, mixed dtypes.
  for (const char* c : {"gqa_basic", "mixed_sharded", "mqa_tied_bias"}) {
    auto model = load_model(golden(c));
    auto cpu = make_backend("cpu", model);
    const std::vector<int32_t> ids = random_ids(37, model->config.vocab_size, 21);  // > 2 tiles of 16 tokens
    RunOptions o;
    o.full = true;
    const std::vector<TokenTrace> ref = run(*cpu, ids, o, false);
    for (VulkanOptions::Matmul m : {VulkanOptions::Matmul::Tiled, VulkanOptions::Matmul::Rows}) {
      VulkanOptions vo;
      vo.matmul = m;
      auto vk = make_vulkan_backend(model, vo);
      expect_traces_close(run(*vk, ids, o, true), ref, 1e-5, 2e-6,
                          std::string(c) + (m == VulkanOptions::Matmul::Tiled ? " tiled" : " rows"));
    }
  }
}

TEST_F(Vulkan, F32StoredAsF16_LogitsWithinHalfPrecision) {
  auto model = load_model(golden("gqa_basic"));
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

TEST_F(Vulkan, MaxContext_RefusedBeforeAnyStateChange_AsTheCpu) {
  auto model = load_model(golden("dense_no_moe"));
  auto vk = make_backend("vulkan", model);
  RunOptions o;
  o.max_context = 3;
  vk->start(o);
  std::vector<TokenTrace> recs;
  const int32_t ids[4] = {1, 2, 3, 4};
  EXPECT_THROW(vk->forward(ids, 4, &recs), Error);
  EXPECT_EQ(vk->position(), 0);
  EXPECT_TRUE(recs.empty());
  vk->forward(ids, 3, &recs);
  EXPECT_THROW(vk->forward(ids, 1, &recs), Error);
  EXPECT_EQ(recs.size(), 3u);
  vk->start(o);  // still usable: a plain Error is not a BackendFailure
  EXPECT_NO_THROW(vk->forward(ids, 2, &recs));
}

TEST_F(Vulkan, NotEnoughDeviceMemory_ClearBackendFailure) {
  auto model = load_model(golden("gqa_basic"));
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

TEST_F(Vulkan, LostDevice_BackendFailure_RecordsIntact_CpuTakesOver) {
  auto model = load_model(golden("extensions"));
  const std::vector<int32_t> ids = random_ids(6, model->config.vocab_size, 9);
  auto vk = make_backend("vulkan", model);
  vk->start(RunOptions{});
  std::vector<TokenTrace> recs;
  for (int i = 0; i < 3; ++i) vk->forward(&ids[i], 1, &recs);
  vulkan_simulate_device_loss(0);
  EXPECT_THROW(vk->forward(&ids[3], 1, &recs), BackendFailure);
  EXPECT_EQ(recs.size(), 3u) << "a failed step must leave the caller's records as they were";
  EXPECT_THROW(vk->forward(&ids[3], 1, &recs), BackendFailure) << "the failure is sticky";
  EXPECT_THROW(vk->start(RunOptions{}), BackendFailure);
  // The caller rebuilds the run on the CPU from the tokens it has: the same session continues.
  auto cpu = make_backend("cpu", model);
  std::vector<TokenTrace> redo = run(*cpu, std::vector<int32_t>(ids.begin(), ids.begin() + 3), RunOptions{}, false);
  expect_traces_close(recs, redo, 1e-5, 2e-6, "vulkan records before the loss vs cpu");
  for (int i = 3; i < 6; ++i) cpu->forward(&ids[i], 1, &redo);
  EXPECT_EQ(redo.size(), 6u);
  // A new Vulkan backend gets a new device.
  auto again = make_backend("vulkan", model);
  std::vector<TokenTrace> fresh = run(*again, ids, RunOptions{}, false);
  expect_traces_close(fresh, redo, 1e-5, 2e-6, "new vulkan device vs cpu");
}

TEST_F(Vulkan, CliTraceVulkan_MatchesReferenceFile) {
  const std::string out = temp_path("cli_vk.safetensors");
  const std::vector<VkRun> runs = golden_runs();
  const VkRun* g = nullptr;
  for (const VkRun& r : runs)
    if (fs::path(r.case_dir).filename() == "gqa_basic" && r.name == "as_trained") g = &r;
  ASSERT_NE(g, nullptr);
  std::string list;
  for (int32_t id : g->ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const Cmd c =
      hybridlens("", "trace --checkpoint " + g->case_dir + " --ids " + list + " --backend vulkan --full --out " + out);
  ASSERT_EQ(c.status, 0) << c.err;
  SafetensorsFile got = SafetensorsFile::open(out);
  EXPECT_EQ(got.metadata().at("backend"), "vulkan");
  SafetensorsFile want = SafetensorsFile::open(g->case_dir + "/expected/as_trained.safetensors");
  for (const TensorInfo& wt : want.tensors()) {
    const TensorInfo* gt = got.find(wt.name);
    ASSERT_NE(gt, nullptr) << wt.name;
    const std::vector<double> a = as_doubles(*gt), b = as_doubles(wt);
    ASSERT_EQ(a.size(), b.size()) << wt.name;
    double scale = 1;
    for (double v : b) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-4 * std::fabs(b[i]) + 1e-5 * scale) << wt.name << " at flat index " << i;
  }
  fs::remove(out);
}

TEST_F(Vulkan, CliTraceAuto_DeviceLostMidRun_FallsBackToCpu) {
  const std::string out = temp_path("cli_auto.safetensors");
  const Cmd c =
      hybridlens("HL_VULKAN_ALLOW_CPU_DEVICE=1 HL_VULKAN_FAIL_AFTER=3",
                 "trace --checkpoint " + golden("dense_no_moe") + " --ids 3,4,5,6,7 --backend auto --out " + out);
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
  const Cmd c = hybridlens("HL_VULKAN_MEMORY_LIMIT=1024",
                           "trace --checkpoint " + golden("gqa_basic") + " --ids 1,2 --backend vulkan --out " + out);
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.err.find("not enough device memory"), std::string::npos) << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Vulkan, CliBenchVulkanJson) {
  const Cmd c = hybridlens("", "bench --checkpoint " + golden("mixed_sharded") +
                                   " --backend vulkan --json --tokens 8 --rounds 1 --prefill 40");
  ASSERT_EQ(c.status, 0) << c.err;
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j.at("backend"), "vulkan");
  EXPECT_GT(j.at("decode_tok_s_on").get<double>(), 0.0);
  EXPECT_GT(j.at("decode_tok_s_off").get<double>(), 0.0);
  EXPECT_GT(j.at("prefill_tok_s").get<double>(), 0.0);
}

#endif  // HL_VULKAN_TESTS
