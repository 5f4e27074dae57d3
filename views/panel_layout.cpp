// Legend strips and folding of a view's panel grid (see panel_layout.h).
#include "views/panel_layout.h"

#include <QSignalBlocker>
#include <QTabBar>
#include <algorithm>

namespace hl::views {

namespace {
constexpr double kThin = 1e-6;  // stretch of a row or column left empty by folding

// Row and column of `e` in `grid`, or false when it is not a direct child.
bool cellOf(QCPLayoutGrid* grid, const QCPLayoutElement* e, int* row, int* col) {
  for (int r = 0; r < grid->rowCount(); ++r)
    for (int c = 0; c < grid->columnCount(); ++c)
      if (grid->hasElement(r, c) && grid->element(r, c) == e) {
        *row = r;
        *col = c;
        return true;
      }
  return false;
}

// `e` and everything under it.
QList<QCPLayoutElement*> subtree(QCPLayoutElement* e) {
  QList<QCPLayoutElement*> all = e->elements(true);
  all.prepend(e);
  all.removeAll(nullptr);
  return all;
}
}  // namespace

PanelLayout::PanelLayout(QCustomPlot* plot, QCPLayoutGrid* body, QTabBar* tabs)
    : plot_(plot), body_(body), tabs_(tabs) {}

QCPLegend* PanelLayout::legendFor(QCPAxisRect* rect, const QFont& font) {
  if (QCPLegend* lg = legends_.value(rect)) return lg;
  // The panel's cell becomes a grid of two rows: the strip (an empty column that takes the spare
  // width, then the legend at its natural width: right-aligned) over the panel.
  auto* grid = qobject_cast<QCPLayoutGrid*>(rect->layout());
  int row = 0, col = 0;
  if (!grid || !cellOf(grid, rect, &row, &col)) return nullptr;
  grid->take(rect);
  auto* wrap = new QCPLayoutGrid;
  grid->addElement(row, col, wrap);
  auto* strip = new QCPLayoutGrid;
  wrap->addElement(0, 0, strip);
  wrap->addElement(1, 0, rect);
  wrap->setRowSpacing(0);
  wrap->setRowStretchFactors({kThin, 1.0});
  auto* lg = new QCPLegend;
  strip->addElement(0, 1, lg);
  strip->setColumnStretchFactors({1.0, kThin});
  lg->setLayer(QStringLiteral("legend"));
  lg->setFont(font);
  lg->setIconSize(18, 8);
  lg->setRowSpacing(0);
  lg->setColumnSpacing(8);
  lg->setMargins(QMargins(2, 1, 2, 1));
  lg->setBrush(Qt::NoBrush);
  lg->setBorderPen(Qt::NoPen);
  lg->setFillOrder(QCPLayoutGrid::foColumnsFirst, false);
  legends_[rect] = lg;
  return lg;
}

QList<QCPLegend*> PanelLayout::legends() const {
  QList<QCPLegend*> out;
  for (const QPointer<QCPLegend>& lg : legends_)
    if (lg) out << lg.data();
  return out;
}

QList<QCPLayoutElement*> PanelLayout::cells() const {
  QList<QCPLayoutElement*> out;
  for (int r = 0; r < body_->rowCount(); ++r)
    for (int c = 0; c < body_->columnCount(); ++c)
      if (body_->hasElement(r, c)) out << body_->element(r, c);
  return out;
}

QStringList PanelLayout::cellNames() const {
  QStringList out;
  const QList<QCPLayoutElement*> cs = cells();
  for (int i = 0; i < cs.size(); ++i) {
    QStringList parts;
    for (QCPLayoutElement* e : subtree(cs[i]))
      if (auto* r = qobject_cast<QCPAxisRect*>(e); r && names_.contains(r)) parts << names_.value(r);
    out << (parts.isEmpty() ? QStringLiteral("panel %1").arg(i + 1) : parts.join(QStringLiteral(" · ")));
  }
  return out;
}

void PanelLayout::layOut(QSize size) {
  plot_->setViewport(QRect(QPoint(0, 0), size));  // the plot layout's outer rect
  QCPLayoutGrid* top = plot_->plotLayout();
  top->update(QCPLayoutElement::upPreparation);
  top->update(QCPLayoutElement::upMargins);
  top->update(QCPLayoutElement::upLayout);
}

void PanelLayout::wrapLegends(QSize size) {
  // The room a legend may take is its panel's cell as the other elements size it: measured with
  // every legend in one column (as narrow as a legend gets), then each wrapped to fill it.
  for (QCPLegend* lg : legends())
    if (lg->wrap() != 1 || lg->columnCount() > 1) {
      lg->setWrap(1);
      lg->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
    }
  layOut(size);
  for (QCPLegend* lg : legends()) {
    // itemCount() counts the grid's cells, empty ones of a wrapped last row included.
    std::vector<int> widths;
    for (int i = 0; i < lg->itemCount(); ++i)
      if (QCPAbstractLegendItem* it = lg->item(i)) widths.push_back(it->minimumOuterSizeHint().width());
    const int n = static_cast<int>(widths.size());
    if (n == 0) continue;
    // The strip's width is the panel's cell: as many columns as fit, items filling rows first.
    const int room = lg->layout() ? lg->layout()->outerRect().width() : plot_->width();
    const QMargins m = lg->margins();
    int k = n;
    for (; k > 1; --k) {
      std::vector<int> w(static_cast<size_t>(k), 0);
      for (int i = 0; i < n; ++i)
        w[static_cast<size_t>(i % k)] = std::max(w[static_cast<size_t>(i % k)], widths[static_cast<size_t>(i)]);
      int total = m.left() + m.right() + (k - 1) * lg->columnSpacing();
      for (int x : w) total += x;
      if (total <= room) break;
    }
    if (lg->wrap() != k || lg->columnCount() != k) {
      lg->setWrap(k);
      lg->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
    }
  }
}

bool PanelLayout::everyPanelFits() const {
  for (QCPAxisRect* r : plot_->axisRects())
    if (r->realVisibility() && (r->rect().height() < kMinPanelHeight || r->rect().width() < kMinPanelWidth))
      return false;
  // A legend squeezed below its rows' height: the layout is over-full.
  for (QCPLegend* lg : legends())
    if (lg->realVisibility() && lg->itemCount() > 0 &&
        lg->outerRect().height() + 1 < lg->minimumOuterSizeHint().height())
      return false;
  return true;
}

void PanelLayout::foldTo(int cell) {
  const QList<QCPLayoutElement*> cs = cells();
  if (cs.size() < 2) return;
  shown_ = std::clamp(cell, 0, static_cast<int>(cs.size()) - 1);
  rowStretch_ = body_->rowStretchFactors();
  colStretch_ = body_->columnStretchFactors();
  QSet<QCPAxisRect*> hiddenRects;
  for (int i = 0; i < cs.size(); ++i) {
    if (i == shown_) continue;
    Taken t{cs[i], 0, 0, cs[i]->visible()};
    cellOf(body_, cs[i], &t.row, &t.col);
    for (QCPLayoutElement* e : subtree(cs[i]))
      if (auto* r = qobject_cast<QCPAxisRect*>(e)) hiddenRects.insert(r);
    body_->take(cs[i]);
    cs[i]->setVisible(false);  // its plottables and axes are drawn through it: hidden with it
    taken_ << t;
  }
  // Rows and columns left empty take no room.
  for (int r = 0; r < body_->rowCount(); ++r) {
    bool empty = true;
    for (int c = 0; c < body_->columnCount(); ++c) empty = empty && !body_->hasElement(r, c);
    if (empty) body_->setRowStretchFactor(r, kThin);
  }
  for (int c = 0; c < body_->columnCount(); ++c) {
    bool empty = true;
    for (int r = 0; r < body_->rowCount(); ++r) empty = empty && !body_->hasElement(r, c);
    if (empty) body_->setColumnStretchFactor(c, kThin);
  }
  // Items (marker lines, labels) are not children of their panel: hidden one by one.
  for (int i = 0; i < plot_->itemCount(); ++i) {
    QCPAbstractItem* it = plot_->item(i);
    if (it->visible() && hiddenRects.contains(it->clipAxisRect())) {
      it->setVisible(false);
      hiddenItems_ << it;
    }
  }
}

void PanelLayout::unfold() {
  for (auto it = taken_.crbegin(); it != taken_.crend(); ++it) {
    if (body_->hasElement(it->row, it->col)) continue;  // cannot happen: the cell stayed empty
    body_->addElement(it->row, it->col, it->element);
    it->element->setVisible(it->wasVisible);
  }
  if (!taken_.isEmpty()) {
    if (rowStretch_.size() == body_->rowCount()) body_->setRowStretchFactors(rowStretch_);
    if (colStretch_.size() == body_->columnCount()) body_->setColumnStretchFactors(colStretch_);
  }
  taken_.clear();
  for (const QPointer<QCPAbstractItem>& it : hiddenItems_)
    if (it) it->setVisible(true);
  hiddenItems_.clear();
}

QString PanelLayout::signature(QSize room, bool mayFold) const {
  // What the legends' wraps and the fold decision depend on, but for the data's own margins
  // (tick labels): the room, the cells, the legends' entries and the title's line count.
  QString sig = QStringLiteral("%1x%2 %3 %4|").arg(room.width()).arg(room.height()).arg(mayFold).arg(shown_);
  sig += cellNames().join(QLatin1Char(',')) + QLatin1Char('|');
  for (QCPLegend* lg : legends()) {
    sig += QString::number(lg->realVisibility()) + QLatin1Char(':');
    for (int i = 0; i < lg->itemCount(); ++i)
      if (auto* it = qobject_cast<QCPPlottableLegendItem*>(lg->item(i)); it && it->plottable())
        sig += it->plottable()->name() + QLatin1Char(';');
    sig += QLatin1Char('|');
  }
  for (QCPLayoutElement* e : plot_->plotLayout()->elements(false))
    if (auto* t = qobject_cast<QCPTextElement*>(e)) sig += QString::number(t->text().count(QLatin1Char('\n')));
  return sig;
}

void PanelLayout::fit(QSize room, bool mayFold) {
  unfold();
  // Redraws at an unchanged size with the same entries (every step while stepping) reuse the
  // last decision: the layout passes below cost about as much as a redraw.
  const QString sig = signature(room, mayFold);
  if (sig == lastSignature_) {
    if (lastFolded_) foldTo(shown_);
    return;
  }
  lastSignature_ = sig;
  const QStringList names = cellNames();
  wrapLegends(room);
  layOut(room);
  const bool fold = mayFold && names.size() > 1 && !everyPanelFits();
  if (fold) {
    const QSize s(room.width(), std::max(1, room.height() - tabs_->sizeHint().height()));
    foldTo(shown_);
    wrapLegends(s);
    layOut(s);
  }
  lastFolded_ = folded();
  const QSignalBlocker block(tabs_);
  while (tabs_->count() > names.size()) tabs_->removeTab(tabs_->count() - 1);
  for (int i = 0; i < names.size(); ++i) {
    if (i < tabs_->count())
      tabs_->setTabText(i, names[i]);
    else
      tabs_->addTab(names[i]);
  }
  if (fold) tabs_->setCurrentIndex(shown_);
  tabs_->setVisible(fold);
}

}  // namespace hl::views
