// TokenAxisTicker (see token_axis_ticker.h): token text at cell centres when zoomed in, whole
// numbers otherwise; the horizontal axis turns its labels upright while they are token texts.
#include "views/token_axis_ticker.h"

#include <algorithm>
#include <cmath>

namespace hl::views {

TokenAxisTicker::TokenAxisTicker(QCPAxis* axis, std::function<QString(int)> label, int cells)
    : axis_(axis), label_(std::move(label)), cells_(cells) {
  setTickStep(1.0);
  setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
}

bool TokenAxisTicker::labelled(const QCPRange& range, int pixels) {
  return range.size() > 0 && pixels > 0 && range.size() * kMinPixelsPerLabel <= pixels;
}

void TokenAxisTicker::generate(const QCPRange& range, const QLocale& locale, QChar formatChar, int precision,
                               QVector<double>& ticks, QVector<double>* subTicks, QVector<QString>* tickLabels) {
  int pixels = 0;
  if (axis_ && axis_->axisRect())
    pixels = axis_->orientation() == Qt::Horizontal ? axis_->axisRect()->width() : axis_->axisRect()->height();
  lastLabelled_ = labelled(range, pixels);
  if (!lastLabelled_) {
    QCPAxisTickerFixed::generate(range, locale, formatChar, precision, ticks, subTicks, tickLabels);
    return;
  }
  ticks.clear();
  if (subTicks) subTicks->clear();
  if (tickLabels) tickLabels->clear();
  const int c0 = std::max(0, static_cast<int>(std::floor(range.lower)));
  const int c1 = std::min(cells_, static_cast<int>(std::ceil(range.upper)));
  for (int c = c0; c < c1; ++c) {
    const double centre = c + 0.5;
    if (centre < range.lower || centre > range.upper) continue;
    ticks << centre;
    if (tickLabels) {
      QString s = label_ ? label_(c) : QString::number(c);
      s.replace(QLatin1Char('\n'), QStringLiteral("⏎"));
      if (s.size() > kMaxLabelChars) s = s.left(kMaxLabelChars - 1) + QStringLiteral("…");
      *tickLabels << s;
    }
  }
}

void setTokenAxisTicker(QCPAxis* axis, std::function<QString(int)> label, int cells) {
  axis->setTicker(QSharedPointer<TokenAxisTicker>(new TokenAxisTicker(axis, std::move(label), cells)));
  axis->setProperty("hlTickerRetries", 0);
  // Upright labels on a horizontal axis while token texts show: from the range and the width.
  auto update = [axis] {
    if (axis->orientation() != Qt::Horizontal) return;
    QCPAxisRect* r = axis->axisRect();
    const bool on = r && TokenAxisTicker::labelled(axis->range(), r->width());
    const double want = on ? -90 : 0;
    if (axis->tickLabelRotation() != want) axis->setTickLabelRotation(want);
  };
  if (!axis->property("hlTokenTicker").toBool()) {  // once per axis: views call this every rebuild
    axis->setProperty("hlTokenTicker", true);
    QObject::connect(axis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), axis, update);
    // QCustomPlot makes the ticks before it sizes the panels: after a size change, the ticks of
    // this layout were made for the old width. Another pass then follows (at most two per
    // rebuild, so labels at the edge of fitting cannot make it oscillate).
    QCustomPlot* plot = axis->parentPlot();
    QObject::connect(plot, &QCustomPlot::afterLayout, axis, [axis, plot, update] {
      auto* t = dynamic_cast<TokenAxisTicker*>(axis->ticker().data());
      QCPAxisRect* r = axis->axisRect();
      if (!t || !r || !axis->visible()) return;
      const int px = axis->orientation() == Qt::Horizontal ? r->width() : r->height();
      const int retries = axis->property("hlTickerRetries").toInt();
      if (TokenAxisTicker::labelled(axis->range(), px) == t->lastLabelled() || retries >= 2) return;
      axis->setProperty("hlTickerRetries", retries + 1);
      update();
      plot->replot(QCustomPlot::rpQueuedReplot);
    });
  }
  update();
}

}  // namespace hl::views
