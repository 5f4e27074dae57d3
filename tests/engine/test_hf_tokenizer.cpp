// Tests of the tokenizer.json support (engine/tokenizer/hf_*): the ids of five real tokenizers
// (tests/data/tokenizers/*.tar.xz, unpacked at configure time) against the ids Hugging Face's own
// tokenizers library gave for the hard texts (NAME.expected.json, made once by
// tools/tokenizer_fixtures/make_fixtures.sh), decode against its decode, the split behaviours on a
// small vocabulary, the choice of tokenizer.json over tokenizer.model, tokenizer_config.json,
// display_pieces, a pathological regex stopped by the match limit, and the BPE word cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/error.h"
#include "engine/tokenizer/hf_tables.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"

namespace hl {
namespace {

namespace fs = std::filesystem;
const std::string kFixtures = HL_TOKENIZER_FIXTURES;
const std::string kData = std::string(HL_SOURCE_DIR) + "/tests/data";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::path(testing::TempDir()) / ("hl_hftok_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

class HuggingFaceExact : public testing::TestWithParam<const char*> {};

TEST_P(HuggingFaceExact, EncodeWithAndWithoutSpecialTokens_SameIdsAsHuggingFace) {
  const std::string name = GetParam();
  auto tok = Tokenizer::load(kFixtures + "/" + name);
  EXPECT_EQ(tok->kind(), "tokenizer.json");
  const nlohmann::json exp = read_json(kData + "/tokenizers/" + name + ".expected.json");
  ASSERT_GE(exp["cases"].size(), 30u);
  for (const auto& c : exp["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok->encode_special(text), c["ids"].get<std::vector<int32_t>>()) << name << " text: " << text;
    EXPECT_EQ(tok->encode(text), c["ids_no_special"].get<std::vector<int32_t>>()) << name << " text: " << text;
  }
}

TEST_P(HuggingFaceExact, Decode_SameTextAsHuggingFace) {
  const std::string name = GetParam();
  auto tok = Tokenizer::load(kFixtures + "/" + name);
  const nlohmann::json exp = read_json(kData + "/tokenizers/" + name + ".expected.json");
  for (const auto& c : exp["cases"])
    EXPECT_EQ(tok->decode(c["ids"].get<std::vector<int32_t>>()), c["decoded"].get<std::string>()) << name << " text: " << c["text"];
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HuggingFaceExact,
                         testing::Values("llama3-32k", "qwen3", "llama2", "bert-uncased", "unigram-nfkc"));

// A byte-level BPE without a normalizer gives back every text exactly.
TEST(HfTokenizer, ByteLevelWithoutNormalizer_DecodeRoundTripsEveryText) {
  auto tok = Tokenizer::load(kFixtures + "/llama3-32k");
  for (const auto& t : read_json(kData + "/tokenizers/texts.json")) {
    const std::string text = t;
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  }
}

// ---- split behaviours on a WordPiece vocabulary: which words get looked up is the split -------
std::string wordpiece_json(const std::string& pre_tokenizer) {
  return R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": {"[UNK]": 0, "a": 1, "-": 2, "a-": 3,
           "-b": 4, "b": 5, "--": 6, "##-": 7, "##b": 8, "##a": 9}}, "pre_tokenizer": )" + pre_tokenizer + "}";
}
std::vector<int32_t> split_ids(const std::string& behavior, const std::string& text, bool invert = false) {
  auto t = hf_tokenizer_from_bytes(wordpiece_json(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")" + behavior +
                                                  "\", \"invert\": " + (invert ? "true" : "false") + "}"),
                                   "split.json", "", "");
  return t->encode(text);
}

TEST(HfTokenizer, SplitBehaviours_CutWhereDefined) {
  EXPECT_EQ(split_ids("Removed", "a-b"), (std::vector<int32_t>{1, 5}));             // "a" "b"
  EXPECT_EQ(split_ids("Isolated", "a-b"), (std::vector<int32_t>{1, 2, 5}));         // "a" "-" "b"
  EXPECT_EQ(split_ids("MergedWithPrevious", "a-b"), (std::vector<int32_t>{3, 5}));  // "a-" "b"
  EXPECT_EQ(split_ids("MergedWithNext", "a-b"), (std::vector<int32_t>{1, 4}));      // "a" "-b"
  EXPECT_EQ(split_ids("Contiguous", "a--b"), (std::vector<int32_t>{1, 6, 5}));      // "a" "--" "b"
  EXPECT_EQ(split_ids("Isolated", "a--b"), (std::vector<int32_t>{1, 2, 2, 5}));     // "a" "-" "-" "b"
  // MergedWithNext: a match followed by a match stays alone ("-" "-b")
  EXPECT_EQ(split_ids("MergedWithNext", "a--b"), (std::vector<int32_t>{1, 2, 4}));
  // invert: the non-matches are the delimiters, "a" and "b" removed
  EXPECT_EQ(split_ids("Removed", "a-b", true), (std::vector<int32_t>{2}));
}

