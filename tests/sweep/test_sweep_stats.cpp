// Sweep statistics without the binary (issue 21 items 1 and 4): the quantile sketch against exact
// quantiles and its merge bit for bit in any order, Chan's merge against one pass, the stats file
// round trip and its corruption table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "sessions/sweep_file.h"
#include "sessions/sweep_summary.h"
#include "sessions/sweep_stats.h"

namespace {

const hl::HistRange kRange{0, 10, false};

std::vector<double> values(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::lognormal_distribution<double> ln(0.0, 2.0);
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) {
    double x = ln(g);
    if (i % 17 == 0) x = 0.0;
    if (i % 5 == 0) x = -x;
    v.push_back(x);
  }
  return v;
}

hl::Distribution fill(const std::vector<double>& v, size_t lo, size_t hi, const hl::SketchParams& sp) {
  hl::Distribution d;
  d.reset({1});
  for (size_t i = lo; i < hi; ++i) d.add(0, v[i], sp, kRange);
  return d;
}

TEST(SweepSketch, QuantilesWithinTheStatedAccuracy) {
  for (double alpha : {0.01, 0.05}) {
    hl::SketchParams sp;
    sp.alpha = alpha;
    const std::vector<double> v = values(20000, 7);
    const hl::Distribution d = fill(v, 0, v.size(), sp);
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    for (double q : {0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0}) {
      const double exact = s[static_cast<size_t>(std::floor(q * static_cast<double>(s.size() - 1)))];
      const double est = d.quantile(0, q, sp);
      EXPECT_LE(std::fabs(est - exact), alpha * std::fabs(exact) + 1e-300) << "alpha " << alpha << " q " << q;
    }
  }
}

TEST(SweepSketch, MergeIsExactAndOrderIndependentBitForBit) {
  const hl::SketchParams sp;
  const std::vector<double> v = values(9000, 11);
  const hl::Distribution whole = fill(v, 0, v.size(), sp);
  // Three splits merged in different orders.
  const hl::Distribution a = fill(v, 0, 1000, sp), b = fill(v, 1000, 6500, sp), c = fill(v, 6500, 9000, sp);
  hl::Distribution abc = a, cba = c, bac = b;
  abc.merge(b), abc.merge(c);
  cba.merge(b), cba.merge(a);
  bac.merge(a), bac.merge(c);
  for (const hl::Distribution* m : {&abc, &cba, &bac}) {
    EXPECT_EQ(m->sketch, whole.sketch);
    EXPECT_EQ(m->hist, whole.hist);
    EXPECT_EQ(m->count, whole.count);
    EXPECT_EQ(std::memcmp(&m->min[0], &whole.min[0], 8), 0);
    EXPECT_EQ(std::memcmp(&m->max[0], &whole.max[0], 8), 0);
    for (double q : hl::stats_quantile_levels()) {
      const double x = m->quantile(0, q, sp), y = whole.quantile(0, q, sp);
      EXPECT_EQ(std::memcmp(&x, &y, 8), 0) << q;
    }
  }
}

TEST(SweepMoments, ChanMergeEqualsOnePassAndTwoPass) {
  const hl::SketchParams sp;
  std::vector<double> v = values(5000, 3);
  for (double& x : v) x += 1e4;  // a large mean: the naive Σx² formula would lose digits here
  const hl::Distribution whole = fill(v, 0, v.size(), sp);
  hl::Distribution m = fill(v, 0, 1234, sp);
  m.merge(fill(v, 1234, 4000, sp));
  m.merge(fill(v, 4000, 5000, sp));
  long double mean = 0, m2 = 0;
  for (double x : v) mean += x;
  mean /= v.size();
  for (double x : v) m2 += (x - mean) * (x - mean);
  for (const hl::Distribution* d : {&whole, static_cast<const hl::Distribution*>(&m)}) {
    EXPECT_NEAR(d->mean[0], static_cast<double>(mean), 1e-12 * std::fabs(static_cast<double>(mean)));
    EXPECT_NEAR(d->m2[0], static_cast<double>(m2), 1e-10 * static_cast<double>(m2));
  }
  EXPECT_NEAR(m.variance(0), whole.variance(0), 1e-12 * whole.variance(0));
}

