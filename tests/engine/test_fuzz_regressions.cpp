// What the libFuzzer targets (tests/fuzz) found, kept as ordinary tests so the gcc builds and the
// ASan/UBSan lane check them on every run: a corruption table of minimized findings, and a replay of
// every seed corpus file through the same entry points as the fuzzers (load, or throw LoadError).
// Not the readers' own corruption tables: test_safetensors.cpp, test_adapter.cpp, test_session_corrupt.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/dtype.h"
#include "engine/io/adapter.h"
#include "engine/io/checkpoint.h"
#include "engine/io/config.h"
#include "engine/io/gguf.h"
#include "engine/io/gguf_import.h"
#include "engine/io/safetensors.h"
#include "engine/model/loader.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "sessions/session_file.h"
#include "sessions/trace_import.h"
#include "test_util.h"

using namespace hl;
using hl::test::TempDir;
namespace fs = std::filesystem;

namespace {

// A safetensors file with the header exactly as given (no padding), so the data section may start
// at any offset: tensors of an untrusted file need not be aligned to their element size.
std::vector<uint8_t> raw_safetensors(const std::string& header, const std::vector<uint8_t>& data) {
  const uint64_t n = header.size();
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

void put_bf16(std::vector<uint8_t>& d, float v) {
  const uint16_t h = float_to_bf16(v);
  d.push_back(static_cast<uint8_t>(h));
  d.push_back(static_cast<uint8_t>(h >> 8));
}

void put_f16(std::vector<uint8_t>& d, float v) {
  const uint16_t h = float_to_f16(v);
  d.push_back(static_cast<uint8_t>(h));
  d.push_back(static_cast<uint8_t>(h >> 8));
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// A LoRA adapter of one module (q_proj of layer 1, r 2, in 3, out 2) in BF16 A / F16 B whose data
// section starts at an odd offset, as the first fuzz_adapter crash had it (UBSan: misaligned
// uint16_t load in to_float, reached from widen_checked).
struct OddAdapter {
  std::string config = R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]})";
  std::vector<float> A = {0.5f, -1.0f, 2.0f, 0.25f, -0.125f, 3.0f};  // (2, 3)
  std::vector<float> B = {1.5f, -2.0f, 0.75f, 4.0f};                 // (2, 2)
  std::vector<uint8_t> file;
  OddAdapter() {
    std::string header = R"({"base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight":)"
                         R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]},)"
                         R"("base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight":)"
                         R"({"dtype":"F16","shape":[2,2],"data_offsets":[12,20]}})";
    if ((8 + header.size()) % 2 == 0) header += " ";  // odd data start: every BF16/F16 element misaligned
    std::vector<uint8_t> data;
    for (float v : A) put_bf16(data, v);
    for (float v : B) put_f16(data, v);
    file = raw_safetensors(header, data);
  }
  void expect_values(const Adapter& a) const {
    ASSERT_EQ(a.modules.size(), 1u);
    EXPECT_EQ(a.modules[0].A, A);
    EXPECT_EQ(a.modules[0].B, B);
    EXPECT_DOUBLE_EQ(a.modules[0].scaling, 2.0);
  }
};

}  // namespace

// ---- corruption table of minimized fuzz findings ---------------------------------------------

TEST(FuzzRegression, Adapter_MisalignedHalfTensors_InMemory_ReadExactly) {
  const OddAdapter o;
  // The fuzzer's layout: the safetensors bytes right after the config and a NUL, at an odd address.
  std::vector<uint8_t> buf(o.config.begin(), o.config.end());
  buf.push_back(0);
  buf.insert(buf.end(), o.file.begin(), o.file.end());
  const uint8_t* st = buf.data() + o.config.size() + 1;
  for (int shift = 0; shift < 2; ++shift) {  // whatever the buffer's own alignment
    std::vector<uint8_t> shifted(static_cast<size_t>(shift) + o.file.size(), 0);
    std::memcpy(shifted.data() + shift, st, o.file.size());
    o.expect_values(parse_adapter(o.config, shifted.data() + shift, o.file.size(), "odd"));
  }
}

