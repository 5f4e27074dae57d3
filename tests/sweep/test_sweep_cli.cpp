// `hybridlens sweep` end to end (issue 21 items 1 and 4) on the bundled demo model: the stats equal
// those computed from `record` sessions of the same prompts, split-and-merge equals one pass, a
// killed sweep continues to the same file, bad JSONL lines fail naming the line, tools/read_stats.py
// reads the file; with MPI, -np 2 and -np 3 against one process and a rank killed mid-sweep.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/model/generator.h"
#include "sessions/session_file.h"
#include "sessions/sweep_file.h"
#include "tests/app/cli_test_util.h"

namespace {

using hl::test::cli_scratch;
using hl::test::hybridlens;
using hl::test::run_command;
using hl::test::read_text;
using Result = hl::test::CliResult;

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

const std::string kModel = std::string(HL_SOURCE_DIR) + "/resources/models/baseline";
// Five short prompts: text, ids, text, ids, text.
const std::vector<std::string> kPrompts = {R"({"text": "The grep command searches"})",
                                           R"({"ids": [1, 17, 400, 9, 33]})", R"({"text": "Emacs is a text editor"})",
                                           R"({"ids": [1, 250, 12]})", R"({"text": "a 3 b 7 -> b"})"};

std::string promptsFile(const std::string& name, size_t lo, size_t hi) {
  std::string text;
  for (size_t i = lo; i < hi; ++i) text += kPrompts[i] + "\n" + (i == lo ? "\n" : "");  // a blank line too
  const std::string path = cli_scratch() + "/" + name;
  write(path, text);
  return path;
}

std::vector<std::string> sweepArgs(const std::string& prompts, const std::string& out) {
  return {"sweep", "--checkpoint", kModel,      "--prompts", prompts, "--generate",
          "2",     "--ignore-eos", "--backend", "cpu",       "--out", out};
}

// Counts and sketches bit-identical, the rest within `rel` relative.
void expectSameStats(const hl::SweepStats& a, const hl::SweepStats& b, double rel, const std::string& what) {
  ASSERT_EQ(a.dists.size(), b.dists.size()) << what;
  EXPECT_EQ(a.prompts, b.prompts) << what;
  EXPECT_EQ(a.tokens, b.tokens) << what;
  auto near = [&](double x, double y) {
    return x == y || std::fabs(x - y) <= rel * std::max(std::fabs(x), std::fabs(y)) + 1e-30;
  };
  for (size_t i = 0; i < a.dists.size(); ++i) {
    const hl::Distribution &x = a.dists[i], &y = b.dists[i];
    const std::string n = what + " " + hl::sweep_instruments()[i].name;
    ASSERT_EQ(x.shape, y.shape) << n;
    EXPECT_EQ(x.count, y.count) << n;
    EXPECT_EQ(x.nonfinite, y.nonfinite) << n;
    EXPECT_EQ(x.hist, y.hist) << n;
    EXPECT_EQ(x.sketch, y.sketch) << n;
    for (size_t c = 0; c < x.count.size(); ++c) {
      EXPECT_TRUE(near(x.mean[c], y.mean[c])) << n << " cell " << c << ": " << x.mean[c] << " vs " << y.mean[c];
      EXPECT_TRUE(near(x.m2[c], y.m2[c]) || std::fabs(x.m2[c] - y.m2[c]) < 1e-9 * x.count[c]) << n << " cell " << c;
      EXPECT_TRUE(near(x.min[c], y.min[c]) && near(x.max[c], y.max[c])) << n << " cell " << c;
    }
  }
  EXPECT_EQ(a.router.topk_count, b.router.topk_count) << what;
  EXPECT_EQ(a.router.tokens, b.router.tokens) << what;
  for (size_t i = 0; i < a.router.prob_sum.size(); ++i)
    EXPECT_TRUE(near(a.router.prob_sum[i], b.router.prob_sum[i])) << what;
}

class SweepCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    all_ = promptsFile("all.jsonl", 0, kPrompts.size());
    whole_ = cli_scratch() + "/whole.hlstats";
    const Result r = hybridlens(sweepArgs(all_, whole_));
    ASSERT_EQ(r.status, 0) << r.err;
  }
  static std::string all_, whole_;
};
std::string SweepCli::all_, SweepCli::whole_;

