// The AVX-512 set's int8 decode products (cpu_simd_quant_impl.h) with AVX512_VNNI: vpdpbusd sums four
// u8·s8 products into each int32 lane, and vpdpwssd two i16·i16 products, each in one instruction
// where AVX2 needs maddubs + madd + add. Its own file so that the VNNI target reaches these loops
// only: the rest of the AVX-512 set must run on AVX-512 CPUs without VNNI (Skylake-X). The sums are
// the same integers as AVX2's (no int16 saturation on either path: cpu_simd_quant_impl.h).
#include <cstring>
#include <vector>

#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/rows16.h"

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

// Q4_K in groups of 16 rows (core/rows16.h) × Q8_K: each 32-bit lane is one row. A 64-byte code
// vector holds four codes of one group pair per row; its low nibbles times group 2p's four x codes
// broadcast (vpdpbusd) add to that group's 16 row sums, its high nibbles to group 2p + 1's. Then per
// block: Σ_g sc_g·S_g (vpmulld; the 6-bit scales of 16 rows widened from the L and H bytes), the
// mins by vpdpwssd on pairs of groups, and one fma each with d·dx and dmin·dx: 16 finished rows, no
// horizontal sums, no per-group shuffles. The integers are those of Q4K512 (S_g ≤ 32·15·127, times a
// scale ≤ 63, eight groups: < 2^25); the float sum adds one term per block and row.
__m512i x4(const int8_t* q) {  // four x codes in every 32-bit lane
  int32_t v;
  std::memcpy(&v, q, 4);
  return _mm512_set1_epi32(v);
}

struct Q4K16 {
  static constexpr int64_t kGroupBlock = 16 * 144;
  static void matvec(const uint8_t* W, int64_t groups, int64_t cols, const float* x, float* y) {
    const int64_t nb = cols / 256;
    Q::XQ& b = Q::xq();
    b.take(x, cols, 256, Q::quantize_q8_k);
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    for (int64_t g = 0; g < groups; ++g, y += kGroupRows) {
      __m512 acc = _mm512_setzero_ps();
      for (int64_t k = 0; k < nb; ++k) {
        const uint8_t* blk = W + (g * nb + k) * kGroupBlock;
        const int8_t* q = b.q.data() + 256 * k;
        // One stream per thread, read out of order within a block: the hardware's prefetcher alone
        // left the group kernel slower than Q4K512 from memory (hl-bench-matvec: 40 against 59 G
        // weights/s, one thread); asked for 8 KiB ahead (as Q::ahead) it is the faster one.
        Q::ahead(blk, kGroupBlock);
        __m512i S[8];
        for (__m512i& s : S) s = _mm512_setzero_si512();
        for (int c = 0; c < 8; ++c)
          for (int p = 0; p < 4; ++p) {
            const __m512i raw = _mm512_loadu_si512(blk + 256 + 64 * (8 * p + c));
            S[2 * p] = _mm512_dpbusd_epi32(S[2 * p], _mm512_and_si512(raw, m4), x4(q + 64 * p + 4 * c));
            S[2 * p + 1] = _mm512_dpbusd_epi32(S[2 * p + 1], _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4),
                                               x4(q + 64 * p + 32 + 4 * c));
          }
        // The scales (sc0: groups 0-3, sc1: 4-7, 16 rows each) and the mins (mn0: pairs 0-1, mn1: 2-3).
        const __m512i L0 = _mm512_loadu_si512(blk + 64), L1 = _mm512_loadu_si512(blk + 128);
        const __m512i H = _mm512_loadu_si512(blk + 192);
        const __m512i sc0 = _mm512_or_si512(_mm512_and_si512(L0, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m30));
        const __m512i sc1 = _mm512_or_si512(_mm512_and_si512(L1, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m30));
        const __m512i mn0 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), _mm512_and_si512(H, m30));
        const __m512i mn1 =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4), _mm512_and_si512(_mm512_srli_epi16(H, 2), m30));
        __m512i isum = _mm512_mullo_epi32(S[0], _mm512_cvtepu8_epi32(_mm512_castsi512_si128(sc0)));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(S[1], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc0, 1))));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(S[2], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc0, 2))));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(S[3], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc0, 3))));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(S[4], _mm512_cvtepu8_epi32(_mm512_castsi512_si128(sc1))));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(S[5], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc1, 1))));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(S[6], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc1, 2))));
        isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(S[7], _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(sc1, 3))));
        const __m128i pairs = Q::bsum_pairs(b, k);  // Σ q of each group of 32, int16 lanes 0..7
        __m512i msum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_cvtepu8_epi16(_mm512_castsi512_si256(mn0)),
                                           _mm512_set1_epi32(_mm_extract_epi32(pairs, 0)));
        msum = _mm512_dpwssd_epi32(msum, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mn0, 1)),
                                   _mm512_set1_epi32(_mm_extract_epi32(pairs, 1)));
        msum = _mm512_dpwssd_epi32(msum, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(mn1)),
                                   _mm512_set1_epi32(_mm_extract_epi32(pairs, 2)));
        msum = _mm512_dpwssd_epi32(msum, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mn1, 1)),
                                   _mm512_set1_epi32(_mm_extract_epi32(pairs, 3)));
        const __m512 dx = _mm512_set1_ps(b.d[static_cast<size_t>(k)]);
        const __m512 d = _mm512_mul_ps(dx, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))));
        const __m512 dmin = _mm512_mul_ps(dx, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32))));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(isum), acc);
        acc = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(msum), acc);
      }
      _mm512_storeu_ps(y, acc);
    }
  }
};

