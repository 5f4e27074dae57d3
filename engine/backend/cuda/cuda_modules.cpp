// The CUDA backend's units of a model's layers, found in its module tables (cuda_module.h), to which
// each unit's own file adds its line (cuda_attention.cpp, cuda_mamba1.cpp, cuda_mamba2.cpp,
// cuda_ffn.cpp). A new kind adds its unit's file; nothing here changes, and the model loop
// (cuda_forward.cpp) and the backend (cuda_backend.cpp) name no kind.
#include "engine/backend/cuda/cuda_module.h"
#include "engine/backend/layer_modules.h"

namespace hl::cuda {

CudaUnits make_cuda_units(const CudaModuleContext& ctx, LayerRange layers) {
  const LayerSchedule& sched = ctx.schedule;
  if (layers.end < 0) layers.end = sched.size();
  auto mine = [&](int64_t i) { return i >= layers.begin && i < layers.end; };
  CudaUnits u;
  // MLP biases: the relu² MLPs' only (Nemotron-H's '-' layers), not a gated MLP's.
  bool relu2_only = true;
  for (const LayerSpec& l : sched.layers()) relu2_only = relu2_only && (l.ffn == FfnKind::None || !l.ffn_params.gated);
  check_model_params(ctx.config, "cuda", relu2_only, /*granite_ok=*/true);
  for (int64_t i = 0; i < sched.size(); ++i)  // MixerKind::None has no unit: the layer is its feed-forward
    u.mixers.push_back(mine(i) && mixer_present(sched[i].mixer)
                           ? find_module(CudaMixerTable::entries(), sched[i].mixer, "cuda", i)(ctx, i)
                           : nullptr);
  for (int64_t i = 0; i < sched.size(); ++i)  // FfnKind::None has no unit: the layer ends after its mixer
    u.ffns.push_back(!mine(i) || sched[i].ffn == FfnKind::None
                         ? nullptr
                         : find_module(CudaFfnTable::entries(), sched[i].ffn, "cuda", i)(ctx, i));
  return u;
}

}  // namespace hl::cuda
