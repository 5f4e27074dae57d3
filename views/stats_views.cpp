// The sweep statistics views (see stats_views.h): they draw the numbers of sessions/sweep_summary.h
// and compute none of their own.
#include "views/stats_views.h"

#include <algorithm>
#include <cmath>

#include "sessions/sweep_summary.h"

namespace hl::views {

namespace {
QString q(const std::string& s) {
  return QString::fromStdString(s);
}

// Text ticks at 0..n-1, every `step`-th labelled so that long rows stay legible.
QSharedPointer<QCPAxisTickerText> textTicks(const QStringList& labels, const std::vector<double>& at) {
  QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
  const int step = labels.size() > 48 ? 8 : labels.size() > 24 ? 4 : labels.size() > 12 ? 2 : 1;
  for (int i = 0; i < labels.size(); i += step) t->addTick(at[static_cast<size_t>(i)], labels[i]);
  return t;
}

void linearAxis(QCPAxis* a) {
  a->setScaleType(QCPAxis::stLinear);
  if (a->ticker().dynamicCast<QCPAxisTickerLog>()) a->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
}
}  // namespace

// ---- StatsView ----

void StatsView::setStats(const StatsState& s) {
  stats_ = s;
  setState(state());  // redraws (the inspector state is kept as it is)
}

bool StatsView::hasData() const {
  const hl::Distribution* d = dist(false);
  return d && d->cells() > 0 && static_cast<size_t>(stats_.instrument) < hl::sweep_instruments().size();
}

const hl::Distribution* StatsView::dist(bool b) const {
  const hl::SweepFile* f = b ? stats_.b.get() : stats_.a.get();
  if (!f || stats_.instrument < 0 || static_cast<size_t>(stats_.instrument) >= f->stats.dists.size()) return nullptr;
  return &f->stats.dists[static_cast<size_t>(stats_.instrument)];
}

QString StatsView::noStatsReason() const {
  return stats_.a ? tr("the sweep's model has no cells of this instrument")
                  : tr("open a stats file (File > Open sweep statistics…)");
}

std::vector<StatsView::Sweep> StatsView::sweeps() const {
  std::vector<Sweep> s;
  if (stats_.a) s.push_back({stats_.a.get(), QStringLiteral("A"), false});
  // B where its cells are A's (compare_sweeps lets through an instrument one file has no cells of).
  const hl::Distribution *da = dist(false), *db = dist(true);
  if (stats_.b && da && db && da->shape == db->shape) s.push_back({stats_.b.get(), QStringLiteral("B"), true});
  return s;
}

// ---- box plots ----

void StatsBoxView::rebuild() {
  clearPlot();
  styleAll();
  cells_.clear();
  labels_.clear();
  drawn_.clear();
  noDataReason_ = noStatsReason();
  if (!hasData()) return;
  const hl::InstrumentInfo& info = hl::sweep_instruments()[static_cast<size_t>(stats_.instrument)];
  const hl::Distribution& da = *dist(false);
  const hl::CellGrid g = hl::cell_grid(da);
  const std::vector<std::string> names = hl::axis_names(info.axes);
  const hl::SweepAxes ax = hl::sweep_axes(stats_.a->manifest);
  const bool twoAxes = names.size() >= 2 && g.rows > 0;
  const int64_t row = twoAxes && stats_.row >= 0 && stats_.row < g.rows ? stats_.row : -1;
  for (int64_t c = 0; c < da.cells(); ++c) {
    const int64_t r = c / std::max<int64_t>(1, g.cols), k = c % std::max<int64_t>(1, g.cols);
    if (row >= 0 && r != row) continue;
    cells_.push_back(c);
    if (names.empty())
      labels_ << tr("all tokens");
    else if (!twoAxes)
      labels_ << q(hl::axis_label(ax, names[0], c));
    else if (row >= 0)
      labels_ << q(hl::axis_label(ax, names[1], k));
    else
      labels_ << q(hl::axis_label(ax, names[0], r) + " " + hl::axis_label(ax, names[1], k));
  }
  QCPAxisRect* rect = panel(0);
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  std::vector<double> at(cells_.size());
  for (size_t i = 0; i < at.size(); ++i) at[i] = static_cast<double>(i);
  x->setTicker(textTicks(labels_, at));
  x->setLabel(names.empty() ? QString()
              : !twoAxes    ? q(hl::axis_title(names[0]))
              : row >= 0    ? tr("%1 of %2 %3")
                               .arg(q(hl::axis_title(names[1])), q(hl::axis_title(names[0])),
                                    q(hl::axis_label(ax, names[0], row)))
                         : q(hl::axis_title(names[0]) + ", " + hl::axis_title(names[1])));
  y->setLabel(QString::fromLatin1(info.name));
  const std::vector<Sweep> sw = sweeps();
  const double width = sw.size() > 1 ? 0.36 : 0.6;
  double lo = INFINITY, hi = -INFINITY;
  QCPLegend* legend = panelLegend(rect);
  for (size_t s = 0; s < sw.size(); ++s) {
    const hl::Distribution& d = sw[s].file->stats.dists[static_cast<size_t>(stats_.instrument)];
    const double off = sw.size() > 1 ? (s == 0 ? -0.2 : 0.2) : 0.0;
    const QColor c = sw[s].isB ? th().runB : th().runA;
    auto* box = new QCPStatisticalBox(x, y);
    box->setName(sw[s].tag);
    box->setWidth(width);
    box->setWhiskerWidth(width * 0.6);
    QColor fill = c;
    fill.setAlpha(sw[s].isB ? 70 : 120);
    box->setBrush(fill);
    box->setPen(runPen(c, sw[s].isB));
    box->setWhiskerPen(runPen(c, sw[s].isB));
    box->setWhiskerBarPen(QPen(c, 1));
    box->setMedianPen(QPen(c.darker(130), 2));
    box->addToLegend(legend);
    QCPGraph* mean = addGraph(rect, sw[s].tag + QStringLiteral(" mean"), c);
    mean->setLineStyle(QCPGraph::lsNone);
    mean->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, c, 6));
    QVector<int64_t>& drawn = drawn_[sw[s].tag];
    for (size_t i = 0; i < cells_.size(); ++i) {
      const hl::CellBox b = hl::cell_box(d, cells_[i], sw[s].file->stats.sketch);
      if (b.count == 0) continue;
      box->addData(static_cast<double>(i) + off, b.whisker_lo, b.q25, b.median, b.q75, b.whisker_hi);
      mean->addData(static_cast<double>(i) + off, b.mean);
      drawn.push_back(cells_[i]);
      lo = std::min({lo, b.whisker_lo, b.mean});
      hi = std::max({hi, b.whisker_hi, b.mean});
    }
  }
  setHomeRange(x, -0.6, static_cast<double>(cells_.size()) - 0.4);
  // Instruments whose histogram is of log10|x| span decades: a log axis when every value is positive.
  if (info.hist.log10 && lo > 0 && std::isfinite(hi)) {
    y->setScaleType(QCPAxis::stLogarithmic);
    y->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    setHomeRange(y, lo / 1.5, hi * 1.5);
  } else {
    linearAxis(y);
    if (std::isfinite(lo) && std::isfinite(hi)) {
      const double pad = std::max(1e-9, (hi - lo) * 0.08);
      setHomeRange(y, lo - pad, hi + pad);
    }
  }
  subtitle_ = tr("%1 %2 — boxes q25–q75 with the median, whiskers q05–q95, × the mean")
                  .arg(QString::fromLatin1(info.name), QString::fromLatin1(info.axes));
  subtitle_ += tr("; A = %1").arg(stats_.nameA);
  if (sweeps().size() > 1) subtitle_ += tr(", B = %1 (dashed)").arg(stats_.nameB);
}

