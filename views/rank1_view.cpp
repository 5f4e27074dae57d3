// Distance to rank 1 (Dong, Cordonnier & Loukas 2021): rank1_distance ‖X − 1x̄ᵀ‖/‖X‖ of the residual stream
// against depth at the current token (log y: embeddings, then after each layer), and over all tokens
// at the last depth and at the selected layer, the current token marked. A solid, B dashed; B − A on
// a linear axis.
#include <cmath>
#include <limits>

#include "views/instrument_views.h"

namespace hl::views {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// Log axes cannot show 0 (the first token, or an all-zero stream): leave a gap.
double logSafe(double v) {
  return v > 0 ? v : kNaN;
}

bool hasRank(const hl::Run* run, int L) {
  return run && !run->records.empty() && run->records[0].rank1_distance.size() == static_cast<size_t>(L + 1);
}
}  // namespace

void Rank1View::rebuild() {
  clearPlot();
  if (panelCount() < 2) {
    addPanel(0, 1);
    installZoomPan(plot(), panel(1), Qt::Horizontal);
    setPanelName(panel(0), tr("depth"));
    setPanelName(panel(1), tr("tokens"));
  }
  styleAll();
  if (!hasData() || !state().rec) return;
  const ModelShape s = modelShape(state().rec->config);
  if (!hasRank(state().a, s.L)) return;
  const Theme& t = th();
  const hl::Run* a = state().a;
  const hl::Run* b = hasRank(state().b, s.L) ? state().b : nullptr;
  const bool diff = diffMode() && b;
  const int sa = stepA(), sb = b ? stepB() : -1;

  // Against depth at the current token.
  QCPAxisRect* dr = panel(0);
  QCPAxis* dx = dr->axis(QCPAxis::atBottom);
  QCPAxis* dy = dr->axis(QCPAxis::atLeft);
  dx->setLabel(tr("depth (residual stream after layer)"));
  dy->setLabel(diff ? tr("B − A") : tr("‖X − 1x̄ᵀ‖ / ‖X‖"));
  QSharedPointer<QCPAxisTickerText> dt(new QCPAxisTickerText);
  const int every = s.L > 24 ? 4 : (s.L > 12 ? 2 : 1);
  for (int c = 0; c <= s.L; c += every) dt->addTick(c, c == 0 ? tr("emb") : QString::number(c - 1));
  dx->setTicker(dt);
  auto depthGraph = [&](const hl::Run* run, int step, const QString& name, const QColor& col, bool isB) {
    QCPGraph* g = addGraph(dr, name, col, isB);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
    const std::vector<float>& v = run->records[step].rank1_distance;
    for (int c = 0; c <= s.L; ++c) g->addData(c, diff ? v[c] - a->records[sa].rank1_distance[c] : logSafe(v[c]));
    return g;
  };
  for (int l : s.attnLayers) addVLine(dr, l + 1, QPen(t.attention, 1, Qt::DashLine));
  if (diff) {
    depthGraph(b, sb, "depth B-A", t.diff, false);
    dy->setScaleType(QCPAxis::stLinear);
    dy->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    dy->rescale();
  } else {
    depthGraph(a, sa, "depth A", t.runA, false);
    if (b) depthGraph(b, sb, "depth B", t.runB, true);
    dy->setScaleType(QCPAxis::stLogarithmic);
    dy->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    dy->rescale();
    QCPRange r = dy->range();
    if (!(r.lower > 0)) r = QCPRange(1e-4, 1);
    dy->setRange(r.lower / 2, std::max(r.upper * 2, 1.0));
  }
  setHomeRange(dx, -0.5, s.L + 0.5);
  setAxisKind(dx, AxisKind::None);
  if (state().layer >= 0) addVLine(dr, state().layer + 1, QPen(t.highlight, 2));
  QCPLegend* dl = panelLegend(dr);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == dx) plot()->plottable(i)->addToLegend(dl);

  // Over tokens at the last depth and at the selected layer's output.
  QCPAxisRect* tr_ = panel(1);
  QCPAxis* tx = tr_->axis(QCPAxis::atBottom);
  QCPAxis* ty = tr_->axis(QCPAxis::atLeft);
  setAxisKind(tx, AxisKind::Token);
  tx->setLabel(tr("token"));
  ty->setLabel(dy->label());
  std::vector<std::pair<int, QString>> cols = {{s.L, tr("final")}};
  if (state().layer >= 0 && state().layer < s.L)
    cols.insert(cols.begin(), {state().layer + 1, tr("after L%1").arg(state().layer)});
  int ci = 0;
  for (const auto& [col, label] : cols) {
    const QColor c = seriesColor(t, ci++);
    const int depth = col;
    auto value = [depth](const hl::TokenTrace& r) { return r.rank1_distance[depth]; };
    if (diff) {
      const TokenSeries d = overTokens(*b, value, a);
      addGraph(tr_, label + " B-A", c)->setData(d.keys, d.values, true);
      continue;
    }
    auto logged = [&value](const hl::TokenTrace& r) { return logSafe(value(r)); };
    if (b) {
      const TokenSeries vb = overTokens(*b, logged);
      addGraph(tr_, label + " B", c, true)->setData(vb.keys, vb.values, true);
    }
    const TokenSeries va = overTokens(*a, logged);
    addGraph(tr_, label + " A", c)->setData(va.keys, va.values, true);
  }
  ty->setScaleType(dy->scaleType());
  if (diff) {
    ty->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    robustDiffRange(tr_);
  } else {
    ty->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
    ty->rescale();
    QCPRange r = ty->range();
    if (!(r.lower > 0)) r = QCPRange(1e-4, 1);
    ty->setRange(r.lower / 2, std::max(r.upper * 2, 1.0));
  }
  setTokenHomeRange(tx, a, b);
  addVLine(tr_, sa, QPen(t.highlight, 1.5));
  QCPLegend* tl = panelLegend(tr_);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == tx) plot()->plottable(i)->addToLegend(tl);
}

void Rank1View::handleClick(QCPAxisRect* rect, double x, double y) {
  if (rect == panel(0) && state().rec) {
    const int layer = static_cast<int>(std::lround(x)) - 1;
    if (layer >= 0 && layer < state().rec->config.num_hidden_layers) emit layerClicked(layer);
    return;
  }
  InstrumentView::handleClick(rect, x, y);
}

QString Rank1View::csv() const {
  CsvBuilder b({"run", "token", "depth", "after_layer", "rank1_distance", "resid_max_abs"});
  if (!hasData()) return b.text();
  const ModelShape s = modelShape(state().rec->config);
  auto dump = [&](const hl::Run* run, const char* label) {
    if (!hasRank(run, s.L)) return;
    for (int t = 0; t < static_cast<int>(run->records.size()); ++t)
      for (int c = 0; c <= s.L; ++c)
        b.addRow({label, QString::number(t), QString::number(c),
                  c == 0 ? QStringLiteral("embeddings") : QString::number(c - 1),
                  num(run->records[t].rank1_distance[c]), num(run->records[t].resid_max_abs[c])});
  };
  dump(state().a, "A");
  dump(state().b, "B");
  return b.text();
}

}  // namespace hl::views
