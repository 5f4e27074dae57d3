// The two token mixers of the CPU reference backend. Attention (jamba-spec.md §3.4): no positional
// encoding, GQA kv = q_head / (nh/nkv), scale 1/sqrt(hd), normalizers of trace-format.md §2 with the
// row instruments fused (probes/attention_probe.h). Mamba (§3.5/§3.6): in_proj split x|z, causal
// depthwise conv + bias + SiLU over the cached raw window, x_proj → dt|B|C with their RMSNorms,
// softplus(dt_proj + bias), selective scan h = exp(Δ·A)·h + Δ·B·u, y = h·C + D·u, y·silu(z), out_proj.
#include <cmath>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/attention_probe.h"

namespace hl::cpu {

void CpuBackend::attention(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const AttentionWeights& w = model_->w.layers[layer].attn;
  AttnState& st = attn_[kind_index_[layer]];
  const int64_t ai = kind_index_[layer];
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads, hd = cfg_.head_dim();
  const int64_t kvw = nkv * hd, group = nh / nkv;
  std::vector<float> q(static_cast<size_t>(S * nh * hd));  // (S, nh*hd)
  linear(w.q, x, S, q.data());
  const int64_t base = st.len;
  st.k.resize(static_cast<size_t>((base + S) * kvw));  // (len, nkv*hd)
  st.v.resize(static_cast<size_t>((base + S) * kvw));
  linear(w.k, x, S, &st.k[base * kvw]);
  linear(w.v, x, S, &st.v[base * kvw]);
  st.len = base + S;
  std::vector<float> o(static_cast<size_t>(S * nh * hd), 0.0f);  // (S, nh*hd)
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool instr = opts_.instruments;
  ThreadPool::global().parallel_for(S * nh, 1, [&](int64_t b, int64_t e) {
    std::vector<float> z, p;
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / nh, hq = item % nh, hk = hq / group;
      const int64_t nkeys = base + s + 1;  // registers and tokens up to and including the query
      z.resize(static_cast<size_t>(nkeys));
      p.resize(static_cast<size_t>(nkeys));
      const float* qv = &q[(s * nh + hq) * hd];
      for (int64_t j = 0; j < nkeys; ++j) z[j] = dot(qv, &st.k[j * kvw + hk * hd], hd) * scale;
      TokenTrace* r = recs[s];
      AttnRowStats stats;
      attention_row(z.data(), nkeys, st.norm, st.null_logit[hq], p.data(), r && instr ? &stats : nullptr);
      float* ov = &o[(s * nh + hq) * hd];
      for (int64_t j = 0; j < nkeys; ++j) {
        const float pj = p[j];
        const float* vv = &st.v[j * kvw + hk * hd];
        for (int64_t c = 0; c < hd; ++c) ov[c] += pj * vv[c];
      }
      if (!r || !instr) continue;
      const int64_t slot = ai * nh + hq;
      r->attn_entropy[slot] = stats.entropy;
      r->attn_entropy_norm[slot] = stats.entropy_norm;
      r->attn_mass[slot] = stats.mass;
      r->attn_max_logit[slot] = stats.max_abs_logit;
      if (opts_.full) {
        float* row = &r->attn_rows[slot * (nkeys + 1)];
        std::copy(p.begin(), p.end(), row);
        row[nkeys] = stats.p_null;
      }
    }
  });
  linear(w.o, o.data(), S, y);
}

