// Tests of the GGUF tokenizer (engine/tokenizer/gguf_tokenizer.h). llama: vocab-tiny_spm.gguf
// (tests/data/gguf/gguf-fixtures.tar.xz, unpacked at configure time) holds tests/data/tiny_spm.model's
// pieces, scores and types, and encodes as libsentencepiece does with that .model turned into the
// BPE model a GGUF stands for. gpt2: GGUF files written here from the real tokenizer.json fixtures
// (Llama 3 "llama-bpe", Qwen3 "qwen2") give the same ids as the tokenizer.json path and as Hugging
// Face's tokenizers library, and decode the same. Plus bos/eos handling, the pre-tokenizer names,
// the load entry points, and a table of bad metadata, each refused with one line naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/error.h"
#include "engine/io/json_util.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "gguf_tokenizer_test_util.h"
#include "test_util.h"

namespace hl {
namespace {

using namespace hl::test;

const std::string kData = std::string(HL_SOURCE_DIR) + "/tests/data";
const std::string kTokFixtures = HL_TOKENIZER_FIXTURES;
const std::string kVocabGguf = std::string(HL_GGUF_FIXTURES) + "/vocab-tiny_spm.gguf";

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> texts() {
  std::vector<std::string> out;
  std::ifstream f(kData + "/tokenizers/texts.json");
  for (const auto& t : nlohmann::json::parse(f)) out.push_back(t.get<std::string>());
  for (const char* t : {"", " ", "  two  spaces  ", "\n\nnew\nlines\n", "tab\there", "x = 42; y = 65536", "the river ran",
                        "na\xC3\xAFve caf\xC3\xA9 \xE2\x9C\x93", "<s> and </s> in text", "ALL CAPS 1234567 3.14159"})
    out.emplace_back(t);
  return out;
}

// ---- the SentencePiece wire format, read back ------------------------------------------------
struct Field {
  uint32_t number = 0, wire = 0;
  uint64_t varint = 0;
  std::string payload;  // bytes (wire 2) or the 4 bytes of a fixed32
  std::string raw;      // the whole field as stored
};
uint64_t varint(const std::string& s, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; i < s.size(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s[i++]);
    v |= uint64_t{b & 0x7fu} << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}
std::vector<Field> fields(const std::string& s) {
  std::vector<Field> out;
  for (size_t i = 0; i < s.size();) {
    Field f;
    const size_t at = i;
    const uint64_t tag = varint(s, i);
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire = static_cast<uint32_t>(tag & 7);
    if (f.wire == 0) f.varint = varint(s, i);
    else if (f.wire == 5) f.payload = s.substr(i, 4), i += 4;
    else if (f.wire == 1) i += 8;
    else if (f.wire == 2) {
      const uint64_t n = varint(s, i);
      f.payload = s.substr(i, n);
      i += n;
    }
    f.raw = s.substr(at, i - at);
    out.push_back(std::move(f));
  }
  return out;
}
struct Piece {
  std::string piece;
  float score = 0;
  uint64_t type = 1;
  bool operator==(const Piece& o) const { return piece == o.piece && score == o.score && type == o.type; }
};
std::vector<Piece> pieces_of(const std::string& proto) {
  std::vector<Piece> out;
  for (const Field& f : fields(proto)) {
    if (f.number != 1) continue;
    Piece p;
    for (const Field& g : fields(f.payload)) {
      if (g.number == 1) p.piece = g.payload;
      if (g.number == 2) std::memcpy(&p.score, g.payload.data(), 4);
      if (g.number == 3) p.type = g.varint;
    }
    out.push_back(p);
  }
  return out;
}
// `proto` with varint field `number` of sub-message `msg` set to `value`.
std::string with_varint(const std::string& proto, uint32_t msg, uint32_t number, uint64_t value) {
  auto put_varint = [](std::string& o, uint64_t v) {
    while (v >= 0x80) o += static_cast<char>((v & 0x7f) | 0x80), v >>= 7;
    o += static_cast<char>(v);
  };
  std::string out;
  for (const Field& f : fields(proto)) {
    if (f.number != msg) {
      out += f.raw;
      continue;
    }
    std::string sub;
    for (const Field& g : fields(f.payload))
      if (g.number != number) sub += g.raw;
    put_varint(sub, uint64_t{number} << 3);
    put_varint(sub, value);
    put_varint(out, uint64_t{msg} << 3 | 2);
    put_varint(out, sub.size());
    out += sub;
  }
  return out;
}

GgufFile open_vocab() { return GgufFile::open(kVocabGguf); }

// ---- llama ---------------------------------------------------------------------------------
TEST(GgufTokenizer, Llama_PiecesScoresTypes_EqualTinySpmModel) {
  const GgufFile f = open_vocab();
  const std::vector<Piece> ours = pieces_of(gguf_sentencepiece_proto(f.metadata(), f.path()));
  std::vector<Piece> model = pieces_of(read_bytes(kData + "/tiny_spm.model"));
  ASSERT_EQ(model.size(), 512u);
  for (Piece& p : model)
    if (p.type == 4) p.type = 1;  // the converter writes user-defined pieces as normal ones
  ASSERT_EQ(ours.size(), model.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_EQ(ours[i], model[i]) << "piece " << i << " '" << model[i].piece << "'";
}

TEST(GgufTokenizer, Llama_EncodesAsSentencePieceBpeOnTheSameModel) {
  const GgufFile f = open_vocab();
  auto tok = tokenizer_from_gguf(f);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->kind(), "gguf (llama)");
  EXPECT_EQ(tok->vocab_size(), 512);
  // tiny_spm.model as the GGUF stands for it: BPE (llama.cpp merges by score whatever the model
  // type), no remove_extra_whitespaces (the file does not say, llama.cpp's default is false).
  std::string proto = read_bytes(kData + "/tiny_spm.model");
  proto = with_varint(proto, 2, 3, 2);  // trainer_spec.model_type = BPE
  proto = with_varint(proto, 3, 4, 0);  // normalizer_spec.remove_extra_whitespaces = false
  auto ref = Tokenizer::from_bytes(proto, "tiny_spm.model as BPE");
  for (const std::string& t : texts()) {
    EXPECT_EQ(tok->encode(t), ref->encode(t)) << "text: " << t;
    EXPECT_EQ(tok->decode(tok->encode(t)), ref->decode(ref->encode(t))) << "text: " << t;
  }
  for (int32_t id = 0; id < 512; ++id) {
    EXPECT_EQ(tok->raw_piece(id), ref->raw_piece(id));
    EXPECT_EQ(tok->is_special(id), ref->is_special(id)) << id;
  }
}

TEST(GgufTokenizer, Llama_SpecialIdsAndBos_FromMetadata) {
  const GgufFile f = open_vocab();
  auto tok = tokenizer_from_gguf(f);
  const GgufVocabInfo& info = tok->info();
  EXPECT_EQ(info.bos, 1);
  EXPECT_EQ(info.eos, 2);
  EXPECT_EQ(info.unk, 3);
  EXPECT_EQ(info.pad, 0);
  EXPECT_TRUE(info.add_bos);
  EXPECT_FALSE(info.add_eos);
  EXPECT_TRUE(info.add_space_prefix);
  EXPECT_TRUE(tok->adds_special_tokens());
  const std::vector<int32_t> body = tok->encode("the river");
  std::vector<int32_t> with_bos{1};
  with_bos.insert(with_bos.end(), body.begin(), body.end());
  EXPECT_EQ(tok->encode_special("the river"), with_bos);
  // encode_prompt takes the file's rule, not config.json's bos_token_id
  EXPECT_EQ(encode_prompt(*tok, "the river", true, 77), with_bos);
  EXPECT_EQ(encode_prompt(*tok, "the river", false, 77), body);
}

TEST(GgufTokenizer, Load_GgufFileByMagic) {
  auto tok = Tokenizer::load(kVocabGguf);
  EXPECT_EQ(tok->kind(), "gguf (llama)");
  TempDir d;
  const std::string renamed = d / "vocab.bin";  // the magic decides, not the name
  std::ofstream(renamed, std::ios::binary) << read_bytes(kVocabGguf);
  auto again = load_tokenizer_for(renamed);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->encode("the river"), tok->encode("the river"));
}

TEST(GgufTokenizer, Load_GgufWithoutVocabulary_NullOrLoadError) {
  TempDir d;
  const std::string path = d / "weights_only.gguf";
  write_gguf(path, {{"general.architecture", gv_str("jamba")}});
  EXPECT_EQ(load_tokenizer_for(path), nullptr);
  EXPECT_LOAD_ERROR(Tokenizer::load(path), "tokenizer.ggml.model");
  write_gguf(path, {{"tokenizer.ggml.model", gv_str("no_vocab")}});
  EXPECT_EQ(load_tokenizer_for(path), nullptr);
}

// ---- gpt2 ----------------------------------------------------------------------------------
struct Gpt2Case {
  const char* fixture;
  const char* pre;
};
class GgufGpt2 : public testing::TestWithParam<Gpt2Case> {};

TEST_P(GgufGpt2, SameIdsAsTokenizerJsonAndHuggingFace) {
  const Gpt2Case c = GetParam();
  GgufKvs kvs = gpt2_kvs_from_tokenizer_json(kTokFixtures + "/" + c.fixture + "/tokenizer.json", c.pre);
  set_kv(kvs, "tokenizer.ggml.add_bos_token", gv_bool(false));  // neither fixture adds one
  TempDir d;
  const std::string path = d / (std::string(c.fixture) + ".gguf");
  write_gguf(path, kvs);
  auto tok = Tokenizer::load(path);
  EXPECT_EQ(tok->kind(), "gguf (gpt2)");
  auto ref = Tokenizer::load(kTokFixtures + "/" + c.fixture);
  std::ifstream ef(kData + "/tokenizers/" + c.fixture + ".expected.json");
  const nlohmann::json exp = nlohmann::json::parse(ef);
  ASSERT_GE(exp["cases"].size(), 30u);
  for (const auto& e : exp["cases"]) {
    const std::string text = e["text"];
    const std::vector<int32_t> ids = tok->encode(text);
    EXPECT_EQ(ids, e["ids_no_special"].get<std::vector<int32_t>>()) << c.fixture << " text: " << text;
    EXPECT_EQ(tok->encode_special(text), e["ids"].get<std::vector<int32_t>>()) << c.fixture << " text: " << text;
    EXPECT_EQ(tok->decode(e["ids"].get<std::vector<int32_t>>()), e["decoded"].get<std::string>()) << c.fixture << " text: " << text;
  }
  for (const std::string& t : texts()) {
    const std::vector<int32_t> ids = tok->encode(t);
    EXPECT_EQ(ids, ref->encode(t)) << c.fixture << " text: " << t;
    EXPECT_EQ(tok->decode(ids), ref->decode(ids)) << c.fixture << " text: " << t;
  }
  for (int32_t id : {0, 1, 100, 1000, static_cast<int32_t>(ref->vocab_size()) - 1}) {
    EXPECT_EQ(tok->raw_piece(id), ref->raw_piece(id)) << id;
    EXPECT_EQ(tok->piece(id), ref->piece(id)) << id;
    EXPECT_EQ(tok->is_special(id), ref->is_special(id)) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufGpt2,
                         testing::Values(Gpt2Case{"llama3-32k", "llama-bpe"}, Gpt2Case{"qwen3", "qwen2"}),
                         [](const auto& info) { return std::string(info.param.pre == std::string("qwen2") ? "qwen2" : "llama_bpe"); });

GgufKvs llama3_kvs() {
  return gpt2_kvs_from_tokenizer_json(kTokFixtures + "/llama3-32k/tokenizer.json", "llama-bpe");
}
std::unique_ptr<GgufTokenizer> from_kvs(const GgufKvs& kvs, const std::string& name = "mem.gguf") {
  const std::string bytes = gguf_bytes(kvs);
  const GgufFile f = GgufFile::parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), name);
  return tokenizer_from_gguf(f);
}

