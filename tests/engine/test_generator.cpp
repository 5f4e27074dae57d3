// Tests of engine/model/generator: the files it writes (names and shapes against an independent
// transcription of jamba-spec.md §2.1/§2.2 and trace-format.md §1, the shard index, dtypes), the
// values' init rules (§3.12 / mamba_simple.py), determinism, presets and option errors.
// Loading and running generated checkpoints: test_generator_load.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"
#include "engine/io/safetensors.h"
#include "engine/model/generator.h"
#include "test_util.h"

namespace hl {
namespace {

using Shapes = std::map<std::string, std::vector<int64_t>>;
namespace fs = std::filesystem;

// A small config with every layer kind: 0 Mamba+dense, 1 attention+MoE, 2 Mamba+dense, 3 Mamba+MoE,
// 4 Mamba+dense, 5 attention+MoE. H 32, nh 4, nkv 2, I 48, V 96, E 3, K 2, N 4, W 3, R auto = 2.
JambaConfig small_config() {
  JambaConfig c = test::tiny_config();
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.vocab_size = 96;
  c.num_hidden_layers = 6;
  c.num_experts = 3;
  c.mamba_d_conv = 3;
  c.mamba_dt_rank_auto = true;
  c.mamba_dt_rank = 2;
  return c;
}

// jamba-spec.md §2.1 written out by hand (independent of generator.cpp).
Shapes expected_shapes(const JambaConfig& c, bool fused, bool lm_head, int registers, bool sinks) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size, nh = c.num_attention_heads;
  const int64_t hd = H / nh, nkv = c.num_key_value_heads, E = c.num_experts, Di = c.mamba_expand * H;
  const int64_t N = c.mamba_d_state, W = c.mamba_d_conv, R = (H + 15) / 16;
  Shapes s;
  s["model.embed_tokens.weight"] = {V, H};
  s["model.final_layernorm.weight"] = {H};
  if (lm_head) s["lm_head.weight"] = {V, H};
  if (registers > 0) s["model.register_tokens"] = {registers, H};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s[p + "input_layernorm.weight"] = {H};
    s[p + "pre_ff_layernorm.weight"] = {H};
    if (i % c.attn_layer_period == c.attn_layer_offset) {
      s[p + "self_attn.q_proj.weight"] = {nh * hd, H};
      s[p + "self_attn.k_proj.weight"] = {nkv * hd, H};
      s[p + "self_attn.v_proj.weight"] = {nkv * hd, H};
      s[p + "self_attn.o_proj.weight"] = {H, nh * hd};
      if (sinks) s[p + "self_attn.sinks"] = {nh};
    } else {
      s[p + "mamba.in_proj.weight"] = {2 * Di, H};
      if (c.mamba_proj_bias) s[p + "mamba.in_proj.bias"] = {2 * Di};
      s[p + "mamba.conv1d.weight"] = {Di, 1, W};
      if (c.mamba_conv_bias) s[p + "mamba.conv1d.bias"] = {Di};
      s[p + "mamba.x_proj.weight"] = {R + 2 * N, Di};
      s[p + "mamba.dt_layernorm.weight"] = {R};
      s[p + "mamba.b_layernorm.weight"] = {N};
      s[p + "mamba.c_layernorm.weight"] = {N};
      s[p + "mamba.dt_proj.weight"] = {Di, R};
      s[p + "mamba.dt_proj.bias"] = {Di};
      s[p + "mamba.A_log"] = {Di, N};
      s[p + "mamba.D"] = {Di};
      s[p + "mamba.out_proj.weight"] = {H, Di};
      if (c.mamba_proj_bias) s[p + "mamba.out_proj.bias"] = {H};
    }
    const std::string f = p + "feed_forward.";
    if (c.num_experts > 1 && i % c.expert_layer_period == c.expert_layer_offset) {
      s[f + "router.weight"] = {E, H};
      if (fused) {
        s[f + "experts.gate_up_proj"] = {E, 2 * I, H};
        s[f + "experts.down_proj"] = {E, H, I};
      } else {
        for (int64_t e = 0; e < E; ++e) {
          const std::string x = f + "experts." + std::to_string(e) + ".";
          s[x + "gate_proj.weight"] = {I, H};
          s[x + "up_proj.weight"] = {I, H};
          s[x + "down_proj.weight"] = {H, I};
        }
      }
    } else {
      s[f + "gate_proj.weight"] = {I, H};
      s[f + "up_proj.weight"] = {I, H};
      s[f + "down_proj.weight"] = {H, I};
    }
  }
  return s;
}

