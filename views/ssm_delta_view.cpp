// SSM Δ gates (Gu & Dao 2023): Δ_t per channel of the selected Mamba layer as a tokens × channels
// heatmap (ssm_delta, --full), mean Δ per Mamba layer at the current token (ssm_delta_mean), the mean
// Δ of the selected layer over tokens with write (large Δ: the state is overwritten) and skip (small
// Δ: the token passes) marks, and the retained state exp(ΔA) averaged over channels (ssm_retained).
#include <algorithm>
#include <cmath>

#include "views/instrument_views.h"

namespace hl::views {

// The max of Δ over the channels and records of one layer seen so far: the colour range of the
// heatmap, which shows every token. Kept across redraws so a scrub or an appended record does not
// rescan T × Di values.
struct SsmDeltaView::RangeCache {
  const hl::Run* run = nullptr;
  uint64_t dataVersion = 0;
  int ord = -1;
  size_t records = 0;  // records folded into `max`
  float max = 0.0f;
};

namespace {

bool hasMean(const hl::Run* run, const ModelShape& s) {
  return run && !run->records.empty() && run->records[0].ssm_delta_mean.size() == static_cast<size_t>(s.Mn);
}
bool hasFull(const hl::Run* run, const ModelShape& s) {
  return run && !run->records.empty() &&
         run->records[0].ssm_delta.size() == static_cast<size_t>(s.Mn) * static_cast<size_t>(s.Di);
}
double retainedMean(const hl::TokenTrace& r, int ord, int Di) {
  if (r.ssm_retained.size() < static_cast<size_t>(ord + 1) * Di) return 0;
  double sum = 0;
  const float* p = r.ssm_retained.data() + static_cast<int64_t>(ord) * Di;
  for (int c = 0; c < Di; ++c) sum += p[c];
  return sum / Di;
}
// The median of layer `ord`'s mean Δ over the whole run: × kWrite / kSkip, the write / skip thresholds.
double medianMean(const hl::Run& run, int ord) {
  std::vector<double> v(run.records.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = run.records[i].ssm_delta_mean[ord];
  return percentile(std::move(v), 50);
}

}  // namespace

bool SsmDeltaView::hasData() const {
  if (!hasRecords(state())) return false;
  const ModelShape s = modelShape(state().rec->config);
  return s.Mn > 0 && hasMean(state().a, s);
}

int SsmDeltaView::shownLayer() const {
  return state().rec ? layerOrFirst(modelShape(state().rec->config).mambaLayers, state().layer) : -1;
}

void SsmDeltaView::rebuild() {
  noDataReason_ = tr("the model has no Mamba layer");
  clearPlot();
  if (panelCount() < 4) {
    QCPLayoutGrid* top = nestFirstPanel();
    top->addElement(0, 1, new QCPColorScale(plot()));
    addPanel(0, 2, top);
    top->setColumnStretchFactors({1.4, 0.05, 1.0});
    addPanel(1, 0);
    addPanel(2, 0);
    body()->setRowStretchFactors({1.6, 1.0, 0.8});
    installZoomPan(plot(), panel(0), Qt::Horizontal | Qt::Vertical);
    installZoomPan(plot(), panel(2), Qt::Horizontal);
    installZoomPan(plot(), panel(3), Qt::Horizontal);
    setPanelName(panel(0), tr("Δ per channel"));
    setPanelName(panel(1), tr("layers"));
    setPanelName(panel(2), tr("mean Δ"));
    setPanelName(panel(3), tr("retained"));
  }
  styleAll();
  if (!hasData()) return;
  auto* top = qobject_cast<QCPLayoutGrid*>(body()->element(0, 0));
  auto* scale = qobject_cast<QCPColorScale*>(top->element(0, 1));
  const Theme& t = th();
  const ModelShape s = modelShape(state().rec->config);
  const hl::Run* a = state().a;
  const hl::Run* b = hasMean(state().b, s) ? state().b : nullptr;
  const bool diff = diffMode() && b;
  const int sa = stepA(), sb = b ? stepB() : -1;
  const int layer = shownLayer(), ord = s.mambaOrdinal(layer);
  subtitle_ = layerName(s, layer);

  // Tokens × channels heatmap of Δ (A, or B − A).
  QCPAxisRect* hr = panel(0);
  QCPAxis* hx = hr->axis(QCPAxis::atBottom);
  QCPAxis* hy = hr->axis(QCPAxis::atLeft);
  hy->setRangeReversed(true);
  hx->grid()->setVisible(false);
  hy->grid()->setVisible(false);
  setAxisKind(hy, AxisKind::Token);
  const int64_t heads = layer >= 0 && layer < s.schedule.size() ? s.schedule[layer].ssm.heads : 0;
  if (heads > 0)  // Mamba-2: one Δ per head, shown on each of its channels
    hx->setLabel(tr("channel (Di = %1: %2 heads of %3, one Δ per head)").arg(s.Di).arg(heads).arg(s.Di / heads));
  else
    hx->setLabel(tr("channel (Di = %1)").arg(s.Di));
  hy->setLabel(tr("token"));
  const bool full = hasFull(a, s) && (!diff || hasFull(b, s));
  if (full) {
    auto data = std::make_shared<HeatmapData>(s.Di, newDataVersion());
    HeatmapStyle st;
    if (diff) {
      float m = 1e-12f;
      const size_t rows = std::min(a->records.size(), b->records.size());
      for (size_t r = 0; r < rows; ++r) {
        const float* pa = a->records[r].ssm_delta.data() + static_cast<int64_t>(ord) * s.Di;
        const float* pb = b->records[r].ssm_delta.data() + static_cast<int64_t>(ord) * s.Di;
        std::vector<float> d(static_cast<size_t>(s.Di));
        for (int c = 0; c < s.Di; ++c) {
          d[c] = pb[c] - pa[c];
          m = std::max(m, std::fabs(d[c]));
        }
        data->addOwnedRow(std::move(d));
      }
      st = {-m, m, Colormap::Diverging, Pooling::MaxAbs};
    } else {
      if (!range_) range_ = std::make_shared<RangeCache>();
      RangeCache& rc = *range_;
      if (rc.run != a || rc.dataVersion != state().dataVersion || rc.ord != ord)
        rc = RangeCache{a, state().dataVersion, ord};
      for (; rc.records < a->records.size(); ++rc.records) {
        const float* p = a->records[rc.records].ssm_delta.data() + static_cast<int64_t>(ord) * s.Di;
        for (int c = 0; c < s.Di; ++c) rc.max = std::max(rc.max, p[c]);
      }
      for (size_t r = 0; r < a->records.size(); ++r)
        data->addRow(a->records[r].ssm_delta.data() + static_cast<int64_t>(ord) * s.Di, s.Di);
      st = {0.0f, std::max(1e-12f, rc.max), Colormap::Viridis, Pooling::Max};
    }
    auto* hp = new HeatmapPlottable(hx, hy);
    hp->setName(diff ? "delta B-A" : "delta A");
    hp->setHeatmap(data);
    hp->setColorScale(scale);
    hp->setStyle(st);
    scale->axis()->setLabel(diff ? tr("step size Δ, B − A") : tr("step size Δ"));
    setHomeRange(hx, 0, s.Di);
    setHomeRange(hy, 0, std::max(1, data->rows()));
    addHLine(hr, sa + 0.5, QPen(t.highlight, 1));
  } else {
    hx->setRange(0, 1);
    hy->setRange(0, 1);
    addLabel(hr, 0.5, 0.5, tr("per-channel Δ is not in this recording (saved without the full instruments)"), Qt::AlignCenter);
  }

  // Mean Δ per Mamba layer at the current token.
  QCPAxisRect* lr = panel(1);
  QCPAxis* lx = lr->axis(QCPAxis::atBottom);
  QCPAxis* ly = lr->axis(QCPAxis::atLeft);
  setAxisKind(lx, AxisKind::Layer);
  lx->setLabel(tr("Mamba layer"));
  ly->setLabel(diff ? tr("mean Δ B − A") : tr("mean Δ"));
  auto* group = new QCPBarsGroup(plot());
  auto layerBars = [&](const hl::Run* run, int step, const QString& name, const QColor& c, bool sub) {
    auto* bars = new QCPBars(lx, ly);
    bars->setName(name);
    for (int o = 0; o < s.Mn; ++o) {
      double v = run->records[step].ssm_delta_mean[o];
      if (sub) v -= a->records[sa].ssm_delta_mean[o];
      bars->addData(s.mambaLayers[o], v);
    }
    bars->setWidth(0.4);
    bars->setBrush(c);
    bars->setPen(Qt::NoPen);
    bars->setBarsGroup(group);
  };
  if (diff) {
    layerBars(b, sb, "layers B-A", t.diff, true);
  } else {
    layerBars(a, sa, "layers A", t.runA, false);
    if (b) layerBars(b, sb, "layers B", t.runB, false);
  }
  QSharedPointer<QCPAxisTickerText> lt(new QCPAxisTickerText);
  for (int l : s.mambaLayers) lt->addTick(l, QString::number(l));
  lx->setTicker(lt);
  setHomeRange(lx, -0.7, s.L - 0.3);
  ly->rescale();
  if (!diff) ly->setRangeLower(0);
  addVLine(lr, layer, QPen(t.highlight, 1.5, Qt::DotLine));

  // Mean Δ of the selected layer over tokens, with write / skip marks.
  QCPAxisRect* mr = panel(2);
  QCPAxis* mx = mr->axis(QCPAxis::atBottom);
  QCPAxis* my = mr->axis(QCPAxis::atLeft);
  setAxisKind(mx, AxisKind::Token);
  my->setLabel(diff ? tr("mean Δ B − A") : tr("mean Δ"));
  auto mean = [ord](const hl::TokenTrace& r) { return r.ssm_delta_mean[ord]; };
  auto marks = [&](const hl::Run& run, const QString& suffix, bool isB) {
    const double med = medianMean(run, ord);
    QCPGraph* w = addGraph(mr, "write " + suffix, t.runB, isB);
    QCPGraph* sk = addGraph(mr, "skip " + suffix, t.floorLine, isB);
    w->setLineStyle(QCPGraph::lsNone);
    sk->setLineStyle(QCPGraph::lsNone);
    w->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangle, t.highlight, t.highlight, 7));
    sk->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangleInverted, 5));
    for (size_t i = 0; i < run.records.size(); ++i) {
      const double v = mean(run.records[i]);
      if (v >= kWrite * med) w->addData(i, v);
      if (v <= kSkip * med) sk->addData(i, v);
    }
    if (!isB) {
      addHLine(mr, kWrite * med, QPen(t.highlight, 1, Qt::DashLine));
      addHLine(mr, kSkip * med, QPen(t.floorLine, 1, Qt::DashLine));
      // Say what the marks and lines are, at the left edge of the panel whatever the zoom.
      auto edge = [&](double y, const QString& text, const QColor& c, Qt::Alignment v) {
        QCPItemText* l = addLabel(mr, 0, y, text, Qt::AlignLeft | v);
        l->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        l->position->setCoords(0.01, y);
        l->setColor(c);
      };
      edge(kWrite * med, tr("▲ write: mean Δ ≥ %1 × median (state overwritten)").arg(kWrite), t.highlight,
           Qt::AlignBottom);
      edge(kSkip * med, tr("▼ skip: mean Δ ≤ %1 × median (token passes)").arg(kSkip), t.floorLine, Qt::AlignTop);
    }
  };
  if (diff) {
    const TokenSeries d = overTokens(*b, mean, a);
    addGraph(mr, "mean B-A", t.diff)->setData(d.keys, d.values, true);
  } else {
    const TokenSeries va = overTokens(*a, mean);
    addGraph(mr, "mean A", t.runA)->setData(va.keys, va.values, true);
    marks(*a, "A", false);
    if (b) {
      const TokenSeries vb = overTokens(*b, mean);
      addGraph(mr, "mean B", t.runB, true)->setData(vb.keys, vb.values, true);
    }
  }
  my->rescale();
  if (diff) robustDiffRange(mr);
  setTokenHomeRange(mx, a, b);
  addVLine(mr, sa, QPen(t.highlight, 1.5));
  QCPLegend* ml = panelLegend(mr);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == mx) plot()->plottable(i)->addToLegend(ml);

  // Retained state: mean over channels of exp(Δ·A) averaged over d_state (1 = keeps everything).
  QCPAxisRect* rr = panel(3);
  QCPAxis* rx = rr->axis(QCPAxis::atBottom);
  QCPAxis* ry = rr->axis(QCPAxis::atLeft);
  setAxisKind(rx, AxisKind::Token);
  rx->setLabel(tr("token"));
  ry->setLabel(diff ? tr("retained B − A") : tr("retained"));
  if (hasFull(a, s)) {
    auto retained = [ord, Di = s.Di](const hl::TokenTrace& r) { return retainedMean(r, ord, Di); };
    if (diff && hasFull(b, s)) {
      const TokenSeries d = overTokens(*b, retained, a);
      addGraph(rr, "retained B-A", t.diff)->setData(d.keys, d.values, true);
      robustDiffRange(rr);
    } else {
      const TokenSeries ra = overTokens(*a, retained);
      addGraph(rr, "retained A", t.runA)->setData(ra.keys, ra.values, true);
      if (b && hasFull(b, s)) {
        const TokenSeries rb = overTokens(*b, retained);
        addGraph(rr, "retained B", t.runB, true)->setData(rb.keys, rb.values, true);
      }
      ry->rescale();
      ry->setRange(std::min(ry->range().lower, 0.0), 1.02);
    }
  } else {
    ry->setRange(0, 1);
    addLabel(rr, a->records.size() / 2.0, 0.5,
             tr("retained state is not in this recording (saved without the full instruments)"), Qt::AlignCenter);
  }
  setTokenHomeRange(rx, a, b);
  connect(mx, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), rx, qOverload<const QCPRange&>(&QCPAxis::setRange),
          Qt::UniqueConnection);
  addVLine(rr, sa, QPen(t.highlight, 1.5));
}

