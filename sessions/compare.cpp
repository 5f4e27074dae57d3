// Run comparison (compare.h): walks the common token prefix of two runs field by field with the
// session field table (session_layout.h), aligning attention rows on token keys. Reference: the
// `compare` contract of trace-format.md §4 and issue 6 ("per-instrument differences, token-aligned").
#include "sessions/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/model/sampling.h"
#include "sessions/session_layout.h"

namespace hl {

namespace {
using namespace session_layout;

struct Acc {
  FieldDiff d;
  double sum = 0;
  int64_t finite = 0;
  void add(double x, double y, int64_t t) {
    ++d.elements;
    const bool fx = std::isfinite(x), fy = std::isfinite(y);
    if (fx && fy) {
      const double a = std::fabs(x - y);
      sum += a;
      ++finite;
      if (a > d.max_abs) {
        d.max_abs = a;
        d.max_token = t;
      }
      if (x != y && d.first_diff_token < 0) d.first_diff_token = t;
      return;
    }
    const bool same = (std::isnan(x) && std::isnan(y)) || (!std::isnan(x) && x == y);
    if (!same) {
      ++d.nonfinite_mismatch;
      if (d.first_diff_token < 0) d.first_diff_token = t;
    }
  }
  FieldDiff done() {
    d.mean_abs = finite ? sum / static_cast<double>(finite) : 0.0;
    return d;
  }
};

std::string describe(const Run& r) {
  const RunSettings& s = r.settings;
  std::string d = std::to_string(r.records.size()) + " tokens, normalizer " +
                  (s.normalizer_override ? normalizer_name(s.normalizer) : "as-trained") + ", " +
                  std::to_string(s.registers_used) + " registers, backend " + s.backend;
  if (!s.adapter.empty()) d += ", adapter " + s.adapter;
  return d;
}

void settings_diff(const Run& a, const Run& b, std::vector<std::string>* out) {
  const RunSettings &x = a.settings, &y = b.settings;
  auto add = [&](const std::string& what, const std::string& u, const std::string& v) {
    if (u != v) out->push_back(what + ": " + u + " -> " + v);
  };
  add("normalizer", x.normalizer_override ? normalizer_name(x.normalizer) : "as-trained",
      y.normalizer_override ? normalizer_name(y.normalizer) : "as-trained");
  add("registers", std::to_string(x.registers_used), std::to_string(y.registers_used));
  add("adapter", x.adapter.empty() ? "none" : x.adapter, y.adapter.empty() ? "none" : y.adapter);
  add("backend", x.backend, y.backend);
  add("full", x.full ? "yes" : "no", y.full ? "yes" : "no");
  add("temperature", std::to_string(x.sampling.temperature), std::to_string(y.sampling.temperature));
}

// One vector field over the prefix [0, n).
FieldDiff compare_field(const Field& f, const Run& a, const Run& b, int64_t n) {
  Acc acc;
  acc.d.field = f.name;
  const int64_t ra = a.settings.registers_used, rb = b.settings.registers_used;
  if (f.shape == FieldShape::Ragged && ra != rb) {
    acc.d.note = "token keys and p_null aligned; register columns skipped (" + std::to_string(ra) + " vs " +
                 std::to_string(rb) + " registers)";
  }
  for (int64_t t = 0; t < n; ++t) {
    const TokenTrace &x = a.records[t], &y = b.records[t];
    if (f.shape == FieldShape::Scalar) {
      const double u = f.i32 ? x.*f.i32 : f.f32 ? x.*f.f32 : static_cast<double>(x.*f.i64);
      const double v = f.i32 ? y.*f.i32 : f.f32 ? y.*f.f32 : static_cast<double>(y.*f.i64);
      ++acc.d.tokens;
      acc.add(u, v, t);
      continue;
    }
    const size_t na = f.fvec ? (x.*f.fvec).size() : (x.*f.ivec).size();
    const size_t nb = f.fvec ? (y.*f.fvec).size() : (y.*f.ivec).size();
    if (na == 0 || nb == 0) continue;  // not recorded at this token in one of the runs
    if (f.shape == FieldShape::Ragged) {
      const int64_t la = attn_row_len(ra, t), lb = attn_row_len(rb, t);
      const int64_t rows = static_cast<int64_t>(na) / la;
      if (static_cast<int64_t>(na) % la != 0 || static_cast<int64_t>(nb) % lb != 0 ||
          static_cast<int64_t>(nb) / lb != rows) {
        acc.d.note = "not compared: the runs have different attention layers or heads";
        acc.d.tokens = 0;
        return acc.d;
      }
      const float *pa = (x.*f.fvec).data(), *pb = (y.*f.fvec).data();
      for (int64_t s = 0; s < rows; ++s) {
        for (int64_t j = 0; j <= t; ++j) acc.add(pa[s * la + ra + j], pb[s * lb + rb + j], t);  // token keys
        acc.add(pa[s * la + la - 1], pb[s * lb + lb - 1], t);                                   // p_null
      }
      ++acc.d.tokens;
      continue;
    }
    if (na != nb) {
      acc.d.note = "not compared: " + std::to_string(na) + " vs " + std::to_string(nb) + " values per token " +
                   f.dims_text + " (different models?)";
      acc.d.tokens = 0;
      return acc.d;
    }
    for (size_t i = 0; i < na; ++i) {
      if (f.fvec)
        acc.add((x.*f.fvec)[i], (y.*f.fvec)[i], t);
      else  // expert ids: 1 where the slot's expert differs, so mean |d| is the fraction of slots that differ
        acc.add((x.*f.ivec)[i] != (y.*f.ivec)[i] ? 1.0 : 0.0, 0.0, t);
    }
    ++acc.d.tokens;
  }
  if (f.ivec && acc.d.tokens > 0) acc.d.note = "per expert slot: 1 where the selected expert differs";
  return acc.done();
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

std::string tok(int64_t t) {
  return t < 0 ? "-" : std::to_string(t);
}

}  // namespace

RunComparison compare_runs(const Run& a, const Run& b) {
  RunComparison c;
  c.a_label = a.label;
  c.b_label = b.label;
  c.a_desc = describe(a);
  c.b_desc = describe(b);
  c.a_tokens = static_cast<int64_t>(a.records.size());
  c.b_tokens = static_cast<int64_t>(b.records.size());
  settings_diff(a, b, &c.settings);
  const int64_t m = std::min(c.a_tokens, c.b_tokens);
  int64_t n = 0;
  while (n < m && a.records[n].token_id == b.records[n].token_id) ++n;
  c.common_tokens = n;
  c.first_token_mismatch = n < m ? n : -1;
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<float>&la = a.records[t].logits, &lb = b.records[t].logits;
    if (la.empty() || la.size() != lb.size()) continue;
    const int64_t V = static_cast<int64_t>(la.size());
    ++c.top1_compared;
    if (argmax(la.data(), V) == argmax(lb.data(), V))
      ++c.top1_agree;
    else if (c.first_top1_disagreement < 0)
      c.first_top1_disagreement = t;
  }
  for (const Field& f : fields()) {
    if (std::string(f.name) == "token_ids" || std::string(f.name) == "position") continue;
    FieldDiff d = compare_field(f, a, b, n);
    if (!d.compared() && d.note.empty()) continue;  // neither run recorded it
    if (d.first_diff_token >= 0 && (c.first_diff_token < 0 || d.first_diff_token < c.first_diff_token)) {
      c.first_diff_token = d.first_diff_token;
    }
    c.fields.push_back(std::move(d));
  }
  return c;
}

std::vector<std::string> recording_differences(const Recording& a, const Recording& b) {
  std::vector<std::string> w;
  const CheckpointIdentity &x = a.checkpoint, &y = b.checkpoint;
  if (x.config_sha256 != y.config_sha256 || x.weights_hash != y.weights_hash) {
    std::string what = x.config_sha256 != y.config_sha256 ? "config.json" : "weights";
    if (x.config_sha256 != y.config_sha256 && x.weights_hash != y.weights_hash) what = "config.json and weights";
    w.push_back("different checkpoints: " + (x.name.empty() ? std::string("?") : x.name) + " vs " +
                (y.name.empty() ? std::string("?") : y.name) + " (" + what + " differ)");
  } else if (x.name != y.name) {
    w.push_back("checkpoint folders differ (" + x.name + " vs " + y.name + ") but config and weights are identical");
  }
  if (a.adapter_identity != b.adapter_identity) {
    w.push_back("different adapters: " + (a.adapter_identity.empty() ? std::string("none") : a.adapter_identity) +
                " vs " + (b.adapter_identity.empty() ? std::string("none") : b.adapter_identity));
  }
  if (a.weights != b.weights)
    w.push_back("different weights: " + (a.weights.empty() ? std::string("as stored") : a.weights) + " vs " +
                (b.weights.empty() ? std::string("as stored") : b.weights) + " (quantised on load)");
  if (a.prompt != b.prompt) w.push_back("different prompts: \"" + a.prompt + "\" vs \"" + b.prompt + "\"");
  const size_t n = std::min(a.tokens.size(), b.tokens.size());
  size_t common = 0;
  while (common < n && a.tokens[common] == b.tokens[common]) ++common;
  if (common < n) {
    w.push_back("different tokens from token " + std::to_string(common) + ": only the first " +
                std::to_string(common) + " are compared");
  } else if (a.tokens.size() != b.tokens.size()) {
    w.push_back("different lengths: " + std::to_string(a.tokens.size()) + " vs " + std::to_string(b.tokens.size()) +
                " tokens; the common " + std::to_string(n) + " are compared");
  }
  return w;
}

std::string comparison_text(const RunComparison& c, const std::string& a_name, const std::string& b_name) {
  std::string s = "A: " + a_name + " (" + c.a_desc + ")\nB: " + b_name + " (" + c.b_desc + ")\n";
  for (const std::string& w : c.warnings) s += "WARNING: " + w + "\n";
  if (c.settings.empty()) s += c.warnings.empty() ? "settings: identical\n" : "run settings: identical (see the warnings)\n";
  for (const std::string& d : c.settings) s += "settings: " + d + "\n";
  s += "tokens: " + std::to_string(c.common_tokens) + " common (" + std::to_string(c.a_tokens) + " in A, " +
       std::to_string(c.b_tokens) + " in B)";
  s += c.first_token_mismatch >= 0 ? ", token ids differ from token " + std::to_string(c.first_token_mismatch) + "\n"
                                   : "\n";
  if (c.top1_compared > 0) {
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * static_cast<double>(c.top1_agree) / c.top1_compared);
    s += "logits top-1 agreement: " + std::to_string(c.top1_agree) + "/" + std::to_string(c.top1_compared) + " (" +
         pct + ")" +
         (c.first_top1_disagreement >= 0 ? ", first disagreement at token " + std::to_string(c.first_top1_disagreement)
                                         : "") +
         "\n";
  }
  s +=
      "first differing token (any field): " + (c.first_diff_token < 0 ? std::string("none") : tok(c.first_diff_token)) +
      "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%-18s %7s %11s %11s %9s %11s\n", "field", "tokens", "max|d|", "mean|d|", "at token",
                "first diff");
  s += line;
  for (const FieldDiff& d : c.fields) {
    if (!d.compared()) {
      s += d.field + std::string(d.field.size() < 19 ? 19 - d.field.size() : 1, ' ') + d.note + "\n";
      continue;
    }
    std::snprintf(line, sizeof line, "%-18s %7lld %11s %11s %9s %11s", d.field.c_str(),
                  static_cast<long long>(d.tokens), fmt(d.max_abs).c_str(), fmt(d.mean_abs).c_str(),
                  tok(d.max_token).c_str(), tok(d.first_diff_token).c_str());
    s += line;
    if (d.nonfinite_mismatch) s += "  " + std::to_string(d.nonfinite_mismatch) + " non-finite mismatches";
    if (!d.note.empty()) s += "  (" + d.note + ")";
    s += "\n";
  }
  return s;
}