int64_t StatsBoxView::cellAt(const QString& name, int i) const {
  const QVector<int64_t> v = drawn_.value(name.section(QLatin1Char(' '), 0, 0));
  return i >= 0 && i < v.size() ? v[i] : -1;
}

QString StatsBoxView::describePoint(QCPAbstractPlottable* p, int index) const {
  const int64_t cell = cellAt(p->name(), index);
  const bool isB = p->name().startsWith(QLatin1Char('B'));
  const hl::SweepFile* f = isB ? stats_.b.get() : stats_.a.get();
  const hl::Distribution* d = dist(isB);
  if (cell < 0 || !f || !d) return InstrumentView::describePoint(p, index);
  const auto it = std::find(cells_.begin(), cells_.end(), cell);
  const QString label = it == cells_.end() ? QString() : labels_[static_cast<int>(it - cells_.begin())];
  const hl::CellBox b = hl::cell_box(*d, cell, f->stats.sketch);
  return tr("%1 (%2) %3\ncount %4, non-finite %5\nmean %6\nq05 %7 · q25 %8 · median %9 · q75 %10 · q95 %11\nmin %12, "
            "max %13")
      .arg(isB ? QStringLiteral("B") : QStringLiteral("A"), isB ? stats_.nameB : stats_.nameA, label)
      .arg(b.count)
      .arg(b.nonfinite)
      .arg(num(b.mean), num(b.whisker_lo), num(b.q25), num(b.median), num(b.q75), num(b.whisker_hi), num(b.min),
           num(b.max));
}

