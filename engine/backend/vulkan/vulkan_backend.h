// The Vulkan compute backend's public face (no Vulkan headers here): options, the factory used by
// make_backend, and whether a device exists. The model runs in GLSL compute kernels (shaders/)
// on any Vulkan 1.1 device, lavapipe included; the CPU backend is its reference (issue 7).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
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
};

// Throws BackendFailure with the reason: no usable device, not enough device memory, a tensor
// larger than the device's largest buffer binding, a failed or lost device.
std::unique_ptr<Backend> make_vulkan_backend(std::shared_ptr<const Model> model, const VulkanOptions& opts = {});
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
