// The int8 decode products on block weights (cpu_simd.h Kernels::matvec_x8, llama.cpp's path): the
// rounding of x to 8-bit blocks against a scalar transcription of ggml's quantisers, each ISA's
// integer kernels against the portable loop, the portable loop against the exact product of the
// dequantised blocks, the error against the fp32-activation product within its a-priori bound, and
// the choice between the two paths (Mat::fp32_activations, `--weights ...+fp32-activations`).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/error.h"
#include "engine/model/quantize.h"
#include "tests/engine/int8_test_util.h"

namespace hl {
namespace {

using cpu::simd::Isa;
using cpu::simd::Kernels;
using test::block_rows;
using test::decode_activations;

constexpr DType kX8[] = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_K, DType::Q5_K, DType::Q6_K};

std::vector<const Kernels*> every_isa() {
  std::vector<const Kernels*> out;
  for (Isa isa : {Isa::Portable, Isa::Avx2, Isa::Avx512})
    if (const Kernels* k = cpu::simd::kernels_for(isa)) out.push_back(k);
  return out;
}

// ggml's quantize_row_q8_0 as x86 runs it (arch/x86/quants.c): id = 127/amax, round to nearest even.
void ref_q8_0(const float* x, int64_t n, std::vector<float>& d, std::vector<int8_t>& q) {
  d.assign(static_cast<size_t>(n / 32), 0.0f);
  q.assign(static_cast<size_t>(n), 0);
  for (int64_t k = 0; k < n / 32; ++k) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * k + j]));
    d[static_cast<size_t>(k)] = amax / 127.0f;
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 32; ++j) q[static_cast<size_t>(32 * k + j)] = static_cast<int8_t>(std::nearbyint(x[32 * k + j] * id));
  }
}

// ggml's quantize_row_q8_K_ref: iscale = −127/(first value of largest |x|), nearest_int (ties to
// even), min(127, ·), d = 1/iscale, bsums per 16.
void ref_q8_k(const float* x, int64_t n, std::vector<float>& d, std::vector<int8_t>& q, std::vector<int16_t>& bs) {
  d.assign(static_cast<size_t>(n / 256), 0.0f);
  q.assign(static_cast<size_t>(n), 0);
  bs.assign(static_cast<size_t>(n / 16), 0);
  for (int64_t k = 0; k < n / 256; ++k) {
    const float* xb = x + 256 * k;
    float amax = 0, max = 0;
    for (int j = 0; j < 256; ++j)
      if (std::fabs(xb[j]) > amax) amax = std::fabs(xb[j]), max = xb[j];
    if (amax == 0) continue;
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j)
      q[static_cast<size_t>(256 * k + j)] = static_cast<int8_t>(std::min(127, static_cast<int>(std::nearbyint(iscale * xb[j]))));
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += q[static_cast<size_t>(256 * k + 16 * j + i)];
      bs[static_cast<size_t>(16 * k + j)] = static_cast<int16_t>(s);
    }
    d[static_cast<size_t>(k)] = 1.0f / iscale;
  }
}

TEST(Int8Matvec, QuantiseX_Q8_0_EveryIsa_EqualsGgmlRounding) {
  for (int64_t n : {32, 160, 4096 + 32}) {
    const std::vector<float> x = decode_activations(n, 7 + static_cast<uint32_t>(n));
    std::vector<float> rd;
    std::vector<int8_t> rq;
    ref_q8_0(x.data(), n, rd, rq);
    if (n >= 128) {  // the ties went to even, the zero block is all zero with d = 0
      EXPECT_EQ(rq[96], 127);
      EXPECT_EQ(rq[97], 2);
      EXPECT_EQ(rq[98], -4);
      EXPECT_EQ(rq[99], 0);
      EXPECT_EQ(rd[1], 0.0f);
    }
    for (const Kernels* k : every_isa()) {
      SCOPED_TRACE(std::string(k->name) + " n=" + std::to_string(n));
      std::vector<float> d(rd.size(), -1.0f);
      std::vector<int8_t> q(rq.size(), 99);
      k->quantize_x_q8_0(x.data(), n, d.data(), q.data());
      EXPECT_EQ(0, std::memcmp(d.data(), rd.data(), d.size() * sizeof(float)));
      EXPECT_EQ(q, rq);
    }
  }
}

