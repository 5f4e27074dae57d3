// The Vulkan Mamba-1 unit (jamba-spec.md §3.5–3.6): in_proj, the causal depthwise conv over this
// layer's own window, x_proj with the RMS-normalised dt | B | C slices, dt_proj, the selective scan
// (one step at S = 1, chunked at S > 1) with its Δ / retained instruments, then h += out Woutᵀ.
// The unit owns its recurrent state: the conv window (Di, W) then the SSM state h (Di, N).
#include <string>

#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {
namespace {

class VkMamba1 final : public VkMixer {
 public:
  VkMamba1(const VkModuleContext& c, int64_t layer)
      : d_(c.weights.layers[layer]), layer_(layer), m_(c.model.schedule[layer].ssm_index) {
    const JambaConfig& cfg = c.model.config;
    if (cfg.mamba_d_state > 256)
      throw BackendFailure("vulkan: mamba_d_state " + std::to_string(cfg.mamba_d_state) +
                           " is above the scan kernels' limit of 256");
    const int64_t Di = cfg.mamba_inner();
    state_ = Buffer(c.ctx, static_cast<VkDeviceSize>(Di * (cfg.mamba_d_conv + cfg.mamba_d_state)) * 4, MemKind::Device,
                    "the Mamba states");
  }

  void clear(VkCommandBuffer c) override { vkCmdFillBuffer(c, state_.handle(), 0, VK_WHOLE_SIZE, 0); }

  void record(VkRecorder& r, int64_t S, bool records) override {
    const JambaConfig& cfg = r.config();
    const ActLayout& al = r.act();
    const RecLayout& rl = r.rec();
    const RunOptions& opts = r.options();
    const DLayer& d = d_;
    const uint32_t H = u32(cfg.hidden_size), Di = u32(cfg.mamba_inner()), N = u32(cfg.mamba_d_state);
    const uint32_t R = u32(cfg.mamba_dt_rank), W = u32(cfg.mamba_d_conv), P = R + 2 * N;
    const uint32_t win = 0, hoff = win + Di * W;  // this layer's window (Di, W), state (Di, N)
    const Binds st = r.binds(-1, state_.handle());
    r.linear(d.in_proj, al.x, H, S, al.xz, 2 * Di, false, d.in_bias);  // (S, 2Di): u0 | z
    r.barrier();
    r.observe("ssm_in", layer_, al.xz, 2 * Di, 2 * Di, S);
    r.dispatch(Kernel::Conv, st, ConvPC{Di, W, u32(S), al.xz, 2 * Di, al.u, win, u32(d.conv_w), d.conv_b},
               ceil_div(Di, 64));
    r.barrier();
    r.observe("ssm_conv", layer_, al.u, Di, Di, S);
    r.linear(d.x_proj, al.u, Di, S, al.p, P, false, -1);  // (S, R + 2N): dt | B | C
    r.barrier();
    const bool instr = records && opts.instruments;
    const float eps = static_cast<float>(cfg.rms_norm_eps);
    ScanPC pc{Di,
              N,
              u32(S),
              al.dt,
              al.u,
              al.xz + Di,
              2 * Di,
              al.bm,
              al.cm,
              al.gated,
              u32(d.A),
              u32(d.D),
              hoff,
              instr && opts.full ? 1u : 0u,
              rl.stride,
              rl.sdelta + u32(m_) * Di,
              rl.sret + u32(m_) * Di,
              N,
              -1,
              -1,
              eps};
    if (S == 1) {
      // dt_proj on the RMS-normalised dt slice in one kernel; B and C are normalised inside the scan.
      uint32_t gx, gy;
      matvec_groups(Di, &gx, &gy);
      MatvecPC dt{d.dt_proj.off, Di, R, al.p, 0, al.dt, 0, 0, d.dt_bias, gx, -1, 0, 0, 0, d.dt_norm, eps};
      r.dispatch_w(Kernel::Matvec, d.dt_proj.dtype, r.binds(d.dt_proj.chunk), dt, gx, gy);
      r.barrier();
      pc.b_off = al.p + R;
      pc.c_off = al.p + R + N;
      pc.bc_stride = P;
      pc.bn_off = d.b_norm;
      pc.cn_off = d.c_norm;
      r.dispatch(Kernel::ScanStep, st, pc, ceil_div(Di, 64));
    } else {
      r.rmsnorm(al.p, P, al.dtr, R, R, d.dt_norm, S);
      r.rmsnorm(al.p + R, P, al.bm, N, N, d.b_norm, S);
      r.rmsnorm(al.p + R + N, P, al.cm, N, N, d.c_norm, S);
      r.barrier();
      r.linear(d.dt_proj, al.dtr, R, S, al.dt, Di, false, d.dt_bias);  // (S, Di), softplus in the scan
      r.barrier();
      r.dispatch(Kernel::ScanPrefill, st, pc, Di);
    }
    r.barrier();
    r.ssm_output(d, layer_, m_, Di, Di, S, instr);  // the scans write Δ = softplus(·) back into dt
  }

 private:
  const DLayer& d_;
  int64_t layer_;
  int64_t m_;     // this layer's index among the SSM layers (the M_n axis)
  Buffer state_;  // window (Di, W), then h (Di, N)
};

}  // namespace

std::unique_ptr<VkMixer> make_vk_mamba1(const VkModuleContext& c, int64_t layer) {
  return std::make_unique<VkMamba1>(c, layer);
}

HL_REGISTER_MODULE(VkMixerTable, MixerKind::Mamba1, make_vk_mamba1);

}  // namespace hl::vk
