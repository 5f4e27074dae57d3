// Pipeline stages (pipeline.h): the byte-balanced split, the records' wire form and the merge of
// the stages' per-layer slices, generic over the trace field table (trace_fields.h).
#include "engine/backend/pipeline.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "engine/backend/backend_registry.h"
#include "engine/core/error.h"
#include "engine/trace/trace_fields.h"

namespace hl {

void send_bytes(StageLink& link, int to, const std::vector<uint8_t>& bytes) {
  const uint64_t n = bytes.size();
  link.send(to, &n, sizeof n);
  if (n) link.send(to, bytes.data(), bytes.size());
}

std::vector<uint8_t> recv_bytes(StageLink& link, int from) {
  uint64_t n = 0;
  link.recv(from, &n, sizeof n);
  std::vector<uint8_t> out(static_cast<size_t>(n));
  if (n) link.recv(from, out.data(), out.size());
  return out;
}

std::vector<LayerRange> split_stages(const std::vector<int64_t>& layer_bytes, int n, int64_t first_extra,
                                     int64_t last_extra) {
  const int64_t L = static_cast<int64_t>(layer_bytes.size());
  if (n < 1 || n > L)
    throw Error("--pipeline: " + std::to_string(n) + " stages for a model of " + std::to_string(L) +
                " layers (at most one stage per layer)");
  std::vector<int64_t> P(static_cast<size_t>(L + 1), 0);  // prefix sums
  for (int64_t i = 0; i < L; ++i) P[i + 1] = P[i] + layer_bytes[static_cast<size_t>(i)];
  auto cost = [&](int k, int64_t i, int64_t j) {
    return P[j] - P[i] + (k == 0 ? first_extra : 0) + (k == n - 1 ? last_extra : 0);
  };
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // best[k][j]: the least largest stage over layers [0, j) in stages 0..k; from[k][j] where stage k starts.
  std::vector<std::vector<int64_t>> best(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(L + 1), kInf));
  std::vector<std::vector<int64_t>> from(best.size(), std::vector<int64_t>(static_cast<size_t>(L + 1), 0));
  for (int64_t j = 1; j <= L; ++j) best[0][j] = cost(0, 0, j);
  for (int k = 1; k < n; ++k)
    for (int64_t j = k + 1; j <= L; ++j)
      for (int64_t i = k; i < j; ++i) {
        if (best[k - 1][i] == kInf) continue;
        const int64_t c = std::max(best[k - 1][i], cost(k, i, j));
        if (c < best[k][j]) {
          best[k][j] = c;
          from[k][j] = i;
        }
      }
  std::vector<LayerRange> out(static_cast<size_t>(n));
  int64_t end = L;
  for (int k = n - 1; k >= 0; --k) {
    const int64_t begin = k == 0 ? 0 : from[k][end];
    out[static_cast<size_t>(k)] = LayerRange{begin, end};
    end = begin;
  }
  return out;
}

std::vector<LayerRange> split_checkpoint(const std::string& dir, int n) {
  const CheckpointBytes b = checkpoint_bytes(dir);
  return split_stages(b.layers, n, b.embedding, b.head);
}

namespace {

template <class T>
void put(std::vector<uint8_t>& out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof v);
}
template <class T>
void put_vec(std::vector<uint8_t>& out, const std::vector<T>& v) {
  put(out, static_cast<uint64_t>(v.size()));
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  out.insert(out.end(), p, p + v.size() * sizeof(T));
}

struct Reader {
  const std::vector<uint8_t>& b;
  size_t at = 0;
  void take(void* dst, size_t n) {
    if (n > b.size() - at) throw Error("pipeline: a stage's records message is truncated");
    if (n) std::memcpy(dst, b.data() + at, n);
    at += n;
  }
  template <class T>
  void get(T* v) {
    take(v, sizeof *v);
  }
  template <class T>
  void get_vec(std::vector<T>* v) {
    uint64_t n = 0;
    get(&n);
    if (n > (b.size() - at) / sizeof(T)) throw Error("pipeline: a stage's records message is truncated");
    v->resize(static_cast<size_t>(n));
    take(v->data(), v->size() * sizeof(T));
  }
};

}  // namespace

