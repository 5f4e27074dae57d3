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

}  // namespace hl::views
