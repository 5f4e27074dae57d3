// The engine against the independent NumPy reference (tools/reference/jamba_ref.py): for every
// golden checkpoint and run in tests/golden, every tensor of the trace (trace-format.md §3, --full
// included) must match — floats to 1e-4 relative to the tensor's largest magnitude, integers exactly —
// and a prefill of the whole prompt must agree with one-token decode steps to 1e-5.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "engine/backend/backend.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "engine/trace/trace_fields.h"
#include "engine/trace/trace_file.h"
#include "tests/engine/golden_util.h"

namespace fs = std::filesystem;
using namespace hl;
using hl::golden_test::golden_runs;
using hl::golden_test::GoldenRun;

namespace {

std::vector<double> as_doubles(const TensorInfo& t) {
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::I32: out[i] = reinterpret_cast<const int32_t*>(t.data)[i]; break;
      case DType::I64: out[i] = static_cast<double>(reinterpret_cast<const int64_t*>(t.data)[i]); break;
      default: {
        float f;
        to_float(t.dtype, t.data + i * dtype_size(t.dtype), &f, 1);
        out[i] = f;
      }
    }
  }
  return out;
}

std::string temp_path(const std::string& leaf) {
  return (fs::temp_directory_path() / ("hl_golden_" + std::to_string(getpid()) + "_" + leaf)).string();
}

// Runs the engine token by token (or as one prefill) and returns the trace it writes.
std::vector<TokenTrace> run_engine(const std::shared_ptr<Model>& model, const GoldenRun& g, bool prefill) {
  auto backend = make_backend("cpu", model);
  return golden_test::run_tokens(*backend, g.ids, g.opts, prefill);
}

}  // namespace

class Golden : public ::testing::TestWithParam<GoldenRun> {};

TEST_P(Golden, EveryTraceTensorMatchesTheReference) {
  const GoldenRun& g = GetParam();
  auto model = load_model(g.case_dir);
  std::vector<TokenTrace> recs = run_engine(model, g, false);
  const std::string path = temp_path(fs::path(g.case_dir).filename().string() + "_" + g.name + ".safetensors");
  auto backend = make_backend("cpu", model);
  backend->start(g.opts);
  write_trace(path, *model, backend->registers(), recs, TraceMeta{});
  SafetensorsFile got = SafetensorsFile::open(path);
  SafetensorsFile want = SafetensorsFile::open(g.case_dir + "/expected/" + g.name + ".safetensors");
  ASSERT_FALSE(want.tensors().empty());
  for (const TensorInfo& wt : want.tensors()) {
    const TensorInfo* gt = got.find(wt.name);
    ASSERT_NE(gt, nullptr) << "engine trace lacks '" << wt.name << "'";
    ASSERT_EQ(gt->shape, wt.shape) << wt.name;
    ASSERT_EQ(gt->dtype, wt.dtype) << wt.name;
    const std::vector<double> a = as_doubles(*gt), b = as_doubles(wt);
    if (wt.dtype == DType::I32 || wt.dtype == DType::I64) {
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << wt.name << " differs first at flat index " << i;
      continue;
    }
    double scale = 0;
    for (double v : b) scale = std::max(scale, std::fabs(v));
    const double tol = 1e-4 * std::max(scale, 1e-6);
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], tol) << wt.name << " differs first at flat index " << i << " (scale " << scale << ")";
  }
  for (const TensorInfo& gt : got.tensors()) {
    if (want.find(gt.name)) continue;
    const TraceField* f = find_trace_field(gt.name.c_str());
    ASSERT_TRUE(f && f->derive) << "engine wrote '" << gt.name << "' that the reference lacks";
    // A field derived from the logits (trace_fields.h), newer than the reference's files: what its
    // derive function gives on the reference's own logits, token by token.
    const TensorInfo* wl = want.find("logits");
    ASSERT_NE(wl, nullptr);
    const std::vector<double> z = as_doubles(*wl), v = as_doubles(gt);
    const size_t V = static_cast<size_t>(wl->shape[1]);
    ASSERT_EQ(v.size() * V, z.size()) << gt.name;
    for (size_t t = 0; t < v.size(); ++t) {
      TokenTrace r;
      r.logits.assign(z.begin() + static_cast<std::ptrdiff_t>(t * V), z.begin() + static_cast<std::ptrdiff_t>((t + 1) * V));
      f->derive(r);
      EXPECT_NEAR(v[t], r.*f->f32, 1e-4 * std::max(1.0, std::fabs(static_cast<double>(r.*f->f32))))
          << gt.name << " token " << t;
    }
  }
  fs::remove(path);
}

TEST_P(Golden, PrefillEqualsStepByStepDecode) {
  const GoldenRun& g = GetParam();
  auto model = load_model(g.case_dir);
  const std::vector<TokenTrace> step = run_engine(model, g, false);
  const std::vector<TokenTrace> pre = run_engine(model, g, true);
  ASSERT_EQ(step.size(), pre.size());
  for (size_t t = 0; t < step.size(); ++t) {
    double scale = 0;
    for (float v : step[t].logits) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    for (size_t i = 0; i < step[t].logits.size(); ++i)
      ASSERT_NEAR(pre[t].logits[i], step[t].logits[i], 1e-5 * scale) << "token " << t << " logit " << i;
    for (size_t i = 0; i < step[t].attn_entropy.size(); ++i)
      ASSERT_NEAR(pre[t].attn_entropy[i], step[t].attn_entropy[i], 1e-5 * std::max(1.0f, step[t].attn_entropy[i]));
    for (size_t i = 0; i < step[t].rank1_distance.size(); ++i)
      ASSERT_NEAR(pre[t].rank1_distance[i], step[t].rank1_distance[i], 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Reference, Golden, ::testing::ValuesIn(golden_runs()),
                         [](const ::testing::TestParamInfo<GoldenRun>& info) {
                           std::string n = fs::path(info.param.case_dir).filename().string() + "_" + info.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Golden);

TEST(GoldenData, IsPresent) {
  // The golden folder ships with the repository: an empty list would make the tests above vacuous.
  EXPECT_GE(golden_runs().size(), 8u);
}
