// Outliers and sinks (Miller 2023; Xiao et al. 2023, Sun et al. 2024): the largest residual activation resid_max_abs
// per depth over the run and the token that holds it (the sink) beside the current token's, over all tokens at the
// selected layer with non-finite markers and the current token marked, and the largest attention logit attn_max_logit
// per head — what softmax-1 and registers should visibly lower. Log y for magnitudes; B − A on linear axes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "views/instrument_views.h"

namespace hl::views {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
double logSafe(double v) {
  return v > 0 && std::isfinite(v) ? v : kNaN;
}

bool hasResid(const hl::Run* run, int L) {
  return run && !run->records.empty() && run->records[0].resid_max_abs.size() == static_cast<size_t>(L + 1);
}

void logAxis(QCPAxis* a, bool log) {
  a->setScaleType(log ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (log)
    a->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  else
    a->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
}

void fitLog(QCPAxis* a) {
  a->rescale();
  QCPRange r = a->range();
  if (!(r.lower > 0)) r = QCPRange(1e-3, 1);
  a->setRange(r.lower / 2, r.upper * 3);
}

}  // namespace

void OutliersView::rebuild() {
  clearPlot();
  if (panelCount() < 4) {
    addPanelGrid(2, 2);
    installZoomPan(plot(), panel(1), Qt::Horizontal);
    installZoomPan(plot(), panel(3), Qt::Horizontal);
    setPanelName(panel(0), tr("depth"));
    setPanelName(panel(1), tr("tokens"));
    setPanelName(panel(2), tr("logits per head"));
    setPanelName(panel(3), tr("logits over tokens"));
  }
  styleAll();
  if (!hasData()) return;
  const Theme& t = th();
  const ModelShape s = modelShape(state().rec->config);
  const hl::Run* a = state().a;
  if (!hasResid(a, s.L)) return;
  const hl::Run* b = hasResid(state().b, s.L) ? state().b : nullptr;
  const bool diff = diffMode() && b;
  const int sa = stepA(), sb = b ? stepB() : -1;
  const hl::Recording& rec = *state().rec;

  // Largest |x| per depth over the run, with the sink token named, and at the current token.
  QCPAxisRect* dr = panel(0);
  QCPAxis* dx = dr->axis(QCPAxis::atBottom);
  QCPAxis* dy = dr->axis(QCPAxis::atLeft);
  dx->setLabel(tr("depth (residual stream after layer)"));
  dy->setLabel(diff ? tr("max |x| B − A") : tr("max |x| over the run"));
  QSharedPointer<QCPAxisTickerText> dt(new QCPAxisTickerText);
  const int every = s.L > 24 ? 4 : (s.L > 12 ? 2 : 1);
  for (int c = 0; c <= s.L; c += every) dt->addTick(c, c == 0 ? tr("emb") : QString::number(c - 1));
  dx->setTicker(dt);
  logAxis(dy, !diff);
  // Max over the run's tokens of resid_max_abs at each depth, and the token holding it (the sink
  // starred on the curve over tokens, which is drawn whole), kept as tokens arrive.
  stats_.keepOnly(a, b);
  const std::vector<double> mxA = stats_.of(*a, s).depth_max();
  const std::vector<int> argA = stats_.of(*a, s).depth_arg();
  std::vector<double> mxB;
  std::vector<int> argB;
  if (b) {
    mxB = stats_.of(*b, s).depth_max();
    argB = stats_.of(*b, s).depth_arg();
  }
  auto depthGraph = [&](const QString& name, const std::vector<double>& v, const std::vector<double>* sub,
                        const QColor& c, bool isB) {
    QCPGraph* g = addGraph(dr, name, c, isB);
    g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
    for (int d = 0; d <= s.L; ++d) g->addData(d, sub ? v[d] - (*sub)[d] : logSafe(v[d]));
    return g;
  };
  if (diff) {
    depthGraph("max B-A", mxB, &mxA, t.diff, false);
    dy->rescale();
  } else {
    depthGraph("max A", mxA, nullptr, t.runA, false);
    std::vector<double> now(a->records[sa].resid_max_abs.begin(), a->records[sa].resid_max_abs.end());
    depthGraph("now A", now, nullptr, t.runA, false)->setPen(QPen(t.runA, 1, Qt::DotLine));
    if (b) depthGraph("max B", mxB, nullptr, t.runB, true);
    fitLog(dy);
    dy->setRangeUpper(dy->range().upper * 8);  // headroom for the sink labels
    const int labelEvery = s.L > 16 ? 4 : 1;
    for (int d = 0; d <= s.L; d += labelEvery) {
      if (argA[d] < 0) continue;
      QCPItemText* lab =
          addLabel(dr, d, mxA[d], QStringLiteral(" %1").arg(tokenLabel(rec, argA[d])), Qt::AlignLeft | Qt::AlignBottom);
      lab->setRotation(-40);
    }
  }
  setHomeRange(dx, -0.5, s.L + 0.5);
  if (state().layer >= 0) addVLine(dr, state().layer + 1, QPen(t.highlight, 1.5));
  QCPLegend* dl = panelLegend(dr);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == dx) plot()->plottable(i)->addToLegend(dl);

