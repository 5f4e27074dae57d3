// Command-line contract of the `hybridlens` executable (trace-format.md §3–§4): runs the built
// binary as a child process; bad arguments exit non-zero with exactly one line on stderr, --help
// exits 0, and `info` / `trace` work end to end on a generated random-weight checkpoint.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/model/generator.h"
#include "engine/tokenizer/tokenizer.h"
#include "tests/engine/test_util.h"

namespace fs = std::filesystem;

namespace {

struct RunResult {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
};

std::string readFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// This test process's folder, removed when it ends unless a test failed (process_scratch).
fs::path scratchDir() {
  return fs::path(hl::test::process_scratch());
}

// Runs hybridlens with `args`; `env` entries "NAME=value" replace the environment when
// `replaceEnv`, else are added to it. Killed after 120 s.
RunResult runHybridlens(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                        bool replaceEnv = false) {
  static int counter = 0;
  const fs::path outPath = scratchDir() / ("out" + std::to_string(counter) + ".txt");
  const fs::path errPath = scratchDir() / ("err" + std::to_string(counter++) + ".txt");
  std::vector<std::string> argvStore = {HL_HYBRIDLENS};
  argvStore.insert(argvStore.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(argvStore.size() + 1);
  for (auto& a : argvStore) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envStore;
  if (!replaceEnv)
    for (char** e = environ; *e; ++e) envStore.emplace_back(*e);
  envStore.insert(envStore.end(), env.begin(), env.end());
  std::vector<char*> envp;
  envp.reserve(envStore.size() + 1);
  for (auto& e : envStore) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid == 0) {
    int in = ::open("/dev/null", O_RDONLY);
    int out = ::open(outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(126);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  RunResult r;
  int wstatus = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (true) {
    pid_t done = ::waitpid(pid, &wstatus, WNOHANG);
    if (done == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &wstatus, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
  r.out = readFile(outPath);
  r.err = readFile(errPath);
  return r;
}

// Removes the scratch folder when the test program ends.
class ScratchCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(scratchDir(), ec);
  }
};
[[maybe_unused]] ::testing::Environment* const kScratchCleanup =
    ::testing::AddGlobalTestEnvironment(new ScratchCleanup);

int lineCount(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n');
}

// The contract for every failure: non-zero exit, exactly one line on stderr.
void expectOneLineFailure(const std::vector<std::string>& args, const std::string& mustMention = "") {
  std::string cmd;
  for (const auto& a : args) cmd += " " + a;
  RunResult r = runHybridlens(args);
  EXPECT_NE(r.status, 0) << "hybridlens" << cmd << " succeeded; stdout: " << r.out;
  EXPECT_LT(r.status, 128) << "hybridlens" << cmd << " died of a signal; stderr: " << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << "hybridlens" << cmd << " stderr:\n" << r.err;
  if (!mustMention.empty())
    EXPECT_NE(r.err.find(mustMention), std::string::npos) << "hybridlens" << cmd << " stderr: " << r.err;
}

}  // namespace

TEST(CliUsage, Help_ExitsZero_PrintsCommands) {
  RunResult r = runHybridlens({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("usage: hybridlens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("info"), std::string::npos);
  EXPECT_NE(r.out.find("trace"), std::string::npos);
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(CliUsage, Version_ExitsZero_PrintsVersion) {
  RunResult r = runHybridlens({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, std::string("hybridlens ") + HL_VERSION + "\n");
}

TEST(CliUsage, CommandHelp_ExitsZero_ListsOptions) {
  for (const char* cmd : {"info", "trace"}) {
    RunResult r = runHybridlens({cmd, "--help"});
    EXPECT_EQ(r.status, 0) << cmd;
    EXPECT_NE(r.out.find("--checkpoint"), std::string::npos) << cmd << ": " << r.out;
    EXPECT_TRUE(r.err.empty()) << cmd << ": " << r.err;
  }
}

TEST(CliUsage, BadArguments_NonZeroWithOneLine) {
  expectOneLineFailure({"frobnicate"}, "unknown command");
  expectOneLineFailure({"--frobnicate"}, "unknown option");
  expectOneLineFailure({"info"}, "--checkpoint");
  expectOneLineFailure({"info", "--checkpoint"}, "needs a value");
  expectOneLineFailure({"info", "--checkpoint", "x", "--bogus"}, "unknown option --bogus");
  expectOneLineFailure({"info", "--checkpoint", "x", "--checkpoint", "y"}, "more than once");
  expectOneLineFailure({"info", "--json=1", "--checkpoint", "x"}, "takes no value");
  expectOneLineFailure({"info", "stray", "--checkpoint", "x"}, "unexpected argument");
  expectOneLineFailure({"info", "--checkpoint", "/nonexistent/hybridlens-checkpoint"});
  expectOneLineFailure({"trace", "--checkpoint", "x", "--out", "t.safetensors"}, "--ids or --prompt");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--prompt", "a", "--out", "t.safetensors"},
                       "exclude");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1"}, "--out");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--no-bos", "--out", "t.safetensors"}, "--no-bos");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--ignore-eos", "--out", "t.safetensors"},
                       "--ignore-eos");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--generate", "many", "--out", "t.safetensors"},
                       "--generate");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--registers", "-1", "--out", "t.safetensors"},
                       "--registers");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--normalizer", "softmax2", "--out", "t.st"},
                       "--normalizer");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--backend", "tpu", "--out", "t.st"}, "--backend");
  expectOneLineFailure({"trace", "--checkpoint", "x", "--ids", "1", "--out", "/nonexistent/dir/t.safetensors"},
                       "does not exist");
}

