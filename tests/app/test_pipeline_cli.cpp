// `trace` / `record` / `sweep --pipeline` end to end (issue 21 item 3): mpirun --oversubscribe -np 2
// and -np 3 against one process — the trace file byte for byte, the session's records field by field
// (a sampled generation and a B run included), the sweep's stats — the refusals, and a rank killed
// or failing mid-run making the others stop within seconds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/trace/trace_fields.h"
#include "sessions/session_file.h"
#include "tests/app/cli_test_util.h"

namespace {

using hl::test::hybridlens;
using Result = hl::test::CliResult;

const std::string& scratch() { return hl::test::cli_scratch(); }
std::string slurp(const std::string& path) { return hl::test::read_text(path); }
bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}
Result run(std::vector<std::string> argv, const std::vector<std::string>& env = {}) {
  return hl::test::run_command(std::move(argv), env);
}

const std::string kModel = std::string(HL_SOURCE_DIR) + "/resources/models/baseline";

std::vector<std::string> traceArgs(const std::string& out, bool pipeline) {
  std::vector<std::string> a = {"trace", "--checkpoint", kModel,   "--ids",    "1,17,400,9,33", "--generate",
                                "4",     "--ignore-eos", "--full", "--backend", "cpu",           "--out",
                                out};
  if (pipeline) a.push_back("--pipeline");
  return a;
}

TEST(PipelineCli, WithoutMpirunOneStage_RefusedForOtherBackends) {
  const std::string one = scratch() + "/plain.safetensors", stage = scratch() + "/stage.safetensors";
  ASSERT_EQ(hybridlens(traceArgs(one, false)).status, 0);
  Result r = hybridlens(traceArgs(stage, true));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "hybridlens: --pipeline without mpirun or srun: one stage, in this process\n");
  EXPECT_NE(r.out.find("pipeline of 1 ranks, layers 0-7"), std::string::npos) << r.out;
  EXPECT_TRUE(slurp(stage) == slurp(one));
  std::vector<std::string> a = traceArgs(scratch() + "/no.safetensors", true);
  a[a.size() - 4] = "cuda";  // --backend cuda: a CUDA stage
  r = hybridlens(a);
  if (r.status == 0) {  // a machine with a CUDA device
    EXPECT_TRUE(exists(scratch() + "/no.safetensors"));
  } else {
    // A CUDA build without a device fails as `--backend cuda` does without --pipeline (status 1, one
    // line after the note); a build without CUDA (the sanitizer lane's) refuses the name (status 2).
    EXPECT_TRUE((r.status == 1 && r.err.find("hybridlens trace: cuda: ") != std::string::npos) ||
                (r.status == 2 && r.err.find("got 'cuda'") != std::string::npos))
        << r.status << " " << r.err;
    EXPECT_FALSE(exists(scratch() + "/no.safetensors"));
  }
}

#ifdef HL_MPIEXEC
using hl::test::mpirun;

TEST(PipelineCli, Mpi_TraceEqualsOneProcessByteForByte) {
  const std::string one = scratch() + "/one.safetensors";
  const Result r1 = hybridlens(traceArgs(one, false));
  ASSERT_EQ(r1.status, 0) << r1.err;
  for (int np : {2, 3}) {
    const std::string out = scratch() + "/np" + std::to_string(np) + ".safetensors";
    const Result r = mpirun(np, traceArgs(out, true));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("pipeline of " + std::to_string(np) + " ranks"), std::string::npos) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "rank 0 alone prints: " << r.out;
    EXPECT_TRUE(slurp(out) == slurp(one)) << "-np " << np;
  }
}

