// Every option a headless command's --help lists works (issue 17 item 8): the options are parsed
// from `hybridlens COMMAND --help`, each is run with a valid value on the bundled baseline model
// (exit 0, nothing "unknown"), every option appears in the help's own synopsis, and the README's
// "Headless commands" table names exactly the options of each command. Label `cli`.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/generator.h"
#include "tests/app/cli_test_util.h"

namespace fs = std::filesystem;

namespace {

using hl::test::read_text;
using Result = hl::test::CliResult;

fs::path scratch() { return hl::test::cli_scratch(); }

// `hybridlens ARGS` as the user runs it, on the offscreen Qt platform (export and the GUI commands).
Result run(const std::vector<std::string>& args) { return hl::test::hybridlens(args, {"QT_QPA_PLATFORM=offscreen"}); }

// The options of `hybridlens CMD --help` ("  --name VALUE  text" lines), without --help.
std::set<std::string> helpOptions(const std::string& help) {
  std::set<std::string> names;
  const size_t at = help.find("\noptions:\n");
  std::istringstream lines(at == std::string::npos ? std::string() : help.substr(at));
  const std::regex line(R"(^  --([a-z0-9-]+))");
  for (std::string l; std::getline(lines, l);) {
    std::smatch m;
    if (std::regex_search(l, m, line) && m[1] != "help") names.insert(m[1]);
  }
  return names;
}

// Every "--name" in `text`.
std::set<std::string> mentioned(const std::string& text) {
  std::set<std::string> names;
  const std::regex opt(R"(--([a-z][a-z0-9-]*))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), opt); it != std::sregex_iterator(); ++it)
    names.insert((*it)[1]);
  names.erase("help");
  return names;
}

std::string model() {
  return std::string(HL_SOURCE_DIR) + "/resources/models/baseline";
}
std::string finetune(const std::string& rel) {
  return std::string(HL_SOURCE_DIR) + "/resources/models/finetunes/" + rel;
}

// A session and a trace of the baseline for compare / export (recorded once).
const std::string& sessionFile() {
  static const std::string s = [] {
    const std::string p = (scratch() / "ab.hlsession").string();
    const Result r = run({"record", "--checkpoint", model(), "--ids", "1,2,3,4", "--compare-normalizer", "softmax1",
                          "--out", p});
    if (r.status != 0) ADD_FAILURE() << r.err;
    return p;
  }();
  return s;
}
const std::string& traceFile() {
  static const std::string s = [] {
    const std::string p = (scratch() / "t.safetensors").string();
    const Result r = run({"trace", "--checkpoint", model(), "--ids", "1,2,3", "--full", "--out", p});
    if (r.status != 0) ADD_FAILURE() << r.err;
    return p;
  }();
  return s;
}
const std::string& doraFile() {
  static const std::string s = [] {
    const std::string p = (scratch() / "d.csv").string();
    const Result r = run({"dora", "--base", model(), "--adapter", finetune("dora/step-30"), "--out", p});
    if (r.status != 0) ADD_FAILURE() << r.err;
    return p;
  }();
  return s;
}

// The bundled model with a chat template beside it (links to its files), and a chat file.
const std::string& chatModel() {
  static const std::string s = [] {
    const fs::path d = scratch() / "chat_model";
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(model()))
      if (e.is_regular_file() && !fs::exists(d / e.path().filename())) fs::create_symlink(e.path(), d / e.path().filename());
    std::ofstream(d / "chat_template.jinja") << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                                                "{% if add_generation_prompt %}assistant:{% endif %}";
    return d.string();
  }();
  return s;
}
const std::string& chatFile() {
  static const std::string s = [] {
    const fs::path p = scratch() / "chat.json";
    std::ofstream(p) << R"([{"role": "user", "content": "The grep command"}])";
    return p.string();
  }();
  return s;
}

// A small Falcon-H1 (Mamba-2 parts for hidden-attention) with the bundled tokenizer (same vocabulary
// size) and a chat template beside it.
const std::string& mamba2Model() {
  static const std::string s = [] {
    const fs::path d = scratch() / "falcon";
    hl::GenerateOptions o;
    o.config = hl::preset_config("falcon-h1-tiny");
    o.seed = 1;
    hl::generate_checkpoint(d.string(), o);
    if (!fs::exists(d / "tokenizer.model")) fs::create_symlink(fs::path(model()) / "tokenizer.model", d / "tokenizer.model");
    std::ofstream(d / "chat_template.jinja") << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}";
    return d.string();
  }();
  return s;
}

