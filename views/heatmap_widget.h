// Heatmaps for thousands of tokens (issue 5 item 7): the matrix a heatmap draws (ragged rows
// borrowed from the trace records or owned), the pluggable renderer interface with its CPU
// implementation (renders only the visible window at screen resolution; a pixel covering several
// cells shows their max, or signed max-|v| for B − A), a QCustomPlot plottable that draws through
// it, and zoom/pan. A GPU (Vulkan) renderer plugs in with setHeatmapRendererFactory.
#pragma once
#include <qcustomplot.h>
#include <QImage>
#include <QRectF>
#include <QSize>
#include <QVector>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace hl::views {

enum class Colormap { Viridis, Magma, Diverging, Gray };
// 256 colours from low to high (ARGB32, opaque).
const QVector<QRgb>& colormapLut(Colormap c);
// The same map as a QCustomPlot gradient (for QCPColorScale).
QCPColorGradient colormapGradient(Colormap c);

// How cells that share one pixel combine: the largest value, or the value of largest magnitude
// with its sign (differences B − A).
enum class Pooling { Max, MaxAbs };

// rows × cols cells; row r may be shorter than cols (missing cells are not drawn). Rows are either
// borrowed (pointers into trace records: the records must outlive the data) or owned.
class HeatmapData {
 public:
  HeatmapData(int cols, uint64_t version) : cols_(cols), version_(version) {}
  HeatmapData(const HeatmapData&) = delete;
  HeatmapData& operator=(const HeatmapData&) = delete;

  void addRow(const float* p, int len);    // borrowed
  void addOwnedRow(std::vector<float> v);  // owned
  int rows() const { return static_cast<int>(ptr_.size()); }
  int cols() const { return cols_; }
  // Pointer to row r's first cell and its length (0: empty row).
  const float* row(int r, int* len) const {
    *len = len_[static_cast<size_t>(r)];
    return ptr_[static_cast<size_t>(r)];
  }
  // Cell value or NaN when outside the data.
  float value(int r, int c) const;
  // Identifies the content: equal versions mean equal cells (renderers may cache by it).
  uint64_t version() const { return version_; }

 private:
  int cols_;
  uint64_t version_;
  std::vector<const float*> ptr_;
  std::vector<int> len_;
  std::deque<std::vector<float>> owned_;  // deque: addresses of earlier rows stay valid
};

// How a value maps to a colour between lo and hi: linearly; on a log axis over `decades` decades
// below hi (values ≤ hi·10^-decades get the lowest colour; lo is ignored); or as ((v − lo) / (hi −
// lo))^gamma (gamma < 1 spreads small values: attention weights of long contexts are mostly tiny).
enum class ColorScale { Linear, Log, Power };

struct HeatmapStyle {
  float lo = 0, hi = 1;  // colour range (values are clamped)
  Colormap cmap = Colormap::Viridis;
  Pooling pool = Pooling::Max;
  ColorScale scale = ColorScale::Linear;
  float gamma = 0.5f;    // ColorScale::Power
  float decades = 4.0f;  // ColorScale::Log
};

// The position in [0, 1] of `v` on the style's colour scale (NaN stays NaN).
float colorPosition(const HeatmapStyle& s, float v);
// The gradient of a colour bar for `s`: for Power the stops are placed so that the bar's linear
// axis reads the value; for Log the bar's axis must be logarithmic (see HeatmapPlottable).
QCPColorGradient colormapGradient(const HeatmapStyle& s);
// The colour-bar caption suffix naming the scale: "", " (log)", " (power γ = 0.5)".
QString colorScaleName(const HeatmapStyle& s);

// The renderer interface. `window` is in cell units: column c covers x ∈ [c, c+1), row r covers
// y ∈ [r, r+1); image row 0 shows the window's top edge (smallest y: row 0 of the matrix at the top).
// The image has `size` pixels; cells outside the data or missing stay transparent.
class HeatmapRenderer {
 public:
  virtual ~HeatmapRenderer() = default;
  virtual QString name() const = 0;
  virtual QImage render(const HeatmapData& data, const QRectF& window, const HeatmapStyle& style, QSize size) = 0;
  // Dense convenience: a rows × cols row-major matrix, whole.
  QImage render(const float* data, int rows, int cols, float lo, float hi, QSize size, Colormap cmap);
};

