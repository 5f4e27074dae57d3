// Element-type names and binary16 conversions (bit-exact, round-to-nearest-even, subnormals kept).
#include "engine/core/dtype.h"

#include <cctype>
#include <string>

#include "engine/core/ggml_quant.h"

namespace hl {

std::optional<DType> dtype_from_name(std::string_view n) {
  if (n == "F32") return DType::F32;
  if (n == "F16") return DType::F16;
  if (n == "BF16") return DType::BF16;
  if (n == "I32") return DType::I32;
  if (n == "I64") return DType::I64;
  return std::nullopt;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    default: {
      const GgmlBlockFormat* f = ggml_block_format(dtype_ggml_type(t));
      return f ? f->name : "?";
    }
  }
}

namespace {
// ggml ids in DType order from Q4_0 on.
constexpr uint32_t kGgmlIds[] = {2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23};
constexpr DType kFirstBlock = DType::Q4_0;
}  // namespace

uint32_t dtype_ggml_type(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::BF16: return 30;
    case DType::I32:
    case DType::I64: return ~0u;
    default: return kGgmlIds[static_cast<int>(t) - static_cast<int>(kFirstBlock)];
  }
}

std::optional<DType> dtype_from_ggml(uint32_t type) {
  if (type == 0) return DType::F32;
  if (type == 1) return DType::F16;
  if (type == 30) return DType::BF16;
  for (size_t i = 0; i < sizeof kGgmlIds / sizeof kGgmlIds[0]; ++i)
    if (kGgmlIds[i] == type) return static_cast<DType>(static_cast<int>(kFirstBlock) + static_cast<int>(i));
  return std::nullopt;
}

std::optional<DType> dtype_from_weight_name(std::string_view name) {
  std::string up(name);
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (int i = 0; i <= static_cast<int>(DType::IQ4_XS); ++i) {
    const DType t = static_cast<DType>(i);
    if (t != DType::I32 && t != DType::I64 && up == dtype_name(t)) return t;
  }
  return std::nullopt;
}

int64_t dtype_block(DType t) {
  if (!dtype_is_block(t)) return 1;
  return ggml_block_format(dtype_ggml_type(t))->block;
}

int64_t dtype_block_bytes(DType t) {
  if (!dtype_is_block(t)) return dtype_size(t);
  return ggml_block_format(dtype_ggml_type(t))->block_bytes;
}

float f16_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      man &= 0x3ffu;
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | man << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absu > 0x7f800000u ? 0x200u : 0));
  if (absu >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (absu < 0x38800000u) {                                               // subnormal or zero in f16
    if (absu < 0x33000000u) return static_cast<uint16_t>(sign);           // < 2^-25: rounds to 0
    uint32_t exp = absu >> 23;
    uint32_t man = (absu & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14 - (exp - 127) + 13 - 1 … result = man >> (shift)
    uint32_t res = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (res & 1u))) ++res;
    return static_cast<uint16_t>(sign | res);
  }
  uint32_t res = ((absu >> 13) - ((127 - 15) << 10));
  uint32_t rem = absu & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (res & 1u))) ++res;
  return static_cast<uint16_t>(sign | res);
}

// Elements are loaded with memcpy: a tensor of an untrusted file may start at any byte offset (the
// safetensors header length is arbitrary), and a misaligned uint16_t* load is undefined behaviour.
// Compilers turn the memcpy into the plain load, so aligned data costs nothing extra.
template <class T>
static inline T load_unaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void to_float(DType t, const void* src, float* dst, size_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(load_unaligned<uint16_t>(s + 2 * i));
      return;
    case DType::F16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_float(load_unaligned<uint16_t>(s + 2 * i));
      return;
    case DType::I32:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(load_unaligned<int32_t>(s + 4 * i));
      return;
    case DType::I64:
      for (size_t i = 0; i < n; ++i) dst[i] = static_cast<float>(load_unaligned<int64_t>(s + 8 * i));
      return;
    default:
      ggml_dequantize_row(dtype_ggml_type(t), s, dst, static_cast<int64_t>(n));
      return;
  }
}

void from_float(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
      return;
    }
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
      return;
    }
    case DType::I32: {
      int32_t* d = static_cast<int32_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(src[i]);
      return;
    }
    case DType::I64: {
      int64_t* d = static_cast<int64_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = static_cast<int64_t>(src[i]);
      return;
    }
    default:
      ggml_quantize_row(dtype_ggml_type(t), src, static_cast<uint8_t*>(dst), static_cast<int64_t>(n));
      return;
  }
}

}  // namespace hl