hl::SweepStats sample_stats() {
  hl::SweepStats st;
  st.dists.resize(hl::sweep_instruments().size());
  const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {2, 3}, {2, 3}, {2, 3}, {4}, {7}, {7}, {}, {2, 4}, {4, 2}, {4, 2}};
  std::mt19937 g(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (size_t i = 0; i < shapes.size(); ++i) {
    st.dists[i].reset(shapes[i]);
    for (int64_t c = 0; c < st.dists[i].cells(); ++c)
      for (int t = 0; t < 20; ++t) st.dists[i].add(c, u(g) * (i + 1), st.sketch, hl::sweep_instruments()[i].hist);
  }
  st.router.moe = 2, st.router.experts = 4, st.router.top_k = 2;
  st.router.topk_count = {5, 10, 15, 10, 20, 0, 10, 10};
  st.router.prob_sum = {4.0, 5.5, 6.0, 4.5, 9.0, 1.0, 5.0, 5.0};
  st.router.tokens = {20, 20};
  st.router.lse_sq_sum = {12.5, 30.25};
  st.prompts = 3;
  st.tokens = 20;
  return st;
}

TEST(SweepFile, RoundTripExactAndF32) {
  const hl::SweepStats st = sample_stats();
  const std::vector<uint8_t> exact = hl::serialize_sweep_stats(st, {{"note", "x"}}, true, nullptr);
  const hl::SweepFile e = hl::parse_sweep_stats(exact.data(), exact.size(), "exact");
  ASSERT_TRUE(e.exact);
  for (size_t i = 0; i < st.dists.size(); ++i) {
    EXPECT_EQ(e.stats.dists[i].sketch, st.dists[i].sketch);
    EXPECT_EQ(e.stats.dists[i].mean, st.dists[i].mean);  // bit-exact doubles
    EXPECT_EQ(e.stats.dists[i].m2, st.dists[i].m2);
  }
  EXPECT_EQ(e.stats.router.prob_sum, st.router.prob_sum);
  EXPECT_EQ(e.manifest["note"], "x");
  const std::vector<uint8_t> f32 = hl::serialize_sweep_stats(st, {}, false, nullptr);
  const hl::SweepFile f = hl::parse_sweep_stats(f32.data(), f32.size(), "f32");
  EXPECT_FALSE(f.exact);
  EXPECT_EQ(f.stats.dists[5].count, st.dists[5].count);
  EXPECT_NEAR(f.stats.dists[5].mean[3], st.dists[5].mean[3], 1e-6 * st.dists[5].mean[3]);
  // The derived router statistics are the router view's (router_stats_from_sums).
  const hl::SafetensorsFile sf = hl::SafetensorsFile::parse(f32.data(), f32.size(), "f32");
  float bal[2];
  std::memcpy(bal, sf.find("router.balance_loss")->data, 8);
  // Layer 0: f = (5,10,15,10)/40, P = (4,5.5,6,4.5)/20, balance = 4 Σ f P.
  EXPECT_NEAR(bal[0], 4 * (5 * 4.0 + 10 * 5.5 + 15 * 6.0 + 10 * 4.5) / 40.0 / 20.0, 1e-6);
}

// A file rebuilt from `bytes` with `edit` applied to its manifest and tensors.
struct Tensor {
  hl::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using Edit = std::function<void(nlohmann::ordered_json&, std::map<std::string, Tensor>&)>;
std::vector<uint8_t> edited(const std::vector<uint8_t>& bytes, const Edit& edit) {
  const hl::SafetensorsFile f = hl::SafetensorsFile::parse(bytes.data(), bytes.size(), "orig");
  nlohmann::ordered_json m = nlohmann::ordered_json::parse(f.metadata().at(hl::kStatsMetadataKey));
  std::map<std::string, Tensor> ts;
  for (const hl::TensorInfo& t : f.tensors())
    ts[t.name] = {t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes())};
  edit(m, ts);
  hl::SafetensorsWriter w;
  w.set_metadata(hl::kStatsMetadataKey, m.dump());
  for (const auto& [n, t] : ts) w.add(n, t.dtype, t.shape, t.bytes.data(), t.bytes.size());
  return w.serialize();
}