QString SsmDeltaView::describeCell(HeatmapPlottable* h, int row, int col) const {
  const ModelShape s = modelShape(state().rec->config);
  QString txt = tr("%1, token %2 (%3), channel %4\nΔ%5 = %6")
                    .arg(layerName(s, shownLayer()))
                    .arg(row)
                    .arg(tokenLabel(*state().rec, row))
                    .arg(col)
                    .arg(h->name().endsWith("B-A") ? tr(" B − A") : QString(), num(h->heatmap()->value(row, col)));
  const hl::TokenTrace& r = state().a->records[row];
  const size_t i = static_cast<size_t>(s.mambaOrdinal(shownLayer())) * s.Di + col;
  if (i < r.ssm_retained.size()) txt += tr("\nretained (A) = %1").arg(num(r.ssm_retained[i]));
  return txt;
}

void SsmDeltaView::handleClick(QCPAxisRect* rect, double x, double y) {
  if (rect == panel(0) && hasData()) {
    const int row = static_cast<int>(std::floor(y));
    if (row >= 0 && row < static_cast<int>(state().a->records.size())) emit stepClicked(row);
    return;
  }
  InstrumentView::handleClick(rect, x, y);
}

QString SsmDeltaView::csv() const {
  CsvBuilder out({"run", "token", "layer", "ssm_delta_mean", "retained_mean", "mark"});
  if (!hasData()) return out.text();
  const ModelShape s = modelShape(state().rec->config);
  auto dump = [&](const hl::Run* run, const char* label) {
    if (!hasMean(run, s)) return;
    for (int o = 0; o < s.Mn; ++o) {
      const double med = medianMean(*run, o);
      for (size_t t = 0; t < run->records.size(); ++t) {
        const hl::TokenTrace& r = run->records[t];
        const double v = r.ssm_delta_mean[o];
        out.addRow({label, QString::number(t), QString::number(s.mambaLayers[o]), num(v),
                    hasFull(run, s) ? num(retainedMean(r, o, s.Di)) : QString(),
                    v >= kWrite * med ? "write" : (v <= kSkip * med ? "skip" : "")});
      }
    }
  };
  dump(state().a, "A");
  dump(state().b, "B");
  return out.text();
}

}  // namespace hl::views
