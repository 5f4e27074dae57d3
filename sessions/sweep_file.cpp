// Sweep stats files (see sweep_file.h): the tensors of a SweepStats with their derived statistics
// (variance, quantiles, router load and balance), and the checked reader.
#include "sessions/sweep_file.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/core/error.h"
#include "engine/io/file_check.h"
#include "engine/io/input_limits.h"
#include "engine/io/safetensors.h"
#include "engine/probes/router_probe.h"

namespace hl {

namespace {

// SketchParams::key clamps the bucket index to ±(kKeyOffset − 1).
constexpr double kMinAlpha = 1e-3, kMaxAlpha = 0.5;
constexpr int32_t kMaxKeySpan = SketchParams::kKeyOffset - 1;
constexpr int64_t kMaxCells = int64_t{1} << 24;
// Every count a file holds (values, prompts, tokens, router selections): at most 2^53, exact in a
// double, so that merging up to 1024 aggregates (MPI ranks, resumed runs) cannot overflow an int64.
constexpr int64_t kMaxCount = int64_t{1} << 53;
constexpr size_t kVersion1Instruments = 9, kSsmDeltaIndex = 4;  // sweep_instruments(): ssm_delta_mean (M_n)

std::vector<int64_t> with(std::vector<int64_t> s, int64_t last) {
  s.push_back(last);
  return s;
}

class Writer {
 public:
  Writer(SafetensorsWriter& w, bool exact) : w_(w), exact_(exact) {}
  void real(const std::string& name, const std::vector<int64_t>& shape, const std::vector<double>& v) {
    if (exact_) {
      std::vector<int64_t> bits(v.size());
      if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * 8);  // an empty axis: no data pointer
      w_.add(name, DType::I64, shape, bits.data(), bits.size() * 8);
    } else {
      std::vector<float> f(v.begin(), v.end());
      w_.add(name, DType::F32, shape, f.data(), f.size() * 4);
    }
  }
  void i64(const std::string& name, const std::vector<int64_t>& shape, const std::vector<int64_t>& v) {
    w_.add(name, DType::I64, shape, v.data(), v.size() * 8);
  }

 private:
  SafetensorsWriter& w_;
  bool exact_;
};

}  // namespace

