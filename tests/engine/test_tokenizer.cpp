// Tests of engine/tokenizer: loading tests/data/tiny_spm.model (see tests/data/README.md), encode /
// decode round trips, piece display (word mark, byte pieces, out-of-range ids), load failures as
// LoadError naming the file, and the --ids list parser.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl {
namespace {

const std::string kModel = std::string(HL_SOURCE_DIR) + "/tests/data/tiny_spm.model";

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(testing::TempDir()) / ("hl_tok_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(Tokenizer, Load_TinyModel_VocabAndSpecials) {
  auto t = Tokenizer::load(kModel);
  EXPECT_EQ(t->vocab_size(), 512);
  EXPECT_EQ(t->piece(0), "<|pad|>");
  EXPECT_EQ(t->piece(1), "<|startoftext|>");
  EXPECT_EQ(t->piece(2), "<|endoftext|>");
  EXPECT_EQ(t->piece(3), "<|unk|>");
}

TEST(Tokenizer, EncodeDecode_RoundTripsAsciiAndUtf8) {
  auto t = Tokenizer::load(kModel);
  for (const std::string s : {"Hey, how are you doing on this lovely evening?", "The river runs past the old mill.",
                              "x = 42; y = 65536", "na\xC3\xAFve caf\xC3\xA9 \xE2\x9C\x93"}) {
    const std::vector<int32_t> ids = t->encode(s);
    ASSERT_FALSE(ids.empty()) << s;
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 512);
    }
    EXPECT_EQ(t->decode(ids), s);
  }
  EXPECT_TRUE(t->encode("").empty());
}

TEST(Tokenizer, Encode_NoBosAdded) {
  auto t = Tokenizer::load(kModel);
  const auto ids = t->encode("the town");
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids.front(), 1);
}

TEST(Tokenizer, Piece_WordMarkShownAsSpace) {
  auto t = Tokenizer::load(kModel);
  const auto ids = t->encode("the river");
  std::string joined;
  for (int32_t id : ids) joined += t->piece(id);
  EXPECT_EQ(joined, " the river");  // '▁' → ' ' in every piece
  for (int32_t id : ids) EXPECT_EQ(t->piece(id).find("\xE2\x96\x81"), std::string::npos);
}

TEST(Tokenizer, Piece_BytePieces_ReadableOrHex) {
  auto t = Tokenizer::load(kModel);
  // Byte pieces are ids 4 + b (byte fallback, see tests/data/README.md).
  EXPECT_EQ(t->piece(4 + 0x0A), "\\n");
  EXPECT_EQ(t->piece(4 + 0x09), "\\t");
  EXPECT_EQ(t->piece(4 + 0xC3), "<0xC3>");
  EXPECT_EQ(t->piece(4 + 0x00), "<0x00>");
  // A printable byte piece (its letter may also be a learned piece elsewhere) shows the letter.
  EXPECT_EQ(t->piece(4 + 'A'), "A");
  // A non-ASCII character outside the learned pieces falls back to bytes.
  const auto ids = t->encode("\xC3\xBC");  // ü
  bool saw_byte = false;
  for (int32_t id : ids) saw_byte |= t->piece(id) == "<0xC3>";
  EXPECT_TRUE(saw_byte);
}

TEST(Tokenizer, OutOfRangeIds_ShownNotFatal) {
  auto t = Tokenizer::load(kModel);
  EXPECT_EQ(t->piece(512), "<id 512>");
  EXPECT_EQ(t->piece(-1), "<id -1>");
  const auto ids = t->encode("the town");
  std::vector<int32_t> with_bad = ids;
  with_bad.push_back(100000);
  with_bad.insert(with_bad.end(), ids.begin(), ids.end());
  EXPECT_EQ(t->decode(with_bad), "the town<id 100000> the town");
}

TEST(Tokenizer, Load_MissingFile_LoadErrorNamesFile) {
  const std::string path = temp_path("does_not_exist.model");
  try {
    Tokenizer::load(path);
    FAIL() << "no error";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, Load_GarbageAndTruncated_LoadError) {
  const std::string good = read_bytes(kModel);
  ASSERT_GT(good.size(), 1000u);
  const std::vector<std::string> bad = {std::string(), std::string("not a model at all\n"),
                                        good.substr(0, good.size() / 2), std::string(300, '\xff')};
  for (size_t k = 0; k < bad.size(); ++k) {
    const std::string path = temp_path("bad" + std::to_string(k) + ".model");
    write_bytes(path, bad[k]);
    try {
      Tokenizer::load(path);
      ADD_FAILURE() << "case " << k << ": no error";
    } catch (const LoadError& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    std::remove(path.c_str());
  }
}

TEST(Tokenizer, Load_OversizeFile_RefusedBeforeReading) {
  const std::string path = temp_path("huge.model");
  {
    std::ofstream f(path, std::ios::binary);
    f.seekp((int64_t{64} << 20) + 1);
    f.put('\0');
  }
  try {
    Tokenizer::load(path);
    FAIL() << "no error";
  } catch (const LoadError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("allowed at most"), std::string::npos) << m;
  }
  std::remove(path.c_str());
}

TEST(Tokenizer, Load_Directory_LoadError) {
  EXPECT_THROW(Tokenizer::load(testing::TempDir()), LoadError);
}

TEST(IdList, Parses_CommasAndSpaces) {
  EXPECT_EQ(parse_id_list("1, 2,3"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_id_list(" 7 "), (std::vector<int32_t>{7}));
  EXPECT_EQ(parse_id_list("0,2147483647"), (std::vector<int32_t>{0, 2147483647}));
  EXPECT_EQ(parse_id_list("\t4 ,\t5"), (std::vector<int32_t>{4, 5}));
}

TEST(IdList, Rejects_NamingTheBadItem) {
  struct Case {
    const char* text;
    const char* needle;
  };
  const Case cases[] = {
      {"", "item 1"},
      {"1,,2", "item 2"},
      {"1,2,", "item 3"},
      {"1,-2", "negative"},
      {"1,x", "'x'"},
      {"2147483648", "large"},
      {"99999999999999999999", "large"},
      {"1 2", "'1 2'"},
      {"+3", "'+3'"},
      {"1.5", "'1.5'"},
      {" , ", "item 1"},
  };
  for (const Case& c : cases) {
    try {
      parse_id_list(c.text);
      ADD_FAILURE() << "'" << c.text << "': no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << "'" << c.text << "': " << e.what();
    }
  }
}

}  // namespace
}  // namespace hl
