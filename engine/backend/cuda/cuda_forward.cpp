// The CUDA backend's forward pass (see cuda_backend_impl.h): the matrix-vector and cuBLAS
// products, the residual/norm epilogues, attention, Mamba and the feed-forwards enqueued on the
// backend's stream for one block of S tokens, decode (S = 1) or prefill.
#include "engine/backend/cuda/cuda_backend_impl.h"

namespace hl::cuda {

void CudaBackend::gemv(std::initializer_list<GemvSeg> segs, const float* x, int epi, const Tail& t) {
  GemvArgs a;
  a.nseg = 0;
  for (const GemvSeg& s : segs) a.seg[a.nseg++] = s;
  a.x = x;
  a.epi = epi;
  a.tail = t;
  a.params = params_d_.as<int32_t>();
  launch_gemv(a, st_);
  ++launches_;
}

// Y (S, W.rows) with row stride ldy = X (S, W.cols) · Wᵀ in fp32 (cuBLAS column-major: Yᵀ = W·Xᵀ).
void CudaBackend::gemm(const DW& W, const float* X, int64_t S, float* Y, int64_t ldy) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t cols = W.cols;
  auto run = [&](const float* A, int64_t r0, int64_t n) {
    check_blas(blas_api().gemm_ex(blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(S),
                                  static_cast<int>(cols), &one, A, CUDA_R_32F, static_cast<int>(cols), X, CUDA_R_32F,
                                  static_cast<int>(cols), &zero, Y + r0, CUDA_R_32F, static_cast<int>(ldy),
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
               "GemmEx");
    ++launches_;
  };
  if (W.dtype == cudam::kF32) {
    run(static_cast<const float*>(W.p), 0, W.rows);
    return;
  }
  const int64_t panel = std::max<int64_t>(1, wide_cap_ / cols);
  for (int64_t r0 = 0; r0 < W.rows; r0 += panel) {
    const int64_t n = std::min(panel, W.rows - r0);
    launch_widen(static_cast<const char*>(W.p) + r0 * cols * 2, W.dtype, wide_.as<float>(), n * cols, st_);
    ++launches_;
    run(wide_.as<float>(), r0, n);
  }
}

ResidArgs CudaBackend::resid_args(int64_t S, bool add_y, int column, const float* norm_w, float* rec,
                                  int64_t moe_layer) const {
  ResidArgs a;
  a.h = h_;
  a.y = add_y ? y_ : nullptr;
  a.H = cfg_.hidden_size;
  a.S = static_cast<int>(S);
  a.column = column;
  a.rec = rec;
  a.rec_stride = rl_.stride;
  a.off_nonfinite = rl_.nonfinite;
  a.off_resid_max = rl_.resid_max;
  a.instruments = opts_.instruments;
  a.rows = rows_;
  a.cap = cap_;
  a.norm_w = norm_w;
  a.x = x_;
  a.eps = cfg_.rms_norm_eps;
  if (moe_layer >= 0) {
    a.router = layers_[moe_layer].router;
    a.E = static_cast<int>(cfg_.num_experts);
    a.K = static_cast<int>(cfg_.num_experts_per_tok);
    a.xi = static_cast<int>(sched_[moe_layer].moe_index);
    a.probs = probs_;
    a.sel = sel_;
    a.selw = selw_;
    a.router_rec = rec && opts_.instruments ? rec : nullptr;
    a.off_probs = rl_.rprobs;
    a.off_topk = rl_.rtopk;
    a.off_lse = rl_.rlse;
  }
  return a;
}

void CudaBackend::resid(int64_t S, bool add_y, int column, const float* norm_w, float* rec, int64_t moe_layer) {
  const ResidArgs a = resid_args(S, add_y, column, norm_w, rec, moe_layer);
  launch_resid(a, st_);
  ++launches_;
}

void CudaBackend::attention(int64_t layer, int64_t S, float* rec) {
  const LayerDev& d = layers_[layer];
  const int64_t ai = sched_[layer].attn_index;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads, hd = cfg_.head_dim();
  const int64_t kvw = nkv * hd;
  float* kc = kcache_[ai].as<float>();
  float* vc = vcache_[ai].as<float>();
  if (S == 1) {
    gemv({{d.q, q_, 0, nullptr}, {d.k, kc, kvw, nullptr}, {d.v, vc, kvw, nullptr}}, x_, 0);
  } else {
    gemm(d.q, x_, S, q_, nh * hd);
    gemm(d.k, x_, S, kc + kv_len_ * kvw, kvw);
    gemm(d.v, x_, S, vc + kv_len_ * kvw, kvw);
  }
  AttnArgs a;
  a.q = q_;
  a.kc = kc;
  a.vc = vc;
  a.nh = static_cast<int>(nh);
  a.group = static_cast<int>(nh / nkv);
  a.hd = static_cast<int>(hd);
  a.kvw = static_cast<int>(kvw);
  a.params = params_d_.as<int32_t>();
  a.S = static_cast<int>(S);
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.norm = norm_[ai];
  a.sinks = norm_[ai] == static_cast<int>(Normalizer::Sink) ? d.sinks : nullptr;
  a.o = o_;
  a.z = z_;
  a.zstride = zstride_;
  a.rec = rec;
  a.rec_stride = rl_.stride;
  a.off_attn = rl_.attn;
  a.an = sched_.num_attention() * nh;
  a.slot0 = ai * nh;
  a.off_rows = rl_.arows;
  a.row_stride = rl_.arow_stride;
  a.instruments = opts_.instruments;
  a.full = opts_.instruments && opts_.full;
  launch_attention(a, st_);
  ++launches_;
  if (S == 1) {
    gemv({{d.o, h_, 0, nullptr}}, o_, 1, tail_);  // h += o·Woᵀ, then the norm
  } else {
    gemm(d.o, o_, S, y_, cfg_.hidden_size);
  }
}

void CudaBackend::mamba(int64_t layer, int64_t S, float* rec) {
  const LayerDev& d = layers_[layer];
  const int64_t mi = sched_[layer].ssm_index;
  const int64_t Di = cfg_.mamba_inner(), N = cfg_.mamba_d_state, W = cfg_.mamba_d_conv, R = cfg_.mamba_dt_rank;
  const int64_t H = cfg_.hidden_size;
  float* win = mstate_.as<float>() + mi * (W + N) * Di;
  float* hs = win + W * Di;
  float* dt = dt_ + mi * cap_ * Di;
  const bool full = rec && opts_.instruments && opts_.full;
  const bool fused = S == 1 && R + 2 * N <= kMaxStepRank;
  if (fused) {  // in_proj with the conv in its epilogue, x_proj, then norms + Δ + scan in one kernel
    GemvArgs g;
    g.seg[0] = GemvSeg{d.in_proj, xz_, 0, d.in_bias};
    g.x = x_;
    g.epi = 3;
    g.params = params_d_.as<int32_t>();
    g.conv = ConvEpi{win, d.conv_w, d.conv_b, u_, Di, static_cast<int>(W)};
    launch_gemv(g, st_);
    gemv({{d.x_proj, p_, 0, nullptr}}, u_, 0);
    StepArgs m;
    m.p = p_;
    m.wdt = d.dt_norm;
    m.wb = d.b_norm;
    m.wc = d.c_norm;
    m.dt_proj = d.dt_proj;
    m.dt_bias = d.dt_bias;
    m.A = d.A;
    m.D = d.D;
    m.z = xz_ + Di;
    m.u = u_;
    m.h = hs;
    m.dt = dt;
    m.out = gated_;
    m.retained = full ? ret_ + mi * cap_ * Di : nullptr;
    m.R = static_cast<int>(R);
    m.N = static_cast<int>(N);
    m.Di = Di;
    m.eps = cfg_.rms_norm_eps;
    launch_mamba_step(m, st_);
    launches_ += 2;
    gemv({{d.out_proj, h_, 0, d.out_bias}}, gated_, 1, tail_);  // h += gated·Woutᵀ + bias, then the norm
    return;
  }
  if (S == 1) {
    gemv({{d.in_proj, xz_, 0, d.in_bias}}, x_, 0);
  } else {
    gemm(d.in_proj, x_, S, xz_, 2 * Di);
    if (d.in_bias) {
      launch_add_bias(xz_, d.in_bias, static_cast<int>(S), 2 * Di, st_);
      ++launches_;
    }
  }
  launch_conv(xz_, win, d.conv_w, d.conv_b, u_, static_cast<int>(S), Di, static_cast<int>(W), st_);
  ++launches_;
  if (S == 1)
    gemv({{d.x_proj, p_, 0, nullptr}}, u_, 0);
  else
    gemm(d.x_proj, u_, S, p_, R + 2 * N);
  launch_xnorms(p_, dtr_, bm_, cm_, d.dt_norm, d.b_norm, d.c_norm, static_cast<int>(S), static_cast<int>(R),
                static_cast<int>(N), cfg_.rms_norm_eps, st_);
  ++launches_;
  if (S == 1) {
    gemv({{d.dt_proj, dt, 0, d.dt_bias}}, dtr_, 2);  // Δ = softplus(dt_r·dt_projᵀ + bias)
  } else {
    gemm(d.dt_proj, dtr_, S, dt, Di);
    launch_bias_softplus(dt, d.dt_bias, static_cast<int>(S), Di, st_);
    ++launches_;
  }
  ScanArgs a;
  a.dt = dt;
  a.u = u_;
  a.z = xz_ + Di;
  a.zs = 2 * Di;
  a.B = bm_;
  a.C = cm_;
  a.A = d.A;
  a.D = d.D;
  a.h = hs;
  a.out = gated_;
  a.retained = full ? ret_ + mi * cap_ * Di : nullptr;
  a.S = static_cast<int>(S);
  a.N = static_cast<int>(N);
  a.Di = Di;
  if (S <= copts_.scan_chunk) {
    launch_scan(a, st_);
    ++launches_;
  } else {
    launch_scan_chunked(a, copts_.scan_chunk, sc_local_, sc_prod_, sc_carry_, st_);
    launches_ += 3;
  }
  if (S == 1) {
    gemv({{d.out_proj, h_, 0, d.out_bias}}, gated_, 1, tail_);  // h += gated·Woutᵀ + bias, then the norm
  } else {
    gemm(d.out_proj, gated_, S, y_, H);
    if (d.out_bias) {
      launch_add_bias(y_, d.out_bias, static_cast<int>(S), H, st_);
      ++launches_;
    }
  }
}

void CudaBackend::feed_forward(int64_t layer, int64_t S, float* rec) {
  const LayerDev& d = layers_[layer];
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
  const bool moe = sched_[layer].moe_index >= 0;
  if (!moe) {
    if (S == 1) {
      launch_glu(d.table, nullptr, 1, I, H, x_, g_, st_);
      launch_down(d.table, nullptr, nullptr, 1, H, I, g_, h_, tail_, st_);
      launches_ += 2;
    } else {
      const MlpDev& m = d.mlps[0];
      gemm(m.gate, x_, S, g_, I);
      gemm(m.up, x_, S, uf_, I);
      launch_silu_mul(g_, uf_, S * I, st_);
      ++launches_;
      gemm(m.down, g_, S, y_, H);
    }
    return;
  }
  // The router ran in the norm before (resid with moe_layer): probs_, sel_, selw_ and the record.
  const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
  (void)rec;
  if (S == 1) {  // experts chosen on the device, in ascending index, weighted by their probabilities
    launch_glu(d.table, sel_, static_cast<int>(K), I, H, x_, g_, st_);
    launch_down(d.table, sel_, selw_, static_cast<int>(K), H, I, g_, h_, tail_, st_);
    launches_ += 2;
    return;
  }
  // Prefill: the routing to the host, then each chosen expert once on the rows that chose it.
  int32_t* sel_h = route_h_.as<int32_t>();
  float* selw_h = reinterpret_cast<float*>(sel_h + S * K);
  check(cudaMemcpyAsync(sel_h, sel_, static_cast<size_t>(S * K * 4), cudaMemcpyDeviceToHost, st_),
        "reading the routing");
  check(cudaMemcpyAsync(selw_h, selw_, static_cast<size_t>(S * K * 4), cudaMemcpyDeviceToHost, st_),
        "reading the routing");
  sync("reading the routing");
  int32_t* list = idx_h_.as<int32_t>();  // per expert: rows, then weights (as float bits)
  std::vector<int64_t> first(static_cast<size_t>(E) + 1, 0);
  int64_t o = 0;
  for (int64_t e = 0; e < E; ++e) {
    first[e] = o;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        if (sel_h[s * K + k] == e) list[o++] = static_cast<int32_t>(s);
  }
  first[E] = o;
  float* wl = reinterpret_cast<float*>(list + o);
  for (int64_t e = 0, j = 0; e < E; ++e)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t k = 0; k < K; ++k)
        if (sel_h[s * K + k] == e) wl[j++] = selw_h[s * K + k];
  check(cudaMemcpyAsync(idx_d_.as<void>(), list, static_cast<size_t>(2 * o * 4), cudaMemcpyHostToDevice, st_),
        "uploading the expert rows");
  check(cudaMemsetAsync(y_, 0, static_cast<size_t>(S * H * 4), st_), "clearing the expert sum");
  const int32_t* rows_d = idx_d_.as<int32_t>();
  const float* w_d = reinterpret_cast<const float*>(rows_d + o);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = first[e + 1] - first[e];
    if (n == 0) continue;
    const MlpDev& m = d.mlps[e];
    launch_gather(x_, rows_d + first[e], static_cast<int>(n), H, xe_, st_);
    gemm(m.gate, xe_, n, g_, I);
    gemm(m.up, xe_, n, uf_, I);
    launch_silu_mul(g_, uf_, n * I, st_);
    gemm(m.down, g_, n, ye_, H);
    launch_scatter(y_, rows_d + first[e], w_d + first[e], static_cast<int>(n), H, ye_, st_);
    launches_ += 3;
  }
  // The host buffers are reused by the next MoE layer: its copies come after this layer's uploads.
  sync("running the experts");
}