TEST(FuzzRegression, Adapter_MisalignedHalfTensors_FromFolder_ReadExactly) {
  const OddAdapter o;
  TempDir d;
  hl::test::write_text(d / Adapter::kConfigName, o.config);
  hl::test::write_bytes(d / Adapter::kWeightsName, o.file);  // mapped page-aligned: data at 8 + odd
  o.expect_values(read_adapter(d.path));
}

TEST(FuzzRegression, ToFloat_AnyAlignment_SameValues) {
  // to_float reads elements of any dtype from any byte offset.
  const float want[3] = {1.0f, -0.5f, 65504.0f};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    std::vector<uint8_t> aligned(3 * dtype_size(t));
    if (t == DType::I32 || t == DType::I64) {
      for (int i = 0; i < 3; ++i) {
        const int64_t v = static_cast<int64_t>(want[i] == -0.5f ? -7 : want[i]);
        if (t == DType::I32) {
          const int32_t w = static_cast<int32_t>(v);
          std::memcpy(&aligned[4 * i], &w, 4);
        } else {
          std::memcpy(&aligned[8 * i], &v, 8);
        }
      }
    } else {
      std::vector<float> src(want, want + 3);
      std::vector<uint64_t> tmp((aligned.size() + 7) / 8);
      from_float(t, src.data(), tmp.data(), 3);
      std::memcpy(aligned.data(), tmp.data(), aligned.size());
    }
    std::vector<uint64_t> ref_buf((aligned.size() + 7) / 8);
    std::memcpy(ref_buf.data(), aligned.data(), aligned.size());
    float ref[3];
    to_float(t, ref_buf.data(), ref, 3);
    for (size_t off = 1; off < 8; ++off) {
      std::vector<uint8_t> buf(off + aligned.size());
      std::memcpy(buf.data() + off, aligned.data(), aligned.size());
      float got[3];
      to_float(t, buf.data() + off, got, 3);
      for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], ref[i]) << dtype_name(t) << " offset " << off << " element " << i;
    }
  }
}

