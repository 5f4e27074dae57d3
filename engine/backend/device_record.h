// One token's record in a device backend's record buffer (Vulkan, CUDA), written once for both:
// where each instrument sits (plan_device_record) and how a block of records is read back into
// TokenTraces (read_device_records), both driven by the trace field table (trace_fields.h). Not
// the kernels that write them (vk_record.cpp, cuda_forward.cpp) nor the sizing of a fresh
// TokenTrace (init_token_trace, token_trace.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/backend/backend_util.h"
#include "engine/model/token_trace.h"
#include "engine/probes/rank1.h"
#include "engine/trace/trace_fields.h"

namespace hl {

// Float offsets inside one token's record (absent parts: 0 and unused). T is the offset type the
// kernels take: uint32_t (Vulkan push constants) or int64_t (CUDA). The fields sit in the order of
// the trace field table (trace_fields.h); `at` holds each row's offset, the named offsets below
// are the kernels' names for the rows they write.
template <class T>
struct DeviceRecordLayout {
  std::vector<T> at;                             // per row of trace_fields(): offset of its values
  T logits = 0, nonfinite = 0;                   // (V,), (L+1,) flags: nonzero where layer c-1's output is non-finite
  T resid_max = 0;                               // (L+1,)
  T rank1 = 0;                                   // (L+1,) rank-to-1 distances, when the device computes them
  T resid_rows = 0;                              // (L+1, H) residual rows, when the host computes the distances
  T attn = 0;                                    // entropy | entropy_norm | mass | max_logit, each (A_n·nh)
  T dmean = 0, rprobs = 0, rtopk = 0, rlse = 0;  // (M_n,), (X_n, E), (X_n, k) int bits, (X_n,)
  T sdelta = 0, sret = 0;                        // full: (M_n, Di) each
  T arows = 0, arow_stride = 0;                  // full: (A_n·nh, arow_stride), keys then p_null
  T stride = 0;                                  // floats per record
  bool rank1_on_host = false;                    // resid_rows instead of rank1
};

// Row of a field in trace_fields() (the name is one of the table's).
inline size_t trace_field_row(const char* name) {
  return static_cast<size_t>(find_trace_field(name) - trace_fields().data());
}

// The layout for a run of a model with schedule `sched` under `opts`, attention
// rows as wide as a KV cache of kv_cap rows (+1 for p_null), the stride rounded up to `align`
// floats. rank1_on_host: the device writes the residual rows and the host's Rank1Tracker turns
// them into distances (Vulkan) instead of writing the distances (CUDA). Returns the layout's total
// floats before alignment in *floats (for the device's binding limit).
template <class T>
DeviceRecordLayout<T> plan_device_record(const JambaConfig& c, const LayerSchedule& sched, const RunOptions& opts,
                                         int64_t kv_cap, bool rank1_on_host, int64_t align, uint64_t* floats = nullptr) {
  const uint64_t L = c.num_hidden_layers, H = c.hidden_size;
  const TraceDims d = TraceDims::of(c, sched);
  const std::vector<TraceField>& fields = trace_fields();
  DeviceRecordLayout<T> r;
  r.rank1_on_host = rank1_on_host;
  r.at.assign(fields.size(), 0);
  uint64_t o = 0;
  auto take = [&](T* at, uint64_t n) {
    *at = static_cast<T>(o);
    o += n;
  };
  // Every field a record of this run carries, each once in table order. Three differ from the
  // table's per-token shape: nonfinite_layer is (L+1,) per-layer flags the host reduces to the
  // first layer; rank1_distance on the host's side is the (L+1, H) residual rows (Vulkan);
  // attn_rows has room for the whole KV cache (the kernels write every row at a fixed stride).
  for (size_t i = 0; i < fields.size(); ++i) {
    const TraceField& f = fields[i];
    if (f.i32 == &TokenTrace::nonfinite_layer) take(&r.nonfinite, L + 1);
    if (f.shape == FieldShape::Scalar || !carried(f, opts)) continue;
    const uint64_t n = static_cast<uint64_t>(token_size(f, d));
    if (f.shape == FieldShape::Ragged) {
      r.arow_stride = static_cast<T>(kv_cap + 1);
      take(&r.at[i], n * static_cast<uint64_t>(r.arow_stride));
    } else if (rank1_on_host && f.fvec == &TokenTrace::rank1_distance) {
      take(&r.resid_rows, (L + 1) * H);
    } else {
      take(&r.at[i], n);
    }
  }
  auto at = [&](const char* name) { return r.at[trace_field_row(name)]; };
  r.logits = at("logits");
  r.resid_max = at("resid_max_abs");
  r.rank1 = at("rank1_distance");
  r.attn = at("attn_entropy");  // the three rows after it follow at attn + an, + 2an, + 3an
  r.dmean = at("ssm_delta_mean");
  r.rprobs = at("router_probs");
  r.rtopk = at("router_topk");
  r.rlse = at("router_lse");
  r.sdelta = at("ssm_delta");
  r.sret = at("ssm_retained");
  r.arows = at("attn_rows");
  if (floats) *floats = o;
  const uint64_t a = static_cast<uint64_t>(align > 0 ? align : 1);
  r.stride = static_cast<T>((o + a - 1) / a * a);
  return r;
}

// Reads S records from `base` (S × l.stride floats) into recs (sized by init_token_trace): the
// logits, the non-finite flags (nonfinite_layer, then flag_nonfinite_head for the final norm and
// the LM head), and with the instruments every instrument, row by row of the field table; the
// rank-to-1 distances from the record or, when l.rank1_on_host, from (*host_rank1)[c].add(residual
// row c); attn_rows from their fixed stride.
template <class T>
void read_device_records(const float* base, int64_t S, const DeviceRecordLayout<T>& l, const Model& m,
                         const RunOptions& opts, int n_reg, TokenTrace* recs,
                         std::vector<Rank1Tracker>* host_rank1 = nullptr) {
  const int64_t L = m.config.num_hidden_layers, H = m.config.hidden_size;
  const size_t an = static_cast<size_t>(m.schedule.num_attention() * m.config.num_attention_heads);
  const std::vector<TraceField>& fields = trace_fields();
  auto copy = [](const float* src, auto& dst) {
    if (!dst.empty()) std::memcpy(dst.data(), src, dst.size() * 4);  // router_topk: int32 bits stored as floats
  };
  for (int64_t s = 0; s < S; ++s) {
    const float* r = base + s * static_cast<int64_t>(l.stride);
    TokenTrace& t = recs[s];
    for (int64_t c = 1; c <= L; ++c)
      if (r[l.nonfinite + c] != 0.0f) {
        t.nonfinite_layer = static_cast<int32_t>(c - 1);
        break;
      }
    for (size_t i = 0; i < fields.size(); ++i) {
      const TraceField& f = fields[i];
      if (f.shape != FieldShape::Vector || !carried(f, opts)) continue;
      if (l.rank1_on_host && f.fvec == &TokenTrace::rank1_distance) {
        for (int64_t c = 0; c <= L; ++c) t.rank1_distance[c] = (*host_rank1)[c].add(r + l.resid_rows + c * H);
      } else if (f.fvec) {
        copy(r + l.at[i], t.*f.fvec);
      } else {
        copy(r + l.at[i], t.*f.ivec);
      }
    }
    flag_nonfinite_head(t, m, opts);  // L: the final norm, L + 1: the LM head (after the logits are read)
    if (!opts.instruments || !opts.full) continue;
    const size_t row = static_cast<size_t>(n_reg + t.position + 2);  // keys, then p_null
    for (size_t slot = 0; slot < an; ++slot)
      std::memcpy(&t.attn_rows[slot * row], r + l.arows + slot * static_cast<size_t>(l.arow_stride), row * 4);
  }
}

}  // namespace hl
