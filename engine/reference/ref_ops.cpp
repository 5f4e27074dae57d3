// Plain loops of ref_ops.h: one output element at a time, each sum in fp64 and rounded once to fp32.
// Not fast (a linear widens one weight row per output); the reference forward only.
#include "engine/reference/ref_ops.h"

#include <cmath>
#include <vector>

#include "engine/core/dtype.h"

namespace hl::ref {

void embedding(const Mat& E, int32_t id, float* out) {
  std::vector<uint8_t> tmp;
  to_float(E.dtype, plain_rows(E, id, 1, tmp), out, static_cast<size_t>(E.cols));  // (H,)
}

void linear(const Mat& W, const float* x, float* y, const float* bias) {
  std::vector<float> row(static_cast<size_t>(W.cols));  // (cols,) one weight row widened
  std::vector<uint8_t> tmp;
  for (int64_t r = 0; r < W.rows; ++r) {
    to_float(W.dtype, plain_rows(W, r, 1, tmp), row.data(), row.size());
    double acc = bias ? bias[r] : 0.0;
    for (int64_t c = 0; c < W.cols; ++c) acc += static_cast<double>(row[c]) * x[c];
    y[r] = static_cast<float>(acc);
  }
}

void rmsnorm(const float* x, const float* w, int64_t n, double eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(w[i] * (x[i] * inv));
}

float silu(float v) {
  return static_cast<float>(v / (1.0 + std::exp(-static_cast<double>(v))));
}

float softplus(float v) {
  return v <= 20.0f ? static_cast<float>(std::log1p(std::exp(static_cast<double>(v)))) : v;
}

}  // namespace hl::ref