std::string shape_str(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ")";
}

// Reads every tensor of a generated folder (single file or shards), checking the index on the way.
struct Folder {
  std::vector<SafetensorsFile> files;
  std::map<std::string, const TensorInfo*> tensors;
};

Folder read_folder(const std::string& dir) {
  Folder f;
  const std::string index_path = dir + "/model.safetensors.index.json";
  std::vector<std::string> names;
  nlohmann::json weight_map;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    nlohmann::json index = nlohmann::json::parse(in);
    weight_map = index.at("weight_map");
    std::set<std::string> unique;
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) unique.insert(it.value().get<std::string>());
    names.assign(unique.begin(), unique.end());
    uint64_t total = 0;
    for (const std::string& n : names) {
      f.files.push_back(SafetensorsFile::open(dir + "/" + n));
      for (const TensorInfo& t : f.files.back().tensors()) {
        total += t.nbytes();
        EXPECT_TRUE(weight_map.contains(t.name)) << n << ": " << t.name << " is not in the index";
        if (weight_map.contains(t.name)) EXPECT_EQ(weight_map[t.name].get<std::string>(), n) << t.name;
      }
    }
    EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
  } else {
    f.files.push_back(SafetensorsFile::open(dir + "/model.safetensors"));
  }
  for (const SafetensorsFile& file : f.files)
    for (const TensorInfo& t : file.tensors()) {
      EXPECT_EQ(f.tensors.count(t.name), 0u) << t.name << " appears twice";
      f.tensors[t.name] = &t;
    }
  if (!weight_map.is_null()) EXPECT_EQ(weight_map.size(), f.tensors.size());
  return f;
}

