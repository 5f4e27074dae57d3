// Command recording of the Vulkan backend: one block of S positions through the model, in the
// order of cpu_backend.cpp (jamba-spec.md §3.1/§3.3 layer loop): embed, per layer the observed
// norm, its mixer unit (none in a layer without a mixer) and its feed-forward unit (vk_module.h; the
// kinds' files record themselves), the final norm and the head, and the records' one readback; and
// VkRecorder's launch helpers (S = 1: matrix–vector kernels, S > 1: the matmul) and its observation
// copies (set_observer). Recorded once per (S, records, observing, buffers, options).
#include <algorithm>
#include <cmath>

#include "engine/backend/vulkan/vk_backend.h"

namespace hl::vk {

namespace {
// Later kernels see what a transfer (a copy, a fill) wrote.
void transfer_to_compute(VkCommandBuffer cmd) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr,
                       0, nullptr);
}

// The host reads `region` of dst after the kernels' writes to src are copied there.
void copy_to_host(VkCommandBuffer cmd, VkBuffer src, VkBuffer dst, const VkBufferCopy& region) {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr,
                       0, nullptr);
  vkCmdCopyBuffer(cmd, src, dst, 1, &region);
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
}
}  // namespace

Binds VkRecorder::binds(int weight_chunk, VkBuffer a, VkBuffer b) {
  const VkBuffer none = b_.dummy_.handle();
  Binds r;
  r[kWeights] = weight_chunk >= 0 ? b_.dw_->chunks[weight_chunk].handle() : none;
  r[kVec] = b_.dw_->vec.handle();
  r[kAct] = b_.act_.handle();
  r[kStateA] = a ? a : none;
  r[kStateB] = b ? b : none;
  r[kRec] = b_.rec_.handle();
  r[kRoute] = b_.route_.handle();
  r[kParams] = b_.params_.handle();
  return r;
}

VkDescriptorSet VulkanBackend::descriptor_set(const Binds& b) {
  if (auto it = sets_.find(b); it != sets_.end()) return it->second;
  VkDevice d = ctx_->device();
  VkDescriptorSet set = VK_NULL_HANDLE;
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  VkDescriptorSetLayout layout = ctx_->set_layout();
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &layout;
  VkResult r = VK_ERROR_OUT_OF_POOL_MEMORY;
  if (!dpools_.empty()) {
    ai.descriptorPool = dpools_.back();
    r = vkAllocateDescriptorSets(d, &ai, &set);
  }
  if (r != VK_SUCCESS) {  // no pool yet, or the last one is full
    constexpr uint32_t kSets = 64;
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSets * kBindingCount};
    VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    pi.maxSets = kSets;
    pi.poolSizeCount = 1;
    pi.pPoolSizes = &size;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    ctx_->check(vkCreateDescriptorPool(d, &pi, nullptr, &pool), "creating a descriptor pool");
    dpools_.push_back(pool);
    ai.descriptorPool = pool;
    ctx_->check(vkAllocateDescriptorSets(d, &ai, &set), "allocating a descriptor set");
  }
  write_bindings(d, set, b.data());
  sets_.emplace(b, set);
  return set;
}

void VkRecorder::raw(Kernel k, uint32_t dtype, const Binds& b, const void* pc, uint32_t bytes, uint32_t gx, uint32_t gy,
                     uint32_t gz) {
  if (gx == 0 || gy == 0 || gz == 0) return;
  VkDescriptorSet set = b_.descriptor_set(b);
  VkCommandBuffer cmd = b_.cmd_;
  Context& ctx = *b_.ctx_;
  vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, ctx.pipeline(k, dtype));
  vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, ctx.pipeline_layout(), 0, 1, &set, 0, nullptr);
  vkCmdPushConstants(cmd, ctx.pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, bytes, pc);
  vkCmdDispatch(cmd, gx, gy, gz);
  if (b_.queries_ && b_.recording_ && b_.recording_->kernels.size() + 1 < 2048) {
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b_.queries_,
                        b_.recording_->query0 + static_cast<uint32_t>(b_.recording_->kernels.size()) + 1);
    b_.recording_->kernels.push_back(k);
  }
}

