// PEFT adapter folders as untrusted input (reliability-checklist.md, jamba-spec.md §5.2–5.3):
// adapter_config.json keys and the rank_pattern / alpha_pattern / target_modules rules, a corruption
// table where each broken adapter gives its own message, and per-expert adapters on fused experts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>

#include "dora_test_util.h"
#include "engine/io/adapter.h"
#include "engine/model/loader.h"
#include "engine/probes/dora_probe.h"

using namespace hl;
using namespace hl::test;
using Json = nlohmann::json;

namespace {

AdapterConfig parse(const std::string& text) {
  return parse_adapter_config(text, "adapter_config.json");
}

}  // namespace

TEST(AdapterConfig, Defaults_PeftValues) {
  const AdapterConfig c = parse(R"({"peft_type": "LORA"})");
  EXPECT_EQ(c.r, 8);
  EXPECT_EQ(c.lora_alpha, 8.0);
  EXPECT_FALSE(c.use_dora);
  EXPECT_FALSE(c.use_rslora);
  EXPECT_EQ(c.scaling_for("model.layers.0.mamba.in_proj"), 1.0);
  EXPECT_TRUE(c.targets("anything"));
}

TEST(AdapterConfig, RankPattern_FirstMatchingKeyInFileOrderWins) {
  // Not sorted on purpose: the later, more specific key never wins over an earlier match.
  const AdapterConfig c = parse(R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16,
      "rank_pattern": {"q_proj": 4, "model.layers.1.self_attn.q_proj": 2, "layers.1.self_attn.k_proj": 3},
      "alpha_pattern": {"model.layers.1.self_attn.q_proj": 2, "q_proj": 32}})");
  EXPECT_EQ(c.rank_for("model.layers.1.self_attn.q_proj"), 4);
  EXPECT_EQ(c.rank_for("model.layers.1.self_attn.k_proj"), 3);
  EXPECT_EQ(c.rank_for("model.layers.11.self_attn.k_proj"), 8);  // "(.*\.)?" needs a dot before "layers.1."
  EXPECT_EQ(c.rank_for("model.layers.1.self_attn.v_proj"), 8);
  EXPECT_EQ(c.alpha_for("model.layers.1.self_attn.q_proj"), 2.0);
  EXPECT_EQ(c.alpha_for("model.layers.0.self_attn.q_proj"), 32.0);
  EXPECT_EQ(c.scaling_for("model.layers.0.self_attn.q_proj"), 8.0);  // 32 / 4
}

TEST(AdapterConfig, PatternKeys_PeftRegexRule) {
  const AdapterConfig c = parse(R"({"peft_type": "LORA", "r": 8,
      "rank_pattern": {"proj": 1, "(q|v)_proj": 2, "experts\\.[0-9]+\\.up_proj": 5, "mamba.x.proj": 6}})");
  EXPECT_EQ(c.rank_for("model.layers.0.self_attn.q_proj"), 2);  // "proj" must follow a dot: no match
  EXPECT_EQ(c.rank_for("model.layers.0.self_attn.k_proj"), 8);
  EXPECT_EQ(c.rank_for("x.proj"), 1);
  EXPECT_EQ(c.rank_for("model.layers.2.feed_forward.experts.13.up_proj"), 5);
  EXPECT_EQ(c.rank_for("model.layers.2.feed_forward.experts.x.up_proj"), 8);
  EXPECT_EQ(c.rank_for("model.layers.0.mamba.x_proj"), 6);  // '.' matches any character, as in re
}

