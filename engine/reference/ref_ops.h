// The reference forward's basic operations as plain loops (in the manner of llm.c's train_gpt2.c):
// embedding row, linear layer, RMSNorm (jamba-spec.md §3.2), SiLU, softplus (threshold 20, §3.5).
// Not fast and not used by any backend: the oracle the tests compare the backends with. Sums run in
// fp64 and round once to fp32, so the reference's own rounding is far below the backends'.
#pragma once
#include <cstdint>

#include "engine/model/weights.h"

namespace hl::ref {

// out (H,) = E[id, :], widened from E's stored dtype; E (V, H).
void embedding(const Mat& E, int32_t id, float* out);

// y (W.rows,) = W (rows, cols) · x (cols,) (+ bias (rows,) when non-null): nn.Linear, y = x Wᵀ + b.
void linear(const Mat& W, const float* x, float* y, const float* bias = nullptr);
// Same with the bias as the weights hold it (an empty vector: none).
inline void linear(const Mat& W, const float* x, float* y, const std::vector<float>& bias) {
  linear(W, x, y, bias.empty() ? nullptr : bias.data());
}

// y (n,) = w ⊙ x / sqrt(mean(x²) + eps) (jamba-spec.md §3.2: eps inside the root). In place allowed.
void rmsnorm(const float* x, const float* w, int64_t n, double eps, float* y);

// silu(v) = v · σ(v) = v / (1 + e^−v).
float silu(float v);

// softplus(v) = ln(1 + e^v) for v ≤ 20, else v (torch's threshold, jamba-spec.md §3.5 step 5).
float softplus(float v);

}  // namespace hl::ref
