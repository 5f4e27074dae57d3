// The CUDA backend's module tables (layer_modules.h): one line per mixer kind and per feed-forward
// kind with the function that makes its unit (cuda_module.h), and the units of a model's layers made
// from them. A new kind adds its file, its maker's declaration and one table line here; the model
// loop (cuda_forward.cpp) and the backend (cuda_backend.cpp) name no kind.
#include "engine/backend/cuda/cuda_module.h"
#include "engine/backend/layer_modules.h"

namespace hl::cuda {

std::unique_ptr<CudaMixer> make_cuda_attention(const CudaModuleContext& c, int64_t layer);  // cuda_attention.cpp
std::unique_ptr<CudaMixer> make_cuda_mamba1(const CudaModuleContext& c, int64_t layer);     // cuda_mamba1.cpp
std::unique_ptr<CudaFfn> make_cuda_dense_ffn(const CudaModuleContext& c, int64_t layer);    // cuda_ffn.cpp
std::unique_ptr<CudaFfn> make_cuda_moe_ffn(const CudaModuleContext& c, int64_t layer);      // cuda_ffn.cpp

namespace {

const ModuleEntry<MixerKind, MakeCudaMixer> kCudaMixers[] = {
    {MixerKind::Attention, make_cuda_attention},
    {MixerKind::Mamba1, make_cuda_mamba1},
};

// FfnKind::None has no unit: the layer ends after its mixer.
const ModuleEntry<FfnKind, MakeCudaFfn> kCudaFfns[] = {
    {FfnKind::Dense, make_cuda_dense_ffn},
    {FfnKind::MoE, make_cuda_moe_ffn},
};

}  // namespace

CudaUnits make_cuda_units(const CudaModuleContext& ctx) {
  const LayerSchedule& sched = ctx.schedule;
  CudaUnits u;
  for (int64_t i = 0; i < sched.size(); ++i)
    u.mixers.push_back(find_module(kCudaMixers, sched[i].mixer, "cuda", i)(ctx, i));
  for (int64_t i = 0; i < sched.size(); ++i)
    u.ffns.push_back(sched[i].ffn == FfnKind::None ? nullptr : find_module(kCudaFfns, sched[i].ffn, "cuda", i)(ctx, i));
  return u;
}

}  // namespace hl::cuda
