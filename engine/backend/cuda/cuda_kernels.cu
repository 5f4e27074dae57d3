// The CUDA backend's kernels (see cuda_kernels.h). Per-element math comes from cuda_math.h, shared
// with the host tests. Reductions that the CPU does in fp64 (RMSNorm sums of squares, attention
// denominators and entropy terms, Δ means, Welford) are fp64 here too, as block reductions; the
// order of fp32 sums (dot products, attention outputs) differs from the CPU's within fp32 rounding.
// Decode products: one warp per output row, 16-byte loads of the stored weights widened in
// registers (the bandwidth path), with the next RMSNorm run by the product's last block (Tail);
// prefill products go through cuBLAS (cuda_backend.cpp).
#include "engine/backend/cuda/cuda_device_util.cuh"

namespace hl::cuda {

bool g_pdl = false;  // programmatic dependent launch in use (launch_k, cuda_device_util.cuh)

namespace {

// The router of one token row x (H,) (the whole block calls it): logits by warps, then one thread's
// softmax/top-k/lse (or Nemotron-H's grouped sigmoid choice); the chosen experts in ascending index
// into sel/selw with their weights; the record (the top-k as chosen) when a.router_rec.
__device__ void route_row(const ResidArgs& a, const float* x, int s) {
  __shared__ float logits[256], pr[256], choice[256], wk[64], gscore[64];
  __shared__ int32_t top[64], gbest[64];
  const DW& W = a.router;
  const int E = a.E, K = a.K;
  const int warp = threadIdx.x >> 5;
  for (int e = warp; e < E; e += kWarps) {
    const float v = warp_dot(W.dtype, W.p, e, x, W.cols);
    if ((threadIdx.x & 31) == 0) logits[e] = v;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float lse;
  if (a.sigmoid) {
    lse = route_sigmoid(logits, a.router_bias, E, K, a.groups, a.topk_groups, a.renorm, a.routed_scaling, pr, top, wk,
                        choice, gscore, gbest);
  } else {
    lse = route(logits, E, K, pr, top);
    double sum = 0;  // Granite: the chosen probabilities over their sum, in fp64 as the CPU
    for (int j = 0; j < K; ++j) sum += pr[top[j]];
    for (int j = 0; j < K; ++j) wk[j] = a.renorm ? static_cast<float>(pr[top[j]] / sum) : pr[top[j]];
  }
  for (int e = 0; e < E; ++e) a.probs[s * E + e] = pr[e];
  if (a.router_rec) {
    float* r = a.router_rec + s * a.rec_stride;
    for (int e = 0; e < E; ++e) r[a.off_probs + a.xi * E + e] = pr[e];
    int32_t* rt = reinterpret_cast<int32_t*>(r + a.off_topk + a.xi * K);
    for (int j = 0; j < K; ++j) rt[j] = top[j];
    r[a.off_lse + a.xi] = lse;
  }
  sort_ascending(top, K, wk);
  for (int j = 0; j < K; ++j) {
    a.sel[s * K + j] = top[j];
    a.selw[s * K + j] = wk[j];
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
      v += a.y_scale == 1.0f ? yy : a.y_scale * yy;
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
  route_row(a, x, s);
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
      if (a.alpha != 1.0f) v *= a.alpha;
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
  const float u = warp_dot(w.udt, w.up, r, x, H);
  if (!w.gate) {  // relu² without gate
    if ((threadIdx.x & 31) == 0) out[j * I + r] = relu2(u);
    return;
  }
  const float g = warp_dot(w.gdt, w.gate, r, x, H);
  if ((threadIdx.x & 31) == 0) out[j * I + r] = silu(g) * u;
}

__global__ void down_kernel(const ExpertW* table, const int32_t* sel, const float* wts, int K, int64_t H, int64_t I,
                            const float* g, float* h, float alpha, Tail tail) {
  pdl_enter();
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (r < H) {  // no early return: a tail needs every thread of the block
    float y = 0;
    for (int j = 0; j < K; ++j) {
      const ExpertW w = table[sel ? sel[j] : j];
      const float ye = warp_dot(w.ddt, w.down, r, g + j * I, I);
      y += wts ? wts[j] * ye : ye;
    }
    if ((threadIdx.x & 31) == 0) h[r] += alpha == 1.0f ? y : alpha * y;
  }
  if (tail.on && last_block(tail.counter)) resid_row(tail.r, 0);
}

__global__ void embed_kernel(DW e, const float* regs, const int32_t* params, float* h, float scale, Tail tail) {
  pdl_enter();
  const int s = blockIdx.x;
  const int32_t id = params[2 + s];
  const int64_t H = e.cols;
  float* out = h + s * H;
  if (id >= 0) {
    const void* row = static_cast<const char*>(e.p) + elem_bytes(e.dtype, id * H);
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) out[i] = widen(e.dtype, row, i) * scale;
  } else {
    const float* row = regs + static_cast<int64_t>(-1 - id) * H;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) out[i] = row[i] * scale;
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

__global__ void relu2_kernel(float* u, int64_t n) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) u[i] = relu2(u[i]);
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
                 const float* g, float* h, float alpha, const Tail& tail, cudaStream_t st) {
  launch_k(down_kernel, blocks_for(H, kWarps), kThreads, st, table, sel, wts, K, H, I, g, h, alpha, tail);
}

void launch_embed(DW embed, const float* regs, const int32_t* params, int S, float* h, float scale, const Tail& tail,
                  cudaStream_t st) {
  launch_k(embed_kernel, static_cast<unsigned>(S), kThreads, st, embed, regs, params, h, scale, tail);
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

void launch_widen(const void* src, int dtype, float* dst, int64_t n, cudaStream_t st) {
  launch_k(widen_kernel, grid_stride_blocks(n), kThreads, st, src, dtype, dst, n);
}

void launch_silu_mul(float* g, const float* u, int64_t n, cudaStream_t st) {
  launch_k(silu_mul_kernel, blocks_for(n), kThreads, st, g, u, n);
}

void launch_relu2(float* u, int64_t n, cudaStream_t st) {
  launch_k(relu2_kernel, blocks_for(n), kThreads, st, u, n);
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
