// Vulkan heatmap renderer (see vulkan_heatmap_renderer.h): per render, the window's cells (dense,
// from the first row and column the window touches), the pixel spans, row lengths and colour map go
// to host-visible buffers, shaders/heatmap.comp pools one pixel per thread, and the image comes back
// in one readback. Cells are re-sent only when the data version or the window's cells change.
// Reference: CpuHeatmapRenderer in heatmap_widget.cpp (pooling order, colour index; the pixel spans
// are the same function, heatmapPixelSpans).
#include "views/vulkan_heatmap_renderer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#ifdef HL_HAVE_VULKAN
#include "engine/backend/vulkan/vk_context.h"
#include "engine/backend/vulkan/vulkan_backend.h"
#endif

namespace hl::views {

#ifdef HL_HAVE_VULKAN

struct VulkanHeatmapRenderer::Impl {
  std::shared_ptr<vk::Context> ctx;
  vk::Buffer cells, ints, image, dummy;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  VkDescriptorPool dpool = VK_NULL_HANDLE;
  VkDescriptorSet set = VK_NULL_HANDLE;
  VkBuffer bound[3] = {};  // cells, image, ints in `set`
  bool cached = false;     // cells holds (version, rows [r0, r1), columns [c0, c1))
  uint64_t version = 0;
  int r0 = 0, r1 = 0, c0 = 0, c1 = 0;
  bool failed = false;
  int fallbacks = 0;

  ~Impl() {
    if (!ctx) return;
    VkDevice d = ctx->device();
    if (dpool) vkDestroyDescriptorPool(d, dpool, nullptr);
    if (pool) vkDestroyCommandPool(d, pool, nullptr);
    if (fence) vkDestroyFence(d, fence, nullptr);
  }

  void setup(bool allowCpu) {
    ctx = vk::Context::get(!allowCpu);
    VkDevice d = ctx->device();
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, nullptr,
                               VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, ctx->queue_family()};
    ctx->check(vkCreateCommandPool(d, &pi, nullptr, &pool), "creating a command pool");
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, nullptr, pool,
                                   VK_COMMAND_BUFFER_LEVEL_PRIMARY, 1};
    ctx->check(vkAllocateCommandBuffers(d, &ai, &cmd), "allocating a command buffer");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO, nullptr, 0};
    ctx->check(vkCreateFence(d, &fi, nullptr, &fence), "creating a fence");
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, vk::kBindingCount};
    VkDescriptorPoolCreateInfo dp{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, nullptr, 0, 1, 1, &size};
    ctx->check(vkCreateDescriptorPool(d, &dp, nullptr, &dpool), "creating a descriptor pool");
    VkDescriptorSetLayout layout = ctx->set_layout();
    VkDescriptorSetAllocateInfo si{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, nullptr, dpool, 1, &layout};
    ctx->check(vkAllocateDescriptorSets(d, &si, &set), "allocating a descriptor set");
    dummy = vk::Buffer(ctx, 256, vk::MemKind::Upload, "a placeholder binding");
  }

  // Buffers of at least the given bytes (grown, never shrunk); the descriptor set follows them.
  void reserve(VkDeviceSize cellBytes, VkDeviceSize intBytes, VkDeviceSize imageBytes) {
    if (!cells.valid() || cells.size() < cellBytes) {
      cells = vk::Buffer(ctx, std::max(cellBytes, cells.size() * 2), vk::MemKind::Upload, "heatmap cells");
      cached = false;
    }
    if (!ints.valid() || ints.size() < intBytes)
      ints = vk::Buffer(ctx, std::max(intBytes, ints.size() * 2), vk::MemKind::Upload, "heatmap spans");
    if (!image.valid() || image.size() < imageBytes)
      image = vk::Buffer(ctx, std::max(imageBytes, image.size() * 2), vk::MemKind::Readback, "the heatmap image");
    if (bound[0] == cells.handle() && bound[1] == image.handle() && bound[2] == ints.handle()) return;
    VkDescriptorBufferInfo info[vk::kBindingCount];
    VkWriteDescriptorSet writes[vk::kBindingCount];
    for (int i = 0; i < vk::kBindingCount; ++i) {
      VkBuffer b = i == vk::kAct     ? cells.handle()
                   : i == vk::kRec   ? image.handle()
                   : i == vk::kRoute ? ints.handle()
                                     : dummy.handle();
      info[i] = VkDescriptorBufferInfo{b, 0, VK_WHOLE_SIZE};
      writes[i] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                       nullptr,
                                       set,
                                       static_cast<uint32_t>(i),
                                       0,
                                       1,
                                       VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                       nullptr,
                                       &info[i],
                                       nullptr};
    }
    vkUpdateDescriptorSets(ctx->device(), vk::kBindingCount, writes, 0, nullptr);
    bound[0] = cells.handle();
    bound[1] = image.handle();
    bound[2] = ints.handle();
  }

  void run(const vk::HeatmapPC& pc) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, nullptr,
                                VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, nullptr};
    ctx->check(vkResetCommandBuffer(cmd, 0), "rendering a heatmap");
    ctx->check(vkBeginCommandBuffer(cmd, &bi), "rendering a heatmap");
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, ctx->pipeline(vk::Kernel::Heatmap));
    vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, ctx->pipeline_layout(), 0, 1, &set, 0, nullptr);
    vkCmdPushConstants(cmd, ctx->pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, &pc);
    vkCmdDispatch(cmd, static_cast<uint32_t>((pc.W + 15) / 16), static_cast<uint32_t>((pc.H + 15) / 16), 1);
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT};
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr,
                         0, nullptr);
    ctx->check(vkEndCommandBuffer(cmd), "rendering a heatmap");
    ctx->submit_wait(cmd, fence, "rendering a heatmap");
  }
};

