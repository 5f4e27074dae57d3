// Closed-form tests of the instruments' math (issue 3): attention row statistics under the three
// normalizers (Miller 2023; Xiao et al. 2023, Dong, Cordonnier & Loukas 2021), rank-to-1 distance (Dong, Cordonnier & Loukas 2021), router statistics (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022) and the
// memory formulas (Gu & Dao 2023, Lieber et al. 2024).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/io/config.h"
#include "engine/probes/attention_probe.h"
#include "engine/probes/memory.h"
#include "engine/probes/rank1.h"
#include "engine/probes/router_probe.h"

using namespace hl;

TEST(AttentionProbe, Softmax_UniformRow_EntropyIsLogN) {
  for (int n : {1, 2, 7, 100, 4096}) {
    std::vector<float> z(n, 0.37f), p(n);
    AttnRowStats s;
    attention_row(z.data(), n, Normalizer::Softmax, 0.0f, p.data(), &s);
    EXPECT_NEAR(s.entropy, std::log(static_cast<double>(n)), 1e-5) << "n=" << n;
    EXPECT_NEAR(s.entropy_norm, n == 1 ? 0.0 : 1.0, 1e-5) << "n=" << n;
    EXPECT_FLOAT_EQ(s.mass, 1.0f);
    EXPECT_FLOAT_EQ(s.p_null, 0.0f);
    for (float v : p) EXPECT_NEAR(v, 1.0 / n, 1e-6);
  }
}

TEST(AttentionProbe, Softmax_OneHotRow_EntropyIsZero) {
  std::vector<float> z = {-200.f, 300.f, -150.f, 0.f}, p(4);
  AttnRowStats s;
  attention_row(z.data(), 4, Normalizer::Softmax, 0.0f, p.data(), &s);
  EXPECT_NEAR(s.entropy, 0.0, 1e-6);
  EXPECT_NEAR(p[1], 1.0, 1e-7);
  EXPECT_FLOAT_EQ(s.max_abs_logit, 300.f);
}

TEST(AttentionProbe, Softmax1_AllLogitsEqual_MassIsLogistic) {
  // Miller 2023: L equal logits z keep mass σ(z + ln L).
  for (int L : {512, 8192, 131072})
    for (float z : {-14.f, -9.f, -6.f, -1.f, 0.f, 3.f}) {
      std::vector<float> zz(L, z), p(L);
      AttnRowStats s;
      attention_row(zz.data(), L, Normalizer::Softmax1, 0.0f, p.data(), &s);
      const double expect = 1.0 / (1.0 + std::exp(-(z + std::log(static_cast<double>(L)))));
      EXPECT_NEAR(s.mass, expect, 2e-5) << "L=" << L << " z=" << z;
      EXPECT_NEAR(s.p_null, 1.0 - expect, 2e-5);
      // Entropy over L equal keys and the null slot, in closed form.
      const double pk = expect / L, pn = 1.0 - expect;
      const double h = -(expect > 0 ? expect * std::log(pk) : 0) - (pn > 0 ? pn * std::log(pn) : 0);
      EXPECT_NEAR(s.entropy, h, 1e-3 * std::max(1.0, h));
      EXPECT_NEAR(s.entropy_norm, h / std::log(L + 1.0), 1e-4);
    }
}

TEST(AttentionProbe, Softmax1_Figure1PanelA_AllBelowZero_MostMassOnNull) {
  // Six keys, every logit below zero: softmax renormalises to 1, softmax-1 keeps ≈ 0.17 and sends
  // ≈ 0.83 to the null slot (Miller 2023; Xiao et al. 2023).
  std::vector<float> z = {-3.1f, -3.6f, -3.3f, -3.5f, -3.2f, -3.6f}, p(6);
  AttnRowStats soft, one;
  attention_row(z.data(), 6, Normalizer::Softmax, 0.0f, p.data(), &soft);
  attention_row(z.data(), 6, Normalizer::Softmax1, 0.0f, p.data(), &one);
  double sum = 0;
  for (float v : z) sum += std::exp(v);
  EXPECT_FLOAT_EQ(soft.mass, 1.0f);
  EXPECT_NEAR(one.mass, sum / (1 + sum), 1e-6);
  EXPECT_NEAR(one.mass, 0.17, 0.01);
  EXPECT_GT(one.p_null, 0.8);
  // Panel B: one logit at 6 — the two normalizers nearly agree; the null gets ≈ 0.25 %.
  z[2] = 6.0f;
  attention_row(z.data(), 6, Normalizer::Softmax1, 0.0f, p.data(), &one);
  EXPECT_NEAR(one.p_null, 0.0025, 0.0003);
}

