// Command recording of the Vulkan backend: one block of S positions through the model, in the
// order of cpu_backend.cpp (jamba-spec.md §3.1/§3.3 layer loop, §3.4 attention, §3.5–3.6 Mamba,
// §3.8–3.9 feed-forwards) with the instrument reductions next to the data. S = 1 uses the
// matrix–vector kernels and the one-step scan; S > 1 the tiled matmul, the chunked scan and the
// per-expert gathered MoE products. Recorded once per (S, records, buffers, options), then re-submitted.
#include <algorithm>
#include <cmath>

#include "engine/backend/vulkan/vk_backend.h"

namespace hl::vk {
namespace {

uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(v);
}
uint32_t ceil_div(int64_t a, int64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}
constexpr uint32_t kMaxGroups = 65535;
constexpr int64_t kMatvecRows = 8;  // rows per workgroup of matvec.comp / matvec_moe_down.comp

// Workgroups of a matrix–vector kernel over `rows`, split (x, y) below the 65535 limit per axis.
void matvec_groups(int64_t rows, uint32_t* gx, uint32_t* gy) {
  const int64_t groups = (rows + kMatvecRows - 1) / kMatvecRows;
  *gx = static_cast<uint32_t>(std::min<int64_t>(groups, kMaxGroups));
  *gy = static_cast<uint32_t>((groups + *gx - 1) / *gx);
}

}  // namespace

VulkanBackend::Binds VulkanBackend::binds(int weight_chunk, VkBuffer a, VkBuffer b) {
  const VkBuffer none = dummy_.handle();
  Binds r;
  r[kWeights] = weight_chunk >= 0 ? dw_->chunks[weight_chunk].handle() : none;
  r[kVec] = dw_->vec.handle();
  r[kAct] = act_.handle();
  r[kStateA] = a ? a : none;
  r[kStateB] = b ? b : none;
  r[kRec] = rec_.handle();
  r[kRoute] = route_.handle();
  r[kParams] = params_.handle();
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

void VulkanBackend::dispatch_raw(Kernel k, uint32_t dtype, const Binds& b, const void* pc, uint32_t bytes, uint32_t gx,
                                 uint32_t gy, uint32_t gz) {
  if (gx == 0 || gy == 0 || gz == 0) return;
  VkDescriptorSet set = descriptor_set(b);
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, ctx_->pipeline(k, dtype));
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, ctx_->pipeline_layout(), 0, 1, &set, 0, nullptr);
  vkCmdPushConstants(cmd_, ctx_->pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, bytes, pc);
  vkCmdDispatch(cmd_, gx, gy, gz);
  if (queries_ && recording_ && recording_->kernels.size() + 1 < 2048) {
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_,
                        recording_->query0 + static_cast<uint32_t>(recording_->kernels.size()) + 1);
    recording_->kernels.push_back(k);
  }
}

// Every later kernel sees every earlier kernel's writes (and does not overwrite what they still read).
void VulkanBackend::barrier() {
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
                       nullptr, 0, nullptr);
}

VkCommandBuffer VulkanBackend::commands(int64_t S, bool records) {
  Recorded& slot = (S == 1 && records) ? decode_ : block_;
  if (slot.gen == gen_ && slot.S == S && slot.records == records) return slot.cmd;
  ctx_->check(vkResetCommandBuffer(slot.cmd, 0), "recording commands");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  ctx_->check(vkBeginCommandBuffer(slot.cmd, &bi), "recording commands");
  slot.gen = 0;
  slot.kernels.clear();
  slot.query0 = &slot == &decode_ ? 0 : 2048;
  if (queries_) {
    vkCmdResetQueryPool(slot.cmd, queries_, slot.query0, 2048);
    vkCmdWriteTimestamp(slot.cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, slot.query0);
    recording_ = &slot;
  }
  record_block(slot.cmd, S, records);
  recording_ = nullptr;
  ctx_->check(vkEndCommandBuffer(slot.cmd), "recording commands");
  slot.gen = gen_;
  slot.S = S;
  slot.records = records;
  return slot.cmd;
}

