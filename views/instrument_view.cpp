// InstrumentView (see instrument_view.h): the plot with a title over a grid of panels, themes,
// tooltips, clicks and home ranges under user zoom. Figure export: instrument_view_export.cpp.
#include "views/instrument_view.h"

#include "views/panel_layout.h"
#include "views/plot_fit.h"

#include <algorithm>
#include <cmath>
#include <typeinfo>
#include <vector>

#include <QHelpEvent>
#include <QResizeEvent>
#include <QTabBar>
#include <QToolTip>
#include <QVBoxLayout>


namespace hl::views {

namespace {
constexpr int kClickSlopPx = 4;       // a press and release closer than this is a click, not a drag
constexpr double kPickRadiusPx = 12;  // tooltips consider points this close
constexpr int kPlotMinHeight = 150;
}  // namespace

InstrumentView::InstrumentView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  // The tab bar over the plot appears when the view folds its panels (PanelLayout).
  tabs_ = new QTabBar(this);
  tabs_->setObjectName(QStringLiteral("panelTabs"));
  tabs_->setDocumentMode(true);
  tabs_->setDrawBase(false);
  tabs_->setExpanding(false);
  tabs_->setUsesScrollButtons(true);
  tabs_->setElideMode(Qt::ElideRight);
  tabs_->setFont(QFont(font().family(), 8));
  tabs_->setToolTip(tr("The view is too small to show all its panels: pick one here, or enlarge or maximise "
                       "the view to see them all"));
  tabs_->hide();
  layout->addWidget(tabs_);
  plot_ = new QCustomPlot(this);
  plot_->setNotAntialiasedElements(QCP::aeAll);
  plot_->setAntialiasedElements(QCP::aePlottables | QCP::aeItems);
  plot_->setMinimumSize(200, kPlotMinHeight);
  layout->addWidget(plot_);
  // Title over a grid of panels: the grid may have several columns, the title spans them all.
  QCPAxisRect* first = plot_->axisRect();
  plot_->plotLayout()->take(first);
  plot_->plotLayout()->simplify();
  title_ = new QCPTextElement(plot_, QString(), QFont(font().family(), 10, QFont::Bold));
  plot_->plotLayout()->addElement(0, 0, title_);
  auto* body = new QCPLayoutGrid;
  plot_->plotLayout()->addElement(1, 0, body);
  plot_->plotLayout()->setRowStretchFactor(0, 0.01);
  body->addElement(0, 0, first);
  panels_.push_back(first);
  fold_ = std::make_unique<PanelLayout>(plot_, body, tabs_);
  connect(tabs_, &QTabBar::currentChanged, this, [this](int i) {
    if (i < 0) return;
    fold_->setShownCell(i);
    fitPanels();
    plot_->replot(QCustomPlot::rpImmediateRefresh);
  });
  plot_->setAutoAddPlottableToLegend(false);
  // Fewer ticks on short axes (a panel 60 px high gets 2, not 5 overlapping labels): every
  // layout pass, before the ticks are generated.
  connect(plot_, &QCustomPlot::afterLayout, this, [this] {
    for (QCPAxisRect* r : plot_->axisRects())
      for (QCPAxis* ax : r->axes()) {
        if (!ax->visible() || !ax->ticker()) continue;
        const bool vertical = ax->orientation() == Qt::Vertical;
        const int px = vertical ? r->height() : r->width();
        ax->ticker()->setTickCount(std::clamp(px / (vertical ? 30 : 70), 2, 5));
      }
    // Labels longer than their axis are elided (drawn after this, from the same layout).
    fitAxisLabels(plot_);
  });
  plot_->installEventFilter(this);
  plot_->setMouseTracking(true);
  styleAll();
}

InstrumentView::~InstrumentView() = default;

void InstrumentView::setState(const ViewState& s) {
  state_ = s;
  redraw();
}