TEST(AdapterConfig, TargetModules_ListRegexAllLinearExcludeLayers) {
  AdapterConfig c = parse(R"({"peft_type": "LORA", "target_modules": ["q_proj", "mamba.in_proj"]})");
  EXPECT_TRUE(c.targets("model.layers.3.self_attn.q_proj"));
  EXPECT_TRUE(c.targets("model.layers.0.mamba.in_proj"));
  EXPECT_FALSE(c.targets("model.layers.3.self_attn.qq_proj"));
  EXPECT_FALSE(c.targets("model.layers.3.self_attn.xq_proj"));
  c = parse(R"({"peft_type": "LORA", "target_modules": ".*\\.(q|k)_proj"})");
  EXPECT_TRUE(c.targets("model.layers.3.self_attn.k_proj"));
  EXPECT_FALSE(c.targets("model.layers.3.self_attn.k_proj2"));
  c = parse(R"({"peft_type": "LORA", "target_modules": "all-linear", "exclude_modules": ["router"],
                "layers_to_transform": [0, 2]})");
  EXPECT_TRUE(c.targets("model.layers.2.feed_forward.experts.1.up_proj"));
  EXPECT_FALSE(c.targets("model.layers.2.feed_forward.router"));
  EXPECT_FALSE(c.targets("model.layers.1.mamba.in_proj"));
  EXPECT_FALSE(c.targets("model.layers.21.mamba.in_proj"));
  EXPECT_FALSE(c.targets("lm_head"));
}

TEST(AdapterConfig, BadConfigs_EachNamesTheKey) {
  const std::pair<std::string, std::string> cases[] = {
      {R"([1, 2])", "adapter_config.json: top level: expected an object, got array [1,2]"},
      {R"({"r": 8})", "field 'peft_type': expected \"LORA\" (LoRA and DoRA adapters only), got nothing"},
      {R"({"peft_type": "IA3"})",
       "field 'peft_type': expected \"LORA\" (LoRA and DoRA adapters only), got string \"IA3\""},
      {R"({"peft_type": "LORA", "r": 0})", "field 'r': expected an integer in [1, 65536], got 0"},
      {R"({"peft_type": "LORA", "r": "8"})", "field 'r': expected an integer in [1, 65536], got string \"8\""},
      {R"({"peft_type": "LORA", "lora_alpha": 1e300})",
       "field 'lora_alpha': expected a finite number in [-1000000.0, 1000000.0], got 1e+300"},
      {R"({"peft_type": "LORA", "use_dora": "yes"})", "field 'use_dora': expected true or false, got string \"yes\""},
      {R"({"peft_type": "LORA", "fan_in_fan_out": true})",
       "field 'fan_in_fan_out': expected false (only nn.Linear weights stored (out, in) are supported), got true"},
      {R"({"peft_type": "LORA", "layer_replication": [[0, 2]]})", "field 'layer_replication': expected it unset"},
      {R"({"peft_type": "LORA", "modules_to_save": ["lm_head"]})",
       "field 'modules_to_save': expected it unset (null, false or empty), got array [\"lm_head\"]"},
      {R"({"peft_type": "LORA", "use_qalora": true})",
       "field 'use_qalora': expected it unset (null, false or empty), got true"},
      {R"({"peft_type": "LORA", "use_fancy_variant": true})",
       "field 'use_fancy_variant': expected false: an unknown LoRA variant"},
      {R"({"peft_type": "LORA", "bias": "all"})",
       "field 'bias': expected \"none\" (adapters that train the base biases are not supported), got string \"all\""},
      {R"({"peft_type": "LORA", "init_lora_weights": "pissa_niter_4"})",
       "field 'init_lora_weights': expected an initialisation that leaves the base weights as they are, got string "
       "\"pissa_niter_4\""},
      {R"({"peft_type": "LORA", "rank_pattern": {"q_proj(": 4}})",
       "rank_pattern key 'q_proj(': invalid regular expression"},
      {R"({"peft_type": "LORA", "rank_pattern": {"q_proj": 0}})",
       "field 'rank_pattern['q_proj']': expected an integer in [1, 65536], got 0"},
      {R"({"peft_type": "LORA", "alpha_pattern": {"((a{100}){100}){100}": 4}})", "repetition counts"},
      {R"({"peft_type": "LORA", "rank_pattern": {"q": 4, "q": 5}})", "appears twice"},
      {R"({"peft_type": "LORA", "target_modules": 7})",
       "field 'target_modules': expected a list of module names or a regular expression string, got 7"},
      {R"({"peft_type": "LORA", "target_modules": "(?P<x>q)_proj"})", "invalid regular expression"},
      {R"({"peft_type": "LORA", "layers_to_transform": [-1]})",
       "field 'layers_to_transform[0]': expected an integer in [0, 1000000], got -1"},
      {R"({"peft_type": "LORA", "a": [[[[[[[[[1]]]]]]]]]})", "nesting depth"},
      {R"({"peft_type": "LORA",)", "invalid JSON"},
  };
  for (const auto& [text, part] : cases) EXPECT_LOAD_ERROR(parse(text), part);
  EXPECT_LOAD_ERROR(parse(R"({"peft_type": "LORA", "rank_pattern": {")" + std::string(300, 'a') + R"(": 2}})"),
                    "300 characters, at most 256");
  EXPECT_LOAD_ERROR(parse(std::string(AdapterConfig::kMaxBytes + 1, ' ')), "larger than the limit");
  Json many = {{"peft_type", "LORA"}, {"rank_pattern", Json::object()}};
  for (int i = 0; i < 65; ++i) many["rank_pattern"]["layers\\." + std::to_string(i) + "\\..*"] = 2;
  EXPECT_LOAD_ERROR(parse(many.dump()), "65 regular-expression keys");
  for (int i = 0; i < 3000; ++i) many["alpha_pattern"]["model.layers." + std::to_string(i) + ".q_proj"] = 2;
  many.erase("rank_pattern");
  EXPECT_EQ(parse(many.dump()).alpha_pattern.size(), 3000u);  // literal keys are not limited that way
}

// ---------------------------------------------------------------------------------------------
// Adapter folders against a loaded tiny checkpoint (test_util.h: H 16, I 24, Di 32, layers
// 0 Mamba+dense, 1 attention+MoE (E 4), 2 Mamba+dense, 3 Mamba+MoE).
// ---------------------------------------------------------------------------------------------

namespace {

struct Spec {
  Json config;
  std::vector<AdapterTensor> tensors;
  AdapterTensor* find(const std::string& module, const std::string& suffix) {
    for (AdapterTensor& t : tensors)
      if (t.module == module && t.suffix == suffix) return &t;
    return nullptr;
  }
  void erase(const std::string& module, const std::string& suffix) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].module == module && tensors[i].suffix == suffix) tensors.erase(tensors.begin() + i);
  }
};

