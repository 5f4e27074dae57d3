// Session files, the recorder and run comparison (issue 6): bit-exact round trips, A/B runs on a
// tiny checkpoint, a save killed mid-write leaving the previous file intact, the Python reader.
// The corruption table of the session reader is in test_session_corrupt.cpp.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/dtype.h"
#include "engine/io/atomic_file.h"
#include "engine/io/checkpoint.h"
#include "engine/model/loader.h"
#include "sessions/compare.h"
#include "sessions/identity.h"
#include "sessions/recorder.h"
#include "sessions/session_file.h"
#include "tests/engine/session_test_util.h"
#include "tests/engine/test_util.h"

namespace hl::test {
namespace {

// A tiny checkpoint on disk and its loaded model, shared by the tests that run the CPU backend.
struct TinyModel {
  TempDir dir;
  std::shared_ptr<Model> model;
  TinyModel() {
    write_tiny_checkpoint(dir.path, tiny_config());
    model = load_model(dir.path);
  }
};
TinyModel& tiny() {
  static TinyModel m;
  return m;
}

hl::Run record(const RunOptions& o, const std::vector<int32_t>& tokens, const std::string& label, int64_t generate = 0,
               SamplingOptions smp = {}) {
  RecordRequest r;
  r.prompt = tokens;
  r.options = o;
  r.backend = "cpu";
  r.label = label;
  r.generate = generate;
  r.sampling = smp;
  return record_run(tiny().model, r);
}

Recording tiny_recording(std::vector<Run> runs) {
  std::vector<int32_t> tokens;
  for (const TokenTrace& r : runs[0].records) tokens.push_back(r.token_id);
  Recording rec = make_recording(*tiny().model, identify_checkpoint(tiny().dir.path), "", tokens, nullptr);
  rec.runs = std::move(runs);
  return rec;
}

RunOptions full_options() {
  RunOptions o;
  o.full = true;
  return o;
}

TEST(Session, RoundTrip_F32Storage_EveryFieldBitExact) {
  RunOptions o = full_options();
  o.registers = 2;
  o.max_context = 100;
  Recording rec = tiny_recording({record(o, {1, 5, 9, 17}, "A", 3, {0.8f, 0.9f, 42, true})});
  rec.prompt = "héllo \"world\"";
  rec.token_text = {"a", "b", "\xff broken utf8", "d", "e", "f", "g"};
  SessionSaveOptions s;
  s.full_dtype = DType::F32;
  TempDir dir;
  save_session(dir / "s.hlsession", rec, s);
  const Recording back = load_session(dir / "s.hlsession");

  EXPECT_EQ(back.checkpoint.folder, rec.checkpoint.folder);
  EXPECT_EQ(back.checkpoint.config_sha256, rec.checkpoint.config_sha256);
  EXPECT_EQ(back.checkpoint.weights_hash, rec.checkpoint.weights_hash);
  EXPECT_EQ(config_to_json(back.config), config_to_json(rec.config));
  EXPECT_EQ(back.prompt, rec.prompt);
  EXPECT_EQ(back.tokens, rec.tokens);
  ASSERT_EQ(back.token_text.size(), 7u);
  EXPECT_EQ(back.token_text[2], "\xef\xbf\xbd broken utf8");  // invalid UTF-8 becomes U+FFFD (JSON)
  EXPECT_EQ(back.engine_version, HL_VERSION);
  EXPECT_FALSE(back.created.empty());
  ASSERT_EQ(back.runs.size(), 1u);
  const hl::Run &a = rec.runs[0], &b = back.runs[0];
  EXPECT_EQ(b.label, "A");
  EXPECT_EQ(b.prompt_tokens, 4);
  EXPECT_EQ(b.load_seconds, a.load_seconds);
  EXPECT_EQ(b.run_seconds, a.run_seconds);
  EXPECT_EQ(b.settings.registers, 2);
  EXPECT_EQ(b.settings.registers_used, 2);
  EXPECT_EQ(b.settings.backend, "cpu");
  EXPECT_TRUE(b.settings.full);
  EXPECT_EQ(b.settings.max_context, 100);
  EXPECT_EQ(b.settings.sampling.temperature, 0.8f);
  EXPECT_EQ(b.settings.sampling.top_p, 0.9f);
  EXPECT_EQ(b.settings.sampling.seed, 42u);
  EXPECT_TRUE(b.settings.sampling.ignore_eos);
  expect_runs_equal(a, b, /*full_exact=*/true);
  // Saving what was loaded reproduces the file byte for byte (the created stamp is kept).
  const auto map = MappedFile::open(dir / "s.hlsession");
  EXPECT_EQ(serialize_session(back, s), std::vector<uint8_t>(map->data(), map->data() + map->size()));
}

TEST(Session, RoundTrip_DefaultStorage_FullFieldsAreTheirF16Rounding) {
  Recording rec = synthetic_recording(tiny_config(), 9, 7);
  TempDir dir;
  save_session(dir / "s.hlsession", rec);
  const Recording back = load_session(dir / "s.hlsession");
  expect_runs_equal(rec.runs[0], back.runs[0], /*full_exact=*/false);
  for (size_t t = 0; t < rec.runs[0].records.size(); ++t) {
    const TokenTrace &x = rec.runs[0].records[t], &y = back.runs[0].records[t];
    for (auto m : {&TokenTrace::ssm_delta, &TokenTrace::ssm_retained, &TokenTrace::attn_rows}) {
      std::vector<float> want = x.*m;
      for (float& v : want) v = f16_to_float(float_to_f16(v));  // the engine's own conversion
      ASSERT_TRUE(same_bits(want, y.*m)) << "token " << t;
    }
  }
}

TEST(Session, F16Decoding_AllHalfValues_MatchTheEngineConversion) {
  // 65536 half values placed in ssm_delta, stored F16, read back through the session decoder.
  JambaConfig c = tiny_config();
  const int64_t per = LayerSchedule::from_config(c).num_ssm() * c.mamba_inner();
  const int64_t T = (65536 + per - 1) / per;
  Recording rec = synthetic_recording(c, T, 3);
  for (int64_t i = 0; i < T * per; ++i) {
    rec.runs[0].records.edit(i / per).ssm_delta[i % per] = f16_to_float(static_cast<uint16_t>(i & 0xffff));
  }
  const Recording back = parse_session(serialize_session(rec).data(), serialize_session(rec).size(), "mem");
  for (int64_t i = 0; i < 65536; ++i) {
    const float want = f16_to_float(static_cast<uint16_t>(i)), got = back.runs[0].records[i / per].ssm_delta[i % per];
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << "half 0x" << std::hex << i;
    } else {
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "half 0x" << std::hex << i << ": " << want << " vs " << got;
    }
  }
}

TEST(Session, RoundTrip_F16LogitsAndBF16Full_AreTheRoundedValues) {
  Recording rec = synthetic_recording(tiny_config(), 5, 11);
  SessionSaveOptions s;
  s.logits_dtype = DType::F16;
  s.full_dtype = DType::BF16;
  const std::vector<uint8_t> bytes = serialize_session(rec, s);
  const Recording back = parse_session(bytes.data(), bytes.size(), "mem");
  const TokenTrace &x = rec.runs[0].records[4], &y = back.runs[0].records[4];
  std::vector<float> l = x.logits, d = x.ssm_delta;
  for (float& v : l) v = f16_to_float(float_to_f16(v));
  for (float& v : d) v = bf16_to_float(float_to_bf16(v));
  EXPECT_TRUE(same_bits(l, y.logits));
  EXPECT_TRUE(same_bits(d, y.ssm_delta));
  EXPECT_TRUE(same_bits(x.attn_entropy, y.attn_entropy));  // the small fields stay F32
}

TEST(Session, F16Storage_ValueBeyondHalfRange_TensorKeptF32) {
  Recording rec = synthetic_recording(tiny_config(), 3, 5);
  rec.runs[0].records.edit(1).ssm_delta[7] = 1e6f;  // F16 would make it Inf
  const std::vector<uint8_t> bytes = serialize_session(rec);
  EXPECT_NE(header_text(bytes).find("\"runs/A/ssm_delta\":{\"dtype\":\"F32\""), std::string::npos);
  const Recording back = parse_session(bytes.data(), bytes.size(), "mem");
  EXPECT_EQ(back.runs[0].records[1].ssm_delta[7], 1e6f);
}

TEST(Session, PartialRecords_AbsentTokensComeBackEmpty) {
  Recording rec = synthetic_recording(tiny_config(), 6, 9);
  rec.runs[0].records.edit(2).attn_rows.clear();
  rec.runs[0].records.edit(5).attn_rows.clear();
  // ssm_retained not recorded at all:
  for (size_t t = 0; t < rec.runs[0].records.size(); ++t) rec.runs[0].records.edit(t).ssm_retained.clear();
  const std::vector<uint8_t> bytes = serialize_session(rec);
  EXPECT_EQ(header_text(bytes).find("runs/A/ssm_retained"), std::string::npos);
  const Recording back = parse_session(bytes.data(), bytes.size(), "mem");
  for (size_t t = 0; t < 6; ++t) {
    EXPECT_EQ(back.runs[0].records[t].attn_rows.empty(), t == 2 || t == 5) << "token " << t;
    EXPECT_TRUE(back.runs[0].records[t].ssm_retained.empty());
  }
}

TEST(Session, Save_InconsistentRecording_ThrowsNamingTheProblem) {
  Recording rec = synthetic_recording(tiny_config(), 4, 1);
  rec.runs[0].records.edit(2).attn_entropy.pop_back();
  EXPECT_THAT_ERROR_CONTAINS(serialize_session(rec), "run 'A' token 2: attn_entropy holds 3 values, expected 4");
  rec = synthetic_recording(tiny_config(), 4, 1);
  rec.runs[0].label = "A/B";
  EXPECT_THAT_ERROR_CONTAINS(serialize_session(rec), "run label 'A/B'");
  rec = synthetic_recording(tiny_config(), 4, 1);
  rec.runs.push_back(rec.runs[0]);
  EXPECT_THAT_ERROR_CONTAINS(serialize_session(rec), "two runs are labelled 'A'");
  rec = synthetic_recording(tiny_config(), 4, 1);
  rec.runs[0].records.edit(1).router_topk[0] = 99;
  EXPECT_THAT_ERROR_CONTAINS(serialize_session(rec), "router_topk expert 99");
}

TEST(Session, AB_Softmax1Run_DiffersFromTokenZeroAndSelfCompareIsClean) {
  const std::vector<int32_t> ids = {1, 7, 3, 12, 40, 2};
  RunOptions b = full_options();
  b.normalizer_override = true;
  b.normalizer = Normalizer::Softmax1;
  Recording rec = tiny_recording({record(full_options(), ids, "A"), record(b, ids, "B")});
  TempDir dir;
  save_session(dir / "ab.hlsession", rec);
  const Recording back = load_session(dir / "ab.hlsession");
  ASSERT_EQ(back.runs.size(), 2u);
  const hl::Run &A = *back.run("A"), &B = *back.run("B");
  for (size_t t = 0; t < ids.size(); ++t) {
    for (float m : A.records[t].attn_mass) EXPECT_NEAR(m, 1.0f, 1e-6f);
    for (float m : B.records[t].attn_mass) EXPECT_LT(m, 1.0f);  // the null key takes a share
  }
  const RunComparison c = compare_runs(A, B);
  EXPECT_EQ(c.common_tokens, 6);
  EXPECT_EQ(c.first_token_mismatch, -1);
  EXPECT_EQ(c.first_diff_token, 0);
  ASSERT_EQ(c.settings.size(), 1u);
  EXPECT_EQ(c.settings[0], "normalizer: as-trained -> softmax1");
  const RunComparison same = compare_runs(A, A);
  EXPECT_EQ(same.first_diff_token, -1);
  EXPECT_EQ(same.top1_agree, same.top1_compared);
  for (const FieldDiff& d : same.fields) {
    EXPECT_EQ(d.max_abs, 0.0) << d.field;
    EXPECT_EQ(d.tokens, 6) << d.field;
  }
  EXPECT_NE(comparison_json(c, "a", "b").find("\"attn_mass\""), std::string::npos);
}

TEST(Session, Compare_RegistersInsertedInRows_AttnRowsAlignOnTokenKeys) {
  hl::Run x = synthetic_run(tiny_config(), 5, 0, 21, "A");
  hl::Run y = x;
  y.label = "B";
  y.settings.registers_used = 2;
  const int64_t rows = hl::LayerSchedule::from_config(tiny_config()).num_attention() * tiny_config().num_attention_heads;
  for (size_t t = 0; t < y.records.size(); ++t) {
    const int64_t len = static_cast<int64_t>(t) + 2;
    std::vector<float> r;
    for (int64_t s = 0; s < rows; ++s) {
      r.push_back(0.25f);  // two register columns first
      r.push_back(0.5f);
      r.insert(r.end(), x.records[t].attn_rows.begin() + s * len, x.records[t].attn_rows.begin() + (s + 1) * len);
    }
    y.records.edit(t).attn_rows = r;
  }
  y.records.edit(3).logits[5] += 0.75f;
  const RunComparison c = compare_runs(x, y);
  for (const FieldDiff& d : c.fields) {
    if (d.field == "attn_rows") {
      EXPECT_EQ(d.max_abs, 0.0);
      EXPECT_EQ(d.tokens, 5);
      EXPECT_NE(d.note.find("register columns skipped"), std::string::npos);
    }
    if (d.field == "logits") {
      EXPECT_FLOAT_EQ(static_cast<float>(d.max_abs), 0.75f);
      EXPECT_EQ(d.max_token, 3);
      EXPECT_EQ(d.first_diff_token, 3);
    }
  }
  EXPECT_EQ(c.first_diff_token, 3);
}

TEST(Session, Compare_DifferentTokens_AlignsOnTheCommonPrefix) {
  hl::Run x = synthetic_run(tiny_config(), 6, 0, 4, "A");
  hl::Run y = x;
  y.records.edit(4).token_id = (y.records[4].token_id + 1) % 64;
  y.records.pop_back();
  const RunComparison c = compare_runs(x, y);
  EXPECT_EQ(c.common_tokens, 4);
  EXPECT_EQ(c.first_token_mismatch, 4);
  EXPECT_EQ(c.top1_compared, 4);
  EXPECT_EQ(c.first_diff_token, -1);
}

// Lists the temporary files write_file_atomic left next to `name` in `dir` (a save that was killed).
std::vector<std::string> leftovers(const std::string& dir, const std::string& name) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.rfind(name + ".tmp.", 0) == 0) out.push_back(dir + "/" + n);
    }
    ::closedir(d);
  }
  return out;
}