// For each command: a command line per option that uses it with a valid value.
using Cases = std::map<std::string, std::vector<std::string>>;

Cases cases(const std::string& cmd) {
  const std::string m = model(), out = (scratch() / "x").string();
  if (cmd == "info")
    return {{"checkpoint", {"info", "--checkpoint", m}},
            {"json", {"info", "--checkpoint", m, "--json"}},
            {"weights", {"info", "--checkpoint", m, "--weights", "q4_k"}}};
  if (cmd == "memory") {
    const std::string c = m + "/config.json";
    return {{"config", {"memory", "--config", c, "--context", "64"}},
            {"context", {"memory", "--config", c, "--context", "4096"}},
            {"dtype-bytes", {"memory", "--config", c, "--context", "64", "--dtype-bytes", "2"}},
            {"json", {"memory", "--config", c, "--context", "64", "--json"}}};
  }
  if (cmd == "dora")
    return {{"base", {"dora", "--base", m, "--adapter", finetune("dora/step-30"), "--out", out + ".csv"}},
            {"adapter", {"dora", "--base", m, "--adapter", finetune("lora/step-30"), "--out", out + ".csv"}},
            {"tuned", {"dora", "--base", m, "--tuned", finetune("full/step-60"), "--out", out + ".csv"}},
            {"out", {"dora", "--base", m, "--adapter", finetune("dora/step-30"), "--out", out + "2.csv"}}};
  if (cmd == "hidden-attention") {
    const std::string f = mamba2Model();
    const std::vector<std::string> b = {cmd, "--checkpoint", f, "--ids", "1,2,3,4"};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> v = b;
      v.insert(v.end(), extra.begin(), extra.end());
      return v;
    };
    return {{"checkpoint", b},
            {"ids", b},
            {"prompt", {cmd, "--checkpoint", f, "--prompt", "a b"}},
            {"no-bos", {cmd, "--checkpoint", f, "--prompt", "a b", "--no-bos"}},
            {"chat", {cmd, "--checkpoint", f, "--chat", chatFile()}},
            {"layer", with({"--layer", "3"})},
            {"token", with({"--token", "1"})},
            {"head", with({"--head", "5"})},
            {"top", with({"--top", "2"})},
            {"registers", with({"--registers", "2"})},
            {"csv", with({"--csv", out + ".csv"})}};
  }
  if (cmd == "bench") {
    const std::vector<std::string> b = {"bench", "--checkpoint", m, "--tokens", "2", "--rounds", "1", "--prefill", "4"};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> v = b;
      v.insert(v.end(), extra.begin(), extra.end());
      return v;
    };
    return {{"checkpoint", b}, {"tokens", b}, {"rounds", b}, {"prefill", b},
            {"backend", with({"--backend", "cpu"})}, {"json", with({"--json"})},
            {"weights", {"bench", "--checkpoint", m, "--tokens", "2", "--rounds", "1", "--weights", "as-stored,q8_0"}}};
  }
  if (cmd == "trace" || cmd == "record") {
    const std::string file = out + (cmd == "trace" ? ".safetensors" : ".hlsession");
    const std::vector<std::string> b = {cmd, "--checkpoint", m, "--ids", "1,2,3", "--out", file};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> v = b;
      v.insert(v.end(), extra.begin(), extra.end());
      return v;
    };
    Cases c = {{"checkpoint", b},
               {"ids", b},
               {"out", b},
               {"prompt", {cmd, "--checkpoint", m, "--prompt", "a b", "--out", file}},
               {"no-bos", {cmd, "--checkpoint", m, "--prompt", "a b", "--no-bos", "--out", file}},
               {"generate", with({"--generate", "2"})},
               {"ignore-eos", with({"--generate", "2", "--ignore-eos"})},
               {"normalizer", with({"--normalizer", "softmax1"})},
               {"registers", with({"--registers", "2"})},
               {"adapter", with({"--adapter", finetune("dora/step-30")})},
               {"backend", with({"--backend", "cpu"})}};
    c["memory-budget"] = with({"--memory-budget", "4G"});
    c["weights"] = with({"--weights", "q8_0"});
    c["max-context"] = with({"--max-context", "64"});
    c["chat"] = {cmd, "--checkpoint", chatModel(), "--chat", chatFile(), "--out", file};
    c["pipeline"] = with({"--pipeline"});  // without mpirun: one stage
    if (cmd == "trace") {
      c["full"] = with({"--full"});
    } else {
      c["temperature"] = with({"--generate", "2", "--temperature", "0.8"});
      c["top-p"] = with({"--generate", "2", "--temperature", "0.8", "--top-p", "0.9"});
      c["seed"] = with({"--generate", "2", "--temperature", "0.8", "--seed", "7"});
      c["compare-normalizer"] = with({"--compare-normalizer", "softmax1"});
      c["compare-registers"] = with({"--compare-registers", "1"});
      c["no-full"] = with({"--no-full"});
      c["logits-dtype"] = with({"--logits-dtype", "bf16"});
      c["full-dtype"] = with({"--full-dtype", "f32"});
    }
    return c;
  }
  if (cmd == "sweep") {
    // Text, ids and chat lines on the bundled model with a chat template beside it.
    const std::string prompts = (scratch() / "prompts.jsonl").string(), file = out + ".hlstats";
    std::ofstream(prompts) << "{\"text\": \"The grep command\"}\n{\"ids\": [1, 5, 9]}\n"
                              "{\"messages\": [{\"role\": \"user\", \"content\": \"a b\"}]}\n";
    const std::string keep = (scratch() / "kept").string();
    fs::create_directories(keep);
    const std::vector<std::string> b = {cmd, "--checkpoint", chatModel(), "--prompts", prompts, "--out", file};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> v = b;
      v.insert(v.end(), extra.begin(), extra.end());
      return v;
    };
    return {{"checkpoint", b},
            {"prompts", b},
            {"out", b},
            {"no-bos", with({"--no-bos"})},
            {"generate", with({"--generate", "2"})},
            {"ignore-eos", with({"--generate", "2", "--ignore-eos"})},
            {"temperature", with({"--generate", "2", "--temperature", "0.8"})},
            {"top-p", with({"--generate", "2", "--temperature", "0.8", "--top-p", "0.9"})},
            {"seed", with({"--generate", "2", "--temperature", "0.8", "--seed", "7"})},
            {"normalizer", with({"--normalizer", "softmax1"})},
            {"registers", with({"--registers", "2"})},
            {"adapter", with({"--adapter", finetune("dora/step-30")})},
            {"backend", with({"--backend", "cpu"})},
            {"weights", with({"--weights", "q8_0"})},
            {"memory-budget", with({"--memory-budget", "4G"})},
            {"max-context", with({"--max-context", "64"})},
            {"sketch-accuracy", with({"--sketch-accuracy", "0.05"})},
            {"no-full", with({"--no-full"})},
            {"keep-sessions", with({"--keep-sessions", keep})},
            {"hidden-attention", with({"--hidden-attention"})},
            {"pipeline", with({"--pipeline"})},  // without mpirun: one stage
            {"stages", with({"--pipeline", "--stages", "1"})}};
  }
  if (cmd == "tokenize") {
    return {{"tokenizer", {"tokenize", "--tokenizer", m, "--text", "The grep command"}},
            {"text", {"tokenize", "--tokenizer", m, "--text", "a b"}},
            {"text-file", {"tokenize", "--tokenizer", m, "--text-file", chatFile()}},
            {"no-special", {"tokenize", "--tokenizer", m, "--text", "a b", "--no-special"}},
            {"json", {"tokenize", "--tokenizer", m, "--text", "a b", "--json"}},
            {"decode", {"tokenize", "--tokenizer", m, "--decode", "5,6,7"}}};
  }
  if (cmd == "compare") {
    const std::string s = sessionFile();
    return {{"run-a", {"compare", s, s, "--run-a", "A", "--run-b", "B"}},
            {"run-b", {"compare", s, "--run-b", "B"}},
            {"json", {"compare", s, "--json"}}};
  }
  if (cmd == "export") {
    const std::string s = sessionFile(), dir = (scratch() / "fig").string();
    const std::vector<std::string> b = {"export", "--session", s, "--out", dir, "--views", "entropy,latency"};
    auto with = [&](std::vector<std::string> extra) {
      std::vector<std::string> v = b;
      v.insert(v.end(), extra.begin(), extra.end());
      return v;
    };
    return {{"session", b},
            {"out", b},
            {"views", b},
            {"trace", {"export", "--trace", traceFile(), "--out", dir, "--views", "attention"}},
            {"dora", {"export", "--trace", traceFile(), "--dora", doraFile(), "--out", dir, "--views", "dora"}},
            {"checkpoint", {"export", "--trace", traceFile(), "--checkpoint", model(), "--out", dir, "--views", "ribbon"}},
            {"format", with({"--format", "svg,pdf"})},
            {"width", with({"--width", "640"})},
            {"height", with({"--height", "480"})},
            {"dpi", with({"--dpi", "96"})},
            {"step", with({"--step", "1"})},
            {"layer", with({"--layer", "2"})},
            {"head", with({"--head", "1"})},
            {"dark", with({"--dark"})},
            {"no-csv", with({"--no-csv"})}};
  }
  return {};
}

