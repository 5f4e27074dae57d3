// Binding tensors to ModelWeights (jamba-spec.md §2): shapes from config.json, A = -exp(A_log),
// fused v5 experts equal to per-expert ones, tied embeddings, extensions, mixed dtypes, counts
// against closed forms, and the binding corruption table (missing/extra/misshaped tensors, NaN scan, budget).
#include <algorithm>
#include <cmath>

#include "engine/model/loader.h"
#include "test_util.h"

using namespace hl;
using hl::test::TempDir;
using hl::test::TestTensor;

namespace {

std::shared_ptr<Model> load_tiny(const std::string& dir, const JambaConfig& c,
                                 const std::function<void(std::vector<TestTensor>&)>& edit = {}, bool fused = false,
                                 const LoadOptions& opts = {}) {
  hl::test::write_tiny_checkpoint(dir, c, edit, fused);
  return load_model(dir, opts);
}

std::vector<float> mat_values(const Mat& m) {
  std::vector<float> v(static_cast<size_t>(m.rows * m.cols));
  std::vector<uint8_t> plain;  // a Q4_K matrix in 16-row groups: its rows in ggml's layout
  to_float(m.dtype, plain_rows(m, 0, m.rows, plain), v.data(), v.size());
  return v;
}

}  // namespace

TEST(Loader, TinyModel_BindsEveryTensor) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  auto m = load_tiny(d.path, c);
  EXPECT_EQ(m->name, base_name(d.path));
  EXPECT_EQ(m->w.layers.size(), 4u);
  EXPECT_EQ(m->w.embed.rows, 64);
  EXPECT_EQ(m->w.embed.cols, 16);
  EXPECT_NE(m->w.lm_head.data, m->w.embed.data);
  const LayerWeights& l0 = m->w.layers[0];
  EXPECT_FALSE(m->schedule[0].has_attention());
  EXPECT_FALSE(m->schedule[0].is_moe());
  EXPECT_EQ(l0.mamba.in_proj.rows, 64);
  EXPECT_EQ(l0.mamba.conv_w.size(), 32u * 4);
  EXPECT_EQ(l0.mamba.conv_b.size(), 32u);
  EXPECT_TRUE(l0.mamba.in_bias.empty());
  EXPECT_EQ(l0.mamba.x_proj.rows, 1 + 2 * 4);
  ASSERT_EQ(l0.mamba.A.size(), 32u * 4);
  for (size_t i = 0; i < l0.mamba.A.size(); ++i) {
    EXPECT_FLOAT_EQ(l0.mamba.A[i], -static_cast<float>(i % 4 + 1)) << i;  // A_log = log(n+1)
  }
  const LayerWeights& l1 = m->w.layers[1];
  EXPECT_TRUE(m->schedule[1].has_attention());
  EXPECT_TRUE(m->schedule[1].is_moe());
  EXPECT_EQ(l1.attn.k.rows, 2 * 4);
  EXPECT_TRUE(l1.attn.sinks.empty());
  ASSERT_EQ(l1.moe.experts.size(), 4u);
  EXPECT_EQ(l1.moe.experts[3].down.name, "model.layers.1.feed_forward.experts.3.down_proj.weight");
  EXPECT_TRUE(m->w.register_rows.empty());
}

TEST(Loader, MeanEmbedding_MatchesDirectAverage) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  auto m = load_tiny(d.path, c);
  std::vector<TestTensor> ts = hl::test::tiny_tensors(c);
  const TestTensor* e = hl::test::find_tensor(ts, "model.embed_tokens.weight");
  ASSERT_EQ(m->w.mean_embedding.size(), 16u);
  for (int j = 0; j < 16; ++j) {
    double s = 0;
    for (int r = 0; r < 64; ++r) s += e->values[static_cast<size_t>(r * 16 + j)];
    EXPECT_NEAR(m->w.mean_embedding[static_cast<size_t>(j)], s / 64, 1e-7) << j;
  }
}