// Every later kernel sees every earlier kernel's writes (and does not overwrite what they still read).
void VkRecorder::barrier() {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(b_.cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb,
                       0, nullptr, 0, nullptr);
}

VkCommandBuffer VulkanBackend::commands(int64_t S, bool records) {
  Recorded& slot = (S == 1 && records) ? decode_ : block_;
  const bool observing = static_cast<bool>(observer_);
  if (slot.gen == gen_ && slot.S == S && slot.records == records && slot.observing == observing) return slot.cmd;
  for (;;) {
    ctx_->check(vkResetCommandBuffer(slot.cmd, 0), "recording commands");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    ctx_->check(vkBeginCommandBuffer(slot.cmd, &bi), "recording commands");
    slot.gen = 0;
    slot.kernels.clear();
    slot.observed.clear();
    slot.query0 = &slot == &decode_ ? 0 : 2048;
    if (queries_) {
      vkCmdResetQueryPool(slot.cmd, queries_, slot.query0, 2048);
      vkCmdWriteTimestamp(slot.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, slot.query0);
    }
    recording_ = &slot;
    obs_need_ = 0;
    record_block(slot.cmd, S, records);
    recording_ = nullptr;
    if (obs_need_ * 4 > obs_.size()) {  // copies were left out: grow, then record again
      ctx_->check(vkEndCommandBuffer(slot.cmd), "recording commands");
      obs_ = Buffer();
      obs_ = Buffer(ctx_, obs_need_ * 4, MemKind::Readback, "the observed intermediates");
      invalidate();  // the other slot's copies went to the old buffer
      continue;
    }
    if (observing) {
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
      vkCmdPipelineBarrier(slot.cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr,
                           0, nullptr);
    }
    break;
  }
  ctx_->check(vkEndCommandBuffer(slot.cmd), "recording commands");
  slot.gen = gen_;
  slot.S = S;
  slot.records = records;
  slot.observing = observing;
  return slot.cmd;
}

void VkRecorder::ssm_output(const DLayer& d, int64_t layer, int64_t m, uint32_t delta_cols, uint32_t Di, int64_t S,
                            bool instruments, float out) {
  const ActLayout& al = act();
  const RecLayout& rl = rec();
  observe("ssm_delta", layer, al.dt, delta_cols, delta_cols, S);
  observe("ssm_y", layer, al.gated, Di, Di, S);
  if (instruments)
    dispatch(Kernel::RowMean, binds(), RowMeanPC{delta_cols, al.dt, delta_cols, rl.stride, rl.dmean + u32(m)}, u32(S));
  residual(d.out_proj, al.gated, Di, S, d.out_bias, out);  // h += out · (y Woutᵀ + bias)
  barrier();
}

void VkRecorder::observe(const char* name, int64_t layer, uint32_t off, uint32_t stride, uint32_t cols, int64_t S,
                         From from) {
  if (!b_.observer_ || !b_.recording_) return;
  const uint64_t at = b_.obs_need_;
  b_.obs_need_ += static_cast<uint64_t>(S) * cols;
  b_.recording_->observed.push_back({name, layer, S, cols, at});
  if (b_.obs_need_ * 4 > b_.obs_.size()) return;  // recorded again once the buffer has grown
  const VkBuffer src = from == From::Act     ? b_.act_.handle()
                       : from == From::Route ? b_.route_.handle()
                                             : b_.rec_.handle();
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(b_.cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                       nullptr, 0, nullptr);
  std::vector<VkBufferCopy> rows;  // one region per row: the source rows are strided, the copies packed
  if (stride == cols)
    rows.push_back({static_cast<VkDeviceSize>(off) * 4, at * 4, static_cast<VkDeviceSize>(S) * cols * 4});
  else
    for (int64_t s = 0; s < S; ++s)
      rows.push_back({(static_cast<VkDeviceSize>(off) + static_cast<VkDeviceSize>(s) * stride) * 4,
                      (at + static_cast<uint64_t>(s) * cols) * 4, static_cast<VkDeviceSize>(cols) * 4});
  vkCmdCopyBuffer(b_.cmd_, src, b_.obs_.handle(), static_cast<uint32_t>(rows.size()), rows.data());
  // Later kernels overwrite the source only after the copy has read it.
  mb.srcAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
  vkCmdPipelineBarrier(b_.cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                       nullptr, 0, nullptr);
}

