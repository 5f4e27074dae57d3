// Nemotron-H's MoE layers (pattern letter E; HF NemotronHMoE over DeepSeek-V3's router and MoE): the
// config fields, the schedule (an E layer is an MoE feed-forward without mixer, its experts of
// moe_intermediate_size beside dense '-' layers of intermediate_size), the sigmoid router with its
// correction bias, expert groups, renormalisation and scaling (the fast path's route_sigmoid against
// the reference's sort-based sigmoid_router, and cases worked by hand), the tensor names of both
// layouts (NVIDIA's per-expert, HF's stacked), latent projections and biases, the CPU backend against
// the reference forward, parameter counts, Vulkan against the CPU backend and CUDA's refusal. The logits against the
// independent NumPy reference are the golden cases nemotron_moe and nemotron_moe_latent.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/io/config.h"
#include "engine/io/safetensors.h"
#include "engine/model/generator.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/loader.h"
#include "engine/probes/router_probe.h"
#include "engine/reference/ref_ffn.h"
#include "tests/engine/family_test_util.h"
#include "test_util.h"

namespace hl {
namespace {

std::shared_ptr<Model> moe_tiny(const test::TempDir& dir, void (*patch)(JambaConfig&) = nullptr, bool fused = false) {
  GenerateOptions o;
  o.config = preset_config("nemotron-h-moe-tiny");
  if (patch) patch(o.config);
  o.fused_experts = fused;
  o.seed = 5;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

TEST(NemotronHMoeConfig, FieldsAndSchedule) {
  const JambaConfig c = preset_config("nemotron-h-moe-tiny");
  const JambaConfig back = parse_config(config_to_json(c));
  EXPECT_EQ(config_to_json(back), config_to_json(c));
  EXPECT_EQ(back.num_experts, 16);
  EXPECT_EQ(back.num_experts_per_tok, 4);
  EXPECT_EQ(back.moe_intermediate_size, 96);
  EXPECT_EQ(back.shared_intermediate_size, 192);
  EXPECT_EQ(back.moe_n_group, 4);
  EXPECT_EQ(back.moe_topk_group, 2);
  EXPECT_DOUBLE_EQ(back.moe_routed_scaling, 2.5);
  EXPECT_TRUE(back.moe_sigmoid_router);
  EXPECT_TRUE(back.moe_renormalize);
  const LayerSchedule s = LayerSchedule::from_config(back);
  EXPECT_EQ(s.mixer_strip(), "S-SA-S--");
  EXPECT_EQ(s.ffn_strip(), "-E--E-DE");
  EXPECT_EQ(s.moe_layers(), (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(s[1].ffn_params.d_ff, 96);   // the experts' width
  EXPECT_EQ(s[6].ffn_params.d_ff, 384);  // the dense MLP keeps intermediate_size
  EXPECT_EQ(s[1].ffn_params.shared_d_ff, 192);
  EXPECT_TRUE(s[1].ffn_params.sigmoid_router);
  EXPECT_FALSE(s[1].ffn_params.gated);
  // HF's defaults: 8 experts, top-2, one group, normalised, scale 1; a pattern without E keeps no router.
  const JambaConfig d = nemotron_h_defaults();
  EXPECT_EQ(d.layer_pattern, "ME*-");
  EXPECT_EQ(d.num_experts, 8);
  EXPECT_EQ(d.moe_intermediate_size, 7688);
  EXPECT_EQ(parse_config(R"({"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2,
      "hybrid_override_pattern": "M-M*"})").num_experts, 1);
  // num_local_experts is HF's attribute_map alias of n_routed_experts.
  const JambaConfig a = parse_config(R"({"model_type": "nemotron_h", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "mamba_num_heads": 8, "mamba_head_dim": 16, "n_groups": 2,
      "hybrid_override_pattern": "ME*", "num_local_experts": 6, "moe_latent_size": 24})");
  EXPECT_EQ(a.num_experts, 6);
  EXPECT_EQ(a.moe_latent_size, 24);
}

// The grouped choice worked by hand: 8 experts in 4 groups of 2, the best 2 groups kept, top-2.
TEST(NemotronHMoeRouter, GroupsBiasRenormalisationAndScale_ByHand) {
  // sigmoid(l) for l = logit(p): the scores are exactly these p (up to float rounding).
  const std::vector<double> p = {0.9, 0.1, 0.6, 0.55, 0.3, 0.95, 0.2, 0.25};
  std::vector<float> logits;
  for (double v : p) logits.push_back(static_cast<float>(std::log(v / (1 - v))));
  // Group sums of the top 2: {1.0, 1.15, 1.25, 0.45}: groups 2 and 1 are kept; expert 0 (0.9) is not
  // chosen although it is the second-best score, because its group is dropped.
  const std::vector<float> no_bias(8, 0.0f);
  FfnParams fp;
  fp.experts = 8;
  fp.top_k = 2;
  fp.sigmoid_router = true;
  fp.groups = 4;
  fp.topk_groups = 2;
  fp.renormalize = true;
  fp.routed_scaling = 2.5;
  float probs[8], w[2], wr[2], probs_r[8];
  int32_t topk[2], topk_r[2];
  route_sigmoid(logits.data(), nullptr, 8, 2, 4, 2, true, 2.5, probs, topk, w);
  EXPECT_EQ(topk[0], 5);
  EXPECT_EQ(topk[1], 2);
  EXPECT_NEAR(w[0], 2.5 * 0.95 / 1.55, 1e-6);
  EXPECT_NEAR(w[1], 2.5 * 0.6 / 1.55, 1e-6);
  double sum = 0;
  for (double v : p) sum += v;
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(probs[e], p[e] / sum, 1e-6);  // the normalised affinities
  ref::sigmoid_router(logits.data(), no_bias, fp, probs_r, topk_r, wr);
  EXPECT_EQ(std::vector<int32_t>(topk_r, topk_r + 2), std::vector<int32_t>(topk, topk + 2));
  // A correction bias moves the choice but not the weights: +0.5 on expert 6 lifts group 3 (0.7 + 0.25
  // = 0.95 < 1.0) not enough; +0.9 (1.1 + 0.25 = 1.35) makes group 3 the best and expert 6 the first.
  std::vector<float> bias(8, 0.0f);
  bias[6] = 0.9f;
  route_sigmoid(logits.data(), bias.data(), 8, 2, 4, 2, false, 1.0, probs, topk, w);
  EXPECT_EQ(topk[0], 6);
  EXPECT_EQ(topk[1], 5);
  EXPECT_NEAR(w[0], 0.2, 1e-6);  // the plain sigmoid, not renormalised, scale 1
  EXPECT_NEAR(w[1], 0.95, 1e-6);
}

// The fast path's router and the reference's agree on random rows of every shape.
TEST(NemotronHMoeRouter, FastPathEqualsReference_RandomRows) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (const auto& [E, k, G, TG] : std::vector<std::array<int64_t, 4>>{{8, 2, 1, 1}, {16, 4, 4, 2}, {64, 6, 8, 3},
                                                                      {12, 3, 3, 3}, {128, 6, 1, 1}}) {
    FfnParams fp;
    fp.experts = E;
    fp.top_k = k;
    fp.sigmoid_router = true;
    fp.groups = G;
    fp.topk_groups = TG;
    for (int trial = 0; trial < 50; ++trial) {
      fp.renormalize = trial % 2 == 0;
      fp.routed_scaling = trial % 3 == 0 ? 1.0 : 2.5;
      std::vector<float> logits(E), bias(E), probs(E), probs_r(E), w(k), wr(k);
      std::vector<int32_t> topk(k), topk_r(k);
      for (auto& v : logits) v = nd(rng);
      for (auto& v : bias) v = 0.1f * nd(rng);
      const float lse = route_sigmoid(logits.data(), bias.data(), E, k, G, TG, fp.renormalize, fp.routed_scaling,
                                      probs.data(), topk.data(), w.data());
      const float lse_r = ref::sigmoid_router(logits.data(), bias, fp, probs_r.data(), topk_r.data(), wr.data());
      ASSERT_EQ(topk, topk_r) << E << " experts, trial " << trial;
      for (int64_t j = 0; j < k; ++j) ASSERT_NEAR(w[j], wr[j], 1e-6 * (1 + std::fabs(wr[j])));
      for (int64_t e = 0; e < E; ++e) ASSERT_NEAR(probs[e], probs_r[e], 1e-6);
      ASSERT_NEAR(lse, lse_r, 1e-5);
    }
  }
}

TEST(NemotronHMoeTiny, PublishedNames_CpuPrefillAndDecode_MatchTheReferenceForward) {
  test::TempDir dir;
  auto model = moe_tiny(dir);
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_NE(f.find("backbone.layers.1.mixer.gate.weight"), nullptr);
  ASSERT_NE(f.find("backbone.layers.1.mixer.gate.e_score_correction_bias"), nullptr);
  EXPECT_EQ(f.find("backbone.layers.1.mixer.gate.e_score_correction_bias")->dtype, DType::F32);
  EXPECT_NE(f.find("backbone.layers.4.mixer.experts.15.up_proj.weight"), nullptr);
  EXPECT_NE(f.find("backbone.layers.7.mixer.shared_experts.down_proj.weight"), nullptr);
  EXPECT_NE(f.find("backbone.layers.7.norm.weight"), nullptr);
  EXPECT_EQ(model->w.layers[1].moe.experts[3].up.rows, 96);
  family_test::expect_cpu_matches_reference(model, {1, 17, 400, 4095, 9, 9, 2000, 33, 5, 77, 1024, 3, 8, 250});
}

// HF's stacked experts, latent projections, biases (mlp_bias), no renormalisation, one group.
TEST(NemotronHMoeTiny, StackedLatentBiases_CpuMatchesTheReference) {
  test::TempDir dir;
  auto model = moe_tiny(
      dir,
      [](JambaConfig& c) {
        c.moe_latent_size = 48;
        c.mlp_bias = true;
        c.moe_renormalize = false;
        c.moe_n_group = c.moe_topk_group = 1;
        c.moe_routed_scaling = 1.5;
      },
      true);
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_NE(f.find("backbone.layers.1.mixer.experts.up_proj"), nullptr);
  EXPECT_EQ(f.find("backbone.layers.1.mixer.experts.up_proj")->shape, (std::vector<int64_t>{16, 96, 48}));
  EXPECT_NE(f.find("backbone.layers.1.mixer.fc2_latent_proj.bias"), nullptr);
  EXPECT_EQ(model->w.layers[4].moe.latent_in.rows, 48);
  family_test::expect_cpu_matches_reference(model, {4, 8, 15, 16, 23, 42, 108, 4000, 2, 2, 2});
}

TEST(NemotronHMoeTiny, ParameterCounts_CountKOfTheExpertsPerToken) {
  test::TempDir dir;
  auto model = moe_tiny(dir);
  const int64_t H = 128, E = 16, I = 96;
  const int64_t expert = 2 * I * H;  // up and down
  // Three MoE layers: all E experts in the total, k = 4 of them active.
  EXPECT_EQ(model->param_count() - model->active_param_count(), 3 * (E - 4) * expert);
  // The correction bias is a parameter of each router.
  EXPECT_EQ(model->w.layers[1].moe.router_bias.size(), static_cast<size_t>(E));
}

TEST(NemotronHMoeTiny, ExpertBiasesInTheFile_NameTheTensorNothingReads) {
  // NVIDIA's remote code gives per-expert MLPs biases under mlp_bias; HF's experts have none, so a file
  // with them is refused naming the tensor rather than run without it.
  test::TempDir dir;
  auto model = moe_tiny(dir);
  const std::string path = dir / "model.safetensors";
  SafetensorsWriter w;
  {
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const TensorInfo& t : f.tensors()) w.add(t.name, t.dtype, t.shape, t.data, t.nbytes());
  }
  const std::vector<float> bias(96, 0.5f);
  w.add_float("backbone.layers.1.mixer.experts.0.up_proj.bias", DType::F32, {96}, bias.data());
  w.write(path);
  EXPECT_LOAD_ERROR(load_model(dir.path), "unexpected tensor 'backbone.layers.1.mixer.experts.0.up_proj.bias' (96,)");
}

// Vulkan and CUDA run the MoE layers as the CPU does (the sigmoid router over 4 groups with its
// correction bias, renormalised weights × 2.5, relu² experts and shared expert): logits and every
// instrument with full records, by decode steps, a prefill of 5 then decode steps, and one prefill of
// 40 tokens; with registers and softmax-1 too; and HF's stacked layout with latent projections,
// biases, one group and no renormalisation. Each backend skips where its device is absent.
TEST(NemotronHMoeTiny, DeviceBackends_PrefillThenDecode_MatchCpuBackend_EveryInstrument) {
  const std::vector<int32_t> ids = family_test::device_test_ids(40);
  test::TempDir dir, latent_dir;
  auto model = moe_tiny(dir);
  ASSERT_TRUE(model->schedule[1].ffn_params.sigmoid_router);
  ASSERT_EQ(model->schedule[1].ffn_params.groups, 4);
  auto latent = moe_tiny(
      latent_dir,
      [](JambaConfig& c) {
        c.moe_latent_size = 48;
        c.mlp_bias = true;
        c.moe_renormalize = false;
        c.moe_n_group = c.moe_topk_group = 1;
        c.moe_routed_scaling = 1.5;
      },
      true);
  ASSERT_EQ(latent->w.layers[4].moe.latent_in.rows, 48);
  const int ran = family_test::for_each_device_backend([&](const char* b) {
    family_test::expect_device_matches_cpu(model, b, ids, 5, RunOptions{});
    family_test::expect_device_matches_cpu(model, b, ids, 5, family_test::registers_softmax1());
    family_test::expect_device_matches_cpu(latent, b, ids, 5, RunOptions{});
  });
  if (ran == 0) GTEST_SKIP() << "no Vulkan or CUDA device";
}

}  // namespace
}  // namespace hl
