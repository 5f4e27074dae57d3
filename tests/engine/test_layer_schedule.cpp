// The layer schedule (engine/model/layer_schedule.h): kinds and per-kind indices from Jamba's
// period/offset fields against a direct count, the from_lists round trip, the describe() line, a
// schedule no period/offset can express, bad lists refused with one-line errors, and the
// period/offset inverse used by the trace import.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/model/layer_schedule.h"

using namespace hl;

namespace {

JambaConfig jamba(int64_t L, int64_t ap, int64_t ao, int64_t ep, int64_t eo, int64_t experts = 4) {
  JambaConfig c;
  c.num_hidden_layers = L;
  c.attn_layer_period = ap;
  c.attn_layer_offset = ao;
  c.expert_layer_period = ep;
  c.expert_layer_offset = eo;
  c.num_experts = experts;
  c.num_experts_per_tok = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.intermediate_size = 96;
  c.mamba_expand = 2;
  c.mamba_d_state = 8;
  c.mamba_d_conv = 3;
  c.mamba_dt_rank = 5;
  return c;
}

// The message of the LoadError `f` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const LoadError& e) {
    return e.what();
  }
  return "";
}

// "attention (0) or mamba (1)": every mixer kind with its number, as the schedule's messages list
// them ("a (0), b (1) or c (2)" for three), so that adding a kind leaves this test as it is.
std::string every_mixer_kind() {
  std::string s;
  for (int k = 0; k < kMixerKinds; ++k) {
    if (k > 0) s += k + 1 == kMixerKinds ? " or " : ", ";
    s += std::string(mixer_name(static_cast<MixerKind>(k))) + " (" + std::to_string(k) + ")";
  }
  return s;
}

}  // namespace

TEST(LayerSchedule, FromConfig_KindsAndIndicesMatchADirectCount) {
  for (const JambaConfig& c : {jamba(32, 8, 4, 2, 1), jamba(8, 4, 2, 2, 1), jamba(7, 3, 0, 3, 2), jamba(5, 6, 5, 1, 0),
                               jamba(9, 2, 1, 4, 3, /*experts=*/1)}) {
    const LayerSchedule s = LayerSchedule::from_config(c);
    ASSERT_EQ(s.size(), c.num_hidden_layers);
    int64_t na = 0, nm = 0, nx = 0;
    for (int64_t i = 0; i < s.size(); ++i) {
      const bool attn = i % c.attn_layer_period == c.attn_layer_offset;
      const bool moe = c.num_experts > 1 && i % c.expert_layer_period == c.expert_layer_offset;
      EXPECT_EQ(s[i].mixer, attn ? MixerKind::Attention : MixerKind::Mamba1) << "layer " << i;
      EXPECT_EQ(s[i].ffn, moe ? FfnKind::MoE : FfnKind::Dense) << "layer " << i;
      EXPECT_EQ(s[i].attn_index, attn ? na++ : -1) << "layer " << i;
      EXPECT_EQ(s[i].ssm_index, attn ? -1 : nm++) << "layer " << i;
      EXPECT_EQ(s[i].moe_index, moe ? nx++ : -1) << "layer " << i;
      // The parameters of the parts a layer has, zero for the others.
      EXPECT_EQ(s[i].attn.heads, attn ? 4 : 0);
      EXPECT_EQ(s[i].attn.head_dim, attn ? 16 : 0);
      EXPECT_EQ(s[i].ssm.d_inner, attn ? 0 : 128);
      EXPECT_EQ(s[i].ssm.d_conv, attn ? 0 : 3);
      EXPECT_EQ(s[i].ffn_params.experts, moe ? c.num_experts : 0);
      EXPECT_EQ(s[i].ffn_params.d_ff, 96);
    }
    EXPECT_EQ(s.num_attention(), na);
    EXPECT_EQ(s.num_ssm(), nm);
    EXPECT_EQ(s.num_moe(), nx);
    EXPECT_EQ(s.num_dense(), s.size() - nx);
    // The per-kind lists name the layers whose index is their position in the list.
    for (size_t j = 0; j < s.attention_layers().size(); ++j) EXPECT_EQ(s[s.attention_layers()[j]].attn_index, int64_t(j));
    for (size_t j = 0; j < s.ssm_layers().size(); ++j) EXPECT_EQ(s[s.ssm_layers()[j]].ssm_index, int64_t(j));
    for (size_t j = 0; j < s.moe_layers().size(); ++j) EXPECT_EQ(s[s.moe_layers()[j]].moe_index, int64_t(j));
  }
}

