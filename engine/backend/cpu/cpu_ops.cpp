// CPU kernels (see cpu_ops.h). Decode: the weights stay in their stored layout, PyTorch's (out, in)
// row-major — for a matrix–vector product that is already the streaming layout (each thread reads
// contiguous rows start to end, one pass, no second copy in memory); the one exception is Q4_K and Q8_0
// on AVX-512 VNNI, rearranged once at load into groups of 16 rows in place (Mat::rows16,
// core/rows16.h), which every reader here takes apart where it needs rows. Prefill: panels
// of ~1 MiB of rows are widened to fp32 in a per-thread buffer and multiplied by cblas_sgemm, each
// thread its own panels (OpenBLAS is set to one thread so the two pools do not fight).
#include "engine/backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/rows16.h"
#include "engine/core/thread_pool.h"

#ifdef HL_HAVE_BLAS
#include <cblas.h>
#include <dlfcn.h>
#endif

namespace hl::cpu {

float dot(const float* a, const float* b, int64_t n) {
  return simd::kernels().dot(a, b, n);
}

void widen_row(const Mat& W, int64_t r, float* dst) {
  thread_local std::vector<uint8_t> plain;
  simd::kernels().widen(W.dtype, plain_rows(W, r, 1, plain), dst, W.cols);
}

namespace {

// Output row s of a linear: Y + s·nrows (one (S, nrows) block), or Yrows[s] (separate buffers).
struct OutRows {
  float* Y;
  float* const* Yrows;
  int64_t nrows;
  float* row(int64_t s) const { return Yrows ? Yrows[s] : Y + s * nrows; }
};

void linear_ref(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, OutRows out) {
  const int64_t in = W.cols;
  const simd::Kernels& ref = simd::portable();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in));
  ThreadPool::global().parallel_for(nrows, grain, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> wrow;  // (in,)
    thread_local std::vector<uint8_t> plain;
    if (W.dtype != DType::F32 && wrow.size() < static_cast<size_t>(in)) wrow.resize(static_cast<size_t>(in));
    for (int64_t r = r0; r < r1; ++r) {
      const float* w;
      if (W.dtype == DType::F32) {
        w = reinterpret_cast<const float*>(W.row_ptr(row0 + r));
      } else {
        to_float(W.dtype, plain_rows(W, row0 + r, 1, plain), wrow.data(), static_cast<size_t>(in));
        w = wrow.data();
      }
      for (int64_t s = 0; s < S; ++s) out.row(s)[r] = ref.dot(w, X + s * in, in);
    }
  });
}

}  // namespace

void linear_rows_ref(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, float* Y) {
  linear_ref(W, row0, nrows, X, S, OutRows{Y, nullptr, nrows});
}

int64_t matvec_grain(int64_t cols, DType t) {
  const int64_t row_bytes = std::max<int64_t>(1, dtype_row_bytes(t, cols));
  return std::max<int64_t>(4, (8 << 10) / row_bytes);
}

namespace {
// matvec_grain, in whole pairs of 16-row groups when the rows are held in them.
int64_t grain_of(int64_t cols, DType t, bool rows16) {
  const int64_t g = matvec_grain(cols, t), pair = 2 * kGroupRows;
  return rows16 ? (g + pair - 1) / pair * pair : g;
}
}  // namespace

int64_t matvec_grain(const Mat& W) {
  return grain_of(W.cols, W.dtype, W.rows16);
}

