/* The selective scan of the trainer's Mamba mixer in C (scan.py, selective_scan_native), forward and
 * backward, for float and double. Same recurrence as scan.py's reference:
 *
 *   h_t = exp(dt_t * A) * h_{t-1} + dt_t * u_t * B_t      (per channel d, state n; h_{-1} = 0)
 *   y_t = sum_n h_t[n] * C_t[n]
 *
 * u, dt, gy, du, ddt, y: (batch, S, D); Bm, Cm, dB, dC: (batch, S, N); A, dA: (D, N); all
 * contiguous. The backward recomputes each channel's states (S x N, in a scratch buffer that stays
 * in cache) instead of keeping the (batch, S, D, N) states of the forward, then walks back in time:
 *
 *   g_t  = gy_t * C_t + exp(dt_{t+1} A) * g_{t+1}          (dL/dh_t)
 *   dC_t += gy_t * h_t;  dB_t += g_t * dt_t u_t;  d(dt u)_t = sum_n g_t B_t
 *   q_t  = g_t * h_{t-1} * exp(dt_t A)                     (dL/d(dt_t A))
 *   dA  += q_t * dt_t;  ddt_t = d(dt u)_t * u_t + sum_n q_t A;  du_t = d(dt u)_t * dt_t
 *
 * dA, dB and dC are accumulated: the caller zeroes them. Returns 0, or -1 when the scratch buffer
 * cannot be allocated. Built by scan.py with the system C compiler (no Python headers needed). */
#include <math.h>
#include <stdlib.h>

#define DEFINE_SCAN(T, SUFFIX, EXP)                                                                      \
  void scan_fwd_##SUFFIX(long nb, long S, long D, long N, const T* u, const T* dt, const T* A,          \
                         const T* Bm, const T* Cm, T* y) {                                              \
    T h[64];                                                                                            \
    for (long b = 0; b < nb; ++b) {                                                                     \
      for (long d = 0; d < D; ++d) {                                                                    \
        const T* Ad = A + d * N;                                                                        \
        for (long n = 0; n < N; ++n) h[n] = 0;                                                          \
        for (long t = 0; t < S; ++t) {                                                                  \
          const long i = (b * S + t) * D + d;                                                           \
          const T dtv = dt[i], x = dtv * u[i];                                                          \
          const T* Bt = Bm + (b * S + t) * N;                                                           \
          const T* Ct = Cm + (b * S + t) * N;                                                           \
          T acc = 0;                                                                                    \
          for (long n = 0; n < N; ++n) {                                                                \
            h[n] = EXP(dtv * Ad[n]) * h[n] + x * Bt[n];                                                 \
            acc += h[n] * Ct[n];                                                                        \
          }                                                                                             \
          y[i] = acc;                                                                                   \
        }                                                                                               \
      }                                                                                                 \
    }                                                                                                   \
  }                                                                                                     \
                                                                                                        \
  int scan_bwd_##SUFFIX(long nb, long S, long D, long N, const T* u, const T* dt, const T* A,           \
                        const T* Bm, const T* Cm, const T* gy, T* du, T* ddt, T* dA, T* dB, T* dC) {    \
    T* hs = (T*)malloc(sizeof(T) * (size_t)(2 * S * N));                                                \
    if (!hs) return -1;                                                                                 \
    T* as = hs + S * N;                                                                                 \
    T g[64], dAd[64];                                                                                   \
    for (long b = 0; b < nb; ++b) {                                                                     \
      for (long d = 0; d < D; ++d) {                                                                    \
        const T* Ad = A + d * N;                                                                        \
        for (long t = 0; t < S; ++t) {                                                                  \
          const long i = (b * S + t) * D + d;                                                           \
          const T dtv = dt[i], x = dtv * u[i];                                                          \
          const T* Bt = Bm + (b * S + t) * N;                                                           \
          T* ht = hs + t * N;                                                                           \
          T* at = as + t * N;                                                                           \
          for (long n = 0; n < N; ++n) {                                                                \
            at[n] = EXP(dtv * Ad[n]);                                                                   \
            ht[n] = (t ? at[n] * ht[n - N] : 0) + x * Bt[n];                                            \
          }                                                                                             \
        }                                                                                               \
        for (long n = 0; n < N; ++n) g[n] = dAd[n] = 0;                                                 \
        for (long t = S - 1; t >= 0; --t) {                                                             \
          const long i = (b * S + t) * D + d;                                                           \
          const T dtv = dt[i], uv = u[i], x = dtv * uv, gyv = gy[i];                                    \
          const T* Bt = Bm + (b * S + t) * N;                                                           \
          const T* Ct = Cm + (b * S + t) * N;                                                           \
          T* dBt = dB + (b * S + t) * N;                                                                \
          T* dCt = dC + (b * S + t) * N;                                                                \
          const T* ht = hs + t * N;                                                                     \
          const T* at = as + t * N;                                                                     \
          T dx = 0, decay = 0;                                                                          \
          for (long n = 0; n < N; ++n) {                                                                \
            g[n] += gyv * Ct[n];                                                                        \
            dCt[n] += gyv * ht[n];                                                                      \
            dBt[n] += g[n] * x;                                                                         \
            dx += g[n] * Bt[n];                                                                         \
            const T q = t ? g[n] * ht[n - N] * at[n] : 0;                                               \
            decay += q * Ad[n];                                                                         \
            dAd[n] += q * dtv;                                                                          \
            g[n] *= at[n];                                                                              \
          }                                                                                             \
          du[i] = dx * dtv;                                                                             \
          ddt[i] = dx * uv + decay;                                                                     \
        }                                                                                               \
        for (long n = 0; n < N; ++n) dA[d * N + n] += dAd[n];                                           \
      }                                                                                                 \
    }                                                                                                   \
    free(hs);                                                                                           \
    return 0;                                                                                           \
  }

DEFINE_SCAN(float, f32, expf)
DEFINE_SCAN(double, f64, exp)