TEST(LayerSchedule, FromLists_RoundTripsEverySchedule) {
  const LayerSchedule a = LayerSchedule::from_config(jamba(32, 8, 4, 2, 1));
  const LayerSchedule b = LayerSchedule::from_lists(a.mixers(), a.ffns(), a.params());
  EXPECT_EQ(a, b);
  EXPECT_EQ(b.mixer_strip(), "MMMMAMMMMMMMAMMMMMMMAMMMMMMMAMMM");
  EXPECT_EQ(b.ffn_strip(), "DEDEDEDEDEDEDEDEDEDEDEDEDEDEDEDE");
  // A different config with the same schedule compares equal; one more attention layer does not.
  EXPECT_EQ(LayerSchedule::from_config(jamba(4, 5, 4, 2, 1)), LayerSchedule::from_config(jamba(4, 9, 4, 2, 1)));
  EXPECT_NE(LayerSchedule::from_config(jamba(8, 4, 2, 2, 1)), LayerSchedule::from_config(jamba(8, 8, 2, 2, 1)));
}

TEST(LayerSchedule, Describe_OneLineWithTheMixersAndTheMoELayers) {
  EXPECT_EQ(LayerSchedule::from_config(jamba(8, 8, 4, 2, 1)).describe(), "8 layers: M M M M A M M M; MoE at 1,3,5,7");
  EXPECT_EQ(LayerSchedule::from_config(jamba(3, 2, 0, 2, 1, /*experts=*/1)).describe(), "3 layers: A M A; no MoE");
  LayerParams p;
  p.ffn = {16, 4, 1};
  EXPECT_EQ(LayerSchedule::from_lists({MixerKind::Mamba1}, {FfnKind::None}, p).describe(),
            "1 layer: M; no MoE; no FFN at 0");
}