void VulkanBackend::record_linear(const DMat& W, uint32_t x_off, uint32_t x_stride, int64_t S, uint32_t y_off,
                                  uint32_t y_stride, bool accumulate, int32_t bias, bool to_rec) {
  const Binds b = binds(W.chunk);
  if (S == 1) {
    uint32_t gx, gy;
    matvec_groups(W.rows, &gx, &gy);
    MatvecPC pc{W.off, u32(W.rows), u32(W.cols),      x_off, 0,  y_off, 0, accumulate ? 1u : 0u, bias, gx,
                -1,    0,           to_rec ? 1u : 0u, 0,     -1, 0.0f};
    dispatch_w(Kernel::Matvec, W.dtype, b, pc, gx, gy);
    return;
  }
  MatmulPC pc{W.off, u32(W.rows), u32(W.cols), x_off, x_stride,         y_off, y_stride, u32(S), accumulate ? 1u : 0u,
              bias,  -1,          -1,          -1,    to_rec ? 1u : 0u, 0};
  record_matmul(pc, W, S);
}

// pc.w_off/rows/cols may describe a part of W (one expert, the gate|up pair).
void VulkanBackend::record_matmul(MatmulPC pc, const DMat& W, int64_t S) {
  if (tiled_) {
    dispatch_w(Kernel::Matmul, W.dtype, binds(W.chunk), pc, ceil_div(pc.rows, 64), ceil_div(S, 16));
    return;
  }
  uint32_t gy;
  matvec_groups(pc.rows, &pc.groups_x, &gy);
  dispatch_w(Kernel::MatmulRows, W.dtype, binds(W.chunk), pc, pc.groups_x, gy, ceil_div(S, 8));
}

void VulkanBackend::record_rmsnorm(uint32_t in_off, uint32_t in_stride, uint32_t out_off, uint32_t out_stride,
                                   uint32_t n, int32_t w_off, int64_t S) {
  RmsNormPC pc{in_off, in_stride, out_off, out_stride, n, u32(w_off), static_cast<float>(cfg_.rms_norm_eps),
               0,      0,         0,       0,          0};
  dispatch(Kernel::RmsNorm, binds(), pc, u32(S));
}

void VulkanBackend::record_norm_observe(int32_t w_off, int64_t S, int64_t column, bool records) {
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
  dispatch(Kernel::RmsNorm, binds(), pc, u32(S));
}

void VulkanBackend::record_block(VkCommandBuffer cmd, int64_t S, bool records) {
  cmd_ = cmd;
  const DeviceWeights& w = *dw_;
  const uint32_t H = u32(cfg_.hidden_size);
  EmbedPC pe{w.embed.off, H, u32(w.registers), al_.h};
  dispatch_w(Kernel::Embed, w.embed.dtype, binds(w.embed.chunk), pe, ceil_div(H, 64), u32(S));
  barrier();
  for (int64_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    const DLayer& d = w.layers[i];
    record_norm_observe(d.input_norm, S, i, records);  // residual point i: what enters layer i
    barrier();
    if (sched_[i].has_attention())
      record_attention(i, S, records);
    else
      record_mamba(i, S, records);
    record_rmsnorm(al_.h, H, al_.x, H, H, d.pre_ff_norm, S);
    barrier();
    record_feed_forward(i, S, records);
  }
  if (!records) return;                                                   // registers: no logits, no records
  record_norm_observe(w.final_norm, S, cfg_.num_hidden_layers, records);  // point L: before the final norm
  barrier();
  record_linear(w.lm_head, al_.x, H, S, rl_.logits, rl_.stride, false, -1, true);
  // The one device→host transfer of the step: the S records.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  if (rec_direct_) {
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr,
                         0, nullptr);
    return;
  }
  mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0,
                       nullptr, 0, nullptr);
  const VkBufferCopy region{0, 0, static_cast<VkDeviceSize>(S) * rl_.stride * 4};
  vkCmdCopyBuffer(cmd_, rec_.handle(), readback_.handle(), 1, &region);
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
}

