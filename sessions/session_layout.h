// The per-token fields of a session run: one row per TokenTrace member, its tensor name, element
// type and per-token shape from the config (trace-format.md §3 names and shapes). Shared by the
// session writer, reader and compare. Internal to sessions/: not part of the file's public API.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/token_trace.h"

namespace hl::session_layout {

// Sizes of one model's trace axes (trace-format.md §2 notation): the layer axes are the schedule's
// counts, the others the config's sizes.
struct TraceDims {
  int64_t V = 0, An = 0, nh = 0, Mn = 0, Di = 0, Xn = 0, E = 0, K = 0, L1 = 0;
  static TraceDims of(const JambaConfig& c, const LayerSchedule& s) {
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
};

enum class FieldType : uint8_t { Float, Int32, Int64 };
enum class FieldShape : uint8_t { Scalar, Vector, Ragged };  // Ragged: attn_rows only

struct Field {
  const char* name;  // tensor name after "runs/<label>/"
  FieldType type;
  FieldShape shape;
  bool full;  // a --full field (ssm_delta, ssm_retained, attn_rows): stored at SessionSaveOptions::full_dtype
  std::vector<float> TokenTrace::*fvec;
  std::vector<int32_t> TokenTrace::*ivec;
  int32_t TokenTrace::*i32;
  int64_t TokenTrace::*i64;
  const char* dims_text;  // per-token shape in words, for messages: "(A_n, nh)"
};

// Every field in file order. Scalars (token_ids, position, nonfinite_layer, kv_cache_bytes,
// ssm_state_bytes) are always stored; vector fields are stored when a record carries them.
const std::vector<Field>& fields();
const Field* find_field(const std::string& name);

// Per-token shape of a Vector field: "logits" → {V}, "attn_entropy" → {A_n, nh}, ...
std::vector<int64_t> token_dims(const Field& f, const TraceDims& d);
// Values of a Vector field per token (product of token_dims); for attn_rows, A_n * nh.
int64_t token_size(const Field& f, const TraceDims& d);
// attn_rows of record t (n_reg registers): (A_n, nh, n_reg + t + 2) values — keys so far, then p_null.
inline int64_t attn_row_len(int64_t n_reg, int64_t t) {
  return n_reg + t + 2;
}

// "runs/A/logits"
inline std::string tensor_name(const std::string& label, const Field& f) {
  return "runs/" + label + "/" + f.name;
}

// A run label may name tensors: 1..32 characters of [A-Za-z0-9_.-], not "." or "..".
bool valid_label(const std::string& label);

}  // namespace hl::session_layout