TEST_F(SweepCli, EqualsTheStatsOfRecordSessionsOfTheSamePrompts) {
  const std::string keep = cli_scratch() + "/kept";
  ::mkdir(keep.c_str(), 0755);
  const std::string out = cli_scratch() + "/kept.hlstats";
  std::vector<std::string> args = sweepArgs(all_, out);
  args.insert(args.end(), {"--keep-sessions", keep});
  const Result r = hybridlens(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + out + ": 5 prompts"), std::string::npos) << r.out;
  EXPECT_FALSE(exists(out + ".partial"));
  const hl::SweepFile file = hl::load_sweep_stats(out);
  // The same prompts through `record` (attention rows kept in f32), aggregated here.
  hl::SweepStats direct;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(kPrompts[i]);
    const std::string session = cli_scratch() + "/p" + std::to_string(i) + ".hlsession";
    std::vector<std::string> rec = {"record",    "--checkpoint", kModel,         "--generate", "2",     "--ignore-eos",
                                    "--backend", "cpu",          "--full-dtype", "f32",        "--out", session};
    if (j.contains("text")) {
      rec.insert(rec.end(), {"--prompt", j["text"].get<std::string>()});
    } else {
      std::string ids;
      for (const auto& x : j["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(x.get<int>());
      rec.insert(rec.end(), {"--ids", ids});
    }
    const Result rr = hybridlens(rec);
    ASSERT_EQ(rr.status, 0) << rr.err;
    const hl::Recording s = hl::load_session(session);
    if (i == 0) {
      hl::JambaConfig c = s.config;
      direct = hl::SweepStats::for_schedule(hl::LayerSchedule::from_config(c));
    }
    direct.add_run(s.runs[0]);
    // The kept session holds the same tokens as record's.
    char name[40];
    std::snprintf(name, sizeof name, "/prompt-%06zu.hlsession", i);
    EXPECT_EQ(hl::load_session(keep + name).tokens, s.tokens) << i;
  }
  expectSameStats(file.stats, direct, 1e-6, "sweep vs record");
  EXPECT_GT(file.stats.dists[2].count[0], 0);  // the first-token mass came from the rows
  EXPECT_EQ(file.manifest["prompts"], 5);
  EXPECT_EQ(file.manifest["schedule"]["mixers"], "MMAMMMAM");
  EXPECT_EQ(file.manifest["checkpoint"]["name"], "baseline");
}

TEST_F(SweepCli, SplitAndMergeEqualsOnePass) {
  const std::string a = cli_scratch() + "/a.hlstats", b = cli_scratch() + "/b.hlstats";
  ASSERT_EQ(hybridlens(sweepArgs(promptsFile("a.jsonl", 0, 2), a)).status, 0);
  ASSERT_EQ(hybridlens(sweepArgs(promptsFile("b.jsonl", 2, 5), b)).status, 0);
  hl::SweepStats merged = hl::load_sweep_stats(a).stats;
  merged.merge(hl::load_sweep_stats(b).stats);
  expectSameStats(merged, hl::load_sweep_stats(whole_).stats, 1e-6, "split");
}

