// CPU kernels of the backend: linear layers on stored-dtype weights with fp32 accumulation and
// RMSNorm (jamba-spec.md §3.2); SiLU, softplus (threshold 20, §3.5) and the scan are in cpu_simd.h.
// Not the model: cpu_backend.cpp composes these. Decode (S = 1) streams each weight row once through
// the vector matvec, widened in registers; prefill widens weight panels to fp32 and multiplies with BLAS.
#pragma once
#include <cstdint>
#include <type_traits>

#include "engine/model/weights.h"

namespace hl::cpu {

namespace simd {
struct Kernels;
}

// Y (S, W.rows) = X (S, W.cols) · Wᵀ (+ bias (W.rows,) when non-null). Threaded over output rows.
// S == 1: vector matvec; S > 1: BLAS on fp32 panels (the reference loop when built without BLAS).
void linear(const Mat& W, const float* X, int64_t S, float* Y, const float* bias = nullptr);
// Same with the bias as the weights hold it (an empty vector: none).
inline void linear(const Mat& W, const float* X, int64_t S, float* Y, const std::vector<float>& bias) {
  linear(W, X, S, Y, bias.empty() ? nullptr : bias.data());
}
// Same, using only rows [row0, row0 + nrows) of W (a view into a fused tensor).
void linear_rows(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, float* Y);

// Y[s] (W.rows,) = X[s, :] (W.cols,) · Wᵀ for s < S, each output row its own buffer (the records'
// logits): the LM head without an (S, V) staging copy.
void linear_to_rows(const Mat& W, const float* X, int64_t S, float* const* Y);

// The reference loop, the readable definition of the above: each output row widens its weight row
// once and dots it with all S inputs (8 interleaved accumulators). Used without BLAS and in tests.
void linear_rows_ref(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, float* Y);

// Several decode matrix–vector products in one threaded pass over all their rows (q|k|v; the
// experts' down projections): y (rows,) = W[row0 : row0+rows, :] · x (W.cols,).
struct MatvecJob {
  const Mat* W;
  int64_t row0, rows;
  const float* x;
  float* y;
};
void matvec(const MatvecJob* jobs, int njobs);

// y (rows,) = W[r0 : r0+rows, :] · x on the calling thread, by the product W is read with: x in
// fp32 (Mat::fp32_activations) or rounded to 8 bits (matvec_x8). The one place that choice is made
// for a decode row range; the threaded products above and the fused decode jobs call it per chunk.
void matvec_rows(const Mat& W, int64_t r0, int64_t rows, const float* x, float* y);

// Decode: y (W.rows,) = W · x (+ bias (W.rows,) when non-null) in one threaded pass that calls
// then(r0, r1) on each chunk of rows as soon as the chunk is written, on the same thread. Per-row
// work that needs only those rows (the Mamba mixers' causal conv of the channels in_proj has just
// written) rides the product's job instead of a job of its own.
void matvec_then(const Mat& W, const float* x, float* y, const float* bias, void (*then)(void*, int64_t, int64_t),
                 void* ctx);
template <class F>
void matvec_then(const Mat& W, const float* x, float* y, const float* bias, F&& then) {
  using Fn = std::remove_reference_t<F>;
  matvec_then(
      W, x, y, bias, [](void* c, int64_t r0, int64_t r1) { (*static_cast<Fn*>(c))(r0, r1); },
      const_cast<void*>(static_cast<const void*>(&then)));
}

// C (M, N) = alpha · op(A) (M, K) · op(B) (K, N) + beta · C, row-major fp32 with leading dimensions
// lda, ldb, ldc; op(A) = Aᵀ when ta (A stored (K, M)), likewise tb. On the calling thread alone:
// BLAS set to one thread, or plain loops when built without BLAS. For callers that spread their own
// products over the pool (the chunked Mamba-2 scan, cpu_ssd.cpp).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc);

// Rows of output per piece of a product's job, so that a piece reads at least ~8 KiB of weights (at
// least 4 rows). The pool hands a thread a third of what is left of its share at a time, so a long
// share still goes in a few calls; the small pieces are the tail, where a thread waits for the other
// to finish its last one: ~0.1 ms of a Q4_K decode step of the ~317M model at 32 KiB, ~0.03 at 8.
int64_t matvec_grain(int64_t cols, DType t);
// The same for W, in whole pairs of 16-row groups where W is held in them (Mat::rows16): a piece then
// starts and ends on a group and a half piece too (the gate and up rows of swiglu_decode).
int64_t matvec_grain(const Mat& W);

// y = weight * (x / sqrt(mean(x²) + eps)) over the last dim n, for S rows (in place allowed).
void rmsnorm(const float* x, const float* weight, int64_t S, int64_t n, double eps, float* y);

// Dot product of two fp32 vectors (the vector kernel of this CPU).
float dot(const float* a, const float* b, int64_t n);

// Widens row r of W into dst (W.cols floats).
void widen_row(const Mat& W, int64_t r, float* dst);

// Causal depthwise conv + SiLU of S rows on channels [d0, d1) (jamba-spec.md §3.5 step 3, §3.6), with
// the kernels k: x row t at x + t·x_stride holds the raw inputs u0 (Di,); win (W, Di) the raw inputs of
// the last W tokens before the block, oldest first, left as the last W after it; cwT (W, Di) conv_w
// transposed; bias (Di,) or null. The channel runs innermost so every row is read contiguously:
//   u[s, d] = silu(bias[d] + Σ_k cwT[k, d] · in(s − (W−1) + k, d)),  in(t < 0) = win[t + W].
void causal_conv_silu(const simd::Kernels& k, const float* x, int64_t x_stride, int64_t S, float* win, const float* cwT,
                      const float* bias, int64_t Di, int64_t W, int64_t d0, int64_t d1, float* u);

}  // namespace hl::cpu