// Q8_0 in groups of 16 rows (core/rows16.h) × Q8_0: each 32-bit lane is one row. The codes are held
// plus 128 (unsigned), so vpdpbusd with x's four codes broadcast adds Σ (w + 128)·q to each row's lane;
// the sum starts at −128·Σ q of x's block (the same for every row), which leaves Σ w·q, the integer of
// Q::matvec_b32 (|Σ| ≤ 255·127·32 < 2^21 on the way). Then one fma per block with d·dx: 16 finished
// rows, no horizontal sums. No software prefetch, unlike Q4K16: this kernel does a third of the
// arithmetic per byte, and the hardware's prefetcher alone gave the faster decode (hl-bench-matvec 5
// pooled, time against BF16 in the same run: 1.82-2.10x without, 1.67-1.81x with 1, 2 or 8 KiB ahead).
struct Q8016 {
  static constexpr int64_t kGroupBlock = 16 * 34;
  static void matvec(const uint8_t* W, int64_t groups, int64_t cols, const float* x, float* y) {
    const int64_t nb = cols / 32;
    Q::XQ& b = Q::xq();
    b.take(x, cols, 32, Q::quantize_q8_0_sums);  // as Q::matvec_b32, which shares the cached x
    for (int64_t g = 0; g < groups; ++g, y += kGroupRows) {
      __m512 acc = _mm512_setzero_ps();
      const uint8_t* blk = W + g * nb * kGroupBlock;
      for (int64_t k = 0; k < nb; ++k, blk += kGroupBlock) {
        const int8_t* q = b.q.data() + 32 * k;
        __m512i s0 = _mm512_set1_epi32(-128 * b.bsums[static_cast<size_t>(k)]), s1 = _mm512_setzero_si512();
        for (int c = 0; c < 4; ++c) {
          s0 = _mm512_dpbusd_epi32(s0, _mm512_loadu_si512(blk + 32 + 64 * c), x4(q + 4 * c));
          s1 = _mm512_dpbusd_epi32(s1, _mm512_loadu_si512(blk + 288 + 64 * c), x4(q + 16 + 4 * c));
        }
        const __m512 d = _mm512_mul_ps(_mm512_set1_ps(b.d[static_cast<size_t>(k)]),
                                       _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk))));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc);
      }
      _mm512_storeu_ps(y, acc);
    }
  }
};

}  // namespace

namespace detail {
void vnni_rows16(DType t, const void* W, int64_t groups, int64_t cols, const float* x, float* y) {
  (t == DType::Q4_K ? Q4K16::matvec : Q8016::matvec)(static_cast<const uint8_t*>(W), groups, cols, x, y);
}
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
void vnni_rows16(DType, const void*, int64_t, int64_t, const float*, float*) {}
}  // namespace hl::cpu::simd::detail
#endif
