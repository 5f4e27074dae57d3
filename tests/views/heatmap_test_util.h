// A check every heatmap renderer must pass (test_heatmap.cpp for the CPU one, test_vulkan_heatmap.cpp
// for the Vulkan one): max pooling keeps a single hot cell through 10× downsampling.
#pragma once
#include <gtest/gtest.h>

#include <vector>

#include "views/heatmap_widget.h"

namespace hl::test {

// A 1000 × 1000 matrix of zeros but one cell (row 537, column 911) of 1, drawn at 100 × 100 in
// grey: exactly one pixel is white, the one at (91, 53).
inline void expectHotCellSurvivesDownsampling(hl::views::HeatmapRenderer& r) {
  const int n = 1000;
  std::vector<float> m(n * n, 0.0f);
  m[537 * n + 911] = 1.0f;  // one hot cell
  const QImage img = r.render(m.data(), n, n, 0.0f, 1.0f, QSize(100, 100), hl::views::Colormap::Gray);
  int hot = 0;
  for (int y = 0; y < 100; ++y)
    for (int x = 0; x < 100; ++x)
      if (qRed(img.pixel(x, y)) == 255) {
        ++hot;
        EXPECT_EQ(x, 91);
        EXPECT_EQ(y, 53);
      }
  EXPECT_EQ(hot, 1);
}

}  // namespace hl::test