TEST_F(SweepCli, KilledSweepContinuesToTheSameFile) {
  const std::string out = cli_scratch() + "/resumed.hlstats";
  const Result k = hybridlens(sweepArgs(all_, out), {"HL_SWEEP_KILL_AFTER=2"});
  EXPECT_EQ(k.status, 128 + 9) << k.err;
  ASSERT_TRUE(exists(out + ".partial"));
  EXPECT_FALSE(exists(out));
  EXPECT_EQ(hl::load_sweep_stats(out + ".partial").finished, (std::vector<int64_t>{0, 1}));
  // Another checkpoint option, or other prompts: refused, the progress kept.
  std::vector<std::string> other = sweepArgs(all_, out);
  other.insert(other.end(), {"--normalizer", "softmax1"});
  Result o = hybridlens(other);
  EXPECT_NE(o.status, 0);
  EXPECT_NE(o.err.find(".partial: a progress file of another sweep: the options differs"), std::string::npos) << o.err;
  o = hybridlens(sweepArgs(promptsFile("fewer.jsonl", 0, 4), out));
  EXPECT_NE(o.err.find("the prompts file differs"), std::string::npos) << o.err;
  std::vector<std::string> otherModel = sweepArgs(all_, out);
  otherModel[2] = std::string(HL_SOURCE_DIR) + "/resources/models/softmax1";
  o = hybridlens(otherModel);
  EXPECT_NE(o.err.find("the checkpoint differs"), std::string::npos) << o.err;
  EXPECT_EQ(hl::load_sweep_stats(out + ".partial").finished.size(), 2u);  // kept through the refusals
  const Result c = hybridlens(sweepArgs(all_, out));
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("continuing after 2 finished prompts"), std::string::npos) << c.err;
  EXPECT_FALSE(exists(out + ".partial"));
  EXPECT_EQ(read_text(out), read_text(whole_));  // byte for byte
}

TEST_F(SweepCli, NoFullLeavesOutTheFirstTokenMassOnly) {
  const std::string out = cli_scratch() + "/nofull.hlstats";
  std::vector<std::string> args = sweepArgs(promptsFile("one.jsonl", 0, 1), out);
  args.insert(args.end(), {"--no-full", "--hidden-attention"});  // the hidden attention needs no rows kept
  ASSERT_EQ(hybridlens(args).status, 0);
  const hl::SweepFile f = hl::load_sweep_stats(out);
  for (size_t i = 0; i < f.stats.dists.size(); ++i) {
    const std::vector<int64_t>& n = f.stats.dists[i].count;
    const bool first = std::string(hl::sweep_instruments()[i].name) == "attn_first_mass";
    for (int64_t c : n) EXPECT_EQ(c == 0, first) << hl::sweep_instruments()[i].name;
  }
  EXPECT_EQ(f.manifest["options"]["no-full"], "");
}

// Models with empty axes: no attention layer (the demo's all-Mamba variant), no MoE layer and
// attention beside Mamba-2 in every layer (a generated Falcon-H1).
TEST_F(SweepCli, ModelsWithEmptyAxes) {
  hl::GenerateOptions g;
  g.config = hl::preset_config("falcon-h1-tiny");
  g.seed = 2;
  const std::string falcon = cli_scratch() + "/falcon";
  hl::generate_checkpoint(falcon, g);
  const std::string ids = cli_scratch() + "/ids.jsonl";
  write(ids, "{\"ids\": [1, 17, 40, 9]}\n{\"ids\": [3, 5]}\n");
  for (const std::string& model : {std::string(HL_SOURCE_DIR) + "/resources/models/no-attention", falcon}) {
    const std::string out = cli_scratch() + "/empty-axes.hlstats";
    std::vector<std::string> args = sweepArgs(ids, out);
    args[2] = model;
    const Result r = hybridlens(args);
    ASSERT_EQ(r.status, 0) << model << ": " << r.err;
    const hl::SweepFile f = hl::load_sweep_stats(out);
    const bool noAttention = model != falcon;
    EXPECT_EQ(f.stats.dists[0].cells() == 0, noAttention) << model;
    EXPECT_EQ(f.stats.router.moe == 0, !noAttention) << model;
    EXPECT_EQ(f.stats.dists[6].count[0], (4 + 2) + (2 + 2)) << model;  // resid_max_abs, depth 0: fed + generated
    const Result py = run_command({"/usr/bin/python3", std::string(HL_SOURCE_DIR) + "/tools/read_stats.py", "--check", out});
    EXPECT_EQ(py.status, 0) << model << ": " << py.out << py.err;
  }
}

