// ΔM / ΔD (Liu et al. 2024, trace-format.md §4) and the adapter merge (jamba-spec.md §5.4) against closed forms:
// identity DoRA, rotations by known angles, pure row scaling, exact LoRA sums, rsLoRA scaling, the
// least-squares slope, the CSV; and against the NumPy reference (tools/reference/dora_ref.py) through
// the committed goldens in tests/golden/adapters (make_dora_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "dora_test_util.h"
#include "engine/io/adapter.h"
#include "engine/model/loader.h"
#include "engine/probes/dora_probe.h"

using namespace hl;
using namespace hl::test;

namespace {

const char* kTargets[] = {
    "model.layers.0.self_attn.q_proj", "model.layers.0.feed_forward.down_proj",         "model.layers.1.mamba.in_proj",
    "model.layers.1.mamba.dt_proj",    "model.layers.1.feed_forward.experts.2.up_proj", "lm_head"};

const Mat& mat_of(const Model& m, const std::string& path) {
  for (const LinearModule& lm : linear_modules(m, true))
    if (lm.path == path) return *lm.mat;
  throw std::runtime_error("no module " + path);
}

std::vector<double> row_norms(const Mat& m) {
  std::vector<double> n(static_cast<size_t>(m.rows)), row(static_cast<size_t>(m.cols));
  for (int64_t j = 0; j < m.rows; ++j) {
    mat_row_to_double(m, j, row.data());
    double s = 0;
    for (double x : row) s += x * x;
    n[j] = std::sqrt(s);
  }
  return n;
}

// DoRA factors for every kTargets module: A random, B = 0, m = given per-row values.
std::vector<AdapterTensor> dora_identity_tensors(const Model& base, int r,
                                                 const std::function<double(int64_t, double)>& magnitude) {
  std::vector<AdapterTensor> ts;
  uint32_t seed = 5;
  for (const char* p : kTargets) {
    const Mat& w = mat_of(base, p);
    std::vector<double> n = row_norms(w);
    std::vector<float> m(n.size());
    for (size_t j = 0; j < n.size(); ++j) m[j] = static_cast<float>(magnitude(static_cast<int64_t>(j), n[j]));
    ts.push_back({p, "lora_A.weight", {r, w.cols}, random_values(r * w.cols, ++seed)});
    ts.push_back({p, "lora_B.weight", {w.rows, r}, std::vector<float>(static_cast<size_t>(w.rows * r), 0.0f)});
    ts.push_back({p, "lora_magnitude_vector", {w.rows}, m});
  }
  return ts;
}

}  // namespace

TEST(Dora, IdentityAdapter_BZeroMagnitudeRowNorms_DeltasZeroAndMergedEqualsW0) {
  auto base = mem_model([](const std::string&, int64_t r, int64_t c) { return pythagorean_values(r, c); });
  TempDir dir;
  write_adapter(dir.path, lora_config(2, 4, true),
                dora_identity_tensors(*base, 2, [](int64_t, double n) { return n; }));
  const Adapter a = load_adapter(dir.path, *base);
  ASSERT_EQ(a.modules.size(), 6u);
  for (const DoraRow& r : dora_rows_adapter(*base, a)) {
    EXPECT_EQ(r.delta_m, 0.0) << r.module;
    EXPECT_EQ(r.delta_d, 0.0) << r.module;
  }
  std::map<std::string, std::vector<float>> before;
  for (const char* p : kTargets) before[p] = mat_values(mat_of(*base, p));
  merge_adapter(*base, a);
  EXPECT_EQ(base->adapter, dir.path);
  for (const char* p : kTargets) {
    const Mat& w = mat_of(*base, p);
    EXPECT_EQ(w.dtype, DType::F32);
    EXPECT_EQ(mat_values(w), before[p]) << p;
  }
}