// --backend vulkan: every rank runs its stage's layers on its own Vulkan device (lavapipe here),
// and the trace equals one Vulkan process's byte for byte. Skips where Vulkan is not built or no
// device exists.
TEST(PipelineCli, Mpi_VulkanStages_TraceEqualsOneVulkanProcessByteForByte) {
  std::vector<std::string> one = traceArgs(scratch() + "/vk-one.safetensors", false);
  one[one.size() - 3] = "vulkan";
  const Result r1 = hybridlens(one);
  if (r1.status != 0) GTEST_SKIP() << "no Vulkan backend here: " << r1.err;
  for (int np : {2, 3}) {
    std::vector<std::string> a = traceArgs(scratch() + "/vk-np" + std::to_string(np) + ".safetensors", true);
    a[a.size() - 4] = "vulkan";
    const Result r = mpirun(np, a);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_TRUE(slurp(scratch() + "/vk-np" + std::to_string(np) + ".safetensors") ==
                slurp(scratch() + "/vk-one.safetensors"))
        << "-np " << np;
  }
}

// Quantised on load (--weights): each stage quantises its own matrices as the whole model would be
// (the tied embedding and head together with +head), so the trace equals one process's byte for byte.
TEST(PipelineCli, Mpi_QuantisedOnLoad_TraceEqualsOneProcessByteForByte) {
  for (const char* format : {"q8_0", "q4_k+head"}) {
    std::vector<std::string> one = traceArgs(scratch() + "/one-" + format + ".safetensors", false);
    one.insert(one.end(), {"--weights", format});
    const Result r1 = hybridlens(one);
    ASSERT_EQ(r1.status, 0) << r1.err;
    std::vector<std::string> two = traceArgs(scratch() + "/np2-" + format + ".safetensors", true);
    two.insert(two.end(), {"--weights", format});
    const Result r = mpirun(2, two);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_TRUE(slurp(scratch() + "/np2-" + format + ".safetensors") == slurp(scratch() + "/one-" + format + ".safetensors"))
        << format;
    std::vector<std::string> plain = traceArgs(scratch() + "/plain-for-" + format + ".safetensors", false);
    ASSERT_EQ(hybridlens(plain).status, 0);
    EXPECT_FALSE(slurp(scratch() + "/plain-for-" + format + ".safetensors") == slurp(scratch() + "/one-" + format + ".safetensors"))
        << format << ": quantising changed nothing";
  }
}

// With an adapter (the demo's DoRA fine-tune) merged, alone and then quantised: each stage merges its
// own layers' modules; the trace equals one process's byte for byte. A bad adapter fails on every
// rank with one line, as in one process.
TEST(PipelineCli, Mpi_Adapter_TraceEqualsOneProcessByteForByte) {
  const std::string dora = std::string(HL_SOURCE_DIR) + "/resources/models/finetunes/dora/step-60";
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--adapter", dora}, std::vector<std::string>{"--adapter", dora, "--weights", "q8_0"}}) {
    const std::string tag = std::to_string(extra.size());
    std::vector<std::string> one = traceArgs(scratch() + "/adapter-one-" + tag + ".safetensors", false);
    one.insert(one.end(), extra.begin(), extra.end());
    const Result r1 = hybridlens(one);
    ASSERT_EQ(r1.status, 0) << r1.err;
    std::vector<std::string> three = traceArgs(scratch() + "/adapter-np3-" + tag + ".safetensors", true);
    three.insert(three.end(), extra.begin(), extra.end());
    const Result r = mpirun(3, three);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_TRUE(slurp(scratch() + "/adapter-np3-" + tag + ".safetensors") ==
                slurp(scratch() + "/adapter-one-" + tag + ".safetensors"))
        << tag;
  }
  const std::string base = scratch() + "/no-adapter.safetensors";
  ASSERT_EQ(hybridlens(traceArgs(base, false)).status, 0);
  EXPECT_FALSE(slurp(base) == slurp(scratch() + "/adapter-one-2.safetensors")) << "the adapter changed nothing";
  std::vector<std::string> bad = traceArgs(scratch() + "/bad-adapter.safetensors", true);
  bad.insert(bad.end(), {"--adapter", std::string(HL_SOURCE_DIR) + "/resources/models/baseline"});
  const Result b = mpirun(2, bad);
  EXPECT_NE(b.status, 0);
  EXPECT_NE(b.err.find("adapter"), std::string::npos) << b.err;
  EXPECT_FALSE(exists(scratch() + "/bad-adapter.safetensors"));
}

