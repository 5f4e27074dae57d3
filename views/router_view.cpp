// Router load of the selected MoE layer (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022, trace-format.md §3 derived
// quantities): load f_i and importance P_i per expert over the window 0..step (router_window), the current token's
// probabilities with its top-k, and over all tokens t (the current one marked) the balance loss
// E·Σf_iP_i, the z-loss mean(lse²) and the largest load of the growing window 0..t against the uniform 1/E (Fedus, Zoph
// & Shazeer 2022; Zoph et al. 2022).
#include <algorithm>
#include <cmath>

#include "engine/probes/router_probe.h"
#include "views/instrument_views.h"

namespace hl::views {

namespace {

bool hasRouter(const hl::Run* run, const ModelShape& s) {
  return run && !run->records.empty() && s.Xn > 0 &&
         run->records[0].router_probs.size() == static_cast<size_t>(s.Xn) * static_cast<size_t>(s.E) &&
         run->records[0].router_topk.size() == static_cast<size_t>(s.Xn) * static_cast<size_t>(s.k);
}

}  // namespace

bool RouterView::hasData() const {
  if (!hasRecords(state())) return false;
  const ModelShape s = modelShape(state().rec->config);
  return hasRouter(state().a, s);
}

int RouterView::shownLayer() const {
  return state().rec ? layerOrFirst(modelShape(state().rec->config).moeLayers, state().layer) : -1;
}

void RouterView::rebuild() {
  noDataReason_ = tr("the model has no MoE layer");
  clearPlot();
  if (panelCount() < 4) {
    addPanelGrid(2, 2);
    installZoomPan(plot(), panel(2), Qt::Horizontal);
    installZoomPan(plot(), panel(3), Qt::Horizontal);
    setPanelName(panel(0), tr("load"));
    setPanelName(panel(1), tr("probabilities"));
    setPanelName(panel(2), tr("balance"));
    setPanelName(panel(3), tr("max load"));
  }
  styleAll();
  if (!hasData()) return;
  const Theme& t = th();
  const ModelShape s = modelShape(state().rec->config);
  const hl::Run* a = state().a;
  const hl::Run* b = hasRouter(state().b, s) ? state().b : nullptr;
  const bool diff = diffMode() && b;
  const int sa = stepA(), sb = b ? stepB() : -1;
  stats_.keepOnly(a, b);
  hl::RunStats& statsA = stats_.of(*a, s);
  hl::RunStats* statsB = b ? &stats_.of(*b, s) : nullptr;
  const int layer = shownLayer(), ord = s.moeOrdinal(layer);
  subtitle_ = tr("MoE layer %1 (%2 experts, top-%3), window 0..%4").arg(layer).arg(s.E).arg(s.k).arg(sa);

  QSharedPointer<QCPAxisTickerText> et(new QCPAxisTickerText);
  for (int e = 0; e < s.E; e += (s.E > 32 ? 4 : 1)) et->addTick(e, QString::number(e));

  // f_i and P_i over the window.
  const hl::RouterWindowStats wa = statsA.window(ord, sa + 1);
  hl::RouterWindowStats wb;
  if (b) wb = statsB->window(ord, sb + 1);
  QCPAxisRect* fr = panel(0);
  QCPAxis* fx = fr->axis(QCPAxis::atBottom);
  QCPAxis* fy = fr->axis(QCPAxis::atLeft);
  fx->setLabel(tr("expert"));
  fy->setLabel(diff ? tr("B − A") : tr("fraction"));
  fx->setTicker(et);
  auto* group = new QCPBarsGroup(plot());
  auto expertBars = [&](const QString& name, const std::vector<double>& v, const std::vector<double>* sub,
                        const QColor& c, bool outline, bool isB) {
    auto* bars = new QCPBars(fx, fy);
    bars->setName(name);
    for (int e = 0; e < s.E; ++e) bars->addData(e, v[e] - (sub ? (*sub)[e] : 0.0));
    bars->setWidth(0.2);
    QColor fill = c;
    fill.setAlpha(outline ? 60 : 200);
    bars->setBrush(fill);
    bars->setPen(runPen(c, isB, 1));
    bars->setBarsGroup(group);
    return bars;
  };
  if (diff) {
    expertBars("f B-A", wb.load, &wa.load, t.diff, false, false);
    expertBars("P B-A", wb.importance, &wa.importance, t.diff, true, false);
  } else {
    expertBars("f A", wa.load, nullptr, t.runA, false, false);
    expertBars("P A", wa.importance, nullptr, t.runA, true, false);
    if (b) {
      expertBars("f B", wb.load, nullptr, t.runB, false, true);
      expertBars("P B", wb.importance, nullptr, t.runB, true, true);
    }
    addHLine(fr, 1.0 / s.E, QPen(t.floorLine, 1, Qt::DashLine));
  }
  setHomeRange(fx, -0.6, s.E - 0.4);
  fy->rescale();
  // Head room over the bars for the figures line.
  if (!diff) fy->setRange(0, std::max(fy->range().upper * 1.6, 1.5 / s.E));
  QCPLegend* fl = panelLegend(fr);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == fx) plot()->plottable(i)->addToLegend(fl);
  addLabel(fr, -0.5, fy->range().upper,
           tr(" balance %1, z-loss %2, max f %3")
               .arg(QString::number(wa.balance_loss, 'g', 4), QString::number(wa.z_loss, 'g', 4),
                    QString::number(wa.max_load, 'g', 4)),
           Qt::AlignLeft | Qt::AlignTop);

