// The CUDA backend's kernels (see cuda_kernels.h). Per-element math comes from cuda_math.h, shared
// with the host tests. Reductions that the CPU does in fp64 (RMSNorm sums of squares, attention
// denominators and entropy terms, Δ means, Welford) are fp64 here too, as block reductions; the
// order of fp32 sums (dot products, attention outputs) differs from the CPU's within fp32 rounding.
// Decode products: one warp per output row, 16-byte loads of the stored weights widened in
// registers (the bandwidth path), with the next RMSNorm run by the product's last block (Tail);
// prefill products go through cuBLAS (cuda_backend.cpp).
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
bool g_pdl = false;

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

__device__ __forceinline__ int elem_size(int t) {
  return t == kF32 ? 4 : 2;
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
  const void* row = static_cast<const char*>(W) + r * cols * elem_size(t);
  float v;
  if (t == kBF16)
    v = lane_dot<kBF16>(row, x, cols, lane);
  else if (t == kF16)
    v = lane_dot<kF16>(row, x, cols, lane);
  else
    v = lane_dot<kF32>(row, x, cols, lane);
  return warp_sum(v);
}

// The router of one token row x (H,) (the whole block calls it): logits by warps, then one thread's
// softmax/top-k/lse; the chosen experts in ascending index into sel/selw; the record when rec.
__device__ void route_row(const DW& W, const float* x, int s, int E, int K, float* probs, int32_t* sel, float* selw,
                          float* rec, int64_t rec_stride, int64_t off_probs, int64_t off_topk, int64_t off_lse,
                          int xi) {
  __shared__ float logits[256], pr[256];
  __shared__ int32_t top[64];
  const int warp = threadIdx.x >> 5;
  for (int e = warp; e < E; e += kWarps) {
    const float v = warp_dot(W.dtype, W.p, e, x, W.cols);
    if ((threadIdx.x & 31) == 0) logits[e] = v;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const float lse = route(logits, E, K, pr, top);
  for (int e = 0; e < E; ++e) probs[s * E + e] = pr[e];
  if (rec) {
    float* r = rec + s * rec_stride;
    for (int e = 0; e < E; ++e) r[off_probs + xi * E + e] = pr[e];
    int32_t* rt = reinterpret_cast<int32_t*>(r + off_topk + xi * K);
    for (int j = 0; j < K; ++j) rt[j] = top[j];
    r[off_lse + xi] = lse;
  }
  sort_ascending(top, K);
  for (int j = 0; j < K; ++j) {
    sel[s * K + j] = top[j];
    selw[s * K + j] = pr[top[j]];
  }
}

// The norm step of ResidArgs for token row s, by the whole block. h is read through L2 (__ldcg): in a
// fused tail it was written by other blocks of the same kernel.
__device__ void resid_row(const ResidArgs& a, int s) {
  __shared__ double shd[32];
  __shared__ float shf[32];
  const int64_t H = a.H;
  float* h = a.h + s * H;
  const float* y = a.y ? a.y + s * H : nullptr;
  const bool observe = a.rec && a.column >= 0;
  float* rows = observe && a.instruments && a.rows ? a.rows + (a.column * a.cap + s) * H : nullptr;
  double ss = 0;
  float mx = 0;
  int bad = 0;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float v = __ldcg(h + i);
    if (y) {
      float yy = y[i];
      if (a.y_bias) yy += a.y_bias[i];
      v += yy;
      h[i] = v;
    }
    ss += static_cast<double>(v) * v;
    mx = fmaxf(mx, fabsf(v));
    bad |= !isfinite(v);
    if (rows) rows[i] = v;
  }
  bad = __syncthreads_or(bad);
  ss = block_sum_d(ss, shd);
  mx = block_max(mx, shf);
  if (observe && threadIdx.x == 0) {
    float* r = a.rec + s * a.rec_stride;
    if (a.column > 0) r[a.off_nonfinite + a.column] = bad ? 1.0f : 0.0f;
    if (a.instruments) r[a.off_resid_max + a.column] = mx;
  }
  if (!a.norm_w) return;
  const float inv = rms_inv(ss, H, a.eps);
  float* x = a.x + s * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) x[i] = rms_scale(a.norm_w[i], __ldcg(h + i), inv);
  if (!a.router.p) return;
  __syncthreads();  // the block's x row is complete
  route_row(a.router, x, s, a.E, a.K, a.probs, a.sel, a.selw, a.router_rec, a.rec_stride, a.off_probs, a.off_topk,
            a.off_lse, a.xi);
}

