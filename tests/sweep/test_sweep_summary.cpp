// The numbers of the app's sweep statistics window (sessions/sweep_summary.h) against hand-computed
// values: box quartiles and whiskers from the sketch, histogram shares pooled over cells (linear and
// log10 ranges), the router's load and balance over the set, axis labels from the schedule, and
// whether two sweeps can be compared.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "sessions/sweep_summary.h"
#include "tests/sweep/sweep_test_util.h"

namespace {

TEST(SweepSummary, BoxFromSketchQuantiles) {
  hl::SketchParams sp;  // α = 0.01
  hl::Distribution d;
  d.reset({2});
  for (int v = 1; v <= 100; ++v) d.add(0, v, sp, {0, 100, false});
  const hl::CellBox b = hl::cell_box(d, 0, sp);
  EXPECT_EQ(b.count, 100);
  EXPECT_DOUBLE_EQ(b.mean, 50.5);
  EXPECT_DOUBLE_EQ(b.min, 1);
  EXPECT_DOUBLE_EQ(b.max, 100);
  // Ranks q·99: 4.95 → the 5th value, 24.75 → 25th, 49.5 → 50th, 74.25 → 75th, 94.05 → 95th; each
  // within α of its value.
  EXPECT_NEAR(b.whisker_lo, 5, 5 * 0.01);
  EXPECT_NEAR(b.q25, 25, 25 * 0.01);
  EXPECT_NEAR(b.median, 50, 50 * 0.01);
  EXPECT_NEAR(b.q75, 75, 75 * 0.01);
  EXPECT_NEAR(b.whisker_hi, 95, 95 * 0.01);
  EXPECT_LT(b.q25, b.median);
  EXPECT_LT(b.median, b.q75);
  // An empty cell: NaN everywhere, count 0.
  const hl::CellBox e = hl::cell_box(d, 1, sp);
  EXPECT_EQ(e.count, 0);
  EXPECT_TRUE(std::isnan(e.median));
  EXPECT_TRUE(std::isnan(e.mean));
}

TEST(SweepSummary, HistogramSharesPooledOverCells) {
  hl::SketchParams sp;
  const hl::HistRange r{0, 4, false};  // bins of 0.125
  hl::Distribution d;
  d.reset({2});
  for (double v : {0.1, 0.1, 1.0, 3.99, 10.0}) d.add(0, v, sp, r);  // bins 0, 0, 8, 31, 31 (10 off the end)
  d.add(1, 1.0, sp, r);
  const hl::HistShares one = hl::hist_shares(d, {0}, r);
  ASSERT_EQ(one.share.size(), 32u);
  EXPECT_EQ(one.total, 5);
  EXPECT_DOUBLE_EQ(one.width, 0.125);
  EXPECT_DOUBLE_EQ(one.centers[0], 0.0625);
  EXPECT_DOUBLE_EQ(one.centers[31], 3.9375);
  EXPECT_DOUBLE_EQ(one.share[0], 0.4);
  EXPECT_DOUBLE_EQ(one.share[8], 0.2);
  EXPECT_DOUBLE_EQ(one.share[31], 0.4);
  EXPECT_DOUBLE_EQ(one.share[1], 0.0);
  const hl::HistShares both = hl::hist_shares(d, {0, 1}, r);
  EXPECT_EQ(both.total, 6);
  EXPECT_EQ(both.counts[8], 2);
  EXPECT_DOUBLE_EQ(both.share[8], 2.0 / 6.0);
  // An empty cell: shares 0, not NaN.
  hl::Distribution z;
  z.reset({1});
  EXPECT_DOUBLE_EQ(hl::hist_shares(z, {0}, r).share[0], 0.0);
}

TEST(SweepSummary, HistogramLog10Range) {
  hl::SketchParams sp;
  const hl::HistRange r{-4, 2, true};  // log10|x| in bins of 0.1875
  hl::Distribution d;
  d.reset({1});
  d.add(0, 0.01, sp, r);    // log10 = −2: (2 / 6)·32 = 10.67 → bin 10
  d.add(0, -100.0, sp, r);  // log10 |x| = 2: the last bin
  d.add(0, 0.0, sp, r);     // 0 → the first bin
  const hl::HistShares h = hl::hist_shares(d, {0}, r);
  EXPECT_TRUE(h.log10);
  EXPECT_DOUBLE_EQ(h.centers[10], -4 + 10.5 * 0.1875);
  EXPECT_EQ(h.counts[10], 1);
  EXPECT_EQ(h.counts[31], 1);
  EXPECT_EQ(h.counts[0], 1);
}

TEST(SweepSummary, RouterLoadAndBalanceOverTheSet) {
  hl::RouterSums r;
  r.moe = 2;
  r.experts = 4;
  r.top_k = 2;
  r.topk_count = {10, 5, 3, 2, 0, 0, 0, 0};
  r.prob_sum = {4, 3, 2, 1, 0, 0, 0, 0};
  r.tokens = {10, 0};
  r.lse_sq_sum = {20, 0};
  const std::vector<hl::RouterLayerLoad> l = hl::router_loads(r);
  ASSERT_EQ(l.size(), 2u);
  ASSERT_EQ(l[0].load.size(), 4u);
  // f_i = count / (T·k) = count / 20; P_i = prob_sum / T.
  EXPECT_DOUBLE_EQ(l[0].load[0], 0.5);
  EXPECT_DOUBLE_EQ(l[0].load[1], 0.25);
  EXPECT_DOUBLE_EQ(l[0].load[2], 0.15);
  EXPECT_DOUBLE_EQ(l[0].load[3], 0.1);
  EXPECT_DOUBLE_EQ(l[0].importance[0], 0.4);
  // E · Σ f_i P_i = 4 · (0.2 + 0.075 + 0.03 + 0.01) = 1.26; z = 20 / 10; max f = 0.5.
  EXPECT_NEAR(l[0].balance_loss, 1.26, 1e-12);
  EXPECT_DOUBLE_EQ(l[0].z_loss, 2.0);
  EXPECT_DOUBLE_EQ(l[0].max_load, 0.5);
  EXPECT_EQ(l[0].tokens, 10);
  EXPECT_EQ(l[1].tokens, 0);
}

TEST(SweepSummary, AxesFromTheManifestSchedule) {
  const hl::LayerSchedule s = hl::test::demoSchedule();
  hl::SweepFile f;
  f.manifest = hl::test::sweepExtra(s);
  const hl::SweepAxes ax = hl::sweep_axes(f.manifest);
  ASSERT_EQ(ax.attention.size(), 2u);  // demo-random: attention at i % 4 == 2
  EXPECT_EQ(hl::axis_label(ax, "A_n", 1), "L6");
  EXPECT_EQ(hl::axis_label(ax, "M_n", 0), "L0");
  EXPECT_EQ(hl::axis_label(ax, "X_n", 0), "L1");
  EXPECT_EQ(hl::axis_label(ax, "nh", 3), "h3");
  EXPECT_EQ(hl::axis_label(ax, "L+1", 8), "d8");
  EXPECT_EQ(hl::axis_label(ax, "A_n", 7), "#7");  // past the schedule: the index
  EXPECT_EQ(hl::axis_names("(A_n, nh)"), (std::vector<std::string>{"A_n", "nh"}));
  EXPECT_EQ(hl::axis_names("(L+1)"), (std::vector<std::string>{"L+1"}));
  EXPECT_TRUE(hl::axis_names("()").empty());
  hl::Distribution d;
  d.reset({2, 4});
  EXPECT_EQ(hl::cell_grid(d).rows, 2);
  EXPECT_EQ(hl::cell_grid(d).cols, 4);
  d.reset({5});
  EXPECT_EQ(hl::cell_grid(d).rows, 1);
  EXPECT_EQ(hl::cell_grid(d).cols, 5);
  d.reset({});
  EXPECT_EQ(hl::cell_grid(d).cols, 1);
}

TEST(SweepSummary, CompareSweeps) {
  const hl::LayerSchedule s = hl::test::demoSchedule();
  hl::SweepFile a, b;
  a.stats = hl::SweepStats::for_schedule(s);
  b.stats = hl::SweepStats::for_schedule(s);
  a.manifest = hl::test::sweepExtra(s, "softmax");
  b.manifest = hl::test::sweepExtra(s, "softmax1");
  hl::SweepComparison c = hl::compare_sweeps(a, b);
  EXPECT_EQ(c.mismatch, "");
  ASSERT_EQ(c.differences.size(), 1u);
  EXPECT_EQ(c.differences[0], "options.normalizer: softmax vs softmax1");
  // Another shape: one line naming the instrument and both shapes.
  b.stats.dists[0].reset({1, b.stats.dists[0].shape[1]});
  c = hl::compare_sweeps(a, b);
  const std::string nh = std::to_string(a.stats.dists[0].shape[1]);
  EXPECT_EQ(c.mismatch, "different schedule shapes: attn_entropy is (2, " + nh + ") in A, (1, " + nh + ") in B");
  // Another schedule strip is said first.
  b.manifest["schedule"]["mixers"] = "MMMMMMMM";
  c = hl::compare_sweeps(a, b);
  EXPECT_EQ(c.mismatch.rfind("different layer schedules: ", 0), 0u) << c.mismatch;
}

TEST(SweepSummary, HeaderLines) {
  const hl::LayerSchedule s = hl::test::demoSchedule();
  hl::SweepFile f;
  f.stats = hl::SweepStats::for_schedule(s);
  f.stats.prompts = 3;
  f.stats.tokens = 42;
  f.manifest = hl::test::sweepExtra(s, "softmax1");
  const auto h = hl::sweep_header(f);
  std::map<std::string, std::string> m(h.begin(), h.end());
  EXPECT_EQ(m["prompts"], "3 prompts, 42 tokens from prompts.jsonl");
  EXPECT_EQ(m["options"], "generate=4, normalizer=softmax1");
  EXPECT_NE(m["checkpoint"].find("demo-random"), std::string::npos);
  EXPECT_EQ(m["schedule"], s.describe());
}

}  // namespace
