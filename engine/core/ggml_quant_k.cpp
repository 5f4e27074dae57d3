// ggml's K-quants (256-value super-blocks): Q4_K, Q5_K, Q6_K dequantization and the reference
// quantizers with their scale searches (ggml's make_qkx2_quants for Q4_K/Q5_K, make_qx_quants for
// Q6_K). Every float operation is float32, in the C code's order, never fused (built with
// -ffp-contract=off); sums are sequential. GGUF.md §4.1–4.2 and tools/reference/gguf/ggml_quants.py.
#include <cmath>
#include <cstring>

#include "engine/core/ggml_quant_impl.h"

namespace hl::ggml_detail {

namespace {

// Block layouts (ggml's block_q4_K / block_q5_K / block_q6_K).
// Q4_K: d, dmin (fp16) at 0, 2, scales[12] at 4, qs[128]; Q5_K: the same, then qh[32], qs[128].
constexpr int kQ4kQs = 16;
constexpr int kQ5kQh = 16, kQ5kQs = 48;
constexpr int kQ6kQl = 0, kQ6kQh = 128, kQ6kScales = 192, kQ6kD = 208;

// Six-bit scale and min of group g (0..7) from the 12 scale bytes (ggml's get_scale_min_k4).
void scale_min_k4(int g, const uint8_t* s, int* sc, int* m) {
  if (g < 4) {
    *sc = s[g] & 63;
    *m = s[g + 4] & 63;
  } else {
    *sc = (s[g + 4] & 15) | ((s[g - 4] >> 6) << 4);
    *m = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
  }
}

// Q4_K / Q5_K: y = (d * sc) * q - (dmin * m) per group of 32, q[256] the codes.
void dequantize_qk(const uint8_t* b, const int* q, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  for (int g = 0; g < 8; ++g) {
    int sc, m;
    scale_min_k4(g, b + 4, &sc, &m);
    const float d1 = d * static_cast<float>(sc);
    const float m1 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const float t = d1 * static_cast<float>(q[32 * g + l]);
      y[32 * g + l] = t - m1;
    }
  }
}

// make_qkx2_quants for n = 32 values with weights w (use_mad = false): codes L in 0..nmax and
// x ~ scale * L - the_min. Returns scale; *the_min >= 0 (or -0.0).
float make_qkx2_quants(const float* x, const float* w, int nmax, float rmin, float rdelta, int nstep, uint8_t* L,
                       float* the_min) {
  constexpr int n = 32;
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float wx = w[i] * x[i];
    sum_w += w[i];
    sum_x += wx;
  }
  if (min > 0) min = 0;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(l < 0 ? 0 : l > nmax ? nmax : l);
    const float t = scale * static_cast<float>(L[i]);
    const float diff = (t + min) - x[i];
    const float sq = diff * diff;
    best_error += w[i] * sq;
  }
  uint8_t Laux[n];
  for (int is = 0; is <= nstep; ++is) {
    const float step = rdelta * static_cast<float>(is);
    iscale = ((rmin + step) + fnmax) / (max - min);  // with the current, possibly updated, min
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - min));
      l = l < 0 ? 0 : l > nmax ? nmax : l;
      Laux[i] = static_cast<uint8_t>(l);
      const float wl = w[i] * static_cast<float>(l);
      sum_l += wl;
      sum_l2 += wl * static_cast<float>(l);
      sum_xl += wl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0;
    for (int i = 0; i < n; ++i) {
      const float t = this_scale * static_cast<float>(Laux[i]);
      const float diff = (t + this_min) - x[i];
      const float sq = diff * diff;
      cur_error += w[i] * sq;
    }
    if (cur_error < best_error) {
      std::memcpy(L, Laux, n);
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// The part of quantize_row_q4_K_ref / quantize_row_q5_K_ref both share: writes d, dmin and the 12
// scale bytes at b and the codes L[256] (0..nmax).
void quantize_qk(const float* x, int nmax, float rmin, int nstep, uint8_t* b, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xg = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) {
      const float sq = xg[l] * xg[l];
      sum_x2 += sq;
    }
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xg[l]);
    scales[j] = make_qkx2_quants(xg, weights, nmax, rmin, 0.1f, nstep, L + 32 * j, &mins[j]);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t* s = b + 4;
  for (int j = 0; j < 8; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    if (j < 4) {
      s[j] = ls;
      s[j + 4] = lm;
    } else {
      s[j + 4] = static_cast<uint8_t>((ls & 15) | ((lm & 15) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      s[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  store_f16(b, max_scale / 63.0f);
  store_f16(b + 2, max_min / 63.0f);
  const float d_all = load_f16(b), dmin_all = load_f16(b + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    scale_min_k4(j, s, &sc, &m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0) continue;  // `if (!d) continue;`: the group keeps the search's codes
    const float dm = dmin_all * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) {
      const int l = nearest_int((x[32 * j + i] + dm) / d);
      L[32 * j + i] = static_cast<uint8_t>(l < 0 ? 0 : l > nmax ? nmax : l);
    }
  }
}

// make_qx_quants for 16 values, nmax = 32, rmse_type = 1 (weights x^2), no importance weights:
// codes L in 0..63 (offset 32). Returns the scale.
float make_qx_quants_q6(const float* x, int8_t* L) {
  constexpr int n = 16, nmax = 32;
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < 1e-15f) {  // GROUP_MAX_EPS: all zero
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  // Codes of one trial iscale and their weighted sums (sum of w*x*l, sum of w*l*l).
  int8_t Laux[n];
  auto fit = [&](float iscale, float* sumlx, float* suml2) {
    float a = 0, c = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * x[i]);
      l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
      Laux[i] = static_cast<int8_t>(l + nmax);
      const float w = x[i] * x[i];
      const float wx = w * x[i];
      const float wl = w * static_cast<float>(l);
      a += wx * static_cast<float>(l);
      c += wl * static_cast<float>(l);
    }
    *sumlx = a;
    *suml2 = c;
  };
  float sumlx, suml2;
  fit(static_cast<float>(-nmax) / max, &sumlx, &suml2);
  std::memcpy(L, Laux, n);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float step = 0.1f * static_cast<float>(is);
    fit(-(static_cast<float>(nmax) + step) / max, &sumlx, &suml2);
    const float lhs = sumlx * sumlx;
    const float rhs = best * suml2;
    if (suml2 > 0 && lhs > rhs) {
      std::memcpy(L, Laux, n);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

}  // namespace

void dequantize_q4_k(const uint8_t* b, float* y) {
  int q[256];
  const uint8_t* qs = b + kQ4kQs;
  for (int c = 0; c < 4; ++c) {  // chunk c: group 2c low nibbles, group 2c + 1 high nibbles
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = qs[32 * c + l] & 15;
      q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
    }
  }
  dequantize_qk(b, q, y);
}

void dequantize_q5_k(const uint8_t* b, float* y) {
  int q[256];
  const uint8_t* qh = b + kQ5kQh;
  const uint8_t* qs = b + kQ5kQs;
  for (int c = 0; c < 4; ++c) {  // fifth bit of group g = bit g of qh[l]
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = (qs[32 * c + l] & 15) + (((qh[l] >> (2 * c)) & 1) << 4);
      q[64 * c + 32 + l] = (qs[32 * c + l] >> 4) + (((qh[l] >> (2 * c + 1)) & 1) << 4);
    }
  }
  dequantize_qk(b, q, y);
}