std::vector<uint8_t> serialize_sweep_stats(const SweepStats& st, const nlohmann::ordered_json& extra, bool exact,
                                           const std::vector<int64_t>* finished) {
  SafetensorsWriter sw;
  Writer w(sw, exact);
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  m["format"] = kStatsFormatName;
  m["format_version"] = kStatsFormatVersion;
  // The caller's fields; the writer's own (format, version and everything set below) win, so that a
  // manifest read back (an older version's) and passed on is written as this version describes it.
  if (extra.is_object())
    for (const auto& [k, v] : extra.items())
      if (!m.contains(k)) m[k] = v;
  m["storage"] = exact ? "f64-bits" : "f32";
  m["prompts"] = st.prompts;
  m["tokens"] = st.tokens;
  m["sketch"] = {{"kind", "log-bucket (DDSketch)"},
                 {"relative_accuracy", st.sketch.alpha},
                 {"gamma", st.sketch.gamma()},
                 {"zero_below", SketchParams::kZero},
                 {"key_offset", SketchParams::kKeyOffset}};
  m["quantile_levels"] = stats_quantile_levels();
  m["histogram_bins"] = kHistBins;
  const std::vector<InstrumentInfo>& ins = sweep_instruments();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  const std::vector<double>& Q = stats_quantile_levels();
  for (size_t i = 0; i < ins.size(); ++i) {
    const Distribution& d = st.dists[i];
    const std::string p = ins[i].name;
    list.push_back(
        {{"name", p},
         {"axes", ins[i].axes},
         {"shape", d.shape},
         {"histogram", {{"lo", ins[i].hist.lo}, {"hi", ins[i].hist.hi}, {"of", ins[i].hist.log10 ? "log10|x|" : "x"}}},
         {"meaning", ins[i].meaning}});
    const int64_t n = d.cells();
    w.i64(p + ".count", d.shape, d.count);
    w.i64(p + ".nonfinite", d.shape, d.nonfinite);
    w.real(p + ".mean", d.shape, d.mean);
    w.real(p + ".m2", d.shape, d.m2);
    w.real(p + ".min", d.shape, d.min);
    w.real(p + ".max", d.shape, d.max);
    std::vector<double> var(static_cast<size_t>(n)), q(static_cast<size_t>(n) * Q.size());
    std::vector<int64_t> offsets(static_cast<size_t>(n) + 1, 0), counts;
    std::vector<int32_t> keys;
    for (int64_t c = 0; c < n; ++c) {
      var[static_cast<size_t>(c)] = d.variance(c);
      for (size_t j = 0; j < Q.size(); ++j) q[static_cast<size_t>(c) * Q.size() + j] = d.quantile(c, Q[j], st.sketch);
      for (const auto& [k, v] : d.sketch[static_cast<size_t>(c)]) {
        keys.push_back(k);
        counts.push_back(v);
      }
      offsets[static_cast<size_t>(c) + 1] = static_cast<int64_t>(keys.size());
    }
    w.real(p + ".var", d.shape, var);
    w.real(p + ".quantiles", with(d.shape, static_cast<int64_t>(Q.size())), q);
    w.i64(p + ".hist", with(d.shape, kHistBins), d.hist);
    w.i64(p + ".sketch_offsets", {n + 1}, offsets);
    sw.add(p + ".sketch_keys", DType::I32, {static_cast<int64_t>(keys.size())}, keys.data(), keys.size() * 4);
    w.i64(p + ".sketch_counts", {static_cast<int64_t>(counts.size())}, counts);
  }
  m["instruments"] = std::move(list);
  const RouterSums& r = st.router;
  m["router"] = {{"moe_layers", r.moe}, {"experts", r.experts}, {"top_k", r.top_k}};
  const std::vector<int64_t> XE = {r.moe, r.experts}, X = {r.moe};
  w.i64("router.topk_count", XE, r.topk_count);
  w.real("router.prob_sum", XE, r.prob_sum);
  w.i64("router.tokens", X, r.tokens);
  w.real("router.lse_sq_sum", X, r.lse_sq_sum);
  std::vector<double> load, importance, balance, zloss, maxload;
  for (int64_t x = 0; x < r.moe; ++x) {
    std::vector<double> cnt(r.topk_count.begin() + x * r.experts, r.topk_count.begin() + (x + 1) * r.experts);
    const RouterWindowStats s =
        router_stats_from_sums(cnt.data(), r.prob_sum.data() + x * r.experts, r.lse_sq_sum[static_cast<size_t>(x)],
                               r.tokens[static_cast<size_t>(x)], r.experts, r.top_k);
    load.insert(load.end(), s.load.begin(), s.load.end());
    importance.insert(importance.end(), s.importance.begin(), s.importance.end());
    balance.push_back(s.balance_loss);
    zloss.push_back(s.z_loss);
    maxload.push_back(s.max_load);
  }
  w.real("router.load", XE, load);
  w.real("router.importance", XE, importance);
  w.real("router.balance_loss", X, balance);
  w.real("router.z_loss", X, zloss);
  w.real("router.max_load", X, maxload);
  if (finished) w.i64("progress.finished", {static_cast<int64_t>(finished->size())}, *finished);
  m["tensors"] = {
      {"<instrument>.count", "I64: finite values counted per cell"},
      {"<instrument>.nonfinite", "I64: NaN or Inf values left out"},
      {"<instrument>.mean / .m2 / .var / .min / .max",
       "mean, sum of squared deviations, population variance m2/count, extremes"},
      {"<instrument>.quantiles", "(cells..., len(quantile_levels)) from the sketch, within relative_accuracy"},
      {"<instrument>.hist",
       "I64 (cells..., histogram_bins): equal bins over [lo, hi] of the instrument's 'of'; outside values in the end "
       "bins"},
      {"<instrument>.sketch_offsets / .sketch_keys / .sketch_counts",
       "per cell c the buckets [offsets[c], offsets[c+1]): key 0 is zero, key_offset + i is gamma^(i-1) < x <= "
       "gamma^i, -(key_offset + i) its negative"},
      {"router.topk_count", "I64 (X_n, E): top-k selections of each expert over the whole set"},
      {"router.prob_sum / router.tokens / router.lse_sq_sum", "sums the router statistics derive from"},
      {"router.load / importance / balance_loss / z_loss / max_load",
       "f_i = topk_count / (tokens k), P_i = prob_sum / tokens, E sum f_i P_i, mean lse^2, max f_i (as the router "
       "view)"},
      {"progress.finished", "progress files only: the finished prompt indices"}};
  sw.set_metadata(kStatsMetadataKey, m.dump());
  return sw.serialize();
}

