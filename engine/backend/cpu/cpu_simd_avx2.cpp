// AVX2 + FMA + F16C instantiation of the vector kernels (cpu_simd_impl.h): 8 fp32 lanes; BF16
// widened by a zero-extend and a 16-bit shift, F16 by vcvtph2ps, block codes by byte extends. Compiled for this target by
// `#pragma GCC target`, called only after __builtin_cpu_supports said yes (cpu_simd.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_simd.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

namespace hl::cpu::simd {
namespace {

struct V256 {
  using f = __m256;
  static constexpr int kLanes = 8;
  static f zero() { return _mm256_setzero_ps(); }
  static f set1(float v) { return _mm256_set1_ps(v); }
  static f load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, f v) { _mm256_storeu_ps(p, v); }
  static f add(f a, f b) { return _mm256_add_ps(a, b); }
  static f sub(f a, f b) { return _mm256_sub_ps(a, b); }
  static f mul(f a, f b) { return _mm256_mul_ps(a, b); }
  static f div(f a, f b) { return _mm256_div_ps(a, b); }
  static f fmadd(f a, f b, f c) { return _mm256_fmadd_ps(a, b, c); }
  static f abs(f v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
  static f max0(f v) { return _mm256_max_ps(v, zero()); }  // NaN → 0 (the caller adds a NaN term)
  static f gt(f a, f b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static f blend(f mask, f a, f b) { return _mm256_blendv_ps(a, b, mask); }
  static float hsum(f v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // (4,)
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  }

  template <DType T>
  static f loadw(const uint8_t* p) {
    if constexpr (T == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    } else {  // BF16: the upper half of an fp32
      const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
  }

  // Integer lanes for the block formats: kLanes bytes at p widened to 32-bit lanes (u8: zero-, i8:
  // sign-extended), shifts, masks and the conversion to fp32 (exact: |values| < 2^24).
  using i = __m256i;
  static i u8(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static i i8(const uint8_t* p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static i srl(i v, int s) { return _mm256_srli_epi32(v, s); }
  static i sll(i v, int s) { return _mm256_slli_epi32(v, s); }
  static i andi(i v, int m) { return _mm256_and_si256(v, _mm256_set1_epi32(m)); }
  static i ori(i a, i b) { return _mm256_or_si256(a, b); }
  static i subi(i v, int k) { return _mm256_sub_epi32(v, _mm256_set1_epi32(k)); }
  static float f16(const uint8_t* p) {  // one fp16 scale by F16C
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }
  static f cvt(i v) { return _mm256_cvtepi32_ps(v); }

  // The primitives of the shared exp (Kern::exp in cpu_simd_impl.h).
  static f fnmadd(f a, f b, f c) { return _mm256_fnmadd_ps(a, b, c); }
  static f min(f a, f b) { return _mm256_min_ps(a, b); }
  static f max(f a, f b) { return _mm256_max_ps(a, b); }
  static f round(f v) { return _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static f isnan(f v) { return _mm256_cmp_ps(v, v, _CMP_UNORD_Q); }
  // p · 2^n for integral n in [-151, 128], as two exact power-of-two factors.
  static f scale2(f p, f n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const f s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const f s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return mul(mul(p, s1), s2);
  }
};

#include "engine/backend/cpu/cpu_simd_impl.h"
#include "engine/backend/cpu/cpu_simd_quant_impl.h"

using K = Kern<V256>;
using Q = QKern<I8Avx2>;
const Kernels kAvx2 = vector_kernels<K, Q>(Isa::Avx2, "avx2");

}  // namespace

namespace detail {
const Kernels* avx2_kernels() {
  return &kAvx2;
}
}  // namespace detail

}  // namespace hl::cpu::simd
#pragma GCC pop_options

#else
namespace hl::cpu::simd::detail {
const Kernels* avx2_kernels() {
  return nullptr;
}
}  // namespace hl::cpu::simd::detail
#endif
