// The app keeps what it recorded when a run cannot go on (issue 18 items 3 and 7): the checkpoint
// file truncated under a live run, and NaN logits that generation refuses to sample from. The run
// fails with one line in the error report, the recorded tokens stay, nothing is killed by a signal.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "engine/io/safetensors.h"
#include "tests/app/gui_test_util.h"

using namespace hl::test;

namespace {

// Puts a NaN at element `index` of tensor `name` of a checkpoint's model.safetensors (any float dtype).
void poisonTensor(const fs::path& dir, const std::string& name, int64_t index) {
  const std::string path = (dir / "model.safetensors").string();
  hl::SafetensorsWriter w;
  {
    const hl::SafetensorsFile f = hl::SafetensorsFile::open(path);
    for (const hl::TensorInfo& t : f.tensors()) {
      std::vector<uint8_t> bytes(t.data, t.data + t.nbytes());
      if (t.name == name) {
        const float nan = std::nanf("");
        hl::from_float(t.dtype, &nan, bytes.data() + index * hl::dtype_size(t.dtype), 1);
      }
      w.add(t.name, t.dtype, t.shape, bytes.data(), bytes.size());
    }
  }
  w.write(path);
}

}  // namespace

TEST(GuiReliability, CheckpointTruncatedWhileStepping_OneLineError_RecordedRunStays) {
  TempDir tmp("changed");
  makeDemo(tmp.path / "ckpt");
  Harness h;
  ASSERT_TRUE(h.load(tmp.q("ckpt")));
  ignoreEos(h);
  ASSERT_TRUE(h.step(3));
  ASSERT_EQ(h.records(), 3u);
  const std::vector<int32_t> tokens = h->recording()->tokens;
  fs::resize_file(tmp.path / "ckpt" / "model.safetensors", 100);  // was SIGBUS on the next step
  ASSERT_TRUE(h.step(1));
  ASSERT_EQ(h.errors.size(), 1) << h.errors.join("\n").toStdString();
  const QString e = h.errors[0];
  EXPECT_TRUE(e.startsWith("Run failed: ")) << e.toStdString();
  EXPECT_TRUE(e.contains("model.safetensors: changed on disk since it was loaded (size ")) << e.toStdString();
  EXPECT_FALSE(e.contains('\n')) << e.toStdString();
  EXPECT_EQ(h.records(), 3u);
  EXPECT_EQ(h->recording()->tokens, tokens);
  EXPECT_TRUE(h->isDirty());  // still there to save
}

TEST(GuiReliability, NanLogits_GenerationRefused_OneLineError_PromptRecordsStay) {
  TempDir tmp("nanhead");
  makeDemo(tmp.path);
  const hl::JambaConfig c = hl::preset_config("demo-random");
  // Row 7 of the LM head (the embedding when tied: token 7 is not fed, so only its logit is NaN).
  poisonTensor(tmp.path, c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", 7 * c.hidden_size);
  Harness h;
  ASSERT_TRUE(h.load(tmp.q(), QStringLiteral("1, 2")));
  ASSERT_TRUE(h.step(2));  // the prompt: fed, its records flag the LM head
  ASSERT_EQ(h.records(), 2u);
  for (const hl::TokenTrace& r : h->runA()->records) EXPECT_EQ(r.nonfinite_layer, c.num_hidden_layers + 1);
  ASSERT_TRUE(h.step(1));  // the first generated token
  ASSERT_EQ(h.errors.size(), 1) << h.errors.join("\n").toStdString();
  EXPECT_EQ(h.errors[0].toStdString(),
            "Run failed: cannot sample the token after position 1: its logits are not finite (NaN at token id 7; "
            "non-finite from the LM head)");
  EXPECT_EQ(h.records(), 2u);
}