TEST(Dora, Accumulator_RotationByTheta_DeltaDIsOneMinusCosDeltaMZero) {
  // Random rows w, w' = cosθ·w + sinθ·‖w‖·u with u ⟂ w a unit vector: ‖w'‖ = ‖w‖, cos(w, w') = cosθ.
  Lcg g(77);
  const int64_t in = 40, rows = 25;
  DoraAccumulator acc;
  double expect_d = 0, max_norm = 0;
  for (int64_t j = 0; j < rows; ++j) {
    const double theta = 0.001 + 3.0 * j / rows;
    std::vector<double> w(in), u(in), w1(in);
    for (auto& x : w) x = g.next();
    for (auto& x : u) x = g.next();
    double ww = 0, uw = 0;
    for (int64_t c = 0; c < in; ++c) ww += w[c] * w[c], uw += u[c] * w[c];
    for (int64_t c = 0; c < in; ++c) u[c] -= uw / ww * w[c];
    double uu = 0;
    for (double x : u) uu += x * x;
    for (int64_t c = 0; c < in; ++c) w1[c] = std::cos(theta) * w[c] + std::sin(theta) * std::sqrt(ww / uu) * u[c];
    acc.add_row(w.data(), w1.data(), in);
    expect_d += (1 - std::cos(theta)) / rows;
    max_norm = std::max(max_norm, std::sqrt(ww));
  }
  EXPECT_NEAR(acc.delta_d(), expect_d, 1e-14);
  EXPECT_NEAR(acc.delta_m(), 0.0, 1e-14 * max_norm);
}

TEST(Dora, TunedModels_RowsRotatedByPythagoreanAngles_ExactOneMinusCos) {
  // Row j of W0 is L·e_a; the tuned row is L·(c·e_a + s·e_b) with (c, s) from a Pythagorean triple,
  // so both norms are exactly L and cos = c exactly.
  static const int trip[][3] = {{3, 4, 5}, {5, 12, 13}, {8, 15, 17}};
  auto fill = [](bool tuned) {
    return [tuned](const std::string&, int64_t rows, int64_t cols) {
      std::vector<float> v(static_cast<size_t>(rows * cols), 0.0f);
      for (int64_t j = 0; j < rows; ++j) {
        const auto& t = trip[j % 3];
        const int64_t a = j % cols, b = (j + 1) % cols;
        if (tuned) {
          v[j * cols + a] = static_cast<float>(t[0]);
          v[j * cols + b] = static_cast<float>(t[1]);
        } else {
          v[j * cols + a] = static_cast<float>(t[2]);
        }
      }
      return v;
    };
  };
  auto base = mem_model(fill(false)), tuned = mem_model(fill(true));
  const std::vector<DoraRow> rows = dora_rows_tuned(*base, *tuned);
  // Every linear weight inside the layers (router and each expert included), lm_head excluded.
  ASSERT_EQ(rows.size(), 4u + 3u + 4u + 1u + 9u);
  for (const DoraRow& r : rows) {
    const Mat& w = mat_of(*base, (r.layer == 0 ? "model.layers.0." : "model.layers.1.") + r.module);
    double expect = 0;
    for (int64_t j = 0; j < w.rows; ++j) expect += 1.0 - static_cast<double>(trip[j % 3][0]) / trip[j % 3][2];
    expect /= static_cast<double>(w.rows);
    EXPECT_EQ(r.delta_m, 0.0) << r.module;
    EXPECT_NEAR(r.delta_d, expect, 1e-15) << r.module;
  }
  EXPECT_EQ(rows[0].module, "self_attn.q_proj");
  EXPECT_EQ(rows[7].layer, 1);
  EXPECT_EQ(rows[7].module, "mamba.in_proj");
  EXPECT_EQ(rows[11].module, "feed_forward.router");
  EXPECT_EQ(rows.back().module, "feed_forward.experts.2.down_proj");
}

TEST(Dora, TunedModels_RowsScaledByPowersOfTwo_DeltaDZeroDeltaMMeanAbsChange) {
  const float c[] = {0.5f, 2.0f, 1.0f, 4.0f, 0.25f};
  auto base = mem_model_random(3);
  auto tuned = mem_model([&](const std::string& name, int64_t rows, int64_t cols) {
    (void)name;
    return std::vector<float>();
  });
  // The tuned model: the base's values with row j scaled by c[j % 5].
  const std::vector<LinearModule> bm = linear_modules(*base, false), tm = linear_modules(*tuned, false);
  ASSERT_EQ(bm.size(), tm.size());
  for (size_t i = 0; i < bm.size(); ++i) {
    std::vector<float> v = mat_values(*bm[i].mat);
    for (int64_t j = 0; j < bm[i].mat->rows; ++j)
      for (int64_t k = 0; k < bm[i].mat->cols; ++k) v[j * bm[i].mat->cols + k] *= c[j % 5];
    *const_cast<Mat*>(tm[i].mat) = owned_mat(*tuned, bm[i].mat->name, bm[i].mat->rows, bm[i].mat->cols, v);
  }
  for (const DoraRow& r : dora_rows_tuned(*base, *tuned)) {
    const Mat& w = mat_of(*base, (r.layer == 0 ? "model.layers.0." : "model.layers.1.") + r.module);
    const std::vector<double> n = row_norms(w);
    double expect = 0;
    for (int64_t j = 0; j < w.rows; ++j) expect += std::fabs(c[j % 5] - 1.0) * n[j];
    expect /= static_cast<double>(w.rows);
    EXPECT_NEAR(r.delta_m, expect, 1e-14 * (1 + expect)) << r.module;
    EXPECT_NEAR(r.delta_d, 0.0, 1e-15) << r.module;
  }
}

