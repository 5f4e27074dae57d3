// Private to ggml_quant.cpp, ggml_quant_k.cpp and ggml_quant_more.cpp: the scalar pieces they share
// and the per-block functions of the K-quants and of the dequantize-only formats. Include only from
// those files (all built with -ffp-contract=off).
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/core/dtype.h"

namespace hl::ggml_detail {

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_float(h);
}

inline void store_f16(uint8_t* p, float v) {
  uint16_t h = float_to_f16(v);
  std::memcpy(p, &h, 2);
}

// ggml's nearest_int: adds 1.5 * 2^23 and reads the low mantissa bits, i.e. round half to even for
// |v| < 2^22 (larger magnitudes wrap, as in ggml; NaN gives 0). No undefined conversion.
inline int nearest_int(float v) {
  float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// A C cast of a float to an integer type as x86-64 performs it (cvttss2si: truncation toward zero;
// NaN and values outside int32 give INT32_MIN), then narrowed by the caller. In C that cast is
// undefined outside the target range; ggml only reaches it there for non-finite or degenerate
// subnormal blocks, and x86 ggml then stores the low byte of INT32_MIN, 0.
inline int32_t trunc_to_int(float v) {
  if (v > -2147483904.0f && v < 2147483648.0f) return static_cast<int32_t>(v);
  return INT32_MIN;
}

// K-quants: one super-block of 256 values (ggml_quant_k.cpp).
void dequantize_q4_k(const uint8_t* b, float* y);
void dequantize_q5_k(const uint8_t* b, float* y);
void dequantize_q6_k(const uint8_t* b, float* y);
void quantize_q4_k(const float* x, uint8_t* b);
void quantize_q5_k(const float* x, uint8_t* b);
void quantize_q6_k(const float* x, uint8_t* b);

// Dequantize-only formats (ggml_quant_more.cpp): one block each (Q4_1 and IQ4_NL: 32 values; Q2_K,
// Q3_K, IQ4_XS: 256).
void dequantize_q4_1(const uint8_t* b, float* y);
void dequantize_q2_k(const uint8_t* b, float* y);
void dequantize_q3_k(const uint8_t* b, float* y);
void dequantize_iq4_nl(const uint8_t* b, float* y);
void dequantize_iq4_xs(const uint8_t* b, float* y);

}  // namespace hl::ggml_detail
