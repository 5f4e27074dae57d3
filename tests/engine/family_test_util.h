// The check every family's test makes of its generated preset: the CPU backend, by decode steps and
// by one prefill, against the plain-loop reference forward (engine/reference) on the logits (1e-4 of
// their scale), the SSM Δ (1e-5), the residual maxima and the router's choice and probabilities; a
// device backend against the CPU backend on every record field, or its one-line refusal.
// Shared by test_bamba.cpp, test_nemotron_h.cpp and test_granite_h.cpp. Not the NumPy goldens
// (test_golden.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/reference/ref_model.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/trace_compare_util.h"

namespace hl::family_test {

inline void expect_cpu_matches_reference(const std::shared_ptr<Model>& model, const std::vector<int32_t>& ids) {
  RunOptions opts;
  opts.full = true;
  const std::vector<TokenTrace> want = ref::ReferenceModel(model).run(ids, opts);
  for (bool prefill : {false, true}) {
    SCOPED_TRACE(prefill ? "prefill" : "decode");
    auto cpu = make_backend("cpu", model);
    const std::vector<TokenTrace> got = golden_test::run_tokens(*cpu, ids, opts, prefill);
    ASSERT_EQ(got.size(), want.size());
    for (size_t t = 0; t < got.size(); ++t) {
      float scale = 0;
      for (float v : want[t].logits) scale = std::max(scale, std::fabs(v));
      for (size_t v = 0; v < got[t].logits.size(); ++v)
        ASSERT_NEAR(got[t].logits[v], want[t].logits[v], 1e-4 * scale) << "token " << t << " logit " << v;
      ASSERT_EQ(got[t].ssm_delta.size(), want[t].ssm_delta.size());
      for (size_t m = 0; m < got[t].ssm_delta.size(); ++m)
        ASSERT_NEAR(got[t].ssm_delta[m], want[t].ssm_delta[m], 1e-5) << "token " << t;
      for (size_t l = 0; l < got[t].resid_max_abs.size(); ++l)
        ASSERT_NEAR(got[t].resid_max_abs[l], want[t].resid_max_abs[l], 1e-4 * (1 + want[t].resid_max_abs[l]))
            << "token " << t << " column " << l;
      ASSERT_EQ(got[t].router_topk, want[t].router_topk) << "token " << t;
      for (size_t e = 0; e < got[t].router_probs.size(); ++e)
        ASSERT_NEAR(got[t].router_probs[e], want[t].router_probs[e], 1e-5) << "token " << t;
    }
  }
}

// Each of `backends` this build has refuses `model` with one BackendFailure line: exactly
// "<backend>: <tail>" when `tail` is given, else one starting "<backend>: no ".
inline void expect_device_backends_refuse(const std::shared_ptr<Model>& model, const std::string& tail = "",
                                          const std::vector<std::string>& backends = {"vulkan", "cuda"}) {
  const std::vector<std::string> here = available_backends();
  for (const std::string& name : backends) {
    if (std::find(here.begin(), here.end(), name) == here.end()) continue;
    try {
      (void)make_backend(name, model);
      ADD_FAILURE() << name << " accepted a " << family_name(model->config.family) << " model";
    } catch (const BackendFailure& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      if (!tail.empty())
        EXPECT_EQ(msg, name + ": " + tail);
      else
        EXPECT_EQ(msg.rfind(name + ": no ", 0), 0u) << msg;
    }
  }
}

// Whether this build has the backend `name` and it runs here (a Vulkan device, lavapipe included).
inline bool backend_here(const std::string& name) {
  const std::vector<std::string> here = available_backends();
  return std::find(here.begin(), here.end(), name) != here.end();
}

// body(name) for each device backend with a device here (vulkan, cuda); how many ran (the caller
// skips when none did).
inline int for_each_device_backend(const std::function<void(const char*)>& body) {
  int ran = 0;
  for (const char* b : {"vulkan", "cuda"}) {
    if (!backend_here(b)) continue;
    SCOPED_TRACE(b);
    ++ran;
    body(b);
  }
  return ran;
}

// With HL_REFERENCE_REPORT=1: the worst |Δ| / scale of each float field of `got` against `ref`
// (scale = max(1, max |ref| over the field), as trace_compare_util.h bounds it).
inline void report_worst(const std::vector<TokenTrace>& got, const std::vector<TokenTrace>& ref,
                         const std::string& what) {
  if (!std::getenv("HL_REFERENCE_REPORT") || got.size() != ref.size()) return;
  for (const auto& [name, field] : backend_test::float_fields()) {
    double scale = 1.0, worst = 0.0;
    for (const TokenTrace& r : ref)
      for (float v : r.*field) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t t = 0; t < ref.size(); ++t)
      for (size_t i = 0; i < std::min((got[t].*field).size(), (ref[t].*field).size()); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>((got[t].*field)[i]) - (ref[t].*field)[i]));
    if (!(ref[0].*field).empty())
      std::printf("[ device ] %-44s %-18s max |diff|/scale %.3g\n", what.c_str(), name, worst / scale);
  }
}

