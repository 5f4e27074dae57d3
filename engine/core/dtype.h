// Element types of checkpoint tensors (F32, F16, BF16) and of weights held in ggml's block formats
// (Q8_0, Q4_K, ...: GGUF files and quantise-on-load, core/ggml_quant.h), and exact conversions to float.
// Reference: IEEE 754 binary16 and bfloat16 (the upper 16 bits of binary32, round-to-nearest-even);
// ggml's block layouts (tools/reference/gguf/GGUF.md §4).
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace hl {

// The block types hold a row of n values as n / dtype_block(t) blocks of dtype_block_bytes(t) bytes;
// they exist only in memory (a safetensors file never names them: dtype_from_name refuses them).
enum class DType : uint8_t {
  F32, F16, BF16, I32, I64,
  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS
};

std::optional<DType> dtype_from_name(std::string_view name);  // "F32", "F16", "BF16", "I32", "I64"
const char* dtype_name(DType t);                             // also "Q8_0", "Q4_K", ...
// Bytes of one element of a scalar type; 0 for a block type (use dtype_row_bytes).
inline int dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    default: return 0;
  }
}
inline bool dtype_is_block(DType t) { return t >= DType::Q4_0; }
int64_t dtype_block(DType t);        // elements per block; 1 for a scalar type
int64_t dtype_block_bytes(DType t);  // bytes per block; dtype_size for a scalar type
// Bytes of n consecutive elements (n a multiple of dtype_block(t): a row, or whole rows).
inline int64_t dtype_row_bytes(DType t, int64_t n) {
  return dtype_is_block(t) ? n / dtype_block(t) * dtype_block_bytes(t) : n * dtype_size(t);
}
// Weight types as ggml numbers them (F32 0, F16 1, Q4_0 2, ..., BF16 30); I32/I64 have none here.
uint32_t dtype_ggml_type(DType t);
std::optional<DType> dtype_from_ggml(uint32_t type);  // the fifteen types core/ggml_quant.h reads
// A weight format by its lower-case option name ("q8_0", "q4_k", "bf16"; --weights) or upper-case one.
std::optional<DType> dtype_from_weight_name(std::string_view name);

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
// A block type dequantises bit-exactly as ggml does (n a multiple of the block).
void to_float(DType t, const void* src, float* dst, size_t n);
// Narrow n floats to type t at dst (F32, F16 or BF16; a block type quantises as ggml's reference
// quantiser does, n a multiple of the block, for the ten types ggml_can_quantize accepts).
void from_float(DType t, const float* src, void* dst, size_t n);

}  // namespace hl
