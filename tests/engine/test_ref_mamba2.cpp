// The Mamba-2 reference functions (engine/reference/ref_mamba2.h) checked against each other by
// independent formulations: the chunked SSD scan against the token-by-token recurrence (every chunk
// size, ragged last chunks, a state carried in), the hidden attention matrix against the recurrence
// (y_t = Σ_s M[t, s] x_s + D x_t, Ali, Zimerman & Wolf 2024), a one-token closed form naming each
// head's group, the Δ clamp, and the gated RMSNorm against a hand computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/reference/ref_mamba2.h"

using namespace hl;
using namespace hl::ref;

namespace {

// Random inputs for T tokens of a layer with sizes d: x, B, C, dt per token, and the parameters.
struct Inputs {
  std::vector<float> x, B, C, dt, dt_bias, A, D;  // (T, Di), (T, G·N), (T, G·N), (T, nh), (nh,) × 3
  std::vector<Mamba2Token> tokens;
};

Inputs make_inputs(const Mamba2Dims& d, int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  Inputs in;
  const int64_t Di = d.inner(), GN = d.G * d.N;
  in.x.resize(T * Di);
  in.B.resize(T * GN);
  in.C.resize(T * GN);
  in.dt.resize(T * d.nh);
  for (float& v : in.x) v = normal(rng);
  for (float& v : in.B) v = normal(rng);
  for (float& v : in.C) v = normal(rng);
  for (float& v : in.dt) v = normal(rng) - 1.0f;
  for (int64_t h = 0; h < d.nh; ++h) {
    in.dt_bias.push_back(std::log(std::expm1(0.001f + 0.1f * uni(rng))));  // inverse softplus of dt ∈ [1e-3, 0.1]
    in.A.push_back(-static_cast<float>(h + 1));                           // −exp(log(1..nh)), as HF initialises
    in.D.push_back(1.0f + 0.5f * normal(rng));
  }
  for (int64_t t = 0; t < T; ++t)
    in.tokens.push_back({&in.x[t * Di], &in.B[t * GN], &in.C[t * GN], &in.dt[t * d.nh]});
  return in;
}

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

}  // namespace

TEST(RefMamba2, ChunkedScan_EqualsStepping_EveryChunkSize_StateCarriedIn) {
  const Mamba2Dims d{4, 3, 5, 2};
  for (int64_t T : {1, 7, 16, 37}) {
    for (int64_t Q : {1, 4, 16, 64}) {
      const Inputs in = make_inputs(d, T, static_cast<uint32_t>(100 * T + Q));
      std::mt19937 rng(7);
      std::normal_distribution<float> normal(0.0f, 0.3f);
      std::vector<float> S0(static_cast<size_t>(d.inner() * d.N));  // a state from earlier tokens
      for (float& v : S0) v = normal(rng);
      std::vector<float> S_step = S0, S_chunk = S0;
      std::vector<float> y_step(T * d.inner()), y_chunk(T * d.inner());
      for (int64_t t = 0; t < T; ++t)
        mamba2_step(d, in.tokens[t], in.dt_bias.data(), in.A.data(), in.D.data(), S_step.data(), &y_step[t * d.inner()],
                    nullptr);
      mamba2_scan_chunked(d, in.tokens, Q, in.dt_bias.data(), in.A.data(), in.D.data(), S_chunk.data(), y_chunk.data());
      const double ys = max_abs(y_step), ss = max_abs(S_step);
      ASSERT_GT(ys, 0.1);
      for (size_t i = 0; i < y_step.size(); ++i)
        ASSERT_NEAR(y_chunk[i], y_step[i], 1e-5 * ys) << "T " << T << ", Q " << Q << ", y index " << i;
      for (size_t i = 0; i < S_step.size(); ++i)
        ASSERT_NEAR(S_chunk[i], S_step[i], 1e-5 * ss) << "T " << T << ", Q " << Q << ", state index " << i;
    }
  }
}

TEST(RefMamba2, HiddenAttention_RowsTimesInputsReproduceTheRecurrence) {
  const Mamba2Dims d{4, 2, 3, 2};
  const int64_t T = 24, Di = d.inner();
  const Inputs in = make_inputs(d, T, 11);
  std::vector<float> S(static_cast<size_t>(Di * d.N), 0.0f), y(T * Di), delta(T * d.nh);
  for (int64_t t = 0; t < T; ++t) {
    mamba2_step(d, in.tokens[t], in.dt_bias.data(), in.A.data(), in.D.data(), S.data(), &y[t * Di], nullptr);
    mamba2_delta(d, in.tokens[t].dt, in.dt_bias.data(), &delta[t * d.nh]);
  }
  const double scale = max_abs(y);
  std::vector<double> row(T);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < d.nh; ++h) {
      mamba2_hidden_attention_row(d, delta.data(), in.B.data(), in.C.data(), in.A.data(), h, t, row.data());
      for (int64_t p = 0; p < d.P; ++p) {
        const int64_t c = h * d.P + p;
        double v = static_cast<double>(in.D[h]) * in.x[t * Di + c];
        for (int64_t s = 0; s <= t; ++s) v += row[s] * in.x[s * Di + c];
        worst = std::max(worst, std::fabs(v - y[t * Di + c]) / scale);
        ASSERT_NEAR(v, y[t * Di + c], 1e-5 * scale) << "token " << t << ", head " << h << ", channel " << c;
      }
    }
  RecordProperty("worst_relative_to_scale", std::to_string(worst));
}

