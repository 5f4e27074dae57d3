// The int8 decode products of cpu_simd.h (Kernels::matvec_x8) written once over 256-bit integer
// lanes, included by cpu_simd_avx2.cpp, cpu_simd_avx512.cpp and cpu_simd_vnni.cpp inside their
// `#pragma GCC target` region (each has AVX2). Not a public header.
//
// What llama.cpp's CPU backend does for a block-quantised matrix times a vector: x is rounded once per
// call to 8-bit blocks (ggml's quantize_row_q8_0 for the blocks of 32 — Q8_0, Q4_0, Q5_0 —,
// quantize_row_q8_K for the K-quants), and each weight block is dotted with its x block in integers
// (ggml_vec_dot_q8_0_q8_0, _q4_0_q8_0, _q5_0_q8_0, _q4_K_q8_K, _q5_K_q8_K, _q6_K_q8_K); only the
// block's scales are floats. Q4_K and Q6_K
// are bound by compute when every weight is converted to fp32 and multiplied in fp32; 32 byte
// products per instruction are what makes them faster than the bytes they read.
//
// The integer sums are exact and equal those of the portable loops in cpu_simd.cpp (no int16 lane can
// saturate: see each kernel); the vector kernels only add the scaled block sums in another order.
//
// I provides dot_us(acc, a, b) = acc + Σ of 4 adjacent a(u8)·b(s8) per int32 lane, and
// madd(acc, p, s) = acc + Σ of 2 adjacent p(i16)·s(i16) per int32 lane: AVX2's maddubs + madd + add,
// or AVX-512 VNNI's vpdpbusd / vpdpwssd (256-bit forms).

template <class I>
struct QKern {
  using iv = __m256i;

