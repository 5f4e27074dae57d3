// DoRA magnitude / direction (Liu et al. 2024): ΔD on x against ΔM on y, one point per adapted
// matrix (rows of `hybridlens dora`), with the least-squares line ΔM = a + b·ΔD whose slope b tells
// DoRA / full fine-tuning (negative) from LoRA (positive); per-layer mean ΔD and ΔM as bars.
#include <algorithm>
#include <cmath>

#include "views/instrument_views.h"

namespace hl::views {

namespace {

bool nonEmpty(const std::vector<hl::DoraRow>* rows) {
  return rows && !rows->empty();
}

// Intercept of the least-squares line through the means.
double intercept(const std::vector<hl::DoraRow>& rows, double slope) {
  double md = 0, mm = 0;
  for (const hl::DoraRow& r : rows) {
    md += r.delta_d;
    mm += r.delta_m;
  }
  md /= static_cast<double>(rows.size());
  mm /= static_cast<double>(rows.size());
  return mm - slope * md;
}

}  // namespace

bool DoraView::hasData() const {
  return nonEmpty(state().dora) || nonEmpty(state().doraB);
}

void DoraView::rebuild() {
  noDataReason_ = tr("load an adapter (File > Load adapter…) or a fine-tuned checkpoint (File > Load fine-tuned checkpoint for DoRA…)");
  clearPlot();
  if (panelCount() < 3) {
    auto* right = new QCPLayoutGrid;
    body()->addElement(0, 1, right);
    addPanel(0, 0, right);
    addPanel(1, 0, right);
    body()->setColumnStretchFactors({1.3, 1.0});
    setPanelName(panel(0), tr("ΔM vs ΔD"));
    setPanelName(panel(1), tr("per layer"));
  }
  styleAll();
  if (!hasData()) return;
  const Theme& t = th();
  QCPAxisRect* sr = panel(0);
  QCPAxis* sx = sr->axis(QCPAxis::atBottom);
  QCPAxis* sy = sr->axis(QCPAxis::atLeft);
  sx->setLabel(tr("ΔD  mean (1 − cos)"));
  sy->setLabel(tr("ΔM  mean |‖W'‖ − ‖W0‖|"));
  QCPAxisRect* dr = panel(1);
  QCPAxisRect* mr = panel(2);
  for (QCPAxisRect* r : {dr, mr}) setAxisKind(r->axis(QCPAxis::atBottom), AxisKind::Layer);
  dr->axis(QCPAxis::atLeft)->setLabel(tr("mean ΔD"));
  mr->axis(QCPAxis::atLeft)->setLabel(tr("mean ΔM"));
  mr->axis(QCPAxis::atBottom)->setLabel(tr("layer (−1: lm_head)"));
  auto* gd = new QCPBarsGroup(plot());
  auto* gm = new QCPBarsGroup(plot());
  const int sel = state().layer;
  QStringList slopes;

  auto drawSet = [&](const std::vector<hl::DoraRow>& rows, const QString& label, const QColor& col, bool isB) {
    const double b = hl::least_squares_slope(rows);
    auto* pts = new QCPCurve(sx, sy);
    pts->setName("points " + label);
    pts->setLineStyle(QCPCurve::lsNone);
    pts->setScatterStyle(QCPScatterStyle(isB ? QCPScatterStyle::ssCircle : QCPScatterStyle::ssDisc, col, 6));
    auto* hi = new QCPCurve(sx, sy);
    hi->setName("selected " + label);
    hi->setLineStyle(QCPCurve::lsNone);
    hi->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(t.highlight, 2), Qt::NoBrush, 11));
    double lo = 1e300, up = -1e300;
    for (size_t i = 0; i < rows.size(); ++i) {
      pts->addData(static_cast<double>(i), rows[i].delta_d, rows[i].delta_m);
      if (rows[i].layer == sel) hi->addData(static_cast<double>(i), rows[i].delta_d, rows[i].delta_m);
      lo = std::min(lo, rows[i].delta_d);
      up = std::max(up, rows[i].delta_d);
    }
    if (std::isfinite(b)) {
      const double a0 = intercept(rows, b);
      QCPGraph* fit = addGraph(sr, "fit " + label, col, isB, 1.5);
      fit->addData(lo, a0 + b * lo);
      fit->addData(up, a0 + b * up);
      fit->addToLegend(panelLegend(sr));
    }
    pts->addToLegend(panelLegend(sr));
    slopes << tr("%1 slope b = %2").arg(label, std::isfinite(b) ? num(b) : tr("undefined"));
    // Per-layer means.
    const std::vector<hl::DoraLayerSummary> sum = hl::dora_layer_summary(rows);
    auto* bd = new QCPBars(dr->axis(QCPAxis::atBottom), dr->axis(QCPAxis::atLeft));
    auto* bm = new QCPBars(mr->axis(QCPAxis::atBottom), mr->axis(QCPAxis::atLeft));
    bd->setName("layer dD " + label);
    bm->setName("layer dM " + label);
    for (const hl::DoraLayerSummary& ls : sum) {
      bd->addData(ls.layer, ls.mean_delta_d);
      bm->addData(ls.layer, ls.mean_delta_m);
    }
    for (QCPBars* bars : {bd, bm}) styleRunBars(bars, col, isB, 0.35);
    bd->setBarsGroup(gd);
    bm->setBarsGroup(gm);
  };
  if (nonEmpty(state().dora)) drawSet(*state().dora, QString::fromStdString(state().doraLabel), t.runA, false);
  if (nonEmpty(state().doraB)) drawSet(*state().doraB, QString::fromStdString(state().doraLabelB), t.runB, true);
  subtitle_ = slopes.join(QStringLiteral("; "));
  sx->rescale();
  sy->rescale();
  const QCPRange xr = sx->range(), yr = sy->range();
  setHomeRange(sx, xr.lower - 0.05 * xr.size() - 1e-12, xr.upper + 0.05 * xr.size() + 1e-12);
  setHomeRange(sy, yr.lower - 0.05 * yr.size() - 1e-12, yr.upper + 0.05 * yr.size() + 1e-12);
  int Lmax = 0;
  if (state().rec) Lmax = static_cast<int>(state().rec->config.num_hidden_layers);
  for (const auto* rows : {state().dora, state().doraB})
    if (rows)
      for (const hl::DoraRow& r : *rows) Lmax = std::max(Lmax, r.layer + 1);
  for (QCPAxisRect* r : {dr, mr}) {
    setHomeRange(r->axis(QCPAxis::atBottom), -1.6, Lmax - 0.4);
    r->axis(QCPAxis::atLeft)->rescale();
    r->axis(QCPAxis::atLeft)->setRangeLower(0);
    r->axis(QCPAxis::atLeft)->setRangeUpper(std::max(r->axis(QCPAxis::atLeft)->range().upper * 1.1, 1e-12));
    if (sel >= 0) addVLine(r, sel, QPen(t.highlight, 1.5, Qt::DotLine));
  }
}

