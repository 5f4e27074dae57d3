// GGUF models opened as checkpoints (io/gguf_import.h): the fixtures' Jamba files (a Q4_K_M mix of
// Q5_0 / Q8_0 / F16 / F32, and a Q8_0 model split in 3 shards) and the Q8_0 Nemotron-H, Granite
// 4.0-H, Bamba and Falcon-H1 files run on the CPU give the logits the independent NumPy reference
// computed from the same file (tests/data/gguf/README.md), whichever shard is opened; the config
// equals the golden case's where the file records it; the state dict equals the golden safetensors
// checkpoint's where the file stores weights unquantised and within the quantisation's rounding
// elsewhere (q and k rows unpermuted, gate/up fused again); malformed metadata and tensor tables are
// refused with one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/backend/backend.h"
#include "engine/core/dtype.h"
#include "engine/io/checkpoint.h"
#include "engine/io/gguf.h"
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
  // The reference multiplies the dequantised blocks by x in float64: the CPU's matching path keeps x
  // in fp32 (`--weights as-stored+fp32-activations`). The default decode, x rounded to 8 bits per block
  // as llama.cpp does, is checked last against a bound of its own.
  LoadOptions lo;
  lo.fp32_activations = true;
  auto model = load_model(model_path, lo);
  const int64_t V = model->config.vocab_size;
  ASSERT_EQ(logits_t->shape, (std::vector<int64_t>{static_cast<int64_t>(ids.size()), V}));
  double scale = 0;
  for (float x : ref) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  {
    auto b = make_backend("cpu", load_model(model_path));
    b->start(RunOptions{});
    std::vector<TokenTrace> recs;
    for (int32_t id : ids) b->forward(&id, 1, &recs);
    double worst = 0;
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::fabs(static_cast<double>(recs[t].logits[static_cast<size_t>(v)]) - ref[t * V + v]));
    // Measured 0.6–3.8 % of the largest logit on these tiny random models; 10 % still catches a wrong
    // scale or code (the logits then move by their own size).
    EXPECT_LE(worst, 0.1 * scale) << model_path << " int8 decode: worst " << worst << " of " << scale;
    EXPECT_GT(worst, 1e-4 * scale) << model_path << ": the int8 path was not taken";
  }
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
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3e", worst / scale);
    ::testing::Test::RecordProperty(std::filesystem::path(model_path).stem().string() + (prefill ? "_prefill" : "_decode") +
                                        "_worst_relative_to_scale",
                                    ratio);
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

