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

void CudaRun::gemv(std::initializer_list<GemvSeg> segs, const float* x, int epi, const Tail& t) {
  GemvArgs a;
  a.nseg = 0;
  for (const GemvSeg& s : segs) a.seg[a.nseg++] = s;
  a.x = x;
  a.epi = epi;
  a.tail = t;
  a.params = b_.params_d_.as<int32_t>();
  launch_gemv(a, b_.st_);
  ++b_.launches_;
}

// Y (S, W.rows) with row stride ldy = X (S, W.cols) · Wᵀ in fp32 (cuBLAS column-major: Yᵀ = W·Xᵀ).
void CudaRun::gemm(const DW& W, const float* X, int64_t S, float* Y, int64_t ldy) {
  const float one = 1.0f, zero = 0.0f;
  const int64_t cols = W.cols;
  auto run = [&](const float* A, int64_t r0, int64_t n) {
    check_blas(blas_api().gemm_ex(b_.blas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(S),
                                  static_cast<int>(cols), &one, A, CUDA_R_32F, static_cast<int>(cols), X, CUDA_R_32F,
                                  static_cast<int>(cols), &zero, Y + r0, CUDA_R_32F, static_cast<int>(ldy),
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

void CudaBackend::enqueue(int64_t S, bool records) {
  const int64_t L = cfg_.num_hidden_layers, H = cfg_.hidden_size;
  float* rec = records ? rec_d_.as<float>() : nullptr;
  check(cudaMemcpyAsync(params_d_.as<void>(), params_h_.as<void>(), static_cast<size_t>((2 + S) * 4),
                        cudaMemcpyHostToDevice, st_),
        "uploading the step parameters");
  // Decode: the products accumulate into h and (fuse_) run the next norm themselves. A layer without a
  // mixer (Nemotron-H's '-') starts with its FFN's norm, run (with the MoE router fused) by the layer
  // before it.
  const bool decode = S == 1, fused = decode && fuse_;
  auto entry_norm = [&](int64_t i) { return mixers_[i] ? layers_[i].in_norm : layers_[i].ff_norm; };
  auto entry_ffn = [&](int64_t i) -> const CudaFfn* { return mixers_[i] ? nullptr : ffns_[i].get(); };
  auto observe_entry = [&](int64_t i) { observe(mixers_[i] ? "attn_norm" : "ffn_norm", i, x_, H, H, S); };
  if (fused) {
    const Tail first = tail(resid_args(1, false, 0, entry_norm(0), rec, entry_ffn(0)));
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), 1, h_, first, st_);
    ++launches_;
  } else {
    launch_embed(embed_, regs_, params_d_.as<int32_t>(), static_cast<int>(S), h_, Tail{}, st_);
    ++launches_;
    resid(S, false, 0, entry_norm(0), rec, entry_ffn(0));
  }
  observe("embed", -1, h_, H, H, S);  // the norm after the embedding leaves h as it is
  observe_entry(0);
  for (int64_t i = 0; i < L; ++i) {
    const bool last = i + 1 == L;
    const float* next_norm = last ? final_norm_ : entry_norm(i + 1);
    const CudaFfn* next_ffn = last ? nullptr : entry_ffn(i + 1);
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
    if (!last)
      observe_entry(i + 1);
    else if (records)  // registers: the final norm runs, but the reference has no final_norm for them
      observe("final_norm", -1, x_, H, H, S);
  }
  tail_ = Tail{};
  if (!records) return;
  if (S == 1)
    run_.gemv({{lm_head_, rec + rl_.logits, 0, nullptr}}, x_, 0);
  else
    run_.gemm(lm_head_, x_, S, rec + rl_.logits, rl_.stride);
  observe("logits", -1, rec + rl_.logits, rl_.stride, cfg_.vocab_size, S);
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

}  // namespace hl::cuda
