// AVX-512 (F, BW, VL, DQ) instantiation of the vector kernels (cpu_simd_impl.h): 16 fp32 lanes;
// BF16 widened by a zero-extend and a 16-bit shift, F16 by vcvtph2ps. Compiled for this target by
// `#pragma GCC target`, called only after __builtin_cpu_supports said yes (cpu_simd.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_simd.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 on _mm512_undefined_*() in intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace hl::cpu::simd {
namespace {

struct V512 {
  using f = __m512;
  static constexpr int kLanes = 16;
  static f zero() { return _mm512_setzero_ps(); }
  static f set1(float v) { return _mm512_set1_ps(v); }
  static f load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, f v) { _mm512_storeu_ps(p, v); }
  static f add(f a, f b) { return _mm512_add_ps(a, b); }
  static f sub(f a, f b) { return _mm512_sub_ps(a, b); }
  static f mul(f a, f b) { return _mm512_mul_ps(a, b); }
  static f div(f a, f b) { return _mm512_div_ps(a, b); }
  static f fmadd(f a, f b, f c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(f v) { return _mm512_reduce_add_ps(v); }
  static f abs(f v) { return _mm512_abs_ps(v); }
  static f max0(f v) { return _mm512_max_ps(v, zero()); }  // NaN → 0 (the caller adds a NaN term)
  // Masks as all-ones lanes, so blend(mask, a, b) = mask ? b : a reads alike for both ISAs.
  static f gt(f a, f b) { return _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(a, b, _CMP_GT_OQ))); }
  static f blend(f mask, f a, f b) {
    return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(mask)), a, b);
  }

  template <DType T>
  static f loadw(const uint8_t* p) {
    if constexpr (T == DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(p));
    } else if constexpr (T == DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    } else {  // BF16: the upper half of an fp32
      const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
  }

  // Integer lanes for the block formats (as in cpu_simd_avx2.cpp, 16 bytes at a time).
  using i = __m512i;
  static i u8(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static i i8(const uint8_t* p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static i srl(i v, int s) { return _mm512_srli_epi32(v, static_cast<unsigned>(s)); }
  static i sll(i v, int s) { return _mm512_slli_epi32(v, static_cast<unsigned>(s)); }
  static i andi(i v, int m) { return _mm512_and_si512(v, _mm512_set1_epi32(m)); }
  static i ori(i a, i b) { return _mm512_or_si512(a, b); }
  static i subi(i v, int k) { return _mm512_sub_epi32(v, _mm512_set1_epi32(k)); }
  static float f16(const uint8_t* p) {  // one fp16 scale by F16C
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }
  static f cvt(i v) { return _mm512_cvtepi32_ps(v); }

  // The primitives of the shared exp (Kern::exp in cpu_simd_impl.h).
  static f fnmadd(f a, f b, f c) { return _mm512_fnmadd_ps(a, b, c); }
  static f min(f a, f b) { return _mm512_min_ps(a, b); }
  static f max(f a, f b) { return _mm512_max_ps(a, b); }
  static f round(f v) { return _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static f isnan(f v) { return _mm512_castsi512_ps(_mm512_movm_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q))); }
  // p · 2^n for integral n in [-151, 128], as two exact power-of-two factors.
  static f scale2(f p, f n) {
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const f s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const f s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return mul(mul(p, s1), s2);
  }
};

#include "engine/backend/cpu/cpu_simd_impl.h"
#include "engine/backend/cpu/cpu_simd_quant_impl.h"

using K = Kern<V512>;
using Q = QKern<I8Avx2>;  // 256-bit maddubs; cpu_simd_vnni.cpp replaces it where the CPU has VNNI
void matvec_x8_vnni(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  if (!detail::vnni_x8(t, W, rows, cols, x, y)) K::matvec_any(t, W, rows, cols, x, y);
}

}  // namespace

namespace detail {
const Kernels* avx512_kernels() {
  static const Kernels k = [] {
    Kernels t = vector_kernels<K, Q>(Isa::Avx512, "avx512");
    if (has_vnni()) {
      t.matvec_x8 = matvec_x8_vnni;
      t.matvec_rows16 = vnni_rows16;
    }
    return t;
  }();
  return &k;
}
}  // namespace detail

}  // namespace hl::cpu::simd
#pragma GCC diagnostic pop
#pragma GCC pop_options

#else
namespace hl::cpu::simd::detail {
const Kernels* avx512_kernels() {
  return nullptr;
}
}  // namespace hl::cpu::simd::detail
#endif
