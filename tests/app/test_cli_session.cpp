// `hybridlens record` and `hybridlens compare` end to end (trace-format.md §4, issue 6): runs the
// built binary as a child process on a generated checkpoint, reads the session it writes with the
// session reader, and checks the one-line errors of bad arguments and bad files.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/checkpoint.h"
#include "engine/model/generator.h"
#include "sessions/session_file.h"
#include "tests/app/cli_test_util.h"

namespace {

using hl::test::cli_scratch;
using hl::test::count_lines;
using hl::test::hybridlens;
using hl::test::read_text;
using Result = hl::test::CliResult;

// A small generated checkpoint: V 64, 4 layers (attention at 1, MoE on odd layers).
class RecordCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = cli_scratch() + "/ckpt";
    hl::GenerateOptions g;
    g.config = hl::preset_config("demo-random");
    g.config.vocab_size = 64;
    g.config.hidden_size = 32;
    g.config.num_hidden_layers = 4;
    g.config.attn_layer_period = 4;
    g.config.attn_layer_offset = 1;
    g.config.mamba_dt_rank = 2;
    g.seed = 3;
    hl::generate_checkpoint(dir_, g);
  }
  static std::string dir_;
};
std::string RecordCli::dir_;

TEST_F(RecordCli, CompareNormalizer_WritesAnABSessionOverTheSameTokens) {
  const std::string f = cli_scratch() + "/ab.hlsession";
  Result r = hybridlens({"record", "--checkpoint", dir_, "--ids", "1,5,9", "--generate", "4", "--ignore-eos",
                         "--compare-normalizer", "softmax1", "--out", f});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + f), std::string::npos) << r.out;
  const hl::Recording rec = hl::load_session(f);
  ASSERT_EQ(rec.runs.size(), 2u);
  EXPECT_EQ(rec.tokens.size(), 7u);
  EXPECT_EQ(rec.runs[0].prompt_tokens, 3);
  EXPECT_FALSE(rec.runs[0].settings.normalizer_override);
  EXPECT_TRUE(rec.runs[1].settings.normalizer_override);
  EXPECT_EQ(rec.runs[1].settings.normalizer, hl::Normalizer::Softmax1);
  for (size_t t = 0; t < 7; ++t) {
    EXPECT_EQ(rec.runs[1].records[t].token_id, rec.tokens[t]);
    EXPECT_EQ(rec.runs[0].records[t].token_id, rec.tokens[t]);
    EXPECT_FALSE(rec.runs[0].records[t].attn_rows.empty());
  }
  EXPECT_EQ(rec.checkpoint.config_sha256, hl::Checkpoint::open(dir_).config_sha256());
  EXPECT_EQ(rec.checkpoint.weights_hash.size(), 64u);

  Result c = hybridlens({"compare", f});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("settings: normalizer: as-trained -> softmax1"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("tokens: 7 common"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("attn_mass"), std::string::npos) << c.out;
  Result j = hybridlens({"compare", f, f, "--run-a", "B", "--run-b", "B", "--json"});
  ASSERT_EQ(j.status, 0) << j.err;
  const nlohmann::json js = nlohmann::json::parse(j.out);
  EXPECT_EQ(js["first_diff_token"], -1);
  EXPECT_EQ(js["top1_agree"], 7);
  EXPECT_EQ(js["fields"]["attn_rows"]["max_abs"], 0.0);
}

TEST_F(RecordCli, CompareRegisters_NoFullAndF16Logits) {
  const std::string f = cli_scratch() + "/reg.hlsession";
  Result r = hybridlens({"record", "--checkpoint", dir_, "--ids", "1,2,3,4", "--compare-registers", "3", "--no-full",
                         "--logits-dtype", "f16", "--out", f});
  ASSERT_EQ(r.status, 0) << r.err;
  const hl::Recording rec = hl::load_session(f);
  ASSERT_EQ(rec.runs.size(), 2u);
  EXPECT_EQ(rec.runs[0].settings.registers_used, 0);
  EXPECT_EQ(rec.runs[1].settings.registers_used, 3);
  EXPECT_TRUE(rec.runs[0].records[2].attn_rows.empty());
  EXPECT_FALSE(rec.runs[0].settings.full);
  Result c = hybridlens({"compare", f, "--json"});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("registers: 0 -> 3"), std::string::npos) << c.out;
}

TEST_F(RecordCli, SampledGeneration_SameSeedSameTokens) {
  const std::string a = cli_scratch() + "/s1.hlsession", b = cli_scratch() + "/s2.hlsession";
  for (const std::string& f : {a, b}) {
    Result r = hybridlens({"record", "--checkpoint", dir_, "--ids", "1", "--generate", "12", "--ignore-eos",
                           "--temperature", "1.2", "--top-p", "0.9", "--seed", "77", "--out", f});
    ASSERT_EQ(r.status, 0) << r.err;
  }
  const hl::Recording ra = hl::load_session(a), rb = hl::load_session(b);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(ra.runs[0].settings.sampling.seed, 77u);
  Result c = hybridlens({"compare", a, b});
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out.find("first differing token (any field): none"), std::string::npos) << c.out;
}

