// The CUDA backend's layer modules (issue 14 item 2, layer_modules.h): one unit per mixer kind
// (cuda_attention.cpp, cuda_mamba1.cpp, cuda_mamba2.cpp) and per feed-forward kind (cuda_ffn.cpp),
// one instance per layer with that part, made through the tables of cuda_modules.cpp. A unit uploads
// its weights, names its run state and block scratch (the backend allocates them) and enqueues its
// kernels through CudaRun, the narrow view of the backend it runs in. Not the model loop
// (cuda_forward.cpp).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_device.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/device_record.h"
#include "engine/backend/layer_modules.h"
#include "engine/backend/run_plan.h"
#include "engine/model/layer_schedule.h"

namespace hl::cuda {

// Float offsets inside one token's record, shared with Vulkan (device_record.h); the rank-to-1
// distances are computed on the device.
using RecLayout = DeviceRecordLayout<int64_t>;

class CudaBackend;

// The device copies of the weights, in their stored dtype; a matrix reached under two names (tied
// heads) is uploaded once. Failures are BackendFailure naming the tensor.
class CudaWeights {
 public:
  DW upload(const Mat& m);
  const float* upload_vec(const std::vector<float>& v, const char* what);            // null when v is empty
  const void* upload_bytes(const void* data, size_t bytes, const std::string& what);  // null when bytes is 0
  int64_t widest() const { return widest_; }  // elements of the largest 16-bit matrix (prefill widening)

 private:
  std::vector<DevMem> mem_;
  std::map<std::pair<const void*, int64_t>, const void*> uploaded_;  // (host data, bytes) → device copy
  int64_t widest_ = 0;
};

// What a unit reaches of the backend while it enqueues one block of S tokens (decode S = 1, or a
// prefill block): the products and direct launches (counted: kernels per token), the block buffers,
// the run's options and record layout, and on decode the norm its last product finishes with.
// Owned by the backend; the pointers it returns move when the block or the context grows.
class CudaRun {
 public:
  explicit CudaRun(CudaBackend& b) : b_(b) {}
  const JambaConfig& config() const;
  const LayerSchedule& schedule() const;
  const RunOptions& options() const;
  const CudaOptions& cuda_options() const;
  const RecLayout& record() const;
  cudaStream_t stream() const;
  const int32_t* params() const;  // device (2 + S,): cached positions, S, ids (cuda_kernels.h)
  int64_t cached() const;         // positions in the context caches before this block
  int64_t context_cap() const;    // positions the context caches hold
  int64_t block_cap() const;      // tokens the block buffers hold (cap)
  float* h() const;               // (cap, H) the residual stream
  float* x() const;               // (cap, H) the normed rows the half-layer reads
  float* y() const;               // (cap, H) prefill: the half-layer's output, added to h by the norm after it
  float* ssm_delta(int64_t ssm_index) const;     // (cap, Di) Δ of SSM layer m, for the record's statistics
  float* ssm_retained(int64_t ssm_index) const;  // (cap, Di) its retained share; full traces only
  const Tail& tail() const;  // decode: the norm after the half-layer, for its last product (off: not fused)
  // epi 1 (h += …) scales the product by the residual multiplier (Granite's; 1 elsewhere).
  void gemv(std::initializer_list<GemvSeg> segs, const float* x, int epi, const Tail& t = Tail{}, float alpha = 1.0f);
  // Y (S, W.rows) with row stride ldy = alpha · X (S, W.cols) · Wᵀ (+ Y when accumulate) in fp32 (cuBLAS).
  void gemm(const DW& W, const float* X, int64_t S, float* Y, int64_t ldy, float alpha = 1.0f, bool accumulate = false);
  void counted(int64_t kernels);  // kernels a unit launched itself (cuda_kernels.h launch_*)
  void sync(const char* what);    // waits for the stream; a device error becomes BackendFailure
  // With an observer set (set_cuda_observer): after the work enqueued so far, S rows of `cols` floats,
  // row s at dev + s·stride, reported as `name` of `layer` (model/intermediates.h). Nothing otherwise.
  void observe(const char* name, int64_t layer, const float* dev, int64_t stride, int64_t cols, int64_t S);

