// The CUDA backend's registry entry (backend_registry.h) and its environment setting:
// HL_CUDA_GRAPHS=0 runs the decode step as plain launches instead of a CUDA graph (README).
// Built only with the CUDA backend (CMake HL_HAVE_CUDA).
#include <cstdlib>
#include <cstring>

#include "engine/backend/backend_registry.h"
#include "engine/backend/cuda/cuda_backend.h"

namespace hl {

namespace {
CudaOptions cuda_options() {
  CudaOptions o;
  const char* g = std::getenv("HL_CUDA_GRAPHS");
  o.graphs = !(g && std::strcmp(g, "0") == 0);
  return o;
}
}  // namespace

BackendEntry cuda_backend_entry() {
  BackendEntry e;
  e.menu_order = 2;
  e.name = "cuda";
  e.label = "CUDA";
  e.auto_rank = 10;  // `auto` tries it first
  e.available = [](bool) { return cuda_available(); };
  e.make = [](std::shared_ptr<const Model> model, bool) {
    return make_cuda_backend(std::move(model), cuda_options());  // BackendFailure without a device
  };
  e.make_stage = [](std::shared_ptr<const Model> model, StageLink* link, const std::vector<LayerRange>& ranges) {
    CudaOptions o = cuda_options();
    o.device_slot = link->local_rank();  // one GPU per rank on a host with several
    return make_cuda_stage_backend(std::move(model), o, link, ranges);
  };
  e.describe = [] { return cuda_describe_device(); };
  return e;
}

static const BackendTable::Add kRegistered{cuda_backend_entry()};

}  // namespace hl