TEST(Session, KillDuringSave_PreviousFileIntactAndLoadable) {
  // ~64 MB sessions (V 65536 × 256 tokens of F32 logits), two versions told apart by logits[0].
  JambaConfig c = tiny_config();
  c.vocab_size = 65536;
  Recording x = synthetic_recording(c, 256, 1), y = x;
  for (size_t t = 0; t < x.runs[0].records.size(); ++t) x.runs[0].records.edit(t).logits[0] = 1.0f;
  for (size_t t = 0; t < y.runs[0].records.size(); ++t) y.runs[0].records.edit(t).logits[0] = 2.0f;
  TempDir dir;
  const std::string path = dir / "big.hlsession";
  save_session(path, x);
  int killed_mid_write = 0, attempts = 0;
  for (; attempts < 12 && killed_mid_write < 3; ++attempts) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      hl::set_atomic_write_unnamed(false);  // a named temporary, so that the test sees it (not O_TMPFILE)
      for (int i = 0;; ++i) {  // save forever, alternating versions, until killed
        try {
          save_session(path, i % 2 ? x : y);
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    // Kill once the temporary exists (polled: a fixed delay misses it on a loaded machine), or later.
    for (int i = 0; i < 20000 && leftovers(dir.path, "big.hlsession").empty(); ++i) ::usleep(500);
    ::usleep(static_cast<useconds_t>((attempts * 37000) % 200000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the saving child exited by itself (status " << status << ")";
    const std::vector<std::string> tmp = leftovers(dir.path, "big.hlsession");
    if (!tmp.empty()) ++killed_mid_write;  // killed between creating the temp file and the rename
    for (const std::string& f : tmp) ::unlink(f.c_str());
    const Recording back = load_session(path);  // never a torn file
    ASSERT_EQ(back.runs.size(), 1u);
    ASSERT_EQ(back.runs[0].records.size(), 256u);
    const float v = back.runs[0].records[0].logits[0];
    ASSERT_TRUE(v == 1.0f || v == 2.0f) << v;
    expect_runs_equal(v == 1.0f ? x.runs[0] : y.runs[0], back.runs[0], false);
  }
  std::printf("kill test: %d of %d kills landed while the temporary file was being written\n", killed_mid_write,
              attempts);
  EXPECT_GE(killed_mid_write, 1) << "no kill landed mid-write; the test did not exercise the atomic save";
}

TEST(Session, Summary_ReadsManifestOnly) {
  Recording rec = synthetic_recording(tiny_config(), 4, 2);
  rec.runs.push_back(synthetic_run(tiny_config(), 4, 1, 3, "B"));
  TempDir dir;
  save_session(dir / "s.hlsession", rec);
  const SessionSummary s = read_session_summary(dir / "s.hlsession");
  EXPECT_EQ(s.format_version, kSessionFormatVersion);
  EXPECT_EQ(s.n_tokens, 4);
  EXPECT_EQ(s.run_labels, (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(s.checkpoint.name, "tiny");
  EXPECT_EQ(s.prompt, rec.prompt);
  EXPECT_GT(s.file_bytes, 1000u);
}

TEST(Session, PythonReader_NumpyAndJsonOnly_ChecksPass) {
  if (std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with numpy is not available";
  }
  const std::vector<int32_t> ids = {1, 7, 3, 12, 40, 2, 9};
  RunOptions a = full_options(), b = full_options();
  a.registers = 2;
  b.normalizer_override = true;
  b.normalizer = Normalizer::Softmax1;
  Recording rec = tiny_recording({record(a, ids, "A"), record(b, ids, "B")});
  TempDir dir;
  save_session(dir / "py.hlsession", rec);
  const std::string cmd = "/usr/bin/python3 " + std::string(HL_SOURCE_DIR) + "/tools/read_session.py " +
                          (dir / "py.hlsession") + " --check 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = ::pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("check: ok"), std::string::npos) << out;
  EXPECT_NE(out.find("runs/A/attn_rows             float16 (7, 1, 4, 10)"), std::string::npos) << out;
}

}  // namespace
}  // namespace hl::test
