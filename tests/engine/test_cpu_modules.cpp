// The CPU backend's layer modules (engine/backend/cpu/cpu_module.h, issue 14 item 2): the model loop
// runs whatever units the schedule's kinds name, so a schedule the loader never builds from a Jamba
// config (a layer without a feed-forward, attention where the config has Mamba) runs as the plain-loop
// reference says, every named intermediate of every layer (the table lookup itself:
// test_layer_modules.cpp).
#include <gtest/gtest.h>

#include <memory>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "engine/reference/ref_model.h"
#include "tests/engine/module_test_util.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/reference_test_util.h"
#include "tests/engine/test_util.h"
#include "tests/engine/trace_compare_util.h"

using namespace hl;
using namespace hl::reftest;

namespace {

// The CPU backend against the reference on `model`, by decode steps and by one prefill.
void expect_cpu_matches_reference(const std::shared_ptr<const Model>& model, const std::string& what) {
  const std::vector<int32_t> ids = {3, 99, 1000, 7, 7, 2048};
  RunOptions opts;
  opts.full = true;
  opts.registers = 2;
  Recording rref;
  ref::ReferenceModel r(model);
  r.set_observer(recorder(&rref));
  const std::vector<TokenTrace> ref = r.run(ids, opts);
  for (bool prefill : {false, true}) {
    Recording rgot;
    cpu::CpuBackend b(model);
    b.set_observer(recorder(&rgot));
    const std::vector<TokenTrace> got = golden_test::run_tokens(b, ids, opts, prefill);
    const std::string how = what + (prefill ? " prefill" : " decode");
    expect_recordings_close(rgot, rref, 1e-5, 2e-5, how);
    backend_test::expect_traces_close(got, ref, backend_test::kVsGolden, how);
  }
}

TEST(CpuModules, LayersWithoutFeedForward_RunAsTheReference) {
  test::TempDir tmp;
  std::shared_ptr<Model> m = backend_test::generated_demo_model(tmp.path, 11, DType::BF16);
  std::vector<MixerKind> mixers = m->schedule.mixers();
  std::vector<FfnKind> ffns = m->schedule.ffns();
  ASSERT_EQ(ffns.size(), 8u);
  ffns[0] = FfnKind::None;  // a dense layer and an MoE layer lose their feed-forward
  ffns[1] = FfnKind::None;
  m->schedule = LayerSchedule::from_lists(mixers, ffns, m->schedule.params());
  ASSERT_EQ(m->schedule.num_moe(), 3);
  expect_cpu_matches_reference(m, "no FFN in layers 0, 1");
  // Without the FFN the layer's output is the residual after the mixer: no ffn_* names there.
  Recording rec;
  cpu::CpuBackend b(m);
  b.set_observer(recorder(&rec));
  std::vector<TokenTrace> out;
  b.start(RunOptions{});
  const int32_t id = 5;
  b.forward(&id, 1, &out);
  EXPECT_EQ(rec.count(Key{"ffn_out", 0, 0}), 0u);
  EXPECT_EQ(rec.count(Key{"ffn_out", 2, 0}), 1u);
  ASSERT_EQ(rec.count(Key{"layer_out", 0, 0}), 1u);
  const std::vector<float>& e = rec.at(Key{"embed", -1, 0});
  const std::vector<float>& mo = rec.at(Key{"mixer_out", 0, 0});
  const std::vector<float>& lo = rec.at(Key{"layer_out", 0, 0});
  for (size_t c = 0; c < lo.size(); ++c) ASSERT_FLOAT_EQ(lo[c], e[c] + mo[c]) << "column " << c;
}

TEST(CpuModules, AnotherPlacementOfTheMixers_RunsAsTheReference) {
  // Attention in layer 0 instead of where the config's period puts it: each unit reads its own
  // layer's weights (a layer's weights exist only for the kinds the config gave it, so the whole
  // layer moves: its weights with its kinds).
  test::TempDir tmp;
  std::shared_ptr<Model> m = backend_test::generated_demo_model(tmp.path, 11, DType::BF16);
  std::vector<MixerKind> mixers = m->schedule.mixers();
  std::vector<FfnKind> ffns = m->schedule.ffns();
  const std::vector<int64_t> attn = m->schedule.attention_layers();
  ASSERT_EQ(attn.size(), 2u);
  std::swap(mixers[0], mixers[attn[0]]);
  std::swap(ffns[0], ffns[attn[0]]);
  std::swap(m->w.layers[0], m->w.layers[attn[0]]);
  m->schedule = LayerSchedule::from_lists(mixers, ffns, m->schedule.params());
  ASSERT_TRUE(m->schedule[0].has_attention());
  expect_cpu_matches_reference(m, "attention first");
}

}  // namespace
