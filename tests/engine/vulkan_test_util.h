// Helpers of the Vulkan backend tests (test_vulkan*.cpp): the golden runs, running a backend,
// and the field-by-field comparison of two record sequences with a stated tolerance.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/vulkan/vulkan_backend.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"

namespace hl::vktest {

namespace fs = std::filesystem;

struct VkRun {
  std::string case_dir, name;
  std::vector<int32_t> ids;
  RunOptions opts;
};

inline void PrintTo(const VkRun& g, std::ostream* os) {
  *os << g.case_dir << " run " << g.name;
}

inline std::vector<VkRun> golden_runs() {
  std::vector<VkRun> runs;
  const fs::path root = HL_GOLDEN_DIR;
  if (!fs::exists(root)) return runs;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "expected" / "runs.json")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& c : cases) {
    std::ifstream in(c / "expected" / "runs.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& r : (j.is_array() ? j : j.at("runs"))) {
      VkRun g;
      g.case_dir = c.string();
      g.name = r.at("name").get<std::string>();
      for (const auto& id : r.at("token_ids")) g.ids.push_back(id.get<int32_t>());
      g.opts.full = true;
      if (r.contains("normalizer") && !r["normalizer"].is_null()) {
        g.opts.normalizer_override = true;
        parse_normalizer(r["normalizer"].get<std::string>(), &g.opts.normalizer);
      }
      if (r.contains("registers") && !r["registers"].is_null()) g.opts.registers = r["registers"].get<int>();
      runs.push_back(g);
    }
  }
  return runs;
}

inline bool have_vulkan() {
  return vulkan_available(false);
}

inline std::vector<TokenTrace> run(Backend& b, const std::vector<int32_t>& ids, const RunOptions& opts, bool prefill) {
  b.start(opts);
  std::vector<TokenTrace> recs;
  if (prefill)
    b.forward(ids.data(), static_cast<int64_t>(ids.size()), &recs);
  else
    for (int32_t id : ids) b.forward(&id, 1, &recs);
  return recs;
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
