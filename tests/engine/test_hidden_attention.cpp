// The hidden attention of Mamba-2 layers (engine/probes/hidden_attention.h; Ali, Zimerman & Wolf 2024):
// rows collected from the CPU backend's intermediates reproduce the layer's SSM output through
// y_t = Σ_s M_h[t, s] x_s + D_h x_t against the recurrence run directly on the same inputs (the O(T²)
// formula against the definition), equal the plain-loop reference's row, do not depend on prefill vs
// decode, include register rows first; Jamba's Mamba-1 channels rebuild the gated output; the row
// statistics; an out-of-range layer is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "engine/probes/hidden_attention.h"
#include "engine/reference/ref_mamba2.h"
#include "tests/engine/golden_util.h"
#include "test_util.h"

namespace hl {
namespace {

std::shared_ptr<Model> preset(const test::TempDir& dir, const char* name) {
  GenerateOptions o;
  o.config = preset_config(name);
  o.seed = 21;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

// Every ssm_conv row (x|B|C) of each decoder layer, beside the collector.
struct ConvRows {
  std::vector<std::vector<float>> rows;  // per decoder layer, (rows, conv_dim)
  IntermediateObserver chain(IntermediateObserver next) {
    return [this, next](const Intermediate& im) {
      if (std::strcmp(im.name, "ssm_conv") == 0) {
        if (rows.size() <= static_cast<size_t>(im.layer)) rows.resize(static_cast<size_t>(im.layer) + 1);
        for (int64_t k = 0; k < im.rows; ++k)
          rows[static_cast<size_t>(im.layer)].insert(rows[static_cast<size_t>(im.layer)].end(), im.data + k * im.stride,
                                                     im.data + k * im.stride + im.cols);
      }
      next(im);
    };
  }
};

void check_rows_rebuild_the_ssm(const char* name, int registers) {
  SCOPED_TRACE(name);
  test::TempDir dir;
  auto model = preset(dir, name);
  const JambaConfig& c = model->config;
  HiddenAttentionCollector collect(model);
  ConvRows conv;
  cpu::CpuBackend b(model);
  b.set_observer(conv.chain(collect.observer()));
  RunOptions opts;
  opts.registers = registers;
  const std::vector<int32_t> ids = {1, 17, 400, 9, 9, 2000, 33, 5, 77, 1024, 3, 4000};
  golden_test::run_tokens(b, ids, opts, true);
  const int64_t Di = c.mamba_inner(), P = c.mamba_d_head, nh = c.mamba_n_heads, conv_dim = c.mamba2_conv_dim();
  for (int64_t i : model->schedule.ssm_layers()) {
    const SsmRows& r = collect.layer(model->schedule[i].ssm_index);
    const int64_t T = r.rows();
    ASSERT_EQ(T, registers + static_cast<int64_t>(ids.size())) << "layer " << i;
    const std::vector<float>& xs = conv.rows[static_cast<size_t>(i)];
    const std::vector<float>& D = model->w.layers[static_cast<size_t>(i)].mamba2.D;
    // The recurrence on the same inputs, in double: y_t per channel.
    std::vector<double> S(static_cast<size_t>(Di * r.N), 0.0), y(static_cast<size_t>(T * Di));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t g = h / (nh / r.G);
        const double dt = r.delta[t * nh + h], dA = std::exp(dt * r.A[h]);
        for (int64_t p = 0; p < P; ++p) {
          const int64_t ch = h * P + p;
          const double x = xs[t * conv_dim + ch];
          double acc = 0;
          for (int64_t n = 0; n < r.N; ++n) {
            double& s = S[ch * r.N + n];
            s = dA * s + dt * x * r.B[t * r.G * r.N + g * r.N + n];
            acc += s * r.C[t * r.G * r.N + g * r.N + n];
          }
          y[t * Di + ch] = acc + D[h] * x;
        }
      }
    std::vector<float> row(static_cast<size_t>(T));
    std::vector<double> ref_row(static_cast<size_t>(T));
    ref::Mamba2Dims d;
    d.nh = nh, d.P = P, d.N = r.N, d.G = r.G;
    for (int64_t t : {int64_t{0}, T / 2, T - 1})
      for (int64_t h = 0; h < nh; ++h) {
        hidden_attention_row(r, h, t, row.data());
        ref::mamba2_hidden_attention_row(d, r.delta.data(), r.B.data(), r.C.data(), r.A.data(), h, t, ref_row.data());
        for (int64_t s = 0; s <= t; ++s)
          ASSERT_NEAR(row[s], ref_row[s], 1e-6 * (1 + std::fabs(ref_row[s]))) << "layer " << i << " head " << h;
        for (int64_t p = 0; p < P; ++p) {  // y_t = Σ_s M[t, s] x_s + D x_t, for each channel of the head
          const int64_t ch = h * P + p;
          double sum = D[h] * xs[t * conv_dim + ch];
          for (int64_t s = 0; s <= t; ++s) sum += static_cast<double>(row[s]) * xs[s * conv_dim + ch];
          ASSERT_NEAR(sum, y[t * Di + ch], 1e-4 * (1 + std::fabs(y[t * Di + ch])))
              << "layer " << i << " head " << h << " token row " << t << " channel " << ch;
        }
      }
  }
}

TEST(HiddenAttention, RowsRebuildTheSsmOutput_Bamba) { check_rows_rebuild_the_ssm("bamba-tiny", 0); }
TEST(HiddenAttention, RowsRebuildTheSsmOutput_FalconParallelWithRegisters) {
  check_rows_rebuild_the_ssm("falcon-h1-tiny", 2);
}
TEST(HiddenAttention, RowsRebuildTheSsmOutput_NemotronGroups) { check_rows_rebuild_the_ssm("nemotron-h-tiny", 0); }

TEST(HiddenAttention, PrefillAndDecodeCollectTheSameRows) {
  test::TempDir dir;
  auto model = preset(dir, "granite-h-tiny");
  const std::vector<int32_t> ids = {5, 6, 7, 8, 9, 10, 11};
  std::vector<SsmRows> got[2];
  for (bool prefill : {false, true}) {
    HiddenAttentionCollector collect(model);
    cpu::CpuBackend b(model);
    b.set_observer(collect.observer());
    golden_test::run_tokens(b, ids, RunOptions{}, prefill);
    for (int64_t m = 0; m < model->schedule.num_ssm(); ++m) got[prefill].push_back(collect.layer(m));
  }
  for (size_t m = 0; m < got[0].size(); ++m) {
    ASSERT_EQ(got[0][m].B.size(), got[1][m].B.size());
    for (size_t k = 0; k < got[0][m].B.size(); ++k) EXPECT_NEAR(got[0][m].B[k], got[1][m].B[k], 1e-5);
    for (size_t k = 0; k < got[0][m].delta.size(); ++k) EXPECT_NEAR(got[0][m].delta[k], got[1][m].delta[k], 1e-6);
  }
}

TEST(HiddenAttention, RowStats_EntropyAndFirstShareOfAbsValues) {
  const float row[4] = {2.0f, -1.0f, 1.0f, 0.0f};  // |M| / 4: 0.5, 0.25, 0.25, 0
  const HiddenRowStats st = hidden_row_stats(row, 4);
  EXPECT_NEAR(st.first_mass, 0.5, 1e-12);
  EXPECT_NEAR(st.entropy, -(0.5 * std::log(0.5) + 2 * 0.25 * std::log(0.25)), 1e-12);
  EXPECT_NEAR(st.entropy_norm, st.entropy / std::log(4.0), 1e-12);
  const float zero[3] = {0, 0, 0};  // all zero: uniform
  EXPECT_NEAR(hidden_row_stats(zero, 3).entropy_norm, 1.0, 1e-12);
  EXPECT_EQ(hidden_row_stats(row, 1).entropy_norm, 0.0);
}

// Jamba's Mamba-1 layers: each channel's row rebuilds the CPU backend's gated SSM output,
// ssm_y[t, d] = (Σ_s M_d[t, s] u_s[d] + D_d u_t[d]) · silu(z_t[d]), from the collector's B and C (recomputed
// from u with x_proj and the norms) and Δ; the channel mean of |M| is the mean of the rows' |values|.
TEST(HiddenAttention, Mamba1ChannelRowsRebuildTheGatedOutput) {
  test::TempDir dir;
  auto model = preset(dir, "tiny");
  const JambaConfig& c = model->config;
  const int64_t Di = c.mamba_inner();
  HiddenAttentionCollector collect(model);
  std::map<std::string, std::vector<std::vector<float>>> seen;  // name → per layer rows
  cpu::CpuBackend b(model);
  IntermediateObserver next = collect.observer();
  b.set_observer([&](const Intermediate& im) {
    for (const char* name : {"ssm_in", "ssm_conv", "ssm_y"})
      if (std::strcmp(im.name, name) == 0) {
        auto& v = seen[name];
        if (v.size() <= static_cast<size_t>(im.layer)) v.resize(static_cast<size_t>(im.layer) + 1);
        for (int64_t k = 0; k < im.rows; ++k)
          v[static_cast<size_t>(im.layer)].insert(v[static_cast<size_t>(im.layer)].end(), im.data + k * im.stride,
                                                  im.data + k * im.stride + im.cols);
      }
    next(im);
  });
  const std::vector<int32_t> ids = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
  golden_test::run_tokens(b, ids, RunOptions{}, false);
  const int64_t i = model->schedule.ssm_layers()[1];
  const SsmRows& r = collect.layer(model->schedule[i].ssm_index);
  ASSERT_TRUE(r.mamba1);
  ASSERT_EQ(r.rows(), static_cast<int64_t>(ids.size()));
  const std::vector<float>& u = seen["ssm_conv"][static_cast<size_t>(i)];
  const std::vector<float>& xz = seen["ssm_in"][static_cast<size_t>(i)];
  const std::vector<float>& y = seen["ssm_y"][static_cast<size_t>(i)];
  const std::vector<float>& D = model->w.layers[static_cast<size_t>(i)].mamba.D;
  const int64_t T = r.rows();
  std::vector<float> row(static_cast<size_t>(T)), mean(static_cast<size_t>(T));
  for (int64_t t : {int64_t{0}, int64_t{4}, T - 1}) {
    std::vector<double> abs_sum(static_cast<size_t>(t + 1), 0.0);
    for (int64_t d = 0; d < Di; ++d) {
      hidden_attention_row(r, d, t, row.data());
      double sum = static_cast<double>(D[d]) * u[t * Di + d];
      for (int64_t s = 0; s <= t; ++s) {
        sum += static_cast<double>(row[s]) * u[s * Di + d];
        abs_sum[s] += std::fabs(row[s]);
      }
      const float z = xz[t * 2 * Di + Di + d];
      const double gated = sum * (z / (1.0 + std::exp(-static_cast<double>(z))));
      ASSERT_NEAR(gated, y[t * Di + d], 1e-4 * (1 + std::fabs(y[t * Di + d]))) << "token " << t << " channel " << d;
    }
    hidden_attention_mean_abs_row(r, t, mean.data());
    for (int64_t s = 0; s <= t; ++s) ASSERT_NEAR(mean[s], abs_sum[s] / Di, 1e-6 * (1 + abs_sum[s] / Di));
  }
}

TEST(HiddenAttention, OutOfRangeLayer_RefusedByName) {
  test::TempDir dir;
  auto model = preset(dir, "tiny");
  HiddenAttentionCollector collect(model);
  try {
    (void)collect.layer(99);
    ADD_FAILURE() << "nothing thrown";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SSM layer 99 is out of range"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hl

namespace hl {
namespace {

// The app's tracker follows a run in pieces (a prefill of what the run added since it was last asked),
// with registers: its rows equal those a collector takes while the run is stepped token by token, for
// Mamba-1 (Jamba) and Mamba-2 layers, and the head rows and channel means computed from them agree.
void check_tracker_follows_in_pieces(const char* name, int registers) {
  SCOPED_TRACE(name);
  test::TempDir dir;
  auto model = preset(dir, name);
  const std::vector<int32_t> ids = {3, 9, 4, 12, 7, 7, 15, 2, 6, 11};
  RunOptions opts;
  opts.registers = registers;
  HiddenAttentionCollector stepped(model);
  cpu::CpuBackend b(model);
  b.set_observer(stepped.observer());
  golden_test::run_tokens(b, ids, opts, false);

  HiddenAttentionTracker tracker(model, opts);
  EXPECT_EQ(tracker.registers(), b.registers());
  tracker.follow(ids.data(), 1);
  tracker.follow(ids.data(), 4);
  tracker.follow(ids.data(), 4);  // nothing new
  tracker.follow(ids.data(), static_cast<int64_t>(ids.size()));
  EXPECT_EQ(tracker.fed(), static_cast<int64_t>(ids.size()));
  const int64_t n_reg = b.registers(), last = n_reg + static_cast<int64_t>(ids.size()) - 1;
  for (int64_t m = 0; m < model->schedule.num_ssm(); ++m) {
    const SsmRows& want = stepped.layer(m);
    const SsmRows& got = tracker.layer(m);
    ASSERT_EQ(got.rows(), want.rows());
    ASSERT_EQ(got.rows(), last + 1);
    for (int64_t h : {int64_t{-1}, int64_t{0}, want.nh - 1}) {
      std::vector<float> rw(static_cast<size_t>(last + 1)), rg(rw.size());
      hidden_attention_head_or_mean_row(want, h, last, rw.data());
      hidden_attention_head_or_mean_row(got, h, last, rg.data());
      float scale = 0;
      for (float v : rw) scale = std::max(scale, std::fabs(v));
      for (size_t s = 0; s < rw.size(); ++s) EXPECT_NEAR(rg[s], rw[s], 1e-4f * scale + 1e-7f) << "head " << h << " key " << s;
    }
  }
}

TEST(HiddenAttention, TrackerFollowsARunInPieces_Mamba1WithRegisters) { check_tracker_follows_in_pieces("tiny", 2); }
TEST(HiddenAttention, TrackerFollowsARunInPieces_Mamba2) { check_tracker_follows_in_pieces("bamba-tiny", 0); }

// The app's window of rows: as many earlier query rows as the budget of multiply-adds allows,
// counting (r + 1)·N per head for row r; the last row always counts.
TEST(HiddenAttention, WindowStart_SpendsTheBudgetBackwardsFromTheLastRow) {
  SsmRows in;
  in.nh = 4;
  in.N = 2;
  EXPECT_EQ(hidden_attention_window_start(in, 0, 9, 0), 9);           // only the last row
  EXPECT_EQ(hidden_attention_window_start(in, 0, 9, 2 * 10), 9);      // exactly row 9: 10 keys × N
  EXPECT_EQ(hidden_attention_window_start(in, 0, 9, 2 * (10 + 9)), 8);
  EXPECT_EQ(hidden_attention_window_start(in, 0, 9, 2 * (10 + 9 + 8) - 1), 8);
  EXPECT_EQ(hidden_attention_window_start(in, -1, 9, 4 * 2 * (10 + 9)), 8);  // the mean pays for every head
  EXPECT_EQ(hidden_attention_window_start(in, 0, 9, 1e9), 0);
}

}  // namespace
}  // namespace hl
