// Shared helpers of the compute shaders (included, not compiled alone): exact widening of stored
// weights (F32, F16, BF16 as 16-bit halves of 32-bit words, little-endian: element 2k is the low
// half; ggml's block formats Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K dequantised per element as
// ggml's dequantize_row_* computes them), SiLU, and softplus with torch's threshold 20
// (jamba-spec.md §3.5) and an accurate log1p.
// Binding convention of every kernel (engine/backend/vulkan/vk_kernels.h): 0 weights, 1 small
// float vectors, 2 activations, 3/4 state (K|V cache, Mamba state), 5 records, 6 routing, 7 params.

#define DT_F32 0u
#define DT_F16 1u
#define DT_BF16 2u
// ggml's block formats (GGUF, --weights): element i of a matrix lies in block i / QK, whose bytes
// start at (i / QK) · block bytes from the weight offset (engine/backend/vulkan/vk_weights.cpp places
// every block matrix so; its element offset is its byte offset / block bytes · QK).
#define DT_Q8_0 3u
#define DT_Q4_0 4u
#define DT_Q5_0 5u
#define DT_Q5_1 6u
#define DT_Q4_K 7u
#define DT_Q5_K 8u
#define DT_Q6_K 9u

// IEEE binary16 bits → float, exact for normals, subnormals, infinities and NaN.
float f16_bits_to_float(uint h) {
  uint s = (h & 0x8000u) << 16;
  uint e = (h >> 10) & 0x1fu;
  uint m = h & 0x3ffu;
  if (e == 0u) {
    float v = float(m) * 5.9604644775390625e-8;  // m · 2^-24
    return (s != 0u) ? -v : v;
  }
  if (e == 31u) return uintBitsToFloat(s | 0x7f800000u | (m << 13));
  return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}

// The stored dtype of the weights a kernel reads: a specialization constant, so each (kernel,
// dtype) pipeline is compiled without a per-element branch (vk_context.cpp builds them on use).
layout(constant_id = 0) const uint DTYPE = DT_F32;

