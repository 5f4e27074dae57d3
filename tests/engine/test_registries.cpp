// The self-registered tables (engine/core/registry.h): every mixer kind of mixer_kinds.def has its
// weights (model/mixer_ops.h), its reference unit (reference/ref_mixer.h) and its CPU unit exactly
// once; each device backend built holds at least Jamba's kinds, none twice; every feed-forward kind
// but None has one unit everywhere; every backend compiled in is in the backend table. A registering file dropped by the link, or a kind registered twice,
// fails here by name.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "engine/backend/backend_registry.h"
#include "engine/backend/cpu/cpu_module.h"
#include "engine/model/mixer_ops.h"
#include "engine/reference/ref_mixer.h"
#ifdef HL_HAVE_VULKAN
#include "engine/backend/vulkan/vk_module.h"
#endif
#ifdef HL_HAVE_CUDA
#include "engine/backend/cuda/cuda_module.h"
#endif

using namespace hl;

namespace {

std::vector<MixerKind> all_mixer_kinds() {
  std::vector<MixerKind> v;
  for (int k = 0; k < kMixerKinds; ++k) v.push_back(static_cast<MixerKind>(k));
  return v;
}

// How many entries of `table` name each kind.
template <class Table, class Kind>
int count_kind(const Table& table, Kind kind) {
  int n = 0;
  for (const auto& e : table) n += e.kind == kind;
  return n;
}

template <class Table>
void expect_every_mixer_kind_once(const Table& table, const char* what) {
  EXPECT_EQ(table.size(), static_cast<size_t>(kMixerKinds)) << what;
  for (MixerKind k : all_mixer_kinds()) EXPECT_EQ(count_kind(table, k), 1) << what << ": " << mixer_name(k);
}

// Units: one for each kind that is a mixer; none for `none` (the loops skip the layer's mixer).
template <class Table>
void expect_every_present_mixer_kind_once(const Table& table, const char* what) {
  EXPECT_EQ(table.size(), static_cast<size_t>(kMixerKinds - 1)) << what;
  for (MixerKind k : all_mixer_kinds())
    EXPECT_EQ(count_kind(table, k), mixer_present(k) ? 1 : 0) << what << ": " << mixer_name(k);
}

// A device backend may lack a kind (its model then falls back to the CPU with a one-line
// BackendFailure, test_layer_modules.cpp): it must hold the kinds Jamba needs, and none twice.
template <class Table>
void expect_jamba_kinds_once_none_twice(const Table& table, const char* what) {
  for (MixerKind k : all_mixer_kinds()) {
    const int n = count_kind(table, k);
    if (k == MixerKind::Attention || k == MixerKind::Mamba1)
      EXPECT_EQ(n, 1) << what << ": " << mixer_name(k);
    else
      EXPECT_LE(n, 1) << what << ": " << mixer_name(k);
  }
}

template <class Table>
void expect_every_ffn_kind_once(const Table& table, const char* what) {
  EXPECT_EQ(count_kind(table, FfnKind::Dense), 1) << what;
  EXPECT_EQ(count_kind(table, FfnKind::MoE), 1) << what;
  EXPECT_EQ(count_kind(table, FfnKind::None), 0) << what << ": None has no unit, the layer ends after its mixer";
}

}  // namespace

TEST(Registries, MixerKindsHaveANameALetterAndAtLeastOnePart_ExceptNone) {
  ASSERT_GE(kMixerKinds, 2);
  std::map<std::string, int> names;
  std::map<char, int> letters;
  for (MixerKind k : all_mixer_kinds()) {
    ++names[mixer_name(k)];
    ++letters[mixer_letter(k)];
    EXPECT_EQ(mixer_has_attention(k) || mixer_has_ssm(k), mixer_present(k)) << mixer_name(k);
  }
  for (const auto& [n, c] : names) EXPECT_EQ(c, 1) << "name " << n;
  for (const auto& [l, c] : letters) EXPECT_EQ(c, 1) << "letter " << l;
  EXPECT_TRUE(mixer_has_attention(MixerKind::Attention) && !mixer_has_ssm(MixerKind::Attention));
  EXPECT_TRUE(mixer_has_ssm(MixerKind::Mamba1) && !mixer_has_attention(MixerKind::Mamba1));
  EXPECT_FALSE(mixer_has_attention(static_cast<MixerKind>(kMixerKinds)));  // out of range: no part
  EXPECT_STREQ(mixer_name(static_cast<MixerKind>(kMixerKinds)), "?");
  EXPECT_FALSE(mixer_present(MixerKind::None));
  EXPECT_EQ(mixer_letter(MixerKind::None), '-');
}

TEST(Registries, EveryMixerKindHasItsWeightsAndReferenceOnce) {
  expect_every_mixer_kind_once(MixerOpsTable::entries(), "weights (model/mixer_<kind>.cpp)");
  for (const MixerOps& o : MixerOpsTable::entries())
    EXPECT_TRUE(o.bind && o.widened_floats && o.each_matrix && o.vector_floats && o.state_elements) << mixer_name(o.kind);
  expect_every_present_mixer_kind_once(ref::RefMixerTable::entries(), "reference units");
}

TEST(Registries, EveryKindHasOneCpuUnit_DeviceBackendsHoldJambasKindsAndNoneTwice) {
  expect_every_present_mixer_kind_once(cpu::CpuMixerTable::entries(), "cpu mixers");
  expect_every_ffn_kind_once(cpu::CpuFfnTable::entries(), "cpu feed-forwards");
#ifdef HL_HAVE_VULKAN
  expect_jamba_kinds_once_none_twice(vk::VkMixerTable::entries(), "vulkan mixers");
  expect_every_ffn_kind_once(vk::VkFfnTable::entries(), "vulkan feed-forwards");
#endif
#ifdef HL_HAVE_CUDA
  expect_jamba_kinds_once_none_twice(cuda::CudaMixerTable::entries(), "cuda mixers");
  expect_every_ffn_kind_once(cuda::CudaFfnTable::entries(), "cuda feed-forwards");
#endif
}

TEST(Registries, EveryBackendCompiledInIsRegisteredInMenuOrder) {
  ASSERT_NE(find_backend("cpu"), nullptr);
#ifdef HL_HAVE_VULKAN
  EXPECT_NE(find_backend("vulkan"), nullptr);
#endif
#ifdef HL_HAVE_CUDA
  EXPECT_NE(find_backend("cuda"), nullptr);
#endif
  const std::vector<BackendEntry>& r = backend_registry();
  EXPECT_EQ(r.size(), BackendTable::entries().size());
  EXPECT_EQ(r.front().menu_order, 0);
  for (size_t i = 1; i < r.size(); ++i) EXPECT_LT(r[i - 1].menu_order, r[i].menu_order) << r[i].name;
}
