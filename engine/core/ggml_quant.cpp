// ggml's weight formats: the format table, F32/F16/BF16 and the 32-element blocks (Q8_0, Q4_0, Q5_0,
// Q5_1); the K-quants are in ggml_quant_k.cpp, the dequantize-only formats (Q4_1, Q2_K, Q3_K, IQ4_NL,
// IQ4_XS) in ggml_quant_more.cpp. Each function follows the float operations of ggml's
// dequantize_row_* / quantize_row_*_ref in their order (GGUF.md §4; tools/reference/gguf/ggml_quants.py
// is the executable reference). Built with -ffp-contract=off (engine/CMakeLists.txt).
#include "engine/core/ggml_quant.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/ggml_quant_impl.h"

namespace hl {

using namespace ggml_detail;

namespace {

// ---------------------------------------------------------------------------------------------
// dequantization, one block: y = float(q) * d in float32 (Q5_1: then + m, a second rounding)
// ---------------------------------------------------------------------------------------------

void dequantize_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dequantize_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 15) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// The 5-bit codes of Q5_0 / Q5_1: low nibbles from qs (j | j + 16), bit 4 of element j = bit j of qh.
void unpack_q5(const uint8_t* qh_bytes, const uint8_t* qs, int q[32]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);  // little-endian u32; the engine runs on little-endian hosts only
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

void dequantize_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  int q[32];
  unpack_q5(b + 2, b + 6, q);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(q[j] - 16) * d;
}

void dequantize_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  int q[32];
  unpack_q5(b + 4, b + 8, q);
  for (int j = 0; j < 32; ++j) {
    const float t = static_cast<float>(q[j]) * d;
    y[j] = t + m;
  }
}

// ---------------------------------------------------------------------------------------------
// reference quantizers, one block of 32
// ---------------------------------------------------------------------------------------------

// `d ? 1.0f/d : 0.0f`
float inverse_or_zero(float d) {
  return d != 0.0f ? 1.0f / d : 0.0f;
}

// The first element of largest |x| (signed), +0.0 when all are zero: `if (amax < fabsf(v))`.
float first_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quantize_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    const float a = std::fabs(x[j]);
    amax = amax > a ? amax : a;  // MAX(amax, fabsf(v))
  }
  const float d = amax / 127.0f;
  const float id = inverse_or_zero(d);
  store_f16(b, d);
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] * id;
    b[2 + j] = static_cast<uint8_t>(trunc_to_int(std::round(v)));  // (int8_t) roundf(v)
  }
}

// Q4_0 / Q5_0 codes: d = max / -half, code = MIN(nmax, (int8_t)(x * id + half + 0.5)).
float q_xi(const float* x, int nmax, int q[32]) {
  const int half = (nmax + 1) / 2;
  const float d = first_absmax(x, 32) / static_cast<float>(-half);
  const float id = inverse_or_zero(d);
  const float offset = static_cast<float>(half) + 0.5f;
  for (int j = 0; j < 32; ++j) {
    const float v = x[j] * id;
    const int8_t t = static_cast<int8_t>(trunc_to_int(v + offset));
    q[j] = std::min(nmax, static_cast<int>(t));
  }
  return d;
}

