// Helpers of the Vulkan backend tests (test_vulkan*.cpp): the golden runs and running a backend
// (golden_util.h), and the field-by-field comparison of two record sequences with a stated tolerance.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/vulkan/vulkan_backend.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "tests/engine/golden_util.h"

namespace hl::vktest {

namespace fs = std::filesystem;

using VkRun = golden_test::GoldenRun;
using golden_test::golden_runs;

// golden_test::run_tokens under the short name the backend tests (Vulkan, CUDA) use.
inline std::vector<TokenTrace> run(Backend& b, const std::vector<int32_t>& ids, const RunOptions& opts, bool prefill) {
  return golden_test::run_tokens(b, ids, opts, prefill);
}

inline bool have_vulkan() {
  return vulkan_available(false);
}

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

// Every field of two record sequences: floats within rel·|ref| + abs·scale (scale over the whole
// tensor, as in the golden tests), integers exactly. Reports the first difference per field.
inline void expect_traces_close(const std::vector<TokenTrace>& got, const std::vector<TokenTrace>& ref, double rel,
                                double abs, const std::string& what) {
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
        const double tol = rel * std::fabs(b[i]) + abs * scale;
        ASSERT_NEAR(a[i], b[i], tol) << what << ": " << name << " differs first at token " << t << ", index " << i
                                     << " (scale " << scale << ")";
      }
    }
  }
}

inline std::string temp_path(const std::string& leaf) {
  return (fs::temp_directory_path() / ("hl_vulkan_" + std::to_string(getpid()) + "_" + leaf)).string();
}

inline std::vector<double> as_doubles(const TensorInfo& t) {
  std::vector<double> out(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::I32)
      out[i] = reinterpret_cast<const int32_t*>(t.data)[i];
    else if (t.dtype == DType::I64)
      out[i] = static_cast<double>(reinterpret_cast<const int64_t*>(t.data)[i]);
    else {
      float f;
      to_float(t.dtype, t.data + i * dtype_size(t.dtype), &f, 1);
      out[i] = f;
    }
  }
  return out;
}

}  // namespace hl::vktest