void VkRecorder::residual(const DMat& W, uint32_t x_off, uint32_t x_stride, int64_t S, int32_t bias, float out) {
  const double res = config().residual_multiplier;
  linear(W, x_off, x_stride, S, act().h, u32(config().hidden_size), true, bias, false,
         {out == 1.0f ? static_cast<float>(res) : static_cast<float>(res * out)});
}

void VkRecorder::linear(const DMat& W, uint32_t x_off, uint32_t x_stride, int64_t S, uint32_t y_off, uint32_t y_stride,
                        bool accumulate, int32_t bias, bool to_rec, ProductFactors f) {
  const Binds b = binds(W.chunk);
  if (S == 1) {
    uint32_t gx, gy;
    matvec_groups(W.rows, &gx, &gy);
    MatvecPC pc{W.off, u32(W.rows),      u32(W.cols), x_off, 0,    y_off,   0,      accumulate ? 1u : 0u, bias, gx, -1,
                0,     to_rec ? 1u : 0u, 0,           -1,    0.0f, f.alpha, f.beta, f.row_scale};
    dispatch_w(Kernel::Matvec, W.dtype, b, pc, gx, gy);
    return;
  }
  MatmulPC pc{W.off, u32(W.rows), u32(W.cols), x_off, x_stride,         y_off, y_stride, u32(S), accumulate ? 1u : 0u,
              bias,  -1,          -1,          -1,    to_rec ? 1u : 0u, 0,     f.alpha,  f.beta, f.row_scale};
  matmul(pc, W, S);
}

// pc.w_off/rows/cols may describe a part of W (one expert, the gate|up pair).
void VkRecorder::matmul(MatmulPC pc, const DMat& W, int64_t S) {
  if (b_.tiled_) {
    dispatch_w(Kernel::Matmul, W.dtype, binds(W.chunk), pc, ceil_div(pc.rows, 64), ceil_div(S, 16));
    return;
  }
  uint32_t gy;
  matvec_groups(pc.rows, &pc.groups_x, &gy);
  dispatch_w(Kernel::MatmulRows, W.dtype, binds(W.chunk), pc, pc.groups_x, gy, ceil_div(S, 8));
}

void VkRecorder::rmsnorm(uint32_t in_off, uint32_t in_stride, uint32_t out_off, uint32_t out_stride, uint32_t n,
                         int32_t w_off, int64_t S) {
  RmsNormPC pc{in_off, in_stride, out_off, out_stride, n, u32(w_off), static_cast<float>(b_.cfg_.rms_norm_eps),
               0,      0,         0,       0,          0};
  dispatch(Kernel::RmsNorm, binds(), pc, u32(S));
}

void VulkanBackend::record_norm_observe(VkRecorder& r, int32_t w_off, int64_t S, int64_t column, bool records) {
  const uint32_t H = u32(cfg_.hidden_size), c = u32(column);
  const uint32_t observe = !records ? 0u : opts_.instruments ? 2u : 1u;
  RmsNormPC pc{al_.h,
               H,
               al_.x,
               H,
               H,
               u32(w_off),
               static_cast<float>(cfg_.rms_norm_eps),
               observe,
               rl_.stride,
               rl_.resid_max + c,
               rl_.nonfinite + c,
               rl_.resid_rows + c * H};
  r.dispatch(Kernel::RmsNorm, r.binds(), pc, u32(S));
}

