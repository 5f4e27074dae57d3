// The Vulkan device of the Vulkan backend: instance, device choice, the compute queue, the one
// descriptor-set and pipeline layout every kernel uses, the kernels' pipelines, buffers with their
// memory, and the translation of Vulkan failures into hl::BackendFailure. Not the model: see
// vulkan_backend.h. Reference: the Vulkan 1.1 specification (compute-only use, no window system).
#pragma once
#include <vulkan/vulkan.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/backend/backend.h"
#include "engine/backend/backend_util.h"
#include "engine/backend/vulkan/vk_kernels.h"

namespace hl::vk {

const char* result_name(VkResult r);
// "512 bytes", "12.5 KiB", "3.0 MiB", "1.25 GiB": sizes in messages.
std::string format_bytes(uint64_t bytes);

// Device: device-local (mapped as well when the device shares host memory, as lavapipe and
// integrated GPUs do); Upload: host-visible, coherent (staging, per-step parameters); Readback:
// host-visible, coherent, cached when possible (the records).
enum class MemKind { Device, Upload, Readback };

class Context;

// Points binding i of `set` (the universal layout) at the whole of buffers[i], for every binding.
void write_bindings(VkDevice d, VkDescriptorSet set, const VkBuffer* buffers);

// One VkBuffer with its own memory, usable as a storage buffer and as a copy source/destination.
class Buffer {
 public:
  Buffer() = default;
  // Throws BackendFailure ("vulkan: out of device memory for <what> ...").
  Buffer(std::shared_ptr<Context> ctx, VkDeviceSize size, MemKind kind, const std::string& what);
  ~Buffer() { release(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buf_; }
  VkDeviceSize size() const { return size_; }
  void* mapped() const { return map_; }  // null unless host-visible
  bool valid() const { return buf_ != VK_NULL_HANDLE; }

 private:
  void release();
  std::shared_ptr<Context> ctx_;
  VkBuffer buf_ = VK_NULL_HANDLE;
  VkDeviceMemory mem_ = VK_NULL_HANDLE;
  VkDeviceSize size_ = 0;
  VkDeviceSize charged_ = 0;  // bytes counted against the device budget
  void* map_ = nullptr;
};

class Context : public std::enable_shared_from_this<Context> {
 public:
  // The process-wide context on the preferred device: HL_VULKAN_DEVICE=i picks device i, else the
  // first discrete, then integrated, virtual, and (unless gpu_only) CPU device (lavapipe). CPU
  // devices count as GPUs when HL_VULKAN_ALLOW_CPU_DEVICE=1 (tests of the `auto` fallback).
  // Shared by the backends of the process; a lost context is dropped and the next get() makes a
  // new one. Throws BackendFailure with the reason when no usable device exists. slot >= 0 (a
  // pipeline stage's index on its host, VulkanOptions::device_slot): among several devices of the
  // preferred kind, the (slot mod their count)-th in enumeration order, one GPU per stage.
  static std::shared_ptr<Context> get(bool gpu_only, int slot = -1);
  // Whether get(gpu_only) would find a device (enumerates once per process; never throws).
  static bool available(bool gpu_only);
  // The device get(false) uses, "NAME: discrete GPU" ... "NAME: CPU emulation ...", or why none.
  static std::string describe_device();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  VkDevice device() const { return device_; }
  const VkPhysicalDeviceProperties& props() const { return props_; }
  std::string device_name() const { return props_.deviceName; }
  bool cpu_device() const { return props_.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU; }
  uint32_t queue_family() const { return family_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  VkPipelineLayout pipeline_layout() const { return pipe_layout_; }
  VkPipeline pipeline(Kernel k, uint32_t dtype = 0);  // dtype: specialization constant 0; built on first use
  // Largest storage-buffer binding and single allocation the device allows.
  VkDeviceSize max_range() const { return max_range_; }
  // Device-local bytes this process may still allocate: the heap size (or HL_VULKAN_MEMORY_LIMIT)
  // minus what every backend holds.
  VkDeviceSize device_free() const;
  VkDeviceSize device_heap() const;

  // Submits one command buffer and waits for it. Throws BackendFailure; a lost device (or the
  // simulated loss of HL_VULKAN_FAIL_AFTER=n submissions) leaves this context lost for good.
  void submit_wait(VkCommandBuffer cmd, VkFence fence, const char* what);
  // Throws BackendFailure naming `what` unless r is VK_SUCCESS.
  void check(VkResult r, const std::string& what);
  bool lost() const { return lost_.load(); }
  // Test hook: the submission after the next `submissions` ones fails as a lost device would.
  void simulate_loss_after(int64_t submissions);
  static void simulate_loss_everywhere(int64_t submissions);  // every live context

 private:
  Context() = default;
  void create(int index);
  uint32_t memory_type(uint32_t type_bits, MemKind kind, bool* host_visible) const;
  friend class Buffer;

  VkInstance instance_ = VK_NULL_HANDLE;
  VkPhysicalDevice phys_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_ = 0;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties mem_{};
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipe_layout_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  // (kernel, device dtype: the index into kDeviceWeightTypes)
  std::array<std::array<VkPipeline, std::size(kDeviceWeightTypes)>, static_cast<size_t>(Kernel::Count)> pipes_{};
  VkDeviceSize max_range_ = 0;
  VkDeviceSize heap_bytes_ = 0;
  uint32_t device_heap_index_ = 0;
  std::atomic<uint64_t> used_{0};
  std::atomic<bool> lost_{false};
  int64_t fail_after_ = -1;  // HL_VULKAN_FAIL_AFTER
  int64_t submits_ = 0;
  std::mutex mu_;  // queue submissions and pipeline creation
};

}  // namespace hl::vk
