// safetensors reader corruption table (one test per defect of reliability-checklist.md, each with its
// own message), the writer → reader round trip (all dtypes, metadata, alignment), and a small
// deterministic mutation sweep: every truncation and byte flip throws LoadError or parses, never crashes.
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "engine/io/safetensors.h"
#include "test_util.h"

using namespace hl;
using hl::test::TempDir;

namespace {

// 8-byte little-endian length, the header text, then `data` bytes.
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes = 0) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

SafetensorsFile parse(const std::vector<uint8_t>& b) {
  return SafetensorsFile::parse(b.data(), b.size(), "t.safetensors");
}

// A two-tensor header: a = F32 (2,) at [0,8], b = F32 (3,) at [8,20].
const char* kTwo =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})";

}  // namespace

TEST(Safetensors, ValidTwoTensorHeader_Parses) {
  auto b = raw(kTwo, 20);
  SafetensorsFile f = parse(b);
  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorInfo* t = f.find("b");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, std::vector<int64_t>{3});
  EXPECT_EQ(t->numel(), 3);
  EXPECT_EQ(t->nbytes(), 12u);
  EXPECT_EQ(t->data, b.data() + 8 + std::strlen(kTwo) + 8);
  EXPECT_EQ(f.find("zzz"), nullptr);
}

TEST(Safetensors, WhitespaceAroundHeader_Accepted) {
  std::string h = std::string(" \n\t") + kTwo + "    \r\n";
  auto b = raw(h, 20);
  EXPECT_EQ(parse(b).tensors().size(), 2u);
}

TEST(Safetensors, NullMetadata_Accepted) {
  auto b = raw(R"({"__metadata__":null,"a":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})", 8);
  SafetensorsFile f = parse(b);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.find("a")->numel(), 1);  // a scalar: rank 0, one element
}

TEST(Safetensors, EmptyObjectNoData_Accepted) {
  auto b = raw("{}");
  EXPECT_TRUE(parse(b).tensors().empty());
}

// ---- corruption table -------------------------------------------------------------------------

TEST(SafetensorsCorrupt, FileShorterThanLengthField) {
  std::vector<uint8_t> b = {1, 0, 0};
  EXPECT_LOAD_ERROR(parse(b), "too short for the 8-byte header length");
}

TEST(SafetensorsCorrupt, TruncatedDataSection) {
  auto b = raw(kTwo, 20);
  b.resize(b.size() - 3);
  EXPECT_LOAD_ERROR(parse(b), "run past the end of the data section (17 bytes): the file is truncated");
}

TEST(SafetensorsCorrupt, HeaderLengthPastEndOfFile) {
  auto b = raw(kTwo, 20);
  b[0] = 0xff;
  b[1] = 0x7f;  // N = 32767 + ... > file size
  EXPECT_LOAD_ERROR(parse(b), "runs past the end of the file");
}

TEST(SafetensorsCorrupt, HeaderLengthAboveLimit) {
  auto b = raw("{}");
  uint64_t n = 100000001;
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  EXPECT_LOAD_ERROR(parse(b), "header length 100000001 exceeds the limit of 100000000 bytes");
  for (int i = 0; i < 8; ++i) b[i] = 0xff;  // 2^64 - 1: the checked add must not wrap
  EXPECT_LOAD_ERROR(parse(b), "exceeds the limit");
}

TEST(SafetensorsCorrupt, OverlappingOffsets) {
  auto b = raw(
      R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
      16);
  EXPECT_LOAD_ERROR(parse(b), "tensor 'b': data_offsets [8, 16] overlap the previous tensor 'a' ending at 12");
}

TEST(SafetensorsCorrupt, GapBetweenTensors) {
  auto b = raw(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
      20);
  EXPECT_LOAD_ERROR(parse(b), "leave a gap of 4 bytes after the previous tensor 'a' ending at 8");
}

TEST(SafetensorsCorrupt, FirstTensorNotAtZero) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12);
  EXPECT_LOAD_ERROR(parse(b), "the first tensor must begin at 0");
}