TEST(GgufTokenizer, Gpt2_BosByLlamaCppDefaultsAndKeys) {
  GgufKvs kvs = llama3_kvs();
  auto plain = from_kvs(kvs);
  const int32_t bos = plain->encode("<|begin_of_text|>").at(0);  // the control token, matched whole
  EXPECT_TRUE(plain->is_special(bos));
  set_kv(kvs, "tokenizer.ggml.bos_token_id", gv_u32(static_cast<uint32_t>(bos)));
  auto llama3 = from_kvs(kvs);  // llama-bpe: add_bos by default
  EXPECT_TRUE(llama3->info().add_bos);
  EXPECT_TRUE(llama3->info().ignore_merges);
  EXPECT_EQ(llama3->encode_special("Hi").front(), bos);
  set_kv(kvs, "tokenizer.ggml.add_bos_token", gv_bool(false));
  EXPECT_EQ(from_kvs(kvs)->encode_special("Hi"), plain->encode("Hi"));
  set_kv(kvs, "tokenizer.ggml.pre", gv_str("dbrx"));  // the same regex, no bos by default
  erase_kv(kvs, "tokenizer.ggml.add_bos_token");
  auto dbrx = from_kvs(kvs);
  EXPECT_FALSE(dbrx->info().add_bos);
  EXPECT_EQ(dbrx->encode_special("Hi"), plain->encode("Hi"));
  set_kv(kvs, "tokenizer.ggml.eos_token_id", gv_u32(static_cast<uint32_t>(bos + 1)));
  set_kv(kvs, "tokenizer.ggml.add_eos_token", gv_bool(true));
  EXPECT_EQ(from_kvs(kvs)->encode_special("Hi").back(), bos + 1);
}

