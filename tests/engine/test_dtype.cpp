// binary16 and bfloat16 conversions of engine/core/dtype.cpp: exact values (subnormals, overflow,
// round-to-nearest-even ties, inf/nan), exhaustive round trips, and a nearest-value check against an
// independent search over neighbouring representable values.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/core/dtype.h"
#include "test_util.h"

using namespace hl;

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

TEST(DType, NamesRoundTrip) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    auto back = dtype_from_name(dtype_name(t));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, t);
  }
  EXPECT_FALSE(dtype_from_name("F64").has_value());
  EXPECT_FALSE(dtype_from_name("f32").has_value());
}

TEST(DType, F16_ExactValues) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(float_to_f16(0.0f), 0x0000);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);
}

TEST(DType, F16_RoundsToNearestEven) {
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);                          // tie → even (down)
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);                      // tie → even (up)
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);  // above tie
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: tie → 0
  EXPECT_EQ(float_to_f16(std::ldexp(1.5f, -25)), 0x0001);  // above the tie
  EXPECT_EQ(float_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp: tie → even (2)
  EXPECT_EQ(float_to_f16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 ulp: tie → even (2)
  EXPECT_EQ(float_to_f16(65519.0f), 0x7bff);               // below the overflow tie
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);               // tie at the top rounds to inf
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)), 0x0400);  // subnormal rounds up to normal
}

TEST(DType, F16_InfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(float_to_f16(inf), 0x7c00);
  EXPECT_EQ(float_to_f16(-inf), 0xfc00);
  EXPECT_EQ(float_to_f16(1e10f), 0x7c00);
  uint16_t n = float_to_f16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(n & 0x7c00, 0x7c00);
  EXPECT_NE(n & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7c01)));
  EXPECT_EQ(f16_to_float(0x7c00), inf);
  EXPECT_EQ(f16_to_float(0xfc00), -inf);
}

TEST(DType, F16_AllValuesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_float(static_cast<uint16_t>(h));
    uint16_t back = float_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(back))) << std::hex << h;
    } else {
      ASSERT_EQ(back, h) << std::hex << "0x" << h << " -> " << f;
    }
  }
}

// Independent check: the result is the representable value nearest to x, ties to the even pattern.
TEST(DType, F16_NearestOfNeighbours) {
  std::mt19937 rng(99);
  for (int i = 0; i < 200000; ++i) {
    float x = from_bits((rng() & 0x7fffffffu) % 0x47800000u);  // [0, 65536)
    uint16_t r = float_to_f16(x);
    double err = std::fabs(static_cast<double>(f16_to_float(r)) - x);
    for (int d : {-1, 1}) {
      int nb = static_cast<int>(r) + d;
      if (nb < 0 || nb > 0x7c00) continue;
      double e2 = std::fabs(static_cast<double>(f16_to_float(static_cast<uint16_t>(nb))) - x);
      ASSERT_TRUE(err < e2 || (err == e2 && (r & 1) == 0)) << "x=" << x << " got 0x" << std::hex << r;
    }
  }
}

TEST(DType, BF16_ExactValuesAndRounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie → even (down)
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie → even (up)
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(float_to_bf16(from_bits(0x00010000u)), 0x0001);  // subnormal kept
  EXPECT_EQ(float_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // FLT_MAX rounds to inf
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  uint16_t n = float_to_bf16(from_bits(0x7f800001u));  // NaN with a payload only in the low bits
  EXPECT_TRUE(std::isnan(bf16_to_float(n)));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0x0001), from_bits(0x00010000u));
}

TEST(DType, BF16_AllValuesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_float(static_cast<uint16_t>(h));
    uint16_t back = float_to_bf16(f);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(bf16_to_float(back)));
    else
      ASSERT_EQ(back, h) << std::hex << h;
  }
}

TEST(DType, ArrayConversions) {
  float src[5] = {1.0f, -0.5f, 3.25f, 0.0f, 100.0f};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    std::vector<uint8_t> buf(5 * dtype_size(t));
    from_float(t, src, buf.data(), 5);
    float back[5];
    to_float(t, buf.data(), back, 5);
    for (int i = 0; i < 5; ++i) {
      float expect = (t == DType::I32 || t == DType::I64) ? std::trunc(src[i]) : src[i];
      EXPECT_EQ(back[i], expect) << dtype_name(t) << " " << i;
    }
  }
}
