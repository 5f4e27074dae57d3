// Attention pattern of the selected attention layer and head (Miller 2023; Xiao et al. 2023, Zhai et al. 2023): a
// heatmap with one row per query token of the run (the current one marked) and one column per key (registers first,
// then tokens), the null share p_null as an extra column beside it, and the current row as bars over the keys plus the
// null slot, A and B grouped. Rows come straight from the records' attn_rows (no copies).
#include <algorithm>
#include <cmath>
#include <deque>

#include "views/attention_rows.h"
#include "views/instrument_views.h"
#include "views/token_axis_ticker.h"

namespace hl::views {

// B − A rows (keys then p_null) of one layer/head, built once per row as records are appended.
struct AttentionPatternView::DiffCache {
  const hl::Run* a = nullptr;
  const hl::Run* b = nullptr;
  uint64_t dataVersion = 0;
  int ord = -1, head = -1;
  std::deque<std::vector<float>> rows;  // row t: (n_reg + t + 2,)
};

using attn::hasRows;
using attn::keyLabel;
using attn::rowPtr;

bool AttentionPatternView::hasData() const {
  if (!hasRecords(state())) return false;
  if (showsHidden()) return true;
  const ModelShape s = modelShape(state().rec->config);
  return s.An > 0 && hasRows(state().a);
}

int AttentionPatternView::shownLayer() const {
  if (showsHidden()) return state().layer;
  return state().rec ? layerOrFirst(modelShape(state().rec->config).attnLayers, state().layer) : -1;
}

int AttentionPatternView::shownHead() const {
  const int nh = state().rec ? modelShape(state().rec->config).nh : 1;
  return std::clamp(state().head, 0, std::max(0, nh - 1));
}

void AttentionPatternView::rebuild() {
  noDataReason_ = tr("no attention rows in this recording (it was saved without the full instruments)");
  clearPlot();
  if (panelCount() < 5) {
    // [keys A | null A | keys B | null B | scale] over [current row as bars].
    QCPLayoutGrid* top = nestFirstPanel();
    addPanel(0, 1, top);
    addPanel(0, 2, top);
    addPanel(0, 3, top);
    top->addElement(0, 4, new QCPColorScale(plot()));
    top->setColumnStretchFactors({1.0, 0.06, 1.0, 0.06, 0.04});
    top->setColumnSpacing(2);
    addPanel(1, 0);
    body()->setRowStretchFactors({2.0, 1.0});
    installZoomPan(plot(), panel(0), Qt::Horizontal | Qt::Vertical);
    installZoomPan(plot(), panel(2), Qt::Horizontal | Qt::Vertical);
    installZoomPan(plot(), panel(4), Qt::Horizontal);
    setPanelName(panel(0), tr("pattern"));
    setPanelName(panel(4), tr("row"));
  }
  styleAll();
  // Token tickers name tokens of the recording they were made for: drop them until the data below
  // makes new ones (a Reset or a new model replaces the recording before this view is redrawn).
  for (int i = 0; i < 4; ++i)
    for (QCPAxis* ax : {panel(i)->axis(QCPAxis::atBottom), panel(i)->axis(QCPAxis::atLeft)})
      if (dynamic_cast<TokenAxisTicker*>(ax->ticker().data())) ax->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  syncControls();
  rebuildGrid();
  auto* top = qobject_cast<QCPLayoutGrid*>(body()->element(0, 0));
  QCPColorScale* scale = nullptr;
  for (QCPLayoutElement* e : top->elements(false))
    if (auto* cs = qobject_cast<QCPColorScale*>(e)) scale = cs;
  if (!hasData()) return;
  if (showsHidden()) return rebuildHidden(scale);

  const Theme& t = th();
  const ModelShape s = modelShape(state().rec->config);
  const hl::Recording& rec = *state().rec;
  const hl::Run* a = state().a;
  const hl::Run* b = hasRows(state().b) ? state().b : nullptr;
  const int layer = shownLayer(), ord = s.attnOrdinal(layer);
  const int head = shownHead();
  const int nRegA = runRegisters(*a, s), nRegB = b ? runRegisters(*b, s) : 0;
  const bool diff = diffMode() && b && nRegA == nRegB;
  const int sa = stepA();
  // Every query row of each run (B − A: the rows both have); the current row is marked, not the last.
  const int na = static_cast<int>(a->records.size());
  const int nb = b ? static_cast<int>(b->records.size()) : 0;
  const int nab = std::min(na, nb);

  // The B pair of panels is in the layout only when A and B are drawn side by side.
  const bool pairB = b && !diff;
  arrangeTop(top, scale, true, pairB);

  // B − A rows, extended as records are appended.
  if (diff) {
    if (!diff_) diff_ = std::make_shared<DiffCache>();
    DiffCache& dc = *diff_;
    if (dc.a != a || dc.b != b || dc.dataVersion != state().dataVersion || dc.ord != ord || dc.head != head) {
      dc = DiffCache{a, b, state().dataVersion, ord, head, {}};
    }
    while (static_cast<int>(dc.rows.size()) < nab) {
      const int r = static_cast<int>(dc.rows.size());
      const int len = nRegA + r + 2;
      const float* pa = rowPtr(a->records[r], ord, head, s.nh, nRegA, r);
      const float* pb = rowPtr(b->records[r], ord, head, s.nh, nRegB, r);
      std::vector<float> d(static_cast<size_t>(len));
      for (int i = 0; i < len; ++i) d[i] = pb[i] - pa[i];
      dc.rows.push_back(std::move(d));
    }
  }

  // Heatmaps: keys and the null column, for A and B (or B − A in the first pair).
  auto makePair = [&](int slot, const hl::Run* run, int nReg, int rows, const QString& label, bool isDiff) {
    QCPAxisRect* keysRect = panel(slot * 2);
    QCPAxisRect* nullRect = panel(slot * 2 + 1);
    auto keys = std::make_shared<HeatmapData>(nReg + rows, newDataVersion());
    auto null = std::make_shared<HeatmapData>(1, newDataVersion());
    for (int r = 0; r < rows; ++r) {
      const float* p = isDiff ? diff_->rows[r].data() : rowPtr(run->records[r], ord, head, s.nh, nReg, r);
      keys->addRow(p, nReg + r + 1);
      null->addRow(p + nReg + r + 1, 1);
    }
    HeatmapStyle st = weightStyle();
    if (isDiff) st = {-1.0f, 1.0f, Colormap::Diverging, Pooling::MaxAbs};
    addQueryKeyMap(keysRect, "keys " + label, keys, st, slot == 0 ? scale : nullptr, rows, nReg,
                   nReg > 0 ? tr("keys %1 (%2 registers first)").arg(label).arg(nReg) : tr("keys %1").arg(label));
    addVLine(keysRect, sa + 0.5 + nReg, QPen(QColor(128, 128, 128, 120), 1, Qt::DotLine));
    addHLine(keysRect, sa + 0.5, QPen(t.highlight, 1));
    // The null strip beside it follows the key heatmap's rows.
    auto* np = new HeatmapPlottable(nullRect->axis(QCPAxis::atBottom), nullRect->axis(QCPAxis::atLeft));
    np->setName("null " + label);
    np->setHeatmap(null);
    np->setStyle(st);
    QCPAxis* x = nullRect->axis(QCPAxis::atBottom);
    QCPAxis* y = nullRect->axis(QCPAxis::atLeft);
    y->setRangeReversed(true);
    x->grid()->setVisible(false);
    y->grid()->setVisible(false);
    QSharedPointer<QCPAxisTickerText> nt(new QCPAxisTickerText);
    nt->addTick(0.5, tr("null"));
    x->setTicker(nt);
    x->setRange(0, 1);
    y->setTickLabels(false);
    y->setRange(keysRect->axis(QCPAxis::atLeft)->range());
    connect(keysRect->axis(QCPAxis::atLeft), qOverload<const QCPRange&>(&QCPAxis::rangeChanged), y,
            qOverload<const QCPRange&>(&QCPAxis::setRange), Qt::UniqueConnection);
    addHLine(nullRect, sa + 0.5, QPen(t.highlight, 1));
    scale->axis()->setLabel(isDiff ? tr("B − A (linear)") : tr("attention weight") + colorScaleName(st));
  };
  if (diff) {
    makePair(0, a, nRegA, nab, "B-A", true);
  } else {
    makePair(0, a, nRegA, na, "A", false);
    if (b) makePair(1, b, nRegB, nb, "B", false);
  }

  // The current row over keys plus the null slot (Miller 2023; Xiao et al. 2023: grouped bars).
  QCPAxisRect* barRect = panel(4);
  QCPAxis* bx = barRect->axis(QCPAxis::atBottom);
  QCPAxis* byAxis = barRect->axis(QCPAxis::atLeft);
  auto* group = new QCPBarsGroup(plot());
  auto addRowBars = [&](const hl::Run* run, int nReg, const QString& name, const QColor& c, bool isB) {
    if (static_cast<int>(run->records.size()) <= sa) return;
    const float* p = rowPtr(run->records[sa], ord, head, s.nh, nReg, sa);
    const float* pa = diff ? rowPtr(a->records[sa], ord, head, s.nh, nRegA, sa) : nullptr;
    auto* bars = new QCPBars(bx, byAxis);
    bars->setName(name);
    QVector<double> k, v;
    const int keys = nReg + sa + 1;
    for (int i = 0; i <= keys; ++i) {
      // Aligned by token (issue 17 finding 3): token j at x = j in every run, a run's registers to
      // the left of token 0 (x = −nReg..−1), the null slot one gap right of the last token.
      k << (i < keys ? i - nReg : sa + 2);
      v << (pa ? p[i] - pa[i] : p[i]);
    }
    bars->setData(k, v, true);
    bars->setWidth(0.8);
    bars->setPen(Qt::NoPen);
    QColor fill = c;
    if (isB) fill.setAlpha(150);
    bars->setBrush(fill);
    bars->setBarsGroup(group);
  };
  if (diff) {
    addRowBars(b, nRegB, "row B-A", t.diff, false);
  } else {
    addRowBars(a, nRegA, "row A", t.runA, false);
    if (b) addRowBars(b, nRegB, "row B", t.runB, true);
  }
  const int nRegMax = std::max(nRegA, b ? nRegB : 0);
  const int keys = nRegMax + sa + 1;
  if (keys <= 24) {
    QSharedPointer<QCPAxisTickerText> kt(new QCPAxisTickerText);
    for (int i = 0; i < keys; ++i) kt->addTick(i - nRegMax, keyLabel(rec, nRegMax, i));
    kt->addTick(sa + 2, tr("null"));
    bx->setTicker(kt);
    bx->setTickLabelRotation(keys > 10 ? 45 : 0);
  } else {
    bx->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
    bx->setTickLabelRotation(0);
  }
  bx->setLabel(tr("key at query %1 (%2), then the null slot").arg(sa).arg(tokenLabel(rec, sa)));
  byAxis->setLabel(diff ? tr("B − A") : tr("weight"));
  setHomeRange(bx, -nRegMax - 1, sa + 3);
  byAxis->rescale();
  if (!diff) byAxis->setRangeLower(0);
  QCPLegend* lg = panelLegend(barRect);
  for (int i = 0; i < plot()->plottableCount(); ++i)
    if (plot()->plottable(i)->keyAxis() == bx) plot()->plottable(i)->addToLegend(lg);
  subtitle_ = tr("%1, head %2").arg(layerName(s, layer)).arg(head);
  if (diffMode() && b && nRegA != nRegB) subtitle_ += tr(" (B − A needs equal registers: A and B side by side)");
}

HeatmapPlottable* AttentionPatternView::addQueryKeyMap(QCPAxisRect* rect, const QString& name,
                                                        std::shared_ptr<HeatmapData> data, const HeatmapStyle& style,
                                                        QCPColorScale* scale, int rows, int nReg, const QString& xLabel) {
  auto* map = new HeatmapPlottable(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
  map->setName(name);
  map->setHeatmap(std::move(data));
  if (scale) map->setColorScale(scale);
  map->setStyle(style);
  QCPAxis* x = rect->axis(QCPAxis::atBottom);
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  y->setRangeReversed(true);
  x->grid()->setVisible(false);
  y->grid()->setVisible(false);
  const hl::Recording* recp = state().rec;
  setTokenAxisTicker(y, [recp](int r) { return tokenLabel(*recp, r); }, rows);
  setAxisKind(y, AxisKind::Token);
  setTokenAxisTicker(x, [recp, nReg](int c) { return keyLabel(*recp, nReg, c); }, nReg + rows);
  setAxisKind(x, AxisKind::Token);
  x->setLabel(xLabel);
  y->setLabel(tr("query token"));
  setHomeRange(x, 0, std::max(1, nReg + rows));
  setHomeRange(y, 0, std::max(1, rows));
  if (nReg > 0) addVLine(rect, nReg, QPen(th().foreground, 1, Qt::DashLine));
  return map;
}

void AttentionPatternView::arrangeTop(QCPLayoutGrid* top, QCPColorScale* scale, bool nullStrips, bool pairB) {
  if (pairB == panel(2)->visible() && nullStrips == panel(1)->visible() && top->elementCount() > 0) return;
  const std::vector<QCPLayoutElement*> order = {panel(0), panel(1), panel(2), panel(3), scale};
  for (QCPLayoutElement* e : order)
    if (top->elements(false).contains(e)) top->take(e);
  top->simplify();
  int col = 0;
  QList<double> stretch;
  for (QCPLayoutElement* e : order) {
    const bool isB = e == panel(2) || e == panel(3), isNull = e == panel(1) || e == panel(3);
    const bool shown = (!isB || pairB) && (!isNull || nullStrips);
    e->setVisible(shown);
    if (!shown) continue;
    top->addElement(0, col++, e);
    stretch << (e == scale ? 0.04 : (isNull ? 0.06 : 1.0));
  }
  top->setColumnStretchFactors(stretch);
}

QString AttentionPatternView::describeCell(HeatmapPlottable* h, int row, int col) const {
  if (showsHidden()) return describeHiddenCell(row, col);
  const ModelShape s = modelShape(state().rec->config);
  const bool isB = h->name().endsWith(" B");
  const hl::Run* run = isB && state().b ? state().b : state().a;
  const int nReg = runRegisters(*run, s);
  const bool nullCol = h->name().startsWith("null");
  const QString key = nullCol ? tr("null slot") : keyLabel(*state().rec, nReg, col);
  return tr("%1, head %2, run %3\nquery %4 (%5) → %6\nweight = %7")
      .arg(layerName(s, shownLayer()))
      .arg(shownHead())
      .arg(h->name().section(' ', 1))
      .arg(row)
      .arg(tokenLabel(*state().rec, row), key, num(h->heatmap()->value(row, col)));
}

void AttentionPatternView::handleClick(QCPAxisRect* rect, double x, double y) {
  if (hasData() && (rect == panel(0) || rect == panel(2))) {
    const int row = static_cast<int>(std::floor(y));
    if (row >= 0 && row < static_cast<int>(state().a->records.size())) emit stepClicked(row);
    return;
  }
  InstrumentView::handleClick(rect, x, y);
}

// CSV: the matrix drawn, whole: per run, every query and every key of its row (registers,
// tokens 0..query) then the null share (key "null"); rows in the order of the heatmap.
QString AttentionPatternView::csv() const {
  if (showsHidden()) return hiddenCsv();
  CsvBuilder out({"run", "layer", "head", "query", "key", "key_label", "weight"});
  if (!hasData()) return out.text();
  const ModelShape s = modelShape(state().rec->config);
  const int layer = shownLayer(), ord = s.attnOrdinal(layer), head = shownHead();
  const QString layerText = QString::number(layer), headText = QString::number(head);
  auto dump = [&](const hl::Run* run, const QString& label) {
    const int nReg = runRegisters(*run, s);
    for (int q = 0; q < static_cast<int>(run->records.size()); ++q) {
      const float* p = rowPtr(run->records[q], ord, head, s.nh, nReg, q);
      const QString query = QString::number(q);
      for (int k = 0; k <= nReg + q; ++k)
        out.addRow({label, layerText, headText, query, QString::number(k), keyLabel(*state().rec, nReg, k), num(p[k])});
      out.addRow({label, layerText, headText, query, "null", "null", num(p[nReg + q + 1])});
    }
  };
  dump(state().a, "A");
  if (hasRows(state().b)) dump(state().b, "B");
  return out.text();
}

}  // namespace hl::views