void InstrumentView::contextChanged(const ViewState& s, unsigned what, int appendedFrom) {
  Q_UNUSED(appendedFrom);
  if (what & dependsOn())
    setState(s);
  else
    state_ = s;  // the pointers and the step stay current for tooltips, clicks and CSV
}

unsigned InstrumentView::dependsOn() const {
  return (followsStep() ? change::All : change::All & ~(change::Records | change::Step)) & ~change::Hidden;
}

void InstrumentView::redraw() {
  ++redraws_;
  subtitle_.clear();
  fold_->unfold();  // views rebuild on their whole layout
  rebuild();
  if (!hasData()) clearStaleAxes();
  setTitleText(figureTitle());
  // A hidden view's layout is not active: size the plot to the view (offscreen export, tests).
  if (!isVisible() && plot_->viewport().size() != size()) {
    plot_->resize(size());
    plot_->setViewport(QRect(QPoint(0, 0), size()));
  }
  // Small docks: elided title lines, legends wrapped, panels folded (issue 17 finding 5).
  fitTitle(title_, title_->property("hlFull").toString(), plot_->width());
  fitPanels();
  plot_->replot(QCustomPlot::rpImmediateRefresh);
}

bool InstrumentView::hasData() const {
  return hasRecords(state_);
}

void InstrumentView::clearStaleAxes() {
  // Text tick labels and axis titles of a previous model or run ("L2 attn", "key at query 51")
  // must not outlive it (issue 17 finding 2): with no data the axes are blank.
  for (const QPointer<QCPAxisRect>& r : panels_) {
    if (!r) continue;
    for (QCPAxis* ax : r->axes()) {
      if (auto t = ax->ticker().dynamicCast<QCPAxisTickerText>()) t->clear();
      ax->setLabel(QString());
    }
  }
}

QString InstrumentView::figureTitle() const {
  QString t = title();
  if (!hasData()) {
    // Before the first step the model's schedule is known but no token is: say that, not a reason
    // about the model (issue 17 finding 2). Views that draw without records (ribbon, DoRA) have data.
    const bool noTokens = state_.rec && (!state_.a || state_.a->records.empty());
    t += QStringLiteral(" — ") + (noTokens && followsStep() ? tr("no tokens yet: Step (F10) to record one")
                                                            : (noDataReason_.isEmpty() ? tr("no data") : noDataReason_));
    return t;
  }
  if (followsStep() && state_.a && !state_.a->records.empty()) {
    const int s = stepA();
    t += QStringLiteral(" — step %1 (“%2”)").arg(s).arg(state_.rec ? tokenLabel(*state_.rec, s) : QString());
  }
  QString second = subtitle_;
  if (followsStep() && state_.b)
    second += (second.isEmpty() ? QString() : QStringLiteral("; ")) +
              (diffMode() ? QStringLiteral("B − A") : QStringLiteral("A solid, B dashed"));
  if (!second.isEmpty()) t += QLatin1Char('\n') + second;
  return t;
}

void InstrumentView::setTitleText(const QString& t) {
  title_->setProperty("hlFull", t);
  fitTitle(title_, t, plot_->width());
}

void InstrumentView::applyTheme(bool dark) {
  dark_ = dark;
  styleAll();
  redraw();
}