// Found by fuzz_tokenizer_json: a Replace pattern that matches the empty string. Expected ids from
// Hugging Face's tokenizers 0.23.2 on the same tokenizer.json: nothing for empty text, and the
// empty matches around each character replaced elsewhere ("b" -> "a ba ").
TEST(HfTokenizer, ReplaceWithEmptyMatches_EmptyTextStaysEmpty) {
  std::string j = wordpiece_json(R"({"type": "WhitespaceSplit"})");
  j.insert(1, R"("normalizer": {"type": "Replace", "pattern": {"Regex": "x*"}, "content": "a "}, )");
  auto t = hf_tokenizer_from_bytes(j, "replace.json", "", "");
  EXPECT_TRUE(t->encode("").empty());
  EXPECT_EQ(t->encode("b"), (std::vector<int32_t>{1, 5, 9}));
  EXPECT_EQ(t->encode("xxb"), (std::vector<int32_t>{1, 5, 9}));
  EXPECT_EQ(t->encode("-"), (std::vector<int32_t>{1, 2, 9}));
}

TEST(HfTokenizer, WordPiece_LongestPrefixThenContinuation_WholeWordUnknownOnFailure) {
  auto t = hf_tokenizer_from_bytes(wordpiece_json(R"({"type": "WhitespaceSplit"})"), "wp.json", "", "");
  EXPECT_EQ(t->encode("a-b ab-"), (std::vector<int32_t>{3, 8, 1, 8, 7}));  // a- ##b | a ##b ##-
  EXPECT_EQ(t->encode("ax b"), (std::vector<int32_t>{0, 5}));              // "x" unknown: the whole word
}

// ---- choosing the file; tokenizer_config.json ---------------------------------------------------
TEST(HfTokenizer, Folder_PrefersTokenizerJsonOverTokenizerModel) {
  const std::string dir = temp_dir("both");
  fs::copy_file(kFixtures + "/llama2/tokenizer.json", dir + "/tokenizer.json");
  fs::copy_file(kData + "/tiny_spm.model", dir + "/tokenizer.model");
  EXPECT_EQ(load_tokenizer_for(dir)->kind(), "tokenizer.json");
  fs::remove(dir + "/tokenizer.json");
  EXPECT_EQ(load_tokenizer_for(dir)->kind(), "tokenizer.model");
  fs::remove(dir + "/tokenizer.model");
  EXPECT_EQ(load_tokenizer_for(dir), nullptr);
  EXPECT_THROW(Tokenizer::load(dir), LoadError);
}

TEST(HfTokenizer, Config_AddEosToken_LlamaClassRebuildsTheTemplate) {
  const std::string dir = temp_dir("config");
  fs::copy_file(kFixtures + "/llama2/tokenizer.json", dir + "/tokenizer.json");
  auto plain = Tokenizer::load(dir);
  const std::vector<int32_t> body = plain->encode("Hello");
  EXPECT_EQ(plain->encode_special("Hello").front(), 1);  // tokenizer.json's own template: <s> first
  write_file(dir + "/tokenizer_config.json",
             R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": true,
                 "bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false}})");
  std::vector<int32_t> want = body;
  want.push_back(2);  // </s>
  EXPECT_EQ(Tokenizer::load(dir)->encode_special("Hello"), want);
  // Other classes keep tokenizer.json's post-processor.
  write_file(dir + "/tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_eos_token": true})");
  EXPECT_EQ(Tokenizer::load(dir)->encode_special("Hello").front(), 1);
}

TEST(HfTokenizer, EncodePrompt_SpecialTokensByTheTokenizersOwnRule) {
  auto hf = Tokenizer::load(kFixtures + "/llama2");
  EXPECT_EQ(encode_prompt(*hf, "Hi", true, 7), hf->encode_special("Hi"));  // config.json's bos not added twice
  EXPECT_EQ(encode_prompt(*hf, "Hi", false, 7), hf->encode("Hi"));
  auto spm = Tokenizer::load(kData + "/tiny_spm.model");
  std::vector<int32_t> want{1};
  for (int32_t id : spm->encode("Hi")) want.push_back(id);
  EXPECT_EQ(encode_prompt(*spm, "Hi", true, 1), want);
  EXPECT_EQ(encode_prompt(*spm, "Hi", false, 1), spm->encode("Hi"));
}

