// The vector kernels of cpu_simd.h written once over a lane type V (cpu_simd_avx512.cpp: 16 fp32
// lanes; cpu_simd_avx2.cpp: 8), included by those files inside their `#pragma GCC target` region.
// Not a public header. Each kernel mirrors its portable loop in cpu_simd.cpp; only the order of the
// fp32 sums (lanes, then a tree) and exp (a degree-7 polynomial after Cody–Waite reduction, ≤ 2 ulp)
// differ, so results agree within fp32 rounding.
//
// V provides: f (register type), kLanes, zero, set1, load, store, add, sub, mul, div, fmadd(a, b, c) =
// a·b + c, fnmadd(a, b, c) = c − a·b, min, max, abs, max0, round (to nearest), isnan and gt (lane
// masks), blend(mask, a, b) = mask ? b : a, hsum, scale2(p, n) = p·2^n (n integral, in two exact
// factors), and loadw<T>(p): kLanes weights of dtype T at p widened to fp32; for the block formats an
// integer lane type i with u8/i8 (kLanes bytes widened), srl, sll, andi, ori, subi and cvt (to fp32).

template <class V>
struct Kern {
  using f = typename V::f;
  using iv = typename V::i;
  static constexpr int L = V::kLanes;

  // exp(x) = 2^n · p(r), x = n·ln2 + r, |r| ≤ ln2/2 (ln2 in two parts, Cody–Waite), p of degree 7;
  // 2^n applied as two factors so that results down in the subnormal range round once, like expf.
  // NaN stays NaN; ±inf give inf and 0.
  static f exp(f x) {
    const f xc = V::min(V::max(x, V::set1(-104.0f)), V::set1(88.8f));
    const f n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
    f r = V::fnmadd(n, V::set1(0.693145751953125f), xc);
    r = V::fnmadd(n, V::set1(1.428606765330187045e-06f), r);
    f p = V::set1(1.0f / 5040.0f);
    for (float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
      p = V::fmadd(p, r, V::set1(c));
    return V::blend(V::isnan(x), V::scale2(p, n), x);
  }

  // Software prefetch of the `bytes` weight bytes kAhead past p, one request per cache line. The
  // hardware prefetchers alone left one core at ~60 % of its bandwidth when the loop does more than
  // a load and an FMA per line (Q8_0 on one core of the development machine: 4.6–6.0 GB/s without,
  // 7.6–10.8 with). 4 KiB: the 2-core development VM decoded BF16 ~9 % faster than at 2 KiB and
  // ~4 % faster than at 8 KiB (bench --weights, against the same Q8_0 kernel in the same runs).
  static constexpr int64_t kAhead = 4096;
  static void ahead(const uint8_t* p, int64_t bytes) {
    for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(p + kAhead + o);
  }

  // y (rows,) = W (rows, cols) · x (cols,), one row after another: the matrix is read as one
  // sequential stream (rows are contiguous), which the hardware prefetchers follow best —
  // interleaving 4 rows made short streams and halved the bandwidth on Zen 4 (9 vs 18 GB/s on one
  // core). Four accumulators hide the FMA latency.
  template <DType T>
  static void matvec(const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t esz = T == DType::F32 ? 4 : 2;
    const uint8_t* base = static_cast<const uint8_t*>(W);
    const int64_t c4 = cols / (4 * L) * (4 * L), c1 = cols / L * L;
    alignas(64) float xt[L] = {};  // the last cols - c1 inputs, zero-padded
    for (int64_t c = c1; c < cols; ++c) xt[c - c1] = x[c];
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* w = base + r * cols * esz;  // (cols,) stored dtype
      f a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
      int64_t c = 0;
      for (; c < c4; c += 4 * L) {
        ahead(w + c * esz, 4 * L * esz);
        a0 = V::fmadd(V::template loadw<T>(w + c * esz), V::load(x + c), a0);
        a1 = V::fmadd(V::template loadw<T>(w + (c + L) * esz), V::load(x + c + L), a1);
        a2 = V::fmadd(V::template loadw<T>(w + (c + 2 * L) * esz), V::load(x + c + 2 * L), a2);
        a3 = V::fmadd(V::template loadw<T>(w + (c + 3 * L) * esz), V::load(x + c + 3 * L), a3);
      }
      for (; c < c1; c += L) a0 = V::fmadd(V::template loadw<T>(w + c * esz), V::load(x + c), a0);
      if (c1 < cols) {
        alignas(64) float wt[L] = {};
        to_float(T, w + c1 * esz, wt, static_cast<size_t>(cols - c1));
        a1 = V::fmadd(V::load(wt), V::load(xt), a1);
      }
      y[r] = V::hsum(V::add(V::add(a0, a1), V::add(a2, a3)));
    }
  }

