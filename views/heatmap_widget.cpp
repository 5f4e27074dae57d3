// Heatmap data, colour maps, the CPU renderer (visible window only, at screen resolution, max or
// signed max-|v| pooling), the renderer factory, the QCustomPlot plottable and zoom/pan (see
// heatmap_widget.h). Reference: issue 5 item 7; DESIGN.md "views" (GPU renderer behind this API).
#include "views/heatmap_widget.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <thread>

namespace hl::views {

// ---- colour maps ----

namespace {

// Piecewise-linear stops (t, r, g, b): coarse samples of the perceptual maps.
struct Stop {
  float t;
  int r, g, b;
};

QVector<QRgb> buildLut(std::initializer_list<Stop> stops) {
  std::vector<Stop> s(stops);
  QVector<QRgb> lut(256);
  for (int i = 0; i < 256; ++i) {
    const float t = static_cast<float>(i) / 255.0f;
    size_t j = 0;
    while (j + 2 < s.size() && t > s[j + 1].t) ++j;
    const Stop& a = s[j];
    const Stop& b = s[j + 1];
    const float f = std::clamp((t - a.t) / std::max(1e-6f, b.t - a.t), 0.0f, 1.0f);
    auto mix = [f](int x, int y) { return static_cast<int>(std::lround(x + (y - x) * f)); };
    lut[i] = qRgb(mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b));
  }
  return lut;
}

}  // namespace

const QVector<QRgb>& colormapLut(Colormap c) {
  static const QVector<QRgb> viridis = buildLut({{0.00f, 68, 1, 84},
                                                 {0.13f, 71, 44, 122},
                                                 {0.25f, 59, 81, 139},
                                                 {0.38f, 44, 113, 142},
                                                 {0.50f, 33, 144, 141},
                                                 {0.63f, 39, 173, 129},
                                                 {0.75f, 92, 200, 99},
                                                 {0.88f, 170, 220, 50},
                                                 {1.00f, 253, 231, 37}});
  static const QVector<QRgb> magma = buildLut({{0.00f, 0, 0, 4},
                                               {0.13f, 28, 16, 68},
                                               {0.25f, 79, 18, 123},
                                               {0.38f, 129, 37, 129},
                                               {0.50f, 181, 54, 122},
                                               {0.63f, 229, 80, 100},
                                               {0.75f, 251, 135, 97},
                                               {0.88f, 254, 194, 135},
                                               {1.00f, 252, 253, 191}});
  static const QVector<QRgb> diverging = buildLut(
      {{0.00f, 5, 48, 97}, {0.25f, 67, 147, 195}, {0.50f, 247, 247, 247}, {0.75f, 214, 96, 77}, {1.00f, 103, 0, 31}});
  static const QVector<QRgb> gray = buildLut({{0.0f, 0, 0, 0}, {1.0f, 255, 255, 255}});
  switch (c) {
    case Colormap::Magma:
      return magma;
    case Colormap::Diverging:
      return diverging;
    case Colormap::Gray:
      return gray;
    case Colormap::Viridis:
      break;
  }
  return viridis;
}

QCPColorGradient colormapGradient(Colormap c) {
  QCPColorGradient g;
  g.clearColorStops();
  const QVector<QRgb>& lut = colormapLut(c);
  for (int i = 0; i <= 16; ++i) {
    const int idx = std::min(255, i * 16);
    g.setColorStopAt(idx / 255.0, QColor(lut[idx]));
  }
  g.setLevelCount(256);
  return g;
}

// ---- colour scales ----

float colorPosition(const HeatmapStyle& s, float v) {
  if (std::isnan(v)) return v;
  if (s.scale == ColorScale::Log) {
    const float hi = s.hi > 0 ? s.hi : 1.0f, dec = std::max(0.1f, s.decades);
    if (!(v > 0)) return 0.0f;
    return std::clamp((std::log10(v / hi) + dec) / dec, 0.0f, 1.0f);
  }
  const float span = s.hi > s.lo ? s.hi - s.lo : 1.0f;
  const float t = std::clamp((v - s.lo) / span, 0.0f, 1.0f);
  return s.scale == ColorScale::Power ? std::pow(t, std::max(0.01f, s.gamma)) : t;
}

QCPColorGradient colormapGradient(const HeatmapStyle& s) {
  if (s.scale != ColorScale::Power) return colormapGradient(s.cmap);
  // The bar's axis is linear in the value: the colour at bar position u is the map at u^gamma.
  QCPColorGradient g;
  g.clearColorStops();
  const QVector<QRgb>& lut = colormapLut(s.cmap);
  for (int i = 0; i <= 64; ++i) {
    const double u = i / 64.0;
    const double pos = std::pow(u, std::max(0.01, static_cast<double>(s.gamma)));
    g.setColorStopAt(u, QColor(lut[std::clamp(static_cast<int>(pos * 255.0 + 0.5), 0, 255)]));
  }
  g.setLevelCount(256);
  return g;
}