TEST(Dora, AdapterPureScaling_MagnitudeTimesRowNorm_DeltaMIsMeanAbsScaleChange) {
  auto base = mem_model_random(11);
  TempDir dir;
  auto scale = [](int64_t j) { return 0.6 + 0.17 * static_cast<double>(j % 7); };
  write_adapter(dir.path, lora_config(3, 3, true),
                dora_identity_tensors(*base, 3, [&](int64_t j, double n) { return scale(j) * n; }));
  const Adapter a = load_adapter(dir.path, *base);
  const std::vector<DoraRow> rows = dora_rows_adapter(*base, a);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows.back().layer, -1);
  EXPECT_EQ(rows.back().module, "lm_head");
  for (const DoraRow& r : rows) {
    const std::string path = r.layer < 0 ? "lm_head" : "model.layers." + std::to_string(r.layer) + "." + r.module;
    const AdapterModule* am = a.find(path);
    ASSERT_NE(am, nullptr) << path;
    const std::vector<double> n = row_norms(mat_of(*base, path));
    double expect = 0;
    for (size_t j = 0; j < n.size(); ++j) expect += std::fabs(static_cast<double>(am->magnitude[j]) - n[j]);
    expect /= static_cast<double>(n.size());
    EXPECT_NEAR(r.delta_m, expect, 1e-13) << path;
    EXPECT_NEAR(r.delta_d, 0.0, 1e-15) << path;
  }
}

TEST(Dora, LoraMerge_KnownAB_ExactSumAndBias) {
  auto base = mem_model_random(21);
  const std::vector<float> dt_bias0 = base->w.layers[1].mamba.dt_bias;
  TempDir dir;
  nlohmann::json cfg = lora_config(2, 4, false);  // s = 4 / 2 = 2
  cfg["lora_bias"] = true;
  // Dyadic values: W0 + 2·B·A is exact in double, so the merged float is the rounding of the exact sum.
  const std::vector<float> A = {0.5f, -1, 0.25f, 2, 0, 1, -0.5f, 0.125f, 1, 1, -2, 0.75f};  // (2, 6)
  std::vector<float> B(16 * 2), bias(16);
  for (int i = 0; i < 32; ++i) B[i] = static_cast<float>((i % 5) - 2) * 0.125f;  // (16, 2)
  std::vector<float> Bdt(8 * 2), Adt = {1, -0.5f, 0.25f, 2};                     // (8, 2), (2, 2)
  for (int i = 0; i < 16; ++i) Bdt[i] = static_cast<float>(i % 3) * 0.5f;
  std::vector<float> bdt = {1, 2, 3, 4, -1, -2, -3, -4};
  write_adapter(dir.path, cfg,
                {{"model.layers.1.mamba.in_proj", "lora_A.weight", {2, 6}, A},
                 {"model.layers.1.mamba.in_proj", "lora_B.weight", {16, 2}, B},
                 {"model.layers.1.mamba.dt_proj", "lora_A.weight", {2, 2}, Adt},
                 {"model.layers.1.mamba.dt_proj", "lora_B.weight", {8, 2}, Bdt},
                 {"model.layers.1.mamba.dt_proj", "lora_B.bias", {8}, bdt}});
  const Adapter a = load_adapter(dir.path, *base);
  const std::vector<float> w_in = mat_values(base->w.layers[1].mamba.in_proj);
  const std::vector<float> w_dt = mat_values(base->w.layers[1].mamba.dt_proj);
  merge_adapter(*base, a);
  auto check = [](const std::vector<float>& w0, const std::vector<float>& Am, const std::vector<float>& Bm,
                  int64_t rows, int64_t cols, const Mat& merged) {
    const std::vector<float> got = mat_values(merged);
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t c = 0; c < cols; ++c) {
        double ba = 0;
        for (int k = 0; k < 2; ++k) ba += static_cast<double>(Bm[j * 2 + k]) * Am[k * cols + c];
        const float want = static_cast<float>(static_cast<double>(w0[j * cols + c]) + 2.0 * ba);
        ASSERT_EQ(got[j * cols + c], want) << "row " << j << " col " << c;
      }
  };
  check(w_in, A, B, 16, 6, base->w.layers[1].mamba.in_proj);
  check(w_dt, Adt, Bdt, 8, 2, base->w.layers[1].mamba.dt_proj);
  for (int o = 0; o < 8; ++o) EXPECT_EQ(base->w.layers[1].mamba.dt_bias[o], dt_bias0[o] + 2.0f * bdt[o]) << o;
  // Untouched modules keep their data.
  EXPECT_EQ(mat_values(base->w.layers[1].mamba.out_proj), mat_values(mem_model_random(21)->w.layers[1].mamba.out_proj));
}

