// InstrumentView: the base of every instrument view (issue 5 items 3, 5, 6) — one QCustomPlot
// (several panels as axis rects, so a figure exports whole), setState → plot data, exact-value
// tooltips, click → layerClicked / stepClicked, light and dark themes, PNG/SVG/PDF export at a
// chosen size and DPI, CSV of the data. Views are thin: no file I/O but export, no engine calls.
#pragma once
#include <qcustomplot.h>
#include <QHash>
#include <QPointer>
#include <QString>
#include <QWidget>
#include <memory>

#include "views/heatmap_widget.h"
#include "views/inspector_viewer.h"
#include "views/view_state.h"
#include "views/view_util.h"

class QTabBar;

namespace hl::views {

class PanelLayout;

class InstrumentView : public QWidget, public InspectorViewer {
  Q_OBJECT

 public:
  explicit InstrumentView(QWidget* parent = nullptr);
  ~InstrumentView() override;

  virtual QString viewId() const = 0;     // stable id: "entropy", "router", ... (file names, settings)
  virtual QString title() const = 0;      // "Attention entropy"
  virtual QString reference() const = 0;  // the paper it follows: "Gu & Dao 2023 (Mamba)"

  // Redraws from `s` (copied; the pointers must stay valid until the next setState). The plot is
  // replotted at once; views cache what does not change with the step.
  void setState(const ViewState& s);
  const ViewState& state() const { return state_; }
  // False when the state has nothing this view can draw (no DoRA rows, no --full tensors, ...);
  // the plot then shows why in its title.
  virtual bool hasData() const;
  // False for views that do not follow the step or the runs (layer ribbon, DoRA): their titles
  // then name neither, and appended records or a new step do not redraw them.
  virtual bool followsStep() const { return true; }

  // InspectorViewer (issue 17 item 1): redraws when `what` meets dependsOn(), else only keeps `s`.
  void contextChanged(const ViewState& s, unsigned what, int appendedFrom) override;
  unsigned dependsOn() const override;
  bool viewerVisible() const override { return isVisible(); }
  // Redraws since construction (tests: a change a view does not draw from must not redraw it).
  int redrawCount() const { return redraws_; }

  // Writes the figure: format "png" (raster, exactly widthPx × heightPx, DPI in the file), "svg" or
  // "pdf" (vector; heatmap images embedded). The layout is that of a (widthPx, heightPx) · 96 / dpi
  // window scaled up, so text and lines keep their physical size at the DPI. False + *error on failure.
  bool exportFigure(const QString& path, const QString& format, int widthPx, int heightPx, double dpi,
                    QString* error) const;
  // The view's data as CSV text (header + one line per plotted value, as of the current step).
  virtual QString csv() const = 0;

  void applyTheme(bool dark);
  bool isDark() const { return dark_; }
  const Theme& th() const { return theme(dark_); }

  QCustomPlot* plot() const { return plot_; }
  // Plottables by name (QCPAbstractPlottable::name), for tests and tooltips; null if absent.
  QCPGraph* graph(const QString& name) const;
  QCPBars* bars(const QString& name) const;
  HeatmapPlottable* heatmap(const QString& name) const;
  // The tooltip text at a position of plot(): exact values of the nearest point, bar or cell.
  virtual QString tooltipAt(const QPoint& pos) const;
  // What a click at `pos` would do: emits layerClicked / stepClicked; true if it did.
  bool clickAt(const QPoint& pos);
  // The cells of the panel grid by name, and whether the view shows only one of them now because
  // its dock is too small for all (PanelLayout; tests and the help).
  QStringList panelNames() const;
  bool panelsFolded() const;
  // Figure title text (with the "no data" reason when hasData() is false).
  QString figureTitle() const;

 signals:
  void layerClicked(int layer);
  void stepClicked(int step);
  void headClicked(int head);  // attention views: a head column was clicked

 protected:
  // Turns state() into plot data; called by setState and applyTheme. Must not replot.
  virtual void rebuild() = 0;
  // Text for point `index` of plottable `p` (graphs, bars) and for heatmap cells.
  virtual QString describePoint(QCPAbstractPlottable* p, int index) const;
  virtual QString describeCell(HeatmapPlottable* h, int row, int col) const;
  // Maps a click in `rect` at plot coordinates (x, y) to a layer or step; default: axis kinds.
  virtual void handleClick(QCPAxisRect* rect, double x, double y);

