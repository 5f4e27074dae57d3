// The CUDA Mamba-1 mixer (jamba-spec.md §3.5 prefill, §3.6 decode): in_proj → x|z, causal conv +
// SiLU over the cached window, x_proj → dt|B|C through their RMSNorms, Δ = softplus(dt_proj + bias),
// the selective scan gated by silu(z), out_proj. Decode: the conv in in_proj's epilogue and norms + Δ
// + scan in one kernel; prefill: cuBLAS products and the chunked parallel scan. State: the conv window
// (W, Di) and the scan state (N, Di); Δ and the retained share go to the record's SSM buffers.
#include "engine/backend/cuda/cuda_module.h"

namespace hl::cuda {

namespace {

class CudaMamba1 final : public CudaMixer {
 public:
  CudaMamba1(const CudaModuleContext& c, int64_t layer)
      : w_(c.model.w.layers[layer].mamba), cfg_(c.config), layer_(layer), mi_(c.schedule[layer].ssm_index) {}

  void upload(CudaWeights& w) override {
    const int64_t Di = cfg_.mamba_inner(), N = cfg_.mamba_d_state;
    in_proj_ = w.upload(w_.in_proj);
    x_proj_ = w.upload(w_.x_proj);
    dt_proj_ = w.upload(w_.dt_proj);
    out_proj_ = w.upload(w_.out_proj);
    in_bias_ = w.upload_vec(w_.in_bias, "a Mamba bias");
    conv_w_ = w.upload_vec(w_.conv_w, "the conv weights");
    conv_b_ = w.upload_vec(w_.conv_b, "the conv bias");
    dt_norm_ = w.upload_vec(w_.dt_norm, "a Mamba norm");
    b_norm_ = w.upload_vec(w_.b_norm, "a Mamba norm");
    c_norm_ = w.upload_vec(w_.c_norm, "a Mamba norm");
    dt_bias_ = w.upload_vec(w_.dt_bias, "the dt bias");
    std::vector<float> At(static_cast<size_t>(N * Di));  // (N, Di): channel innermost for coalesced lanes
    for (int64_t c = 0; c < Di; ++c)
      for (int64_t n = 0; n < N; ++n) At[n * Di + c] = w_.A[c * N + n];
    A_ = w.upload_vec(At, "A");
    D_ = w.upload_vec(w_.D, "D");
    out_bias_ = w.upload_vec(w_.out_bias, "a Mamba bias");
  }

  // The window (W, Di), then the state (N, Di).
  std::vector<CudaStateNeed> state() const override {
    return {{"the Mamba state", 0, (cfg_.mamba_d_conv + cfg_.mamba_d_state) * cfg_.mamba_inner() * 4}};
  }
  void bind_state(const std::vector<float*>& b) override { win_ = b[0]; }

  // xz (S, 2Di), u (S, Di), p (S, R+2N) → dtr (S, R), B, C (S, N), gated (S, Di); the chunked scan's
  // carries (chunks, N, Di) when a block holds more than one chunk.
  std::vector<CudaScratchNeed> scratch(int64_t cap, const CudaRun& r) const override {
    const int64_t Di = cfg_.mamba_inner(), R = cfg_.mamba_dt_rank, N = cfg_.mamba_d_state;
    const int64_t chunks = (cap + r.cuda_options().scan_chunk - 1) / r.cuda_options().scan_chunk;
    const int64_t carry = chunks > 1 ? chunks * N * Di : 0;
    return {{"ssm.xz", cap * 2 * Di}, {"ssm.u", cap * Di},       {"ssm.p", cap * (R + 2 * N)},
            {"ssm.dtr", cap * R},     {"ssm.b", cap * N},        {"ssm.c", cap * N},
            {"ssm.gated", cap * Di},  {"ssm.scan_local", carry}, {"ssm.scan_prod", carry},
            {"ssm.scan_carry", carry}};
  }
  void bind_scratch(const CudaScratch& s, const CudaRun&) override {
    xz_ = s.device("ssm.xz");
    u_ = s.device("ssm.u");
    p_ = s.device("ssm.p");
    dtr_ = s.device("ssm.dtr");
    bm_ = s.device("ssm.b");
    cm_ = s.device("ssm.c");
    gated_ = s.device("ssm.gated");
    sc_local_ = s.device("ssm.scan_local");
    sc_prod_ = s.device("ssm.scan_prod");
    sc_carry_ = s.device("ssm.scan_carry");
  }

