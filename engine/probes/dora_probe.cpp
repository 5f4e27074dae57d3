// ΔM / ΔD of Liu et al. 2024 ("Mathematical Formulation": ΔM_t = (1/k) Σ_j |m_t^j − m_0^j|,
// ΔD_t = (1/k) Σ_j (1 − cos(V_t^j, W_0^j))) in the (out, in) layout of trace-format.md §4: one norm per
// output row over the input dimension. All sums in double; rows run in parallel, sums in row order.
// 1 − cos is computed as ½‖u − v‖² of the unit rows, which keeps small rotations accurate.
#include "engine/probes/dora_probe.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

#include "engine/core/error.h"
#include "engine/core/thread_pool.h"
#include "engine/io/safetensors.h"

namespace hl {

void DoraAccumulator::add_row(const double* w0, const double* w1, int64_t in) {
  double n0 = 0, n1 = 0;
  for (int64_t c = 0; c < in; ++c) {
    n0 += w0[c] * w0[c];
    n1 += w1[c] * w1[c];
  }
  n0 = std::sqrt(n0);
  n1 = std::sqrt(n1);
  double one_minus_cos = 1.0;  // cos = 0 when a row is all zero
  if (n0 > 0 && n1 > 0) {
    double d2 = 0;  // ‖W0_j/‖W0_j‖ − W'_j/‖W'_j‖‖² = 2 − 2 cos
    for (int64_t c = 0; c < in; ++c) {
      const double d = w0[c] / n0 - w1[c] / n1;
      d2 += d * d;
    }
    one_minus_cos = 0.5 * d2;
  }
  sum_m_ += std::fabs(n1 - n0);
  sum_d_ += one_minus_cos;
  ++rows_;
}

void DoraAccumulator::merge(const DoraAccumulator& o) {
  sum_m_ += o.sum_m_;
  sum_d_ += o.sum_d_;
  rows_ += o.rows_;
}

namespace {

// Runs row_fn(j, w0_row, w1_row) → fills both rows for each j, accumulating per chunk of 64 rows
// and merging the chunks in order, so the result does not depend on the thread count.
template <class RowFn>
void accumulate_rows(int64_t rows, int64_t cols, RowFn row_fn, double* delta_m, double* delta_d) {
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  std::vector<DoraAccumulator> parts(static_cast<size_t>(chunks));
  ThreadPool::global().parallel_for(chunks, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));  // (in,) each
    for (int64_t ch = begin; ch < end; ++ch)
      for (int64_t j = ch * kChunk; j < std::min(rows, (ch + 1) * kChunk); ++j) {
        row_fn(j, a.data(), b.data());
        parts[ch].add_row(a.data(), b.data(), cols);
      }
  });
  DoraAccumulator total;
  for (const DoraAccumulator& p : parts) total.merge(p);
  *delta_m = total.delta_m();
  *delta_d = total.delta_d();
}

// Throws Error naming `m`, where it comes from and its first non-finite element: the figures of a
// matrix holding NaN or Inf would be nan, which a CSV row and the view would show as data.
void require_finite(const Mat& m, const std::string& source) {
  std::vector<double> row(static_cast<size_t>(m.cols));
  for (int64_t j = 0; j < m.rows; ++j) {
    mat_row_to_double(m, j, row.data());
    for (int64_t k = 0; k < m.cols; ++k)
      if (!std::isfinite(row[k]))
        throw Error("dora: tensor '" + m.name + "' of " + source + " holds " + (std::isnan(row[k]) ? "NaN" : "Inf") +
                    " (row " + std::to_string(j) + ", column " + std::to_string(k) +
                    "): delta_m and delta_d need finite weights");
  }
}

}  // namespace

void dora_deltas(const Mat& w0, const Mat& w1, double* delta_m, double* delta_d) {
  if (w0.rows != w1.rows || w0.cols != w1.cols)
    throw Error("dora: '" + w0.name + "' is " + shape_to_string({w0.rows, w0.cols}) + " but '" + w1.name + "' is " +
                shape_to_string({w1.rows, w1.cols}));
  accumulate_rows(
      w0.rows, w0.cols,
      [&](int64_t j, double* a, double* b) {
        mat_row_to_double(w0, j, a);
        mat_row_to_double(w1, j, b);
      },
      delta_m, delta_d);
}