QString colorScaleName(const HeatmapStyle& s) {
  switch (s.scale) {
    case ColorScale::Log:
      return QStringLiteral(" (log, %1 decades)").arg(static_cast<double>(s.decades));
    case ColorScale::Power:
      return QStringLiteral(" (power γ = %1)").arg(static_cast<double>(s.gamma));
    case ColorScale::Linear:
      break;
  }
  return QStringLiteral(" (linear)");
}

namespace {

// Value → colour-map index. Linear: (v − lo) / span · 255, rounded. Log and power: a table over
// the top 16 bits of the non-negative float (8 bits of mantissa: 0.4 % relative resolution), so a
// pixel costs a shift and a lookup as on the linear path; the table is built once per style.
class ColorIndexer {
 public:
  explicit ColorIndexer(const HeatmapStyle& s) : s_(s), linear_(s.scale == ColorScale::Linear) {
    lo_ = s.lo;
    span_ = s.hi > s.lo ? s.hi - s.lo : 1.0f;
    if (linear_) return;
    thread_local std::vector<uint8_t> table;
    thread_local HeatmapStyle key{};
    thread_local bool built = false;
    if (!built || key.scale != s.scale || key.gamma != s.gamma || key.decades != s.decades || key.lo != s.lo ||
        key.hi != s.hi) {
      table.resize(65536);
      for (uint32_t i = 0; i < 65536; ++i) {
        // The middle of the bucket: the value whose top bits are i with the low half at its centre.
        const uint32_t bits = (i << 15) | 0x4000u;
        float v;
        std::memcpy(&v, &bits, 4);
        const float t = colorPosition(s, v);
        // Buckets from 0x7f80 up are +inf and NaN payloads: the top colour.
        table[i] = static_cast<uint8_t>(i >= 0xff00u ? 255 : static_cast<int>(t * 255.0f + 0.5f));
      }
      key = s;
      built = true;
    }
    table_ = table.data();
  }
  int operator()(float m) const {
    if (linear_) return static_cast<int>(std::clamp((m - lo_) / span_, 0.0f, 1.0f) * 255.0f + 0.5f);
    if (!(m > 0)) return static_cast<int>(colorPosition(s_, m) * 255.0f + 0.5f);
    uint32_t bits;
    std::memcpy(&bits, &m, 4);
    return table_[bits >> 15];
  }

 private:
  HeatmapStyle s_;
  bool linear_;
  float lo_ = 0, span_ = 1;
  const uint8_t* table_ = nullptr;
};

}  // namespace

// ---- data ----

void HeatmapData::addRow(const float* p, int len) {
  ptr_.push_back(len > 0 ? p : nullptr);
  len_.push_back(len > 0 ? std::min(len, cols_) : 0);
}

void HeatmapData::addOwnedRow(std::vector<float> v) {
  owned_.push_back(std::move(v));
  const std::vector<float>& o = owned_.back();
  addRow(o.data(), static_cast<int>(o.size()));
}

float HeatmapData::value(int r, int c) const {
  if (r < 0 || r >= rows() || c < 0) return std::numeric_limits<float>::quiet_NaN();
  int len = 0;
  const float* p = row(r, &len);
  return c < len ? p[c] : std::numeric_limits<float>::quiet_NaN();
}

// ---- renderers ----

QImage HeatmapRenderer::render(const float* data, int rows, int cols, float lo, float hi, QSize size, Colormap cmap) {
  HeatmapData d(cols, 0);
  for (int r = 0; r < rows; ++r) d.addRow(data + static_cast<int64_t>(r) * cols, cols);
  HeatmapStyle s;
  s.lo = lo;
  s.hi = hi;
  s.cmap = cmap;
  return render(d, QRectF(0, 0, cols, rows), s, size);
}

void heatmapPixelSpans(double w0, double w1, int n, int limit, std::vector<int>* begin, std::vector<int>* end) {
  begin->resize(static_cast<size_t>(n));
  end->resize(static_cast<size_t>(n));
  const double step = (w1 - w0) / n;
  for (int i = 0; i < n; ++i) {
    const double a = w0 + i * step, b = a + step;
    int cb = static_cast<int>(std::floor(a + 1e-9));
    int ce = static_cast<int>(std::ceil(b - 1e-9));
    if (ce <= cb) ce = cb + 1;  // a pixel smaller than a cell shows the cell under it
    cb = std::max(cb, 0);
    ce = std::min(ce, limit);
    (*begin)[i] = cb;
    (*end)[i] = std::max(ce, cb);
  }
}

