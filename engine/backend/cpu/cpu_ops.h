// Plain-loop CPU kernels of the reference backend: linear layers on stored-dtype weights with fp32
// accumulation, RMSNorm (jamba-spec.md §3.2), SiLU, softplus with threshold 20 (§3.5).
// Not the model: cpu_backend.cpp composes these. Weights are widened in registers, never copied.
#pragma once
#include <cmath>
#include <cstdint>

#include "engine/model/weights.h"

namespace hl::cpu {

// Y (S, W.rows) = X (S, W.cols) · Wᵀ (+ bias (W.rows,) when non-null). Threaded over output rows.
// The per-element order of accumulation is the same for every S, so prefill equals decode bit for bit.
void linear(const Mat& W, const float* X, int64_t S, float* Y, const float* bias = nullptr);
// Same, using only rows [row0, row0 + nrows) of W (a view into a fused tensor).
void linear_rows(const Mat& W, int64_t row0, int64_t nrows, const float* X, int64_t S, float* Y);

// y = weight * (x / sqrt(mean(x²) + eps)) over the last dim n, for S rows (in place allowed).
void rmsnorm(const float* x, const float* weight, int64_t S, int64_t n, double eps, float* y);

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }
inline float softplus(float v) { return v <= 20.0f ? std::log1p(std::exp(v)) : v; }

// Dot product of two fp32 vectors with several accumulators (vectorisable).
float dot(const float* a, const float* b, int64_t n);

// Widens row r of W into dst (W.cols floats).
void widen_row(const Mat& W, int64_t r, float* dst);

}  // namespace hl::cpu