void InstrumentView::styleAll() {
  const Theme& t = th();
  plot_->setBackground(QBrush(t.background));
  title_->setTextColor(t.foreground);
  auto styleAxis = [&](QCPAxis* a) {
    a->setBasePen(QPen(t.foreground, 1));
    a->setTickPen(QPen(t.foreground, 1));
    a->setSubTickPen(QPen(t.foreground, 1));
    a->setTickLabelColor(t.foreground);
    a->setLabelColor(t.foreground);
    a->grid()->setPen(QPen(t.grid, 1, Qt::DotLine));
    a->grid()->setSubGridPen(QPen(t.subGrid, 1, Qt::DotLine));
    a->grid()->setZeroLinePen(QPen(t.grid, 1));
  };
  for (QCPAxisRect* r : plot_->axisRects()) {
    r->setBackground(QBrush(t.axisRectBg));
    for (QCPAxis* a : r->axes()) styleAxis(a);
  }
  for (QCPLegend* lg : fold_ ? fold_->legends() : QList<QCPLegend*>()) lg->setTextColor(t.foreground);
  for (QCPLayoutElement* e : plot_->plotLayout()->elements(true)) {
    if (auto* cs = qobject_cast<QCPColorScale*>(e)) styleAxis(cs->axis());
    if (auto* te = qobject_cast<QCPTextElement*>(e)) te->setTextColor(t.foreground);
  }
}

QCPLayoutGrid* InstrumentView::body() const {
  return qobject_cast<QCPLayoutGrid*>(plot_->plotLayout()->element(1, 0));
}

QCPAxisRect* InstrumentView::addPanel(int row, int col, QCPLayoutGrid* grid) {
  auto* r = new QCPAxisRect(plot_);
  (grid ? grid : body())->addElement(row, col, r);
  panels_.push_back(r);
  r->setRangeDrag(Qt::Orientations());
  r->setRangeZoom(Qt::Orientations());
  return r;
}

void InstrumentView::addPanelGrid(int rows, int cols) {
  for (int r = 0; r < rows; ++r)
    for (int c = r == 0 ? 1 : 0; c < cols; ++c) addPanel(r, c);
}

QCPLayoutGrid* InstrumentView::nestFirstPanel() {
  QCPAxisRect* first = panel(0);
  body()->take(first);
  body()->simplify();
  auto* top = new QCPLayoutGrid;
  body()->addElement(0, 0, top);
  top->addElement(0, 0, first);
  return top;
}

QCPLegend* InstrumentView::panelLegend(QCPAxisRect* rect) {
  QCPLegend* lg = fold_->legendFor(rect, QFont(font().family(), 8));
  lg->setTextColor(th().foreground);
  return lg;
}

void InstrumentView::setPanelName(QCPAxisRect* rect, const QString& name) {
  fold_->setPanelName(rect, name);
}

void InstrumentView::fitPanels() {
  fitPanelsTo(panelRoom(plot_->size()), true);
}

QSize InstrumentView::panelRoom(QSize plotSize) const {
  return plotSize + QSize(0, tabs_->isHidden() ? 0 : tabs_->height() + layout()->spacing());
}

void InstrumentView::fitPanelsTo(QSize room, bool mayFold) const {
  fold_->fit(room, mayFold);
  fitItemTexts(plot_);
  const bool tabs = fold_->folded() && !plot_->isHidden();
  tabs_->setVisible(tabs);
  // The view's minimum height stays that of the plot alone: the tab bar takes it from the plot.
  const int taken = tabs_->sizeHint().height() + layout()->spacing();
  plot_->setMinimumHeight(tabs ? std::max(60, kPlotMinHeight - taken) : kPlotMinHeight);
}

QStringList InstrumentView::panelNames() const {
  return fold_->cellNames();
}

bool InstrumentView::panelsFolded() const {
  return fold_->folded();
}

void InstrumentView::clearPlot() {
  // Panel legends first: QCustomPlot only unlinks deleted plottables from its main legend.
  for (QCPLegend* lg : fold_->legends()) lg->clearItems();
  plot_->clearPlottables();
  plot_->clearItems();
}

QCPGraph* InstrumentView::addGraph(QCPAxisRect* rect, const QString& name, const QColor& c, bool runB, double width) {
  QCPGraph* g = plot_->addGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
  g->setName(name);
  g->setPen(runPen(c, runB, width));
  return g;
}