TEST(SafetensorsCorrupt, TrailingBytes) {
  auto b = raw(kTwo, 23);
  EXPECT_LOAD_ERROR(parse(b), "3 trailing bytes after the last tensor");
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  auto b = raw(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8);
  EXPECT_LOAD_ERROR(parse(b), "tensor 'a': dtype 'F64' is not supported (supported: F32, F16, BF16, I32, I64)");
  auto c = raw(R"({"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})", 1);
  EXPECT_LOAD_ERROR(parse(c), "dtype 'I8' is not supported");
}

TEST(SafetensorsCorrupt, ShapeDisagreesWithOffsets) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}})", 12);
  EXPECT_LOAD_ERROR(parse(b), "data_offsets [0, 12] hold 12 bytes, but shape (2, 3) of F32 needs 24 bytes");
}

TEST(SafetensorsCorrupt, EndBeforeBegin) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8);
  EXPECT_LOAD_ERROR(parse(b), "data_offsets [8, 0] end before they begin");
}

TEST(SafetensorsCorrupt, NegativeShape) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[-3],"data_offsets":[0,0]}})");
  EXPECT_LOAD_ERROR(parse(b), "field 'shape' holds the negative value -3");
}

TEST(SafetensorsCorrupt, NegativeOffset) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[-1,0]}})");
  EXPECT_LOAD_ERROR(parse(b), "field 'data_offsets' holds the negative value -1");
}

TEST(SafetensorsCorrupt, NonIntegerShape) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,0]}})");
  EXPECT_LOAD_ERROR(parse(b), "field 'shape' holds 2.5");
}

TEST(SafetensorsCorrupt, RankAboveEight) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", 4);
  EXPECT_LOAD_ERROR(parse(b), "rank 9 exceeds the maximum of 8");
}

TEST(SafetensorsCorrupt, ElementCountOverflow) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,0]}})");
  EXPECT_LOAD_ERROR(parse(b), "has too many elements (overflow)");
  auto c = raw(R"({"a":{"dtype":"I64","shape":[4611686018427387904],"data_offsets":[0,0]}})");
  EXPECT_LOAD_ERROR(parse(c), "overflows the byte count");
}

TEST(SafetensorsCorrupt, UnknownTensorField) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"quant":"q4"}})", 4);
  EXPECT_LOAD_ERROR(parse(b), "tensor 'a': unknown field 'quant' (allowed: dtype, shape, data_offsets)");
}

TEST(SafetensorsCorrupt, MissingTensorField) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[1]}})", 4);
  EXPECT_LOAD_ERROR(parse(b), "tensor 'a': missing field 'data_offsets'");
}

TEST(SafetensorsCorrupt, RepeatedTensorField) {
  auto b = raw(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4);
  EXPECT_LOAD_ERROR(parse(b), "tensor 'a': field 'dtype' appears twice");
}

TEST(SafetensorsCorrupt, OffsetsNotAPair) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", 4);
  EXPECT_LOAD_ERROR(parse(b), "data_offsets must hold exactly 2 integers [begin, end], got 3");
}

