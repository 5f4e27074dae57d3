// The next-token entropy (trace field `logit_entropy`, probes/logit_probe.h), the first field derived
// from the logits on the host: closed forms, the value every backend's finished record carries, and
// trace files written before the field existed (the NumPy goldens) getting it on import.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/loader.h"
#include "engine/probes/logit_probe.h"
#include "engine/trace/trace_fields.h"
#include "sessions/trace_import.h"
#include "tests/engine/golden_util.h"

using namespace hl;

namespace {

TEST(LogitEntropy, ClosedForms) {
  const std::vector<float> uniform(1000, 3.5f);
  EXPECT_NEAR(next_token_entropy(uniform.data(), uniform.size()), std::log(1000.0), 1e-5);
  // Two logits a, 0: p = σ(a), H = −p ln p − (1−p) ln(1−p).
  for (float a : {0.0f, 0.7f, -2.5f, 9.0f}) {
    const float z[2] = {a, 0.0f};
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(a)));
    const double h = -p * std::log(p) - (1 - p) * std::log(1 - p);
    EXPECT_NEAR(next_token_entropy(z, 2), h, 1e-6) << "a = " << a;
  }
  // One token far ahead: e^-200 of the mass elsewhere, entropy below 1e-80 rounds to 0.
  std::vector<float> sharp(50, -100.0f);
  sharp[7] = 100.0f;
  EXPECT_EQ(next_token_entropy(sharp.data(), sharp.size()), 0.0f);
  // Shifting every logit leaves the distribution, and the entropy, as they were (up to rounding).
  std::vector<float> z = {1.0f, -2.0f, 0.5f, 3.0f}, shifted = z;
  for (float& v : shifted) v += 1000.0f;
  EXPECT_NEAR(next_token_entropy(shifted.data(), 4), next_token_entropy(z.data(), 4), 2e-4);
  // Not finite: NaN, as for no logits at all.
  z[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(next_token_entropy(z.data(), 4)));
  z[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(next_token_entropy(z.data(), 4)));
  EXPECT_TRUE(std::isnan(next_token_entropy(nullptr, 0)));
}

// The thread pool's version adds the same block sums in the same order: the same bits as the
// serial one for vocabulary-sized logits (with and without a tail of n % 16), NaN for a bad logit
// anywhere; first_nonfinite finds that logit's index.
TEST(LogitEntropy, PooledEqualsSerialBitForBit_FirstNonfiniteFindsTheLogit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  for (size_t n : {size_t{65536}, size_t{65539}, size_t{50257}, size_t{16384}, size_t{1000}}) {
    std::vector<float> z(n);
    for (float& v : z) v = nd(rng);
    z[n / 3] = 30.0f;  // a clear favourite
    const float serial = next_token_entropy(z.data(), n);
    const float pooled = next_token_entropy_pooled(z.data(), n);
    uint32_t a, b;
    std::memcpy(&a, &serial, 4);
    std::memcpy(&b, &pooled, 4);
    EXPECT_EQ(a, b) << "n " << n << ": serial " << serial << ", pooled " << pooled;
    EXPECT_GT(serial, 0.0f);
    EXPECT_EQ(first_nonfinite(z.data(), n), -1);
    for (size_t at : {size_t{0}, n / 2 + 1, n - 1}) {
      for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        const float keep = z[at];
        z[at] = bad;
        EXPECT_TRUE(std::isnan(next_token_entropy_pooled(z.data(), n))) << "n " << n << " at " << at;
        EXPECT_TRUE(std::isnan(next_token_entropy(z.data(), n)));
        EXPECT_EQ(first_nonfinite(z.data(), n), static_cast<int64_t>(at));
        z[at] = keep;
      }
    }
  }
}

TEST(LogitEntropy, EveryFinishedRecordCarriesItsLogitsEntropy) {
  const std::string dir = std::string(HL_GOLDEN_DIR) + "/gqa_basic";
  auto model = load_model(dir);
  auto cpu = make_backend("cpu", model);
  const std::vector<int32_t> ids = {1, 5, 9, 2, 7};
  for (bool prefill : {false, true}) {
    const std::vector<TokenTrace> recs = golden_test::run_tokens(*cpu, ids, RunOptions{}, prefill);
    ASSERT_EQ(recs.size(), ids.size());
    for (const TokenTrace& r : recs) {
      ASSERT_FALSE(r.logits.empty());
      EXPECT_EQ(r.logit_entropy, next_token_entropy(r.logits.data(), r.logits.size())) << "token " << r.position;
      EXPECT_GT(r.logit_entropy, 0.0f);
      EXPECT_LT(r.logit_entropy, std::log(static_cast<double>(r.logits.size())) + 1e-5);
    }
  }
  // An instrument: not computed when the instruments are off (bench's "off" figures pay nothing).
  RunOptions off;
  off.instruments = false;
  for (const TokenTrace& r : golden_test::run_tokens(*cpu, ids, off, false)) EXPECT_EQ(r.logit_entropy, 0.0f);
}

TEST(LogitEntropy, TraceFilesWrittenBeforeItGetItOnImport) {
  // The NumPy reference's traces predate the field: import derives it from their logits.
  const std::string path = std::string(HL_GOLDEN_DIR) + "/gqa_basic/expected/as_trained.safetensors";
  const Recording rec = import_trace(path);
  ASSERT_EQ(rec.runs.size(), 1u);
  ASSERT_GT(rec.runs[0].records.size(), 0u);
  for (const TokenTrace& r : rec.runs[0].records) {
    ASSERT_FALSE(r.logits.empty());
    EXPECT_EQ(r.logit_entropy, next_token_entropy(r.logits.data(), r.logits.size()));
    EXPECT_GT(r.logit_entropy, 0.0f);
  }
  // Without the logits there is nothing to derive it from: it stays unset (0).
  TraceImportOptions no_logits;
  no_logits.logits = false;
  const Recording bare = import_trace(path, no_logits);
  for (const TokenTrace& r : bare.runs[0].records) EXPECT_EQ(r.logit_entropy, 0.0f);
}

}  // namespace
