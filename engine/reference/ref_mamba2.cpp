// Plain loops of ref_mamba2.h, in the order of HF's Bamba/Mamba-2 slow path: Δ = softplus(dt + bias),
// clamped; the recurrence per head; the SSD chunked form; the gated RMSNorm; the hidden attention;
// and the reference forward's Mamba-2 unit over them.
#include "engine/reference/ref_mamba2.h"

#include <algorithm>
#include <cmath>

#include "engine/model/mixer_mamba2.h"
#include "engine/reference/ref_mixer.h"
#include "engine/reference/ref_ops.h"

namespace hl::ref {

void mamba2_delta(const Mamba2Dims& d, const float* dt, const float* dt_bias, float* delta) {
  for (int64_t h = 0; h < d.nh; ++h) {
    const double v = softplus(dt[h] + dt_bias[h]);
    delta[h] = static_cast<float>(std::clamp(v, d.dt_min, d.dt_max));
  }
}

void mamba2_step(const Mamba2Dims& d, const Mamba2Token& in, const float* dt_bias, const float* A, const float* D,
                 float* S, float* y, float* retained) {
  const int64_t P = d.P, N = d.N;
  std::vector<float> delta(static_cast<size_t>(d.nh));  // (nh,)
  mamba2_delta(d, in.dt, dt_bias, delta.data());
  for (int64_t h = 0; h < d.nh; ++h) {
    const int64_t g = d.group_of(h);
    const float* B = in.B + g * N;  // (N,)
    const float* C = in.C + g * N;  // (N,)
    const double dA = std::exp(static_cast<double>(delta[h]) * A[h]);  // one decay per head
    if (retained) retained[h] = static_cast<float>(dA);
    for (int64_t p = 0; p < P; ++p) {
      const int64_t c = h * P + p;  // the channel
      float* s = S + c * N;         // (N,) row p of S_h
      double acc = 0;
      for (int64_t n = 0; n < N; ++n) {
        s[n] = static_cast<float>(dA * s[n] + static_cast<double>(delta[h]) * in.x[c] * B[n]);
        acc += static_cast<double>(s[n]) * C[n];
      }
      y[c] = static_cast<float>(acc + static_cast<double>(D[h]) * in.x[c]);
    }
  }
}

void mamba2_scan_chunked(const Mamba2Dims& d, const std::vector<Mamba2Token>& in, int64_t Q, const float* dt_bias,
                         const float* A, const float* D, float* S, float* y) {
  const int64_t T = static_cast<int64_t>(in.size()), P = d.P, N = d.N, Di = d.inner();
  std::vector<float> delta(static_cast<size_t>(T * d.nh));  // (T, nh)
  for (int64_t t = 0; t < T; ++t) mamba2_delta(d, in[t].dt, dt_bias, &delta[t * d.nh]);
  std::vector<double> cum(static_cast<size_t>(Q));  // within a chunk: Σ_{r≤i} Δ_r A_h
  std::vector<double> next(static_cast<size_t>(P * N));
  for (int64_t t0 = 0; t0 < T; t0 += Q) {
    const int64_t len = std::min(Q, T - t0);
    for (int64_t h = 0; h < d.nh; ++h) {
      const int64_t g = d.group_of(h);
      double run = 0;
      for (int64_t i = 0; i < len; ++i) cum[i] = run += static_cast<double>(delta[(t0 + i) * d.nh + h]) * A[h];
      for (int64_t i = 0; i < len; ++i) {
        const Mamba2Token& ti = in[t0 + i];
        for (int64_t p = 0; p < P; ++p) {
          const int64_t c = h * P + p;
          // The state carried into the chunk, decayed to token i: e^{cum_i} (S_h C_i).
          double off = 0;
          for (int64_t n = 0; n < N; ++n) off += static_cast<double>(S[c * N + n]) * ti.C[g * N + n];
          off *= std::exp(cum[i]);
          // Within the chunk: Σ_{j≤i} (C_i·B_j) e^{cum_i − cum_j} Δ_j x_j.
          double diag = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const Mamba2Token& tj = in[t0 + j];
            double cb = 0;
            for (int64_t n = 0; n < N; ++n) cb += static_cast<double>(ti.C[g * N + n]) * tj.B[g * N + n];
            diag += cb * std::exp(cum[i] - cum[j]) * delta[(t0 + j) * d.nh + h] * tj.x[c];
          }
          y[(t0 + i) * Di + c] = static_cast<float>(off + diag + static_cast<double>(D[h]) * ti.x[c]);
        }
      }
      // The state at the chunk's end: e^{cum_last} S + Σ_j e^{cum_last − cum_j} Δ_j x_j B_jᵀ.
      const double last = cum[len - 1];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) {
          const int64_t c = h * P + p;
          double s = std::exp(last) * S[c * N + n];
          for (int64_t j = 0; j < len; ++j)
            s += std::exp(last - cum[j]) * delta[(t0 + j) * d.nh + h] * in[t0 + j].x[c] * in[t0 + j].B[g * N + n];
          next[p * N + n] = s;
        }
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) S[(h * P + p) * N + n] = static_cast<float>(next[p * N + n]);
    }
  }
}

