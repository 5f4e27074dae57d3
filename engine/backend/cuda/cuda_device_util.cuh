// Device helpers shared by the CUDA backend's kernel files (cuda_kernels.cu, cuda_kernels_ssm.cu):
// launch configuration with programmatic dependent launch, warp and block reductions, and the
// warp-per-row dot product over the stored weight dtypes. Not kernels: those are in the .cu files.
#pragma once
#include <cuda_fp16.h>

#include "engine/backend/cuda/cuda_kernels.h"
#include "engine/backend/cuda/cuda_math.h"

namespace hl::cuda {
namespace {

using namespace hl::cudam;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAll = 0xffffffffu;

// Programmatic dependent launch (sm_90 and later; cuda_backend.cpp turns it on): every kernel first
// waits until the kernel before it has completed and its writes are visible (griddepcontrol.wait),
// then lets the next kernel be scheduled (griddepcontrol.launch_dependents), so a launch overlaps the
// previous kernel's tail instead of following it. No kernel touches memory before the wait, so the
// order of results is that of plain launches. Below sm_90 both are no-ops and launches are plain.
}  // namespace
extern bool g_pdl;  // defined in cuda_kernels.cu; set by set_programmatic_launch
namespace {

__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

template <class... P, class... A>
void launch_k(void (*k)(P...), dim3 grid, dim3 block, cudaStream_t st, A... args) {
#ifdef __CUDACC__
  if (g_pdl) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = 0;
    cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, k, static_cast<P>(args)...) == cudaSuccess) return;
    cudaGetLastError();  // not supported here: plain launches from now on
    g_pdl = false;
  }
#endif
  k<<<grid, block, 0, st>>>(static_cast<P>(args)...);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kAll, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kAll, v, o));
  return v;
}

// Block-wide reductions (every thread gets the result); `sh` holds one value per warp.
__device__ double block_sum_d(double v, double* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum_d(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  double r = 0;
  for (int i = 0; i < nw; ++i) r += sh[i];
  __syncthreads();
  return r;
}
__device__ float block_max(float v, float* sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float r = sh[0];
  for (int i = 1; i < nw; ++i) r = fmaxf(r, sh[i]);
  __syncthreads();
  return r;
}


// The two 16-bit weights of a 32-bit word, widened.
template <int T>
__device__ __forceinline__ float2 pair(uint32_t w) {
  if (T == kBF16) return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu))),
                     __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16))));
}

// This lane's share of row·x (the caller sums the warp): 16-byte loads when the row and x allow.
template <int T>
__device__ float lane_dot(const void* row, const float* x, int64_t cols, int lane) {
  float acc = 0;
  const bool aligned = ((reinterpret_cast<uintptr_t>(row) | reinterpret_cast<uintptr_t>(x)) & 15) == 0;
  if (T == kF32) {
    if (aligned && (cols & 3) == 0) {
      const float4* w4 = static_cast<const float4*>(row);
      const float4* x4 = reinterpret_cast<const float4*>(x);
      const int64_t n = cols >> 2;
#pragma unroll 4
      for (int64_t i = lane; i < n; i += 32) {
        const float4 w = __ldg(w4 + i), v = x4[i];
        acc += w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
      }
      return acc;
    }
    const float* w = static_cast<const float*>(row);
    for (int64_t i = lane; i < cols; i += 32) acc += w[i] * x[i];
    return acc;
  }
  if (aligned && (cols & 7) == 0) {
    const uint4* w4 = static_cast<const uint4*>(row);
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int64_t n = cols >> 3;
#pragma unroll 4
    for (int64_t i = lane; i < n; i += 32) {
      const uint4 w = __ldg(w4 + i);
      const float4 a = x4[2 * i], b = x4[2 * i + 1];
      const float2 w0 = pair<T>(w.x), w1 = pair<T>(w.y), w2 = pair<T>(w.z), w3 = pair<T>(w.w);
      acc += w0.x * a.x + w0.y * a.y + w1.x * a.z + w1.y * a.w + w2.x * b.x + w2.y * b.y + w3.x * b.z + w3.y * b.w;
    }
    return acc;
  }
  for (int64_t i = lane; i < cols; i += 32) acc += widen(T, row, i) * x[i];
  return acc;
}

// Row r of a (·, cols) matrix of dtype t dotted with x, summed over the warp (all lanes get it).
__device__ float warp_dot(int t, const void* W, int64_t r, const float* x, int64_t cols) {
  const int lane = threadIdx.x & 31;
  const void* row = static_cast<const char*>(W) + elem_bytes(t, r * cols);
  float v = 0;
  if (t == kBF16)
    v = lane_dot<kBF16>(row, x, cols, lane);
  else if (t == kF16)
    v = lane_dot<kF16>(row, x, cols, lane);
  else if (t == kF32)
    v = lane_dot<kF32>(row, x, cols, lane);
  else  // ggml blocks, dequantised per element (cuda_math.h)
    for (int64_t i = lane; i < cols; i += 32) v += dequant(t, static_cast<const uint8_t*>(row), i) * x[i];
  return warp_sum(v);
}

unsigned blocks_for(int64_t n, int per = kThreads) {
  return static_cast<unsigned>((n + per - 1) / per);
}

unsigned grid_stride_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace
}  // namespace hl::cuda
