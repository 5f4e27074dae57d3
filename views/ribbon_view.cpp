// Layer ribbon (Lieber et al. 2024): one cell per layer for the mixer (attention / Mamba) over one
// for the feed-forward (dense MLP / MoE), block boundaries every attn_layer_period layers, and the
// block holding the selected layer expanded below with each cell named. Click selects a layer.
#include <QFontMetrics>
#include <QTimer>
#include <algorithm>
#include <cmath>
#include <numeric>

#include "views/instrument_views.h"

namespace hl::views {

bool LayerRibbonView::hasData() const {
  return state().rec && state().rec->config.num_hidden_layers > 0;
}

namespace {

struct CellText {
  QString mixer, ffn;
};

// The cell texts of one layer of the schedule.
CellText cellText(const hl::LayerSpec& l, bool longForm) {
  CellText t;
  const bool attn = l.has_attention(), moe = l.is_moe();
  if (!longForm) {
    t.mixer = QString(QChar::fromLatin1(hl::mixer_letter(l.mixer)));
    t.ffn = QString(QChar::fromLatin1(hl::ffn_letter(l.ffn)));
  } else {
    if (l.mixer == hl::MixerKind::Parallel)  // Falcon-H1: both side by side
      t.mixer = QStringLiteral("attn∥SSM\n%1h, %2×%3")
                    .arg(l.attn.heads)
                    .arg(l.ssm.heads)
                    .arg(l.ssm.d_inner / l.ssm.heads);
    else if (attn)
      t.mixer = QStringLiteral("attention\n%1 heads, %2 kv").arg(l.attn.heads).arg(l.attn.kv_heads);
    else if (l.mixer == hl::MixerKind::Mamba2)  // heads of Di / heads channels
      t.mixer = QStringLiteral("Mamba-2\n%1×%2, N %3").arg(l.ssm.heads).arg(l.ssm.d_inner / l.ssm.heads).arg(l.ssm.d_state);
    else if (!hl::mixer_present(l.mixer))  // Nemotron-H's MLP layers
      t.mixer = QStringLiteral("no mixer");
    else
      t.mixer = QStringLiteral("Mamba\nDi %1, N %2").arg(l.ssm.d_inner).arg(l.ssm.d_state);
    t.ffn = moe ? QStringLiteral("MoE\n%1 experts, top-%2%3")
                      .arg(l.ffn_params.experts)
                      .arg(l.ffn_params.top_k)
                      .arg(l.ffn_params.shared_d_ff > 0 ? QStringLiteral(" + shared %1").arg(l.ffn_params.shared_d_ff)
                                                        : QString())
          : l.ffn == hl::FfnKind::None ? QStringLiteral("no FFN")
                                       : QStringLiteral("%1\n%2").arg(l.ffn_params.gated ? "MLP" : "MLP relu²").arg(l.ffn_params.d_ff);
  }
  return t;
}

// "A attention (2)  M Mamba (6)": each mixer kind the schedule holds, with its letter and count.
QString mixerLegend(const hl::LayerSchedule& sched) {
  QString s;
  for (int k = 0; k < hl::kMixerKinds; ++k) {
    const auto kind = static_cast<hl::MixerKind>(k);
    int n = 0;
    for (const hl::LayerSpec& l : sched.layers()) n += l.mixer == kind ? 1 : 0;
    if (n == 0) continue;
    const QString name = kind == hl::MixerKind::Attention ? QStringLiteral("attention")
                         : kind == hl::MixerKind::Mamba2  ? QStringLiteral("Mamba-2")
                         : kind == hl::MixerKind::Mamba1  ? QStringLiteral("Mamba")
                         : kind == hl::MixerKind::None    ? QStringLiteral("no mixer")
                         : kind == hl::MixerKind::Parallel ? QStringLiteral("attention ∥ Mamba-2")
                                                          : QString::fromLatin1(hl::mixer_name(kind));
    s += QStringLiteral("%1 %2 (%3)  ").arg(QChar::fromLatin1(hl::mixer_letter(kind))).arg(name).arg(n);
  }
  return s;
}

}  // namespace

void LayerRibbonView::rebuild() {
  clearPlot();
  if (panelCount() < 2) {
    addPanel(1, 0);
    setPanelName(panel(0), tr("schedule"));
    setPanelName(panel(1), tr("block"));
  }
  QCPAxisRect* ribbon = panel(0);
  QCPAxisRect* block = panel(1);
  styleAll();
  if (!hasData()) return;
  const hl::JambaConfig& c = state().rec->config;
  const hl::LayerSchedule sched = hl::LayerSchedule::from_config(c);
  const Theme& t = th();
  const int L = static_cast<int>(sched.size());
  // The schedule repeats every lcm(attention period, expert period) layers; a model shorter than
  // that is one partial block (issue 17 finding 2: not "one block of 9" for 8 layers).
  // Families with explicit layer lists (Bamba, Nemotron-H) have no period: one block.
  const int64_t repeat = c.family != hl::Family::Jamba
                             ? c.num_hidden_layers
                             : std::lcm(std::max<int64_t>(1, c.attn_layer_period), std::max<int64_t>(1, c.expert_layer_period));
  const int period = static_cast<int>(std::min<int64_t>(repeat, std::max<int64_t>(1, c.num_hidden_layers)));
  const int sel = state().layer;

  auto shortTxt = [&](int i) { return cellText(sched[i], false); };
  // Of `candidates`, the first whose lines fit the cell of layer i (cellWidth × cellHeight axis units of
  // `rect` at the label font), or "". Before the first layout the rect has no size: the first is kept.
  auto fitCellText = [&](const QStringList& candidates, QCPAxisRect* rect, int i, double cell) -> QString {
    if (rect->width() < 10 || rect->height() < 10) return candidates.front();
    const QFontMetrics fm(QFont(font().family(), 8));
    const double w = std::fabs(rect->axis(QCPAxis::atBottom)->coordToPixel(i + cell / 2) -
                               rect->axis(QCPAxis::atBottom)->coordToPixel(i - cell / 2));
    const double h = std::fabs(rect->axis(QCPAxis::atLeft)->coordToPixel(0) - rect->axis(QCPAxis::atLeft)->coordToPixel(cell));
    for (const QString& c : candidates) {
      const QStringList lines = c.split('\n');
      int widest = 0;
      for (const QString& line : lines) widest = std::max(widest, fm.horizontalAdvance(line));
      if (widest + 4 <= w && lines.size() * fm.height() <= h) return c;
    }
    return QString();
  };

  // The cell sizes for fitting the texts: the plot laid out at its current size and ranges.
  auto layOut = [&] {
    for (auto phase : {QCPLayoutElement::upPreparation, QCPLayoutElement::upMargins, QCPLayoutElement::upLayout})
      plot()->plotLayout()->update(phase);
  };

  auto drawCells = [&](QCPAxisRect* rect, int first, int count, bool longForm) {
    for (int i = first; i < first + count && i < L; ++i) {
      const CellText txt = cellText(sched[i], longForm);
      for (int row = 0; row < 2; ++row) {
        auto* r = new QCPItemRect(plot());
        r->setClipAxisRect(rect);
        for (QCPItemPosition* p : {r->topLeft, r->bottomRight}) {
          p->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
          p->setAxisRect(rect);
        }
        const double y0 = row == 0 ? 1.05 : 0.05;  // row 0: mixer on top
        r->topLeft->setCoords(i - 0.45, y0 + 0.9);
        r->bottomRight->setCoords(i + 0.45, y0);
        // A parallel layer (Falcon-H1: attention ∥ Mamba-2) in the mix of both colours.
        const bool both = sched[i].has_attention() && sched[i].has_ssm();
        const QColor mixer = both ? QColor((t.attention.red() + t.mamba.red()) / 2, (t.attention.green() + t.mamba.green()) / 2,
                                           (t.attention.blue() + t.mamba.blue()) / 2)
                             : sched[i].has_attention() ? t.attention
                                                        : t.mamba;
        const QColor fill = row == 0 ? mixer : (sched[i].is_moe() ? t.moe : t.dense);
        r->setBrush(QBrush(fill));
        r->setPen(i == sel ? QPen(t.foreground, 3) : QPen(t.background, 1));
        if (longForm || L <= 48) {
          // The longest text that fits the cell (issue 17 finding 5: "MLP 128" ran over "MoE experts"):
          // both lines, the first line, the letter, or none (the tooltip names the layer in full).
          const QString& full = row == 0 ? txt.mixer : txt.ffn;
          const QString text = fitCellText({full, full.section('\n', 0, 0), row == 0 ? shortTxt(i).mixer : shortTxt(i).ffn},
                                           rect, i, 0.9);
          if (!text.isEmpty()) {
            QCPItemText* lab = addLabel(rect, i, y0 + 0.45, text, Qt::AlignCenter);
            lab->setColor(row == 1 && !sched[i].is_moe() && !t.dark ? QColor(30, 30, 30) : QColor(250, 250, 250));
          }
        }
      }
    }
  };

  // The whole ribbon.
  QCPAxis* x = ribbon->axis(QCPAxis::atBottom);
  QCPAxis* y = ribbon->axis(QCPAxis::atLeft);
  setAxisKind(x, AxisKind::Layer);
  x->setLabel(tr("layer"));
  QSharedPointer<QCPAxisTickerText> yt(new QCPAxisTickerText);
  yt->addTick(1.5, tr("mixer"));
  yt->addTick(0.5, tr("FFN"));
  y->setTicker(yt);
  y->grid()->setVisible(false);
  x->grid()->setVisible(false);
  QSharedPointer<QCPAxisTickerFixed> xt(new QCPAxisTickerFixed);
  xt->setTickStep(L > 40 ? 4 : 1);
  x->setTicker(xt);
  setHomeRange(x, -0.6, L - 0.4);
  y->setRange(0, 2);
  layOut();
  drawCells(ribbon, 0, L, false);
  for (int b = period; b < L; b += period) addVLine(ribbon, b - 0.5, QPen(t.foreground, 1, Qt::DashLine));
  const int moeCount = static_cast<int>(sched.num_moe());
  QCPItemText* legend = addLabel(ribbon, L - 0.4, 2.0,
                                 mixerLegend(sched) + tr("E MoE (%1)  D dense MLP (%2)").arg(moeCount).arg(sched.num_dense()) +
                                     (L - moeCount - sched.num_dense() > 0
                                          ? tr("  - no FFN (%1)").arg(L - moeCount - sched.num_dense())
                                          : QString()),
                                 Qt::AlignRight | Qt::AlignBottom);
  legend->setClipToAxisRect(false);

  // The block that holds the selected layer (or the first), expanded.
  const int shown = std::min(period, 16);
  const int first = sel >= 0 && sel < L ? (sel / period) * period : 0;
  QCPAxis* bx = block->axis(QCPAxis::atBottom);
  QCPAxis* by = block->axis(QCPAxis::atLeft);
  setAxisKind(bx, AxisKind::Layer);
  bx->setLabel(repeat >= L ? tr("layers %1–%2 (all %3 layers)").arg(first).arg(std::min(L, first + shown) - 1).arg(L)
                           : tr("layers %1–%2 (one block of %3)").arg(first).arg(std::min(L, first + shown) - 1).arg(period));
  QSharedPointer<QCPAxisTickerFixed> bt(new QCPAxisTickerFixed);
  bt->setTickStep(1);
  bx->setTicker(bt);
  by->setTicker(yt);
  by->grid()->setVisible(false);
  bx->grid()->setVisible(false);
  bx->setRange(first - 0.6, first + shown - 0.4);
  by->setRange(0, 2);
  layOut();
  drawCells(block, first, shown, true);
  body()->setRowStretchFactors({1.0, 1.6});
}

void LayerRibbonView::resizeEvent(QResizeEvent* ev) {
  InstrumentView::resizeEvent(ev);
  if (refitPending_ || !hasData()) return;
  refitPending_ = true;
  QTimer::singleShot(0, this, [this] {
    refitPending_ = false;
    setState(state());
  });
}

QString LayerRibbonView::tooltipAt(const QPoint& pos) const {
  if (!hasData()) return {};
  QCPAxisRect* rect = plot()->axisRectAt(pos);
  if (!rect) return {};
  const hl::LayerSchedule sched = hl::LayerSchedule::from_config(state().rec->config);
  const int layer = static_cast<int>(std::lround(rect->axis(QCPAxis::atBottom)->pixelToCoord(pos.x())));
  if (layer < 0 || layer >= sched.size()) return {};
  const CellText txt = cellText(sched[layer], true);
  QString s = tr("layer %1\nmixer: %2\nfeed-forward: %3")
                  .arg(layer)
                  .arg(QString(txt.mixer).replace('\n', ", "), QString(txt.ffn).replace('\n', ", "));
  if (hasRecords(state())) {
    const hl::TokenTrace& r = state().a->records[stepA()];
    if (static_cast<size_t>(layer + 1) < r.rank1_distance.size())
      s += tr("\nat step %1: rank-1 distance after = %2, max |x| after = %3")
               .arg(stepA())
               .arg(num(r.rank1_distance[layer + 1]), num(r.resid_max_abs[layer + 1]));
  }
  return s;
}

QString LayerRibbonView::csv() const {
  CsvBuilder b({"layer", "mixer", "ffn", "block"});
  if (!hasData()) return b.text();
  const hl::JambaConfig& c = state().rec->config;
  const int64_t period = c.family != hl::Family::Jamba ? std::max<int64_t>(1, c.num_hidden_layers)
                                                       : std::max<int64_t>(1, c.attn_layer_period);
  const hl::LayerSchedule sched = hl::LayerSchedule::from_config(c);
  for (int i = 0; i < sched.size(); ++i)
    b.addRow({QString::number(i), hl::mixer_name(sched[i].mixer), hl::ffn_name(sched[i].ffn), QString::number(i / period)});
  return b.text();
}

}  // namespace hl::views