void VulkanBackend::record_attention(int64_t layer, int64_t S, bool records) {
  const DLayer& d = dw_->layers[layer];
  const int64_t a = sched_[layer].attn_index;
  const uint32_t H = u32(cfg_.hidden_size), nh = u32(cfg_.num_attention_heads), hd = u32(cfg_.head_dim());
  const uint32_t kvw = u32(cfg_.num_key_value_heads) * hd;
  const uint32_t qw = nh * hd, row = qw + 2 * kvw;
  record_linear(d.qkv, al_.x, H, S, al_.qkv, row, false, -1);  // (S, nh·hd | nkv·hd | nkv·hd)
  barrier();
  const Binds kv = binds(-1, kcache_[a].handle(), vcache_[a].handle());
  dispatch(Kernel::KvAppend, kv, KvAppendPC{kvw, al_.qkv + qw, al_.qkv + qw + kvw, row}, ceil_div(kvw, 64), u32(S));
  barrier();
  const bool has_null = norm_[a] != Normalizer::Softmax;
  const bool instr = records && opts_.instruments;
  AttentionPC pc{nh,
                 u32(cfg_.num_key_value_heads),
                 hd,
                 1.0f / std::sqrt(static_cast<float>(hd)),
                 al_.qkv,
                 row,
                 al_.o,
                 has_null ? 1u : 0u,
                 null_off_[a],
                 instr ? 1u : 0u,
                 rl_.stride,
                 rl_.attn,
                 u32(sched_.num_attention()) * nh,
                 u32(a) * nh,
                 instr && opts_.full ? 1u : 0u,
                 rl_.arows,
                 rl_.arow_stride};
  dispatch(Kernel::Attention, kv, pc, nh, u32(S));
  barrier();
  record_linear(d.o, al_.o, nh * hd, S, al_.h, H, true, -1);  // h += o Woᵀ
  barrier();
}

void VulkanBackend::record_mamba(int64_t layer, int64_t S, bool records) {
  const DLayer& d = dw_->layers[layer];
  const int64_t m = sched_[layer].ssm_index;
  const uint32_t H = u32(cfg_.hidden_size), Di = u32(cfg_.mamba_inner()), N = u32(cfg_.mamba_d_state);
  const uint32_t R = u32(cfg_.mamba_dt_rank), W = u32(cfg_.mamba_d_conv), P = R + 2 * N;
  const uint32_t win = u32(m) * win_stride_, hoff = win + Di * W;  // this layer's window (Di, W), state (Di, N)
  const Binds st = binds(-1, mstate_.handle());
  record_linear(d.in_proj, al_.x, H, S, al_.xz, 2 * Di, false, d.in_bias);  // (S, 2Di): u0 | z
  barrier();
  dispatch(Kernel::Conv, st, ConvPC{Di, W, u32(S), al_.xz, 2 * Di, al_.u, win, u32(d.conv_w), d.conv_b},
           ceil_div(Di, 64));
  barrier();
  record_linear(d.x_proj, al_.u, Di, S, al_.p, P, false, -1);  // (S, R + 2N): dt | B | C
  barrier();
  const bool instr = records && opts_.instruments;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  ScanPC pc{Di,
            N,
            u32(S),
            al_.dt,
            al_.u,
            al_.xz + Di,
            2 * Di,
            al_.bm,
            al_.cm,
            al_.gated,
            u32(d.A),
            u32(d.D),
            hoff,
            instr && opts_.full ? 1u : 0u,
            rl_.stride,
            rl_.sdelta + u32(m) * Di,
            rl_.sret + u32(m) * Di,
            N,
            -1,
            -1,
            eps};
  if (S == 1) {
    // dt_proj on the RMS-normalised dt slice in one kernel; B and C are normalised inside the scan.
    uint32_t gx, gy;
    matvec_groups(Di, &gx, &gy);
    MatvecPC dt{d.dt_proj.off, Di, R, al_.p, 0, al_.dt, 0, 0, d.dt_bias, gx, -1, 0, 0, 0, d.dt_norm, eps};
    dispatch_w(Kernel::Matvec, d.dt_proj.dtype, binds(d.dt_proj.chunk), dt, gx, gy);
    barrier();
    pc.b_off = al_.p + R;
    pc.c_off = al_.p + R + N;
    pc.bc_stride = P;
    pc.bn_off = d.b_norm;
    pc.cn_off = d.c_norm;
    dispatch(Kernel::ScanStep, st, pc, ceil_div(Di, 64));
  } else {
    record_rmsnorm(al_.p, P, al_.dtr, R, R, d.dt_norm, S);
    record_rmsnorm(al_.p + R, P, al_.bm, N, N, d.b_norm, S);
    record_rmsnorm(al_.p + R + N, P, al_.cm, N, N, d.c_norm, S);
    barrier();
    record_linear(d.dt_proj, al_.dtr, R, S, al_.dt, Di, false, d.dt_bias);  // (S, Di), softplus in the scan
    barrier();
    dispatch(Kernel::ScanPrefill, st, pc, Di);
  }
  barrier();
  if (instr) dispatch(Kernel::RowMean, binds(), RowMeanPC{Di, al_.dt, Di, rl_.stride, rl_.dmean + u32(m)}, u32(S));
  record_linear(d.out_proj, al_.gated, Di, S, al_.h, H, true, d.out_bias);  // h += out Woutᵀ
  barrier();
}