// Packs 5-bit codes as Q5_0 / Q5_1 store them (qh then qs), as the C code's uint8_t arithmetic does.
void pack_q5(const int q[32], uint8_t* qh_bytes, uint8_t* qs) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t a = static_cast<uint8_t>(q[j]), c = static_cast<uint8_t>(q[j + 16]);
    qs[j] = static_cast<uint8_t>((a & 15) | ((c & 15) << 4));
    qh |= ((a & 0x10u) >> 4) << j;
    qh |= ((c & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

void quantize_q4_0(const float* x, uint8_t* b) {
  int q[32];
  store_f16(b, q_xi(x, 15, q));
  for (int j = 0; j < 16; ++j) {
    const uint8_t a = static_cast<uint8_t>(q[j]), c = static_cast<uint8_t>(q[j + 16]);
    b[2 + j] = static_cast<uint8_t>(a | (c << 4));
  }
}

void quantize_q5_0(const float* x, uint8_t* b) {
  int q[32];
  store_f16(b, q_xi(x, 31, q));
  pack_q5(q, b + 2, b + 6);
}

void quantize_q5_1(const float* x, uint8_t* b) {
  float min = 3.40282347e+38f, max = -3.40282347e+38f;  // FLT_MAX, -FLT_MAX
  for (int j = 0; j < 32; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / 31.0f;
  const float id = inverse_or_zero(d);
  store_f16(b, d);
  store_f16(b + 2, min);
  int q[32];
  for (int j = 0; j < 32; ++j) {
    const float v = (x[j] - min) * id;
    q[j] = static_cast<uint8_t>(trunc_to_int(v + 0.5f));  // (uint8_t)(v + 0.5f)
  }
  pack_q5(q, b + 4, b + 8);
}

// F32, F16, BF16: one element per "block"; rows go through dtype.h's loops (the entries' functions
// are null). The dequantize-only formats have no quantizer (quantizable false).
struct Codec {
  GgmlBlockFormat format;
  void (*dequantize)(const uint8_t*, float*);  // one block
  void (*quantize)(const float*, uint8_t*);
  bool quantizable = true;
};

constexpr uint32_t kF32 = 0, kF16 = 1, kBF16 = 30;

const Codec kCodecs[] = {  // in ggml id order (the order of ggml_dequantizable_names)
    {{kF32, "F32", 1, 4}, nullptr, nullptr},
    {{kF16, "F16", 1, 2}, nullptr, nullptr},
    {{2, "Q4_0", 32, 18}, dequantize_q4_0, quantize_q4_0},
    {{3, "Q4_1", 32, 20}, dequantize_q4_1, nullptr, false},
    {{6, "Q5_0", 32, 22}, dequantize_q5_0, quantize_q5_0},
    {{7, "Q5_1", 32, 24}, dequantize_q5_1, quantize_q5_1},
    {{8, "Q8_0", 32, 34}, dequantize_q8_0, quantize_q8_0},
    {{10, "Q2_K", 256, 84}, dequantize_q2_k, nullptr, false},
    {{11, "Q3_K", 256, 110}, dequantize_q3_k, nullptr, false},
    {{12, "Q4_K", 256, 144}, dequantize_q4_k, quantize_q4_k},
    {{13, "Q5_K", 256, 176}, dequantize_q5_k, quantize_q5_k},
    {{14, "Q6_K", 256, 210}, dequantize_q6_k, quantize_q6_k},
    {{20, "IQ4_NL", 32, 18}, dequantize_iq4_nl, nullptr, false},
    {{23, "IQ4_XS", 256, 136}, dequantize_iq4_xs, nullptr, false},
    {{kBF16, "BF16", 1, 2}, nullptr, nullptr},
};

// The names of the entries, ", "-separated, in table order (quantizable_only: only those).
std::string codec_names(bool quantizable_only) {
  std::string out;
  for (const Codec& c : kCodecs) {
    if (quantizable_only && !c.quantizable) continue;
    if (!out.empty()) out += ", ";
    out += c.format.name;
  }
  return out;
}

const Codec* find_codec(uint32_t type) {
  for (const Codec& c : kCodecs)
    if (c.format.type == type) return &c;
  return nullptr;
}

// The codec, after checking the type and n; `what` names the caller in the message.
// quantize: the type must have a quantizer.
const Codec& checked_codec(const char* what, uint32_t type, int64_t n, bool quantize) {
  const Codec* c = find_codec(type);
  if (!c || (quantize && !c->quantizable))
    throw Error(std::string(what) + ": ggml type " + std::to_string(type) + (c ? std::string(" (") + c->format.name + ")" : "") +
                " is not supported (allowed " + codec_names(quantize) + ")");
  if (ggml_row_bytes(type, n) < 0)
    throw Error(std::string(what) + ": " + std::to_string(n) + " " + c->format.name +
                " elements (allowed a non-negative multiple of " + std::to_string(c->format.block) + ")");
  return *c;
}

}  // namespace

const GgmlBlockFormat* ggml_block_format(uint32_t type) {
  const Codec* c = find_codec(type);
  return c ? &c->format : nullptr;
}

bool ggml_can_dequantize(uint32_t type) {
  return find_codec(type) != nullptr;
}
bool ggml_can_quantize(uint32_t type) {
  const Codec* c = find_codec(type);
  return c != nullptr && c->quantizable;
}

std::string ggml_dequantizable_names() {
  return codec_names(false);
}

int64_t ggml_row_bytes(uint32_t type, int64_t n) {
  const GgmlBlockFormat* f = ggml_block_format(type);
  if (!f || n < 0 || n % f->block != 0) return -1;
  const int64_t blocks = n / f->block;
  if (blocks > INT64_MAX / f->block_bytes) return -1;
  return blocks * f->block_bytes;
}

void ggml_dequantize_row(uint32_t type, const uint8_t* src, float* dst, int64_t n) {
  const Codec& c = checked_codec("ggml_dequantize_row", type, n, false);
  const auto count = static_cast<size_t>(n);
  if (type == kF32) return to_float(DType::F32, src, dst, count);
  if (type == kF16) return to_float(DType::F16, src, dst, count);
  if (type == kBF16) return to_float(DType::BF16, src, dst, count);
  const GgmlBlockFormat& f = c.format;
  for (int64_t i = 0; i < n / f.block; ++i) c.dequantize(src + i * f.block_bytes, dst + i * f.block);
}

void ggml_quantize_row(uint32_t type, const float* src, uint8_t* dst, int64_t n) {
  const Codec& c = checked_codec("ggml_quantize_row", type, n, true);
  const auto count = static_cast<size_t>(n);
  if (type == kF32) return from_float(DType::F32, src, dst, count);
  if (type == kF16 || type == kBF16) {  // stored with memcpy: dst may be unaligned
    for (size_t i = 0; i < count; ++i) {
      const uint16_t h = type == kF16 ? float_to_f16(src[i]) : float_to_bf16(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
    return;
  }
  const GgmlBlockFormat& f = c.format;
  for (int64_t i = 0; i < n / f.block; ++i) c.quantize(src + i * f.block, dst + i * f.block_bytes);
}

}  // namespace hl
