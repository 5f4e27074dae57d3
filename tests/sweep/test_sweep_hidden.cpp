// `sweep --hidden-attention` (issue 21 item 1, stats-format.md §3): the ssm_hidden_* instruments of a
// run hold one value per token, SSM layer and head, equal to the entropy and first-token share
// computed here directly from each row M_h[t, ·] (Mamba-2 heads; Jamba's Mamba-1 channel mean), with
// the register rows counted as keys but the first token's key after them.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "engine/probes/hidden_attention.h"
#include "sessions/recorder.h"
#include "sessions/sweep_hidden.h"
#include "tests/engine/test_util.h"

namespace hl {
namespace {

constexpr size_t kEntropy = 9, kFirst = 10;  // sweep_instruments(): ssm_hidden_entropy, ssm_hidden_first_mass

void check(const char* preset, int registers) {
  SCOPED_TRACE(std::string(preset) + ", registers " + std::to_string(registers));
  test::TempDir dir;
  GenerateOptions g;
  g.config = preset_config(preset);
  g.seed = 4;
  generate_checkpoint(dir.path, g);
  std::shared_ptr<Model> model = load_model(dir.path);
  RunOptions opts;
  opts.registers = registers;
  Recorder rec(std::make_unique<cpu::CpuBackend>(model), opts, SamplingOptions{}, "A");
  const std::vector<int32_t> ids = {1, 7, 30, 2, 19, 11, 5};
  rec.feed(ids);
  const Run run = rec.take_run();
  ASSERT_EQ(run.records.size(), ids.size());

  SweepStats st = SweepStats::for_schedule(model->schedule);
  add_hidden_attention(st, model, opts, run);
  const Distribution &E = st.dists[kEntropy], &F = st.dists[kFirst];
  const int64_t Mn = model->schedule.num_ssm(), mh = sweep_ssm_heads(model->schedule);
  ASSERT_GT(Mn, 0);
  ASSERT_EQ(E.shape, (std::vector<int64_t>{Mn, mh}));

  // The same rows, reduced here: entropy of |M| / Σ|M| over every key, share of key nReg.
  HiddenAttentionTracker tr(model, opts);
  tr.follow(ids.data(), static_cast<int64_t>(ids.size()));
  const int64_t nReg = tr.registers(), T = static_cast<int64_t>(ids.size());
  EXPECT_EQ(nReg, registers);
  for (int64_t m = 0; m < Mn; ++m) {
    const SsmRows& rows = tr.layer(m);
    for (int64_t h = 0; h < mh; ++h) {
      double sumH = 0, sumF = 0, minH = INFINITY, maxH = -INFINITY;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t r = nReg + t;
        std::vector<float> row(static_cast<size_t>(r + 1));
        if (rows.mamba1)
          hidden_attention_mean_abs_row(rows, r, row.data());
        else
          hidden_attention_row(rows, h, r, row.data());
        double total = 0;
        for (float v : row) total += std::fabs(v);
        ASSERT_GT(total, 0);
        double H = 0;
        for (float v : row) {
          const double p = std::fabs(v) / total;
          if (p > 0) H -= p * std::log(p);
        }
        sumH += H;
        sumF += std::fabs(row[static_cast<size_t>(nReg)]) / total;
        minH = std::min(minH, H);
        maxH = std::max(maxH, H);
      }
      const size_t c = static_cast<size_t>(m * mh + h);
      EXPECT_EQ(E.count[c], T);
      EXPECT_EQ(F.count[c], T);
      EXPECT_NEAR(E.mean[c], sumH / T, 1e-9 * (1 + sumH));
      EXPECT_NEAR(F.mean[c], sumF / T, 1e-9);
      EXPECT_NEAR(E.min[c], minH, 1e-12);
      EXPECT_NEAR(E.max[c], maxH, 1e-12);
    }
  }
  // Without the option's call the instruments stay empty; the other instruments are add_run's.
  SweepStats plain = SweepStats::for_schedule(model->schedule);
  plain.add_run(run);
  for (int64_t v : plain.dists[kEntropy].count) EXPECT_EQ(v, 0);
}

TEST(SweepHidden, Mamba2HeadsEqualTheRowsReducedDirectly) { check("bamba-tiny", 0); }
TEST(SweepHidden, Mamba1ChannelMeanWithRegisters) { check("tiny", 2); }

}  // namespace
}  // namespace hl
