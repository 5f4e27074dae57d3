// The Bamba family (HF BambaConfig / BambaForCausalLM, model_type "bamba"): its config fields and their
// one-line errors, the schedule they give (attention at attn_layer_indices, Mamba-2 elsewhere, RoPE),
// the bamba-tiny preset written in HF's format and run on the CPU backend against the reference
// forward (prefill and decode), its state sizes, and the CUDA backend against the CPU. The logits against
// the independent NumPy reference are the golden cases bamba_basic / bamba_clamped (test_golden.cpp).
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
#include "engine/reference/ref_model.h"
#include "sessions/session_file.h"
#include "tests/engine/family_test_util.h"
#include "tests/engine/golden_util.h"
#include "tests/engine/session_test_util.h"
#include "test_util.h"

namespace hl {
namespace {

// A small Bamba config.json with the fields published Bamba checkpoints carry; `patch` (a JSON
// object) replaces or adds fields.
std::string bamba_json(const std::string& patch = "{}") {
  nlohmann::json j = nlohmann::json::parse(R"({"model_type": "bamba", "vocab_size": 64, "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
    "attn_layer_indices": [3, 1], "mamba_n_heads": 8, "mamba_d_head": "auto", "mamba_n_groups": 2,
    "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 16,
    "time_step_limit": [0.01, 0.5], "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0},
    "tie_word_embeddings": true})");
  j.update(nlohmann::json::parse(patch));
  return j.dump();
}

TEST(BambaConfig, FieldsAndDefaults) {
  const JambaConfig c = parse_config(bamba_json());
  EXPECT_EQ(c.family, Family::Bamba);
  EXPECT_EQ(c.mamba_n_heads, 8);
  EXPECT_EQ(c.mamba_d_head, 8);  // "auto": mamba_expand · hidden_size / mamba_n_heads = 64 / 8
  EXPECT_EQ(c.mamba_n_groups, 2);
  EXPECT_EQ(c.mamba2_conv_dim(), 64 + 2 * 2 * 8);
  EXPECT_EQ(c.attn_layer_indices, (std::vector<int64_t>{1, 3}));
  EXPECT_DOUBLE_EQ(c.time_step_limit_min, 0.01);
  EXPECT_DOUBLE_EQ(c.time_step_limit_max, 0.5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rotary_dim(), 4);      // head_dim 8 · 0.5
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);  // BambaConfig's default, not Jamba's 1e-6
  EXPECT_TRUE(c.ignored_fields.empty());
  // No time_step_limit: no clamp; a top-level rope_theta (older files) is read too.
  const JambaConfig d = parse_config(R"({"model_type": "bamba", "hidden_size": 32, "num_attention_heads": 4,
      "num_key_value_heads": 4, "mamba_n_heads": 4, "rope_theta": 1000.0, "num_hidden_layers": 2})");
  EXPECT_EQ(d.time_step_limit_min, 0.0);
  EXPECT_TRUE(std::isinf(d.time_step_limit_max));
  EXPECT_DOUBLE_EQ(d.rope_theta, 1000.0);
  EXPECT_TRUE(d.attn_layer_indices.empty());
  // Jamba's own fields mean nothing to Bamba: `info` lists them as ignored.
  const JambaConfig e = parse_config(bamba_json(R"({"attn_layer_period": 8, "partial_rotary_factor": 0.25})"));
  EXPECT_EQ(e.ignored_fields,
            (std::vector<std::string>{"attn_layer_period", "partial_rotary_factor (Bamba always uses 0.5)"}));
  EXPECT_EQ(e.rotary_dim(), 4);
}

TEST(BambaConfigCorrupt, EachDefectItsOwnMessage) {
  const struct {
    const char* extra;
    const char* message;
  } rows[] = {
      {R"({"mamba_n_heads": 7})", "field 'mamba_n_heads': expected a divisor of mamba_expand · hidden_size = 64, got 7"},
      {R"({"mamba_d_head": 16})", "field 'mamba_d_head': expected \"auto\" or 8"},
      {R"({"mamba_n_groups": 3})", "field 'mamba_n_groups': expected a divisor of mamba_n_heads 8, got 3"},
      {R"({"attn_layer_indices": [1, 5]})", "field 'attn_layer_indices[1]': expected an integer in [0, 4], got 5"},
      {R"({"attn_layer_indices": [2, 2]})", "field 'attn_layer_indices[1]': layer 2 is listed twice"},
      {R"({"time_step_limit": [0.5, 0.1]})", "field 'time_step_limit': expected lo < hi, got [0.5, 0.1]"},
      {R"({"time_step_limit": [0.1]})", "field 'time_step_limit': expected a list of 2 numbers"},
      {R"({"time_step_limit": [-1, 2]})", "field 'time_step_limit[0]'"},
      {R"({"rope_scaling": {"type": "linear", "factor": 2.0}})", "field 'rope_scaling.type': expected \"default\""},
      {R"({"attention_bias": 1})", "field 'attention_bias': expected true or false"},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.extra);
    const std::string text = bamba_json(r.extra);
    EXPECT_LOAD_ERROR(parse_config(text), r.message);
  }
}

