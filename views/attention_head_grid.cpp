// AttentionHeadGrid (see attention_head_grid.h): a near-square grid of head thumbnails with their
// numbers, the focused head framed in the highlight colour; click to focus. Reference: issue 17
// item 6 ("an all-heads grid of a layer with click-to-focus").
#include "views/attention_head_grid.h"

#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <algorithm>
#include <cmath>

namespace hl::views {

namespace {
constexpr int kCaptionPx = 18, kLabelPx = 14, kGapPx = 6;
}

AttentionHeadGrid::AttentionHeadGrid(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setMinimumSize(120, 90);
  setCursor(Qt::PointingHandCursor);
}

void AttentionHeadGrid::setHeads(const QVector<QImage>& images, int focused, const QString& caption) {
  images_ = images;
  focused_ = focused;
  caption_ = caption;
  update();
}

int AttentionHeadGrid::columns() const {
  const int n = std::max(1, headCount());
  // As many columns as keep cells near square for this widget's aspect ratio.
  const double aspect = std::max(0.2, static_cast<double>(width()) / std::max(1, height() - kCaptionPx));
  return std::clamp(static_cast<int>(std::ceil(std::sqrt(n * aspect))), 1, n);
}

QRect AttentionHeadGrid::cellRect(int h) const {
  const int n = std::max(1, headCount()), cols = columns(), rows = (n + cols - 1) / cols;
  const int cw = std::max(1, (width() - kGapPx) / cols), ch = std::max(1, (height() - kCaptionPx - kGapPx) / rows);
  const int side = std::max(8, std::min(cw, ch) - kGapPx);
  const int c = h % cols, r = h / cols;
  return QRect(kGapPx + c * cw, kCaptionPx + kGapPx + r * ch, side, std::max(4, side - kLabelPx));
}

QSize AttentionHeadGrid::thumbnailSize() const {
  const QRect r = cellRect(0);
  return QSize(std::max(8, r.width()), std::max(8, r.height()));
}

int AttentionHeadGrid::headAt(const QPoint& pos) const {
  for (int h = 0; h < headCount(); ++h)
    if (cellRect(h).adjusted(0, 0, 0, kLabelPx).contains(pos)) return h;
  return -1;
}

void AttentionHeadGrid::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().window());
  p.setPen(palette().windowText().color());
  p.drawText(QRect(kGapPx, 0, width() - 2 * kGapPx, kCaptionPx), Qt::AlignVCenter | Qt::AlignLeft,
             fontMetrics().elidedText(caption_, Qt::ElideRight, width() - 2 * kGapPx));
  for (int h = 0; h < headCount(); ++h) {
    const QRect r = cellRect(h);
    p.fillRect(r, Qt::black);
    p.drawImage(r, images_[h]);
    p.setPen(h == focused_ ? QPen(QColor(230, 120, 0), 3) : QPen(palette().mid().color(), 1));
    p.drawRect(r.adjusted(-1, -1, 0, 0));
    p.setPen(palette().windowText().color());
    p.drawText(QRect(r.left(), r.bottom() + 1, r.width(), kLabelPx), Qt::AlignCenter,
               h == focused_ ? tr("head %1 (shown)").arg(h) : tr("head %1").arg(h));
  }
}

void AttentionHeadGrid::mouseMoveEvent(QMouseEvent* e) {
  const int h = headAt(e->position().toPoint());
  setToolTip(h >= 0 ? tr("Head %1: click to show it alone, with token labels and the current row").arg(h)
                    : QString());
}

void AttentionHeadGrid::mouseReleaseEvent(QMouseEvent* e) {
  const int h = headAt(e->position().toPoint());
  if (e->button() == Qt::LeftButton && h >= 0) emit headClicked(h);
}

}  // namespace hl::views
