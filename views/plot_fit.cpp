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

void fitItemTexts(QCustomPlot* plot) {
  for (int i = 0; i < plot->itemCount(); ++i) {
    auto* t = qobject_cast<QCPItemText*>(plot->item(i));
    if (!t || !t->visible() || !t->clipToAxisRect() || !t->clipAxisRect() || t->rotation() != 0) continue;
    // The text and alignment the view gave (kept while the label shows what was fitted).
    if (t->property("hlShownText").toString() != t->text() || !t->property("hlFullText").isValid()) {
      t->setProperty("hlFullText", t->text());
      t->setProperty("hlAlign", static_cast<int>(t->positionAlignment()));
    }
    const QString full = t->property("hlFullText").toString();
    const Qt::Alignment given = Qt::Alignment(t->property("hlAlign").toInt());
    const QRect panel = t->clipAxisRect()->rect();
    const double x = t->position->pixelPosition().x();
    const QFontMetrics fm(t->font());
    const int pad = t->padding().left() + t->padding().right() + 2;
    int width = 0;
    for (const QString& line : full.split('\n')) width = std::max(width, fm.horizontalAdvance(line));
    const double left = x - panel.left(), right = panel.right() - x;
    auto room = [&](Qt::Alignment h) {
      return h & Qt::AlignLeft ? right : h & Qt::AlignRight ? left : 2 * std::min(left, right);
    };
    const Qt::Alignment h0 = given & Qt::AlignHorizontal_Mask, v = given & Qt::AlignVertical_Mask;
    // As given when it fits; else the side with more room (a label at the panel's right edge turns
    // to the left of its point); elided with "…" when neither side holds it.
    Qt::Alignment h = h0;
    if (room(h0) < width + pad) h = left > right ? Qt::AlignRight : Qt::AlignLeft;
    if (room(h) < width + pad && room(h0) >= room(h)) h = h0;
    QString shown = full;
    const int fit = static_cast<int>(room(h)) - pad;
    if (fit < width) {
      QStringList lines = full.split('\n');
      for (QString& l : lines) l = fm.elidedText(l, Qt::ElideRight, std::max(0, fit));
      shown = lines.join('\n');
    }
    t->setPositionAlignment(h | v);
    t->setText(shown);
    t->setProperty("hlShownText", shown);
  }
}

}  // namespace hl::views