std::unique_ptr<VulkanHeatmapRenderer> VulkanHeatmapRenderer::create(bool allowCpuDevice) {
  try {
    if (!vulkan_available(!allowCpuDevice)) return nullptr;
    auto impl = std::make_unique<Impl>();
    impl->setup(allowCpuDevice);
    return std::unique_ptr<VulkanHeatmapRenderer>(new VulkanHeatmapRenderer(std::move(impl)));
  } catch (const std::exception&) {
    return nullptr;
  }
}

QImage VulkanHeatmapRenderer::render(const HeatmapData& data, const QRectF& window, const HeatmapStyle& style,
                                     QSize size) {
  const int W = std::max(1, size.width()), H = std::max(1, size.height());
  if (d_->failed) {
    ++d_->fallbacks;
    return cpu_.render(data, window, style, size);
  }
  // The shader maps values linearly; log and power scales are drawn by the CPU renderer (same
  // pooling, so the same picture), not counted as a device fallback.
  if (style.scale != ColorScale::Linear) return cpu_.render(data, window, style, size);
  QImage img(W, H, QImage::Format_ARGB32_Premultiplied);
  img.fill(Qt::transparent);
  if (data.rows() == 0 || data.cols() == 0 || window.width() <= 0 || window.height() <= 0) return img;
  std::vector<int> cb, ce, rb, re;
  heatmapPixelSpans(window.left(), window.right(), W, data.cols(), &cb, &ce);
  heatmapPixelSpans(window.top(), window.bottom(), H, data.rows(), &rb, &re);
  // The cells the window touches. Pixels past the data have empty spans whose begin can lie beyond
  // it (as in the CPU renderer): clip to the data so only existing rows are read.
  const int c0 = std::min(cb[0], data.cols()), c1 = std::min(std::max(c0, ce[W - 1]), data.cols());
  const int r0 = std::min(rb[0], data.rows()), r1 = std::min(std::max(r0, re[H - 1]), data.rows());
  const int nr = r1 - r0, nc = c1 - c0;
  if (nr == 0 || nc == 0) return img;
  const VkDeviceSize cellBytes = static_cast<VkDeviceSize>(nr) * nc * 4;
  const int nint = 256 + 2 * W + 2 * H + nr;
  const VkDeviceSize range = d_->ctx->max_range();
  if (cellBytes > range || static_cast<VkDeviceSize>(W) * H * 4 > range) {
    ++d_->fallbacks;  // the visible cells do not fit one buffer binding of this device
    return cpu_.render(data, window, style, size);
  }
  try {
    d_->reserve(cellBytes, static_cast<VkDeviceSize>(nint) * 4, static_cast<VkDeviceSize>(W) * H * 4);
    int32_t* iv = static_cast<int32_t*>(d_->ints.mapped());
    const QVector<QRgb>& lut = colormapLut(style.cmap);
    for (int i = 0; i < 256; ++i) iv[i] = static_cast<int32_t>(lut[i]);
    const int cbo = 256, ceo = cbo + W, rbo = ceo + W, reo = rbo + H, leno = reo + H;
    std::copy(cb.begin(), cb.end(), iv + cbo);
    std::copy(ce.begin(), ce.end(), iv + ceo);
    std::copy(rb.begin(), rb.end(), iv + rbo);
    std::copy(re.begin(), re.end(), iv + reo);
    // Version 0 is the dense convenience path (any data): never cached.
    const bool hit = d_->cached && data.version() != 0 && d_->version == data.version() && d_->r0 == r0 &&
                     d_->r1 == r1 && d_->c0 == c0 && d_->c1 == c1;
    float* cells = static_cast<float*>(d_->cells.mapped());
    for (int r = r0; r < r1; ++r) {
      int len = 0;
      const float* p = data.row(r, &len);
      len = p ? std::min(len, c1) : 0;
      iv[leno + r - r0] = len;
      if (!hit && len > c0) std::memcpy(cells + static_cast<int64_t>(r - r0) * nc, p + c0, (len - c0) * sizeof(float));
    }
    d_->cached = true;
    d_->version = data.version();
    d_->r0 = r0;
    d_->r1 = r1;
    d_->c0 = c0;
    d_->c1 = c1;
    const float span = style.hi > style.lo ? style.hi - style.lo : 1.0f;
    vk::HeatmapPC pc{W,   H,   r0,  c0,  nc,  style.lo, span, style.pool == Pooling::MaxAbs ? 1u : 0u,
                     cbo, ceo, rbo, reo, leno};
    d_->run(pc);
    const uint32_t* px = static_cast<const uint32_t*>(d_->image.mapped());
    for (int y = 0; y < H; ++y)
      std::memcpy(img.scanLine(y), px + static_cast<int64_t>(y) * W, static_cast<size_t>(W) * 4);
    return img;
  } catch (const std::exception&) {
    d_->failed = true;  // a device failure: the CPU renderer from now on
    ++d_->fallbacks;
    return cpu_.render(data, window, style, size);
  }
}