// ---- display ----------------------------------------------------------------------------------
TEST(HfTokenizer, DisplayPieces_ByteLevelDecodedAndSplitCharactersJoined) {
  auto tok = Tokenizer::load(kFixtures + "/llama3-32k");
  const std::vector<int32_t> ids = tok->encode("Hello world\n\xF0\x9F\x98\x80");  // 😀 spans three tokens here
  const std::vector<std::string> d = display_pieces(*tok, ids);
  ASSERT_EQ(d.size(), ids.size());
  EXPECT_EQ(d[0], "Hello");
  EXPECT_EQ(d[1], " world");
  EXPECT_EQ(d[2], "\\n");
  ASSERT_EQ(d.size(), 6u);  // the trimmed vocabulary spends three tokens on it
  EXPECT_EQ(d[3], "\\xF0\\x9F");          // the start of the character
  EXPECT_EQ(d[4], "\\x98");
  EXPECT_EQ(d[5], "\xF0\x9F\x98\x80");  // shown whole where it completes
  EXPECT_EQ(tok->raw_piece(ids[1]), "\xC4\xA0world");  // "Ġworld" as stored
}

TEST(HfTokenizer, DisplayPieces_ByteFallbackMergedAndSpecialMarked) {
  auto tok = Tokenizer::load(kFixtures + "/llama2");
  const std::vector<int32_t> ids = tok->encode_special("a\n\xE1\xBD\xA8");  // Ὠ is not in Llama-2's vocabulary
  const std::vector<std::string> d = display_pieces(*tok, ids);
  ASSERT_EQ(d.size(), ids.size());
  EXPECT_TRUE(tok->is_special(ids[0]));
  EXPECT_EQ(d[0], "<s>");
  EXPECT_EQ(d[1], " a");
  EXPECT_EQ(d[2], "\\n");
  ASSERT_EQ(d.size(), 6u);  // three byte-fallback pieces <0xE1> <0xBD> <0xA8>
  EXPECT_EQ(d[3], "\\xE1");
  EXPECT_EQ(d[4], "\\xBD");
  EXPECT_EQ(d[5], "\xE1\xBD\xA8");
  EXPECT_FALSE(tok->is_special(ids[1]));
  EXPECT_EQ(tok->piece(ids[1]), " a");
  EXPECT_EQ(tok->piece(-3), "<id -3>");
}

// A catastrophic-backtracking pattern on a long subject stops at PCRE2's match limit.
TEST(HfTokenizer, PathologicalRegex_StopsWithErrorNotHang) {
  auto t = hf_tokenizer_from_bytes(
      wordpiece_json(R"({"type": "Split", "pattern": {"Regex": "(a|aa)+(a|aa)+(a|aa)+$"}, "behavior": "Isolated"})"),
      "evil.json", "", "");
  EXPECT_THROW(t->encode(std::string(5000, 'a') + "b"), Error);
}

}  // namespace
}  // namespace hl

// The BPE word cache (engine/tokenizer/hf_tables.h) against a std::map holding the same words:
// hashes chosen to collide (long probe runs), the slot array grown, and emptied when full, as
// the map is.
TEST(HfWordCache, CollidingHashesAndClearWhenFull_SameAnswersAsAMap) {
  constexpr size_t kMax = 1500;  // above the first slot array (1024): it grows, then is cleared
  hl::hf::WordCache cache(kMax);
  std::map<std::string, std::vector<int32_t>> ref;
  std::mt19937 rng(7);
  for (int k = 0; k < 6000; ++k) {
    std::string w(1 + rng() % 7, 'a');
    for (char& c : w) c = static_cast<char>('a' + rng() % 4);
    const uint64_t h = w.size() * 2;  // few distinct hashes: every lookup walks a probe run
    std::vector<int32_t> got;
    const bool hit = cache.get(w, h, got);
    const auto it = ref.find(w);
    ASSERT_EQ(hit, it != ref.end()) << w;
    if (hit) {
      EXPECT_EQ(got, it->second) << w;
      continue;
    }
    std::vector<int32_t> ids(rng() % 5);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 1000);
    if (ref.size() >= kMax) ref.clear();
    ref[w] = ids;
    cache.put(w, h, ids.data(), ids.size());
  }
}
