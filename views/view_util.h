// Shared helpers of the instrument views: the light and dark themes (colours of runs A and B, the
// B − A curve, highlights, the healthy band), number formatting for tooltips and CSV, percentiles
// and a small CSV builder. Not a view; no QCustomPlot objects are created here.
#pragma once
#include <QColor>
#include <QPen>
#include <QString>
#include <QStringList>
#include <QVector>
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "sessions/run_stats.h"
#include "views/view_state.h"

namespace hl::views {

struct Theme {
  bool dark = false;
  QColor background, foreground, grid, subGrid, axisRectBg;
  QColor runA, runB, diff;              // run A solid, run B dashed, B − A
  QColor highlight;                     // current step / selected layer
  QColor band;                          // healthy band fill (translucent)
  QColor attention, mamba, dense, moe;  // layer ribbon cells
  QColor floorLine, deviceLine;         // latency floor, device memory
  QVector<QColor> series;               // per-layer / per-head curve colours (cycled)
};

const Theme& theme(bool dark);
// Colour `i` of the cycled palette.
QColor seriesColor(const Theme& t, int i);
// Pen of run A (solid) or B (dashed) in `c`.
// Width 1 by default: the raster engine strokes pens of at most one pixel on its fast path, which
// matters for curves of thousands of tokens.
QPen runPen(const QColor& c, bool runB, double width = 1.0);

// Exact-value text for tooltips and CSV: %.9g (shortest round-trip for floats).
QString num(double v);
// "1 token", "2 tokens", "0 tokens": the count with the noun in the number it needs.
QString countOf(long long n, const QString& one, const QString& many);
inline QString tokensText(long long n) { return countOf(n, QStringLiteral("token"), QStringLiteral("tokens")); }
// Human bytes: "12.5 MiB".
QString humanBytes(double bytes);
// Percentile p in [0, 100] of `v` by linear interpolation between order statistics (numpy's
// default); NaN for an empty vector. `v` is copied.
double percentile(std::vector<double> v, double p);

// Builds CSV text: a header and rows of cells; cells with commas or quotes are quoted.
class CsvBuilder {
 public:
  explicit CsvBuilder(const QStringList& header);
  void addRow(const QStringList& cells);
  QString text() const;
  int rows() const { return rows_; }

 private:
  static QString cell(const QString& s);
  QString text_;
  int rows_ = 0;
};

// A series over tokens (issue 17 finding 11): every record of a run, not the records up to the
// scrubbed token; the views mark that token with a cursor line instead of cutting the curve there.
struct TokenSeries {
  QVector<double> keys, values;  // keys: token indices 0..n-1
};
// value(record t) for every record of `run`; with `minus`, value(run) − value(minus) over the tokens
// both runs have (B − A where the runs differ in length).
template <typename F>
TokenSeries overTokens(const hl::Run& run, F value, const hl::Run* minus = nullptr) {
  size_t n = run.records.size();
  if (minus) n = std::min(n, minus->records.size());
  TokenSeries s;
  s.keys.resize(static_cast<qsizetype>(n));
  s.values.resize(static_cast<qsizetype>(n));
  for (size_t t = 0; t < n; ++t) {
    s.keys[t] = static_cast<double>(t);
    s.values[t] =
        static_cast<double>(value(run.records[t])) - (minus ? static_cast<double>(value(minus->records[t])) : 0.0);
  }
  return s;
}
// Records of the longer of two runs (either may be null): the extent of a token axis drawn whole.
int longestRun(const hl::Run* a, const hl::Run* b);

// A fresh HeatmapData version number (process-wide, increasing).
uint64_t newDataVersion();

// Text of token t of the recording for labels and tooltips: its text when known, else "#id".
QString tokenLabel(const hl::Recording& rec, int t);
// Short name of a decoder layer: "L3 attn", "L4 mamba".
QString layerName(const ModelShape& s, int layer);

// The statistics of the runs a view draws, kept between its redraws (issue 17 item 2): of(run)
// brings them up to date with the records appended since (see hl::RunStats); keepOnly drops runs
// the view no longer shows, so a closed recording's statistics go with it.
class RunStatsCache {
 public:
  hl::RunStats& of(const hl::Run& run, const ModelShape& s);
  void keepOnly(const hl::Run* a, const hl::Run* b);

 private:
  std::vector<std::pair<const hl::Run*, std::unique_ptr<hl::RunStats>>> runs_;
};

}  // namespace hl::views
