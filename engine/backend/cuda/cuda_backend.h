// The CUDA backend's public face (no CUDA headers here): options, the factory used by make_backend,
// run-time detection, the figures `hybridlens bench` reports for it and test hooks. The model runs in
// the kernels of cuda_kernels.cu with cuBLAS for prefill products; the CPU backend is its
// reference (issue 8). Built only when CMake finds a CUDA toolkit (HL_HAVE_CUDA).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/pipeline.h"
#include "engine/model/intermediates.h"

namespace hl {

struct CudaOptions {
  bool graphs = true;       // capture the decode step in a CUDA graph (HL_CUDA_GRAPHS=0: plain launches)
  int64_t max_block = 256;  // most tokens per prefill block; longer prefills run in blocks
  int scan_chunk = 64;      // tokens per chunk of the parallel prefill scan
  // A pipeline stage's index among the stages on its host (StageLink::local_rank): the (slot mod
  // count)-th device, so one rank per GPU needs no setting (CUDA_VISIBLE_DEVICES narrows the list).
  // -1: device 0.
  int device_slot = -1;
};

// Throws BackendFailure with the reason: no CUDA device or driver, not enough device memory, a
// shape beyond the kernels' limits, a failed device.
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<const Model> model, const CudaOptions& opts = {});
// One stage of a pipeline over `link` (pipeline.h): `model` loaded with load_stage for
// ranges[link->rank()]. Its layers run on the device; the residual rows come from the stage before
// and go to the stage after through pinned host memory (float32, as the CPU and Vulkan stages', so
// stages on different backends combine), and the records are merged on stage 0
// (gather_stage_records). Throws as make_cuda_backend, and Error when the model holds other layers.
std::unique_ptr<Backend> make_cuda_stage_backend(std::shared_ptr<const Model> model, const CudaOptions& opts,
                                                 StageLink* link, std::vector<LayerRange> ranges);
// The named intermediates (model/intermediates.h) of the CUDA backend `b` from its next block on: at
// each one the stream is synchronised and its rows copied to the host for the call (observation only:
// the decode step then runs as plain launches, not its graph). An empty function stops them; without
// one nothing is copied and nothing changes. Throws std::invalid_argument when `b` is not CUDA.
void set_cuda_observer(Backend& b, IntermediateObserver f);
// Whether the CUDA observer reports `name` for a block of `rows` rows. A one-row block (decode, or a
// block of one register or token) adds the mixer's and the feed-forward's outputs straight into h, so
// kAccumulatedIntermediates are missing there; a longer block writes them to a buffer first (the
// prefill products) and reports every name of kIntermediates its layers reach.
bool cuda_reports_intermediate(const char* name, int64_t rows);
// Whether a CUDA device exists (cudaGetDeviceCount > 0). Cheap after the first call; never throws.
bool cuda_available();
// Why no device is usable ("" when one is).
std::string cuda_unavailable_reason();
// Device 0's name and memory, or why no device is usable.
std::string cuda_describe_device();

// Per-token figures of a CUDA backend's last decode step; false when `b` is not a CUDA backend.
struct CudaStepInfo {
  int64_t kernels_per_token = 0;     // kernels launched by one decode step (graph nodes when captured)
  bool graph = false;                // the last decode step ran as a CUDA graph
  bool programmatic_launch = false;  // kernels overlap the previous one's tail (sm_90+, HL_CUDA_PDL=0: off)
  std::string device;
};
bool cuda_step_info(const Backend& b, CudaStepInfo* out);

// Device figures for the benchmark: bandwidth of a device-to-device copy kernel (bytes read +
// written per second) and the cost of one empty kernel launched inside a CUDA graph and on a stream.
struct CudaDeviceFigures {
  std::string device;
  double copy_gb_s = 0;
  double launch_us_graph = 0;
  double launch_us_stream = 0;
  int64_t memory_bytes = 0;
};
CudaDeviceFigures cuda_measure_device();  // throws BackendFailure without a device

// Test hook: the step after `steps` more (forward blocks) fails as a sticky device error would
// (BackendFailure). HL_CUDA_FAIL_AFTER=n does the same for a new process.
void cuda_simulate_failure(int64_t steps);

}  // namespace hl