QString StatsBoxView::csv() const {
  CsvBuilder c({"instrument", "sweep", "cell", "label", "count", "nonfinite", "mean", "q05", "q25", "q50", "q75", "q95",
                "min", "max"});
  if (!hasData()) return c.text();
  const QString name = QString::fromLatin1(hl::sweep_instruments()[static_cast<size_t>(stats_.instrument)].name);
  for (const Sweep& s : sweeps()) {
    const hl::Distribution& d = s.file->stats.dists[static_cast<size_t>(stats_.instrument)];
    for (size_t i = 0; i < cells_.size(); ++i) {
      const hl::CellBox b = hl::cell_box(d, cells_[i], s.file->stats.sketch);
      c.addRow({name, s.tag, QString::number(cells_[i]), labels_[static_cast<int>(i)], QString::number(b.count),
                QString::number(b.nonfinite), num(b.mean), num(b.whisker_lo), num(b.q25), num(b.median), num(b.q75),
                num(b.whisker_hi), num(b.min), num(b.max)});
    }
  }
  return c.text();
}

// ---- histograms ----

namespace {
struct Group {
  QString label;
  std::vector<int64_t> cells;
};

// The curves of the histogram view: per row (heads pooled), per head of the chosen row, per cell
// (or the chosen cell) of a one-axis instrument, or the one cell of a scalar.
std::vector<Group> histGroups(const hl::Distribution& d, const hl::InstrumentInfo& info, const hl::SweepAxes& ax,
                              int row) {
  std::vector<Group> out;
  const hl::CellGrid g = hl::cell_grid(d);
  const std::vector<std::string> names = hl::axis_names(info.axes);
  if (names.empty() || g.rows == 0) {
    if (d.cells() > 0) out.push_back({QObject::tr("all tokens"), {0}});
  } else if (names.size() >= 2 && row >= 0 && row < g.rows) {
    for (int64_t k = 0; k < g.cols; ++k) out.push_back({q(hl::axis_label(ax, names[1], k)), {row * g.cols + k}});
  } else if (names.size() >= 2) {
    for (int64_t r = 0; r < g.rows; ++r) {
      Group gr{q(hl::axis_label(ax, names[0], r)), {}};
      for (int64_t k = 0; k < g.cols; ++k) gr.cells.push_back(r * g.cols + k);
      out.push_back(gr);
    }
  } else {
    for (int64_t c = 0; c < d.cells(); ++c)
      if (row < 0 || row == c) out.push_back({q(hl::axis_label(ax, names[0], c)), {c}});
  }
  return out;
}
}  // namespace

