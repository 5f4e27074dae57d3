// The CUDA backend's kernels (cuda_kernels.cu, cuda_kernels_ssm.cu, cuda_kernels_mamba2.cu) behind
// plain launch functions, so the host side (cuda_backend.cpp) is ordinary C++ built by g++. Every
// launch function enqueues one kernel on `st` (launch_scan_chunked three; the backend counts them per
// token) and never synchronises. Shapes use the
// trace-format.md §2 notation; activations are fp32 row-major, weights in their stored dtype
// (cuda_math.h codes). `params` is the device copy of the step parameters: [0] cached positions
// before the step (registers included), [1] S, then S ids (a register row r as -1-r).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hl::cuda {

// Programmatic dependent launch for the kernels below (sm_90+): each launch may overlap the tail of
// the kernel before it; results are those of plain launches. Off by default.
void set_programmatic_launch(bool on);

// A weight matrix on the device: (rows, cols) row-major.
struct DW {
  const void* p = nullptr;
  int32_t dtype = 0;
  int64_t rows = 0, cols = 0;
};

// One expert (or the dense MLP) for the fused decode feed-forward; a device table of these per layer.
// gate null: relu² without gate (Nemotron-H's experts), out = relu(x·upᵀ)².
struct ExpertW {
  const void* gate;
  const void* up;
  const void* down;
  int32_t gdt, udt, ddt;
};

// Per token row s: h += y_scale·y (y may be null; y_scale: Granite's residual multiplier); observe residual point `column` (≥ 0) into the record
// (nonfinite flag, largest |h|, the row for the rank-to-1 kernel); then x = rmsnorm(h)·w.
struct ResidArgs {
  float* h = nullptr;
  const float* y = nullptr;
  const float* y_bias = nullptr;
  float y_scale = 1.0f;
  int64_t H = 0;
  int S = 0;
  int column = -1;
  float* rec = nullptr;  // null: registers (nothing observed)
  int64_t rec_stride = 0, off_nonfinite = 0, off_resid_max = 0;
  bool instruments = false;
  float* rows = nullptr;  // (L+1, cap, H) residual rows, when instruments
  int64_t cap = 0;
  const float* norm_w = nullptr;  // null: no norm
  float* x = nullptr;
  double eps = 1e-6;
  // With router.p: the MoE router on the normed row (logits, softmax, top-k in ascending index, the
  // log-sum-exp): probs (S, E), sel (S, K) the chosen experts, selw (S, K) their weights, the record.
  DW router;
  int E = 0, K = 0, xi = 0;
  bool renorm = false;  // the k chosen weights over their sum (Granite's top-k softmax; Nemotron-H's)
  // Nemotron-H's router (cuda_math.h route_sigmoid): sigmoid scores, the correction bias (or null)
  // for the choice only, expert groups, the weights × routed_scaling.
  bool sigmoid = false;
  const float* router_bias = nullptr;
  int groups = 1, topk_groups = 1;
  double routed_scaling = 1.0;
  float* probs = nullptr;
  int32_t* sel = nullptr;
  float* selw = nullptr;
  float* router_rec = nullptr;  // rec when the instruments are on, else null
  int64_t off_probs = 0, off_topk = 0, off_lse = 0;
};
void launch_resid(const ResidArgs& a, cudaStream_t st);

// The same for one token (S = 1) fused into the kernel that finishes h: the last block of that
// kernel to complete (a device-wide counter, reset by it) runs it, so a decode step has no separate
// norm launches. counter: one zeroed unsigned on the device.
struct Tail {
  bool on = false;
  ResidArgs r;
  unsigned* counter = nullptr;
};

// Decode matrix-vector products: up to 3 matrices with the same cols in one launch, one warp per
// output row. y[r] (+)= alpha·(W[r]·x (+ bias[r])); y moves by params[0]·y_dyn elements (the KV row of
// the step). Epilogue: 0 store, 1 accumulate (y += …), 2 softplus(…) (dt), 3 store and, for rows
// r < conv.Di (Mamba in_proj's x branch), the one-token causal conv + SiLU of channel r into
// conv.u with the window (W, Di) shifted by one position.
struct ConvEpi {
  float* win = nullptr;
  const float* w = nullptr;  // (Di, W)
  const float* b = nullptr;  // (Di,) or null
  float* u = nullptr;        // (Di,)
  int64_t Di = 0;
  int W = 0;
};
struct GemvSeg {
  DW W;
  float* y = nullptr;
  int64_t y_dyn = 0;
  const float* bias = nullptr;
};
struct GemvArgs {
  GemvSeg seg[3];
  int nseg = 1;
  const float* x = nullptr;
  int epi = 0;
  float alpha = 1.0f;  // Granite's residual multiplier (epi 1), the logits' scale (epi 0)
  const int32_t* params = nullptr;
  ConvEpi conv;
  Tail tail;  // with epi 1 (h += …): the norm of the finished row
};
void launch_gemv(const GemvArgs& a, cudaStream_t st);

