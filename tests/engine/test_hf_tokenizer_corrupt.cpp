// Corruption table of the tokenizer.json / tokenizer_config.json reader (engine/tokenizer/
// hf_reader.cpp and the component factories): one row per defect, each a LoadError whose one-line
// message names the file, the JSON path of the object and what is allowed. Starts from a small valid
// byte-level BPE tokenizer that loads and encodes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/tokenizer/hf_tokenizer.h"

namespace hl {
namespace {

using nlohmann::json;

json valid() {
  return json::parse(R"({
    "added_tokens": [{"id": 5, "content": "<eos>", "special": true, "normalized": false}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "post_processor": {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "<eos>"}}],
                       "special_tokens": {"<eos>": {"id": "<eos>", "ids": [5], "tokens": ["<eos>"]}}},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4}, "merges": ["a b", "\u0120 ab"]}
  })");
}

struct Row {
  const char* defect;
  std::function<void(json&)> mutate;
  const char* message;  // a part of the one-line error
};

std::string load_error(const std::string& text, const std::string& config = "") {
  try {
    hf_tokenizer_from_bytes(text, "t/tokenizer.json", config, "t/tokenizer_config.json");
  } catch (const LoadError& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(HfTokenizerCorrupt, ValidBase_LoadsAndEncodes) {
  auto t = hf_tokenizer_from_bytes(valid().dump(), "t/tokenizer.json", "", "");
  EXPECT_EQ(t->encode_special("ab ab"), (std::vector<int32_t>{2, 4, 5}));
}

TEST(HfTokenizerCorrupt, EveryDefect_OneLineErrorNamingFileAndObject) {
  const std::vector<Row> rows = {
      {"model missing", [](json& j) { j.erase("model"); }, "t/tokenizer.json: model: is missing or not an object"},
      {"model type unknown", [](json& j) { j["model"]["type"] = "WordLevel"; }, "model.type: 'WordLevel' is not a supported model"},
      {"vocab not an object", [](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab: is not an object"},
      {"vocab id negative", [](json& j) { j["model"]["vocab"]["a"] = -1; }, "model.vocab.a: id -1 is outside [0, "},
      {"vocab id not integer", [](json& j) { j["model"]["vocab"]["a"] = "x"; }, "model.vocab.a: is not an integer id"},
      {"merge not two tokens", [](json& j) { j["model"]["merges"][0] = "ab"; }, "model.merges[0]: 'ab' is not two tokens"},
      {"merge of unknown token", [](json& j) { j["model"]["merges"][0] = "a c"; }, "model.merges[0]: names a token that is not"},
      {"merge result unknown", [](json& j) { j["model"]["merges"][0] = "b a"; }, "model.merges[0]: gives 'ba', which is not"},
      {"merge neither form", [](json& j) { j["model"]["merges"][0] = 7; }, "model.merges[0]: is neither"},
      {"unk token unknown", [](json& j) { j["model"]["unk_token"] = "<unk>"; }, "model.unk_token: '<unk>' is not in the vocabulary"},
      {"flag not boolean", [](json& j) { j["model"]["byte_fallback"] = 1; }, "model.byte_fallback: is not true or false"},
      {"normalizer unknown", [](json& j) { j["normalizer"]["normalizers"][0]["type"] = "Magic"; },
       "normalizer.normalizers[0].type: 'Magic' is not a supported normalizer"},
      {"charsmap not base64", [](json& j) { j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "!!!!"}}; },
       "normalizer.precompiled_charsmap: precompiled_charsmap is not base64"},
      {"charsmap too short", [](json& j) { j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAA="}}; },
       "normalizer.precompiled_charsmap: charsmap is 2 bytes"},
      {"charsmap trie beyond blob", [](json& j) { j["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "QAAAAAAAAAA="}}; },
       "charsmap trie size 64 is not a multiple of 4 in [4, 4]"},
      {"regex does not compile", [](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Split", "pattern": {"Regex": "(a"}})"); },
       "pre_tokenizer.pattern.Regex: regex does not compile at offset 2"},
      {"pattern neither form", [](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Split", "pattern": {"Glob": "*"}})"); },
       "pre_tokenizer.pattern: has neither \"String\" nor \"Regex\""},
      {"behavior unknown", [](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways"})"); },
       "pre_tokenizer.behavior: 'Sideways' is not one of"},
      {"prepend scheme unknown", [](json& j) { j["pre_tokenizer"] = json::parse(R"({"type": "Metaspace", "prepend_scheme": "sometimes"})"); },
       "pre_tokenizer.prepend_scheme: 'sometimes' is not one of always, first, never"},
      {"pre-tokenizers nested too deep",
       [](json& j) {
         json p = json::parse(R"({"type": "Whitespace"})");
         for (int k = 0; k < 12; ++k) p = {{"type", "Sequence"}, {"pretokenizers", json::array({p})}};
         j["pre_tokenizer"] = p;
       },
       "pre-tokenizers nested deeper than 8"},
      {"added tokens not array", [](json& j) { j["added_tokens"] = json::object(); }, "added_tokens: is not an array"},
      {"added token without id", [](json& j) { j["added_tokens"][0].erase("id"); }, "added_tokens[0].id: is missing"},
      {"added token too long", [](json& j) { j["added_tokens"][0]["content"] = std::string(5000, 'x'); },
       "added_tokens[0].content: is 5000 bytes (allowed at most 4096)"},
      {"template token undefined", [](json& j) { j["post_processor"]["special_tokens"] = json::object(); },
       "post_processor.special_tokens: has no entry '<eos>' used by single[1]"},
      {"template id out of range", [](json& j) { j["post_processor"]["special_tokens"]["<eos>"]["ids"][0] = -4; },
       "post_processor.special_tokens.<eos>.ids: holds an id outside [0, 2147483647]"},
      {"roberta cls malformed", [](json& j) { j["post_processor"] = json::parse(R"({"type": "RobertaProcessing", "cls": ["<s>"], "sep": ["</s>", 2]})"); },
       "post_processor.cls: is not [token, id]"},
      {"decoder unknown", [](json& j) { j["decoder"]["type"] = "CTC"; }, "decoder.type: 'CTC' is not a supported decoder"},
      {"strip content not one char", [](json& j) { j["decoder"] = json::parse(R"({"type": "Strip", "content": "ab", "start": 1, "stop": 0})"); },
       "decoder.content: is not one character"},
      {"unigram score not a number", [](json& j) { j["model"] = json::parse(R"({"type": "Unigram", "vocab": [["a", -1.5], ["b", "x"]]})"); },
       "model.vocab[1]: is not [piece, score]"},
      {"unigram score out of range", [](json& j) { j["model"] = json::parse(R"({"type": "Unigram", "vocab": [["a", 1e300]]})"); },
       "model.vocab[0]: score is outside (-1e30, 1e30)"},
      {"unigram unk_id outside", [](json& j) { j["model"] = json::parse(R"({"type": "Unigram", "unk_id": 3, "vocab": [["a", -1.0]]})"); },
       "model.unk_id: 3 is outside [-1, 0]"},
      {"wordpiece unk missing", [](json& j) { j["model"] = json::parse(R"({"type": "WordPiece", "vocab": {"a": 0}})"); },
       "model.unk_token: '[UNK]' is not in the vocabulary"},
  };
  for (const Row& r : rows) {
    json j = valid();
    r.mutate(j);
    const std::string msg = load_error(j.dump());
    EXPECT_NE(msg.find(r.message), std::string::npos) << r.defect << ": " << msg;
    EXPECT_EQ(msg.rfind("t/tokenizer.json: ", 0), 0u) << r.defect << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << r.defect;
  }
}

TEST(HfTokenizerCorrupt, NotJsonOrTooDeep_OneLineErrors) {
  EXPECT_NE(load_error("").find("t/tokenizer.json: tokenizer.json is empty"), std::string::npos);
  EXPECT_NE(load_error("{\"model\": ").find("tokenizer.json is not valid JSON"), std::string::npos);
  EXPECT_NE(load_error("[1, 2]").find("t/tokenizer.json: is not a JSON object"), std::string::npos);
  EXPECT_NE(load_error(std::string(100, '[') + std::string(100, ']')).find("nests objects deeper than 64 levels"),
            std::string::npos);
}

TEST(HfTokenizerCorrupt, ConfigDefects_NameTheConfigFile) {
  const std::string t = valid().dump();
  EXPECT_NE(load_error(t, "[]").find("t/tokenizer_config.json: is not a JSON object"), std::string::npos);
  EXPECT_NE(load_error(t, "{\"tokenizer_class\": 3}").find("t/tokenizer_config.json: tokenizer_class: is not a string"),
            std::string::npos);
  EXPECT_NE(load_error(t, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "bos_token": "<s>"})")
                .find("t/tokenizer_config.json: bos_token: '<s>' is not a token of the vocabulary"),
            std::string::npos);
  EXPECT_NE(load_error(t, R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false, "add_eos_token": true, "eos_token": 5})")
                .find("eos_token: is neither a string nor an object with \"content\""),
            std::string::npos);
}

// The size limit is checked on the file's size, before anything is read (a sparse file here).
TEST(HfTokenizerCorrupt, OversizeFile_RefusedBeforeReading) {
  const std::string path = (std::filesystem::path(testing::TempDir()) / "hl_huge_tokenizer.json").string();
  { std::ofstream f(path); }
  std::filesystem::resize_file(path, kMaxTokenizerJsonBytes + 1);
  try {
    load_hf_tokenizer(path, "");
    FAIL() << "loaded";
  } catch (const LoadError& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the limit of " + std::to_string(kMaxTokenizerJsonBytes)), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace hl
