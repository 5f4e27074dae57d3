// The CUDA backend's module tables (cuda_modules.cpp, issue 14 item 2) without a device: every layer
// gets the unit of its schedule's kinds and each unit asks for the run state its shape implies (the
// KV cache per position, the Mamba window + state once; Bamba's Mamba-2 units theirs), a layer without
// a feed-forward gets no FFN unit, and a shape a unit's kernels refuse is one line of BackendFailure
// before any device work.
// Built only into hl_cuda_tests (label cuda, HL_CUDA_TESTS defined); needs no device.
#ifdef HL_CUDA_TESTS
#include <gtest/gtest.h>

#include "engine/backend/cuda/cuda_module.h"
#include "engine/model/generator.h"
#include "engine/model/loader.h"
#include "test_util.h"
#include "tests/engine/backend_test_util.h"
#include "tests/engine/module_test_util.h"

using namespace hl;
using hl::backend_test::golden_case;

TEST(CudaModules, EveryLayerGetsTheUnitOfItsKinds_StateFromItsShape) {
  auto model = load_model(golden_case("gqa_basic"));  // 4 layers: attention at 1, 3; MoE at 0, 2
  const JambaConfig& c = model->config;
  const LayerSchedule& s = model->schedule;
  const cuda::CudaUnits u = cuda::make_cuda_units({*model, c, s});
  ASSERT_EQ(static_cast<int64_t>(u.mixers.size()), s.size());
  ASSERT_EQ(static_cast<int64_t>(u.ffns.size()), s.size());
  const int64_t kv_row = c.num_key_value_heads * (c.hidden_size / c.num_attention_heads) * 4;  // bytes a position
  const int64_t ssm = (c.mamba_d_conv + c.mamba_d_state) * c.mamba_expand * c.hidden_size * 4;
  for (int64_t i = 0; i < s.size(); ++i) {
    ASSERT_TRUE(u.mixers[i] && u.ffns[i]) << "layer " << i;
    const std::vector<cuda::CudaStateNeed> need = u.mixers[i]->state();
    if (s[i].has_attention()) {  // keys and values, growing with the context
      ASSERT_EQ(need.size(), 2u) << "layer " << i;
      for (const cuda::CudaStateNeed& n : need) {
        EXPECT_EQ(n.per_position, kv_row) << "layer " << i << " " << n.what;
        EXPECT_EQ(n.bytes, 0) << "layer " << i;
      }
    } else {  // the conv window (W, Di) and the scan state (N, Di), fp32
      ASSERT_EQ(need.size(), 1u) << "layer " << i;
      EXPECT_EQ(need[0].per_position, 0) << "layer " << i;
      EXPECT_EQ(need[0].bytes, ssm) << "layer " << i;
    }
    EXPECT_TRUE(u.ffns[i]->state().empty()) << "layer " << i;
  }
}

TEST(CudaModules, LayerWithoutFeedForward_NoFfnUnit) {
  auto model = load_model(golden_case("gqa_basic"));
  using M = MixerKind;
  using F = FfnKind;
  const LayerSchedule s = LayerSchedule::from_lists({M::Mamba1, M::Attention, M::Mamba1, M::Attention},
                                                    {F::None, F::MoE, F::Dense, F::None}, model->schedule.params());
  const cuda::CudaUnits u = cuda::make_cuda_units({*model, model->config, s});
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(u.mixers[i]) << "layer " << i;
    EXPECT_EQ(u.ffns[i] != nullptr, s[i].ffn != F::None) << "layer " << i;
  }
}

// The attention unit refuses a head_dim above its kernel's 256 and the MoE unit more than 256
// experts or 64 per token; a schedule without layers of that kind is built.
TEST(CudaModules, ShapeBeyondAKernel_OneLineBackendFailure_OnlyWhereTheKindIsUsed) {
  auto model = load_model(golden_case("gqa_basic"));
  using M = MixerKind;
  using F = FfnKind;
  const LayerSchedule& s = model->schedule;
  const LayerSchedule mamba_dense =
      LayerSchedule::from_lists({M::Mamba1, M::Mamba1, M::Mamba1, M::Mamba1}, {F::Dense, F::Dense, F::Dense, F::Dense},
                                s.params());
  JambaConfig wide = model->config;
  wide.num_attention_heads = 1;  // head_dim = hidden_size = 512
  wide.num_key_value_heads = 1;
  wide.hidden_size = 512;
  EXPECT_EQ(backend_test::backend_failure_of([&] { cuda::make_cuda_units({*model, wide, s}); }),
            "cuda: head_dim 512 is above the attention kernel's limit of 256");
  JambaConfig many = model->config;
  many.num_experts = 257;
  EXPECT_EQ(backend_test::backend_failure_of([&] { cuda::make_cuda_units({*model, many, s}); }),
            "cuda: the router kernel takes at most 256 experts, 64 per token and 64 groups (layer 0: 257, 2, 1)");
  many = model->config;
  many.num_experts_per_tok = 65;
  EXPECT_EQ(backend_test::backend_failure_of([&] { cuda::make_cuda_units({*model, many, s}); }),
            "cuda: the router kernel takes at most 256 experts, 64 per token and 64 groups (layer 0: 4, 65, 1)");
  EXPECT_EQ(cuda::make_cuda_units({*model, wide, mamba_dense}).mixers.size(), 4u);
  EXPECT_EQ(cuda::make_cuda_units({*model, many, mamba_dense}).ffns.size(), 4u);
}