TEST(Dora, Rslora_ScalingIsAlphaOverSqrtRank) {
  auto base = mem_model_random(31);
  TempDir dir;
  nlohmann::json cfg = lora_config(4, 6, false);
  cfg["use_rslora"] = true;  // s = 6 / sqrt(4) = 3 (PEFT: 6 / 4 = 1.5 without rsLoRA)
  cfg["rank_pattern"] = {{"k_proj", 9}};
  const std::vector<float> A = random_values(4 * 6, 1), B = random_values(8 * 4, 2);
  write_adapter(dir.path, cfg,
                {{"model.layers.0.self_attn.q_proj", "lora_A.weight", {4, 6}, A},
                 {"model.layers.0.self_attn.q_proj", "lora_B.weight", {8, 4}, B},
                 {"model.layers.0.self_attn.k_proj", "lora_A.weight", {9, 6}, random_values(54, 3)},
                 {"model.layers.0.self_attn.k_proj", "lora_B.weight", {4, 9}, random_values(36, 4)}});
  const Adapter a = load_adapter(dir.path, *base);
  EXPECT_EQ(a.find("model.layers.0.self_attn.q_proj")->scaling, 3.0);
  EXPECT_EQ(a.find("model.layers.0.self_attn.k_proj")->scaling, 2.0);  // 6 / sqrt(9)
  const std::vector<float> w0 = mat_values(base->w.layers[0].attn.q);
  merge_adapter(*base, a);
  const std::vector<float> got = mat_values(base->w.layers[0].attn.q);
  for (int j = 0; j < 8; ++j)
    for (int c = 0; c < 6; ++c) {
      double ba = 0;
      for (int k = 0; k < 4; ++k) ba += static_cast<double>(B[j * 4 + k]) * A[k * 6 + c];
      EXPECT_NEAR(got[j * 6 + c], w0[j * 6 + c] + 3.0 * ba, 1e-6) << j << "," << c;
    }
}

TEST(Dora, Merge_ZeroNormRowInSecondModule_ModelUnchanged) {
  auto base = mem_model_random(41);
  // Row 3 of experts.2.up_proj all zero: with B = 0 its DoRA norm is 0 and the merge must refuse.
  std::vector<float> up = mat_values(base->w.layers[1].moe.experts[2].up);
  for (int c = 0; c < 6; ++c) up[3 * 6 + c] = 0;
  base->w.layers[1].moe.experts[2].up = owned_mat(*base, "up", 10, 6, up);
  TempDir dir;
  write_adapter(dir.path, lora_config(2, 2, true),
                dora_identity_tensors(*base, 2, [](int64_t, double n) { return n + 1; }));
  const Adapter a = load_adapter(dir.path, *base);
  const void* q_before = base->w.layers[0].attn.q.data;
  const size_t keep = base->keep_alive.size();
  EXPECT_LOAD_ERROR(merge_adapter(*base, a), "experts.2.up_proj': row 3 of W0 + s·B·A has norm 0");
  EXPECT_EQ(base->w.layers[0].attn.q.data, q_before);
  EXPECT_EQ(base->keep_alive.size(), keep);
  EXPECT_TRUE(base->adapter.empty());
  EXPECT_LOAD_ERROR(dora_rows_adapter(*base, a), "norm 0");
}