std::vector<uint8_t> encode_records(const TokenTrace* const* recs, int64_t S) {
  std::vector<uint8_t> out;
  for (int64_t s = 0; s < S; ++s) {
    const TokenTrace& r = *recs[s];
    for (const TraceField& f : trace_fields()) {
      if (f.fvec) put_vec(out, r.*f.fvec);
      if (f.ivec) put_vec(out, r.*f.ivec);
      if (f.i32) put(out, r.*f.i32);
      if (f.i64) put(out, r.*f.i64);
      if (f.f32) put(out, r.*f.f32);
    }
    put(out, r.step_seconds);
  }
  return out;
}

void decode_records(const std::vector<uint8_t>& bytes, TokenTrace* const* recs, int64_t S) {
  Reader in{bytes};
  for (int64_t s = 0; s < S; ++s) {
    TokenTrace& r = *recs[s];
    for (const TraceField& f : trace_fields()) {
      if (f.fvec) in.get_vec(&(r.*f.fvec));
      if (f.ivec) in.get_vec(&(r.*f.ivec));
      if (f.i32) in.get(&(r.*f.i32));
      if (f.i64) in.get(&(r.*f.i64));
      if (f.f32) in.get(&(r.*f.f32));
    }
    in.get(&r.step_seconds);
  }
  if (in.at != bytes.size()) throw Error("pipeline: a stage's records message holds more than its records");
}

namespace {

// The slots of a layer axis that layers [begin, end) fill (L+1: the residual columns).
std::vector<int64_t> layer_slots(TraceSym axis, const LayerSchedule& s, LayerRange layers) {
  std::vector<int64_t> out;
  if (axis == TraceSym::L1 && layers.begin == 0) out.push_back(0);
  for (int64_t i = layers.begin; i < layers.end; ++i) {
    const LayerSpec& l = s[i];
    const int64_t slot = axis == TraceSym::An   ? l.attn_index
                         : axis == TraceSym::Mn ? l.ssm_index
                         : axis == TraceSym::Xn ? l.moe_index
                                                : i + 1;
    if (slot >= 0) out.push_back(slot);
  }
  return out;
}

bool is_layer_axis(TraceSym a) {
  return a == TraceSym::An || a == TraceSym::Mn || a == TraceSym::Xn || a == TraceSym::L1;
}

int64_t axis_length(TraceSym a, const LayerSchedule& s) {
  switch (a) {
    case TraceSym::An: return s.num_attention();
    case TraceSym::Mn: return s.num_ssm();
    case TraceSym::Xn: return s.num_moe();
    default: return s.size() + 1;
  }
}

template <class T>
void copy_slots(std::vector<T>& into, const std::vector<T>& from, const std::vector<int64_t>& slots, int64_t n_slots,
                const char* name) {
  if (into.size() != from.size())
    throw Error(std::string("pipeline: stages disagree on the size of ") + name + " (" + std::to_string(into.size()) +
                " vs " + std::to_string(from.size()) + ")");
  if (into.empty() || n_slots == 0) return;
  const size_t per = into.size() / static_cast<size_t>(n_slots);  // a slot's values (attn_rows: nh rows of keys)
  for (int64_t k : slots)
    std::copy_n(from.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(k) * per), per,
                into.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(k) * per));
}

}  // namespace

void merge_stage_record(TokenTrace& into, const TokenTrace& from, const LayerSchedule& s, LayerRange layers) {
  const bool last = layers.end == s.size();
  for (const TraceField& f : trace_fields()) {
    if (f.i32 == &TokenTrace::nonfinite_layer) {
      const int32_t a = into.nonfinite_layer, b = from.nonfinite_layer;
      into.nonfinite_layer = a < 0 ? b : b < 0 ? a : std::min(a, b);
      continue;
    }
    if (f.shape != FieldShape::Scalar && is_layer_axis(f.dims[0])) {
      const std::vector<int64_t> slots = layer_slots(f.dims[0], s, layers);
      const int64_t n = axis_length(f.dims[0], s);
      if (f.fvec) copy_slots(into.*f.fvec, from.*f.fvec, slots, n, f.name);
      if (f.ivec) copy_slots(into.*f.ivec, from.*f.ivec, slots, n, f.name);
      continue;
    }
    if (!last) continue;  // logits, what derives from them, and the counters: the last stage's
    if (f.fvec) into.*f.fvec = from.*f.fvec;
    if (f.ivec) into.*f.ivec = from.*f.ivec;
    if (f.i32) into.*f.i32 = from.*f.i32;
    if (f.i64) into.*f.i64 = from.*f.i64;
    if (f.f32) into.*f.f32 = from.*f.f32;
  }
}

