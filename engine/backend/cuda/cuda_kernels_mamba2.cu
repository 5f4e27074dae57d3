// The CUDA backend's Mamba-2 and RoPE kernels (see cuda_kernels.h), after HF BambaMixer's slow path
// and the Vulkan twins (shaders/mamba2_scan.comp, gated_norm.comp, rope.comp): the recurrence in token
// order, one thread per channel; the gated RMSNorm, one block per (norm group, token); RoPE on the new
// q and key rows. The causal conv over x|B|C is cuda_kernels_ssm.cu's. Per-element math from
// cuda_math.h (shared with the host tests).
#include "engine/backend/cuda/cuda_device_util.cuh"

namespace hl::cuda {
namespace {

__global__ void mamba2_scan_kernel(Mamba2Args a) {
  pdl_enter();
  const int64_t Di = static_cast<int64_t>(a.nh) * a.P;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= Di) return;
  const int h = static_cast<int>(c / a.P), g = h / (a.nh / a.G), N = a.N;
  const float A = a.A[h], Dh = a.D[h], bias = a.dt_bias[h];
  float* row = a.h + c;  // the channel's state row, N lanes at stride Di (coalesced over the channels)
  for (int s = 0; s < a.S; ++s) {
    const float* x = a.xbc + static_cast<int64_t>(s) * a.conv;
    const float* B = x + Di + static_cast<int64_t>(g) * N;
    const float* C = x + Di + static_cast<int64_t>(a.G + g) * N;
    const float delta = mamba2_delta(a.dt[s * a.dts + h], bias, a.lo, a.hi);
    const float dA = mamba2_decay(delta, A);
    a.y[s * Di + c] = mamba2_channel(row, Di, N, dA, delta, x[c], B, C, Dh);
    a.dch[s * Di + c] = delta;
    if (c == static_cast<int64_t>(h) * a.P) a.dhead[s * a.nh + h] = delta;
    if (a.retained) a.retained[s * Di + c] = dA;
  }
}

// Block (group k, token s): the group's Σv² in fp64, then each channel's normed value in place.
__global__ void gated_norm_kernel(float* y, const float* z, int64_t zs, const float* w, int64_t Di, int64_t group,
                                  double eps) {
  pdl_enter();
  __shared__ double shd[32];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * group, s = blockIdx.y;
  float* yr = y + s * Di + c0;
  const float* zr = z + s * zs + c0;
  double ss = 0;
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x) {
    const float v = gated_value(yr[i], zr[i]);
    ss += static_cast<double>(v) * v;
  }
  ss = block_sum_d(ss, shd);
  const float inv = rms_inv(ss, group, eps);
  for (int64_t i = threadIdx.x; i < group; i += blockDim.x)  // only this thread reads and writes element i
    yr[i] = rms_scale(w[c0 + i], gated_value(yr[i], zr[i]), inv);
}

// Thread (head·r + i, row s): pair i of q head `head` (head < nh) or of key head head − nh.
__global__ void rope_kernel(float* q, float* kc, const int32_t* params, const double* inv_freq, int nh, int nkv, int hd,
                            int r) {
  pdl_enter();
  const int idx = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
  if (idx >= (nh + nkv) * r) return;
  const int head = idx / r, i = idx % r;
  const int64_t pos = static_cast<int64_t>(params[0]) + s;  // the row's KV slot (registers first)
  float* v = head < nh ? q + (static_cast<int64_t>(s) * nh + head) * hd
                       : kc + pos * nkv * hd + static_cast<int64_t>(head - nh) * hd;
  rope_pair(v[i], v[i + r], static_cast<double>(pos) * inv_freq[i]);
}

}  // namespace

void launch_mamba2_scan(const Mamba2Args& a, cudaStream_t st) {
  launch_k(mamba2_scan_kernel, blocks_for(static_cast<int64_t>(a.nh) * a.P, 128), 128, st, a);
}

void launch_gated_norm(float* y, const float* z, int64_t zs, const float* w, int S, int64_t Di, int64_t group,
                       double eps, cudaStream_t st) {
  launch_k(gated_norm_kernel, dim3(static_cast<unsigned>(Di / group), static_cast<unsigned>(S)), 128, st, y, z, zs, w,
           Di, group, eps);
}

void launch_rope(float* q, float* kc, const int32_t* params, const double* inv_freq, int S, int nh, int nkv, int hd,
                 int r, cudaStream_t st) {
  launch_k(rope_kernel, dim3(blocks_for(static_cast<int64_t>(nh + nkv) * r), static_cast<unsigned>(S)), kThreads, st, q,
           kc, params, inv_freq, nh, nkv, hd, r);
}

}  // namespace hl::cuda