  // The current token's probabilities, top-k marked.
  QCPAxisRect* pr = panel(1);
  QCPAxis* px = pr->axis(QCPAxis::atBottom);
  QCPAxis* py = pr->axis(QCPAxis::atLeft);
  px->setLabel(tr("expert (token %1: %2)").arg(sa).arg(tokenLabel(*state().rec, sa)));
  py->setLabel(diff ? tr("p B − A") : tr("router probability"));
  px->setTicker(et);
  auto* pgroup = new QCPBarsGroup(plot());
  auto probBars = [&](const hl::Run* run, int step, const QString& label, const QColor& c, bool isB, bool sub) {
    const hl::TokenTrace& r = run->records[step];
    auto* all = new QCPBars(px, py);
    all->setName("probs " + label);
    auto* top = new QCPBars(px, py);
    top->setName("topk " + label);
    for (int e = 0; e < s.E; ++e) {
      double v = r.router_probs[static_cast<size_t>(ord * s.E + e)];
      if (sub) v -= a->records[sa].router_probs[static_cast<size_t>(ord * s.E + e)];
      bool chosen = false;
      for (int j = 0; j < s.k; ++j) chosen |= r.router_topk[static_cast<size_t>(ord * s.k + j)] == e;
      (chosen ? top : all)->addData(e, v);
      (chosen ? all : top)->addData(e, 0);
    }
    for (QCPBars* bars : {all, top}) {
      bars->setWidth(0.35);
      bars->setBarsGroup(pgroup);
    }
    top->moveAbove(all);
    QColor fill = c;
    fill.setAlpha(90);
    all->setBrush(fill);
    all->setPen(runPen(c, isB, 1));
    top->setBrush(t.highlight);
    top->setPen(runPen(c, isB, 1));
  };
  if (diff) {
    probBars(b, sb, "B-A", t.diff, false, true);
  } else {
    probBars(a, sa, "A", t.runA, false, false);
    if (b) probBars(b, sb, "B", t.runB, true, false);
  }
  setHomeRange(px, -0.6, s.E - 0.4);
  py->rescale();
  if (!diff) py->setRange(0, std::max(0.05, py->range().upper * 1.1));