void save_sweep_stats(const std::string& path, const SweepStats& st, const nlohmann::ordered_json& extra, bool exact,
                      const std::vector<int64_t>* finished) {
  const std::vector<uint8_t> bytes = serialize_sweep_stats(st, extra, exact, finished);
  write_file_atomic(path, bytes.data(), bytes.size());
}

namespace {

class Reader {
 public:
  Reader(const SafetensorsFile& f, const std::string& name, bool exact) : f_(f), name_(name), exact_(exact) {}
  [[noreturn]] void fail(const std::string& what) const { throw LoadError(name_ + ": " + what); }

  const TensorInfo& get(const std::string& t, DType dt, const std::vector<int64_t>& shape) const {
    const TensorInfo* ti = f_.find(t);
    if (!ti) fail("missing tensor " + quote_name(t));
    if (ti->dtype != dt)
      fail("tensor " + quote_name(t) + ": dtype " + dtype_name(ti->dtype) + ", expected " + dtype_name(dt));
    if (ti->shape != shape)
      fail("tensor " + quote_name(t) + ": shape " + shape_to_string(ti->shape) + ", expected " +
           shape_to_string(shape));
    return *ti;
  }
  std::vector<int64_t> i64(const std::string& t, const std::vector<int64_t>& shape, int64_t lo = 0) const {
    const TensorInfo& ti = get(t, DType::I64, shape);
    std::vector<int64_t> v(static_cast<size_t>(ti.numel()));
    if (!v.empty()) std::memcpy(v.data(), ti.data, v.size() * 8);
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] < lo || v[i] > kMaxCount)
        fail("tensor " + quote_name(t) + ": element " + std::to_string(i) + " is " + std::to_string(v[i]) +
             ", allowed [" + std::to_string(lo) + ", 2^53]");
    return v;
  }
  std::vector<double> real(const std::string& t, const std::vector<int64_t>& shape) const {
    const TensorInfo& ti = get(t, exact_ ? DType::I64 : DType::F32, shape);
    std::vector<double> v(static_cast<size_t>(ti.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      if (exact_) {
        std::memcpy(&v[i], ti.data + 8 * i, 8);
      } else {
        float x;
        std::memcpy(&x, ti.data + 4 * i, 4);
        v[i] = x;
      }
    }
    return v;
  }

 private:
  const SafetensorsFile& f_;
  std::string name_;
  bool exact_;
};

int64_t bounded(const Reader& rd, const nlohmann::json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    rd.fail("manifest: " + what + " is " + v.dump().substr(0, 40) + ", allowed an integer in [" + std::to_string(lo) +
            ", " + std::to_string(hi) + "]");
  return v.get<int64_t>();
}