namespace {

// A generator preset written in HF's format and loaded back; `patch` changes its config first.
std::shared_ptr<Model> preset_model(const test::TempDir& dir, const char* preset,
                                    void (*patch)(JambaConfig&) = nullptr) {
  GenerateOptions o;
  o.config = preset_config(preset);
  if (patch) patch(o.config);
  o.seed = 7;
  generate_checkpoint(dir.path, o);
  return load_model(dir.path);
}

}  // namespace

// Bamba (bamba-tiny: Mamba-2 with 8 heads of 32, 2 groups, N 16, W 4; attention with RoPE at 2 and
// 6): each Mamba-2 layer's unit asks for the conv window of x|B|C (W, Di + 2GN) and the heads' state
// (N, Di) once, fp32; the attention layers for their KV caches. Its attention and MLP biases are one
// line of BackendFailure.
TEST(CudaModules, Bamba_Mamba2UnitWithStateFromItsShape) {
  test::TempDir dir, bias_dir;
  auto model = preset_model(dir, "bamba-tiny");
  const JambaConfig& c = model->config;
  const LayerSchedule& s = model->schedule;
  const cuda::CudaUnits u = cuda::make_cuda_units({*model, c, s});
  const int64_t per_layer = (4 * (256 + 2 * 2 * 16) + 16 * 256) * 4;
  ASSERT_EQ(c.mamba_d_conv * c.mamba2_conv_dim() + c.mamba_d_state * c.mamba_inner(), per_layer / 4);
  int64_t mamba2 = 0;
  for (int64_t i = 0; i < s.size(); ++i) {
    ASSERT_TRUE(u.mixers[i] && u.ffns[i]) << "layer " << i;
    const std::vector<cuda::CudaStateNeed> need = u.mixers[i]->state();
    if (s[i].mixer != MixerKind::Mamba2) {
      EXPECT_TRUE(s[i].has_attention() && s[i].attn.rotary_dim > 0) << "layer " << i;
      EXPECT_EQ(need.size(), 2u) << "layer " << i;
      continue;
    }
    ++mamba2;
    ASSERT_EQ(need.size(), 1u) << "layer " << i;
    EXPECT_EQ(need[0].per_position, 0) << "layer " << i;
    EXPECT_EQ(need[0].bytes, per_layer) << "layer " << i;
  }
  EXPECT_EQ(mamba2, 6);
  auto biased = preset_model(bias_dir, "bamba-tiny", [](JambaConfig& b) { b.attention_bias = b.mlp_bias = true; });
  const Model& bm = *biased;
  EXPECT_EQ(backend_test::backend_failure_of([&] { cuda::make_cuda_units({bm, bm.config, bm.schedule}); }),
            "cuda: no kernel for attention projection biases; use the cpu backend");
}

// Nemotron-H (nemotron-h-tiny, "M-M-M*-M-M*-"): a Mamba-2 layer has a mixer unit and no FFN unit, a
// '-' layer an FFN unit (the relu² MLP) and no mixer unit, an attention layer its KV caches; the
// relu² MLP's biases (mlp_bias) are taken.
TEST(CudaModules, NemotronH_LayersWithoutAMixer_NoMixerUnit_Relu2MlpBiasesTaken) {
  test::TempDir dir, bias_dir;
  auto model = preset_model(dir, "nemotron-h-tiny");
  const JambaConfig& c = model->config;
  const LayerSchedule& s = model->schedule;
  const cuda::CudaUnits u = cuda::make_cuda_units({*model, c, s});
  const int64_t ssm = (c.mamba_d_conv * c.mamba2_conv_dim() + c.mamba_d_state * c.mamba_inner()) * 4;
  for (int64_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(u.mixers[i] != nullptr, s[i].mixer != MixerKind::None) << "layer " << i;
    EXPECT_EQ(u.ffns[i] != nullptr, s[i].ffn != FfnKind::None) << "layer " << i;
    EXPECT_TRUE(u.mixers[i] || u.ffns[i]) << "layer " << i;
    if (s[i].mixer == MixerKind::Mamba2) {
      const std::vector<cuda::CudaStateNeed> need = u.mixers[i]->state();
      ASSERT_EQ(need.size(), 1u) << "layer " << i;
      EXPECT_EQ(need[0].bytes, ssm) << "layer " << i;
    }
  }
  auto biased =
      preset_model(bias_dir, "nemotron-h-tiny", [](JambaConfig& b) { b.mlp_bias = b.mamba_proj_bias = true; });
  EXPECT_EQ(cuda::make_cuda_units({*biased, biased->config, biased->schedule}).ffns.size(), 12u);
}

// What CUDA refuses of the family golden cases, each in one line before any device work; the rest it
// takes (their golden suites run on a device, test_cuda.cpp).
TEST(CudaModules, FamilyGoldenCases_ExactlyTheseRefused) {
  const std::string kMultipliers =
      "cuda: no kernel for the embedding / residual / attention / logits multipliers; use the cpu backend";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bamba_basic", ""},
      {"bamba_clamped", ""},
      {"nemotron_basic", ""},
      {"nemotron_list", ""},
      {"nemotron_moe", ""},
      {"nemotron_moe_latent", ""},
      {"granite_dense", ""},
      {"granite_moe", ""},
      {"falcon_basic", kMultipliers},
      {"falcon_variant", kMultipliers}};
  for (const auto& [name, want] : cases) {
    auto model = load_model(golden_case(name));
    const Model& m = *model;
    EXPECT_EQ(backend_test::backend_failure_of([&] { cuda::make_cuda_units({m, m.config, m.schedule}); }),
              want.empty() ? "(no BackendFailure)" : want)
        << name;
  }
}

#endif  // HL_CUDA_TESTS
