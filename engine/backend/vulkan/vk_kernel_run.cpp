// run_kernel (vk_kernel_run.h): host-visible buffers for the eight bindings, one descriptor set, one
// command buffer with one dispatch, one submission, then the buffers copied back. Everything made
// here is destroyed before return.
#include "engine/backend/vulkan/vk_kernel_run.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "engine/backend/vulkan/vk_context.h"

namespace hl::vk {

void run_kernel(KernelCall& c) {
  std::shared_ptr<Context> ctx = Context::get(false);
  VkDevice d = ctx->device();
  Buffer bufs[kBindingCount];
  for (int i = 0; i < kBindingCount; ++i) {
    const VkDeviceSize bytes = std::max<VkDeviceSize>(256, c.bind[i].size() * 4);
    bufs[i] = Buffer(ctx, bytes, MemKind::Readback, "a kernel test binding");
    std::memset(bufs[i].mapped(), 0, bytes);
    if (!c.bind[i].empty()) std::memcpy(bufs[i].mapped(), c.bind[i].data(), c.bind[i].size() * 4);
  }
  VkDescriptorPool pool = VK_NULL_HANDLE;
  VkCommandPool cpool = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  auto cleanup = [&] {
    if (fence) vkDestroyFence(d, fence, nullptr);
    if (cpool) vkDestroyCommandPool(d, cpool, nullptr);
    if (pool) vkDestroyDescriptorPool(d, pool, nullptr);
  };
  try {
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kBindingCount};
    VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = 1;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &size;
    ctx->check(vkCreateDescriptorPool(d, &pi, nullptr, &pool), "creating a descriptor pool");
    VkDescriptorSetLayout layout = ctx->set_layout();
    VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
    ai.descriptorPool = pool;
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &layout;
    VkDescriptorSet set = VK_NULL_HANDLE;
    ctx->check(vkAllocateDescriptorSets(d, &ai, &set), "allocating a descriptor set");
    VkBuffer handles[kBindingCount];
    for (int i = 0; i < kBindingCount; ++i) handles[i] = bufs[i].handle();
    write_bindings(d, set, handles);
    VkCommandPoolCreateInfo ci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    ci.queueFamilyIndex = ctx->queue_family();
    ctx->check(vkCreateCommandPool(d, &ci, nullptr, &cpool), "creating a command pool");
    VkCommandBufferAllocateInfo cai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cai.commandPool = cpool;
    cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cai.commandBufferCount = 1;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    ctx->check(vkAllocateCommandBuffers(d, &cai, &cmd), "allocating a command buffer");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    ctx->check(vkCreateFence(d, &fi, nullptr, &fence), "creating a fence");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    ctx->check(vkBeginCommandBuffer(cmd, &bi), "recording a kernel test");
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, ctx->pipeline(c.kernel, c.dtype));
    vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, ctx->pipeline_layout(), 0, 1, &set, 0, nullptr);
    if (!c.push.empty())
      vkCmdPushConstants(cmd, ctx->pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0,
                         static_cast<uint32_t>(c.push.size()), c.push.data());
    vkCmdDispatch(cmd, c.gx, c.gy, c.gz);
    ctx->check(vkEndCommandBuffer(cmd), "recording a kernel test");
    ctx->submit_wait(cmd, fence, "a kernel test");
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
  for (int i = 0; i < kBindingCount; ++i)
    if (!c.bind[i].empty()) std::memcpy(c.bind[i].data(), bufs[i].mapped(), c.bind[i].size() * 4);
}

}  // namespace hl::vk