void read_distribution(const Reader& rd, const std::string& p, Distribution& d) {
  const int64_t n = d.cells();
  d.count = rd.i64(p + ".count", d.shape);
  d.nonfinite = rd.i64(p + ".nonfinite", d.shape);
  d.mean = rd.real(p + ".mean", d.shape);
  d.m2 = rd.real(p + ".m2", d.shape);
  d.min = rd.real(p + ".min", d.shape);
  d.max = rd.real(p + ".max", d.shape);
  d.hist = rd.i64(p + ".hist", with(d.shape, kHistBins));
  const std::vector<int64_t> off = rd.i64(p + ".sketch_offsets", {n + 1});
  // The bucket count the offsets declare is bounded before the keys and counts are read.
  if (off[0] != 0 || off.back() > n * 2 * (kMaxKeySpan + 1))
    rd.fail("tensor " + quote_name(p + ".sketch_offsets") + ": first " + std::to_string(off[0]) + ", last " +
            std::to_string(off.back()) + ", allowed first 0 and at most " + std::to_string(2 * (kMaxKeySpan + 1)) +
            " buckets per cell");
  const TensorInfo* kt = &rd.get(p + ".sketch_keys", DType::I32, {off.back()});
  const std::vector<int64_t> counts = rd.i64(p + ".sketch_counts", {off.back()}, 1);
  d.sketch.assign(static_cast<size_t>(n), {});
  for (int64_t c = 0; c < n; ++c) {
    const size_t cc = static_cast<size_t>(c);
    if (off[cc + 1] < off[cc] || off[cc + 1] > off.back())
      rd.fail("tensor " + quote_name(p + ".sketch_offsets") + ": element " + std::to_string(c + 1) + " is " +
              std::to_string(off[cc + 1]) + ", allowed [" + std::to_string(off[cc]) + ", " +
              std::to_string(off.back()) + "]");
    int64_t sum = 0, hsum = 0;
    int32_t prev = std::numeric_limits<int32_t>::min();
    for (int64_t b = off[cc]; b < off[cc + 1]; ++b) {
      int32_t k;
      std::memcpy(&k, kt->data + 4 * b, 4);
      const int64_t a = k < 0 ? -int64_t{k} : int64_t{k};  // INT32_MIN has no int32 negation
      if ((k != 0 && (a < SketchParams::kKeyOffset - kMaxKeySpan || a > SketchParams::kKeyOffset + kMaxKeySpan)) ||
          k <= prev)
        rd.fail("tensor " + quote_name(p + ".sketch_keys") + ": element " + std::to_string(b) + " is " +
                std::to_string(k) + ", allowed 0 or ±[" + std::to_string(SketchParams::kKeyOffset - kMaxKeySpan) +
                ", " + std::to_string(SketchParams::kKeyOffset + kMaxKeySpan) + "], increasing within a cell");
      prev = k;
      if (__builtin_add_overflow(sum, counts[static_cast<size_t>(b)], &sum)) rd.fail("sketch counts overflow");
      d.sketch[cc][k] = counts[static_cast<size_t>(b)];
    }
    for (int b = 0; b < kHistBins; ++b)
      if (__builtin_add_overflow(hsum, d.hist[cc * kHistBins + static_cast<size_t>(b)], &hsum))
        rd.fail("histogram overflow");
    // A cell with values has finite extremes in order, a finite mean and M2 >= 0 (what quantile's
    // clamp and the views' variance rely on); an empty cell's are not read.
    if (d.count[cc] > 0 && !(std::isfinite(d.min[cc]) && std::isfinite(d.max[cc]) && d.min[cc] <= d.max[cc] &&
                             std::isfinite(d.mean[cc]) && std::isfinite(d.m2[cc]) && d.m2[cc] >= 0))
      rd.fail("instrument " + quote_name(p) + ": cell " + std::to_string(c) + " has min " + std::to_string(d.min[cc]) +
              ", max " + std::to_string(d.max[cc]) + ", mean " + std::to_string(d.mean[cc]) + ", m2 " +
              std::to_string(d.m2[cc]) + " (allowed: finite, min <= max, m2 >= 0)");
    if (sum != d.count[cc] || hsum != d.count[cc])
      rd.fail("instrument " + quote_name(p) + ": cell " + std::to_string(c) + " counts " + std::to_string(d.count[cc]) +
              " values, its sketch " + std::to_string(sum) + " and its histogram " + std::to_string(hsum) +
              " (allowed: all equal)");
  }
}

}  // namespace

