// One whole-model test body for every device backend (issue 14 item 6), instantiated per backend by
// its own test binary (test_vulkan.cpp: Vulkan, test_cuda.cpp: CUDA), each instance skipping where
// that backend is not available here. Per golden run: decode and prefill against the CPU backend,
// prefill against the backend's own decode, the trace file against the golden reference file, and
// decode against the plain-loop reference forward (engine/reference). Per backend: instruments off,
// restart bit for bit, the context limit, a device failure handed to the CPU, the command line, the
// non-finite flags of the final norm and the LM head, and weights in ggml's block formats
// (block_weights_test_util.h). Tolerances: backend_test_util.h.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "engine/reference/ref_model.h"
#include "tests/engine/backend_test_util.h"
#include "tests/engine/block_weights_test_util.h"
#include "tests/engine/nonfinite_test_util.h"

namespace hl::backend_test {

inline bool backend_here(const std::string& name) {
  const std::vector<std::string> b = available_backends();
  return std::find(b.begin(), b.end(), name) != b.end();
}

struct GoldenOnBackend {
  std::string backend;
  GoldenRun run;
};
inline void PrintTo(const GoldenOnBackend& p, std::ostream* os) {
  *os << p.backend << ": " << p.run.case_dir << " run " << p.run.name;
}
inline std::vector<GoldenOnBackend> golden_on(const std::string& backend) {
  std::vector<GoldenOnBackend> v;
  for (const GoldenRun& g : golden_runs()) v.push_back({backend, g});
  return v;
}
inline std::string golden_on_name(const ::testing::TestParamInfo<GoldenOnBackend>& info) {
  return golden_run_name(::testing::TestParamInfo<GoldenRun>(info.param.run, info.index));
}

class BackendGolden : public ::testing::TestWithParam<GoldenOnBackend> {
 protected:
  void SetUp() override {
    if (!backend_here(GetParam().backend)) GTEST_SKIP() << "no " << GetParam().backend << " device";
    const std::string lacks = golden_test::backend_lacks(GetParam().backend, GetParam().run.case_dir);
    if (!lacks.empty()) GTEST_SKIP() << lacks;
  }
};

TEST_P(BackendGolden, DecodeMatchesCpuBackend) {
  expect_decode_matches_cpu(GetParam().run, GetParam().backend);
}

TEST_P(BackendGolden, PrefillMatchesCpuAndDecode) {
  expect_prefill_matches_cpu_and_decode(GetParam().run, GetParam().backend);
}

TEST_P(BackendGolden, TraceMatchesReferenceFile) {
  expect_trace_matches_reference_file(GetParam().run, GetParam().backend);
}

// The reference forward sums in fp64 like the golden files' NumPy reference: kVsGolden.
TEST_P(BackendGolden, DecodeMatchesTheReferenceForward) {
  const GoldenRun& g = GetParam().run;
  auto model = load_model(g.case_dir);
  auto dev = make_backend(GetParam().backend, model);
  ref::ReferenceModel r(model);
  const std::vector<TokenTrace> want = r.run(g.ids, g.opts);
  const std::vector<TokenTrace> got = run(*dev, g.ids, g.opts, false);
  EXPECT_EQ(dev->registers(), r.registers());
  expect_traces_close(got, want, kVsGolden, GetParam().backend + " decode vs the reference forward");
}

// A device backend: its name and how to make its next submission fail (the test hook of each backend).
struct DeviceBackendParam {
  std::string name;
  std::function<void()> fail_next;
};
inline void PrintTo(const DeviceBackendParam& p, std::ostream* os) {
  *os << p.name;
}

class DeviceBackend : public ::testing::TestWithParam<DeviceBackendParam> {
 protected:
  void SetUp() override {
    if (!backend_here(GetParam().name)) GTEST_SKIP() << "no " << GetParam().name << " device";
  }
};

TEST_P(DeviceBackend, InstrumentsOff_SameLogitsAndNoInstruments) {
  expect_instruments_off_same_logits(GetParam().name);
}

TEST_P(DeviceBackend, Restart_ReproducesTheRunBitForBit) {
  expect_restart_bit_for_bit(GetParam().name);
}

TEST_P(DeviceBackend, MaxContext_RefusedBeforeAnyStateChange_AsTheCpu) {
  expect_max_context_refused_before_state_change(GetParam().name);
}

TEST_P(DeviceBackend, DeviceFailure_BackendFailure_RecordsIntact_CpuTakesOver) {
  expect_failure_keeps_records_cpu_takes_over(GetParam().name, GetParam().fail_next);
}

TEST_P(DeviceBackend, CliTrace_MatchesReferenceFile) {
  expect_cli_trace_matches_reference_file(GetParam().name);
}

TEST_P(DeviceBackend, NonFinite_FinalNormIsL_LmHeadIsLPlusOne_AsTheCpu) {
  nonfinite_test::expect_head_flags(GetParam().name);
}

TEST_P(DeviceBackend, QuantisedWeights_EveryFormatTheKernelsRead_MatchCpu) {
  expect_block_weights_match_cpu(GetParam().name);
}

}  // namespace hl::backend_test
