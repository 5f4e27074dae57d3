// The AVX-512 set's int8 decode products (cpu_simd_quant_impl.h) with AVX512_VNNI: vpdpbusd sums four
// u8·s8 products into each int32 lane, and vpdpwssd two i16·i16 products, each in one instruction
// where AVX2 needs maddubs + madd + add. Its own file so that the VNNI target reaches these loops
// only: the rest of the AVX-512 set must run on AVX-512 CPUs without VNNI (Skylake-X). The sums are
// the same integers as AVX2's (no int16 saturation on either path: cpu_simd_quant_impl.h).
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_simd.h"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
#include <immintrin.h>

namespace hl::cpu::simd {
namespace {

#include "engine/backend/cpu/cpu_simd_quant_impl.h"

struct I8Vnni {
  static __m256i dot_us(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_epi32(acc, a, b); }
  static __m256i madd(__m256i acc, __m256i p, __m256i s) { return _mm256_dpwssd_epi32(acc, p, s); }
};

}  // namespace

namespace detail {
bool has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni");
}
bool vnni_x8(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  return QKern<I8Vnni>::x8(t, W, rows, cols, x, y);
}
}  // namespace detail

}  // namespace hl::cpu::simd
#pragma GCC pop_options

#else
namespace hl::cpu::simd::detail {
bool has_vnni() {
  return false;
}
bool vnni_x8(DType, const void*, int64_t, int64_t, const float*, float*) {
  return false;
}
}  // namespace hl::cpu::simd::detail
#endif