  void enqueue(CudaRun& r, int64_t S, float* rec) override {
    const JambaConfig& cfg = cfg_;
    const int64_t Di = cfg.mamba_inner(), N = cfg.mamba_d_state, W = cfg.mamba_d_conv, R = cfg.mamba_dt_rank;
    const int64_t H = cfg.hidden_size;
    float* x = r.x();
    float* hs = win_ + W * Di;
    float* dt = r.ssm_delta(mi_);
    const bool full = rec && r.options().instruments && r.options().full;
    const bool fused = S == 1 && R + 2 * N <= kMaxStepRank;
    if (fused) {  // in_proj with the conv in its epilogue, x_proj, then norms + Δ + scan in one kernel
      GemvArgs g;
      g.seg[0] = GemvSeg{in_proj_, xz_, 0, in_bias_};
      g.x = x;
      g.epi = 3;
      g.params = r.params();
      g.conv = ConvEpi{win_, conv_w_, conv_b_, u_, Di, static_cast<int>(W)};
      launch_gemv(g, r.stream());
      observe_in(r, S);
      r.gemv({{x_proj_, p_, 0, nullptr}}, u_, 0);
      StepArgs m;
      m.p = p_;
      m.wdt = dt_norm_;
      m.wb = b_norm_;
      m.wc = c_norm_;
      m.dt_proj = dt_proj_;
      m.dt_bias = dt_bias_;
      m.A = A_;
      m.D = D_;
      m.z = xz_ + Di;
      m.u = u_;
      m.h = hs;
      m.dt = dt;
      m.out = gated_;
      m.retained = full ? r.ssm_retained(mi_) : nullptr;
      m.R = static_cast<int>(R);
      m.N = static_cast<int>(N);
      m.Di = Di;
      m.eps = cfg.rms_norm_eps;
      launch_mamba_step(m, r.stream());
      r.counted(2);
      observe_scan(r, dt, S);
      r.gemv({{out_proj_, r.h(), 0, out_bias_}}, gated_, 1, r.tail());  // h += gated·Woutᵀ + bias, then the norm
      return;
    }
    if (S == 1) {
      r.gemv({{in_proj_, xz_, 0, in_bias_}}, x, 0);
    } else {
      r.gemm(in_proj_, x, S, xz_, 2 * Di);
      if (in_bias_) {
        launch_add_bias(xz_, in_bias_, static_cast<int>(S), 2 * Di, r.stream());
        r.counted(1);
      }
    }
    launch_conv(xz_, 2 * Di, win_, conv_w_, conv_b_, u_, static_cast<int>(S), Di, static_cast<int>(W), r.stream());
    r.counted(1);
    observe_in(r, S);
    if (S == 1)
      r.gemv({{x_proj_, p_, 0, nullptr}}, u_, 0);
    else
      r.gemm(x_proj_, u_, S, p_, R + 2 * N);
    launch_xnorms(p_, dtr_, bm_, cm_, dt_norm_, b_norm_, c_norm_, static_cast<int>(S), static_cast<int>(R),
                  static_cast<int>(N), cfg.rms_norm_eps, r.stream());
    r.counted(1);
    if (S == 1) {
      r.gemv({{dt_proj_, dt, 0, dt_bias_}}, dtr_, 2);  // Δ = softplus(dt_r·dt_projᵀ + bias)
    } else {
      r.gemm(dt_proj_, dtr_, S, dt, Di);
      launch_bias_softplus(dt, dt_bias_, static_cast<int>(S), Di, r.stream());
      r.counted(1);
    }
    ScanArgs a;
    a.dt = dt;
    a.u = u_;
    a.z = xz_ + Di;
    a.zs = 2 * Di;
    a.B = bm_;
    a.C = cm_;
    a.A = A_;
    a.D = D_;
    a.h = hs;
    a.out = gated_;
    a.retained = full ? r.ssm_retained(mi_) : nullptr;
    a.S = static_cast<int>(S);
    a.N = static_cast<int>(N);
    a.Di = Di;
    const int chunk = r.cuda_options().scan_chunk;
    if (S <= chunk) {
      launch_scan(a, r.stream());
      r.counted(1);
    } else {
      launch_scan_chunked(a, chunk, sc_local_, sc_prod_, sc_carry_, r.stream());
      r.counted(3);
    }
    observe_scan(r, dt, S);
    if (S == 1) {
      r.gemv({{out_proj_, r.h(), 0, out_bias_}}, gated_, 1, r.tail());  // h += gated·Woutᵀ + bias, then the norm
    } else {
      r.gemm(out_proj_, gated_, S, r.y(), H);
      if (out_bias_) {
        launch_add_bias(r.y(), out_bias_, static_cast<int>(S), H, r.stream());
        r.counted(1);
      }
    }
  }

 private:
  // The observed intermediates (CudaRun::observe): x|z after in_proj and u after the conv; Δ and the
  // gated scan output after the scan (the scans leave x|z, u and Δ as they are).
  void observe_in(CudaRun& r, int64_t S) const {
    const int64_t Di = cfg_.mamba_inner();
    r.observe("ssm_in", layer_, xz_, 2 * Di, 2 * Di, S);
    r.observe("ssm_conv", layer_, u_, Di, Di, S);
  }
  void observe_scan(CudaRun& r, const float* dt, int64_t S) const {
    const int64_t Di = cfg_.mamba_inner();
    r.observe("ssm_delta", layer_, dt, Di, Di, S);
    r.observe("ssm_y", layer_, gated_, Di, Di, S);
  }

  const MambaWeights& w_;
  const JambaConfig& cfg_;
  const int64_t layer_, mi_;  // the layer, its index among the SSM layers (M_n slot)
  DW in_proj_, x_proj_, dt_proj_, out_proj_;
  const float *in_bias_ = nullptr, *conv_w_ = nullptr, *conv_b_ = nullptr, *dt_norm_ = nullptr, *b_norm_ = nullptr;
  const float *c_norm_ = nullptr, *dt_bias_ = nullptr, *A_ = nullptr, *D_ = nullptr, *out_bias_ = nullptr;
  float* win_ = nullptr;  // (W, Di) window, then (N, Di) state
  float *xz_ = nullptr, *u_ = nullptr, *p_ = nullptr, *dtr_ = nullptr, *bm_ = nullptr, *cm_ = nullptr;
  float *gated_ = nullptr, *sc_local_ = nullptr, *sc_prod_ = nullptr, *sc_carry_ = nullptr;
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_mamba1(const CudaModuleContext& c, int64_t layer) {
  return std::make_unique<CudaMamba1>(c, layer);
}

HL_REGISTER_MODULE(CudaMixerTable, MixerKind::Mamba1, make_cuda_mamba1);

}  // namespace hl::cuda
