// Latency (TTFT / inter-token latency as serving stacks report them): time to first token (the first record's step
// time, plus the model load when the run records one) and the distribution of time per token over tokens 1..T-1 (p50,
// p99) — per token, the current one marked, and as a histogram — against the floor bytes-read-per-token / memory
// bandwidth.
#include <algorithm>
#include <cmath>

#include "views/instrument_views.h"

namespace hl::views {

namespace {

struct LatencyStats {
  double ttft = 0, load = 0, p50 = NAN, p99 = NAN;
  std::vector<double> itl;  // seconds, tokens 1..T-1 (the first is the TTFT)
};

// Over the whole run, as its per-token curve is drawn; the sorted times and their quantiles are
// kept in `cache` as tokens arrive.
LatencyStats stats(const hl::Run& run, RunStatsCache& cache, const hl::JambaConfig& config) {
  LatencyStats s;
  s.ttft = run.records[0].step_seconds;
  s.load = run.load_seconds;
  const hl::RunStats& rs = cache.of(run, modelShape(config));
  s.itl = rs.sorted_steps();
  s.p50 = rs.step_percentile(50);
  s.p99 = rs.step_percentile(99);
  return s;
}

double floorSeconds(const HardwareInfo& hw) {
  return hw.weightBytesPerToken > 0 && hw.bandwidthGBs > 0 ? hw.weightBytesPerToken / (hw.bandwidthGBs * 1e9) : 0;
}

// Whether the DRAM floor bounds the measurement: not when the weights fit in the last-level cache
// (each step then reads them from cache, faster than DRAM bandwidth), nor when the measured p50 is
// already below it (the same situation, seen in the numbers). `why` says which.
bool floorBinds(const HardwareInfo& hw, double floorS, double p50, QString* why) {
  if (!(floorS > 0)) return false;
  if (hw.cacheBytes > 0 && hw.weightBytesPerToken <= hw.cacheBytes) {
    *why = QObject::tr("weights %1 fit in the %2 cache: no DRAM floor")
               .arg(humanBytes(static_cast<double>(hw.weightBytesPerToken)), humanBytes(static_cast<double>(hw.cacheBytes)));
    return false;
  }
  if (p50 < floorS) {
    *why = QObject::tr("p50 below the DRAM floor %1 ms: weights are served from cache").arg(floorS * 1e3, 0, 'g', 3);
    return false;
  }
  return true;
}

}  // namespace

bool LatencyView::hasData() const {
  if (!hasRecords(state())) return false;
  for (const hl::TokenTrace& r : state().a->records)
    if (r.step_seconds > 0) return true;
  return false;
}

void LatencyView::rebuild() {
  noDataReason_ = tr("the recording has no step times (a trace file does not store them)");
  clearPlot();
  if (panelCount() < 2) {
    addPanel(0, 1);
    installZoomPan(plot(), panel(0), Qt::Horizontal);
    setPanelName(panel(0), tr("per token"));
    setPanelName(panel(1), tr("histogram"));
  }
  styleAll();
  if (!hasData()) return;
  const Theme& t = th();
  const hl::Run* a = state().a;
  const hl::Run* b = state().b && !state().b->records.empty() ? state().b : nullptr;
  const bool diff = diffMode() && b;
  const int sa = stepA();
  stats_.keepOnly(a, b);
  const LatencyStats la = stats(*a, stats_, state().rec->config);
  const double floorAll = floorSeconds(state().hw);
  QString noFloor;
  const bool binds = floorBinds(state().hw, floorAll, la.p50, &noFloor);
  const double floorS = binds ? floorAll : 0;  // the floor is drawn only where it bounds the measurement
  subtitle_ = tr("TTFT %1 ms").arg(la.ttft * 1e3, 0, 'f', 3);
  if (la.load > 0) subtitle_ += tr(" (+ load %1 s)").arg(la.load, 0, 'f', 2);
  if (!la.itl.empty())
    subtitle_ += tr(", p50 %1 ms, p99 %2 ms").arg(la.p50 * 1e3, 0, 'f', 3).arg(la.p99 * 1e3, 0, 'f', 3);
  if (floorS > 0) subtitle_ += tr(", floor %1 ms").arg(floorS * 1e3, 0, 'f', 3);
  if (!noFloor.isEmpty()) subtitle_ += QStringLiteral("; ") + noFloor;

  // Per token.
  QCPAxisRect* pr = panel(0);
  QCPAxis* px = pr->axis(QCPAxis::atBottom);
  QCPAxis* py = pr->axis(QCPAxis::atLeft);
  setAxisKind(px, AxisKind::Token);
  px->setLabel(tr("token"));
  py->setLabel(diff ? tr("ms per token B − A") : tr("ms per token"));
  auto ms = [](const hl::TokenTrace& r) { return r.step_seconds * 1e3; };
  if (diff) {
    const TokenSeries d = overTokens(*b, ms, a);
    addGraph(pr, "step ms B-A", t.diff)->setData(d.keys, d.values, true);
  } else {
    const TokenSeries va = overTokens(*a, ms);
    addGraph(pr, "step ms A", t.runA)->setData(va.keys, va.values, true);
    if (b) {
      const TokenSeries vb = overTokens(*b, ms);
      addGraph(pr, "step ms B", t.runB, true)->setData(vb.keys, vb.values, true);
    }
    QCPGraph* first = addGraph(pr, "TTFT A", t.highlight);
    first->setLineStyle(QCPGraph::lsNone);
    first->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDiamond, t.highlight, t.highlight, 9));
    first->addData(0, la.ttft * 1e3);
    if (!la.itl.empty()) {
      addHLine(pr, la.p50 * 1e3, QPen(t.runA, 1, Qt::DashLine));
      addHLine(pr, la.p99 * 1e3, QPen(t.runA, 1, Qt::DotLine));
    }
    if (floorS > 0) addHLine(pr, floorS * 1e3, QPen(t.floorLine, 1.5, Qt::DashDotLine));
  }
  setTokenHomeRange(px, a, b);
  // Log y: the floor, the bulk and the tail of the step times differ by orders of magnitude.
  py->setScaleType(diff ? QCPAxis::stLinear : QCPAxis::stLogarithmic);
  if (diff)
    py->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  else
    py->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  py->rescale();
  if (diff) robustDiffRange(pr);
  if (!diff) {
    double lo = py->range().lower, hi = py->range().upper;
    if (floorS > 0) lo = std::min(lo, floorS * 1e3);
    if (!(lo > 0)) lo = 1e-3;
    py->setRange(lo / 1.5, std::max(hi, lo) * 1.5);
  }
  addVLine(pr, sa, QPen(t.highlight, 1.5));
  QCPLegend* pl = panelLegend(pr);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == px) plot()->plottable(i)->addToLegend(pl);

  // Histogram of time per token (tokens after the first) on log-spaced bins, p50 / p99 / floor marked.
  QCPAxisRect* hr = panel(1);
  QCPAxis* hx = hr->axis(QCPAxis::atBottom);
  QCPAxis* hy = hr->axis(QCPAxis::atLeft);
  hx->setLabel(tr("ms per token (tokens after the first)"));
  hy->setLabel(tr("tokens"));
  hx->setScaleType(QCPAxis::stLogarithmic);
  hx->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  std::vector<double> all = la.itl;
  LatencyStats lb;
  if (b) {
    lb = stats(*b, stats_, state().rec->config);
    all.insert(all.end(), lb.itl.begin(), lb.itl.end());
  }
  std::vector<double> positive;
  for (double x : all)
    if (x > 0) positive.push_back(x * 1e3);
  if (!positive.empty()) {
    double lo = *std::min_element(positive.begin(), positive.end());
    double hi = *std::max_element(positive.begin(), positive.end());
    if (floorS > 0) lo = std::min(lo, floorS * 1e3);
    lo /= 1.05;
    hi = std::max(hi * 1.05, lo * 1.5);
    const int bins = std::clamp(static_cast<int>(std::sqrt(static_cast<double>(positive.size()))) * 2, 8, 60);
    const double l0 = std::log(lo), lw = (std::log(hi) - l0) / bins;
    auto hist = [&](const std::vector<double>& v, const QString& name, const QColor& c, bool isB) {
      std::vector<double> cnt(static_cast<size_t>(bins), 0);
      for (double x : v)
        if (x > 0) cnt[std::clamp(static_cast<int>((std::log(x * 1e3) - l0) / lw), 0, bins - 1)] += 1;
      auto* bars = new QCPBars(hx, hy);
      bars->setName(name);
      for (int i = 0; i < bins; ++i) bars->addData(std::exp(l0 + (i + 0.5) * lw), cnt[i]);
      // Log-spaced bins are equally wide on the log axis: a width in axis-rect units fits them.
      bars->setWidthType(QCPBars::wtAxisRectRatio);
      bars->setWidth(0.9 / bins);
      QColor fill = c;
      fill.setAlpha(isB ? 70 : 170);
      bars->setBrush(fill);
      bars->setPen(runPen(c, isB, 1));
      bars->addToLegend(panelLegend(hr));
    };
    hist(la.itl, "histogram A", t.runA, false);
    if (b) hist(lb.itl, "histogram B", t.runB, true);
    setHomeRange(hx, lo, hi);
    hy->rescale();
    hy->setRange(0, hy->range().upper * 1.35 + 1);
    int row = 0;
    auto mark = [&](double x, const QString& text, const QPen& pen) {
      if (!(x > 0)) return;
      addVLine(hr, x, pen);
      // Labels in the right part of the panel hang to the left of their line.
      const bool right = (std::log(x) - std::log(lo)) / (std::log(hi) - std::log(lo)) > 0.6;
      QCPItemText* l = addLabel(hr, x, hy->range().upper * (0.97 - 0.08 * row++),
                                right ? text + QStringLiteral(" ") : QStringLiteral(" ") + text,
                                (right ? Qt::AlignRight : Qt::AlignLeft) | Qt::AlignTop);
      l->setColor(pen.color());
    };
    auto ms3 = [](double s) { return QString::number(s * 1e3, 'g', 4); };
    mark(floorS * 1e3,
         tr("floor %1 ms (%2 / %3 GB/s)")
             .arg(ms3(floorS), humanBytes(state().hw.weightBytesPerToken))
             .arg(state().hw.bandwidthGBs),
         QPen(t.floorLine, 1.5, Qt::DashDotLine));
    mark(la.p50 * 1e3, tr("p50 %1 ms").arg(ms3(la.p50)), QPen(t.runA, 1, Qt::DashLine));
    mark(la.p99 * 1e3, tr("p99 %1 ms").arg(ms3(la.p99)), QPen(t.runA, 1, Qt::DotLine));
    if (b) {
      mark(lb.p50 * 1e3, tr("B p50 %1 ms").arg(ms3(lb.p50)), QPen(t.runB, 1, Qt::DashLine));
      mark(lb.p99 * 1e3, tr("B p99 %1 ms").arg(ms3(lb.p99)), QPen(t.runB, 1, Qt::DotLine));
    }
  } else {
    hx->setRange(0.1, 10);
    hy->setRange(0, 1);
    addLabel(hr, 1, 0.5, tr("one token so far: TTFT only"), Qt::AlignCenter);
  }
}

