// The dequantize-only ggml formats (Q4_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS; engine/core/ggml_quant.h):
// 1. pseudo-random blocks from a seeded generator (the same generator as check_gguf.py's
//    dequant_only_input), dequantized and compared bit for bit, through SHA-256 digests of the float32
//    output, with tools/reference/gguf/ggml_quants.py, whose output equals ggml's own C
//    dequantize_row_* on these bytes (GGUF.md §4.3). Blocks 0..5 of each input are special: all
//    zero, fp16 scales of ±65504, the smallest subnormal and -0, +0, negative scales, a subnormal
//    maximum; the rest have random scales of magnitude 2^-5..2^3 and either sign.
// 2. hand-derived known answers for each type (the arithmetic is in the comments);
// 3. signed zeros of all-zero blocks, unaligned buffers, and the quantizer refusing the five.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/ggml_quant.h"
#include "engine/core/sha256.h"

namespace hl {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct MoreType {
  const char* name;
  uint32_t id;
  std::vector<int> halves;  // byte offsets of the fp16 fields of a block
  const char* input_digest;
  const char* output_digest;  // ggml's C (commit d99724f2) and ggml_quants.py
};

const MoreType kMoreTypes[] = {
    {"Q4_1", 3, {0, 2}, "a2cf9a2786322a636bf7781393e6ee4c", "448b043c2ce2b7b919a9e2cd8848bbe8"},
    {"Q2_K", 10, {80, 82}, "711c63a5bb3ee0a55e9d87056d61d722", "5889c05226018067474210ba21105225"},
    {"Q3_K", 11, {108}, "1d39b73a34c762fa4cf424275b194f92", "cac573dad4a53c50eb423221bb0ca78e"},
    {"IQ4_NL", 20, {0}, "aa33ff6b6f7770bb76e17bd95cab4ab9", "07cd48128b04b57f1c5e9a79a0364e53"},
    {"IQ4_XS", 23, {0}, "d877c7833808928ca05c0a3170dff4bb", "ce2c9163439fcfb283fbb4d996b1506b"},
};

// check_gguf.py's dequant_only_input: a 64-bit LCG (Knuth's MMIX constants), each draw its top 31
// bits; a block is `block_bytes` draws (low byte each), then its fp16 fields in order: block b < 6
// takes kSpecial[b] (block 0 is then zeroed whole), later blocks draw sign, exponent 10..17 and
// mantissa, in that order.
std::vector<uint8_t> more_input(const MoreType& t, int nblocks) {
  static const uint16_t kSpecial[6][2] = {{0, 0},           {0x7BFF, 0xFBFF}, {0x0001, 0x8000},
                                          {0x0000, 0x0000}, {0xBC00, 0x3C00}, {0x8400, 0x03FF}};
  uint64_t s = 12345 + t.id;
  auto next = [&s]() -> uint32_t {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  };
  const int64_t size = ggml_block_format(t.id)->block_bytes;
  std::vector<uint8_t> out;
  for (int b = 0; b < nblocks; ++b) {
    std::vector<uint8_t> blk(static_cast<size_t>(size));
    for (auto& v : blk) v = static_cast<uint8_t>(next() & 0xFF);
    for (size_t k = 0; k < t.halves.size(); ++k) {
      uint16_t h;
      if (b < 6) {
        h = kSpecial[b][k];
      } else {
        const uint32_t sign = next() & 1;
        const uint32_t expo = 10 + next() % 8;
        const uint32_t mant = next() & 0x3FF;
        h = static_cast<uint16_t>((sign << 15) | (expo << 10) | mant);
      }
      std::memcpy(blk.data() + t.halves[k], &h, 2);
    }
    if (b == 0) std::fill(blk.begin(), blk.end(), 0);
    out.insert(out.end(), blk.begin(), blk.end());
  }
  return out;
}

std::vector<float> dequantize(uint32_t type, const std::vector<uint8_t>& raw) {
  const GgmlBlockFormat* f = ggml_block_format(type);
  const int64_t n = static_cast<int64_t>(raw.size()) / f->block_bytes * f->block;
  std::vector<float> y(static_cast<size_t>(n));
  ggml_dequantize_row(type, raw.data(), y.data(), n);
  return y;
}

TEST(GgmlQuantMore, PseudoRandomBlocksBitEqualToGgml) {
  for (const MoreType& t : kMoreTypes) {
    SCOPED_TRACE(t.name);
    const std::vector<uint8_t> raw = more_input(t, 16);
    ASSERT_EQ(sha256_hex(raw.data(), raw.size()).substr(0, 32), t.input_digest);
    const std::vector<float> y = dequantize(t.id, raw);
    EXPECT_EQ(sha256_hex(y.data(), y.size() * 4).substr(0, 32), t.output_digest);
    // Any alignment: the same bytes one past an aligned address give the same bits.
    std::vector<uint8_t> shifted(raw.size() + 1);
    std::memcpy(shifted.data() + 1, raw.data(), raw.size());
    std::vector<float> y2(y.size());
    ggml_dequantize_row(t.id, shifted.data() + 1, y2.data(), static_cast<int64_t>(y2.size()));
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), y.size() * 4), 0);
  }
}

