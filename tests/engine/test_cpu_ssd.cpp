// The chunked Mamba-2 scan of the CPU backend (cpu_ssd.h; Dao & Gu 2024 §6) against the token-order
// recurrence it replaces for prefill blocks: on the bamba-tiny, nemotron-h-tiny (2 groups) and
// falcon-h1-tiny (parallel attention ∥ Mamba-2, no gated norm) presets with chunk_size 16, a prefill
// of T tokens — T below the chunk, equal to it, not a multiple of it over several chunks, a multiple
// over several — against T one-token decode steps; and the state carried on (two prefill blocks, then
// steps) against steps throughout.
//
// How agreement is measured (printed per case): for the logits, per token max_v |got − want| /
// max_v |want|; for each named intermediate of a Mamba-2 layer (ssm_in, ssm_conv, ssm_delta, ssm_y)
// and each layer, max |got − want| over all its rows and values / max |want| over the same; for the
// records' per-channel Δ and exp(ΔA) (ssm_delta, ssm_retained, --full), per token max |Δ| / max |want|.
// Every one must be ≤ 1e-5. The chunked form is also held to the token-order scan of the same
// prefill (only the scan differs there), and the chunk-length clamp is checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_ssd.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "tests/engine/reference_test_util.h"
#include "tests/engine/test_util.h"

using namespace hl;
using hl::reftest::Recording;

namespace {

constexpr double kTol = 1e-5;
const std::set<std::string> kMamba2Names = {"ssm_in", "ssm_conv", "ssm_delta", "ssm_y"};

// Sets the process-wide scan mode for its lifetime, then restores Auto.
struct ScanMode {
  explicit ScanMode(cpu::Mamba2Scan m) { cpu::set_mamba2_scan(m); }
  ~ScanMode() { cpu::set_mamba2_scan(cpu::Mamba2Scan::Auto); }
};

// A preset written by the generator with chunk_size 16 and loaded back.
std::shared_ptr<Model> preset(const test::TempDir& dir, const std::string& name) {
  GenerateOptions o;
  o.config = preset_config(name);
  o.config.mamba_chunk_size = 16;
  o.seed = 11;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

std::vector<int32_t> token_ids(int64_t T, int64_t V) {
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) ids[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + 13) % V);
  return ids;
}

struct Blocks {
  std::vector<TokenTrace> recs;
  Recording rec;  // every named intermediate, by (name, layer, row)
};

// ids through the CPU backend as forward calls of blocks[k] tokens each (1: a decode step), --full.
Blocks run_blocks(const std::shared_ptr<Model>& m, const std::vector<int32_t>& ids, const std::vector<int64_t>& blocks,
                  cpu::Mamba2Scan mode) {
  ScanMode guard(mode);
  cpu::CpuBackend b(m);
  Blocks r;
  b.set_observer(reftest::recorder(&r.rec));
  RunOptions o;
  o.full = true;
  b.start(o);
  size_t at = 0;
  for (int64_t n : blocks) {
    b.forward(ids.data() + at, n, &r.recs);
    at += static_cast<size_t>(n);
  }
  EXPECT_EQ(at, ids.size());
  return r;
}

std::vector<int64_t> steps(int64_t T) {
  return std::vector<int64_t>(static_cast<size_t>(T), 1);
}

// max |a − b| / max |b| over the n values (0 when b is all zero and a equals it).
double rel_diff(const float* a, const float* b, size_t n) {
  double d = 0, s = 0;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    s = std::max(s, std::fabs(static_cast<double>(b[i])));
  }
  return s > 0 ? d / s : d;
}

// The measures of the header, worst over tokens and layers, per quantity.
std::map<std::string, double> compare(const Blocks& got, const Blocks& want) {
  std::map<std::string, double> worst;
  auto note = [&](const std::string& k, double v) { worst[k] = std::max(worst[k], v); };
  EXPECT_EQ(got.recs.size(), want.recs.size());
  for (size_t t = 0; t < std::min(got.recs.size(), want.recs.size()); ++t) {
    const TokenTrace &a = got.recs[t], &b = want.recs[t];
    EXPECT_EQ(a.position, b.position);
    EXPECT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(a.ssm_retained.size(), b.ssm_retained.size());
    note("logits", rel_diff(a.logits.data(), b.logits.data(), std::min(a.logits.size(), b.logits.size())));
    note("rec ssm_delta",
         rel_diff(a.ssm_delta.data(), b.ssm_delta.data(), std::min(a.ssm_delta.size(), b.ssm_delta.size())));
    note("rec ssm_retained", rel_diff(a.ssm_retained.data(), b.ssm_retained.data(),
                                      std::min(a.ssm_retained.size(), b.ssm_retained.size())));
  }
  // Per (name, layer): all rows pooled.
  std::map<std::pair<std::string, int64_t>, std::pair<double, double>> dm;  // → (max |Δ|, max |want|)
  for (const auto& [k, v] : want.rec) {
    const auto& [name, layer, row] = k;
    if (!kMamba2Names.count(name)) continue;
    auto it = got.rec.find(k);
    if (it == got.rec.end() || it->second.size() != v.size()) {
      ADD_FAILURE() << name << " layer " << layer << " row " << row << " missing or of another size";
      continue;
    }
    auto& [d, s] = dm[{name, layer}];
    for (size_t i = 0; i < v.size(); ++i) {
      d = std::max(d, std::fabs(static_cast<double>(it->second[i]) - v[i]));
      s = std::max(s, std::fabs(static_cast<double>(v[i])));
    }
  }
  EXPECT_FALSE(dm.empty());
  for (const auto& [k, ds] : dm) note(k.first, ds.second > 0 ? ds.first / ds.second : ds.first);
  return worst;
}