 private:
  CudaBackend& b_;
};

// One device buffer of a unit's run state, allocated by the backend and handed to the unit by
// bind_state in the order asked. per_position > 0: a cache of that many bytes per context position
// (the KV cache), grown with the context keeping the positions cached so far. Otherwise `bytes` of
// recurrent state (the Mamba window and scan state), allocated once and zeroed when a run starts.
struct CudaStateNeed {
  std::string what;  // names the buffer in an allocation failure: "the key cache"
  int64_t per_position = 0;
  int64_t bytes = 0;
};

// A block buffer a unit uses while it runs: `words` 4-byte words for the block capacity, on the
// device (one allocation with the backend's block buffers) or pinned on the host. Units asking for
// the same key share one buffer, the largest asked for: every unit's scratch is dead once its
// half-layer has run. 0 words: none (bound as null). A pinned buffer's key names it in errors.
struct CudaScratchNeed {
  std::string key;
  int64_t words = 0;
  bool pinned = false;
};

// The block buffers by key, after each reallocation (CudaUnit::bind_scratch).
class CudaScratch {
 public:
  float* device(const std::string& key) const;  // throws std::logic_error for a key nobody asked for
  void* pinned(const std::string& key) const;

 private:
  friend class CudaBackend;
  std::map<std::string, float*> device_;
  std::map<std::string, void*> pinned_;
};

// What the backend asks of every unit. S = 1 (decode): the unit adds its output into r.h() and its
// last product runs r.tail() (the norm after it) when that is on; S > 1 (prefill): it writes its
// output to r.y(). It reads r.x(), the normed rows. rec: the block's records on the device (null
// while registers are fed). It launches on r.stream() only and never synchronises unless it must
// read back (the MoE prefill routing).
class CudaUnit {
 public:
  virtual ~CudaUnit() = default;
  virtual void upload(CudaWeights& w) = 0;  // its weights, once (the backend's set-up, layer order)
  virtual std::vector<CudaStateNeed> state() const { return {}; }
  virtual void bind_state(const std::vector<float*>&) {}  // per need; a context cache is null until reserved
  virtual std::vector<CudaScratchNeed> scratch(int64_t /*cap*/, const CudaRun&) const { return {}; }
  virtual void bind_scratch(const CudaScratch&, const CudaRun&) {}
  // Most tokens per block its scratch allows at the current context capacity.
  virtual int64_t max_block(const CudaRun&) const { return std::numeric_limits<int64_t>::max(); }
  // A run starts: its options from the plan; what it bakes into the captured decode step appended to
  // `baked` (a change re-captures the step).
  virtual void start(const RunPlan&, std::vector<int>& /*baked*/) {}
  virtual void enqueue(CudaRun& r, int64_t S, float* rec) = 0;
};

class CudaMixer : public CudaUnit {};

class CudaFfn : public CudaUnit {
 public:
  // The norm before this FFN (resid, or its decode tail): the unit's own per-row work fused into it
  // (the MoE router on the normed rows).
  virtual void fuse_into_norm(ResidArgs& /*norm*/, float* /*rec*/, const CudaRun&) const {}
};

// What a unit's maker reads: the model (weights, config) and its layer schedule.
struct CudaModuleContext {
  const Model& model;
  const JambaConfig& config;
  const LayerSchedule& schedule;
};
using MakeCudaMixer = std::unique_ptr<CudaMixer> (*)(const CudaModuleContext&, int64_t layer);
using MakeCudaFfn = std::unique_ptr<CudaFfn> (*)(const CudaModuleContext&, int64_t layer);
// The CUDA module tables: each unit's file adds its line with HL_REGISTER_MODULE.
using CudaMixerTable = ModuleTable<MixerKind, MakeCudaMixer, struct CudaMixerTag>;
using CudaFfnTable = ModuleTable<FfnKind, MakeCudaFfn, struct CudaFfnTag>;

// The units of every layer (cuda_modules.cpp): mixers[i] (null where the layer has no mixer,
// Nemotron-H's '-'), and ffns[i] (null where it has no FFN). Every mixer is made before the first
// FFN. Throws BackendFailure for a kind without a unit (find_module) or a shape a unit's kernels do
// not take.
struct CudaUnits {
  std::vector<std::unique_ptr<CudaMixer>> mixers;
  std::vector<std::unique_ptr<CudaFfn>> ffns;
};
// Units for the layers in `layers` (a pipeline stage's; default every layer), null elsewhere.
CudaUnits make_cuda_units(const CudaModuleContext& ctx, LayerRange layers = {0, -1});

}  // namespace hl::cuda
