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
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 on _mm512_undefined_*() in intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace hl::cpu::simd {
namespace {

#include "engine/backend/cpu/cpu_simd_quant_impl.h"

struct I8Vnni {
  static __m256i dot_us(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_epi32(acc, a, b); }
  static __m256i madd(__m256i acc, __m256i p, __m256i s) { return _mm256_dpwssd_epi32(acc, p, s); }
};
using Q = QKern<I8Vnni>;

// Q4_K × Q8_K over 512-bit lanes: the same integers as Q::matvec_qk<false> (each group's
// Σ code·q by maddubs, times its 6-bit scale by vpdpwssd; the mins through the bsum pairs), in half
// the instructions. A block's 128 code bytes are two 64-byte loads: load c2's low nibbles are groups
// 4c2 (bytes 0..31) and 4c2 + 2 (32..63), its high nibbles groups 4c2 + 1 and 4c2 + 3; the x codes
// are gathered to match once per call (gather) and shared by every row, and each 128-bit lane takes its group's
// scale by a byte shuffle of the 8 scales broadcast to all four lanes. Where the decode is bound by
// the int8 arithmetic (two cores against ample bandwidth: quantization.md, Speed), this is the pace.
struct Q4K512 {
  using zv = __m512i;
  static constexpr int64_t kBytes = 144;  // one Q4_K block
  static zv pair256(const int8_t* a, const int8_t* b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
  }
  // Int16 lane `lo` of each 128-bit lane in lanes 0 and 1, lane `hi` in lanes 2 and 3.
  static zv pick(int lo, int hi) {
    const auto lane = [](int l) { return static_cast<int16_t>((2 * l) | ((2 * l + 1) << 8)); };
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(lane(lo))), _mm256_set1_epi16(lane(hi)), 1);
  }

  // One block of x as every row's pass reads it: the codes gathered to match the two 64-byte code
  // loads, the pair sums of its bsums (for the mins) and its scale. Built once per call, not once
  // per pass of R rows: a decode row is 2–8 blocks, so the gather weighed as much as a row's codes.
  struct alignas(64) XBlock {
    zv xs[4];  // low, high nibbles of load 0; of load 1
    __m128i pairs;
    float dx;
  };
  static const XBlock* gather(const Q::XQ& b, int64_t nb) {
    thread_local std::vector<XBlock> g;
    if (g.size() < static_cast<size_t>(nb)) g.resize(static_cast<size_t>(nb));
    for (int64_t k = 0; k < nb; ++k) {
      const int8_t* qk = b.q.data() + 256 * k;
      XBlock& e = g[static_cast<size_t>(k)];
      e.xs[0] = pair256(qk, qk + 64);
      e.xs[1] = pair256(qk + 32, qk + 96);
      e.xs[2] = pair256(qk + 128, qk + 192);
      e.xs[3] = pair256(qk + 160, qk + 224);
      e.pairs = Q::bsum_pairs(b, k);
      e.dx = b.d[static_cast<size_t>(k)];
    }
    return g.data();
  }

  template <int R>
  static void rows_of(const uint8_t* W, int64_t nb, const XBlock* xb, const zv* picks, float* y) {
    const zv m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[R];
    __m128 accm[R];
    for (int i = 0; i < R; ++i) {
      acc[i] = _mm512_setzero_ps();
      accm[i] = _mm_setzero_ps();
    }
    for (int64_t k = 0; k < nb; ++k) {
      const zv* xs = xb[k].xs;
      const __m128 dx = _mm_set1_ps(xb[k].dx);
      const __m128i pairs = xb[k].pairs;
      for (int i = 0; i < R; ++i) {
        const uint8_t* w = W + (i * nb + k) * kBytes;
        // Each row is a stream read Q::kAhead bytes ahead; past its end the stream goes on in row
        // i + R, the one this row's slot reads next, not in row i + 1, which another slot reads.
        Q::ahead(w + ((k * kBytes + Q::kAhead >= nb * kBytes) ? (R - 1) * nb * kBytes : 0), kBytes);
        const __m256i sm = Q::scales_mins_k4(w);
        const __m128i prod = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), pairs);
        const zv scales = _mm512_broadcast_i32x4(_mm256_castsi256_si128(sm));
        zv sumi = _mm512_setzero_si512();
        for (int c2 = 0; c2 < 2; ++c2) {
          const zv raw = _mm512_loadu_si512(w + 16 + 64 * c2);
          const zv lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
          sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(lo, xs[2 * c2]), _mm512_shuffle_epi8(scales, picks[2 * c2]));
          sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(hi, xs[2 * c2 + 1]),
                                     _mm512_shuffle_epi8(scales, picks[2 * c2 + 1]));
        }
        const __m128 s = Q::d_dmin(w, dx);  // dx·d, dx·dmin
        accm[i] = _mm_fmadd_ps(_mm_shuffle_ps(s, s, 0x55), _mm_cvtepi32_ps(prod), accm[i]);
        acc[i] = _mm512_fmadd_ps(_mm512_broadcastss_ps(s), _mm512_cvtepi32_ps(sumi), acc[i]);
      }
    }
    if constexpr (R % 4 == 0) {
      for (int g = 0; g < R; g += 4) finish4(acc + g, accm + g, y + g);
    } else {  // each row through the same additions as in a group of four (finish4), so a row's y does
              // not depend on how the pool split the rows
      for (int i = 0; i < R; ++i) {
        const __m512 a4[4] = {acc[i], acc[i], acc[i], acc[i]};
        const __m128 m4[4] = {accm[i], accm[i], accm[i], accm[i]};
        float out[4];
        finish4(a4, m4, out);
        y[i] = out[0];
      }
    }
  }

  // y[i] = Σ acc[i] − Σ accm[i] for four rows at once (decode rows are 2–8 blocks long, so the
  // horizontal sums weigh as much as a block): 8 lanes, then pairs, then the two 128-bit halves.
  static void finish4(const __m512* acc, const __m128* accm, float* y) {
    __m256 h[4];
    for (int i = 0; i < 4; ++i) h[i] = _mm256_add_ps(_mm512_castps512_ps256(acc[i]), _mm512_extractf32x8_ps(acc[i], 1));
    const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    const __m128 sums = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
    const __m128 mins = _mm_hadd_ps(_mm_hadd_ps(accm[0], accm[1]), _mm_hadd_ps(accm[2], accm[3]));
    _mm_storeu_ps(y, _mm_sub_ps(sums, mins));
  }

  static void matvec(const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    const int64_t nb = cols / 256;
    Q::XQ& b = Q::xq();
    b.take(x, cols, 256, Q::quantize_q8_k);
    const XBlock* xb = gather(b, nb);
    const zv picks[4] = {pick(0, 2), pick(1, 3), pick(4, 6), pick(5, 7)};
    int64_t r = 0;
    // Eight rows a pass where there are eight: twice the work per x block loaded and per loop
    // step (decode rows are 2-8 blocks); then four, then one.
    for (; r + 8 <= rows; r += 8) rows_of<8>(W + r * nb * kBytes, nb, xb, picks, y + r);
    for (; r + 4 <= rows; r += 4) rows_of<4>(W + r * nb * kBytes, nb, xb, picks, y + r);
    for (; r < rows; ++r) rows_of<1>(W + r * nb * kBytes, nb, xb, picks, y + r);
  }
};

}  // namespace

namespace detail {
bool has_vnni() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vnni");
}
bool vnni_x8(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  if (t == DType::Q4_K) return Q4K512::matvec(static_cast<const uint8_t*>(W), rows, cols, x, y), true;
  return Q::x8(t, W, rows, cols, x, y);
}
}  // namespace detail

}  // namespace hl::cpu::simd
#pragma GCC diagnostic pop
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
