// A model pipelined across stages (issue 21 item 3, engine/backend/pipeline.h): the byte-balanced
// split, the loader's stage option (other layers unread and unbound), and N stages in threads over
// an in-process StageLink whose records equal the one-process run's bit for bit — decode steps,
// a prefill chunk, registers — on the bundled demo models and generated checkpoints of the other families.
#include <gtest/gtest.h>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/pipeline.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "engine/model/quantize.h"
#include "engine/trace/trace_fields.h"
#include "test_util.h"
#include "tests/engine/pipeline_test_util.h"

using namespace hl;
using namespace hl::pipeline_test;

namespace {

void expect_pipeline_equals_one_process(const std::string& dir, const RunOptions& opts, const std::vector<int>& ns,
                                        const LoadOptions& lo = {}) {
  const std::vector<int32_t> ids = {1, 17, 400, 9, 33}, chunk = {250, 12, 7};
  cpu::CpuBackend one(load_model(dir, lo));
  const std::vector<TokenTrace> want = feed(one, opts, ids, chunk);
  for (int n : ns) {
    const std::vector<std::vector<TokenTrace>> got =
        run_pipeline(dir, n, opts, ids, chunk, lo, [](int, std::shared_ptr<const Model> m, StageLink* link,
                                                      const std::vector<LayerRange>& ranges) {
          return std::make_unique<cpu::CpuBackend>(std::move(m), link, ranges);
        });
    for (int r = 0; r < n; ++r)
      expect_same(want, got[static_cast<size_t>(r)], base_name(dir) + " " + std::to_string(n) + " stages, stage " +
                                                         std::to_string(r));
  }
}

const std::string kModels = std::string(HL_SOURCE_DIR) + "/resources/models/";

}  // namespace

TEST(Pipeline, SplitStages_BalancesBytesContiguously) {
  const std::vector<int64_t> even(8, 10);
  auto eq = [](const std::vector<LayerRange>& r, const std::vector<std::pair<int64_t, int64_t>>& want) {
    ASSERT_EQ(r.size(), want.size());
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(r[i].begin, want[i].first) << i;
      EXPECT_EQ(r[i].end, want[i].second) << i;
    }
  };
  eq(split_stages(even, 1), {{0, 8}});
  eq(split_stages(even, 2), {{0, 4}, {4, 8}});
  eq(split_stages(even, 8), {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {6, 7}, {7, 8}});
  // A heavy layer gets a stage nearly to itself; the embedding and the head weigh on the ends.
  eq(split_stages({1, 1, 1, 30, 1, 1, 1, 1}, 3), {{0, 3}, {3, 4}, {4, 8}});
  eq(split_stages(even, 2, 40, 0), {{0, 2}, {2, 8}});
  eq(split_stages(even, 2, 0, 40), {{0, 6}, {6, 8}});
  // Every stage non-empty even when one layer outweighs the rest.
  eq(split_stages({100, 1, 1}, 3), {{0, 1}, {1, 2}, {2, 3}});
  EXPECT_THROW(split_stages(even, 9), Error);
  EXPECT_THROW(split_stages(even, 0), Error);
  try {
    split_stages({1, 1, 1}, 4);
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--pipeline: 4 stages for a model of 3 layers (at most one stage per layer)");
  }
}

TEST(Pipeline, TensorLayer_FromTheName) {
  EXPECT_EQ(tensor_layer("model.layers.12.mamba.in_proj.weight"), 12);
  EXPECT_EQ(tensor_layer("backbone.layers.0.norm.weight"), 0);
  EXPECT_EQ(tensor_layer("model.embed_tokens.weight"), -1);
  EXPECT_EQ(tensor_layer("lm_head.weight"), -1);
  EXPECT_EQ(tensor_layer("model.final_layernorm.weight"), -1);
  EXPECT_EQ(tensor_layer("model.sublayers.3.x"), -1);
}

