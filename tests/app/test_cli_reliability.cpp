// Hostile runs of the `hybridlens` binary (issue 18 items 3, 7, 10): a checkpoint truncated while
// `trace` runs, NaN in the LM head while generating and in a fine-tune given to `dora`, `record`'s
// limits, and `auto` falling back to the CPU in `record` and `bench` as in `trace`. Every failure is
// a non-signal, non-zero exit with exactly one line on stderr.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "engine/backend/backend.h"
#include "engine/core/sys_memory.h"
#include "engine/model/generator.h"
#include "sessions/session_file.h"
#include "tests/app/cli_test_util.h"
#include "tests/engine/test_util.h"

namespace fs = std::filesystem;
using namespace hl;

namespace {

using hl::test::count_lines;
using hl::test::read_text;
using Result = hl::test::CliResult;

// A running `env ENV hybridlens ARGS`: the shell prints its pid, then execs the binary (same pid).
struct Proc {
  FILE* pipe = nullptr;
  pid_t pid = -1;
  std::string errPath;
};

Proc start(const std::string& env, const std::string& args) {
  static int n = 0;
  Proc p;
  p.errPath =
      (fs::temp_directory_path() / ("hl_clirel_" + std::to_string(::getpid()) + "_" + std::to_string(n++))).string();
  const std::string line = "echo $$; exec env " + env + " " + HL_HYBRIDLENS + " " + args + " 2>" + p.errPath;
  p.pipe = ::popen(line.c_str(), "r");
  if (p.pipe && std::fscanf(p.pipe, "%d", &p.pid) != 1) p.pid = -1;
  return p;
}

Result finish(Proc& p) {
  Result r;
  if (!p.pipe) return r;
  char buf[4096];
  size_t k;
  while ((k = std::fread(buf, 1, sizeof buf, p.pipe)) > 0) r.out.append(buf, k);
  const int st = ::pclose(p.pipe);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  r.err = read_text(p.errPath);
  fs::remove(p.errPath);
  return r;
}

Result run(const std::string& env, const std::string& args) {
  Proc p = start(env, args);
  return finish(p);
}

// The one-line failure contract; `part` must be in the line.
void expectOneLine(const Result& r, const std::string& part) {
  EXPECT_NE(r.status, 0) << r.out;
  EXPECT_GT(r.status, 0) << r.err;
  EXPECT_LT(r.status, 128) << "died of a signal; stderr: " << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
}

// Bytes the process has read through read(2)/pread(2) (/proc/PID/io rchar); -1 when unknown.
long long bytesRead(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  long long v;
  while (f >> key >> v)
    if (key == "rchar:") return v;
  return -1;
}

// Whether the process has `path` open (a link in /proc/PID/fd).
bool holdsOpen(pid_t pid, const std::string& path) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code ec2;
    if (fs::read_symlink(e.path(), ec2) == path) return true;
  }
  return false;
}

// Sends SIGSTOP and waits until the process shows as stopped ('T' in /proc/PID/stat).
void stop(pid_t pid) {
  ::kill(pid, SIGSTOP);
  for (int i = 0; i < 10000; ++i) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string all((std::istreambuf_iterator<char>(f)), {});
    const size_t close = all.rfind(')');
    if (close == std::string::npos || close + 2 >= all.size() || all[close + 2] == 'T') return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

struct Scratch {
  test::TempDir dir;
  std::string operator/(const std::string& leaf) const { return dir / leaf; }
};

void makeDemo(const std::string& dir) {
  GenerateOptions o;
  o.config = preset_config("demo-random");
  o.seed = 3;
  generate_checkpoint(dir, o);
}

// The tiny test checkpoint (4 layers, untied head) with a NaN in row 7 of lm_head.weight.
void makeNanHead(const std::string& dir) {
  JambaConfig c = test::tiny_config();
  c.tie_word_embeddings = false;
  fs::create_directories(dir);
  test::write_tiny_checkpoint(dir, c, [&](std::vector<test::TestTensor>& ts) {
    test::find_tensor(ts, "lm_head.weight")->values[7 * c.hidden_size + 3] = std::nanf("");
  });
}

bool haveVulkan() {
  const auto b = available_backends();
  return std::find(b.begin(), b.end(), "vulkan") != b.end();
}

}  // namespace

