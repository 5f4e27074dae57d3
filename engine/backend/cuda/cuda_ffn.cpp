// The CUDA feed-forwards: the dense MLP (jamba-spec.md §3.8, down(silu(gate·x) ⊙ up·x); or Nemotron-H's
// relu² MLP without gate, down(relu(up·x + b_up)²) + b_down, HF's NemotronHMLP) and the mixture of
// experts (§3.9: router softmax, top-k in ascending index, the chosen experts' outputs weighted by their
// probabilities; Granite's: the k probabilities renormalised to sum 1, and a shared expert beside the
// routed ones, weight 1). Each branch's output into the residual stream × the residual multiplier
// (Granite's; 1 elsewhere). Decode: fused gate|up and down kernels over a device table of the experts
// (the shared expert last), the MoE router run in the norm before (relu²: matrix-vector products
// around the relu² kernel). Prefill: cuBLAS products; MoE reads the routing back and runs each chosen
// expert once on the rows that chose it, then the shared expert on every row. No run state.
#include <vector>

#include "engine/backend/cuda/cuda_module.h"

namespace hl::cuda {

namespace {

struct MlpDev {
  DW gate, up, down;
};

// The MLPs of a layer (the dense one, or the E experts) and their device table for the decode kernels.
class CudaMlps : public CudaFfn {
 public:
  CudaMlps(const CudaModuleContext& c, int64_t layer)
      : lw_(c.model.w.layers[layer]), cfg_(c.config), fp_(c.schedule[layer].ffn_params), I_(fp_.d_ff) {}

 protected:
  void upload_mlps(CudaWeights& w, const std::vector<const MlpWeights*>& mlps) {
    std::vector<ExpertW> table;
    for (const MlpWeights* m : mlps) {
      MlpDev md{w.upload(m->gate), w.upload(m->up), w.upload(m->down)};
      mlps_.push_back(md);
      table.push_back(ExpertW{md.gate.p, md.up.p, md.down.p, md.gate.dtype, md.up.dtype, md.down.dtype});
    }
    table_ = static_cast<const ExpertW*>(w.upload_bytes(table.data(), table.size() * sizeof(ExpertW), "the expert table"));
  }

  float res() const { return static_cast<float>(cfg_.residual_multiplier); }

  // Decode of one MLP (mlps_[j], width I) on x into h (× the residual multiplier), then the tail's
  // norm: SwiGLU by the expert kernels over table entry j, or relu² without gate by matrix-vector
  // products around the relu² kernel, with its mlp_bias biases (null: none).
  void mlp_decode(CudaRun& r, size_t j, int64_t I, const float* up_bias, const float* down_bias, const Tail& t) {
    const int64_t H = cfg_.hidden_size;
    if (fp_.gated) {
      launch_glu(table_ + j, nullptr, 1, I, H, r.x(), g_, r.stream());
      launch_down(table_ + j, nullptr, nullptr, 1, H, I, g_, r.h(), res(), t, r.stream());
      r.counted(2);
      return;
    }
    const MlpDev& m = mlps_[j];
    r.gemv({{m.up, uf_, 0, up_bias}}, r.x(), 0);
    launch_relu2(uf_, I, r.stream());
    r.counted(1);
    r.gemv({{m.down, r.h(), 0, down_bias}}, uf_, 1, t);
  }

  // Prefill: y (n, out) (+)= an MLP (width I) of x (n rows): SwiGLU, or relu² without gate with its
  // biases (null: none), through cuBLAS; g_ and uf_ hold (n, I).
  void mlp_rows(CudaRun& r, const MlpDev& m, const float* x, int64_t n, int64_t I, float* y, int64_t out,
                bool accumulate, const float* up_bias, const float* down_bias) {
    cudaStream_t st = r.stream();
    if (fp_.gated) {
      r.gemm(m.gate, x, n, g_, I);
      r.gemm(m.up, x, n, uf_, I);
      launch_silu_mul(g_, uf_, n * I, st);
      r.counted(1);
      r.gemm(m.down, g_, n, y, out, 1.0f, accumulate);
    } else {
      r.gemm(m.up, x, n, uf_, I);
      add_bias(r, uf_, up_bias, n, I);
      launch_relu2(uf_, n * I, st);
      r.counted(1);
      r.gemm(m.down, uf_, n, y, out, 1.0f, accumulate);
    }
    add_bias(r, y, down_bias, n, out);
  }

