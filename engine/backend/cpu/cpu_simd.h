// Vector kernels of the CPU backend with runtime dispatch (AVX-512, AVX2+FMA+F16C, portable loops):
// the decode matrix–vector product on stored weights widened in registers (and, for block weights,
// llama.cpp's int8 product: x rounded to 8-bit blocks, integer dots), widening for the
// BLAS panels, attention rows, SiLU, softplus, SwiGLU's silu(g)·u and the selective scan (jamba-spec.md
// §3.5) over blocks of channels. Not the model; each kernel computes what its portable loop in
// cpu_simd.cpp computes, within fp32 rounding (tests/engine/test_cpu_speed.cpp checks every ISA).
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace hl::cpu::simd {

enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2 };

// The SSM state and A live in channel tiles of kTile channels: element (d, n) of a (Di, N) matrix is at
// tile_index(d, n, N) = (d / kTile)·N·kTile + n·kTile + d % kTile, i.e. (⌈Di/kTile⌉, N, kTile) with the
// channel innermost, so a vector of lanes holds one state lane n of kTile (or kTile/2) channels and a
// decode step loads and stores it in place. The last tile is padded when kTile does not divide Di.
constexpr int64_t kTile = 16;
inline int64_t tile_index(int64_t d, int64_t n, int64_t N) {
  return (d / kTile) * N * kTile + n * kTile + d % kTile;
}
inline int64_t tiled_size(int64_t Di, int64_t N) {
  return (Di + kTile - 1) / kTile * N * kTile;
}

// One selective-scan job (jamba-spec.md §3.5 step 6 and the gating of step 6's `out`): for channels
// d of a block and tokens s in order, with δ = dt[s, d], u = u[s, d]:
//   h[d, n] = exp(δ·A[d, n])·h[d, n] + (δ·B[s, n])·u          (N state lanes, fp32)
//   out[s, d] = (Σ_n h[d, n]·C[s, n] + D[d]·u) · silu(z[s, d])
//   retained[s, d] = Σ_n exp(δ·A[d, n]) / N                    (when retained is non-null)
struct ScanArgs {
  int64_t S = 0, Di = 0, N = 0;  // tokens, channels, state size
  const float* dt = nullptr;     // (S, Di) Δ after softplus
  const float* u = nullptr;      // (S, Di) conv output after SiLU
  const float* z = nullptr;      // (S, z_stride) gate, channel d at z[s*z_stride + d]
  int64_t z_stride = 0;
  const float* B = nullptr;   // (S, N) after b_norm
  const float* C = nullptr;   // (S, N) after c_norm
  const float* A = nullptr;   // (Di, N) = -exp(A_log), tiled (tile_index)
  const float* D = nullptr;   // (Di,)
  float* h = nullptr;         // (Di, N) state, tiled (tile_index), updated in place
  float* out = nullptr;       // (S, Di)
  float* retained = nullptr;  // (S, Di) or null
};

struct Kernels {
  Isa isa;
  const char* name;
  // y (rows,) = W (rows, cols) · x (cols,): W row-major in dtype t (F32, F16, BF16), rows contiguous.
  void (*matvec)(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y);
  // dst (n,) = widen(src (n,) of dtype t).
  void (*widen)(DType t, const void* src, float* dst, int64_t n);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a·x
  // Attention over cached rows: z[j] = (q · K[j·ldk .. +n]) · scale, and o (n,) += Σ_j p[j] · V[j·ldv .. +n].
  void (*dot_rows)(const float* q, const float* K, int64_t ldk, int64_t m, int64_t n, float scale, float* z);
  void (*axpy_rows)(const float* p, const float* V, int64_t ldv, int64_t m, int64_t n, float* o);
  void (*silu_mul)(float* g, const float* u, int64_t n);  // g = silu(g)·u
  void (*silu)(float* x, int64_t n);                      // x = silu(x) = x / (1 + exp(−x))
  void (*softplus)(float* x, int64_t n);                  // x = x > 20 ? x : log1p(exp(x))
  // The scan of ScanArgs over channels [d0, d1) (vector lanes from the first multiple of kTile on).
  void (*scan)(const ScanArgs& a, int64_t d0, int64_t d1);
  void (*exp)(float* x, int64_t n);  // x = exp(x) (the scan's exp, ≤ 2 ulp; the hidden attention's decays)

  // The int8 path of llama.cpp's CPU backend (cpu_simd_quant_impl.h, resources/docs/quantization.md):
  // y = W · x̂ with x̂ = x rounded to 8 bits per block once per call (quantize_x_q8_0 for Q8_0, Q4_0
  // and Q5_0 weights, quantize_x_q8_k for Q4_K, Q5_K and Q6_K) and an integer dot product per block, scaled by the two
  // blocks' scales. Any other dtype (has_x8_path false) goes to matvec with x in fp32.
  void (*matvec_x8)(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y);
  // x (n, a multiple of 32) → per block of 32: d[k] = max|x|/127, q = round-to-nearest-even(x·127/max|x|)
  // (ggml's x86 quantize_row_q8_0; the scale stays fp32 instead of fp16); a zero block gives d = 0, q = 0.
  void (*quantize_x_q8_0)(const float* x, int64_t n, float* d, int8_t* q);
  // x (n, a multiple of 256) → per block of 256 (ggml's quantize_row_q8_K_ref): v = the first value of
  // largest |x|, iscale = −127/v, q = round-to-nearest-even(iscale·x) in [−127, 127], d = 1/iscale,
  // bsums[16k + j] = Σ of q over values 16j .. 16j + 15 of block k.
  void (*quantize_x_q8_k)(const float* x, int64_t n, float* d, int8_t* q, int16_t* bsums);
  // y (16·groups,) = W · x̂ for a Q4_K or Q8_0 matrix held in groups of 16 rows (core/rows16.h; W the
  // first group's bytes), x̂ rounded as matvec_x8 rounds it and the same integer sums per block; only
  // the order of the float additions differs. Null where the ISA has none (then such a matrix's rows
  // are taken out of their groups for matvec_x8).
  void (*matvec_rows16)(DType t, const void* W, int64_t groups, int64_t cols, const float* x, float* y) = nullptr;
};

// The block formats matvec_x8 computes in integers (Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K).
bool has_x8_path(DType t);

// The best kernels this CPU supports, or those named by $HL_ISA (portable, avx2, avx512).
const Kernels& kernels();
// The kernels of one ISA, or null when this CPU (or this build) lacks it. For tests and benchmarks.
const Kernels* kernels_for(Isa isa);

// Portable loops: the reference every vector kernel is checked against.
const Kernels& portable();
void scan_portable(const ScanArgs& a, int64_t d0, int64_t d1);

namespace detail {
const Kernels* avx2_kernels();    // null when not compiled for x86-64
const Kernels* avx512_kernels();  // null when not compiled for x86-64
// The AVX-512 set's int8 products with VNNI's vpdpbusd / vpdpwssd (cpu_simd_vnni.cpp), used only when
// has_vnni() (AVX512_VNNI; without it the set keeps its maddubs loops: Skylake-X has AVX-512 without
// VNNI). vnni_x8 returns false, doing nothing, for a dtype without an int8 path.
bool has_vnni();
bool vnni_x8(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y);
void vnni_rows16(DType t, const void* W, int64_t groups, int64_t cols, const float* x, float* y);
}  // namespace detail

}  // namespace hl::cpu::simd