TEST(AttentionProbe, Sink_ZeroLogitEqualsSoftmax1_AndLearnedSinkShiftsTheGate) {
  std::vector<float> z = {0.5f, -1.0f, 2.0f}, p1(3), p2(3);
  AttnRowStats a, b;
  attention_row(z.data(), 3, Normalizer::Softmax1, 0.0f, p1.data(), &a);
  attention_row(z.data(), 3, Normalizer::Sink, 0.0f, p2.data(), &b);
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(p1[j], p2[j]);
  EXPECT_FLOAT_EQ(a.entropy, b.entropy);
  attention_row(z.data(), 3, Normalizer::Sink, 1.5f, p2.data(), &b);
  const double d = std::exp(0.5) + std::exp(-1.0) + std::exp(2.0) + std::exp(1.5);
  EXPECT_NEAR(b.p_null, std::exp(1.5) / d, 1e-6);
  EXPECT_NEAR(p2[2], std::exp(2.0) / d, 1e-6);
}

TEST(AttentionProbe, LargeLogits_StayFinite) {
  std::vector<float> z = {1e4f, 1e4f - 1.0f, -1e4f}, p(3);
  AttnRowStats s;
  attention_row(z.data(), 3, Normalizer::Softmax1, 0.0f, p.data(), &s);
  EXPECT_TRUE(std::isfinite(s.entropy));
  EXPECT_NEAR(p[0] + p[1], 1.0, 1e-6);
  EXPECT_NEAR(s.p_null, 0.0, 1e-9);
}

namespace {
double direct_rank1(const std::vector<double>& X, int64_t T, int64_t d) {
  std::vector<double> mean(d, 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) mean[i] += X[t * d + i];
  for (double& m : mean) m /= static_cast<double>(T);
  double num = 0, den = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) {
      const double c = X[t * d + i] - mean[i];
      num += c * c;
      den += X[t * d + i] * X[t * d + i];
    }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}
}  // namespace

TEST(Rank1Distance, IdenticalRows_IsZero) {
  Rank1Tracker r(5);
  std::vector<float> x = {1.f, -2.f, 3.f, 0.5f, 7.f};
  for (int t = 0; t < 1000; ++t) EXPECT_EQ(r.add(x.data()), 0.0f) << "t=" << t;
}

TEST(Rank1Distance, OneRowOrZeroMatrix_IsZero) {
  Rank1Tracker r(3);
  std::vector<float> z = {0, 0, 0};
  EXPECT_EQ(r.add(z.data()), 0.0f);
  EXPECT_EQ(r.add(z.data()), 0.0f);
  Rank1Tracker q(2);
  std::vector<float> x = {3, 4};
  EXPECT_EQ(q.add(x.data()), 0.0f);
}

TEST(Rank1Distance, ConstructedMatrix_KnownDistance) {
  // Rows (1, 0) and (-1, 0): mean 0, so the distance is ‖X‖/‖X‖ = 1.
  Rank1Tracker r(2);
  std::vector<float> a = {1, 0}, b = {-1, 0};
  r.add(a.data());
  EXPECT_FLOAT_EQ(r.add(b.data()), 1.0f);
  // Rows (1, 1) and (1, -1): mean (1, 0); ‖X − 1x̄ᵀ‖² = 2, ‖X‖² = 4 → √0.5.
  Rank1Tracker q(2);
  std::vector<float> c = {1, 1}, d = {1, -1};
  q.add(c.data());
  EXPECT_NEAR(q.add(d.data()), std::sqrt(0.5), 1e-7);
}

TEST(Rank1Distance, HundredThousandTokens_MatchesFloat64Direct) {
  // A large common offset with a small spread: the naive Σ‖x‖² − T‖x̄‖² loses every digit here.
  const int64_t T = 100000, d = 16;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> X(static_cast<size_t>(T * d));
  std::vector<float> row(d);
  Rank1Tracker r(d);
  float got = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      row[i] = static_cast<float>(1000.0 + 10.0 * i + 1e-3 * nd(rng));
      X[t * d + i] = row[i];
    }
    got = r.add(row.data());
    if (t == 9 || t == 999) EXPECT_NEAR(got, direct_rank1(X, t + 1, d), 1e-6 * direct_rank1(X, t + 1, d) + 1e-12);
  }
  const double want = direct_rank1(X, T, d);
  EXPECT_NEAR(got, want, 1e-5 * want) << "want " << want;
}

TEST(Router, Route_SoftmaxTopkAndLse) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f}, probs(4);
  std::vector<int32_t> topk(2);
  const float lse = route(logits.data(), 4, 2, probs.data(), topk.data());
  double s = 0;
  for (float l : logits) s += std::exp(l);
  EXPECT_NEAR(lse, std::log(s), 1e-6);
  EXPECT_NEAR(probs[1], std::exp(2.0) / s, 1e-6);
  EXPECT_EQ(topk[0], 1);  // tie between 1 and 3: lower index first
  EXPECT_EQ(topk[1], 3);
}

