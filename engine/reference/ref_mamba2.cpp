// Plain loops of ref_mamba2.h, in the order of HF's Bamba/Mamba-2 slow path: Δ = softplus(dt + bias),
// clamped; the recurrence per head; the SSD chunked form; the gated RMSNorm; the hidden attention.
#include "engine/reference/ref_mamba2.h"

#include <algorithm>
#include <cmath>

#include "engine/reference/ref_ops.h"

namespace hl::ref {

void mamba2_delta(const Mamba2Dims& d, const float* dt, const float* dt_bias, float* delta) {
  for (int64_t h = 0; h < d.nh; ++h) {
    const double v = softplus(dt[h] + dt_bias[h]);
    delta[h] = static_cast<float>(std::clamp(v, d.dt_min, d.dt_max));
  }
}

void mamba2_step(const Mamba2Dims& d, const Mamba2Token& in, const float* dt_bias, const float* A, const float* D,
                 float* S, float* y, float* retained) {
  const int64_t P = d.P, N = d.N;
  std::vector<float> delta(static_cast<size_t>(d.nh));  // (nh,)
  mamba2_delta(d, in.dt, dt_bias, delta.data());
  for (int64_t h = 0; h < d.nh; ++h) {
    const int64_t g = d.group_of(h);
    const float* B = in.B + g * N;  // (N,)
    const float* C = in.C + g * N;  // (N,)
    const double dA = std::exp(static_cast<double>(delta[h]) * A[h]);  // one decay per head
    if (retained) retained[h] = static_cast<float>(dA);
    for (int64_t p = 0; p < P; ++p) {
      const int64_t c = h * P + p;  // the channel
      float* s = S + c * N;         // (N,) row p of S_h
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) {
        s[n] = static_cast<float>(dA * s[n] + static_cast<double>(delta[h]) * in.x[c] * B[n]);
        acc += static_cast<double>(s[n]) * C[n];
      }
      y[c] = static_cast<float>(acc + static_cast<double>(D[h]) * in.x[c]);
    }
  }
}

void mamba2_scan_chunked(const Mamba2Dims& d, const std::vector<Mamba2Token>& in, int64_t Q, const float* dt_bias,
                         const float* A, const float* D, float* S, float* y) {
  const int64_t T = static_cast<int64_t>(in.size()), P = d.P, N = d.N, Di = d.inner();
  std::vector<float> delta(static_cast<size_t>(T * d.nh));  // (T, nh)
  for (int64_t t = 0; t < T; ++t) mamba2_delta(d, in[t].dt, dt_bias, &delta[t * d.nh]);
  std::vector<double> cum(static_cast<size_t>(Q));  // within a chunk: Σ_{r≤i} Δ_r A_h
  std::vector<double> next(static_cast<size_t>(P * N));
  for (int64_t t0 = 0; t0 < T; t0 += Q) {
    const int64_t len = std::min(Q, T - t0);
    for (int64_t h = 0; h < d.nh; ++h) {
      const int64_t g = d.group_of(h);
      double run = 0;
      for (int64_t i = 0; i < len; ++i) cum[i] = run += static_cast<double>(delta[(t0 + i) * d.nh + h]) * A[h];
      for (int64_t i = 0; i < len; ++i) {
        const Mamba2Token& ti = in[t0 + i];
        for (int64_t p = 0; p < P; ++p) {
          const int64_t c = h * P + p;
          // The state carried into the chunk, decayed to token i: e^{cum_i} (S_h C_i).
          double off = 0;
          for (int64_t n = 0; n < N; ++n) off += static_cast<double>(S[c * N + n]) * ti.C[g * N + n];
          off *= std::exp(cum[i]);
          // Within the chunk: Σ_{j≤i} (C_i·B_j) e^{cum_i − cum_j} Δ_j x_j.
          double diag = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const Mamba2Token& tj = in[t0 + j];
            double cb = 0;
            for (int64_t n = 0; n < N; ++n) cb += static_cast<double>(ti.C[g * N + n]) * tj.B[g * N + n];
            diag += cb * std::exp(cum[i] - cum[j]) * delta[(t0 + j) * d.nh + h] * tj.x[c];
          }
          y[(t0 + i) * Di + c] = static_cast<float>(off + diag + static_cast<double>(D[h]) * ti.x[c]);
        }
      }
      // The state at the chunk's end: e^{cum_last} S + Σ_j e^{cum_last − cum_j} Δ_j x_j B_jᵀ.
      const double last = cum[len - 1];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) {
          const int64_t c = h * P + p;
          double s = std::exp(last) * S[c * N + n];
          for (int64_t j = 0; j < len; ++j)
            s += std::exp(last - cum[j]) * delta[(t0 + j) * d.nh + h] * in[t0 + j].x[c] * in[t0 + j].B[g * N + n];
          next[p * N + n] = s;
        }
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) S[(h * P + p) * N + n] = static_cast<float>(next[p * N + n]);
    }
  }
}

void gated_rmsnorm(float* y, const float* z, const float* w, int64_t Di, int64_t group, double eps) {
  for (int64_t c = 0; c < Di; ++c) y[c] = static_cast<float>(static_cast<double>(y[c]) * silu(z[c]));
  for (int64_t g0 = 0; g0 < Di; g0 += group) {
    double ss = 0;
    for (int64_t c = g0; c < g0 + group; ++c) ss += static_cast<double>(y[c]) * y[c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(group) + eps);
    for (int64_t c = g0; c < g0 + group; ++c) y[c] = static_cast<float>(static_cast<double>(w[c]) * (y[c] * inv));
  }
}

void mamba2_hidden_attention_row(const Mamba2Dims& d, const float* delta, const float* B, const float* C,
                                 const float* A, int64_t h, int64_t t, double* row) {
  const int64_t N = d.N, GN = d.G * d.N, g = d.group_of(h);
  double decay = 0;  // A_h Σ_{r=s+1..t} Δ_r, grown as s walks back from t
  for (int64_t s = t; s >= 0; --s) {
    double cb = 0;
    for (int64_t n = 0; n < N; ++n) cb += static_cast<double>(C[t * GN + g * N + n]) * B[s * GN + g * N + n];
    row[s] = cb * std::exp(decay) * delta[s * d.nh + h];
    decay += static_cast<double>(A[h]) * delta[s * d.nh + h];
  }
}

}  // namespace hl::ref
