// Non-finite detection (issue 3 item 7, issue 18 item 7): the per-token record names the first layer
// whose output had a NaN or Inf, L for the final norm, L + 1 for the LM head, −1 while everything
// stays finite; generation refuses to sample from non-finite logits; the DoRA view names a
// non-finite weight instead of printing nan.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/backend/backend.h"
#include "engine/model/loader.h"
#include "engine/probes/dora_probe.h"
#include "sessions/recorder.h"
#include "tests/engine/nonfinite_test_util.h"
#include "tests/engine/test_util.h"

using namespace hl;

namespace {
std::vector<TokenTrace> run_tiny(const std::function<void(std::vector<test::TestTensor>&)>& edit) {
  test::TempDir dir;
  const JambaConfig c = test::tiny_config();
  test::write_tiny_checkpoint(dir.path, c, edit);
  auto model = load_model(dir.path);
  auto b = make_backend("cpu", model);
  b->start(RunOptions{});
  std::vector<TokenTrace> recs;
  for (int32_t id : {1, 2, 3}) b->forward(&id, 1, &recs);
  return recs;
}
}  // namespace

TEST(NonFinite, FiniteWeights_ReportMinusOne) {
  for (const TokenTrace& r : run_tiny({})) EXPECT_EQ(r.nonfinite_layer, -1);
}

TEST(NonFinite, InfInLayerTwo_FirstLayerIsTwo) {
  // An Inf in layer 2's first norm weight poisons layer 2's output, and every layer after it.
  const auto recs = run_tiny([](std::vector<test::TestTensor>& ts) {
    test::find_tensor(ts, "model.layers.2.input_layernorm.weight")->values[0] = std::numeric_limits<float>::infinity();
  });
  for (const TokenTrace& r : recs) {
    EXPECT_EQ(r.nonfinite_layer, 2);
    EXPECT_FALSE(std::isfinite(r.logits[0]));
  }
}

TEST(NonFinite, NanInLayerZero_FirstLayerIsZero) {
  const auto recs = run_tiny([](std::vector<test::TestTensor>& ts) {
    test::find_tensor(ts, "model.layers.0.pre_ff_layernorm.weight")->values[3] = std::nanf("");
  });
  for (const TokenTrace& r : recs) EXPECT_EQ(r.nonfinite_layer, 0);
}

TEST(NonFinite, FinalNormIsL_LmHeadIsLPlusOne_OnTheCpu) {
  nonfinite_test::expect_head_flags("cpu");
}

TEST(NonFinite, NonFiniteLogits_GenerationRefusesWithOneLine_RecordsKept) {
  test::TempDir dir;
  const int64_t H = nonfinite_test::untied_tiny().hidden_size;
  test::write_tiny_checkpoint(dir.path, nonfinite_test::untied_tiny(),
                              nonfinite_test::poison("lm_head.weight", 7 * H + 3, std::nanf("")));
  auto model = load_model(dir.path);
  for (float temperature : {0.0f, 0.8f}) {
    SamplingOptions so;
    so.temperature = temperature;
    Recorder rec(make_backend("cpu", model), RunOptions{}, so);
    rec.feed({1, 2});
    try {
      rec.generate(3);
      FAIL() << "sampled from NaN logits at temperature " << temperature;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(m,
                "cannot sample the token after position 1: its logits are not finite (NaN at token id 7; "
                "non-finite from the LM head)");
    }
    EXPECT_EQ(rec.run().records.size(), 2u);  // the fed tokens' records stay
  }
}

TEST(NonFinite, DoraTuned_NanWeight_ErrorNamesTheTensor) {
  test::TempDir base, tuned;
  const JambaConfig c = test::tiny_config();
  test::write_tiny_checkpoint(base.path, c);
  test::write_tiny_checkpoint(tuned.path, c,
                              nonfinite_test::poison("model.layers.2.mamba.out_proj.weight", 40, std::nanf("")));
  auto b = load_model(base.path), t = load_model(tuned.path);
  try {
    dora_rows_tuned(*b, *t);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tensor 'model.layers.2.mamba.out_proj.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find(tuned.path), std::string::npos) << m;
    EXPECT_NE(m.find("row 1"), std::string::npos) << m;  // element 40 of a (16, 32) matrix
  }
  EXPECT_NO_THROW(dora_rows_tuned(*b, *load_model(base.path)));
}
