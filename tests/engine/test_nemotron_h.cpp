// The Nemotron-H family (HF NemotronHConfig / NemotronHForCausalLM, model_type "nemotron_h"): its
// config fields under their own names and HF's legacy aliases, the layer pattern (one part a layer:
// Mamba-2, attention without positions, or a relu² MLP), the one-line errors, the tensor names
// ("backbone." as NVIDIA publishes them, one "norm" a layer), the nemotron-h-tiny preset on the CPU
// backend against the reference forward, the Δ floor of HF's torch path, sessions, the Vulkan and
// CUDA backends against the CPU backend. The logits against the independent NumPy reference are the
// golden cases nemotron_* (test_golden.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/backend/backend.h"
#include "engine/io/config.h"
#include "engine/io/safetensors.h"
#include "engine/model/generator.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/loader.h"
#include "engine/probes/memory.h"
#include "engine/reference/ref_model.h"
#include "sessions/session_file.h"
#include "tests/engine/family_test_util.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/session_test_util.h"
#include "test_util.h"

namespace hl {
namespace {

// A small config.json as published Nemotron-H checkpoints write it; `patch` replaces or adds fields.
std::string nemotron_json(const std::string& patch = "{}") {
  nlohmann::json j = nlohmann::json::parse(R"({"model_type": "nemotron_h", "architectures": ["NemotronHForCausalLM"],
    "vocab_size": 64, "hidden_size": 40, "intermediate_size": 96, "num_hidden_layers": 6,
    "hybrid_override_pattern": "M-M*-M", "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "mlp_hidden_act": "relu2", "attention_bias": false, "mlp_bias": false, "use_bias": false,
    "ssm_state_size": 8, "mamba_num_heads": 6, "mamba_head_dim": 8, "n_groups": 2, "conv_kernel": 4,
    "expand": 2, "chunk_size": 16, "use_conv_bias": true, "time_step_min": 0.001, "time_step_max": 0.1,
    "time_step_floor": 0.0001, "layer_norm_epsilon": 1e-05, "residual_in_fp32": false,
    "rescale_prenorm_residual": true, "tie_word_embeddings": false, "use_mamba_kernels": true})");
  j.update(nlohmann::json::parse(patch));
  return j.dump();
}

TEST(NemotronHConfig, OwnFieldNames_PatternAndDerivedSizes) {
  const JambaConfig c = parse_config(nemotron_json());
  EXPECT_EQ(c.family, Family::NemotronH);
  EXPECT_EQ(std::string(family_name(c.family)), "nemotron_h");
  EXPECT_EQ(c.layer_pattern, "M-M*-M");
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_EQ(c.head_dim(), 16);          // explicit: nh · hd = 64 ≠ hidden_size 40
  EXPECT_EQ(c.mamba_inner(), 6 * 8);    // mamba_num_heads · mamba_head_dim, not expand · hidden
  EXPECT_EQ(c.mamba2_conv_dim(), 48 + 2 * 2 * 8);
  EXPECT_EQ(c.mamba2_norm_group(), 24);  // the gated norm per B/C group: Di / n_groups
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.mamba2_dt_lo(), 0.001);  // HF's torch path: clamp(Δ, time_step_min)
  EXPECT_TRUE(std::isinf(c.mamba2_dt_hi()));
  EXPECT_FALSE(c.mlp_gated());
  EXPECT_EQ(c.rotary_dim(), 0);  // NoPE
  EXPECT_TRUE(c.ignored_fields.empty()) << c.ignored_fields[0];
  // HF's legacy aliases (mamba_n_groups, mamba_d_conv, mamba_dt_limit ...) read as their fields, an
  // explicit list of layer kinds (older and newer names) over the pattern; a num_hidden_layers that
  // disagrees with the pattern is noted, as HF only warns and takes the pattern's count.
  const JambaConfig d = parse_config(nemotron_json(R"({"mamba_n_groups": 3, "mamba_d_conv": 2,
      "mamba_dt_limit": [0.0, 0.25], "num_hidden_layers": 9,
      "layers_block_type": ["attention", "linear_attention", "mlp", "full_attention", "mamba"]})"));
  EXPECT_EQ(d.mamba_n_groups, 3);
  EXPECT_EQ(d.mamba_d_conv, 2);
  EXPECT_DOUBLE_EQ(d.time_step_limit_max, 0.25);
  EXPECT_EQ(d.layer_pattern, "*M-*M");
  EXPECT_EQ(d.num_hidden_layers, 5);
  EXPECT_EQ(d.ignored_fields, (std::vector<std::string>{"conv_kernel (its legacy alias mamba_d_conv wins, as in HF)",
                                                       "n_groups (its legacy alias mamba_n_groups wins, as in HF)",
                                                       "num_hidden_layers (9; the pattern has 5 layers)"}));
  // The config written and read back is the same config.
  EXPECT_EQ(config_to_json(parse_config(config_to_json(d))), config_to_json(d));
}