  static void add_bias(CudaRun& r, float* y, const float* bias, int64_t S, int64_t n) {
    if (!bias) return;
    launch_add_bias(y, bias, static_cast<int>(S), n, r.stream());
    r.counted(1);
  }

  const LayerWeights& lw_;
  const JambaConfig& cfg_;
  const FfnParams& fp_;
  const int64_t I_;                  // the dense MLP's or each routed expert's width (a layer's own)
  std::vector<MlpDev> mlps_;         // the dense MLP, or the E experts (then the shared expert)
  const ExpertW* table_ = nullptr;  // device copy of mlps_
  float *g_ = nullptr, *uf_ = nullptr;  // the scratch "ffn.g" and "ffn.u", bound by the subclass
};

class CudaDenseFfn final : public CudaMlps {
 public:
  CudaDenseFfn(const CudaModuleContext& c, int64_t layer) : CudaMlps(c, layer) {}

  void upload(CudaWeights& w) override {
    upload_mlps(w, {&lw_.mlp});
    up_bias_ = w.upload_vec(lw_.mlp.up_bias, "an MLP bias");  // relu² only (Nemotron-H's mlp_bias)
    down_bias_ = w.upload_vec(lw_.mlp.down_bias, "an MLP bias");
  }

  // g, u (S, I).
  std::vector<CudaScratchNeed> scratch(int64_t cap, const CudaRun&) const override {
    return {{"ffn.g", cap * I_}, {"ffn.u", cap * I_}};
  }
  void bind_scratch(const CudaScratch& s, const CudaRun&) override {
    g_ = s.device("ffn.g");
    uf_ = s.device("ffn.u");
  }

  // Decode: h += the MLP of x (then the norm); prefill: y.
  void enqueue(CudaRun& r, int64_t S, float*) override {
    if (S == 1) return mlp_decode(r, 0, I_, up_bias_, down_bias_, r.tail());
    mlp_rows(r, mlps_[0], r.x(), S, I_, r.y(), cfg_.hidden_size, false, up_bias_, down_bias_);
  }

 private:
  const float *up_bias_ = nullptr, *down_bias_ = nullptr;
};

class CudaMoeFfn final : public CudaMlps {
 public:
  CudaMoeFfn(const CudaModuleContext& c, int64_t layer)
      : CudaMlps(c, layer),
        layer_(layer),
        xi_(c.schedule[layer].moe_index),
        Hin_(lw_.moe.latent_in.empty() ? cfg_.hidden_size : lw_.moe.latent_in.rows) {
    if (cfg_.num_experts > 256 || cfg_.num_experts_per_tok > 64 || fp_.groups > 64)
      throw BackendFailure("cuda: the router kernel takes at most 256 experts, 64 per token and 64 groups (layer " +
                           std::to_string(layer) + ": " + std::to_string(cfg_.num_experts) + ", " +
                           std::to_string(cfg_.num_experts_per_tok) + ", " + std::to_string(fp_.groups) + ")");
  }

  void upload(CudaWeights& w) override {
    const MoeWeights& m = lw_.moe;
    router_ = w.upload(m.router);
    router_bias_ = w.upload_vec(m.router_bias, "the router's correction bias");
    latent_in_ = w.upload(m.latent_in);
    latent_out_ = w.upload(m.latent_out);
    latent_in_bias_ = w.upload_vec(m.latent_in_bias, "a latent projection bias");
    latent_out_bias_ = w.upload_vec(m.latent_out_bias, "a latent projection bias");
    shared_up_bias_ = w.upload_vec(m.shared.up_bias, "an MLP bias");
    shared_down_bias_ = w.upload_vec(m.shared.down_bias, "an MLP bias");
    std::vector<const MlpWeights*> mlps;
    for (const MlpWeights& e : m.experts) mlps.push_back(&e);
    if (shared()) mlps.push_back(&m.shared);  // table entry E
    upload_mlps(w, mlps);
  }

