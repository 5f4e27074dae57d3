// Vulkan device, queue, layouts, pipelines and buffers (see vk_context.h). Device choice ranks
// discrete > integrated > virtual GPU > CPU device; memory is checked against the heap before any
// large allocation so "not enough memory" is a clear message, not a driver failure mid-upload.
// Test hooks (documented in README): HL_VULKAN_DEVICE, HL_VULKAN_ALLOW_CPU_DEVICE,
// HL_VULKAN_MEMORY_LIMIT (bytes), HL_VULKAN_FAIL_AFTER (simulated device loss after n submissions).
#include "engine/backend/vulkan/vk_context.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace hl::vk {
namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  return (end && *end == '\0') ? static_cast<int64_t>(x) : fallback;
}

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  for (const VkExtensionProperties& e : list)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

// A headless instance for Vulkan 1.1; enumerates portability (MoltenVK) devices too.
VkInstance make_instance() {
  auto enumerate_version =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(vkGetInstanceProcAddr(nullptr, "vkEnumerateInstanceVersion"));
  uint32_t version = VK_API_VERSION_1_0;
  if (enumerate_version) enumerate_version(&version);
  if (version < VK_API_VERSION_1_1)
    throw BackendFailure("vulkan: the Vulkan loader supports only Vulkan 1.0 (1.1 needed)");
  uint32_t n = 0;
  vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateInstanceExtensionProperties(nullptr, &n, exts.data());
  std::vector<const char*> enable;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  if (has_extension(exts, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    enable.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "HybridLens";
  app.pEngineName = "hybridlens-engine";
  app.apiVersion = VK_API_VERSION_1_1;
  ci.pApplicationInfo = &app;
  ci.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  ci.ppEnabledExtensionNames = enable.data();
  VkInstance inst = VK_NULL_HANDLE;
  const VkResult r = vkCreateInstance(&ci, nullptr, &inst);
  if (r != VK_SUCCESS)
    throw BackendFailure(std::string("vulkan: no Vulkan driver (vkCreateInstance: ") + result_name(r) + ")");
  return inst;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst) {
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> d(n);
  if (n) vkEnumeratePhysicalDevices(inst, &n, d.data());
  d.resize(n);
  return d;
}

int type_rank(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return 3;
    default:
      return 4;
  }
}

// Empty when the device can run the kernels, else why not.
std::string unsuitable(VkPhysicalDevice d) {
  VkPhysicalDeviceProperties p;
  vkGetPhysicalDeviceProperties(d, &p);
  if (p.apiVersion < VK_API_VERSION_1_1) return "supports only Vulkan 1.0";
  const VkPhysicalDeviceLimits& l = p.limits;
  if (l.maxComputeWorkGroupInvocations < 256 || l.maxComputeWorkGroupSize[0] < 256 || l.maxComputeWorkGroupSize[1] < 16)
    return "compute workgroups smaller than 256 invocations";
  if (l.maxPerStageDescriptorStorageBuffers < kBindingCount)
    return "fewer than " + std::to_string(kBindingCount) + " storage buffers per stage";
  if (l.maxPushConstantsSize < 128) return "push constants smaller than 128 bytes";
  if (l.maxComputeSharedMemorySize < 8192) return "less than 8 KiB of shared memory";
  VkPhysicalDeviceSubgroupProperties sg{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sg;
  vkGetPhysicalDeviceProperties2(d, &p2);
  const VkSubgroupFeatureFlags need = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT;
  if (!(sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) || (sg.supportedOperations & need) != need)
    return "no subgroup arithmetic in compute shaders";
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(d, &n, nullptr);
  std::vector<VkQueueFamilyProperties> q(n);
  vkGetPhysicalDeviceQueueFamilyProperties(d, &n, q.data());
  for (const VkQueueFamilyProperties& f : q)
    if (f.queueFlags & VK_QUEUE_COMPUTE_BIT) return "";
  return "no compute queue";
}

struct DeviceEntry {
  std::string name;
  int rank;         // type_rank
  std::string bad;  // empty: usable
};

// The devices of this machine in enumeration order, listed once per process ("" in *error when
// there is no driver at all).
const std::vector<DeviceEntry>& device_list(std::string* error) {
  static std::once_flag once;
  static std::vector<DeviceEntry> list;
  static std::string err;
  std::call_once(once, [] {
    try {
      VkInstance inst = make_instance();
      for (VkPhysicalDevice d : physical_devices(inst)) {
        VkPhysicalDeviceProperties p;
        vkGetPhysicalDeviceProperties(d, &p);
        list.push_back(DeviceEntry{p.deviceName, type_rank(p.deviceType), unsuitable(d)});
      }
      vkDestroyInstance(inst, nullptr);
    } catch (const std::exception& e) {
      err = e.what();
    }
  });
  *error = err;
  return list;
}

// Index of the device get(gpu_only, slot) uses, or -1 with the reason in *why. Reads the
// environment (HL_VULKAN_DEVICE, HL_VULKAN_ALLOW_CPU_DEVICE) on every call.
int choose_device(bool gpu_only, int slot, std::string* why) {
  std::string error;
  const std::vector<DeviceEntry>& devs = device_list(&error);
  if (!error.empty()) {
    *why = error;
    return -1;
  }
  if (devs.empty()) {
    *why = "vulkan: no Vulkan device found";
    return -1;
  }
  const int64_t forced = env_int("HL_VULKAN_DEVICE", -1);
  if (forced >= 0) {
    if (forced >= static_cast<int64_t>(devs.size())) {
      *why = "vulkan: HL_VULKAN_DEVICE=" + std::to_string(forced) + " is out of range [0, " +
             std::to_string(devs.size()) + ")";
      return -1;
    }
    if (!devs[forced].bad.empty()) {
      *why = "vulkan: device " + std::to_string(forced) + " cannot run the kernels: " + devs[forced].bad;
      return -1;
    }
    return static_cast<int>(forced);
  }
  const bool cpu_ok = !gpu_only || env_int("HL_VULKAN_ALLOW_CPU_DEVICE", 0) == 1;
  int best_rank = 99;
  std::vector<int> best;  // the usable devices of the best kind, in enumeration order
  std::string reasons;
  for (size_t i = 0; i < devs.size(); ++i) {
    const DeviceEntry& d = devs[i];
    if (d.rank >= 3 && !cpu_ok) {
      reasons += (reasons.empty() ? "" : "; ") + d.name + " is not a GPU";
      continue;
    }
    if (!d.bad.empty()) {
      reasons += (reasons.empty() ? "" : "; ") + d.name + ": " + d.bad;
      continue;
    }
    if (d.rank < best_rank) best.clear();
    if (d.rank <= best_rank) {
      best.push_back(static_cast<int>(i));
      best_rank = d.rank;
    }
  }
  if (best.empty()) {
    *why = "vulkan: no usable Vulkan " + std::string(gpu_only ? "GPU" : "device") + " (" + reasons + ")";
    return -1;
  }
  return best[static_cast<size_t>(std::max(slot, 0)) % best.size()];
}

std::mutex g_mu;
std::map<int, std::weak_ptr<Context>> g_live;

}  // namespace

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  if (bytes < 1024)
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  else if (bytes < (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  else if (bytes < (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  else
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / 1073741824.0);
  return buf;
}

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_NOT_READY:
      return "VK_NOT_READY";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED:
      return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FRAGMENTED_POOL:
      return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY:
      return "VK_ERROR_OUT_OF_POOL_MEMORY";
    default:
      return "VkResult error";
  }
}

bool Context::available(bool gpu_only) {
  std::string why;
  return choose_device(gpu_only, -1, &why) >= 0;
}

std::string Context::describe_device() {
  std::string why, error;
  const int index = choose_device(false, -1, &why);
  if (index < 0) return why;
  const DeviceEntry& d = device_list(&error)[static_cast<size_t>(index)];
  static const char* const kinds[] = {"discrete GPU", "integrated GPU", "virtual GPU",
                                      "CPU emulation of a Vulkan device, decode ~100x slower than cpu", "other device"};
  return d.name + ": " + kinds[std::min(d.rank, 4)];
}

std::shared_ptr<Context> Context::get(bool gpu_only, int slot) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string why;
  const int index = choose_device(gpu_only, slot, &why);
  if (index < 0) throw BackendFailure(why);
  if (std::shared_ptr<Context> c = g_live[index].lock(); c && !c->lost()) return c;
  std::shared_ptr<Context> c(new Context());
  c->create(index);
  g_live[index] = c;
  return c;
}