namespace {

// matvec_rows of a matrix in 16-row groups: whole groups through the kernel that reads them; a part
// of a group (a range that does not start or end on one) as the whole group, keeping the rows asked
// for, so that a row's value does not depend on how the rows were split. Without that kernel, or
// with x in fp32, the rows are taken out of their groups for the plain kernels.
void matvec_rows16(const Mat& W, int64_t r0, int64_t rows, const float* x, float* y) {
  const simd::Kernels& k = simd::kernels();
  if (!k.matvec_rows16 || W.fp32_activations) {
    thread_local std::vector<uint8_t> plain;
    const uint8_t* p = plain_rows(W, r0, rows, plain);
    (W.fp32_activations ? k.matvec : k.matvec_x8)(W.dtype, p, rows, W.cols, x, y);
    return;
  }
  constexpr int64_t G = kGroupRows;
  for (int64_t r = r0, end = r0 + rows; r < end;) {
    const int64_t first = r - r % G;  // the group of row r
    if (r == first && end - r >= G) {
      const int64_t groups = (end - r) / G;
      k.matvec_rows16(W.dtype, W.row_ptr(r), groups, W.cols, x, y + (r - r0));
      r += groups * G;
    } else {
      float part[G];
      k.matvec_rows16(W.dtype, W.row_ptr(first), 1, W.cols, x, part);
      const int64_t n = std::min(end, first + G) - r;
      std::copy(part + (r - first), part + (r - first) + n, y + (r - r0));
      r += n;
    }
  }
}

}  // namespace

void matvec_rows(const Mat& W, int64_t r0, int64_t rows, const float* x, float* y) {
  if (W.rows16) return matvec_rows16(W, r0, rows, x, y);
  const simd::Kernels& k = simd::kernels();
  (W.fp32_activations ? k.matvec : k.matvec_x8)(W.dtype, W.row_ptr(r0), rows, W.cols, x, y);
}

void matvec(const MatvecJob* jobs, int njobs) {
  int64_t total = 0, cols = 1;  // rows of all jobs, laid end to end
  bool rows16 = false;
  for (int j = 0; j < njobs; ++j) {
    total += jobs[j].rows;
    cols = std::max(cols, jobs[j].W->cols);
    rows16 = rows16 || jobs[j].W->rows16;
  }
  ThreadPool::global().parallel_for(total, grain_of(cols, jobs[0].W->dtype, rows16), [&](int64_t b, int64_t e) {
    int64_t off = 0;  // first row of job j in the combined range
    for (int j = 0; j < njobs && off < e; off += jobs[j].rows, ++j) {
      const MatvecJob& jb = jobs[j];
      const int64_t lo = std::max(b, off), hi = std::min(e, off + jb.rows);
      if (lo < hi) matvec_rows(*jb.W, jb.row0 + lo - off, hi - lo, jb.x, jb.y + (lo - off));
    }
  });
}

void matvec_then(const Mat& W, const float* x, float* y, const float* bias, void (*then)(void*, int64_t, int64_t),
                 void* ctx) {
  ThreadPool::global().parallel_for(W.rows, matvec_grain(W), [&](int64_t r0, int64_t r1) {
    matvec_rows(W, r0, r1 - r0, x, y + r0);
    if (bias)
      for (int64_t r = r0; r < r1; ++r) y[r] += bias[r];
    then(ctx, r0, r1);
  });
}

#ifdef HL_HAVE_BLAS
namespace {

void blas_single_threaded() {
  static const bool once = [] {
    using SetThreads = void (*)(int);
    if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(1);
    return true;
  }();
  (void)once;
}

// Y[:, r] for r in [0, nrows) = X (S, in) · W[row0 + r, :]ᵀ through fp32 panels and sgemm.
void linear_blas(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, OutRows out) {
  blas_single_threaded();
  const int64_t in = W.cols;
  const int threads = ThreadPool::global().size();
  int64_t pr = std::max<int64_t>(16, (int64_t{1} << 22) / (4 * in));          // ~4 MiB of fp32 per panel
  pr = std::min(pr, std::max<int64_t>(16, (nrows + threads - 1) / threads));  // ≥ one panel per thread
  const int64_t panels = (nrows + pr - 1) / pr;
  const simd::Kernels& k = simd::kernels();
  ThreadPool::global().parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    thread_local std::vector<float> buf, tmp;  // (pr, in) the widened panel; (S, pr) staged output
    thread_local std::vector<uint8_t> plain;   // a panel's rows out of their 16-row groups (Mat::rows16)
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r0 = p * pr, n = std::min(pr, nrows - r0);
      const float* panel;
      if (W.dtype == DType::F32) {
        panel = reinterpret_cast<const float*>(W.row_ptr(row0 + r0));
      } else {
        if (buf.size() < static_cast<size_t>(n * in)) buf.resize(static_cast<size_t>(pr * in));
        k.widen(W.dtype, plain_rows(W, row0 + r0, n, plain), buf.data(), n * in);
        panel = buf.data();
      }
      float* C = out.Y + r0;
      int64_t ldc = nrows;
      if (out.Yrows) {
        if (tmp.size() < static_cast<size_t>(S * n)) tmp.resize(static_cast<size_t>(S * pr));
        C = tmp.data();
        ldc = n;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(S), static_cast<int>(n),
                  static_cast<int>(in), 1.0f, X, static_cast<int>(in), panel, static_cast<int>(in), 0.0f, C,
                  static_cast<int>(ldc));
      if (out.Yrows)
        for (int64_t s = 0; s < S; ++s) std::copy(C + s * n, C + (s + 1) * n, out.Yrows[s] + r0);
    }
  });
}

}  // namespace
#endif