std::vector<DoraRow> dora_rows_adapter(const Model& base, const Adapter& a) {
  check_adapter(a, base);
  std::vector<DoraRow> rows;
  for (const LinearModule& lm : linear_modules(base, true)) {
    const AdapterModule* am = a.find(lm.path);
    if (!am) continue;
    const Mat& w0 = *lm.mat;  // (out, in)
    std::atomic<bool> zero_norm{false};
    DoraRow r{lm.layer, lm.module, 0, 0};
    accumulate_rows(
        w0.rows, w0.cols,
        [&](int64_t j, double* a0, double* a1) {
          mat_row_to_double(w0, j, a0);
          if (!adapted_row(*am, a0, j, a1)) zero_norm = true;
        },
        &r.delta_m, &r.delta_d);
    if (zero_norm)
      throw LoadError(std::string(Adapter::kWeightsName) + ": module '" + am->path +
                      "': a row of W0 + s·B·A has norm 0, so the DoRA magnitude cannot be applied");
    if (!std::isfinite(r.delta_m) || !std::isfinite(r.delta_d)) {
      require_finite(w0, "the base checkpoint " + base.dir);
      throw Error("dora: adapter module '" + am->path + "' of " + a.dir +
                  " gives NaN or Inf in W0 + s·B·A: delta_m and delta_d need finite weights");
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<DoraRow> dora_rows_tuned(const Model& base, const Model& tuned) {
  std::map<std::string, const Mat*> tuned_by_path;
  for (const LinearModule& lm : linear_modules(tuned, false)) tuned_by_path[lm.path] = lm.mat;
  std::vector<DoraRow> rows;
  for (const LinearModule& lm : linear_modules(base, false)) {
    auto it = tuned_by_path.find(lm.path);
    if (it == tuned_by_path.end()) continue;
    const Mat& w0 = *lm.mat;
    const Mat& w1 = *it->second;
    if (w0.rows != w1.rows || w0.cols != w1.cols) continue;  // only equal shapes are compared
    DoraRow r{lm.layer, lm.module, 0, 0};
    dora_deltas(w0, w1, &r.delta_m, &r.delta_d);
    if (!std::isfinite(r.delta_m) || !std::isfinite(r.delta_d)) {
      require_finite(w0, "the base checkpoint " + base.dir);
      require_finite(w1, "the tuned checkpoint " + tuned.dir);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

double least_squares_slope(const std::vector<DoraRow>& rows) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (rows.size() < 2) return nan;
  double mx = 0, my = 0;
  for (const DoraRow& r : rows) {
    mx += r.delta_d;
    my += r.delta_m;
  }
  mx /= static_cast<double>(rows.size());
  my /= static_cast<double>(rows.size());
  double sxx = 0, sxy = 0;
  for (const DoraRow& r : rows) {
    sxx += (r.delta_d - mx) * (r.delta_d - mx);
    sxy += (r.delta_d - mx) * (r.delta_m - my);
  }
  if (!(sxx > 0)) return nan;
  return sxy / sxx;
}

std::vector<DoraLayerSummary> dora_layer_summary(const std::vector<DoraRow>& rows) {
  std::map<int, DoraLayerSummary> by_layer;
  for (const DoraRow& r : rows) {
    DoraLayerSummary& s = by_layer[r.layer];
    s.layer = r.layer;
    ++s.matrices;
    s.mean_delta_m += r.delta_m;
    s.mean_delta_d += r.delta_d;
  }
  std::vector<DoraLayerSummary> out;
  for (auto& [layer, s] : by_layer) {
    s.mean_delta_m /= s.matrices;
    s.mean_delta_d /= s.matrices;
    out.push_back(s);
  }
  return out;
}

std::string dora_csv(const std::vector<DoraRow>& rows) {
  std::string s = "layer,module,delta_m,delta_d\n";
  char buf[96];
  for (const DoraRow& r : rows) {
    std::snprintf(buf, sizeof buf, "%d,", r.layer);
    s += buf;
    s += r.module;
    std::snprintf(buf, sizeof buf, ",%.9g,%.9g\n", r.delta_m, r.delta_d);
    s += buf;
  }
  return s;
}

void write_dora_csv(const std::string& path, const std::vector<DoraRow>& rows) {
  const std::string text = dora_csv(rows);
  write_file_atomic(path, text.data(), text.size());
}

namespace {

bool parse_double(const std::string& s, double* out) {
  if (s.empty() || s.size() > 64) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

}  // namespace

std::vector<DoraRow> parse_dora_csv(const std::string& text, const std::string& source) {
  if (text.size() > kMaxDoraCsvBytes)
    throw LoadError(source + ": " + std::to_string(text.size()) + " bytes, larger than the limit of " +
                    std::to_string(kMaxDoraCsvBytes) + " bytes");
  std::vector<DoraRow> rows;
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string at = source + ": line " + std::to_string(line_no);
    if (line_no == 1) {
      if (line != "layer,module,delta_m,delta_d")
        throw LoadError(at + ": header must be 'layer,module,delta_m,delta_d'");
      continue;
    }
    if (line.empty()) continue;
    std::vector<std::string> f;
    size_t start = 0;
    for (;;) {
      size_t comma = line.find(',', start);
      f.push_back(line.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (f.size() != 4) throw LoadError(at + ": " + std::to_string(f.size()) + " fields, expected 4");
    DoraRow r;
    double layer = 0;
    if (!parse_double(f[0], &layer) || layer != std::floor(layer) || layer < -1 || layer > 1e6)
      throw LoadError(at + ": layer '" + f[0].substr(0, 20) + "' is not an integer in [-1, 1000000]");
    r.layer = static_cast<int>(layer);
    if (f[1].empty() || f[1].size() > 256) throw LoadError(at + ": module name must have 1 to 256 characters");
    r.module = f[1];
    if (!parse_double(f[2], &r.delta_m)) throw LoadError(at + ": delta_m '" + f[2].substr(0, 20) + "' is not a number");
    if (!parse_double(f[3], &r.delta_d)) throw LoadError(at + ": delta_d '" + f[3].substr(0, 20) + "' is not a number");
    rows.push_back(std::move(r));
  }
  if (line_no == 0) throw LoadError(source + ": empty (expected the header 'layer,module,delta_m,delta_d')");
  return rows;
}

}  // namespace hl
