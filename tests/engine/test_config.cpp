// config.json parsing (jamba-spec.md §1): defaults, the Jamba-v0.1 config and its schedule, "auto" dt
// rank, null KV heads, eos forms, extensions, ignored legacy fields, the writer round trip, and one
// test per malformed or out-of-range field, each with its own message.
#include <nlohmann/json.hpp>

#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"
#include "test_util.h"

using namespace hl;
using hl::test::TempDir;

namespace {

// Jamba-1.5-Mini / v0.1 architecture, quoted in jamba-spec.md §1.3.
const char* kV01 = R"({ "architectures": ["JambaForCausalLM"], "model_type": "jamba",
  "attention_dropout": 0.0, "attn_layer_offset": 4, "attn_layer_period": 8,
  "bos_token_id": 1, "eos_token_id": [2, 518], "expert_layer_offset": 1, "expert_layer_period": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "mamba_conv_bias": true, "mamba_d_conv": 4, "mamba_d_state": 16, "mamba_dt_rank": 256,
  "mamba_expand": 2, "mamba_proj_bias": false, "max_position_embeddings": 262144,
  "num_attention_heads": 32, "num_experts": 16, "num_experts_per_tok": 2, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "num_logits_to_keep": 1, "output_router_logits": false, "pad_token_id": 0,
  "rms_norm_eps": 1e-06, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "use_mamba_kernels": true, "vocab_size": 65536 })";

// A small valid config; `extra` ("key":value pairs) adds or replaces fields.
std::string small(const std::string& extra = "") {
  nlohmann::json j = {{"model_type", "jamba"},    {"hidden_size", 64},      {"num_attention_heads", 4},
                      {"num_key_value_heads", 2}, {"num_hidden_layers", 4}, {"vocab_size", 100},
                      {"intermediate_size", 32}};
  if (!extra.empty()) j.update(nlohmann::json::parse("{" + extra + "}"));
  return j.dump();
}

}  // namespace

TEST(Config, OnlyModelType_GivesJambaDefaults) {
  JambaConfig c = parse_config(R"({"model_type": "jamba"})");
  JambaConfig d;
  EXPECT_EQ(c.vocab_size, d.vocab_size);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_TRUE(c.mamba_dt_rank_auto);
  EXPECT_EQ(c.mamba_dt_rank, 256);  // ceil(4096 / 16)
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.mamba_conv_bias);
  EXPECT_FALSE(c.mamba_proj_bias);
  EXPECT_EQ(c.attention_normalizer, Normalizer::Softmax);
  EXPECT_EQ(c.num_register_tokens, 0);
  EXPECT_TRUE(c.ignored_fields.empty());
}

TEST(Config, JambaV01_FieldsAndSchedule) {
  JambaConfig c = parse_config(kV01);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.mamba_inner(), 8192);
  EXPECT_EQ(c.mamba_dt_rank, 256);
  EXPECT_FALSE(c.mamba_dt_rank_auto);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 518}));
  EXPECT_TRUE(c.is_eos(518));
  EXPECT_FALSE(c.is_eos(1));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  const LayerSchedule s = LayerSchedule::from_config(c);
  EXPECT_EQ(s.attention_layers(), (std::vector<int64_t>{4, 12, 20, 28}));
  EXPECT_EQ(s.num_attention(), 4);
  EXPECT_EQ(s.num_ssm(), 28);
  EXPECT_EQ(s.num_moe(), 16);
  for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(s[i].is_moe(), i % 2 == 1) << i;
  EXPECT_TRUE(c.ignored_fields.empty());
}

TEST(Config, SingleExpert_NoMoeLayers) {
  JambaConfig c = parse_config(small(R"("num_experts":1,"num_experts_per_tok":1)"));
  EXPECT_EQ(LayerSchedule::from_config(c).num_moe(), 0);
}

TEST(Config, AutoDtRank_IsCeilHOver16) {
  JambaConfig c = parse_config(
      R"({"model_type":"jamba","hidden_size":100,"num_attention_heads":4,"num_key_value_heads":4,"mamba_dt_rank":"auto"})");
  EXPECT_EQ(c.mamba_dt_rank, 7);
  EXPECT_TRUE(c.mamba_dt_rank_auto);
}

TEST(Config, NullKvHeads_MeansAttentionHeads) {
  JambaConfig c = parse_config(small(R"("num_key_value_heads":null)"));
  EXPECT_EQ(c.num_key_value_heads, 4);
}

