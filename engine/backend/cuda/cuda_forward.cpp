// The CUDA backend's model loop (see cuda_backend_impl.h) for one block of S tokens, decode (S = 1)
// or prefill: embed, per layer its mixer unit and its FFN unit (cuda_module.h) each followed by the
// residual add and the next norm, the head, and the records' statistics (rank-to-1, the SSM
// layers' Δ). Also CudaRun, the units' view of the backend: the matrix-vector and cuBLAS products,
// and the observation copies of the named intermediates (set_cuda_observer; model/intermediates.h).
#include "engine/backend/cuda/cuda_backend_impl.h"

namespace hl::cuda {

const JambaConfig& CudaRun::config() const { return b_.cfg_; }
const LayerSchedule& CudaRun::schedule() const { return b_.sched_; }
const RunOptions& CudaRun::options() const { return b_.opts_; }
const CudaOptions& CudaRun::cuda_options() const { return b_.copts_; }
const RecLayout& CudaRun::record() const { return b_.rl_; }
cudaStream_t CudaRun::stream() const { return b_.st_; }
const int32_t* CudaRun::params() const { return b_.params_d_.as<int32_t>(); }
int64_t CudaRun::cached() const { return b_.kv_len_; }
int64_t CudaRun::context_cap() const { return b_.kv_cap_; }
int64_t CudaRun::block_cap() const { return b_.cap_; }
float* CudaRun::h() const { return b_.h_; }
float* CudaRun::x() const { return b_.x_; }
float* CudaRun::y() const { return b_.y_; }
float* CudaRun::ssm_delta(int64_t m) const { return b_.dt_ + m * b_.cap_ * b_.cfg_.mamba_inner(); }
float* CudaRun::ssm_retained(int64_t m) const { return b_.ret_ + m * b_.cap_ * b_.cfg_.mamba_inner(); }
const Tail& CudaRun::tail() const { return b_.tail_; }
void CudaRun::counted(int64_t kernels) { b_.launches_ += kernels; }
void CudaRun::sync(const char* what) { b_.sync(what); }
void CudaRun::observe(const char* name, int64_t layer, const float* dev, int64_t stride, int64_t cols, int64_t S) {
  b_.observe(name, layer, dev, stride, cols, S);
}

// The copy goes on the stream after the work that wrote `dev` and is waited for, so the rows are
// final; later kernels may overwrite `dev` only after the observer has returned.
void CudaBackend::observe(const char* name, int64_t layer, const float* dev, int64_t stride, int64_t cols, int64_t S) {
  if (!observer_ || capturing_) return;
  obs_host_.resize(static_cast<size_t>(S * cols));
  check(cudaMemcpy2DAsync(obs_host_.data(), static_cast<size_t>(cols * 4), dev, static_cast<size_t>(stride * 4),
                          static_cast<size_t>(cols * 4), static_cast<size_t>(S), cudaMemcpyDeviceToHost, st_),
        std::string("copying the observed ") + name);
  sync("copying an observed intermediate");
  // The block's first run row: registers 0.., token t at n_reg + t (model/intermediates.h).
  observer_(Intermediate{name, layer, kv_len_, S, cols, cols, obs_host_.data()});
}

void CudaBackend::observe_output(const char* name, int64_t layer, int64_t S) {
  if (observer_ && cuda_reports_intermediate(name, S)) observe(name, layer, y_, cfg_.hidden_size, cfg_.hidden_size, S);
}

void CudaRun::gemv(std::initializer_list<GemvSeg> segs, const float* x, int epi, const Tail& t, float alpha) {
  GemvArgs a;
  a.nseg = 0;
  for (const GemvSeg& s : segs) a.seg[a.nseg++] = s;
  a.x = x;
  a.epi = epi;
  a.alpha = epi == 1 ? static_cast<float>(b_.cfg_.residual_multiplier) : alpha;
  a.tail = t;
  a.params = b_.params_d_.as<int32_t>();
  launch_gemv(a, b_.st_);
  ++b_.launches_;
}

// Y (S, W.rows) with row stride ldy = X (S, W.cols) · Wᵀ in fp32 (cuBLAS column-major: Yᵀ = W·Xᵀ).
void CudaRun::gemm(const DW& W, const float* X, int64_t S, float* Y, int64_t ldy, float alpha, bool accumulate) {
  const float beta = accumulate ? 1.0f : 0.0f;
  const int64_t cols = W.cols;
  auto run = [&](const float* A, int64_t r0, int64_t n) {
    check_blas(blas_api().gemm_ex(b_.blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(S),
                                  static_cast<int>(cols), &alpha, A, CUDA_R_32F, static_cast<int>(cols), X, CUDA_R_32F,
                                  static_cast<int>(cols), &beta, Y + r0, CUDA_R_32F, static_cast<int>(ldy),
                                  CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
               "GemmEx");
    ++b_.launches_;
  };
  if (W.dtype == cudam::kF32) {
    run(static_cast<const float*>(W.p), 0, W.rows);
    return;
  }
  const int64_t panel = std::max<int64_t>(1, b_.wide_cap_ / cols);
  for (int64_t r0 = 0; r0 < W.rows; r0 += panel) {
    const int64_t n = std::min(panel, W.rows - r0);
    launch_widen(static_cast<const char*>(W.p) + cudam::elem_bytes(W.dtype, r0 * cols), W.dtype, b_.wide_.as<float>(), n * cols, b_.st_);
    ++b_.launches_;
    run(b_.wide_.as<float>(), r0, n);
  }
}

ResidArgs CudaBackend::resid_args(int64_t S, bool add_y, int column, const float* norm_w, float* rec,
                                  const CudaFfn* ffn) const {
  ResidArgs a;
  a.h = h_;
  a.y = add_y ? y_ : nullptr;
  a.y_scale = static_cast<float>(cfg_.residual_multiplier);
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
  if (ffn) ffn->fuse_into_norm(a, rec, run_);
  return a;
}

void CudaBackend::resid(int64_t S, bool add_y, int column, const float* norm_w, float* rec, const CudaFfn* ffn) {
  const ResidArgs a = resid_args(S, add_y, column, norm_w, rec, ffn);
  launch_resid(a, st_);
  ++launches_;
}

void CudaBackend::half_layer(CudaUnit& unit, int64_t S, bool fused, int column, const float* norm_w, float* rec,
                             const CudaFfn* ffn) {
  tail_ = fused ? tail(resid_args(1, false, column, norm_w, rec, ffn)) : Tail{};
  unit.enqueue(run_, S, rec);
  if (!fused) resid(S, S != 1, column, norm_w, rec, ffn);
}

// A pipeline stage (link_) runs layers [mine_.begin, mine_.end): the first stage embeds, a later one
// takes h from the stage before (stage_in_) and runs its first layer's norm; a stage before the last
// ends after its last layer's residual add (the next norm is the next stage's) and gives h back
// (stage_out_); only the last runs the head. Each stage's records are zeroed first and hold its own
// layers' slots and residual points (the rest are merged in from the other stages on stage 0).
void CudaBackend::enqueue(int64_t S, bool records) {
  const int64_t L = cfg_.num_hidden_layers, H = cfg_.hidden_size, b = mine_.begin, e = mine_.end;
  float* rec = records ? rec_d_.as<float>() : nullptr;
  check(cudaMemcpyAsync(params_d_.as<void>(), params_h_.as<void>(), static_cast<size_t>((2 + S) * 4),
                        cudaMemcpyHostToDevice, st_),
        "uploading the step parameters");
  if (link_ && rec)
    check(cudaMemsetAsync(rec, 0, static_cast<size_t>(S * rl_.stride * 4), st_), "clearing the stage's records");
  // Decode: the products accumulate into h and (fuse_) run the next norm themselves. A layer without a
  // mixer (Nemotron-H's '-') starts with its FFN's norm, run (with the MoE router fused) by the layer
  // before it.
  const bool decode = S == 1, fused = decode && fuse_;
  const float emb = static_cast<float>(cfg_.embedding_multiplier);  // Granite's (1 elsewhere)
  auto entry_norm = [&](int64_t i) { return mixers_[i] ? layers_[i].in_norm : layers_[i].ff_norm; };
  auto entry_ffn = [&](int64_t i) -> const CudaFfn* { return mixers_[i] ? nullptr : ffns_[i].get(); };
  auto observe_entry = [&](int64_t i) { observe(mixers_[i] ? "attn_norm" : "ffn_norm", i, x_, H, H, S); };
  if (!first_stage()) {  // the residual point before layer b was observed by the stage before
    check(cudaMemcpyAsync(h_, stage_in_, static_cast<size_t>(S * H * 4), cudaMemcpyHostToDevice, st_),
          "taking the stage's input rows");
    resid(S, false, -1, entry_norm(b), rec, entry_ffn(b));
  } else if (fused) {
    const Tail first = tail(resid_args(1, false, 0, entry_norm(0), rec, entry_ffn(0)));
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), 1, h_, emb, first, st_);
    ++launches_;
  } else {
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), static_cast<int>(S), h_, emb, Tail{}, st_);
    ++launches_;
    resid(S, false, 0, entry_norm(0), rec, entry_ffn(0));
  }
  if (first_stage()) observe("embed", -1, h_, H, H, S);  // the norm after the embedding leaves h as it is
  observe_entry(b);
  for (int64_t i = b; i < e; ++i) {
    const bool last = i + 1 == L, stage_end = i + 1 == e;
    const float* next_norm = last ? final_norm_ : stage_end ? nullptr : entry_norm(i + 1);
    const CudaFfn* next_ffn = stage_end ? nullptr : entry_ffn(i + 1);
    const int end = static_cast<int>(i + 1);  // the residual point after layer i
    CudaFfn* ffn = ffns_[i].get();
    if (!mixers_[i]) {  // no mixer: the layer is its feed-forward
      half_layer(*ffn, S, fused, end, next_norm, rec, next_ffn);
      observe_output("ffn_out", i, S);
    } else if (!ffn) {  // no feed-forward: the layer ends after its mixer
      half_layer(*mixers_[i], S, fused, end, next_norm, rec, next_ffn);
      observe_output("mixer_out", i, S);
    } else {
      half_layer(*mixers_[i], S, fused, -1, layers_[i].ff_norm, rec, ffn);
      observe_output("mixer_out", i, S);
      observe("ffn_norm", i, x_, H, H, S);
      half_layer(*ffn, S, fused, end, next_norm, rec, next_ffn);
      observe_output("ffn_out", i, S);
    }
    observe("layer_out", i, h_, H, H, S);
    if (last) {
      if (records) observe("final_norm", -1, x_, H, H, S);  // registers: no final_norm in the reference
    } else if (!stage_end) {
      observe_entry(i + 1);
    }
  }
  tail_ = Tail{};
  if (!last_stage())
    check(cudaMemcpyAsync(stage_out_, h_, static_cast<size_t>(S * H * 4), cudaMemcpyDeviceToHost, st_),
          "giving the stage's output rows");
  if (!records) return;
  if (last_stage()) {
    // Granite: logits ÷ logits_scaling, as × its float reciprocal (within an ulp of the CPU's division).
    const float logit_scale = static_cast<float>(cfg_.lm_head_multiplier / cfg_.logits_scaling);
    if (S == 1)
      run_.gemv({{lm_head_, rec + rl_.logits, 0, nullptr}}, x_, 0, Tail{}, logit_scale);
    else
      run_.gemm(lm_head_, x_, S, rec + rl_.logits, rl_.stride, logit_scale);
    observe("logits", -1, rec + rl_.logits, rl_.stride, cfg_.vocab_size, S);
  }
  if (opts_.instruments) {
    // The stage's residual points [c0, e] and SSM layers [m0, m1) (every one without a pipeline).
    const int64_t c0 = first_stage() ? 0 : b + 1;
    launch_rank1(rows_ + c0 * cap_ * H, static_cast<int>(e + 1 - c0), cap_, static_cast<int>(S), H,
                 rank1_.as<double>() + c0 * (H + 4), rec, rl_.stride, rl_.rank1 + c0, st_);
    ++launches_;
    int64_t m0 = sched_.num_ssm(), m1 = 0;
    for (int64_t i = b; i < e; ++i)
      if (sched_[i].ssm_index >= 0) {
        m0 = std::min(m0, sched_[i].ssm_index);
        m1 = std::max(m1, sched_[i].ssm_index + 1);
      }
    if (m1 > m0) {
      const int64_t Di = cfg_.mamba_inner(), off = m0 * cap_ * Di;
      launch_mamba_stats(dt_ + off, ret_ ? ret_ + off : nullptr, static_cast<int>(m1 - m0), cap_, static_cast<int>(S),
                         Di, rec, rl_.stride, rl_.dmean + m0, rl_.sdelta + m0 * Di, rl_.sret + m0 * Di, opts_.full, st_);
      ++launches_;
    }
  }
  check(cudaMemcpyAsync(rec_h_.as<void>(), rec, static_cast<size_t>(S * rl_.stride * 4), cudaMemcpyDeviceToHost, st_),
        "reading the records");
}

}  // namespace hl::cuda