TEST(Int8Matvec, QuantiseX_Q8_K_EveryIsa_EqualsGgmlRef) {
  const int64_t n = 4 * 256;
  std::vector<float> x = decode_activations(n, 3);
  for (int j = 256; j < 512; ++j) x[static_cast<size_t>(j)] = 0.0f;  // block 1: zero
  x[600] = -1000.0f, x[700] = 1000.0f;  // block 2: the first of ±max decides the sign
  for (int j = 768; j < 1024; ++j) x[static_cast<size_t>(j)] = std::fabs(x[static_cast<size_t>(j)]) * 1e-30f;  // tiny
  std::vector<float> rd;
  std::vector<int8_t> rq;
  std::vector<int16_t> rb;
  ref_q8_k(x.data(), n, rd, rq, rb);
  EXPECT_EQ(rq[600], -127);  // −127, not −128 (ggml: "We need this change for IQ2_XXS")
  EXPECT_EQ(rq[700], 127);
  EXPECT_GT(rd[2], 0.0f);  // d = 1/iscale = −max/127 > 0 here (max = −1000)
  EXPECT_EQ(rd[1], 0.0f);
  for (const Kernels* k : every_isa()) {
    SCOPED_TRACE(k->name);
    std::vector<float> d(rd.size(), -1.0f);
    std::vector<int8_t> q(rq.size(), 99);
    std::vector<int16_t> b(rb.size(), 99);
    k->quantize_x_q8_k(x.data(), n, d.data(), q.data(), b.data());
    EXPECT_EQ(0, std::memcmp(d.data(), rd.data(), d.size() * sizeof(float)));
    EXPECT_EQ(q, rq);
    EXPECT_EQ(b, rb);
  }
}

struct Shape {
  int64_t rows, cols;
};