template <class T>
void poke(Tensor& t, size_t i, T v) {
  std::memcpy(t.bytes.data() + i * sizeof(T), &v, sizeof(T));
}

TEST(SweepFile, CorruptionTable) {
  const std::vector<uint8_t> good = hl::serialize_sweep_stats(sample_stats(), {}, false, nullptr);
  ASSERT_NO_THROW(hl::parse_sweep_stats(good.data(), good.size(), "stats.hlstats"));
  struct Case {
    const char* name;
    Edit edit;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"no manifest", [](auto& m, auto&) { m = "x"; }, "not a JSON object"},
      {"other format", [](auto& m, auto&) { m["format"] = "hybridlens-session"; }, "format is not"},
      {"format a number", [](auto& m, auto&) { m["format"] = 3; }, "manifest: "},
      {"instrument not an object", [](auto& m, auto&) { m["instruments"][2] = 5; },
       "instrument 2 must be 'attn_first_mass'"},
      {"storage", [](auto& m, auto&) { m["storage"] = "f16"; }, "allowed 'f32' or 'f64-bits'"},
      {"version", [](auto& m, auto&) { m["format_version"] = 99; },
       "format_version is 99, allowed an integer in [1, 2]"},
      {"accuracy", [](auto& m, auto&) { m["sketch"]["relative_accuracy"] = 0.9; },
       "relative_accuracy is 0.9, allowed [0.001, 0.5]"},
      {"instrument list", [](auto& m, auto&) { m["instruments"].erase(0); }, "instruments must list 11 instruments (format_version 2)"},
      {"version 1 lists nine", [](auto& m, auto&) { m["format_version"] = 1; },
       "instruments must list 9 instruments (format_version 1)"},
      {"hidden shape vs tensor", [](auto& m, auto&) { m["instruments"][9]["shape"] = {4, 3}; },
       "tensor 'ssm_hidden_entropy.count': shape"},
      {"huge shape",
       [](auto& m, auto&) {
         m["instruments"][0]["shape"] = {60000, 60000};
       },
       "cells, allowed at most"},
      {"shape vs tensor", [](auto& m, auto&) { m["instruments"][4]["shape"] = {5}; },
       "tensor 'ssm_delta_mean.count': shape (4,), expected (5,)"},
      {"negative count", [](auto&, auto& t) { poke<int64_t>(t["rank1_distance.count"], 2, -3); },
       "element 2 is -3, allowed [0, 2^53]"},
      {"count past 2^53", [](auto&, auto& t) { poke<int64_t>(t["router.topk_count"], 0, int64_t{1} << 62); },
       "allowed [0, 2^53]"},
      {"prompts past 2^53", [](auto& m, auto&) { m["prompts"] = int64_t{1} << 60; },
       "prompts is 1152921504606846976, allowed an integer in [0, 9007199254740992]"},
      {"min above max", [](auto&, auto& t) { poke<float>(t["attn_entropy.min"], 0, 1e30f); },
       "instrument 'attn_entropy': cell 0 has min"},
      {"negative m2", [](auto&, auto& t) { poke<float>(t["attn_entropy.m2"], 0, -1.0f); }, "m2 >= 0"},
      {"NaN mean", [](auto&, auto& t) { poke<float>(t["attn_entropy.mean"], 0, std::nanf("")); }, "(allowed: finite"},
      {"offsets past the keys", [](auto&, auto& t) { poke<int64_t>(t["attn_mass.sketch_offsets"], 1, 1 << 30); },
       "attn_mass.sketch_offsets"},
      {"too many buckets",
       [](auto&, auto& t) {
         Tensor& o = t["logit_entropy.sketch_offsets"];
         poke<int64_t>(o, 1, int64_t{1} << 40);
       },
       "buckets per cell"},
      {"key out of range", [](auto&, auto& t) { poke<int32_t>(t["router_probs.sketch_keys"], 0, 250000); },
       "router_probs.sketch_keys': element 0 is 250000"},
      {"key INT32_MIN", [](auto&, auto& t) { poke<int32_t>(t["router_probs.sketch_keys"], 0, std::numeric_limits<int32_t>::min()); },
       "router_probs.sketch_keys': element 0 is -2147483648"},
      {"keys not increasing",
       [](auto&, auto& t) {
         Tensor& k = t["resid_max_abs.sketch_keys"];
         int32_t a;
         std::memcpy(&a, k.bytes.data(), 4);
         poke<int32_t>(k, 1, a);
       },
       "increasing within a cell"},
      {"sketch sum", [](auto&, auto& t) { poke<int64_t>(t["attn_entropy.sketch_counts"], 0, 1000); },
       "counts 20 values, its sketch"},
      {"zero bucket count", [](auto&, auto& t) { poke<int64_t>(t["attn_entropy.sketch_counts"], 0, 0); },
       "allowed [1, 2^53]"},
      {"histogram sum", [](auto&, auto& t) { poke<int64_t>(t["ssm_delta_mean.hist"], 3, 99); }, "and its histogram"},
      {"missing tensor", [](auto&, auto& t) { t.erase("router.tokens"); }, "missing tensor 'router.tokens'"},
      {"wrong dtype", [](auto&, auto& t) { t["attn_mass.mean"].dtype = hl::DType::I32; }, "dtype I32, expected F32"},
      {"router top_k", [](auto& m, auto&) { m["router"]["top_k"] = 9; },
       "router top_k is 9, allowed an integer in [0, 4]"},
      {"finished past prompts",
       [](auto&, auto& t) {
         t["progress.finished"] = {hl::DType::I64, {9}, std::vector<uint8_t>(72, 0)};
       },
       "allowed (n) with n <= prompts 3"},
  };
  for (const Case& c : cases) {
    const std::vector<uint8_t> bad = edited(good, c.edit);
    try {
      hl::parse_sweep_stats(bad.data(), bad.size(), "stats.hlstats");
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const hl::LoadError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("stats.hlstats: ", 0), 0u) << c.name << ": " << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << c.name;
    }
  }
  // Truncated anywhere: an error, never a crash.
  for (size_t n : {size_t{0}, size_t{7}, good.size() / 2, good.size() - 1}) {
    EXPECT_THROW(hl::parse_sweep_stats(good.data(), n, "stats.hlstats"), hl::LoadError) << n;
  }
}

