// Generated checkpoints through the real loader (engine/model/loader) and the CPU backend: every
// generator variant loads; random weights keep a finite, non-degenerate forward through depth; layouts
// that store the same values (fused vs per-expert experts, tied head omitted vs copied) give the same
// logits. Format-level checks of the generator: test_generator.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "test_util.h"

namespace hl {
namespace {

GenerateOptions base_options() {
  GenerateOptions o;
  o.config = test::tiny_config();  // 4 layers, every kind (test_util.h)
  o.config.hidden_size = 32;
  o.config.intermediate_size = 40;
  o.config.vocab_size = 80;
  o.seed = 5;
  return o;
}

std::vector<TokenTrace> run_tokens(const std::string& dir, const std::vector<int32_t>& ids) {
  std::shared_ptr<const Model> model = load_model(dir);
  std::unique_ptr<Backend> b = make_backend("cpu", model);
  b->start(RunOptions{});
  std::vector<TokenTrace> out;
  for (int32_t id : ids) b->forward(&id, 1, &out);
  return out;
}

double spread(const std::vector<float>& v) {
  double s = 0, s2 = 0;
  for (float x : v) s += x, s2 += double(x) * x;
  const double m = s / double(v.size());
  return std::sqrt(std::max(0.0, s2 / double(v.size()) - m * m));
}

TEST(GeneratorLoad, EveryVariant_LoadsWithExpectedExtras) {
  struct Variant {
    const char* name;
    std::function<void(GenerateOptions&)> edit;
  };
  const std::vector<Variant> variants = {
      {"bf16", [](GenerateOptions&) {}},
      {"f16", [](GenerateOptions& o) { o.dtype = DType::F16; }},
      {"f32 sharded", [](GenerateOptions& o) { o.dtype = DType::F32, o.shards = 3; }},
      {"mixed", [](GenerateOptions& o) { o.mixed_dtypes = true; }},
      {"fused", [](GenerateOptions& o) { o.fused_experts = true; }},
      {"tied", [](GenerateOptions& o) { o.config.tie_word_embeddings = true; }},
      {"tied keep head",
       [](GenerateOptions& o) { o.config.tie_word_embeddings = true, o.omit_lm_head_when_tied = false; }},
      {"registers+sinks", [](GenerateOptions& o) { o.trained_registers = 2, o.sinks = true; }},
      {"proj bias, no conv bias",
       [](GenerateOptions& o) { o.config.mamba_proj_bias = true, o.config.mamba_conv_bias = false; }},
  };
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    GenerateOptions o = base_options();
    v.edit(o);
    test::TempDir dir;
    generate_checkpoint(dir.path, o);
    std::shared_ptr<Model> m;
    ASSERT_NO_THROW(m = load_model(dir.path));
    ASSERT_EQ(m->w.layers.size(), 4u);
    EXPECT_EQ(m->w.register_rows.size(), static_cast<size_t>(o.trained_registers * 32));
    EXPECT_EQ(m->w.layers[1].attn.sinks.size(), o.sinks ? 4u : 0u);
    EXPECT_EQ(m->w.layers[1].moe.experts.size(), 4u);
    EXPECT_FALSE(m->w.lm_head.empty());
  }
}

TEST(GeneratorLoad, EightRandomLayers_FiniteLogitsWithSpread) {
  test::TempDir dir;
  GenerateOptions o;
  o.config = preset_config("demo-random");  // 8 layers: attention at 2 and 6, MoE on odd layers
  o.seed = 1;
  generate_checkpoint(dir.path, o);
  const std::vector<int32_t> ids = {1, 17, 400, 4095, 17, 9, 3000, 250, 17, 17, 64, 1024};
  const std::vector<TokenTrace> out = run_tokens(dir.path, ids);
  ASSERT_EQ(out.size(), ids.size());
  for (size_t t = 0; t < out.size(); ++t) {
    const TokenTrace& r = out[t];
    ASSERT_EQ(r.logits.size(), 4096u);
    EXPECT_EQ(r.nonfinite_layer, -1) << "token " << t;
    for (float x : r.logits) ASSERT_TRUE(std::isfinite(x)) << "token " << t;
    EXPECT_GT(spread(r.logits), 0.3) << "token " << t << ": logits nearly constant";
    EXPECT_LT(spread(r.logits), 30.0) << "token " << t;
    // The residual stream neither vanishes nor explodes through depth.
    ASSERT_EQ(r.resid_max_abs.size(), 9u);
    for (size_t c = 0; c < r.resid_max_abs.size(); ++c) {
      EXPECT_TRUE(std::isfinite(r.resid_max_abs[c]));
      EXPECT_GT(r.resid_max_abs[c], 0.1f) << "token " << t << " column " << c;
      EXPECT_LT(r.resid_max_abs[c], 100.0f) << "token " << t << " column " << c;
    }
    if (t > 0) EXPECT_NE(r.logits, out[t - 1].logits) << "token " << t;
  }
  // The same token at different positions gives different next-token logits (state matters).
  EXPECT_NE(out[1].logits, out[4].logits);
  // Layers do something: the final residual differs from the embedding more than trivially.
  EXPECT_GT(out.back().rank1_distance.back(), 0.0f);
}

TEST(GeneratorLoad, SixteenLayers_StaysFinite) {
  test::TempDir dir;
  GenerateOptions o;
  o.config = preset_config("demo-random");
  o.config.num_hidden_layers = 16;
  o.config.attn_layer_period = 8;
  o.config.attn_layer_offset = 4;
  generate_checkpoint(dir.path, o);
  const std::vector<TokenTrace> out = run_tokens(dir.path, {1, 2, 3, 4, 5, 6, 7, 8});
  for (const TokenTrace& r : out) {
    EXPECT_EQ(r.nonfinite_layer, -1);
    EXPECT_GT(spread(r.logits), 0.3);
    EXPECT_LT(r.resid_max_abs.back(), 100.0f);
  }
}

TEST(GeneratorLoad, SameValuesDifferentLayout_SameLogits) {
  const std::vector<int32_t> ids = {1, 5, 9, 60, 5};
  auto logits_of = [&](const std::function<void(GenerateOptions&)>& edit) {
    GenerateOptions o = base_options();
    o.dtype = DType::F32;
    edit(o);
    test::TempDir dir;
    generate_checkpoint(dir.path, o);
    std::vector<float> all;
    for (const TokenTrace& r : run_tokens(dir.path, ids)) all.insert(all.end(), r.logits.begin(), r.logits.end());
    return all;
  };
  const std::vector<float> split = logits_of([](GenerateOptions&) {});
  const std::vector<float> fused = logits_of([](GenerateOptions& o) { o.fused_experts = true; });
  const std::vector<float> sharded = logits_of([](GenerateOptions& o) { o.shards = 4; });
  ASSERT_EQ(split.size(), fused.size());
  for (size_t i = 0; i < split.size(); ++i) {
    ASSERT_NEAR(split[i], fused[i], 1e-5f * (1 + std::abs(split[i]))) << "logit " << i << " (fused experts)";
    ASSERT_EQ(split[i], sharded[i]) << "logit " << i << " (sharded)";
  }
  const std::vector<float> omit = logits_of([](GenerateOptions& o) { o.config.tie_word_embeddings = true; });
  const std::vector<float> keep = logits_of([](GenerateOptions& o) {
    o.config.tie_word_embeddings = true;
    o.omit_lm_head_when_tied = false;
  });
  EXPECT_EQ(omit, keep);
}

}  // namespace
}  // namespace hl