TEST(PipelineCli, Mpi_RecordEqualsOneProcess) {
  auto args = [](const std::string& out, bool pipeline) {
    std::vector<std::string> a = {"record", "--checkpoint", kModel, "--ids", "1,17,400,9,33", "--generate", "4",
                                  "--ignore-eos", "--temperature", "0.8", "--seed", "5", "--compare-registers", "2",
                                  "--full-dtype", "f32", "--backend", "cpu", "--out", out};
    if (pipeline) a.push_back("--pipeline");
    return a;
  };
  const std::string one = scratch() + "/one.hlsession";
  ASSERT_EQ(hybridlens(args(one, false)).status, 0);
  const hl::Recording want = hl::load_session(one);
  ASSERT_EQ(want.runs.size(), 2u);
  for (int np : {2, 3}) {
    const std::string out = scratch() + "/np" + std::to_string(np) + ".hlsession";
    const Result r = mpirun(np, args(out, true));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const hl::Recording got = hl::load_session(out);
    EXPECT_EQ(got.tokens, want.tokens) << "-np " << np;  // the sampled tokens too
    ASSERT_EQ(got.runs.size(), want.runs.size());
    for (size_t k = 0; k < want.runs.size(); ++k) {
      const hl::RecordList &a = want.runs[k].records, &b = got.runs[k].records;
      ASSERT_EQ(a.size(), b.size());
      for (size_t t = 0; t < a.size(); ++t)
        for (const hl::TraceField& f : hl::trace_fields()) {
          const std::string at = "-np " + std::to_string(np) + " run " + want.runs[k].label + " token " +
                                 std::to_string(t) + " " + f.name;
          if (f.fvec) EXPECT_EQ(a[t].*f.fvec, b[t].*f.fvec) << at;
          if (f.ivec) EXPECT_EQ(a[t].*f.ivec, b[t].*f.ivec) << at;
          if (f.i32) EXPECT_EQ(a[t].*f.i32, b[t].*f.i32) << at;
          if (f.i64) EXPECT_EQ(a[t].*f.i64, b[t].*f.i64) << at;
          if (f.f32) EXPECT_EQ(a[t].*f.f32, b[t].*f.f32) << at;
        }
    }
  }
}