// Each ISA's integer kernels against the portable loop: the same integer sums, so within the fp32
// rounding of adding the blocks' scaled sums in another order: ≤ 2·nb terms, each at most the
// block's Σ|ŵ·x̂| (times a small factor for Q4_K's min offset), each addition off by 2^-24 relative:
// 1e-5·Σ|ŵ·x̂| leaves a margin of ≥ 10× for nb ≤ 64 (4096 + 32 = 129 blocks of 32 stays far below it
// in practice: the error grows as √nb). A wrong code, scale or offset is off by O(Σ|ŵ·x̂|/nb).
TEST(Int8Matvec, EveryIsa_MatchesPortable_AwkwardShapes) {
  const Kernels& ref = cpu::simd::portable();
  for (DType t : kX8) {
    const int64_t B = dtype_block(t);
    const std::vector<Shape> shapes = {{1, B}, {5, 3 * B}, {300, 2 * B}, {3, 16 * B}, {17, (B == 32 ? 129 : 5) * B}};
    for (const Shape& s : shapes)
      for (bool random_codes : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                     (random_codes ? " random codes" : ""));
        const std::vector<uint8_t> w = block_rows(t, s.rows, s.cols, 5 + static_cast<uint32_t>(s.cols), random_codes);
        const std::vector<float> x = decode_activations(s.cols, 9 + static_cast<uint32_t>(s.rows));
        std::vector<float> deq(static_cast<size_t>(s.rows * s.cols));
        to_float(t, w.data(), deq.data(), deq.size());
        // x̂, the rounded x the kernels multiply by (the portable quantiser, checked above).
        std::vector<float> xd(static_cast<size_t>(s.cols / 16)), xh(x.size());
        std::vector<int8_t> xq(x.size());
        std::vector<int16_t> xb(static_cast<size_t>(s.cols / 16));
        const int64_t xblock = dtype_block(t);  // x in Q8_0 blocks of 32 or Q8_K blocks of 256
        if (xblock == 32)
          ref.quantize_x_q8_0(x.data(), s.cols, xd.data(), xq.data());
        else
          ref.quantize_x_q8_k(x.data(), s.cols, xd.data(), xq.data(), xb.data());
        for (size_t c = 0; c < x.size(); ++c) xh[c] = xd[c / static_cast<size_t>(xblock)] * xq[c];
        std::vector<float> yp(static_cast<size_t>(s.rows));
        ref.matvec_x8(t, w.data(), s.rows, s.cols, x.data(), yp.data());
        std::vector<double> mag(yp.size());
        for (int64_t r = 0; r < s.rows; ++r) {
          double exact = 0;
          for (int64_t c = 0; c < s.cols; ++c) {
            const double p = double(deq[static_cast<size_t>(r * s.cols + c)]) * xh[static_cast<size_t>(c)];
            exact += p;
            mag[static_cast<size_t>(r)] += std::abs(p);
          }
          // The portable loop is the product of the dequantised blocks with x̂ (ŵ itself is rounded
          // once in fp32 by ggml's dequantisation: within the same bound).
          EXPECT_NEAR(yp[static_cast<size_t>(r)], exact, 1e-5 * mag[static_cast<size_t>(r)] + 1e-30) << "row " << r;
        }
        for (const Kernels* k : every_isa()) {
          if (k->isa == Isa::Portable) continue;
          SCOPED_TRACE(k->name);
          std::vector<float> y(yp.size(), -7.0f);
          k->matvec_x8(t, w.data(), s.rows, s.cols, x.data(), y.data());
          for (int64_t r = 0; r < s.rows; ++r)
            EXPECT_NEAR(y[static_cast<size_t>(r)], yp[static_cast<size_t>(r)], 1e-5 * mag[static_cast<size_t>(r)] + 1e-30)
                << "row " << r;
        }
      }
  }
}

// The int8 product against the fp32-activation one (matvec): y8 − y32 = Σ ŵ·(x̂ − x) + fp32 rounding,
// and |x̂ − x| ≤ |d|/2 per value of a block (round to nearest of x/d; the fp32 product x·(1/d) adds
// ≤ 2^-24 relative), so |y8 − y32| ≤ Σ |ŵ|·|d_block|/2 · (1 + 1e-6) + 1e-5·Σ|ŵ·x|. The bound is
// a worst case (every rounding error the same sign); independent rounding errors add as √cols, so
// for Gaussian weights the typical error is ~0.7/√cols of it (0.02 here). Checked: the bound holds,
// no row comes near it, and the paths do differ.
TEST(Int8Matvec, ErrorAgainstFp32Activations_WithinTheRoundingBound) {
  const int64_t rows = 64, cols = 1024;
  for (DType t : kX8)
    for (const Kernels* k : every_isa()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + k->name);
      const std::vector<uint8_t> w = block_rows(t, rows, cols, 21, false);
      const std::vector<float> x = decode_activations(cols, 22);
      std::vector<float> deq(static_cast<size_t>(rows * cols));
      to_float(t, w.data(), deq.data(), deq.size());
      const int64_t xblock = dtype_block(t);  // x in Q8_0 blocks of 32 or Q8_K blocks of 256
      std::vector<float> step(static_cast<size_t>(cols / xblock));  // |d| per block: max|x|/127
      for (size_t b = 0; b < step.size(); ++b) {
        float amax = 0;
        for (int64_t j = 0; j < xblock; ++j) amax = std::max(amax, std::fabs(x[b * static_cast<size_t>(xblock) + static_cast<size_t>(j)]));
        step[b] = amax / 127.0f;
      }
      std::vector<float> y8(static_cast<size_t>(rows)), y32(static_cast<size_t>(rows));
      k->matvec_x8(t, w.data(), rows, cols, x.data(), y8.data());
      k->matvec(t, w.data(), rows, cols, x.data(), y32.data());
      double worst_share = 0, diff2 = 0, norm2 = 0;
      int differ = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double bound = 0, mag = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double wv = std::abs(double(deq[static_cast<size_t>(r * cols + c)]));
          bound += wv * step[static_cast<size_t>(c / xblock)] / 2;
          mag += wv * std::abs(double(x[static_cast<size_t>(c)]));
        }
        bound = bound * (1 + 1e-6) + 1e-5 * mag;
        const double e = std::abs(double(y8[static_cast<size_t>(r)]) - y32[static_cast<size_t>(r)]);
        EXPECT_LE(e, bound) << "row " << r;
        worst_share = std::max(worst_share, e / bound);
        differ += e > 0;
        diff2 += e * e;
        norm2 += double(y32[static_cast<size_t>(r)]) * y32[static_cast<size_t>(r)];
      }
      EXPECT_GT(differ, rows / 2) << "the int8 path was not taken";
      // Independent rounding: far below the worst case (~0.02 typical; the worst of 64 rows ~3× that).
      EXPECT_LT(worst_share, 0.25);
      RecordProperty(std::string("rel_rms_") + dtype_name(t) + "_" + k->name, std::to_string(std::sqrt(diff2 / norm2)));
    }
}

