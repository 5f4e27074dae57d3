// Tests of engine/model/sampling: greedy and its tie rule, top-p cut-off on constructed
// distributions, temperature against the closed form p_i ∝ exp(l_i / T), seed reproducibility.
// Frequencies are compared with a tolerance of several binomial standard deviations.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "engine/core/error.h"
#include "engine/model/sampling.h"

namespace hl {
namespace {

std::vector<int> counts(Sampler& s, const std::vector<float>& logits, int draws) {
  std::vector<int> c(logits.size(), 0);
  for (int k = 0; k < draws; ++k) ++c.at(s.sample(logits.data(), static_cast<int64_t>(logits.size())));
  return c;
}

// |observed - expected| within 5 binomial standard deviations (plus a small floor).
void expect_frequencies(const std::vector<int>& c, const std::vector<double>& p, int draws) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double sd = std::sqrt(draws * p[i] * (1 - p[i]));
    EXPECT_NEAR(c[i], draws * p[i], 5 * sd + 3) << "token " << i << " expected p=" << p[i];
  }
}

TEST(Sampling, Argmax_Ties_LowestIdWins) {
  const std::vector<float> x = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  EXPECT_EQ(argmax(x.data(), 5), 1);
}

TEST(Sampling, Argmax_NaNNeverWins) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x = {nan, -3.0f, nan, -2.0f};
  EXPECT_EQ(argmax(x.data(), 4), 3);
  const std::vector<float> all_nan = {nan, nan};
  EXPECT_EQ(argmax(all_nan.data(), 2), 0);
  EXPECT_THROW(argmax(x.data(), 0), Error);
}

TEST(Sampling, Greedy_TemperatureZero_IsArgmaxWhateverTheSeed) {
  const std::vector<float> x = {1.0f, 3.0f, 3.0f, 0.0f};
  for (uint64_t seed : {0ull, 1ull, 12345ull}) {
    SamplingOptions o;
    o.seed = seed;
    Sampler s(o);
    for (int k = 0; k < 20; ++k) EXPECT_EQ(s.sample(x.data(), 4), 1);
  }
}

TEST(Sampling, TopP_CutOff_KeepsSmallestPrefixReachingP) {
  // p = (1/2, 1/4, 1/8, 1/16, 1/16) as logits ln p (T = 1).
  const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.0625f),
                                     std::log(0.0625f)};
  struct Case {
    float top_p;
    std::vector<double> p;  // renormalised nucleus distribution
  };
  const std::vector<Case> cases = {
      {0.3f, {1, 0, 0, 0, 0}},                     // 1/2 >= 0.3 already
      {0.7f, {2.0 / 3, 1.0 / 3, 0, 0, 0}},         // 3/4 >= 0.7
      {0.8f, {4.0 / 7, 2.0 / 7, 1.0 / 7, 0, 0}},   // 7/8 >= 0.8
      {0.9f, {0.5, 0.25, 0.125, 0.0625, 0.0625}},  // 15/16 >= 0.9: the tie at 1/16 keeps id 3 first
  };
  const int draws = 20000;
  for (const Case& c : cases) {
    SamplingOptions o;
    o.temperature = 1.0f;
    o.top_p = c.top_p;
    o.seed = 7;
    Sampler s(o);
    const std::vector<int> n = counts(s, logits, draws);
    for (size_t i = 0; i < c.p.size(); ++i)
      if (c.p[i] == 0) EXPECT_EQ(n[i], 0) << "top_p=" << c.top_p << ": token " << i << " is outside the nucleus";
    if (c.top_p == 0.9f) {
      // 15/16 of the mass is reached with ids 0..3; id 4 (tied with 3, higher id) is cut.
      EXPECT_EQ(n[4], 0);
      expect_frequencies(n, {8.0 / 15, 4.0 / 15, 2.0 / 15, 1.0 / 15, 0}, draws);
    } else {
      expect_frequencies(n, c.p, draws);
    }
  }
}

TEST(Sampling, TopP_Zero_IsGreedy) {
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f};
  SamplingOptions o;
  o.temperature = 1.0f;
  o.top_p = 0.0f;
  Sampler s(o);
  for (int k = 0; k < 100; ++k) EXPECT_EQ(s.sample(logits.data(), 3), 1);
}

TEST(Sampling, Temperature_FrequenciesMatchSoftmaxOfLogitsOverT) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
  const int draws = 40000;
  for (float T : {1.0f, 0.5f, 2.0f}) {
    std::vector<double> p(logits.size());
    double z = 0;
    for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(logits[i] / T);
    for (double& v : p) v /= z;
    SamplingOptions o;
    o.temperature = T;
    o.seed = 2024;
    Sampler s(o);
    expect_frequencies(counts(s, logits, draws), p, draws);
  }
}

TEST(Sampling, NaNAndMinusInfLogits_NeverSampled) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {nan, 0.0f, ninf, 0.0f};
  SamplingOptions o;
  o.temperature = 1.0f;
  Sampler s(o);
  const std::vector<int> n = counts(s, logits, 2000);
  EXPECT_EQ(n[0], 0);
  EXPECT_EQ(n[2], 0);
  EXPECT_GT(n[1], 800);
  EXPECT_GT(n[3], 800);
}

TEST(Sampling, SameSeed_SameSequence_DifferentSeed_Differs) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.37 * double(i)));
  auto run = [&](uint64_t seed, float top_p) {
    SamplingOptions o;
    o.temperature = 0.8f;
    o.top_p = top_p;
    o.seed = seed;
    Sampler s(o);
    std::vector<int32_t> ids;
    for (int k = 0; k < 200; ++k) ids.push_back(s.sample(logits.data(), 1000));
    return ids;
  };
  for (float top_p : {1.0f, 0.9f}) {
    EXPECT_EQ(run(42, top_p), run(42, top_p));
    EXPECT_NE(run(42, top_p), run(43, top_p));
  }
}

}  // namespace
}  // namespace hl
