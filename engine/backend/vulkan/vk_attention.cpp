// The Vulkan attention unit (jamba-spec.md §3.4): q|k|v in one product, RoPE on q and k where the
// layer has rotary dims (Bamba; the angles from the backend's step parameters), the new K and V rows
// appended to this layer's own cache, grouped-query attention under the run's normalizer (with the
// layer's trained sinks as p_null logits where the plan says so) and its row statistics into the
// records, then h += o Woᵀ. Falcon-H1 (HF FalconH1Attention): q|k|v and o biases, key_multiplier in
// the scale, and in a parallel layer the input and output multipliers (VkMixer::set_multipliers).
// Not the cache's host-side bookkeeping (kv_len_ in vk_backend.cpp).
#include <string>

#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {
namespace {

class VkAttention final : public VkMixer {
 public:
  VkAttention(const VkModuleContext& c, int64_t layer)
      : ctx_(c.ctx),
        d_(c.weights.layers[layer]),
        layer_(layer),
        a_(c.model.schedule[layer].attn_index),
        n_attn_(c.model.schedule.num_attention()),
        sinks_(c.weights.layers[layer].sinks) {
    const JambaConfig& cfg = c.model.config;
    if (cfg.head_dim() > 256)
      throw BackendFailure("vulkan: head_dim " + std::to_string(cfg.head_dim()) +
                           " is above the attention kernel's limit of 256");
    kvw_ = cfg.num_key_value_heads * cfg.head_dim();
  }

  void start(const RunPlan& plan) override {
    norm_ = plan.normalizer[static_cast<size_t>(layer_)];
    null_off_ = plan.sinks[static_cast<size_t>(layer_)] ? sinks_ : -1;
  }

  uint64_t position_bytes() const override { return static_cast<uint64_t>(kvw_) * 4; }
  const char* position_state() const override { return "attention layer's key cache"; }

  void reserve_positions(int64_t cap, int64_t kept, std::vector<DeviceCopy>* copies) override {
    Buffer k(ctx_, cap * kvw_ * 4, MemKind::Device, "the key cache");
    Buffer v(ctx_, cap * kvw_ * 4, MemKind::Device, "the value cache");
    if (kept > 0) {
      // The old buffers live in the copy until the backend has run it.
      auto old = std::make_shared<std::array<Buffer, 2>>();
      (*old)[0] = std::move(k_);
      (*old)[1] = std::move(v_);
      const VkBuffer nk = k.handle(), nv = v.handle();
      const VkBufferCopy region{0, 0, static_cast<VkDeviceSize>(kept * kvw_ * 4)};
      copies->push_back([old, nk, nv, region](VkCommandBuffer c) {
        vkCmdCopyBuffer(c, (*old)[0].handle(), nk, 1, &region);
        vkCmdCopyBuffer(c, (*old)[1].handle(), nv, 1, &region);
      });
    }
    k_ = std::move(k);
    v_ = std::move(v);
  }

  void record(VkRecorder& r, int64_t S, bool records) override {
    const JambaConfig& cfg = r.config();
    const ActLayout& al = r.act();
    const RecLayout& rl = r.rec();
    const RunOptions& opts = r.options();
    const uint32_t H = u32(cfg.hidden_size), nh = u32(cfg.num_attention_heads), hd = u32(cfg.head_dim());
    const uint32_t kvw = u32(kvw_);
    const uint32_t qw = nh * hd, row = qw + 2 * kvw;
    // (S, nh·hd | nkv·hd | nkv·hd) = (in · x) Wᵀ + bias (Falcon-H1: attention_in_multiplier, attention_bias)
    r.linear(d_.qkv, al.x, H, S, al.qkv, row, false, d_.qkv_bias, false, {1.0f, in_});
    r.barrier();
    if (const uint32_t pairs = r.rope_pairs(); pairs > 0) {  // before the keys are cached, as on the CPU
      const uint32_t nkv = u32(cfg.num_key_value_heads);
      r.dispatch(Kernel::Rope, r.binds(), RopePC{nh, nkv, hd, pairs, al.qkv, al.qkv + qw, row, r.rope_table()},
                 ceil_div((nh + nkv) * pairs, 64), u32(S));
      r.barrier();
    }
    const Binds kv = r.binds(-1, k_.handle(), v_.handle());
    r.dispatch(Kernel::KvAppend, kv, KvAppendPC{kvw, al.qkv + qw, al.qkv + qw + kvw, row}, ceil_div(kvw, 64), u32(S));
    r.barrier();
    const bool has_null = norm_ != Normalizer::Softmax;
    const bool instr = records && opts.instruments;
    AttentionPC pc{nh,
                   u32(cfg.num_key_value_heads),
                   hd,
                   cfg.attention_scale_f32(),  // Granite's attention_multiplier, Falcon-H1's key_multiplier
                   al.qkv,
                   row,
                   al.o,
                   has_null ? 1u : 0u,
                   null_off_,
                   instr ? 1u : 0u,
                   rl.stride,
                   rl.attn,
                   u32(n_attn_) * nh,
                   u32(a_) * nh,
                   instr && opts.full ? 1u : 0u,
                   rl.arows,
                   rl.arow_stride};
    r.dispatch(Kernel::Attention, kv, pc, nh, u32(S));
    r.barrier();
    r.observe("attn_heads", layer_, al.o, qw, qw, S);
    r.residual(d_.o, al.o, nh * hd, S, d_.o_bias, out_);  // h += out · (o Woᵀ + bias)
    r.barrier();
  }

 private:
  std::shared_ptr<Context> ctx_;
  const DLayer& d_;
  int64_t layer_, a_, n_attn_;             // a_: this layer's index among the attention layers (the A_n axis)
  int32_t sinks_;                          // vec offset of the trained sink logits or -1
  int64_t kvw_ = 0;                        // nkv·hd floats per cached position
  Normalizer norm_ = Normalizer::Softmax;  // this run's
  int32_t null_off_ = -1;                  // this run's p_null logits: the sinks' offset or -1
  Buffer k_, v_;                           // (cap, nkv·hd) each
};

}  // namespace

std::unique_ptr<VkMixer> make_vk_attention(const VkModuleContext& c, int64_t layer) {
  return std::make_unique<VkAttention>(c, layer);
}

HL_REGISTER_MODULE(VkMixerTable, MixerKind::Attention, make_vk_attention);

}  // namespace hl::vk