TEST(GgmlQuantMore, AllZeroBlockSignedZeros) {
  // Q4_1: 0*0 + 0 = +0; Q2_K: (0*0)*0 - 0*0 = +0; Q3_K: scale 0 - 32, dl = 0 * -32 = -0, code
  // 0 - 4 (high bit clear), -0 * -4 = +0; IQ4_NL: 0 * level[0] = 0 * -127 = -0; IQ4_XS: dl = -0 as
  // Q3_K, -0 * -127 = +0.
  const std::pair<uint32_t, uint32_t> expect[] = {
      {3, 0u}, {10, 0u}, {11, 0u}, {20, 0x80000000u}, {23, 0u}};
  for (const auto& [type, want] : expect) {
    const GgmlBlockFormat* f = ggml_block_format(type);
    const std::vector<uint8_t> raw(static_cast<size_t>(f->block_bytes), 0);
    for (float v : dequantize(type, raw)) ASSERT_EQ(bits(v), want) << f->name;
  }
}

TEST(GgmlQuantMore, KnownAnswersByHand) {
  {  // Q4_1: d = 1 (0x3C00), m = -8 (0xC800); qs[0] = 0x2F: y0 = 15*1 - 8 = 7, y16 = 2 - 8 = -6;
     // the other codes 0: -8.
    std::vector<uint8_t> b(20, 0);
    b[1] = 0x3C, b[3] = 0xC8, b[4] = 0x2F;
    const auto y = dequantize(3, b);
    EXPECT_EQ(y[0], 7.0f);
    EXPECT_EQ(y[16], -6.0f);
    EXPECT_EQ(y[1], -8.0f);
  }
  {  // Q2_K: d = 0.5 (0x3800 at 80), dmin = 1 (0x3C00 at 82). Code byte 0 = 0x1B: planes 3, 2, 1, 0.
     // y0: plane 0, scale byte 0 = 0x23 (scale 3, min 2): (0.5*3)*3 - 1*2 = 2.5.
     // y32: plane 1, scale byte 2 = 0x10: (0.5*0)*2 - 1*1 = -1. y64: plane 2, scale byte 4 = 0: +0.
     // y128: half 1 (code byte 32 = 0x02), plane 0, scale byte 8 = 0x0F: (0.5*15)*2 - 0 = 15.
    std::vector<uint8_t> b(84, 0);
    b[0] = 0x23, b[2] = 0x10, b[8] = 0x0F, b[16] = 0x1B, b[16 + 32] = 0x02, b[81] = 0x38, b[83] = 0x3C;
    const auto y = dequantize(10, b);
    EXPECT_EQ(y[0], 2.5f);
    EXPECT_EQ(y[32], -1.0f);
    EXPECT_EQ(bits(y[64]), 0u);
    EXPECT_EQ(y[128], 15.0f);
  }
  {  // Q3_K: d = 1 (0x3C00 at 108). Scale 0 = low nibble of byte 0 (1) | bits 0-1 of byte 8 (2) << 4
     // = 33 -> 1. y0: code byte 0 = 0x02, hmask byte 0 bit 0 set: 1 * 2 = 2. y1: code 3, bit clear:
     // 1 * (3 - 4) = -1. Scale 9 (half 1, plane 0, second 16) = high nibble of byte 1 (15) | bits
     // 4-5 of byte 9 (3) << 4 = 63 -> 31. y144: code byte 48 of the codes = 0x01, hmask byte 16 bit 4 set:
     // 31 * 1 = 31 (code byte 32 + 48 of the block); y145: code 0, bit clear: 31 * -4 = -124.
    std::vector<uint8_t> b(110, 0);
    b[0] = 0x01;                             // hmask: y0's high bit set, y1's clear
    b[32 + 0] = 0x02, b[32 + 1] = 0x03;      // codes, half 0
    b[32 + 48] = 0x01, b[16] = 0x10;         // code byte 48, hmask byte 16
    b[96 + 0] = 0x01, b[96 + 8] = 0x02;      // scale 0
    b[96 + 1] = 0xF0, b[96 + 9] = 0x30;      // scale 9
    b[109] = 0x3C;
    const auto y = dequantize(11, b);
    EXPECT_EQ(y[0], 2.0f);
    EXPECT_EQ(y[1], -1.0f);
    EXPECT_EQ(y[144], 31.0f);
    EXPECT_EQ(y[145], -124.0f);
  }
  {  // IQ4_NL: d = 0.5 (0x3800); qs[0] = 0xF0: y0 = 0.5 * level[0] = -63.5, y16 = 0.5 * level[15]
     // = 56.5; qs[1] = 0x08: y1 = 0.5 * 1 = 0.5, y17 = 0.5 * -127 = -63.5.
    std::vector<uint8_t> b(18, 0);
    b[1] = 0x38, b[2] = 0xF0, b[3] = 0x08;
    const auto y = dequantize(20, b);
    EXPECT_EQ(y[0], -63.5f);
    EXPECT_EQ(y[16], 56.5f);
    EXPECT_EQ(y[1], 0.5f);
    EXPECT_EQ(y[17], -63.5f);
  }
  {  // IQ4_XS: d = 2 (0x4000). Group 1: low nibble = high nibble of byte 4 (1), bits 2-3 of the u16
     // at 2 (0x0008 -> 2) -> 33 -> dl = 2 * 1 = 2; code byte 8 + 16 = 0x9B: y32 = 2 * level[11] = 76,
     // y48 = 2 * level[9] = 26. Group 0: scale 0 -> dl = 2 * -32 = -64; y0 = -64 * -127 = 8128.
    std::vector<uint8_t> b(136, 0);
    b[1] = 0x40, b[2] = 0x08, b[4] = 0x10, b[8 + 16] = 0x9B;
    const auto y = dequantize(23, b);
    EXPECT_EQ(y[32], 76.0f);
    EXPECT_EQ(y[48], 26.0f);
    EXPECT_EQ(y[0], 8128.0f);
  }
}

TEST(GgmlQuantMore, QuantizeRefusedNamingTheType) {
  float x[256] = {};
  uint8_t b[256] = {};
  for (const MoreType& t : kMoreTypes) {
    try {
      ggml_quantize_row(t.id, x, b, ggml_block_format(t.id)->block);
      ADD_FAILURE() << t.name << " quantized";
    } catch (const Error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(std::string("(") + t.name + ") is not supported"), std::string::npos) << w;
      const std::string allowed = w.substr(w.find("(allowed"));  // only the quantizable types
      EXPECT_NE(allowed.find("Q6_K"), std::string::npos) << w;
      EXPECT_EQ(allowed.find(t.name), std::string::npos) << w;
    }
  }
  EXPECT_EQ(ggml_row_bytes(3, 64), 40);
  EXPECT_EQ(ggml_row_bytes(10, 512), 168);
  EXPECT_EQ(ggml_row_bytes(11, 256), 110);
  EXPECT_EQ(ggml_row_bytes(20, 64), 36);
  EXPECT_EQ(ggml_row_bytes(23, 256), 136);
  EXPECT_EQ(ggml_row_bytes(23, 32), -1);
}

}  // namespace
}  // namespace hl