  // g (max(S, K), I), u (S, I) (I: the wider of the routed and the shared experts); prefill: the
  // rows of one expert xe, ye (S, Hin); with latent projections x and the experts' sum in their
  // dims, xl and yl (S, Hin); the router's probs (S, E), sel and selw (S, K); the per-expert row
  // lists on the device and pinned on the host, and the routing read back (sel, selw).
  std::vector<CudaScratchNeed> scratch(int64_t cap, const CudaRun&) const override {
    const int64_t H = cfg_.hidden_size, I = std::max(I_, fp_.shared_d_ff), X = std::max(H, Hin_);
    const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
    return {{"ffn.g", std::max(cap, K) * I},
            {"ffn.u", cap * I},
            {"moe.xe", cap * X},
            {"moe.ye", cap * X},
            {"moe.xl", latent() ? cap * Hin_ : 0},
            {"moe.yl", latent() ? cap * Hin_ : 0},
            {"moe.probs", cap * E},
            {"moe.selw", cap * K},
            {"moe.sel", cap * K},
            {"moe.rows", 2 * cap * K + 64},
            {"the routing readback", 2 * cap * K, true},
            {"the expert rows", 2 * cap * K + 64, true}};
  }
  void bind_scratch(const CudaScratch& s, const CudaRun&) override {
    g_ = s.device("ffn.g");
    uf_ = s.device("ffn.u");
    xe_ = s.device("moe.xe");
    ye_ = s.device("moe.ye");
    xl_ = s.device("moe.xl");
    yl_ = s.device("moe.yl");
    probs_ = s.device("moe.probs");
    selw_ = s.device("moe.selw");
    sel_ = reinterpret_cast<int32_t*>(s.device("moe.sel"));
    idx_d_ = s.device("moe.rows");
    route_h_ = s.pinned("the routing readback");
    idx_h_ = s.pinned("the expert rows");
  }

  // The router on the normed rows: probs, sel, selw and (instruments) the record.
  void fuse_into_norm(ResidArgs& a, float* rec, const CudaRun& r) const override {
    const RecLayout& rl = r.record();
    a.router = router_;
    a.E = static_cast<int>(cfg_.num_experts);
    a.K = static_cast<int>(cfg_.num_experts_per_tok);
    a.xi = static_cast<int>(xi_);
    a.renorm = fp_.renormalize;
    a.sigmoid = fp_.sigmoid_router;
    a.router_bias = router_bias_;
    a.groups = static_cast<int>(fp_.groups);
    a.topk_groups = static_cast<int>(fp_.topk_groups);
    a.routed_scaling = fp_.routed_scaling;
    a.probs = probs_;
    a.sel = sel_;
    a.selw = selw_;
    a.router_rec = rec && r.options().instruments ? rec : nullptr;
    a.off_probs = rl.rprobs;
    a.off_topk = rl.rtopk;
    a.off_lse = rl.rlse;
  }

  void enqueue(CudaRun& r, int64_t S, float*) override {
    // The router ran in the norm before (fuse_into_norm): probs_, sel_, selw_ and the record.
    const int64_t E = cfg_.num_experts;
    r.observe("router_probs", layer_, probs_, E, E, S);
    if (S == 1)
      enqueue_decode(r);
    else
      enqueue_prefill(r, S);
  }

 private:
  bool shared() const { return fp_.shared_d_ff > 0; }
  bool latent() const { return !lw_.moe.latent_in.empty(); }

  // Experts chosen on the device, in ascending index, weighted: h += Σ w_j E_j(x) (with latent
  // projections: h += latent_out(Σ w_j E_j(latent_in(x)))), then the shared expert; the last
  // kernel runs the next norm.
  void enqueue_decode(CudaRun& r) {
    const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
    cudaStream_t st = r.stream();
    const float* xin = r.x();
    if (latent()) {
      r.gemv({{latent_in_, xl_, 0, latent_in_bias_}}, r.x(), 0);
      check(cudaMemsetAsync(yl_, 0, static_cast<size_t>(Hin_ * 4), st), "clearing the experts' sum");
      xin = xl_;
    }
    launch_glu(table_, sel_, static_cast<int>(K), I_, Hin_, xin, g_, st);
    const bool more = latent() || shared();
    launch_down(table_, sel_, selw_, static_cast<int>(K), Hin_, I_, g_, latent() ? yl_ : r.h(), latent() ? 1.0f : res(),
                more ? Tail{} : r.tail(), st);
    r.counted(2);
    if (latent()) r.gemv({{latent_out_, r.h(), 0, latent_out_bias_}}, yl_, 1, shared() ? Tail{} : r.tail());
    if (shared())  // the shared expert, weight 1
      mlp_decode(r, static_cast<size_t>(E), fp_.shared_d_ff, shared_up_bias_, shared_down_bias_, r.tail());
  }