  enum class AxisKind { None, Token, Layer };
  // Marks a token or layer axis (clicks select the step or layer) and, unless the axis already has
  // a ticker of its own (text, log), gives it integer ticks: no "2.5" on a token axis.
  void setAxisKind(QCPAxis* axis, AxisKind k);
  // Sets the axis range unless the user zoomed or panned it (double-click restores).
  void setHomeRange(QCPAxis* axis, double lo, double hi);
  // The home range of a token axis whose series are drawn whole: every token of the longer run,
  // whatever the step (the cursor line marks the step).
  void setTokenHomeRange(QCPAxis* axis, const hl::Run* a, const hl::Run* b) {
    setHomeRange(axis, -0.5, std::max(1.0, longestRun(a, b) - 0.5));
  }
  // A B − A panel over tokens: a value range that one outlying token (typically the first, where
  // the runs differ most) does not swamp. With q the 95th percentile of |B − A| over the panel's
  // graphs, the range is ±1.5 q when some |B − A| exceeds 3 q (those points run off the scale and
  // the value axis label says how many), else ±1.1 max |B − A|. Call after adding the graphs.
  void robustDiffRange(QCPAxisRect* rect);
  // Panels (axis rects) in creation order; panel(0) exists from the start at body() (0, 0).
  QCPAxisRect* panel(int i) const { return i >= 0 && i < panels_.size() ? panels_[i].data() : nullptr; }
  int panelCount() const { return static_cast<int>(panels_.size()); }
  // A new panel placed at (row, col) of body(), or in `grid` when given. Zoom/drag off.
  QCPAxisRect* addPanel(int row, int col = 0, QCPLayoutGrid* grid = nullptr);
  // Panels at every cell of a rows × cols grid of body() but (0, 0), which panel(0) holds, row by row.
  void addPanelGrid(int rows, int cols);
  // Moves panel(0) from body() (0, 0) into a new grid there, at the grid's (0, 0), and returns the
  // grid: for a top row of several panels and colour scales over full-width rows.
  QCPLayoutGrid* nestFirstPanel();
  // The legend of `rect`: a strip above the panel, never over its data (created once; plottables
  // are added to it explicitly). See PanelLayout.
  QCPLegend* panelLegend(QCPAxisRect* rect);
  // Names the panel grid cell holding `rect` in the tab bar shown when the view folds.
  void setPanelName(QCPAxisRect* rect, const QString& name);
  void setTitleText(const QString& t);
  // The grid under the title that holds the panels (for nested layouts).
  QCPLayoutGrid* body() const;
  // Removes every plottable and item (panels stay).
  void clearPlot();
  // Styles axes, grids, legend, colour scales and text elements with the theme (after creating panels).
  void styleAll();
  // A graph in `rect` named `name` with the pen of run A or B.
  QCPGraph* addGraph(QCPAxisRect* rect, const QString& name, const QColor& c, bool runB = false, double width = 1.0);
  // A vertical (x = v) or horizontal (y = v) marker line in `rect`.
  QCPItemStraightLine* addVLine(QCPAxisRect* rect, double x, const QPen& pen);
  QCPItemStraightLine* addHLine(QCPAxisRect* rect, double y, const QPen& pen);
  // A horizontal band lo ≤ y ≤ hi across the whole width of `rect` (the healthy band).
  QCPItemRect* addHBand(QCPAxisRect* rect, double lo, double hi, const QColor& fill);
  QCPItemText* addLabel(QCPAxisRect* rect, double x, double y, const QString& text, Qt::Alignment align);
  // The step shown for run A / B (see effectiveStep) and whether B is drawn.
  int stepA() const { return effectiveStep(state_, state_.a); }
  int stepB() const { return effectiveStep(state_, state_.b); }
  bool diffMode() const { return state_.showDiff && state_.b && !state_.b->records.empty(); }
  // Per-view text shown instead of the figure when hasData() is false.
  QString noDataReason_;
  // Appended to the figure title (e.g. "L2 attn, head 1"); set by rebuild().
  QString subtitle_;

  bool eventFilter(QObject* obj, QEvent* ev) override;

 private:
  // rebuild() from state() with a fresh subtitle, the title, and an immediate replot.
  void redraw();
  // Blanks text ticks and axis titles when there is nothing to draw (no stale labels).
  void clearStaleAxes();
  // Legends wrapped and panels folded for the plot's current size (and for `room`, e.g. an export).
  void fitPanels();
  void fitPanelsTo(QSize room, bool mayFold) const;
  // The room the panels have with a plot of this size: the plot plus the fold's tab bar and its
  // spacing while the bar is shown (the bar takes its height from the plot).
  QSize panelRoom(QSize plotSize) const;
  QCustomPlot* plot_ = nullptr;
  QTabBar* tabs_ = nullptr;
  std::unique_ptr<PanelLayout> fold_;
  QCPTextElement* title_ = nullptr;
  ViewState state_;
  bool dark_ = false;
  QVector<QPointer<QCPAxisRect>> panels_;
  QHash<QCPAxis*, AxisKind> kinds_;
  QHash<QCPAxis*, bool> userRange_;
  QPoint pressPos_;
  int redraws_ = 0;
};

// Styles bars of run A (fill alpha 200) or B (fill alpha 110, dashed outline) in colour `c`.
void styleRunBars(QCPBars* bars, const QColor& c, bool runB, double width);

}  // namespace hl::views