// The cell span [begin, end) covered by each of n pixels over [w0, w1) in cell units, clipped to
// [0, limit): the cells every renderer pools into a pixel (the same on the CPU and the GPU).
void heatmapPixelSpans(double w0, double w1, int n, int limit, std::vector<int>* begin, std::vector<int>* end);

// The CPU fallback: visits only the cells inside the window, writes only `size` pixels.
class CpuHeatmapRenderer : public HeatmapRenderer {
 public:
  using HeatmapRenderer::render;  // keep the dense overload visible (implementations should do the same)
  QString name() const override { return QStringLiteral("cpu"); }
  QImage render(const HeatmapData& data, const QRectF& window, const HeatmapStyle& style, QSize size) override;
};

// The renderer new heatmaps use: the registered factory's (e.g. Vulkan when a device exists), else
// the CPU renderer. A factory may return null to fall back to the CPU.
using HeatmapRendererFactory = std::function<std::unique_ptr<HeatmapRenderer>()>;
void setHeatmapRendererFactory(HeatmapRendererFactory f);
std::unique_ptr<HeatmapRenderer> makeHeatmapRenderer();

// A QCustomPlot plottable drawing HeatmapData in its axis rect through a renderer. Key axis =
// columns, value axis = rows (set the value axis reversed for row 0 at the top). The rendered image
// is cached until the data version, style, visible window or pixel size changes.
class HeatmapPlottable : public QCPAbstractPlottable {
  Q_OBJECT

 public:
  HeatmapPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis);
  ~HeatmapPlottable() override;
  void setHeatmap(std::shared_ptr<const HeatmapData> data);
  const HeatmapData* heatmap() const { return data_.get(); }
  void setStyle(const HeatmapStyle& s);
  const HeatmapStyle& style() const { return style_; }
  // Syncs this colour scale's gradient and range with the style.
  void setColorScale(QCPColorScale* scale);
  void setRenderer(std::unique_ptr<HeatmapRenderer> r);
  HeatmapRenderer* renderer() const { return renderer_.get(); }
  // Cell under plot coordinates, or false outside the data.
  bool cellAt(double key, double value, int* row, int* col) const;
  int renderCount() const { return renders_; }  // images rendered so far (tests, benchmark)

  double selectTest(const QPointF& pos, bool onlySelectable, QVariant* details = nullptr) const override;
  QCPRange getKeyRange(bool& foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth) const override;
  QCPRange getValueRange(bool& foundRange, QCP::SignDomain inSignDomain = QCP::sdBoth,
                         const QCPRange& inKeyRange = QCPRange()) const override;

 protected:
  void draw(QCPPainter* painter) override;
  void drawLegendIcon(QCPPainter* painter, const QRectF& rect) const override;

 private:
  std::shared_ptr<const HeatmapData> data_;
  HeatmapStyle style_;
  QPointer<QCPColorScale> scale_;
  std::unique_ptr<HeatmapRenderer> renderer_;
  QImage cache_;
  QRectF cacheWindow_;
  QSize cacheSize_;
  uint64_t cacheVersion_ = ~uint64_t{0};
  int cacheRows_ = -1;
  bool cacheValid_ = false;
  int renders_ = 0;
};

// Mouse-wheel zoom and drag pan on `rect` in the given orientations, clamped to `bounds` (the
// data's extent in plot coordinates); a double click restores the full extent.
void installZoomPan(QCustomPlot* plot, QCPAxisRect* rect, Qt::Orientations o);

// A standalone heatmap: one axis rect with a HeatmapPlottable, a colour scale, zoom and pan.
class HeatmapWidget : public QCustomPlot {
  Q_OBJECT

 public:
  explicit HeatmapWidget(QWidget* parent = nullptr);
  HeatmapPlottable* heatmap() const { return heat_; }
  QCPColorScale* colorScale() const { return scale_; }
  // Sets the data and shows its whole extent.
  void setHeatmap(std::shared_ptr<const HeatmapData> data, const HeatmapStyle& style);

 private:
  HeatmapPlottable* heat_ = nullptr;
  QCPColorScale* scale_ = nullptr;
};

}  // namespace hl::views