TEST_F(SweepCli, BadLinesNameTheFileAndLine) {
  struct Case {
    std::string line, expect;
  };
  const std::vector<Case> cases = {
      {"not json", "not valid JSON"},
      {"[1, 2]", "expected an object"},
      {R"({"text": 3})", "\"text\" must be a string"},
      {R"({"ids": []})", "\"ids\" must be a non-empty list"},
      {R"({"ids": [1, -2]})", "\"ids\" element 1 is -2"},
      {R"({"text": "a", "ids": [1]})", "exactly one of"},
      {R"({"prompt": "x"})", "unknown field 'prompt'"},
      {R"({"messages": "hi"})", "expected a list of messages"},
      {R"({"ids": [1, 99999]})", "token id 99999 at position 1 is outside the vocabulary [0, 4096)"},
  };
  for (const Case& c : cases) {
    const std::string f = cli_scratch() + "/bad.jsonl";
    write(f, kPrompts[0] + "\n\n" + c.line + "\n");
    const Result r = hybridlens(sweepArgs(f, cli_scratch() + "/bad.hlstats"));
    EXPECT_EQ(r.status, 1) << c.line;
    EXPECT_NE(r.err.find(f + ":3: "), std::string::npos) << c.line << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.line << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST_F(SweepCli, PythonReaderChecksTheFile) {
  const Result r = run_command({"/usr/bin/python3", std::string(HL_SOURCE_DIR) + "/tools/read_stats.py", "--check", whole_});
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("attn_entropy"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check: ok"), std::string::npos) << r.out;
  const std::string reader = std::string(HL_SOURCE_DIR) + "/tools/read_stats.py";
  const Result same = run_command({"/usr/bin/python3", reader, "--compare", whole_, whole_});
  EXPECT_EQ(same.status, 0) << same.out << same.err;
  const std::string part = cli_scratch() + "/first2.hlstats";
  ASSERT_EQ(hybridlens(sweepArgs(promptsFile("first2.jsonl", 0, 2), part)).status, 0);
  const Result differ = run_command({"/usr/bin/python3", reader, "--compare", whole_, part});
  EXPECT_EQ(differ.status, 1) << differ.out << differ.err;
  EXPECT_NE(differ.out.find("differs: attn_entropy.count: integers differ"), std::string::npos) << differ.out;
}

// --hidden-attention: one value per token in each cell of the hidden instruments (Jamba's Mamba-1:
// one channel-mean "head" per Mamba layer); everything else as without it; with --pipeline in one
// process (one stage), the same file.
std::vector<std::string> hiddenArgs(const std::string& prompts, const std::string& out) {
  std::vector<std::string> a = sweepArgs(prompts, out);
  a.push_back("--hidden-attention");
  return a;
}

// The prompts twice over (10 lines) in cli_scratch()/name; its path.
std::string tenPrompts(const std::string& name) {
  std::string text;
  for (int k = 0; k < 2; ++k)
    for (const std::string& p : kPrompts) text += p + "\n";
  const std::string path = cli_scratch() + "/" + name;
  write(path, text);
  return path;
}

void expectHiddenCounts(const hl::SweepStats& st, int64_t tokens) {
  for (size_t i = 9; i < 11; ++i) {
    ASSERT_EQ(st.dists[i].shape, (std::vector<int64_t>{6, 1})) << hl::sweep_instruments()[i].name;  // MMAMMMAM
    for (int64_t n : st.dists[i].count) EXPECT_EQ(n, tokens) << hl::sweep_instruments()[i].name;
  }
}

TEST_F(SweepCli, HiddenAttention_OneValuePerTokenAndLayer) {
  const std::string out = cli_scratch() + "/hidden.hlstats";
  const Result r = hybridlens(hiddenArgs(all_, out));
  ASSERT_EQ(r.status, 0) << r.err;
  hl::SweepFile f = hl::load_sweep_stats(out);
  EXPECT_EQ(f.manifest["options"]["hidden-attention"], "");
  expectHiddenCounts(f.stats, 39);
  const hl::Distribution& first = f.stats.dists[10];
  for (size_t c = 0; c < first.mean.size(); ++c) EXPECT_TRUE(first.mean[c] > 0 && first.mean[c] <= 1) << c;
  hl::SweepStats plain = hl::load_sweep_stats(whole_).stats;
  for (int64_t n : plain.dists[9].count) EXPECT_EQ(n, 0);  // without the option: no values
  for (size_t i = 9; i < 11; ++i) plain.dists[i] = f.stats.dists[i];
  expectSameStats(f.stats, plain, 0, "the other instruments");
  std::vector<std::string> a = hiddenArgs(all_, cli_scratch() + "/hidden-pipeline.hlstats");
  a.push_back("--pipeline");
  const Result p = hybridlens(a);
  ASSERT_EQ(p.status, 0) << p.err;
  expectSameStats(hl::load_sweep_stats(cli_scratch() + "/hidden-pipeline.hlstats").stats, f.stats, 0,
                  "--pipeline, one stage");
}

#ifdef HL_MPIEXEC
using hl::test::mpirun;

TEST_F(SweepCli, Mpi_TwoAndThreeRanksEqualOneProcess) {
  for (int np : {2, 3}) {
    const std::string out = cli_scratch() + "/np" + std::to_string(np) + ".hlstats";
    const Result r = mpirun(np, sweepArgs(all_, out));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("5 prompts, 39 tokens, " + std::to_string(np) + " ranks"), std::string::npos) << r.out;
    const hl::SweepFile f = hl::load_sweep_stats(out);
    expectSameStats(f.stats, hl::load_sweep_stats(whole_).stats, 1e-6, "-np " + std::to_string(np));
    EXPECT_EQ(f.manifest["prompts_file"], hl::load_sweep_stats(whole_).manifest["prompts_file"]);
    for (int r2 = 0; r2 < np; ++r2)
      EXPECT_FALSE(exists(out + ".partial." + std::to_string(r2) + "-of-" + std::to_string(np)));
  }
}

TEST_F(SweepCli, Mpi_HiddenAttentionTwoRanksEqualOneProcess) {
  const std::string one = cli_scratch() + "/hidden-one.hlstats", two = cli_scratch() + "/hidden-np2.hlstats";
  if (!exists(one)) ASSERT_EQ(hybridlens(hiddenArgs(all_, one)).status, 0);
  const Result r = mpirun(2, hiddenArgs(all_, two));
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  const hl::SweepFile f = hl::load_sweep_stats(two);
  expectHiddenCounts(f.stats, 39);
  expectSameStats(f.stats, hl::load_sweep_stats(one).stats, 1e-6, "hidden -np 2");
}

// --pipeline --hidden-attention: each stage replays the prompts through its own SSM layers and
// stage 0 adds every stage's values in layer order: the stats equal one process's exactly.
TEST_F(SweepCli, Mpi_HiddenAttentionPipelineEqualsOneProcess) {
  const std::string one = cli_scratch() + "/hidden-one.hlstats";
  if (!exists(one)) ASSERT_EQ(hybridlens(hiddenArgs(all_, one)).status, 0);
  for (int np : {2, 3}) {
    const std::string out = cli_scratch() + "/hidden-pipe" + std::to_string(np) + ".hlstats";
    std::vector<std::string> a = hiddenArgs(all_, out);
    a.push_back("--pipeline");
    const Result r = mpirun(np, a);
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("pipeline of " + std::to_string(np) + " ranks"), std::string::npos) << r.out;
    const hl::SweepFile f = hl::load_sweep_stats(out);
    expectHiddenCounts(f.stats, 39);
    expectSameStats(f.stats, hl::load_sweep_stats(one).stats, 0, "hidden --pipeline -np " + std::to_string(np));
  }
  // Two pipelines of two stages: the prompts spread over them, their aggregates merged (1e-6).
  const std::string out = cli_scratch() + "/hidden-pipe-2x2.hlstats";
  std::vector<std::string> a = hiddenArgs(all_, out);
  a.insert(a.end(), {"--pipeline", "--stages", "2"});
  const Result r = mpirun(4, a);
  ASSERT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("2 pipelines of 2 ranks"), std::string::npos) << r.out;
  const hl::SweepFile f = hl::load_sweep_stats(out);
  expectHiddenCounts(f.stats, 39);
  expectSameStats(f.stats, hl::load_sweep_stats(one).stats, 1e-6, "hidden, 2 pipelines of 2");
}

