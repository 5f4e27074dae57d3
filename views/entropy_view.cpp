// Attention entropy (Zhai et al. 2023, Kazemnejad et al. 2023): attn_entropy_norm as a layers × heads heatmap
// at the current token (A above B, or B − A), against layer, and per attention layer (mean over
// heads) over all tokens, the current one marked, with the healthy band between collapse (→ 0) and
// over-smoothing (→ 1).
#include <algorithm>
#include <cmath>

#include "views/instrument_views.h"

namespace hl::views {

namespace {
// Mean over heads of the normalized entropy of attention layer `ord` in record r.
double headMean(const hl::TokenTrace& r, int ord, int nh) {
  double s = 0;
  for (int h = 0; h < nh; ++h) s += r.attn_entropy_norm[static_cast<size_t>(ord * nh + h)];
  return s / nh;
}

bool hasEntropy(const hl::Run* run, const ModelShape& s) {
  return run && !run->records.empty() &&
         run->records[0].attn_entropy_norm.size() == static_cast<size_t>(s.An) * static_cast<size_t>(s.nh);
}
}  // namespace

bool EntropyView::hasData() const {
  if (!hasRecords(state())) return false;
  const ModelShape s = modelShape(state().rec->config);
  return s.An > 0 && hasEntropy(state().a, s);
}

void EntropyView::rebuild() {
  noDataReason_ = tr("the model has no attention layer");
  clearPlot();
  // Layout: [heatmap | colour scale | entropy vs layer] over [entropy over tokens].
  if (panelCount() < 3) {
    QCPLayoutGrid* top = nestFirstPanel();
    auto* scale = new QCPColorScale(plot());
    top->addElement(0, 1, scale);
    addPanel(0, 2, top);
    top->setColumnStretchFactors({1.0, 0.05, 1.0});
    addPanel(1, 0);
    installZoomPan(plot(), panel(2), Qt::Horizontal);
    setPanelName(panel(0), tr("heads"));
    setPanelName(panel(1), tr("layers"));
    setPanelName(panel(2), tr("tokens"));
  }
  styleAll();
  if (!hasData()) return;
  QCPAxisRect* heatRect = panel(0);
  QCPAxisRect* depthRect = panel(1);
  QCPAxisRect* tokRect = panel(2);
  auto* top = qobject_cast<QCPLayoutGrid*>(body()->element(0, 0));
  auto* scale = qobject_cast<QCPColorScale*>(top->element(0, 1));

  const Theme& t = th();
  const ModelShape s = modelShape(state().rec->config);
  const hl::Run* a = state().a;
  const hl::Run* b = hasEntropy(state().b, s) ? state().b : nullptr;
  const bool diff = diffMode() && b;
  const int sa = stepA(), sb = b ? stepB() : -1;
  const int selOrd = s.attnOrdinal(state().layer);

  // Heatmap: rows = attention layers (A, then B when overlaid), columns = heads.
  auto data = std::make_shared<HeatmapData>(s.nh, newDataVersion());
  QSharedPointer<QCPAxisTickerText> rowTicks(new QCPAxisTickerText);
  auto rowOf = [&](const hl::Run* run, int step, int ord) {
    const float* p = run->records[step].attn_entropy_norm.data() + ord * s.nh;
    return std::vector<float>(p, p + s.nh);
  };
  for (int o = 0; o < s.An; ++o) {
    std::vector<float> row = rowOf(a, sa, o);
    if (diff) {
      const std::vector<float> rb = rowOf(b, sb, o);
      for (int h = 0; h < s.nh; ++h) row[h] = rb[h] - row[h];
    }
    data->addOwnedRow(std::move(row));
    rowTicks->addTick(o + 0.5, (b && !diff ? "A " : "") + layerName(s, s.attnLayers[o]));
  }
  if (b && !diff) {
    for (int o = 0; o < s.An; ++o) {
      data->addOwnedRow(rowOf(b, sb, o));
      rowTicks->addTick(s.An + o + 0.5, "B " + layerName(s, s.attnLayers[o]));
    }
  }
  auto* hp = new HeatmapPlottable(heatRect->axis(QCPAxis::atBottom), heatRect->axis(QCPAxis::atLeft));
  hp->setName(diff ? "entropy B-A" : "entropy");
  hp->setHeatmap(data);
  HeatmapStyle style;
  if (diff) {
    float m = 1e-6f;
    for (int r = 0; r < data->rows(); ++r)
      for (int c = 0; c < s.nh; ++c) m = std::max(m, std::fabs(data->value(r, c)));
    style = {-m, m, Colormap::Diverging, Pooling::MaxAbs};
  } else {
    style = {0.0f, 1.0f, Colormap::Viridis, Pooling::Max};
  }
  hp->setColorScale(scale);
  hp->setStyle(style);
  scale->axis()->setLabel(diff ? tr("B − A") : tr("H / ln N"));
  QCPAxis* hx = heatRect->axis(QCPAxis::atBottom);
  QCPAxis* hy = heatRect->axis(QCPAxis::atLeft);
  hy->setRangeReversed(true);
  hy->setTicker(rowTicks);
  QSharedPointer<QCPAxisTickerText> headTicks(new QCPAxisTickerText);
  for (int h = 0; h < s.nh; ++h) headTicks->addTick(h + 0.5, QString::number(h));
  hx->setTicker(headTicks);
  hx->setLabel(tr("head"));
  hx->grid()->setVisible(false);
  hy->grid()->setVisible(false);
  hx->setRange(0, s.nh);
  hy->setRange(0, data->rows());
  if (selOrd >= 0) {
    for (int rep = 0; rep < (b && !diff ? 2 : 1); ++rep) {
      auto* box = new QCPItemRect(plot());
      box->setClipAxisRect(heatRect);
      for (QCPItemPosition* p : {box->topLeft, box->bottomRight}) {
        p->setAxes(hx, hy);
        p->setAxisRect(heatRect);
      }
      box->topLeft->setCoords(0, selOrd + rep * s.An);
      box->bottomRight->setCoords(s.nh, selOrd + rep * s.An + 1);
      box->setPen(QPen(t.highlight, 2));
      box->setBrush(Qt::NoBrush);
    }
  }

  // Entropy against layer at the current token: mean over heads, heads as points.
  QCPAxis* dx = depthRect->axis(QCPAxis::atBottom);
  QCPAxis* dy = depthRect->axis(QCPAxis::atLeft);
  setAxisKind(dx, AxisKind::Layer);
  dx->setLabel(tr("layer"));
  dy->setLabel(diff ? tr("Δ H / ln N (B − A)") : tr("H / ln N"));
  if (!diff) {
    addHBand(depthRect, kBandLow, kBandHigh, t.band);
    // The band explained inside it, at the left edge whatever the zoom.
    QCPItemText* l = addLabel(depthRect, 0, kBandHigh,
                              tr("healthy band %1–%2: below = collapse onto few keys, above = near-uniform")
                                  .arg(kBandLow)
                                  .arg(kBandHigh),
                              Qt::AlignLeft | Qt::AlignTop);
    l->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    l->position->setCoords(0.01, kBandHigh);
    l->setObjectName("bandLabel");
  }
  auto depthCurve = [&](const hl::Run* run, int step, bool isB) {
    QCPGraph* g = addGraph(depthRect, isB ? "vs layer B" : (diff ? "vs layer B-A" : "vs layer A"),
                           diff ? t.diff : (isB ? t.runB : t.runA), isB);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 5));
    QCPGraph* heads = addGraph(depthRect, isB ? "heads B" : (diff ? "heads B-A" : "heads A"),
                               diff ? t.diff : (isB ? t.runB : t.runA), isB);
    heads->setLineStyle(QCPGraph::lsNone);
    heads->setScatterStyle(QCPScatterStyle(isB ? QCPScatterStyle::ssCross : QCPScatterStyle::ssDot, 4));
    for (int o = 0; o < s.An; ++o) {
      const double x = s.attnLayers[o];
      double m = headMean(run->records[step], o, s.nh);
      if (diff) m = headMean(b->records[sb], o, s.nh) - m;
      g->addData(x, m);
      for (int h = 0; h < s.nh; ++h) {
        double v = run->records[step].attn_entropy_norm[o * s.nh + h];
        if (diff) v = b->records[sb].attn_entropy_norm[o * s.nh + h] - v;
        heads->addData(x, v);
      }
    }
  };
  depthCurve(a, sa, false);
  if (b && !diff) depthCurve(b, sb, true);
  setHomeRange(dx, -0.5, s.L - 0.5);
  if (diff)
    dy->rescale();
  else
    dy->setRange(0, 1.05);
  if (state().layer >= 0) addVLine(depthRect, state().layer, QPen(t.highlight, 1.5, Qt::DotLine));

  // Over all tokens, the current one marked: one curve per attention layer (mean over heads).
  QCPAxis* tx = tokRect->axis(QCPAxis::atBottom);
  QCPAxis* ty = tokRect->axis(QCPAxis::atLeft);
  setAxisKind(tx, AxisKind::Token);
  tx->setLabel(tr("token"));
  ty->setLabel(dy->label());
  if (!diff) addHBand(tokRect, kBandLow, kBandHigh, t.band);
  for (int o = 0; o < s.An; ++o) {
    // The selected layer in full colour, the others lighter (pens stay 1 px: the fast raster path).
    QColor c = seriesColor(t, o);
    if (selOrd >= 0 && o != selOrd) c.setAlpha(110);
    const QString name = layerName(s, s.attnLayers[o]);
    auto mean = [o, nh = s.nh](const hl::TokenTrace& r) { return headMean(r, o, nh); };
    if (diff) {
      const TokenSeries d = overTokens(*b, mean, a);
      addGraph(tokRect, name + " B-A", c)->setData(d.keys, d.values, true);
      continue;
    }
    if (b) {
      const TokenSeries vb = overTokens(*b, mean);
      addGraph(tokRect, name + " B", c, true)->setData(vb.keys, vb.values, true);
    }
    const TokenSeries va = overTokens(*a, mean);
    addGraph(tokRect, name + " A", c)->setData(va.keys, va.values, true);
  }
  setTokenHomeRange(tx, a, b);
  if (diff)
    robustDiffRange(tokRect);
  else
    ty->setRange(0, 1.05);
  addVLine(tokRect, sa, QPen(t.highlight, 1.5));
  QCPLegend* lg = panelLegend(tokRect);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == tx) plot()->plottable(i)->addToLegend(lg);
}

