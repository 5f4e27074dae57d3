// Reference CPU kernels (see cpu_ops.h). Each output row widens its weight row once per call and
// reuses it for all S inputs, so a prefill reads every weight once.
#include "engine/backend/cpu/cpu_ops.h"

#include <algorithm>
#include <vector>

#include "engine/core/thread_pool.h"

namespace hl::cpu {

float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

void widen_row(const Mat& W, int64_t r, float* dst) { to_float(W.dtype, W.row_ptr(r), dst, static_cast<size_t>(W.cols)); }

void linear_rows(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, float* Y) {
  const int64_t in = W.cols;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in));
  ThreadPool::global().parallel_for(nrows, grain, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> wrow;
    if (W.dtype != DType::F32) wrow.resize(static_cast<size_t>(in));
    for (int64_t r = r0; r < r1; ++r) {
      const float* w;
      if (W.dtype == DType::F32) {
        w = reinterpret_cast<const float*>(W.row_ptr(row0 + r));
      } else {
        widen_row(W, row0 + r, wrow.data());
        w = wrow.data();
      }
      for (int64_t s = 0; s < S; ++s) Y[s * nrows + r] = dot(w, X + s * in, in);
    }
  });
}

void linear(const Mat& W, const float* X, int64_t S, float* Y, const float* bias) {
  linear_rows(W, 0, W.rows, X, S, Y);
  if (bias)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t r = 0; r < W.rows; ++r) Y[s * W.rows + r] += bias[r];
}

void rmsnorm(const float* x, const float* weight, int64_t S, int64_t n, double eps, float* y) {
  for (int64_t s = 0; s < S; ++s) {
    const float* xs = x + s * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(xs[i]) * xs[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
    float* ys = y + s * n;
    for (int64_t i = 0; i < n; ++i) ys[i] = weight[i] * (xs[i] * inv);
  }
}

}  // namespace hl::cpu
