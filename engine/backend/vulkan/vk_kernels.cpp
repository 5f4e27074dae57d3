// The embedded SPIR-V of shaders/*.comp: each generated .inc (glslc -mfmt=c, built by
// engine/CMakeLists.txt) is a brace-enclosed word list, so the executable needs no shader files.
#include "engine/backend/vulkan/vk_kernels.h"

namespace hl::vk {
namespace {

const uint32_t k_embed[] =
#include "embed.comp.inc"
    ;
const uint32_t k_rmsnorm[] =
#include "rmsnorm.comp.inc"
    ;
const uint32_t k_matvec[] =
#include "matvec.comp.inc"
    ;
const uint32_t k_matvec_moe_down[] =
#include "matvec_moe_down.comp.inc"
    ;
const uint32_t k_matmul[] =
#include "matmul.comp.inc"
    ;
const uint32_t k_matmul_rows[] =
#include "matmul_rows.comp.inc"
    ;
const uint32_t k_kv_append[] =
#include "kv_append.comp.inc"
    ;
const uint32_t k_attention[] =
#include "attention.comp.inc"
    ;
const uint32_t k_conv[] =
#include "conv.comp.inc"
    ;
const uint32_t k_scan_step[] =
#include "scan_step.comp.inc"
    ;
const uint32_t k_scan_prefill[] =
#include "scan_prefill.comp.inc"
    ;
const uint32_t k_moe_route[] =
#include "moe_route.comp.inc"
    ;
const uint32_t k_swiglu[] =
#include "swiglu.comp.inc"
    ;
const uint32_t k_moe_combine[] =
#include "moe_combine.comp.inc"
    ;
const uint32_t k_row_mean[] =
#include "row_mean.comp.inc"
    ;
const uint32_t k_mamba2_scan[] =
#include "mamba2_scan.comp.inc"
    ;
const uint32_t k_gated_norm[] =
#include "gated_norm.comp.inc"
    ;
const uint32_t k_relu2[] =
#include "relu2.comp.inc"
    ;

const uint32_t k_heatmap[] =
#include "heatmap.comp.inc"
    ;
const uint32_t k_rope[] =
#include "rope.comp.inc"
    ;

template <size_t N>
Spirv make(const uint32_t (&w)[N], const char* name) {
  return Spirv{w, N, name};
}

}  // namespace

Spirv kernel_spirv(Kernel k) {
  switch (k) {
    case Kernel::Embed:
      return make(k_embed, "embed");
    case Kernel::RmsNorm:
      return make(k_rmsnorm, "rmsnorm");
    case Kernel::Matvec:
      return make(k_matvec, "matvec");
    case Kernel::MatvecMoeDown:
      return make(k_matvec_moe_down, "matvec_moe_down");
    case Kernel::Matmul:
      return make(k_matmul, "matmul");
    case Kernel::MatmulRows:
      return make(k_matmul_rows, "matmul_rows");
    case Kernel::KvAppend:
      return make(k_kv_append, "kv_append");
    case Kernel::Attention:
      return make(k_attention, "attention");
    case Kernel::Conv:
      return make(k_conv, "conv");
    case Kernel::ScanStep:
      return make(k_scan_step, "scan_step");
    case Kernel::ScanPrefill:
      return make(k_scan_prefill, "scan_prefill");
    case Kernel::MoeRoute:
      return make(k_moe_route, "moe_route");
    case Kernel::Swiglu:
      return make(k_swiglu, "swiglu");
    case Kernel::MoeCombine:
      return make(k_moe_combine, "moe_combine");
    case Kernel::RowMean:
      return make(k_row_mean, "row_mean");
    case Kernel::Mamba2Scan:
      return make(k_mamba2_scan, "mamba2_scan");
    case Kernel::GatedNorm:
      return make(k_gated_norm, "gated_norm");
    case Kernel::Relu2:
      return make(k_relu2, "relu2");
    case Kernel::Heatmap:
      return make(k_heatmap, "heatmap");
    case Kernel::Rope:
      return make(k_rope, "rope");
    case Kernel::Count:
      break;
  }
  return Spirv{nullptr, 0, "?"};
}

}  // namespace hl::vk
