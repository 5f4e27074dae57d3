// Element types of checkpoint tensors (F32, F16, BF16) and exact conversions to/from float.
// Reference: IEEE 754 binary16 and bfloat16 (the upper 16 bits of binary32, round-to-nearest-even).
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace hl {

enum class DType : uint8_t { F32, F16, BF16, I32, I64 };

std::optional<DType> dtype_from_name(std::string_view name);  // "F32", "F16", "BF16", "I32", "I64"
const char* dtype_name(DType t);
inline int dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float f);

// Widen n elements of type t at src to float; src may have any alignment (tensors of untrusted files).
void to_float(DType t, const void* src, float* dst, size_t n);
// Narrow n floats to type t at dst (F32, F16 or BF16).
void from_float(DType t, const float* src, void* dst, size_t n);

}  // namespace hl
