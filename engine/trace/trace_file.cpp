// Trace writer (trace-format.md §3): one tensor per instrument, the token axis first, layer axes
// of each kind in increasing layer index; tensors whose layer axis would be empty are omitted.
#include "engine/trace/trace_file.h"

#include <string>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace hl {

namespace {
// Stacks a per-record float vector member into (T, dims...) when every record carries it.
template <typename T, typename Get>
bool stack(const std::vector<TokenTrace>& recs, size_t per, Get get, std::vector<T>* out) {
  out->clear();
  out->reserve(recs.size() * per);
  for (const TokenTrace& r : recs) {
    const std::vector<T>& v = get(r);
    if (v.size() != per) return false;
    out->insert(out->end(), v.begin(), v.end());
  }
  return true;
}
}  // namespace

void write_trace(const std::string& path, const Model& model, int n_reg, const std::vector<TokenTrace>& recs,
                 const TraceMeta& meta) {
  const JambaConfig& c = model.config;
  const int64_t T = static_cast<int64_t>(recs.size());
  const LayerSchedule& sched = model.schedule;
  const int64_t An = sched.num_attention(), Mn = sched.num_ssm(), Xn = sched.num_moe(), L = sched.size();
  const int64_t nh = c.num_attention_heads, E = c.num_experts, K = c.num_experts_per_tok;
  const int64_t V = c.vocab_size, Di = c.mamba_inner();
  SafetensorsWriter w;
  w.set_metadata("format_version", "1");
  w.set_metadata("checkpoint", meta.checkpoint);
  w.set_metadata("config_sha256", meta.config_sha256);
  w.set_metadata("normalizer", meta.normalizer);
  w.set_metadata("registers", meta.registers);
  w.set_metadata("adapter", meta.adapter);
  w.set_metadata("backend", meta.backend);
  w.set_metadata("engine_version", HL_VERSION);

  std::vector<int32_t> ids, nonfinite;
  std::vector<int64_t> kv, st;
  for (const TokenTrace& r : recs) {
    ids.push_back(r.token_id);
    nonfinite.push_back(r.nonfinite_layer);
    kv.push_back(r.kv_cache_bytes);
    st.push_back(r.ssm_state_bytes);
  }
  w.add("token_ids", DType::I32, {T}, ids.data(), ids.size() * 4);
  std::vector<float> f;
  std::vector<int32_t> i32;
  auto add_f = [&](const char* name, std::vector<int64_t> shape, size_t per, auto get) {
    if (stack<float>(recs, per, get, &f)) w.add(name, DType::F32, shape, f.data(), f.size() * 4);
  };
  add_f("logits", {T, V}, static_cast<size_t>(V), [](const TokenTrace& r) -> const auto& { return r.logits; });
  if (An > 0) {
    const size_t n = static_cast<size_t>(An * nh);
    add_f("attn_entropy", {T, An, nh}, n, [](const TokenTrace& r) -> const auto& { return r.attn_entropy; });
    add_f("attn_entropy_norm", {T, An, nh}, n, [](const TokenTrace& r) -> const auto& { return r.attn_entropy_norm; });
    add_f("attn_mass", {T, An, nh}, n, [](const TokenTrace& r) -> const auto& { return r.attn_mass; });
    add_f("attn_max_logit", {T, An, nh}, n, [](const TokenTrace& r) -> const auto& { return r.attn_max_logit; });
  }
  if (Mn > 0) {
    add_f("ssm_delta_mean", {T, Mn}, static_cast<size_t>(Mn),
          [](const TokenTrace& r) -> const auto& { return r.ssm_delta_mean; });
  }
  if (Xn > 0) {
    add_f("router_probs", {T, Xn, E}, static_cast<size_t>(Xn * E),
          [](const TokenTrace& r) -> const auto& { return r.router_probs; });
    if (stack<int32_t>(recs, static_cast<size_t>(Xn * K), [](const TokenTrace& r) -> const auto& { return r.router_topk; },
                       &i32))
      w.add("router_topk", DType::I32, {T, Xn, K}, i32.data(), i32.size() * 4);
    add_f("router_lse", {T, Xn}, static_cast<size_t>(Xn), [](const TokenTrace& r) -> const auto& { return r.router_lse; });
  }
  add_f("rank1_distance", {T, L + 1}, static_cast<size_t>(L + 1),
        [](const TokenTrace& r) -> const auto& { return r.rank1_distance; });
  add_f("resid_max_abs", {T, L + 1}, static_cast<size_t>(L + 1),
        [](const TokenTrace& r) -> const auto& { return r.resid_max_abs; });
  w.add("nonfinite_layer", DType::I32, {T}, nonfinite.data(), nonfinite.size() * 4);
  w.add("kv_cache_bytes", DType::I64, {T}, kv.data(), kv.size() * 8);
  w.add("ssm_state_bytes", DType::I64, {T}, st.data(), st.size() * 8);
  if (Mn > 0) {
    const size_t n = static_cast<size_t>(Mn * Di);
    add_f("ssm_delta", {T, Mn, Di}, n, [](const TokenTrace& r) -> const auto& { return r.ssm_delta; });
    add_f("ssm_retained", {T, Mn, Di}, n, [](const TokenTrace& r) -> const auto& { return r.ssm_retained; });
  }
  // attn_rows (T, A_n, nh, n_reg + T + 1): record t holds (A_n, nh, n_reg + t + 2) = keys so far, then p_null.
  if (An > 0 && T > 0 && !recs[0].attn_rows.empty()) {
    const int64_t cols = n_reg + T + 1;
    std::vector<float> rows(static_cast<size_t>(T * An * nh * cols), 0.0f);
    bool ok = true;
    for (int64_t t = 0; t < T && ok; ++t) {
      const int64_t have = n_reg + t + 2;
      const std::vector<float>& src = recs[t].attn_rows;
      if (static_cast<int64_t>(src.size()) != An * nh * have) {
        ok = false;
        break;
      }
      for (int64_t s = 0; s < An * nh; ++s) {
        float* dst = &rows[(t * An * nh + s) * cols];
        std::copy(&src[s * have], &src[s * have] + have - 1, dst);
        dst[cols - 1] = src[s * have + have - 1];
      }
    }
    if (ok) w.add("attn_rows", DType::F32, {T, An, nh, cols}, rows.data(), rows.size() * 4);
  }
  w.write(path);
}

}  // namespace hl
