// The one table of per-token trace fields (trace-format.md §3): each TokenTrace member once, with
// its tensor name in trace and session files, file dtype, per-token shape in the format's symbols
// and when a record carries it. Record sizing, the trace writer, the session layout, reader and
// writer, the trace import and the device record readback iterate it. Not the computation of any
// field (backends, engine/reference/) nor the file formats' metadata (trace_file.cpp, sessions/).
#pragma once
#include <cstdint>
#include <vector>

#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/token_trace.h"

namespace hl {

// The shape symbols of trace-format.md §2: V, A_n, nh, M_n, Di, X_n, E, k, L+1.
enum class TraceSym : uint8_t { V, An, nh, Mn, Di, Xn, E, K, L1 };

// Values of the symbols for one model: the layer axes are the schedule's counts, the others the
// config's sizes.
struct TraceDims {
  int64_t V = 0, An = 0, nh = 0, Mn = 0, Di = 0, Xn = 0, E = 0, K = 0, L1 = 0;
  static TraceDims of(const JambaConfig& c, const LayerSchedule& s);
  int64_t operator[](TraceSym s) const;
};

enum class FieldType : uint8_t { Float, Int32, Int64 };  // a Float scalar is f32, a Float vector fvec
// Scalar: one value a token; Vector: a fixed per-token shape; Ragged: attn_rows only, whose key
// axis grows with the token (record t: n_reg + t + 2 values a row, keys so far then p_null).
enum class FieldShape : uint8_t { Scalar, Vector, Ragged };
// Which records carry a vector field: always (logits), with RunOptions::instruments, or with
// RunOptions::full too. Scalars are always set, except derived ones (set with the instruments).
enum class FieldSet : uint8_t { Always, Instruments, Full };

struct TraceField {
  const char* name;  // tensor name (sessions: after "runs/<label>/")
  FieldType type;
  FieldShape shape;
  FieldSet set;
  bool full;      // set == Full: stored at SessionSaveOptions::full_dtype in sessions
  bool in_trace;  // written to trace files (position is a session-only field)
  std::vector<float> TokenTrace::*fvec;
  std::vector<int32_t> TokenTrace::*ivec;
  int32_t TokenTrace::*i32;
  int64_t TokenTrace::*i64;
  float TokenTrace::*f32;
  uint8_t rank;            // number of per-token dims (Ragged: the rows, without the key axis)
  TraceSym dims[2];        // per-token shape in symbols
  const char* dims_text;   // per-token shape in words, for messages: "(A_n, nh)"
  bool optional;           // a trace file may lack it (a field added after format version 1)
  // Host-derived: computed from the finished record's logits by finish_record (token_trace.h) on
  // every backend alike (no backend or device record computes it); readers of files that lack it
  // (written before it existed) derive it the same way. Null for fields a forward pass computes.
  void (*derive)(TokenTrace& r);
};

// Every field in file order (the order of trace-format.md §3, plus `position` after token_ids).
const std::vector<TraceField>& trace_fields();
const TraceField* find_trace_field(const char* name);

// Per-token shape of a Vector or Ragged field ({A_n, nh} for attn_rows); {} for a scalar.
std::vector<int64_t> token_dims(const TraceField& f, const TraceDims& d);
// Values per token (product of token_dims); for attn_rows the A_n · nh rows; 1 for a scalar.
int64_t token_size(const TraceField& f, const TraceDims& d);
// attn_rows of record t (n_reg registers): (A_n, nh, n_reg + t + 2) values — keys so far, then p_null.
inline int64_t attn_row_len(int64_t n_reg, int64_t t) {
  return n_reg + t + 2;
}
// Whether a record of a run under `opts` carries the field.
inline bool carried(const TraceField& f, const RunOptions& opts) {
  return f.set == FieldSet::Always || (opts.instruments && (f.set == FieldSet::Instruments || opts.full));
}

}  // namespace hl
