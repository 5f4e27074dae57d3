// Device memory and cuBLAS helpers of the CUDA backend (not a public header): errors as
// BackendFailure, owned device and pinned host buffers, cuBLAS loaded at run time, the stored
// dtypes' kernel codes. Shared by the backend (cuda_backend_impl.h) and its layer modules
// (cuda_module.h); no model logic here.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_math.h"
#include "engine/core/dtype.h"
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

}  // namespace hl::cuda