void expect_shapes(const Folder& f, const Shapes& want) {
  for (const auto& [name, shape] : want) {
    auto it = f.tensors.find(name);
    if (it == f.tensors.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    EXPECT_EQ(it->second->shape, shape) << name << ": " << shape_str(it->second->shape) << ", expected "
                                        << shape_str(shape);
  }
  for (const auto& [name, t] : f.tensors) EXPECT_EQ(want.count(name), 1u) << "unexpected tensor " << name;
}

std::vector<float> floats(const TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_float(t.dtype, t.data, v.data(), v.size());
  return v;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

GenerateOptions small_options() {
  GenerateOptions o;
  o.config = small_config();
  o.seed = 11;
  return o;
}

TEST(Generator, SingleFile_NamesShapesDtypeMatchSpec) {
  test::TempDir dir;
  GenerateOptions o = small_options();
  generate_checkpoint(dir.path, o);
  EXPECT_TRUE(fs::exists(dir / "config.json"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  Folder f = read_folder(dir.path);
  expect_shapes(f, expected_shapes(o.config, false, true, 0, false));
  for (const auto& [name, t] : f.tensors) EXPECT_EQ(t->dtype, DType::BF16) << name;

  const JambaConfig back = load_config_file(dir / "config.json");
  EXPECT_EQ(back.hidden_size, 32);
  EXPECT_EQ(back.num_hidden_layers, 6);
  EXPECT_EQ(back.vocab_size, 96);
  EXPECT_EQ(back.num_experts, 3);
  EXPECT_EQ(back.mamba_dt_rank, 2);
  EXPECT_TRUE(back.mamba_dt_rank_auto);
  EXPECT_EQ(back.num_register_tokens, 0);
  EXPECT_EQ(back.torch_dtype, "bfloat16");
}

TEST(Generator, ProjBiasOn_ConvBiasOff_BiasesFollowConfig) {
  test::TempDir dir;
  GenerateOptions o = small_options();
  o.config.mamba_proj_bias = true;
  o.config.mamba_conv_bias = false;
  o.dtype = DType::F32;
  generate_checkpoint(dir.path, o);
  Folder f = read_folder(dir.path);
  expect_shapes(f, expected_shapes(o.config, false, true, 0, false));
  EXPECT_TRUE(f.tensors.count("model.layers.0.mamba.in_proj.bias"));
  EXPECT_FALSE(f.tensors.count("model.layers.0.mamba.conv1d.bias"));
}

TEST(Generator, Sharded_IndexConsistent_SameValuesAsSingleFile) {
  test::TempDir one, three;
  GenerateOptions o = small_options();
  generate_checkpoint(one.path, o);
  o.shards = 3;
  generate_checkpoint(three.path, o);
  for (const char* n : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                        "model-00003-of-00003.safetensors", "model.safetensors.index.json", "config.json"})
    EXPECT_TRUE(fs::exists(three / n)) << n;
  EXPECT_FALSE(fs::exists(three / "model.safetensors"));
  Folder a = read_folder(one.path), b = read_folder(three.path);
  expect_shapes(b, expected_shapes(o.config, false, true, 0, false));
  ASSERT_EQ(b.files.size(), 3u);
  for (const SafetensorsFile& file : b.files) EXPECT_FALSE(file.tensors().empty()) << file.path();
  for (const auto& [name, t] : a.tensors) {
    const TensorInfo* u = b.tensors.at(name);
    ASSERT_EQ(t->nbytes(), u->nbytes()) << name;
    EXPECT_EQ(std::memcmp(t->data, u->data, t->nbytes()), 0) << name << " differs between 1 and 3 shards";
  }
  EXPECT_EQ(file_bytes(one / "config.json"), file_bytes(three / "config.json"));
}

TEST(Generator, Sharded_BalancedByBytes) {
  const auto plan = plan_checkpoint([] {
    GenerateOptions o;
    o.config = preset_config("tiny-dev");
    o.shards = 4;
    return o;
  }());
  std::vector<uint64_t> bytes(4, 0);
  uint64_t total = 0;
  int prev = 0;
  for (const auto& t : plan) {
    EXPECT_GE(t.shard, prev) << "shards are contiguous";
    prev = t.shard;
    bytes.at(t.shard) += t.nbytes();
    total += t.nbytes();
  }
  for (int k = 0; k < 4; ++k) {
    EXPECT_GT(bytes[k], total / 8) << "shard " << k;
    EXPECT_LT(bytes[k], total / 2) << "shard " << k;
  }
  EXPECT_EQ(shard_file_names(4)[3], "model-00004-of-00004.safetensors");
}

TEST(Generator, MixedDtypes_AllThreeUsed_ValuesAreTheF32ValuesRounded) {
  test::TempDir mixed, f32;
  GenerateOptions o = small_options();
  o.mixed_dtypes = true;
  generate_checkpoint(mixed.path, o);
  o.mixed_dtypes = false;
  o.dtype = DType::F32;
  generate_checkpoint(f32.path, o);
  Folder m = read_folder(mixed.path), r = read_folder(f32.path);
  std::set<DType> seen;
  for (const auto& [name, t] : m.tensors) {
    seen.insert(t->dtype);
    const TensorInfo* ref = r.tensors.at(name);
    ASSERT_EQ(ref->dtype, DType::F32);
    std::vector<uint8_t> want(t->nbytes());
    from_float(t->dtype, reinterpret_cast<const float*>(ref->data), want.data(), static_cast<size_t>(ref->numel()));
    EXPECT_EQ(std::memcmp(want.data(), t->data, want.size()), 0) << name << " (" << dtype_name(t->dtype) << ")";
  }
  EXPECT_EQ(seen, (std::set<DType>{DType::F32, DType::F16, DType::BF16}));
}

TEST(Generator, FusedExperts_V5Names_GateThenUpRowsPerExpert) {
  test::TempDir fused, split;
  GenerateOptions o = small_options();
  o.dtype = DType::F32;
  generate_checkpoint(split.path, o);
  o.fused_experts = true;
  generate_checkpoint(fused.path, o);
  Folder a = read_folder(split.path), b = read_folder(fused.path);
  expect_shapes(b, expected_shapes(o.config, true, true, 0, false));
  const int64_t E = 3, I = 48, H = 32;
  for (int layer : {1, 3, 5}) {
    const std::string f = "model.layers." + std::to_string(layer) + ".feed_forward.experts.";
    const std::vector<float> gu = floats(*b.tensors.at(f + "gate_up_proj"));  // (E, 2I, H)
    const std::vector<float> dn = floats(*b.tensors.at(f + "down_proj"));     // (E, H, I)
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = f + std::to_string(e) + ".";
      const std::vector<float> g = floats(*a.tensors.at(x + "gate_proj.weight"));  // (I, H)
      const std::vector<float> u = floats(*a.tensors.at(x + "up_proj.weight"));    // (I, H)
      const std::vector<float> d = floats(*a.tensors.at(x + "down_proj.weight"));  // (H, I)
      EXPECT_TRUE(std::equal(g.begin(), g.end(), gu.begin() + e * 2 * I * H)) << x << "gate_proj";
      EXPECT_TRUE(std::equal(u.begin(), u.end(), gu.begin() + e * 2 * I * H + I * H)) << x << "up_proj";
      EXPECT_TRUE(std::equal(d.begin(), d.end(), dn.begin() + e * H * I)) << x << "down_proj";
    }
  }
  // Dense layers keep their plain names.
  EXPECT_TRUE(b.tensors.count("model.layers.0.feed_forward.gate_proj.weight"));
}

TEST(Generator, TiedEmbeddings_HeadOmittedOrAnExactCopy) {
  test::TempDir omit, keep;
  GenerateOptions o = small_options();
  o.config.tie_word_embeddings = true;
  generate_checkpoint(omit.path, o);
  Folder a = read_folder(omit.path);
  expect_shapes(a, expected_shapes(o.config, false, false, 0, false));
  EXPECT_TRUE(load_config_file(omit / "config.json").tie_word_embeddings);

  o.omit_lm_head_when_tied = false;
  generate_checkpoint(keep.path, o);
  Folder b = read_folder(keep.path);
  expect_shapes(b, expected_shapes(o.config, false, true, 0, false));
  const TensorInfo* e = b.tensors.at("model.embed_tokens.weight");
  const TensorInfo* h = b.tensors.at("lm_head.weight");
  ASSERT_EQ(e->nbytes(), h->nbytes());
  EXPECT_EQ(std::memcmp(e->data, h->data, e->nbytes()), 0);
}

TEST(Generator, RegistersAndSinks_ExtensionTensorsAndConfig) {
  test::TempDir dir;
  GenerateOptions o = small_options();
  o.trained_registers = 3;
  o.sinks = true;
  generate_checkpoint(dir.path, o);
  Folder f = read_folder(dir.path);
  expect_shapes(f, expected_shapes(o.config, false, true, 3, true));
  EXPECT_TRUE(f.tensors.count("model.layers.1.self_attn.sinks"));
  EXPECT_TRUE(f.tensors.count("model.layers.5.self_attn.sinks"));
  EXPECT_EQ(load_config_file(dir / "config.json").num_register_tokens, 3);
  for (float v : floats(*f.tensors.at("model.layers.1.self_attn.sinks"))) EXPECT_TRUE(std::isfinite(v));
}

TEST(Generator, SameSeed_IdenticalBytes_DifferentSeed_DifferentWeights) {
  test::TempDir a, b, c;
  GenerateOptions o = small_options();
  o.shards = 2;
  o.mixed_dtypes = true;
  generate_checkpoint(a.path, o);
  generate_checkpoint(b.path, o);
  for (const char* n : {"config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                        "model-00002-of-00002.safetensors"})
    EXPECT_EQ(file_bytes(a / n), file_bytes(b / n)) << n;
  o.seed = 12;
  generate_checkpoint(c.path, o);
  EXPECT_EQ(file_bytes(a / "config.json"), file_bytes(c / "config.json"));
  Folder fa = read_folder(a.path), fc = read_folder(c.path);
  for (const char* n : {"model.embed_tokens.weight", "model.layers.0.mamba.in_proj.weight",
                        "model.layers.1.feed_forward.experts.2.up_proj.weight", "model.layers.0.mamba.dt_proj.bias"}) {
    const TensorInfo* x = fa.tensors.at(n);
    const TensorInfo* y = fc.tensors.at(n);
    EXPECT_NE(std::memcmp(x->data, y->data, x->nbytes()), 0) << n << " did not change with the seed";
  }
  // Deterministic constants do not depend on the seed.
  const TensorInfo* x = fa.tensors.at("model.layers.0.mamba.A_log");
  EXPECT_EQ(std::memcmp(x->data, fc.tensors.at("model.layers.0.mamba.A_log")->data, x->nbytes()), 0);
}

TEST(Generator, Values_FollowInitRules) {
  test::TempDir dir;
  GenerateOptions o = small_options();
  o.config.hidden_size = 64;  // more samples for the statistics
  o.config.vocab_size = 512;
  o.config.num_hidden_layers = 2;
  o.dtype = DType::F32;
  generate_checkpoint(dir.path, o);
  Folder f = read_folder(dir.path);
  const int64_t H = 64, Di = 128, N = 4, R = 4, L = 2;
  auto stats = [](const std::vector<float>& v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    const double m = s / double(v.size());
    return std::make_pair(m, std::sqrt(s2 / double(v.size()) - m * m));
  };
  // A_log = log(1..N) in every row; D = 1; norms = 1.
  const std::vector<float> a_log = floats(*f.tensors.at("model.layers.0.mamba.A_log"));  // (Di, N)
  for (int64_t d = 0; d < Di; ++d)
    for (int64_t n = 0; n < N; ++n) ASSERT_FLOAT_EQ(a_log[d * N + n], std::log(float(n + 1))) << "row " << d;
  for (float v : floats(*f.tensors.at("model.layers.0.mamba.D"))) ASSERT_EQ(v, 1.0f);
  for (const char* n : {"model.layers.0.input_layernorm.weight", "model.layers.0.mamba.dt_layernorm.weight",
                        "model.layers.0.mamba.b_layernorm.weight", "model.final_layernorm.weight"})
    for (float v : floats(*f.tensors.at(n))) ASSERT_EQ(v, 1.0f) << n;
  // softplus(dt_proj.bias) = dt in [1e-3, 1e-1], spread over the log range.
  double lo = 1, hi = 0;
  for (float b : floats(*f.tensors.at("model.layers.0.mamba.dt_proj.bias"))) {
    const double dt = std::log1p(std::exp(double(b)));
    EXPECT_GE(dt, 1e-3 * (1 - 1e-4));
    EXPECT_LE(dt, 1e-1 * (1 + 1e-4));
    lo = std::min(lo, dt), hi = std::max(hi, dt);
  }
  EXPECT_LT(lo, 3e-3);
  EXPECT_GT(hi, 3e-2);
  for (float w : floats(*f.tensors.at("model.layers.0.mamba.dt_proj.weight")))
    EXPECT_LE(std::abs(w), 1 / std::sqrt(float(R)) + 1e-6f);
  // Normal draws: mean ≈ 0, std as documented (5% tolerance on ≥ 8192 samples).
  auto [em, es] = stats(floats(*f.tensors.at("model.embed_tokens.weight")));
  EXPECT_NEAR(em, 0.0, 0.03);
  EXPECT_NEAR(es, std::pow(double(H), -0.25), 0.05 * std::pow(double(H), -0.25));
  auto [im, is] = stats(floats(*f.tensors.at("model.layers.0.mamba.in_proj.weight")));
  EXPECT_NEAR(im, 0.0, 0.01);
  EXPECT_NEAR(is, 1 / std::sqrt(double(H)), 0.05 / std::sqrt(double(H)));
  auto [om, os] = stats(floats(*f.tensors.at("model.layers.0.mamba.out_proj.weight")));
  EXPECT_NEAR(os, 1 / std::sqrt(double(Di)) / std::sqrt(2.0 * L), 0.05 / std::sqrt(double(Di)));
  auto [hm, hs] = stats(floats(*f.tensors.at("lm_head.weight")));
  EXPECT_NEAR(hs, 1 / std::sqrt(double(H)), 0.05 / std::sqrt(double(H)));
  (void)om, (void)hm;
}

TEST(Generator, RegeneratingWithFewerShards_RemovesStaleShards) {
  test::TempDir dir;
  GenerateOptions o = small_options();
  o.shards = 3;
  generate_checkpoint(dir.path, o);
  test::write_text(dir / "notes.txt", "keep me");
  o.shards = 1;
  generate_checkpoint(dir.path, o);
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"config.json", "model.safetensors", "notes.txt"}));
}

TEST(Generator, Presets_Schedules_And_ParameterCounts) {
  auto params = [](const std::string& name) {
    GenerateOptions o;
    o.config = preset_config(name);
    int64_t n = 0;
    for (const auto& t : plan_checkpoint(o)) n += t.numel();
    return n;
  };
  EXPECT_NEAR(double(params("tiny-dev")), 319e6, 4e6);
  EXPECT_NEAR(double(params("jamba-v0.1")), 51.6e9, 0.3e9);
  EXPECT_NEAR(double(params("3b")), 3.0e9, 0.3e9);
  EXPECT_LT(params("demo-random") * 2, 10'000'000);  // a few MB in bf16
  EXPECT_LT(params("tiny"), 25'000'000);

  const JambaConfig tiny = preset_config("tiny");
  EXPECT_EQ(tiny.hidden_size, 128);
  EXPECT_EQ(tiny.num_hidden_layers, 8);
  const LayerSchedule ts = LayerSchedule::from_config(tiny);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(ts[i].has_attention(), i == 2 || i == 6) << i;
    EXPECT_EQ(ts[i].is_moe(), i % 2 == 1) << i;
  }
  const JambaConfig dev = preset_config("tiny-dev");
  EXPECT_EQ(LayerSchedule::from_config(dev).attention_layers(), (std::vector<int64_t>{4, 12}));
  EXPECT_EQ(dev.num_experts, 8);
  EXPECT_EQ(dev.num_key_value_heads, 2);
  const JambaConfig v01 = preset_config("jamba-v0.1");
  EXPECT_EQ(v01.mamba_dt_rank, 256);
  EXPECT_FALSE(v01.mamba_dt_rank_auto);
  EXPECT_EQ(v01.num_experts, 16);
  EXPECT_EQ(preset_config("demo-random").vocab_size, 4096);
  for (const std::string& n : preset_names()) EXPECT_NO_THROW(parse_config(config_to_json(preset_config(n)))) << n;
  try {
    preset_config("huge");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny-dev"), std::string::npos) << e.what();
  }
}