TEST(LayerSchedule, FromLists_HoldsASchedulePeriodOffsetCannotExpress) {
  // Attention at layers 0, 1 and 5 of 6: no (period, offset) places three layers so (two adjacent
  // need period 1, which makes every layer attention). MoE only at layer 2.
  using M = MixerKind;
  using F = FfnKind;
  LayerParams p;
  p.attn = {4, 2, 16};
  p.ssm = {128, 8, 3, 5};
  p.ffn = {96, 4, 2};
  const std::vector<M> mixers = {M::Attention, M::Attention, M::Mamba1, M::Mamba1, M::Mamba1, M::Attention};
  const std::vector<F> ffns = {F::Dense, F::Dense, F::MoE, F::Dense, F::Dense, F::Dense};
  const LayerSchedule s = LayerSchedule::from_lists(mixers, ffns, p);
  bool expressible = false;
  for (int64_t per = 1; per <= 7; ++per)
    for (int64_t off = 0; off < per; ++off)
      expressible |= LayerSchedule::from_config(jamba(6, per, off, 6, 2)).mixers() == mixers;
  EXPECT_FALSE(expressible);
  EXPECT_EQ(s.attention_layers(), (std::vector<int64_t>{0, 1, 5}));
  EXPECT_EQ(s.ssm_layers(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(s[5].attn_index, 2);
  EXPECT_EQ(s[4].ssm_index, 2);
  EXPECT_EQ(s[2].moe_index, 0);
  EXPECT_EQ(s.describe(), "6 layers: A A M M M A; MoE at 2");
}

TEST(LayerSchedule, FromLists_BadListsRefusedWithOneLineErrors) {
  using M = MixerKind;
  using F = FfnKind;
  LayerParams p;
  p.ffn = {96, 4, 2};
  LayerParams oneExpert = p;
  oneExpert.ffn.experts = 1;
  LayerParams topk5 = p;
  topk5.ffn.top_k = 5;
  struct Row {
    const char* defect;
    std::vector<M> mixers;
    std::vector<F> ffns;
    LayerParams params;
    std::string message;
  };
  const std::vector<Row> rows = {
      {"lengths differ", {M::Attention, M::Mamba1}, {F::Dense}, p,
       "layer lists: 2 mixer kinds and 1 FFN kinds, expected one of each per layer"},
      {"no layers", {}, {}, p, "layer lists: no layers, expected at least 1"},
      {"mixer out of range", {M::Mamba1, static_cast<M>(200)}, {F::Dense, F::Dense}, p,
       "layer lists: layer 1: mixer kind 200, expected " + every_mixer_kind()},
      {"FFN out of range", {M::Mamba1}, {static_cast<F>(9)}, p,
       "layer lists: layer 0: FFN kind 9, expected dense (0), moe (1) or none (2)"},
      {"MoE with one expert", {M::Mamba1, M::Mamba1}, {F::Dense, F::MoE}, oneExpert,
       "layer lists: layer 1: an MoE layer with 1 experts, expected at least 2"},
      {"top-k above E", {M::Attention}, {F::MoE}, topk5,
       "layer lists: layer 0: an MoE layer with 5 experts per token, expected 1..4"},
  };
  for (const Row& r : rows) {
    const std::string msg = error_of([&] { LayerSchedule::from_lists(r.mixers, r.ffns, r.params); });
    EXPECT_EQ(msg, r.message) << r.defect;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << r.defect;
  }
  EXPECT_EQ(error_of([&] { LayerSchedule::from_lists({}, {}, p, "config.json"); }),
            "config.json: no layers, expected at least 1");
}

TEST(LayerSchedule, KindNames_ParseBack) {
  for (MixerKind k : {MixerKind::Attention, MixerKind::Mamba1}) {
    MixerKind back{};
    ASSERT_TRUE(parse_mixer_kind(mixer_name(k), &back));
    EXPECT_EQ(back, k);
  }
  for (FfnKind k : {FfnKind::Dense, FfnKind::MoE, FfnKind::None}) {
    FfnKind back{};
    ASSERT_TRUE(parse_ffn_kind(ffn_name(k), &back));
    EXPECT_EQ(back, k);
  }
  MixerKind m{};
  EXPECT_FALSE(parse_mixer_kind("mamba3", &m));
}

TEST(LayerSchedule, JambaPeriodOffset_GivesExactlyTheCountUnderFromConfig) {
  int64_t p = 0, o = 0;
  ASSERT_TRUE(jamba_period_offset(32, 4, &p, &o));
  EXPECT_EQ(p, 8);  // Jamba's own placement
  EXPECT_EQ(o, 4);
  // Whenever it answers, from_config places exactly `count` attention layers; a count dividing L
  // always has an answer. (That it answers whenever some (period, offset) exists is
  // TraceCorruption.ScheduleSearch_EqualsExhaustive_AndIsLinear.)
  for (int64_t L = 1; L <= 40; ++L)
    for (int64_t count = 0; count <= L; ++count) {
      if (!jamba_period_offset(L, count, &p, &o)) {
        EXPECT_NE(L % std::max<int64_t>(count, 1), 0) << L << " " << count;
        continue;
      }
      ASSERT_TRUE(p >= 1 && o >= 0 && o < p) << L << " " << count;
      EXPECT_EQ(LayerSchedule::from_config(jamba(L, p, o, 2, 1)).num_attention(), count) << L << " " << count;
    }
  EXPECT_FALSE(jamba_period_offset(4, 3, &p, &o));  // 1 layer in 4 or 2 in 4, never 3
  EXPECT_FALSE(jamba_period_offset(4, 5, &p, &o));
}