TEST(Loader, FusedExperts_EqualPerExpertWeights) {
  TempDir a, b;
  JambaConfig c = hl::test::tiny_config();
  auto per = load_tiny(a.path, c);
  // Build the fused tensors from the per-expert ones (gate rows [0,I), up rows [I,2I) per expert).
  std::vector<TestTensor> ts = hl::test::tiny_tensors(c);
  auto fused_edit = [&](std::vector<TestTensor>& out) {
    out = ts;
    const int64_t E = 4, I = 24, H = 16;
    for (int layer : {1, 3}) {
      std::string p = "model.layers." + std::to_string(layer) + ".feed_forward.experts.";
      TestTensor gu{p + "gate_up_proj", {E, 2 * I, H}, {}, DType::BF16};
      TestTensor dn{p + "down_proj", {E, H, I}, {}, DType::BF16};
      std::vector<TestTensor> kept;
      for (TestTensor& t : out) {
        if (t.name.rfind(p, 0) != 0) kept.push_back(t);
      }
      for (int64_t e = 0; e < E; ++e) {
        std::string x = p + std::to_string(e) + ".";
        for (const char* part : {"gate_proj.weight", "up_proj.weight"}) {
          const TestTensor* t = hl::test::find_tensor(ts, x + part);
          gu.values.insert(gu.values.end(), t->values.begin(), t->values.end());
        }
        const TestTensor* t = hl::test::find_tensor(ts, x + "down_proj.weight");
        dn.values.insert(dn.values.end(), t->values.begin(), t->values.end());
      }
      kept.push_back(gu);
      kept.push_back(dn);
      out = kept;
    }
  };
  auto fused = load_tiny(b.path, c, fused_edit);
  for (int layer : {1, 3}) {
    for (int e = 0; e < 4; ++e) {
      const MlpWeights& x = per->w.layers[layer].moe.experts[e];
      const MlpWeights& y = fused->w.layers[layer].moe.experts[e];
      EXPECT_EQ(y.gate.dtype, DType::BF16);
      EXPECT_EQ(y.gate.rows, 24);
      EXPECT_EQ(y.down.rows, 16);
      EXPECT_EQ(x.up.name, y.up.name);
      std::vector<float> xv = mat_values(x.gate), yv = mat_values(y.gate);
      for (size_t i = 0; i < xv.size(); ++i)
        ASSERT_EQ(yv[i], bf16_to_float(float_to_bf16(xv[i]))) << "gate " << e << " " << i;
      xv = mat_values(x.up), yv = mat_values(y.up);
      for (size_t i = 0; i < xv.size(); ++i)
        ASSERT_EQ(yv[i], bf16_to_float(float_to_bf16(xv[i]))) << "up " << e << " " << i;
      xv = mat_values(x.down), yv = mat_values(y.down);
      for (size_t i = 0; i < xv.size(); ++i)
        ASSERT_EQ(yv[i], bf16_to_float(float_to_bf16(xv[i]))) << "down " << e << " " << i;
    }
  }
  EXPECT_EQ(per->param_count(), fused->param_count());
}

TEST(Loader, TiedEmbeddings_HeadIsEmbedding) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  c.tie_word_embeddings = true;
  auto m = load_tiny(d.path, c);
  EXPECT_EQ(m->w.lm_head.data, m->w.embed.data);
  for (Mat* x : m->matrices()) EXPECT_NE(x->name, "lm_head.weight");
}

TEST(Loader, Extensions_SinksRegistersBiases) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  c.num_register_tokens = 3;
  c.mamba_proj_bias = true;
  auto m = load_tiny(d.path, c, [](std::vector<TestTensor>& ts) {
    ts.push_back({"model.layers.1.self_attn.sinks", {4}, {0.5f, -1, 0, 2}, DType::F16});
  });
  EXPECT_EQ(m->w.layers[1].attn.sinks, (std::vector<float>{0.5f, -1, 0, 2}));
  EXPECT_EQ(m->w.register_rows.size(), 3u * 16);
  EXPECT_EQ(m->w.layers[0].mamba.in_bias.size(), 64u);
  EXPECT_EQ(m->w.layers[0].mamba.out_bias.size(), 16u);
}

TEST(Loader, MixedDtypes_Accepted) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  auto m = load_tiny(d.path, c, [](std::vector<TestTensor>& ts) {
    for (size_t i = 0; i < ts.size(); ++i)
      ts[i].dtype = i % 3 == 0 ? DType::BF16 : i % 3 == 1 ? DType::F16 : DType::F32;
  });
  EXPECT_FLOAT_EQ(m->w.layers[2].mamba.A[5], -2.0f);
}

