// The CPU backend's module tables: which unit runs each mixer kind and each feed-forward kind
// (cpu_module.h). Adding a kind: its unit's file, its maker declared here and one table line.
#include "engine/backend/cpu/cpu_module.h"
#include "engine/backend/layer_modules.h"

namespace hl::cpu {

std::unique_ptr<CpuMixer> make_cpu_attention(CpuRun& run, int64_t layer);  // cpu_attention.cpp
std::unique_ptr<CpuMixer> make_cpu_mamba1(CpuRun& run, int64_t layer);     // cpu_mamba1.cpp
std::unique_ptr<CpuFfn> make_cpu_dense(CpuRun& run, int64_t layer);        // cpu_ffn.cpp
std::unique_ptr<CpuFfn> make_cpu_moe(CpuRun& run, int64_t layer);          // cpu_ffn.cpp

namespace {

constexpr ModuleEntry<MixerKind, MakeCpuMixer> kMixers[] = {
    {MixerKind::Attention, make_cpu_attention},
    {MixerKind::Mamba1, make_cpu_mamba1},
};
constexpr ModuleEntry<FfnKind, MakeCpuFfn> kFfns[] = {
    {FfnKind::Dense, make_cpu_dense},
    {FfnKind::MoE, make_cpu_moe},
};

}  // namespace

std::unique_ptr<CpuMixer> make_mixer(CpuRun& run, int64_t layer) {
  return find_module(kMixers, run.sched[layer].mixer, "cpu", layer)(run, layer);
}

std::unique_ptr<CpuFfn> make_ffn(CpuRun& run, int64_t layer) {
  const FfnKind kind = run.sched[layer].ffn;
  if (kind == FfnKind::None) return nullptr;
  return find_module(kFfns, kind, "cpu", layer)(run, layer);
}

}  // namespace hl::cpu