TEST(Router, BalanceLoss_UniformIsOne_CollapseIsE) {
  const int64_t E = 8, T = 64;
  std::vector<float> probs(T * E, 1.0f / E), lse(T, 0.0f);
  std::vector<int32_t> top1(T);
  for (int64_t t = 0; t < T; ++t) top1[t] = static_cast<int32_t>(t % E);
  RouterWindowStats u = router_window(probs.data(), E, top1.data(), 1, lse.data(), 1, T, E, 1);
  EXPECT_NEAR(u.balance_loss, 1.0, 1e-12);
  EXPECT_NEAR(u.max_load, 1.0 / E, 1e-12);
  // Total collapse under top-1: every token to expert 3 with probability 1.
  std::fill(probs.begin(), probs.end(), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    probs[t * E + 3] = 1.0f;
    top1[t] = 3;
  }
  RouterWindowStats c = router_window(probs.data(), E, top1.data(), 1, lse.data(), 1, T, E, 1);
  EXPECT_NEAR(c.balance_loss, static_cast<double>(E), 1e-12);
  EXPECT_NEAR(c.load[3], 1.0, 1e-12);
  // Top-2 collapse onto two experts: maximum E/k.
  std::vector<int32_t> top2(T * 2);
  std::fill(probs.begin(), probs.end(), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    top2[t * 2] = 0;
    top2[t * 2 + 1] = 1;
    probs[t * E] = probs[t * E + 1] = 0.5f;
  }
  RouterWindowStats k2 = router_window(probs.data(), E, top2.data(), 2, lse.data(), 1, T, E, 2);
  EXPECT_NEAR(k2.balance_loss, E / 2.0, 1e-12);
}

TEST(Router, ZLoss_IsMeanSquaredLse) {
  std::vector<float> probs(3 * 2, 0.5f), lse = {1.0f, -2.0f, 3.0f};
  std::vector<int32_t> top = {0, 1, 0};
  RouterWindowStats s = router_window(probs.data(), 2, top.data(), 1, lse.data(), 1, 3, 2, 1);
  EXPECT_NEAR(s.z_loss, (1.0 + 4.0 + 9.0) / 3.0, 1e-12);
}

TEST(Router, MaxWindowLoad_FindsTheWorstBurst) {
  std::vector<int32_t> top = {0, 1, 0, 1, 2, 2, 2, 2, 0, 1};
  EXPECT_NEAR(router_max_window_load(top.data(), 1, 10, 3, 1, 4), 1.0, 1e-12);
  EXPECT_NEAR(router_max_window_load(top.data(), 1, 10, 3, 1, 10), 0.4, 1e-12);
}

TEST(Memory, JambaV01_At256k_Is4GiBAnd32GiB) {
  JambaConfig c;  // the defaults are Jamba-v0.1's architecture
  c.hidden_size = 4096;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.attn_layer_period = 8;
  c.attn_layer_offset = 4;
  MemoryReport r = memory_report(c, LayerSchedule::from_config(c), 262144, 2);
  EXPECT_EQ(r.kv_bytes, 4294967296LL);
  EXPECT_EQ(r.kv_bytes_all_attention, 34359738368LL);
  EXPECT_EQ(r.kv_bytes_all_mamba, 0);
  EXPECT_EQ(r.state_bytes, 28LL * (8192 * 4 + 8192 * 16) * 2);
  EXPECT_EQ(r.state_bytes_all_mamba, 32LL * (8192 * 4 + 8192 * 16) * 2);
}

TEST(Memory, MambaPaper_ElementCountsAt32k) {
  // One layer of width d = 2048 (nkv·hd = d), 32k tokens: cache 2Ld = 1.34e8 elements; the SSM
  // state 2dN = 6.55e4 elements (Di = 2d, N = 16), i.e. the d_state part of the state formula.
  JambaConfig c;
  c.hidden_size = 2048;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 16;
  c.mamba_expand = 2;
  c.mamba_d_state = 16;
  c.mamba_d_conv = 4;
  EXPECT_EQ(kv_cache_bytes(c, 1, 32768, 1), 134217728LL);
  EXPECT_NEAR(kv_cache_bytes(c, 1, 32768, 1), 1.34e8, 0.005e8);
  const int64_t state = ssm_state_bytes(c, 1, 1) - c.mamba_inner() * c.mamba_d_conv;
  EXPECT_EQ(state, 65536);
  EXPECT_NEAR(state, 6.55e4, 0.005e4);
}
