// The CUDA backend's Mamba kernels (see cuda_kernels.h): the causal conv, the x_proj norms, Δ with
// bias and softplus, the selective scan (one pass, or chunked with a carry pass for long prefills),
// the decode step fused with dt_proj, and the Δ / retained record statistics. Per-element math from
// cuda_math.h (shared with the host tests); the Δ mean is an fp64 reduction as on the CPU.
#include "engine/backend/cuda/cuda_device_util.cuh"

namespace hl::cuda {
namespace {

__global__ void conv_kernel(const float* x, int64_t xs, float* win, const float* w, const float* b, float* u, int S,
                            int64_t Di, int W) {
  pdl_enter();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= Di) return;
  auto in = [&](int64_t t) { return t >= 0 ? x[t * xs + d] : win[(t + W) * Di + d]; };
  for (int s = 0; s < S; ++s) {
    float c = b ? b[d] : 0.0f;
    for (int k = 0; k < W; ++k) c += w[d * W + k] * in(s - (W - 1) + k);
    u[s * Di + d] = silu(c);
  }
  // Row j of the new window is position S−W+j: from x, or from old row S+j > j (not yet overwritten).
  for (int j = 0; j < W; ++j) win[j * Di + d] = in(static_cast<int64_t>(S) - W + j);
}

__global__ void xnorms_kernel(const float* p, float* dtr, float* Bm, float* Cm, const float* wdt, const float* wb,
                              const float* wc, int R, int N, double eps) {
  pdl_enter();
  __shared__ double shd[32];
  const int s = blockIdx.x, seg = blockIdx.y;
  const int P = R + 2 * N;
  const int off = seg == 0 ? 0 : seg == 1 ? R : R + N, n = seg == 0 ? R : N;
  const float* w = seg == 0 ? wdt : seg == 1 ? wb : wc;
  float* out = seg == 0 ? dtr + s * R : seg == 1 ? Bm + s * N : Cm + s * N;
  const float* in = p + static_cast<int64_t>(s) * P + off;
  double ss = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(in[i]) * in[i];
  ss = block_sum_d(ss, shd);
  const float inv = rms_inv(ss, n, eps);
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = rms_scale(w[i], in[i], inv);
}

__global__ void bias_softplus_kernel(float* dt, const float* bias, int64_t total, int64_t Di) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) dt[i] = softplus(dt[i] + bias[i % Di]);
}

// Tokens [s0, s1) of channel d from state h (N, Di) (updated in place).
__device__ void scan_range(const ScanArgs& a, float* h, int s0, int s1, int64_t d) {
  const int64_t Di = a.Di;
  const int N = a.N;
  const float Dd = a.D[d];
  for (int s = s0; s < s1; ++s) {
    const float delta = a.dt[s * Di + d], ud = a.u[s * Di + d];
    const float* B = a.B + static_cast<int64_t>(s) * N;
    const float* C = a.C + static_cast<int64_t>(s) * N;
    float acc = 0, keep = 0;
    for (int n = 0; n < N; ++n) {
      float hn = h[n * Di + d];
      keep += scan_update(hn, delta, a.A[n * Di + d], B[n], ud);
      h[n * Di + d] = hn;
      acc += hn * C[n];
    }
    a.out[s * Di + d] = scan_output(acc, Dd, ud, a.z[s * a.zs + d]);
    if (a.retained) a.retained[s * Di + d] = keep / static_cast<float>(N);
  }
}

__global__ void scan_kernel(ScanArgs a) {
  pdl_enter();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d < a.Di) scan_range(a, a.h, 0, a.S, d);
}

// Pass 1: per chunk and lane, the scan from a zero state and the product of the decays.
__global__ void scan_local_kernel(ScanArgs a, int T, float* local, float* prod) {
  pdl_enter();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= a.Di) return;
  const int c = blockIdx.y, s0 = c * T, s1 = min(a.S, s0 + T);
  const int64_t Di = a.Di;
  for (int n = 0; n < a.N; ++n) {
    float hl = 0, pr = 1;
    const float An = a.A[n * Di + d];
    for (int s = s0; s < s1; ++s) pr *= scan_update(hl, a.dt[s * Di + d], An, a.B[s * a.N + n], a.u[s * Di + d]);
    local[(static_cast<int64_t>(c) * a.N + n) * Di + d] = hl;
    prod[(static_cast<int64_t>(c) * a.N + n) * Di + d] = pr;
  }
}

// Pass 2: the state entering each chunk, and the final state.
__global__ void scan_carry_kernel(ScanArgs a, int chunks, const float* local, const float* prod, float* carry) {
  pdl_enter();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= a.Di) return;
  const int64_t Di = a.Di;
  for (int n = 0; n < a.N; ++n) {
    float h = a.h[n * Di + d];
    for (int c = 0; c < chunks; ++c) {
      const int64_t i = (static_cast<int64_t>(c) * a.N + n) * Di + d;
      carry[i] = h;
      h = prod[i] * h + local[i];
    }
    a.h[n * Di + d] = h;
  }
}

// Pass 3: each chunk's outputs from its carried-in state.
__global__ void scan_out_kernel(ScanArgs a, int T, float* carry) {
  pdl_enter();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= a.Di) return;
  const int c = blockIdx.y;
  scan_range(a, carry + static_cast<int64_t>(c) * a.N * a.Di, c * T, min(a.S, (c + 1) * T), d);
}

