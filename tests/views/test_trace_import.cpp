// The trace importer (sessions/trace_import.h): a --full trace written by the engine reads back into
// the same per-token records, with the layer schedule and the memory formulas inferred from the
// shapes when no config is given; malformed traces fail with a LoadError naming the tensor.
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/model/layer_schedule.h"
#include "engine/io/safetensors.h"
#include "engine/probes/memory.h"
#include "engine/trace/trace_file.h"
#include "sessions/trace_import.h"
#include "tests/views/view_test_util.h"

using hl::test::demo;

namespace {

std::string writeTrace(const std::string& dir, const std::vector<hl::TokenTrace>& recs, int nReg) {
  const std::string path = dir + "/t.safetensors";
  hl::TraceMeta meta;
  meta.checkpoint = "demo";
  meta.registers = std::to_string(nReg);
  hl::write_trace(path, *demo().model, nReg, recs, meta);
  return path;
}

void expectSameRecords(const std::vector<hl::TokenTrace>& a, const std::vector<hl::TokenTrace>& b, bool logits) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t t = 0; t < a.size(); ++t) {
    SCOPED_TRACE("token " + std::to_string(t));
    EXPECT_EQ(a[t].token_id, b[t].token_id);
    if (logits) EXPECT_EQ(a[t].logits, b[t].logits);
    EXPECT_EQ(a[t].attn_entropy_norm, b[t].attn_entropy_norm);
    EXPECT_EQ(a[t].attn_max_logit, b[t].attn_max_logit);
    EXPECT_EQ(a[t].ssm_delta_mean, b[t].ssm_delta_mean);
    EXPECT_EQ(a[t].router_probs, b[t].router_probs);
    EXPECT_EQ(a[t].router_topk, b[t].router_topk);
    EXPECT_EQ(a[t].rank1_distance, b[t].rank1_distance);
    EXPECT_EQ(a[t].resid_max_abs, b[t].resid_max_abs);
    EXPECT_EQ(a[t].kv_cache_bytes, b[t].kv_cache_bytes);
    EXPECT_EQ(a[t].ssm_state_bytes, b[t].ssm_state_bytes);
    EXPECT_EQ(a[t].ssm_delta, b[t].ssm_delta);
    EXPECT_EQ(a[t].ssm_retained, b[t].ssm_retained);
    EXPECT_EQ(a[t].attn_rows, b[t].attn_rows);
  }
}

}  // namespace

TEST(TraceImport, FullTrace_RoundTrips_ScheduleAndMemoryInferred) {
  const std::string dir = hl::test::tempDir("import");
  const std::vector<hl::TokenTrace> recs = demo().rec.runs[0].records.to_vector();
  const hl::Recording r = hl::import_trace(writeTrace(dir, recs, 0));
  ASSERT_EQ(r.runs.size(), 1u);
  expectSameRecords(recs, r.runs[0].records.to_vector(), true);
  const hl::JambaConfig& c = demo().rec.config;
  EXPECT_EQ(hl::LayerSchedule::from_config(r.config).mixers(), hl::LayerSchedule::from_config(c).mixers());
  EXPECT_EQ(hl::LayerSchedule::from_config(r.config).ffns(), hl::LayerSchedule::from_config(c).ffns());
  EXPECT_EQ(r.config.mamba_inner(), c.mamba_inner());
  // The inferred sizes reproduce the byte counters through the memory formulas.
  for (int64_t n : {1, 7, 4096})
    EXPECT_EQ(hl::kv_cache_bytes(r.config, hl::LayerSchedule::from_config(r.config).num_attention(), n, 4), hl::kv_cache_bytes(c, 2, n, 4));
  EXPECT_EQ(hl::ssm_state_bytes(r.config, 6, 4), recs[0].ssm_state_bytes);
  // With the config given, it is used as is.
  hl::TraceImportOptions o;
  o.config = &c;
  o.logits = false;
  const hl::Recording r2 = hl::import_trace(writeTrace(dir, recs, 0), o);
  EXPECT_EQ(r2.config.hidden_size, c.hidden_size);
  EXPECT_TRUE(r2.runs[0].records[0].logits.empty());
}

TEST(TraceImport, Registers_FromAttnRows) {
  const std::string dir = hl::test::tempDir("regs");
  hl::RunOptions o;
  o.full = true;
  o.registers = 3;
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  const auto recs = hl::test::runEngine(*demo().model, ids, o);
  const hl::Recording r = hl::import_trace(writeTrace(dir, recs, 3));
  EXPECT_EQ(r.runs[0].settings.registers_used, 3);
  expectSameRecords(recs, r.runs[0].records.to_vector(), true);
}

TEST(TraceImport, Schedule_Inference) {
  int64_t p = 0, o = 0;
  ASSERT_TRUE(hl::jamba_period_offset(32, 4, &p, &o));
  EXPECT_EQ(p, 8);
  EXPECT_EQ(o, 4);
  ASSERT_TRUE(hl::jamba_period_offset(8, 0, &p, &o));
  EXPECT_EQ(o, 8);
  ASSERT_TRUE(hl::jamba_period_offset(7, 2, &p, &o));
  int count = 0;
  for (int i = 0; i < 7; ++i) count += i % p == o;
  EXPECT_EQ(count, 2);
}

TEST(TraceImport, Malformed_LoadErrorNamesTheTensor) {
  const std::string dir = hl::test::tempDir("bad");
  auto expectError = [&](const hl::SafetensorsWriter& w, const std::string& needle) {
    const std::string path = dir + "/bad.safetensors";
    w.write(path);
    try {
      hl::import_trace(path);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const hl::LoadError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.safetensors"), std::string::npos) << e.what();
    }
  };
  std::vector<int32_t> ids = {1, 2, 3};
  std::vector<float> f(3 * 9 * 8, 0.5f);
  hl::SafetensorsWriter w;
  expectError(w, "format_version");
  w.set_metadata("format_version", "1");
  expectError(w, "token_ids");
  w.add("token_ids", hl::DType::I32, {3}, ids.data(), 12);
  expectError(w, "rank1_distance");
  w.add("rank1_distance", hl::DType::F32, {2, 9}, f.data(), 2 * 9 * 4);  // T = 2, not 3
  expectError(w, "rank1_distance");
  hl::SafetensorsWriter w2;
  w2.set_metadata("format_version", "1");
  w2.add("token_ids", hl::DType::I32, {3}, ids.data(), 12);
  w2.add("rank1_distance", hl::DType::F32, {3, 9}, f.data(), 3 * 9 * 4);
  w2.add("attn_entropy", hl::DType::F32, {3, 2, 4}, f.data(), 3 * 2 * 4 * 4);
  w2.add("ssm_delta_mean", hl::DType::F32, {3, 5}, f.data(), 3 * 5 * 4);  // 2 + 5 != 8 layers
  expectError(w2, "expected L = 8");
  // Not a safetensors file at all.
  const std::string junk = dir + "/junk.safetensors";
  FILE* fp = std::fopen(junk.c_str(), "wb");
  std::fputs("not a trace", fp);
  std::fclose(fp);
  EXPECT_THROW(hl::import_trace(junk), hl::LoadError);
}