QImage CpuHeatmapRenderer::render(const HeatmapData& data, const QRectF& window, const HeatmapStyle& style,
                                  QSize size) {
  const int W = std::max(1, size.width()), H = std::max(1, size.height());
  QImage img(W, H, QImage::Format_ARGB32_Premultiplied);
  img.fill(Qt::transparent);
  if (data.rows() == 0 || data.cols() == 0 || window.width() <= 0 || window.height() <= 0) return img;

  std::vector<int> cb, ce, rb, re;
  heatmapPixelSpans(window.left(), window.right(), W, data.cols(), &cb, &ce);
  heatmapPixelSpans(window.top(), window.bottom(), H, data.rows(), &rb, &re);
  const QVector<QRgb>& lut = colormapLut(style.cmap);
  const ColorIndexer index(style);
  const bool absPool = style.pool == Pooling::MaxAbs;

  // Columns the window touches: work outside them is skipped.
  const int c0 = cb[0], c1 = std::max(c0, ce[W - 1]);
  // Output rows [y0, y1): per output row, fold the source rows it covers into one row (contiguous,
  // vectorizable), then pool that row's column spans into pixels. Rows are prefixes [0, len): a
  // column is covered when any folded row reaches it.
  auto band = [&](int y0, int y1) {
    std::vector<float> fold(static_cast<size_t>(data.cols()));
    for (int py = y0; py < y1; ++py) {
      if (rb[py] >= re[py]) continue;
      int covered = c0;  // fold[c0, covered) holds data
      for (int r = rb[py]; r < re[py]; ++r) {
        int len = 0;
        const float* p = data.row(r, &len);
        if (!p) continue;
        len = std::min(len, c1);
        const int both = std::min(len, covered);
        float* f = fold.data();
        // NaN cells lose against any number (a pixel is transparent only when all its cells are NaN).
        if (absPool) {
          for (int c = c0; c < both; ++c) f[c] = (std::fabs(p[c]) > std::fabs(f[c]) || f[c] != f[c]) ? p[c] : f[c];
        } else {
          for (int c = c0; c < both; ++c) f[c] = (p[c] > f[c] || f[c] != f[c]) ? p[c] : f[c];
        }
        for (int c = std::max(both, c0); c < len; ++c) f[c] = p[c];
        covered = std::max(covered, len);
      }
      QRgb* line = reinterpret_cast<QRgb*>(img.scanLine(py));
      for (int px = 0; px < W; ++px) {
        const int b = cb[px], e = std::min(ce[px], covered);
        if (b >= e) continue;
        float m = fold[b];
        if (absPool) {
          for (int c = b + 1; c < e; ++c) m = (std::fabs(fold[c]) > std::fabs(m) || m != m) ? fold[c] : m;
        } else {
          for (int c = b + 1; c < e; ++c) m = (fold[c] > m || m != m) ? fold[c] : m;
        }
        if (std::isnan(m)) continue;  // NaN cells are not drawn
        line[px] = lut[index(m)];
      }
    }
  };
  // Large windows are split into bands of output rows over a few threads (each writes its own
  // scanlines); small ones stay on the calling thread.
  const double cells =
      (std::min<double>(window.bottom(), data.rows()) - std::max(0.0, window.top())) * static_cast<double>(c1 - c0);
  const int threads = cells < 2e6 ? 1 : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  if (threads <= 1 || H < 2 * threads) {
    band(0, H);
  } else {
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back(band, H * i / threads, H * (i + 1) / threads);
    band(0, H / threads);
    for (std::thread& t : pool) t.join();
  }
  return img;
}

namespace {
std::mutex& factoryMutex() {
  static std::mutex m;
  return m;
}
HeatmapRendererFactory& factory() {
  static HeatmapRendererFactory f;
  return f;
}
}  // namespace

void setHeatmapRendererFactory(HeatmapRendererFactory f) {
  std::lock_guard<std::mutex> lock(factoryMutex());
  factory() = std::move(f);
}

std::unique_ptr<HeatmapRenderer> makeHeatmapRenderer() {
  HeatmapRendererFactory f;
  {
    std::lock_guard<std::mutex> lock(factoryMutex());
    f = factory();
  }
  if (f) {
    if (auto r = f()) return r;
  }
  return std::make_unique<CpuHeatmapRenderer>();
}

// ---- plottable ----

