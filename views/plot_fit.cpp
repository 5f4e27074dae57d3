// Eliding titles and labels that do not fit, and legend headroom (see plot_fit.h).
#include "views/plot_fit.h"

#include <algorithm>
#include <cmath>

namespace hl::views {

namespace {
constexpr int kPadPx = 6;

// The label's full text: the stored one while the axis still shows what we set, else a new label.
QString fullLabel(QObject* holder, const QString& shown) {
  if (holder->property("hlShownLabel").toString() == shown && holder->property("hlFullLabel").isValid())
    return holder->property("hlFullLabel").toString();
  return shown;
}

void fitLabel(QCPAxis* axis, int room) {
  const QString shown = axis->label();
  if (shown.isEmpty() || room <= 0) return;
  const QString full = fullLabel(axis, shown);
  const QFontMetrics fm(axis->labelFont());
  QStringList lines = full.split('\n');
  for (QString& l : lines) l = fm.elidedText(l, Qt::ElideRight, room);
  const QString fitted = lines.join('\n');
  axis->setProperty("hlFullLabel", full);
  axis->setProperty("hlShownLabel", fitted);
  if (fitted != shown) axis->setLabel(fitted);
}
}  // namespace

void fitTitle(QCPTextElement* title, const QString& fullText, int width) {
  if (!title) return;
  const QFontMetrics fm(title->font());
  QStringList lines = fullText.split('\n');
  for (QString& l : lines) l = fm.elidedText(l, Qt::ElideRight, std::max(20, width - kPadPx));
  title->setText(lines.join('\n'));
}

void fitAxisLabels(QCustomPlot* plot) {
  for (QCPAxisRect* r : plot->axisRects()) {
    if (!r->visible()) continue;
    for (QCPAxis* a : r->axes())
      if (a->visible()) fitLabel(a, a->orientation() == Qt::Horizontal ? r->outerRect().width() : r->outerRect().height());
  }
  for (QCPLayoutElement* e : plot->plotLayout()->elements(true))
    if (auto* cs = qobject_cast<QCPColorScale*>(e))
      if (cs->visible()) fitLabel(cs->axis(), cs->type() == QCPAxis::atRight || cs->type() == QCPAxis::atLeft
                                                  ? cs->outerRect().height()
                                                  : cs->outerRect().width());
}

void keepLegendsOffData(QCustomPlot* plot, const QSet<QCPAxis*>& skip) {
  for (QCPAxisRect* r : plot->axisRects()) {
    if (!r->visible() || r->height() < 40 || r->width() < 40) continue;
    QCPLayoutInset* inset = r->insetLayout();
    for (int i = 0; i < inset->elementCount(); ++i) {
      auto* lg = qobject_cast<QCPLegend*>(inset->elementAt(i));
      if (!lg || !lg->visible() || lg->itemCount() == 0) continue;
      Qt::Alignment al = inset->insetAlignment(i);
      if (al & Qt::AlignVCenter) {  // a legend in the middle always covers something: to the top
        al = (al & ~Qt::AlignVCenter) | Qt::AlignTop;
        inset->setInsetAlignment(i, al);
      }
      const bool top = !(al & Qt::AlignBottom);
      const QSize box = lg->minimumOuterSizeHint();
      const double f = static_cast<double>(box.height() + kPadPx) / r->height();
      if (f >= 0.6) continue;  // the panel is too small for any headroom to help
      // The horizontal pixel span the legend takes.
      const int x0 = (al & Qt::AlignLeft) ? r->left() : (al & Qt::AlignHCenter) ? r->center().x() - box.width() / 2
                                                                                 : r->right() - box.width() - kPadPx;
      const int x1 = x0 + box.width() + kPadPx;
      QCPAxis* value = r->axis(QCPAxis::atLeft);
      if (skip.contains(value) || value->rangeReversed()) continue;
      const bool logY = value->scaleType() == QCPAxis::stLogarithmic;
      auto tr = [logY](double v) { return logY ? std::log10(v) : v; };
      bool any = false;
      double extreme = top ? -INFINITY : INFINITY;
      auto consider = [&](QCPAxis* keyAxis, double key, double v) {
        if (!std::isfinite(v) || (logY && !(v > 0))) return;
        const double px = keyAxis->coordToPixel(key);
        if (px < x0 || px > x1) return;
        extreme = top ? std::max(extreme, tr(v)) : std::min(extreme, tr(v));
        any = true;
      };
      for (QCPAbstractPlottable* p : r->plottables()) {
        if (!p->visible() || p->valueAxis() != value) continue;
        if (auto* g = qobject_cast<QCPGraph*>(p)) {
          for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) consider(g->keyAxis(), it->key, it->value);
        } else if (auto* b = qobject_cast<QCPBars*>(p)) {
          for (auto it = b->data()->constBegin(); it != b->data()->constEnd(); ++it) consider(b->keyAxis(), it->key, it->value);
        }
      }
      if (!any) continue;
      const QCPRange cur = value->range();
      const double lo = tr(cur.lower), hi = tr(cur.upper);
      if (!std::isfinite(lo) || !std::isfinite(hi) || hi <= lo) continue;
      if (top) {
        // (hi' − extreme) / (hi' − lo) ≥ f: the legend's rows hold no point.
        const double need = (extreme - f * lo) / (1 - f);
        if (need > hi) value->setRangeUpper(logY ? std::pow(10.0, need) : need);
      } else {
        const double need = (extreme - f * hi) / (1 - f);
        if (need < lo) value->setRangeLower(logY ? std::pow(10.0, need) : need);
      }
    }
  }
}

}  // namespace hl::views