  // Over tokens at the selected layer's output (or the last depth), with the sink and non-finite marks.
  const int col = state().layer >= 0 && state().layer < s.L ? state().layer + 1 : s.L;
  const QString where = col == s.L ? tr("final") : tr("after L%1").arg(col - 1);
  QCPAxisRect* tr_ = panel(1);
  QCPAxis* tx = tr_->axis(QCPAxis::atBottom);
  QCPAxis* ty = tr_->axis(QCPAxis::atLeft);
  setAxisKind(tx, AxisKind::Token);
  tx->setLabel(tr("token"));
  ty->setLabel(diff ? tr("|x| max B − A (%1)").arg(where) : tr("max |x| (%1)").arg(where));
  logAxis(ty, !diff);
  auto resid = [col](const hl::TokenTrace& r) { return r.resid_max_abs[col]; };
  if (diff) {
    const TokenSeries d = overTokens(*b, resid, a);
    addGraph(tr_, "resid B-A", t.diff)->setData(d.keys, d.values, true);
    robustDiffRange(tr_);
  } else {
    auto logged = [&resid](const hl::TokenTrace& r) { return logSafe(resid(r)); };
    const TokenSeries la = overTokens(*a, logged);
    addGraph(tr_, "resid A", t.runA)->setData(la.keys, la.values, true);
    if (b) {
      const TokenSeries lb = overTokens(*b, logged);
      addGraph(tr_, "resid B", t.runB, true)->setData(lb.keys, lb.values, true);
    }
    fitLog(ty);
    QCPGraph* sink = addGraph(tr_, "sink A", t.highlight);
    sink->setLineStyle(QCPGraph::lsNone);
    sink->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssStar, t.highlight, 12));
    if (argA[col] >= 0) sink->addData(argA[col], mxA[col]);
  }
  QCPGraph* bad = addGraph(tr_, "non-finite A", t.deviceLine);
  bad->setLineStyle(QCPGraph::lsNone);
  bad->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, t.deviceLine, 10));
  for (int i = 0; i < static_cast<int>(a->records.size()); ++i)
    if (a->records[i].nonfinite_layer >= 0) bad->addData(i, diff ? 0.0 : ty->range().upper / 1.5);
  setTokenHomeRange(tx, a, b);
  addVLine(tr_, sa, QPen(t.highlight, 1.5));

  // attn_max_logit per head at the current token.
  QCPAxisRect* hr = panel(2);
  QCPAxis* hx = hr->axis(QCPAxis::atBottom);
  QCPAxis* hy = hr->axis(QCPAxis::atLeft);
  QCPAxisRect* lr = panel(3);
  QCPAxis* lx = lr->axis(QCPAxis::atBottom);
  QCPAxis* ly = lr->axis(QCPAxis::atLeft);
  const bool attn = s.An > 0 && a->records[0].attn_max_logit.size() == static_cast<size_t>(s.An) * s.nh;
  if (!attn) {
    hx->setRange(0, 1);
    hy->setRange(0, 1);
    addLabel(hr, 0.5, 0.5, tr("no attention layer"), Qt::AlignCenter);
    return;
  }
  hx->setLabel(tr("attention layer / head (token %1)").arg(sa));
  hy->setLabel(diff ? tr("max |logit| B − A") : tr("max |q·k|/√d"));
  QSharedPointer<QCPAxisTickerText> ht(new QCPAxisTickerText);
  for (int o = 0; o < s.An; ++o)
    for (int h = 0; h < s.nh; h += (s.nh > 8 ? s.nh / 4 : 1))
      ht->addTick(o * s.nh + h, QStringLiteral("L%1h%2").arg(s.attnLayers[o]).arg(h));
  hx->setTicker(ht);
  auto* group = new QCPBarsGroup(plot());
  auto headBars = [&](const hl::Run* run, int step, const QString& name, const QColor& c, bool sub, bool isB) {
    auto* bars = new QCPBars(hx, hy);
    bars->setName(name);
    for (int i = 0; i < s.An * s.nh; ++i)
      bars->addData(i, run->records[step].attn_max_logit[i] - (sub ? a->records[sa].attn_max_logit[i] : 0.0f));
    styleRunBars(bars, c, isB, 0.4);
    bars->setBarsGroup(group);
  };
  if (diff) {
    headBars(b, sb, "logit B-A", t.diff, true, false);
  } else {
    headBars(a, sa, "logit A", t.runA, false, false);
    if (b) headBars(b, sb, "logit B", t.runB, false, true);
  }
  setHomeRange(hx, -0.6, s.An * s.nh - 0.4);
  hy->rescale();
  if (!diff) hy->setRangeLower(0);
  for (int o = 1; o < s.An; ++o) addVLine(hr, o * s.nh - 0.5, QPen(t.grid, 1, Qt::DashLine));
  const int selOrd = s.attnOrdinal(state().layer);
  if (selOrd >= 0) {
    const int h = std::clamp(state().head, 0, s.nh - 1);
    addVLine(hr, selOrd * s.nh + h, QPen(t.highlight, 1.5, Qt::DotLine));
  }

  // Over tokens: the largest logit over heads, per attention layer.
  setAxisKind(lx, AxisKind::Token);
  lx->setLabel(tr("token"));
  ly->setLabel(diff ? tr("max over heads B − A") : tr("max over heads of max |logit|"));
  for (int o = 0; o < s.An; ++o) {
    auto headMax = [&](const hl::TokenTrace& r) {
      float m = 0;
      for (int h = 0; h < s.nh; ++h) m = std::max(m, r.attn_max_logit[static_cast<size_t>(o * s.nh + h)]);
      return static_cast<double>(m);
    };
    const QColor c = seriesColor(t, o);
    const QString nm = QStringLiteral("L%1").arg(s.attnLayers[o]);
    if (diff) {
      const TokenSeries d = overTokens(*b, headMax, a);
      addGraph(lr, "max logit " + nm + " B-A", c)->setData(d.keys, d.values, true);
      continue;
    }
    if (b) {
      const TokenSeries mb = overTokens(*b, headMax);
      addGraph(lr, "max logit " + nm + " B", c, true)->setData(mb.keys, mb.values, true);
    }
    const TokenSeries ma = overTokens(*a, headMax);
    addGraph(lr, "max logit " + nm + " A", c)->setData(ma.keys, ma.values, true);
  }
  ly->rescale();
  if (diff) robustDiffRange(lr);
  if (!diff) ly->setRangeLower(0);
  setTokenHomeRange(lx, a, b);
  addVLine(lr, sa, QPen(t.highlight, 1.5));
  QCPLegend* ll = panelLegend(lr);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == lx) plot()->plottable(i)->addToLegend(ll);
}

