// The GPU heatmap renderer (issue 5 item 7, DESIGN.md "views"): the HeatmapRenderer interface drawn
// offscreen by a Vulkan compute kernel (shaders/heatmap.comp) into an image the widget paints — the
// same pixels as CpuHeatmapRenderer (its pooling order and colour maps), which it falls back to when
// no device exists, the window does not fit the device, or the device fails.
#pragma once
#include <memory>

#include "views/heatmap_widget.h"

namespace hl::views {

class VulkanHeatmapRenderer : public HeatmapRenderer {
 public:
  // A renderer on a Vulkan GPU (with allowCpuDevice also lavapipe and other CPU devices), or null
  // when there is none or Vulkan is not built. Never throws.
  static std::unique_ptr<VulkanHeatmapRenderer> create(bool allowCpuDevice = false);
  ~VulkanHeatmapRenderer() override;
  // "vulkan", or "cpu" once a device failure has switched it to the CPU renderer for good.
  QString name() const override;
  using HeatmapRenderer::render;
  QImage render(const HeatmapData& data, const QRectF& window, const HeatmapStyle& style, QSize size) override;
  // Renders that fell back to the CPU (window too large for one buffer, or a device failure).
  int cpuFallbacks() const;

 private:
  struct Impl;
  explicit VulkanHeatmapRenderer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> d_;
  CpuHeatmapRenderer cpu_;
};

// New heatmaps render with Vulkan when a device exists (setHeatmapRendererFactory); returns
// whether one does. The app calls it once at start-up.
bool installVulkanHeatmapRenderer(bool allowCpuDevice = false);

}  // namespace hl::views