void Context::simulate_loss_after(int64_t submissions) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_after_ = submits_ + submissions;
}

void Context::simulate_loss_everywhere(int64_t submissions) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& [index, weak] : g_live)
    if (std::shared_ptr<Context> c = weak.lock()) c->simulate_loss_after(submissions);
}

void Context::create(int index) {
  instance_ = make_instance();
  phys_ = physical_devices(instance_).at(static_cast<size_t>(index));
  vkGetPhysicalDeviceProperties(phys_, &props_);
  vkGetPhysicalDeviceMemoryProperties(phys_, &mem_);
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &m3;
  vkGetPhysicalDeviceProperties2(phys_, &p2);
  max_range_ = std::min<VkDeviceSize>(props_.limits.maxStorageBufferRange, m3.maxMemoryAllocationSize);

  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &n, nullptr);
  std::vector<VkQueueFamilyProperties> fams(n);
  vkGetPhysicalDeviceQueueFamilyProperties(phys_, &n, fams.data());
  int fam = -1;
  for (uint32_t i = 0; i < n && fam < 0; ++i)  // a compute-only family first (async compute), else any
    if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT))
      fam = static_cast<int>(i);
  for (uint32_t i = 0; i < n && fam < 0; ++i)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = static_cast<int>(i);
  family_ = static_cast<uint32_t>(fam);

  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(phys_, nullptr, &n, exts.data());
  std::vector<const char*> enable;
  if (has_extension(exts, "VK_KHR_portability_subset")) enable.push_back("VK_KHR_portability_subset");
  const float prio = 1.0f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = family_;
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  di.enabledExtensionCount = static_cast<uint32_t>(enable.size());
  di.ppEnabledExtensionNames = enable.data();
  check(vkCreateDevice(phys_, &di, nullptr, &device_), "creating the device");
  vkGetDeviceQueue(device_, family_, 0, &queue_);

  std::array<VkDescriptorSetLayoutBinding, kBindingCount> b{};
  for (int i = 0; i < kBindingCount; ++i) {
    b[i].binding = static_cast<uint32_t>(i);
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.bindingCount = kBindingCount;
  li.pBindings = b.data();
  check(vkCreateDescriptorSetLayout(device_, &li, nullptr, &set_layout_), "creating the descriptor set layout");
  VkPushConstantRange pr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 128};
  VkPipelineLayoutCreateInfo pl{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pl.setLayoutCount = 1;
  pl.pSetLayouts = &set_layout_;
  pl.pushConstantRangeCount = 1;
  pl.pPushConstantRanges = &pr;
  check(vkCreatePipelineLayout(device_, &pl, nullptr, &pipe_layout_), "creating the pipeline layout");
  VkPipelineCacheCreateInfo pc{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  check(vkCreatePipelineCache(device_, &pc, nullptr, &cache_), "creating the pipeline cache");

  // The heap that holds device-local memory is the one the budget is about.
  bool hv = false;
  const uint32_t t = memory_type(~0u, MemKind::Device, &hv);
  device_heap_index_ = mem_.memoryTypes[t].heapIndex;
  heap_bytes_ = mem_.memoryHeaps[device_heap_index_].size;
  fail_after_ = env_int("HL_VULKAN_FAIL_AFTER", -1);
}

Context::~Context() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    for (const auto& per_dtype : pipes_)
      for (VkPipeline p : per_dtype)
        if (p) vkDestroyPipeline(device_, p, nullptr);
    if (cache_) vkDestroyPipelineCache(device_, cache_, nullptr);
    if (pipe_layout_) vkDestroyPipelineLayout(device_, pipe_layout_, nullptr);
    if (set_layout_) vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

void Context::check(VkResult r, const std::string& what) {
  if (r == VK_SUCCESS) return;
  const std::string dev = props_.deviceName[0] ? std::string(" on '") + props_.deviceName + "'" : "";
  if (r == VK_ERROR_DEVICE_LOST) {
    lost_ = true;
    throw BackendFailure("vulkan: device lost while " + what + dev + " (VK_ERROR_DEVICE_LOST)");
  }
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw BackendFailure("vulkan: out of memory while " + what + dev + " (" + result_name(r) + ")");
  throw BackendFailure("vulkan: " + what + " failed" + dev + " (" + result_name(r) + ")");
}

VkPipeline Context::pipeline(Kernel k, uint32_t dtype) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dtype >= pipes_[0].size()) throw BackendFailure("vulkan: no kernel reads weight dtype " + std::to_string(dtype));
  VkPipeline& p = pipes_[static_cast<size_t>(k)][dtype];
  if (p) return p;
  const Spirv s = kernel_spirv(k);
  VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mi.codeSize = s.count * 4;
  mi.pCode = s.words;
  VkShaderModule mod = VK_NULL_HANDLE;
  check(vkCreateShaderModule(device_, &mi, nullptr, &mod), std::string("loading kernel ") + s.name);
  VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  ci.stage.module = mod;
  ci.stage.pName = "main";
  const VkSpecializationMapEntry entry{0, 0, sizeof(uint32_t)};
  VkSpecializationInfo spec{1, &entry, sizeof(uint32_t), &dtype};
  ci.stage.pSpecializationInfo = &spec;
  ci.layout = pipe_layout_;
  const VkResult r = vkCreateComputePipelines(device_, cache_, 1, &ci, nullptr, &p);
  vkDestroyShaderModule(device_, mod, nullptr);
  check(r, std::string("building kernel ") + s.name);
  return p;
}

