// The check every family's test makes of its generated preset: the CPU backend, by decode steps and
// by one prefill, against the plain-loop reference forward (engine/reference) on the logits (1e-4 of
// their scale), the SSM Δ (1e-5), the residual maxima and the router's choice and probabilities.
// Shared by test_bamba.cpp, test_nemotron_h.cpp and test_granite_h.cpp. Not the NumPy goldens
// (test_golden.cpp).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/reference/ref_model.h"
#include "tests/engine/golden_util.h"

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

// Every device backend this build has refuses `model` with one BackendFailure line: exactly
// "<backend>: <tail>" when `tail` is given, else one starting "<backend>: no ".
inline void expect_device_backends_refuse(const std::shared_ptr<Model>& model, const std::string& tail = "") {
  const std::vector<std::string> here = available_backends();
  for (const char* name : {"vulkan", "cuda"}) {
    if (std::find(here.begin(), here.end(), name) == here.end()) continue;
    try {
      (void)make_backend(name, model);
      ADD_FAILURE() << name << " accepted a " << family_name(model->config.family) << " model";
    } catch (const BackendFailure& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      if (!tail.empty())
        EXPECT_EQ(msg, std::string(name) + ": " + tail);
      else
        EXPECT_EQ(msg.rfind(std::string(name) + ": no ", 0), 0u) << msg;
    }
  }
}

}  // namespace hl::family_test
