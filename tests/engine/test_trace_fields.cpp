// The table of trace fields (engine/trace/trace_fields.h) against TokenTrace itself: every member
// once, no vector member left out, a record sized by init_token_trace against counts taken
// directly from the layer schedule, and a reused record sized again without reallocating.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/layer_schedule.h"
#include "engine/model/token_trace.h"
#include "engine/trace/trace_fields.h"

using namespace hl;

namespace {

// Jamba-style config: 6 layers, attention every 3rd from 1 (layers 1, 4), MoE every 2nd from 1.
JambaConfig small_config() {
  JambaConfig c;
  c.num_hidden_layers = 6;
  c.attn_layer_period = 3;
  c.attn_layer_offset = 1;
  c.expert_layer_period = 2;
  c.expert_layer_offset = 1;
  c.num_experts = 5;
  c.num_experts_per_tok = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.intermediate_size = 24;
  c.mamba_expand = 2;
  c.mamba_d_state = 4;
  c.mamba_d_conv = 3;
  c.mamba_dt_rank = 2;
  c.vocab_size = 37;
  return c;
}

// Byte range of a member inside a TokenTrace.
template <class M>
std::pair<size_t, size_t> span_of(M TokenTrace::*m) {
  static const TokenTrace r{};
  const size_t at = static_cast<size_t>(reinterpret_cast<const char*>(&(r.*m)) - reinterpret_cast<const char*>(&r));
  return {at, at + sizeof(M)};
}

// The bytes of the member a row reaches.
std::pair<size_t, size_t> span(const TraceField& f) {
  return f.fvec ? span_of(f.fvec) : f.ivec ? span_of(f.ivec) : f.i32 ? span_of(f.i32) : f.f32 ? span_of(f.f32) : span_of(f.i64);
}

}  // namespace

TEST(TraceFields, EachMemberAndNameOnce) {
  std::set<std::string> names;
  std::set<size_t> offsets;
  for (const TraceField& f : trace_fields()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    const int members =
        (f.fvec != nullptr) + (f.ivec != nullptr) + (f.i32 != nullptr) + (f.i64 != nullptr) + (f.f32 != nullptr);
    EXPECT_EQ(members, 1) << f.name;
    const size_t at = span(f).first;
    // Derived fields are float scalars of the logits, optional in trace files (older ones lack them).
    if (f.derive) EXPECT_TRUE(f.f32 && f.optional && f.set == FieldSet::Instruments) << f.name;
    EXPECT_EQ(f.f32 != nullptr, f.type == FieldType::Float && f.shape == FieldShape::Scalar) << f.name;
    EXPECT_TRUE(offsets.insert(at).second) << f.name << " reaches a member another row reaches";
    if (f.shape == FieldShape::Scalar) EXPECT_EQ(f.rank, 0) << f.name;  // a Vector of rank 0: one value a token
    EXPECT_EQ(f.shape == FieldShape::Scalar, f.fvec == nullptr && f.ivec == nullptr) << f.name;
    EXPECT_EQ(f.full, f.set == FieldSet::Full) << f.name;
    EXPECT_EQ(find_trace_field(f.name), &f);
  }
  EXPECT_EQ(find_trace_field("no_such_field"), nullptr);
}

// A vector member added to TokenTrace without a table row leaves a gap as wide as a vector between
// the members the table reaches (step_seconds, the one member no file stores, counted too).
TEST(TraceFields, NoTokenTraceMemberLeftOut) {
  std::vector<std::pair<size_t, size_t>> spans = {span_of(&TokenTrace::step_seconds)};
  for (const TraceField& f : trace_fields())
    spans.push_back(span(f));
  std::sort(spans.begin(), spans.end());
  size_t end = 0;
  for (const auto& [a, b] : spans) {
    EXPECT_LT(a - end, sizeof(std::vector<int32_t>)) << "unlisted bytes [" << end << ", " << a << ") of TokenTrace";
    end = b;
  }
  EXPECT_LT(sizeof(TokenTrace) - end, sizeof(std::vector<int32_t>)) << "unlisted bytes after offset " << end;
}

