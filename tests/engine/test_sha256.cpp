// SHA-256 against the FIPS 180-4 / NIST example vectors, and streaming in odd chunks equal to one shot.
#include <algorithm>
#include <string>
#include <utility>

#include "engine/core/sha256.h"
#include "test_util.h"

using namespace hl;

TEST(Sha256, FipsVectors) {
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::string m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";  // 448 bits: padding spills a block
  EXPECT_EQ(sha256_hex(m.data(), m.size()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, MillionA_StreamedInOddChunks) {
  std::string a(1000000, 'a');
  const char* expect = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(sha256_hex(a.data(), a.size()), expect);
  Sha256 s;
  size_t pos = 0, step = 1;
  while (pos < a.size()) {
    size_t n = std::min(step, a.size() - pos);
    s.update(a.data() + pos, n);
    pos += n;
    step = step * 3 % 257 + 1;
  }
  EXPECT_EQ(s.hex_digest(), expect);
}

// Expected digests of n bytes of 'q' from Python's hashlib (an independent implementation).
TEST(Sha256, LengthsAroundBlockBoundary) {
  const std::pair<size_t, const char*> cases[] = {
      {55, "85528b5baff5639cb8e7daca79d085ac29ac0978e873ed7527158616b2b6c379"},
      {56, "f8ce2f8d6990c639668fe404262f35ed72d8bb145ad6bae786af7284447386df"},
      {57, "243be04ce55d66163de2c19e9a13edbcea43775ecd0c28047f30338ea24a15af"},
      {63, "9b49777003a4143d8c3f4d3002eb631c6bda8b030a3ccc87f8a21d5f61c89e87"},
      {64, "ee8e658590c9a5e119400a774415a01db104de1ee6e2c29ec69aa73ef46544d2"},
      {65, "2b6c3f7f12b1b12fc5409626dc4e5302d8d37082cbeddea7755eac43aba039c8"},
      {119, "c8bc8a6e9626586bb888ad131d44ed2bd37fc608e902904ade3c566c4208e6ca"},
      {120, "77a2d49d72a11e41678c51f8f0cb67f5cb570f30370c3aeffe266a0d1ee43209"},
      {128, "652713bcb795a6978fa84aa8d071d13e9ee581a8e716e8ab18daa49d1e920360"}};
  std::string x(200, 'q');
  for (const auto& [n, expect] : cases) {
    EXPECT_EQ(sha256_hex(x.data(), n), expect) << n;
    Sha256 s;
    s.update(x.data(), n / 2);
    s.update(x.data() + n / 2, n - n / 2);
    EXPECT_EQ(s.hex_digest(), expect) << n << " (two parts)";
  }
}
