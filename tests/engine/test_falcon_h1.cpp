// The Falcon-H1 family (HF FalconH1Config / FalconH1ForCausalLM, model_type "falcon_h1"): its config
// fields and one-line errors, the schedule (every layer attention ∥ Mamba-2, then a SwiGLU MLP), the
// µP multipliers and the optional gated norm, the falcon-h1-tiny preset on the CPU backend against
// the reference forward, the memory instrument, sessions and the device backends' refusal. The
// logits against the independent NumPy reference are the golden cases falcon_* (test_golden.cpp).
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
#include "engine/probes/memory.h"
#include "sessions/session_file.h"
#include "tests/engine/family_test_util.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/session_test_util.h"
#include "test_util.h"

namespace hl {
namespace {

// A small config.json as published Falcon-H1 checkpoints write it; `patch` replaces or adds fields.
std::string falcon_json(const std::string& patch = "{}") {
  nlohmann::json j = nlohmann::json::parse(R"({"model_type": "falcon_h1", "architectures": ["FalconH1ForCausalLM"],
    "vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
    "rms_norm_eps": 1e-05, "attention_bias": false, "mlp_bias": false, "projectors_bias": false,
    "rope_theta": 100000000000.0, "rope_scaling": null, "max_position_embeddings": 16384,
    "mamba_d_ssm": 48, "mamba_n_heads": 6, "mamba_d_head": 8, "mamba_n_groups": 1, "mamba_d_state": 8,
    "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 16, "mamba_conv_bias": true,
    "mamba_proj_bias": false, "mamba_rms_norm": false, "mamba_norm_before_gate": false, "mamba_use_mlp": true,
    "time_step_min": 0.001, "time_step_max": 0.1,
    "embedding_multiplier": 5.656854249492381, "lm_head_multiplier": 0.0390625, "key_multiplier": 0.390625,
    "attention_in_multiplier": 1.0, "attention_out_multiplier": 0.9375, "ssm_in_multiplier": 1.25,
    "ssm_out_multiplier": 0.23570226039551587, "ssm_multipliers": [0.35355, 0.25, 0.35355, 0.5, 0.35355],
    "mlp_multipliers": [0.8838834764831844, 0.5859375], "tie_word_embeddings": false, "num_logits_to_keep": 1,
    "attention_dropout": 0.0, "use_cache": true})");
  j.update(nlohmann::json::parse(patch));
  return j.dump();
}

TEST(FalconH1Config, FieldsAndMultipliers) {
  std::string text = falcon_json();
  text.insert(1, "\"time_step_limit\": [0.0, Infinity], ");  // as Python writes published configs
  const JambaConfig c = parse_config(text);
  EXPECT_TRUE(std::isinf(c.time_step_limit_max));
  EXPECT_EQ(c.family, Family::FalconH1);
  EXPECT_EQ(std::string(family_name(c.family)), "falcon_h1");
  EXPECT_EQ(c.mamba_inner(), 48);  // mamba_d_ssm, not mamba_expand · hidden_size = 64
  EXPECT_EQ(c.mamba_d_head, 8);
  EXPECT_EQ(c.head_dim(), 16);     // nh · hd = 64 ≠ H
  EXPECT_EQ(c.rotary_dim(), 16);   // RoPE over the whole head
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e11);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 0.390625 / 4.0);  // key_multiplier / √hd
  EXPECT_DOUBLE_EQ(c.lm_head_multiplier, 0.0390625);
  EXPECT_EQ(c.ssm_multipliers, (std::vector<double>{0.35355, 0.25, 0.35355, 0.5, 0.35355}));
  EXPECT_DOUBLE_EQ(c.mlp_gate_multiplier, 0.8838834764831844);
  EXPECT_DOUBLE_EQ(c.mlp_down_multiplier, 0.5859375);
  EXPECT_FALSE(c.mamba_rms_norm);
  EXPECT_EQ(c.mamba2_norm_group(), 48);
  EXPECT_EQ(c.ignored_fields, (std::vector<std::string>{"mamba_use_mlp"}));
  EXPECT_TRUE(c.has_multipliers());
  // HF's defaults: mamba_d_ssm null → mamba_expand · hidden_size, mamba_d_head "auto", null lists → 1.
  const JambaConfig d = parse_config(falcon_json(R"({"mamba_d_ssm": null, "mamba_n_heads": 8, "mamba_d_head": "auto",
      "ssm_multipliers": null, "mlp_multipliers": null, "mamba_n_groups": 2, "mamba_rms_norm": true})"));
  EXPECT_EQ(d.mamba_inner(), 64);
  EXPECT_EQ(d.mamba_d_head, 8);
  EXPECT_FALSE(d.has_ssm_multipliers());
  EXPECT_DOUBLE_EQ(d.mlp_gate_multiplier, 1.0);
  EXPECT_EQ(d.mamba2_norm_group(), 32);  // per B/C group
  for (const JambaConfig& x : {c, d}) EXPECT_EQ(config_to_json(parse_config(config_to_json(x))), config_to_json(x));
}

