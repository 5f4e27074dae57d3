// The Granite 4.0-H family (HF GraniteMoeHybridConfig / GraniteMoeHybridForCausalLM, model_type
// "granitemoehybrid"): its config fields and one-line errors, the schedule (attention by layer_types,
// Mamba-2 elsewhere, routed experts with a shared MLP on every layer or the shared MLP alone), the µP
// multipliers, the granite-h-tiny preset in HF's names on the CPU backend against the reference forward,
// sessions and the device backends against the CPU. The logits against the independent NumPy reference are the
// golden cases granite_* (test_golden.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/backend/backend.h"
#include "engine/io/config.h"
#include "engine/io/safetensors.h"
#include "engine/model/generator.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/loader.h"
#include "engine/reference/ref_model.h"
#include "sessions/session_file.h"
#include "tests/engine/family_test_util.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/session_test_util.h"
#include "test_util.h"

namespace hl {
namespace {

// A small config.json as published Granite 4.0-H checkpoints write it; `patch` replaces or adds fields.
std::string granite_json(const std::string& patch = "{}") {
  nlohmann::json j = nlohmann::json::parse(R"({"model_type": "granitemoehybrid",
    "architectures": ["GraniteMoeHybridForCausalLM"], "vocab_size": 64, "hidden_size": 32, "intermediate_size": 16,
    "num_hidden_layers": 5, "layer_types": ["mamba", "mamba", "attention", "mamba", "attention"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "attention_bias": false, "hidden_act": "silu",
    "rms_norm_eps": 1e-05, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
    "attention_multiplier": 0.0078125, "logits_scaling": 6.0, "num_local_experts": 4, "num_experts_per_tok": 2,
    "shared_intermediate_size": 24, "position_embedding_type": "nope", "mamba_n_heads": 8, "mamba_d_head": 8,
    "mamba_n_groups": 1, "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 16,
    "mamba_conv_bias": true, "mamba_proj_bias": false, "tie_word_embeddings": true, "router_aux_loss_coef": 0.01,
    "init_method": "mup", "normalization_function": "rmsnorm"})");
  j.update(nlohmann::json::parse(patch));
  return j.dump();
}

TEST(GraniteHConfig, FieldsMultipliersAndExperts) {
  const JambaConfig c = parse_config(granite_json());
  EXPECT_EQ(c.family, Family::GraniteH);
  EXPECT_EQ(std::string(family_name(c.family)), "granitemoehybrid");
  EXPECT_EQ(c.attn_layer_indices, (std::vector<int64_t>{2, 4}));
  EXPECT_DOUBLE_EQ(c.embedding_multiplier, 12.0);
  EXPECT_DOUBLE_EQ(c.residual_multiplier, 0.22);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 0.0078125);  // not 1/√8
  EXPECT_DOUBLE_EQ(c.logits_scaling, 6.0);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.shared_intermediate_size, 24);
  EXPECT_EQ(c.rotary_dim(), 0);  // nope
  EXPECT_TRUE(c.ignored_fields.empty()) << c.ignored_fields[0];
  // RoPE over the whole head; the shared MLP alone without routed experts (published dense configs
  // write num_experts_per_tok 0 beside num_local_experts 0); an absent multiplier is 1.
  const JambaConfig d = parse_config(granite_json(R"({"position_embedding_type": "rope", "rope_theta": 10000.0,
      "num_local_experts": 0, "num_experts_per_tok": 0})"));
  EXPECT_EQ(d.rotary_dim(), 8);
  EXPECT_DOUBLE_EQ(d.rope_theta, 10000.0);
  EXPECT_EQ(d.num_experts, 1);
  nlohmann::json bare = nlohmann::json::parse(granite_json());
  bare.erase("attention_multiplier");
  EXPECT_DOUBLE_EQ(parse_config(bare.dump()).attention_scale(), 1.0);  // HF's default 1.0, not 1/√hd
  EXPECT_EQ(config_to_json(parse_config(config_to_json(d))), config_to_json(d));
  EXPECT_EQ(config_to_json(parse_config(config_to_json(c))), config_to_json(c));
}