TEST(Dora, Merge_OverMemoryBudget_RefusedBeforeAllocating) {
  auto base = mem_model_random(61);
  TempDir dir;
  write_adapter(dir.path, lora_config(2, 2, true),
                dora_identity_tensors(*base, 2, [](int64_t, double n) { return n; }));
  const Adapter a = load_adapter(dir.path, *base);
  // The six modules hold 48 + 60 + 96 + 16 + 60 + 72 = 352 floats = 1408 bytes.
  EXPECT_LOAD_ERROR(merge_adapter(*base, a, 1407), "merging needs 1408 bytes of fp32 weights");
  EXPECT_TRUE(base->adapter.empty());
  merge_adapter(*base, a, 1408);
  EXPECT_EQ(base->adapter, dir.path);
}

TEST(Dora, Merge_Twice_Refused) {
  auto base = mem_model_random(51);
  TempDir dir;
  write_adapter(dir.path, lora_config(2, 2, true),
                dora_identity_tensors(*base, 2, [](int64_t, double n) { return n; }));
  const Adapter a = load_adapter(dir.path, *base);
  merge_adapter(*base, a);
  try {
    merge_adapter(*base, a);
    ADD_FAILURE() << "second merge accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already has the adapter"), std::string::npos) << e.what();
  }
}

TEST(Dora, Slope_ExactLinearData_RecoversSlope) {
  std::vector<DoraRow> rows;
  for (double d : {0.1, 0.2, 0.4, 0.8, 0.05}) rows.push_back({0, "m", 0.5 - 2.0 * d, d});
  EXPECT_NEAR(least_squares_slope(rows), -2.0, 1e-12);
  for (DoraRow& r : rows) r.delta_m = 0.25 + 3.5 * r.delta_d;
  EXPECT_NEAR(least_squares_slope(rows), 3.5, 1e-12);
}

TEST(Dora, Slope_FewerThanTwoRowsOrConstantDeltaD_IsNaN) {
  EXPECT_TRUE(std::isnan(least_squares_slope({})));
  EXPECT_TRUE(std::isnan(least_squares_slope({{0, "a", 1, 2}})));
  EXPECT_TRUE(std::isnan(least_squares_slope({{0, "a", 1, 0.5}, {1, "b", 3, 0.5}, {2, "c", 2, 0.5}})));
}

TEST(Dora, Csv_FormatRoundTripAndErrors) {
  const std::vector<DoraRow> rows = {
      {0, "self_attn.q_proj", 0.125, 1e-9}, {3, "feed_forward.experts.3.up_proj", 1.0 / 3, 2}, {-1, "lm_head", 0, 0.1}};
  const std::string text = dora_csv(rows);
  EXPECT_EQ(text,
            "layer,module,delta_m,delta_d\n0,self_attn.q_proj,0.125,1e-09\n"
            "3,feed_forward.experts.3.up_proj,0.333333333,2\n-1,lm_head,0,0.1\n");
  TempDir dir;
  write_dora_csv(dir / "rows.csv", rows);
  std::ifstream in(dir / "rows.csv");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), text);
  const std::vector<DoraRow> back = parse_dora_csv(text, "rows.csv");
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[1].module, "feed_forward.experts.3.up_proj");
  EXPECT_NEAR(back[1].delta_m, 1.0 / 3, 1e-9);
  EXPECT_EQ(back[2].layer, -1);
  EXPECT_LOAD_ERROR(parse_dora_csv("layer,module\n", "x.csv"), "x.csv: line 1: header");
  EXPECT_LOAD_ERROR(parse_dora_csv("layer,module,delta_m,delta_d\n0,a,1\n", "x.csv"), "line 2: 3 fields");
  EXPECT_LOAD_ERROR(parse_dora_csv("layer,module,delta_m,delta_d\n0,a,1,zz\n", "x.csv"), "delta_d 'zz'");
  EXPECT_LOAD_ERROR(parse_dora_csv("layer,module,delta_m,delta_d\n0.5,a,1,1\n", "x.csv"), "layer '0.5'");
  EXPECT_LOAD_ERROR(parse_dora_csv("", "x.csv"), "empty");
}

TEST(Dora, LayerSummary_MeansPerLayer) {
  const std::vector<DoraLayerSummary> s =
      dora_layer_summary({{1, "a", 1, 0.5}, {0, "b", 2, 0.25}, {1, "c", 3, 1.5}, {-1, "lm_head", 4, 4}});
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].layer, -1);
  EXPECT_EQ(s[2].layer, 1);
  EXPECT_EQ(s[2].matrices, 2);
  EXPECT_EQ(s[2].mean_delta_m, 2.0);
  EXPECT_EQ(s[2].mean_delta_d, 1.0);
}