QString VulkanHeatmapRenderer::name() const {
  return d_->failed ? QStringLiteral("cpu") : QStringLiteral("vulkan");
}
int VulkanHeatmapRenderer::cpuFallbacks() const {
  return d_->fallbacks;
}

#else  // no Vulkan in this build: create() gives null, so callers keep the CPU renderer

struct VulkanHeatmapRenderer::Impl {};
std::unique_ptr<VulkanHeatmapRenderer> VulkanHeatmapRenderer::create(bool) {
  return nullptr;
}
QImage VulkanHeatmapRenderer::render(const HeatmapData& data, const QRectF& window, const HeatmapStyle& style,
                                     QSize size) {
  return cpu_.render(data, window, style, size);
}
QString VulkanHeatmapRenderer::name() const {
  return QStringLiteral("cpu");
}
int VulkanHeatmapRenderer::cpuFallbacks() const {
  return 0;
}

#endif

VulkanHeatmapRenderer::VulkanHeatmapRenderer(std::unique_ptr<Impl> impl) : d_(std::move(impl)) {}
VulkanHeatmapRenderer::~VulkanHeatmapRenderer() = default;

bool installVulkanHeatmapRenderer(bool allowCpuDevice) {
  if (!VulkanHeatmapRenderer::create(allowCpuDevice)) return false;
  setHeatmapRendererFactory(
      [allowCpuDevice]() -> std::unique_ptr<HeatmapRenderer> { return VulkanHeatmapRenderer::create(allowCpuDevice); });
  return true;
}

}  // namespace hl::views