TEST(GraniteHConfigCorrupt, EachDefectItsOwnMessage) {
  const struct {
    const char* extra;
    const char* message;
  } rows[] = {
      {R"({"layer_types": ["mamba", "attention"]})", "field 'layer_types': expected 5 entries (num_hidden_layers), got 2"},
      {R"({"layer_types": ["mamba", "mlp", "mamba", "mamba", "mamba"]})",
       "field 'layer_types[1]': expected \"mamba\" or \"attention\""},
      {R"({"num_local_experts": 1})",
       "field 'num_local_experts': expected 0 (the shared MLP alone) or at least 2 routed experts, got 1"},
      {R"({"num_experts_per_tok": 5})", "field 'num_experts_per_tok': expected an integer in [0, 4], got 5"},
      {R"({"num_experts_per_tok": 0})", "field 'num_experts_per_tok': expected an integer in [1, 4] with 4 experts"},
      {R"({"position_embedding_type": "alibi"})", "field 'position_embedding_type': expected \"rope\", \"nope\" or null"},
      {R"({"residual_multiplier": 0})", "field 'residual_multiplier': expected a finite number in (0.0, 1000000.0], got 0"},
      {R"({"logits_scaling": -1})", "field 'logits_scaling'"},
      {R"({"mamba_n_heads": 6})", "field 'mamba_n_heads': expected a divisor of mamba_expand · hidden_size = 64"},
      {R"({"position_embedding_type": "rope", "rope_scaling": {"type": "yarn"}})",
       "field 'rope_scaling.type': expected \"default\""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.extra);
    EXPECT_LOAD_ERROR(parse_config(granite_json(r.extra)), r.message);
  }
}

TEST(GraniteHSchedule, AttentionByLayerTypes_ExpertsWithASharedOneEverywhere) {
  const LayerSchedule s = LayerSchedule::from_config(parse_config(granite_json()));
  EXPECT_EQ(s.mixer_strip(), "SSASA");
  EXPECT_EQ(s.ffn_strip(), "EEEEE");
  EXPECT_EQ(s[0].ffn_params.shared_d_ff, 24);
  EXPECT_TRUE(s[0].ffn_params.renormalize);
  EXPECT_EQ(s[0].ffn_params.d_ff, 16);
  const LayerSchedule d =
      LayerSchedule::from_config(parse_config(granite_json(R"({"num_local_experts": 0, "num_experts_per_tok": 0})")));
  EXPECT_EQ(d.ffn_strip(), "DDDDD");  // the shared MLP is each layer's dense MLP
  EXPECT_EQ(d[0].ffn_params.d_ff, 24);
  EXPECT_EQ(d[0].ffn_params.shared_d_ff, 0);
}

TEST(GraniteHSession, RoundTrip_FamilyMultipliersAndSchedule) {
  const JambaConfig c = parse_config(granite_json());
  const Recording rec = test::synthetic_recording(c, 4, 3);
  test::TempDir dir;
  save_session(dir / "g.hlsession", rec, SessionSaveOptions{});
  const Recording back = load_session(dir / "g.hlsession");
  EXPECT_EQ(back.config.family, Family::GraniteH);
  EXPECT_DOUBLE_EQ(back.config.residual_multiplier, 0.22);
  EXPECT_EQ(config_to_json(back.config), config_to_json(c));
  EXPECT_EQ(LayerSchedule::from_config(back.config), LayerSchedule::from_config(c));
}

