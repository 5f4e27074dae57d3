// The adapter reader, merge and ΔM/ΔD rows against the NumPy reference (tools/reference/dora_ref.py)
// through the committed goldens of tests/golden/adapters (tools/reference/make_dora_golden.py):
// rows and slope to 1e-6 relative, merged matrices to 1e-6 of the matrix's largest magnitude.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "dora_test_util.h"
#include "engine/io/adapter.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "engine/probes/dora_probe.h"

using namespace hl;
using namespace hl::test;

namespace {

const std::string kGolden = HL_GOLDEN_DIR;

bool close_rel(double got, double want, double rel) {
  return std::fabs(got - want) <= rel * std::fabs(want) + 1e-15;
}

void expect_rows(const std::vector<DoraRow>& got, const std::string& folder) {
  const std::vector<DoraRow> want = parse_dora_csv(read_text(folder + "/expected.csv"), folder + "/expected.csv");
  ASSERT_EQ(got.size(), want.size()) << folder;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].layer, want[i].layer) << "row " << i;
    EXPECT_EQ(got[i].module, want[i].module) << "row " << i;
    EXPECT_TRUE(close_rel(got[i].delta_m, want[i].delta_m, 1e-6))
        << want[i].module << " delta_m " << got[i].delta_m << " vs " << want[i].delta_m;
    EXPECT_TRUE(close_rel(got[i].delta_d, want[i].delta_d, 1e-6))
        << want[i].module << " delta_d " << got[i].delta_d << " vs " << want[i].delta_d;
  }
  const double want_slope = std::strtod(read_text(folder + "/expected_slope.txt").c_str(), nullptr);
  EXPECT_TRUE(close_rel(least_squares_slope(got), want_slope, 1e-6))
      << least_squares_slope(got) << " vs " << want_slope;
}

void expect_merged(const Model& m, const std::string& folder) {
  const SafetensorsFile f = SafetensorsFile::open(folder + "/expected_merged.safetensors");
  std::map<std::string, const Mat*> by_path;
  for (const LinearModule& lm : linear_modules(m, true)) by_path[lm.path] = lm.mat;
  for (const TensorInfo& t : f.tensors()) {
    const std::string path = t.name.substr(0, t.name.size() - 7);  // strip ".weight"
    ASSERT_TRUE(by_path.count(path)) << path;
    const Mat& w = *by_path[path];
    ASSERT_EQ(w.dtype, DType::F32) << path;
    ASSERT_EQ(t.shape, (std::vector<int64_t>{w.rows, w.cols})) << path;
    std::vector<float> want(static_cast<size_t>(t.numel()));
    to_float(t.dtype, t.data, want.data(), want.size());
    const std::vector<float> got = mat_values(w);
    double scale = 0;
    for (float x : want) scale = std::max(scale, static_cast<double>(std::fabs(x)));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_LE(std::fabs(got[i] - want[i]), 1e-6 * scale)
          << path << " element " << i << ": " << got[i] << " vs " << want[i];
  }
}

}  // namespace

TEST(DoraGolden, DoraAdapterOnGqaBasic_RowsSlopeAndMergeMatchReference) {
  auto base = load_model(kGolden + "/gqa_basic");
  const std::string folder = kGolden + "/adapters/dora";
  const Adapter a = load_adapter(folder, *base);
  // rank_pattern: "in_proj" precedes "model.layers.0.mamba.in_proj" in the file, so it wins (6, not 5).
  EXPECT_EQ(a.find("model.layers.0.mamba.in_proj")->rank, 6);
  EXPECT_EQ(a.find("model.layers.1.self_attn.q_proj")->rank, 2);
  EXPECT_EQ(a.find("model.layers.0.mamba.dt_proj")->alpha, 3.0);
  EXPECT_EQ(a.find("model.layers.0.mamba.dt_proj")->scaling, 0.75);
  expect_rows(dora_rows_adapter(*base, a), folder);
  merge_adapter(*base, a);
  expect_merged(*base, folder);
}

TEST(DoraGolden, RsLoraAdapterWithRegexTargets_RowsMatchReference) {
  auto base = load_model(kGolden + "/gqa_basic");
  const std::string folder = kGolden + "/adapters/lora";
  const Adapter a = load_adapter(folder, *base);
  EXPECT_EQ(a.find("model.layers.1.self_attn.k_proj")->rank, 4);
  EXPECT_EQ(a.find("model.layers.1.self_attn.k_proj")->scaling, 8.0);  // 16 / sqrt(4)
  EXPECT_EQ(a.find("model.layers.0.feed_forward.experts.3.gate_proj")->scaling, 4.0 / std::sqrt(8.0));
  expect_rows(dora_rows_adapter(*base, a), folder);
}

TEST(DoraGolden, DoraOnFusedExperts_PerExpertRowsAndMergeMatchReference) {
  auto base = load_model(kGolden + "/mixed_sharded");
  const std::string folder = kGolden + "/adapters/dora_fused";
  const Adapter a = load_adapter(folder, *base);
  expect_rows(dora_rows_adapter(*base, a), folder);
  const MoeWeights& moe = base->w.layers[4].moe;
  const Mat gate0 = moe.experts[0].gate, up1 = moe.experts[1].up;
  merge_adapter(*base, a);
  expect_merged(*base, folder);
  // Experts the adapter does not name keep their views into the fused tensors.
  EXPECT_EQ(moe.experts[0].gate.data, gate0.data);
  EXPECT_EQ(moe.experts[0].gate.dtype, gate0.dtype);
  EXPECT_EQ(moe.experts[1].up.data, up1.data);
  EXPECT_EQ(moe.experts[1].gate.dtype, DType::F32);
}

TEST(DoraGolden, TunedCheckpoint_RowsMatchReference) {
  auto base = load_model(kGolden + "/gqa_basic");
  auto tuned = load_model(kGolden + "/adapters/tuned");
  expect_rows(dora_rows_tuned(*base, *tuned), kGolden + "/adapters/tuned");
}
