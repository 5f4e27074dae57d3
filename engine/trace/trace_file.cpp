// Trace writer (trace-format.md §3): one tensor per field of the trace field table
// (trace_fields.h), the token axis first, layer axes of each kind in increasing layer index;
// tensors whose layer axis would be empty are omitted. Not the reader: sessions/trace_import.cpp.
#include "engine/trace/trace_file.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "engine/model/quantize.h"
#include "engine/trace/trace_fields.h"

namespace hl {

namespace {
// Stacks a per-record vector member into (T, per) bytes when every record carries `per` values.
template <typename E>
bool stack(const std::vector<TokenTrace>& recs, size_t per, std::vector<E> TokenTrace::*m, std::vector<char>* out) {
  out->resize(recs.size() * per * sizeof(E));
  char* dst = out->data();
  for (const TokenTrace& r : recs) {
    const std::vector<E>& v = r.*m;
    if (v.size() != per) return false;
    std::memcpy(dst, v.data(), per * sizeof(E));
    dst += per * sizeof(E);
  }
  return true;
}

// A scalar member of every record, as (T,) bytes.
template <typename E>
void stack_scalar(const std::vector<TokenTrace>& recs, E TokenTrace::*m, std::vector<char>* out) {
  out->resize(recs.size() * sizeof(E));
  for (size_t i = 0; i < recs.size(); ++i) std::memcpy(out->data() + i * sizeof(E), &(recs[i].*m), sizeof(E));
}

// attn_rows (T, A_n, nh, n_reg + T + 1): record t holds (A_n, nh, n_reg + t + 2) = keys so far,
// then p_null, which goes to the last column. Written when every record carries its rows.
void add_rows(SafetensorsWriter* w, const TraceField& f, const std::vector<TokenTrace>& recs, int64_t rows_per,
              int64_t n_reg, std::vector<int64_t> shape) {
  const int64_t T = static_cast<int64_t>(recs.size());
  if ((recs[0].*f.fvec).empty()) return;
  const int64_t cols = n_reg + T + 1;
  std::vector<float> rows(static_cast<size_t>(T * rows_per * cols), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t have = attn_row_len(n_reg, t);
    const std::vector<float>& src = recs[t].*f.fvec;
    if (static_cast<int64_t>(src.size()) != rows_per * have) return;
    for (int64_t s = 0; s < rows_per; ++s) {
      float* dst = &rows[(t * rows_per + s) * cols];
      std::copy(&src[s * have], &src[s * have] + have - 1, dst);
      dst[cols - 1] = src[s * have + have - 1];
    }
  }
  shape.push_back(cols);
  w->add(f.name, DType::F32, shape, rows.data(), rows.size() * 4);
}
}  // namespace

void write_trace(const std::string& path, const Model& model, int n_reg, const std::vector<TokenTrace>& recs,
                 const TraceMeta& meta) {
  const JambaConfig& c = model.config;
  const int64_t T = static_cast<int64_t>(recs.size());
  const LayerSchedule& sched = model.schedule;
  SafetensorsWriter w;
  w.set_metadata("format_version", "1");
  w.set_metadata("checkpoint", meta.checkpoint);
  w.set_metadata("config_sha256", meta.config_sha256);
  w.set_metadata("normalizer", meta.normalizer);
  w.set_metadata("registers", meta.registers);
  w.set_metadata("adapter", meta.adapter);
  w.set_metadata("backend", meta.backend);
  w.set_metadata("engine_version", HL_VERSION);
  // The --weights format the matrices were quantised to on load (model/quantize.h), or "as-stored".
  w.set_metadata("weights", weights_label(model).empty() ? std::string("as-stored") : weights_label(model));

  // Every field of the table in its order: scalars always, vector fields when every record
  // carries them at the table's per-token size, tensors with an empty layer axis omitted.
  const TraceDims d = TraceDims::of(c, sched);
  std::vector<char> bytes;
  for (const TraceField& f : trace_fields()) {
    if (!f.in_trace) continue;
    if (f.shape == FieldShape::Scalar) {
      if (f.i32)
        stack_scalar(recs, f.i32, &bytes);
      else if (f.f32)
        stack_scalar(recs, f.f32, &bytes);
      else
        stack_scalar(recs, f.i64, &bytes);
      w.add(f.name, f.i32 ? DType::I32 : f.f32 ? DType::F32 : DType::I64, {T}, bytes.data(), bytes.size());
      continue;
    }
    const int64_t per = token_size(f, d);
    if (per == 0) continue;
    std::vector<int64_t> shape = {T};
    for (int64_t x : token_dims(f, d)) shape.push_back(x);
    if (f.shape == FieldShape::Ragged) {
      if (!recs.empty()) add_rows(&w, f, recs, per, n_reg, shape);
    } else if (f.fvec) {
      if (stack(recs, static_cast<size_t>(per), f.fvec, &bytes)) w.add(f.name, DType::F32, shape, bytes.data(), bytes.size());
    } else if (stack(recs, static_cast<size_t>(per), f.ivec, &bytes)) {
      w.add(f.name, DType::I32, shape, bytes.data(), bytes.size());
    }
  }
  w.write(path);
}

}  // namespace hl