TEST_F(SweepCli, Mpi_KilledRankStopsTheOthersAndTheSweepContinues) {
  const std::string prompts = tenPrompts("ten.jsonl"), out = cli_scratch() + "/killed.hlstats";
  std::vector<std::string> env = hl::test::mpi_env();
  env.push_back("HL_SWEEP_KILL_AFTER=1:1");  // rank 1 dies after its first prompt
  const Result k = mpirun(3, sweepArgs(prompts, out), env);
  EXPECT_NE(k.status, 0);
  EXPECT_LT(k.seconds, 15.0) << "the other ranks did not stop";
  EXPECT_NE(k.err.find("exited on signal 9"), std::string::npos) << k.err;
  EXPECT_FALSE(exists(out));
  // Every rank's finished prompts are kept: rank 1 its one, the others theirs (indices r mod 3).
  EXPECT_EQ(hl::load_sweep_stats(out + ".partial.1-of-3").finished, (std::vector<int64_t>{1}));
  for (int r = 0; r < 3; r += 2)
    if (exists(out + ".partial." + std::to_string(r) + "-of-3"))
      for (int64_t i : hl::load_sweep_stats(out + ".partial." + std::to_string(r) + "-of-3").finished)
        EXPECT_EQ(i % 3, r);
  // A copy of the progress continues on 2 ranks below.
  for (int r = 0; r < 3; ++r) {
    const std::string tail = ".partial." + std::to_string(r) + "-of-3";
    if (exists(out + tail)) write(cli_scratch() + "/killed-np2.hlstats" + tail, read_text(out + tail));
  }
  // The same command continues each rank's own file and equals one process.
  const Result c = mpirun(3, sweepArgs(prompts, out));
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.err.find("partial.1-of-3: continuing after 1 finished prompts"), std::string::npos) << c.err;
  const std::string one = cli_scratch() + "/ten-one.hlstats";
  ASSERT_EQ(hybridlens(sweepArgs(prompts, one)).status, 0);
  expectSameStats(hl::load_sweep_stats(out).stats, hl::load_sweep_stats(one).stats, 1e-6, "resumed -np 3");
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(exists(out + ".partial." + std::to_string(r) + "-of-3"));
  // On 2 ranks (a node lost): rank 0 adopts the 3 files, the rest is spread over 2; equals one process.
  const std::string two = cli_scratch() + "/killed-np2.hlstats";
  const Result c2 = mpirun(2, sweepArgs(prompts, two));
  ASSERT_EQ(c2.status, 0) << c2.err;
  EXPECT_NE(c2.err.find("of a sweep on another number of ranks"), std::string::npos) << c2.err;
  expectSameStats(hl::load_sweep_stats(two).stats, hl::load_sweep_stats(one).stats, 1e-6, "resumed on -np 2");
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(exists(two + ".partial." + std::to_string(r) + "-of-3"));
  EXPECT_FALSE(exists(two + ".partial.0-of-2"));
}