  // ggml's block formats, dequantised in registers (GGUF.md §4): y = d·q for Q8_0 (32 int8 codes,
  // fp16 d); (d·sc)·q − dmin·m per group of 32 for Q4_K (4-bit codes); d·scale·(q − 32) per 16 for
  // Q6_K (6-bit codes in two planes). The other block types dequantise a piece of whole blocks into a
  // stack buffer (to_float, ggml's scalar code) and dot it. No allocation on any path.
  // Σ_blocks d · (Σ q·x): the codes' products first, the block's scale once (two alternating
  // accumulators across blocks hide the FMA latency).
  static void matvec_q8_0(const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t kBytes = 34;
    const int64_t nb = cols / 32;
    // Σ q·x of block k, times its scale, added to acc (named accumulators: an array indexed by k
    // would live in memory).
    const auto block = [x](const uint8_t* b, int64_t k, f acc) {
      const float* xb = x + 32 * k;
      f qx = V::mul(V::cvt(V::i8(b + 2)), V::load(xb));
      for (int j = 1; j < 32 / L; ++j) qx = V::fmadd(V::cvt(V::i8(b + 2 + j * L)), V::load(xb + j * L), qx);
      return V::fmadd(V::set1(V::f16(b)), qx, acc);
    };
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* b = W + r * nb * kBytes;
      f acc0 = V::zero(), acc1 = V::zero();  // even and odd blocks
      int64_t k = 0;
      for (; k + 1 < nb; k += 2, b += 2 * kBytes) {
        ahead(b, 2 * kBytes);
        acc0 = block(b, k, acc0);
        acc1 = block(b + kBytes, k + 1, acc1);
      }
      if (k < nb) acc0 = block(b, k, acc0);
      y[r] = V::hsum(V::add(acc0, acc1));
    }
  }

  // Σ_groups (d·sc)·(Σ q·x) − (dmin·m)·(Σ x): the sums of x per group of 32 are taken once per call
  // (x is the same for every row; a thread's buffer, grown once), the codes' products per group.
  static void matvec_q4_k(const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t kBytes = 144;
    const int64_t nb = cols / 256;
    thread_local std::vector<float> xsum;
    if (xsum.size() < static_cast<size_t>(8 * nb)) xsum.resize(static_cast<size_t>(8 * nb));
    for (int64_t g = 0; g < 8 * nb; ++g) {
      f s = V::load(x + 32 * g);
      for (int j = 1; j < 32 / L; ++j) s = V::add(s, V::load(x + 32 * g + j * L));
      xsum[static_cast<size_t>(g)] = V::hsum(s);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* b = W + r * nb * kBytes;
      f acc0 = V::zero(), acc1 = V::zero();  // even (low-nibble) and odd (high-nibble) groups
      float mins0 = 0, mins1 = 0;  // Σ_blocks dmin · Σ_g m_g · Σx_g
      for (int64_t k = 0; k < nb; ++k, b += kBytes) {
        ahead(b, kBytes);
        const float d = V::f16(b), dmin = V::f16(b + 2);
        // The eight 6-bit scales and mins (ggml's get_scale_min_k4) unpacked with word masks: bytes
        // 0..3 of the 12 hold the low 6 bits of scales 0..3 (their top 2 bits: high bits of scales
        // 4..7), bytes 4..7 the same for mins 0..3, bytes 8..11 the low nibbles of scales 4..7 and
        // high nibbles of mins 4..7.
        uint32_t u[3];
        std::memcpy(u, b + 4, 12);
        const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
        const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
        const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
        const uint32_t scw[2] = {sc_lo, sc_hi}, mw[2] = {m_lo, m_hi};
        uint8_t sc[8], mn[8];
        std::memcpy(sc, scw, 8);
        std::memcpy(mn, mw, 8);
        const float* xk = x + 256 * k;
        const float* sk = xsum.data() + 8 * k;
        float msum = 0;  // Σ_g m_g · Σx_g; times dmin once
        for (int g = 0; g < 8; ++g) msum += static_cast<float>(mn[g]) * sk[g];
        ((k & 1) ? mins1 : mins0) += dmin * msum;
        for (int c = 0; c < 4; ++c) {  // groups 2c (low nibbles) and 2c + 1 (high) of qs[32c .. 32c + 32)
          const uint8_t* q = b + 16 + 32 * c;
          const float* xl = xk + 64 * c;
          const float* xh = xl + 32;
          iv raw = V::u8(q);
          f lo = V::mul(V::cvt(V::andi(raw, 15)), V::load(xl));
          f hi = V::mul(V::cvt(V::srl(raw, 4)), V::load(xh));
          for (int j = 1; j < 32 / L; ++j) {
            raw = V::u8(q + j * L);
            lo = V::fmadd(V::cvt(V::andi(raw, 15)), V::load(xl + j * L), lo);
            hi = V::fmadd(V::cvt(V::srl(raw, 4)), V::load(xh + j * L), hi);
          }
          acc0 = V::fmadd(V::set1(d * static_cast<float>(sc[2 * c])), lo, acc0);
          acc1 = V::fmadd(V::set1(d * static_cast<float>(sc[2 * c + 1])), hi, acc1);
        }
      }
      y[r] = V::hsum(V::add(acc0, acc1)) - (mins0 + mins1);
    }
  }

  static void matvec_q6_k(const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t kBytes = 210;
    const int64_t nb = cols / 256;
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* b = W + r * nb * kBytes;
      f acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
      for (int64_t k = 0; k < nb; ++k, b += kBytes) {
        ahead(b, kBytes);
        const float d = V::f16(b + 208);
        for (int n = 0; n < 2; ++n)
          for (int g = 0; g < 4; ++g)        // 32 values e = 128n + 32g + l
            for (int l = 0; l < 32; l += L) {  // L divides 16: one scale per vector
              const int e = 128 * n + 32 * g + l;
              const f ds = V::set1(d * static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
              const iv lo = V::andi(V::srl(V::u8(b + 64 * n + 32 * (g & 1) + l), g < 2 ? 0 : 4), 15);
              const iv hi = V::sll(V::andi(V::srl(V::u8(b + 128 + 32 * n + l), 2 * g), 3), 4);
              const f w = V::mul(ds, V::cvt(V::subi(V::ori(lo, hi), 32)));
              acc[(l / L) & 3] = V::fmadd(w, V::load(x + 256 * k + e), acc[(l / L) & 3]);
            }
      }
      y[r] = V::hsum(V::add(V::add(acc[0], acc[1]), V::add(acc[2], acc[3])));
    }
  }

  static void matvec_blocks(DType t, const uint8_t* W, int64_t rows, int64_t cols, const float* x, float* y) {
    constexpr int64_t kPiece = 256;  // a multiple of every block
    alignas(64) float buf[kPiece];
    const int64_t row_bytes = dtype_row_bytes(t, cols);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* row = W + r * row_bytes;
      f a0 = V::zero(), a1 = V::zero();
      for (int64_t c0 = 0; c0 < cols; c0 += kPiece) {
        const int64_t m = std::min(kPiece, cols - c0);  // whole blocks of 32 or 256
        ahead(row + dtype_row_bytes(t, c0), dtype_row_bytes(t, m));
        to_float(t, row + dtype_row_bytes(t, c0), buf, static_cast<size_t>(m));
        for (int64_t j = 0; j < m; j += 2 * L) {
          a0 = V::fmadd(V::load(buf + j), V::load(x + c0 + j), a0);
          a1 = V::fmadd(V::load(buf + j + L), V::load(x + c0 + j + L), a1);
        }
      }
      y[r] = V::hsum(V::add(a0, a1));
    }
  }

  static void matvec_any(DType t, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
    const uint8_t* w = static_cast<const uint8_t*>(W);
    switch (t) {
      case DType::BF16:
        return matvec<DType::BF16>(W, rows, cols, x, y);
      case DType::F16:
        return matvec<DType::F16>(W, rows, cols, x, y);
      case DType::F32:
        return matvec<DType::F32>(W, rows, cols, x, y);
      case DType::Q8_0:
        return matvec_q8_0(w, rows, cols, x, y);
      case DType::Q4_K:
        return matvec_q4_k(w, rows, cols, x, y);
      case DType::Q6_K:
        return matvec_q6_k(w, rows, cols, x, y);
      default:
        return matvec_blocks(t, w, rows, cols, x, y);
    }
  }

  template <DType T>
  static void widen_t(const void* src, float* dst, int64_t n) {
    constexpr int64_t esz = T == DType::F32 ? 4 : 2;
    const uint8_t* p = static_cast<const uint8_t*>(src);
    int64_t i = 0;
    for (; i + L <= n; i += L) V::store(dst + i, V::template loadw<T>(p + i * esz));
    to_float(T, p + i * esz, dst + i, static_cast<size_t>(n - i));
  }

  static void widen(DType t, const void* src, float* dst, int64_t n) {
    switch (t) {
      case DType::BF16:
        return widen_t<DType::BF16>(src, dst, n);
      case DType::F16:
        return widen_t<DType::F16>(src, dst, n);
      case DType::F32:
        return widen_t<DType::F32>(src, dst, n);
      default:  // a block type: ggml's scalar dequantisation (bit-exact)
        return to_float(t, src, dst, static_cast<size_t>(n));
    }
  }

  static float dot(const float* a, const float* b, int64_t n) {
    f s0 = V::zero(), s1 = V::zero();
    int64_t i = 0;
    for (; i + 2 * L <= n; i += 2 * L) {
      s0 = V::fmadd(V::load(a + i), V::load(b + i), s0);
      s1 = V::fmadd(V::load(a + i + L), V::load(b + i + L), s1);
    }
    if (i + L <= n) {
      s0 = V::fmadd(V::load(a + i), V::load(b + i), s0);
      i += L;
    }
    float tail = 0;
    for (; i < n; ++i) tail += a[i] * b[i];
    return V::hsum(V::add(s0, s1)) + tail;
  }

  static void axpy(float a, const float* x, float* y, int64_t n) {
    const f av = V::set1(a);
    int64_t i = 0;
    for (; i + L <= n; i += L) V::store(y + i, V::fmadd(av, V::load(x + i), V::load(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
  }

  static void dot_rows(const float* q, const float* K, int64_t ldk, int64_t m, int64_t n, float scale, float* z) {
    for (int64_t j = 0; j < m; ++j) z[j] = dot(q, K + j * ldk, n) * scale;
  }

  static void axpy_rows(const float* p, const float* Vr, int64_t ldv, int64_t m, int64_t n, float* o) {
    int64_t c = 0;
    for (; c + L <= n; c += L) {  // one vector of o at a time, kept in a register over all rows
      f acc = V::load(o + c);
      for (int64_t j = 0; j < m; ++j) acc = V::fmadd(V::set1(p[j]), V::load(Vr + j * ldv + c), acc);
      V::store(o + c, acc);
    }
    for (; c < n; ++c)
      for (int64_t j = 0; j < m; ++j) o[c] += p[j] * Vr[j * ldv + c];
  }

  static f silu(f v) { return V::div(v, V::add(V::set1(1.0f), exp(V::sub(V::zero(), v)))); }

  // x[i] = op(x[i]) (and of y[i], read only) for i < n, L lanes at a time; the last n % L elements
  // go through the same vector code in a zero-padded buffer, so an element's value never depends on
  // where a call's range began or ended: the pool may split a range anywhere (a Mamba layer's
  // convolution runs on whatever rows of in_proj a thread just wrote).
  template <class Op>
  static void lanes(float* x, const float* y, int64_t n) {
    int64_t i = 0;
    for (; i + L <= n; i += L) V::store(x + i, Op::op(V::load(x + i), y ? V::load(y + i) : V::zero()));
    if (i == n) return;
    alignas(64) float tx[L] = {}, ty[L] = {};
    for (int64_t j = i; j < n; ++j) {
      tx[j - i] = x[j];
      ty[j - i] = y ? y[j] : 0.0f;
    }
    V::store(tx, Op::op(V::load(tx), V::load(ty)));
    for (int64_t j = i; j < n; ++j) x[j] = tx[j - i];
  }

  // The element-wise operations of lanes (structs, not lambdas: a lambda's body would not get this
  // file's target options).
  struct SiluMul {
    static f op(f a, f b) { return V::mul(silu(a), b); }
  };
  struct Silu {
    static f op(f a, f) { return silu(a); }
  };
  struct Exp {
    static f op(f a, f) { return exp(a); }
  };
  struct Softplus {
    static f op(f a, f) { return softplus_v(a); }
  };

  static void silu_mul(float* g, const float* u, int64_t n) { lanes<SiluMul>(g, u, n); }
  static void silu_inplace(float* x, int64_t n) { lanes<Silu>(x, nullptr, n); }
  static void exp_inplace(float* x, int64_t n) { lanes<Exp>(x, nullptr, n); }

  // softplus(v) = v > 20 ? v : log1p(exp(v)), as max(v, 0) + log1p(t) with t = exp(−|v|) in (0, 1]:
  // y = 1 + t rounded, log1p(t) = log(y) + (t − (y − 1))/y, log(y) = e·ln2 + 2·atanh((m − 1)/(m + 1))
  // with y = 2^e·m, m in [√½, √2), the atanh series to f^11 (|f| ≤ 0.172).
  static void softplus(float* x, int64_t n) { lanes<Softplus>(x, nullptr, n); }
  static f softplus_v(f v) {
    const f one = V::set1(1.0f), two = V::set1(2.0f);
    const f t = exp(V::sub(V::zero(), V::abs(v)));
    const f y = V::add(one, t);
    const f c = V::sub(t, V::sub(y, one));
    const f big = V::gt(y, V::set1(1.41421356237f));  // then e = 1, m = y/2
    const f m = V::blend(big, y, V::mul(y, V::set1(0.5f)));
    const f fr = V::div(V::sub(m, one), V::add(m, one));
    const f f2 = V::mul(fr, fr);
    f p = V::set1(1.0f / 11.0f);
    p = V::fmadd(p, f2, V::set1(1.0f / 9.0f));
    p = V::fmadd(p, f2, V::set1(1.0f / 7.0f));
    p = V::fmadd(p, f2, V::set1(1.0f / 5.0f));
    p = V::fmadd(p, f2, V::set1(1.0f / 3.0f));
    p = V::fmadd(p, f2, one);
    f lg = V::mul(V::mul(two, fr), p);                                       // log(m)
    lg = V::add(lg, V::blend(big, V::zero(), V::set1(0.693147180559945f)));  // + e·ln2
    const f r = V::add(V::max0(v), V::add(lg, V::div(c, y)));
    return V::blend(V::gt(v, V::set1(20.0f)), r, v);
  }

  // The scan with L channels in the lanes: the state and A are tiled (cpu_simd.h), so row n of a
  // tile is a vector of lanes, loaded and stored in place; every load of dt, u, z and store of out
  // is one contiguous vector; the sum over n keeps the reference's order.
  static void scan(const ScanArgs& a, int64_t d0, int64_t d1) {
    static_assert(kTile % L == 0, "a tile holds whole vectors");
    const int64_t N = a.N, Di = a.Di;
    const f nf = V::set1(static_cast<float>(N));
    const int64_t aligned = std::min(d1, (d0 + L - 1) / L * L);  // vectors start at multiples of L
    scan_portable(a, d0, aligned);
    int64_t d = aligned;
    for (; d + L <= d1; d += L) {
      float* hT = a.h + tile_index(d, 0, N);        // (N, ·) rows kTile apart, L lanes used
      const float* AT = a.A + tile_index(d, 0, N);  // (N, ·)
      const f Dv = V::load(a.D + d);
      for (int64_t s = 0; s < a.S; ++s) {
        const f delta = V::load(a.dt + s * Di + d), ud = V::load(a.u + s * Di + d);
        const float* B = a.B + s * N;
        const float* C = a.C + s * N;
        f acc = V::zero(), keep = V::zero();
        for (int64_t n = 0; n < N; ++n) {
          const f dA = exp(V::mul(delta, V::load(AT + n * kTile)));
          const f dBu = V::mul(V::mul(delta, V::set1(B[n])), ud);
          const f hn = V::fmadd(dA, V::load(hT + n * kTile), dBu);
          V::store(hT + n * kTile, hn);
          acc = V::fmadd(hn, V::set1(C[n]), acc);
          keep = V::add(keep, dA);
        }
        const f yv = V::fmadd(Dv, ud, acc);
        V::store(a.out + s * Di + d, V::mul(yv, silu(V::load(a.z + s * a.z_stride + d))));
        if (a.retained) V::store(a.retained + s * Di + d, V::div(keep, nf));
      }
    }
    scan_portable(a, d, d1);  // channels left over (fewer than L)
  }
};