const char* kQ = "model.layers.1.self_attn.q_proj";                     // (16, 16)
const char* kIn = "model.layers.0.mamba.in_proj";                       // (64, 16)
const char* kGate = "model.layers.3.feed_forward.experts.2.gate_proj";  // (24, 16)

void add_module(Spec& s, const std::string& path, int64_t out, int64_t in, int r, uint32_t seed) {
  s.tensors.push_back({path, "lora_A.weight", {r, in}, random_values(r * in, seed)});
  std::vector<float> B = random_values(out * r, seed + 1);
  for (float& b : B) b *= 0.1f;
  s.tensors.push_back({path, "lora_B.weight", {out, r}, B});
  std::vector<float> m(static_cast<size_t>(out));
  for (size_t j = 0; j < m.size(); ++j) m[j] = 0.3f + 0.01f * static_cast<float>(j);
  s.tensors.push_back({path, "lora_magnitude_vector", {out}, m});
}

Spec valid_spec() {
  Spec s;
  s.config = lora_config(2, 4, true);
  s.config["target_modules"] = {"q_proj", "in_proj", "gate_proj"};
  add_module(s, kQ, 16, 16, 2, 10);
  add_module(s, kIn, 64, 16, 2, 20);
  add_module(s, kGate, 24, 16, 2, 30);
  return s;
}

class AdapterFolder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ckpt_ = new TempDir;
    write_tiny_checkpoint(ckpt_->path, tiny_config());
    base_ = load_model(ckpt_->path);
  }
  static void TearDownTestSuite() {
    base_.reset();
    delete ckpt_;
  }
  static TempDir* ckpt_;
  static std::shared_ptr<Model> base_;
};
TempDir* AdapterFolder::ckpt_ = nullptr;
std::shared_ptr<Model> AdapterFolder::base_;

}  // namespace

