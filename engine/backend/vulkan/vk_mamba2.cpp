// The Vulkan Mamba-2 unit (HF BambaMixer's slow path, as cpu_mamba2.cpp and ref_mamba2.cpp): in_proj
// into z | x|B|C | dt; the causal depthwise conv + SiLU over x|B|C with this layer's own window
// (conv.comp over conv_dim channels); the recurrence per head in token order with Δ =
// clamp(softplus(dt + dt_bias), time_step_limit), the Δ / retained instruments (mamba2_scan.comp);
// the gated RMSNorm per norm group (gated_norm.comp); then h += out Woutᵀ. The unit owns its
// recurrent state: the conv window (conv_dim, W) then the SSM state (nh, P, N). Falcon-H1 (HF
// FalconH1Mixer.torch_forward): in_proj's µP factors, the norm before the gate or none, and in a
// parallel layer the input and output multipliers (VkMixer::set_multipliers).
#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {
namespace {

class VkMamba2 final : public VkMixer {
 public:
  VkMamba2(const VkModuleContext& c, int64_t layer)
      : d_(c.weights.layers[layer]), layer_(layer), m_(c.model.schedule[layer].ssm_index) {
    const JambaConfig& cfg = c.model.config;
    state_ = Buffer(
        c.ctx,
        static_cast<VkDeviceSize>(cfg.mamba2_conv_dim() * cfg.mamba_d_conv + cfg.mamba_inner() * cfg.mamba_d_state) * 4,
        MemKind::Device, "the Mamba-2 states");
  }

  void clear(VkCommandBuffer c) override { vkCmdFillBuffer(c, state_.handle(), 0, VK_WHOLE_SIZE, 0); }

  void record(VkRecorder& r, int64_t S, bool records) override {
    const JambaConfig& cfg = r.config();
    const ActLayout& al = r.act();
    const RecLayout& rl = r.rec();
    const RunOptions& opts = r.options();
    const DLayer& d = d_;
    const uint32_t H = u32(cfg.hidden_size), Di = u32(cfg.mamba_inner()), conv = u32(cfg.mamba2_conv_dim());
    const uint32_t nh = u32(cfg.mamba_n_heads), W = u32(cfg.mamba_d_conv), proj = Di + conv + nh;
    const uint32_t win = 0, hoff = win + conv * W;  // this layer's window (conv_dim, W), state (nh, P, N)
    const Binds st = r.binds(-1, state_.handle());
    // (S, proj): z | x|B|C | dt = ((in · x) Wᵀ + bias) ⊙ µP (Falcon-H1: ssm_in_multiplier, mamba2_mup_vector)
    r.linear(d.in_proj, al.x, H, S, al.xz, proj, false, d.in_bias, false, {1.0f, in_, d.in_scale});
    r.barrier();
    r.observe("ssm_in", layer_, al.xz, proj, proj, S);
    r.dispatch(Kernel::Conv, st, ConvPC{conv, W, u32(S), al.xz + Di, proj, al.u, win, u32(d.conv_w), d.conv_b},
               ceil_div(conv, 64));  // (S, conv_dim) after the conv and SiLU
    r.barrier();
    r.observe("ssm_conv", layer_, al.u, conv, conv, S);
    const bool instr = records && opts.instruments;
    Mamba2ScanPC pc{nh,
                    u32(cfg.mamba_d_head),
                    u32(cfg.mamba_d_state),
                    u32(cfg.mamba_n_groups),
                    u32(S),
                    al.u,
                    conv,
                    al.xz + Di + conv,
                    proj,
                    al.gated,
                    al.dt,
                    u32(d.dt_bias),
                    u32(d.A),
                    u32(d.D),
                    hoff,
                    instr && opts.full ? 1u : 0u,
                    rl.stride,
                    rl.sdelta + u32(m_) * Di,
                    rl.sret + u32(m_) * Di,
                    static_cast<float>(cfg.mamba2_dt_lo()),
                    static_cast<float>(cfg.mamba2_dt_hi())};
    r.dispatch(Kernel::Mamba2Scan, st, pc, ceil_div(Di, 64));  // y (S, Di) before the gate, Δ (S, nh)
    r.barrier();
    // The gate and its norm: after the gate, before it (Falcon-H1's mamba_norm_before_gate) or none
    // (Falcon-H1's mamba_rms_norm false: no weight), as cpu_mamba2.cpp.
    const uint32_t group = u32(cfg.mamba2_norm_group());
    const uint32_t before = d.gate_norm >= 0 && cfg.mamba_norm_before_gate ? 1u : 0u;
    r.dispatch(Kernel::GatedNorm, r.binds(),
               GatedNormPC{Di, group, al.gated, al.xz, proj, d.gate_norm, static_cast<float>(cfg.rms_norm_eps), before},
               Di / group, u32(S));
    r.barrier();
    r.ssm_output(d, layer_, m_, nh, Di, S, instr, out_);  // Δ per head
  }

 private:
  const DLayer& d_;
  int64_t layer_;
  int64_t m_;     // this layer's index among the SSM layers (the M_n axis)
  Buffer state_;  // window (conv_dim, W), then the state (nh, P, N)
};

}  // namespace

std::unique_ptr<VkMixer> make_vk_mamba2(const VkModuleContext& c, int64_t layer) {
  return std::make_unique<VkMamba2>(c, layer);
}

HL_REGISTER_MODULE(VkMixerTable, MixerKind::Mamba2, make_vk_mamba2);

}  // namespace hl::vk