namespace {

// y (Di,) ← y normalised by the RMS over each group of `group` channels, times w (Di,).
void group_rmsnorm(float* y, const float* w, int64_t Di, int64_t group, double eps) {
  for (int64_t g0 = 0; g0 < Di; g0 += group) {
    double ss = 0;
    for (int64_t c = g0; c < g0 + group; ++c) ss += static_cast<double>(y[c]) * y[c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(group) + eps);
    for (int64_t c = g0; c < g0 + group; ++c) y[c] = static_cast<float>(static_cast<double>(w[c]) * (y[c] * inv));
  }
}

// y (Di,) ← y ⊙ silu(z).
void gate(float* y, const float* z, int64_t Di) {
  for (int64_t c = 0; c < Di; ++c) y[c] = static_cast<float>(static_cast<double>(y[c]) * silu(z[c]));
}

}  // namespace

void gated_rmsnorm(float* y, const float* z, const float* w, int64_t Di, int64_t group, double eps) {
  gate(y, z, Di);
  group_rmsnorm(y, w, Di, group, eps);
}

void gate_then_norm_or_not(float* y, const float* z, const float* w, int64_t Di, int64_t group, double eps,
                           bool norm_before_gate) {
  if (w && !norm_before_gate) return gated_rmsnorm(y, z, w, Di, group, eps);
  if (w) group_rmsnorm(y, w, Di, group, eps);  // normalise first
  gate(y, z, Di);
}

void mamba2_hidden_attention_row(const Mamba2Dims& d, const float* delta, const float* B, const float* C,
                                 const float* A, int64_t h, int64_t t, double* row) {
  const int64_t N = d.N, GN = d.G * d.N, g = d.group_of(h);
  double decay = 0;  // A_h Σ_{r=s+1..t} Δ_r, grown as s walks back from t
  for (int64_t s = t; s >= 0; --s) {
    double cb = 0;
    for (int64_t n = 0; n < N; ++n) cb += static_cast<double>(C[t * GN + g * N + n]) * B[s * GN + g * N + n];
    row[s] = cb * std::exp(decay) * delta[s * d.nh + h];
    decay += static_cast<double>(A[h]) * delta[s * d.nh + h];
  }
}

namespace {

// The Mamba-2 layer of the reference forward (HF BambaMixer.torch_forward for one token): in_proj →
// z | x|B|C | dt; the causal conv over x|B|C (window of its last W raw rows) and SiLU; the step; the
// gated RMSNorm; out_proj. Keeps the conv window and the state S (nh, P, N) for one run.
class RefMamba2 final : public RefMixer {
 public:
  RefMamba2(const Model& m, int64_t layer)
      : w_(m.w.layers[static_cast<size_t>(layer)].mamba2), c_(m.config), mi_(m.schedule[layer].ssm_index) {
    d_.nh = c_.mamba_n_heads;
    d_.P = c_.mamba_d_head;
    d_.N = c_.mamba_d_state;
    d_.G = c_.mamba_n_groups;
    d_.dt_min = c_.mamba2_dt_lo();
    d_.dt_max = c_.mamba2_dt_hi();
    window_.assign(static_cast<size_t>(c_.mamba_d_conv * c_.mamba2_conv_dim()), 0.0f);
    S_.assign(static_cast<size_t>(c_.mamba_inner() * d_.N), 0.0f);
    mup_ = mamba2_mup_vector(c_);
  }

