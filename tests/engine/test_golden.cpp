// The engine against the independent NumPy reference (tools/reference/jamba_ref.py): for every
// golden checkpoint and run in tests/golden, every tensor of the trace (trace-format.md §3, --full
// included) must match — floats to 1e-4 relative to the tensor's largest magnitude, integers exactly —
// and a prefill of the whole prompt must agree with one-token decode steps to 1e-5.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/backend/backend.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "engine/trace/trace_file.h"

namespace fs = std::filesystem;
using namespace hl;

namespace {

struct GoldenRun {
  std::string case_dir, name;
  std::vector<int32_t> ids;
  RunOptions opts;
};

void PrintTo(const GoldenRun& g, std::ostream* os) { *os << g.case_dir << " run " << g.name; }

std::vector<GoldenRun> golden_runs() {
  std::vector<GoldenRun> runs;
  const fs::path root = HL_GOLDEN_DIR;
  if (!fs::exists(root)) return runs;
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && fs::exists(e.path() / "expected" / "runs.json")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  for (const fs::path& c : cases) {
    std::ifstream in(c / "expected" / "runs.json");
    const nlohmann::json j = nlohmann::json::parse(in);
    const nlohmann::json& list = j.is_array() ? j : j.at("runs");
    for (const auto& r : list) {
      GoldenRun g;
      g.case_dir = c.string();
      g.name = r.at("name").get<std::string>();
      for (const auto& id : r.at("token_ids")) g.ids.push_back(id.get<int32_t>());
      g.opts.full = true;
      if (r.contains("normalizer") && !r["normalizer"].is_null()) {
        g.opts.normalizer_override = true;
        EXPECT_TRUE(parse_normalizer(r["normalizer"].get<std::string>(), &g.opts.normalizer));
      }
      if (r.contains("registers") && !r["registers"].is_null()) g.opts.registers = r["registers"].get<int>();
      runs.push_back(g);
    }
  }
  return runs;
}

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
  backend->start(g.opts);
  std::vector<TokenTrace> recs;
  if (prefill)
    backend->forward(g.ids.data(), static_cast<int64_t>(g.ids.size()), &recs);
  else
    for (int32_t id : g.ids) backend->forward(&id, 1, &recs);
  return recs;
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
  for (const TensorInfo& gt : got.tensors())
    EXPECT_NE(want.find(gt.name), nullptr) << "engine wrote '" << gt.name << "' that the reference lacks";
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
