// Tests of engine/tokenizer/sp_model_check.h through Tokenizer::from_bytes: SentencePiece models
// built here from tests/data/tiny_spm.model plus appended protobuf fields (a later optional message
// merges into the earlier one, a later piece is one more piece). The two crash classes of issue 16 —
// a garbage precompiled_charsmap (segfault on the first encode) and a ~200 KB piece (stack overflow
// while loading) — and every other defect are one-line LoadErrors; a well-formed hand-built
// charsmap (A → B) is accepted and used.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/tokenizer/sp_model_check.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl {
namespace {

const std::string kTiny = std::string(HL_SOURCE_DIR) + "/tests/data/tiny_spm.model";

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string varint(uint64_t v) {
  std::string s;
  while (v >= 0x80) {
    s += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  return s + static_cast<char>(v);
}
std::string len_field(int num, const std::string& body) {
  return varint(static_cast<uint64_t>(num) << 3 | 2) + varint(body.size()) + body;
}
std::string varint_field(int num, uint64_t v) { return varint(static_cast<uint64_t>(num) << 3) + varint(v); }
std::string float_field(int num, float f) {
  std::string s = varint(static_cast<uint64_t>(num) << 3 | 5);
  s.append(reinterpret_cast<const char*>(&f), 4);
  return s;
}
// One more SentencePiece {piece, score, type} (ModelProto field 1).
std::string piece_entry(const std::string& text, float score = 0.0f, uint64_t type = 1) {
  return len_field(1, len_field(1, text) + float_field(2, score) + varint_field(3, type));
}
std::string normalizer_with(const std::string& charsmap) { return len_field(3, len_field(2, charsmap)); }

// A darts-clone double array of 768 units mapping the byte 'A' to the normalized string "B":
// root (unit 0) → base 256; child 256^'A' = 321 has a leaf at base 512 holding value 0.
struct Trie {
  std::vector<uint32_t> units = std::vector<uint32_t>(768, 0);
  std::string normalized = std::string("B\0", 2);
  Trie() {
    units[0] = 256u << 10;
    units[321] = 'A' | (1u << 8) | ((321u ^ 512u) << 10);
    units[512] = (1u << 31) | 0u;
  }
  std::string blob() const { return blob_sized(static_cast<uint32_t>(units.size() * 4)); }
  // The same bytes with another value in the leading trie-size field.
  std::string blob_sized(uint32_t n) const {
    std::string b(reinterpret_cast<const char*>(&n), 4);
    b.append(reinterpret_cast<const char*>(units.data()), units.size() * 4);
    return b + normalized;
  }
};

TEST(SpModelCheck, RealModels_Pass) {
  EXPECT_NO_THROW(check_sp_model(read_bytes(kTiny), "tiny"));
  // The demo models carry sentencepiece's NFKC charsmap (~240 KB, ~60k trie units).
  const std::string demo = read_bytes(std::string(HL_SOURCE_DIR) + "/resources/models/baseline/tokenizer.model");
  ASSERT_GT(demo.size(), 200000u);
  EXPECT_NO_THROW(check_sp_model(demo, "baseline"));
}

TEST(SpModelCheck, HandBuiltCharsmap_AcceptedAndApplied) {
  auto t = Tokenizer::from_bytes(read_bytes(kTiny) + normalizer_with(Trie().blob()), "a2b.model");
  EXPECT_EQ(t->decode(t->encode("AAA")), "BBB");  // every 'A' normalized to 'B' by the trie
  auto plain = Tokenizer::load(kTiny);
  EXPECT_EQ(plain->decode(plain->encode("AAA")), "AAA");
}

TEST(SpModelCheck, CrashClasses_BecomeOneLineLoadErrors) {
  const std::string tiny = read_bytes(kTiny);
  // 1. Garbage charsmap: libsentencepiece loads it and segfaults on the first encode.
  std::string garbage;
  const uint32_t trie = 1024;
  garbage.append(reinterpret_cast<const char*>(&trie), 4);
  for (uint32_t i = 0; i < 1024 + 64; ++i) garbage += static_cast<char>((i * 2654435761u) >> 13);
  // 2. One piece of 200 KB: the library's trie builder recurses once per byte and overflows the stack.
  const std::string long_piece = piece_entry(std::string(200000, 'a'));
  struct Case {
    std::string bytes;
    const char* needle;
  } cases[] = {{tiny + normalizer_with(garbage), "normalizer_spec.precompiled_charsmap: the trie node at unit 0"},
               {tiny + long_piece, "piece 512: the piece text is 200000 bytes, allowed at most 16384"}};
  for (const Case& c : cases) {
    try {
      auto t = Tokenizer::from_bytes(c.bytes, "crafted.model");
      (void)t->encode("Hello world \xC3\xA9 123");
      ADD_FAILURE() << c.needle << ": no error";
    } catch (const LoadError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("crafted.model: SentencePiece model: ", 0), 0u) << m;
      EXPECT_NE(m.find(c.needle), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos);
    }
  }
  // A 16 KiB piece (the limit) still loads and encodes.
  auto ok = Tokenizer::from_bytes(tiny + piece_entry(std::string(16384, 'b')), "big-piece.model");
  EXPECT_EQ(ok->vocab_size(), 513);
}

TEST(SpModelCheck, CorruptionTable_EachDefectItsOwnMessage) {
  const std::string tiny = read_bytes(kTiny);
  auto trie = [](auto edit) {
    Trie t;
    edit(t);
    return t.blob();
  };
  struct Case {
    const char* defect;
    std::string bytes;
    const char* needle;
  };
  const Case cases[] = {
      {"charsmap of 3 bytes", tiny + normalizer_with("abc"), "3 bytes, too short"},
      {"trie size 0", tiny + normalizer_with(Trie().blob_sized(0)), "trie size 0"},
      {"trie size not a multiple of 4", tiny + normalizer_with(Trie().blob_sized(3070)), "trie size 3070"},
      {"trie size past the blob", tiny + normalizer_with(Trie().blob_sized(1u << 20)), "trie size 1048576"},
      {"leaf past the normalized strings", tiny + normalizer_with(trie([](Trie& t) { t.units[512] = (1u << 31) | 7u; })),
       "points at byte 7 of the 2-byte normalized strings"},
      {"normalized string without NUL", tiny + normalizer_with(trie([](Trie& t) { t.normalized = "BC"; })),
       "points at byte 0 of the 2-byte"},
      {"normalized string not UTF-8", tiny + normalizer_with(trie([](Trie& t) { t.normalized = std::string("\xFF\0", 2); })),
       "starts no NUL-terminated UTF-8 string"},
      {"leaf unit outside the array", tiny + normalizer_with(trie([](Trie& t) { t.units[321] = 'A' | (1u << 8) | ((321u ^ 4096u) << 10); })),
       "the leaf of unit 321 is at unit 4096"},
      {"child block outside the array", tiny + normalizer_with(trie([](Trie& t) { t.units[321] = 'A' | ((321u ^ 900u) << 10); })),
       "the trie node at unit 321 points at units 768..1023"},
      {"denormalizer charsmap", tiny + len_field(5, len_field(2, "xyzw")), "denormalizer_spec.precompiled_charsmap: 4 bytes"},
      {"empty piece", tiny + piece_entry(""), "piece 512: the piece text is empty"},
      {"piece with NUL", tiny + piece_entry(std::string("a\0b", 3)), "contains a NUL byte"},
      {"piece not UTF-8", tiny + piece_entry("a\xC3"), "is not UTF-8 (byte 1)"},
      {"piece without text", tiny + len_field(1, float_field(2, 1.0f)), "piece 512: has no piece text"},
      {"NaN score", tiny + piece_entry("zz", std::nanf("")), "the score is not a finite number"},
      {"piece type 9", tiny + piece_entry("zz", 0.0f, 9), "type 9 (allowed 1..6)"},
      {"score as varint", tiny + len_field(1, len_field(1, "zz") + varint_field(2, 1)), "score (field 2) has wire type 0"},
      {"model_type 7", tiny + len_field(2, varint_field(3, 7)), "model_type 7"},
      {"length past the end", tiny + varint(1u << 3 | 2) + varint(1000) + "abc", "field 1 says 1000 bytes, only 3 remain"},
      {"truncated varint", tiny + std::string("\x08\xFF", 2), "truncated varint"},
      {"group wire type", tiny + varint(9u << 3 | 3), "wire type 3"},
      {"field number 0", std::string("\x02\x00", 2), "field number 0"},
      {"no pieces", len_field(2, varint_field(3, 1)), "no pieces"},
  };
  for (const Case& c : cases) {
    try {
      (void)Tokenizer::from_bytes(c.bytes, "bad.model");
      ADD_FAILURE() << c.defect << ": no error";
    } catch (const LoadError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("bad.model: ", 0), 0u) << c.defect << ": " << m;
      EXPECT_NE(m.find(c.needle), std::string::npos) << c.defect << ": " << m;
    }
  }
}

}  // namespace
}  // namespace hl