TEST_F(AdapterFolder, ValidDora_LoadsAndMergesPerExpert) {
  TempDir dir;
  Spec s = valid_spec();
  write_adapter(dir.path, s.config, s.tensors);
  const Adapter a = load_adapter(dir.path, *base_);
  ASSERT_EQ(a.modules.size(), 3u);
  EXPECT_EQ(a.modules[0].path, kIn);  // sorted by path
  EXPECT_EQ(a.find(kGate)->rows, 24);
  EXPECT_EQ(a.find(kGate)->scaling, 2.0);
  EXPECT_EQ(dora_rows_adapter(*base_, a).size(), 3u);
}

TEST_F(AdapterFolder, CorruptionTable_EachCaseItsOwnMessage) {
  struct Case {
    const char* name;
    std::function<void(Spec&)> edit;
    std::string part;
  };
  const std::string qA = std::string("base_model.model.") + kQ + ".lora_A.weight";
  const std::vector<Case> cases = {
      {"peft_type not LORA", [](Spec& s) { s.config["peft_type"] = "PREFIX_TUNING"; },
       "adapter_config.json: field 'peft_type': expected \"LORA\" (LoRA and DoRA adapters only), got string "
       "\"PREFIX_TUNING\""},
      {"fan_in_fan_out", [](Spec& s) { s.config["fan_in_fan_out"] = true; },
       "adapter_config.json: field 'fan_in_fan_out': expected false (only nn.Linear weights stored (out, in) are "
       "supported), got true"},
      {"shape mismatch with base",
       [](Spec& s) {
         s.find(kQ, "lora_A.weight")->shape = {2, 15};
       },
       "tensor '" + qA + "': shape (2, 15), expected (2, 16): base weight '" + kQ + ".weight' is (16, 16)"},
      {"module not in base",
       [](Spec& s) {
         for (AdapterTensor& t : s.tensors)
           if (t.module == kQ) t.module = "model.layers.1.self_attn.qq_proj";
         s.config["target_modules"] = {"qq_proj", "in_proj", "gate_proj"};
       },
       "tensor 'base_model.model.model.layers.1.self_attn.qq_proj.lora_A.weight': module "
       "'model.layers.1.self_attn.qq_proj' is not a linear module of the base model"},
      {"conv1d is not linear",
       [](Spec& s) {
         for (AdapterTensor& t : s.tensors)
           if (t.module == kIn) t.module = "model.layers.0.mamba.conv1d";
         s.config["target_modules"] = nullptr;
       },
       "'model.layers.0.mamba.conv1d' is not a linear module"},
      {"missing lora_B", [](Spec& s) { s.erase(kGate, "lora_B.weight"); },
       std::string("tensor 'base_model.model.") + kGate + ".lora_B.weight' is missing"},
      {"missing lora_A", [](Spec& s) { s.erase(kGate, "lora_A.weight"); }, ".lora_A.weight' is missing"},
      {"wrong rank",
       [](Spec& s) {
         s.find(kIn, "lora_A.weight")->shape = {3, 16};
         s.find(kIn, "lora_B.weight")->shape = {64, 3};
       },
       "shape (3, 16), expected (2, 16) ((r, in), rank 2 from adapter_config.json 'r')"},
      {"rank_pattern disagrees",
       [](Spec& s) {
         s.config["rank_pattern"] = {{"in_proj", 4}};
       },
       "rank 4 from adapter_config.json rank_pattern key 'in_proj'"},
      {"DoRA magnitude missing", [](Spec& s) { s.erase(kQ, "lora_magnitude_vector"); },
       "lora_magnitude_vector' is missing (adapter_config.json has use_dora true)"},
      {"magnitude in plain LoRA", [](Spec& s) { s.config["use_dora"] = false; }, "has use_dora false"},
      {"magnitude shape", [](Spec& s) { s.find(kQ, "lora_magnitude_vector")->shape = {15}; },
       "shape (15,), expected (16,)"},
      {"NaN in lora_B", [](Spec& s) { s.find(kGate, "lora_B.weight")->values[5] = std::nanf(""); },
       "lora_B.weight': element 5 is NaN"},
      {"integer dtype",
       [](Spec& s) {
         s.tensors.push_back({kQ, "lora_B.bias", {16}, std::vector<float>(16, 0), DType::I32});
       },
       "dtype I32"},
      {"bias without a base bias",
       [](Spec& s) {
         s.config["lora_bias"] = true;
         s.tensors.push_back({kQ, "lora_B.bias", {16}, std::vector<float>(16, 0.5f)});
       },
       "has no bias to merge it into"},
      {"bias with lora_bias false",
       [](Spec& s) {
         s.tensors.push_back({kQ, "lora_B.bias", {16}, {}});
       },
       "lora_bias false"},
      {"not selected by target_modules",
       [](Spec& s) {
         s.config["target_modules"] = {"q_proj", "in_proj"};
       },
       "is not selected by adapter_config.json"},
      {"unexpected tensor",
       [](Spec& s) {
         s.tensors.push_back({kQ, "lora_C.weight", {2}, {}});
       },
       "unexpected tensor"},
      {"adapter name in key", [](Spec& s) { s.find(kQ, "lora_A.weight")->suffix = "lora_A.default.weight"; },
       "carries an adapter name"},
      {"embedding LoRA",
       [](Spec& s) {
         s.tensors.push_back({"model.embed_tokens", "lora_embedding_A", {2, 64}, {}});
       },
       "LoRA on embeddings"},
      {"two magnitude spellings",
       [](Spec& s) {
         s.tensors.push_back({kQ, "lora_magnitude_vector.weight", {16}, std::vector<float>(16, 1)});
       },
       "already has"},
      {"layer_replication",
       [](Spec& s) {
         s.config["layer_replication"] = {{0, 2}};
       },
       "adapter_config.json: field 'layer_replication': expected it unset (null, false or empty), got array [[0,2]]"},
      {"invalid regex",
       [](Spec& s) {
         s.config["rank_pattern"] = {{"[q", 2}};
       },
       "invalid regular expression"},
      {"backreference with a huge number (fuzz_adapter: libstdc++'s parser overflowed)",
       [](Spec& s) {
         s.config["target_modules"] = "model\\.layers\\.\\d+\\77777777777777777777777777777.(in|out)_proj";
       },
       "backreferences and octal escapes"},
      {"backreference \\1", [](Spec& s) { s.config["target_modules"] = "(q)_proj\\1"; },
       "backreferences and octal escapes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    Spec s = valid_spec();
    c.edit(s);
    write_adapter(dir.path, s.config, s.tensors);
    EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), c.part);
  }
}

