// What the app's "Sweep statistics" window draws from a stats file (issue 21 item 2), computed here
// so that the views only draw: box-plot numbers of a cell from its sketch quantiles, histogram
// shares of one or more cells pooled, the router's load per MoE layer over the whole set
// (router_stats_from_sums), the labels of an instrument's axes from the manifest's schedule, the
// header lines and whether two sweeps can be drawn side by side (and which options differ).
// Plain C++ (no Qt). The file: sessions/sweep_file.h; the format: resources/docs/stats-format.md.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sessions/sweep_file.h"
#include "sessions/sweep_stats.h"

namespace hl {

// Box plots: the box spans q25..q75 with the median inside; the whiskers reach q05 and q95 (the
// sketch's quantiles, so within its relative accuracy α of the order statistics).
constexpr double kBoxWhiskerLo = 0.05, kBoxWhiskerHi = 0.95;

struct CellBox {
  int64_t count = 0, nonfinite = 0;
  double mean = 0, whisker_lo = 0, q25 = 0, median = 0, q75 = 0, whisker_hi = 0, min = 0, max = 0;  // NaN when empty
};
CellBox cell_box(const Distribution& d, int64_t cell, const SketchParams& sp);

// The cells of an instrument as rows × columns: a 2-axis instrument (A_n, nh) has a row per layer
// and a column per head; a 1-axis one (M_n) one row of its cells; a scalar one cell.
struct CellGrid {
  int64_t rows = 1, cols = 1;
};
CellGrid cell_grid(const Distribution& d);

// The histogram of `cells` pooled: each bin's share of their values (0 when they hold none), the
// bin centres and width in the units of the range (log10|x| when the range says so).
struct HistShares {
  std::vector<double> centers, share;
  std::vector<int64_t> counts;
  double width = 0;
  int64_t total = 0;
  bool log10 = false;
};
HistShares hist_shares(const Distribution& d, const std::vector<int64_t>& cells, const HistRange& hr);

// The router over the whole set, one entry per MoE layer: load f_i (top-k share of expert i),
// importance P_i, balance E·Σ f_i P_i, z-loss, max f_i (router_stats_from_sums).
struct RouterLayerLoad {
  int64_t tokens = 0;
  std::vector<double> load, importance;
  double balance_loss = 0, z_loss = 0, max_load = 0;
};
std::vector<RouterLayerLoad> router_loads(const RouterSums& r);

// The manifest's `schedule` field of a sweep over `s` (what sweep_axes reads back): describe, the
// mixer and FFN strips, the layer indices of each axis, attention heads, depths.
nlohmann::ordered_json sweep_schedule_json(const LayerSchedule& s);
// The schedule recorded in the manifest (empty vectors where a field is missing).
struct SweepAxes {
  std::vector<int64_t> attention, ssm, moe;  // layer index of each A_n, M_n, X_n
  std::string mixers, ffns;
};
SweepAxes sweep_axes(const nlohmann::ordered_json& manifest);
// "(A_n, nh)" → {"A_n", "nh"}; "()" → {}.
std::vector<std::string> axis_names(const std::string& axes);
// Index `i` along axis `name`: "L2" for an A_n, M_n or X_n index (its decoder layer), "d3" for a
// depth (L+1), "h1" for a head (nh), "e5" for an expert (E); "#i" for an axis not known here.
std::string axis_label(const SweepAxes& s, const std::string& name, int64_t i);
// What an axis counts: "attention layer", "head", "Mamba layer", "depth", "MoE layer", "expert".
std::string axis_title(const std::string& name);

// Header lines (label, value) of a file: checkpoint, adapter, prompts, tokens, options, schedule, sketch.
std::vector<std::pair<std::string, std::string>> sweep_header(const SweepFile& f);

// Whether B can be drawn beside A: `mismatch` is one line saying what differs in shape (empty when
// they can be compared); `differences` lists what else differs ("options.normalizer: softmax vs
// softmax1", the checkpoint, the prompts file, the counts).
struct SweepComparison {
  std::string mismatch;
  std::vector<std::string> differences;
};
SweepComparison compare_sweeps(const SweepFile& a, const SweepFile& b);

}  // namespace hl
