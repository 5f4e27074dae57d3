// The per-token fields of a session run: the engine's one table of trace fields
// (engine/trace/trace_fields.h) under the names the session code uses, plus the run-tensor naming
// and label rule. Shared by the session writer, reader and compare. Internal to sessions/: not part
// of the file's public API.
#pragma once
#include <string>
#include <vector>

#include "engine/trace/trace_fields.h"

namespace hl::session_layout {

using hl::attn_row_len;
using Field = hl::TraceField;
using hl::FieldShape;
using hl::FieldType;
using hl::token_dims;
using hl::token_size;
using hl::TraceDims;

// Every field in file order. Scalars (token_ids, position, nonfinite_layer, kv_cache_bytes,
// ssm_state_bytes) are always stored; vector fields are stored when a record carries them.
inline const std::vector<Field>& fields() {
  return trace_fields();
}
inline const Field* find_field(const std::string& name) {
  return find_trace_field(name.c_str());
}

// "runs/A/logits"
inline std::string tensor_name(const std::string& label, const Field& f) {
  return "runs/" + label + "/" + f.name;
}

// A run label may name tensors: 1..32 characters of [A-Za-z0-9_.-], not "." or "..".
bool valid_label(const std::string& label);

}  // namespace hl::session_layout