void CpuBackend::mamba(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const MambaWeights& w = model_->w.layers[layer].mamba;
  MambaState& st = mamba_[kind_index_[layer]];
  const int64_t mi = kind_index_[layer];
  const int64_t Di = cfg_.mamba_inner(), N = cfg_.mamba_d_state, W = cfg_.mamba_d_conv, R = cfg_.mamba_dt_rank;
  std::vector<float> xz(static_cast<size_t>(S * 2 * Di));  // (S, 2Di): u0 | z
  linear(w.in_proj, x, S, xz.data(), w.in_bias.empty() ? nullptr : w.in_bias.data());
  // Causal depthwise conv over [cached window, block], then SiLU: u (S, Di). Channels are independent.
  std::vector<float> u(static_cast<size_t>(S * Di));
  ThreadPool::global().parallel_for(Di, 64, [&](int64_t d0, int64_t d1) {
    for (int64_t d = d0; d < d1; ++d) {
      float* win = &st.conv[d * W];  // (W,) newest last
      const float* cw = &w.conv_w[d * W];
      for (int64_t s = 0; s < S; ++s) {
        for (int64_t k = 0; k + 1 < W; ++k) win[k] = win[k + 1];
        win[W - 1] = xz[s * 2 * Di + d];
        float c = w.conv_b.empty() ? 0.0f : w.conv_b[d];
        for (int64_t k = 0; k < W; ++k) c += cw[k] * win[k];
        u[s * Di + d] = silu(c);
      }
    }
  });
  // Selective projections and Jamba's inner norms: p (S, R+2N) → dt_r (S, R), B (S, N), C (S, N).
  const int64_t P = R + 2 * N;
  std::vector<float> p(static_cast<size_t>(S * P));
  linear(w.x_proj, u.data(), S, p.data());
  std::vector<float> dtr(static_cast<size_t>(S * R)), Bm(static_cast<size_t>(S * N)), Cm(static_cast<size_t>(S * N));
  for (int64_t s = 0; s < S; ++s) {
    rmsnorm(&p[s * P], w.dt_norm.data(), 1, R, cfg_.rms_norm_eps, &dtr[s * R]);
    rmsnorm(&p[s * P + R], w.b_norm.data(), 1, N, cfg_.rms_norm_eps, &Bm[s * N]);
    rmsnorm(&p[s * P + R + N], w.c_norm.data(), 1, N, cfg_.rms_norm_eps, &Cm[s * N]);
  }
  std::vector<float> dt(static_cast<size_t>(S * Di));  // (S, Di) Δ after softplus
  linear(w.dt_proj, dtr.data(), S, dt.data(), w.dt_bias.data());
  for (float& v : dt) v = softplus(v);
  // Scan, channel-parallel; every channel runs through the block's tokens in order.
  const bool full = opts_.instruments && opts_.full;
  std::vector<float> gated(static_cast<size_t>(S * Di));  // (S, Di)
  std::vector<float> retained(full ? static_cast<size_t>(S * Di) : 0);
  ThreadPool::global().parallel_for(Di, 16, [&](int64_t d0, int64_t d1) {
    for (int64_t d = d0; d < d1; ++d) {
      float* hs = &st.ssm[d * N];  // (N,)
      const float* A = &w.A[d * N];
      for (int64_t s = 0; s < S; ++s) {
        const float delta = dt[s * Di + d], ud = u[s * Di + d];
        const float* B = &Bm[s * N];
        const float* C = &Cm[s * N];
        float acc = 0, keep = 0;
        for (int64_t n = 0; n < N; ++n) {
          const float dA = std::exp(delta * A[n]);
          hs[n] = dA * hs[n] + delta * B[n] * ud;
          acc += hs[n] * C[n];
          keep += dA;
        }
        const float yv = acc + w.D[d] * ud;
        gated[s * Di + d] = yv * silu(xz[s * 2 * Di + Di + d]);
        if (full) retained[s * Di + d] = keep / static_cast<float>(N);
      }
    }
  });
  if (opts_.instruments) {
    for (int64_t s = 0; s < S; ++s) {
      TokenTrace* r = recs[s];
      if (!r) continue;
      double sum = 0;
      for (int64_t d = 0; d < Di; ++d) sum += dt[s * Di + d];
      r->ssm_delta_mean[mi] = static_cast<float>(sum / static_cast<double>(Di));
      if (!full) continue;
      std::copy(&dt[s * Di], &dt[(s + 1) * Di], r->ssm_delta.begin() + mi * Di);
      std::copy(&retained[s * Di], &retained[(s + 1) * Di], r->ssm_retained.begin() + mi * Di);
    }
  }
  linear(w.out_proj, gated.data(), S, y, w.out_bias.empty() ? nullptr : w.out_bias.data());
}

}  // namespace hl::cpu
