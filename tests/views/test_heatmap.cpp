// The heatmap renderer interface and its CPU implementation (issue 5 item 7): one cell per pixel
// reproduces the colour map, several cells per pixel keep the max (signed max-|v| for B − A) so a
// single hot cell survives downsampling, ragged rows leave missing cells transparent, only the
// visible window is drawn, and a registered renderer factory is used by new heatmaps.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/views/heatmap_test_util.h"
#include "views/heatmap_widget.h"

using namespace hl::views;

namespace {
QRgb lutAt(Colormap c, float t) {
  return colormapLut(c)[static_cast<int>(std::clamp(t, 0.0f, 1.0f) * 255.0f + 0.5f)];
}
}  // namespace

TEST(CpuHeatmapRenderer, OneCellPerPixel_ColoursAreTheLut) {
  const int rows = 3, cols = 4;
  std::vector<float> m(rows * cols);
  for (int i = 0; i < rows * cols; ++i) m[i] = static_cast<float>(i) / (rows * cols - 1);
  CpuHeatmapRenderer r;
  const QImage img = r.render(m.data(), rows, cols, 0.0f, 1.0f, QSize(cols, rows), Colormap::Viridis);
  ASSERT_EQ(img.size(), QSize(cols, rows));
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x)
      EXPECT_EQ(img.pixel(x, y), lutAt(Colormap::Viridis, m[y * cols + x])) << x << "," << y;
}

TEST(CpuHeatmapRenderer, Downsampling_KeepsTheMaxOfEachPixel) {
  CpuHeatmapRenderer r;
  hl::test::expectHotCellSurvivesDownsampling(r);
}

TEST(CpuHeatmapRenderer, MaxAbsPooling_KeepsTheSign) {
  std::vector<float> m = {0.1f, -0.9f, 0.5f, 0.2f};  // one row: |−0.9| wins
  HeatmapData d(4, 1);
  d.addRow(m.data(), 4);
  CpuHeatmapRenderer r;
  HeatmapStyle s{-1.0f, 1.0f, Colormap::Diverging, Pooling::MaxAbs};
  const QImage img = r.render(d, QRectF(0, 0, 4, 1), s, QSize(1, 1));
  EXPECT_EQ(img.pixel(0, 0), lutAt(Colormap::Diverging, (-0.9f + 1.0f) / 2.0f));
}

TEST(CpuHeatmapRenderer, NanCells_LoseToNumbers_AllNanPixelTransparent) {
  const float nan = std::nanf("");
  std::vector<float> m = {nan,  0.25f, nan, nan,   // row 0
                          0.5f, nan,   nan, nan};  // row 1
  HeatmapData d(4, 3);
  d.addRow(m.data(), 4);
  d.addRow(m.data() + 4, 4);
  CpuHeatmapRenderer r;
  const QImage img =
      r.render(d, QRectF(0, 0, 4, 2), HeatmapStyle{0.0f, 1.0f, Colormap::Gray, Pooling::Max}, QSize(2, 1));
  EXPECT_EQ(img.pixel(0, 0), lutAt(Colormap::Gray, 0.5f)) << "max of the numbers in the 2 x 2 block";
  EXPECT_EQ(qAlpha(img.pixel(1, 0)), 0) << "every cell NaN";
}

TEST(CpuHeatmapRenderer, RaggedRows_MissingCellsTransparent_WindowOnly) {
  // A causal (lower-triangular) matrix: row r has r + 1 cells.
  const int n = 6;
  std::vector<std::vector<float>> rows;
  HeatmapData d(n, 2);
  for (int r = 0; r < n; ++r) d.addOwnedRow(std::vector<float>(static_cast<size_t>(r + 1), 1.0f));
  CpuHeatmapRenderer ren;
  HeatmapStyle s{0.0f, 1.0f, Colormap::Gray, Pooling::Max};
  const QImage img = ren.render(d, QRectF(0, 0, n, n), s, QSize(n, n));
  for (int y = 0; y < n; ++y)
    for (int x = 0; x < n; ++x) EXPECT_EQ(qAlpha(img.pixel(x, y)), x <= y ? 255 : 0) << x << "," << y;
  // The window [2, 4) × [3, 5): a 2 × 2 image of rows 3..4, columns 2..3 — all present.
  const QImage w = ren.render(d, QRectF(2, 3, 2, 2), s, QSize(2, 2));
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 2; ++x) EXPECT_EQ(qAlpha(w.pixel(x, y)), 255);
  EXPECT_TRUE(std::isnan(d.value(1, 3)));
  EXPECT_EQ(d.value(4, 3), 1.0f);
}

namespace {
struct CountingRenderer : CpuHeatmapRenderer {
  static int calls;
  QString name() const override { return "counting"; }
  QImage render(const HeatmapData& d, const QRectF& w, const HeatmapStyle& s, QSize size) override {
    ++calls;
    EXPECT_LE(size.width(), 8192);
    return CpuHeatmapRenderer::render(d, w, s, size);
  }
};
int CountingRenderer::calls = 0;
}  // namespace

TEST(HeatmapWidget, UsesTheRegisteredRenderer_RendersAtScreenSize_CachesUntilChange) {
  setHeatmapRendererFactory([] { return std::make_unique<CountingRenderer>(); });
  HeatmapWidget w;
  w.resize(400, 300);
  EXPECT_EQ(w.heatmap()->renderer()->name(), "counting");
  const int n = 4096;
  auto data = std::make_shared<HeatmapData>(n, 99);
  std::vector<float> row(n, 0.5f);
  for (int r = 0; r < n; ++r) data->addRow(row.data(), r + 1);
  w.setHeatmap(data, HeatmapStyle{});
  const int after = CountingRenderer::calls;
  EXPECT_GE(after, 1);
  w.replot();
  EXPECT_EQ(CountingRenderer::calls, after) << "unchanged window: the cached image is reused";
  // Zoom into a window: rendered again; ranges stay inside the data.
  w.xAxis->setRange(-500, 100);
  EXPECT_GE(w.xAxis->range().lower, 0.0);
  w.replot();
  EXPECT_GT(CountingRenderer::calls, after);
  setHeatmapRendererFactory(nullptr);
  EXPECT_EQ(makeHeatmapRenderer()->name(), "cpu");
}