// Item 3: the shard is truncated after `trace` loaded it and while it generates. Before: SIGBUS.
TEST(CliReliability, ShardTruncatedWhileTraceRuns_OneLineChangedOnDisk_NoSignal) {
  Scratch s;
  makeDemo(s / "ckpt");
  const std::string shard = s / "ckpt/model.safetensors";
  const long long size = static_cast<long long>(fs::file_size(shard));
  Proc p = start("", "trace --checkpoint " + (s / "ckpt") + " --ids 1,2 --generate 4000 --ignore-eos --out " +
                         (s / "t.safetensors"));
  ASSERT_GT(p.pid, 0);
  // Loaded once the process has read as many bytes as the shard holds and closed it again (the
  // weights are read into memory, then the file is closed): checked while it is stopped.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool loaded = false;
  while (!loaded && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (bytesRead(p.pid) < size) continue;
    stop(p.pid);
    loaded = bytesRead(p.pid) >= size && !holdsOpen(p.pid, shard);
    if (!loaded) ::kill(p.pid, SIGCONT);
  }
  fs::resize_file(shard, 4096);
  ::kill(p.pid, SIGCONT);
  const Result r = finish(p);
  ASSERT_TRUE(loaded) << "the shard was never read in full (still memory-mapped?)";
  expectOneLine(r, shard + ": changed on disk since it was loaded (size " + std::to_string(size) + " -> 4096 bytes)");
  EXPECT_FALSE(fs::exists(s / "t.safetensors"));
}

// Item 7: NaN logits are flagged at the LM head; generating from them is refused on both CPU paths.
TEST(CliReliability, NanInLmHead_TraceFlagsTheHead_GenerateRefusesWithOneLine) {
  Scratch s;
  makeNanHead(s / "nan");
  for (const char* isa : {"HL_ISA=portable", "HL_ISA=avx512"}) {
    const Result ok = run(isa, "trace --checkpoint " + (s / "nan") + " --ids 1,2 --backend cpu --out " + (s / "a.st"));
    EXPECT_EQ(ok.status, 0) << isa << ": " << ok.err;
    EXPECT_NE(ok.out.find("non-finite values from token 0 at the LM head"), std::string::npos) << isa << ": " << ok.out;
    const Result gen =
        run(isa, "trace --checkpoint " + (s / "nan") + " --ids 1,2 --generate 3 --backend cpu --out " + (s / "b.st"));
    expectOneLine(gen,
                  "cannot sample the token after position 1: its logits are not finite (NaN at token id 7; "
                  "non-finite from the LM head)");
  }
  const Result rec = run("", "record --checkpoint " + (s / "nan") + " --ids 1 --generate 2 --temperature 0.7 --out " +
                                 (s / "r.hlsession"));
  expectOneLine(rec, "cannot sample the token after position 0");
  EXPECT_FALSE(fs::exists(s / "r.hlsession"));
}

TEST(CliReliability, DoraTunedWithNanWeight_FailsNamingTheTensor) {
  Scratch s;
  JambaConfig c = test::tiny_config();
  fs::create_directories(s / "base");
  fs::create_directories(s / "tuned");
  test::write_tiny_checkpoint(s / "base", c);
  test::write_tiny_checkpoint(s / "tuned", c, [](std::vector<test::TestTensor>& ts) {
    test::find_tensor(ts, "model.layers.1.self_attn.v_proj.weight")->values[5] = std::nanf("");
  });
  const Result r = run("", "dora --base " + (s / "base") + " --tuned " + (s / "tuned") + " --out " + (s / "d.csv"));
  expectOneLine(r, "tensor 'model.layers.1.self_attn.v_proj.weight' of the tuned checkpoint " + (s / "tuned") +
                       " holds NaN (row 0, column 5)");
  EXPECT_FALSE(fs::exists(s / "d.csv"));
}

// Item 10: `record` takes --max-context and --memory-budget like `trace`, and honours them.
TEST(CliReliability, RecordLimits_AcceptedAndHonoured) {
  Scratch s;
  fs::create_directories(s / "tiny");
  test::write_tiny_checkpoint(s / "tiny", test::tiny_config());
  const std::string base = "record --checkpoint " + (s / "tiny") + " --ids 1,2,3 --backend cpu --out ";
  const Result ok = run("", base + (s / "ok.hlsession") + " --max-context 8 --memory-budget 64M");
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(load_session(s / "ok.hlsession").runs.at(0).settings.max_context, 8);
  expectOneLine(run("", base + (s / "ctx.hlsession") + " --max-context 2"), "max_context");
  expectOneLine(run("", base + (s / "mem.hlsession") + " --memory-budget 1K"), "more than the memory budget of");
  expectOneLine(run("", base + (s / "bad.hlsession") + " --max-context 0"), "--max-context");
  EXPECT_FALSE(fs::exists(s / "ctx.hlsession"));
}

