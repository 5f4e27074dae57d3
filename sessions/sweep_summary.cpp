// The numbers the sweep statistics window draws (see sweep_summary.h).
#include "sessions/sweep_summary.h"

#include <cmath>
#include <limits>
#include <set>

#include "engine/probes/router_probe.h"

namespace hl {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string text(const nlohmann::ordered_json& j) {
  if (j.is_null()) return "";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

std::vector<int64_t> ints(const nlohmann::ordered_json& j) {
  std::vector<int64_t> v;
  if (j.is_array())
    for (const auto& e : j)
      if (e.is_number_integer()) v.push_back(e.get<int64_t>());
  return v;
}

std::string shapeText(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}
}  // namespace

CellBox cell_box(const Distribution& d, int64_t cell, const SketchParams& sp) {
  CellBox b;
  const size_t c = static_cast<size_t>(cell);
  b.count = d.count[c];
  b.nonfinite = d.nonfinite[c];
  if (b.count == 0) {
    b.mean = b.whisker_lo = b.q25 = b.median = b.q75 = b.whisker_hi = b.min = b.max = kNaN;
    return b;
  }
  b.mean = d.mean[c];
  b.min = d.min[c];
  b.max = d.max[c];
  b.whisker_lo = d.quantile(cell, kBoxWhiskerLo, sp);
  b.q25 = d.quantile(cell, 0.25, sp);
  b.median = d.quantile(cell, 0.5, sp);
  b.q75 = d.quantile(cell, 0.75, sp);
  b.whisker_hi = d.quantile(cell, kBoxWhiskerHi, sp);
  return b;
}

CellGrid cell_grid(const Distribution& d) {
  CellGrid g;
  if (d.shape.size() >= 2) {
    g.rows = d.shape[0];
    g.cols = d.cells() / std::max<int64_t>(1, d.shape[0]);
  } else if (d.shape.size() == 1) {
    g.cols = d.shape[0];
  }
  if (d.cells() == 0) g.rows = g.cols = 0;
  return g;
}

HistShares hist_shares(const Distribution& d, const std::vector<int64_t>& cells, const HistRange& hr) {
  HistShares h;
  h.log10 = hr.log10;
  h.width = (hr.hi - hr.lo) / kHistBins;
  h.counts.assign(kHistBins, 0);
  for (int64_t c : cells)
    for (int b = 0; b < kHistBins; ++b)
      h.counts[static_cast<size_t>(b)] += d.hist[static_cast<size_t>(c) * kHistBins + b];
  for (int64_t n : h.counts) h.total += n;
  for (int b = 0; b < kHistBins; ++b) {
    h.centers.push_back(hr.lo + (b + 0.5) * h.width);
    h.share.push_back(h.total > 0 ? static_cast<double>(h.counts[static_cast<size_t>(b)]) / static_cast<double>(h.total)
                                  : 0.0);
  }
  return h;
}

std::vector<RouterLayerLoad> router_loads(const RouterSums& r) {
  std::vector<RouterLayerLoad> out;
  for (int64_t x = 0; x < r.moe; ++x) {
    const auto at = static_cast<size_t>(x * r.experts);
    const std::vector<double> cnt(r.topk_count.begin() + static_cast<std::ptrdiff_t>(at),
                                  r.topk_count.begin() + static_cast<std::ptrdiff_t>(at + r.experts));
    const RouterWindowStats s =
        router_stats_from_sums(cnt.data(), r.prob_sum.data() + at, r.lse_sq_sum[static_cast<size_t>(x)],
                               r.tokens[static_cast<size_t>(x)], r.experts, r.top_k);
    RouterLayerLoad l;
    l.tokens = r.tokens[static_cast<size_t>(x)];
    l.load = s.load;
    l.importance = s.importance;
    l.balance_loss = s.balance_loss;
    l.z_loss = s.z_loss;
    l.max_load = s.max_load;
    out.push_back(std::move(l));
  }
  return out;
}

nlohmann::ordered_json sweep_schedule_json(const LayerSchedule& s) {
  return {{"describe", s.describe()},
          {"mixers", s.mixer_strip()},
          {"ffns", s.ffn_strip()},
          {"attention_layers", s.attention_layers()},
          {"ssm_layers", s.ssm_layers()},
          {"moe_layers", s.moe_layers()},
          {"attention_heads", s.params().attn.heads},
          {"depths", s.size() + 1}};
}

SweepAxes sweep_axes(const nlohmann::ordered_json& manifest) {
  SweepAxes s;
  const nlohmann::ordered_json sc = manifest.is_object() ? manifest.value("schedule", nlohmann::ordered_json::object())
                                                         : nlohmann::ordered_json::object();
  if (!sc.is_object()) return s;
  s.attention = ints(sc.value("attention_layers", nlohmann::ordered_json()));
  s.ssm = ints(sc.value("ssm_layers", nlohmann::ordered_json()));
  s.moe = ints(sc.value("moe_layers", nlohmann::ordered_json()));
  s.mixers = text(sc.value("mixers", nlohmann::ordered_json()));
  s.ffns = text(sc.value("ffns", nlohmann::ordered_json()));
  return s;
}

std::vector<std::string> axis_names(const std::string& axes) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : axes) {
    if (ch == '(' || ch == ' ') continue;
    if (ch == ',' || ch == ')') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string axis_label(const SweepAxes& s, const std::string& name, int64_t i) {
  // Built with += (g++ 12 warns falsely, -Wrestrict, on "L" + std::to_string(...)).
  auto tagged = [](const char* tag, int64_t n) {
    std::string t = tag;
    t += std::to_string(n);
    return t;
  };
  auto layer = [&](const std::vector<int64_t>& v) {
    return i >= 0 && i < static_cast<int64_t>(v.size()) ? tagged("L", v[static_cast<size_t>(i)]) : tagged("#", i);
  };
  if (name == "A_n") return layer(s.attention);
  if (name == "M_n") return layer(s.ssm);
  if (name == "X_n") return layer(s.moe);
  if (name == "L+1") return tagged("d", i);
  if (name == "nh" || name == "mh") return tagged("h", i);
  if (name == "E") return tagged("e", i);
  return tagged("#", i);
}

std::string axis_title(const std::string& name) {
  if (name == "A_n") return "attention layer";
  if (name == "M_n") return "Mamba layer";
  if (name == "X_n") return "MoE layer";
  if (name == "L+1") return "depth";
  if (name == "nh") return "head";
  if (name == "mh") return "SSM head (Mamba-1: channel mean)";
  if (name == "E") return "expert";
  return name;
}

std::vector<std::pair<std::string, std::string>> sweep_header(const SweepFile& f) {
  const nlohmann::ordered_json& m = f.manifest;
  std::vector<std::pair<std::string, std::string>> h;
  const nlohmann::ordered_json ck = m.value("checkpoint", nlohmann::ordered_json::object());
  if (ck.is_object()) {
    std::string c = text(ck.value("name", nlohmann::ordered_json()));
    const std::string folder = text(ck.value("folder", nlohmann::ordered_json()));
    if (!folder.empty()) c += (c.empty() ? "" : " — ") + folder;
    const std::string w = text(ck.value("weights_hash", nlohmann::ordered_json()));
    if (!w.empty()) c += " (weights " + w.substr(0, 12) + ")";
    h.emplace_back("checkpoint", c);
  }
  const std::string adapter = text(m.value("adapter", nlohmann::ordered_json()));
  if (!adapter.empty()) h.emplace_back("adapter", adapter);
  std::string prompts = std::to_string(f.stats.prompts) + " prompts, " + std::to_string(f.stats.tokens) + " tokens";
  const std::string path = text(m.value("prompts_path", nlohmann::ordered_json()));
  if (!path.empty()) prompts += " from " + path;
  h.emplace_back("prompts", prompts);
  std::string opts;
  const nlohmann::ordered_json o = m.value("options", nlohmann::ordered_json::object());
  if (o.is_object())
    for (const auto& [k, v] : o.items()) opts += (opts.empty() ? "" : ", ") + k + "=" + text(v);
  h.emplace_back("options", opts.empty() ? "(defaults)" : opts);
  const nlohmann::ordered_json sc = m.value("schedule", nlohmann::ordered_json::object());
  if (sc.is_object() && sc.contains("describe")) h.emplace_back("schedule", text(sc["describe"]));
  h.emplace_back("sketch", "relative accuracy " + nlohmann::json(f.stats.sketch.alpha).dump());
  return h;
}

SweepComparison compare_sweeps(const SweepFile& a, const SweepFile& b) {
  SweepComparison c;
  const std::vector<InstrumentInfo>& ins = sweep_instruments();
  const SweepAxes sa = sweep_axes(a.manifest), sb = sweep_axes(b.manifest);
  if (sa.mixers != sb.mixers || sa.ffns != sb.ffns) {
    c.mismatch =
        "different layer schedules: " + sa.mixers + "/" + sa.ffns + " in A, " + sb.mixers + "/" + sb.ffns + " in B";
  } else if (a.stats.dists.size() != b.stats.dists.size()) {
    c.mismatch = "different instrument sets: " + std::to_string(a.stats.dists.size()) + " in A, " +
                 std::to_string(b.stats.dists.size()) + " in B";
  } else {
    for (size_t i = 0; i < a.stats.dists.size() && c.mismatch.empty(); ++i)
      // An instrument one side has no cells of (a format-version-1 file's hidden attention) is drawn
      // for the other side only (sweep_b_drawn), not a mismatch.
      if (a.stats.dists[i].shape != b.stats.dists[i].shape && a.stats.dists[i].cells() > 0 &&
          b.stats.dists[i].cells() > 0)
        c.mismatch = std::string("different schedule shapes: ") + (i < ins.size() ? ins[i].name : "?") + " is " +
                     shapeText(a.stats.dists[i].shape) + " in A, " + shapeText(b.stats.dists[i].shape) + " in B";
    const RouterSums &ra = a.stats.router, &rb = b.stats.router;
    if (c.mismatch.empty() && (ra.moe != rb.moe || ra.experts != rb.experts || ra.top_k != rb.top_k))
      c.mismatch = "different routers: " + std::to_string(ra.moe) + " MoE layers × " + std::to_string(ra.experts) +
                   " experts, top-" + std::to_string(ra.top_k) + " in A, " + std::to_string(rb.moe) + " × " +
                   std::to_string(rb.experts) + ", top-" + std::to_string(rb.top_k) + " in B";
  }
  // What else differs: the point of comparing (options), and what makes the comparison less direct.
  auto field = [](const nlohmann::ordered_json& m, const char* k) {
    return m.is_object() ? m.value(k, nlohmann::ordered_json()) : nlohmann::ordered_json();
  };
  const nlohmann::ordered_json oa = field(a.manifest, "options"), ob = field(b.manifest, "options");
  std::set<std::string> keys;
  for (const nlohmann::ordered_json* o : {&oa, &ob})
    if (o->is_object())
      for (const auto& [k, v] : o->items()) keys.insert(k);
  for (const std::string& k : keys) {
    const std::string va = oa.is_object() && oa.contains(k) ? text(oa[k]) : "(default)";
    const std::string vb = ob.is_object() && ob.contains(k) ? text(ob[k]) : "(default)";
    if (va != vb) c.differences.push_back("options." + k + ": " + va + " vs " + vb);
  }
  const nlohmann::ordered_json ca = field(a.manifest, "checkpoint"), cb = field(b.manifest, "checkpoint");
  auto ckey = [&](const nlohmann::ordered_json& j, const char* k) {
    return j.is_object() ? text(j.value(k, nlohmann::ordered_json())) : "";
  };
  if (ckey(ca, "config_sha256") != ckey(cb, "config_sha256") || ckey(ca, "weights_hash") != ckey(cb, "weights_hash"))
    c.differences.push_back("checkpoint: " + ckey(ca, "name") + " vs " + ckey(cb, "name") + " (other weights)");
  if (text(field(a.manifest, "adapter")) != text(field(b.manifest, "adapter")))
    c.differences.push_back("adapter: " + text(field(a.manifest, "adapter")) + " vs " +
                            text(field(b.manifest, "adapter")));
  const nlohmann::ordered_json pa = field(a.manifest, "prompts_file"), pb = field(b.manifest, "prompts_file");
  if (ckey(pa, "sha256") != ckey(pb, "sha256")) c.differences.push_back("prompts file: other prompts (sha256 differs)");
  if (a.stats.prompts != b.stats.prompts || a.stats.tokens != b.stats.tokens)
    c.differences.push_back("counts: " + std::to_string(a.stats.prompts) + " prompts, " +
                            std::to_string(a.stats.tokens) + " tokens vs " + std::to_string(b.stats.prompts) +
                            " prompts, " + std::to_string(b.stats.tokens) + " tokens");
  if (a.stats.sketch.alpha != b.stats.sketch.alpha)
    c.differences.push_back("sketch accuracy: " + nlohmann::json(a.stats.sketch.alpha).dump() + " vs " +
                            nlohmann::json(b.stats.sketch.alpha).dump());
  return c;
}

}  // namespace hl