__global__ void resid_kernel(ResidArgs a) {
  pdl_enter();
  resid_row(a, blockIdx.x);
}

// Whether this block is the last of its grid to get here (every block calls it; the counter is
// reset by the last one). The fences make the other blocks' writes visible to it.
__device__ bool last_block(unsigned* counter) {
  __shared__ int last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned blocks = gridDim.x * gridDim.y * gridDim.z;
    last = atomicAdd(counter, 1u) == blocks - 1;
    if (last) atomicExch(counter, 0u);
  }
  __syncthreads();
  if (last) __threadfence();
  return last != 0;
}

__global__ void gemv_kernel(GemvArgs a, int64_t total) {
  pdl_enter();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row < total) {  // no early return: a tail needs every thread of the block
    int s = 0;
    int64_t r = row;
    while (s < a.nseg - 1 && r >= a.seg[s].W.rows) {
      r -= a.seg[s].W.rows;
      ++s;
    }
    const GemvSeg g = a.seg[s];
    float v = warp_dot(g.W.dtype, g.W.p, r, a.x, g.W.cols);
    if ((threadIdx.x & 31) == 0) {
      float* y = g.y + (g.y_dyn ? static_cast<int64_t>(a.params[0]) * g.y_dyn : 0);
      if (g.bias) v += g.bias[r];
      if (a.epi == 1) {
        y[r] += v;
      } else if (a.epi == 2) {
        y[r] = softplus(v);
      } else {
        y[r] = v;
        if (a.epi == 3 && s == 0 && r < a.conv.Di) {  // the conv of channel r over [window, v]
          const ConvEpi& c = a.conv;
          const int64_t Di = c.Di;
          const int W = c.W;
          float acc = c.b ? c.b[r] : 0.0f;
          for (int k = 0; k < W - 1; ++k) acc += c.w[r * W + k] * c.win[(k + 1) * Di + r];
          acc += c.w[r * W + W - 1] * v;
          c.u[r] = silu(acc);
          for (int j = 0; j < W - 1; ++j) c.win[j * Di + r] = c.win[(j + 1) * Di + r];
          c.win[(W - 1) * Di + r] = v;
        }
      }
    }
  }
  if (a.tail.on && last_block(a.tail.counter)) resid_row(a.tail.r, 0);
}

__global__ void glu_kernel(const ExpertW* table, const int32_t* sel, int64_t I, int64_t H, const float* x, float* out) {
  pdl_enter();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r >= I) return;
  const int j = blockIdx.y;
  const ExpertW w = table[sel ? sel[j] : j];
  const float g = warp_dot(w.gdt, w.gate, r, x, H);
  const float u = warp_dot(w.udt, w.up, r, x, H);
  if ((threadIdx.x & 31) == 0) out[j * I + r] = silu(g) * u;
}

__global__ void down_kernel(const ExpertW* table, const int32_t* sel, const float* wts, int K, int64_t H, int64_t I,
                            const float* g, float* h, Tail tail) {
  pdl_enter();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r < H) {  // no early return: a tail needs every thread of the block
    float y = 0;
    for (int j = 0; j < K; ++j) {
      const ExpertW w = table[sel ? sel[j] : j];
      const float ye = warp_dot(w.ddt, w.down, r, g + j * I, I);
      y += wts ? wts[j] * ye : ye;
    }
    if ((threadIdx.x & 31) == 0) h[r] += y;
  }
  if (tail.on && last_block(tail.counter)) resid_row(tail.r, 0);
}