// Two pipelines of two stages (--pipeline --stages 2 on 4 ranks): the first stage of the second
// pipeline dies after its first prompt; every pipeline's finished prompts are kept (its first
// stage's file), and one pipeline of two ranks adopts them and finishes; equal to one process.
TEST_F(SweepCli, Mpi_PipelinesKilled_ContinueOnOnePipeline) {
  const std::string prompts = tenPrompts("ten-p.jsonl"), out = cli_scratch() + "/pipes-killed.hlstats";
  std::vector<std::string> env = hl::test::mpi_env();
  env.push_back("HL_SWEEP_KILL_AFTER=1:2");  // world rank 2: pipeline 1's first stage
  std::vector<std::string> a = sweepArgs(prompts, out);
  a.insert(a.end(), {"--pipeline", "--stages", "2"});
  const Result k = mpirun(4, a, env);
  EXPECT_NE(k.status, 0);
  EXPECT_LT(k.seconds, 15.0) << "the other ranks did not stop";
  EXPECT_FALSE(exists(out));
  EXPECT_EQ(hl::load_sweep_stats(out + ".partial.1-of-2").finished, (std::vector<int64_t>{1}));
  if (exists(out + ".partial.0-of-2"))
    for (int64_t i : hl::load_sweep_stats(out + ".partial.0-of-2").finished) EXPECT_EQ(i % 2, 0);
  std::vector<std::string> c = sweepArgs(prompts, out);
  c.push_back("--pipeline");
  const Result r = mpirun(2, c);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("of a sweep on another number of ranks"), std::string::npos) << r.err;
  const std::string one = cli_scratch() + "/ten-p-one.hlstats";
  ASSERT_EQ(hybridlens(sweepArgs(prompts, one)).status, 0);
  expectSameStats(hl::load_sweep_stats(out).stats, hl::load_sweep_stats(one).stats, 1e-6, "2 pipelines, resumed on 1");
  for (int g = 0; g < 2; ++g) EXPECT_FALSE(exists(out + ".partial." + std::to_string(g) + "-of-2"));
  EXPECT_FALSE(exists(out + ".partial"));
}