void expect_within(const std::map<std::string, double>& worst, const std::string& what) {
  std::string line = what + ":";
  for (const auto& [k, v] : worst) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s %.2e", k.c_str(), v);
    line += buf;
    EXPECT_LE(v, kTol) << what << ": " << k;
  }
  std::printf("  %s\n", line.c_str());
}

class CpuSsd : public ::testing::TestWithParam<const char*> {};

// T < Q, T = Q, T = 45 (three chunks, the last of 13), T = 64 (four full chunks): one chunked prefill
// against T decode steps, and against the token-order prefill.
TEST_P(CpuSsd, ChunkedPrefill_MatchesDecodeSteps) {
  test::TempDir dir;
  auto m = preset(dir, GetParam());
  for (int64_t T : {5, 16, 45, 64}) {
    SCOPED_TRACE("T = " + std::to_string(T));
    const std::vector<int32_t> ids = token_ids(T, m->config.vocab_size);
    const Blocks stepped = run_blocks(m, ids, steps(T), cpu::Mamba2Scan::Auto);
    const Blocks chunked = run_blocks(m, ids, {T}, cpu::Mamba2Scan::Chunked);
    const Blocks ordered = run_blocks(m, ids, {T}, cpu::Mamba2Scan::TokenOrder);
    expect_within(compare(chunked, stepped), std::string(GetParam()) + " T=" + std::to_string(T) + " chunked vs steps");
    expect_within(compare(chunked, ordered),
                  std::string(GetParam()) + " T=" + std::to_string(T) + " chunked vs token-order");
  }
}

// The state after a chunked block carries on: 37 + 29 prefill tokens, then 6 steps, against 72 steps;
// and a chunked block after steps (the state going in is not zero).
TEST_P(CpuSsd, StateCarriesOn_TwoBlocksThenSteps) {
  test::TempDir dir;
  auto m = preset(dir, GetParam());
  const std::vector<int32_t> ids = token_ids(72, m->config.vocab_size);
  const Blocks stepped = run_blocks(m, ids, steps(72), cpu::Mamba2Scan::Auto);
  std::vector<int64_t> blocks = {37, 29};
  blocks.resize(8, 1);
  expect_within(compare(run_blocks(m, ids, blocks, cpu::Mamba2Scan::Chunked), stepped),
                std::string(GetParam()) + " 37+29 then 6 steps");
  std::vector<int64_t> mixed = {1, 1, 1, 50};
  mixed.resize(4 + 19, 1);
  expect_within(compare(run_blocks(m, ids, mixed, cpu::Mamba2Scan::Chunked), stepped),
                std::string(GetParam()) + " 3 steps, 50, 19 steps");
}

