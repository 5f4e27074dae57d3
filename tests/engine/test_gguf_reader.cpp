// The GGUF reader against the fixtures of tests/data/gguf (made by the independent Python reference):
// every file of the corruption table refused by the same check with the same one-line message, the
// valid files and splits read with the metadata and tensor table the reference wrote, and hostile
// edits of a valid file (every truncation, every header byte flipped) refused without a crash.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/io/gguf.h"

namespace hl {
namespace {

const std::string kDir = HL_GGUF_FIXTURES;

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

TEST(GgufReader, CorruptionTableRefusedWithTheReferenceMessages) {
  std::ifstream in(kDir + "/corrupt/table.json");
  ASSERT_TRUE(in) << "fixtures not unpacked in " << kDir;
  const nlohmann::json table = nlohmann::json::parse(in);
  ASSERT_EQ(table.size(), 45u);
  for (const auto& c : table) {
    const std::string path = kDir + "/corrupt/" + c["file"].get<std::string>();
    const std::string dir = path.substr(0, path.rfind('/'));
    const std::string want = replace_all(replace_all(c["message"].get<std::string>(), "{file}", path), "{dir}", dir);
    try {
      GgufModelFiles::open(path);
      ADD_FAILURE() << c["file"] << " was accepted (expected " << c["code"] << ")";
    } catch (const GgufError& e) {
      EXPECT_EQ(e.code(), c["code"].get<std::string>()) << c["file"];
      EXPECT_EQ(std::string(e.what()), want) << c["file"];
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

TEST(GgufReader, QuantVectorsHeaderAndTensorTable) {
  GgufFile f = GgufFile::open(kDir + "/quant_vectors.gguf");
  EXPECT_TRUE(f.version() == 2 || f.version() == 3);
  EXPECT_EQ(f.alignment(), 32u);
  const GgufTensor* src = f.find("src");
  ASSERT_NE(src, nullptr);
  EXPECT_EQ(src->type, static_cast<uint32_t>(GgmlType::F32));
  EXPECT_EQ(src->ne, (std::vector<int64_t>{256, 4}));
  EXPECT_EQ(src->nbytes, 256u * 4 * 4);
  const std::pair<const char*, GgmlType> quants[] = {{"Q8_0", GgmlType::Q8_0}, {"Q4_0", GgmlType::Q4_0}, {"Q5_0", GgmlType::Q5_0},
                                                     {"Q5_1", GgmlType::Q5_1}, {"Q4_K", GgmlType::Q4_K}, {"Q5_K", GgmlType::Q5_K},
                                                     {"Q6_K", GgmlType::Q6_K}};
  for (const auto& [name, type] : quants) {
    const GgufTensor* t = f.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->type, static_cast<uint32_t>(type)) << name;
    EXPECT_EQ(t->ne, src->ne) << name;
    const GgmlTypeInfo* info = ggml_type_info(t->type);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(t->nbytes, static_cast<uint64_t>(256 / info->block * info->type_size * 4)) << name;
    EXPECT_EQ(ggml_type_name(t->type), name);
    ASSERT_NE(f.find(std::string(name) + ".deq"), nullptr) << name;
    EXPECT_EQ((t->data - f.mapping()->data() - f.data_start()) % f.alignment(), 0u);
  }
  // Every tensor's bytes lie inside the file.
  for (const GgufTensor& t : f.tensors()) {
    EXPECT_GE(t.data, f.mapping()->data() + f.data_start());
    EXPECT_LE(t.data + t.nbytes, f.mapping()->data() + f.mapping()->size());
  }
}

TEST(GgufReader, ModelMetadataIsTyped) {
  GgufModelFiles m = GgufModelFiles::open(kDir + "/jamba-gqa_basic-Q4_K_M.gguf", FileAccess::Read);
  ASSERT_EQ(m.shards().size(), 1u);
  const GgufValue* arch = m.find_value("general.architecture");
  ASSERT_NE(arch, nullptr);
  EXPECT_EQ(arch->type, GgufValueType::STRING);
  EXPECT_EQ(arch->s, "jamba");
  const GgufValue* layers = m.find_value("jamba.block_count");
  ASSERT_NE(layers, nullptr);
  EXPECT_TRUE(layers->is_int());
  const GgufValue* kv = m.find_value("jamba.attention.head_count_kv");
  ASSERT_NE(kv, nullptr);
  if (kv->is_array()) {
    EXPECT_TRUE(kv->is_int_array());
    EXPECT_EQ(static_cast<int64_t>(kv->ints.size()), layers->i);
  }
  const GgufValue* tokens = m.find_value("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->elem, GgufValueType::STRING);
  EXPECT_EQ(tokens->strings.size(), 96u);
  const GgufValue* eps = m.find_value("jamba.attention.layer_norm_rms_epsilon");
  ASSERT_NE(eps, nullptr);
  EXPECT_TRUE(eps->is_float());
  ASSERT_NE(m.find("token_embd.weight"), nullptr);
  EXPECT_GT(m.total_tensor_bytes(), 0u);
}

TEST(GgufReader, SplitOpensFromAnyShardWithTheSameTensors) {
  std::vector<std::string> names;
  for (int k = 1; k <= 3; ++k) {
    const std::string path = kDir + "/jamba-dense_no_moe-Q8_0-0000" + std::to_string(k) + "-of-00003.gguf";
    GgufModelFiles m = GgufModelFiles::open(path);
    ASSERT_EQ(m.shards().size(), 3u);
    EXPECT_NE(m.first().path().find("00001-of-00003"), std::string::npos);
    EXPECT_NE(m.find_value("jamba.block_count"), nullptr);  // metadata from shard 1 whichever was opened
    std::vector<std::string> here;
    for (const GgufTensor* t : m.all_tensors()) here.push_back(t->name);
    EXPECT_EQ(static_cast<int64_t>(here.size()), m.find_value("split.tensors.count")->i);
    if (names.empty()) names = here;
    EXPECT_EQ(here, names);
    ASSERT_NE(m.find("output_norm.weight"), nullptr);
  }
}

// Every truncation of a valid file is refused with a GgufError (an overrun is caught by the checks, not
// by luck: the sanitizer lane runs this test).
TEST(GgufReader, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = read_bytes(kDir + "/jamba-dense_no_moe-Q8_0-00002-of-00003.gguf");
  ASSERT_GT(bytes.size(), 64u);
  const GgufFile whole = GgufFile::parse(bytes.data(), bytes.size(), "shard2");
  uint64_t data_end = whole.data_start();
  for (const GgufTensor& t : whole.tensors()) data_end = std::max<uint64_t>(data_end, whole.data_start() + t.offset + t.nbytes);
  // Every cut inside the header; inside the data every 61st (the data checks are by range).
  for (size_t n = 0; n < data_end; n += n < whole.data_start() ? 1 : 61) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
    EXPECT_THROW(GgufFile::parse(cut.data(), cut.size(), "cut"), GgufError) << n;
  }
}

// Flipping any byte of the header (metadata and tensor infos) either still parses to a file whose
// tensors lie inside it or is refused: never a crash, a hang or an overrun.
TEST(GgufReader, HeaderByteFlipsNeverEscapeTheFile) {
  const std::vector<uint8_t> bytes = read_bytes(kDir + "/jamba-dense_no_moe-Q8_0-00003-of-00003.gguf");
  const GgufFile whole = GgufFile::parse(bytes.data(), bytes.size(), "shard3");
  int refused = 0;
  for (size_t at = 0; at < whole.data_start(); ++at) {
    for (uint8_t mask : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> b = bytes;
      b[at] ^= mask;
      try {
        const GgufFile f = GgufFile::parse(b.data(), b.size(), "flip");
        for (const GgufTensor& t : f.tensors()) {
          ASSERT_GE(t.data, b.data());
          ASSERT_LE(t.data + t.nbytes, b.data() + b.size());
        }
      } catch (const GgufError& e) {
        ++refused;
        EXPECT_EQ(std::string(e.what()).rfind("flip: ", 0), 0u);
      }
    }
  }
  EXPECT_GT(refused, 0);
}

TEST(GgufReader, TypeTable) {
  EXPECT_EQ(ggml_type_info(4), nullptr);
  EXPECT_EQ(ggml_type_info(31), nullptr);
  EXPECT_EQ(ggml_type_info(43), nullptr);
  EXPECT_EQ(ggml_type_info(14)->type_size, 210);
  EXPECT_EQ(ggml_type_info(30)->block, 1);
  EXPECT_EQ(ggml_type_name(99), "type 99");
}

TEST(GgufReader, MagicSniffing) {
  EXPECT_TRUE(is_gguf_file(kDir + "/quant_vectors.gguf"));
  EXPECT_FALSE(is_gguf_file(kDir + "/corrupt/table.json"));
  EXPECT_FALSE(is_gguf_file(kDir + "/no-such-file.gguf"));
}

}  // namespace
}  // namespace hl