// Widening row by row (a chunk of one stored row) gives the same F32 state dict, bit for bit, as
// the default chunks: across shards, for A = -exp(A_log), unpermuted q/k and fused pieces.
TEST(GgufModel, MaterializeInSmallChunksGivesTheSameWeights) {
  for (const std::string name : {"jamba-gqa_basic-Q4_K_M.gguf", "jamba-dense_no_moe-Q8_0-00002-of-00003.gguf",
                                 "granitehybrid-bamba_basic-Q8_0.gguf", "granitehybrid-granite_moe-Q8_0.gguf"}) {
    const auto whole = import_gguf(kDir + "/" + name), rows = import_gguf(kDir + "/" + name);
    materialize(*whole);
    materialize(*rows, 1);
    ASSERT_EQ(whole->tensors.size(), rows->tensors.size()) << name;
    for (size_t k = 0; k < whole->tensors.size(); ++k) {
      const TensorInfo &a = whole->tensors[k], &b = rows->tensors[k];
      ASSERT_EQ(a.end - a.begin, b.end - b.begin) << name << " " << a.name;
      EXPECT_EQ(std::memcmp(a.data, b.data, a.end - a.begin), 0) << name << " " << a.name;
    }
  }
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

// The Mamba-2 hybrids (tools/reference/gguf/GGUF.md §5.2–5.5): one Q8_0 file per family; Bamba's
// RoPE makes its logits depend on the q/k rows being unpermuted, the NoPE families' do not.
const char* const kHybrids[] = {"nemotron_h-nemotron_list-Q8_0", "granitehybrid-granite_moe-Q8_0",
                                "granitehybrid-bamba_basic-Q8_0", "falcon-h1-falcon_basic-Q8_0"};

TEST(GgufModel, MambaTwoHybridsRunAsTheReferenceComputes) {
  for (const char* f : kHybrids) {
    SCOPED_TRACE(f);
    expect_reference_logits(kDir + "/" + f + ".gguf", kDir + "/" + f + ".expected.safetensors");
  }
}

// Names and shapes equal the golden checkpoint's; values are equal where the file keeps F32 (norms,
// conv, D, dt_bias, biases, routers; A_log to float rounding after log(−A)), within the rounding of
// Q8_0 / F16 elsewhere: 1/64 of each row's largest |value| (a row the permutation or the fusion put
// in the wrong place is off by about that largest value). `folded`: Falcon-H1's tensors holding a
// multiplier, compared by shape only.
int expect_golden_tensors(const Checkpoint& g, const Checkpoint& h, const std::vector<std::string>& folded) {
  g.read_data();
  h.read_data();
  EXPECT_EQ(g.all_tensors().size(), h.all_tensors().size());
  int qk = 0;
  for (const TensorInfo* t : g.all_tensors()) {
    const TensorInfo* u = h.find(t->name);
    if (!u) {
      ADD_FAILURE() << t->name << " is not in the golden checkpoint";
      continue;
    }
    EXPECT_EQ(t->shape, u->shape) << t->name;
    if (t->shape != u->shape) continue;
    bool skip = false;
    for (const std::string& f : folded) skip = skip || t->name.find(f) != std::string::npos;
    if (skip) continue;
    const std::string& n = t->name;
    auto ends = [&](const std::string& e) { return n.size() >= e.size() && n.compare(n.size() - e.size(), e.size(), e) == 0; };
    const bool exact = ends("norm.weight") || ends("norm_f.weight") || n.find("conv1d") != std::string::npos || ends(".D") ||
                       ends("dt_bias") || ends(".bias") || ends("router.layer.weight");
    const std::vector<float> a = floats_of(*t), b = floats_of(*u);
    const int64_t cols = t->shape.back(), rows = static_cast<int64_t>(a.size()) / cols;
    for (int64_t r = 0; r < rows; ++r) {
      double amax = 0, worst = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const size_t k = static_cast<size_t>(r * cols + j);
        amax = std::max(amax, std::fabs(static_cast<double>(b[k])));
        worst = std::max(worst, std::fabs(static_cast<double>(a[k]) - b[k]));
      }
      const double tol = exact ? 0.0 : ends("A_log") ? 1e-6 * amax : amax / 64;
      EXPECT_LE(worst, tol) << n << " row " << r;
      if (worst > tol) break;
    }
    qk += ends("q_proj.weight") || ends("k_proj.weight");
  }
  return qk;
}

TEST(GgufModel, NemotronHConfigAndTensorsMatchTheGoldenCheckpoint) {
  const Checkpoint g = Checkpoint::open(kDir + "/nemotron_h-nemotron_list-Q8_0.gguf");
  const Checkpoint h = Checkpoint::open(std::string(HL_GOLDEN_DIR) + "/nemotron_list");
  const JambaConfig &a = g.config(), &b = h.config();
  EXPECT_EQ(a.family, Family::NemotronH);
  EXPECT_EQ(a.layer_pattern, b.layer_pattern);
  for (auto f : {&JambaConfig::vocab_size, &JambaConfig::hidden_size, &JambaConfig::intermediate_size, &JambaConfig::num_hidden_layers,
                 &JambaConfig::num_attention_heads, &JambaConfig::num_key_value_heads, &JambaConfig::mamba_d_state,
                 &JambaConfig::mamba_d_conv, &JambaConfig::mamba_n_heads, &JambaConfig::mamba_d_head, &JambaConfig::mamba_n_groups,
                 &JambaConfig::bos_token_id})
    EXPECT_EQ(a.*f, b.*f);
  EXPECT_EQ(a.head_dim(), b.head_dim());
  for (auto f : {&JambaConfig::tie_word_embeddings, &JambaConfig::mamba_conv_bias, &JambaConfig::mamba_proj_bias, &JambaConfig::mlp_bias,
                 &JambaConfig::attention_bias})
    EXPECT_EQ(a.*f, b.*f);
  EXPECT_EQ(a.mlp_hidden_act, b.mlp_hidden_act);
  EXPECT_EQ(static_cast<float>(a.rms_norm_eps), static_cast<float>(b.rms_norm_eps));
  EXPECT_EQ(a.mamba2_dt_lo(), b.mamba2_dt_lo());  // HF's time_step_min default, as the case has it
  EXPECT_EQ(a.mamba2_dt_hi(), b.mamba2_dt_hi());
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(expect_golden_tensors(g, h, {}), 2);  // layer 0's q and k (F16 in the file)
}