QString DoraView::describePoint(QCPAbstractPlottable* p, int index) const {
  if (auto* c = qobject_cast<QCPCurve*>(p)) {
    const bool isB = p->name().endsWith(QString::fromStdString(state().doraLabelB)) && state().doraB;
    const std::vector<hl::DoraRow>* rows = isB ? state().doraB : state().dora;
    const int row = static_cast<int>(c->data()->at(index)->t);
    if (rows && row >= 0 && row < static_cast<int>(rows->size())) {
      const hl::DoraRow& r = (*rows)[row];
      return tr("%1: layer %2 %3\nΔD = %4\nΔM = %5")
          .arg(isB ? QString::fromStdString(state().doraLabelB) : QString::fromStdString(state().doraLabel))
          .arg(r.layer)
          .arg(QString::fromStdString(r.module), num(r.delta_d), num(r.delta_m));
    }
  }
  return InstrumentView::describePoint(p, index);
}

void DoraView::handleClick(QCPAxisRect* rect, double x, double y) {
  if (rect == panel(0)) {
    double best = 1e300;
    int layer = -2;
    for (const auto* rows : {state().dora, state().doraB}) {
      if (!rows) continue;
      for (const hl::DoraRow& r : *rows) {
        const double dx =
            rect->axis(QCPAxis::atBottom)->coordToPixel(r.delta_d) - rect->axis(QCPAxis::atBottom)->coordToPixel(x);
        const double dy =
            rect->axis(QCPAxis::atLeft)->coordToPixel(r.delta_m) - rect->axis(QCPAxis::atLeft)->coordToPixel(y);
        const double d = dx * dx + dy * dy;
        if (d < best) {
          best = d;
          layer = r.layer;
        }
      }
    }
    if (best < 100 && layer >= 0) emit layerClicked(layer);
    return;
  }
  InstrumentView::handleClick(rect, x, y);
}

// CSV: the rows of each set with its fitted slope (the `hybridlens dora` columns plus set and slope).
QString DoraView::csv() const {
  CsvBuilder out({"set", "layer", "module", "delta_m", "delta_d", "slope_dM_on_dD"});
  auto dump = [&](const std::vector<hl::DoraRow>* rows, const std::string& label) {
    if (!nonEmpty(rows)) return;
    const double b = hl::least_squares_slope(*rows);
    for (const hl::DoraRow& r : *rows)
      out.addRow({QString::fromStdString(label), QString::number(r.layer), QString::fromStdString(r.module),
                  num(r.delta_m), num(r.delta_d), num(b)});
  };
  dump(state().dora, state().doraLabel);
  dump(state().doraB, state().doraLabelB);
  return out.text();
}

}  // namespace hl::views