TEST(Generator, DemoRandomPreset_GeneratesQuickly) {
  test::TempDir dir;
  GenerateOptions o;
  o.config = preset_config("demo-random");
  generate_checkpoint(dir.path, o);
  Folder f = read_folder(dir.path);
  expect_shapes(f, expected_shapes(o.config, false, true, 0, false));
  EXPECT_LT(fs::file_size(dir / "model.safetensors"), 10u << 20);
}

TEST(Generator, BadOptions_ErrorsNameTheProblem) {
  auto message = [](const GenerateOptions& o) -> std::string {
    test::TempDir dir;
    try {
      generate_checkpoint(dir.path, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  GenerateOptions o = small_options();
  o.shards = 100000;
  EXPECT_NE(message(o).find("shards"), std::string::npos) << message(o);
  o = small_options();
  o.config.num_attention_heads = 5;
  EXPECT_NE(message(o).find("num_attention_heads"), std::string::npos) << message(o);
  o = small_options();
  o.config.attn_layer_offset = 4;
  EXPECT_NE(message(o).find("attn_layer_offset"), std::string::npos) << message(o);
  o = small_options();
  o.dtype = DType::I32;
  EXPECT_NE(message(o).find("dtype"), std::string::npos) << message(o);
  o = small_options();
  o.memory_budget_bytes = 1000;
  EXPECT_NE(message(o).find("use more shards"), std::string::npos) << message(o);
  o = small_options();
  o.trained_registers = -1;
  EXPECT_NE(message(o).find("registers"), std::string::npos) << message(o);
  // jamba-v0.1 is for memory math: generating it in one shard is refused before any allocation.
  o = GenerateOptions{};
  o.config = preset_config("jamba-v0.1");
  o.memory_budget_bytes = uint64_t{64} << 30;  // explicit, so that no machine tries to write 100 GB
  EXPECT_NE(message(o).find("use more shards"), std::string::npos) << message(o);
}

}  // namespace
}  // namespace hl