TEST(SafetensorsCorrupt, WrongFieldTypes) {
  EXPECT_LOAD_ERROR(parse(raw(R"({"a":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", 4)),
                    "field 'dtype' must be a string, got a number");
  EXPECT_LOAD_ERROR(parse(raw(R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", 4)),
                    "field 'shape' must be an array of non-negative integers, got a string");
  EXPECT_LOAD_ERROR(parse(raw(R"({"a":[1,2]})")), "tensor 'a': entry must be an object");
}

TEST(SafetensorsCorrupt, DuplicateTensorName) {
  // nlohmann::json would silently keep the second entry; the streaming parser must see both.
  auto b = raw(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8);
  EXPECT_LOAD_ERROR(parse(b), "duplicate tensor name 'a'");
}

TEST(SafetensorsCorrupt, InvalidJson) {
  auto b = raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", 4);  // missing '}'
  EXPECT_LOAD_ERROR(parse(b), "header is not valid JSON");
  EXPECT_LOAD_ERROR(parse(raw("")), "header is not valid JSON");
  EXPECT_LOAD_ERROR(parse(raw("{} {}")), "header is not valid JSON");
}

TEST(SafetensorsCorrupt, NonObjectJson) {
  EXPECT_LOAD_ERROR(parse(raw("[1, 2]")), "header is not a JSON object (top level is an array)");
  EXPECT_LOAD_ERROR(parse(raw("\"x\"")), "header is not a JSON object (top level is a string)");
}

TEST(SafetensorsCorrupt, InvalidUtf8) {
  std::string h = std::string("{\"a\xC3\x28\":") + R"({"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  EXPECT_LOAD_ERROR(parse(raw(h)), "header is not valid UTF-8 (ill-formed byte sequence at header byte 3)");
  std::string overlong = "{\"\xC0\xAF\":1}";
  EXPECT_LOAD_ERROR(parse(raw(overlong)), "not valid UTF-8");
}

TEST(SafetensorsCorrupt, NestingTooDeep) {
  EXPECT_LOAD_ERROR(parse(raw(R"({"__metadata__":{"k":[[[1]]]}})")), "header JSON nesting depth exceeds 4");
  // Deep enough to overflow a recursive parser's stack: must still be a clean error.
  std::string deep = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_LOAD_ERROR(parse(raw(deep)), "nesting depth exceeds 4");
}

TEST(SafetensorsCorrupt, MetadataNotStringToString) {
  EXPECT_LOAD_ERROR(parse(raw(R"({"__metadata__":{"k":1}})")),
                    "__metadata__: value of 'k' must be a string, got a number");
  EXPECT_LOAD_ERROR(parse(raw(R"({"__metadata__":"x"})")), "'__metadata__' must be an object of strings");
  EXPECT_LOAD_ERROR(parse(raw(R"({"__metadata__":{"k":"1","k":"2"}})")), "__metadata__: key 'k' appears twice");
}

TEST(SafetensorsCorrupt, OpenFolderEmptyOrMissingFile) {
  TempDir d;
  EXPECT_LOAD_ERROR(SafetensorsFile::open(d.path), "is a folder, expected a file");
  hl::test::write_text(d / "empty.safetensors", "");
  EXPECT_LOAD_ERROR(SafetensorsFile::open(d / "empty.safetensors"), "empty file (0 bytes)");
  EXPECT_LOAD_ERROR(SafetensorsFile::open(d / "nope.safetensors"), "cannot open");
  EXPECT_LOAD_ERROR(MappedFile::open(d.path), "is a folder");
}

TEST(SafetensorsCorrupt, OpenNamesTheFile) {
  TempDir d;
  auto b = raw(kTwo, 19);
  hl::test::write_bytes(d / "model-00002.safetensors", b);
  EXPECT_LOAD_ERROR(SafetensorsFile::open(d / "model-00002.safetensors"), "model-00002.safetensors: tensor 'b'");
}

// Every prefix of a valid file and every single-byte change of its header is either rejected with
// LoadError or accepted; nothing crashes (a miniature of the fuzz target).
TEST(SafetensorsCorrupt, TruncationsAndByteFlips_NeverCrash) {
  SafetensorsWriter w;
  std::vector<float> v = {1, 2, 3, 4, 5, 6};
  w.add_float("x", DType::F32, {2, 3}, v.data());
  w.add_float("y", DType::BF16, {3}, v.data());
  w.set_metadata("format", "pt");
  std::vector<uint8_t> good = w.serialize();
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> b(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(SafetensorsFile::parse(b.data(), b.size(), "t"), LoadError) << "prefix " << n;
  }
  std::mt19937 rng(7);
  int rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> b = good;
    size_t pos = rng() % b.size();
    b[pos] = static_cast<uint8_t>(rng());
    try {
      SafetensorsFile f = SafetensorsFile::parse(b.data(), b.size(), "t");
      for (const TensorInfo& t : f.tensors()) ASSERT_LE(t.data + t.nbytes(), b.data() + b.size());
    } catch (const LoadError&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 100);
}

// ---- writer --------------------------------------------------------------------------------

TEST(SafetensorsWriter, RoundTrip_AllDtypesAndMetadata) {
  SafetensorsWriter w;
  std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, -7.0f};
  int32_t i32[3] = {-1, 0, 2147483647};
  int64_t i64[2] = {INT64_MIN, 42};
  w.add_float("f16", DType::F16, {3}, f32.data());
  w.add_float("f32", DType::F32, {2, 3}, f32.data());
  w.add("i32", DType::I32, {3}, i32, sizeof i32);
  w.add_float("bf16", DType::BF16, {1, 1, 5}, f32.data());
  w.add("i64", DType::I64, {2}, i64, sizeof i64);
  w.add("empty", DType::F32, {0, 4}, nullptr, 0);
  w.set_metadata("format", "pt");
  w.set_metadata("note", "ünïcödé \"quoted\"");
  TempDir d;
  w.write(d / "rt.safetensors");
  SafetensorsFile f = SafetensorsFile::open(d / "rt.safetensors");
  ASSERT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().at("note"), "ünïcödé \"quoted\"");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.data_start() % 8, 0u);
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype), 0u) << t.name << " misaligned";
    EXPECT_EQ(t.file, d / "rt.safetensors");
  }
  const TensorInfo* t = f.find("f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> back(6);
  to_float(DType::F32, t->data, back.data(), 6);
  EXPECT_EQ(back, f32);
  t = f.find("bf16");
  to_float(DType::BF16, t->data, back.data(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(back[i], bf16_to_float(float_to_bf16(f32[i])));
  t = f.find("f16");
  to_float(DType::F16, t->data, back.data(), 3);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[1], -2.25f);
  EXPECT_EQ(std::memcmp(f.find("i32")->data, i32, sizeof i32), 0);
  EXPECT_EQ(std::memcmp(f.find("i64")->data, i64, sizeof i64), 0);
  EXPECT_EQ(f.find("empty")->nbytes(), 0u);
  EXPECT_EQ(f.find("empty")->shape, (std::vector<int64_t>{0, 4}));
}

TEST(SafetensorsWriter, RandomTensorSets_RoundTripExactly) {
  std::mt19937 rng(1234);
  const DType types[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64};
  for (int iter = 0; iter < 60; ++iter) {
    SafetensorsWriter w;
    std::map<std::string, std::pair<DType, std::vector<uint8_t>>> expect;
    int n = static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      DType t = types[rng() % 5];
      std::vector<int64_t> shape(rng() % 4);
      int64_t numel = 1;
      for (int64_t& s : shape) numel *= (s = rng() % 4);
      std::vector<uint8_t> bytes(static_cast<size_t>(numel) * dtype_size(t));
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
      std::string name = "t" + std::to_string(i) + "." + std::to_string(rng() % 100);
      w.add(name, t, shape, bytes.data(), bytes.size());
      expect[name] = {t, bytes};
    }
    std::vector<uint8_t> file = w.serialize();
    SafetensorsFile f = SafetensorsFile::parse(file.data(), file.size(), "rt");
    ASSERT_EQ(f.tensors().size(), expect.size());
    for (const auto& [name, e] : expect) {
      const TensorInfo* t = f.find(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(t->dtype, e.first);
      ASSERT_EQ(t->nbytes(), e.second.size());
      EXPECT_TRUE(e.second.empty() || std::memcmp(t->data, e.second.data(), e.second.size()) == 0) << name;
    }
  }
}

TEST(SafetensorsWriter, RejectsDuplicateAndSizeMismatch) {
  SafetensorsWriter w;
  float x[2] = {1, 2};
  w.add("a", DType::F32, {2}, x, 8);
  EXPECT_THROW(w.add("a", DType::F32, {2}, x, 8), Error);
  EXPECT_THROW(w.add("b", DType::F32, {3}, x, 8), Error);
  EXPECT_THROW(w.add("__metadata__", DType::F32, {2}, x, 8), Error);
}

TEST(SafetensorsWriter, AtomicWrite_ReplacesFileAndLeavesNoTemp) {
  TempDir d;
  std::string p = d / "f.bin";
  hl::test::write_text(p, "old contents that are longer");
  write_file_atomic(p, "new", 3);
  std::ifstream in(p, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(s, "new");
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(d.path)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"f.bin"});  // no temporary file left behind
  EXPECT_THROW(write_file_atomic(d / "no/such/dir/f.bin", "x", 1), Error);
}
