// The field table of session runs (session_layout.h): TokenTrace members ↔ tensor names and
// per-token shapes. Order and names follow trace-format.md §3, plus `position` (t of each record).
#include "sessions/session_layout.h"

namespace hl::session_layout {

namespace {
using TT = TokenTrace;
Field scalar32(const char* name, int32_t TT::*m, const char* dims) {
  return {name, FieldType::Int32, FieldShape::Scalar, false, nullptr, nullptr, m, nullptr, dims};
}
Field scalar64(const char* name, int64_t TT::*m, const char* dims) {
  return {name, FieldType::Int64, FieldShape::Scalar, false, nullptr, nullptr, nullptr, m, dims};
}
Field floats(const char* name, std::vector<float> TT::*m, const char* dims, bool full = false,
             FieldShape shape = FieldShape::Vector) {
  return {name, FieldType::Float, shape, full, m, nullptr, nullptr, nullptr, dims};
}
Field ints(const char* name, std::vector<int32_t> TT::*m, const char* dims) {
  return {name, FieldType::Int32, FieldShape::Vector, false, nullptr, m, nullptr, nullptr, dims};
}
}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      scalar32("token_ids", &TT::token_id, "()"),
      scalar32("position", &TT::position, "()"),
      floats("logits", &TT::logits, "(V)"),
      floats("attn_entropy", &TT::attn_entropy, "(A_n, nh)"),
      floats("attn_entropy_norm", &TT::attn_entropy_norm, "(A_n, nh)"),
      floats("attn_mass", &TT::attn_mass, "(A_n, nh)"),
      floats("attn_max_logit", &TT::attn_max_logit, "(A_n, nh)"),
      floats("ssm_delta_mean", &TT::ssm_delta_mean, "(M_n)"),
      floats("router_probs", &TT::router_probs, "(X_n, E)"),
      ints("router_topk", &TT::router_topk, "(X_n, k)"),
      floats("router_lse", &TT::router_lse, "(X_n)"),
      floats("rank1_distance", &TT::rank1_distance, "(L+1)"),
      floats("resid_max_abs", &TT::resid_max_abs, "(L+1)"),
      scalar32("nonfinite_layer", &TT::nonfinite_layer, "()"),
      scalar64("kv_cache_bytes", &TT::kv_cache_bytes, "()"),
      scalar64("ssm_state_bytes", &TT::ssm_state_bytes, "()"),
      floats("ssm_delta", &TT::ssm_delta, "(M_n, Di)", true),
      floats("ssm_retained", &TT::ssm_retained, "(M_n, Di)", true),
      floats("attn_rows", &TT::attn_rows, "(A_n, nh, n_reg + T + 1)", true, FieldShape::Ragged),
  };
  return table;
}

const Field* find_field(const std::string& name) {
  for (const Field& f : fields())
    if (name == f.name) return &f;
  return nullptr;
}

std::vector<int64_t> token_dims(const Field& f, const TraceDims& d) {
  const std::string n = f.name;
  if (f.shape == FieldShape::Scalar) return {};
  if (n == "logits") return {d.V};
  if (n == "attn_entropy" || n == "attn_entropy_norm" || n == "attn_mass" || n == "attn_max_logit") return {d.An, d.nh};
  if (n == "ssm_delta_mean") return {d.Mn};
  if (n == "router_probs") return {d.Xn, d.E};
  if (n == "router_topk") return {d.Xn, d.K};
  if (n == "router_lse") return {d.Xn};
  if (n == "rank1_distance" || n == "resid_max_abs") return {d.L1};
  if (n == "ssm_delta" || n == "ssm_retained") return {d.Mn, d.Di};
  if (n == "attn_rows") return {d.An, d.nh};  // the key axis depends on t and n_reg
  return {};
}

int64_t token_size(const Field& f, const TraceDims& d) {
  int64_t n = 1;
  for (int64_t x : token_dims(f, d)) n *= x;  // config ranges keep these products far from overflow
  return n;
}

bool valid_label(const std::string& label) {
  if (label.empty() || label.size() > 32 || label == "." || label == "..") return false;
  for (char c : label) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace hl::session_layout