INSTANTIATE_TEST_SUITE_P(Presets, CpuSsd, ::testing::Values("bamba-tiny", "nemotron-h-tiny", "falcon-h1-tiny"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// ssd_scan alone on random inputs (4 heads of 8 in 2 groups, N 16, a padded row stride, a non-zero
// state going in) against the recurrence summed in fp64: outputs and the state after, per Q and S;
// retained exactly exp(Δ A) as the token-order scan computes it.
TEST(CpuSsdScan, RandomInputs_MatchTheRecurrenceInFp64) {
  const cpu::SsdDims d{4, 8, 16, 2, 4 * 8 + 2 * 2 * 16 + 3};
  const int64_t Di = d.nh * d.P, GN = d.G * d.N;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), dt(0.01f, 0.6f);
  const std::vector<float> A = {-0.5f, -1.0f, -2.0f, -4.0f}, D = {0.5f, -0.25f, 1.0f, 0.0f};
  cpu::SsdScratch sc;
  for (int64_t Q : {8, 16, 64})
    for (int64_t S : {3, 16, 37, 96}) {
      SCOPED_TRACE("Q " + std::to_string(Q) + " S " + std::to_string(S));
      std::vector<float> xbc(static_cast<size_t>(S * d.ld)), delta(static_cast<size_t>(S * d.nh));
      std::vector<float> state(static_cast<size_t>(Di * d.N)), out(static_cast<size_t>(S * Di), 7.0f);
      std::vector<float> retained(static_cast<size_t>(S * d.nh));
      for (float& v : xbc) v = u(rng);
      for (float& v : delta) v = dt(rng);
      for (float& v : state) v = u(rng);
      std::vector<double> S64(state.begin(), state.end()), y64(static_cast<size_t>(S * Di));
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < d.nh; ++h) {
          const float* row = &xbc[static_cast<size_t>(s * d.ld)];
          const int64_t g = h / (d.nh / d.G);
          const double dl = delta[static_cast<size_t>(s * d.nh + h)], dA = std::exp(dl * A[h]);
          for (int64_t p = 0; p < d.P; ++p) {
            double acc = 0;
            for (int64_t n = 0; n < d.N; ++n) {
              double& st = S64[static_cast<size_t>((h * d.P + p) * d.N + n)];
              st = dA * st + dl * row[h * d.P + p] * row[Di + g * d.N + n];
              acc += st * row[Di + GN + g * d.N + n];
            }
            y64[static_cast<size_t>(s * Di + h * d.P + p)] = acc + D[h] * row[h * d.P + p];
          }
        }
      cpu::ssd_scan(d, Q, S, xbc.data(), delta.data(), A.data(), D.data(), state.data(), out.data(), retained.data(),
                    sc);
      std::vector<float> y_want(y64.begin(), y64.end()), s_want(S64.begin(), S64.end());
      EXPECT_LE(rel_diff(out.data(), y_want.data(), y_want.size()), 2e-6);
      EXPECT_LE(rel_diff(state.data(), s_want.data(), s_want.size()), 2e-6);
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < d.nh; ++h)
          ASSERT_EQ(retained[static_cast<size_t>(s * d.nh + h)],
                    std::exp(delta[static_cast<size_t>(s * d.nh + h)] * A[h]));
    }
}

// A NaN in x of token 20 (head 1) reaches no earlier token: rows 0..19 stay finite and as without it;
// the other heads are untouched.
TEST(CpuSsdScan, NonFiniteX_ReachesNoEarlierToken) {
  const cpu::SsdDims d{2, 4, 8, 1, 2 * 4 + 2 * 8};
  const int64_t S = 40, Q = 32, Di = d.nh * d.P;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> xbc(static_cast<size_t>(S * d.ld)), delta(static_cast<size_t>(S * d.nh), 0.1f);
  for (float& v : xbc) v = u(rng);
  const std::vector<float> A = {-1.0f, -1.0f}, D = {1.0f, 1.0f};
  cpu::SsdScratch sc;
  auto run = [&](const std::vector<float>& in) {
    std::vector<float> state(static_cast<size_t>(Di * d.N)), out(static_cast<size_t>(S * Di));
    cpu::ssd_scan(d, Q, S, in.data(), delta.data(), A.data(), D.data(), state.data(), out.data(), nullptr, sc);
    return out;
  };
  const std::vector<float> clean = run(xbc);
  std::vector<float> poisoned = xbc;
  poisoned[static_cast<size_t>(20 * d.ld + 1 * d.P + 2)] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> got = run(poisoned);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t c = 0; c < Di; ++c) {
      const size_t k = static_cast<size_t>(s * Di + c);
      if (s < 20 || c < d.P)
        ASSERT_NEAR(got[k], clean[k], 1e-6f * (1 + std::fabs(clean[k]))) << "token " << s << " channel " << c;
    }
  EXPECT_TRUE(std::isnan(got[static_cast<size_t>(20 * Di + d.P + 2)]));
}

TEST(CpuSsdChunk, ConfigChunkSizeClamped) {
  EXPECT_EQ(cpu::ssd_chunk(1), cpu::kSsdMinChunk);
  EXPECT_EQ(cpu::ssd_chunk(16), 16);
  EXPECT_EQ(cpu::ssd_chunk(256), cpu::kSsdMaxChunk);
}

TEST(CpuSsdChunk, AutoChoosesByBlockAndStateSize) {
  EXPECT_FALSE(cpu::ssd_pays(1, 64, 128));
  EXPECT_FALSE(cpu::ssd_pays(cpu::kSsdMinTokens - 1, 64, 128));
  EXPECT_TRUE(cpu::ssd_pays(cpu::kSsdMinTokens, 64, 128));
  EXPECT_FALSE(cpu::ssd_pays(cpu::kSsdMinTokensSmall - 1, 32, 16));
  EXPECT_TRUE(cpu::ssd_pays(cpu::kSsdMinTokensSmall, 32, 16));
}

}  // namespace