TEST(CliUsage, NoDisplay_GuiFailsWithOneLine) {
  // Without a display (or without the GUI built), starting the app is a one-line error, not a Qt abort.
  RunResult r = runHybridlens({}, {"PATH=/usr/bin:/bin", "HOME=/tmp"}, /*replaceEnv=*/true);
  EXPECT_NE(r.status, 0);
  EXPECT_LT(r.status, 128) << r.err;
  EXPECT_EQ(lineCount(r.err), 1) << r.err;
}


TEST(CliUsage, SessionFileAndAppOptions_GoToTheApp) {
  // A .hlsession argument and the app's own options (--session, --theme, ...) open the app, not the
  // command dispatcher: without a display the app answers, never "unknown command/option".
  for (std::vector<std::string> args : {std::vector<std::string>{"missing.hlsession"},
                                        {"--session", "missing.hlsession"},
                                        {"--theme", "dark"},
                                        {"--prompt=hello"}}) {
    RunResult r = runHybridlens(args, {"PATH=/usr/bin:/bin", "HOME=/tmp"}, /*replaceEnv=*/true);
    EXPECT_NE(r.status, 0) << args[0];
    EXPECT_LT(r.status, 128) << r.err;
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
    EXPECT_EQ(r.err.find("unknown"), std::string::npos) << args[0] << ": " << r.err;
  }
  RunResult r = runHybridlens({"--sesion", "x"});  // a typo is still the dispatcher's one-line error
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown option --sesion"), std::string::npos) << r.err;
}
// `info` and `trace` on a generated random-weight checkpoint (the demo preset: 8 layers, attention at
// i % 4 == 2, MoE on odd layers, vocabulary 4096).
class CliOnCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = scratchDir() / "demo";
    hl::GenerateOptions o;
    o.config = hl::preset_config("demo-random");
    o.seed = 7;
    hl::generate_checkpoint(dir_.string(), o);
  }
  static fs::path dir_;
};
fs::path CliOnCheckpoint::dir_;