void StatsHistView::rebuild() {
  clearPlot();
  styleAll();
  noDataReason_ = noStatsReason();
  if (!hasData()) return;
  const hl::InstrumentInfo& info = hl::sweep_instruments()[static_cast<size_t>(stats_.instrument)];
  const std::vector<Group> groups = histGroups(*dist(false), info, hl::sweep_axes(stats_.a->manifest), stats_.row);
  QCPAxisRect* rect = panel(0);
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  linearAxis(y);
  const QString name = QString::fromLatin1(info.name);
  x->setLabel(info.hist.log10 ? tr("log10 |%1|").arg(name) : name);
  y->setLabel(tr("share of the values"));
  QCPLegend* legend = panelLegend(rect);
  double top = 0;
  for (const Sweep& s : sweeps()) {
    const hl::Distribution& d = s.file->stats.dists[static_cast<size_t>(stats_.instrument)];
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const hl::HistShares h = hl::hist_shares(d, groups[gi].cells, info.hist);
      const QColor c = groups.size() == 1 ? (s.isB ? th().runB : th().runA) : seriesColor(th(), static_cast<int>(gi));
      QCPGraph* gr = addGraph(rect, s.tag + QLatin1Char(' ') + groups[gi].label, c, s.isB, 1.5);
      gr->setLineStyle(QCPGraph::lsStepCenter);
      for (size_t b = 0; b < h.centers.size(); ++b) gr->addData(h.centers[b], h.share[b]);
      gr->setProperty("hlTotal", static_cast<qlonglong>(h.total));
      if (!s.isB || groups.size() == 1) gr->addToLegend(legend);
      for (double v : h.share) top = std::max(top, v);
    }
  }
  const double w = (info.hist.hi - info.hist.lo) / hl::kHistBins;
  setHomeRange(x, info.hist.lo - w, info.hist.hi + w);
  setHomeRange(y, 0, top > 0 ? top * 1.1 : 1);
  subtitle_ = tr("%1 bins over [%2, %3]%4, end bins hold the values outside; A = %5")
                  .arg(hl::kHistBins)
                  .arg(info.hist.lo)
                  .arg(info.hist.hi)
                  .arg(info.hist.log10 ? tr(" of log10|x|") : QString(), stats_.nameA);
  if (sweeps().size() > 1) subtitle_ += tr(" solid, B = %1 dashed").arg(stats_.nameB);
}

QString StatsHistView::csv() const {
  CsvBuilder c({"instrument", "sweep", "group", "bin_center", "count", "share"});
  if (!hasData()) return c.text();
  const hl::InstrumentInfo& info = hl::sweep_instruments()[static_cast<size_t>(stats_.instrument)];
  const std::vector<Group> groups = histGroups(*dist(false), info, hl::sweep_axes(stats_.a->manifest), stats_.row);
  for (const Sweep& s : sweeps())
    for (const Group& g : groups) {
      const hl::HistShares h =
          hl::hist_shares(s.file->stats.dists[static_cast<size_t>(stats_.instrument)], g.cells, info.hist);
      for (size_t b = 0; b < h.centers.size(); ++b)
        c.addRow({QString::fromLatin1(info.name), s.tag, g.label, num(h.centers[b]), QString::number(h.counts[b]),
                  num(h.share[b])});
    }
  return c.text();
}

// ---- router ----

bool StatsRouterView::hasData() const {
  return stats_.a && stats_.a->stats.router.moe > 0 && stats_.a->stats.router.experts > 0;
}

