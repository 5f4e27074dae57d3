// Keeps every panel of a view readable at any dock size (issue 17 item 4, finding 5). Two rules:
//  - A panel's legend is a strip above the panel, never over its data, wrapped into as many rows
//    as the panel's width needs.
//  - When the dock is too small for every panel to keep a usable plot area (kMinPanelHeight ×
//    kMinPanelWidth pixels), the view folds: it shows one cell of its panel grid at a time, full
//    size, and a tab bar above the plot picks which (the cells' names). It unfolds as soon as the
//    dock has room for all of them again.
// Free of view state and data: it moves layout elements of one QCustomPlot and nothing else.
#pragma once
#include <qcustomplot.h>
#include <QHash>
#include <QPointer>
#include <QString>
#include <QVector>

class QTabBar;

namespace hl::views {

class PanelLayout {
 public:
  // Smallest plot area (inside the axes) a panel may have before the view folds.
  static constexpr int kMinPanelHeight = 36;
  static constexpr int kMinPanelWidth = 24;

  // `body` is the grid whose cells fold; `tabs` (owned by the view) lists them while folded.
  PanelLayout(QCustomPlot* plot, QCPLayoutGrid* body, QTabBar* tabs);

  // The legend strip of `rect` (created once, above the panel in its grid cell).
  QCPLegend* legendFor(QCPAxisRect* rect, const QFont& font);
  QList<QCPLegend*> legends() const;
  // Names the body cell holding `rect` in the tab bar (default: "panel N").
  void setPanelName(QCPAxisRect* rect, const QString& name) { names_[rect] = name; }

  // Every folded cell back in its place (before the view rebuilds its plot).
  void unfold();
  // Lays out for a plot of `size` (`room` with the tab bar's height when it is shown): wraps the
  // legends to their panels' widths and, when `mayFold`, folds if a panel would be too small.
  // Leaves the layout computed; the caller replots.
  void fit(QSize room, bool mayFold);
  bool folded() const { return !taken_.isEmpty(); }
  // The body cell shown while folded (row-major over the body's non-empty cells).
  int shownCell() const { return shown_; }
  void setShownCell(int i) { shown_ = std::max(0, i); }
  // Cells of the body in row-major order with their names (tests, the tab bar).
  QStringList cellNames() const;

 private:
  struct Taken {
    QCPLayoutElement* element;
    int row, col;
    bool wasVisible;
  };
  void layOut(QSize size);
  void wrapLegends(QSize size);
  bool everyPanelFits() const;
  void foldTo(int cell);
  QList<QCPLayoutElement*> cells() const;
  QString signature(QSize room, bool mayFold) const;

  QCustomPlot* plot_;
  QCPLayoutGrid* body_;
  QTabBar* tabs_;
  QHash<QCPAxisRect*, QPointer<QCPLegend>> legends_;
  QHash<QCPAxisRect*, QString> names_;
  QVector<Taken> taken_;
  QVector<QPointer<QCPAbstractItem>> hiddenItems_;
  QList<double> rowStretch_, colStretch_;
  int shown_ = 0;
  QString lastSignature_;
  bool lastFolded_ = false;
};

}  // namespace hl::views
