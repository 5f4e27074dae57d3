// Session writer: the manifest JSON and every run's records stacked into safetensors tensors
// (session_file.h), built in one buffer and written with hl::write_file_atomic. Not the reader
// (session_reader.cpp). Layout as huggingface/safetensors serialize(): 8-byte aligned, larger elements first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/checksum.h"
#include "engine/core/error.h"
#include "engine/io/json_util.h"
#include "engine/io/safetensors.h"
#include "sessions/session_file.h"
#include "sessions/session_layout.h"

namespace hl {

namespace {
using namespace session_layout;
using json = nlohmann::ordered_json;

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// JSON has no NaN/Inf: a timing that is not finite is written as 0.
double finite_or_zero(double x) {
  return std::isfinite(x) ? x : 0.0;
}

// One tensor to write: where its bytes come from is a function that fills `dst` (nbytes, zeroed).
struct Planned {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t nbytes = 0;
  std::function<void(uint8_t*)> fill;
};

uint64_t numel_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

bool fits_f16(const RecordList& recs, std::vector<float> TokenTrace::*m) {
  for (const TokenTrace& r : recs)
    for (float x : r.*m)
      if (std::isfinite(x) && std::fabs(x) > 65504.0f) return false;
  return true;
}

json settings_json(const RunSettings& s) {
  json j = json::object();
  j["normalizer"] = s.normalizer_override ? normalizer_name(s.normalizer) : "as-trained";
  j["registers"] = s.registers;
  j["registers_used"] = s.registers_used;
  j["adapter"] = s.adapter;
  j["backend"] = s.backend;
  j["full"] = s.full;
  j["max_context"] = s.max_context;
  json smp = json::object();
  smp["temperature"] = finite_or_zero(s.sampling.temperature);
  smp["top_p"] = finite_or_zero(s.sampling.top_p);
  smp["seed"] = s.sampling.seed;
  smp["ignore_eos"] = s.sampling.ignore_eos;
  j["sampling"] = std::move(smp);
  return j;
}

// Plans the tensors of one run and returns its manifest entry. Throws Error on an inconsistent record.
json plan_run(const Run& run, const TraceDims& d, const SessionSaveOptions& opts, std::vector<Planned>* out) {
  const std::string& L = run.label;
  const RecordList& recs = run.records;
  const int64_t T = static_cast<int64_t>(recs.size());
  const int64_t n_reg = run.settings.registers_used;
  if (n_reg < 0 || n_reg > kSessionMaxRegisters) {
    throw Error("session: run '" + L + "': registers_used " + std::to_string(n_reg) + " outside [0, " +
                std::to_string(kSessionMaxRegisters) + "]");
  }
  if (run.prompt_tokens < 0 || run.prompt_tokens > T) {
    throw Error("session: run '" + L + "': prompt_tokens " + std::to_string(run.prompt_tokens) + " outside [0, " +
                std::to_string(T) + "]");
  }
  // The values a reader relies on as indices (session_reader.cpp checks the same).
  for (int64_t t = 0; t < T; ++t) {
    const TokenTrace& r = recs[t];
    std::string bad;
    if (r.token_id < 0 || r.token_id >= d.V) bad = "token id " + std::to_string(r.token_id) + " outside the vocabulary";
    if (r.position != t) bad = "position " + std::to_string(r.position) + " is not its index";
    if (r.nonfinite_layer < -1 || r.nonfinite_layer > d.L1) bad = "nonfinite_layer outside [-1, L + 1]";
    if (r.kv_cache_bytes < 0 || r.ssm_state_bytes < 0) bad = "a negative byte count";
    for (int32_t e : r.router_topk)
      if (e < 0 || e >= d.E) bad = "router_topk expert " + std::to_string(e) + " outside [0, E)";
    if (!bad.empty()) throw Error("session: run '" + L + "' token " + std::to_string(t) + ": " + bad);
  }
  json stored = json::array();
  json absent = json::object();
  for (const Field& f : fields()) {
    std::vector<int64_t> shape = {T};
    if (f.shape == FieldShape::Scalar) {
      const size_t es = f.type == FieldType::Int64 ? 8 : 4;
      const DType dt = f.i64 ? DType::I64 : f.f32 ? DType::F32 : DType::I32;
      out->push_back({tensor_name(L, f), dt, shape, static_cast<uint64_t>(T) * es, [&recs, f, es](uint8_t* dst) {
                        for (const TokenTrace& r : recs) {
                          if (f.i32)
                            std::memcpy(dst, &(r.*f.i32), es);
                          else if (f.f32)
                            std::memcpy(dst, &(r.*f.f32), es);
                          else
                            std::memcpy(dst, &(r.*f.i64), es);
                          dst += es;
                        }
                      }});
      stored.push_back(f.name);
      continue;
    }
    const int64_t per = token_size(f, d);  // values per token (attn_rows: per (layer, head) row)
    json missing = json::array();
    int64_t have = 0;
    for (int64_t t = 0; t < T; ++t) {
      const size_t n = f.fvec ? (recs[t].*f.fvec).size() : (recs[t].*f.ivec).size();
      const int64_t want = f.shape == FieldShape::Ragged ? per * attn_row_len(n_reg, t) : per;
      if (n == 0) {
        missing.push_back(t);
        continue;
      }
      if (static_cast<int64_t>(n) != want) {
        throw Error("session: run '" + L + "' token " + std::to_string(t) + ": " + f.name + " holds " +
                    std::to_string(n) + " values, expected " + std::to_string(want) + " = " + f.dims_text +
                    " for the recording's config");
      }
      ++have;
    }
    if (have == 0 || per == 0) continue;  // not recorded (or an empty layer axis): no tensor
    if (have < T) absent[f.name] = std::move(missing);
    for (int64_t x : token_dims(f, d)) shape.push_back(x);
    DType dt = DType::I32;
    if (f.type == FieldType::Float) {
      dt = f.full ? opts.full_dtype : (std::string(f.name) == "logits" ? opts.logits_dtype : DType::F32);
      if (dt == DType::F16 && !fits_f16(recs, f.fvec)) dt = DType::F32;
    }
    Planned p{tensor_name(L, f), dt, shape, 0, {}};
    if (f.shape == FieldShape::Ragged) {
      const int64_t cols = n_reg + T + 1;  // registers, tokens 0..T-1, then p_null
      p.shape.push_back(cols);
      const size_t es = static_cast<size_t>(dtype_size(dt));
      p.fill = [&recs, f, per, n_reg, cols, dt, es](uint8_t* dst) {
        for (size_t t = 0; t < recs.size(); ++t) {
          const std::vector<float>& src = recs[t].*f.fvec;  // (A_n, nh, n_reg + t + 2) or empty
          const int64_t len = attn_row_len(n_reg, static_cast<int64_t>(t));
          uint8_t* base = dst + t * static_cast<size_t>(per * cols) * es;
          if (src.empty()) continue;
          for (int64_t s = 0; s < per; ++s) {
            uint8_t* row = base + static_cast<size_t>(s * cols) * es;
            from_float(dt, &src[s * len], row, static_cast<size_t>(len - 1));   // keys so far
            from_float(dt, &src[s * len + len - 1], row + (cols - 1) * es, 1);  // p_null last
          }
        }
      };
    } else if (f.type == FieldType::Float) {
      const size_t es = static_cast<size_t>(dtype_size(dt));
      p.fill = [&recs, f, per, dt, es](uint8_t* dst) {
        for (const TokenTrace& r : recs) {
          const std::vector<float>& v = r.*f.fvec;
          if (!v.empty()) from_float(dt, v.data(), dst, v.size());
          dst += static_cast<size_t>(per) * es;
        }
      };
    } else {
      p.fill = [&recs, f, per](uint8_t* dst) {
        for (const TokenTrace& r : recs) {
          const std::vector<int32_t>& v = r.*f.ivec;
          if (!v.empty()) std::memcpy(dst, v.data(), v.size() * 4);
          dst += static_cast<size_t>(per) * 4;
        }
      };
    }
    p.nbytes = numel_of(p.shape) * static_cast<uint64_t>(dtype_size(dt));
    out->push_back(std::move(p));
    stored.push_back(f.name);
  }
  json steps = json::array();
  for (const TokenTrace& r : recs) steps.push_back(finite_or_zero(r.step_seconds));
  json j = json::object();
  j["label"] = L;
  j["n_tokens"] = T;
  j["n_reg"] = n_reg;
  j["prompt_tokens"] = run.prompt_tokens;
  j["settings"] = settings_json(run.settings);
  json timings = json::object();
  timings["load_seconds"] = finite_or_zero(run.load_seconds);
  timings["run_seconds"] = finite_or_zero(run.run_seconds);
  timings["step_seconds"] = std::move(steps);
  j["timings"] = std::move(timings);
  j["fields"] = std::move(stored);
  if (!absent.empty()) j["absent"] = std::move(absent);
  return j;
}

}  // namespace

std::vector<uint8_t> serialize_session(const Recording& rec, const SessionSaveOptions& opts) {
  for (DType t : {opts.logits_dtype, opts.full_dtype}) {
    if (t != DType::F32 && t != DType::F16 && t != DType::BF16) {
      throw Error(std::string("session: storage dtype ") + dtype_name(t) + " is not F32, F16 or BF16");
    }
  }
  if (static_cast<int64_t>(rec.runs.size()) > kSessionMaxRuns) {
    throw Error("session: " + std::to_string(rec.runs.size()) + " runs, at most " + std::to_string(kSessionMaxRuns));
  }
  if (static_cast<int64_t>(rec.tokens.size()) > kSessionMaxTokens) {
    throw Error("session: " + std::to_string(rec.tokens.size()) + " tokens, at most " +
                std::to_string(kSessionMaxTokens));
  }
  if (!rec.token_text.empty() && rec.token_text.size() != rec.tokens.size()) {
    throw Error("session: token_text has " + std::to_string(rec.token_text.size()) + " entries for " +
                std::to_string(rec.tokens.size()) + " tokens (expected the same count, or none)");
  }
  const TraceDims d = TraceDims::of(rec.config, LayerSchedule::from_config(rec.config));
  for (size_t i = 0; i < rec.tokens.size(); ++i) {
    if (rec.tokens[i] < 0 || rec.tokens[i] >= d.V) {
      throw Error("session: tokens[" + std::to_string(i) + "] = " + std::to_string(rec.tokens[i]) +
                  " is outside the vocabulary [0, " + std::to_string(d.V) + ")");
    }
  }
  std::vector<Planned> plan;
  const int64_t T0 = static_cast<int64_t>(rec.tokens.size());
  plan.push_back({"tokens", DType::I32, {T0}, static_cast<uint64_t>(T0) * 4, [&rec](uint8_t* dst) {
                    if (!rec.tokens.empty()) std::memcpy(dst, rec.tokens.data(), rec.tokens.size() * 4);
                  }});
  json runs = json::array();
  std::set<std::string> labels;
  for (const Run& run : rec.runs) {
    if (!valid_label(run.label)) {
      throw Error("session: run label '" + run.label + "' is not 1-32 characters of A-Z a-z 0-9 _ . -");
    }
    if (!labels.insert(run.label).second) throw Error("session: two runs are labelled '" + run.label + "'");
    if (static_cast<int64_t>(run.records.size()) > kSessionMaxTokens) {
      throw Error("session: run '" + run.label + "' has " + std::to_string(run.records.size()) + " records, at most " +
                  std::to_string(kSessionMaxTokens));
    }
    runs.push_back(plan_run(run, d, opts, &plan));
  }

  json m = json::object();
  m["format"] = kSessionFormatName;
  m["format_version"] = kSessionFormatVersion;
  m["engine_version"] = rec.engine_version.empty() ? std::string(HL_VERSION) : rec.engine_version;
  m["created"] = rec.created.empty() ? utc_now() : rec.created;
  json ck = json::object();
  ck["folder"] = rec.checkpoint.folder;
  ck["name"] = rec.checkpoint.name;
  ck["config_sha256"] = rec.checkpoint.config_sha256;
  ck["weights_hash"] = rec.checkpoint.weights_hash;
  m["checkpoint"] = std::move(ck);
  m["adapter_identity"] = rec.adapter_identity;
  if (!rec.weights.empty()) m["weights"] = rec.weights;
  // config.json's values may hold Python's Infinity (time_step_limit): read and written in its dialect.
  m["config"] = parse_json_checked(config_to_json(rec.config), "the recording's config", 16, JsonDialect::Python);
  m["prompt"] = rec.prompt;
  m["n_tokens"] = T0;
  m["token_text"] = rec.token_text;
  m["runs"] = std::move(runs);

  // Larger elements first so every tensor is aligned to its element size (data section is 8-aligned).
  std::stable_sort(plan.begin(), plan.end(),
                   [](const Planned& a, const Planned& b) { return dtype_size(a.dtype) > dtype_size(b.dtype); });
  // The header with the given tensor checksums (16 hex digits each, so its length does not depend
  // on their values: the data is written once, in place, and hashed there).
  auto header_text = [&](const json& sums) {
    m["checksums"] = {{"algorithm", kSessionChecksumAlgorithm}, {"tensors", sums}};
    // Token pieces may hold broken UTF-8 (byte-fallback pieces): replaced by U+FFFD, as JSON needs.
    // json_text_python is dump() but for the config's infinities, which dump() would write as null.
    const std::string manifest = json_text_python(m);
    json header = json::object();
    json meta = json::object();
    meta[kSessionMetadataKey] = manifest;
    meta[kSessionManifestChecksumKey] = checksum_hex(checksum64(manifest.data(), manifest.size()));
    header["__metadata__"] = std::move(meta);
    uint64_t offset = 0;
    for (const Planned& p : plan) {
      json t = json::object();
      t["dtype"] = dtype_name(p.dtype);
      t["shape"] = p.shape;
      t["data_offsets"] = {offset, offset + p.nbytes};
      header[p.name] = std::move(t);
      offset += p.nbytes;
    }
    std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
    while (text.size() % 8 != 0) text.push_back(' ');
    return text;
  };
  json sums = json::object();
  uint64_t data_bytes = 0;
  for (const Planned& p : plan) {
    sums[p.name] = checksum_hex(0);
    data_bytes += p.nbytes;
  }
  const uint64_t n = header_text(sums).size();
  std::vector<uint8_t> bytes(8 + n + data_bytes);  // zeroed: absent records and unused keys stay 0
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(n >> (8 * i));
  uint8_t* dst = bytes.data() + 8 + n;
  for (const Planned& p : plan) {
    if (p.nbytes > 0) p.fill(dst);
    sums[p.name] = checksum_hex(checksum64(dst, p.nbytes));
    dst += p.nbytes;
  }
  const std::string text = header_text(sums);
  if (text.size() != n) throw Error("session: internal error: the header changed length with its checksums");
  std::memcpy(bytes.data() + 8, text.data(), text.size());
  return bytes;
}

void save_session(const std::string& path, const Recording& rec, const SessionSaveOptions& opts) {
  const std::vector<uint8_t> bytes = serialize_session(rec, opts);
  write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace hl