QCPItemStraightLine* InstrumentView::addVLine(QCPAxisRect* rect, double x, const QPen& pen) {
  auto* l = new QCPItemStraightLine(plot_);
  l->setClipAxisRect(rect);
  for (QCPItemPosition* p : {l->point1, l->point2}) {
    p->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    p->setAxisRect(rect);
  }
  l->point1->setCoords(x, 0);
  l->point2->setCoords(x, 1);
  l->setPen(pen);
  return l;
}

QCPItemStraightLine* InstrumentView::addHLine(QCPAxisRect* rect, double y, const QPen& pen) {
  QCPItemStraightLine* l = addVLine(rect, 0, pen);
  l->point1->setCoords(0, y);
  l->point2->setCoords(1, y);
  return l;
}

QCPItemRect* InstrumentView::addHBand(QCPAxisRect* rect, double lo, double hi, const QColor& fill) {
  auto* r = new QCPItemRect(plot_);
  r->setClipAxisRect(rect);
  for (QCPItemPosition* p : {r->topLeft, r->bottomRight}) {
    p->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    p->setAxisRect(rect);
    p->setTypeX(QCPItemPosition::ptAxisRectRatio);
    p->setTypeY(QCPItemPosition::ptPlotCoords);
  }
  r->topLeft->setCoords(0, hi);
  r->bottomRight->setCoords(1, lo);
  r->setBrush(QBrush(fill));
  r->setPen(Qt::NoPen);
  r->setLayer(QStringLiteral("main"));  // panels draw their background on "main": add bands before curves
  r->setSelectable(false);
  return r;
}

