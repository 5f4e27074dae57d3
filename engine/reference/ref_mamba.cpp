// Plain loops of ref_mamba.h, in the order of jamba-spec.md §3.5 (in_proj → conv → x_proj → norms →
// dt_proj → softplus → scan → + D·u → · silu(z) → out_proj). Sums in fp64, the state in fp32.
#include "engine/reference/ref_mamba.h"

#include <algorithm>
#include <cmath>

#include "engine/reference/ref_mixer.h"
#include "engine/reference/ref_ops.h"

namespace hl::ref {

MambaCache make_mamba_cache(const JambaConfig& c) {
  const int64_t Di = c.mamba_inner();
  MambaCache m;
  m.window.assign(static_cast<size_t>(c.mamba_d_conv * Di), 0.0f);
  m.h.assign(static_cast<size_t>(Di * c.mamba_d_state), 0.0f);
  return m;
}

void causal_conv_step(const float* window, const float* conv_w, const float* bias, int64_t Di, int64_t W, float* u) {
  for (int64_t d = 0; d < Di; ++d) {
    double c = bias ? bias[d] : 0.0;  // the bias is inside the activation (jamba-spec.md §3.11 item 4)
    for (int64_t k = 0; k < W; ++k) c += static_cast<double>(conv_w[d * W + k]) * window[k * Di + d];
    u[d] = silu(static_cast<float>(c));
  }
}

void scan_step(float* h, const float* delta, const float* A, const float* B, const float* C, const float* D,
               const float* u, const float* z, int64_t Di, int64_t N, float* y, float* retained) {
  for (int64_t d = 0; d < Di; ++d) {
    double acc = 0, keep = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double dA = std::exp(static_cast<double>(delta[d]) * A[d * N + n]);  // exp(Δ·A), A < 0
      h[d * N + n] = static_cast<float>(dA * h[d * N + n] + static_cast<double>(delta[d]) * B[n] * u[d]);
      acc += static_cast<double>(h[d * N + n]) * C[n];
      keep += dA;
    }
    y[d] = static_cast<float>((acc + static_cast<double>(D[d]) * u[d]) * silu(z[d]));
    // Retained state (Gu & Dao 2023, §3.5 "selection": small Δ keeps the state, large Δ resets it).
    if (retained) retained[d] = static_cast<float>(keep / static_cast<double>(N));
  }
}

void mamba_token(const MambaWeights& w, const JambaConfig& c, const float* x, MambaCache& cache, float* y,
                 MambaOut* out) {
  const int64_t Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv, R = c.mamba_dt_rank;
  const double eps = c.rms_norm_eps;
  MambaOut& o = *out;
  o.xz.resize(static_cast<size_t>(2 * Di));  // x branch (first Di), gate z (second Di)
  linear(w.in_proj, x, o.xz.data(), w.in_bias);
  // The window drops its oldest row and takes this token's raw input u0 (Di,) as its newest.
  std::copy(cache.window.begin() + Di, cache.window.end(), cache.window.begin());
  std::copy(o.xz.begin(), o.xz.begin() + Di, cache.window.end() - Di);
  o.u.resize(static_cast<size_t>(Di));
  causal_conv_step(cache.window.data(), w.conv_w.data(), w.conv_b.empty() ? nullptr : w.conv_b.data(), Di, W,
                   o.u.data());
  // Selective projections p (R+2N,) = x_proj · u → dt_r (R,), B (N,), C (N,), each RMS-normed.
  std::vector<float> p(static_cast<size_t>(R + 2 * N));
  linear(w.x_proj, o.u.data(), p.data());
  std::vector<float> dtr(static_cast<size_t>(R)), B(static_cast<size_t>(N)), C(static_cast<size_t>(N));
  rmsnorm(p.data(), w.dt_norm.data(), R, eps, dtr.data());
  rmsnorm(p.data() + R, w.b_norm.data(), N, eps, B.data());
  rmsnorm(p.data() + R + N, w.c_norm.data(), N, eps, C.data());
  // Δ (Di,) = softplus(dt_proj · dt_r + bias).
  o.delta.resize(static_cast<size_t>(Di));
  linear(w.dt_proj, dtr.data(), o.delta.data(), w.dt_bias.data());
  for (float& v : o.delta) v = softplus(v);
  // ssm_delta_mean = (1/Di) Σ_d Δ_d (Gu & Dao 2023: Δ gates skip vs write).
  double sum = 0;
  for (float v : o.delta) sum += v;
  o.delta_mean = static_cast<float>(sum / static_cast<double>(Di));
  o.retained.resize(static_cast<size_t>(Di));
  o.gated.resize(static_cast<size_t>(Di));
  scan_step(cache.h.data(), o.delta.data(), w.A.data(), B.data(), C.data(), w.D.data(), o.u.data(), o.xz.data() + Di,
            Di, N, o.gated.data(), o.retained.data());
  linear(w.out_proj, o.gated.data(), y, w.out_bias);  // (H,)
}

namespace {

// The Mamba-1 layer of the reference forward: its conv window and SSM state for one run.
class RefMamba1 final : public RefMixer {
 public:
  RefMamba1(const Model& m, int64_t layer)
      : w_(m.w.layers[static_cast<size_t>(layer)].mamba), c_(m.config), mi_(m.schedule[layer].ssm_index),
        cache_(make_mamba_cache(c_)) {}

  void token(const float* x, float* y, const RefRow& at) override {
    const int64_t Di = c_.mamba_inner();
    MambaOut m;
    mamba_token(w_, c_, x, cache_, y, &m);
    at.observe("ssm_in", m.xz.data(), 2 * Di);
    at.observe("ssm_conv", m.u.data(), Di);
    at.observe("ssm_delta", m.delta.data(), Di);
    at.observe("ssm_y", m.gated.data(), Di);
    if (!at.instruments) return;
    TokenTrace* r = at.rec;
    r->ssm_delta_mean[mi_] = m.delta_mean;
    if (!at.full) return;
    std::copy(m.delta.begin(), m.delta.end(), r->ssm_delta.begin() + mi_ * Di);
    std::copy(m.retained.begin(), m.retained.end(), r->ssm_retained.begin() + mi_ * Di);
  }

 private:
  const MambaWeights& w_;
  const JambaConfig& c_;
  int64_t mi_;  // among the SSM layers
  MambaCache cache_;
};

std::unique_ptr<RefMixer> make_ref_mamba1(const Model& m, int64_t layer, const RunPlan&) {
  return std::make_unique<RefMamba1>(m, layer);
}

}  // namespace

HL_REGISTER_MODULE(RefMixerTable, MixerKind::Mamba1, make_ref_mamba1);

}  // namespace hl::ref