__global__ void embed_kernel(DW e, const float* regs, const int32_t* params, float* h, Tail tail) {
  pdl_enter();
  const int s = blockIdx.x;
  const int32_t id = params[2 + s];
  const int64_t H = e.cols;
  float* out = h + s * H;
  if (id >= 0) {
    const void* row = static_cast<const char*>(e.p) + id * H * elem_size(e.dtype);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) out[i] = widen(e.dtype, row, i);
  } else {
    const float* row = regs + static_cast<int64_t>(-1 - id) * H;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) out[i] = row[i];
  }
  if (!tail.on) return;
  __syncthreads();  // the row is this block's own
  resid_row(tail.r, s);
}

__global__ void rank1_kernel(const float* rows, int64_t cap, int S, int64_t H, double* state, float* rec,
                             int64_t rec_stride, int64_t off) {
  pdl_enter();
  __shared__ double shd[32];
  const int c = blockIdx.x;
  double* st = state + c * (H + 4);
  double* mean = st;
  for (int s = 0; s < S; ++s) {
    const float* x = rows + (c * cap + s) * H;
    const double n = st[H + 3] + 1.0, inv_n = 1.0 / n;
    double dm2 = 0, sq = 0;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
      const double xi = x[i];
      const double delta = xi - mean[i];
      mean[i] += delta * inv_n;
      dm2 += delta * (xi - mean[i]);
      sq += xi * xi;
    }
    dm2 = block_sum_d(dm2, shd);
    sq = block_sum_d(sq, shd);
    if (threadIdx.x == 0) {
      st[H] += dm2;
      const double yk = sq - st[H + 2];  // Kahan sum of the row norms
      const double t = st[H + 1] + yk;
      st[H + 2] = (t - st[H + 1]) - yk;
      st[H + 1] = t;
      st[H + 3] = n;
      rec[s * rec_stride + off + c] = rank1_distance(st[H], st[H + 1], static_cast<int64_t>(n));
    }
    __syncthreads();
  }
}

__global__ void attention_kernel(AttnArgs a) {
  pdl_enter();
  __shared__ float q[256];
  __shared__ float osh[kWarps][256];
  __shared__ double shd[32];
  __shared__ float shf[32];
  const int hq = blockIdx.x, s = blockIdx.y, hk = hq / a.group, hd = a.hd;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = static_cast<int64_t>(a.params[0]) + s + 1;  // registers and tokens up to the query
  const float* qv = a.q + (static_cast<int64_t>(s) * a.nh + hq) * hd;
  for (int i = threadIdx.x; i < hd; i += blockDim.x) q[i] = qv[i];
  __syncthreads();
  float* z = a.z + (static_cast<int64_t>(s) * a.nh + hq) * a.zstride;  // (n,) logits, then (n,) probabilities
  float* p = z + a.zstride / 2;
  for (int64_t j = warp; j < n; j += kWarps) {
    const float* k = a.kc + j * a.kvw + hk * hd;
    float d = 0;
    for (int i = lane; i < hd; i += 32) d += q[i] * k[i];
    d = warp_sum(d);
    if (lane == 0) z[j] = d * a.scale;
  }
  __syncthreads();
  float m = -INFINITY, mabs = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    m = fmaxf(m, z[j]);
    mabs = fmaxf(mabs, fabsf(z[j]));
  }
  m = block_max(m, shf);
  mabs = block_max(mabs, shf);
  const bool has_null = attn_has_null(a.norm);
  const float zn = attn_null_logit(a.norm, a.sinks ? a.sinks[hq] : 0.0f);
  if (has_null) m = fmaxf(m, zn);
  double den = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = expf(z[j] - m);
    p[j] = e;
    den += e;
  }
  den = block_sum_d(den, shd);
  const double e_null = has_null ? exp(static_cast<double>(zn) - m) : 0.0;
  den += e_null;
  const double inv = 1.0 / den;
  double mass = 0, weighted = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float pj = static_cast<float>(p[j] * inv);
    p[j] = pj;
    mass += pj;
    weighted += static_cast<double>(pj) * (static_cast<double>(z[j]) - m);
  }
  const bool stats = a.instruments && a.rec;
  if (stats) {
    mass = block_sum_d(mass, shd);
    weighted = block_sum_d(weighted, shd);
  } else {
    __syncthreads();
  }
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // dims lane + 32k of this warp's keys
  for (int64_t j = warp; j < n; j += kWarps) {
    const float pj = p[j];
    const float* v = a.vc + j * a.kvw + hk * hd;
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (lane + 32 * k < hd) acc[k] += pj * v[lane + 32 * k];
  }