TEST(RefMamba2, OneTokenFromZeroState_ClosedFormWithEachHeadsGroup) {
  const Mamba2Dims d{4, 2, 3, 2};  // heads 0, 1 read group 0; heads 2, 3 group 1
  EXPECT_EQ(d.group_of(0), 0);
  EXPECT_EQ(d.group_of(1), 0);
  EXPECT_EQ(d.group_of(2), 1);
  EXPECT_EQ(d.group_of(3), 1);
  const Inputs in = make_inputs(d, 1, 5);
  std::vector<float> S(static_cast<size_t>(d.inner() * d.N), 0.0f), y(d.inner());
  std::vector<float> kept(d.nh);
  mamba2_step(d, in.tokens[0], in.dt_bias.data(), in.A.data(), in.D.data(), S.data(), y.data(), kept.data());
  for (int64_t h = 0; h < d.nh; ++h) {
    const int64_t g = h < 2 ? 0 : 1;
    const double v = in.dt[h] + in.dt_bias[h];
    const double delta = v > 20 ? v : std::log1p(std::exp(v));
    double cb = 0;
    for (int64_t n = 0; n < d.N; ++n) cb += static_cast<double>(in.C[g * d.N + n]) * in.B[g * d.N + n];
    EXPECT_NEAR(kept[h], std::exp(delta * in.A[h]), 1e-6);
    for (int64_t p = 0; p < d.P; ++p) {
      const int64_t c = h * d.P + p;
      EXPECT_NEAR(y[c], delta * in.x[c] * cb + in.D[h] * in.x[c], 1e-5) << "head " << h << ", channel " << c;
    }
  }
}

TEST(RefMamba2, Delta_ClampedIntoTheTimeStepLimit) {
  Mamba2Dims d{3, 1, 1, 1};
  d.dt_min = 0.01;
  d.dt_max = 0.5;
  const float dt[3] = {-30.0f, 0.0f, 30.0f}, bias[3] = {0.0f, -1.0f, 0.0f};
  float delta[3];
  mamba2_delta(d, dt, bias, delta);
  EXPECT_FLOAT_EQ(delta[0], 0.01f);                               // softplus ≈ 1e-13, raised to dt_min
  EXPECT_NEAR(delta[1], std::log1p(std::exp(-1.0)), 1e-7);          // inside the limit: softplus itself
  EXPECT_FLOAT_EQ(delta[2], 0.5f);                                // 30 (past the softplus threshold), cut to dt_max
  Mamba2Dims open{3, 1, 1, 1};                                    // the default (0, ∞) leaves it alone
  mamba2_delta(open, dt, bias, delta);
  EXPECT_FLOAT_EQ(delta[2], 30.0f);
}

TEST(RefMamba2, GatedRmsNorm_GateThenNormalisePerGroup) {
  // y = (1, 2, 3, 4), z large (silu(z) ≈ z), w = 1: per group of 2, (a, b)·z / rms((a, b)·z).
  const float z[4] = {30, 30, 30, 30}, w[4] = {1, 1, 2, 1};
  float y1[4] = {1, 2, 3, 4}, y2[4] = {1, 2, 3, 4};
  gated_rmsnorm(y1, z, w, 4, 4, 0.0);  // one group (Bamba)
  const double rms4 = std::sqrt((1 + 4 + 9 + 16) / 4.0);
  EXPECT_NEAR(y1[0], 1 / rms4, 1e-6);
  EXPECT_NEAR(y1[2], 2 * 3 / rms4, 1e-6);
  gated_rmsnorm(y2, z, w, 4, 2, 0.0);  // two groups (Mamba-2 with G = 2)
  EXPECT_NEAR(y2[0], 1 / std::sqrt(2.5), 1e-6);
  EXPECT_NEAR(y2[1], 2 / std::sqrt(2.5), 1e-6);
  EXPECT_NEAR(y2[2], 2 * 3 / std::sqrt(12.5), 1e-6);
  EXPECT_NEAR(y2[3], 4 / std::sqrt(12.5), 1e-6);
  float y3[2] = {1, 1};
  const float zneg[2] = {-30, 0}, w1[2] = {1, 1};  // silu(−30) ≈ 0, silu(0) = 0: all gated away
  gated_rmsnorm(y3, zneg, w1, 2, 2, 1e-6);
  EXPECT_NEAR(y3[0], 0.0, 1e-6);
  EXPECT_EQ(y3[1], 0.0f);
}