QString OutliersView::describePoint(QCPAbstractPlottable* p, int index) const {
  QString s = InstrumentView::describePoint(p, index);
  if (!state().rec) return s;
  if (auto* g = qobject_cast<QCPGraph*>(p); g && g->keyAxis() == panel(1)->axis(QCPAxis::atBottom)) {
    const int tok = static_cast<int>(std::lround(g->data()->at(index)->key));
    s += tr("\ntoken %1: %2").arg(tok).arg(tokenLabel(*state().rec, tok));
    if (state().a && tok >= 0 && tok < static_cast<int>(state().a->records.size()) &&
        state().a->records[tok].nonfinite_layer >= 0)
      s += tr("\nnon-finite from %1")
               .arg(QString::fromStdString(hl::nonfinite_where(state().a->records[tok].nonfinite_layer,
                                                               state().rec->config.num_hidden_layers)));
  }
  return s;
}

void OutliersView::handleClick(QCPAxisRect* rect, double x, double y) {
  if (rect == panel(0) && state().rec) {
    const int layer = static_cast<int>(std::lround(x)) - 1;
    if (layer >= 0 && layer < state().rec->config.num_hidden_layers) emit layerClicked(layer);
    return;
  }
  InstrumentView::handleClick(rect, x, y);
}

// CSV: per run, the largest value over the run and the token holding it, and the value at the current
// step — per depth of resid_max_abs (kind "resid_max_abs", index = depth) and per head of attn_max_logit.
QString OutliersView::csv() const {
  CsvBuilder out({"run", "kind", "index", "after_layer", "head", "max", "token", "token_text", "value_at_step"});
  if (!hasData()) return out.text();
  const ModelShape s = modelShape(state().rec->config);
  auto dump = [&](const hl::Run* run, const char* label) {
    if (!hasResid(run, s.L)) return;
    const int n = static_cast<int>(run->records.size()), step = effectiveStep(state(), run);
    const hl::RunStats& rs = stats_.of(*run, s);
    const std::vector<double>& mx = rs.depth_max();
    const std::vector<int>& arg = rs.depth_arg();
    for (int c = 0; c <= s.L; ++c)
      out.addRow({label, "resid_max_abs", QString::number(c),
                  c == 0 ? QStringLiteral("embeddings") : QString::number(c - 1), "", num(mx[c]),
                  QString::number(arg[c]), tokenLabel(*state().rec, arg[c]), num(run->records[step].resid_max_abs[c])});
    if (run->records[0].attn_max_logit.size() != static_cast<size_t>(s.An) * s.nh) return;
    for (int o = 0; o < s.An; ++o)
      for (int h = 0; h < s.nh; ++h) {
        const size_t i = static_cast<size_t>(o * s.nh + h);
        double m = -1;
        int at = -1;
        for (int t = 0; t < n; ++t)
          if (run->records[t].attn_max_logit[i] > m) {
            m = run->records[t].attn_max_logit[i];
            at = t;
          }
        out.addRow({label, "attn_max_logit", QString::number(o * s.nh + h), QString::number(s.attnLayers[o]),
                    QString::number(h), num(m), QString::number(at), tokenLabel(*state().rec, at),
                    num(run->records[step].attn_max_logit[i])});
      }
  };
  dump(state().a, "A");
  dump(state().b, "B");
  return out.text();
}

}  // namespace hl::views
