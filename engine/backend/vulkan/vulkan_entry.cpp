// The Vulkan backend's registry entry (backend_registry.h) and its environment settings:
// HL_VULKAN_F32_AS_F16=1 stores F32 checkpoint matrices as F16 on the device; HL_VULKAN_MATMUL=tiled|rows
// picks the prefill product kernel (README). Built only with the Vulkan backend (CMake HL_HAVE_VULKAN).
#include <cstdlib>
#include <cstring>

#include "engine/backend/backend_registry.h"
#include "engine/backend/vulkan/vk_context.h"
#include "engine/backend/vulkan/vulkan_backend.h"

namespace hl {

namespace {

VulkanOptions vulkan_options(bool gpu_only) {
  VulkanOptions o;
  o.gpu_only = gpu_only;
  const char* f16 = std::getenv("HL_VULKAN_F32_AS_F16");
  o.f32_as_f16 = f16 && std::strcmp(f16, "1") == 0;
  if (const char* m = std::getenv("HL_VULKAN_MATMUL")) {
    if (std::strcmp(m, "tiled") == 0) o.matmul = VulkanOptions::Matmul::Tiled;
    if (std::strcmp(m, "rows") == 0) o.matmul = VulkanOptions::Matmul::Rows;
  }
  return o;
}

}  // namespace

BackendEntry vulkan_backend_entry() {
  BackendEntry e;
  e.menu_order = 1;
  e.name = "vulkan";
  e.label = "Vulkan";
  e.auto_rank = 20;  // after CUDA, before the CPU; never a CPU-emulated device (lavapipe)
  e.available = [](bool native) { return vulkan_available(native); };
  e.make = [](std::shared_ptr<const Model> model, bool for_auto) {
    return make_vulkan_backend(std::move(model), vulkan_options(for_auto));
  };
  e.make_stage = [](std::shared_ptr<const Model> model, StageLink* link, const std::vector<LayerRange>& ranges) {
    VulkanOptions o = vulkan_options(false);
    o.device_slot = link->local_rank();  // one GPU per rank on a host with several
    return make_vulkan_stage_backend(std::move(model), o, link, ranges);
  };
  e.describe = [] { return vk::Context::describe_device(); };
  return e;
}

static const BackendTable::Add kRegistered{vulkan_backend_entry()};

}  // namespace hl