TEST(PipelineCli, Mpi_SweepEqualsOneProcess) {
  const std::string prompts = scratch() + "/prompts.jsonl";
  std::ofstream(prompts) << "{\"text\": \"The grep command searches\"}\n{\"ids\": [1, 17, 400, 9, 33]}\n"
                            "{\"text\": \"Emacs is a text editor\"}\n";
  auto args = [&](const std::string& out, bool pipeline) {
    std::vector<std::string> a = {"sweep", "--checkpoint", kModel, "--prompts", prompts, "--generate", "2",
                                  "--ignore-eos", "--backend", "cpu", "--out", out};
    if (pipeline) a.push_back("--pipeline");
    return a;
  };
  const std::string one = scratch() + "/one.hlstats";
  const Result r1 = hybridlens(args(one, false));
  ASSERT_EQ(r1.status, 0) << r1.err;
  const size_t from = r1.out.find("3 prompts, "), to = r1.out.find(", 1 rank");
  ASSERT_TRUE(from != std::string::npos && to != std::string::npos) << r1.out;
  const std::string counts = r1.out.substr(from, to - from);  // "3 prompts, N tokens"
  const std::string reader = std::string(HL_SOURCE_DIR) + "/tools/read_stats.py";
  for (int np : {2, 3}) {
    const std::string out = scratch() + "/np" + std::to_string(np) + ".hlstats";
    const Result r = mpirun(np, args(out, true));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(counts + ", pipeline of " + std::to_string(np) + " ranks"), std::string::npos) << r.out;
    const Result same = run({"/usr/bin/python3", reader, "--compare", one, out});
    EXPECT_EQ(same.status, 0) << same.out << same.err;
    EXPECT_FALSE(exists(out + ".partial"));
  }
  // --stages: two pipelines of two ranks (prompts spread over them), and three of one rank each.
  for (const auto& [np, stages] : {std::pair<int, int>{4, 2}, std::pair<int, int>{3, 1}}) {
    const std::string out = scratch() + "/np" + std::to_string(np) + "-stages" + std::to_string(stages) + ".hlstats";
    std::vector<std::string> a = args(out, true);
    a.insert(a.end(), {"--stages", std::to_string(stages)});
    const Result r = mpirun(np, a);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(counts + ", " + std::to_string(np / stages) + " pipelines of " + std::to_string(stages) +
                         " ranks"),
              std::string::npos)
        << r.out;
    const Result same = run({"/usr/bin/python3", reader, "--compare", one, out});
    EXPECT_EQ(same.status, 0) << same.out << same.err;
    for (int g = 0; g < np / stages; ++g)
      EXPECT_FALSE(exists(out + ".partial." + std::to_string(g) + "-of-" + std::to_string(np / stages)));
  }
  std::vector<std::string> bad = args(scratch() + "/bad-stages.hlstats", true);
  bad.insert(bad.end(), {"--stages", "3"});
  const Result b = mpirun(4, bad);
  EXPECT_NE(b.status, 0);
  EXPECT_NE(b.err.find("--stages 3 does not divide the 4 ranks into pipelines of that many stages"), std::string::npos)
      << b.err;
  EXPECT_FALSE(exists(scratch() + "/bad-stages.hlstats"));
  // And the reader tells a different sweep apart (the comparison can fail).
  const std::string two = scratch() + "/two.hlstats";
  std::ofstream(prompts) << "{\"ids\": [1, 17, 400, 9, 33]}\n";
  ASSERT_EQ(hybridlens(args(two, false)).status, 0);
  EXPECT_EQ(run({"/usr/bin/python3", reader, "--compare", one, two}).status, 1);
}

TEST(PipelineCli, Mpi_MoreRanksThanLayersRefused) {
  const Result r = mpirun(9, traceArgs(scratch() + "/nine.safetensors", true));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--pipeline: 9 stages for a model of 8 layers (at most one stage per layer)"), std::string::npos)
      << r.err;
  EXPECT_FALSE(exists(scratch() + "/nine.safetensors"));
}

TEST(PipelineCli, Mpi_KilledRankStopsTheOthers) {
  std::vector<std::string> env = hl::test::mpi_env();
  env.push_back("HL_PIPELINE_KILL_AFTER=4:1");  // rank 1 dies at its 4th send, mid-run
  std::vector<std::string> a = traceArgs(scratch() + "/killed.safetensors", true);
  a[6] = "200";  // --generate 200: the others would wait for it
  const Result k = mpirun(3, a, env);
  EXPECT_NE(k.status, 0);
  EXPECT_LT(k.seconds, 15.0) << "the other ranks did not stop";
  EXPECT_NE(k.err.find("exited on signal 9"), std::string::npos) << k.err;
  EXPECT_FALSE(exists(scratch() + "/killed.safetensors"));
}

TEST(PipelineCli, Mpi_ARanksErrorEndsTheJobWithItsMessage) {
  std::vector<std::string> a = traceArgs(scratch() + "/limit.safetensors", true);
  a.insert(a.end(), {"--max-context", "6"});  // 5 fed + 4 generated pass it mid-run, on every rank
  const Result r = mpirun(2, a);
  EXPECT_NE(r.status, 0);
  EXPECT_LT(r.seconds, 15.0);
  EXPECT_NE(r.err.find(" of 2: context length limit reached"), std::string::npos) << r.err;
  // Not Open MPI's own "MPI_ABORT was invoked" notice: when both ranks abort at once, its runtime
  // sometimes loses it ("ORTE_ERROR_LOG: Data unpack would read past end of buffer", seen here).
  EXPECT_FALSE(exists(scratch() + "/limit.safetensors"));
}
#endif

}  // namespace