TEST(Pipeline, StageLoad_BindsOnlyItsLayers) {
  const std::string dir = kModels + "baseline";
  const CheckpointBytes bytes = checkpoint_bytes(dir);
  ASSERT_EQ(bytes.layers.size(), 8u);
  EXPECT_GT(bytes.embedding, 0);
  EXPECT_GT(bytes.head, 0);  // baseline's head is not tied
  const std::shared_ptr<Model> m = load_stage(dir, {}, LayerRange{3, 6});
  EXPECT_EQ(loaded_layers(*m).begin, 3);
  EXPECT_EQ(loaded_layers(*m).end, 6);
  EXPECT_TRUE(m->w.embed.empty());
  EXPECT_TRUE(m->w.lm_head.empty());
  EXPECT_TRUE(m->w.mean_embedding.empty());
  for (int64_t i = 0; i < 8; ++i) {
    const LayerWeights& l = m->w.layers[static_cast<size_t>(i)];
    EXPECT_EQ(l.input_norm.empty(), i < 3 || i >= 6) << i;
  }
  // Its matrices are those of its layers only.
  for (Mat* x : m->matrices()) EXPECT_EQ(tensor_layer(x->name) / 3, 1) << x->name;
  const std::shared_ptr<Model> first = load_stage(dir, {}, LayerRange{0, 2});
  EXPECT_FALSE(first->w.embed.empty());
  EXPECT_FALSE(first->w.mean_embedding.empty());
  EXPECT_TRUE(first->w.lm_head.empty());
  const std::shared_ptr<Model> last = load_stage(dir, {}, LayerRange{5, 8});
  EXPECT_TRUE(last->w.embed.empty());
  EXPECT_FALSE(last->w.lm_head.empty());
  const LayerRange whole = loaded_layers(*load_model(dir));
  EXPECT_EQ(whole.begin, 0);
  EXPECT_EQ(whole.end, 8);
  EXPECT_THROW(load_stage(dir, {}, LayerRange{4, 9}), LoadError);
  EXPECT_THROW(load_stage(dir, {}, LayerRange{4, 4}), LoadError);
  LoadOptions small;
  small.memory_budget_bytes = 1024;
  EXPECT_THROW(load_stage(dir, small, LayerRange{4, 8}), LoadError);
  // A stage model in a backend meant for another range is refused.
  Wires w;
  ThreadLink link(w, 1, 2);
  EXPECT_THROW(cpu::CpuBackend(load_stage(dir, {}, LayerRange{4, 8}), &link, {LayerRange{0, 3}, LayerRange{3, 8}}), Error);
  // A backend of no such name: one line naming those that run stages.
  try {
    make_stage_backend("tpu", load_stage(dir, {}, LayerRange{4, 8}), &link, {LayerRange{0, 4}, LayerRange{4, 8}});
    ADD_FAILURE() << "tpu";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "--pipeline: backend tpu is not supported yet (" + stage_backend_choices() + ")");
  }
  EXPECT_EQ(stage_backend_choices().rfind("cpu", 0), 0u);
#ifdef HL_HAVE_CUDA
  // CUDA runs stages; without a device its stage fails as its whole-model backend does.
  EXPECT_NE(stage_backend_choices().find("cuda"), std::string::npos);
  const std::vector<std::string> here = available_backends();
  if (std::find(here.begin(), here.end(), "cuda") == here.end())
    EXPECT_THROW(make_stage_backend("cuda", load_stage(dir, {}, LayerRange{4, 8}), &link,
                                    {LayerRange{0, 4}, LayerRange{4, 8}}),
                 BackendFailure);
#endif
}

TEST(Pipeline, RecordsEqualOneProcess_DemoModels) {
  RunOptions opts;
  opts.full = true;  // attn_rows, ssm_delta, ssm_retained merged too
  expect_pipeline_equals_one_process(kModels + "baseline", opts, {2, 3, 8});
  expect_pipeline_equals_one_process(kModels + "registers", opts, {2, 3});  // trained registers cross the stages
  opts.registers = 3;                                                       // test-time registers
  expect_pipeline_equals_one_process(kModels + "baseline", opts, {3});
  RunOptions lean;
  lean.instruments = false;
  expect_pipeline_equals_one_process(kModels + "no-attention", lean, {2});
}

TEST(Pipeline, RecordsEqualOneProcess_OtherFamilies) {
  RunOptions opts;
  opts.full = true;
  for_each_family({"nemotron-h-tiny", "nemotron-h-moe-tiny", "bamba-tiny", "granite-h-tiny", "falcon-h1-tiny"},
                  [&](const std::string& dir) { expect_pipeline_equals_one_process(dir, opts, {2, 3}); });
}

// Quantised on load: each stage quantises its own matrices as the whole model is quantised — a tied
// head with its embedding (+head: both in the format; without: both kept), an untied head alone —
// so every record equals one process's bit for bit.
TEST(Pipeline, QuantisedOnLoad_RecordsEqualOneProcess) {
  hl::test::TempDir d;
  GenerateOptions g;
  g.config = preset_config("bamba-tiny");
  g.config.tie_word_embeddings = true;
  g.seed = 7;
  generate_checkpoint(d.path, g);
  RunOptions opts;
  opts.full = true;
  for (const char* format : {"q8_0", "q8_0+head"}) {  // Q8_0: H 128 is a whole number of its blocks
    LoadOptions lo;
    lo.weights = parse_weight_format(format, "--weights", &lo.quantize_head, &lo.fp32_activations);
    expect_pipeline_equals_one_process(d.path, opts, {2, 3}, lo);
    expect_pipeline_equals_one_process(kModels + "baseline", opts, {3}, lo);
    // Stage 0 of the tied model holds the embedding as the whole model does: quantised with +head.
    const std::shared_ptr<Model> first = load_stage(d.path, lo, LayerRange{0, 2});
    EXPECT_EQ(first->w.embed.dtype, load_model(d.path, lo)->w.embed.dtype) << format;
    EXPECT_EQ(first->w.embed.dtype == *lo.weights, lo.quantize_head) << format;
    EXPECT_TRUE(first->w.lm_head.empty());
    ASSERT_TRUE(first->quantization);
    EXPECT_GT(first->quantization->mats.size(), 0u);
  }
  LoadOptions small;
  small.weights = DType::Q8_0;
  small.memory_budget_bytes = 1024;
  try {
    (void)load_stage(d.path, small, LayerRange{2, 4});
    ADD_FAILURE() << "a stage over the budget was loaded";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("MiB of matrices as Q8_0, more than the memory budget"), std::string::npos)
        << e.what();
  }
}