TEST(GgufModel, GraniteAndBambaConfigAndTensorsMatchTheGoldenCheckpoints) {
  for (const char* c : {"granite_moe", "bamba_basic"}) {
    SCOPED_TRACE(c);
    const Checkpoint g = Checkpoint::open(kDir + "/granitehybrid-" + c + "-Q8_0.gguf");
    const Checkpoint h = Checkpoint::open(std::string(HL_GOLDEN_DIR) + "/" + c);
    const JambaConfig &a = g.config(), &b = h.config();
    EXPECT_EQ(a.family, b.family);
    EXPECT_EQ(a.attn_layer_indices, b.attn_layer_indices);
    for (auto f : {&JambaConfig::vocab_size, &JambaConfig::hidden_size, &JambaConfig::intermediate_size, &JambaConfig::num_hidden_layers,
                   &JambaConfig::num_attention_heads, &JambaConfig::num_key_value_heads, &JambaConfig::mamba_d_state,
                   &JambaConfig::mamba_d_conv, &JambaConfig::mamba_expand, &JambaConfig::mamba_n_heads, &JambaConfig::mamba_d_head,
                   &JambaConfig::mamba_n_groups, &JambaConfig::num_experts, &JambaConfig::num_experts_per_tok,
                   &JambaConfig::shared_intermediate_size, &JambaConfig::bos_token_id})
      EXPECT_EQ(a.*f, b.*f);
    EXPECT_EQ(a.head_dim(), b.head_dim());
    EXPECT_EQ(a.rotary_dim(), b.rotary_dim());
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    for (auto f : {&JambaConfig::tie_word_embeddings, &JambaConfig::mamba_conv_bias, &JambaConfig::mamba_proj_bias,
                   &JambaConfig::attention_bias, &JambaConfig::moe_renormalize})
      EXPECT_EQ(a.*f, b.*f);
    for (auto f : {&JambaConfig::rms_norm_eps, &JambaConfig::embedding_multiplier, &JambaConfig::residual_multiplier,
                   &JambaConfig::logits_scaling})
      EXPECT_EQ(static_cast<float>(a.*f), static_cast<float>(b.*f));
    EXPECT_EQ(static_cast<float>(a.attention_scale()), static_cast<float>(b.attention_scale()));
    EXPECT_EQ(a.mamba2_dt_lo(), b.mamba2_dt_lo());
    EXPECT_EQ(a.mamba2_dt_hi(), b.mamba2_dt_hi());
    EXPECT_EQ(expect_golden_tensors(g, h, {}), 2);  // the attention layer's q and k (Q8_0)
  }
}