VkDeviceSize Context::device_heap() const {
  const int64_t limit = env_int("HL_VULKAN_MEMORY_LIMIT", -1);  // read each time: tests change it
  return limit >= 0 ? std::min<VkDeviceSize>(heap_bytes_, static_cast<VkDeviceSize>(limit)) : heap_bytes_;
}

VkDeviceSize Context::device_free() const {
  const uint64_t used = used_.load(), heap = device_heap();
  return used >= heap ? 0 : heap - used;
}

uint32_t Context::memory_type(uint32_t type_bits, MemKind kind, bool* host_visible) const {
  const VkMemoryPropertyFlags HV = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  std::vector<VkMemoryPropertyFlags> wants;
  if (kind == MemKind::Device)
    wants = {VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0};
  else if (kind == MemKind::Upload)
    wants = {HV};
  else
    wants = {HV | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, HV};
  for (VkMemoryPropertyFlags want : wants)
    for (uint32_t i = 0; i < mem_.memoryTypeCount; ++i)
      if ((type_bits & (1u << i)) && (mem_.memoryTypes[i].propertyFlags & want) == want) {
        *host_visible = (mem_.memoryTypes[i].propertyFlags & HV) == HV;
        return i;
      }
  throw BackendFailure("vulkan: device '" + device_name() + "' has no suitable memory type");
}