TEST(FalconH1ConfigCorrupt, EachDefectItsOwnMessage) {
  const struct {
    const char* extra;
    const char* message;
  } rows[] = {
      {R"({"mamba_n_heads": 5})", "field 'mamba_n_heads': expected a divisor of the SSM width 48 (mamba_d_ssm), got 5"},
      {R"({"mamba_d_head": 6})", "field 'mamba_d_head': expected \"auto\" or 8 (the SSM width 48 (mamba_d_ssm) / mamba_n_heads)"},
      {R"({"mamba_n_groups": 4})", "field 'mamba_n_groups': expected a divisor of mamba_n_heads 6, got 4"},
      {R"({"ssm_multipliers": [1, 1, 1, 1]})", "field 'ssm_multipliers'"},
      {R"({"mlp_multipliers": [1.0, 0.0]})", "field 'mlp_multipliers[1]'"},
      {R"({"key_multiplier": -0.5})", "field 'key_multiplier'"},
      {R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})", "field 'rope_scaling.rope_type': expected \"default\""},
      {R"({"head_dim": 15})", "field 'head_dim': head_dim 15 × partial_rotary_factor gives 15 rotary dims"},
      {R"({"time_step_limit": [0.5, 0.1]})", "field 'time_step_limit': expected lo < hi"},
      {R"({"hidden_act": "gelu"})", "field 'hidden_act': expected \"silu\""},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.extra);
    EXPECT_LOAD_ERROR(parse_config(falcon_json(r.extra)), r.message);
  }
}

TEST(FalconH1Schedule, EveryLayerParallel_OnBothAxes) {
  const LayerSchedule s = LayerSchedule::from_config(parse_config(falcon_json()));
  EXPECT_EQ(s.mixer_strip(), "PPP");
  EXPECT_EQ(s.ffn_strip(), "DDD");
  EXPECT_EQ(s.num_attention(), 3);
  EXPECT_EQ(s.num_ssm(), 3);
  EXPECT_EQ(s[2].attn_index, 2);
  EXPECT_EQ(s[2].ssm_index, 2);
  EXPECT_EQ(s[0].attn.rotary_dim, 16);
  EXPECT_EQ(s[0].ssm.d_inner, 48);
  EXPECT_DOUBLE_EQ(s[0].ffn_params.gate_multiplier, 0.8838834764831844);
  EXPECT_EQ(std::string(mixer_name(s[0].mixer)), "parallel");
}

TEST(FalconH1Memory, KvOnEveryLayerAndTheMamba2StateToo) {
  const JambaConfig c = parse_config(falcon_json());
  const LayerSchedule s = LayerSchedule::from_config(c);
  const MemoryReport r = memory_report(c, s, 100, 4);
  EXPECT_EQ(r.kv_bytes, 2 * 3 * 2 * 16 * 100 * 4);           // K and V, 3 layers, nkv 2, hd 16
  EXPECT_EQ(r.kv_bytes, r.kv_bytes_all_attention);            // every layer has attention already
  const int64_t per_layer = (48 + 2 * 8) * 4 + 48 * 8;         // conv window (W rows of x|B|C) + state Di · N
  EXPECT_EQ(r.state_bytes, 3 * per_layer * 4);
  EXPECT_EQ(r.state_bytes_all_mamba, r.state_bytes);
}

TEST(FalconH1Session, RoundTrip_FamilyMultipliersAndSchedule) {
  const JambaConfig c = parse_config(falcon_json());
  const Recording rec = test::synthetic_recording(c, 4, 3);
  test::TempDir dir;
  save_session(dir / "f.hlsession", rec, SessionSaveOptions{});
  const Recording back = load_session(dir / "f.hlsession");
  EXPECT_EQ(back.config.family, Family::FalconH1);
  EXPECT_EQ(back.config.ssm_multipliers, c.ssm_multipliers);
  EXPECT_EQ(config_to_json(back.config), config_to_json(c));
  EXPECT_EQ(LayerSchedule::from_config(back.config), LayerSchedule::from_config(c));
}

