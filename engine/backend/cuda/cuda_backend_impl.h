// Internals of the CUDA backend shared by its two source files (not a public header): the
// device-memory and cuBLAS helpers, the device layouts of the weights and records, and the
// CudaBackend class. cuda_backend.cpp holds the set-up, the run state, the decode graph, the
// record readback and the public entry points of cuda_backend.h; cuda_forward.cpp enqueues the
// forward pass (products, attention, Mamba, feed-forward).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "engine/backend/backend_util.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_math.h"
#include "engine/backend/device_record.h"
#include "engine/core/error.h"

namespace hl::cuda {

inline std::atomic<int64_t> g_fail_after{-1};  // cuda_simulate_failure / HL_CUDA_FAIL_AFTER
inline std::atomic<int64_t> g_allocated{0};    // bytes this process holds through DevMem

inline int64_t memory_limit() {  // HL_CUDA_MEMORY_LIMIT=bytes: a test hook for the out-of-memory path
  const char* e = std::getenv("HL_CUDA_MEMORY_LIMIT");
  return e ? std::atoll(e) : int64_t{-1};
}

inline std::string mib(double bytes) {
  char b[64];
  std::snprintf(b, sizeof b, "%.1f MiB", bytes / 1048576.0);
  return b;
}

[[noreturn]] inline void fail(cudaError_t e, const std::string& what) {
  if (e == cudaErrorMemoryAllocation) throw BackendFailure("cuda: not enough device memory while " + what);
  throw BackendFailure("cuda: " + what + " failed: " + cudaGetErrorString(e));
}

inline void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clears a non-sticky error; a sticky one stays and poisons the backend anyway
    fail(e, what);
  }
}

inline void check_blas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  if (s == CUBLAS_STATUS_ALLOC_FAILED) throw BackendFailure(std::string("cuda: not enough device memory in ") + what);
  throw BackendFailure(std::string("cuda: cuBLAS ") + what + " failed (status " + std::to_string(static_cast<int>(s)) +
                       ")");
}

// cuBLAS, loaded when the first CUDA backend is built rather than linked: every program of the
// project links the engine, and mapping cuBLAS at start-up costs ~0.2 s per process. Symbols already
// in the process (a program that links cuBLAS itself) are used as they are.
struct BlasApi {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  std::string error;
};

inline const BlasApi& blas_api() {
  static const BlasApi api = [] {
    BlasApi a;
    void* lib = nullptr;
    if (!dlsym(RTLD_DEFAULT, "cublasGemmEx")) {
      const std::string so = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
      std::vector<std::string> names = {so};
#ifdef HL_CUBLAS_DIR
      names.push_back(std::string(HL_CUBLAS_DIR) + "/" + so);
#endif
      names.push_back("libcublas.so");
      std::string why;
      for (const std::string& n : names) {
        lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib) break;
        if (const char* e = dlerror()) why = e;
      }
      if (!lib) {
        a.error = "cuda: cannot load cuBLAS (" + why + ")";
        return a;
      }
    }
    auto sym = [&](const char* name) { return lib ? dlsym(lib, name) : dlsym(RTLD_DEFAULT, name); };
    a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
    a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2"));
    a.set_stream = reinterpret_cast<decltype(a.set_stream)>(sym("cublasSetStream_v2"));
    a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx"));
    if (!a.create || !a.destroy || !a.set_stream || !a.gemm_ex)
      a.error = "cuda: cuBLAS lacks cublasGemmEx or cublasCreate_v2";
    return a;
  }();
  if (!api.error.empty()) throw BackendFailure(api.error);
  return api;
}

