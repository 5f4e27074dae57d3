// Helpers of the device backend tests (Vulkan: test_vulkan*.cpp, CUDA: test_cuda.cpp): the golden
// runs and running a backend on tokens (golden_util.h), the field-by-field comparison of two record
// sequences within a stated tolerance, and the checks both device backends pass the same way
// against the CPU reference backend, the golden reference traces and the command line.
//
// Tolerances (float tensors; integers exactly; scale = max(1, max |reference| over the tensor)):
//   device vs CPU, stored weights kept as they are (F32, F16, BF16 widened exactly on both sides,
//   so only the fp32 summation order and exp/log differ):   kVsCpu:           |Δ| ≤ 1e-5·|ref| + 2e-6·scale
//   device vs the golden reference traces (the golden suite's own bound):
//                                                            kVsGolden:        |Δ| ≤ 1e-4·|ref| + 1e-5·scale
//   device prefill vs device decode (trace-format.md §3):    kPrefillVsDecode: |Δ| ≤ 1e-5·scale
//   restarts, graphs vs plain launches:                      kBitForBit
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "engine/trace/trace_file.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/trace_compare_util.h"

namespace hl::backend_test {

namespace fs = std::filesystem;

using golden_test::golden_runs;
using golden_test::GoldenRun;

// golden_test::run_tokens under the short name the backend tests use.
inline std::vector<TokenTrace> run(Backend& b, const std::vector<int32_t>& ids, const RunOptions& opts, bool prefill) {
  return golden_test::run_tokens(b, ids, opts, prefill);
}

inline std::string golden_case(const std::string& leaf) {
  return std::string(HL_GOLDEN_DIR) + "/" + leaf;
}

inline std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = pick(rng);
  return ids;
}

