// The CUDA backend (issue 8) through the one device-backend test body (backend_suite.h: golden runs
// against the CPU backend, the reference files and the reference forward; instruments off, restarts,
// the context limit, a sticky device error, the command line, the non-finite flags), and its own
// checks: long prefills in blocks across a KV-cache growth with the chunked scan, graph and plain
// launches, the kernel count, not enough memory (`auto` → CPU) and the command line's fallbacks.
// Built only into hl_cuda_tests (label cuda, HL_CUDA_TESTS defined); the device tests skip where no
// CUDA device exists, the absence tests run there instead.
//
// Tolerances: as stated in backend_test_util.h, the same as the Vulkan tests (CUDA vs CPU: kVsCpu,
// stored weights widened exactly on both sides, fp32 sums in another order; vs the golden reference
// traces: kVsGolden; prefill vs decode: kPrefillVsDecode; graphs vs plain launches, restart vs first
// run: kBitForBit).
#ifdef HL_CUDA_TESTS
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <sstream>

#include "engine/backend/cuda/cuda_backend.h"
#include "tests/engine/backend_suite.h"

namespace fs = std::filesystem;
using namespace hl;
using namespace hl::backend_test;  // golden runs, run(), expect_traces_close(): shared with the Vulkan tests

namespace {

bool have_cuda() {
  return cuda_available();
}

// Keeps one CUDA backend (one context, cuBLAS loaded) alive across the suite.
const auto* const g_keep = ::testing::AddGlobalTestEnvironment(
    new KeepDevice(have_cuda, [](std::shared_ptr<const Model> m) { return make_cuda_backend(std::move(m)); }));

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

}  // namespace

// The whole-model body shared with the Vulkan backend (backend_suite.h), on CUDA.
INSTANTIATE_TEST_SUITE_P(Cuda, BackendGolden, ::testing::ValuesIn(golden_on("cuda")), golden_on_name);
INSTANTIATE_TEST_SUITE_P(Cuda, DeviceBackend,
                         ::testing::Values(DeviceBackendParam{"cuda", [] { cuda_simulate_failure(0); }}),
                         [](const auto&) { return std::string("cuda"); });

// Without a device (this machine, CI): the backend is built but refuses with a clear message, and
// `auto` takes the CPU.
TEST(CudaAbsent, NoDevice_NamedBackendFails_AutoTakesCpu) {
  if (have_cuda()) GTEST_SKIP() << "a CUDA device exists";
  auto model = load_model(golden_case("gqa_basic"));
  try {
    make_backend("cuda", model);
    FAIL() << "expected BackendFailure";
  } catch (const BackendFailure& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("device"), std::string::npos) << e.what();
  }
  std::string note;
  EXPECT_EQ(make_backend("auto", model, &note)->name(), "cpu");
  const std::vector<std::string> b = available_backends();
  EXPECT_EQ(std::find(b.begin(), b.end(), "cuda"), b.end());
  CudaStepInfo info;
  auto cpu = make_backend("cpu", model);
  EXPECT_FALSE(cuda_step_info(*cpu, &info));
  EXPECT_THROW(cuda_measure_device(), BackendFailure);
}

TEST(CudaAbsent, CliTraceExplicitCuda_OneLineError) {
  if (have_cuda()) GTEST_SKIP() << "a CUDA device exists";
  const std::string out = temp_path("cuda_absent.safetensors");
  const Cmd c =
      hybridlens("", "trace --checkpoint " + golden_case("gqa_basic") + " --ids 1,2 --backend cuda --out " + out);
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.err.find("cuda"), std::string::npos) << c.err;
  EXPECT_EQ(std::count(c.err.begin(), c.err.end(), '\n'), 1) << c.err;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(Cuda, AvailableBackendsListIt_AutoPicksIt) {
  const std::vector<std::string> b = available_backends();
  EXPECT_NE(std::find(b.begin(), b.end(), "cuda"), b.end());
  auto model = load_model(golden_case("gqa_basic"));
  std::string note;
  EXPECT_EQ(make_backend("auto", model, &note)->name(), "cuda") << note;
}