TEST(BambaSchedule, AttentionAtTheIndices_Mamba2Elsewhere_DenseEverywhere_RopeParams) {
  const JambaConfig c = parse_config(bamba_json());
  const LayerSchedule s = LayerSchedule::from_config(c);
  EXPECT_EQ(s.mixer_strip(), "SASAS");
  EXPECT_EQ(s.ffn_strip(), "DDDDD");
  EXPECT_EQ(s.num_ssm(), 3);
  EXPECT_EQ(s[1].attn.rotary_dim, 4);
  EXPECT_DOUBLE_EQ(s[1].attn.rope_theta, 500000.0);
  EXPECT_EQ(s[0].ssm.heads, 8);
  EXPECT_EQ(s[0].ssm.groups, 2);
  EXPECT_EQ(std::string(mixer_name(s[0].mixer)), "mamba2");
}

// A session of a Bamba model keeps its config, Infinity included (Python's token in the manifest).
TEST(BambaSession, RoundTrip_FamilyScheduleAndInfiniteClamp) {
  std::string text = bamba_json();  // as Python writes an infinite clamp
  const std::string finite = "\"time_step_limit\":[0.01,0.5]";
  ASSERT_NE(text.find(finite), std::string::npos) << text;
  text.replace(text.find(finite), finite.size(), "\"time_step_limit\": [0.0, Infinity]");
  const JambaConfig c = parse_config(text);
  ASSERT_TRUE(std::isinf(c.time_step_limit_max));
  const Recording rec = test::synthetic_recording(c, 5, 11);
  test::TempDir dir;
  save_session(dir / "b.hlsession", rec, SessionSaveOptions{});
  const Recording back = load_session(dir / "b.hlsession");
  EXPECT_EQ(back.config.family, Family::Bamba);
  EXPECT_TRUE(std::isinf(back.config.time_step_limit_max));
  EXPECT_EQ(config_to_json(back.config), config_to_json(c));
  EXPECT_EQ(LayerSchedule::from_config(back.config), LayerSchedule::from_config(c));
  ASSERT_EQ(back.runs.size(), 1u);
  EXPECT_EQ(back.runs[0].records.size(), 5u);
}

// bamba-tiny, written by the generator in HF's format and loaded back.
std::shared_ptr<Model> bamba_tiny(const test::TempDir& dir, bool biases = false) {
  GenerateOptions o;
  o.config = preset_config("bamba-tiny");
  o.config.attention_bias = o.config.mlp_bias = biases;
  o.seed = 7;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

// attention_bias and mlp_bias (HF's BambaAttention / BambaMLP read them): every projection's bias.
TEST(BambaTiny, AttentionAndMlpBiases_MatchTheReferenceForward) {
  test::TempDir dir;
  auto model = bamba_tiny(dir, true);
  const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
  EXPECT_NE(f.find("model.layers.2.self_attn.k_proj.bias"), nullptr);
  EXPECT_NE(f.find("model.layers.0.feed_forward.gate_proj.bias"), nullptr);
  EXPECT_FALSE(model->w.layers[2].attn.o_bias.empty());
  family_test::expect_cpu_matches_reference(model, {1, 17, 400, 4095, 9, 9, 2000, 33});
}

TEST(BambaTiny, CpuPrefillAndDecode_MatchTheReferenceForward) {
  test::TempDir dir;
  auto model = bamba_tiny(dir);
  ASSERT_EQ(model->config.family, Family::Bamba);
  family_test::expect_cpu_matches_reference(model, {1, 17, 400, 4095, 9, 9, 2000, 33, 5, 77, 1024, 3});
  const std::vector<TokenTrace> r = golden_test::run_tokens(*make_backend("cpu", model), {1, 2}, RunOptions{}, false);
  EXPECT_EQ(r[0].ssm_delta_mean.size(), 6u);  // the six Mamba-2 layers
}

TEST(BambaTiny, StateBytes_ConvWindowOfXBCAndTheHeadsState) {
  test::TempDir dir;
  auto model = bamba_tiny(dir);
  const JambaConfig& c = model->config;
  // Per Mamba-2 layer: W rows of x|B|C = (Di + 2·G·N) and the state nh · P · N = Di · N.
  const int64_t per_layer = (256 + 2 * 2 * 16) * 4 + 256 * 16;
  EXPECT_EQ(state_bytes(c, model->schedule, 4), 6 * per_layer * 4);
  EXPECT_EQ(ssm_state_bytes(c, 8, 4), 8 * per_layer * 4);  // the all-SSM counterfactual: Mamba-2 layers too
  auto cpu = make_backend("cpu", model);
  const std::vector<TokenTrace> r = golden_test::run_tokens(*cpu, {1, 2, 3}, RunOptions{}, false);
  EXPECT_EQ(r.back().ssm_state_bytes, 6 * per_layer * 4);
}

// CUDA runs Bamba (its Mamba-2 unit and RoPE) as the CPU does: logits and every instrument with full
// records, by decode steps, a prefill of 5 tokens then decode steps, and one prefill of 40 tokens;
// with 2 registers and softmax-1 too. Attention and MLP biases it refuses in one line. The runs skip
// without a device (tools/gpu-check.sh runs them on one).
TEST(BambaTiny, Cuda_MatchesTheCpuBackend_EveryInstrument_RefusesBiasesInOneLine) {
  test::TempDir dir, bias_dir;
  family_test::expect_device_backends_refuse(
      bamba_tiny(bias_dir, true), "no kernel for attention projection biases; use the cpu backend", {"cuda"});
  if (!family_test::backend_here("cuda")) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> ids = family_test::device_test_ids(40);
  auto model = bamba_tiny(dir);
  family_test::expect_device_matches_cpu(model, "cuda", ids, 5, RunOptions{});
  const RunOptions reg = family_test::registers_softmax1();
  family_test::expect_device_matches_cpu(model, "cuda", ids, 5, reg);
}

}  // namespace
}  // namespace hl