QString EntropyView::describeCell(HeatmapPlottable* h, int row, int col) const {
  const ModelShape s = modelShape(state().rec->config);
  const bool second = row >= s.An;
  const int ord = row % std::max(1, s.An);
  QString txt = tr("%1, head %2 (%3)\n%4 = %5")
                    .arg(layerName(s, s.attnLayers[ord]))
                    .arg(col)
                    .arg(second ? "B" : (h->name().endsWith("B-A") ? "B − A" : "A"), tr("H / ln N"))
                    .arg(num(h->heatmap()->value(row, col)));
  const hl::TokenTrace& r = state().a->records[stepA()];
  const size_t i = static_cast<size_t>(ord * s.nh + col);
  if (!second && i < r.attn_entropy.size())
    txt += tr("\nH = %1 nats, mass on keys = %2, max |logit| = %3")
               .arg(num(r.attn_entropy[i]), num(r.attn_mass[i]), num(r.attn_max_logit[i]));
  return txt;
}

void EntropyView::handleClick(QCPAxisRect* rect, double x, double y) {
  if (hasData() && rect == panel(0)) {
    const ModelShape s = modelShape(state().rec->config);
    const int row = static_cast<int>(std::floor(y)), col = static_cast<int>(std::floor(x));
    if (row >= 0 && s.An > 0 && col >= 0 && col < s.nh) {
      emit headClicked(col);
      emit layerClicked(s.attnLayers[row % s.An]);
    }
    return;
  }
  InstrumentView::handleClick(rect, x, y);
}

QString EntropyView::csv() const {
  CsvBuilder b({"run", "token", "layer", "head", "attn_entropy", "attn_entropy_norm", "attn_mass", "attn_max_logit"});
  if (!hasData()) return b.text();
  const ModelShape s = modelShape(state().rec->config);
  auto dump = [&](const hl::Run* run, const char* label) {
    for (size_t t = 0; t < run->records.size(); ++t) {
      const hl::TokenTrace& r = run->records[t];
      for (int o = 0; o < s.An; ++o)
        for (int h = 0; h < s.nh; ++h) {
          const size_t i = static_cast<size_t>(o * s.nh + h);
          b.addRow({label, QString::number(t), QString::number(s.attnLayers[o]), QString::number(h),
                    num(r.attn_entropy[i]), num(r.attn_entropy_norm[i]), num(r.attn_mass[i]),
                    num(r.attn_max_logit[i])});
        }
    }
  };
  dump(state().a, "A");
  if (hasEntropy(state().b, s)) dump(state().b, "B");
  return b.text();
}

}  // namespace hl::views