// A file of format version 1 (before the hidden-attention instruments): its nine instruments read
// as written, the two hidden ones with its Mamba layers and no cells; compare_sweeps lets such a file
// stand beside a version-2 one (the views draw B only where the shapes agree).
TEST(SweepFile, Version1FileReads_HiddenInstrumentsWithoutCells) {
  const std::vector<uint8_t> v2 = hl::serialize_sweep_stats(sample_stats(), {}, false, nullptr);
  const std::vector<uint8_t> v1 = edited(v2, [](auto& m, auto& t) {
    m["format_version"] = 1;
    m["instruments"].erase(10);
    m["instruments"].erase(9);
    for (auto it = t.begin(); it != t.end();) it = it->first.rfind("ssm_hidden_", 0) == 0 ? t.erase(it) : std::next(it);
  });
  const hl::SweepFile a = hl::parse_sweep_stats(v1.data(), v1.size(), "v1.hlstats");
  const hl::SweepFile b = hl::parse_sweep_stats(v2.data(), v2.size(), "v2.hlstats");
  ASSERT_EQ(a.stats.dists.size(), hl::sweep_instruments().size());
  EXPECT_EQ(a.stats.dists[9].shape, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(a.stats.dists[10].cells(), 0);
  EXPECT_EQ(a.stats.dists[4].count, b.stats.dists[4].count);
  EXPECT_EQ(hl::compare_sweeps(a, b).mismatch, "");
  EXPECT_EQ(hl::compare_sweeps(b, a).mismatch, "");
  // Written again with its manifest passed on (as the fuzz target does): a version-2 file.
  const std::vector<uint8_t> again = hl::serialize_sweep_stats(a.stats, a.manifest, false, nullptr);
  const hl::SweepFile c = hl::parse_sweep_stats(again.data(), again.size(), "again.hlstats");
  EXPECT_EQ(c.manifest["format_version"], hl::kStatsFormatVersion);
  EXPECT_EQ(c.stats.dists[9].shape, (std::vector<int64_t>{4, 0}));
}

}  // namespace