// out (K, I) = silu(x·gateᵀ) ⊙ (x·upᵀ), or relu(x·upᵀ)² without gate, of the experts table[sel[j]]
// (sel null: table[j]); x (H,).
void launch_glu(const ExpertW* table, const int32_t* sel, int K, int64_t I, int64_t H, const float* x, float* out,
                cudaStream_t st);
// h (H,) += alpha · Σ_j w_j · down_j(g_j) over j = 0..K-1 in order (wts null: weight 1).
void launch_down(const ExpertW* table, const int32_t* sel, const float* wts, int K, int64_t H, int64_t I,
                 const float* g, float* h, float alpha, const Tail& tail, cudaStream_t st);

// Embedding rows (widened) or register rows, × scale (Granite's embedding_multiplier; registers too,
// as the CPU backend): h (S, H). With tail.on, each token's block then runs the norm of tail.r on its
// row (no counter needed).
void launch_embed(DW embed, const float* regs, const int32_t* params, int S, float* h, float scale, const Tail& tail,
                  cudaStream_t st);

// Rank-to-1 distance of every residual point for S tokens in order (Welford in fp64 on the device).
// state: (L+1, H + 4) doubles: mean row, then M2, Σ‖x‖², its Kahan compensation, n.
void launch_rank1(const float* rows, int columns, int64_t cap, int S, int64_t H, double* state, float* rec,
                  int64_t rec_stride, int64_t off, cudaStream_t st);

struct AttnArgs {
  const float* q = nullptr;  // (S, nh·hd)
  const float* kc = nullptr;
  const float* vc = nullptr;  // (cap, nkv·hd)
  int nh = 0, group = 1, hd = 0, kvw = 0;
  const int32_t* params = nullptr;
  int S = 0;
  float scale = 1;
  int norm = 0;
  const float* sinks = nullptr;  // (nh,) device, or null (logit 0)
  float* o = nullptr;            // (S, nh·hd)
  float* z = nullptr;            // scratch (S·nh, zstride)
  int64_t zstride = 0;
  float* rec = nullptr;
  int64_t rec_stride = 0, off_attn = 0, an = 0, slot0 = 0;
  int64_t off_rows = 0, row_stride = 0;
  bool instruments = false, full = false;
};
void launch_attention(const AttnArgs& a, cudaStream_t st);

// Causal depthwise conv + bias + SiLU over [window, block]: u (S, Di) from the first Di floats of the
// rows of x (row stride xs: Mamba-1's x|z 2Di, Mamba-2's z | x|B|C | dt read from x|B|C with Di =
// conv_dim); the window (W, Di) becomes the raw inputs of the last W positions.
void launch_conv(const float* x, int64_t xs, float* win, const float* w, const float* b, float* u, int S, int64_t Di,
                 int W, cudaStream_t st);
// p (S, R+2N) → dtr (S, R), B (S, N), C (S, N) through their RMSNorms.
void launch_xnorms(const float* p, float* dtr, float* Bm, float* Cm, const float* wdt, const float* wb, const float* wc,
                   int S, int R, int N, double eps, cudaStream_t st);
// The decode Mamba step after x_proj, fused (one token): the RMSNorms of p (R+2N) into dt_r, B and C,
// Δ = softplus(dt_r·dt_projᵀ + bias) (one warp per channel), the scan update of the channel's N
// lanes, the gated output; Δ into dt (Di,), the retained share into retained when non-null.
struct StepArgs {
  const float* p = nullptr;
  const float *wdt = nullptr, *wb = nullptr, *wc = nullptr;
  DW dt_proj;  // (Di, R)
  const float* dt_bias = nullptr;
  const float* A = nullptr;  // (N, Di)
  const float* D = nullptr;
  const float* z = nullptr;  // (Di,) the gate
  const float* u = nullptr;  // (Di,)
  float* h = nullptr;        // (N, Di)
  float* dt = nullptr;
  float* out = nullptr;
  float* retained = nullptr;
  int R = 0, N = 0;
  int64_t Di = 0;
  double eps = 1e-6;
};
void launch_mamba_step(const StepArgs& a, cudaStream_t st);
constexpr int kMaxStepRank = 1024;  // R + 2N the fused step holds in shared memory

// dt (S, Di) = softplus(dt + bias).
void launch_bias_softplus(float* dt, const float* bias, int S, int64_t Di, cudaStream_t st);

