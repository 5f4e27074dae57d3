// RunStats (issue 17 item 2): statistics of a whole run extended as records arrive equal the same
// statistics computed from scratch over every prefix — router windows equal router_window bit for
// bit, step-time percentiles equal a sort of the times, residual maxima a scan — and a replaced run
// or a replaced last record is counted again, not extended.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "engine/probes/router_probe.h"
#include "sessions/run_stats.h"

namespace {

constexpr int E = 6, K = 2, X = 2, L = 3;

hl::TokenTrace randomRecord(std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  hl::TokenTrace r;
  r.step_seconds = 1e-3 * (1.0 + 10.0 * u(rng));
  for (int o = 0; o < X; ++o) {
    std::vector<float> p(E);
    float sum = 0;
    for (float& x : p) sum += x = u(rng) + 1e-3f;
    for (float& x : p) r.router_probs.push_back(x / sum);
    std::vector<int> idx(E);
    for (int e = 0; e < E; ++e) idx[e] = e;
    std::shuffle(idx.begin(), idx.end(), rng);
    for (int j = 0; j < K; ++j) r.router_topk.push_back(idx[j]);
    r.router_lse.push_back(2.0f * u(rng) - 1.0f);
  }
  for (int c = 0; c <= L; ++c) r.resid_max_abs.push_back(100.0f * u(rng));
  return r;
}

// Tokens 0..n-1 of MoE layer `ord`, as the view computed them before: router_window over copies.
hl::RouterWindowStats fromScratch(const hl::Run& run, int ord, int n) {
  std::vector<float> probs, lse;
  std::vector<int32_t> topk;
  for (int t = 0; t < n; ++t) {
    const hl::TokenTrace& r = run.records[t];
    probs.insert(probs.end(), r.router_probs.begin() + ord * E, r.router_probs.begin() + (ord + 1) * E);
    topk.insert(topk.end(), r.router_topk.begin() + ord * K, r.router_topk.begin() + (ord + 1) * K);
    lse.push_back(r.router_lse[ord]);
  }
  return hl::router_window(probs.data(), E, topk.data(), K, lse.data(), 1, n, E, K);
}

double percentileOf(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

TEST(RunStats, ExtendedTokenByToken_EqualsFromScratchOverEveryPrefix) {
  std::mt19937 rng(7);
  hl::Run run;
  hl::RunStats stats;
  const hl::RunStats::Shape shape{E, K, X, L};
  for (int T = 1; T <= 40; ++T) {
    run.records.push_back(randomRecord(rng));
    if (T % 3 == 0) run.records.push_back(randomRecord(rng)), ++T;  // sometimes two at once
    stats.update(run, shape);
    ASSERT_EQ(stats.tokens(), T);
    for (int ord = 0; ord < X; ++ord) {
      for (int n : {1, T / 2 + 1, T}) {
        const hl::RouterWindowStats a = stats.window(ord, n), b = fromScratch(run, ord, n);
        EXPECT_EQ(a.load, b.load);
        EXPECT_EQ(a.importance, b.importance);  // the same sums in the same order: bit for bit
        EXPECT_EQ(a.balance_loss, b.balance_loss);
        EXPECT_EQ(a.z_loss, b.z_loss);
        EXPECT_EQ(a.max_load, b.max_load);
      }
      for (int t = 0; t < T; ++t) {
        const hl::RouterWindowStats w = fromScratch(run, ord, t + 1);
        ASSERT_NEAR(stats.balance(ord)[t], w.balance_loss, 1e-12 * std::max(1.0, w.balance_loss));
        ASSERT_EQ(stats.z_loss(ord)[t], w.z_loss);
        ASSERT_EQ(stats.max_load(ord)[t], w.max_load);
      }
    }
    std::vector<double> steps;
    for (int t = 1; t < T; ++t) steps.push_back(run.records[t].step_seconds);
    if (!steps.empty()) {
      EXPECT_EQ(stats.step_percentile(50), percentileOf(steps, 50));
      EXPECT_EQ(stats.step_percentile(99), percentileOf(steps, 99));
    } else {
      EXPECT_TRUE(std::isnan(stats.step_percentile(50)));
    }
    for (int c = 0; c <= L; ++c) {
      double mx = -1;
      int at = -1;
      for (int t = 0; t < T; ++t)
        if (run.records[t].resid_max_abs[c] > mx) mx = run.records[t].resid_max_abs[c], at = t;
      EXPECT_EQ(stats.depth_max()[c], mx);
      EXPECT_EQ(stats.depth_arg()[c], at);
    }
  }
}

TEST(RunStats, AReplacedOrEditedRun_IsCountedAgain) {
  std::mt19937 rng(11);
  const hl::RunStats::Shape shape{E, K, X, L};
  hl::Run run;
  for (int t = 0; t < 10; ++t) run.records.push_back(randomRecord(rng));
  hl::RunStats stats;
  stats.update(run, shape);
  const hl::RouterWindowStats before = stats.window(0, 10);

  // A reset run of the same length, new records: not an extension of the old counts.
  hl::Run other;
  for (int t = 0; t < 10; ++t) other.records.push_back(randomRecord(rng));
  stats.update(other, shape);
  const hl::RouterWindowStats fresh = fromScratch(other, 0, 10);
  EXPECT_EQ(stats.window(0, 10).importance, fresh.importance);
  EXPECT_NE(stats.window(0, 10).importance, before.importance);

  // The last counted record replaced by another (a step taken again).
  hl::RunStats again;
  again.update(run, shape);
  (void)again.window(1, 10);
  hl::TokenTrace redo = run.records[9];
  redo.resid_max_abs[0] = 1e6f;
  redo.router_lse[1] = 50.0f;
  run.records.pop_back();
  run.records.push_back(std::move(redo));
  again.update(run, shape);
  EXPECT_EQ(again.depth_max()[0], 1e6);
  EXPECT_EQ(again.depth_arg()[0], 9);
  EXPECT_EQ(again.window(1, 10).z_loss, fromScratch(run, 1, 10).z_loss);

  // A shorter run (a reset that has fed fewer tokens) too.
  hl::Run shorter;
  for (int t = 0; t < 4; ++t) shorter.records.push_back(run.records.ptr(static_cast<size_t>(t)));
  again.update(shorter, shape);
  EXPECT_EQ(again.tokens(), 4);
  EXPECT_EQ(again.window(1, 4).z_loss, fromScratch(shorter, 1, 4).z_loss);
}

}  // namespace