// Formats without an int8 path multiply with x in fp32: matvec_x8 is matvec there, bit for bit.
TEST(Int8Matvec, OtherFormats_TakeTheFp32Path) {
  const int64_t rows = 9, cols = 512;
  const std::vector<float> x = decode_activations(cols, 4);
  for (DType t : {DType::Q5_1})
    for (const Kernels* k : every_isa()) {
      EXPECT_FALSE(cpu::simd::has_x8_path(t));
      const std::vector<uint8_t> w = block_rows(t, rows, cols, 8, false);
      std::vector<float> a(static_cast<size_t>(rows)), b(static_cast<size_t>(rows));
      k->matvec_x8(t, w.data(), rows, cols, x.data(), a.data());
      k->matvec(t, w.data(), rows, cols, x.data(), b.data());
      EXPECT_EQ(a, b) << dtype_name(t) << " " << k->name;
    }
}

// The decode linear picks the path from the matrix: int8 by default, fp32 with fp32_activations.
// Each row's sum does not depend on how the pool splits the rows, so these are exact.
TEST(Int8Matvec, DecodeLinear_FollowsTheMatsChoice) {
  const int64_t rows = 700, cols = 512;
  const std::vector<float> x = decode_activations(cols, 6);
  const Kernels& k = cpu::simd::kernels();
  for (DType t : kX8) {
    SCOPED_TRACE(dtype_name(t));
    const std::vector<uint8_t> w = block_rows(t, rows, cols, 10, false);
    Mat m;
    m.dtype = t, m.data = w.data(), m.rows = rows, m.cols = cols, m.name = "m";
    std::vector<float> y(static_cast<size_t>(rows)), want8(y.size()), want32(y.size());
    k.matvec_x8(t, w.data(), rows, cols, x.data(), want8.data());
    k.matvec(t, w.data(), rows, cols, x.data(), want32.data());
    EXPECT_NE(want8, want32);
    cpu::linear(m, x.data(), 1, y.data());
    EXPECT_EQ(y, want8);
    m.fp32_activations = true;
    cpu::linear(m, x.data(), 1, y.data());
    EXPECT_EQ(y, want32);
  }
}

