// The Vulkan compute backend's public face (no Vulkan headers here): options, the factory used by
// make_backend, and whether a device exists. The model runs in GLSL compute kernels (shaders/)
// on any Vulkan 1.1 device, lavapipe included; the CPU backend is its reference (issue 7).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/pipeline.h"
#include "engine/model/intermediates.h"

namespace hl {

struct VulkanOptions {
  bool gpu_only = false;    // refuse CPU-emulated devices (lavapipe): what `auto` asks for
  bool f32_as_f16 = false;  // store F32 checkpoint matrices as F16 (half the memory, ~1e-3 error);
                            // BF16/F16 matrices are always stored as they are
  int64_t max_block = 256;  // most tokens per submission; longer prefills run in blocks
  // Prefill products: shared-memory tiles (GPUs) or barrier-free subgroup rows (CPU devices such
  // as lavapipe, where barriers are expensive). Auto picks by device type; HL_VULKAN_MATMUL=tiled|rows.
  enum class Matmul { Auto, Tiled, Rows } matmul = Matmul::Auto;
  // A pipeline stage's index among the stages on its host (StageLink::local_rank): with several
  // GPUs of the preferred kind, the (slot mod count)-th, so one rank per GPU needs no setting.
  // -1: the first. HL_VULKAN_DEVICE overrides both.
  int device_slot = -1;
};

// Throws BackendFailure with the reason: no usable device, not enough device memory, a tensor
// larger than the device's largest buffer binding, a failed or lost device.
std::unique_ptr<Backend> make_vulkan_backend(std::shared_ptr<const Model> model, const VulkanOptions& opts = {});
// One stage of a pipeline over `link` (pipeline.h): `model` loaded with load_stage for
// ranges[link->rank()]. Its layers run on the device; the residual rows come from the stage before
// and go to the stage after on the host (float32, as the CPU stage's, so stages on different backends
// combine), and the records are merged on stage 0 (gather_stage_records). Throws as make_vulkan_backend,
// and Error when the model holds other layers than the stage's.
std::unique_ptr<Backend> make_vulkan_stage_backend(std::shared_ptr<const Model> model, const VulkanOptions& opts,
                                                   StageLink* link, std::vector<LayerRange> ranges);
// The named intermediates (model/intermediates.h) of the Vulkan backend `b` from its next block on
// (VulkanBackend::set_observer; an empty function stops them). Throws std::invalid_argument when
// `b` is not a Vulkan backend.
void set_vulkan_observer(Backend& b, IntermediateObserver f);
// Whether a usable device exists (a GPU when gpu_only). Cheap after the first call; never throws.
bool vulkan_available(bool gpu_only);
// Test hook: on every Vulkan device in use, the submission after the next `submissions` ones fails
// as a lost device would (BackendFailure). HL_VULKAN_FAIL_AFTER=n does the same for a new process.
void vulkan_simulate_device_loss(int64_t submissions);

}  // namespace hl