  void token(const float* x, float* y, const RefRow& at) override {
    const int64_t Di = c_.mamba_inner(), conv = c_.mamba2_conv_dim(), W = c_.mamba_d_conv, GN = d_.G * d_.N;
    std::vector<float> zxbcdt(static_cast<size_t>(Di + conv + d_.nh));  // z (Di) | x|B|C (conv) | dt (nh)
    linear(w_.in_proj, x, zxbcdt.data(), w_.in_bias);
    for (size_t k = 0; k < mup_.size(); ++k) zxbcdt[k] *= mup_[k];  // Falcon-H1's µP factors per segment
    at.observe("ssm_in", zxbcdt.data(), Di + conv + d_.nh);
    // The window drops its oldest row and takes this token's x|B|C; conv + bias, then SiLU.
    std::copy(window_.begin() + conv, window_.end(), window_.begin());
    std::copy(zxbcdt.begin() + Di, zxbcdt.begin() + Di + conv, window_.end() - conv);
    std::vector<float> xbc(static_cast<size_t>(conv));  // (conv_dim,)
    for (int64_t ch = 0; ch < conv; ++ch) {
      double v = w_.conv_b.empty() ? 0.0 : w_.conv_b[ch];
      for (int64_t k = 0; k < W; ++k) v += static_cast<double>(w_.conv_w[ch * W + k]) * window_[k * conv + ch];
      xbc[ch] = silu(static_cast<float>(v));
    }
    at.observe("ssm_conv", xbc.data(), conv);
    const float* dt = zxbcdt.data() + Di + conv;
    std::vector<float> delta(static_cast<size_t>(d_.nh)), retained(static_cast<size_t>(d_.nh));
    mamba2_delta(d_, dt, w_.dt_bias.data(), delta.data());
    std::vector<float> out(static_cast<size_t>(Di));  // (Di,)
    mamba2_step(d_, {xbc.data(), xbc.data() + Di, xbc.data() + Di + GN, dt}, w_.dt_bias.data(), w_.A.data(),
                w_.D.data(), S_.data(), out.data(), retained.data());
    gate_then_norm_or_not(out.data(), zxbcdt.data(), w_.norm_w.empty() ? nullptr : w_.norm_w.data(), Di,
                          c_.mamba2_norm_group(), c_.rms_norm_eps, c_.mamba_norm_before_gate);
    at.observe("ssm_delta", delta.data(), d_.nh);
    at.observe("ssm_y", out.data(), Di);
    linear(w_.out_proj, out.data(), y, w_.out_bias);  // (H,)
    if (!at.instruments) return;
    TokenTrace* r = at.rec;
    double sum = 0;  // ssm_delta_mean: the mean of Δ over the heads
    for (float v : delta) sum += v;
    r->ssm_delta_mean[mi_] = static_cast<float>(sum / static_cast<double>(d_.nh));
    if (!at.full) return;
    for (int64_t ch = 0; ch < Di; ++ch) {  // per channel: its head's Δ and exp(Δ A) (trace-format.md §3)
      r->ssm_delta[mi_ * Di + ch] = delta[ch / d_.P];
      r->ssm_retained[mi_ * Di + ch] = retained[ch / d_.P];
    }
  }

 private:
  const Mamba2Weights& w_;
  const JambaConfig& c_;
  int64_t mi_;  // among the SSM layers
  Mamba2Dims d_;
  std::vector<float> window_;  // (W, conv_dim), oldest row first
  std::vector<float> S_;       // (nh, P, N)
  std::vector<float> mup_;     // (Di + conv_dim + nh,) in_proj's output factors, or empty (all 1)
};

std::unique_ptr<RefMixer> make_ref_mamba2(const Model& m, int64_t layer, const RunPlan&) {
  return std::make_unique<RefMamba2>(m, layer);
}

}  // namespace

HL_REGISTER_MODULE(RefMixerTable, MixerKind::Mamba2, make_ref_mamba2);

}  // namespace hl::ref