TEST(NemotronHConfigCorrupt, EachDefectItsOwnMessage) {
  const struct {
    const char* extra;
    const char* message;
  } rows[] = {
      {R"({"hybrid_override_pattern": "M-X*"})",
       "field 'hybrid_override_pattern': character 2 is 'X'; expected M (Mamba-2), * (attention), - (MLP) or E (MoE)"},
      {R"({"hybrid_override_pattern": ""})", "field 'hybrid_override_pattern': expected at least one layer, got none"},
      {R"({"hybrid_override_pattern": "ME*", "n_routed_experts": 1})",
       "field 'n_routed_experts': expected at least 2 experts for the MoE (E) layers, got 1"},
      {R"({"hybrid_override_pattern": "ME*", "n_routed_experts": 6, "n_group": 4})",
       "field 'n_group': expected a divisor of the 6 experts leaving at least 2 in each group, got 4"},
      {R"({"hybrid_override_pattern": "ME*", "n_routed_experts": 8, "n_group": 8})",
       "field 'n_group': expected a divisor of the 8 experts leaving at least 2 in each group, got 8"},
      {R"({"hybrid_override_pattern": "ME*", "n_group": 2, "topk_group": 3})",
       "field 'topk_group': expected 1..2 (n_group), got 3"},
      {R"({"hybrid_override_pattern": "ME*", "num_experts_per_tok": 9})",
       "field 'num_experts_per_tok': expected 1..8 (the experts), got 9"},
      {R"({"moe_latent_size": 0})", "field 'moe_latent_size': expected an integer in [1, 65536], got 0"},
      {R"({"layers_block_type": ["mamba", "conv"]})", "field 'layers_block_type[1]': expected \"mamba\""},
      {R"({"hybrid_override_pattern": 7})", "field 'hybrid_override_pattern': expected a string of M, *, - and E"},
      {R"({"mlp_hidden_act": "gelu"})", "field 'mlp_hidden_act': expected \"relu2\""},
      {R"({"mamba_hidden_act": "relu"})", "field 'mamba_hidden_act': expected \"silu\""},
      {R"({"attention_bias": true})", "field 'attention_bias': expected false"},
      {R"({"n_groups": 4})", "field 'n_groups': expected a divisor of mamba_num_heads 6, got 4"},
      {R"({"head_dim": null, "num_attention_heads": 3, "num_key_value_heads": 3})",
       "field 'head_dim': is null, and num_attention_heads 3 does not divide hidden_size 40"},
      {R"({"head_dim": 0})", "field 'head_dim': expected an integer in [1, 4096], got 0"},
      {R"({"time_step_limit": [0.3, 0.1]})", "field 'time_step_limit': expected lo < hi, got [0.3, 0.1]"},
      {R"({"ssm_state_size": 0})", "field 'ssm_state_size': expected an integer in [1, 1024], got 0"},
      {R"({"use_conv_bias": "yes"})", "field 'use_conv_bias': expected true or false"},
      {R"({"n_routed_experts": -1})", "field 'n_routed_experts': expected an integer in [1, 1024], got -1"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.extra);
    EXPECT_LOAD_ERROR(parse_config(nemotron_json(r.extra)), r.message);
  }
  // A default that does not fit the file's sizes is refused as if written (fuzz_config found a config
  // whose written form did not read back): NemotronHConfig's 32 heads with hidden_size 16.
  nlohmann::json j = nlohmann::json::parse(nemotron_json(R"({"hidden_size": 16})"));
  j.erase("num_attention_heads");
  EXPECT_LOAD_ERROR(parse_config(j.dump()),
                    "field 'num_attention_heads': expected an integer in [1, 16] (at most hidden_size), got the default 32; set it");
}

