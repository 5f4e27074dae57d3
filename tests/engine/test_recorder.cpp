// The session recorder (greedy / sampled generation, EOS, replay of a stored run) and the
// checkpoint identity helpers (weights hash over headers + sampled bytes, config sha256).
// Runs the CPU backend on the tiny test checkpoint of test_util.h.
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/core/sha256.h"
#include "engine/io/checkpoint.h"
#include "engine/model/loader.h"
#include "sessions/identity.h"
#include "sessions/recorder.h"
#include "tests/engine/session_test_util.h"
#include "tests/engine/test_util.h"

namespace hl::test {
namespace {

std::vector<int32_t> ids_of(const hl::Run& r) {
  std::vector<int32_t> out;
  for (const TokenTrace& t : r.records) out.push_back(t.token_id);
  return out;
}

TEST(Recorder, Greedy_StopsAfterEosUnlessIgnored) {
  TempDir dir;
  write_tiny_checkpoint(dir.path, tiny_config());
  std::shared_ptr<Model> model = load_model(dir.path);
  RecordRequest req;
  req.prompt = {1, 7, 3};
  req.generate = 6;
  req.backend = "cpu";
  req.sampling.ignore_eos = true;
  const hl::Run free_run = record_run(model, req);
  ASSERT_EQ(free_run.records.size(), 9u);
  EXPECT_EQ(free_run.prompt_tokens, 3);
  // The greedy token after the prompt, checked independently, becomes the EOS.
  const std::vector<float>& l = free_run.records[2].logits;
  const int32_t first = argmax(l.data(), static_cast<int64_t>(l.size()));
  EXPECT_EQ(free_run.records[3].token_id, first);
  model->config.eos_token_ids = {first};
  req.sampling.ignore_eos = false;
  const hl::Run stopped = record_run(model, req);
  EXPECT_EQ(stopped.records.size(), 4u);  // prompt + the EOS itself
  EXPECT_EQ(stopped.settings.backend, "cpu");
  EXPECT_FALSE(stopped.settings.sampling.ignore_eos);
}

TEST(Recorder, Sampled_ReplayThenGenerate_ContinuesTheSameStream) {
  TempDir dir;
  write_tiny_checkpoint(dir.path, tiny_config());
  std::shared_ptr<Model> model = load_model(dir.path);
  SamplingOptions smp{1.5f, 0.95f, 1234, true};
  RunOptions opts;
  opts.full = true;
  Recorder straight(make_backend("cpu", model), opts, smp);
  straight.feed({1, 2, 3});
  straight.generate(9);
  Recorder first(make_backend("cpu", model), opts, smp);
  first.feed({1, 2, 3});
  first.generate(4);
  const hl::Run stored = first.take_run();
  Recorder resumed(make_backend("cpu", model), opts, smp);
  resumed.replay(stored);
  expect_runs_equal(stored, resumed.run(), /*full_exact=*/true, /*timing=*/false);  // recomputed records, bit for bit
  resumed.generate(5);
  EXPECT_EQ(ids_of(resumed.run()), ids_of(straight.run()));
  EXPECT_EQ(resumed.run().prompt_tokens, 3);
}

TEST(Recorder, StepCallback_StopsTheRunEarly) {
  TempDir dir;
  write_tiny_checkpoint(dir.path, tiny_config());
  std::shared_ptr<Model> model = load_model(dir.path);
  RecordRequest req;
  req.prompt = {1, 2, 3, 4, 5};
  req.backend = "cpu";
  int seen = 0;
  const hl::Run r = record_run(model, req, [&](const TokenTrace&) { return ++seen < 2; });
  EXPECT_EQ(r.records.size(), 2u);
}

TEST(Identity, WeightsHash_IndependentOfTensorOrder_ChangesWithSampledBytes) {
  TempDir a, b, c;
  write_tiny_checkpoint(a.path, tiny_config());
  write_tiny_checkpoint(b.path, tiny_config(), [](std::vector<TestTensor>& ts) { std::reverse(ts.begin(), ts.end()); });
  write_tiny_checkpoint(c.path, tiny_config(), [](std::vector<TestTensor>& ts) {
    find_tensor(ts, "model.layers.2.mamba.in_proj.weight")->values[17] += 0.5f;
  });
  const CheckpointIdentity ia = identify_checkpoint(a.path), ib = identify_checkpoint(b.path),
                           ic = identify_checkpoint(c.path);
  EXPECT_EQ(ia.weights_hash.size(), 64u);
  EXPECT_EQ(ia.weights_hash, ib.weights_hash);
  EXPECT_NE(ia.weights_hash, ic.weights_hash);
  EXPECT_EQ(ia.config_sha256, ic.config_sha256);
  EXPECT_EQ(ia.config_sha256, sha256_hex(config_to_json(tiny_config()).data(), config_to_json(tiny_config()).size()));
  EXPECT_EQ(identity_mismatch(ia, ib), "");
  EXPECT_NE(identity_mismatch(ia, ic).find("the weights differ"), std::string::npos);
  EXPECT_EQ(ia.folder[0], '/');
}

TEST(Identity, WeightsHash_LargeTensor_HashesSixteenChunksOnly) {
  // The (4096, 16) F32 embedding is 256 KiB > 64 KiB: bytes between the sampled chunks do not count,
  // bytes inside one do.
  JambaConfig cfg = tiny_config();
  cfg.vocab_size = 4096;
  TempDir a, b, c;
  write_tiny_checkpoint(a.path, cfg);
  // 16 chunks of 4 KiB over 256 KiB - 4 KiB: chunk k starts at k * 17203.2 bytes; byte 10000 is between
  // chunks 0 and 1, byte 20000 inside chunk 1 (17203..21299).
  auto poke = [](int64_t byte) {
    return
        [byte](std::vector<TestTensor>& ts) { find_tensor(ts, "model.embed_tokens.weight")->values[byte / 4] = 9.0f; };
  };
  write_tiny_checkpoint(b.path, cfg, poke(10000));
  write_tiny_checkpoint(c.path, cfg, poke(20000));
  const std::string ha = weights_hash(Checkpoint::open(a.path));
  EXPECT_EQ(ha, weights_hash(Checkpoint::open(b.path)));
  EXPECT_NE(ha, weights_hash(Checkpoint::open(c.path)));
}

}  // namespace
}  // namespace hl::test