std::shared_ptr<Model> granite_tiny(const test::TempDir& dir, void (*patch)(JambaConfig&) = nullptr) {
  GenerateOptions o;
  o.config = preset_config("granite-h-tiny");
  if (patch) patch(o.config);
  o.seed = 5;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

TEST(GraniteHTiny, HfNames_CpuPrefillAndDecode_MatchTheReferenceForward) {
  test::TempDir dir;
  auto model = granite_tiny(dir);
  ASSERT_EQ(model->config.family, Family::GraniteH);
  EXPECT_EQ(model->schedule.mixer_strip(), "SSSASSSA");
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_NE(f.find("model.layers.0.block_sparse_moe.input_linear.weight"), nullptr);
  EXPECT_NE(f.find("model.layers.0.block_sparse_moe.router.layer.weight"), nullptr);
  EXPECT_NE(f.find("model.layers.0.shared_mlp.output_linear.weight"), nullptr);
  EXPECT_NE(f.find("model.layers.3.post_attention_layernorm.weight"), nullptr);
  EXPECT_NE(f.find("model.norm.weight"), nullptr);
  family_test::expect_cpu_matches_reference(model, {1, 17, 400, 4095, 9, 9, 2000, 33, 5, 77, 1024, 3});
}

// attention_bias (GraniteMoeHybridAttention reads it): q, k, v, o biases.
TEST(GraniteHTiny, AttentionBiases_MatchTheReference) {
  test::TempDir dir;
  auto model = granite_tiny(dir, [](JambaConfig& c) { c.attention_bias = true; });
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_NE(f.find("model.layers.3.self_attn.q_proj.bias"), nullptr);
  family_test::expect_cpu_matches_reference(model, {3, 1, 4, 1, 5, 9, 2, 6});
}

TEST(GraniteHTiny, SharedMlpAlone_NoRouter_MatchesTheReference) {
  test::TempDir dir;
  auto model = granite_tiny(dir, [](JambaConfig& c) {
    c.num_experts = 1;
    c.num_experts_per_tok = 1;
  });
  EXPECT_EQ(model->schedule.ffn_strip(), "DDDDDDDD");
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_EQ(f.find("model.layers.0.block_sparse_moe.router.layer.weight"), nullptr);
  EXPECT_NE(f.find("model.layers.0.shared_mlp.input_linear.weight"), nullptr);
  family_test::expect_cpu_matches_reference(model, {3, 1, 4, 1, 5, 9, 2, 6});
}

// The multipliers act: the same weights with every multiplier 1 give other logits, and logits_scaling
// alone divides them exactly.
TEST(GraniteHTiny, LogitsScaling_DividesTheLogits) {
  test::TempDir a, b;
  auto scaled = granite_tiny(a);
  auto unscaled = granite_tiny(b, [](JambaConfig& c) { c.logits_scaling = 1.0; });
  const std::vector<int32_t> ids = {7, 8, 9};
  const auto x = golden_test::run_tokens(*make_backend("cpu", scaled), ids, RunOptions{}, true);
  const auto y = golden_test::run_tokens(*make_backend("cpu", unscaled), ids, RunOptions{}, true);
  for (size_t t = 0; t < ids.size(); ++t)
    for (size_t v = 0; v < x[t].logits.size(); v += 97)
      ASSERT_NEAR(x[t].logits[v] * 6.0f, y[t].logits[v], 1e-4f * (1 + std::fabs(y[t].logits[v])));
}

// Vulkan and CUDA run the MoE variant as the CPU does (renormalised top-k, the shared expert beside
// the routed ones, the residual multiplier on the MoE branch): logits and every instrument with full
// records, by decode steps, a prefill of 5 then decode steps, and one prefill of 40 tokens; with
// registers and softmax-1 too. Each backend skips where its device is absent.
TEST(GraniteHTiny, DeviceBackends_MoeWithSharedExpert_MatchCpuBackend_EveryInstrument) {
  test::TempDir dir;
  auto model = granite_tiny(dir);
  ASSERT_GT(model->schedule.num_moe(), 0);
  ASSERT_TRUE(model->schedule[0].ffn_params.renormalize);
  ASSERT_GT(model->schedule[0].ffn_params.shared_d_ff, 0);
  ASSERT_NE(model->config.residual_multiplier, 1.0);
  const std::vector<int32_t> ids = family_test::device_test_ids(40);
  const int ran = family_test::for_each_device_backend([&](const char* b) {
    family_test::expect_device_matches_cpu(model, b, ids, 5, RunOptions{});
    family_test::expect_device_matches_cpu(model, b, ids, 5, family_test::registers_softmax1());
  });
  if (ran == 0) GTEST_SKIP() << "no Vulkan or CUDA device";
}

}  // namespace
}  // namespace hl