void gather_stage_records(StageLink& link, const std::vector<LayerRange>& ranges, const LayerSchedule& s,
                          TokenTrace* const* recs, int64_t S) {
  const int rank = link.rank(), n = link.size();
  if (n == 1) return;
  if (rank != 0) {
    send_bytes(link, 0, encode_records(recs, S));
    decode_records(recv_bytes(link, 0), recs, S);
    return;
  }
  std::vector<TokenTrace> theirs(static_cast<size_t>(S));
  std::vector<TokenTrace*> ptrs(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) ptrs[static_cast<size_t>(i)] = &theirs[static_cast<size_t>(i)];
  for (int r = 1; r < n; ++r) {
    decode_records(recv_bytes(link, r), ptrs.data(), S);
    for (int64_t i = 0; i < S; ++i)
      merge_stage_record(*recs[i], theirs[static_cast<size_t>(i)], s, ranges[static_cast<size_t>(r)]);
  }
  const std::vector<uint8_t> merged = encode_records(recs, S);
  for (int r = 1; r < n; ++r) send_bytes(link, r, merged);
}

void finish_stage_records(StageLink* link, const std::vector<LayerRange>& ranges, const LayerSchedule& s,
                          TokenTrace* const* recs, int64_t S, std::chrono::steady_clock::time_point t0) {
  if (link) gather_stage_records(*link, ranges, s, recs, S);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t i = 0; i < S; ++i) recs[i]->step_seconds = dt / static_cast<double>(S);
}

void stage_rows_in(StageLink* link, std::vector<float>& rows, int64_t n, int64_t H) {
  if (!link) return;
  rows.resize(static_cast<size_t>(n * H));
  if (n > 0 && link->rank() > 0) link->recv(link->rank() - 1, rows.data(), rows.size() * sizeof(float));
}

void stage_rows_out(StageLink* link, const std::vector<float>& rows) {
  if (link && !rows.empty() && link->rank() < link->size() - 1)
    link->send(link->rank() + 1, rows.data(), rows.size() * sizeof(float));
}

void finish_device_stage(StageLink* link, const std::vector<float>& rows, const std::vector<LayerRange>& ranges,
                         const LayerSchedule& s, std::vector<TokenTrace>* out, size_t first, int64_t S,
                         std::chrono::steady_clock::time_point t0) {
  if (!link) return;
  stage_rows_out(link, rows);
  std::vector<TokenTrace*> recs(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) recs[static_cast<size_t>(i)] = &(*out)[first + static_cast<size_t>(i)];
  finish_stage_records(link, ranges, s, recs.data(), S, t0);
}

LayerRange stage_layers(const Model& m, const StageLink* link, std::vector<LayerRange>* ranges) {
  if (!link) *ranges = {LayerRange{0, m.config.num_hidden_layers}};
  if (link && static_cast<int>(ranges->size()) != link->size())
    throw Error("pipeline: " + std::to_string(ranges->size()) + " stage ranges for " + std::to_string(link->size()) +
                " stages");
  const LayerRange mine = (*ranges)[static_cast<size_t>(link ? link->rank() : 0)];
  const LayerRange held = loaded_layers(m);
  if (mine.begin != held.begin || mine.end != held.end)
    throw Error("pipeline: this stage runs layers [" + std::to_string(mine.begin) + ", " + std::to_string(mine.end) +
                ") but the model holds [" + std::to_string(held.begin) + ", " + std::to_string(held.end) + ")");
  return mine;
}

std::string stage_backend_choices() {
  std::string s;
  for (const BackendEntry& e : backend_registry())
    if (e.make_stage) s += std::string(s.empty() ? "" : ", ") + e.name;
  return s;
}

namespace {
// auto: the CPU, as every rank must pick the same kind of backend without asking the others.
const BackendEntry* stage_entry(const std::string& which) {
  const BackendEntry* e = find_backend(which == "auto" ? "cpu" : which);
  return e && e->make_stage ? e : nullptr;
}
}  // namespace

std::string stage_backend_refusal(const std::string& which) {
  if (stage_entry(which)) return "";
  return "--pipeline: backend " + which + " is not supported yet (" + stage_backend_choices() + ")";
}

std::unique_ptr<Backend> make_stage_backend(const std::string& which, std::shared_ptr<const Model> model,
                                            StageLink* link, std::vector<LayerRange> ranges) {
  const BackendEntry* e = stage_entry(which);
  if (!e) throw Error(stage_backend_refusal(which));
  return e->make_stage(std::move(model), link, ranges);
}

}  // namespace hl
