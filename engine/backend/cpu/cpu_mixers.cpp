// The two token mixers of the CPU reference backend. Attention (jamba-spec.md §3.4): no positional
// encoding, GQA kv = q_head / (nh/nkv), scale 1/sqrt(hd), normalizers of trace-format.md §2 with the
// row instruments fused (probes/attention_probe.h). Mamba (§3.5/§3.6): in_proj split x|z, causal
// depthwise conv + bias + SiLU over the cached raw window, x_proj → dt|B|C with their RMSNorms,
// softplus(dt_proj + bias), selective scan h = exp(Δ·A)·h + Δ·B·u, y = h·C + D·u, y·silu(z), out_proj.
// Decode computes q|k|v in one threaded pass; the scan runs over chunks of tokens (cache-sized).
#include <cmath>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/attention_probe.h"
#include "engine/probes/ssm_probe.h"

namespace hl::cpu {

void CpuBackend::attention(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const AttentionWeights& w = model_->w.layers[layer].attn;
  const int64_t ai = sched_[layer].attn_index;
  AttnState& st = attn_[ai];
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads, hd = cfg_.head_dim();
  const int64_t kvw = nkv * hd, group = nh / nkv;
  float* q = grow(sc_.q, S * nh * hd);  // (S, nh*hd)
  const int64_t base = st.len;
  if ((base + S) * kvw > static_cast<int64_t>(st.k.size())) {  // double the reserved rows
    const int64_t rows = std::max(base + S, 2 * static_cast<int64_t>(st.k.size()) / kvw);
    grow(st.k, rows * kvw);
    grow(st.v, rows * kvw);
  }
  for (std::vector<float>& t : sc_.thread_rows) grow(t, 2 * static_cast<int64_t>(st.k.size()) / kvw);  // as the KV rows
  float* kn = &st.k[base * kvw];  // (S, nkv*hd) new keys
  float* vn = &st.v[base * kvw];  // (S, nkv*hd) new values
  if (S == 1) {
    const MatvecJob jobs[3] = {{&w.q, 0, w.q.rows, x, q}, {&w.k, 0, w.k.rows, x, kn}, {&w.v, 0, w.v.rows, x, vn}};
    matvec(jobs, 3);
  } else {
    linear(w.q, x, S, q);
    linear(w.k, x, S, kn);
    linear(w.v, x, S, vn);
  }
  st.len = base + S;
  float* o = grow(sc_.o, S * nh * hd);  // (S, nh*hd)
  std::fill(o, o + S * nh * hd, 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool instr = opts_.instruments;
  const simd::Kernels& kern = simd::kernels();
  const float* K = st.k.data();  // (len, nkv*hd)
  const float* Vc = st.v.data();
  const int64_t grain = std::max<int64_t>(1, 8192 / ((base + S) * hd));  // rows of (query, head) per chunk
  ThreadPool::global().parallel_for(S * nh, grain, [&](int64_t b, int64_t e) {
    float* z = sc_.thread_rows[ThreadPool::thread_index()].data();  // (nkeys,) logits
    float* p = z + (base + S);                                      // (nkeys,) probabilities
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / nh, hq = item % nh, hk = hq / group;
      const int64_t nkeys = base + s + 1;  // registers and tokens up to and including the query
      const float* qv = &q[(s * nh + hq) * hd];
      kern.dot_rows(qv, K + hk * hd, kvw, nkeys, hd, scale, z);  // z (nkeys,) = q·k_j / sqrt(hd)
      TokenTrace* r = recs[s];
      AttnRowStats stats;
      attention_row(z, nkeys, st.norm, st.null_logit[hq], p, r && instr ? &stats : nullptr);
      kern.axpy_rows(p, Vc + hk * hd, kvw, nkeys, hd, &o[(s * nh + hq) * hd]);  // o (hd,) = Σ_j p_j v_j
      if (!r || !instr) continue;
      const int64_t slot = ai * nh + hq;
      r->attn_entropy[slot] = stats.entropy;
      r->attn_entropy_norm[slot] = stats.entropy_norm;
      r->attn_mass[slot] = stats.mass;
      r->attn_max_logit[slot] = stats.max_abs_logit;
      if (opts_.full) {
        float* row = &r->attn_rows[slot * (nkeys + 1)];
        std::copy(p, p + nkeys, row);
        row[nkeys] = stats.p_null;
      }
    }
  });
  observe("attn_heads", layer, o, S, nh * hd, recs);
  linear(w.o, o, S, y);
}

void CpuBackend::mamba(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const MambaWeights& w = model_->w.layers[layer].mamba;
  const int64_t mi = sched_[layer].ssm_index;
  MambaState& st = mamba_[mi];
  const int64_t Di = cfg_.mamba_inner(), N = cfg_.mamba_d_state, W = cfg_.mamba_d_conv, R = cfg_.mamba_dt_rank;
  float* xz = grow(sc_.xz, S * 2 * Di);  // (S, 2Di): u0 | z
  linear(w.in_proj, x, S, xz, w.in_bias.empty() ? nullptr : w.in_bias.data());
  observe("ssm_in", layer, xz, S, 2 * Di, recs);
  // Causal depthwise conv over [cached window, block], then SiLU: u (S, Di), channels spread over the pool.
  float* u = grow(sc_.u, S * Di);
  const float* cwT = conv_wT_[mi].data();  // (W, Di) conv_w transposed
  float* win = st.conv.data();             // (W, Di) raw inputs of the last W tokens, oldest first
  const simd::Kernels& kern = simd::kernels();
  const float* cb = w.conv_b.empty() ? nullptr : w.conv_b.data();
  ThreadPool::global().parallel_for(Di, std::max<int64_t>(64, 16384 / S), [&](int64_t d0, int64_t d1) {
    causal_conv_silu(kern, xz, 2 * Di, S, win, cwT, cb, Di, W, d0, d1, u);
  });
  observe("ssm_conv", layer, u, S, Di, recs);
  // Selective projections and Jamba's inner norms: p (S, R+2N) → dt_r (S, R), B (S, N), C (S, N).
  const int64_t P = R + 2 * N;
  float* p = grow(sc_.p, S * P);
  linear(w.x_proj, u, S, p);
  float* dtr = grow(sc_.dtr, S * R);
  float* Bm = grow(sc_.Bm, S * N);
  float* Cm = grow(sc_.Cm, S * N);
  for (int64_t s = 0; s < S; ++s) {
    rmsnorm(&p[s * P], w.dt_norm.data(), 1, R, cfg_.rms_norm_eps, &dtr[s * R]);
    rmsnorm(&p[s * P + R], w.b_norm.data(), 1, N, cfg_.rms_norm_eps, &Bm[s * N]);
    rmsnorm(&p[s * P + R + N], w.c_norm.data(), 1, N, cfg_.rms_norm_eps, &Cm[s * N]);
  }
  // dt (S, Di) = dt_r · dt_projᵀ + bias, then Δ = softplus of it, per chunk in the scan's job below
  // (a decode step computes its dt rows there too: one threaded pass fewer).
  float* dt = grow(sc_.dt, S * Di);
  if (S > 1) linear(w.dt_proj, dtr, S, dt, w.dt_bias.data());
  // Scan over chunks of kChunk tokens (their dt, u, z, out rows stay in L2), each chunk parallel
  // over blocks of kTile channels; every channel runs through the tokens in order.
  const bool full = opts_.instruments && opts_.full;
  float* gated = grow(sc_.gated, S * Di);                         // (S, Di)
  float* retained = full ? grow(sc_.retained, S * Di) : nullptr;  // (S, Di)
  constexpr int64_t kChunk = 64, kBlock = simd::kTile;
  const int64_t blocks = (Di + kBlock - 1) / kBlock;
  for (int64_t s0 = 0; s0 < S; s0 += kChunk) {
    const int64_t n = std::min(kChunk, S - s0);
    simd::ScanArgs a;
    a.S = n;
    a.Di = Di;
    a.N = N;
    a.dt = dt + s0 * Di;
    a.u = u + s0 * Di;
    a.z = xz + s0 * 2 * Di + Di;
    a.z_stride = 2 * Di;
    a.B = Bm + s0 * N;
    a.C = Cm + s0 * N;
    a.A = A_tiled_[mi].data();
    a.D = w.D.data();
    a.h = st.ssm.data();
    a.out = gated + s0 * Di;
    a.retained = retained ? retained + s0 * Di : nullptr;
    ThreadPool::global().parallel_for(blocks, std::max<int64_t>(1, 16 / n), [&](int64_t b0, int64_t b1) {
      const int64_t d0 = b0 * kBlock, d1 = std::min(Di, b1 * kBlock);
      if (S == 1) {
        kern.matvec(w.dt_proj.dtype, w.dt_proj.row_ptr(d0), d1 - d0, R, dtr, dt + d0);
        for (int64_t d = d0; d < d1; ++d) dt[d] += w.dt_bias[d];
      }
      for (int64_t s = s0; s < s0 + n; ++s) kern.softplus(dt + s * Di + d0, d1 - d0);  // Δ = softplus(·)
      kern.scan(a, d0, d1);
    });
  }
  if (opts_.instruments) {
    ThreadPool::global().parallel_for(S, std::max<int64_t>(1, 8192 / Di), [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        TokenTrace* r = recs[s];
        if (!r) continue;
        r->ssm_delta_mean[mi] = ssm_delta_mean(&dt[s * Di], Di);
        if (!full) continue;
        std::copy(&dt[s * Di], &dt[(s + 1) * Di], r->ssm_delta.begin() + mi * Di);
        std::copy(&retained[s * Di], &retained[(s + 1) * Di], r->ssm_retained.begin() + mi * Di);
      }
    });
  }
  observe("ssm_delta", layer, dt, S, Di, recs);
  observe("ssm_y", layer, gated, S, Di, recs);
  linear(w.out_proj, gated, S, y, w.out_bias.empty() ? nullptr : w.out_bias.data());
}

}  // namespace hl::cpu
