// The CUDA backend (issue 8) against the CPU reference backend and the golden reference traces on
// every golden checkpoint and run (decode, prefill, the normalizers, registers), and beyond them:
// instruments off, restarts, long prefills in blocks across a KV-cache growth with the chunked
// scan, graph and plain launches, the kernel count, the failure paths (not enough memory, a sticky
// device error: BackendFailure, records intact, `auto` → CPU) and the command line. Built only into
// hl_cuda_tests (label cuda, HL_CUDA_TESTS defined); the device tests skip where no CUDA device
// exists, the absence tests run there instead.
//
// Tolerances (float tensors; integers exactly; scale = max(1, max |reference| over the tensor), as
// the Vulkan tests):
//   CUDA vs CPU (stored weights widened exactly on both sides; fp32 sums in another order):
//                                                          |Δ| ≤ 1e-5·|ref| + 2e-6·scale
//   CUDA vs the golden reference traces:                   |Δ| ≤ 1e-4·|ref| + 1e-5·scale
//   CUDA prefill vs CUDA decode (trace-format.md §3):      |Δ| ≤ 1e-5·scale
//   graphs vs plain launches, restart vs first run:        bit for bit
#ifdef HL_CUDA_TESTS
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/trace/trace_file.h"
#include "tests/engine/vulkan_test_util.h"

namespace fs = std::filesystem;
using namespace hl;
using namespace hl::vktest;  // golden runs, run(), expect_traces_close(): shared with the Vulkan tests