inline std::string temp_path(const std::string& leaf) {
  return (fs::temp_directory_path() / ("hl_backend_" + std::to_string(getpid()) + "_" + leaf)).string();
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
inline Cmd hybridlens(const std::string& env, const std::string& args) {
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

// Keeps one backend (one device context, its compiled kernels) alive across a test suite, where
// `have()` says a device exists: register with ::testing::AddGlobalTestEnvironment.
class KeepDevice : public ::testing::Environment {
 public:
  using Make = std::function<std::unique_ptr<Backend>(std::shared_ptr<const Model>)>;
  KeepDevice(std::function<bool()> have, Make make) : have_(std::move(have)), make_(std::move(make)) {}
  void SetUp() override {
    if (!have_()) return;
    for (const GoldenRun& g : golden_runs()) {  // the first checkpoint the device runs (not every kind has its units)
      try {
        keep_ = make_(load_model(g.case_dir));
        return;
      } catch (const BackendFailure&) {
      }
    }
  }
  void TearDown() override { keep_.reset(); }

 private:
  std::function<bool()> have_;
  Make make_;
  std::unique_ptr<Backend> keep_;
};

// The name of a golden-run test instance: <case>_<run>, other characters as '_'.
inline std::string golden_run_name(const ::testing::TestParamInfo<GoldenRun>& info) {
  std::string n = fs::path(info.param.case_dir).filename().string() + "_" + info.param.name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// Golden run `g` by decode steps on the backend named `backend` against the CPU backend.
inline void expect_decode_matches_cpu(const GoldenRun& g, const std::string& backend) {
  auto model = load_model(g.case_dir);
  auto cpu = make_backend("cpu", model);
  auto dev = make_backend(backend, model);
  EXPECT_EQ(dev->name(), backend);
  const std::vector<TokenTrace> ref = run(*cpu, g.ids, g.opts, false);
  const std::vector<TokenTrace> got = run(*dev, g.ids, g.opts, false);
  EXPECT_EQ(dev->registers(), cpu->registers());
  expect_traces_close(got, ref, kVsCpu, backend + " decode vs cpu");
}

// Golden run `g` as one prefill against the CPU backend and the backend's own decode steps.
inline void expect_prefill_matches_cpu_and_decode(const GoldenRun& g, const std::string& backend) {
  auto model = load_model(g.case_dir);
  auto cpu = make_backend("cpu", model);
  auto dev = make_backend(backend, model);
  const std::vector<TokenTrace> ref = run(*cpu, g.ids, g.opts, false);
  const std::vector<TokenTrace> pre = run(*dev, g.ids, g.opts, true);
  expect_traces_close(pre, ref, kVsCpu, backend + " prefill vs cpu");
  const std::vector<TokenTrace> step = run(*dev, g.ids, g.opts, false);
  expect_traces_close(pre, step, kPrefillVsDecode, backend + " prefill vs " + backend + " decode");
}

// Every tensor of the trace file the backend named `backend` writes for golden run `g` against
// the reference file: integers exactly, floats within kVsGolden.
inline void expect_trace_matches_reference_file(const GoldenRun& g, const std::string& backend) {
  auto model = load_model(g.case_dir);
  auto dev = make_backend(backend, model);
  const std::vector<TokenTrace> recs = run(*dev, g.ids, g.opts, false);
  const std::string path =
      temp_path(backend + "_" + fs::path(g.case_dir).filename().string() + "_" + g.name + ".safetensors");
  write_trace(path, *model, dev->registers(), recs, TraceMeta{});
  expect_trace_file_close(path, g.case_dir + "/expected/" + g.name + ".safetensors", kVsGolden, backend + " trace");
  fs::remove(path);
}

// `hybridlens trace --backend <backend> --full` on gqa_basic's as_trained run: the file names the
// backend and every tensor is within kVsGolden of the reference file.
inline void expect_cli_trace_matches_reference_file(const std::string& backend) {
  const std::string out = temp_path("cli_" + backend + ".safetensors");
  const std::vector<GoldenRun> runs = golden_runs();
  const GoldenRun* g = nullptr;
  for (const GoldenRun& r : runs)
    if (fs::path(r.case_dir).filename() == "gqa_basic" && r.name == "as_trained") g = &r;
  ASSERT_NE(g, nullptr);
  std::string list;
  for (int32_t id : g->ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  const Cmd c = hybridlens(
      "", "trace --checkpoint " + g->case_dir + " --ids " + list + " --backend " + backend + " --full --out " + out);
  ASSERT_EQ(c.status, 0) << c.err;
  SafetensorsFile got = SafetensorsFile::open(out);
  EXPECT_EQ(got.metadata().at("backend"), backend);
  expect_trace_file_close(out, g->case_dir + "/expected/as_trained.safetensors", kVsGolden, backend + " CLI trace");
  fs::remove(out);
}

// Instruments off: the same logits, no instruments, no non-finite layer.
inline void expect_instruments_off_same_logits(const std::string& backend) {
  auto model = load_model(golden_case("extensions"));
  auto dev = make_backend(backend, model);
  const std::vector<int32_t> ids = random_ids(9, model->config.vocab_size, 7);
  RunOptions on, off;
  off.instruments = false;
  const std::vector<TokenTrace> a = run(*dev, ids, on, false);
  const std::vector<TokenTrace> b = run(*dev, ids, off, false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    EXPECT_EQ(a[t].logits, b[t].logits) << "token " << t;
    EXPECT_TRUE(b[t].attn_entropy.empty() && b[t].rank1_distance.empty() && b[t].router_probs.empty());
    EXPECT_EQ(b[t].nonfinite_layer, -1);
  }
}

// A restart reproduces a run bit for bit, with another run in between.
inline void expect_restart_bit_for_bit(const std::string& backend) {
  auto model = load_model(golden_case("mqa_tied_bias"));
  auto dev = make_backend(backend, model);
  const std::vector<int32_t> ids = random_ids(6, model->config.vocab_size, 3);
  RunOptions o;
  o.full = true;
  o.registers = 2;
  const std::vector<TokenTrace> a = run(*dev, ids, o, false);
  run(*dev, random_ids(5, model->config.vocab_size, 4), RunOptions{}, true);  // something else in between
  const std::vector<TokenTrace> b = run(*dev, ids, o, false);
  expect_traces_close(b, a, kBitForBit, "second run");
}

// RunOptions::max_context refuses before any state changes, as the CPU backend does; a plain Error
// is not a BackendFailure, so the backend stays usable.
inline void expect_max_context_refused_before_state_change(const std::string& backend) {
  auto model = load_model(golden_case("dense_no_moe"));
  auto dev = make_backend(backend, model);
  RunOptions o;
  o.max_context = 3;
  dev->start(o);
  std::vector<TokenTrace> recs;
  const int32_t ids[4] = {1, 2, 3, 4};
  EXPECT_THROW(dev->forward(ids, 4, &recs), Error);
  EXPECT_EQ(dev->position(), 0);
  EXPECT_TRUE(recs.empty());
  dev->forward(ids, 3, &recs);
  EXPECT_THROW(dev->forward(ids, 1, &recs), Error);
  EXPECT_EQ(recs.size(), 3u);
  dev->start(o);
  EXPECT_NO_THROW(dev->forward(ids, 2, &recs));
}

// A device failure after three decode steps (`fail_next()` arms it): BackendFailure, the caller's
// records intact, the failure sticky; the caller rebuilds the run on the CPU from its tokens, and a
// new backend works again.
inline void expect_failure_keeps_records_cpu_takes_over(const std::string& backend,
                                                        const std::function<void()>& fail_next) {
  auto model = load_model(golden_case("extensions"));
  const std::vector<int32_t> ids = random_ids(6, model->config.vocab_size, 9);
  auto dev = make_backend(backend, model);
  dev->start(RunOptions{});
  std::vector<TokenTrace> recs;
  for (int i = 0; i < 3; ++i) dev->forward(&ids[i], 1, &recs);
  fail_next();
  EXPECT_THROW(dev->forward(&ids[3], 1, &recs), BackendFailure);
  EXPECT_EQ(recs.size(), 3u) << "a failed step must leave the caller's records as they were";
  EXPECT_THROW(dev->forward(&ids[3], 1, &recs), BackendFailure) << "the failure is sticky";
  EXPECT_THROW(dev->start(RunOptions{}), BackendFailure);
  auto cpu = make_backend("cpu", model);
  std::vector<TokenTrace> redo = run(*cpu, std::vector<int32_t>(ids.begin(), ids.begin() + 3), RunOptions{}, false);
  expect_traces_close(recs, redo, kVsCpu, backend + " records before the failure vs cpu");
  for (int i = 3; i < 6; ++i) cpu->forward(&ids[i], 1, &redo);
  EXPECT_EQ(redo.size(), 6u);
  auto again = make_backend(backend, model);
  std::vector<TokenTrace> fresh = run(*again, ids, RunOptions{}, false);
  expect_traces_close(fresh, redo, kVsCpu, "new " + backend + " backend vs cpu");
}

}  // namespace hl::backend_test