#pragma unroll
  for (int k = 0; k < 8; ++k)
    if (lane + 32 * k < hd) osh[warp][lane + 32 * k] = acc[k];
  __syncthreads();
  float* o = a.o + (static_cast<int64_t>(s) * a.nh + hq) * hd;
  for (int c = threadIdx.x; c < hd; c += blockDim.x) {
    float t = 0;
    for (int w = 0; w < kWarps; ++w) t += osh[w][c];
    o[c] = t;
  }
  if (!stats) return;
  float* r = a.rec + s * a.rec_stride;
  const int64_t slot = a.slot0 + hq;
  const AttnStats st = attn_finish(a.norm, den, e_null, zn, m, mass, weighted, mabs, n);
  if (threadIdx.x == 0) {
    r[a.off_attn + slot] = st.entropy;
    r[a.off_attn + a.an + slot] = st.entropy_norm;
    r[a.off_attn + 2 * a.an + slot] = st.mass;
    r[a.off_attn + 3 * a.an + slot] = st.max_abs_logit;
  }
  if (!a.full) return;
  float* row = r + a.off_rows + slot * a.row_stride;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) row[j] = p[j];
  if (threadIdx.x == 0) row[n] = st.p_null;
}

__global__ void conv_kernel(const float* xz, float* win, const float* w, const float* b, float* u, int S, int64_t Di,
                            int W) {
  pdl_enter();
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= Di) return;
  auto in = [&](int64_t t) { return t >= 0 ? xz[t * 2 * Di + d] : win[(t + W) * Di + d]; };
  for (int s = 0; s < S; ++s) {
    float c = b ? b[d] : 0.0f;
    for (int k = 0; k < W; ++k) c += w[d * W + k] * in(s - (W - 1) + k);
    u[s * Di + d] = silu(c);
  }
  // Row j of the new window is position S−W+j: from xz, or from old row S+j > j (not yet overwritten).
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

__global__ void router_kernel(DW W, const float* x, int E, int K, float* probs, int32_t* sel, float* selw, float* rec,
                              int64_t rec_stride, int64_t off_probs, int64_t off_topk, int64_t off_lse, int xi) {
  pdl_enter();
  const int s = blockIdx.x;
  route_row(W, x + s * W.cols, s, E, K, probs, sel, selw, rec, rec_stride, off_probs, off_topk, off_lse, xi);
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

__global__ void widen_kernel(const void* src, int t, float* dst, int64_t n) {
  pdl_enter();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = widen(t, src, i);
}

__global__ void silu_mul_kernel(float* g, const float* u, int64_t n) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g[i] = silu(g[i]) * u[i];
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t total, int64_t n) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) y[i] += bias[i % n];
}

__global__ void gather_kernel(const float* x, const int32_t* rows, int64_t H, float* xe) {
  pdl_enter();
  const int j = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[j]) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) xe[j * H + i] = src[i];
}

__global__ void scatter_kernel(float* y, const int32_t* rows, const float* w, int64_t H, const float* ye) {
  pdl_enter();
  const int j = blockIdx.x;
  float* dst = y + static_cast<int64_t>(rows[j]) * H;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dst[i] += w[j] * ye[j * H + i];
}

__global__ void copy_kernel(const float4* src, float4* dst, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

__global__ void empty_kernel() {}

unsigned blocks_for(int64_t n, int per = kThreads) {
  return static_cast<unsigned>((n + per - 1) / per);
}

unsigned grid_stride_blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

}  // namespace

void set_programmatic_launch(bool on) {
  g_pdl = on;
}

void launch_gemv(const GemvArgs& a, cudaStream_t st) {
  int64_t total = 0;
  for (int i = 0; i < a.nseg; ++i) total += a.seg[i].W.rows;
  launch_k(gemv_kernel, blocks_for(total, kWarps), kThreads, st, a, total);
}