// A 3-rank sweep's progress continued by one process, interrupted after the adoption, with the
// adopted files back (as if the removal had not happened): they are left out as held, not counted
// twice; the result equals one process and no progress file is left.
TEST_F(SweepCli, Mpi_ProgressOfAnotherRankCount_AdoptedOnceWhateverIsInterrupted) {
  const std::string prompts = tenPrompts("ten-b.jsonl"), out = cli_scratch() + "/adopted.hlstats";
  std::vector<std::string> env = hl::test::mpi_env();
  env.push_back("HL_SWEEP_KILL_AFTER=1");  // every rank dies after its first prompt
  (void)mpirun(3, sweepArgs(prompts, out), env);
  std::vector<std::pair<std::string, std::string>> kept;
  for (int r = 0; r < 3; ++r) {
    const std::string f = out + ".partial." + std::to_string(r) + "-of-3";
    if (exists(f)) kept.emplace_back(f, read_text(f));
  }
  ASSERT_FALSE(kept.empty());
  const Result k = hybridlens(sweepArgs(prompts, out), {"HL_SWEEP_KILL_AFTER=1"});
  EXPECT_EQ(k.status, 128 + 9) << k.err;
  EXPECT_NE(k.err.find("of a sweep on another number of ranks"), std::string::npos) << k.err;
  ASSERT_TRUE(exists(out + ".partial"));
  for (const auto& [f, bytes] : kept) {
    EXPECT_FALSE(exists(f)) << f;
    write(f, bytes);  // back, as after an adoption killed before it removed them
  }
  const Result c = hybridlens(sweepArgs(prompts, out));
  ASSERT_EQ(c.status, 0) << c.err;
  const std::string one = cli_scratch() + "/ten-b-one.hlstats";
  ASSERT_EQ(hybridlens(sweepArgs(prompts, one)).status, 0);
  expectSameStats(hl::load_sweep_stats(out).stats, hl::load_sweep_stats(one).stats, 1e-6, "adopted once");
  EXPECT_FALSE(exists(out + ".partial"));
  for (const auto& [f, bytes] : kept) EXPECT_FALSE(exists(f)) << f;
}
#endif

}  // namespace