void StatsRouterView::rebuild() {
  clearPlot();
  if (panelCount() < 2) {
    addPanel(1, 0);
    setPanelName(panel(0), tr("load per expert"));
    setPanelName(panel(1), tr("balance per layer"));
  }
  styleAll();
  noDataReason_ =
      stats_.a ? tr("the sweep's model has no MoE layer") : tr("open a stats file (File > Open sweep statistics…)");
  if (!hasData()) return;
  const hl::RouterSums& ra = stats_.a->stats.router;
  const int64_t E = ra.experts, X = ra.moe;
  const hl::SweepAxes ax = hl::sweep_axes(stats_.a->manifest);
  QStringList layerLabels;
  std::vector<double> centres, ordinals;
  for (int64_t l = 0; l < X; ++l) {
    layerLabels << q(hl::axis_label(ax, "X_n", l));
    centres.push_back(static_cast<double>(l * (E + 1)) + (static_cast<double>(E) - 1) / 2);
    ordinals.push_back(static_cast<double>(l));
  }
  QCPAxisRect* fr = panel(0);
  QCPAxisRect* br = panel(1);
  QCPAxis *fx = fr->axis(QCPAxis::atBottom), *fy = fr->axis(QCPAxis::atLeft);
  QCPAxis *bx = br->axis(QCPAxis::atBottom), *by = br->axis(QCPAxis::atLeft);
  fx->setTicker(textTicks(layerLabels, centres));
  fx->setLabel(tr("expert 0..%1 of each MoE layer").arg(E - 1));
  fy->setLabel(tr("top-k share f_i"));
  bx->setTicker(textTicks(layerLabels, ordinals));
  bx->setLabel(tr("MoE layer"));
  by->setLabel(tr("balance E·Σ f_i P_i (1 = uniform)"));
  auto* loadGroup = new QCPBarsGroup(plot());
  auto* balGroup = new QCPBarsGroup(plot());
  const std::vector<Sweep> sw = sweeps();
  const double bw = sw.size() > 1 ? 0.4 : 0.7;
  double top = 0, btop = 0;
  QString figures;
  for (const Sweep& s : sw) {
    const QColor c = s.isB ? th().runB : th().runA;
    const std::vector<hl::RouterLayerLoad> loads = hl::router_loads(s.file->stats.router);
    auto* load = new QCPBars(fx, fy);
    load->setName(tr("load %1").arg(s.tag));
    styleRunBars(load, c, s.isB, bw);
    load->setBarsGroup(loadGroup);
    load->addToLegend(panelLegend(fr));
    auto* bal = new QCPBars(bx, by);
    bal->setName(tr("balance %1").arg(s.tag));
    styleRunBars(bal, c, s.isB, bw * 0.8);
    bal->setBarsGroup(balGroup);
    bal->addToLegend(panelLegend(br));
    for (size_t l = 0; l < loads.size(); ++l) {
      for (size_t e = 0; e < loads[l].load.size(); ++e) {
        load->addData(static_cast<double>(l * static_cast<size_t>(E + 1) + e), loads[l].load[e]);
        top = std::max(top, loads[l].load[e]);
      }
      bal->addData(static_cast<double>(l), loads[l].balance_loss);
      btop = std::max(btop, loads[l].balance_loss);
    }
    double mean = 0;
    for (const hl::RouterLayerLoad& l : loads) mean += l.balance_loss / static_cast<double>(loads.size());
    figures += tr("%1%2: mean balance %3")
                   .arg(figures.isEmpty() ? QString() : QStringLiteral("; "), s.tag, QString::number(mean, 'g', 4));
  }
  addHLine(fr, 1.0 / static_cast<double>(E), QPen(th().floorLine, 1, Qt::DashLine));
  addHLine(br, 1.0, QPen(th().floorLine, 1, Qt::DashLine));
  setHomeRange(fx, -0.8, static_cast<double>(X * (E + 1)) - 1.2);
  setHomeRange(fy, 0, std::max(top, 1.0 / static_cast<double>(E)) * 1.25);
  setHomeRange(bx, -0.6, static_cast<double>(X) - 0.4);
  setHomeRange(by, 0, std::max(btop, 1.0) * 1.25);
  subtitle_ = tr("%1 MoE layers × %2 routed experts, top-%3, over %4 tokens; %5; dashed: uniform")
                  .arg(X)
                  .arg(E)
                  .arg(ra.top_k)
                  .arg(stats_.a->stats.tokens)
                  .arg(figures);
}

QString StatsRouterView::csv() const {
  CsvBuilder c({"sweep", "moe_layer", "layer", "expert", "load", "importance", "balance_loss", "z_loss", "tokens"});
  if (!hasData()) return c.text();
  const hl::SweepAxes ax = hl::sweep_axes(stats_.a->manifest);
  for (const Sweep& s : sweeps()) {
    const std::vector<hl::RouterLayerLoad> loads = hl::router_loads(s.file->stats.router);
    for (size_t l = 0; l < loads.size(); ++l)
      for (size_t e = 0; e < loads[l].load.size(); ++e)
        c.addRow({s.tag, QString::number(l), q(hl::axis_label(ax, "X_n", static_cast<int64_t>(l))), QString::number(e),
                  num(loads[l].load[e]), num(loads[l].importance[e]), num(loads[l].balance_loss), num(loads[l].z_loss),
                  QString::number(loads[l].tokens)});
  }
  return c.text();
}

}  // namespace hl::views