TEST(GgufModel, FalconH1ConfigHasNoMultipliersAndTensorsMatchTheGoldenCheckpoint) {
  const Checkpoint g = Checkpoint::open(kDir + "/falcon-h1-falcon_basic-Q8_0.gguf");
  const Checkpoint h = Checkpoint::open(std::string(HL_GOLDEN_DIR) + "/falcon_basic");
  const JambaConfig &a = g.config(), &b = h.config();
  EXPECT_EQ(a.family, Family::FalconH1);
  for (auto f : {&JambaConfig::vocab_size, &JambaConfig::hidden_size, &JambaConfig::intermediate_size, &JambaConfig::num_hidden_layers,
                 &JambaConfig::num_attention_heads, &JambaConfig::num_key_value_heads, &JambaConfig::mamba_d_state,
                 &JambaConfig::mamba_d_conv, &JambaConfig::mamba_n_heads, &JambaConfig::mamba_d_head, &JambaConfig::mamba_n_groups,
                 &JambaConfig::bos_token_id})
    EXPECT_EQ(a.*f, b.*f);
  EXPECT_EQ(a.mamba_inner(), b.mamba_inner());
  EXPECT_EQ(a.head_dim(), b.head_dim());
  EXPECT_EQ(a.rotary_dim(), b.rotary_dim());
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  for (auto f : {&JambaConfig::tie_word_embeddings, &JambaConfig::mamba_conv_bias, &JambaConfig::mamba_rms_norm,
                 &JambaConfig::mamba_norm_before_gate, &JambaConfig::attention_bias, &JambaConfig::mlp_bias})
    EXPECT_EQ(a.*f, b.*f);
  EXPECT_TRUE(b.has_multipliers());
  EXPECT_FALSE(a.has_multipliers());  // folded into the weights by the converter
  EXPECT_EQ(a.lm_head_multiplier, 1.0);
  EXPECT_EQ(a.attention_scale(), 1.0 / std::sqrt(static_cast<double>(a.head_dim())));
  EXPECT_EQ(expect_golden_tensors(g, h, {"embed_tokens", "lm_head", "_proj.weight"}), 0);
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


// Opening `path` (an edited copy) throws one line that names the copy and contains `expect`; the
// copy is removed.
void expect_refused(const std::string& path, const std::string& expect) {
  try {
    Checkpoint::open(path);
    ADD_FAILURE() << path << " accepted";
  } catch (const LoadError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(expect), std::string::npos) << path << ": " << m;
    EXPECT_NE(m.find(std::filesystem::path(path).filename().string()), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  std::filesystem::remove(path);
}

TEST(GgufModel, BadMetadataAndTensorTablesAreRefusedWithOneLine) {
  const std::string src = kDir + "/jamba-gqa_basic-Q4_K_M.gguf";
  const std::string tmp = ::testing::TempDir() + "/hl_gguf_model_";
  struct Case {
    std::string name, from, to, expect;
  };
  const Case cases[] = {
      {"arch", "jamba", "mamba",
       "general.architecture: 'mamba' is not supported (allowed falcon-h1, granitehybrid, jamba, nemotron_h, nemotron_h_moe)"},
      {"key", "jamba.block_count", "jamba.block_cOunt", "jamba.block_count: missing (architecture jamba needs it)"},
      {"tensor", "blk.1.attn_k.weight", "blk.1.attn_K.weight", "tensor 'blk.1.attn_k.weight' is missing"},
      {"extra", "blk.0.ssm_d", "blk.0.ssm_e", "tensor 'blk.0.ssm_d' is missing"},
  };
  for (const Case& c : cases) {
    expect_refused(copy_with(src, tmp + c.name + ".gguf", [&](std::vector<uint8_t>& b) { patch(b, c.from, c.to); }),
                   c.expect);
  }
}

// A is stored as -exp(A_log): an element >= 0 (or NaN) has no A_log, and widening stops there
// with one line naming the file, the tensor and the element, whichever thread widened it.
TEST(GgufModel, NonNegativeAIsRefusedAtItsElement) {
  const std::string src = kDir + "/jamba-gqa_basic-Q4_K_M.gguf";
  const GgufFile f = GgufFile::open(src);
  const GgufTensor* a = f.find("blk.2.ssm_a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->type, 0u) << "the fixture stores A as F32";
  for (const float bad : {0.5f, 0.0f, std::nanf("")}) {
    const std::string path = copy_with(src, ::testing::TempDir() + "/hl_gguf_bad_a.gguf", [&](std::vector<uint8_t>& b) {
      std::memcpy(b.data() + f.data_start() + a->offset + 3 * sizeof(float), &bad, sizeof(float));
    });
    const auto im = import_gguf(path);
    try {
      materialize(*im, 64);
      ADD_FAILURE() << bad << " accepted";
    } catch (const LoadError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("hl_gguf_bad_a.gguf: tensor 'blk.2.ssm_a': element 3 is "), std::string::npos) << m;
      EXPECT_NE(m.find("(allowed A < 0: the file stores A = -exp(A_log))"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    std::filesystem::remove(path);
  }
}

// Sets the UINT32/INT32 value of metadata `key` (element `index` of an array) in the file's bytes.
void set_u32(std::vector<uint8_t>& b, const std::string& key, uint32_t v, int64_t index = -1) {
  const std::string k = key;
  auto it = std::search(b.begin(), b.end(), k.begin(), k.end());
  ASSERT_NE(it, b.end()) << key;
  size_t at = static_cast<size_t>(it - b.begin()) + k.size();  // u32 type, then the value
  if (index >= 0) at += 4 + 4 + 8 + 4 * static_cast<size_t>(index);  // ARRAY: u32 type, u32 elem type, u64 count
  else at += 4;
  std::memcpy(b.data() + at, &v, 4);
}

TEST(GgufModel, BadHybridMetadataIsRefusedWithOneLine) {
  const std::string tmp = ::testing::TempDir() + "/hl_gguf_hybrid_";
  const std::string nemo = kDir + "/nemotron_h-nemotron_list-Q8_0.gguf", falcon = kDir + "/falcon-h1-falcon_basic-Q8_0.gguf";
  const std::string granite = kDir + "/granitehybrid-granite_moe-Q8_0.gguf";
  struct Case {
    std::string name, from;
    std::function<void(std::vector<uint8_t>&)> edit;
    std::string expect;
  };
  const Case cases[] = {
      {"heads", nemo, [](std::vector<uint8_t>& b) { set_u32(b, "nemotron_h.ssm.time_step_rank", 7); },
       "nemotron_h.ssm.time_step_rank: 7 (allowed a divisor of ssm.inner_size 96"},
      {"groups", granite, [](std::vector<uint8_t>& b) { set_u32(b, "granitehybrid.ssm.group_count", 3); },
       "granitehybrid.ssm.group_count: 3 (allowed a divisor of ssm.time_step_rank 8"},
      {"kv", nemo, [](std::vector<uint8_t>& b) { set_u32(b, "nemotron_h.attention.head_count_kv", 1, 1); },
       "nemotron_h.attention.head_count_kv[1]: 1 (allowed 0: layer 1 is not an attention layer)"},
      {"kind", nemo, [](std::vector<uint8_t>& b) { patch(b, "blk.1.ssm_in.weight", "blk.1.ssm_in.weighT"); },
       "layer 1 has none of ssm_in, attn_q, ffn_gate_inp, ffn_up"},
      {"inner", granite, [](std::vector<uint8_t>& b) { set_u32(b, "granitehybrid.ssm.inner_size", 48); },
       "granitehybrid.ssm.inner_size: 48 (allowed a multiple of embedding_length 32"},
      {"tied", falcon, [](std::vector<uint8_t>& b) { patch(b, "output.weight", "output.weighT"); },
       "tensor 'output.weight' is missing (allowed a Falcon-H1 file with its own output"},
      {"shape", granite, [](std::vector<uint8_t>& b) { set_u32(b, "granitehybrid.expert_count", 5); },
       "tensor 'blk.0.ffn_gate_inp.weight' has ne [32, 4], expected [32, 5]"},
  };
  for (const Case& c : cases) {
    expect_refused(copy_with(c.from, tmp + c.name + ".gguf", c.edit), c.expect);
  }
}

TEST(GgufModel, TokenizerPathIsTheFileAndArchitecturesAreListed) {
  const Checkpoint g = Checkpoint::open(kDir + "/jamba-gqa_basic-Q4_K_M.gguf");
  EXPECT_EQ(g.tokenizer_path(), kDir + "/jamba-gqa_basic-Q4_K_M.gguf");
  EXPECT_EQ(g.files(), std::vector<std::string>{"jamba-gqa_basic-Q4_K_M.gguf"});
  const auto archs = gguf_supported_architectures();
  for (const char* a : {"jamba", "granitehybrid", "nemotron_h", "nemotron_h_moe", "falcon-h1"})
    EXPECT_NE(std::find(archs.begin(), archs.end(), a), archs.end()) << a;
}

}  // namespace
}  // namespace hl
