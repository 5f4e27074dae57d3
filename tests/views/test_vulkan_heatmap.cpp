// The Vulkan heatmap renderer against the CPU renderer (issue 5 item 7): ragged rows, NaN cells,
// windows zoomed in and out and partly outside the data, every colour map, both poolings — the same
// transparency everywhere and the same colour-map index per pixel (±1 allowed where a GPU's float
// division is not correctly rounded; lavapipe matches exactly). Skips without a Vulkan device.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "tests/views/heatmap_test_util.h"
#include "views/vulkan_heatmap_renderer.h"

using namespace hl::views;

namespace {

std::unique_ptr<VulkanHeatmapRenderer> gpu() {
  return VulkanHeatmapRenderer::create(/*allowCpuDevice=*/true);
}

// Index of a colour in the map (-1: transparent), for comparing two images pixel by pixel.
int lutIndex(Colormap c, QRgb px) {
  if (qAlpha(px) == 0) return -1;
  static std::map<std::pair<int, QRgb>, int> memo;
  const auto key = std::make_pair(static_cast<int>(c), px);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  const QVector<QRgb>& lut = colormapLut(c);
  int found = -2;
  for (int i = 0; i < 256 && found < 0; ++i)
    if (lut[i] == px) found = i;
  memo[key] = found;
  return found;
}

// Same transparency, colour indices within ±1; returns the number of pixels that differ at all.
int compareImages(const QImage& a, const QImage& b, Colormap c, const std::string& what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  int differ = 0;
  for (int y = 0; y < a.height(); ++y)
    for (int x = 0; x < a.width(); ++x) {
      const int ia = lutIndex(c, a.pixel(x, y)), ib = lutIndex(c, b.pixel(x, y));
      EXPECT_NE(ia, -2) << what << ": pixel " << x << "," << y << " is not a colour of the map";
      if ((ia < 0) != (ib < 0) || std::abs(ia - ib) > 1) {
        ADD_FAILURE() << what << ": pixel " << x << "," << y << " vulkan " << ia << " cpu " << ib;
        return differ + 1;
      }
      differ += ia != ib;
    }
  return differ;
}

}  // namespace

TEST(VulkanHeatmapRenderer, MatchesCpuRenderer_RaggedNanZoomAllMaps) {
  auto r = gpu();
  if (!r) GTEST_SKIP() << "no Vulkan device";
  EXPECT_EQ(r->name(), "vulkan");
  const int rows = 150, cols = 220;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::vector<float>> m(rows);
  HeatmapData data(cols, 42);
  for (int i = 0; i < rows; ++i) {
    const int len = i % 7 == 3 ? 0 : std::min(cols, 20 + (i * 37) % (cols + 40));  // ragged, some empty
    m[i].resize(static_cast<size_t>(len));
    for (float& v : m[i]) v = nd(rng);
    if (len > 10 && i % 5 == 0) m[i][static_cast<size_t>(i % len)] = std::nanf("");
    data.addRow(m[i].data(), len);
  }
  CpuHeatmapRenderer cpu;
  const QRectF windows[] = {QRectF(0, 0, cols, rows), QRectF(10.3, 5.7, 31.1, 17.9), QRectF(-20, -10, 300, 200),
                            QRectF(100, 40, 400, 300), QRectF(3, 3, 2.5, 1.5)};
  const QSize sizes[] = {QSize(97, 61), QSize(220, 150), QSize(640, 333)};
  int total = 0, differ = 0;
  for (Colormap c : {Colormap::Viridis, Colormap::Magma, Colormap::Diverging, Colormap::Gray})
    for (Pooling p : {Pooling::Max, Pooling::MaxAbs})
      for (const QRectF& w : windows)
        for (const QSize& s : sizes) {
          HeatmapStyle st{-1.5f, 2.0f, c, p};
          const std::string what = "map " + std::to_string(static_cast<int>(c)) + " pool " +
                                   std::to_string(static_cast<int>(p)) + " window " + std::to_string(w.x()) + "," +
                                   std::to_string(w.y()) + " size " + std::to_string(s.width());
          differ += compareImages(r->render(data, w, st, s), cpu.render(data, w, st, s), c, what);
          total += s.width() * s.height();
          if (HasFailure()) return;
        }
  EXPECT_LE(differ, total / 1000) << "more than 0.1% of pixels one colour step apart";
  EXPECT_EQ(r->cpuFallbacks(), 0);
}

TEST(VulkanHeatmapRenderer, Downsampling_KeepsTheHotCell) {
  auto r = gpu();
  if (!r) GTEST_SKIP() << "no Vulkan device";
  hl::test::expectHotCellSurvivesDownsampling(*r);
}

TEST(VulkanHeatmapRenderer, NewDataVersion_IsUploadedAgain) {
  auto r = gpu();
  if (!r) GTEST_SKIP() << "no Vulkan device";
  std::vector<float> a(64, 0.0f), b(64, 1.0f);
  HeatmapData da(8, 1), db(8, 2);
  for (int i = 0; i < 8; ++i) {
    da.addRow(&a[i * 8], 8);
    db.addRow(&b[i * 8], 8);
  }
  const HeatmapStyle st{0.0f, 1.0f, Colormap::Gray, Pooling::Max};
  EXPECT_EQ(qRed(r->render(da, QRectF(0, 0, 8, 8), st, QSize(8, 8)).pixel(3, 3)), 0);
  EXPECT_EQ(qRed(r->render(db, QRectF(0, 0, 8, 8), st, QSize(8, 8)).pixel(3, 3)), 255);
  EXPECT_EQ(qRed(r->render(da, QRectF(0, 0, 8, 8), st, QSize(8, 8)).pixel(3, 3)), 0);
}

TEST(VulkanHeatmapRenderer, Install_NewHeatmapsUseIt) {
  if (!gpu()) GTEST_SKIP() << "no Vulkan device";
  ASSERT_TRUE(installVulkanHeatmapRenderer(/*allowCpuDevice=*/true));
  EXPECT_EQ(makeHeatmapRenderer()->name(), "vulkan");
  setHeatmapRendererFactory(nullptr);  // leave the other tests on the CPU renderer
  EXPECT_EQ(makeHeatmapRenderer()->name(), "cpu");
}