TEST_F(AdapterFolder, FolderProblems_NameTheFile) {
  TempDir dir;
  EXPECT_LOAD_ERROR(load_adapter(dir / "nope", *base_), "adapter folder not found");
  EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), "adapter_config.json is missing");
  write_text(dir / "adapter_config.json", "{\"peft_type\": \"LORA\", ");
  EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), "adapter_config.json: invalid JSON");
  write_text(dir / "adapter_config.json", lora_config(2, 4, false).dump());
  EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), "adapter_model.safetensors is missing");
  write_text(dir / "adapter_model.bin", "pickle");
  EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), "adapter_model.bin (a pickle)");
  write_text(dir / "adapter_model.safetensors", std::string("\x10\0\0\0\0\0\0\0{}", 10));
  EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), "adapter_model.safetensors");
  SafetensorsWriter w;
  w.write(dir / "adapter_model.safetensors");
  EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), "holds no LoRA tensors");
  SafetensorsWriter w2;
  const float one = 1;
  w2.add("lora_A.weight", DType::F32, {1}, &one, 4);
  w2.write(dir / "adapter_model.safetensors");
  EXPECT_LOAD_ERROR(load_adapter(dir.path, *base_), "does not start with 'base_model.model.'");
}

TEST(AdapterFused, PerExpertAdapterOnFusedExperts_SameAsPerExpertCheckpoint) {
  TempDir plain, fused, ad;
  write_tiny_checkpoint(plain.path, tiny_config(), {}, false);
  // The fused checkpoint holds the plain one's values: gate_up (E, 2I, H) = [gate_e; up_e], down (E, H, I).
  write_tiny_checkpoint(fused.path, tiny_config(), [](std::vector<TestTensor>& ts) {
    const JambaConfig c = tiny_config();
    const int64_t E = c.num_experts, I = c.intermediate_size, H = c.hidden_size;
    const LayerSchedule sched = LayerSchedule::from_config(c);
    for (int64_t layer : sched.moe_layers()) {
      const std::string p = "model.layers." + std::to_string(layer) + ".feed_forward.experts.";
      TestTensor gu{p + "gate_up_proj", {E, 2 * I, H}, {}}, dn{p + "down_proj", {E, H, I}, {}};
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + std::to_string(e) + ".";
        for (const char* part : {"gate_proj", "up_proj"}) {
          const std::vector<float>& v = find_tensor(ts, x + part + ".weight")->values;
          gu.values.insert(gu.values.end(), v.begin(), v.end());
        }
        const std::vector<float>& d = find_tensor(ts, x + "down_proj.weight")->values;
        dn.values.insert(dn.values.end(), d.begin(), d.end());
      }
      ts.erase(std::remove_if(ts.begin(), ts.end(),
                              [&](const TestTensor& t) {
                                return t.name.rfind(p, 0) == 0 && t.name.size() > p.size() &&
                                       std::isdigit(t.name[p.size()]);
                              }),
               ts.end());
      ts.push_back(gu);
      ts.push_back(dn);
    }
  });
  auto a = load_model(plain.path), b = load_model(fused.path);
  Spec s = valid_spec();
  add_module(s, "model.layers.1.feed_forward.experts.3.down_proj", 16, 24, 2, 40);
  s.config["target_modules"] = {"q_proj", "in_proj", "gate_proj", "down_proj"};
  write_adapter(ad.path, s.config, s.tensors);
  // The two layouts hold the same values: every per-expert row of dora --tuned is zero.
  const std::vector<DoraRow> same = dora_rows_tuned(*a, *b);
  EXPECT_EQ(same.size(), linear_modules(*a, false).size());
  for (const DoraRow& r : same) EXPECT_EQ(r.delta_m + r.delta_d, 0.0) << r.module;
  const Adapter ada = load_adapter(ad.path, *a), adb = load_adapter(ad.path, *b);
  const std::vector<DoraRow> ra = dora_rows_adapter(*a, ada), rb = dora_rows_adapter(*b, adb);
  ASSERT_EQ(ra.size(), 4u);
  ASSERT_EQ(rb.size(), 4u);
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].module, rb[i].module);
    EXPECT_EQ(ra[i].delta_m, rb[i].delta_m);
    EXPECT_EQ(ra[i].delta_d, rb[i].delta_d);
  }
  const Mat untouched = b->w.layers[1].moe.experts[2].down;
  merge_adapter(*a, ada);
  merge_adapter(*b, adb);
  EXPECT_EQ(mat_values(a->w.layers[1].moe.experts[3].down), mat_values(b->w.layers[1].moe.experts[3].down));
  EXPECT_EQ(mat_values(a->w.layers[3].moe.experts[2].gate), mat_values(b->w.layers[3].moe.experts[2].gate));
  EXPECT_EQ(b->w.layers[1].moe.experts[2].down.data, untouched.data);
  // After the merge, dora --tuned of merged against base sees exactly the adapted matrices move.
  auto base = load_model(plain.path);
  int moved = 0;
  for (const DoraRow& r : dora_rows_tuned(*base, *a)) moved += (r.delta_m + r.delta_d) > 0 ? 1 : 0;
  EXPECT_EQ(moved, 4);
}