  static float hsum(__m256 v) {
    const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
  }
  static float hmax_abs(__m256 a) {  // a ≥ 0
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
  }
  static __m256 abs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
  static float f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }

  // 32 floats times s, rounded to nearest even (vcvtps2dq under the default MXCSR, as
  // std::nearbyint in the portable quantiser) and packed to 32 int8 in order (packs interleave the
  // 128-bit lanes; the permute undoes it, as ggml's quantize_row_q8_0 does). |x·s| ≤ 127 here.
  static iv round_pack(const float* x, __m256 s) {
    const iv a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), s));
    const iv b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), s));
    const iv c = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), s));
    const iv d = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), s));
    const iv p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }

  // x (n,) → Q8_0-style blocks of 32 (ggml's x86 quantize_row_q8_0, with the scale kept in fp32
  // instead of fp16): d = max|x|/127, q = round(x · 127/max|x|), all zero for a zero block.
  static void quantize_q8_0(const float* x, int64_t n, float* d, int8_t* q) {
    for (int64_t k = 0; k < n / 32; ++k, x += 32, q += 32) {
      __m256 m = abs(_mm256_loadu_ps(x));
      for (int j = 8; j < 32; j += 8) m = _mm256_max_ps(m, abs(_mm256_loadu_ps(x + j)));
      const float amax = hmax_abs(m);
      d[k] = amax / 127.0f;
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      _mm256_storeu_si256(reinterpret_cast<iv*>(q), round_pack(x, _mm256_set1_ps(id)));
    }
  }

  // quantize_q8_0 as XQ::take calls it for every block-32 product, with sums[k] = Σ q of block k
  // (|Σ| ≤ 32·127): the 16-row Q8_0 kernel (cpu_simd_vnni.cpp) needs them once per x, not per call.
  static void quantize_q8_0_sums(const float* x, int64_t n, float* d, int8_t* q, int16_t* sums) {
    quantize_q8_0(x, n, d, q);
    for (int64_t k = 0; k < n / 32; ++k) {
      int s = 0;
      for (int i = 0; i < 32; ++i) s += q[32 * k + i];
      sums[k] = static_cast<int16_t>(s);
    }
  }

  // x (n,) → Q8_K-style blocks of 256 (ggml's quantize_row_q8_K_ref): iscale = −127/v with v the
  // first value of largest magnitude, q = round(iscale · x) (so v itself becomes −127), d = 1/iscale,
  // bsums = the sums of q per 16. ggml tried −128 and kept −127 (a comment there), so q is in
  // [−127, 127]; the min(127, ·) of ggml can never bite.
  static void quantize_q8_k(const float* x, int64_t n, float* d, int8_t* q, int16_t* bsums) {
    for (int64_t k = 0; k < n / 256; ++k, x += 256, q += 256, bsums += 16) {
      __m256 m = abs(_mm256_loadu_ps(x));
      for (int j = 8; j < 256; j += 8) m = _mm256_max_ps(m, abs(_mm256_loadu_ps(x + j)));
      const float amax = hmax_abs(m);
      if (amax == 0.0f) {
        d[k] = 0;
        std::memset(q, 0, 256);
        std::memset(bsums, 0, 16 * sizeof(int16_t));
        continue;
      }
      int at = 0;  // the first lane equal to amax (ggml keeps the first on ties of |x|)
      const __m256 am = _mm256_set1_ps(amax);
      for (int j = 0; j < 256; j += 8) {
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs(_mm256_loadu_ps(x + j)), am, _CMP_EQ_OQ));
        if (hit) {
          at = j + __builtin_ctz(static_cast<unsigned>(hit));
          break;
        }
      }
      const float iscale = -127.0f / x[at];
      const __m256 s = _mm256_set1_ps(iscale);
      for (int j = 0; j < 256; j += 32) _mm256_storeu_si256(reinterpret_cast<iv*>(q + j), round_pack(x + j, s));
      for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += q[16 * j + i];
        bsums[j] = static_cast<int16_t>(sum);
      }
      d[k] = 1.0f / iscale;
    }
  }

  // The quantised x of one call in a thread's buffers, grown once (a steady decode allocates nothing),
  // and a copy of the x it was made from: the threads of one product each take several row chunks
  // of the same x (ThreadPool::parallel_for), and the gate and up products of an MLP share theirs,
  // so an x equal bit for bit to the last one is not quantised again (the decode benchmark moved
  // within its noise; the work saved is one rounding of x per chunk after a thread's first).
  struct XQ {
    std::vector<float> d;
    std::vector<int8_t> q;
    std::vector<int16_t> bsums;  // Σ q per 16 values (blocks of 256), per block (blocks of 32)
    std::vector<float> src;  // the x of d, q, bsums (block `src_block`), empty before the first
    int64_t src_block = 0;
    // Makes d, q, bsums those of x (n,) in blocks of `block`, by quant(x, n, d, q, bsums) unless they are.
    template <class Quant>
    void take(const float* x, int64_t n, int64_t block, Quant&& quant) {
      if (src_block == block && src.size() == static_cast<size_t>(n) &&
          std::memcmp(src.data(), x, static_cast<size_t>(n) * sizeof(float)) == 0)
        return;
      if (q.size() < static_cast<size_t>(n)) q.resize(static_cast<size_t>(n));
      if (d.size() < static_cast<size_t>(n / block)) d.resize(static_cast<size_t>(n / block));
      if (bsums.size() < static_cast<size_t>(n / 16)) bsums.resize(static_cast<size_t>(n / 16));
      src_block = 0;  // invalid while quant runs
      quant(x, n, d.data(), q.data(), bsums.data());
      src.assign(x, x + n);
      src_block = block;
    }
  };
  static XQ& xq() {
    thread_local XQ b;
    return b;
  }

  // As Kern::ahead (cpu_simd_impl.h), further ahead: a block's codes take more instructions per
  // line than a 16-bit row, so a line must be asked for earlier to be there in time. Q8_0 + head
  // decode of the ~317M model on the 2-core development VM, against BF16 in the same run (bench
  // --weights, 5 runs each): 1.47x at 2 KiB, 1.61-1.72x at 4-8 KiB (quantization.md, Speed).
  static constexpr int64_t kAhead = 8192;
  static void ahead(const uint8_t* p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + kAhead + o);
  }

  // The 32 signed weights of one block of 32 as int8 lanes in order (the Q8_0 blocks of x):
  // Q8_0 stores them; Q4_0 holds nibbles − 8 (values 0..15 the low nibbles of qs, 16..31 the high);
  // Q5_0 adds bit j of qh as the fifth bit of value j, minus 16 (ggml's dequantize_row_q5_0).
  static iv nibbles(const uint8_t* qs) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    return _mm256_setr_m128i(_mm_and_si128(raw, m4), _mm_and_si128(_mm_srli_epi16(raw, 4), m4));
  }
  // 0x10 in lane j where bit j of the 32-bit qh is set, else 0.
  static iv fifth_bits(const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    // Lanes 0..7 read byte 0 of h, 8..15 byte 1, 16..23 byte 2, 24..31 byte 3 (h in both halves).
    const iv rep = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)),
                                       _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
    const iv bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(rep, bit), bit), _mm256_set1_epi8(0x10));
  }
  template <DType T>
  static iv block32(const uint8_t* w) {
    if constexpr (T == DType::Q8_0) {
      return _mm256_loadu_si256(reinterpret_cast<const iv*>(w + 2));
    } else if constexpr (T == DType::Q4_0) {
      return _mm256_sub_epi8(nibbles(w + 2), _mm256_set1_epi8(8));
    } else {
      static_assert(T == DType::Q5_0);
      return _mm256_sub_epi8(_mm256_or_si256(nibbles(w + 6), fifth_bits(w + 2)), _mm256_set1_epi8(16));
    }
  }
  static constexpr int64_t block32_bytes(DType t) { return t == DType::Q8_0 ? 34 : t == DType::Q4_0 ? 18 : 22; }

  // Q8_0, Q4_0, Q5_0 × Q8_0 (ggml_vec_dot_q8_0_q8_0, _q4_0_q8_0, _q5_0_q8_0): Σ_blocks (d_w·d_x) · Σ w·q.
  // u8 × s8 needs one unsigned side: |w| · (q with w's sign), as ggml does. |w| ≤ 128 and |q| ≤ 127,
  // so a pair of products (maddubs' int16) is at most 32512.
  template <DType T>
  static void matvec_b32(const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t kBytes = block32_bytes(T);
    const int64_t nb = cols / 32;
    XQ& b = xq();
    b.take(x, cols, 32, quantize_q8_0_sums);
    const int8_t* q = b.q.data();
    const float* dx = b.d.data();
    const auto block = [&](const uint8_t* w, int64_t k, __m256 acc) {
      const iv wv = block32<T>(w);
      const iv xv = _mm256_loadu_si256(reinterpret_cast<const iv*>(q + 32 * k));
      const iv s = I::dot_us(_mm256_setzero_si256(), _mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
      return _mm256_fmadd_ps(_mm256_set1_ps(f16(w) * dx[k]), _mm256_cvtepi32_ps(s), acc);
    };
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* w = W + r * nb * kBytes;
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();  // even and odd blocks
      int64_t k = 0;
      for (; k + 1 < nb; k += 2, w += 2 * kBytes) {
        ahead(w, 2 * kBytes);
        acc0 = block(w, k, acc0);
        acc1 = block(w + kBytes, k + 1, acc1);
      }
      if (k < nb) acc0 = block(w, k, acc0);
      y[r] = hsum(_mm256_add_ps(acc0, acc1));
    }
  }

  // Q4_K and Q5_K × Q8_K (ggml_vec_dot_q4_K_q8_K, _q5_K_q8_K): per block,
  // d_x·d·Σ_g sc_g·Σ c·q − d_x·dmin·Σ_g m_g·Σ q, the Σ q per group from the bsums. Q5_K's codes
  // take bit g of qh[l] as the fifth bit of value l of group g. Codes ≤ 31 and |q| ≤ 127: a maddubs
  // pair ≤ 7874; times a 6-bit scale in madd, ≤ 992124 per int32 lane and group, 8 groups a block. The scales and mins are unpacked into one
  // vector of 16 int16 and each group's scale broadcast by a byte shuffle, as ggml does: scalar
  // unpacking and broadcasts from general registers cost as much as the dot products here.
  // A Q4_K / Q5_K block's eight 6-bit scales (int16 lanes 0..7) and mins (8..15), unpacked as ggml's
  // get_scale_min_k4 (and Kern::matvec_q4_k) read them.
  static iv scales_mins_k4(const uint8_t* w) {
    // Bytes 4..15 of the block are u0, u1, u2 (dwords 1..3 of one 16-byte load): scales 0..3 are
    // u0 & 0x3f per byte, mins 0..3 u1 & 0x3f; scales 4..7 the low nibbles of u2 with u0's top two
    // bits above them, mins 4..7 the high nibbles with u1's top two bits ((u >> 2) & 0x30 per byte
    // moves bits 6-7 of each byte to 4-5). Four dword lanes at once instead of scalar unpacking.
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i low = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(3, 2, 3, 1)), _mm_setr_epi32(0, 0, 0, 4));
    const __m128i top = _mm_srli_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 1, 1)), 2);
    const __m128i sm = _mm_or_si128(_mm_and_si128(low, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
                                    _mm_and_si128(top, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
    return _mm256_cvtepu8_epi16(sm);  // [sc_lo, sc_hi, m_lo, m_hi] bytes -> 16 int16
  }

  // Block k's 16 bsums of x (Σ q over each 16 values) added in pairs: Σ q over each of its eight
  // groups of 32, as int16 lanes 0..7 — what a group's min multiplies.
  static __m128i bsum_pairs(const XQ& b, int64_t k) {
    const iv bs = _mm256_loadu_si256(reinterpret_cast<const iv*>(b.bsums.data() + 16 * k));
    return _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
  }

  // A K-quant block's d and dmin (its first 4 bytes) widened together and times dx: lane 0 dx·d,
  // lane 1 dx·dmin, the same products as two scalar conversions and multiplies.
  static __m128 d_dmin(const uint8_t* w, __m128 dx) {
    int32_t h;
    std::memcpy(&h, w, 4);
    return _mm_mul_ps(dx, _mm_cvtph_ps(_mm_cvtsi32_si128(h)));
  }

  template <bool kQ5>
  static void matvec_qk(const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t kBytes = kQ5 ? 176 : 144, kQs = kQ5 ? 48 : 16;
    const int64_t nb = cols / 256;
    XQ& b = xq();
    b.take(x, cols, 256, quantize_q8_k);
    const iv m4 = _mm256_set1_epi8(0x0f);
    iv pick[8];  // pick[g]: bytes 2g, 2g + 1 (int16 lane g) in every int16 lane
    for (int g = 0; g < 8; ++g) pick[g] = _mm256_set1_epi16(static_cast<int16_t>((2 * g) | ((2 * g + 1) << 8)));
    // One block of one row: its Σ sc·q4·q (8 int32 lanes) and Σ m·(bsum pairs) (4 int32 lanes).
    const auto block = [&](const uint8_t* w, const int8_t* qk, __m128i pairs, iv* sumi_out, __m128i* prod) {
      const iv sm = scales_mins_k4(w);
      *prod = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), pairs);
      const iv scales = _mm256_permute2x128_si256(sm, sm, 0x00);  // the 8 scales in both halves
      iv sumi = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {  // groups 2c (low nibbles) and 2c + 1 (high) of qs[32c .. 32c + 32)
        const iv raw = _mm256_loadu_si256(reinterpret_cast<const iv*>(w + kQs + 32 * c));
        iv lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if constexpr (kQ5) {  // bits 2c and 2c + 1 of qh[l], moved to bit 4 (per byte: the masks keep
                              // each byte's own bit under the 16-bit shifts)
          const iv qh = _mm256_loadu_si256(reinterpret_cast<const iv*>(w + 16));
          const iv one = _mm256_set1_epi8(1);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
        }
        const iv plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const iv*>(qk + 64 * c)));
        const iv phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const iv*>(qk + 64 * c + 32)));
        sumi = I::madd(sumi, plo, _mm256_shuffle_epi8(scales, pick[2 * c]));
        sumi = I::madd(sumi, phi, _mm256_shuffle_epi8(scales, pick[2 * c + 1]));
      }
      *sumi_out = sumi;
    };
    const auto finish = [&](__m256 acc, __m128 accm) {
      const __m128 m2 = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
      return hsum(acc) - _mm_cvtss_f32(_mm_add_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
    };
    // Two rows at a time share the x side of each block (its scale, bsum pairs and codes, from L1).
    int64_t r = 0;
    for (; r + 1 < rows; r += 2) {
      const uint8_t* w0 = W + r * nb * kBytes;
      const uint8_t* w1 = w0 + nb * kBytes;
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      __m128 accm0 = _mm_setzero_ps(), accm1 = _mm_setzero_ps();
      for (int64_t k = 0; k < nb; ++k, w0 += kBytes, w1 += kBytes) {
        ahead(w0, kBytes);
        ahead(w1, kBytes);
        const __m128 dx = _mm_set1_ps(b.d[static_cast<size_t>(k)]);
        const __m128i pairs = bsum_pairs(b, k);
        const int8_t* qk = b.q.data() + 256 * k;
        iv s0, s1;
        __m128i p0, p1;
        block(w0, qk, pairs, &s0, &p0);
        block(w1, qk, pairs, &s1, &p1);
        const __m128 c0 = d_dmin(w0, dx), c1 = d_dmin(w1, dx);
        accm0 = _mm_fmadd_ps(_mm_shuffle_ps(c0, c0, 0x55), _mm_cvtepi32_ps(p0), accm0);
        accm1 = _mm_fmadd_ps(_mm_shuffle_ps(c1, c1, 0x55), _mm_cvtepi32_ps(p1), accm1);
        acc0 = _mm256_fmadd_ps(_mm256_broadcastss_ps(c0), _mm256_cvtepi32_ps(s0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_broadcastss_ps(c1), _mm256_cvtepi32_ps(s1), acc1);
      }
      y[r] = finish(acc0, accm0);
      y[r + 1] = finish(acc1, accm1);
    }
    if (r < rows) {
      const uint8_t* w = W + r * nb * kBytes;
      __m256 acc = _mm256_setzero_ps();
      __m128 accm = _mm_setzero_ps();
      for (int64_t k = 0; k < nb; ++k, w += kBytes) {
        ahead(w, kBytes);
        const __m128i pairs = bsum_pairs(b, k);
        iv s;
        __m128i p;
        block(w, b.q.data() + 256 * k, pairs, &s, &p);
        const __m128 c = d_dmin(w, _mm_set1_ps(b.d[static_cast<size_t>(k)]));
        accm = _mm_fmadd_ps(_mm_shuffle_ps(c, c, 0x55), _mm_cvtepi32_ps(p), accm);
        acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(c), _mm256_cvtepi32_ps(s), acc);
      }
      y[r] = finish(acc, accm);
    }
  }

  // Q6_K × Q8_K (ggml_vec_dot_q6_K_q8_K): per block d_x·d·Σ_j sc_j·Σ (c − 32)·q over 16 values j,
  // as Σ_j sc_j·Σ c·q − 32·Σ_j sc_j·bsum_j with the 6-bit codes c ≤ 63 unsigned (a maddubs pair
  // ≤ 16002), the scales signed 8-bit.
  static void matvec_q6_k(const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t kBytes = 210;
    const int64_t nb = cols / 256;
    XQ& b = xq();
    b.take(x, cols, 256, quantize_q8_k);
    const iv m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    iv pick[4];  // int16 lane 2g in the low half, lane 2g + 1 in the high half (byte shuffle masks)
    for (int g = 0; g < 4; ++g) {
      const auto lane = [](int l) { return static_cast<int16_t>((2 * l) | ((2 * l + 1) << 8)); };
      pick[g] = _mm256_setr_m128i(_mm_set1_epi16(lane(2 * g)), _mm_set1_epi16(lane(2 * g + 1)));
    }
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* w = W + r * nb * kBytes;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t k = 0; k < nb; ++k, w += kBytes) {
        ahead(w, kBytes);
        const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
        const int8_t* qk = b.q.data() + 256 * k;
        // 32 · Σ_j sc_j · bsum_j, in 8 int32 lanes.
        const iv scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
        // Scales 8n .. 8n + 7 in both 128-bit halves; pick[g] puts scale 8n + 2g in the low half
        // (values 0..15 of group g) and 8n + 2g + 1 in the high half (values 16..31).
        const iv half[2] = {_mm256_permute2x128_si256(scales, scales, 0x00),
                            _mm256_permute2x128_si256(scales, scales, 0x11)};
        const iv bsum = _mm256_loadu_si256(reinterpret_cast<const iv*>(b.bsums.data() + 16 * k));
        iv sumi = _mm256_slli_epi32(_mm256_madd_epi16(scales, bsum), 5);
        sumi = _mm256_sub_epi32(_mm256_setzero_si256(), sumi);
        for (int n = 0; n < 2; ++n) {  // values 128n .. 128n + 128: four groups g of 32
          const iv ql0 = _mm256_loadu_si256(reinterpret_cast<const iv*>(w + 64 * n));
          const iv ql1 = _mm256_loadu_si256(reinterpret_cast<const iv*>(w + 64 * n + 32));
          const iv qh = _mm256_loadu_si256(reinterpret_cast<const iv*>(w + 128 + 32 * n));
          for (int g = 0; g < 4; ++g) {
            const iv lo = _mm256_and_si256(g < 2 ? (g == 0 ? ql0 : ql1)
                                                 : _mm256_srli_epi16(g == 2 ? ql0 : ql1, 4), m4);
            const iv hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * g), m2), 4);
            const iv c = _mm256_or_si256(lo, hi);
            const iv p = _mm256_maddubs_epi16(c, _mm256_loadu_si256(reinterpret_cast<const iv*>(qk + 128 * n + 32 * g)));
            sumi = I::madd(sumi, p, _mm256_shuffle_epi8(half[n], pick[g]));
          }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(b.d[static_cast<size_t>(k)] * f16(w + 208)), _mm256_cvtepi32_ps(sumi), acc);
      }
      y[r] = hsum(acc);
    }
  }

  // The formats above (true), or false with nothing done (the caller multiplies with x in fp32).
  static bool x8(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
    const uint8_t* w = static_cast<const uint8_t*>(W);
    switch (t) {
      case DType::Q8_0:
        return matvec_b32<DType::Q8_0>(w, rows, cols, x, y), true;
      case DType::Q4_0:
        return matvec_b32<DType::Q4_0>(w, rows, cols, x, y), true;
      case DType::Q5_0:
        return matvec_b32<DType::Q5_0>(w, rows, cols, x, y), true;
      case DType::Q4_K:
        return matvec_qk<false>(w, rows, cols, x, y), true;
      case DType::Q5_K:
        return matvec_qk<true>(w, rows, cols, x, y), true;
      case DType::Q6_K:
        return matvec_q6_k(w, rows, cols, x, y), true;
      default:
        return false;
    }
  }
};