__global__ void mamba_stats_kernel(const float* dt, const float* ret, int64_t cap, int64_t Di, float* rec,
                                   int64_t rec_stride, int64_t off_mean, int64_t off_delta, int64_t off_ret,
                                   bool full) {
  pdl_enter();
  __shared__ double shd[32];
  const int mi = blockIdx.x, s = blockIdx.y;
  const float* row = dt + (mi * cap + s) * Di;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < Di; i += blockDim.x) sum += row[i];
  sum = block_sum_d(sum, shd);
  float* r = rec + s * rec_stride;
  if (threadIdx.x == 0) r[off_mean + mi] = static_cast<float>(sum / static_cast<double>(Di));
  if (!full) return;
  const float* rr = ret + (mi * cap + s) * Di;
  for (int64_t i = threadIdx.x; i < Di; i += blockDim.x) {
    r[off_delta + mi * Di + i] = row[i];
    r[off_ret + mi * Di + i] = rr[i];
  }
}

__global__ void mamba_step_kernel(StepArgs a) {
  pdl_enter();
  __shared__ __align__(16) float sp[kMaxStepRank];  // normed p: dt_r (R), B (N), C (N)
  __shared__ double shd[32];
  const int R = a.R, N = a.N;
  for (int seg = 0; seg < 3; ++seg) {
    const int off = seg == 0 ? 0 : seg == 1 ? R : R + N, n = seg == 0 ? R : N;
    const float* w = seg == 0 ? a.wdt : seg == 1 ? a.wb : a.wc;
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += static_cast<double>(a.p[off + i]) * a.p[off + i];
    ss = block_sum_d(ss, shd);
    const float inv = rms_inv(ss, n, a.eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) sp[off + i] = rms_scale(w[i], a.p[off + i], inv);
  }
  __syncthreads();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (d >= a.Di) return;
  const float v = warp_dot(a.dt_proj.dtype, a.dt_proj.p, d, sp, R);
  if ((threadIdx.x & 31) != 0) return;
  const float delta = softplus(v + a.dt_bias[d]);
  a.dt[d] = delta;
  const int64_t Di = a.Di;
  const float ud = a.u[d];
  float acc = 0, keep = 0;
  for (int n = 0; n < N; ++n) {
    float hn = a.h[n * Di + d];
    keep += scan_update(hn, delta, a.A[n * Di + d], sp[R + n], ud);
    a.h[n * Di + d] = hn;
    acc += hn * sp[R + N + n];
  }
  a.out[d] = scan_output(acc, a.D[d], ud, a.z[d]);
  if (a.retained) a.retained[d] = keep / static_cast<float>(N);
}

}  // namespace

void launch_conv(const float* x, int64_t xs, float* win, const float* w, const float* b, float* u, int S, int64_t Di,
                 int W, cudaStream_t st) {
  launch_k(conv_kernel, blocks_for(Di), kThreads, st, x, xs, win, w, b, u, S, Di, W);
}

void launch_xnorms(const float* p, float* dtr, float* Bm, float* Cm, const float* wdt, const float* wb, const float* wc,
                   int S, int R, int N, double eps, cudaStream_t st) {
  launch_k(xnorms_kernel, dim3(static_cast<unsigned>(S), 3), 128, st, p, dtr, Bm, Cm, wdt, wb, wc, R, N, eps);
}

void launch_mamba_step(const StepArgs& a, cudaStream_t st) {
  launch_k(mamba_step_kernel, blocks_for(a.Di, kWarps), kThreads, st, a);
}

void launch_bias_softplus(float* dt, const float* bias, int S, int64_t Di, cudaStream_t st) {
  launch_k(bias_softplus_kernel, blocks_for(S * Di), kThreads, st, dt, bias, S * Di, Di);
}

void launch_scan(const ScanArgs& a, cudaStream_t st) {
  launch_k(scan_kernel, blocks_for(a.Di, 128), 128, st, a);
}

void launch_scan_chunked(const ScanArgs& a, int T, float* local, float* prod, float* carry, cudaStream_t st) {
  const unsigned chunks = static_cast<unsigned>((a.S + T - 1) / T);
  launch_k(scan_local_kernel, dim3(blocks_for(a.Di, 128), chunks), 128, st, a, T, local, prod);
  launch_k(scan_carry_kernel, blocks_for(a.Di, 128), 128, st, a, static_cast<int>(chunks), local, prod, carry);
  launch_k(scan_out_kernel, dim3(blocks_for(a.Di, 128), chunks), 128, st, a, T, carry);
}

void launch_mamba_stats(const float* dt, const float* ret, int M, int64_t cap, int S, int64_t Di, float* rec,
                        int64_t rec_stride, int64_t off_mean, int64_t off_delta, int64_t off_ret, bool full,
                        cudaStream_t st) {
  launch_k(mamba_stats_kernel, dim3(static_cast<unsigned>(M), static_cast<unsigned>(S)), kThreads, st, dt, ret, cap, Di,
           rec, rec_stride, off_mean, off_delta, off_ret, full);
}

}  // namespace hl::cuda