void VulkanBackend::record_block(VkCommandBuffer cmd, int64_t S, bool records) {
  cmd_ = cmd;
  const DeviceWeights& w = *dw_;
  const uint32_t H = u32(cfg_.hidden_size);
  VkRecorder r(*this);
  if (link_ && records) {  // a stage writes its own columns of the records: the others read as zeros
    vkCmdFillBuffer(cmd_, rec_.handle(), 0, static_cast<VkDeviceSize>(S) * rl_.stride * 4, 0);
    transfer_to_compute(cmd_);
  }
  if (first_stage()) {
    EmbedPC pe{w.embed.off, H, u32(w.registers), al_.h, static_cast<float>(cfg_.embedding_multiplier)};
    r.dispatch_w(Kernel::Embed, w.embed.dtype, r.binds(w.embed.chunk), pe, ceil_div(H, 64), u32(S));
    r.barrier();
    r.observe("embed", -1, al_.h, H, H, S);
  } else {
    record_rows_in(S);  // the stage before's output rows, already × embedding_multiplier
  }
  for (int64_t i = mine_.begin; i < mine_.end; ++i) {
    const DLayer& d = w.layers[i];
    // Residual point i, what enters layer i, is observed by the layer's first norm: the mixer's, or
    // the feed-forward's in a layer without a mixer (Nemotron-H's '-').
    VkMixer* mixer = mixers_[i].get();
    record_norm_observe(r, mixer ? d.input_norm : d.pre_ff_norm, S, i, records);
    r.barrier();
    if (mixer) {
      r.observe("attn_norm", i, al_.x, H, H, S);
      mixer->record(r, S, records);  // h += mixer(x)
    }
    if (ffns_[i]) {  // else a layer without a feed-forward
      if (mixer) {
        r.rmsnorm(al_.h, H, al_.x, H, H, d.pre_ff_norm, S);
        r.barrier();
      }
      r.observe("ffn_norm", i, al_.x, H, H, S);
      ffns_[i]->record(r, S, records);  // h += ffn(x)
    }
    r.observe("layer_out", i, al_.h, H, H, S);
  }
  if (!last_stage()) {  // residual point mine_.end (what the next stage receives) observed here, as on the CPU
    if (records) {
      const DLayer& d = w.layers[mine_.end - 1];
      record_norm_observe(r, d.input_norm >= 0 ? d.input_norm : d.pre_ff_norm, S, mine_.end, records);
      r.barrier();
    }
    record_rows_out(S);
    if (records) record_readback(S);
    return;
  }
  if (!records) return;                                                      // registers: no logits, no records
  record_norm_observe(r, w.final_norm, S, cfg_.num_hidden_layers, records);  // point L: before the final norm
  r.barrier();
  r.observe("final_norm", -1, al_.x, H, H, S);
  // Granite: logits ÷ logits_scaling (× its float reciprocal: within an ulp of the CPU's division);
  // Falcon-H1: logits × lm_head_multiplier (FalconH1ForCausalLM).
  r.linear(w.lm_head, al_.x, H, S, rl_.logits, rl_.stride, false, -1, true,
           {static_cast<float>(cfg_.lm_head_multiplier / cfg_.logits_scaling)});
  r.observe("logits", -1, rl_.logits, rl_.stride, u32(cfg_.vocab_size), S, VkRecorder::From::Records);
  record_readback(S);
}

void VulkanBackend::record_rows_in(int64_t S) {
  const VkBufferCopy region{0, static_cast<VkDeviceSize>(al_.h) * 4,
                            static_cast<VkDeviceSize>(S) * static_cast<VkDeviceSize>(cfg_.hidden_size) * 4};
  vkCmdCopyBuffer(cmd_, hin_.handle(), act_.handle(), 1, &region);
  transfer_to_compute(cmd_);
}

void VulkanBackend::record_rows_out(int64_t S) {
  copy_to_host(cmd_, act_.handle(), hout_.handle(),
               {static_cast<VkDeviceSize>(al_.h) * 4, 0,
                static_cast<VkDeviceSize>(S) * static_cast<VkDeviceSize>(cfg_.hidden_size) * 4});
}

void VulkanBackend::record_readback(int64_t S) {
  if (!rec_direct_) {
    copy_to_host(cmd_, rec_.handle(), readback_.handle(), {0, 0, static_cast<VkDeviceSize>(S) * rl_.stride * 4});
    return;
  }
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
}

const JambaConfig& VkRecorder::config() const {
  return b_.cfg_;
}
const RunOptions& VkRecorder::options() const {
  return b_.opts_;
}
const ActLayout& VkRecorder::act() const {
  return b_.al_;
}
const RouteLayout& VkRecorder::route() const {
  return b_.ro_;
}
const RecLayout& VkRecorder::rec() const {
  return b_.rl_;
}

uint32_t VkRecorder::rope_pairs() const {
  return static_cast<uint32_t>(b_.rope_freq_.size());
}

uint32_t VkRecorder::rope_table() const {
  return static_cast<uint32_t>(2 + b_.act_cap_);
}
}  // namespace hl::vk
