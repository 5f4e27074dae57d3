// The CPU backend's units of a model's layers, found in its module tables (cpu_module.h), to which
// each unit's own file adds its line (cpu_attention.cpp, cpu_mamba1.cpp, cpu_ffn.cpp). Adding a kind
// adds its unit's file; nothing here changes.
#include "engine/backend/cpu/cpu_module.h"
#include "engine/backend/layer_modules.h"

namespace hl::cpu {

std::unique_ptr<CpuMixer> make_mixer(CpuRun& run, int64_t layer) {
  const MixerKind kind = run.sched[layer].mixer;
  if (!mixer_present(kind)) return nullptr;
  return find_module(CpuMixerTable::entries(), kind, "cpu", layer)(run, layer);
}

std::unique_ptr<CpuFfn> make_ffn(CpuRun& run, int64_t layer) {
  const FfnKind kind = run.sched[layer].ffn;
  if (kind == FfnKind::None) return nullptr;
  return find_module(CpuFfnTable::entries(), kind, "cpu", layer)(run, layer);
}

}  // namespace hl::cpu
