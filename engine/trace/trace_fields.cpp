// The table of trace fields (trace_fields.h): TokenTrace members ↔ tensor names, dtypes and
// per-token shapes. Order and names follow trace-format.md §3. Adding a per-token instrument is
// one row here plus the code that computes it.
#include "engine/trace/trace_fields.h"

#include <cstring>

#include "engine/probes/logit_probe.h"

namespace hl {

TraceDims TraceDims::of(const JambaConfig& c, const LayerSchedule& s) {
  TraceDims d;
  d.V = c.vocab_size;
  d.An = s.num_attention();
  d.nh = c.num_attention_heads;
  d.Mn = s.num_ssm();
  d.Di = c.mamba_inner();
  d.Xn = s.num_moe();
  d.E = c.num_experts;
  d.K = c.num_experts_per_tok;
  d.L1 = s.size() + 1;
  return d;
}

int64_t TraceDims::operator[](TraceSym s) const {
  switch (s) {
    case TraceSym::V: return V;
    case TraceSym::An: return An;
    case TraceSym::nh: return nh;
    case TraceSym::Mn: return Mn;
    case TraceSym::Di: return Di;
    case TraceSym::Xn: return Xn;
    case TraceSym::E: return E;
    case TraceSym::K: return K;
    case TraceSym::L1: return L1;
  }
  return 0;
}

namespace {
using TT = TokenTrace;
using S = TraceSym;
TraceField scalar32(const char* name, int32_t TT::*m, bool in_trace = true) {
  return {name, FieldType::Int32, FieldShape::Scalar, FieldSet::Always, false, in_trace, nullptr, nullptr, m, nullptr,
          nullptr, 0, {S::V, S::V}, "()", false, nullptr};
}
TraceField scalar64(const char* name, int64_t TT::*m) {
  return {name, FieldType::Int64, FieldShape::Scalar, FieldSet::Always, false, true, nullptr, nullptr, nullptr, m,
          nullptr, 0, {S::V, S::V}, "()", false, nullptr};
}
// A float a token derived from its logits on the host (TraceField::derive) with the instruments;
// optional in trace files.
TraceField derived(const char* name, float TT::*m, void (*derive)(TokenTrace&)) {
  return {name, FieldType::Float, FieldShape::Scalar, FieldSet::Instruments, false, true, nullptr, nullptr, nullptr, nullptr,
          m, 0, {S::V, S::V}, "()", true, derive};
}
TraceField floats(const char* name, std::vector<float> TT::*m, FieldSet set, S d0, const char* text) {
  return {name, FieldType::Float, FieldShape::Vector, set, false, true, m, nullptr, nullptr, nullptr,
          nullptr, 1, {d0, d0}, text, false, nullptr};
}
TraceField floats2(const char* name, std::vector<float> TT::*m, FieldSet set, S d0, S d1, const char* text,
              FieldShape shape = FieldShape::Vector) {
  return {name, FieldType::Float, shape, set, set == FieldSet::Full, true, m, nullptr, nullptr, nullptr,
          nullptr, 2, {d0, d1}, text, false, nullptr};
}
TraceField ints2(const char* name, std::vector<int32_t> TT::*m, S d0, S d1, const char* text) {
  return {name, FieldType::Int32, FieldShape::Vector, FieldSet::Instruments, false, true, nullptr, m, nullptr, nullptr,
          nullptr, 2, {d0, d1}, text, false, nullptr};
}
constexpr FieldSet kAlways = FieldSet::Always, kInstr = FieldSet::Instruments, kFull = FieldSet::Full;
}  // namespace

const std::vector<TraceField>& trace_fields() {
  static const std::vector<TraceField> table = {
      scalar32("token_ids", &TT::token_id),
      scalar32("position", &TT::position, false),
      floats("logits", &TT::logits, kAlways, S::V, "(V)"),
      derived("logit_entropy", &TT::logit_entropy,
              [](TokenTrace& r) { r.logit_entropy = next_token_entropy_pooled(r.logits.data(), r.logits.size()); }),
      floats2("attn_entropy", &TT::attn_entropy, kInstr, S::An, S::nh, "(A_n, nh)"),
      floats2("attn_entropy_norm", &TT::attn_entropy_norm, kInstr, S::An, S::nh, "(A_n, nh)"),
      floats2("attn_mass", &TT::attn_mass, kInstr, S::An, S::nh, "(A_n, nh)"),
      floats2("attn_max_logit", &TT::attn_max_logit, kInstr, S::An, S::nh, "(A_n, nh)"),
      floats("ssm_delta_mean", &TT::ssm_delta_mean, kInstr, S::Mn, "(M_n)"),
      floats2("router_probs", &TT::router_probs, kInstr, S::Xn, S::E, "(X_n, E)"),
      ints2("router_topk", &TT::router_topk, S::Xn, S::K, "(X_n, k)"),
      floats("router_lse", &TT::router_lse, kInstr, S::Xn, "(X_n)"),
      floats("rank1_distance", &TT::rank1_distance, kInstr, S::L1, "(L+1)"),
      floats("resid_max_abs", &TT::resid_max_abs, kInstr, S::L1, "(L+1)"),
      scalar32("nonfinite_layer", &TT::nonfinite_layer),
      scalar64("kv_cache_bytes", &TT::kv_cache_bytes),
      scalar64("ssm_state_bytes", &TT::ssm_state_bytes),
      floats2("ssm_delta", &TT::ssm_delta, kFull, S::Mn, S::Di, "(M_n, Di)"),
      floats2("ssm_retained", &TT::ssm_retained, kFull, S::Mn, S::Di, "(M_n, Di)"),
      floats2("attn_rows", &TT::attn_rows, kFull, S::An, S::nh, "(A_n, nh, n_reg + T + 1)", FieldShape::Ragged),
  };
  return table;
}

const TraceField* find_trace_field(const char* name) {
  for (const TraceField& f : trace_fields())
    if (std::strcmp(name, f.name) == 0) return &f;
  return nullptr;
}

std::vector<int64_t> token_dims(const TraceField& f, const TraceDims& d) {
  std::vector<int64_t> out;
  for (uint8_t i = 0; i < f.rank; ++i) out.push_back(d[f.dims[i]]);
  return out;
}

int64_t token_size(const TraceField& f, const TraceDims& d) {
  int64_t n = 1;
  for (uint8_t i = 0; i < f.rank; ++i) n *= d[f.dims[i]];  // config ranges keep these products far from overflow
  return n;
}

}  // namespace hl
