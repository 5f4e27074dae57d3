// Session reader (untrusted input): safetensors validation (engine/io/safetensors.h), then every
// manifest field type- and range-checked, every tensor's dtype and shape checked against the
// manifest's config before any record is allocated. Not the writer: session_writer.cpp.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/checksum.h"
#include "engine/core/error.h"
#include "engine/core/sys_memory.h"
#include "engine/io/file_check.h"
#include "engine/io/json_reader.h"
#include "engine/io/json_util.h"
#include "engine/io/safetensors.h"
#include "sessions/session_file.h"
#include "sessions/session_layout.h"

namespace hl {

namespace {
using namespace session_layout;
using json = nlohmann::json;

constexpr int kMaxManifestDepth = 8;

// What the manifest says about one run, before its tensors are read.
struct RunMeta {
  Run run;  // records not yet filled
  int64_t T = 0, n_reg = 0;
  std::vector<const Field*> fields;
  std::map<const Field*, std::vector<int64_t>> absent;  // sorted token indices without the field
  std::vector<double> steps;                            // (T,) step_seconds
};

struct Manifest {
  Recording rec;  // runs without records
  int format_version = 0;
  std::vector<RunMeta> runs;
  bool has_checksums = false;                 // files written before checksums have none
  std::map<std::string, uint64_t> checksums;  // tensor name → XXH3-64 of its bytes
};

// The manifest's "checksums": {"algorithm": "xxh3_64", "tensors": {name: 16 hex digits, ...}}.
void read_checksums(const JsonReader& m, Manifest* out) {
  if (!m.find("checksums")) return;
  const JsonReader ck = m.object("checksums");
  const std::string algo = ck.string("algorithm");
  if (algo != kSessionChecksumAlgorithm)
    ck.expected(ck.field("algorithm"), std::string("\"") + kSessionChecksumAlgorithm + "\"", json(algo));
  const JsonReader ts = ck.object("tensors");
  for (const auto& [name, v] : ts.value().items()) {
    uint64_t x = 0;
    if (!v.is_string() || !parse_checksum_hex(v.get<std::string>(), &x))
      ts.expected(ts.field(name), "16 hex digits", v);
    out->checksums[name] = x;
  }
  out->has_checksums = true;
}

RunSettings read_settings(const JsonReader& s) {
  RunSettings out;
  const std::string norm = s.string("normalizer");
  if (norm == "as-trained") {
    out.normalizer_override = false;
  } else if (parse_normalizer(norm, &out.normalizer)) {
    out.normalizer_override = true;
  } else {
    s.expected(s.field("normalizer"), "as-trained, softmax, softmax1 or sink", json(norm));
  }
  out.registers = static_cast<int>(s.integer("registers", -1, kSessionMaxRegisters));
  out.registers_used = static_cast<int>(s.integer("registers_used", 0, kSessionMaxRegisters));
  out.adapter = s.string("adapter");
  out.backend = s.string("backend");
  out.full = s.boolean("full");
  s.optional_integer("max_context", &out.max_context, 0, INT64_MAX);
  const JsonReader smp = s.object("sampling");
  out.sampling.temperature = static_cast<float>(smp.number("temperature", 0.0, 1e6));
  out.sampling.top_p = static_cast<float>(smp.number("top_p", 0.0, 1.0));
  const json& seed = smp.require("seed", "an integer in [0, 2^64)");
  if (!seed.is_number_unsigned() && !(seed.is_number_integer() && seed.get<int64_t>() >= 0))
    smp.expected(smp.field("seed"), "an integer in [0, 2^64)", seed);
  out.sampling.seed = seed.get<uint64_t>();
  out.sampling.ignore_eos = smp.boolean("ignore_eos");
  return out;
}

RunMeta read_run(const JsonReader& runs_reader, const json& j, size_t index, std::set<std::string>* labels) {
  RunMeta m;
  const std::string where = runs_reader.field("runs") + "[" + std::to_string(index) + "]";
  if (!j.is_object()) runs_reader.expected(where, "an object", j);
  const JsonReader r(j, runs_reader.source(), where);
  m.run.label = r.string("label");
  if (!valid_label(m.run.label))
    r.expected(r.field("label"), "1-32 characters of A-Z a-z 0-9 _ . -", json(m.run.label));
  if (!labels->insert(m.run.label).second)
    r.fail(r.field("label"), "expected a label no other run has, got \"" + m.run.label + "\" (used twice)");
  m.T = r.integer("n_tokens", 0, kSessionMaxTokens);
  m.n_reg = r.integer("n_reg", 0, kSessionMaxRegisters);
  m.run.prompt_tokens = r.integer("prompt_tokens", 0, m.T);
  m.run.settings = read_settings(r.object("settings"));
  if (m.run.settings.registers_used != m.n_reg)
    r.fail(r.field("settings.registers_used"),
           "expected n_reg " + std::to_string(m.n_reg) + ", got " + std::to_string(m.run.settings.registers_used));
  const JsonReader tm = r.object("timings");
  m.run.load_seconds = tm.number("load_seconds", 0.0, 1e9);
  m.run.run_seconds = tm.number("run_seconds", 0.0, 1e9);
  const json& steps = tm.array("step_seconds", static_cast<size_t>(kSessionMaxTokens));
  if (static_cast<int64_t>(steps.size()) != m.T)
    tm.fail(tm.field("step_seconds"),
            "expected n_tokens " + std::to_string(m.T) + " entries, got " + std::to_string(steps.size()));
  m.steps.reserve(steps.size());
  for (size_t t = 0; t < steps.size(); ++t)
    m.steps.push_back(tm.number_value(steps[t], tm.field("step_seconds[" + std::to_string(t) + "]"), 0.0, 1e9));
  const json& names = r.array("fields", fields().size());
  for (size_t i = 0; i < names.size(); ++i) {
    const json& n = names[i];
    const std::string at = r.field("fields[" + std::to_string(i) + "]");
    const Field* f = n.is_string() ? find_field(n.get<std::string>()) : nullptr;
    if (!f) r.expected(at, "a known field name", n);
    for (const Field* g : m.fields)
      if (g == f) r.expected(at, "a field not listed before", n);
    m.fields.push_back(f);
  }
  for (const Field& f : fields()) {
    if (f.shape != FieldShape::Scalar || f.derive) continue;  // a derived one is derived when absent
    bool listed = false;
    for (const Field* g : m.fields) listed = listed || g == &f;
    if (!listed)
      r.fail(r.field("fields"), "expected every always-stored field, got no \"" + std::string(f.name) + "\"");
  }
  if (r.find("absent")) {
    const JsonReader ab = r.object("absent");
    for (const auto& [key, list] : ab.value().items()) {
      const Field* f = find_field(key);
      bool listed = false;
      for (const Field* g : m.fields) listed = listed || g == f;
      if (!f || !listed || f->shape == FieldShape::Scalar)
        ab.fail(ab.field(key), "expected the name of a stored vector field of this run, got \"" + key + "\"");
      const std::string aw = ab.field(key);
      if (!list.is_array() || static_cast<int64_t>(list.size()) > m.T)
        ab.expected(aw, "an array of at most n_tokens " + std::to_string(m.T) + " token indices", list);
      std::vector<int64_t>& out = m.absent[f];
      for (size_t i = 0; i < list.size(); ++i) {
        const int64_t t =
            ab.integer_value(list[i], aw + "[" + std::to_string(i) + "]", out.empty() ? 0 : out.back() + 1, m.T - 1);
        out.push_back(t);
      }
    }
  }
  return m;
}

Manifest read_manifest(const SafetensorsFile& f, const std::string& name) {
  auto it = f.metadata().find(kSessionMetadataKey);
  if (it == f.metadata().end()) {
    throw LoadError(name + ": not a HybridLens session: the safetensors __metadata__ has no '" +
                    std::string(kSessionMetadataKey) + "' entry");
  }
  // The manifest's own checksum first: a damaged manifest is reported as such, not as a bad field.
  auto sum = f.metadata().find(kSessionManifestChecksumKey);
  if (sum != f.metadata().end()) {
    uint64_t want = 0;
    if (!parse_checksum_hex(sum->second, &want))
      throw LoadError(name + ": __metadata__ " + quote_name(kSessionManifestChecksumKey) + " is " +
                      quote_name(sum->second) + ", expected 16 hex digits");
    const uint64_t got = checksum64(it->second.data(), it->second.size());
    if (got != want)
      throw LoadError(name + ": manifest: checksum mismatch (stored " + checksum_hex(want) + ", computed " +
                      checksum_hex(got) + "): the file is damaged");
  }
  // The Python dialect for the config copied from config.json (it may hold Infinity); every other
  // field is read through JsonReader, whose ranges reject NaN and the infinities.
  const json m = parse_json_checked(it->second, name + ": manifest", kMaxManifestDepth, JsonDialect::Python);
  const JsonReader r = JsonReader::top(m, name + ": manifest");
  const std::string format = r.string("format");
  if (format != kSessionFormatName) r.expected("format", std::string("\"") + kSessionFormatName + "\"", json(format));
  Manifest out;
  const std::string version = "format_version " + std::to_string(kSessionFormatVersion) + " (what this build reads)";
  const json& v = r.require("format_version", version);
  if (!v.is_number_integer() || v.get<int64_t>() != kSessionFormatVersion) r.expected("format_version", version, v);
  out.format_version = kSessionFormatVersion;
  Recording& rec = out.rec;
  rec.engine_version = r.string("engine_version");
  rec.created = r.string("created");
  const JsonReader ck = r.object("checkpoint");
  rec.checkpoint.folder = ck.string("folder");
  rec.checkpoint.name = ck.string("name");
  rec.checkpoint.config_sha256 = ck.string("config_sha256");
  rec.checkpoint.weights_hash = ck.string("weights_hash");
  rec.adapter_identity = r.string("adapter_identity");
  r.optional_string("weights", &rec.weights);  // absent in sessions written before quantise-on-load: as stored
  rec.config = parse_config(json_text_python(r.object("config").value()), name + ": manifest config");
  rec.prompt = r.string("prompt");
  const int64_t T0 = r.integer("n_tokens", 0, kSessionMaxTokens);
  const json& text = r.array("token_text", static_cast<size_t>(kSessionMaxTokens));
  if (!text.empty() && static_cast<int64_t>(text.size()) != T0)
    r.fail("token_text",
           "expected n_tokens " + std::to_string(T0) + " entries (or none), got " + std::to_string(text.size()));
  rec.token_text.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (!text[i].is_string()) r.expected("token_text[" + std::to_string(i) + "]", "a string", text[i]);
    rec.token_text.push_back(text[i].get<std::string>());
  }
  rec.tokens.resize(static_cast<size_t>(T0));  // filled from the tensor later; T0 is bounded above
  const json& runs = r.array("runs", static_cast<size_t>(kSessionMaxRuns));
  std::set<std::string> labels;
  for (size_t i = 0; i < runs.size(); ++i) out.runs.push_back(read_run(r, runs[i], i, &labels));
  read_checksums(r, &out);
  if (out.has_checksums && sum == f.metadata().end())
    r.fail("checksums", "expected __metadata__ to hold the manifest's own " + quote_name(kSessionManifestChecksumKey) +
                            " alongside, got none");
  return out;
}

// F16 → float without branches (so the compiler can vectorise it; the attention rows are the bulk
// of a session): the 15 exponent+mantissa bits shifted into a float and scaled by 2^112 give every
// normal and subnormal half exactly; exponent 31 (Inf/NaN) maps to 255 with the payload kept.
// Equal to hl::f16_to_float for all 65536 inputs (test_session.cpp checks).
inline float f16_bits_to_float(uint16_t h) {
  const uint32_t em = h & 0x7fffu;
  uint32_t u = em << 13;
  float f;
  std::memcpy(&f, &u, 4);
  f *= 0x1p112f;
  std::memcpy(&u, &f, 4);
  u = em >= 0x7c00u ? ((em << 13) | 0x7f800000u) : u;
  u |= static_cast<uint32_t>(h & 0x8000u) << 16;
  std::memcpy(&f, &u, 4);
  return f;
}

// Reads stored elements of dtype K as floats, so that vector::insert fills a record in one pass
// (no zero-fill first). Random access so that insert sizes the vector once.
template <DType K>
struct Widening {
  using iterator_category = std::random_access_iterator_tag;
  using value_type = float;
  using difference_type = std::ptrdiff_t;
  using pointer = const float*;
  using reference = float;
  static constexpr difference_type kSize = K == DType::F32 ? 4 : 2;
  const uint8_t* p;
  float operator*() const {
    if constexpr (K == DType::F32) {
      float f;
      std::memcpy(&f, p, 4);  // the buffer may be unaligned (fuzzer input); hosts are little-endian
      return f;
    } else {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return K == DType::F16 ? f16_bits_to_float(h) : bf16_to_float(h);
    }
  }
  float operator[](difference_type i) const { return *(*this + i); }
  Widening& operator++() {
    p += kSize;
    return *this;
  }
  Widening operator++(int) {
    Widening w = *this;
    p += kSize;
    return w;
  }
  Widening& operator--() {
    p -= kSize;
    return *this;
  }
  Widening operator--(int) {
    Widening w = *this;
    p -= kSize;
    return w;
  }
  Widening& operator+=(difference_type n) {
    p += n * kSize;
    return *this;
  }
  Widening& operator-=(difference_type n) {
    p -= n * kSize;
    return *this;
  }
  Widening operator+(difference_type n) const { return {p + n * kSize}; }
  Widening operator-(difference_type n) const { return {p - n * kSize}; }
  difference_type operator-(const Widening& o) const { return (p - o.p) / kSize; }
  bool operator==(const Widening& o) const { return p == o.p; }
  bool operator!=(const Widening& o) const { return p != o.p; }
  bool operator<(const Widening& o) const { return p < o.p; }
};

// Appends n stored elements at src, widened to float, to v.
void append_widened(DType dt, const uint8_t* src, size_t n, std::vector<float>& v) {
  if (dt == DType::F32) {
    v.insert(v.end(), Widening<DType::F32>{src}, Widening<DType::F32>{src + 4 * n});
  } else if (dt == DType::F16) {
    v.insert(v.end(), Widening<DType::F16>{src}, Widening<DType::F16>{src + 2 * n});
  } else {
    v.insert(v.end(), Widening<DType::BF16>{src}, Widening<DType::BF16>{src + 2 * n});
  }
}

template <typename T>
T load_le(const uint8_t* p) {
  T x;
  std::memcpy(&x, p, sizeof x);  // the buffer may be unaligned (fuzzer input); hosts are little-endian
  return x;
}

// Expected shape of a field's tensor: (T, per-token dims...), attn_rows (T, A_n, nh, n_reg + T + 1).
std::vector<int64_t> expected_shape(const Field& f, const TraceDims& d, int64_t T, int64_t n_reg) {
  std::vector<int64_t> s = {T};
  for (int64_t x : token_dims(f, d)) s.push_back(x);
  if (f.shape == FieldShape::Ragged) s.push_back(n_reg + T + 1);
  return s;
}

const TensorInfo& checked_tensor(const SafetensorsFile& sf, const std::string& file, const std::string& tname,
                                 const std::string& listed_by, const Field* f, const std::vector<int64_t>& shape,
                                 const std::string& shape_words) {
  const TensorInfo* t = sf.find(tname);
  if (!t) throw LoadError(file + ": missing tensor " + quote_name(tname) + " (" + listed_by + ")");
  bool dtype_ok = false;
  if (!f || f->type == FieldType::Int32)
    dtype_ok = t->dtype == DType::I32;
  else if (f->type == FieldType::Int64)
    dtype_ok = t->dtype == DType::I64;
  else if (f->shape == FieldShape::Scalar)
    dtype_ok = t->dtype == DType::F32;
  else
    dtype_ok = t->dtype == DType::F32 || t->dtype == DType::F16 || t->dtype == DType::BF16;
  if (!dtype_ok) {
    const char* want = !f || f->type == FieldType::Int32 ? "I32"
                       : f->type == FieldType::Int64     ? "I64"
                       : f->shape == FieldShape::Scalar  ? "F32"
                                                         : "F32, F16 or BF16";
    throw LoadError(file + ": tensor " + quote_name(tname) + ": dtype " + dtype_name(t->dtype) + ", expected " + want);
  }
  if (t->shape != shape) {
    throw LoadError(file + ": tensor " + quote_name(tname) + ": shape " + shape_to_string(t->shape) + ", expected " +
                    shape_to_string(shape) + " = " + shape_words + " from the manifest and its config");
  }
  return *t;
}

// One vector field of one run to widen into the records (validated before any job runs).
struct FillJob {
  const Field* f;
  const TensorInfo* ti;
  int64_t per;                // values per token (attn_rows: (layer, head) rows per token)
  int64_t cols;               // attn_rows: stored key columns n_reg + T + 1
  std::vector<char> present;  // (T,) 0 where the manifest lists the token as absent
};

void fill_token(const FillJob& j, int64_t n_reg, int64_t t, TokenTrace& rt) {
  if (!j.present[t]) return;
  const size_t es = static_cast<size_t>(dtype_size(j.ti->dtype));
  if (j.f->ivec) {
    std::vector<int32_t>& v = rt.*j.f->ivec;
    v.resize(static_cast<size_t>(j.per));
    std::memcpy(v.data(), j.ti->data + static_cast<size_t>(t * j.per) * 4, v.size() * 4);
    return;
  }
  std::vector<float>& v = rt.*j.f->fvec;
  v.clear();
  if (j.f->shape == FieldShape::Ragged) {
    const int64_t len = attn_row_len(n_reg, t);  // keys so far, then p_null
    v.reserve(static_cast<size_t>(j.per * len));
    const uint8_t* base = j.ti->data + static_cast<size_t>(t * j.per * j.cols) * es;
    for (int64_t s = 0; s < j.per; ++s) {
      const uint8_t* row = base + static_cast<size_t>(s * j.cols) * es;
      append_widened(j.ti->dtype, row, static_cast<size_t>(len - 1), v);
      append_widened(j.ti->dtype, row + (j.cols - 1) * es, 1, v);
    }
  } else {
    append_widened(j.ti->dtype, j.ti->data + static_cast<size_t>(t * j.per) * es, static_cast<size_t>(j.per), v);
  }
}

// Widens every job into the records, token by token (all fields of a token together: that order
// measured fastest; worker threads were slower, as their malloc arenas fault in fresh pages).
void fill_records(const std::vector<FillJob>& jobs, int64_t n_reg, std::vector<TokenTrace>* recs) {
  const int64_t T = static_cast<int64_t>(recs->size());
  for (int64_t t = 0; t < T; ++t)
    for (const FillJob& j : jobs) fill_token(j, n_reg, t, (*recs)[t]);
}

Recording read_session(const SafetensorsFile& sf, const std::string& name) {
  Manifest man = read_manifest(sf, name);
  Recording rec = std::move(man.rec);
  const TraceDims d = TraceDims::of(rec.config, LayerSchedule::from_config(rec.config));

  // Every tensor accounted for, with the dtype and shape the manifest implies.
  std::set<std::string> expected = {"tokens"};
  const int64_t T0 = static_cast<int64_t>(rec.tokens.size());
  const TensorInfo& tok = checked_tensor(sf, name, "tokens", "the token list", nullptr, {T0}, "n_tokens");
  double bytes_needed = 0;  // memory the records will take, checked before allocating any of them
  for (const RunMeta& m : man.runs) {
    bytes_needed += static_cast<double>(m.T) * sizeof(TokenTrace);
    for (const Field* f : m.fields) {
      const std::string tname = tensor_name(m.run.label, *f);
      expected.insert(tname);
      checked_tensor(sf, name, tname, "listed in the manifest's run '" + m.run.label + "' fields", f,
                     expected_shape(*f, d, m.T, m.n_reg),
                     "n_tokens " + std::to_string(m.T) +
                         (f->shape == FieldShape::Scalar ? std::string() : std::string(" by ") + f->dims_text));
      const double per = static_cast<double>(token_size(*f, d)) * 4;
      bytes_needed += f->shape == FieldShape::Ragged
                          ? per * (static_cast<double>(m.T) * static_cast<double>(m.n_reg + 2) +
                                   static_cast<double>(m.T) * static_cast<double>(m.T - 1) / 2)
                          : per * static_cast<double>(m.T);
    }
  }
  for (const TensorInfo& t : sf.tensors()) {
    if (!expected.count(t.name))
      throw LoadError(name + ": unexpected tensor " + quote_name(t.name) + " (not in the manifest)");
  }
  if (man.has_checksums) {  // every tensor has one, each verified before any value is read
    for (const auto& [tname, want] : man.checksums)
      if (!sf.find(tname))
        throw LoadError(name + ": manifest checksums: tensor " + quote_name(tname) + " is not in the file");
    for (const TensorInfo& t : sf.tensors()) {
      auto c = man.checksums.find(t.name);
      if (c == man.checksums.end())
        throw LoadError(name + ": tensor " + quote_name(t.name) + " has no checksum in the manifest");
      const uint64_t got = checksum64(t.data, t.nbytes());
      if (got != c->second)
        throw LoadError(name + ": tensor " + quote_name(t.name) + ": checksum mismatch (stored " +
                        checksum_hex(c->second) + ", computed " + checksum_hex(got) + "): the file is damaged");
    }
  }
  const AvailableMemory avail = available_memory();
  if (bytes_needed > static_cast<double>(avail.bytes)) {
    throw LoadError(name + ": loading needs " + std::to_string(static_cast<uint64_t>(bytes_needed / 1e6)) +
                    " MB of memory, more than the " + describe(avail));
  }

  for (int64_t i = 0; i < T0; ++i) {
    rec.tokens[i] = load_le<int32_t>(tok.data + 4 * i);
    if (rec.tokens[i] < 0 || rec.tokens[i] >= d.V) {
      throw LoadError(name + ": tensor 'tokens': token " + std::to_string(i) + " is " + std::to_string(rec.tokens[i]) +
                      ", outside the vocabulary [0, " + std::to_string(d.V) + ") of the manifest's config");
    }
  }
  for (RunMeta& m : man.runs) {
    Run run = std::move(m.run);
    std::vector<TokenTrace> recs(static_cast<size_t>(m.T));  // filled here, then shared (record_list.h)
    for (int64_t t = 0; t < m.T; ++t) recs[t].step_seconds = m.steps[t];
    std::vector<FillJob> jobs;
    for (const Field* f : m.fields) {
      const std::string tname = tensor_name(run.label, *f);
      const TensorInfo& ti = *sf.find(tname);
      auto bad = [&](int64_t t, const std::string& what) {
        return LoadError(name + ": tensor " + quote_name(tname) + ": token " + std::to_string(t) + ": " + what);
      };
      if (f->shape == FieldShape::Scalar) {
        for (int64_t t = 0; t < m.T; ++t) {
          TokenTrace& rt = recs[t];
          if (f->f32) {
            rt.*f->f32 = load_le<float>(ti.data + 4 * t);
            continue;
          }
          if (f->i64) {
            rt.*f->i64 = load_le<int64_t>(ti.data + 8 * t);
            if (rt.*f->i64 < 0) throw bad(t, "negative byte count " + std::to_string(rt.*f->i64));
            continue;
          }
          const int32_t x = load_le<int32_t>(ti.data + 4 * t);
          rt.*f->i32 = x;
          if (f->i32 == &TokenTrace::token_id && (x < 0 || x >= d.V)) {
            throw bad(t, "token id " + std::to_string(x) + " outside the vocabulary [0, " + std::to_string(d.V) + ")");
          }
          if (f->i32 == &TokenTrace::position && x != t) {
            throw bad(t, "position " + std::to_string(x) + ", expected " + std::to_string(t));
          }
          if (f->i32 == &TokenTrace::nonfinite_layer && (x < -1 || x > d.L1)) {  // L1 + 1 = L + 2 values
            throw bad(t, "layer " + std::to_string(x) + " outside [-1, " + std::to_string(d.L1) +
                             "] (L: the final norm, L + 1: the LM head)");
          }
        }
        continue;
      }
      FillJob job{f, &ti, token_size(*f, d), m.n_reg + m.T + 1, std::vector<char>(static_cast<size_t>(m.T), 1)};
      for (int64_t t : m.absent[f]) job.present[t] = 0;
      if (f->ivec) {  // expert ids index the views' arrays: all in [0, E)
        for (int64_t i = 0; i < m.T * job.per; ++i) {
          const int32_t e = load_le<int32_t>(ti.data + 4 * i);
          if (job.present[i / job.per] && (e < 0 || e >= d.E)) {
            throw bad(i / job.per, "expert " + std::to_string(e) + " outside [0, " + std::to_string(d.E) + ")");
          }
        }
      }
      jobs.push_back(std::move(job));
    }
    fill_records(jobs, m.n_reg, &recs);
    for (const Field& f : fields()) {  // derived fields a session written before them lacks
      if (!f.derive || std::find(m.fields.begin(), m.fields.end(), &f) != m.fields.end()) continue;
      for (TokenTrace& r : recs) f.derive(r);
    }
    run.records = std::move(recs);
    rec.runs.push_back(std::move(run));
  }
  return rec;
}

}  // namespace

Recording parse_session(const uint8_t* bytes, uint64_t size, const std::string& name) {
  const SafetensorsFile sf = SafetensorsFile::parse(bytes, size, name);
  return read_session(sf, name);
}

Recording load_session(const std::string& path) {
  const SafetensorsFile sf = SafetensorsFile::open(path);
  if (sf.mapping()) {  // start reading the whole file ahead (a session opened months later is not cached)
    ::madvise(const_cast<uint8_t*>(sf.mapping()->data()), sf.mapping()->size(), MADV_WILLNEED);
  }
  return read_session(sf, base_name(path));
}

SessionSummary read_session_summary(const std::string& path) {
  const SafetensorsFile sf = SafetensorsFile::open(path);
  const Manifest m = read_manifest(sf, base_name(path));
  SessionSummary s;
  s.format_version = m.format_version;
  s.created = m.rec.created;
  s.checkpoint = m.rec.checkpoint;
  s.prompt = m.rec.prompt;
  s.n_tokens = static_cast<int64_t>(m.rec.tokens.size());
  for (const RunMeta& r : m.runs) s.run_labels.push_back(r.run.label);
  s.file_bytes = sf.mapping() ? sf.mapping()->size() : 0;
  return s;
}

}  // namespace hl