void dequantize_q6_k(const uint8_t* b, float* y) {
  const float d = load_f16(b + kQ6kD);
  for (int e = 0; e < 256; ++e) {  // e = 128 n + 32 k + l
    const int n = e / 128, k = (e / 32) % 4, l = e % 32;
    const uint8_t lo_byte = b[kQ6kQl + 64 * n + 32 * (k & 1) + l];
    const int lo = k < 2 ? lo_byte & 15 : lo_byte >> 4;
    const int hi = (b[kQ6kQh + 32 * n + l] >> (2 * k)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    const float ds = d * static_cast<float>(static_cast<int8_t>(b[kQ6kScales + e / 16]));
    y[e] = ds * static_cast<float>(q);
  }
}

void quantize_q4_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quantize_qk(x, 15, -1.0f, 20, b, L);
  uint8_t* qs = b + kQ4kQs;
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
}

void quantize_q5_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quantize_qk(x, 31, -0.5f, 15, b, L);
  uint8_t* qh = b + kQ5kQh;
  uint8_t* qs = b + kQ5kQs;
  std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
      if (l1 > 15) {
        l1 -= 16;
        qh[l] |= static_cast<uint8_t>(1u << (2 * c));
      }
      if (l2 > 15) {
        l2 -= 16;
        qh[l] |= static_cast<uint8_t>(2u << (2 * c));
      }
      qs[32 * c + l] = static_cast<uint8_t>(l1 | (l2 << 4));
    }
  }
}

void quantize_q6_k(const float* x, uint8_t* b) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = make_qx_quants_q6(x + 16 * g, L + 16 * g);
    const float abs_scale = std::fabs(scales[g]);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scales[g];
    }
  }
  if (max_abs_scale < 1e-15f) {  // all zero bytes (d = fp16(0) = 0)
    std::memset(b, 0, 210);
    return;
  }
  const float iscale = -128.0f / max_scale;
  store_f16(b + kQ6kD, 1.0f / iscale);
  int8_t* sc = reinterpret_cast<int8_t*>(b + kQ6kScales);
  for (int g = 0; g < 16; ++g) {
    const int v = nearest_int(iscale * scales[g]);
    sc[g] = static_cast<int8_t>(v < 127 ? v : 127);
  }
  const float d_all = load_f16(b + kQ6kD);
  for (int g = 0; g < 16; ++g) {
    const float d = d_all * static_cast<float>(sc[g]);
    if (d == 0) continue;
    for (int i = 0; i < 16; ++i) {
      int l = nearest_int(x[16 * g + i] / d);
      l = l < -32 ? -32 : l > 31 ? 31 : l;
      L[16 * g + i] = static_cast<int8_t>(l + 32);
    }
  }
  uint8_t* ql = b + kQ6kQl;
  uint8_t* qh = b + kQ6kQh;
  for (int n = 0; n < 2; ++n) {
    const int8_t* Ln = L + 128 * n;
    for (int l = 0; l < 32; ++l) {
      ql[64 * n + l] = static_cast<uint8_t>((Ln[l] & 15) | ((Ln[l + 64] & 15) << 4));
      ql[64 * n + 32 + l] = static_cast<uint8_t>((Ln[l + 32] & 15) | ((Ln[l + 96] & 15) << 4));
      qh[32 * n + l] = static_cast<uint8_t>((Ln[l] >> 4) | ((Ln[l + 32] >> 4) << 2) | ((Ln[l + 64] >> 4) << 4) |
                                            ((Ln[l + 96] >> 4) << 6));
    }
  }
}

}  // namespace hl::ggml_detail
