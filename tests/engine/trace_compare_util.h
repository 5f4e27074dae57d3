// Comparing two record sequences field by field within a stated tolerance (|Δ| ≤ rel·|ref| + abs·scale,
// scale = max(1, max |ref| over the tensor); integers exactly): used by the device backend tests
// (backend_test_util.h, where the tolerances are justified) and the reference oracle tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/token_trace.h"

namespace hl::backend_test {

// |Δ| ≤ rel·|ref| + abs·scale (the table in backend_test_util.h).
struct Tolerance {
  double rel, abs;
};
inline constexpr Tolerance kVsCpu{1e-5, 2e-6};
inline constexpr Tolerance kVsGolden{1e-4, 1e-5};
inline constexpr Tolerance kPrefillVsDecode{0.0, 1e-5};
inline constexpr Tolerance kBitForBit{0.0, 0.0};

using FloatField = std::vector<float> TokenTrace::*;
inline const std::vector<std::pair<const char*, FloatField>>& float_fields() {
  static const std::vector<std::pair<const char*, FloatField>> f = {
      {"logits", &TokenTrace::logits},
      {"attn_entropy", &TokenTrace::attn_entropy},
      {"attn_entropy_norm", &TokenTrace::attn_entropy_norm},
      {"attn_mass", &TokenTrace::attn_mass},
      {"attn_max_logit", &TokenTrace::attn_max_logit},
      {"ssm_delta_mean", &TokenTrace::ssm_delta_mean},
      {"router_probs", &TokenTrace::router_probs},
      {"router_lse", &TokenTrace::router_lse},
      {"rank1_distance", &TokenTrace::rank1_distance},
      {"resid_max_abs", &TokenTrace::resid_max_abs},
      {"ssm_delta", &TokenTrace::ssm_delta},
      {"ssm_retained", &TokenTrace::ssm_retained},
      {"attn_rows", &TokenTrace::attn_rows}};
  return f;
}

// Every field of two record sequences: floats within tol.rel·|ref| + tol.abs·scale (scale over the
// whole tensor, as in the golden tests), integers exactly. Reports the first difference per field.
inline void expect_traces_close(const std::vector<TokenTrace>& got, const std::vector<TokenTrace>& ref,
                                const Tolerance& tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t t = 0; t < ref.size(); ++t) {
    ASSERT_EQ(got[t].token_id, ref[t].token_id) << what << " token " << t;
    ASSERT_EQ(got[t].position, ref[t].position) << what << " token " << t;
    ASSERT_EQ(got[t].router_topk, ref[t].router_topk) << what << " router_topk, token " << t;
    ASSERT_EQ(got[t].nonfinite_layer, ref[t].nonfinite_layer) << what << " token " << t;
    ASSERT_EQ(got[t].kv_cache_bytes, ref[t].kv_cache_bytes) << what << " token " << t;
    ASSERT_EQ(got[t].ssm_state_bytes, ref[t].ssm_state_bytes) << what << " token " << t;
  }
  for (const auto& [name, field] : float_fields()) {
    double scale = 1.0;
    for (const TokenTrace& r : ref)
      for (float v : r.*field) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t t = 0; t < ref.size(); ++t) {
      const std::vector<float>& a = got[t].*field;
      const std::vector<float>& b = ref[t].*field;
      ASSERT_EQ(a.size(), b.size()) << what << " " << name << " token " << t;
      for (size_t i = 0; i < b.size(); ++i) {
        const double bound = tol.rel * std::fabs(b[i]) + tol.abs * scale;
        ASSERT_NEAR(a[i], b[i], bound) << what << ": " << name << " differs first at token " << t << ", index " << i
                                       << " (scale " << scale << ")";
      }
    }
  }
}

}  // namespace hl::backend_test