  // The routing to the host, then each chosen expert once on the rows that chose it (in the latent
  // dims where there are latent projections), weighted into y; then the shared expert on every row.
  void enqueue_prefill(CudaRun& r, int64_t S) {
    const int64_t H = cfg_.hidden_size, I = I_, E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
    cudaStream_t st = r.stream();
    int32_t* sel_h = static_cast<int32_t*>(route_h_);
    float* selw_h = reinterpret_cast<float*>(sel_h + S * K);
    check(cudaMemcpyAsync(sel_h, sel_, static_cast<size_t>(S * K * 4), cudaMemcpyDeviceToHost, st),
          "reading the routing");
    check(cudaMemcpyAsync(selw_h, selw_, static_cast<size_t>(S * K * 4), cudaMemcpyDeviceToHost, st),
          "reading the routing");
    r.sync("reading the routing");
    int32_t* list = static_cast<int32_t*>(idx_h_);  // per expert: rows, then weights (as float bits)
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
    check(cudaMemcpyAsync(idx_d_, list, static_cast<size_t>(2 * o * 4), cudaMemcpyHostToDevice, st),
          "uploading the expert rows");
    const float* xin = r.x();
    float* sum = r.y();
    if (latent()) {
      r.gemm(latent_in_, r.x(), S, xl_, Hin_);
      add_bias(r, xl_, latent_in_bias_, S, Hin_);
      xin = xl_;
      sum = yl_;
    }
    check(cudaMemsetAsync(sum, 0, static_cast<size_t>(S * Hin_ * 4), st), "clearing the expert sum");
    const int32_t* rows_d = reinterpret_cast<const int32_t*>(idx_d_);
    const float* w_d = reinterpret_cast<const float*>(rows_d + o);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = first[e + 1] - first[e];
      if (n == 0) continue;
      launch_gather(xin, rows_d + first[e], static_cast<int>(n), Hin_, xe_, st);
      r.counted(1);
      mlp_rows(r, mlps_[static_cast<size_t>(e)], xe_, n, I, ye_, Hin_, false, nullptr, nullptr);
      launch_scatter(sum, rows_d + first[e], w_d + first[e], static_cast<int>(n), Hin_, ye_, st);
      r.counted(1);
    }
    if (latent()) {  // fc2_latent_proj on the weighted sum
      r.gemm(latent_out_, yl_, S, r.y(), H);
      add_bias(r, r.y(), latent_out_bias_, S, H);
    }
    // The shared expert on every row, added unweighted.
    if (shared())
      mlp_rows(r, mlps_[static_cast<size_t>(E)], r.x(), S, fp_.shared_d_ff, r.y(), H, true, shared_up_bias_,
               shared_down_bias_);
    // The host buffers are shared by every MoE layer: the next one's copies come after these uploads.
    r.sync("running the experts");
  }

  const int64_t layer_, xi_;  // the layer, its index among the MoE layers (X_n slot)
  const int64_t Hin_;         // the experts' input and output width: H, or the latent projections' dims
  DW router_, latent_in_, latent_out_;
  const float *router_bias_ = nullptr, *latent_in_bias_ = nullptr, *latent_out_bias_ = nullptr;
  const float *shared_up_bias_ = nullptr, *shared_down_bias_ = nullptr;
  float *xe_ = nullptr, *ye_ = nullptr, *xl_ = nullptr, *yl_ = nullptr;
  float *probs_ = nullptr, *selw_ = nullptr;
  int32_t* sel_ = nullptr;
  float* idx_d_ = nullptr;  // device copy of the row lists: per expert rows, then weights
  void *route_h_ = nullptr, *idx_h_ = nullptr;
};

}  // namespace

std::unique_ptr<CudaFfn> make_cuda_dense_ffn(const CudaModuleContext& c, int64_t layer) {
  return std::make_unique<CudaDenseFfn>(c, layer);
}

std::unique_ptr<CudaFfn> make_cuda_moe_ffn(const CudaModuleContext& c, int64_t layer) {
  return std::make_unique<CudaMoeFfn>(c, layer);
}

HL_REGISTER_MODULE(CudaFfnTable, FfnKind::Dense, make_cuda_dense_ffn);
HL_REGISTER_MODULE(CudaFfnTable, FfnKind::MoE, make_cuda_moe_ffn);

}  // namespace hl::cuda