TEST(Config, EosIntListOrNull) {
  EXPECT_EQ(parse_config(small(R"("eos_token_id":7)")).eos_token_ids, std::vector<int64_t>{7});
  EXPECT_EQ(parse_config(small(R"("eos_token_id":[3,5])")).eos_token_ids, (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(parse_config(small(R"("eos_token_id":null)")).eos_token_ids.empty());
  EXPECT_EQ(parse_config(small(R"("pad_token_id":null)")).pad_token_id, -1);
}

TEST(Config, Extensions) {
  JambaConfig c = parse_config(small(R"("attention_normalizer":"softmax1","num_register_tokens":4)"));
  EXPECT_EQ(c.attention_normalizer, Normalizer::Softmax1);
  EXPECT_EQ(c.num_register_tokens, 4);
}

TEST(Config, LegacyAndUnknownFields_RecordedAsIgnored) {
  JambaConfig c = parse_config(
      small(R"("auto_map":{"AutoConfig":"configuration_jamba.JambaConfig"},"n_ctx":4096,"mamba_inner_layernorms":true,)"
            R"("calc_logits_for_entire_prompt":false,"transformers_version":"4.40.2","use_mambapy":false)"));
  EXPECT_EQ(c.ignored_fields,
            (std::vector<std::string>{"auto_map", "calc_logits_for_entire_prompt", "mamba_inner_layernorms", "n_ctx"}));
}

TEST(Config, NumLocalExpertsAlias) {
  EXPECT_EQ(parse_config(small(R"("num_local_experts":8)")).num_experts, 8);
  EXPECT_LOAD_ERROR(parse_config(small(R"("num_local_experts":8,"num_experts":4)")),
                    "field 'num_local_experts': expected num_experts 4 (an alias), got 8");
}

TEST(Config, WriterRoundTrip) {
  std::vector<JambaConfig> cs = {parse_config(kV01), hl::test::tiny_config(), JambaConfig()};
  cs[1].attention_normalizer = Normalizer::Softmax1;
  cs[1].num_register_tokens = 3;
  cs[1].tie_word_embeddings = true;
  cs[1].mamba_proj_bias = true;
  cs[1].eos_token_ids = {};
  cs[1].pad_token_id = -1;
  cs[2].mamba_dt_rank_auto = true;
  for (const JambaConfig& c : cs) {
    JambaConfig r = parse_config(config_to_json(c));
    EXPECT_EQ(config_to_json(r), config_to_json(c));
    EXPECT_EQ(r.vocab_size, c.vocab_size);
    EXPECT_EQ(r.num_key_value_heads, c.num_key_value_heads);
    EXPECT_EQ(r.mamba_dt_rank, c.mamba_dt_rank);
    EXPECT_EQ(r.mamba_dt_rank_auto, c.mamba_dt_rank_auto);
    EXPECT_EQ(r.eos_token_ids, c.eos_token_ids);
    EXPECT_EQ(r.pad_token_id, c.pad_token_id);
    EXPECT_EQ(r.attention_normalizer, c.attention_normalizer);
    EXPECT_EQ(r.num_register_tokens, c.num_register_tokens);
    EXPECT_EQ(r.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(r.mamba_proj_bias, c.mamba_proj_bias);
    EXPECT_DOUBLE_EQ(r.rms_norm_eps, c.rms_norm_eps);
    EXPECT_EQ(r.torch_dtype, c.torch_dtype);
  }
}

TEST(Config, NormalizerNames) {
  for (Normalizer n : {Normalizer::Softmax, Normalizer::Softmax1, Normalizer::Sink}) {
    Normalizer back = Normalizer::Softmax;
    ASSERT_TRUE(parse_normalizer(normalizer_name(n), &back));
    EXPECT_EQ(back, n);
  }
  Normalizer x;
  EXPECT_FALSE(parse_normalizer("softmax2", &x));
}

TEST(Config, LoadFile) {
  TempDir d;
  hl::test::write_text(d / "config.json", small());
  EXPECT_EQ(load_config_file(d / "config.json").hidden_size, 64);
  hl::test::write_text(d / "big.json", small(R"("pad":")" + std::string(1 << 20, 'x') + "\""));
  EXPECT_LOAD_ERROR(load_config_file(d / "big.json"), "larger than the limit of 1048576 bytes");
  EXPECT_LOAD_ERROR(load_config_file(d / "missing.json"), "cannot open");
  EXPECT_LOAD_ERROR(load_config_file(d.path), "is a folder");
}

// ---- malformed configs: one defect each ---------------------------------------------------------

TEST(ConfigCorrupt, InvalidJson) {
  EXPECT_LOAD_ERROR(parse_config(R"({"model_type": "jamba",})"), "config.json: invalid JSON");
}

TEST(ConfigCorrupt, NonObjectJson) {
  EXPECT_LOAD_ERROR(parse_config("[1, 2, 3]"), "config.json: top level: expected an object, got array [1,2,3]");
}

TEST(ConfigCorrupt, InvalidUtf8) {
  EXPECT_LOAD_ERROR(parse_config("{\"model_type\": \"jamba\xff\"}"), "config.json: not valid UTF-8");
}

TEST(ConfigCorrupt, NestingTooDeep) {
  std::string deep = R"({"model_type":"jamba","x":)" + std::string(50, '[') + std::string(50, ']') + "}";
  EXPECT_LOAD_ERROR(parse_config(deep), "config.json: JSON nesting depth exceeds 16");
}

TEST(ConfigCorrupt, DuplicateKey) {
  EXPECT_LOAD_ERROR(parse_config(R"({"model_type":"jamba","hidden_size":64,"hidden_size":128})"),
                    "config.json: key 'hidden_size' appears twice");
}

TEST(ConfigCorrupt, MissingModelType) {
  EXPECT_LOAD_ERROR(parse_config(R"({"hidden_size": 64})"),
                    "config.json: field 'model_type': expected \"jamba\", \"bamba\", \"nemotron_h\", \"granitemoehybrid\" or \"falcon_h1\" (the model types supported), got nothing");
}

TEST(ConfigCorrupt, WrongModelType) {
  EXPECT_LOAD_ERROR(parse_config(R"({"model_type": "llama"})"),
                    "field 'model_type': expected \"jamba\", \"bamba\", \"nemotron_h\", \"granitemoehybrid\" or \"falcon_h1\" (the model types supported), got string \"llama\"");
}

TEST(ConfigCorrupt, WrongJsonTypes) {
  EXPECT_LOAD_ERROR(
      parse_config(small(R"("max_position_embeddings":"4096")")),
      "field 'max_position_embeddings': expected an integer in [1, 9223372036854775807], got string \"4096\"");
  EXPECT_LOAD_ERROR(parse_config(R"({"model_type":"jamba","num_hidden_layers":4.5})"),
                    "field 'num_hidden_layers': expected an integer in [1, 1024], got 4.5");
  EXPECT_LOAD_ERROR(parse_config(small(R"("tie_word_embeddings":1)")),
                    "field 'tie_word_embeddings': expected true or false, got 1");
  EXPECT_LOAD_ERROR(parse_config(small(R"("rms_norm_eps":"1e-6")")),
                    "field 'rms_norm_eps': expected a finite number in (0.0, 1.0], got string \"1e-6\"");
  EXPECT_LOAD_ERROR(parse_config(small(R"("use_mamba_kernels":"yes")")),
                    "field 'use_mamba_kernels': expected true or false, got string \"yes\"");
  EXPECT_LOAD_ERROR(parse_config(small(R"("eos_token_id":"2")")),
                    "field 'eos_token_id': expected an integer in [0, 99], got string \"2\"");
  EXPECT_LOAD_ERROR(parse_config(small(R"("architectures":"JambaForCausalLM")")),
                    "field 'architectures': expected a list of strings, got string");
  EXPECT_LOAD_ERROR(parse_config(small(R"("mamba_dt_rank":"big")")),
                    "field 'mamba_dt_rank': expected \"auto\" or an integer in [1, 65536], got string \"big\"");
}

TEST(ConfigCorrupt, HeadsDoNotDivideHidden) {
  EXPECT_LOAD_ERROR(
      parse_config(R"({"model_type":"jamba","hidden_size":100,"num_attention_heads":3,"num_key_value_heads":1})"),
      "field 'num_attention_heads': expected a divisor of hidden_size 100, got 3");
}

TEST(ConfigCorrupt, KvHeadsDoNotDivideHeads) {
  EXPECT_LOAD_ERROR(parse_config(small(R"("num_key_value_heads":3)")),
                    "field 'num_key_value_heads': expected a divisor of num_attention_heads 4, got 3");
  EXPECT_LOAD_ERROR(parse_config(R"({"model_type":"jamba","hidden_size":64,"num_attention_heads":4})"),
                    "field 'num_key_value_heads': expected a divisor of num_attention_heads 4, got 8 (the default)");
}

TEST(ConfigCorrupt, OffsetNotBelowPeriod) {
  EXPECT_LOAD_ERROR(parse_config(small(R"("attn_layer_period":4,"attn_layer_offset":4)")),
                    "field 'attn_layer_offset': expected an integer in [0, 3], got 4");
  EXPECT_LOAD_ERROR(parse_config(small(R"("expert_layer_period":2,"expert_layer_offset":2)")),
                    "field 'expert_layer_offset': expected an integer in [0, 1], got 2");
  EXPECT_LOAD_ERROR(
      parse_config(small(R"("attn_layer_period":2)")),
      "field 'attn_layer_offset': expected an integer in [0, 1] (below attn_layer_period), got the default 4");
}

TEST(ConfigCorrupt, PeriodZero) {
  EXPECT_LOAD_ERROR(parse_config(small(R"("attn_layer_period":0)")),
                    "field 'attn_layer_period': expected an integer in [1, 1024], got 0");
}

TEST(ConfigCorrupt, ExpertsPerTokenOutOfRange) {
  EXPECT_LOAD_ERROR(parse_config(small(R"("num_experts":4,"num_experts_per_tok":5)")),
                    "field 'num_experts_per_tok': expected an integer in [1, 4], got 5");
  EXPECT_LOAD_ERROR(parse_config(small(R"("num_experts":4,"num_experts_per_tok":0)")),
                    "field 'num_experts_per_tok': expected an integer in [1, 4], got 0");
}

TEST(ConfigCorrupt, SizesOutOfRange) {
  EXPECT_LOAD_ERROR(parse_config(R"({"model_type":"jamba","hidden_size":131072})"),
                    "field 'hidden_size': expected an integer in [1, 65536], got 131072");
  EXPECT_LOAD_ERROR(parse_config(small(R"("vocab_size":16777217)")),
                    "field 'vocab_size': expected an integer in [1, 16777216], got 16777217");
  EXPECT_LOAD_ERROR(parse_config(R"({"model_type":"jamba","num_hidden_layers":0})"),
                    "field 'num_hidden_layers': expected an integer in [1, 1024], got 0");
  EXPECT_LOAD_ERROR(parse_config(small(R"("mamba_d_conv":65)")),
                    "field 'mamba_d_conv': expected an integer in [1, 64], got 65");
  EXPECT_LOAD_ERROR(parse_config(small(R"("mamba_d_state":2048)")),
                    "field 'mamba_d_state': expected an integer in [1, 1024], got 2048");
  EXPECT_LOAD_ERROR(parse_config(small(R"("num_experts":2000)")),
                    "field 'num_experts': expected an integer in [1, 1024], got 2000");
  EXPECT_LOAD_ERROR(parse_config(small(R"("num_register_tokens":2000)")),
                    "field 'num_register_tokens': expected an integer in [0, 1024], got 2000");
  EXPECT_LOAD_ERROR(parse_config(small(R"("intermediate_size":-5)")),
                    "field 'intermediate_size': expected an integer in [1, 1048576], got -5");
  EXPECT_LOAD_ERROR(parse_config(small(R"("rms_norm_eps":0)")),
                    "field 'rms_norm_eps': expected a finite number in (0.0, 1.0], got 0");
  EXPECT_LOAD_ERROR(parse_config(small(R"("bos_token_id":100)")),
                    "field 'bos_token_id': expected an integer in [0, 99], got 100");
  EXPECT_LOAD_ERROR(parse_config(small(R"("eos_token_id":[1,100])")),
                    "field 'eos_token_id[1]': expected an integer in [0, 99], got 100");
  EXPECT_LOAD_ERROR(parse_config(small(R"("hidden_act":"gelu")")),
                    "field 'hidden_act': expected \"silu\" (the only activation supported), got string \"gelu\"");
  EXPECT_LOAD_ERROR(
      parse_config(small(R"("num_experts":1)")),
      "field 'num_experts_per_tok': expected an integer in [1, 1] (at most num_experts), got the default 2");
}

TEST(ConfigCorrupt, SinkNormalizerNotAllowedInConfig) {
  EXPECT_LOAD_ERROR(parse_config(small(R"("attention_normalizer":"sink")")),
                    "field 'attention_normalizer': expected \"softmax\" or \"softmax1\", got string \"sink\"");
  EXPECT_LOAD_ERROR(parse_config(small(R"("attention_normalizer":"entmax")")),
                    "field 'attention_normalizer': expected \"softmax\" or \"softmax1\", got string \"entmax\"");
}