// Device memory owned by one object; allocation failures are BackendFailure naming the buffer.
class DevMem {
 public:
  DevMem() = default;
  DevMem(size_t bytes, const std::string& what) : bytes_(std::max<size_t>(bytes, 16)) {
    const int64_t lim = memory_limit();
    if (lim >= 0 && g_allocated.load() + static_cast<int64_t>(bytes_) > lim)
      throw BackendFailure("cuda: not enough device memory for " + what + " (" + mib(static_cast<double>(bytes_)) +
                           "; HL_CUDA_MEMORY_LIMIT " + mib(static_cast<double>(lim)) + ")");
    const cudaError_t e = cudaMalloc(&p_, bytes_);
    if (e != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
      if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total = 0;
        cudaMemGetInfo(&free_b, &total);
        throw BackendFailure("cuda: not enough device memory for " + what + " (" + mib(static_cast<double>(bytes_)) +
                             " needed, " + mib(static_cast<double>(free_b)) + " free of " +
                             mib(static_cast<double>(total)) + ")");
      }
      fail(e, "allocating " + what);
    }
    g_allocated += static_cast<int64_t>(bytes_);
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  DevMem(DevMem&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DevMem& operator=(DevMem&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.p_ = nullptr;
    }
    return *this;
  }
  ~DevMem() { reset(); }
  void reset() {
    if (p_) {
      cudaFree(p_);
      g_allocated -= static_cast<int64_t>(bytes_);
    }
    p_ = nullptr;
  }
  template <class T = float>
  T* as() const {
    return static_cast<T*>(p_);
  }
  size_t bytes() const { return p_ ? bytes_ : 0; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Pinned host memory (the one readback per step and the step parameters).
class Pinned {
 public:
  Pinned() = default;
  Pinned(size_t bytes, const char* what) {
    check(cudaMallocHost(&p_, std::max<size_t>(bytes, 16)), std::string("allocating pinned memory for ") + what);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  Pinned& operator=(Pinned&& o) noexcept {
    if (this != &o) {
      if (p_) cudaFreeHost(p_);
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  ~Pinned() {
    if (p_) cudaFreeHost(p_);
  }
  template <class T = float>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
};

inline int dtype_code(DType t, const std::string& name) {
  switch (t) {
    case DType::F32:
      return cudam::kF32;
    case DType::F16:
      return cudam::kF16;
    case DType::BF16:
      return cudam::kBF16;
    default:
      throw BackendFailure("cuda: tensor '" + name + "' has dtype " + dtype_name(t) + ", not F32/F16/BF16");
  }
}

struct MlpDev {
  DW gate, up, down;
};

struct LayerDev {
  const float* in_norm = nullptr;
  const float* ff_norm = nullptr;
  DW q, k, v, o;
  const float* sinks = nullptr;
  DW in_proj, x_proj, dt_proj, out_proj;
  const float *in_bias = nullptr, *conv_w = nullptr, *conv_b = nullptr, *dt_norm = nullptr, *b_norm = nullptr;
  const float *c_norm = nullptr, *dt_bias = nullptr, *A = nullptr, *D = nullptr, *out_bias = nullptr;
  DW router;
  std::vector<MlpDev> mlps;        // the dense MLP, or the E experts
  const ExpertW* table = nullptr;  // device copy of mlps
};

// Float offsets inside one token's record, shared with Vulkan (device_record.h); the rank-to-1
// distances are computed on the device.
using RecLayout = DeviceRecordLayout<int64_t>;

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<const Model> model, const CudaOptions& opts);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  void start(const RunOptions& opts) override;
  void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) override;
  int64_t position() const override { return position_; }
  const Model& model() const override { return *model_; }
  const RunOptions& options() const override { return opts_; }
  int registers() const override { return n_reg_; }

  CudaStepInfo step_info() const {
    return {kernels_per_token_, graph_exec_ != nullptr && copts_.graphs, pdl_, device_};
  }

 private:
  void upload_weights();
  DW upload(const Mat& m);
  const float* upload_vec(const std::vector<float>& v, const char* what);
  void fail_guard() const;
  void plan_records();
  int64_t block_limit() const;
  void ensure_kv(int64_t rows);
  void ensure_block(int64_t S);
  void run_block(const int32_t* ids, int64_t S, bool records);
  void enqueue(int64_t S, bool records);
  void capture_decode();
  void attention(int64_t layer, int64_t S, float* rec);
  void mamba(int64_t layer, int64_t S, float* rec);
  void feed_forward(int64_t layer, int64_t S, float* rec);
  // moe_layer ≥ 0: also the router of that layer on the normed rows (fused).
  ResidArgs resid_args(int64_t S, bool add_y, int column, const float* norm_w, float* rec, int64_t moe_layer) const;
  void resid(int64_t S, bool add_y, int column, const float* norm_w, float* rec, int64_t moe_layer = -1);
  // Decode: the norm step fused into the kernel that finishes h (the mixer's or the FF's last product).
  Tail tail(const ResidArgs& r) const {
    Tail t;
    t.on = true;
    t.r = r;
    t.counter = counter_.as<unsigned>();
    return t;
  }
  void gemm(const DW& W, const float* X, int64_t S, float* Y, int64_t ldy);
  void gemv(std::initializer_list<GemvSeg> segs, const float* x, int epi, const Tail& t = Tail{});
  void sync(const char* what);
  void read_records(int64_t S, TokenTrace* recs) const;
  void drop_graph();

  std::shared_ptr<const Model> model_;
  const JambaConfig& cfg_;
  CudaOptions copts_;
  RunOptions opts_;
  int n_reg_ = 0;
  int64_t position_ = 0;
  int64_t kv_len_ = 0;
  std::string failed_;
  std::string device_;
  bool pdl_ = false;
  bool fuse_ = true;  // decode norms fused into the products (HL_CUDA_FUSE=0: separate kernels)

  const LayerSchedule& sched_;      // model_->schedule: per layer its kinds and its index among each kind
  std::vector<int> norm_;  // per attention layer: the Normalizer of this run

  cudaStream_t st_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  int64_t launches_ = 0, kernels_per_token_ = 0;

  // Weights.
  std::vector<DevMem> wmem_;
  std::map<std::pair<const void*, int64_t>, const void*> uploaded_;  // (host data, bytes) → device copy (tied heads)
  DW embed_, lm_head_;
  const float* final_norm_ = nullptr;
  const float* regs_ = nullptr;  // (trained + 1, H): trained registers, then the mean embedding
  int64_t trained_ = 0;
  std::vector<LayerDev> layers_;
  int64_t wide_cap_ = 0;  // floats of the widening scratch for prefill products

  // Run state.
  std::vector<DevMem> kcache_, vcache_;
  DevMem mstate_;   // per Mamba layer: window (W, Di), then state (N, Di)
  DevMem rank1_;    // (L+1, H+4) doubles
  DevMem counter_;  // the fused norms' block counter (cuda_kernels.h Tail)
  Tail tail_;       // decode: the norm the current half-layer's last kernel runs
  int64_t kv_cap_ = 0, cap_ = 0;
  RecLayout rl_;
  int64_t rec_alloc_stride_ = -1;

  // Block buffers (capacity cap_ tokens).
  DevMem act_, params_d_, rec_d_, wide_, idx_d_;
  Pinned params_h_, rec_h_, route_h_, idx_h_;
  float *h_ = nullptr, *x_ = nullptr, *y_ = nullptr, *q_ = nullptr, *o_ = nullptr, *xz_ = nullptr, *u_ = nullptr;
  float *p_ = nullptr, *dtr_ = nullptr, *bm_ = nullptr, *cm_ = nullptr, *gated_ = nullptr, *dt_ = nullptr;
  float *ret_ = nullptr, *g_ = nullptr, *uf_ = nullptr, *xe_ = nullptr, *ye_ = nullptr, *probs_ = nullptr;
  float *selw_ = nullptr, *rows_ = nullptr, *z_ = nullptr, *sc_local_ = nullptr, *sc_prod_ = nullptr;
  float* sc_carry_ = nullptr;
  int32_t* sel_ = nullptr;
  int64_t zstride_ = 0;

  // The decode step as a graph.
  cudaGraphExec_t graph_exec_ = nullptr;
  uint64_t gen_ = 1, graph_gen_ = 0;
  std::vector<int> baked_;  // the run options a captured step holds: instruments, full, normalizers
};

}  // namespace hl::cuda