TEST(NemotronHSchedule, OnePartALayer_MambaAttentionOrMlp) {
  const LayerSchedule s = LayerSchedule::from_config(parse_config(nemotron_json()));
  EXPECT_EQ(s.mixer_strip(), "S-SA-S");  // M - M * - M
  EXPECT_EQ(s.ffn_strip(), "-D--D-");
  EXPECT_EQ(s.num_ssm(), 3);
  EXPECT_EQ(s.num_attention(), 1);
  EXPECT_EQ(s.num_moe(), 0);
  EXPECT_EQ(s[3].attn_index, 0);
  EXPECT_EQ(s[3].attn.head_dim, 16);
  EXPECT_EQ(s[3].attn.rotary_dim, 0);
  EXPECT_FALSE(s[1].ffn_params.gated);
  EXPECT_EQ(s[1].ffn_params.d_ff, 96);
  EXPECT_EQ(std::string(mixer_name(s[1].mixer)), "none");
  EXPECT_EQ(s.describe(), "6 layers: S - S A - S; no MoE; no FFN at 0,2,3,5; no mixer at 1,4");
  // The schedule is stored by kind names (sessions): "none" reads back.
  MixerKind k{};
  ASSERT_TRUE(parse_mixer_kind("none", &k));
  EXPECT_EQ(k, MixerKind::None);
}

TEST(NemotronHSession, RoundTrip_FamilyPatternAndSchedule) {
  const JambaConfig c = parse_config(nemotron_json());  // time_step_limit: the default [0, ∞]
  const Recording rec = test::synthetic_recording(c, 4, 5);
  test::TempDir dir;
  save_session(dir / "n.hlsession", rec, SessionSaveOptions{});
  const Recording back = load_session(dir / "n.hlsession");
  EXPECT_EQ(back.config.family, Family::NemotronH);
  EXPECT_EQ(back.config.layer_pattern, "M-M*-M");
  EXPECT_EQ(config_to_json(back.config), config_to_json(c));
  EXPECT_EQ(LayerSchedule::from_config(back.config), LayerSchedule::from_config(c));
  ASSERT_EQ(back.runs.size(), 1u);
  EXPECT_EQ(back.runs[0].records.size(), 4u);
}