void launch_glu(const ExpertW* table, const int32_t* sel, int K, int64_t I, int64_t H, const float* x, float* out,
                cudaStream_t st) {
  launch_k(glu_kernel, dim3(blocks_for(I, kWarps), static_cast<unsigned>(K)), kThreads, st, table, sel, I, H, x, out);
}

void launch_down(const ExpertW* table, const int32_t* sel, const float* wts, int K, int64_t H, int64_t I,
                 const float* g, float* h, const Tail& tail, cudaStream_t st) {
  launch_k(down_kernel, blocks_for(H, kWarps), kThreads, st, table, sel, wts, K, H, I, g, h, tail);
}

void launch_embed(DW embed, const float* regs, const int32_t* params, int S, float* h, const Tail& tail,
                  cudaStream_t st) {
  launch_k(embed_kernel, static_cast<unsigned>(S), kThreads, st, embed, regs, params, h, tail);
}

void launch_resid(const ResidArgs& a, cudaStream_t st) {
  launch_k(resid_kernel, static_cast<unsigned>(a.S), kThreads, st, a);
}

void launch_rank1(const float* rows, int columns, int64_t cap, int S, int64_t H, double* state, float* rec,
                  int64_t rec_stride, int64_t off, cudaStream_t st) {
  launch_k(rank1_kernel, static_cast<unsigned>(columns), kThreads, st, rows, cap, S, H, state, rec, rec_stride, off);
}

void launch_attention(const AttnArgs& a, cudaStream_t st) {
  launch_k(attention_kernel, dim3(static_cast<unsigned>(a.nh), static_cast<unsigned>(a.S)), kThreads, st, a);
}

void launch_conv(const float* xz, float* win, const float* w, const float* b, float* u, int S, int64_t Di, int W,
                 cudaStream_t st) {
  launch_k(conv_kernel, blocks_for(Di), kThreads, st, xz, win, w, b, u, S, Di, W);
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

void launch_router(DW W, const float* x, int S, int E, int K, float* probs, int32_t* sel, float* selw, float* rec,
                   int64_t rec_stride, int64_t off_probs, int64_t off_topk, int64_t off_lse, int xi, cudaStream_t st) {
  launch_k(router_kernel, static_cast<unsigned>(S), kThreads, st, W, x, E, K, probs, sel, selw, rec, rec_stride,
           off_probs, off_topk, off_lse, xi);
}

void launch_widen(const void* src, int dtype, float* dst, int64_t n, cudaStream_t st) {
  launch_k(widen_kernel, grid_stride_blocks(n), kThreads, st, src, dtype, dst, n);
}

void launch_silu_mul(float* g, const float* u, int64_t n, cudaStream_t st) {
  launch_k(silu_mul_kernel, blocks_for(n), kThreads, st, g, u, n);
}

void launch_add_bias(float* y, const float* bias, int S, int64_t n, cudaStream_t st) {
  launch_k(add_bias_kernel, blocks_for(S * n), kThreads, st, y, bias, S * n, n);
}

void launch_gather(const float* x, const int32_t* rows, int n, int64_t H, float* xe, cudaStream_t st) {
  launch_k(gather_kernel, static_cast<unsigned>(n), kThreads, st, x, rows, H, xe);
}

void launch_scatter(float* y, const int32_t* rows, const float* w, int n, int64_t H, const float* ye, cudaStream_t st) {
  launch_k(scatter_kernel, static_cast<unsigned>(n), kThreads, st, y, rows, w, H, ye);
}

void launch_copy(const float* src, float* dst, int64_t n, cudaStream_t st) {
  copy_kernel<<<grid_stride_blocks(n / 4), kThreads, 0, st>>>(reinterpret_cast<const float4*>(src),
                                                              reinterpret_cast<float4*>(dst), n / 4);
}

void launch_empty(cudaStream_t st) {
  empty_kernel<<<1, 32, 0, st>>>();
}

}  // namespace hl::cuda