void VulkanBackend::record_feed_forward(int64_t layer, int64_t S, bool records) {
  const DLayer& d = dw_->layers[layer];
  const DMat& gu = d.gate_up;  // (E_l, 2I, H)
  const uint32_t H = u32(cfg_.hidden_size), I = u32(d.down.cols);
  const bool moe = sched_[layer].is_moe();
  const uint32_t E = u32(cfg_.num_experts), K = moe ? u32(cfg_.num_experts_per_tok) : 1u;
  if (moe) {
    const int64_t xi = sched_[layer].moe_index;
    const bool instr = records && opts_.instruments;
    record_linear(d.router, al_.x, H, S, al_.rl, E, false, -1);  // (S, E)
    barrier();
    MoeRoutePC rp{E,
                  K,
                  u32(S),
                  al_.rl,
                  instr ? 1u : 0u,
                  rl_.stride,
                  rl_.rprobs + u32(xi) * E,
                  rl_.rtopk + u32(xi) * K,
                  rl_.rlse + u32(xi),
                  ro_.prob,
                  ro_.sel,
                  ro_.selw,
                  S > 1 ? 1u : 0u,
                  ro_.cnt,
                  ro_.in,
                  ro_.out};
    dispatch(Kernel::MoeRoute, binds(), rp, 1);
    barrier();
  }
  if (S == 1) {
    // silu(gate x) ⊙ (up x) of each chosen expert (of the one MLP when dense) in one kernel.
    uint32_t gx, gy;
    matvec_groups(I, &gx, &gy);
    const int32_t sel = moe ? static_cast<int32_t>(ro_.sel) : -1;
    MatvecPC a{gu.off, I, H, al_.x, 0, al_.uf, I, 0, -1, gx, sel, gu.stride(), 0, 1, -1, 0.0f};
    dispatch_w(Kernel::Matvec, gu.dtype, binds(gu.chunk), a, gx, gy, K);
    barrier();
    if (moe) {
      uint32_t hx, hy;
      matvec_groups(H, &hx, &hy);
      MoeDownPC dn{d.down.off, H, I, al_.uf, I, al_.h, K, ro_.sel, ro_.selw, d.down.stride(), hx};
      dispatch_w(Kernel::MatvecMoeDown, d.down.dtype, binds(d.down.chunk), dn, hx, hy);
    } else {
      record_linear(d.down, al_.uf, I, 1, al_.h, H, true, -1);
    }
    barrier();
    return;
  }
  if (!moe) {                                                 // dense prefill, jamba-spec.md §3.8
    record_linear(gu, al_.x, H, S, al_.g, 2 * I, false, -1);  // (S, 2I)
    barrier();
    dispatch(Kernel::Swiglu, binds(), SwigluPC{I, u32(S), al_.g, al_.uf, -1}, ceil_div(I, 64), u32(S));
    barrier();
    record_linear(d.down, al_.uf, I, S, al_.h, H, true, -1);
    barrier();
    return;
  }
  // MoE prefill: each expert once over the tokens routed to it (gathered rows, outputs to their slots).
  for (uint32_t e = 0; e < E; ++e) {
    const int32_t cnt = static_cast<int32_t>(ro_.cnt + e);
    const int32_t in = static_cast<int32_t>(ro_.in + e * u32(S)), out = static_cast<int32_t>(ro_.out + e * u32(S));
    record_matmul(
        MatmulPC{gu.off + e * gu.stride(), 2 * I, H, al_.x, H, al_.g, 2 * I, u32(S), 0, -1, in, -1, cnt, 0, 0}, gu, S);
    barrier();
    dispatch(Kernel::Swiglu, binds(), SwigluPC{I, u32(S), al_.g, al_.uf, cnt}, ceil_div(I, 64), u32(S));
    barrier();
    record_matmul(
        MatmulPC{d.down.off + e * d.down.stride(), H, I, al_.uf, I, al_.ye, H, u32(S), 0, -1, -1, out, cnt, 0, 0},
        d.down, S);
    barrier();
  }
  dispatch(Kernel::MoeCombine, binds(), MoeCombinePC{H, K, al_.ye, al_.h, ro_.selw}, ceil_div(H, 64), u32(S));
  barrier();
}

}  // namespace hl::vk