namespace {

SweepFile parse_checked(const uint8_t* bytes, uint64_t size, const std::string& name) {
  const SafetensorsFile f = SafetensorsFile::parse(bytes, size, name);
  const auto it = f.metadata().find(kStatsMetadataKey);
  if (it == f.metadata().end())
    throw LoadError(name + ": not a HybridLens stats file: the safetensors __metadata__ has no '" +
                    std::string(kStatsMetadataKey) + "' manifest");
  SweepFile out;
  out.manifest = nlohmann::ordered_json::parse(it->second, nullptr, false);
  const nlohmann::ordered_json& m = out.manifest;
  if (!m.is_object()) throw LoadError(name + ": manifest: not a JSON object");
  if (m.value("format", "") != kStatsFormatName)
    throw LoadError(name + ": manifest: format is not '" + std::string(kStatsFormatName) + "'");
  const std::string storage = m.value("storage", "");
  if (storage != "f32" && storage != "f64-bits")
    throw LoadError(name + ": manifest: storage is '" + quote_name(storage) + "', allowed 'f32' or 'f64-bits'");
  out.exact = storage == "f64-bits";
  Reader rd(f, name, out.exact);
  const int64_t version =
      bounded(rd, m.value("format_version", nlohmann::json()), "format_version", 1, kStatsFormatVersion);
  SweepStats& st = out.stats;
  const nlohmann::json sk = m.value("sketch", nlohmann::json::object());
  const nlohmann::json alpha = sk.is_object() ? sk.value("relative_accuracy", nlohmann::json()) : nlohmann::json();
  if (!alpha.is_number() || !(alpha.get<double>() >= kMinAlpha && alpha.get<double>() <= kMaxAlpha))
    rd.fail("manifest: sketch relative_accuracy is " + alpha.dump().substr(0, 40) + ", allowed [0.001, 0.5]");
  st.sketch.alpha = alpha.get<double>();
  st.prompts = bounded(rd, m.value("prompts", nlohmann::json()), "prompts", 0, kMaxCount);
  st.tokens = bounded(rd, m.value("tokens", nlohmann::json()), "tokens", 0, kMaxCount);
  const std::vector<InstrumentInfo>& ins = sweep_instruments();
  const nlohmann::json list = m.value("instruments", nlohmann::json());
  // Version 1 (before the hidden-attention instruments) lists the first nine.
  const size_t listed = version >= 2 ? ins.size() : kVersion1Instruments;
  if (!list.is_array() || list.size() != listed)
    rd.fail("manifest: instruments must list " + std::to_string(listed) + " instruments (format_version " +
            std::to_string(version) + ")");
  st.dists.resize(ins.size());
  for (size_t i = 0; i < listed; ++i) {
    const nlohmann::json& e = list[i];
    if (!e.is_object() || e.value("name", "") != ins[i].name)
      rd.fail("manifest: instrument " + std::to_string(i) + " must be '" + ins[i].name + "'");
    const nlohmann::json sh = e.value("shape", nlohmann::json());
    const size_t rank =
        std::string(ins[i].axes) == "()" ? 0 : (std::string(ins[i].axes).find(',') != std::string::npos ? 2 : 1);
    if (!sh.is_array() || sh.size() != rank)
      rd.fail("manifest: instrument '" + std::string(ins[i].name) + "': shape must have rank " + std::to_string(rank));
    std::vector<int64_t> shape;
    int64_t cells = 1;
    for (const auto& d : sh) {
      shape.push_back(bounded(rd, d, "instrument '" + std::string(ins[i].name) + "' shape", 0,
                              limits::kMaxHidden + limits::kMaxLayers));
      cells *= shape.back();
    }
    if (cells > kMaxCells)
      rd.fail("manifest: instrument '" + std::string(ins[i].name) + "': " + std::to_string(cells) +
              " cells, allowed at most " + std::to_string(kMaxCells));
    st.dists[i].reset(shape);
    read_distribution(rd, ins[i].name, st.dists[i]);
  }
  // A version-1 file's hidden-attention instruments: its Mamba layers, no heads (no cells).
  for (size_t i = listed; i < ins.size(); ++i) st.dists[i].reset({st.dists[kSsmDeltaIndex].shape.at(0), 0});
  const nlohmann::json r = m.value("router", nlohmann::json::object());
  RouterSums& R = st.router;
  R.moe = bounded(rd, r.value("moe_layers", nlohmann::json()), "router moe_layers", 0, limits::kMaxLayers);
  R.experts = bounded(rd, r.value("experts", nlohmann::json()), "router experts", 0, limits::kMaxExperts);
  R.top_k = bounded(rd, r.value("top_k", nlohmann::json()), "router top_k", 0, R.experts);
  R.topk_count = rd.i64("router.topk_count", {R.moe, R.experts});
  R.prob_sum = rd.real("router.prob_sum", {R.moe, R.experts});
  R.tokens = rd.i64("router.tokens", {R.moe});
  R.lse_sq_sum = rd.real("router.lse_sq_sum", {R.moe});
  if (const TensorInfo* t = f.find("progress.finished")) {
    if (t->shape.size() != 1 || t->shape[0] > st.prompts)
      rd.fail("tensor 'progress.finished': shape " + shape_to_string(t->shape) + ", allowed (n) with n <= prompts " +
              std::to_string(st.prompts));
    out.finished = rd.i64("progress.finished", t->shape);
  }
  return out;
}

}  // namespace

SweepFile parse_sweep_stats(const uint8_t* bytes, uint64_t size, const std::string& name) {
  try {
    return parse_checked(bytes, size, name);
  } catch (const nlohmann::json::exception& e) {  // a manifest field of the wrong JSON type
    throw LoadError(name + ": manifest: " + e.what());
  }
}

SweepFile load_sweep_stats(const std::string& path) {
  const std::shared_ptr<MappedFile> map = MappedFile::open(path);
  return parse_sweep_stats(map->data(), map->size(), path);
}

}  // namespace hl