TEST(FuzzRegression, Checkpoint_OddHeaderLength_LoadsSameWeights) {
  // The loader path of the same finding: a checkpoint whose safetensors header is not padded.
  TempDir a, b;
  const JambaConfig c = hl::test::tiny_config();
  hl::test::write_tiny_checkpoint(a.path, c, [](std::vector<hl::test::TestTensor>& ts) {
    for (auto& t : ts) t.dtype = DType::BF16;
  });
  // Rewrite model.safetensors with one extra header byte: every tensor moves to an odd offset.
  const std::string bytes = read_all(fs::path(a.path) / "model.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  std::string header = bytes.substr(8, n);
  while (!header.empty() && header.back() == ' ') header.pop_back();
  if ((8 + header.size()) % 2 == 0) header += " ";
  const std::string data = bytes.substr(8 + n);
  hl::test::write_bytes(b / "model.safetensors",
                        raw_safetensors(header, std::vector<uint8_t>(data.begin(), data.end())));
  fs::copy_file(fs::path(a.path) / "config.json", fs::path(b.path) / "config.json");
  auto ma = load_model(a.path), mb = load_model(b.path);
  ASSERT_EQ(mb->w.layers.size(), ma->w.layers.size());
  EXPECT_EQ(mb->w.final_norm, ma->w.final_norm);
  EXPECT_EQ(mb->w.mean_embedding, ma->w.mean_embedding);
  for (size_t i = 0; i < ma->w.layers.size(); ++i) {
    EXPECT_EQ(mb->w.layers[i].input_norm, ma->w.layers[i].input_norm) << "layer " << i;
    if (!ma->schedule[static_cast<int64_t>(i)].has_attention()) EXPECT_EQ(mb->w.layers[i].mamba.A, ma->w.layers[i].mamba.A) << "layer " << i;
  }
}

// ---- seed corpora, replayed through the fuzzers' entry points --------------------------------

namespace {

std::vector<fs::path> corpus(const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(HL_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / target;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Runs fn on every corpus file: it must return normally or throw hl::Error (LoadError for files);
// valid_* seeds must load. Returns how many loaded.
int replay(const std::string& target, const std::function<void(const std::string&)>& fn) {
  const std::vector<fs::path> files = corpus(target);
  EXPECT_FALSE(files.empty()) << "no seeds in tests/fuzz/corpus/" << target;
  int ok = 0;
  for (const fs::path& p : files) {
    const std::string name = p.filename().string();
    const bool valid = name.rfind("valid", 0) == 0;
    try {
      fn(read_all(p));
      ++ok;
    } catch (const Error& e) {
      EXPECT_FALSE(valid) << target << "/" << name << " is a valid seed but: " << e.what();
    }
  }
  return ok;
}

}  // namespace

TEST(FuzzCorpus, Safetensors_EverySeedParsesOrThrowsLoadError) {
  EXPECT_GT(replay("safetensors",
                   [](const std::string& b) {
                     std::vector<uint64_t> buf(b.size() / 8 + 1);  // aligned copy, as a mapping would be
                     std::memcpy(buf.data(), b.data(), b.size());
                     SafetensorsFile::parse(reinterpret_cast<const uint8_t*>(buf.data()), b.size(), "seed");
                   }),
            0);
}

TEST(FuzzCorpus, Config_EverySeedParsesOrThrowsLoadError) {
  EXPECT_GT(replay("config", [](const std::string& b) { (void)parse_config(b); }), 0);
}

TEST(FuzzCorpus, Adapter_EverySeedReadsOrThrowsLoadError) {
  EXPECT_GT(replay("adapter",
                   [](const std::string& b) {
                     const size_t nul = b.find('\0');
                     if (nul == std::string::npos) {
                       (void)parse_adapter_config(b, "adapter_config.json");
                       return;
                     }
                     (void)parse_adapter(b.substr(0, nul), reinterpret_cast<const uint8_t*>(b.data()) + nul + 1,
                                         b.size() - nul - 1, "seed");
                   }),
            0);
}

TEST(FuzzCorpus, Tokenizer_EverySeedWorksOrThrowsError) {
  const auto tiny = Tokenizer::load(std::string(HL_SOURCE_DIR) + "/tests/data/tiny_spm.model");
  EXPECT_GT(replay("tokenizer",
                   [&](const std::string& b) {
                     if (b.empty()) return;
                     const std::string rest = b.substr(1);
                     switch (static_cast<uint8_t>(b[0]) % 3) {
                       case 0:
                         (void)tiny->decode(parse_id_list(rest));
                         break;
                       case 1:
                         (void)tiny->decode(tiny->encode(rest));
                         break;
                       case 2:
                         (void)Tokenizer::from_bytes(rest, "seed")->encode("Hello world");
                         break;
                     }
                   }),
            0);
}

TEST(FuzzCorpus, TokenizerJson_EverySeedWorksOrThrowsError) {
  EXPECT_GT(replay("tokenizer_json",
                   [](const std::string& b) {
                     const size_t nul = b.find('\0');
                     const auto t = hf_tokenizer_from_bytes(b.substr(0, nul), "seed",
                                                            nul == std::string::npos ? std::string() : b.substr(nul + 1), "seed config");
                     (void)t->decode(t->encode_special("Hello world, 123 \xC3\xA9"));
                   }),
            0);
}

TEST(FuzzCorpus, Session_EverySeedLoadsOrThrowsLoadError) {
  EXPECT_GT(replay("session",
                   [](const std::string& b) {
                     std::vector<uint64_t> buf(b.size() / 8 + 1);
                     std::memcpy(buf.data(), b.data(), b.size());
                     (void)parse_session(reinterpret_cast<const uint8_t*>(buf.data()), b.size(), "seed");
                   }),
            0);
}

TEST(FuzzCorpus, Trace_EverySeedImportsOrThrowsLoadError) {
  EXPECT_GE(replay("trace",
                   [](const std::string& b) {
                     std::vector<uint64_t> buf(b.size() / 8 + 1);
                     std::memcpy(buf.data(), b.data(), b.size());
                     (void)parse_trace(reinterpret_cast<const uint8_t*>(buf.data()), b.size(), "seed");
                   }),
            4);
}

TEST(FuzzCorpus, Gguf_EverySeedImportsOrThrowsLoadError) {
  // As fuzz_gguf: the checked file, its tokenizer, then a model's config and tensor mapping.
  EXPECT_GE(replay("gguf",
                   [](const std::string& b) {
                     const auto files = std::make_shared<const GgufModelFiles>(
                         GgufModelFiles::from_file(GgufFile::parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "seed")));
                     if (const auto t = tokenizer_from_gguf(files->first())) (void)t->decode(t->encode_special("Hello world, 123 \xC3\xA9"));
                     if (files->find_value("general.architecture") && !files->first().tensors().empty()) (void)import_gguf_files(files);
                   }),
            5);
}

// ---- issue 18 item 11: names with control characters, files that are not regular files ----------

// A NUL (or newline) in a shard name from model.safetensors.index.json is escaped: the message keeps
// what follows it and stays on one line.
TEST(FuzzRegression, ShardNameWithNul_EscapedInTheMessage) {
  for (const std::string& name : {std::string("evil\0tail.safetensors", 21), std::string("two\nlines/x")}) {
    TempDir d;
    hl::test::write_text(d / "config.json", config_to_json(hl::test::tiny_config()));
    const std::string index = "{\"weight_map\": {\"model.embed_tokens.weight\": " + nlohmann::json(name).dump() + "}}";
    hl::test::write_text(d / "model.safetensors.index.json", index);
    const std::string msg = hl::test::load_error_of([&] { Checkpoint::open(d.path); });
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\0'), std::string::npos) << msg;
    EXPECT_NE(msg.find(name[0] == 'e' ? "'evil\\x00tail.safetensors'" : "'two\\nlines/x'"), std::string::npos) << msg;
  }
}

// A FIFO, or a symlink to /dev/zero, where a file is read (tokenizer.model, config.json, a shard,
// adapter files) is refused as "not a regular file": never "has no tokenizer.model", never a hang.
TEST(FuzzRegression, FifoOrDevZeroInsteadOfAFile_NotARegularFile) {
  auto fifo = [](const std::string& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0) << p; };
  auto zero = [](const std::string& p) { ASSERT_EQ(::symlink("/dev/zero", p.c_str()), 0) << p; };
  for (const auto& make : std::vector<std::function<void(const std::string&)>>{fifo, zero}) {
    {  // tokenizer.model: the checkpoint reports it present, the tokenizer refuses it
      TempDir d;
      hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
      make(d / "tokenizer.model");
      const std::string path = Checkpoint::open(d.path).tokenizer_path();
      ASSERT_EQ(path, d / "tokenizer.model");
      EXPECT_NE(hl::test::load_error_of([&] { Tokenizer::load(path); }).find("tokenizer model is not a regular file ("),
                std::string::npos);
    }
    {  // config.json
      TempDir d;
      hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
      fs::remove(d / "config.json");
      make(d / "config.json");
      EXPECT_NE(hl::test::load_error_of([&] { Checkpoint::open(d.path); }).find("config.json is not a regular file ("),
                std::string::npos);
    }
    {  // model.safetensors
      TempDir d;
      hl::test::write_tiny_checkpoint(d.path, hl::test::tiny_config());
      fs::remove(d / "model.safetensors");
      make(d / "model.safetensors");
      EXPECT_NE(hl::test::load_error_of([&] { Checkpoint::open(d.path); }).find("is not a regular file ("),
                std::string::npos);
    }
    {  // adapter_config.json and adapter_model.safetensors
      for (const char* which : {"adapter_config.json", "adapter_model.safetensors"}) {
        TempDir d;
        hl::test::write_text(d / "adapter_config.json",
                             R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["in_proj"]})");
        if (std::string(which) == "adapter_config.json") fs::remove(d / "adapter_config.json");
        make(d / which);
        const std::string msg = hl::test::load_error_of([&] { read_adapter(d.path); });
        EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << which << ": " << msg;
      }
    }
  }
}
