// The CUDA backend's registry entry (backend_registry.h) and its environment setting:
// HL_CUDA_GRAPHS=0 runs the decode step as plain launches instead of a CUDA graph (README).
// Built only with the CUDA backend (CMake HL_HAVE_CUDA).
#include <cstdlib>
#include <cstring>

#include "engine/backend/backend_registry.h"
#include "engine/backend/cuda/cuda_backend.h"

namespace hl {

BackendEntry cuda_backend_entry() {
  BackendEntry e;
  e.menu_order = 2;
  e.name = "cuda";
  e.label = "CUDA";
  e.auto_rank = 10;  // `auto` tries it first
  e.available = [](bool) { return cuda_available(); };
  e.make = [](std::shared_ptr<const Model> model, bool) {
    CudaOptions o;
    const char* g = std::getenv("HL_CUDA_GRAPHS");
    o.graphs = !(g && std::strcmp(g, "0") == 0);
    return make_cuda_backend(std::move(model), o);  // BackendFailure without a device
  };
  e.describe = [] { return cuda_describe_device(); };
  return e;
}

static const BackendTable::Add kRegistered{cuda_backend_entry()};

}  // namespace hl
