// GGUF models opened as checkpoints (io/gguf_import.h): the fixtures' Jamba files (a Q4_K_M mix of
// Q5_0 / Q8_0 / F16 / F32, and a Q8_0 model split in 3 shards) run on the CPU give the logits the
// independent NumPy reference computed from the same file (tests/data/gguf/README.md), whichever
// shard is opened; the state dict equals the golden safetensors checkpoint's where the file stores
// weights unquantised; malformed metadata and tensor tables are refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/backend/backend.h"
#include "engine/core/dtype.h"
#include "engine/io/checkpoint.h"
#include "engine/io/gguf_import.h"
#include "engine/model/loader.h"
#include "engine/model/token_trace.h"

namespace hl {
namespace {

const std::string kDir = HL_GGUF_FIXTURES;

std::vector<float> floats_of(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_float(t.dtype, t.data, v.data(), v.size());
  return v;
}

void expect_reference_logits(const std::string& model_path, const std::string& expected_path) {
  SafetensorsFile want = SafetensorsFile::open(expected_path);
  const TensorInfo* ids_t = want.find("token_ids");
  const TensorInfo* logits_t = want.find("logits");
  ASSERT_TRUE(ids_t && logits_t);
  std::vector<int32_t> ids(static_cast<size_t>(ids_t->numel()));
  std::memcpy(ids.data(), ids_t->data, ids.size() * 4);
  const std::vector<float> ref = floats_of(*logits_t);
  auto model = load_model(model_path);
  const int64_t V = model->config.vocab_size;
  ASSERT_EQ(logits_t->shape, (std::vector<int64_t>{static_cast<int64_t>(ids.size()), V}));
  double scale = 0;
  for (float x : ref) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (bool prefill : {true, false}) {
    auto b = make_backend("cpu", model);
    RunOptions opts;
    b->start(opts);
    std::vector<TokenTrace> recs;
    if (prefill)
      b->forward(ids.data(), static_cast<int64_t>(ids.size()), &recs);
    else
      for (int32_t id : ids) b->forward(&id, 1, &recs);
    ASSERT_EQ(recs.size(), ids.size());
    double worst = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      ASSERT_EQ(static_cast<int64_t>(recs[t].logits.size()), V);
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::fabs(static_cast<double>(recs[t].logits[static_cast<size_t>(v)]) - ref[t * V + v]));
    }
    // The golden tests' tolerance: 1e-4 of the largest logit (float32 engine vs float64 reference).
    EXPECT_LE(worst, 1e-4 * scale) << model_path << (prefill ? " prefill" : " decode") << ": worst " << worst << " of " << scale;
  }
}

TEST(GgufModel, JambaQ4KMRunsAsTheReferenceComputes) {
  expect_reference_logits(kDir + "/jamba-gqa_basic-Q4_K_M.gguf", kDir + "/jamba-gqa_basic-Q4_K_M.expected.safetensors");
}

TEST(GgufModel, JambaQ8_0SplitRunsFromAnyShard) {
  for (int k : {1, 3})
    expect_reference_logits(kDir + "/jamba-dense_no_moe-Q8_0-0000" + std::to_string(k) + "-of-00003.gguf",
                            kDir + "/jamba-dense_no_moe-Q8_0.expected.safetensors");
}

