// The CUDA Mamba-2 mixer (HF BambaMixer's slow path; the twins cpu_mamba2.cpp and vk_mamba2.cpp):
// in_proj into the gate z, x|B|C and dt; the causal depthwise conv + bias + SiLU over x|B|C with this
// layer's window; per head Δ = clamp(softplus(dt + dt_bias), time_step_limit) (Nemotron-H's floor
// time_step_min) and the recurrence in token order (launch_mamba2_scan; B and C per group, one A and
// D per head); the gated RMSNorm y·silu(z) over each norm group; out_proj. Decode and prefill run the
// same kernels (products by matrix-vector launches or cuBLAS), so a prefill equals its decode steps.
// State: the conv window (W, conv_dim), then the SSM state (N, Di). Δ per channel (its head's) and the
// retained share e^(Δ·A) go to the record's SSM buffers (the Δ mean over the channels is the mean
// over the heads); the ssm_delta intermediate is Δ per head.
#include <string>

#include "engine/backend/cuda/cuda_module.h"

namespace hl::cuda {

namespace {

class CudaMamba2 final : public CudaMixer {
 public:
  CudaMamba2(const CudaModuleContext& c, int64_t layer)
      : w_(c.model.w.layers[layer].mamba2), cfg_(c.config), layer_(layer), mi_(c.schedule[layer].ssm_index) {
    // Falcon-H1's options: µP factors on in_proj's output, the norm before the gate or none.
    if (!mamba2_mup_vector(cfg_).empty() || !cfg_.mamba_rms_norm || cfg_.mamba_norm_before_gate)
      throw BackendFailure("cuda: no kernel for the Mamba-2 µP factors, the norm before the gate or no norm (layer " +
                           std::to_string(layer) + "); use the cpu backend");
  }

  void upload(CudaWeights& w) override {
    in_proj_ = w.upload(w_.in_proj);
    out_proj_ = w.upload(w_.out_proj);
    in_bias_ = w.upload_vec(w_.in_bias, "a Mamba-2 bias");
    conv_w_ = w.upload_vec(w_.conv_w, "the conv weights");
    conv_b_ = w.upload_vec(w_.conv_b, "the conv bias");
    dt_bias_ = w.upload_vec(w_.dt_bias, "the dt bias");
    A_ = w.upload_vec(w_.A, "A");
    D_ = w.upload_vec(w_.D, "D");
    norm_w_ = w.upload_vec(w_.norm_w, "the gated norm's weight");
    out_bias_ = w.upload_vec(w_.out_bias, "a Mamba-2 bias");
  }

  // The window (W, conv_dim), then the state (N, Di).
  std::vector<CudaStateNeed> state() const override {
    const int64_t words = cfg_.mamba_d_conv * cfg_.mamba2_conv_dim() + cfg_.mamba_d_state * cfg_.mamba_inner();
    return {{"the Mamba-2 state", 0, words * 4}};
  }
  void bind_state(const std::vector<float*>& b) override { win_ = b[0]; }

  // zxd (S, Di + conv_dim + nh) in_proj's output z | x|B|C | dt; xbc (S, conv_dim) after the conv; y
  // (S, Di) the scan output, then the gated norm's; dh (S, nh) Δ per head.
  std::vector<CudaScratchNeed> scratch(int64_t cap, const CudaRun&) const override {
    const int64_t Di = cfg_.mamba_inner(), conv = cfg_.mamba2_conv_dim(), nh = cfg_.mamba_n_heads;
    return {
        {"ssm2.zxd", cap * (Di + conv + nh)}, {"ssm2.xbc", cap * conv}, {"ssm2.y", cap * Di}, {"ssm2.dh", cap * nh}};
  }
  void bind_scratch(const CudaScratch& s, const CudaRun&) override {
    zxd_ = s.device("ssm2.zxd");
    xbc_ = s.device("ssm2.xbc");
    y_ = s.device("ssm2.y");
    dh_ = s.device("ssm2.dh");
  }