TEST(TraceFields, SymbolsAreTheScheduleCountsAndConfigSizes) {
  const JambaConfig c = small_config();
  const LayerSchedule s = LayerSchedule::from_config(c);
  int64_t attn = 0, ssm = 0, moe = 0;
  for (int64_t i = 0; i < s.size(); ++i) {
    attn += s[i].has_attention();
    ssm += s[i].has_ssm();
    moe += s[i].is_moe();
  }
  ASSERT_EQ(attn, 2);  // layers 1 and 4 of period 3, offset 1
  ASSERT_EQ(moe, 3);   // layers 1, 3, 5 of period 2, offset 1
  const TraceDims d = TraceDims::of(c, s);
  EXPECT_EQ(d[TraceSym::V], 37);
  EXPECT_EQ(d[TraceSym::An], attn);
  EXPECT_EQ(d[TraceSym::nh], 4);
  EXPECT_EQ(d[TraceSym::Mn], ssm);
  EXPECT_EQ(d[TraceSym::Di], 32);  // mamba_expand · hidden_size
  EXPECT_EQ(d[TraceSym::Xn], moe);
  EXPECT_EQ(d[TraceSym::E], 5);
  EXPECT_EQ(d[TraceSym::K], 2);
  EXPECT_EQ(d[TraceSym::L1], 7);
}

TEST(TraceFields, InitSizesEveryCarriedFieldFromTheSchedule) {
  const JambaConfig c = small_config();
  const LayerSchedule s = LayerSchedule::from_config(c);
  const int64_t A = static_cast<int64_t>(s.attention_layers().size()), M = static_cast<int64_t>(s.ssm_layers().size());
  const int64_t X = static_cast<int64_t>(s.moe_layers().size()), nh = 4, n_reg = 3, t = 5;
  // Independent of the table: the per-token sizes trace-format.md §3 gives each member.
  const std::vector<std::pair<const char*, size_t>> want = {
      {"logits", 37},          {"attn_entropy", A * nh}, {"attn_entropy_norm", A * nh}, {"attn_mass", A * nh},
      {"attn_max_logit", A * nh}, {"ssm_delta_mean", M}, {"router_probs", X * 5},       {"router_topk", X * 2},
      {"router_lse", X},       {"rank1_distance", 7},    {"resid_max_abs", 7},          {"ssm_delta", M * 32},
      {"ssm_retained", M * 32}, {"attn_rows", A * nh * (n_reg + t + 2)}};
  auto size_of = [](const TokenTrace& r, const TraceField& f) {
    return f.fvec ? (r.*f.fvec).size() : (r.*f.ivec).size();
  };
  for (const bool instruments : {false, true})
    for (const bool full : {false, true}) {
      RunOptions o;
      o.instruments = instruments;
      o.full = full;
      TokenTrace r;
      init_token_trace(r, c, s, n_reg, o, 11, t);
      EXPECT_EQ(r.token_id, 11);
      EXPECT_EQ(r.position, 5);
      EXPECT_EQ(r.nonfinite_layer, -1);
      for (const auto& [name, n] : want) {
        const TraceField* f = find_trace_field(name);
        ASSERT_NE(f, nullptr) << name;
        const bool carried = f->set == FieldSet::Always || (instruments && (f->set == FieldSet::Instruments || full));
        EXPECT_EQ(size_of(r, *f), carried ? n : 0) << name << " instruments=" << instruments << " full=" << full;
      }
    }
}

// Backends reuse one record per step: sizing it again for an earlier position keeps every buffer.
TEST(TraceFields, ReusedRecordIsSizedWithoutReallocating) {
  const JambaConfig c = small_config();
  const LayerSchedule s = LayerSchedule::from_config(c);
  RunOptions o;
  o.full = true;
  TokenTrace r;
  init_token_trace(r, c, s, 0, o, 1, 9);
  std::vector<const void*> before;
  for (const TraceField& f : trace_fields())
    if (f.fvec || f.ivec) before.push_back(f.fvec ? static_cast<const void*>((r.*f.fvec).data()) : (r.*f.ivec).data());
  r.attn_rows[0] = 1.0f;
  init_token_trace(r, c, s, 0, o, 2, 4);
  size_t i = 0;
  for (const TraceField& f : trace_fields())
    if (f.fvec || f.ivec)
      EXPECT_EQ(before[i++], f.fvec ? static_cast<const void*>((r.*f.fvec).data()) : (r.*f.ivec).data()) << f.name;
  EXPECT_EQ(r.attn_rows.size(), static_cast<size_t>(2 * 4 * (4 + 2)));
  EXPECT_EQ(r.attn_rows[0], 0.0f);  // zero-filled again
}