TEST(Loader, Counts_MatchClosedForms) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  auto m = load_tiny(d.path, c);
  int64_t total = 0;
  for (const TestTensor& t : hl::test::tiny_tensors(c)) total += static_cast<int64_t>(t.values.size());
  EXPECT_EQ(m->param_count(), total);
  const int64_t H = 16, I = 24, E = 4, K = 2, V = 64, moe_layers = 2;
  EXPECT_EQ(m->active_param_count(), total - moe_layers * (E - K) * 3 * I * H);
  // Per decode step (all F32 here): every tensor except the unused experts and all but one embedding row.
  int64_t bytes = 4 * (total - moe_layers * (E - K) * 3 * I * H - (V - 1) * H);
  EXPECT_EQ(m->weight_bytes_per_token(), bytes);
  size_t mats = 0;
  for (const TestTensor& t : hl::test::tiny_tensors(c))
    mats += t.shape.size() == 2 && t.name.find("A_log") == std::string::npos;
  EXPECT_EQ(m->matrices().size(), mats);
}

TEST(Loader, KeepAlive_WeightsOutliveCheckpoint) {
  TempDir d;
  std::shared_ptr<Model> m;
  {
    hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
    Checkpoint ck = Checkpoint::open(d.path);
    m = bind_model(ck);
  }  // the Checkpoint is gone; the model's mappings must still be valid
  EXPECT_EQ(mat_values(m->w.embed).size(), 64u * 16);
  auto m2 = load_model(d.path);
  EXPECT_EQ(mat_values(m2->w.lm_head), mat_values(m->w.lm_head));
}

TEST(Loader, ProgressCancel_ThrowsCancelled) {
  TempDir d;
  hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
  LoadOptions o;
  o.progress.callback = [](int64_t, int64_t, const std::string& what) {
    return what.find("layer 2") == std::string::npos;
  };
  EXPECT_THROW(load_model(d.path, o), Cancelled);
}

// ---- corruption table: binding -------------------------------------------------------------------

TEST(LoaderCorrupt, MissingTensor) {
  TempDir d;
  EXPECT_LOAD_ERROR(
      load_tiny(d.path, hl::test::tiny_config(),
                [](std::vector<TestTensor>& ts) {
                  ts.erase(std::remove_if(ts.begin(), ts.end(),
                                          [](const TestTensor& t) { return t.name == "model.layers.2.mamba.D"; }),
                           ts.end());
                }),
      "missing tensor 'model.layers.2.mamba.D' with shape (32,)");
}

TEST(LoaderCorrupt, ShapeContradictsConfig) {
  TempDir d;
  EXPECT_LOAD_ERROR(
      load_tiny(d.path, hl::test::tiny_config(),
                [](std::vector<TestTensor>& ts) {
                  TestTensor* t = hl::test::find_tensor(ts, "model.layers.3.mamba.A_log");
                  t->shape = {32, 2};
                  t->values.resize(64);
                }),
      "model.safetensors: tensor 'model.layers.3.mamba.A_log': shape (32, 2), expected (32, 4) from config.json");
}

TEST(LoaderCorrupt, UnexpectedTensor) {
  TempDir d;
  EXPECT_LOAD_ERROR(load_tiny(d.path, hl::test::tiny_config(),
                              [](std::vector<TestTensor>& ts) {
                                ts.push_back({"model.layers.0.mamba.D_typo", {32}, std::vector<float>(32, 1.f)});
                              }),
                    "unexpected tensor 'model.layers.0.mamba.D_typo' (32,)");
}

TEST(LoaderCorrupt, UntiedHeadMissing) {
  TempDir d;
  EXPECT_LOAD_ERROR(load_tiny(d.path, hl::test::tiny_config(),
                              [](std::vector<TestTensor>& ts) {
                                ts.erase(std::remove_if(ts.begin(), ts.end(),
                                                        [](const TestTensor& t) { return t.name == "lm_head.weight"; }),
                                         ts.end());
                              }),
                    "missing tensor 'lm_head.weight' with shape (64, 16) (config.json has tie_word_embeddings: false)");
}

TEST(LoaderCorrupt, BiasPresentButConfigSaysAbsent) {
  TempDir d;
  EXPECT_LOAD_ERROR(
      load_tiny(d.path, hl::test::tiny_config(),
                [](std::vector<TestTensor>& ts) {
                  ts.push_back({"model.layers.0.mamba.in_proj.bias", {64}, std::vector<float>(64, 0.f)});
                }),
      "tensor 'model.layers.0.mamba.in_proj.bias' is present, but config.json has mamba_proj_bias: false");
}