std::string comparison_json(const RunComparison& c, const std::string& a_name, const std::string& b_name) {
  using json = nlohmann::ordered_json;
  json j = json::object();
  j["a"] = {{"name", a_name}, {"run", c.a_label}, {"tokens", c.a_tokens}, {"description", c.a_desc}};
  j["b"] = {{"name", b_name}, {"run", c.b_label}, {"tokens", c.b_tokens}, {"description", c.b_desc}};
  j["settings_differences"] = c.settings;
  j["warnings"] = c.warnings;
  j["common_tokens"] = c.common_tokens;
  j["first_token_mismatch"] = c.first_token_mismatch;
  j["top1_compared"] = c.top1_compared;
  j["top1_agree"] = c.top1_agree;
  j["top1_agreement"] = c.top1_compared ? static_cast<double>(c.top1_agree) / c.top1_compared : 1.0;
  j["first_top1_disagreement"] = c.first_top1_disagreement;
  j["first_diff_token"] = c.first_diff_token;
  json fs = json::object();
  for (const FieldDiff& d : c.fields) {
    json f = json::object();
    f["tokens"] = d.tokens;
    f["elements"] = d.elements;
    f["max_abs"] = d.max_abs;
    f["mean_abs"] = d.mean_abs;
    f["max_token"] = d.max_token;
    f["first_diff_token"] = d.first_diff_token;
    f["nonfinite_mismatch"] = d.nonfinite_mismatch;
    if (!d.note.empty()) f["note"] = d.note;
    fs[d.field] = std::move(f);
  }
  j["fields"] = std::move(fs);
  return j.dump(2) + "\n";
}

}  // namespace hl