// The selective scan (cuda_math.h scan_update): state h (N, Di); out (S, Di) gated by silu(z),
// z row stride zs; retained (S, Di) or null. Chunked: tokens [c·T, (c+1)·T) per chunk.
struct ScanArgs {
  const float* dt = nullptr;
  const float* u = nullptr;
  const float* z = nullptr;
  int64_t zs = 0;
  const float* B = nullptr;
  const float* C = nullptr;
  const float* A = nullptr;  // (N, Di)
  const float* D = nullptr;
  float* h = nullptr;  // (N, Di)
  float* out = nullptr;
  float* retained = nullptr;
  int S = 0, N = 0;
  int64_t Di = 0;
};
// One chunk (decode, or a short prefill): the state updated in place.
void launch_scan(const ScanArgs& a, cudaStream_t st);
// The chunked parallel prefill: chunk-local scans from a zero state (local, (chunks, N, Di)) and
// decay products (prod), the carries between chunks (carry, (chunks, N, Di)), then each chunk's
// outputs from its carried-in state; three launches.
void launch_scan_chunked(const ScanArgs& a, int T, float* local, float* prod, float* carry, cudaStream_t st);

// ssm_delta_mean per Mamba layer and token (fp64 mean over Di); with `full` Δ and the retained
// share copied into the record. dt, ret: (M, cap, Di).
void launch_mamba_stats(const float* dt, const float* ret, int M, int64_t cap, int S, int64_t Di, float* rec,
                        int64_t rec_stride, int64_t off_mean, int64_t off_delta, int64_t off_ret, bool full,
                        cudaStream_t st);

// Mamba-2's recurrence in token order (cuda_kernels_mamba2.cu; HF BambaMixer's slow path, as the
// CPU's scan_in_order and Vulkan's mamba2_scan.comp): one thread per channel c of head h = c / P
// (B/C group g = h / (nh/G)) walks the S tokens: Δ = cuda_math.h mamba2_delta, dA = e^(Δ·A_h), its
// state row ← dA·row + (Δ·x)·B_g, y = row·C_g + D_h·x before the gate. Decode (S = 1) and prefill are
// the same steps, so a prefill equals its decode steps.
struct Mamba2Args {
  const float* xbc = nullptr;  // token s: x (Di) | B (G·N) | C (G·N) at xbc + s·conv after the conv
  int64_t conv = 0;
  const float* dt = nullptr;  // token s: dt (nh,) at dt + s·dts (in_proj's output)
  int64_t dts = 0;
  const float *dt_bias = nullptr, *A = nullptr, *D = nullptr;  // (nh,) each
  float lo = 0, hi = 0;                                        // the Δ clamp (hi may be +∞)
  float* h = nullptr;         // (N, Di) the state, channel innermost
  float* y = nullptr;         // (S, Di) before the gate
  float* dch = nullptr;       // (S, Di) each channel's head Δ (the record's Δ statistics)
  float* dhead = nullptr;     // (S, nh) Δ per head (the ssm_delta intermediate)
  float* retained = nullptr;  // (S, Di) each channel's head e^(Δ·A), or null
  int S = 0, nh = 0, P = 0, N = 0, G = 1;
};
void launch_mamba2_scan(const Mamba2Args& a, cudaStream_t st);
// Mamba-2's gated RMSNorm after the gate, in place: per token and group of `group` channels, v =
// silu(z)·y, y ← w · v / sqrt(mean(v²) + eps) (fp64 Σv²). y (S, Di); z of token s at z + s·zs.
void launch_gated_norm(float* y, const float* z, int64_t zs, const float* w, int S, int64_t Di, int64_t group,
                       double eps, cudaStream_t st);
// RoPE in place on the first 2r dims of every q head (S rows of nh·hd) and of the S new key rows in
// the cache (nkv·hd each, row params[0] + s): pair (i, i + r) turned by (params[0] + s)·inv_freq[i].
void launch_rope(float* q, float* kc, const int32_t* params, const double* inv_freq, int S, int nh, int nkv, int hd,
                 int r, cudaStream_t st);

// Prefill helpers.
void launch_widen(const void* src, int dtype, float* dst, int64_t n, cudaStream_t st);
void launch_silu_mul(float* g, const float* u, int64_t n, cudaStream_t st);
void launch_relu2(float* u, int64_t n, cudaStream_t st);  // u = relu(u)² (Nemotron-H's MLP)
void launch_add_bias(float* y, const float* bias, int S, int64_t n, cudaStream_t st);
void launch_gather(const float* x, const int32_t* rows, int n, int64_t H, float* xe, cudaStream_t st);
void launch_scatter(float* y, const int32_t* rows, const float* w, int n, int64_t H, const float* ye, cudaStream_t st);

// Benchmark kernels: a device-to-device copy (float4) and an empty kernel.
void launch_copy(const float* src, float* dst, int64_t n, cudaStream_t st);
void launch_empty(cudaStream_t st);

}  // namespace hl::cuda
