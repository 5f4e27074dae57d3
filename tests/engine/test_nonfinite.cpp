// Non-finite detection (issue 3 item 7): the per-token record names the first layer whose output
// had a NaN or Inf, and −1 while every layer stays finite.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/backend/backend.h"
#include "engine/model/loader.h"
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