// The ids the device-vs-CPU family tests feed: twelve fixed ones, then a spread up to `n` (a
// prefill long enough for the chunked scans).
inline std::vector<int32_t> device_test_ids(size_t n = 40) {
  std::vector<int32_t> ids = {1, 17, 400, 4095, 9, 9, 2000, 33, 5, 77, 1024, 3};
  for (int32_t i = 0; ids.size() < n; ++i) ids.push_back((i * 977 + 5) % 4096);
  return ids;
}

// Their second run: 2 registers and softmax-1.
inline RunOptions registers_softmax1() {
  RunOptions reg;
  reg.registers = 2;
  reg.normalizer_override = true;
  reg.normalizer = Normalizer::Softmax1;
  return reg;
}

// The device backend `backend` against the CPU backend on `model` with full records, every record
// field within kVsGolden (trace_compare_util.h; the CPU's token-order and chunked scans, its SIMD
// exp and its summation orders differ from the device's in the last bits): by decode steps; by a
// prefill of the first `prefill` ids, then decode steps; and by one prefill of all ids, against the
// CPU's decode steps and its prefill, and against the device's own decode steps within
// kPrefillVsDecode. `opts` gives the rest of the run.
// HL_REFERENCE_REPORT=1 prints the worst difference of each field of each comparison.
inline void expect_device_matches_cpu(const std::shared_ptr<Model>& model, const std::string& backend,
                                      const std::vector<int32_t>& ids, size_t prefill, RunOptions opts) {
  using backend_test::expect_traces_close;
  opts.full = true;
  auto cpu = make_backend("cpu", model);
  const std::vector<TokenTrace> ref = golden_test::run_tokens(*cpu, ids, opts, false);
  const std::vector<TokenTrace> ref_block = golden_test::run_tokens(*cpu, ids, opts, true);
  auto dev = make_backend(backend, model);
  ASSERT_EQ(dev->name(), backend);
  const std::vector<TokenTrace> steps = golden_test::run_tokens(*dev, ids, opts, false);
  expect_traces_close(steps, ref, backend_test::kVsGolden, backend + " decode vs cpu");
  report_worst(steps, ref, backend + " decode vs cpu");
  dev->start(opts);
  std::vector<TokenTrace> mixed;
  dev->forward(ids.data(), static_cast<int64_t>(prefill), &mixed);
  for (size_t t = prefill; t < ids.size(); ++t) dev->forward(&ids[t], 1, &mixed);
  const std::string then = backend + " prefill of " + std::to_string(prefill) + " then decode vs cpu";
  expect_traces_close(mixed, ref, backend_test::kVsGolden, then);
  report_worst(mixed, ref, then);
  const std::vector<TokenTrace> block = golden_test::run_tokens(*dev, ids, opts, true);
  expect_traces_close(block, ref, backend_test::kVsGolden, backend + " prefill vs cpu decode");
  expect_traces_close(block, ref_block, backend_test::kVsGolden, backend + " prefill vs cpu prefill");
  expect_traces_close(block, steps, backend_test::kPrefillVsDecode, backend + " prefill vs its decode steps");
  report_worst(block, ref, backend + " prefill vs cpu decode");
  report_worst(block, ref_block, backend + " prefill vs cpu prefill");
  report_worst(block, steps, backend + " prefill vs its decode steps");
}

}  // namespace hl::family_test