HeatmapPlottable::HeatmapPlottable(QCPAxis* keyAxis, QCPAxis* valueAxis)
    : QCPAbstractPlottable(keyAxis, valueAxis), renderer_(makeHeatmapRenderer()) {
  setAntialiased(false);
  setSelectable(QCP::stNone);
}

HeatmapPlottable::~HeatmapPlottable() = default;

void HeatmapPlottable::setHeatmap(std::shared_ptr<const HeatmapData> data) {
  data_ = std::move(data);
  cacheValid_ = false;
}

void HeatmapPlottable::setStyle(const HeatmapStyle& s) {
  style_ = s;
  cacheValid_ = false;
  if (scale_) {
    scale_->setGradient(colormapGradient(s));
    if (s.scale == ColorScale::Log) {
      const double hi = s.hi > 0 ? s.hi : 1.0;
      scale_->setDataScaleType(QCPAxis::stLogarithmic);
      scale_->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
      scale_->setDataRange(QCPRange(hi * std::pow(10.0, -std::max(0.1, static_cast<double>(s.decades))), hi));
    } else {
      if (scale_->dataScaleType() != QCPAxis::stLinear) {
        scale_->setDataScaleType(QCPAxis::stLinear);
        scale_->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
      }
      scale_->setDataRange(QCPRange(s.lo, s.hi > s.lo ? s.hi : s.lo + 1));
    }
  }
}

void HeatmapPlottable::setColorScale(QCPColorScale* scale) {
  scale_ = scale;
  setStyle(style_);
}

void HeatmapPlottable::setRenderer(std::unique_ptr<HeatmapRenderer> r) {
  renderer_ = r ? std::move(r) : std::make_unique<CpuHeatmapRenderer>();
  cacheValid_ = false;
}

bool HeatmapPlottable::cellAt(double key, double value, int* row, int* col) const {
  if (!data_) return false;
  const int c = static_cast<int>(std::floor(key)), r = static_cast<int>(std::floor(value));
  if (r < 0 || r >= data_->rows() || c < 0 || c >= data_->cols()) return false;
  int len = 0;
  data_->row(r, &len);
  if (c >= len) return false;
  *row = r;
  *col = c;
  return true;
}

double HeatmapPlottable::selectTest(const QPointF& pos, bool onlySelectable, QVariant* details) const {
  if (onlySelectable || !data_ || !mKeyAxis || !mValueAxis) return -1;
  int r = 0, c = 0;
  if (!cellAt(mKeyAxis->pixelToCoord(pos.x()), mValueAxis->pixelToCoord(pos.y()), &r, &c)) return -1;
  if (details) *details = QPoint(c, r);
  return 0;
}

QCPRange HeatmapPlottable::getKeyRange(bool& foundRange, QCP::SignDomain) const {
  foundRange = data_ && data_->cols() > 0;
  return foundRange ? QCPRange(0, data_->cols()) : QCPRange();
}

QCPRange HeatmapPlottable::getValueRange(bool& foundRange, QCP::SignDomain, const QCPRange&) const {
  foundRange = data_ && data_->rows() > 0;
  return foundRange ? QCPRange(0, data_->rows()) : QCPRange();
}

void HeatmapPlottable::draw(QCPPainter* painter) {
  if (!data_ || data_->rows() == 0 || data_->cols() == 0 || !mKeyAxis || !mValueAxis) return;
  // Visible window in cell units: the axes' ranges clipped to the data.
  const QCPRange kr = mKeyAxis->range(), vr = mValueAxis->range();
  const double x0 = std::max(0.0, kr.lower), x1 = std::min<double>(data_->cols(), kr.upper);
  const double y0 = std::max(0.0, vr.lower), y1 = std::min<double>(data_->rows(), vr.upper);
  if (x1 <= x0 || y1 <= y0) return;
  const QPointF pa(mKeyAxis->coordToPixel(x0), mValueAxis->coordToPixel(y0));
  const QPointF pb(mKeyAxis->coordToPixel(x1), mValueAxis->coordToPixel(y1));
  const QRectF target = QRectF(pa, pb).normalized();
  if (target.width() < 0.5 || target.height() < 0.5) return;
  // Pixels: the logical size times the painter's scale (export scale, device pixel ratio); vector
  // exports get twice the logical resolution. Bounded so a huge export cannot allocate unbounded.
  double scale = std::max(1.0, std::fabs(painter->transform().m11()));
  if (painter->device()) scale *= std::max(1.0, painter->device()->devicePixelRatioF());
  if (painter->modes().testFlag(QCPPainter::pmVectorized)) scale = std::max(scale, 2.0);
  const QSize px(std::clamp(static_cast<int>(std::ceil(target.width() * scale)), 1, 8192),
                 std::clamp(static_cast<int>(std::ceil(target.height() * scale)), 1, 8192));
  const QRectF window(x0, y0, x1 - x0, y1 - y0);
  if (!cacheValid_ || cacheVersion_ != data_->version() || cacheRows_ != data_->rows() || cacheWindow_ != window ||
      cacheSize_ != px) {
    cache_ = renderer_->render(*data_, window, style_, px);
    cacheVersion_ = data_->version();
    cacheRows_ = data_->rows();
    cacheWindow_ = window;
    cacheSize_ = px;
    cacheValid_ = true;
    ++renders_;
  }
  // Image row 0 is the window's smallest row; mirror when that is drawn at the bottom.
  const bool flipV = mValueAxis->coordToPixel(y0) > mValueAxis->coordToPixel(y1);
  const bool flipH = mKeyAxis->coordToPixel(x0) > mKeyAxis->coordToPixel(x1);
  applyDefaultAntialiasingHint(painter);
  painter->setRenderHint(QPainter::SmoothPixmapTransform, false);
  if (flipV || flipH)
    painter->drawImage(target, cache_.mirrored(flipH, flipV));
  else
    painter->drawImage(target, cache_);
}