// Item 10: a Vulkan device lost mid-run under `auto` hands the run to the CPU in record and bench.
TEST(CliReliability, RecordAndBenchAuto_DeviceLostMidRun_FallBackToTheCpu) {
  if (!haveVulkan()) GTEST_SKIP() << "no Vulkan device (lavapipe counts)";
  Scratch s;
  fs::create_directories(s / "tiny");
  test::write_tiny_checkpoint(s / "tiny", test::tiny_config());
  const std::string lose = "HL_VULKAN_ALLOW_CPU_DEVICE=1 HL_VULKAN_FAIL_AFTER=3";
  const Result rec = run(lose, "record --checkpoint " + (s / "tiny") + " --ids 3,4,5,6,7 --generate 2 --ignore-eos " +
                                   "--compare-registers 0 --backend auto --out " + (s / "r.hlsession"));
  ASSERT_EQ(rec.status, 0) << rec.err;
  EXPECT_NE(rec.err.find("hybridlens record: "), std::string::npos) << rec.err;
  EXPECT_NE(rec.err.find("falling back to the CPU backend"), std::string::npos) << rec.err;
  const Recording got = load_session(s / "r.hlsession");
  ASSERT_EQ(got.runs.size(), 2u);
  EXPECT_EQ(got.runs[0].settings.backend, "cpu");
  EXPECT_EQ(got.runs[1].settings.backend, "cpu");  // B follows A onto the CPU
  EXPECT_EQ(got.runs[0].records.size(), 7u);
  const Result bench = run(lose, "bench --checkpoint " + (s / "tiny") + " --tokens 4 --rounds 1 --prefill 4 --json");
  ASSERT_EQ(bench.status, 0) << bench.err;
  EXPECT_NE(bench.err.find("hybridlens bench: "), std::string::npos) << bench.err;
  EXPECT_NE(bench.err.find("falling back to the CPU backend"), std::string::npos) << bench.err;
  EXPECT_NE(bench.out.find("\"backend\": \"cpu\""), std::string::npos) << bench.out;
  // An explicitly named backend does not fall back: one line, non-zero.
  expectOneLine(run(lose, "bench --checkpoint " + (s / "tiny") + " --tokens 4 --rounds 1 --prefill 4 --backend vulkan"),
                "device lost");
}

// bench --weights keeps every run's records for a round (formats × instruments on and off × steps):
// a round whose logits alone would not fit the available memory is refused with one line before any
// decoding, not killed by the kernel halfway. The format count is chosen from this machine's memory.
TEST(CliReliability, BenchWeights_RecordsBeyondTheAvailableMemory_RefusedWithOneLine) {
  const uint64_t avail = available_memory().bytes;
  if (avail > (uint64_t{1} << 44)) GTEST_SKIP() << "no memory limit could be read";
  Scratch s;
  fs::create_directories(s / "tiny");
  test::write_tiny_checkpoint(s / "tiny", test::tiny_config());  // vocabulary 64
  const double per_format = 2.0 * 100000 * 64 * sizeof(float);
  const size_t formats = static_cast<size_t>(1.5 * static_cast<double>(avail) / per_format) + 2;
  std::string list = "as-stored";
  for (size_t i = 1; i < formats; ++i) list += ",as-stored";
  const auto t0 = std::chrono::steady_clock::now();
  const Result r = run("", "bench --checkpoint " + (s / "tiny") + " --tokens 100000 --rounds 1 --weights " + list);
  expectOneLine(r, "use fewer --tokens or formats");
  EXPECT_NE(r.err.find(std::to_string(formats) + " formats"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("GB available"), std::string::npos) << r.err;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0) << "refused late";
  // Two formats of 4 steps fit anywhere: the same command runs.
  const Result ok = run("", "bench --checkpoint " + (s / "tiny") + " --tokens 4 --rounds 1 --weights as-stored,q8_0");
  EXPECT_EQ(ok.status, 0) << ok.err;
}