TEST_F(Cuda, GraphAndPlainLaunches_BitForBit_KernelCountReported) {
  auto model = load_model(golden_case("mixed_sharded"));
  const std::vector<int32_t> ids = random_ids(10, model->config.vocab_size, 5);
  RunOptions o;
  o.full = true;
  CudaOptions with, without;
  without.graphs = false;
  auto g = make_cuda_backend(model, with);
  auto p = make_cuda_backend(model, without);
  const std::vector<TokenTrace> a = run(*g, ids, o, false);
  const std::vector<TokenTrace> b = run(*p, ids, o, false);
  expect_traces_close(a, b, kBitForBit, "graph vs plain launches");
  CudaStepInfo gi, pi;
  ASSERT_TRUE(cuda_step_info(*g, &gi));
  ASSERT_TRUE(cuda_step_info(*p, &pi));
  EXPECT_TRUE(gi.graph);
  EXPECT_FALSE(pi.graph);
  EXPECT_GT(gi.kernels_per_token, model->config.num_hidden_layers);
  EXPECT_EQ(gi.kernels_per_token, pi.kernels_per_token);
}

TEST_F(Cuda, LongPrefillInBlocks_AcrossKvGrowth_ChunkedScan_MatchesCpu) {
  // 300 tokens with 2 registers pass the 258 rows reserved at start(); blocks of 70 tokens, scan
  // chunks of 16 (so each block takes the three-pass parallel scan), then decode on.
  for (const char* c : {"gqa_basic", "mixed_sharded", "mqa_tied_bias"}) {
    auto model = load_model(golden_case(c));
    CudaOptions co;
    co.max_block = 70;
    co.scan_chunk = 16;
    auto cu = make_cuda_backend(model, co);
    auto cpu = make_backend("cpu", model);
    const std::vector<int32_t> ids = random_ids(300, model->config.vocab_size, 11);
    RunOptions o;
    o.full = true;
    o.registers = 2;
    const std::vector<TokenTrace> ref = run(*cpu, ids, o, true);
    std::vector<TokenTrace> got = run(*cu, std::vector<int32_t>(ids.begin(), ids.end() - 2), o, true);
    cu->forward(&ids[298], 1, &got);
    cu->forward(&ids[299], 1, &got);
    EXPECT_EQ(cu->position(), 300);
    expect_traces_close(got, ref, kVsCpu, std::string(c) + ": cuda blocks vs cpu");
  }
}

TEST_F(Cuda, NotEnoughDeviceMemory_ClearBackendFailure_AutoTakesCpu) {
  auto model = load_model(golden_case("gqa_basic"));
  ScopedEnv limit("HL_CUDA_MEMORY_LIMIT", "4096");
  try {
    make_cuda_backend(model);
    FAIL() << "expected BackendFailure";
  } catch (const BackendFailure& e) {
    EXPECT_NE(std::string(e.what()).find("not enough device memory"), std::string::npos) << e.what();
  }
  std::string note;
  auto b = make_backend("auto", model, &note);
  EXPECT_NE(b->name(), "cuda");
  EXPECT_NE(note.find("not enough device memory"), std::string::npos) << note;
}

TEST_F(Cuda, CliTraceAuto_DeviceErrorMidRun_FallsBackToCpu) {
  const std::string out = temp_path("cli_cuda_auto.safetensors");
  const Cmd c = hybridlens("HL_CUDA_FAIL_AFTER=3", "trace --checkpoint " + golden_case("dense_no_moe") +
                                                       " --ids 3,4,5,6,7 --backend auto --out " + out);
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("falling back to the CPU"), std::string::npos) << c.err;
  SafetensorsFile got = SafetensorsFile::open(out);
  EXPECT_EQ(got.metadata().at("backend"), "cpu");
  fs::remove(out);
}