namespace {

std::string golden_case(const std::string& leaf) {
  return std::string(HL_GOLDEN_DIR) + "/" + leaf;
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = pick(rng);
  return ids;
}

struct ScopedEnv {
  std::string name;
  ScopedEnv(const std::string& n, const std::string& v) : name(n) { ::setenv(n.c_str(), v.c_str(), 1); }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

struct Cmd {
  int status = -1;
  std::string out, err;
};

Cmd hybridlens(const std::string& env, const std::string& args) {
  const std::string err = temp_path("cuda_stderr.txt");
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

bool have_cuda() {
  return cuda_available();
}

// Keeps one CUDA backend (one context, cuBLAS loaded) alive across the suite.
class KeepDevice : public ::testing::Environment {
 public:
  void SetUp() override {
    if (!have_cuda()) return;
    const std::vector<VkRun> runs = golden_runs();
    if (!runs.empty()) keep_ = make_cuda_backend(load_model(runs[0].case_dir));
  }
  void TearDown() override { keep_.reset(); }

 private:
  std::unique_ptr<Backend> keep_;
};
const auto* const g_keep = ::testing::AddGlobalTestEnvironment(new KeepDevice);

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

}  // namespace

class CudaGolden : public ::testing::TestWithParam<VkRun> {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  }
};

TEST_P(CudaGolden, DecodeMatchesCpuBackend) {
  const VkRun& g = GetParam();
  auto model = load_model(g.case_dir);
  auto cpu = make_backend("cpu", model);
  auto cu = make_backend("cuda", model);
  EXPECT_EQ(cu->name(), "cuda");
  const std::vector<TokenTrace> ref = run(*cpu, g.ids, g.opts, false);
  const std::vector<TokenTrace> got = run(*cu, g.ids, g.opts, false);
  EXPECT_EQ(cu->registers(), cpu->registers());
  expect_traces_close(got, ref, 1e-5, 2e-6, "cuda decode vs cpu");
}

TEST_P(CudaGolden, PrefillMatchesCpuAndDecode) {
  const VkRun& g = GetParam();
  auto model = load_model(g.case_dir);
  auto cpu = make_backend("cpu", model);
  auto cu = make_backend("cuda", model);
  const std::vector<TokenTrace> ref = run(*cpu, g.ids, g.opts, false);
  const std::vector<TokenTrace> pre = run(*cu, g.ids, g.opts, true);
  expect_traces_close(pre, ref, 1e-5, 2e-6, "cuda prefill vs cpu");
  const std::vector<TokenTrace> step = run(*cu, g.ids, g.opts, false);
  expect_traces_close(pre, step, 0.0, 1e-5, "cuda prefill vs cuda decode");
}

TEST_P(CudaGolden, TraceMatchesReferenceFile) {
  const VkRun& g = GetParam();
  auto model = load_model(g.case_dir);
  auto cu = make_backend("cuda", model);
  const std::vector<TokenTrace> recs = run(*cu, g.ids, g.opts, false);
  const std::string path =
      temp_path("cuda_" + fs::path(g.case_dir).filename().string() + "_" + g.name + ".safetensors");
  write_trace(path, *model, cu->registers(), recs, TraceMeta{});
  SafetensorsFile got = SafetensorsFile::open(path);
  SafetensorsFile want = SafetensorsFile::open(g.case_dir + "/expected/" + g.name + ".safetensors");
  ASSERT_FALSE(want.tensors().empty());
  for (const TensorInfo& wt : want.tensors()) {
    const TensorInfo* gt = got.find(wt.name);
    ASSERT_NE(gt, nullptr) << "cuda trace lacks '" << wt.name << "'";
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

INSTANTIATE_TEST_SUITE_P(Golden, CudaGolden, ::testing::ValuesIn(golden_runs()),
                         [](const ::testing::TestParamInfo<VkRun>& info) {
                           std::string n = fs::path(info.param.case_dir).filename().string() + "_" + info.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

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

TEST_F(Cuda, InstrumentsOff_SameLogitsAndNoInstruments) {
  auto model = load_model(golden_case("extensions"));
  auto cu = make_backend("cuda", model);
  const std::vector<int32_t> ids = random_ids(9, model->config.vocab_size, 7);
  RunOptions on, off;
  off.instruments = false;
  const std::vector<TokenTrace> a = run(*cu, ids, on, false);
  const std::vector<TokenTrace> b = run(*cu, ids, off, false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    EXPECT_EQ(a[t].logits, b[t].logits) << "token " << t;
    EXPECT_TRUE(b[t].attn_entropy.empty() && b[t].rank1_distance.empty() && b[t].router_probs.empty());
    EXPECT_EQ(b[t].nonfinite_layer, -1);
  }
}

TEST_F(Cuda, Restart_ReproducesTheRunBitForBit) {
  auto model = load_model(golden_case("mqa_tied_bias"));
  auto cu = make_backend("cuda", model);
  const std::vector<int32_t> ids = random_ids(6, model->config.vocab_size, 3);
  RunOptions o;
  o.full = true;
  o.registers = 2;
  const std::vector<TokenTrace> a = run(*cu, ids, o, false);
  run(*cu, random_ids(5, model->config.vocab_size, 4), RunOptions{}, true);
  const std::vector<TokenTrace> b = run(*cu, ids, o, false);
  expect_traces_close(b, a, 0.0, 0.0, "second run");
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
  expect_traces_close(a, b, 0.0, 0.0, "graph vs plain launches");
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
    expect_traces_close(got, ref, 1e-5, 2e-6, std::string(c) + ": cuda blocks vs cpu");
  }
}

TEST_F(Cuda, MaxContext_RefusedBeforeAnyStateChange_AsTheCpu) {
  auto model = load_model(golden_case("dense_no_moe"));
  auto cu = make_backend("cuda", model);
  RunOptions o;
  o.max_context = 3;
  cu->start(o);
  std::vector<TokenTrace> recs;
  const int32_t ids[4] = {1, 2, 3, 4};
  EXPECT_THROW(cu->forward(ids, 4, &recs), Error);
  EXPECT_EQ(cu->position(), 0);
  EXPECT_TRUE(recs.empty());
  cu->forward(ids, 3, &recs);
  EXPECT_THROW(cu->forward(ids, 1, &recs), Error);
  EXPECT_EQ(recs.size(), 3u);
  cu->start(o);
  EXPECT_NO_THROW(cu->forward(ids, 2, &recs));
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

TEST_F(Cuda, StickyFailure_BackendFailure_RecordsIntact_CpuTakesOver) {
  auto model = load_model(golden_case("extensions"));
  const std::vector<int32_t> ids = random_ids(6, model->config.vocab_size, 9);
  auto cu = make_backend("cuda", model);
  cu->start(RunOptions{});
  std::vector<TokenTrace> recs;
  for (int i = 0; i < 3; ++i) cu->forward(&ids[i], 1, &recs);
  cuda_simulate_failure(0);
  EXPECT_THROW(cu->forward(&ids[3], 1, &recs), BackendFailure);
  EXPECT_EQ(recs.size(), 3u) << "a failed step must leave the caller's records as they were";
  EXPECT_THROW(cu->forward(&ids[3], 1, &recs), BackendFailure) << "the failure is sticky";
  EXPECT_THROW(cu->start(RunOptions{}), BackendFailure);
  auto cpu = make_backend("cpu", model);
  std::vector<TokenTrace> redo = run(*cpu, std::vector<int32_t>(ids.begin(), ids.begin() + 3), RunOptions{}, false);
  expect_traces_close(recs, redo, 1e-5, 2e-6, "cuda records before the failure vs cpu");
  for (int i = 3; i < 6; ++i) cpu->forward(&ids[i], 1, &redo);
  EXPECT_EQ(redo.size(), 6u);
  auto again = make_backend("cuda", model);  // a new backend works again
  expect_traces_close(run(*again, ids, RunOptions{}, false), redo, 1e-5, 2e-6, "new cuda backend vs cpu");
}

TEST_F(Cuda, CliTraceCuda_MatchesReferenceFile) {
  const std::string out = temp_path("cli_cuda.safetensors");
  const std::vector<VkRun> runs = golden_runs();
  const VkRun* g = nullptr;
  for (const VkRun& r : runs)
    if (fs::path(r.case_dir).filename() == "gqa_basic" && r.name == "as_trained") g = &r;
  ASSERT_NE(g, nullptr);
  std::string list;
  for (int32_t id : g->ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const Cmd c =
      hybridlens("", "trace --checkpoint " + g->case_dir + " --ids " + list + " --backend cuda --full --out " + out);
  ASSERT_EQ(c.status, 0) << c.err;
  SafetensorsFile got = SafetensorsFile::open(out);
  EXPECT_EQ(got.metadata().at("backend"), "cuda");
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
    // The worst |Δ| / (1e-5·|ref| + 2e-6·scale) per field, for the record.
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
          const double tol = 1e-5 * std::fabs(b[i]) + 2e-6 * scale;
          worst_d = std::max(worst_d, std::fabs(d[i] - b[i]) / tol);
          worst_p = std::max(worst_p, std::fabs(p[i] - b[i]) / tol);
        }
      }
      std::printf("[ cuda-vs-cpu ]   %-18s worst |diff|/tol: decode %.3f, prefill %.3f\n", name, worst_d, worst_p);
    }
    expect_traces_close(dec, ref, 1e-5, 2e-6, model->name + ": cuda decode vs cpu");
    expect_traces_close(pre, ref, 1e-5, 2e-6, model->name + ": cuda prefill vs cpu");
  }
}

#endif  // HL_CUDA_TESTS