class EveryHelpOption : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryHelpOption, RunsWithAValidValue_AndIsInTheSynopsis) {
  const std::string cmd = GetParam();
  if (cmd == "export" && !HL_HAVE_EXPORT) GTEST_SKIP() << "`export` draws with Qt: not in a build without the GUI";
  const Result help = run({cmd, "--help"});
  ASSERT_EQ(help.status, 0) << help.err;
  const std::set<std::string> listed = helpOptions(help.out);
  ASSERT_FALSE(listed.empty()) << help.out;
  // The synopsis (the usage lines before the summary) names every option.
  const std::string synopsis = help.out.substr(0, help.out.find("\n\n"));
  const std::set<std::string> inSynopsis = mentioned(synopsis);
  for (const std::string& o : listed) EXPECT_TRUE(inSynopsis.count(o)) << cmd << ": --" << o << " is not in the usage line";
  const Cases c = cases(cmd);
  for (const std::string& o : listed) {
    const auto it = c.find(o);
    if (it == c.end()) {
      ADD_FAILURE() << cmd << " --" << o << ": listed by --help but this test has no valid value for it";
      continue;
    }
    const Result r = run(it->second);
    EXPECT_EQ(r.status, 0) << cmd << " --" << o << ": " << r.err;
    EXPECT_EQ(r.err.find("unknown option"), std::string::npos) << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Commands, EveryHelpOption,
                         ::testing::Values("info", "trace", "memory", "dora", "bench", "record", "tokenize", "compare", "export",
                                           "hidden-attention", "sweep"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// The README's "Headless commands" table: each command's row names exactly its --help options.
TEST(Readme, HeadlessCommandsTable_MatchesEachCommandsHelp) {
  const std::string readme = read_text(std::string(HL_SOURCE_DIR) + "/README.md");
  const size_t at = readme.find("## Headless commands");
  ASSERT_NE(at, std::string::npos);
  const std::string section = readme.substr(at, readme.find("\n## ", at + 1) - at);
  for (const std::string cmd :
       {"info", "trace", "memory", "dora", "bench", "record", "tokenize", "compare", "export", "hidden-attention", "sweep"}) {
    if (cmd == "export" && !HL_HAVE_EXPORT) continue;  // drawn with Qt: not in a build without the GUI
    const std::string key = "| `hybridlens " + cmd + " ";
    const size_t row = section.find(key);
    ASSERT_NE(row, std::string::npos) << "no README row for " << cmd;
    const size_t codeEnd = section.find("` |", row + key.size());
    const std::string synopsis = section.substr(row, codeEnd - row);
    const std::set<std::string> readmeOpts = mentioned(synopsis);
    const std::set<std::string> helpOpts = helpOptions(run({cmd, "--help"}).out);
    EXPECT_EQ(readmeOpts, helpOpts) << "README row of `" << cmd << "`: " << synopsis;
  }
}

}  // namespace

#include "engine/io/safetensors.h"

namespace {

// `memory` with its default element size reports the bytes the engine records for the same
// context (the app's status bar and KV view show those): fp32 KV cache and state.
TEST(CliMemory, DefaultDtypeBytes_EqualTheEnginesRecordedKvAndStateBytes) {
  const std::string trace = (scratch() / "mem.safetensors").string();
  const Result t = run({"trace", "--checkpoint", model(), "--ids", "1,2,3,4,5", "--registers", "0", "--out", trace});
  ASSERT_EQ(t.status, 0) << t.err;
  const hl::SafetensorsFile f = hl::SafetensorsFile::open(trace);
  const hl::TensorInfo* kv = f.find("kv_cache_bytes");
  const hl::TensorInfo* st = f.find("ssm_state_bytes");
  ASSERT_TRUE(kv && st);
  const int64_t kvLast = reinterpret_cast<const int64_t*>(kv->data)[kv->numel() - 1];
  const int64_t state = reinterpret_cast<const int64_t*>(st->data)[0];
  const Result m = run({"memory", "--config", model() + "/config.json", "--context", "5", "--json"});
  ASSERT_EQ(m.status, 0) << m.err;
  EXPECT_NE(m.out.find("\"kv_bytes\": " + std::to_string(kvLast) + ","), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("\"state_bytes\": " + std::to_string(state) + ","), std::string::npos) << m.out;
  EXPECT_NE(m.out.find("\"dtype_bytes\": 4,"), std::string::npos) << m.out;
}

}  // namespace