void CudaBackend::enqueue(int64_t S, bool records) {
  const int64_t L = cfg_.num_hidden_layers, H = cfg_.hidden_size;
  float* rec = records ? rec_d_.as<float>() : nullptr;
  check(cudaMemcpyAsync(params_d_.as<void>(), params_h_.as<void>(), static_cast<size_t>((2 + S) * 4),
                        cudaMemcpyHostToDevice, st_),
        "uploading the step parameters");
  // Decode: the products accumulate into h and (fuse_) run the next norm themselves.
  const bool decode = S == 1, fused = decode && fuse_;
  if (fused) {
    const Tail first = tail(resid_args(1, false, 0, layers_[0].in_norm, rec, -1));
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), 1, h_, first, st_);
    ++launches_;
  } else {
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), static_cast<int>(S), h_, Tail{}, st_);
    ++launches_;
    resid(S, false, 0, layers_[0].in_norm, rec);
  }
  for (int64_t i = 0; i < L; ++i) {
    const int64_t moe = sched_[i].moe_index >= 0 ? i : -1;
    const float* next_norm = i + 1 < L ? layers_[i + 1].in_norm : final_norm_;
    tail_ = fused ? tail(resid_args(1, false, -1, layers_[i].ff_norm, rec, moe)) : Tail{};
    if (sched_[i].has_attention())
      attention(i, S, rec);
    else
      mamba(i, S, rec);
    if (!fused) resid(S, !decode, -1, layers_[i].ff_norm, rec, moe);
    tail_ = fused ? tail(resid_args(1, false, static_cast<int>(i + 1), next_norm, rec, -1)) : Tail{};
    feed_forward(i, S, rec);
    if (!fused) resid(S, !decode, static_cast<int>(i + 1), next_norm, rec);
  }
  tail_ = Tail{};
  if (!records) return;
  if (S == 1)
    gemv({{lm_head_, rec + rl_.logits, 0, nullptr}}, x_, 0);
  else
    gemm(lm_head_, x_, S, rec + rl_.logits, rl_.stride);
  if (opts_.instruments) {
    launch_rank1(rows_, static_cast<int>(L + 1), cap_, static_cast<int>(S), H, rank1_.as<double>(), rec, rl_.stride,
                 rl_.rank1, st_);
    ++launches_;
    if (sched_.num_ssm() > 0) {
      launch_mamba_stats(dt_, ret_, static_cast<int>(sched_.num_ssm()), cap_, static_cast<int>(S), cfg_.mamba_inner(), rec,
                         rl_.stride, rl_.dmean, rl_.sdelta, rl_.sret, opts_.full, st_);
      ++launches_;
    }
  }
  check(cudaMemcpyAsync(rec_h_.as<void>(), rec, static_cast<size_t>(S * rl_.stride * 4), cudaMemcpyDeviceToHost, st_),
        "reading the records");
}

// Captures the decode step (parameters in, every kernel, the record out) as a graph when the one
// held is stale; capture runs nothing, so start() does it ahead of the first step. A capture that
// fails leaves plain launches for the rest of the backend's life.

}  // namespace hl::cuda