  // Over tokens: balance loss (left) and z-loss (right), and the largest load.
  QCPAxisRect* lr = panel(2);
  QCPAxis* lx = lr->axis(QCPAxis::atBottom);
  QCPAxis* ly = lr->axis(QCPAxis::atLeft);
  QCPAxis* lz = lr->axis(QCPAxis::atRight);
  lz->setVisible(true);
  lz->setTickLabels(true);
  lz->setTickLabelColor(t.foreground);
  lz->setBasePen(QPen(t.foreground));
  lz->setTickPen(QPen(t.foreground));
  lz->setLabelColor(t.foreground);
  setAxisKind(lx, AxisKind::Token);
  lx->setLabel(tr("token (window 0..t)"));
  ly->setLabel(diff ? tr("balance B − A") : tr("balance loss E·Σ f·P"));
  lz->setLabel(diff ? tr("z-loss B − A") : tr("z-loss (dotted)"));
  QCPAxisRect* mr = panel(3);
  QCPAxis* mx = mr->axis(QCPAxis::atBottom);
  QCPAxis* my = mr->axis(QCPAxis::atLeft);
  setAxisKind(mx, AxisKind::Token);
  mx->setLabel(tr("token (window 0..t)"));
  my->setLabel(diff ? tr("max f B − A") : tr("max load max_i f_i"));
  // The growing-window curves of a run (minus another's, for B − A), from its statistics.
  auto curves = [&](hl::RunStats& c, hl::RunStats* sub, const QString& label, const QColor& col, bool isB) {
    const int n = static_cast<int>(sub ? std::min(c.tokens(), sub->tokens()) : c.tokens());
    auto series = [&](const std::vector<double>& v, const std::vector<double>* w) {
      QVector<double> out(n);
      for (int i = 0; i < n; ++i) out[i] = v[static_cast<size_t>(i)] - (w ? (*w)[static_cast<size_t>(i)] : 0.0);
      return out;
    };
    QVector<double> keys(n);
    for (int i = 0; i < n; ++i) keys[i] = i;
    addGraph(lr, "balance " + label, col, isB)
        ->setData(keys, series(c.balance(ord), sub ? &sub->balance(ord) : nullptr), true);
    QCPGraph* z = plot()->addGraph(lx, lz);
    z->setName("z-loss " + label);
    QPen zp = runPen(col, isB, 1.0);
    zp.setStyle(Qt::DotLine);
    z->setPen(zp);
    z->setData(keys, series(c.z_loss(ord), sub ? &sub->z_loss(ord) : nullptr), true);
    addGraph(mr, "max load " + label, col, isB)
        ->setData(keys, series(c.max_load(ord), sub ? &sub->max_load(ord) : nullptr), true);
  };
  if (diff) {
    curves(*statsB, &statsA, "B-A", t.diff, false);
  } else {
    curves(statsA, nullptr, "A", t.runA, false);
    if (b) curves(*statsB, nullptr, "B", t.runB, true);
    addHLine(lr, 1.0, QPen(t.floorLine, 1, Qt::DashLine));
    addHLine(mr, 1.0 / s.E, QPen(t.floorLine, 1, Qt::DashLine));
    addLabel(mr, 0, 1.0 / s.E, tr("uniform 1/E"), Qt::AlignLeft | Qt::AlignBottom);
  }
  for (QCPAxis* x : {lx, mx}) setTokenHomeRange(x, a, b);
  ly->rescale();
  lz->rescale();
  my->rescale();
  if (!diff) {
    ly->setRange(std::min(ly->range().lower, 0.9), std::max(ly->range().upper * 1.05, 1.1));
    my->setRange(0, std::max(my->range().upper * 1.1, 2.0 / s.E));
  }
  addVLine(lr, sa, QPen(t.highlight, 1.5));
  addVLine(mr, sa, QPen(t.highlight, 1.5));
  QCPLegend* ll = panelLegend(lr);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == lx) plot()->plottable(i)->addToLegend(ll);
}

void RouterView::handleClick(QCPAxisRect* rect, double x, double y) {
  InstrumentView::handleClick(rect, x, y);
}

// CSV: per run, per MoE layer, per expert: f_i and P_i over the window 0..step, the current token's
// probability and whether it is in the top-k; the window's balance loss and z-loss on every row.
QString RouterView::csv() const {
  CsvBuilder out({"run", "layer", "expert", "load_f", "importance_P", "prob_at_step", "in_topk", "balance_loss",
                  "z_loss", "max_load", "window_tokens"});
  if (!hasData()) return out.text();
  const ModelShape s = modelShape(state().rec->config);
  auto dump = [&](const hl::Run* run, const char* label) {
    if (!hasRouter(run, s)) return;
    // The window the bars show: B's follows stepB(), as drawn, not A's step.
    const int n = effectiveStep(state(), run) + 1;
    const hl::TokenTrace& r = run->records[n - 1];
    for (int o = 0; o < s.Xn; ++o) {
      const hl::RouterWindowStats w = stats_.of(*run, s).window(o, n);
      for (int e = 0; e < s.E; ++e) {
        bool chosen = false;
        for (int j = 0; j < s.k; ++j) chosen |= r.router_topk[static_cast<size_t>(o * s.k + j)] == e;
        out.addRow({label, QString::number(s.moeLayers[o]), QString::number(e), num(w.load[e]), num(w.importance[e]),
                    num(r.router_probs[static_cast<size_t>(o * s.E + e)]), chosen ? "1" : "0", num(w.balance_loss),
                    num(w.z_loss), num(w.max_load), QString::number(n)});
      }
    }
  };
  dump(state().a, "A");
  dump(state().b, "B");
  return out.text();
}

}  // namespace hl::views