// CSV: per run, per token: the step time; the run's TTFT, p50 and p99 (tokens after the first) and
// the floor on every row, and whether it bounds the run (0: cache-resident weights, see floorBinds).
QString LatencyView::csv() const {
  CsvBuilder out({"run", "token", "step_seconds", "ttft_seconds", "load_seconds", "p50_seconds", "p99_seconds",
                  "floor_seconds", "floor_binds"});
  if (!hasData()) return out.text();
  const double floorS = floorSeconds(state().hw);
  auto dump = [&](const hl::Run* run, const char* label) {
    if (!run || run->records.empty()) return;
    const int n = static_cast<int>(run->records.size());
    const LatencyStats s = stats(*run, stats_, state().rec->config);
    QString why;
    const QString binds = floorBinds(state().hw, floorS, s.p50, &why) ? "1" : "0";
    for (int i = 0; i < n; ++i)
      out.addRow({label, QString::number(i), num(run->records[i].step_seconds), num(s.ttft), num(s.load),
                  s.itl.empty() ? QString() : num(s.p50), s.itl.empty() ? QString() : num(s.p99),
                  floorS > 0 ? num(floorS) : QString(), floorS > 0 ? binds : QString()});
  };
  dump(state().a, "A");
  dump(state().b, "B");
  return out.text();
}

}  // namespace hl::views