QCPItemText* InstrumentView::addLabel(QCPAxisRect* rect, double x, double y, const QString& text, Qt::Alignment align) {
  auto* t = new QCPItemText(plot_);
  t->setClipAxisRect(rect);
  t->position->setAxes(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
  t->position->setAxisRect(rect);
  t->position->setCoords(x, y);
  t->setPositionAlignment(align);
  t->setText(text);
  t->setColor(th().foreground);
  t->setFont(QFont(font().family(), 8));
  return t;
}

void InstrumentView::setHomeRange(QCPAxis* axis, double lo, double hi) {
  if (!(hi > lo)) hi = lo + 1;
  axis->setProperty("hlHomeLo", lo);
  axis->setProperty("hlHomeHi", hi);
  if (userRange_.value(axis, false)) return;
  axis->setRange(lo, hi);
}

void InstrumentView::robustDiffRange(QCPAxisRect* rect) {
  QCPAxis* y = rect->axis(QCPAxis::atLeft);
  std::vector<double> mag;  // |B − A| of every finite point on the panel
  for (int i = 0; i < plot_->graphCount(); ++i) {
    QCPGraph* g = plot_->graph(i);
    if (g->valueAxis() != y) continue;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
      if (std::isfinite(it->value)) mag.push_back(std::fabs(it->value));
  }
  if (mag.empty()) return;
  const double mx = *std::max_element(mag.begin(), mag.end());
  auto q95 = mag.begin() + static_cast<std::ptrdiff_t>(0.95 * static_cast<double>(mag.size() - 1));
  std::nth_element(mag.begin(), q95, mag.end());
  const double q = *q95;
  double half = 1.1 * mx;
  if (q > 0 && mx > 3 * q) {
    half = 1.5 * q;
    const auto off = std::count_if(mag.begin(), mag.end(), [&](double v) { return v > half; });
    y->setLabel(y->label() + (off == 1 ? tr(" (robust scale: 1 point off it)")
                                       : tr(" (robust scale: %1 points off it)").arg(off)));
  }
  if (!(half > 0)) half = 1;
  setHomeRange(y, -half, half);
}

// ---- lookup ----

namespace {
template <typename T>
T* findPlottable(QCustomPlot* plot, const QString& name) {
  for (int i = 0; i < plot->plottableCount(); ++i)
    if (auto* p = qobject_cast<T*>(plot->plottable(i)); p && p->name() == name) return p;
  return nullptr;
}
}  // namespace

QCPGraph* InstrumentView::graph(const QString& name) const {
  return findPlottable<QCPGraph>(plot_, name);
}
QCPBars* InstrumentView::bars(const QString& name) const {
  return findPlottable<QCPBars>(plot_, name);
}
HeatmapPlottable* InstrumentView::heatmap(const QString& name) const {
  return findPlottable<HeatmapPlottable>(plot_, name);
}

// ---- tooltips and clicks ----

QString InstrumentView::describePoint(QCPAbstractPlottable* p, int index) const {
  if (auto* g = qobject_cast<QCPGraph*>(p)) {
    const auto it = g->data()->at(index);
    return QStringLiteral("%1\n%2 = %3\n%4 = %5")
        .arg(g->name(), g->keyAxis()->label().isEmpty() ? "x" : g->keyAxis()->label(), num(it->key),
             g->valueAxis()->label().isEmpty() ? "y" : g->valueAxis()->label(), num(it->value));
  }
  if (auto* c = qobject_cast<QCPCurve*>(p)) {
    const auto it = c->data()->at(index);
    return QStringLiteral("%1\n%2 = %3\n%4 = %5")
        .arg(c->name(), c->keyAxis()->label().isEmpty() ? "x" : c->keyAxis()->label(), num(it->key),
             c->valueAxis()->label().isEmpty() ? "y" : c->valueAxis()->label(), num(it->value));
  }
  if (auto* b = qobject_cast<QCPBars*>(p)) {
    const auto it = b->data()->at(index);
    return QStringLiteral("%1\n%2 = %3\nvalue = %4")
        .arg(b->name(), b->keyAxis()->label().isEmpty() ? "x" : b->keyAxis()->label(), num(it->key), num(it->value));
  }
  return p->name();
}

QString InstrumentView::describeCell(HeatmapPlottable* h, int row, int col) const {
  return QStringLiteral("%1\nrow %2, column %3\nvalue = %4")
      .arg(h->name())
      .arg(row)
      .arg(col)
      .arg(num(h->heatmap()->value(row, col)));
}

QString InstrumentView::tooltipAt(const QPoint& pos) const {
  double best = kPickRadiusPx;
  QString text;
  for (int i = 0; i < plot_->plottableCount(); ++i) {
    QCPAbstractPlottable* p = plot_->plottable(i);
    if (!p->visible() || !p->keyAxis() || !p->keyAxis()->axisRect()->rect().contains(pos)) continue;
    QVariant details;
    const double d = p->selectTest(pos, false, &details);
    if (d < 0 || d > best) continue;
    if (auto* h = qobject_cast<HeatmapPlottable*>(p)) {
      const QPoint cell = details.toPoint();
      text = describeCell(h, cell.y(), cell.x());
      best = d;
      continue;
    }
    const QCPDataSelection sel = details.value<QCPDataSelection>();
    if (sel.isEmpty()) continue;
    text = describePoint(p, sel.dataRange().begin());
    best = d;
  }
  return text;
}

void InstrumentView::handleClick(QCPAxisRect* rect, double x, double y) {
  for (QCPAxis* a : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
    const double v = a->orientation() == Qt::Horizontal ? x : y;
    const AxisKind k = kinds_.value(a, AxisKind::None);
    const int i = static_cast<int>(std::lround(v));
    if (k == AxisKind::Token && state_.a && i >= 0 && i < static_cast<int>(state_.a->records.size())) {
      emit stepClicked(i);
      return;
    }
    if (k == AxisKind::Layer && state_.rec && i >= 0 && i < state_.rec->config.num_hidden_layers) {
      emit layerClicked(i);
      return;
    }
  }
}

void InstrumentView::setAxisKind(QCPAxis* axis, AxisKind k) {
  kinds_[axis] = k;
  if (k == AxisKind::None || !axis->ticker() || typeid(*axis->ticker()) != typeid(QCPAxisTicker)) return;
  QSharedPointer<QCPAxisTickerFixed> integers(new QCPAxisTickerFixed);
  integers->setTickStep(1.0);
  integers->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);  // 1, 2, 3, … 10, 20: whole numbers
  axis->setTicker(integers);
}