void HeatmapPlottable::drawLegendIcon(QCPPainter* painter, const QRectF& rect) const {
  const QVector<QRgb>& lut = colormapLut(style_.cmap);
  QLinearGradient g(rect.topLeft(), rect.topRight());
  g.setColorAt(0, QColor(lut[0]));
  g.setColorAt(1, QColor(lut[255]));
  painter->fillRect(rect, g);
}

// ---- zoom and pan ----

void installZoomPan(QCustomPlot* plot, QCPAxisRect* rect, Qt::Orientations o) {
  plot->setInteraction(QCP::iRangeDrag, true);
  plot->setInteraction(QCP::iRangeZoom, true);
  rect->setRangeDrag(o);
  rect->setRangeZoom(o);
  // Clamp to the plottables' extent so zoom and pan never leave the data.
  auto clampAxis = [](QCPAxis* axis) {
    QObject::connect(axis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), axis, [axis](const QCPRange& nr) {
      bool any = false;
      QCPRange ext;
      for (QCPAbstractPlottable* p : axis->plottables()) {
        bool found = false;
        const QCPRange r = p->keyAxis() == axis ? p->getKeyRange(found) : p->getValueRange(found);
        if (!found) continue;
        ext = any ? QCPRange(std::min(ext.lower, r.lower), std::max(ext.upper, r.upper)) : r;
        any = true;
      }
      // A home range the view set (InstrumentView::setHomeRange) extends the allowed extent.
      const QVariant hlo = axis->property("hlHomeLo"), hhi = axis->property("hlHomeHi");
      if (hlo.isValid() && hhi.isValid()) {
        const QCPRange home(hlo.toDouble(), hhi.toDouble());
        ext = any ? QCPRange(std::min(ext.lower, home.lower), std::max(ext.upper, home.upper)) : home;
        any = true;
      }
      if (!any || ext.size() <= 0) return;
      QCPRange c = nr;
      if (c.size() > ext.size()) c = ext;
      if (c.lower < ext.lower) c = QCPRange(ext.lower, ext.lower + c.size());
      if (c.upper > ext.upper) c = QCPRange(ext.upper - c.size(), ext.upper);
      if (c.lower != nr.lower || c.upper != nr.upper) axis->setRange(c);
    });
  };
  if (o & Qt::Horizontal) clampAxis(rect->axis(QCPAxis::atBottom));
  if (o & Qt::Vertical) clampAxis(rect->axis(QCPAxis::atLeft));
}

HeatmapWidget::HeatmapWidget(QWidget* parent) : QCustomPlot(parent) {
  QCPAxisRect* r = axisRect();
  heat_ = new HeatmapPlottable(r->axis(QCPAxis::atBottom), r->axis(QCPAxis::atLeft));
  r->axis(QCPAxis::atLeft)->setRangeReversed(true);
  scale_ = new QCPColorScale(this);
  plotLayout()->addElement(0, 1, scale_);
  heat_->setColorScale(scale_);
  installZoomPan(this, r, Qt::Horizontal | Qt::Vertical);
  connect(this, &QCustomPlot::mouseDoubleClick, this, [this] {
    rescaleAxes();
    replot();
  });
}

void HeatmapWidget::setHeatmap(std::shared_ptr<const HeatmapData> data, const HeatmapStyle& style) {
  heat_->setHeatmap(std::move(data));
  heat_->setStyle(style);
  rescaleAxes();
  replot();
}

}  // namespace hl::views