  void enqueue(CudaRun& r, int64_t S, float* rec) override {
    const JambaConfig& cfg = cfg_;
    const int64_t H = cfg.hidden_size, Di = cfg.mamba_inner(), conv = cfg.mamba2_conv_dim(), nh = cfg.mamba_n_heads;
    const int64_t proj = Di + conv + nh, N = cfg.mamba_d_state, W = cfg.mamba_d_conv;
    const int Si = static_cast<int>(S);
    if (S == 1) {
      r.gemv({{in_proj_, zxd_, 0, in_bias_}}, r.x(), 0);
    } else {
      r.gemm(in_proj_, r.x(), S, zxd_, proj);
      if (in_bias_) {
        launch_add_bias(zxd_, in_bias_, Si, proj, r.stream());
        r.counted(1);
      }
    }
    r.observe("ssm_in", layer_, zxd_, proj, proj, S);
    launch_conv(zxd_ + Di, proj, win_, conv_w_, conv_b_, xbc_, Si, conv, static_cast<int>(W), r.stream());
    r.counted(1);
    r.observe("ssm_conv", layer_, xbc_, conv, conv, S);
    Mamba2Args a;
    a.xbc = xbc_;
    a.conv = conv;
    a.dt = zxd_ + Di + conv;
    a.dts = proj;
    a.dt_bias = dt_bias_;
    a.A = A_;
    a.D = D_;
    a.lo = static_cast<float>(cfg.mamba2_dt_lo());
    a.hi = static_cast<float>(cfg.mamba2_dt_hi());
    a.h = win_ + W * conv;
    a.y = y_;
    a.dch = r.ssm_delta(mi_);
    a.dhead = dh_;
    a.retained = rec && r.options().instruments && r.options().full ? r.ssm_retained(mi_) : nullptr;
    a.S = Si;
    a.nh = static_cast<int>(nh);
    a.P = static_cast<int>(cfg.mamba_d_head);
    a.N = static_cast<int>(N);
    a.G = static_cast<int>(cfg.mamba_n_groups);
    launch_mamba2_scan(a, r.stream());
    launch_gated_norm(y_, zxd_, proj, norm_w_, Si, Di, cfg.mamba2_norm_group(), cfg.rms_norm_eps, r.stream());
    r.counted(2);
    r.observe("ssm_delta", layer_, dh_, nh, nh, S);
    r.observe("ssm_y", layer_, y_, Di, Di, S);
    if (S == 1) {
      r.gemv({{out_proj_, r.h(), 0, out_bias_}}, y_, 1, r.tail());  // h += y·Woutᵀ + bias, then the norm
    } else {
      r.gemm(out_proj_, y_, S, r.y(), H);
      if (out_bias_) {
        launch_add_bias(r.y(), out_bias_, Si, H, r.stream());
        r.counted(1);
      }
    }
  }

 private:
  const Mamba2Weights& w_;
  const JambaConfig& cfg_;
  const int64_t layer_, mi_;  // the layer, its index among the SSM layers (M_n slot)
  DW in_proj_, out_proj_;
  const float *in_bias_ = nullptr, *conv_w_ = nullptr, *conv_b_ = nullptr, *dt_bias_ = nullptr, *A_ = nullptr;
  const float *D_ = nullptr, *norm_w_ = nullptr, *out_bias_ = nullptr;
  float* win_ = nullptr;  // (W, conv_dim) window, then (N, Di) state
  float *zxd_ = nullptr, *xbc_ = nullptr, *y_ = nullptr, *dh_ = nullptr;
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_mamba2(const CudaModuleContext& c, int64_t layer) {
  return std::make_unique<CudaMamba2>(c, layer);
}

HL_REGISTER_MODULE(CudaMixerTable, MixerKind::Mamba2, make_cuda_mamba2);

}  // namespace hl::cuda
