// Shared helpers of the compute shaders (included, not compiled alone): exact widening of stored
// weights (F32, F16, BF16 as 16-bit halves of 32-bit words, little-endian: element 2k is the low
// half), SiLU, and softplus with torch's threshold 20 (jamba-spec.md §3.5) and an accurate log1p.
// Binding convention of every kernel (engine/backend/vulkan/vk_kernels.h): 0 weights, 1 small
// float vectors, 2 activations, 3/4 state (K|V cache, Mamba state), 5 records, 6 routing, 7 params.

#define DT_F32 0u
#define DT_F16 1u
#define DT_BF16 2u

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
// stored as DTYPE.
#define WEIGHT_LOADER(NAME, BUF)                                   \
  float NAME(uint i) {                                             \
    if (DTYPE == DT_F32) return uintBitsToFloat(BUF[i]);           \
    uint w = BUF[i >> 1];                                          \
    uint b = ((i & 1u) != 0u) ? (w >> 16) : (w & 0xffffu);         \
    return (DTYPE == DT_BF16) ? uintBitsToFloat(b << 16) : f16_bits_to_float(b); \
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
