// ggml's dequantize-only formats: Q4_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS (no quantizer here). Each function
// evaluates the float operations of ggml's dequantize_row_* in float32, in the C code's order, never
// fused (built with -ffp-contract=off). Layouts and operation order: tools/reference/gguf/GGUF.md §4.3;
// tools/reference/gguf/ggml_quants.py is the executable reference. Every product of these formats is
// exact in float32 (at most 24 significant bits), so only Q4_1's + m and Q2_K's - ml round.
#include <cstring>

#include "engine/core/ggml_quant_impl.h"

namespace hl::ggml_detail {

namespace {

// The 16 levels of the non-linear 4-bit codes (IQ4_NL, IQ4_XS): ggml's kvalues_iq4nl.
constexpr int kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Q2_K byte offsets: 16 scale bytes (low nibble scale, high nibble min), 64 code bytes, d, dmin.
constexpr int kQ2kQs = 16, kQ2kD = 80, kQ2kDmin = 82;
// Q3_K byte offsets: 32 high-bit bytes, 64 code bytes, 12 bytes of 6-bit scales, d.
constexpr int kQ3kQs = 32, kQ3kScales = 96, kQ3kD = 108;
// IQ4_XS byte offsets: d, the high scale bits (u16), 4 bytes of low scale nibbles, 128 code bytes.
constexpr int kIq4xsHigh = 2, kIq4xsLow = 4, kIq4xsQs = 8;

// Six-bit scale k (0..15) of Q3_K: the low nibble from byte k (k < 8) or the high nibble of byte
// k - 8, bits 4-5 from byte 8 + k % 4 at bit 2 * (k / 4).
int q3k_scale(const uint8_t* s, int k) {
  const int lo = k < 8 ? (s[k] & 15) : (s[k - 8] >> 4);
  const int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
  return lo | (hi << 4);
}

}  // namespace

void dequantize_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const float t0 = static_cast<float>(qs[j] & 15) * d;
    const float t1 = static_cast<float>(qs[j] >> 4) * d;
    y[j] = t0 + m;
    y[j + 16] = t1 + m;
  }
}

// 256 values in two halves of 128; half h reads code bytes 32h..32h+31, four 2-bit planes each, and
// every 16 values have their own scale byte (index 8h + 2 * plane + (second 16 ? 1 : 0)).
void dequantize_q2_k(const uint8_t* b, float* y) {
  const float d = load_f16(b + kQ2kD);
  const float dmin = load_f16(b + kQ2kDmin);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* q = b + kQ2kQs + 32 * h;
    for (int plane = 0; plane < 4; ++plane) {
      for (int part = 0; part < 2; ++part) {
        const uint8_t sc = b[8 * h + 2 * plane + part];
        const float dl = d * static_cast<float>(sc & 15);
        const float ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          const int code = (q[16 * part + l] >> (2 * plane)) & 3;
          const float t = dl * static_cast<float>(code);
          *y++ = t - ml;
        }
      }
    }
  }
}

// As Q2_K's order; the code is the 2-bit plane minus 4 where bit (4h + plane) of the high-bit byte
// of that position (l or 16 + l) is clear; the scale is q3k_scale - 32.
void dequantize_q3_k(const uint8_t* b, float* y) {
  const float d = load_f16(b + kQ3kD);
  const uint8_t* hm = b;
  for (int h = 0; h < 2; ++h) {
    const uint8_t* q = b + kQ3kQs + 32 * h;
    for (int plane = 0; plane < 4; ++plane) {
      const int bit = 4 * h + plane;
      for (int part = 0; part < 2; ++part) {
        const int sc = q3k_scale(b + kQ3kScales, 8 * h + 2 * plane + part) - 32;
        const float dl = d * static_cast<float>(sc);
        for (int l = 0; l < 16; ++l) {
          const int p = 16 * part + l;
          const int code = ((q[p] >> (2 * plane)) & 3) - (((hm[p] >> bit) & 1) ? 0 : 4);
          *y++ = dl * static_cast<float>(code);
        }
      }
    }
  }
}

void dequantize_iq4_nl(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Levels[qs[j] & 15]);
    y[j + 16] = d * static_cast<float>(kIq4Levels[qs[j] >> 4]);
  }
}

// Eight groups of 32; group g's 6-bit scale: nibble g % 2 of low byte g / 2, bits 4-5 from bits
// 2g..2g+1 of the u16; dl = d * (scale - 32); codes as IQ4_NL (low nibbles j, high nibbles 16 + j).
void dequantize_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  uint16_t high;
  std::memcpy(&high, b + kIq4xsHigh, 2);  // little-endian host
  for (int g = 0; g < 8; ++g) {
    const int lo = (b[kIq4xsLow + g / 2] >> (4 * (g % 2))) & 15;
    const int hi = (high >> (2 * g)) & 3;
    const float dl = d * static_cast<float>((lo | (hi << 4)) - 32);
    const uint8_t* qs = b + kIq4xsQs + 16 * g;
    for (int j = 0; j < 16; ++j) {
      y[32 * g + j] = dl * static_cast<float>(kIq4Levels[qs[j] & 15]);
      y[32 * g + j + 16] = dl * static_cast<float>(kIq4Levels[qs[j] >> 4]);
    }
  }
}

}  // namespace hl::ggml_detail
