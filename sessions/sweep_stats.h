// Sweep statistics (issue 21 item 1): the per-token instruments of many runs aggregated into
// per-layer / per-head / per-expert distributions, mergeable exactly and in any order where it
// matters. Each cell (one head of one attention layer, one Mamba layer, one depth, one expert of
// one MoE layer) keeps count, mean and M2 (Welford per value, Chan, Golub & LeVeque 1979 to merge,
// in double), min, max, a fixed-range histogram and a log-bucket quantile sketch after Masson, Rim
// & Lee 2019 (DDSketch): integer bucket counts, so merging is exact and order-independent and the
// quantiles are bit-identical however the runs are split. The router adds integer top-k counts per
// expert and the sums that router_stats_from_sums turns into load, importance and balance.
// Plain C++ (no Qt); the file: sessions/sweep_file.h. Format: resources/docs/stats-format.md.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/model/layer_schedule.h"
#include "sessions/recording.h"

namespace hl {

// The sketch: bucket i of a positive value x is ceil(log_γ x), γ = (1 + α) / (1 − α); the bucket's
// value 2γ^i / (γ + 1) is within relative accuracy α of every value in it. |x| below kZero counts as
// 0. Keys: 0 for zero, kKeyOffset + i for x > 0, −(kKeyOffset + i) for x < 0 (monotone in x).
struct SketchParams {
  double alpha = 0.01;
  static constexpr double kZero = 1e-30;
  static constexpr int32_t kKeyOffset = 100000;
  double gamma() const { return (1 + alpha) / (1 - alpha); }
  int32_t key(double x) const;      // x finite
  double value(int32_t key) const;  // the bucket's representative value
};

// How an instrument's histogram bins its values: `bins` equal bins over [lo, hi] of x, or of
// log10|x| when log10 (a value 0 goes to the first bin); values outside land in the first or last bin.
struct HistRange {
  double lo = 0, hi = 1;
  bool log10 = false;
};
constexpr int kHistBins = 32;
// The quantiles written per cell.
inline const std::vector<double>& stats_quantile_levels() {
  static const std::vector<double> q = {0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99};
  return q;
}

// The distribution of one instrument over its cells (shape `shape`, row-major).
struct Distribution {
  std::vector<int64_t> shape;
  std::vector<int64_t> count, nonfinite;           // (cells) values counted; non-finite values left out
  std::vector<double> mean, m2, min, max;          // (cells); min +inf and max −inf while count is 0
  std::vector<int64_t> hist;                       // (cells, kHistBins)
  std::vector<std::map<int32_t, int64_t>> sketch;  // per cell: key → count

  int64_t cells() const;
  void reset(const std::vector<int64_t>& shape);
  void add(int64_t cell, double x, const SketchParams& sp, const HistRange& hr);
  // Chan's merge of every cell; shapes must be equal (throws Error otherwise).
  void merge(const Distribution& o);
  // The q-quantile of a cell (rank q·(count − 1), the bucket holding it, clamped to [min, max]);
  // NaN when the cell is empty.
  double quantile(int64_t cell, double q, const SketchParams& sp) const;
  double variance(int64_t cell) const;  // population variance M2 / count; NaN when empty
};

// The router sums of one sweep: per (MoE layer, expert) top-k selections and probability sums, per
// MoE layer tokens and Σ lse².
struct RouterSums {
  int64_t moe = 0, experts = 0, top_k = 0;
  std::vector<int64_t> topk_count;  // (X_n, E)
  std::vector<double> prob_sum;     // (X_n, E)
  std::vector<int64_t> tokens;      // (X_n)
  std::vector<double> lse_sq_sum;   // (X_n)
  void merge(const RouterSums& o);
};

// The instruments a sweep aggregates, in file order.
struct InstrumentInfo {
  const char* name;  // the tensor prefix, e.g. "attn_entropy"
  const char* axes;  // "(A_n, nh)"
  HistRange hist;
  const char* meaning;
};
const std::vector<InstrumentInfo>& sweep_instruments();
// The mh axis of the hidden-attention instruments: the Mamba-2 heads, 1 for Mamba-1 layers (the mean
// |M| over the channels is one row), 0 without SSM layers.
int64_t sweep_ssm_heads(const LayerSchedule& schedule);

struct SweepStats {
  SketchParams sketch;
  int64_t prompts = 0, tokens = 0;
  std::vector<Distribution> dists;  // one per sweep_instruments() entry
  RouterSums router;

  // Empty distributions shaped for `schedule` (A_n, nh, M_n, L + 1, X_n, E, k).
  static SweepStats for_schedule(const LayerSchedule& schedule, const SketchParams& sp = {});
  // Adds every record of `run` (one prompt): fields a record lacks are skipped.
  void add_run(const Run& run);
  // Adds one hidden-attention row's statistics (sessions/sweep_hidden.h) of SSM layer `ssm_index`
  // (the M_n axis) and head `head` (the mh axis). Throws Error outside the shape.
  void add_hidden_row(int64_t ssm_index, int64_t head, double entropy, double first_mass);
  // Adds the statistics of other runs (same shapes and sketch; throws Error otherwise).
  void merge(const SweepStats& o);
};

}  // namespace hl
