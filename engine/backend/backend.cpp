// Backend selection: "auto" picks CUDA, then a Vulkan GPU (not a CPU-emulated device), then the
// CPU, falling back to the next when a GPU backend cannot be set up; a named backend that is not
// available is an error (trace-format.md §3). "cuda" built but without a device: BackendFailure.
#include "engine/backend/backend.h"

#include <cstdlib>
#include <cstring>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"
#ifdef HL_HAVE_VULKAN
#include "engine/backend/vulkan/vulkan_backend.h"
#endif
#ifdef HL_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

namespace hl {

namespace {

#ifdef HL_HAVE_VULKAN
// HL_VULKAN_F32_AS_F16=1 stores F32 checkpoint matrices as F16 on the device; HL_VULKAN_MATMUL=tiled|rows
// picks the prefill product kernel (README).
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
#endif

#ifdef HL_HAVE_CUDA
// HL_CUDA_GRAPHS=0 runs the decode step as plain launches instead of a CUDA graph.
CudaOptions cuda_options() {
  CudaOptions o;
  const char* g = std::getenv("HL_CUDA_GRAPHS");
  o.graphs = !(g && std::strcmp(g, "0") == 0);
  return o;
}
#endif

}  // namespace

std::vector<std::string> available_backends() {
  std::vector<std::string> b = {"cpu"};
#ifdef HL_HAVE_VULKAN
  if (vulkan_available(false)) b.push_back("vulkan");
#endif
#ifdef HL_HAVE_CUDA
  if (cuda_available()) b.push_back("cuda");
#endif
  return b;
}

std::unique_ptr<Backend> make_backend(const std::string& which, std::shared_ptr<const Model> model, std::string* note) {
  if (which == "cpu") return std::make_unique<cpu::CpuBackend>(std::move(model));
  if (which == "vulkan") {
#ifdef HL_HAVE_VULKAN
    return make_vulkan_backend(std::move(model), vulkan_options(false));
#else
    throw Error("backend 'vulkan' is not available in this build (available: cpu)");
#endif
  }
  if (which == "cuda") {
#ifdef HL_HAVE_CUDA
    return make_cuda_backend(std::move(model), cuda_options());  // BackendFailure without a device
#else
    std::string list;
    for (const std::string& n : available_backends()) list += (list.empty() ? "" : ", ") + n;
    throw Error("backend 'cuda' is not available in this build (available: " + list + ")");
#endif
  }
  if (which == "auto") {
    (void)note;  // used only when a GPU backend is built
#ifdef HL_HAVE_CUDA
    if (cuda_available()) {
      try {
        return make_cuda_backend(model, cuda_options());
      } catch (const BackendFailure& e) {
        std::string next = "CPU";
#ifdef HL_HAVE_VULKAN
        if (vulkan_available(true)) next = "Vulkan";
#endif
        if (note) *note = std::string(e.what()) + "; using the " + next + " backend";
      }
    }
#endif
#ifdef HL_HAVE_VULKAN
    if (vulkan_available(true)) {
      try {
        return make_vulkan_backend(model, vulkan_options(true));
      } catch (const BackendFailure& e) {
        if (note) *note = std::string(e.what()) + "; using the CPU backend";
      }
    }
#endif
    return std::make_unique<cpu::CpuBackend>(std::move(model));
  }
  throw Error("unknown backend '" + which + "' (expected auto, cpu, vulkan or cuda)");
}

}  // namespace hl