// The config from the metadata equals the golden case's config.json in every field the math uses,
// and the F32 tensors (norms, router, conv, D) equal the golden checkpoint's bit for bit.
TEST(GgufModel, JambaConfigAndUnquantisedTensorsMatchTheGoldenCheckpoint) {
  const Checkpoint g = Checkpoint::open(kDir + "/jamba-gqa_basic-Q4_K_M.gguf");
  const Checkpoint h = Checkpoint::open(std::string(HL_GOLDEN_DIR) + "/gqa_basic");
  const JambaConfig& a = g.config();
  const JambaConfig& b = h.config();
  EXPECT_TRUE(g.is_gguf());
  EXPECT_EQ(a.family, Family::Jamba);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
  EXPECT_EQ(a.attn_layer_period, b.attn_layer_period);
  EXPECT_EQ(a.attn_layer_offset, b.attn_layer_offset);
  EXPECT_EQ(a.expert_layer_period, b.expert_layer_period);
  EXPECT_EQ(a.expert_layer_offset, b.expert_layer_offset);
  EXPECT_EQ(a.mamba_d_state, b.mamba_d_state);
  EXPECT_EQ(a.mamba_d_conv, b.mamba_d_conv);
  EXPECT_EQ(a.mamba_expand, b.mamba_expand);
  EXPECT_EQ(a.mamba_dt_rank, b.mamba_dt_rank);
  EXPECT_EQ(a.mamba_conv_bias, b.mamba_conv_bias);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(static_cast<float>(a.rms_norm_eps), static_cast<float>(b.rms_norm_eps));
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  g.read_data();
  h.read_data();
  int compared = 0;
  for (const TensorInfo* t : g.all_tensors()) {
    const TensorInfo* u = h.find(t->name);
    ASSERT_NE(u, nullptr) << t->name << " is not in the golden checkpoint";
    EXPECT_EQ(t->shape, u->shape) << t->name;
    const bool stored_f32 = t->name.find("layernorm") != std::string::npos || t->name.find("router") != std::string::npos ||
                            t->name.find("conv1d") != std::string::npos || t->name.find(".D") != std::string::npos;
    if (!stored_f32) continue;
    EXPECT_EQ(floats_of(*t), floats_of(*u)) << t->name;
    ++compared;
  }
  EXPECT_GT(compared, 10);
  EXPECT_EQ(g.all_tensors().size(), h.all_tensors().size());
}

// A writer of small GGUF files for the refusal table: the fixture's header with one edit.
std::string copy_with(const std::string& from, const std::string& to, const std::function<void(std::vector<uint8_t>&)>& edit) {
  std::ifstream in(from, std::ios::binary);
  std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), {});
  edit(b);
  std::ofstream(to, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return to;
}

// Replaces the first occurrence of `what` (same length) in the file's bytes.
void patch(std::vector<uint8_t>& b, const std::string& what, const std::string& with) {
  ASSERT_EQ(what.size(), with.size());
  auto it = std::search(b.begin(), b.end(), what.begin(), what.end());
  ASSERT_NE(it, b.end()) << what;
  std::copy(with.begin(), with.end(), it);
}

TEST(GgufModel, BadMetadataAndTensorTablesAreRefusedWithOneLine) {
  const std::string src = kDir + "/jamba-gqa_basic-Q4_K_M.gguf";
  const std::string tmp = ::testing::TempDir() + "/hl_gguf_model_";
  struct Case {
    std::string name, from, to, expect;
  };
  const Case cases[] = {
      {"arch", "jamba", "mamba", "general.architecture: 'mamba' is not supported (allowed jamba"},
      {"key", "jamba.block_count", "jamba.block_cOunt", "jamba.block_count: missing (architecture jamba needs it)"},
      {"tensor", "blk.1.attn_k.weight", "blk.1.attn_K.weight", "tensor 'blk.1.attn_k.weight' is missing"},
      {"extra", "blk.0.ssm_d", "blk.0.ssm_e", "tensor 'blk.0.ssm_d' is missing"},
  };
  for (const Case& c : cases) {
    const std::string path = copy_with(src, tmp + c.name + ".gguf", [&](std::vector<uint8_t>& b) { patch(b, c.from, c.to); });
    try {
      Checkpoint::open(path);
      ADD_FAILURE() << c.name << " accepted";
    } catch (const LoadError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(c.expect), std::string::npos) << c.name << ": " << m;
      EXPECT_NE(m.find("hl_gguf_model_" + c.name + ".gguf"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    std::filesystem::remove(path);
  }
}

TEST(GgufModel, TokenizerPathIsTheFileAndArchitecturesAreListed) {
  const Checkpoint g = Checkpoint::open(kDir + "/jamba-gqa_basic-Q4_K_M.gguf");
  EXPECT_EQ(g.tokenizer_path(), kDir + "/jamba-gqa_basic-Q4_K_M.gguf");
  EXPECT_EQ(g.files(), std::vector<std::string>{"jamba-gqa_basic-Q4_K_M.gguf"});
  const auto archs = gguf_supported_architectures();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "jamba"), archs.end());
}

}  // namespace
}  // namespace hl