// AVX2: maddubs's int16 pairs summed to int32 by madd with ones, then added.
struct I8Avx2 {
  static __m256i dot_us(__m256i acc, __m256i a, __m256i b) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)));
  }
  static __m256i madd(__m256i acc, __m256i p, __m256i s) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s)); }
};

// Kernels::matvec_x8 of a vector ISA: Q's int8 product where the dtype has one, else K's fp32 one.
template <class K, class Q>
void x8_or_fp32(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  if (!Q::x8(t, W, rows, cols, x, y)) K::matvec_any(t, W, rows, cols, x, y);
}

// The Kernels table of a vector ISA (cpu_simd_avx2.cpp, cpu_simd_avx512.cpp): K's fp32 kernels
// (cpu_simd_impl.h) and Q's int8 products and rounding of x, in the order cpu_simd.h lists them.
template <class K, class Q>
Kernels vector_kernels(Isa isa, const char* name) {
  return {isa,         name,        K::matvec_any,     K::widen,         K::dot,
          K::axpy,     K::dot_rows, K::axpy_rows,      K::silu_mul,      K::silu_inplace,
          K::softplus, K::scan,     K::exp_inplace,    x8_or_fp32<K, Q>, Q::quantize_q8_0,
          Q::quantize_q8_k};
}
