// Backend selection: "auto" picks CUDA, then Vulkan, then the CPU; a named backend that is not
// available is an error (trace-format.md §3).
#include "engine/backend/backend.h"

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/error.h"

namespace hl {

std::vector<std::string> available_backends() { return {"cpu"}; }

std::unique_ptr<Backend> make_backend(const std::string& which, std::shared_ptr<const Model> model) {
  if (which == "auto" || which == "cpu") return std::make_unique<cpu::CpuBackend>(std::move(model));
  if (which == "cuda" || which == "vulkan")
    throw Error("backend '" + which + "' is not available in this build (available: cpu)");
  throw Error("unknown backend '" + which + "' (expected auto, cpu, vulkan or cuda)");
}

}  // namespace hl