TEST(GgufTokenizer, Gpt2_EveryKnownPreTokenizer_RoundTripsTexts) {
  const std::vector<std::string> names = gguf_pre_tokenizer_names();
  for (const char* must : {"default", "gpt-2", "llama-bpe", "qwen2", "dbrx", "tekken", "refact"})
    EXPECT_NE(std::find(names.begin(), names.end(), must), names.end()) << must;
  GgufKvs kvs = llama3_kvs();
  for (const std::string& name : names) {
    set_kv(kvs, "tokenizer.ggml.pre", gv_str(name));
    auto tok = from_kvs(kvs);
    EXPECT_EQ(tok->info().pre, name);
    for (const std::string& t : texts()) {
      if (name == "qwen2") continue;  // NFC changes some texts; the Qwen3 fixture covers it
      EXPECT_EQ(tok->decode(tok->encode(t)), t) << "pre " << name << " text: " << t;
    }
  }
  erase_kv(kvs, "tokenizer.ggml.pre");  // absent: llama.cpp's "default"
  EXPECT_EQ(from_kvs(kvs)->info().pre, "default");
}

// ---- bad metadata: one line naming the file and the key ----------------------------------------
GgufKvs tiny_gpt2() {
  return {{"tokenizer.ggml.model", gv_str("gpt2")},
          {"tokenizer.ggml.pre", gv_str("gpt-2")},
          {"tokenizer.ggml.tokens", gv_strs({"<|end|>", "a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "ab"})},
          {"tokenizer.ggml.token_type", gv_ints({3, 1, 1, 1, 1, 1})},
          {"tokenizer.ggml.merges", gv_strs({"a b", "\xC4\xA0 ab"})},
          {"tokenizer.ggml.eos_token_id", gv_u32(0)}};
}
GgufKvs tiny_llama() {
  return {{"tokenizer.ggml.model", gv_str("llama")},
          {"tokenizer.ggml.tokens", gv_strs({"<unk>", "<s>", "</s>", "\xE2\x96\x81", "\xE2\x96\x81" "a", "b"})},
          {"tokenizer.ggml.scores", gv_floats({0, 0, 0, -3, -1, -2})},
          {"tokenizer.ggml.token_type", gv_ints({2, 3, 3, 1, 1, 1})}};
}

TEST(GgufTokenizer, TinyVocabularies_Work) {
  auto g = from_kvs(tiny_gpt2());
  EXPECT_EQ(g->encode(" ab<|end|>ab"), (std::vector<int32_t>{5, 0, 3}));
  auto l = from_kvs(tiny_llama());
  EXPECT_EQ(l->encode("a b"), (std::vector<int32_t>{4, 3, 5}));  // ▁a ▁ b: merged by score
  EXPECT_EQ(l->encode("A"), (std::vector<int32_t>{3, 0}));       // no byte pieces: unknown
  EXPECT_EQ(l->info().bos, 1);
  EXPECT_EQ(l->encode_special("a"), (std::vector<int32_t>{1, 4}));
  GgufKvs no_unk = tiny_llama();
  set_kv(no_unk, "tokenizer.ggml.token_type", gv_ints({1, 3, 3, 1, 1, 1}));
  EXPECT_TRUE(from_kvs(no_unk)->is_special(0));  // llama.cpp's default unknown id 0
}

struct BadCase {
  const char* what;
  GgufKvs (*base)();
  void (*mutate)(GgufKvs&);
  const char* key;   // the message names it
  const char* part;  // and says this
};

const BadCase kBad[] = {
    {"model bert", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.model", gv_str("bert")); }, "tokenizer.ggml.model", "supported: llama"},
    {"model t5", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.model", gv_str("t5")); }, "tokenizer.ggml.model", "'t5'"},
    {"model rwkv", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.model", gv_str("rwkv")); }, "tokenizer.ggml.model", "'rwkv'"},
    {"model not a string", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.model", gv_u32(2)); }, "tokenizer.ggml.model", "expected STRING"},
    {"tokens missing", tiny_gpt2, [](GgufKvs& k) { erase_kv(k, "tokenizer.ggml.tokens"); }, "tokenizer.ggml.tokens", "missing"},
    {"tokens not strings", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.tokens", gv_ints({1, 2})); }, "tokenizer.ggml.tokens", "ARRAY of STRING"},
    {"no tokens", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.tokens", gv_strs({})); }, "tokenizer.ggml.tokens", "allowed 1.."},
    {"empty token", tiny_gpt2, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.tokens").strings[2] = ""; }, "tokenizer.ggml.tokens[2]", "empty"},
    {"token not UTF-8", tiny_llama, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.tokens").strings[5] = "\xC3("; }, "tokenizer.ggml.tokens[5]", "not UTF-8"},
    {"token with NUL", tiny_llama, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.tokens").strings[5] = std::string("b\0c", 3); }, "tokenizer.ggml.tokens[5]", "NUL"},
    {"duplicate token", tiny_gpt2, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.tokens").strings[3] = "a"; }, "tokenizer.ggml.tokens[3]", "repeats token 1"},
    {"scores short", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.scores", gv_floats({0, 0, 0})); }, "tokenizer.ggml.scores", "expected 6"},
    {"score NaN", tiny_llama, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.scores").floats[4] = NAN; }, "tokenizer.ggml.scores[4]", "finite"},
    {"llama without scores", tiny_llama, [](GgufKvs& k) { erase_kv(k, "tokenizer.ggml.scores"); }, "tokenizer.ggml.scores", "missing"},
    {"types long", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.token_type", gv_ints({1, 1, 1, 1, 1, 1, 1})); }, "tokenizer.ggml.token_type", "expected 6"},
    {"type 0", tiny_gpt2, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.token_type").ints[1] = 0; }, "tokenizer.ggml.token_type[1]", "allowed 1 normal"},
    {"type 7", tiny_llama, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.token_type").ints[5] = 7; }, "tokenizer.ggml.token_type[5]", "allowed 1 normal"},
    {"types as strings", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.token_type", gv_strs({"1", "1", "1", "1", "1", "1"})); }, "tokenizer.ggml.token_type", "expected ARRAY of INT32"},
    {"two unknown", tiny_llama, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.token_type").ints[5] = 2; }, "tokenizer.ggml.token_type", "both have type 2"},
    {"byte piece form", tiny_llama, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.token_type").ints[5] = 6; }, "tokenizer.ggml.tokens[5]", "<0xHH>"},
    {"some byte pieces", tiny_llama, [](GgufKvs& k) {
       kv_at(k, "tokenizer.ggml.tokens").strings[5] = "<0x41>";
       kv_at(k, "tokenizer.ggml.token_type").ints[5] = 6;
     }, "tokenizer.ggml.token_type", "all 256"},
    {"bos = V", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.bos_token_id", gv_u32(6)); }, "tokenizer.ggml.bos_token_id", "allowed 0..5"},
    {"eos huge", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.eos_token_id", gv_int(GgufValueType::U64, int64_t{1} << 40)); }, "tokenizer.ggml.eos_token_id", "allowed 0..5"},
    {"pad negative", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.padding_token_id", gv_int(GgufValueType::I32, -1)); }, "tokenizer.ggml.padding_token_id", "allowed 0..5"},
    {"unk a string", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.unknown_token_id", gv_str("0")); }, "tokenizer.ggml.unknown_token_id", "expected an integer"},
    {"seperator = V", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.seperator_token_id", gv_u32(6)); }, "tokenizer.ggml.seperator_token_id", "allowed 0..5"},
    {"add_bos not bool", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.add_bos_token", gv_u32(1)); }, "tokenizer.ggml.add_bos_token", "expected BOOL"},
    {"add_bos without bos", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.add_bos_token", gv_bool(true)); }, "tokenizer.ggml.add_bos_token", "bos_token_id is absent"},
    {"merges missing", tiny_gpt2, [](GgufKvs& k) { erase_kv(k, "tokenizer.ggml.merges"); }, "tokenizer.ggml.merges", "missing"},
    {"merge one token", tiny_gpt2, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.merges").strings[0] = "ab"; }, "tokenizer.ggml.merges[0]", "not two tokens"},
    {"merge unknown part", tiny_gpt2, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.merges").strings[1] = "a zz"; }, "tokenizer.ggml.merges[1]", "'zz' is not a token"},
    {"merge result absent", tiny_gpt2, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.merges").strings[1] = "b a"; }, "tokenizer.ggml.merges[1]", "'ba'"},
    {"merge not UTF-8", tiny_gpt2, [](GgufKvs& k) { kv_at(k, "tokenizer.ggml.merges").strings[1] = "a \xFF"; }, "tokenizer.ggml.merges[1]", "'\\xFF' is not a token"},
    {"model not UTF-8", tiny_llama, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.model", gv_str("ll\xC3")); }, "tokenizer.ggml.model", "'ll\\xC3'"},
    {"pre unknown", tiny_gpt2, [](GgufKvs& k) { set_kv(k, "tokenizer.ggml.pre", gv_str("not-a-pre")); }, "tokenizer.ggml.pre", "known: "},
};

TEST(GgufTokenizer, BadMetadata_OneLineNamingTheKey) {
  for (const BadCase& c : kBad) {
    GgufKvs kvs = c.base();
    c.mutate(kvs);
    const std::string msg = load_error_of([&] { (void)from_kvs(kvs, "bad.gguf"); });
    EXPECT_EQ(msg.rfind("bad.gguf: ", 0), 0u) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.key), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.part), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(find_invalid_utf8(msg.data(), msg.size()), SIZE_MAX) << c.what;
  }
}

}  // namespace
}  // namespace hl

namespace hl {
namespace {

// tokenizer.chat_template of a GGUF file is the checkpoint's chat template, rendered with the text of
// the file's special ids; a non-string or non-UTF-8 template is refused in one line naming the key.
TEST(GgufChatTemplate, FromMetadataWithTheSpecialTokenText) {
  TempDir d;
  const std::string path = d / "chat.gguf";
  GgufKvs kvs = {{"general.architecture", gv_str("jamba")},
                 {"tokenizer.ggml.tokens", gv_strs({"<pad>", "<s>", "</s>", "hi"})},
                 {"tokenizer.ggml.bos_token_id", gv_u32(1)},
                 {"tokenizer.ggml.eos_token_id", gv_u32(2)},
                 {"tokenizer.chat_template", gv_str("{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}")}};
  write_gguf(path, kvs);
  const auto t = find_chat_template(path);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->bos_token, "<s>");
  EXPECT_EQ(t->eos_token, "</s>");
  EXPECT_EQ(t->pad_token, "");
  EXPECT_NE(t->origin.find("tokenizer.chat_template"), std::string::npos);
  const ChatTemplate tpl(t->source, t->origin);
  nlohmann::ordered_json ctx = {{"bos_token", t->bos_token}, {"eos_token", t->eos_token}};
  ctx["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  EXPECT_EQ(tpl.render(ctx), "<s>hi</s>");
  // No template: none; a number where the text should be: one line naming the key.
  erase_kv(kvs, "tokenizer.chat_template");
  write_gguf(path, kvs);
  EXPECT_FALSE(find_chat_template(path).has_value());
  set_kv(kvs, "tokenizer.chat_template", gv_u32(7));
  write_gguf(path, kvs);
  try {
    find_chat_template(path);
    ADD_FAILURE() << "accepted";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("chat.gguf: tokenizer.chat_template: UINT32 (allowed a STRING)"), std::string::npos) << e.what();
  }
  set_kv(kvs, "tokenizer.chat_template", gv_str(std::string("a\xff")));
  write_gguf(path, kvs);
  EXPECT_THROW(find_chat_template(path), LoadError);
}

}  // namespace
}  // namespace hl