TEST_F(CliOnCheckpoint, InfoJson_ReportsRibbonParamsAndDtypes) {
  RunResult r = runHybridlens({"info", "--checkpoint", dir_.string(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["num_layers"], 8);
  EXPECT_EQ(j["ribbon"]["mixer"], "MMAMMMAM");
  EXPECT_EQ(j["ribbon"]["ffn"], "DEDEDEDE");
  EXPECT_EQ(j["num_attention_layers"], 2);
  EXPECT_EQ(j["num_moe_layers"], 4);
  EXPECT_EQ(j["schedule"], "8 layers: M M A M M M A M; MoE at 1,3,5,7");
  EXPECT_GT(j["params"].get<int64_t>(), j["active_params"].get<int64_t>());
  EXPECT_GT(j["dtypes"]["BF16"].get<int64_t>(), 0);
  EXPECT_EQ(j["tokenizer"]["present"], false);
  // KV bytes per token in fp32: 2 · A_n · nkv · head_dim · 4 = 2 · 2 · 2 · 32 · 4.
  EXPECT_EQ(j["memory"]["kv_bytes_per_token"], 2 * 2 * 2 * 32 * 4);
}

TEST_F(CliOnCheckpoint, InfoText_ShowsRibbon) {
  RunResult r = runHybridlens({"info", "--checkpoint", dir_.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("MMAMMMAM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("schedule    8 layers: M M A M M M A M; MoE at 1,3,5,7\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("parameters"), std::string::npos) << r.out;
}

// A Bamba checkpoint (bamba-tiny, HF's format): info names the family, its schedule and Mamba-2
// shape in both outputs, and trace runs it (auto: the CPU, the device backends having no Mamba-2 units).
TEST(CliBamba, InfoAndTrace) {
  const fs::path dir = scratchDir() / "bamba";
  hl::GenerateOptions o;
  o.config = hl::preset_config("bamba-tiny");
  o.seed = 3;
  hl::generate_checkpoint(dir.string(), o);
  RunResult r = runHybridlens({"info", "--checkpoint", dir.string(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["family"], "bamba");
  EXPECT_EQ(j["schedule"], "8 layers: S S A S S S A S; no MoE");
  EXPECT_EQ(j["shape"]["mamba_n_heads"], 8);
  EXPECT_EQ(j["shape"]["rotary_dim"], 16);
  // Per Mamba-2 layer (Di + 2GN)·W + Di·N floats: (256 + 64)·4 + 256·16, six layers, 4 bytes each.
  EXPECT_EQ(j["memory"]["state_bytes"], 6 * ((256 + 64) * 4 + 256 * 16) * 4);
  r = runHybridlens({"info", "--checkpoint", dir.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("family      bamba\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8 heads of 32 in 2 groups, dt clamp [0, Infinity], RoPE on 16 dims"), std::string::npos) << r.out;
  const fs::path out = scratchDir() / "bamba.safetensors";
  r = runHybridlens({"trace", "--checkpoint", dir.string(), "--ids", "1,5,9", "--generate", "2", "--ignore-eos",
                     "--out", out.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  hl::SafetensorsFile f = hl::SafetensorsFile::open(out.string());
  ASSERT_NE(f.find("logits"), nullptr);
  EXPECT_EQ(f.find("logits")->shape, (std::vector<int64_t>{5, 4096}));
}

// A GGUF file opens as a checkpoint: info reports the file's own types and the tokenizer from its
// metadata, and trace tokenizes a prompt with it and runs.
TEST(CliGguf, InfoAndTraceOnAQuantisedJambaFile) {
  const std::string file = std::string(HL_GGUF_FIXTURES) + "/jamba-gqa_basic-Q4_K_M.gguf";
  RunResult r = runHybridlens({"info", "--checkpoint", file, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["family"], "jamba");
  EXPECT_EQ(j["gguf"]["architecture"], "jamba");
  EXPECT_EQ(j["gguf"]["types"]["Q5_0"], 24);
  EXPECT_EQ(j["gguf"]["types"]["Q8_0"], 4);
  EXPECT_EQ(j["gguf"]["matrices_held_as"], "stored");
  // The matrices stay in their stored blocks: the memory quoted is the file's tensor bytes, not 4 per parameter.
  EXPECT_LT(j["memory"]["weight_bytes"].get<int64_t>(), 2 * j["gguf"]["tensor_bytes"].get<int64_t>());
  EXPECT_EQ(j["tokenizer"]["kind"], "gguf (llama)");
  EXPECT_EQ(j["tokenizer"]["vocab_size"], 96);
  const fs::path out = scratchDir() / "gguf.safetensors";
  r = runHybridlens({"trace", "--checkpoint", file, "--prompt", "the cat", "--generate", "2", "--ignore-eos", "--out",
                     out.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  hl::SafetensorsFile f = hl::SafetensorsFile::open(out.string());
  ASSERT_NE(f.find("logits"), nullptr);
  EXPECT_EQ(f.find("logits")->shape[1], 96);
  // A corrupt file: one line naming it, exit non-zero.
  r = runHybridlens({"info", "--checkpoint", std::string(HL_GGUF_FIXTURES) + "/corrupt/offset_huge.gguf"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("offset_huge.gguf: tensor #0 'a': data ["), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Nemotron-H and Granite 4.0-H checkpoints (the generator's presets in the families' own names): info
// names the family, the pattern or the multipliers, and trace runs them on the CPU.
TEST(CliMamba2Families, NemotronHAndGranite_InfoAndTrace) {
  struct Case {
    const char* preset;
    const char* family;
    const char* schedule;
    const char* text;
  } cases[] = {
      {"nemotron-h-tiny", "nemotron_h",
       "12 layers: S - S - S A - S - S A -; no MoE; no FFN at 0,2,4,5,7,9,10; no mixer at 1,3,6,8,11",
       "pattern     M-M-M*-M-M*-  (M Mamba-2, * attention, - relu2 MLP, E MoE)\n"},
      {"nemotron-h-moe-tiny", "nemotron_h", "8 layers: S - S A - S - -; MoE at 1,4,7; no FFN at 0,2,3,5; no mixer at 1,4,6,7",
       "MoE         sigmoid router, top-4 within 2 of 4 groups, weights renormalised x 2.5; experts 96 wide, shared "
       "expert 192\n"},
      {"granite-h-tiny", "granitemoehybrid", "8 layers: S S S A S S S A; MoE at 0,1,2,3,4,5,6,7",
       "multipliers embedding 12, residual 0.22, attention scale 0.0078125, logits / 6; shared expert 256\n"},
      {"falcon-h1-tiny", "falcon_h1", "6 layers: P P P P P P; no MoE",
       "in_proj z 0.353553 x 0.25 B 0.353553 C 0.5 dt 0.353553, MLP gate 0.883883 / down 0.585938; gated norm none\n"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.preset);
    const fs::path dir = scratchDir() / c.preset;
    hl::GenerateOptions o;
    o.config = hl::preset_config(c.preset);
    o.seed = 3;
    hl::generate_checkpoint(dir.string(), o);
    RunResult r = runHybridlens({"info", "--checkpoint", dir.string(), "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["family"], c.family);
    EXPECT_EQ(j["schedule"], c.schedule);
    r = runHybridlens({"info", "--checkpoint", dir.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find(c.text), std::string::npos) << r.out;
    const fs::path out = scratchDir() / (std::string(c.preset) + ".safetensors");
    r = runHybridlens({"trace", "--checkpoint", dir.string(), "--ids", "1,5,9", "--out", out.string()});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(hl::SafetensorsFile::open(out.string()).find("logits")->shape, (std::vector<int64_t>{3, 4096}));
  }
}

// hidden-attention: every head's row of a Mamba-2 layer (here Falcon-H1's parallel layer) with a
// register first; the CSV holds heads × keys rows; Jamba's Mamba-1 channels; an attention layer refused.
TEST(CliMamba2Families, HiddenAttention_RowsStatsAndCsv) {
  const fs::path dir = scratchDir() / "falcon-hidden";
  hl::GenerateOptions o;
  o.config = hl::preset_config("falcon-h1-tiny");
  o.seed = 3;
  hl::generate_checkpoint(dir.string(), o);
  const fs::path csv = scratchDir() / "hidden.csv";
  RunResult r = runHybridlens({"hidden-attention", "--checkpoint", dir.string(), "--ids", "1,5,9,13", "--layer", "1",
                               "--registers", "1", "--top", "2", "--csv", csv.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("hidden attention of layer 1 (parallel, SSM layer 1), token 3 of 4 (row 4; 1 register first)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("head 5  entropy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("6 head rows of 5 keys"), std::string::npos) << r.out;
  std::ifstream in(csv);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 1 + 6 * 5);  // header, then 6 heads × 5 keys
  r = runHybridlens({"hidden-attention", "--checkpoint", dir.string(), "--ids", "1,5", "--head", "6"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--head"), std::string::npos) << r.err;
  // Jamba (Mamba-1): the channel mean by default, one channel with --head.
  const fs::path jamba = scratchDir() / "jamba-hidden";
  o.config = hl::preset_config("tiny");
  hl::generate_checkpoint(jamba.string(), o);
  r = runHybridlens({"hidden-attention", "--checkpoint", jamba.string(), "--ids", "1,5,9"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("mean |M| over the"), std::string::npos) << r.out;
  r = runHybridlens({"hidden-attention", "--checkpoint", jamba.string(), "--ids", "1,5,9", "--head", "3"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("channel 3  entropy"), std::string::npos) << r.out;
  r = runHybridlens({"hidden-attention", "--checkpoint", jamba.string(), "--ids", "1,5,9", "--layer", "2"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("layer 2 is attention, without an SSM part"), std::string::npos) << r.err;
}

TEST_F(CliOnCheckpoint, Trace_IdsAndGeneration_WritesTokensAndLogits) {
  const fs::path out = scratchDir() / "trace.safetensors";
  RunResult r = runHybridlens({"trace", "--checkpoint", dir_.string(), "--ids", "1, 5,9", "--generate", "3",
                               "--ignore-eos", "--backend", "cpu", "--out", out.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  hl::SafetensorsFile f = hl::SafetensorsFile::open(out.string());
  const hl::TensorInfo* ids = f.find("token_ids");
  ASSERT_NE(ids, nullptr);
  ASSERT_EQ(ids->shape, (std::vector<int64_t>{6}));
  const int32_t* idv = reinterpret_cast<const int32_t*>(ids->data);
  EXPECT_EQ(idv[0], 1);
  EXPECT_EQ(idv[1], 5);
  EXPECT_EQ(idv[2], 9);
  const hl::TensorInfo* logits = f.find("logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->shape, (std::vector<int64_t>{6, 4096}));
  // Generated token t+1 is the argmax of the logits after token t.
  const float* lv = reinterpret_cast<const float*>(logits->data);
  for (int t = 2; t < 5; ++t) {
    int best = 0;
    for (int v = 1; v < 4096; ++v)
      if (lv[t * 4096 + v] > lv[t * 4096 + best]) best = v;
    EXPECT_EQ(idv[t + 1], best) << "token " << t + 1;
  }
  ASSERT_NE(f.find("kv_cache_bytes"), nullptr);
  ASSERT_NE(f.find("ssm_state_bytes"), nullptr);
  EXPECT_EQ(f.metadata().at("format_version"), "1");
  EXPECT_EQ(f.metadata().at("backend"), "cpu");
  EXPECT_EQ(f.metadata().at("normalizer"), "as-trained");
  EXPECT_EQ(f.metadata().at("weights"), "as-stored");
}

// --weights on trace and info: the trace names the format; info counts the quantised memory and
// lists what the rule kept; a format that is not one is a usage error naming the allowed ones.
TEST_F(CliOnCheckpoint, Weights_TraceNamesTheFormat_InfoCountsIt) {
  const std::string d = dir_.string(), out = (scratchDir() / "q8.safetensors").string();
  RunResult r = runHybridlens({"trace", "--checkpoint", d, "--ids", "1,5,9", "--weights", "q8_0", "--out", out});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(hl::SafetensorsFile::open(out).metadata().at("weights"), "q8_0");
  r = runHybridlens({"info", "--checkpoint", d, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json stored = nlohmann::json::parse(r.out);
  r = runHybridlens({"info", "--checkpoint", d, "--weights", "q8_0", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json q = nlohmann::json::parse(r.out);
  EXPECT_EQ(q["weights"]["format"], "q8_0");
  EXPECT_LT(q["memory"]["weight_bytes"].get<int64_t>(), stored["memory"]["weight_bytes"].get<int64_t>());
  EXPECT_GT(q["weights"]["quantized"].get<int64_t>(), 0);
  bool embeddingKept = false;
  for (const auto& k : q["weights"]["kept"]) embeddingKept |= k["why"] == "embedding (kept by the rule)";
  EXPECT_TRUE(embeddingKept);
  r = runHybridlens({"trace", "--checkpoint", d, "--ids", "1", "--weights", "int3", "--out", out});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--weights: 'int3' is not a weight format (allowed as-stored, q8_0"), std::string::npos) << r.err;
}

TEST_F(CliOnCheckpoint, Trace_BadInputs_OneLineErrors) {
  const std::string d = dir_.string(), out = (scratchDir() / "bad.safetensors").string();
  expectOneLineFailure({"trace", "--checkpoint", d, "--ids", "1,4096", "--out", out}, "4096");
  expectOneLineFailure({"trace", "--checkpoint", d, "--ids", "1,x", "--out", out}, "--ids");
  expectOneLineFailure({"trace", "--checkpoint", d, "--prompt", "hello", "--out", out}, "tokenizer");
  EXPECT_FALSE(fs::exists(out));
}

// Resource limits (issue 10): --memory-budget refuses the model before loading it, with the numbers;
// --max-context stops a run at the limit with a message saying how to raise it.
TEST_F(CliOnCheckpoint, Trace_MemoryBudgetAndMaxContext_OneLineErrorsWithTheNumbers) {
  const std::string d = dir_.string(), out = (scratchDir() / "limits.safetensors").string();
  expectOneLineFailure({"trace", "--checkpoint", d, "--ids", "1,2", "--memory-budget", "64K", "--out", out},
                       "more than the memory budget of 64.0 KiB");
  expectOneLineFailure({"trace", "--checkpoint", d, "--ids", "1,2", "--memory-budget", "64X", "--out", out},
                       "--memory-budget");
  expectOneLineFailure({"trace", "--checkpoint", d, "--ids", "1,2,3", "--generate", "5", "--ignore-eos",
                        "--max-context", "4", "--backend", "cpu", "--out", out},
                       "limit of 4 tokens");
  EXPECT_FALSE(fs::exists(out));
  RunResult r = runHybridlens({"trace", "--checkpoint", d, "--ids", "1,2,3", "--generate", "1", "--ignore-eos",
                               "--max-context", "4", "--memory-budget", "1G", "--backend", "cpu", "--out", out});
  EXPECT_EQ(r.status, 0) << r.err;
}

// --prompt through the checkpoint's tokenizer.model (tests/data/tiny_spm.model: BOS is id 1).
TEST_F(CliOnCheckpoint, Trace_Prompt_TokenizesWithAndWithoutBos) {
  const fs::path withTok = scratchDir() / "with-tokenizer";
  fs::create_directories(withTok);
  for (const auto& e : fs::directory_iterator(dir_)) fs::copy_file(e.path(), withTok / e.path().filename());
  fs::copy_file(fs::path(HL_TEST_DATA_DIR) / "tiny_spm.model", withTok / "tokenizer.model");
  const std::string text = "the model reads 42 tokens";
  const std::vector<int32_t> expected = hl::Tokenizer::load((withTok / "tokenizer.model").string())->encode(text);
  ASSERT_FALSE(expected.empty());

  for (bool bos : {true, false}) {
    const fs::path out = scratchDir() / (bos ? "prompt-bos.safetensors" : "prompt-nobos.safetensors");
    std::vector<std::string> args = {"trace", "--checkpoint", withTok.string(), "--prompt",
                                     text,    "--out",        out.string()};
    if (!bos) args.push_back("--no-bos");
    RunResult r = runHybridlens(args);
    ASSERT_EQ(r.status, 0) << r.err;
    hl::SafetensorsFile f = hl::SafetensorsFile::open(out.string());
    const hl::TensorInfo* ids = f.find("token_ids");
    ASSERT_NE(ids, nullptr);
    std::vector<int32_t> got(reinterpret_cast<const int32_t*>(ids->data),
                             reinterpret_cast<const int32_t*>(ids->data) + ids->numel());
    std::vector<int32_t> want = expected;
    if (bos) want.insert(want.begin(), 1);
    EXPECT_EQ(got, want) << (bos ? "with BOS" : "without BOS");
  }
}

// --chat: messages rendered with the checkpoint's chat template (a ChatML template whose rendering
// is written out here by hand), encoded with no BOS prepended (apply_chat_template's
// add_special_tokens=False); record keeps the rendered text as the session's prompt.
TEST_F(CliOnCheckpoint, TraceAndRecord_Chat_RenderTemplateThenEncode) {
  const fs::path ck = scratchDir() / "with-chat-template";
  fs::create_directories(ck);
  for (const auto& e : fs::directory_iterator(dir_)) fs::copy_file(e.path(), ck / e.path().filename());
  fs::copy_file(fs::path(HL_TEST_DATA_DIR) / "tiny_spm.model", ck / "tokenizer.model");
  std::ofstream(ck / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": "{{ bos_token }}{% for m in )"
         R"(messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] | trim + '<|im_end|>\n' }}{% endfor )"
         R"(%}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"})";
  const fs::path chat = scratchDir() / "chat.json";
  std::ofstream(chat) << R"({"messages": [{"role": "system", "content": "Be brief. "}, )"
                         R"({"role": "user", "content": "the river"}], "add_generation_prompt": true})";
  const std::string rendered =
      "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nthe river<|im_end|>\n<|im_start|>assistant\n";
  const std::vector<int32_t> want = hl::Tokenizer::load((ck / "tokenizer.model").string())->encode(rendered);
  ASSERT_FALSE(want.empty());
  ASSERT_NE(want.front(), 1);  // no BOS id: "<s>" is text to tiny_spm.model

  const fs::path out = scratchDir() / "chat.safetensors";
  RunResult r = runHybridlens({"trace", "--checkpoint", ck.string(), "--chat", chat.string(), "--out", out.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  hl::SafetensorsFile f = hl::SafetensorsFile::open(out.string());
  const hl::TensorInfo* ids = f.find("token_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(std::vector<int32_t>(reinterpret_cast<const int32_t*>(ids->data),
                                 reinterpret_cast<const int32_t*>(ids->data) + ids->numel()),
            want);

  const fs::path session = scratchDir() / "chat.hlsession";
  RunResult rec = runHybridlens({"record", "--checkpoint", ck.string(), "--chat", chat.string(), "--backend", "cpu",
                                 "--out", session.string()});
  ASSERT_EQ(rec.status, 0) << rec.err;

  // One-line errors: a checkpoint without a template, a malformed chat file, two inputs.
  const std::string d = dir_.string(), o = (scratchDir() / "bad-chat.safetensors").string();
  const fs::path noTemplate = scratchDir() / "no-template";
  fs::create_directories(noTemplate);
  for (const auto& e : fs::directory_iterator(dir_)) fs::copy_file(e.path(), noTemplate / e.path().filename());
  fs::copy_file(fs::path(HL_TEST_DATA_DIR) / "tiny_spm.model", noTemplate / "tokenizer.model");
  expectOneLineFailure({"trace", "--checkpoint", noTemplate.string(), "--chat", chat.string(), "--out", o},
                       "has no chat template");
  const fs::path badChat = scratchDir() / "bad-chat.json";
  std::ofstream(badChat) << R"([{"role": "user"}])";
  expectOneLineFailure({"trace", "--checkpoint", ck.string(), "--chat", badChat.string(), "--out", o},
                       "message 1 has no \"content\"");
  expectOneLineFailure({"trace", "--checkpoint", d, "--ids", "1", "--chat", chat.string(), "--out", o}, "exclude");
  EXPECT_FALSE(fs::exists(o));
}

TEST(CliCommands, Memory_JambaV01At256k_Is4GiBAnd32GiB) {
  // The Jamba paper's figures are for 16-bit caches (the default is fp32, as the engine keeps them).
  RunResult r = runHybridlens({"memory", "--config", std::string(HL_TEST_DATA_DIR) + "/jamba-v0.1-config.json",
                               "--context", "262144", "--dtype-bytes", "2", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("\"kv_bytes\": 4294967296"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"kv_bytes_all_attention\": 34359738368"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"kv_bytes_all_mamba\": 0"), std::string::npos) << r.out;
}

TEST(CliCommands, TraceWithAdapter_ChangesLogitsAndNamesTheAdapter) {
  const std::string base = std::string(HL_GOLDEN_DIR) + "/gqa_basic";
  const std::string adapter = std::string(HL_GOLDEN_DIR) + "/adapters/dora";
  const std::string plain = (scratchDir() / "plain.safetensors").string();
  const std::string merged = (scratchDir() / "merged.safetensors").string();
  RunResult a = runHybridlens({"trace", "--checkpoint", base, "--ids", "1,2,3", "--out", plain});
  ASSERT_EQ(a.status, 0) << a.err;
  RunResult b = runHybridlens({"trace", "--checkpoint", base, "--ids", "1,2,3", "--adapter", adapter, "--out", merged});
  ASSERT_EQ(b.status, 0) << b.err;
  hl::SafetensorsFile fa = hl::SafetensorsFile::open(plain), fb = hl::SafetensorsFile::open(merged);
  const hl::TensorInfo* la = fa.find("logits");
  const hl::TensorInfo* lb = fb.find("logits");
  ASSERT_TRUE(la && lb);
  ASSERT_EQ(la->nbytes(), lb->nbytes());
  EXPECT_NE(std::memcmp(la->data, lb->data, la->nbytes()), 0) << "the adapter changed nothing";
  EXPECT_NE(fb.metadata().at("adapter").find("dora"), std::string::npos);
  RunResult bad = runHybridlens({"trace", "--checkpoint", base, "--ids", "1", "--adapter", "/nonexistent", "--out", merged});
  EXPECT_NE(bad.status, 0);
  EXPECT_EQ(lineCount(bad.err), 1) << bad.err;
}

TEST(CliCommands, Dora_GoldenAdapter_PrintsSlope) {
  const std::string csv = (scratchDir() / "dora.csv").string();
  RunResult r = runHybridlens({"dora", "--base", std::string(HL_GOLDEN_DIR) + "/gqa_basic", "--adapter",
                               std::string(HL_GOLDEN_DIR) + "/adapters/dora", "--out", csv});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("slope_dM_on_dD: -2.237"), std::string::npos) << r.out;
  RunResult both = runHybridlens({"dora", "--base", "b", "--adapter", "a", "--tuned", "t", "--out", csv});
  EXPECT_NE(both.status, 0);
  EXPECT_EQ(lineCount(both.err), 1) << both.err;
}

// `hybridlens tokenize` on the vendored Qwen3 tokenizer.json (tests/data/tokenizers): the ids
// Hugging Face's tokenizers gave for the first fixture text, raw pieces in --json, decode back.
TEST(CliTokenize, Json_IdsAndPiecesAsHuggingFace_DecodeRoundTrips) {
  const std::string dir = std::string(HL_TOKENIZER_FIXTURES) + "/qwen3";
  const nlohmann::json exp =
      nlohmann::json::parse(readFile(fs::path(HL_TEST_DATA_DIR) / "tokenizers" / "qwen3.expected.json"));
  const nlohmann::json& c = exp["cases"][1];
  RunResult r = runHybridlens({"tokenize", "--tokenizer", dir, "--text", c["text"].get<std::string>(), "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.size(), 2u);
  EXPECT_EQ(j["ids"], c["ids"]);
  EXPECT_EQ(j["pieces"], c["tokens"]);

  std::string list;
  for (const auto& id : c["ids"]) list += (list.empty() ? "" : ",") + std::to_string(id.get<int>());
  r = runHybridlens({"tokenize", "--tokenizer", dir, "--decode", list});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, c["decoded"].get<std::string>() + "\n");
}

TEST(CliTokenize, TextFileAndNoSpecial_TextOutputShowsReadablePieces) {
  const std::string dir = std::string(HL_TOKENIZER_FIXTURES) + "/llama2";
  const fs::path text = scratchDir() / "tokenize.txt";
  std::ofstream(text) << "Hi\n";
  RunResult r = runHybridlens({"tokenize", "--tokenizer", dir, "--text-file", text.string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("<s>  [special]"), std::string::npos) << r.out;  // BOS from the template
  EXPECT_NE(r.out.find("\\n"), std::string::npos) << r.out;            // <0x0A> shown as \n
  r = runHybridlens({"tokenize", "--tokenizer", dir, "--text-file", text.string(), "--no-special", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(nlohmann::json::parse(r.out)["ids"].front(), 1);
}

TEST(CliTokenize, BadUse_OneLineErrors) {
  const std::string dir = std::string(HL_TOKENIZER_FIXTURES) + "/llama2";
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"tokenize", "--tokenizer", dir},
           {"tokenize", "--tokenizer", dir, "--text", "a", "--decode", "1"},
           {"tokenize", "--tokenizer", scratchDir().string() + "/nowhere", "--text", "a"},
           {"tokenize", "--tokenizer", dir, "--decode", "1,x"}}) {
    RunResult r = runHybridlens(args);
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(lineCount(r.err), 1) << r.err;
  }
  RunResult r = runHybridlens({"tokenize", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("--text-file"), std::string::npos);
}