// nemotron-h-tiny written by the generator under NVIDIA's "backbone." names; `patch` edits the
// config before writing.
std::shared_ptr<Model> nemotron_tiny(const test::TempDir& dir, void (*patch)(JambaConfig&) = nullptr) {
  GenerateOptions o;
  o.config = preset_config("nemotron-h-tiny");
  if (patch) patch(o.config);
  o.seed = 11;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

TEST(NemotronHTiny, BackboneNames_CpuPrefillAndDecode_MatchTheReferenceForward) {
  test::TempDir dir;
  auto model = nemotron_tiny(dir);
  ASSERT_EQ(model->config.family, Family::NemotronH);
  EXPECT_EQ(model->schedule.mixer_strip(), "S-S-SA-S-SA-");
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_NE(f.find("backbone.embeddings.weight"), nullptr);
  EXPECT_NE(f.find("backbone.layers.1.mixer.up_proj.weight"), nullptr);
  EXPECT_NE(f.find("backbone.layers.5.mixer.q_proj.weight"), nullptr);
  EXPECT_NE(f.find("backbone.norm_f.weight"), nullptr);
  EXPECT_EQ(f.find("backbone.layers.1.mixer.gate_proj.weight"), nullptr);  // relu²: no gate
  family_test::expect_cpu_matches_reference(model, {1, 17, 400, 4095, 9, 9, 2000, 33, 5, 77, 1024, 3});
  RunOptions opts;
  const std::vector<TokenTrace> r = golden_test::run_tokens(*make_backend("cpu", model), {5, 6}, opts, false);
  EXPECT_EQ(r[0].ssm_delta_mean.size(), 5u);  // the five Mamba-2 layers (0, 2, 4, 7, 9)
  EXPECT_EQ(r[0].resid_max_abs.size(), 13u);  // L + 1 residual points, MLP-only layers included
}

// HF's torch path clamps Δ from below at time_step_min: set high, it binds every head and token.
TEST(NemotronHTiny, DeltaFloorAtTimeStepMin_BindsOnEveryBackendAndTheReference) {
  test::TempDir dir;
  auto model = nemotron_tiny(dir, [](JambaConfig& c) { c.time_step_min = 0.75; });
  family_test::expect_cpu_matches_reference(model, {3, 1, 4, 1, 5, 9, 2, 6});
  RunOptions opts;
  opts.full = true;
  for (const TokenTrace& t : golden_test::run_tokens(*make_backend("cpu", model), {3, 1, 4}, opts, true))
    for (float d : t.ssm_delta) ASSERT_GE(d, 0.75f);
}

TEST(NemotronHTiny, PatternThatDisagreesWithTheFile_NamesTheMissingTensor) {
  test::TempDir dir;
  auto model = nemotron_tiny(dir);
  // Layer 11 was written as an MLP ('-'); the config now calls it a Mamba-2 layer.
  JambaConfig c = model->config;
  c.layer_pattern.back() = 'M';
  std::ofstream(dir / "config.json") << config_to_json(c);
  EXPECT_LOAD_ERROR(load_model(dir.path), "missing tensor 'backbone.layers.11.mixer.in_proj.weight'");
}

TEST(NemotronHTiny, StateBytes_OnlyTheMamba2LayersKeepState) {
  test::TempDir dir;
  auto model = nemotron_tiny(dir);
  const int64_t per_layer = (256 + 2 * 2 * 16) * 4 + 256 * 16;  // W rows of x|B|C, then Di · N
  EXPECT_EQ(state_bytes(model->config, model->schedule, 4), 5 * per_layer * 4);
}

// Vulkan runs every layer kind of the pattern (Mamba-2, attention without positions, the relu² MLP
// without a mixer) as the CPU does: logits and every instrument with full records, by decode steps,
// by a prefill of 5 tokens then decode steps, and by one prefill of 40 tokens (against the CPU's
// prefill too, its chunked SSD scan from 32 tokens on, the device's token-order scan) that also
// equals the device's decode steps; with 2 registers and softmax-1 too, and with the Δ floor of
// time_step_min binding every head and the Mamba-2 projections' biases (use_bias).
TEST(NemotronHTiny, Vulkan_PrefillThenDecode_MatchesTheCpuBackend_EveryInstrument) {
  if (!family_test::backend_here("vulkan")) GTEST_SKIP() << "no Vulkan device";
  const std::vector<int32_t> ids = family_test::device_test_ids(40);
  test::TempDir dir, floor_dir;
  auto model = nemotron_tiny(dir);
  family_test::expect_device_matches_cpu(model, "vulkan", ids, 5, RunOptions{});
  const RunOptions reg = family_test::registers_softmax1();
  family_test::expect_device_matches_cpu(model, "vulkan", ids, 5, reg);
  auto floored = nemotron_tiny(floor_dir, [](JambaConfig& c) {
    c.time_step_min = 0.75;
    c.mamba_proj_bias = true;  // use_bias: in_proj and out_proj biases
  });
  ASSERT_NE(SafetensorsFile::open(floor_dir / "model.safetensors").find("backbone.layers.0.mixer.out_proj.bias"),
            nullptr);
  family_test::expect_device_matches_cpu(floored, "vulkan", {3, 1, 4, 1, 5, 9, 2, 6}, 3, RunOptions{});
}

// CUDA runs Nemotron-H without MoE (its Mamba-2 unit, the layers without a mixer, the relu² MLP and
// its mlp_bias biases) as the CPU does: logits and every instrument with full records, by decode
// steps, a prefill of 5 tokens then decode steps, and one prefill of 40 tokens; with 2 registers and
// softmax-1 too, and with the Δ floor of time_step_min binding every head, the Mamba-2 projections'
// biases (use_bias) and the MLP's (mlp_bias). Skips without a device (tools/gpu-check.sh runs it).
TEST(NemotronHTiny, Cuda_PrefillThenDecode_MatchesTheCpuBackend_EveryInstrument) {
  if (!family_test::backend_here("cuda")) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> ids = family_test::device_test_ids(40);
  test::TempDir dir, floor_dir;
  auto model = nemotron_tiny(dir);
  family_test::expect_device_matches_cpu(model, "cuda", ids, 5, RunOptions{});
  const RunOptions reg = family_test::registers_softmax1();
  family_test::expect_device_matches_cpu(model, "cuda", ids, 5, reg);
  auto floored = nemotron_tiny(floor_dir, [](JambaConfig& c) {
    c.time_step_min = 0.75;
    c.mamba_proj_bias = true;  // use_bias: in_proj and out_proj biases
    c.mlp_bias = true;         // the relu² MLP's up and down biases
  });
  family_test::expect_device_matches_cpu(floored, "cuda", {3, 1, 4, 1, 5, 9, 2, 6}, 3, RunOptions{});
}

}  // namespace
}  // namespace hl
