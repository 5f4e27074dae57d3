// The views of a sweep stats file (issue 21 item 2; resources/docs/stats-format.md): instrument
// views over the distributions `hybridlens sweep` aggregated, not over a run. They draw what
// sessions/sweep_summary.h computes — box plots per cell from the sketch quantiles, the stored
// histograms as shares, the router's load over the set — for sweep A and, side by side in the run
// A/B colours, sweep B. Being InstrumentViews they export (PNG/SVG/PDF/CSV) and show exact-value
// tooltips as the others do; they ignore the inspector context (runs, step, selection).
#pragma once
#include <QHash>
#include <QString>
#include <memory>
#include <vector>

#include "sessions/sweep_file.h"
#include "views/instrument_view.h"

namespace hl::views {

// What the views draw: sweep A, optionally B (comparable: same shapes), the instrument (index into
// sweep_instruments()) and the row of a two-axis instrument (-1: every row).
struct StatsState {
  std::shared_ptr<const hl::SweepFile> a, b;
  QString nameA, nameB;  // file names for legends and titles
  int instrument = 0;
  int row = -1;
};

class StatsView : public InstrumentView {
  Q_OBJECT
 public:
  using InstrumentView::InstrumentView;
  // Redraws from `s` (the files are shared, not copied).
  void setStats(const StatsState& s);
  const StatsState& stats() const { return stats_; }
  bool hasData() const override;
  bool followsStep() const override { return false; }
  unsigned dependsOn() const override { return 0; }  // a run, a step or a layer click changes nothing here

 protected:
  // The instrument's distribution in A or B, null when absent.
  const hl::Distribution* dist(bool b) const;
  // The sweeps drawn: A, then B when present, with their names and colours.
  struct Sweep {
    const hl::SweepFile* file;
    QString tag;  // "A" or "B"
    bool isB;
  };
  std::vector<Sweep> sweeps() const;
  QString noStatsReason() const;  // why nothing is drawn: no file, or no cells (a model without attention)
  StatsState stats_;
};

// Box plots of the chosen instrument: per head of the chosen layer (or every layer's heads), per
// layer or depth for one-axis instruments. Box q25–q75 with the median, whiskers q05–q95, the mean
// as a cross; tooltips add count, mean, min, max.
class StatsBoxView : public StatsView {
  Q_OBJECT
 public:
  using StatsView::StatsView;
  QString viewId() const override { return QStringLiteral("stats_boxes"); }
  QString title() const override { return tr("Sweep distributions"); }
  QString reference() const override { return QStringLiteral("Masson, Rim & Lee 2019 (DDSketch)"); }
  QString csv() const override;
  // The cell drawn at data index `i` of the plottable named "A" or "B".
  int64_t cellAt(const QString& name, int i) const;

 protected:
  void rebuild() override;
  QString describePoint(QCPAbstractPlottable* p, int index) const override;

 private:
  std::vector<int64_t> cells_;              // the cells drawn, in key order
  QStringList labels_;                      // their labels ("L2 h0")
  QHash<QString, QVector<int64_t>> drawn_;  // plottable name → cell of each data point
};

// The stored 32-bin histograms as shares of the values: one curve per layer (a two-axis
// instrument's heads pooled), or per head of the chosen layer; A solid, B dashed; the instrument's
// range, in log10|x| where it says so.
class StatsHistView : public StatsView {
  Q_OBJECT
 public:
  using StatsView::StatsView;
  QString viewId() const override { return QStringLiteral("stats_hist"); }
  QString title() const override { return tr("Sweep histograms"); }
  QString reference() const override { return QStringLiteral("stats-format.md §3"); }
  QString csv() const override;

 protected:
  void rebuild() override;
};

// The router over the whole set: every MoE layer's top-k share per expert (load f_i), grouped by
// layer, against the uniform 1/E; and each layer's balance loss E·Σ f_i P_i (Fedus, Zoph & Shazeer
// 2022). A and B side by side.
class StatsRouterView : public StatsView {
  Q_OBJECT
 public:
  using StatsView::StatsView;
  QString viewId() const override { return QStringLiteral("stats_router"); }
  QString title() const override { return tr("Sweep router load"); }
  QString reference() const override { return QStringLiteral("Fedus, Zoph & Shazeer 2022 (Switch)"); }
  bool hasData() const override;
  QString csv() const override;

 protected:
  void rebuild() override;
};

}  // namespace hl::views
