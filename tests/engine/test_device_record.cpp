// The device record shared by the Vulkan and CUDA backends (device_record.h): the layout packs
// every instrument of trace-format.md §3 once, without gaps or overlaps, in the sizes
// init_token_trace gives a record; reading a block back puts every float where the layout says,
// the rank-to-1 distances from the record (CUDA) or from the host's tracker over the recorded
// residual rows (Vulkan). Checked on synthetic buffers: no device needed. Label `cpu`.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "engine/backend/device_record.h"

namespace hl {
namespace {

// L 3, H 4, V 5, nh 2, E 3, k 2, Di 8; one attention, two Mamba, one MoE layer; one register.
struct RecordCase {
  Model m;
  RunOptions opts;
  int64_t A = 1, M = 2, X = 1, kv_cap = 4;
  int n_reg = 1;
  RecordCase() {
    JambaConfig& c = m.config;
    c.num_hidden_layers = 3;
    c.hidden_size = 4;
    c.vocab_size = 5;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 2;
    c.num_experts = 3;
    c.num_experts_per_tok = 2;
    c.mamba_expand = 2;
    c.attn_layer_period = c.expert_layer_period = 3;  // attention and MoE at layer 0
    c.attn_layer_offset = c.expert_layer_offset = 0;
    m.schedule = LayerSchedule::from_config(c);
    EXPECT_EQ(m.schedule.num_attention(), A);
    EXPECT_EQ(m.schedule.num_ssm(), M);
    EXPECT_EQ(m.schedule.num_moe(), X);
    opts.instruments = true;
    opts.full = true;
  }
};

// Value k of a synthetic record buffer: distinct and exactly representable.
float value(int64_t k) {
  return 0.25f * static_cast<float>(k % 4096) + 1.0f;
}

TEST(DeviceRecord, LayoutPacksEveryFieldOnceInOrder) {
  const RecordCase s;
  const JambaConfig& c = s.m.config;
  const int64_t L = 3, H = 4, V = 5, nh = 2, E = 3, K = 2, Di = 8, an = s.A * nh;
  uint64_t floats = 0;
  const auto l = plan_device_record<int64_t>(c, s.m.schedule, s.opts, s.kv_cap, false, 4, &floats);
  // Each part with its size from the trace contract's shapes, in the trace field table's order.
  const std::vector<std::pair<int64_t, int64_t>> parts = {
      {l.logits, V},    {l.attn, an},     {l.at[trace_field_row("attn_entropy_norm")], an},
      {l.at[trace_field_row("attn_mass")], an}, {l.at[trace_field_row("attn_max_logit")], an},
      {l.dmean, s.M},   {l.rprobs, s.X * E}, {l.rtopk, s.X * K}, {l.rlse, s.X},
      {l.rank1, L + 1}, {l.resid_max, L + 1}, {l.nonfinite, L + 1}, {l.sdelta, s.M * Di}, {l.sret, s.M * Di},
      {l.arows, an * (s.kv_cap + 1)}};
  int64_t end = 0;
  for (const auto& [at, n] : parts) {  // packed: each part starts where the one before ends
    EXPECT_EQ(at, end);
    end = at + n;
  }
  EXPECT_EQ(l.arow_stride, s.kv_cap + 1);
  EXPECT_EQ(static_cast<int64_t>(floats), end);
  EXPECT_EQ(l.stride, (end + 3) / 4 * 4);
  const auto h = plan_device_record<uint32_t>(c, s.m.schedule, s.opts, s.kv_cap, true, 1, &floats);
  EXPECT_EQ(static_cast<int64_t>(floats), end - (L + 1) + (L + 1) * H);  // residual rows instead
  EXPECT_EQ(static_cast<int64_t>(h.stride), static_cast<int64_t>(floats));
  EXPECT_EQ(static_cast<int64_t>(h.resid_max), static_cast<int64_t>(h.resid_rows) + (L + 1) * H);
  RunOptions bare = s.opts;
  bare.instruments = false;  // the logits and the flags only
  const auto b = plan_device_record<int64_t>(c, s.m.schedule, bare, s.kv_cap, false, 1);
  EXPECT_EQ(b.stride, V + L + 1);
  EXPECT_EQ(b.nonfinite, V);
}

// The kernels write the four attention statistics at attn, attn + an, + 2an, + 3an (an = A_n·nh):
// the layout only names the first, so the other three must follow it in the field table's order.
TEST(DeviceRecord, AttentionStatisticsFollowEachOtherAsTheKernelsWriteThem) {
  const RecordCase s;
  const int64_t an = s.A * s.m.config.num_attention_heads;
  for (const bool host : {false, true}) {
    const auto l = plan_device_record<int64_t>(s.m.config, s.m.schedule, s.opts, s.kv_cap, host, 4);
    const char* rows[] = {"attn_entropy", "attn_entropy_norm", "attn_mass", "attn_max_logit"};
    for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(l.at[trace_field_row(rows[k])], l.attn + k * an) << rows[k];
  }
}

TEST(DeviceRecord, ReadBackPutsEveryFloatWhereTheLayoutSays) {
  RecordCase s;
  const JambaConfig& c = s.m.config;
  const int64_t L = 3, H = 4, an = 2;
  for (const bool host : {false, true}) {
    const auto l = plan_device_record<int64_t>(c, s.m.schedule, s.opts, s.kv_cap, host, 4);
    const int64_t S = 2;
    std::vector<float> buf(static_cast<size_t>(S * l.stride));
    for (size_t k = 0; k < buf.size(); ++k) buf[k] = value(static_cast<int64_t>(k));
    for (int64_t t = 0; t < S; ++t)  // the flags: layer 1's output non-finite in token 1 only
      for (int64_t f = 0; f <= L; ++f) buf[t * l.stride + l.nonfinite + f] = (t == 1 && f == 2) ? 1.0f : 0.0f;
    std::vector<int32_t> topk(static_cast<size_t>(S * 2));
    for (int64_t t = 0; t < S; ++t)
      for (int64_t j = 0; j < 2; ++j) {  // router_topk: int32 bits in the float slots
        const int32_t e = static_cast<int32_t>((t + j) % 3);
        topk[t * 2 + j] = e;
        std::memcpy(&buf[t * l.stride + l.rtopk + j], &e, 4);
      }
    std::vector<TokenTrace> recs(static_cast<size_t>(S));
    for (int64_t t = 0; t < S; ++t) init_token_trace(recs[t], c, s.m.schedule, s.n_reg, s.opts, 7, t);
    std::vector<Rank1Tracker> trackers(static_cast<size_t>(L + 1), Rank1Tracker(H)), check = trackers;
    read_device_records(buf.data(), S, l, s.m, s.opts, s.n_reg, recs.data(), &trackers);
    for (int64_t t = 0; t < S; ++t) {
      const TokenTrace& r = recs[t];
      const int64_t o = t * l.stride;
      SCOPED_TRACE(testing::Message() << (host ? "host" : "device") << " rank-1, token " << t);
      EXPECT_EQ(r.nonfinite_layer, t == 1 ? 1 : -1);
      for (size_t i = 0; i < r.logits.size(); ++i) EXPECT_EQ(r.logits[i], value(o + l.logits + i));
      for (int64_t i = 0; i <= L; ++i) {
        EXPECT_EQ(r.resid_max_abs[i], value(o + l.resid_max + i));
        const float want = host ? check[i].add(&buf[o + l.resid_rows + i * H]) : value(o + l.rank1 + i);
        EXPECT_FLOAT_EQ(r.rank1_distance[i], want);
      }
      for (int64_t i = 0; i < an; ++i) {
        EXPECT_EQ(r.attn_entropy[i], value(o + l.attn + i));
        EXPECT_EQ(r.attn_entropy_norm[i], value(o + l.attn + an + i));
        EXPECT_EQ(r.attn_mass[i], value(o + l.attn + 2 * an + i));
        EXPECT_EQ(r.attn_max_logit[i], value(o + l.attn + 3 * an + i));
      }
      for (int64_t i = 0; i < s.M; ++i) EXPECT_EQ(r.ssm_delta_mean[i], value(o + l.dmean + i));
      for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(r.router_probs[i], value(o + l.rprobs + i));
      EXPECT_EQ(r.router_topk, std::vector<int32_t>(topk.begin() + t * 2, topk.begin() + t * 2 + 2));
      EXPECT_EQ(r.router_lse[0], value(o + l.rlse));
      for (int64_t i = 0; i < s.M * 8; ++i) {
        EXPECT_EQ(r.ssm_delta[i], value(o + l.sdelta + i));
        EXPECT_EQ(r.ssm_retained[i], value(o + l.sret + i));
      }
      const int64_t row = s.n_reg + t + 2;  // keys so far, then p_null
      ASSERT_EQ(static_cast<int64_t>(r.attn_rows.size()), an * row);
      for (int64_t slot = 0; slot < an; ++slot)
        for (int64_t j = 0; j < row; ++j)
          EXPECT_EQ(r.attn_rows[slot * row + j], value(o + l.arows + slot * l.arow_stride + j));
    }
  }
}

}  // namespace
}  // namespace hl
