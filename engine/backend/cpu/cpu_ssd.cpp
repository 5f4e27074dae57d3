// The chunked Mamba-2 scan of cpu_ssd.h. A block goes in spans of chunks (~kSpanTokens tokens): first
// C Bᵀ (Q, Q) of every chunk and group of the span, spread over the pool; then the heads over the pool,
// each walking the span's chunks in order with its own state. Per chunk and head the cumulative
// log-decays are summed in fp64 and only their differences (≤ 0) exponentiated.
#include "engine/backend/cpu/cpu_ssd.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "engine/backend/cpu/cpu_module.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/thread_pool.h"

namespace hl::cpu {
namespace {

std::atomic<Mamba2Scan> g_mode{Mamba2Scan::Auto};

// Tokens of one span: its rows of x|B|C (a few hundred KiB to a few MiB) stay in cache while every
// head walks them; walking all of a long block per head instead streams it from memory nh times.
constexpr int64_t kSpanTokens = 256;

bool all_finite(const float* X, int64_t L, int64_t P, int64_t ld) {
  bool ok = true;
  for (int64_t i = 0; i < L; ++i)
    for (int64_t p = 0; p < P; ++p) ok &= std::isfinite(X[i * ld + p]);
  return ok;
}

}  // namespace

void scan_in_order(int64_t L, int64_t P, int64_t N, int64_t ld, int64_t ldy, const float* X, const float* B,
                   const float* C, const float* dl, int64_t dl_ld, float a, float Dh, float* Sh, float* Y,
                   float* retained) {
  for (int64_t i = 0; i < L; ++i) {
    const float dt = dl[i * dl_ld];
    const float dA = std::exp(dt * a);
    if (retained) retained[i * dl_ld] = dA;
    for (int64_t p = 0; p < P; ++p) {
      float* sp = Sh + p * N;
      const float dx = dt * X[i * ld + p];
      float acc = 0.0f;
      for (int64_t n = 0; n < N; ++n) {
        sp[n] = dA * sp[n] + dx * B[i * ld + n];
        acc += sp[n] * C[i * ld + n];
      }
      Y[i * ldy + p] = acc + Dh * X[i * ld + p];
    }
  }
}

void set_mamba2_scan(Mamba2Scan mode) {
  g_mode.store(mode, std::memory_order_relaxed);
}

Mamba2Scan mamba2_scan() {
  return g_mode.load(std::memory_order_relaxed);
}

int64_t ssd_chunk(int64_t chunk_size) {
  return std::clamp(chunk_size, kSsdMinChunk, kSsdMaxChunk);
}

void ssd_scan(const SsdDims& d, int64_t Q, int64_t S, const float* xbc, const float* delta, const float* A,
              const float* D, float* state, float* out, float* retained, SsdScratch& sc) {
  const int64_t nh = d.nh, P = d.P, N = d.N, G = d.G, ld = d.ld, Di = nh * P, GN = G * N, per = nh / G;
  const int64_t chunks = (S + Q - 1) / Q;
  const int64_t span = std::clamp<int64_t>(kSpanTokens / Q, 1, chunks);
  float* cb = grow(sc.cb, span * G * Q * Q);
  ThreadPool& pool = ThreadPool::global();
  const size_t threads = static_cast<size_t>(pool.size());
  if (sc.thread.size() < threads) {
    sc.thread.resize(threads);
    sc.cum.resize(threads);
  }
  for (size_t t = 0; t < threads; ++t) {
    grow(sc.thread[t], Q * Q + 2 * Q * N + 2 * Q);
    grow(sc.cum[t], Q);
  }
  const simd::Kernels& kern = simd::kernels();

  for (int64_t c0 = 0; c0 < chunks; c0 += span) {
    const int64_t nc = std::min(span, chunks - c0);
    // C Bᵀ (L, L) of chunk c0 + c and group g at cb + (c·G + g)·Q·Q, row stride Q.
    pool.parallel_for(nc * G, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        const int64_t c = k / G, g = k % G, t0 = (c0 + c) * Q, L = std::min(Q, S - t0);
        const float* row = xbc + t0 * ld;
        gemm(false, true, L, L, N, 1.0f, row + Di + GN + g * N, ld, row + Di + g * N, ld, 0.0f, cb + k * Q * Q, Q);
      }
    });
    pool.parallel_for(nh, 1, [&](int64_t h0, int64_t h1) {
      const size_t ti = static_cast<size_t>(ThreadPool::thread_index());
      float* M = sc.thread[ti].data();  // (Q, Q) the chunk's mixing matrix of this head
      float* Cd = M + Q * Q;            // (Q, N) e^{cum_i} C_i
      float* Bw = Cd + Q * N;           // (Q, N) e^{cum_last − cum_j} Δ_j B_j
      float* e = Bw + Q * N;            // (Q,) exponents, then their exponentials
      float* dl = e + Q;                // (Q,) Δ of this head over the chunk
      double* cum = sc.cum[ti].data();  // (Q,)
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t g = h / per;
        const float a = A[h];
        float* Sh = state + h * P * N;  // (P, N)
        for (int64_t c = 0; c < nc; ++c) {
          const int64_t t0 = (c0 + c) * Q, L = std::min(Q, S - t0);
          const float* row = xbc + t0 * ld;        // chunk row 0
          const float* X = row + h * P;            // (L, P) at stride ld
          const float* B = row + Di + g * N;       // (L, N) at stride ld
          const float* C = row + Di + GN + g * N;  // (L, N) at stride ld
          const float* CB = cb + (c * G + g) * Q * Q;
          double run = 0;
          for (int64_t i = 0; i < L; ++i) {
            dl[i] = delta[(t0 + i) * nh + h];
            cum[i] = run += static_cast<double>(dl[i]) * a;
            if (retained) retained[(t0 + i) * nh + h] = std::exp(dl[i] * a);  // as the token-order scan
          }
          float* Y = out + t0 * Di + h * P;  // (L, P) at stride Di
          if (!all_finite(X, L, P, ld)) {
            scan_in_order(L, P, N, ld, Di, X, B, C, dl, 1, a, D[h], Sh, Y, nullptr);
            continue;
          }
          // M[i, j] = (C_i·B_j) e^{cum_i − cum_j} Δ_j for j ≤ i, 0 above the diagonal.
          for (int64_t i = 0; i < L; ++i) {
            float* Mi = M + i * Q;
            const float* cbi = CB + i * Q;
            for (int64_t j = 0; j <= i; ++j) e[j] = static_cast<float>(cum[i] - cum[j]);
            kern.exp(e, i + 1);
            for (int64_t j = 0; j <= i; ++j) Mi[j] = cbi[j] * e[j] * dl[j];
            std::fill(Mi + i + 1, Mi + L, 0.0f);
          }
          // The carried state: Y = (e^{cum} ⊙ C) S_hᵀ; then Y += M X and the skip D x.
          for (int64_t i = 0; i < L; ++i) e[i] = static_cast<float>(cum[i]);
          kern.exp(e, L);
          for (int64_t i = 0; i < L; ++i)
            for (int64_t n = 0; n < N; ++n) Cd[i * N + n] = e[i] * C[i * ld + n];
          gemm(false, true, L, P, N, 1.0f, Cd, N, Sh, N, 0.0f, Y, Di);
          gemm(false, false, L, P, L, 1.0f, M, Q, X, ld, 1.0f, Y, Di);
          for (int64_t i = 0; i < L; ++i)
            for (int64_t p = 0; p < P; ++p) Y[i * Di + p] += D[h] * X[i * ld + p];
          // The state at the chunk's end: e^{cum_last} S_h + Xᵀ (w ⊙ B), w_j = e^{cum_last − cum_j} Δ_j.
          const double last = cum[L - 1];
          for (int64_t j = 0; j < L; ++j) e[j] = static_cast<float>(last - cum[j]);
          kern.exp(e, L);
          for (int64_t j = 0; j < L; ++j) {
            const float w = e[j] * dl[j];
            for (int64_t n = 0; n < N; ++n) Bw[j * N + n] = w * B[j * ld + n];
          }
          gemm(true, false, P, N, L, 1.0f, X, ld, Bw, N, static_cast<float>(std::exp(last)), Sh, N);
        }
      }
    });
  }
}

}  // namespace hl::cpu
