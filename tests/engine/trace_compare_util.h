// Comparing two record sequences, or two trace files, field by field within a stated tolerance
// (|Δ| ≤ rel·|ref| + abs·scale, scale = max(1, max |ref| over the tensor); integers exactly): used by
// the device backend tests (backend_test_util.h, where the tolerances are justified) and the
// reference oracle tests.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/model/token_trace.h"
#include "engine/trace/trace_fields.h"

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
// Every float field of the trace field table (trace_fields.h), in its order.
inline const std::vector<std::pair<const char*, FloatField>>& float_fields() {
  static const std::vector<std::pair<const char*, FloatField>> f = [] {
    std::vector<std::pair<const char*, FloatField>> out;
    for (const TraceField& tf : trace_fields())
      if (tf.fvec) out.emplace_back(tf.name, tf.fvec);
    return out;
  }();
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
  for (const TraceField& tf : trace_fields()) {  // float scalars (the fields derived from the logits)
    if (!tf.f32) continue;
    for (size_t t = 0; t < ref.size(); ++t) {
      const double a = got[t].*tf.f32, b = ref[t].*tf.f32;
      if (std::isnan(b)) {
        ASSERT_TRUE(std::isnan(a)) << what << ": " << tf.name << " token " << t;
        continue;
      }
      ASSERT_NEAR(a, b, tol.rel * std::fabs(b) + tol.abs * std::max(1.0, std::fabs(b)))
          << what << ": " << tf.name << " token " << t;
    }
  }
}

// The values of a trace tensor (F32, I32, I64 or any float dtype) as doubles.
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

// Every tensor of the trace file `want_path` in the trace file `got_path`, with its shape: integers
// exactly, floats within tol (scale over the tensor).
inline void expect_trace_file_close(const std::string& got_path, const std::string& want_path, const Tolerance& tol,
                                    const std::string& what) {
  SafetensorsFile got = SafetensorsFile::open(got_path);
  SafetensorsFile want = SafetensorsFile::open(want_path);
  ASSERT_FALSE(want.tensors().empty()) << want_path;
  for (const TensorInfo& wt : want.tensors()) {
    const TensorInfo* gt = got.find(wt.name);
    ASSERT_NE(gt, nullptr) << what << " lacks '" << wt.name << "'";
    ASSERT_EQ(gt->shape, wt.shape) << what << ": " << wt.name;
    const std::vector<double> a = as_doubles(*gt), b = as_doubles(wt);
    if (wt.dtype == DType::I32 || wt.dtype == DType::I64) {
      for (size_t i = 0; i < a.size(); ++i)
        ASSERT_EQ(a[i], b[i]) << what << ": " << wt.name << " differs first at flat index " << i;
      continue;
    }
    double scale = 1.0;
    for (double v : b) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], tol.rel * std::fabs(b[i]) + tol.abs * scale)
          << what << ": " << wt.name << " differs first at flat index " << i;
  }
}

}  // namespace hl::backend_test