namespace {

void linear_any(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, OutRows out) {
  if (S == 1) {
    const MatvecJob job{&W, row0, nrows, X, out.row(0)};
    matvec(&job, 1);
    return;
  }
#ifdef HL_HAVE_BLAS
  linear_blas(W, row0, nrows, X, S, out);
#else
  linear_ref(W, row0, nrows, X, S, out);
#endif
}

}  // namespace

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
#ifdef HL_HAVE_BLAS
  blas_single_threaded();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
#else
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      float& c = C[i * ldc + j];
      c = alpha * acc + (beta == 0.0f ? 0.0f : beta * c);
    }
#endif
}

void linear_rows(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, float* Y) {
  linear_any(W, row0, nrows, X, S, OutRows{Y, nullptr, nrows});
}

void linear_to_rows(const Mat& W, const float* X, int64_t S, float* const* Y) {
  linear_any(W, 0, W.rows, X, S, OutRows{nullptr, Y, W.rows});
}

void linear(const Mat& W, const float* X, int64_t S, float* Y, const float* bias) {
  linear_rows(W, 0, W.rows, X, S, Y);
  if (bias)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t r = 0; r < W.rows; ++r) Y[s * W.rows + r] += bias[r];
}

void rmsnorm(const float* x, const float* weight, int64_t S, int64_t n, double eps, float* y) {
  // Rows are independent: a prefill's rows spread over the pool (a decode row stays on this thread).
  const int64_t grain = std::max<int64_t>(1, 8192 / std::max<int64_t>(1, n));
  ThreadPool::global().parallel_for(S, grain, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      const float* xs = x + s * n;
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xs[i]) * xs[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
      float* ys = y + s * n;
      for (int64_t i = 0; i < n; ++i) ys[i] = weight[i] * (xs[i] * inv);
    }
  });
}

void causal_conv_silu(const simd::Kernels& k, const float* x, int64_t x_stride, int64_t S, float* win, const float* cwT,
                      const float* bias, int64_t Di, int64_t W, int64_t d0, int64_t d1, float* u) {
  auto in = [&](int64_t t) { return t >= 0 ? x + t * x_stride : win + (t + W) * Di; };  // row t, (Di,)
  for (int64_t s = 0; s < S; ++s) {
    float* us = u + s * Di;  // (Di,)
    for (int64_t d = d0; d < d1; ++d) us[d] = bias ? bias[d] : 0.0f;
    for (int64_t j = 0; j < W; ++j) {
      const float* src = in(s - (W - 1) + j);
      const float* wj = cwT + j * Di;
      for (int64_t d = d0; d < d1; ++d) us[d] += wj[d] * src[d];
    }
    k.silu(us + d0, d1 - d0);
  }
  // The window after the block: raw inputs S−W .. S−1. Row j comes from x or from old row S + j > j,
  // which ascending j has not overwritten yet.
  for (int64_t j = 0; j < W; ++j) {
    const float* src = in(S - W + j);
    for (int64_t d = d0; d < d1; ++d) win[j * Di + d] = src[d];
  }
}

}  // namespace hl::cpu