TEST_F(Cuda, CliBenchCudaJson_HasTheDeviceFigures) {
  const Cmd c = hybridlens("", "bench --checkpoint " + golden_case("mixed_sharded") +
                                   " --backend cuda --json --tokens 8 --rounds 1 --prefill 40");
  ASSERT_EQ(c.status, 0) << c.err;
  const nlohmann::json j = nlohmann::json::parse(c.out);
  EXPECT_EQ(j.at("backend"), "cuda");
  for (const char* k : {"decode_tok_s_on", "decode_tok_s_off", "prefill_tok_s", "device_bandwidth_gb_s",
                        "launch_us_graph", "kernels_per_token", "launch_floor_ms"})
    EXPECT_GT(j.at(k).get<double>(), 0.0) << k;
  EXPECT_TRUE(j.at("cuda_graph").get<bool>());
}

// tools/gpu-check.sh: the generated ~317M and ~3B checkpoints (HL_CUDA_CHECK_MODELS=dir[:dir]),
// HL_CUDA_CHECK_TOKENS tokens (default 16) through the CUDA backend by decode and by prefill, against
// the CPU backend's prefill (which agrees with its decode to 1e-5, trace-format.md §3), at the
// tolerances above. Prints the largest error of every field relative to its tolerance.
TEST_F(Cuda, GeneratedCheckpoints_MatchCpu) {
  const char* dirs = std::getenv("HL_CUDA_CHECK_MODELS");
  if (!dirs || !*dirs) GTEST_SKIP() << "set HL_CUDA_CHECK_MODELS=dir[:dir] (tools/gpu-check.sh does)";
  const char* nt = std::getenv("HL_CUDA_CHECK_TOKENS");
  const int64_t n = nt ? std::max(2, std::atoi(nt)) : 16;
  std::stringstream list(dirs);
  std::string dir;
  while (std::getline(list, dir, ':')) {
    if (dir.empty()) continue;
    auto model = load_model(dir);
    const std::vector<int32_t> ids = random_ids(n, model->config.vocab_size, 42);
    RunOptions o;
    o.full = true;
    const auto t0 = std::chrono::steady_clock::now();
    auto cpu = make_backend("cpu", model);
    const std::vector<TokenTrace> ref = run(*cpu, ids, o, true);
    const double cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto cu = make_backend("cuda", model);
    const std::vector<TokenTrace> dec = run(*cu, ids, o, false);
    const std::vector<TokenTrace> pre = run(*cu, ids, o, true);
    // The worst |Δ| / (kVsCpu bound) per field, for the record.
    std::printf("[ cuda-vs-cpu ] %s: %lld tokens (cpu prefill %.1f s)\n", model->name.c_str(),
                static_cast<long long>(n), cpu_s);
    for (const auto& [name, field] : float_fields()) {
      double scale = 1.0, worst_d = 0, worst_p = 0;
      for (const TokenTrace& r : ref)
        for (float v : r.*field) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      for (size_t t = 0; t < ref.size() && t < dec.size() && t < pre.size(); ++t) {
        const std::vector<float>& b = ref[t].*field;
        const std::vector<float>& d = dec[t].*field;
        const std::vector<float>& p = pre[t].*field;
        for (size_t i = 0; i < b.size() && i < d.size() && i < p.size(); ++i) {
          const double tol = kVsCpu.rel * std::fabs(b[i]) + kVsCpu.abs * scale;
          worst_d = std::max(worst_d, std::fabs(d[i] - b[i]) / tol);
          worst_p = std::max(worst_p, std::fabs(p[i] - b[i]) / tol);
        }
      }
      std::printf("[ cuda-vs-cpu ]   %-18s worst |diff|/tol: decode %.3f, prefill %.3f\n", name, worst_d, worst_p);
    }
    expect_traces_close(dec, ref, kVsCpu, model->name + ": cuda decode vs cpu");
    expect_traces_close(pre, ref, kVsCpu, model->name + ": cuda prefill vs cpu");
  }
}

#endif  // HL_CUDA_TESTS