bool InstrumentView::clickAt(const QPoint& pos) {
  QCPAxisRect* rect = plot_->axisRectAt(pos);
  if (!rect) return false;
  // Did a signal fire? Count emissions through a local connection.
  int fired = 0;
  auto c1 = connect(this, &InstrumentView::layerClicked, this, [&fired] { ++fired; });
  auto c2 = connect(this, &InstrumentView::stepClicked, this, [&fired] { ++fired; });
  auto c3 = connect(this, &InstrumentView::headClicked, this, [&fired] { ++fired; });
  handleClick(rect, rect->axis(QCPAxis::atBottom)->pixelToCoord(pos.x()),
              rect->axis(QCPAxis::atLeft)->pixelToCoord(pos.y()));
  disconnect(c1);
  disconnect(c2);
  disconnect(c3);
  return fired > 0;
}

bool InstrumentView::eventFilter(QObject* obj, QEvent* ev) {
  if (obj != plot_) return QWidget::eventFilter(obj, ev);
  switch (ev->type()) {
    case QEvent::Resize:
      // The title's lines are elided to the new width before QCustomPlot lays out again.
      fitTitle(title_, title_->property("hlFull").toString(), static_cast<QResizeEvent*>(ev)->size().width());
      // Legends rewrapped and panels folded or unfolded for the new size, before QCustomPlot's
      // own resize handling replots.
      fitPanelsTo(panelRoom(static_cast<QResizeEvent*>(ev)->size()), true);
      break;
    case QEvent::ToolTip: {
      auto* he = static_cast<QHelpEvent*>(ev);
      const QString t = tooltipAt(he->pos());
      if (t.isEmpty())
        QToolTip::hideText();
      else
        QToolTip::showText(he->globalPos(), t, plot_);
      return true;
    }
    case QEvent::MouseButtonPress:
      pressPos_ = static_cast<QMouseEvent*>(ev)->pos();
      break;
    case QEvent::MouseButtonRelease: {
      auto* me = static_cast<QMouseEvent*>(ev);
      if (me->button() == Qt::LeftButton && (me->pos() - pressPos_).manhattanLength() < kClickSlopPx)
        clickAt(me->pos());
      break;
    }
    case QEvent::Wheel:
    case QEvent::MouseMove: {
      const bool wheel = ev->type() == QEvent::Wheel;
      if (!wheel && !(static_cast<QMouseEvent*>(ev)->buttons() & Qt::LeftButton)) break;
      const QPointF p = wheel ? static_cast<QWheelEvent*>(ev)->position() : static_cast<QMouseEvent*>(ev)->position();
      if (QCPAxisRect* r = plot_->axisRectAt(p)) {
        const Qt::Orientations o = wheel ? r->rangeZoom() : r->rangeDrag();
        if (o & Qt::Horizontal) userRange_[r->axis(QCPAxis::atBottom)] = true;
        if (o & Qt::Vertical) userRange_[r->axis(QCPAxis::atLeft)] = true;
      }
      break;
    }
    case QEvent::MouseButtonDblClick:
      userRange_.clear();
      fold_->unfold();
      rebuild();
      fitPanels();
      plot_->replot();
      return true;
    default:
      break;
  }
  return QWidget::eventFilter(obj, ev);
}

void styleRunBars(QCPBars* bars, const QColor& c, bool runB, double width) {
  QColor fill = c;
  fill.setAlpha(runB ? 110 : 200);
  bars->setBrush(fill);
  bars->setPen(runPen(c, runB, 1));
  bars->setWidth(width);
}

}  // namespace hl::views