TEST(LoaderCorrupt, BiasMissingButConfigSaysPresent) {
  TempDir d;
  EXPECT_LOAD_ERROR(load_tiny(d.path, hl::test::tiny_config(),
                              [](std::vector<TestTensor>& ts) {
                                ts.erase(std::remove_if(ts.begin(), ts.end(),
                                                        [](const TestTensor& t) {
                                                          return t.name.find("conv1d.bias") != std::string::npos;
                                                        }),
                                         ts.end());
                              }),
                    "missing tensor 'model.layers.0.mamba.conv1d.bias'");
}

TEST(LoaderCorrupt, RegisterCountMismatch) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  c.num_register_tokens = 2;
  EXPECT_LOAD_ERROR(load_tiny(d.path, c,
                              [](std::vector<TestTensor>& ts) {
                                TestTensor* t = hl::test::find_tensor(ts, "model.register_tokens");
                                t->shape = {3, 16};
                                t->values.resize(48);
                              }),
                    "tensor 'model.register_tokens': shape (3, 16), expected (2, 16)");
  TempDir e;
  EXPECT_LOAD_ERROR(load_tiny(e.path, hl::test::tiny_config(),
                              [](std::vector<TestTensor>& ts) {
                                ts.push_back({"model.register_tokens", {2, 16}, std::vector<float>(32, 0.f)});
                              }),
                    "tensor 'model.register_tokens' is present, but config.json has no num_register_tokens");
}

TEST(LoaderCorrupt, SinksWrongShape) {
  TempDir d;
  EXPECT_LOAD_ERROR(load_tiny(d.path, hl::test::tiny_config(),
                              [](std::vector<TestTensor>& ts) {
                                ts.push_back({"model.layers.1.self_attn.sinks", {3}, {0, 0, 0}});
                              }),
                    "tensor 'model.layers.1.self_attn.sinks': shape (3,), expected (4,)");
}

TEST(LoaderCorrupt, IntegerMatrix) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  hl::test::write_tiny_checkpoint(d.path, c);
  // Re-write with the embedding stored as I32.
  std::vector<TestTensor> ts = hl::test::tiny_tensors(c);
  SafetensorsWriter w;
  for (const TestTensor& t : ts) {
    if (t.name == "model.embed_tokens.weight") {
      std::vector<int32_t> iv(t.values.size(), 1);
      w.add(t.name, DType::I32, t.shape, iv.data(), iv.size() * 4);
    } else {
      w.add_float(t.name, t.dtype, t.shape, t.values.data());
    }
  }
  w.write(d / "model.safetensors");
  EXPECT_LOAD_ERROR(load_model(d.path), "tensor 'model.embed_tokens.weight': dtype I32, expected F32, F16 or BF16");
}

TEST(LoaderCorrupt, NonFiniteValues_RejectedWhenScanning) {
  TempDir d;
  JambaConfig c = hl::test::tiny_config();
  auto edit = [](std::vector<TestTensor>& ts) {
    hl::test::find_tensor(ts, "model.layers.2.mamba.x_proj.weight")->values[37] = std::nanf("");
    hl::test::find_tensor(ts, "model.layers.0.input_layernorm.weight")->values[3] = INFINITY;
  };
  hl::test::write_tiny_checkpoint(d.path, c, edit);
  EXPECT_NO_THROW(load_model(d.path));  // scanning is opt-in
  LoadOptions o;
  o.scan_values = true;
  EXPECT_LOAD_ERROR(load_model(d.path, o), "tensor 'model.layers.0.input_layernorm.weight': element 3 at (3,) is Inf");
  hl::test::write_tiny_checkpoint(d.path, c, [](std::vector<TestTensor>& ts) {
    TestTensor* t = hl::test::find_tensor(ts, "model.layers.2.mamba.x_proj.weight");
    t->dtype = DType::BF16;
    t->values[37] = std::nanf("");
  });
  EXPECT_LOAD_ERROR(load_model(d.path, o), "tensor 'model.layers.2.mamba.x_proj.weight': element 37 at (1, 5) is NaN");
}

TEST(LoaderCorrupt, OverMemoryBudget) {
  TempDir d;
  hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
  LoadOptions o;
  o.memory_budget_bytes = 4096;
  EXPECT_LOAD_ERROR(load_model(d.path, o), "more than the memory budget of 4.0 KiB");
  o.memory_budget_bytes = 1 << 30;
  EXPECT_NO_THROW(load_model(d.path, o));
}