std::shared_ptr<Model> falcon_tiny(const test::TempDir& dir, void (*patch)(JambaConfig&) = nullptr) {
  GenerateOptions o;
  o.config = preset_config("falcon-h1-tiny");
  if (patch) patch(o.config);
  o.seed = 11;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

// The variant no golden case has: the gated norm before the gate in 2 groups, and every bias.
void norm_before_gate_every_bias(JambaConfig& c) {
  c.mamba_rms_norm = true;
  c.mamba_norm_before_gate = true;
  c.mamba_n_groups = 2;
  c.mamba_proj_bias = true;
  c.projectors_bias = true;
  c.mlp_bias = true;
  c.attention_bias = true;
}

const std::vector<int32_t> kIds = {1, 17, 400, 4095, 9, 9, 2000, 33, 5, 77, 1024, 3};

TEST(FalconH1Tiny, HfNames_CpuPrefillAndDecode_MatchTheReferenceForward) {
  test::TempDir dir;
  auto model = falcon_tiny(dir);
  ASSERT_EQ(model->config.family, Family::FalconH1);
  EXPECT_EQ(model->schedule.mixer_strip(), "PPPPPP");
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_NE(f.find("model.layers.0.self_attn.k_proj.weight"), nullptr);
  EXPECT_NE(f.find("model.layers.0.mamba.in_proj.weight"), nullptr);
  EXPECT_EQ(f.find("model.layers.0.mamba.norm.weight"), nullptr);  // mamba_rms_norm false
  EXPECT_NE(f.find("model.layers.5.feed_forward.gate_proj.weight"), nullptr);
  EXPECT_NE(f.find("model.final_layernorm.weight"), nullptr);
  family_test::expect_cpu_matches_reference(model, kIds);
}

// The gated norm in both orders, in B/C groups, with the in_proj and out_proj biases.
TEST(FalconH1Tiny, GatedNormBothOrdersAndBiases_MatchTheReference) {
  for (bool before : {false, true}) {
    SCOPED_TRACE(before ? "norm before gate" : "gate before norm");
    test::TempDir dir;
    void (*patch)(JambaConfig&) = [](JambaConfig& c) {
      c.mamba_rms_norm = true;
      c.mamba_norm_before_gate = false;
      c.mamba_n_groups = 3;
    };
    if (before)
      patch = norm_before_gate_every_bias;
    auto model = falcon_tiny(dir, patch);
    const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
    EXPECT_NE(f.find("model.layers.0.mamba.norm.weight"), nullptr);
    EXPECT_EQ(f.find("model.layers.0.mamba.out_proj.bias") != nullptr, before);
    EXPECT_EQ(f.find("model.layers.0.feed_forward.gate_proj.bias") != nullptr, before);
    EXPECT_EQ(f.find("model.layers.0.self_attn.o_proj.bias") != nullptr, before);
    family_test::expect_cpu_matches_reference(model, kIds);
  }
}

// The LM-head multiplier scales the logits exactly; the others change them.
TEST(FalconH1Tiny, LmHeadMultiplier_ScalesTheLogits) {
  test::TempDir a, b, c;
  auto scaled = falcon_tiny(a);
  auto unscaled = falcon_tiny(b, [](JambaConfig& x) { x.lm_head_multiplier = 1.0; });
  auto plain = falcon_tiny(c, [](JambaConfig& x) {
    x.lm_head_multiplier = 1.0;
    x.ssm_multipliers = {1, 1, 1, 1, 1};
  });
  const std::vector<int32_t> ids = {7, 8, 9};
  const auto x = golden_test::run_tokens(*make_backend("cpu", scaled), ids, RunOptions{}, true);
  const auto y = golden_test::run_tokens(*make_backend("cpu", unscaled), ids, RunOptions{}, true);
  const auto z = golden_test::run_tokens(*make_backend("cpu", plain), ids, RunOptions{}, true);
  double moved = 0;
  for (size_t t = 0; t < ids.size(); ++t)
    for (size_t v = 0; v < x[t].logits.size(); v += 97) {
      ASSERT_NEAR(x[t].logits[v] / 0.0390625f, y[t].logits[v], 1e-4f * (1 + std::fabs(y[t].logits[v])));
      moved = std::max(moved, static_cast<double>(std::fabs(z[t].logits[v] - y[t].logits[v])));
    }
  EXPECT_GT(moved, 1e-3);  // the µP segment factors act
}

// Vulkan runs the parallel layer as the CPU does (vk_parallel.cpp), with every µP multiplier: logits and
// every instrument with full records, by decode steps, by a prefill of 5 tokens then decode steps and by
// one prefill; without the gated norm (the preset), and with the norm before the gate and every bias
// (attention q/k/v/o, in_proj and out_proj, the MLP's gate/up/down), 2 registers and softmax-1.
// The golden suites of test_vulkan.cpp run tests/golden/falcon_* there too.
TEST(FalconH1Tiny, Vulkan_PrefillThenDecode_MatchesTheCpuBackend_EveryInstrument) {
  if (!family_test::backend_here("vulkan")) GTEST_SKIP() << "no Vulkan device";
  std::vector<int32_t> ids = kIds;
  for (int32_t i = 0; ids.size() < 24; ++i) ids.push_back((i * 977 + 5) % 4096);
  test::TempDir dir, biased_dir;
  family_test::expect_device_matches_cpu(falcon_tiny(dir), "vulkan", ids, 5, RunOptions{});
  auto biased = falcon_tiny(biased_dir, norm_before_gate_every_bias);
  const RunOptions reg = family_test::registers_softmax1();
  family_test::expect_device_matches_cpu(biased, "vulkan", {3, 1, 4, 1, 5, 9, 2, 6}, 3, reg);
}

// CUDA applies none of Falcon-H1's multipliers: one line.
TEST(FalconH1Tiny, Cuda_RefusesInOneLine) {
  test::TempDir dir;
  family_test::expect_device_backends_refuse(falcon_tiny(dir), "", {"cuda"});
}

}  // namespace
}  // namespace hl