TEST_F(RecordCli, CompareOfDifferentCheckpointsOrPrompts_Warns) {
  // Issue 17 finding 7: "settings: identical" with no word that the sessions are not comparable.
  const std::string other = cli_scratch() + "/ckpt_other";
  hl::GenerateOptions g;
  g.config = hl::Checkpoint::open(dir_).config();
  g.seed = 4;  // same shape, other weights
  hl::generate_checkpoint(other, g);
  const std::string a = cli_scratch() + "/w1.hlsession", b = cli_scratch() + "/w2.hlsession", c = cli_scratch() + "/w3.hlsession";
  ASSERT_EQ(hybridlens({"record", "--checkpoint", dir_, "--ids", "1,2,3", "--out", a}).status, 0);
  ASSERT_EQ(hybridlens({"record", "--checkpoint", other, "--ids", "1,2,3", "--out", b}).status, 0);
  ASSERT_EQ(hybridlens({"record", "--checkpoint", dir_, "--ids", "1,2,7,8", "--out", c}).status, 0);

  Result same = hybridlens({"compare", a, a});
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_NE(same.out.find("settings: identical"), std::string::npos) << same.out;
  EXPECT_EQ(same.out.find("WARNING"), std::string::npos) << same.out;

  Result ckpt = hybridlens({"compare", a, b});
  ASSERT_EQ(ckpt.status, 0) << ckpt.err;
  EXPECT_NE(ckpt.out.find("WARNING: different checkpoints: ckpt vs ckpt_other ("), std::string::npos)
      << ckpt.out;
  EXPECT_EQ(ckpt.out.find("\nsettings: identical"), std::string::npos) << ckpt.out;

  Result tokens = hybridlens({"compare", a, c, "--json"});
  ASSERT_EQ(tokens.status, 0) << tokens.err;
  const nlohmann::json js = nlohmann::json::parse(tokens.out);
  ASSERT_EQ(js["warnings"].size(), 1u) << tokens.out;
  EXPECT_EQ(js["warnings"][0], "different tokens from token 2: only the first 2 are compared");
  EXPECT_NE(tokens.err.find("warning: different tokens from token 2"), std::string::npos) << tokens.err;
}

TEST_F(RecordCli, BadArgumentsAndFiles_OneLineErrors) {
  const std::string f = cli_scratch() + "/bad.hlsession";
  const std::vector<std::vector<std::string>> usage = {
      {"record", "--checkpoint", dir_, "--ids", "1", "--compare-normalizer", "softmax1", "--compare-registers", "1",
       "--out", f},
      {"record", "--checkpoint", dir_, "--ids", "1", "--top-p", "0.5", "--out", f},
      {"record", "--checkpoint", dir_, "--ids", "1", "--logits-dtype", "f64", "--out", f},
      {"record", "--checkpoint", dir_, "--ids", "1", "--compare-normalizer", "max", "--out", f},
      {"record", "--checkpoint", dir_, "--ids", "1"},
      {"compare"},
      {"compare", "a", "b", "c"},
  };
  for (const auto& args : usage) {
    Result r = hybridlens(args);
    EXPECT_EQ(r.status, 2) << args[0] << " " << args.back() << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
  }
  Result vocab = hybridlens({"record", "--checkpoint", dir_, "--ids", "1,64", "--out", f});
  EXPECT_EQ(vocab.status, 1);
  EXPECT_NE(vocab.err.find("outside the vocabulary [0, 64)"), std::string::npos) << vocab.err;
  Result folder = hybridlens({"record", "--checkpoint", dir_, "--ids", "1", "--out", "/nonexistent/x.hlsession"});
  EXPECT_EQ(folder.status, 1);
  EXPECT_EQ(count_lines(folder.err), 1) << folder.err;

  const std::string corpus = std::string(HL_SOURCE_DIR) + "/tests/fuzz/corpus/session/";
  Result version = hybridlens({"compare", corpus + "bad_version.hlsession"});
  EXPECT_EQ(version.status, 1);
  EXPECT_NE(version.err.find("bad_version.hlsession: manifest: field 'format_version': expected format_version 1 (what "
                             "this build reads), got 2"),
            std::string::npos)
      << version.err;
  EXPECT_EQ(count_lines(version.err), 1) << version.err;
  Result one = hybridlens({"compare", corpus + "valid_nofull_f16logits.hlsession"});
  EXPECT_EQ(one.status, 1);
  EXPECT_NE(one.err.find("needs two"), std::string::npos) << one.err;
  Result label = hybridlens({"compare", corpus + "valid_ab.hlsession", "--run-b", "Z"});
  EXPECT_EQ(label.status, 1);
  EXPECT_NE(label.err.find("no run labelled 'Z' (runs: A, B)"), std::string::npos) << label.err;
}

TEST(RecordCliAdapter, Adapter_MergedAndIdentified) {
  const std::string base = std::string(HL_SOURCE_DIR) + "/tests/golden/gqa_basic";
  const std::string adapter = std::string(HL_SOURCE_DIR) + "/tests/golden/adapters/dora";
  const std::string plain = cli_scratch() + "/plain.hlsession", merged = cli_scratch() + "/merged.hlsession";
  ASSERT_EQ(hybridlens({"record", "--checkpoint", base, "--ids", "1,2,3", "--out", plain}).status, 0);
  Result r = hybridlens({"record", "--checkpoint", base, "--ids", "1,2,3", "--adapter", adapter, "--out", merged});
  ASSERT_EQ(r.status, 0) << r.err;
  const hl::Recording rec = hl::load_session(merged);
  EXPECT_NE(rec.adapter_identity.find("config_sha256="), std::string::npos) << rec.adapter_identity;
  EXPECT_NE(rec.runs[0].settings.adapter.find("dora"), std::string::npos);
  Result c = hybridlens({"compare", plain, merged, "--json"});
  ASSERT_EQ(c.status, 0) << c.err;
  const nlohmann::json js = nlohmann::json::parse(c.out);
  EXPECT_GT(js["fields"]["logits"]["max_abs"].get<double>(), 0.0);
  EXPECT_EQ(js["settings_differences"].size(), 1u);
}

}  // namespace