// A row's y is the same bits whichever rows share its call: the kernels take rows in passes of
// 8, 4, 2 or 1 (AVX-512 Q4_K: 8, 4, 1) and the pool cuts a product anywhere, so one call over all
// rows must equal calls over odd pieces, on every ISA.
TEST(Int8Matvec, RowsInOddPieces_SameBitsAsOneCall) {
  const int64_t rows = 61, cols = 512;
  const std::vector<float> x = decode_activations(cols, 4);
  for (DType t : kX8) {
    const std::vector<uint8_t> w = block_rows(t, rows, cols, 12, true);
    const int64_t rb = dtype_row_bytes(t, cols);
    for (const Kernels* k : every_isa()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + k->name);
      std::vector<float> whole(static_cast<size_t>(rows)), pieces(whole.size(), -7.0f);
      k->matvec_x8(t, w.data(), rows, cols, x.data(), whole.data());
      int64_t r = 0;
      for (int64_t n : {1, 3, 8, 5, 13, 9, 4, 2, 7}) {  // 52 rows, then the last 9 in one call
        k->matvec_x8(t, w.data() + r * rb, n, cols, x.data(), pieces.data() + r);
        r += n;
      }
      k->matvec_x8(t, w.data() + r * rb, rows - r, cols, x.data(), pieces.data() + r);
      EXPECT_EQ(pieces, whole);
    }
  }
}

TEST(Int8Matvec, WeightsSpec_Fp32ActivationsSuffix) {
  bool head = false, fp32 = false;
  EXPECT_EQ(parse_weight_format("q4_k+head+fp32-activations", "--weights", &head, &fp32), DType::Q4_K);
  EXPECT_TRUE(head);
  EXPECT_TRUE(fp32);
  EXPECT_EQ(parse_weight_format("Q8_0+FP32-ACTIVATIONS", "--weights", &head, &fp32), DType::Q8_0);
  EXPECT_FALSE(head);
  EXPECT_TRUE(fp32);
  EXPECT_EQ(parse_weight_format("as-stored+fp32-activations", "--weights", &head, &fp32), std::nullopt);
  EXPECT_TRUE(fp32);
  EXPECT_EQ(parse_weight_format("q6_k", "--weights", &head, &fp32), DType::Q6_K);
  EXPECT_FALSE(fp32);
  EXPECT_THROW(parse_weight_format("q4_k+fp32-activations+head", "--weights", &head, &fp32), Error);
  EXPECT_THROW(parse_weight_format("+fp32-activations", "--weights", &head, &fp32), Error);
  EXPECT_THROW(parse_weight_format("q4_k+fp32-activations", "--weights", &head), Error);  // not offered there
}

// Each thread keeps the rounded x of its last product and reuses it for an x equal bit for bit: an x
// changed in place (the same buffer, as a decode step's) is rounded again, and the rounding of one
// block size is never taken for the other. Every result equals a product on a fresh copy of its x.
TEST(Int8Matvec, RoundedXReusedOnlyForTheSameValues) {
  const int64_t rows = 8, cols = 512;
  for (const Kernels* k : every_isa()) {
    SCOPED_TRACE(k->name);
    std::vector<float> x = decode_activations(cols, 3);
    auto product = [&](DType t, const std::vector<float>& v) {
      const std::vector<uint8_t> w = block_rows(t, rows, cols, 11, true);
      std::vector<float> y(static_cast<size_t>(rows));
      k->matvec_x8(t, w.data(), rows, cols, v.data(), y.data());
      return y;
    };
    auto fresh = [&](DType t) {
      const std::vector<float> copy = x;  // another buffer with the same values
      std::vector<float> other = decode_activations(cols, 99);
      (void)product(DType::Q8_0, other);  // and a different x in between
      (void)product(DType::Q4_K, other);
      return product(t, copy);
    };
    for (DType t : {DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
      SCOPED_TRACE(dtype_name(t));
      const std::vector<float> first = product(t, x);
      EXPECT_EQ(product(t, x), first);  // the same x again
      EXPECT_EQ(first, fresh(t));
      x[5] += 0.75f;  // changed in place
      const std::vector<float> changed = product(t, x);
      EXPECT_NE(changed, first);
      EXPECT_EQ(changed, fresh(t));
    }
    // Q8_0 (blocks of 32) then Q4_K (blocks of 256) on the very same x.
    (void)product(DType::Q8_0, x);
    EXPECT_EQ(product(DType::Q4_K, x), fresh(DType::Q4_K));
  }
}

}  // namespace
}  // namespace hl