void write_bindings(VkDevice d, VkDescriptorSet set, const VkBuffer* buffers) {
  VkDescriptorBufferInfo infos[kBindingCount];
  VkWriteDescriptorSet writes[kBindingCount];
  for (int i = 0; i < kBindingCount; ++i) {
    infos[i] = VkDescriptorBufferInfo{buffers[i], 0, VK_WHOLE_SIZE};
    writes[i] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(d, kBindingCount, writes, 0, nullptr);
}

void Context::submit_wait(VkCommandBuffer cmd, VkFence fence, const char* what) {
  if (lost_)
    throw BackendFailure("vulkan: device '" + device_name() + "' was lost earlier; the Vulkan backend is disabled");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_after_ >= 0 && submits_ >= fail_after_) {
      lost_ = true;
      throw BackendFailure(std::string("vulkan: device lost while ") + what + " on '" + device_name() +
                           "' (simulated by HL_VULKAN_FAIL_AFTER)");
    }
    ++submits_;
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cmd;
    check(vkQueueSubmit(queue_, 1, &si, fence), what);
  }
  check(vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX), what);
  check(vkResetFences(device_, 1, &fence), what);
}

Buffer::Buffer(std::shared_ptr<Context> ctx, VkDeviceSize size, MemKind kind, const std::string& what)
    : ctx_(std::move(ctx)) {
  const std::shared_ptr<Context> keep = ctx_;  // release() below drops ctx_
  Context& c = *keep;
  size_ = std::max<VkDeviceSize>(size, 16);
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size_;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  c.check(vkCreateBuffer(c.device_, &bi, nullptr, &buf_), "creating a buffer for " + what);
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(c.device_, buf_, &req);
  bool host_visible = false;
  const uint32_t type = c.memory_type(req.memoryTypeBits, kind, &host_visible);
  if (c.mem_.memoryTypes[type].heapIndex == c.device_heap_index_) {
    if (req.size > c.device_free()) {
      const VkDeviceSize left = c.device_free();
      release();
      throw BackendFailure("vulkan: not enough device memory on '" + c.device_name() + "': " + what + " needs " +
                           format_bytes(req.size) + ", " + format_bytes(left) + " of " + format_bytes(c.device_heap()) +
                           " left");
    }
    charged_ = req.size;
    c.used_ += charged_;
  }
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  const VkResult r = vkAllocateMemory(c.device_, &ai, nullptr, &mem_);
  if (r != VK_SUCCESS) {
    release();
    c.check(r, "allocating " + format_bytes(req.size) + " for " + what);
  }
  c.check(vkBindBufferMemory(c.device_, buf_, mem_, 0), "binding memory for " + what);
  if (host_visible) c.check(vkMapMemory(c.device_, mem_, 0, VK_WHOLE_SIZE, 0, &map_), "mapping " + what);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    ctx_ = std::move(o.ctx_);
    buf_ = o.buf_;
    mem_ = o.mem_;
    size_ = o.size_;
    charged_ = o.charged_;
    map_ = o.map_;
    o.buf_ = VK_NULL_HANDLE;
    o.mem_ = VK_NULL_HANDLE;
    o.size_ = o.charged_ = 0;
    o.map_ = nullptr;
  }
  return *this;
}

void Buffer::release() {
  if (!ctx_) return;
  VkDevice d = ctx_->device_;
  if (map_) vkUnmapMemory(d, mem_);
  if (buf_) vkDestroyBuffer(d, buf_, nullptr);
  if (mem_) vkFreeMemory(d, mem_, nullptr);
  ctx_->used_ -= charged_;
  buf_ = VK_NULL_HANDLE;
  mem_ = VK_NULL_HANDLE;
  map_ = nullptr;
  charged_ = 0;
  ctx_.reset();
}

}  // namespace hl::vk