// Defines `float NAME(uint element)` reading element `element` of buffer array BUF (uint words)
// stored as DTYPE. Block formats: each product of ggml's dequantisation is `precise` (no fused
// multiply-add), as the CPU computes it (engine/core/ggml_quant*.cpp, built with -ffp-contract=off).
#define WEIGHT_LOADER(NAME, BUF)                                                                   \
  uint NAME##_u8(uint o) { return (BUF[o >> 2] >> ((o & 3u) * 8u)) & 0xffu; }                     \
  uint NAME##_u16(uint o) { return NAME##_u8(o) | (NAME##_u8(o + 1u) << 8); }                      \
  float NAME##_f16(uint o) { return f16_bits_to_float(NAME##_u16(o)); }                            \
  int NAME##_i8(uint o) { return (int(NAME##_u8(o)) << 24) >> 24; }                                \
  /* Six-bit scale (k = 0) or min (k = 1) of group g of a Q4_K/Q5_K block (ggml's get_scale_min_k4). */ \
  float NAME##_k4(uint s, uint g, uint k) {                                                        \
    if (g < 4u) return float(NAME##_u8(s + g + 4u * k) & 63u);                                     \
    if (k == 0u) return float((NAME##_u8(s + g + 4u) & 15u) | ((NAME##_u8(s + g - 4u) >> 6) << 4)); \
    return float((NAME##_u8(s + g + 4u) >> 4) | ((NAME##_u8(s + g) >> 6) << 4));                  \
  }                                                                                                \
  float NAME(uint i) {                                                                             \
    if (DTYPE == DT_F32) return uintBitsToFloat(BUF[i]);                                           \
    if (DTYPE == DT_F16 || DTYPE == DT_BF16) {                                                     \
      uint w = BUF[i >> 1];                                                                        \
      uint b = ((i & 1u) != 0u) ? (w >> 16) : (w & 0xffffu);                                       \
      return (DTYPE == DT_BF16) ? uintBitsToFloat(b << 16) : f16_bits_to_float(b);                 \
    }                                                                                              \
    if (DTYPE == DT_Q8_0) {                                                                        \
      uint o = (i >> 5) * 34u;                                                                     \
      precise float y = float(NAME##_i8(o + 2u + (i & 31u))) * NAME##_f16(o);                      \
      return y;                                                                                    \
    }                                                                                              \
    if (DTYPE == DT_Q4_0 || DTYPE == DT_Q5_0 || DTYPE == DT_Q5_1) {                                \
      uint j = i & 31u;                                                                            \
      uint o = (i >> 5) * (DTYPE == DT_Q4_0 ? 18u : DTYPE == DT_Q5_0 ? 22u : 24u);                 \
      uint qs = o + (DTYPE == DT_Q4_0 ? 2u : DTYPE == DT_Q5_0 ? 6u : 8u);                          \
      uint q = (j < 16u) ? (NAME##_u8(qs + j) & 15u) : (NAME##_u8(qs + j - 16u) >> 4);             \
      if (DTYPE == DT_Q4_0) {                                                                      \
        precise float y = float(int(q) - 8) * NAME##_f16(o);                                       \
        return y;                                                                                  \
      }                                                                                            \
      uint qh = DTYPE == DT_Q5_0 ? o + 2u : o + 4u; /* bit j of the little-endian u32 qh */        \
      q |= ((NAME##_u8(qh + (j >> 3)) >> (j & 7u)) & 1u) << 4;                                     \
      if (DTYPE == DT_Q5_0) {                                                                      \
        precise float y = float(int(q) - 16) * NAME##_f16(o);                                      \
        return y;                                                                                  \
      }                                                                                            \
      precise float y = float(q) * NAME##_f16(o) + NAME##_f16(o + 2u);                             \
      return y;                                                                                    \
    }                                                                                              \
    uint e = i & 255u;                                                                             \
    if (DTYPE == DT_Q6_K) {                                                                        \
      uint o = (i >> 8) * 210u;                                                                    \
      uint n = e >> 7, k = (e >> 5) & 3u, l = e & 31u;                                            \
      uint lo = NAME##_u8(o + 64u * n + 32u * (k & 1u) + l);                                       \
      lo = k < 2u ? (lo & 15u) : (lo >> 4);                                                        \
      uint hi = (NAME##_u8(o + 128u + 32u * n + l) >> (2u * k)) & 3u;                              \
      precise float ds = NAME##_f16(o + 208u) * float(NAME##_i8(o + 192u + (e >> 4)));             \
      precise float y = ds * float(int(lo | (hi << 4)) - 32);                                      \
      return y;                                                                                    \
    }                                                                                              \
    /* Q4_K (144 bytes: d, dmin, scales[12], qs[128]) or Q5_K (176: the same, qh[32] before qs) */ \
    uint o = (i >> 8) * (DTYPE == DT_Q4_K ? 144u : 176u);                                          \
    uint g = e >> 5, l = e & 31u; /* group g: chunk g / 2, low nibbles for even g */               \
    uint qb = NAME##_u8(o + (DTYPE == DT_Q4_K ? 16u : 48u) + 32u * (g >> 1) + l);                  \
    uint q = (g & 1u) != 0u ? (qb >> 4) : (qb & 15u);                                              \
    if (DTYPE == DT_Q5_K) q += ((NAME##_u8(o + 16u + l) >> g) & 1u) << 4;                          \
    precise float d1 = NAME##_f16(o) * NAME##_k4(o + 4u, g, 0u);                                   \
    precise float m1 = NAME##_f16(o + 2u) * NAME##_k4(o + 4u, g, 1u);                              \
    precise float t = d1 * float(q);                                                               \
    precise float y = t - m1;                                                                      \
    return y;                                                                                      \
  }

float silu(float v) { return v / (1.0 + exp(-v)); }

// log(1 + e) for e >= 0 without the cancellation of log(1 + e) near 1: for e < 0.5 the series
// 2·atanh(y), y = e / (2 + e) (y < 0.2, truncated after y^13: relative error < 1e-10).
float log1p_pos(float e) {
  if (e < 0.5) {
    float y = e / (2.0 + e);
    float y2 = y * y;
    return 2.0 * y *
           (1.0 + y2 * (1.0 / 3.0 + y2 * (1.0 / 5.0 + y2 * (1.0 / 7.0 + y2 * (1.0 / 9.0 + y2 * (1.0 / 11.0 + y2 * (1.0 / 13.0)))))));
  }
  return log(1.0 + e);
}

float softplus(float v) { return v <= 20.0 ? log1p_pos(exp(v)) : v; }

// 2-D dispatches for more than 65535 workgroups: the flat workgroup index.
uint flat_group(uint groups_x) { return gl_WorkGroupID.y * groups_x + gl_WorkGroupID.x; }
