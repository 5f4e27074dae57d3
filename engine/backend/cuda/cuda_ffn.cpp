// The CUDA feed-forwards: the dense MLP (jamba-spec.md §3.8, down(silu(gate·x) ⊙ up·x); or Nemotron-H's
// relu² MLP without gate, down(relu(up·x + b_up)²) + b_down, HF's NemotronHMLP) and the mixture of
// experts (§3.9: router softmax, top-k in ascending index, the chosen experts' outputs weighted by their
// probabilities). Decode: fused gate|up and down kernels over a device table of the experts, the MoE
// router run in the norm before (relu²: matrix-vector products around the relu² kernel). Prefill:
// cuBLAS products; MoE reads the routing back and runs each chosen expert once on the rows that chose
// it. No run state.
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
  CudaMlps(const CudaModuleContext& c, int64_t layer) : lw_(c.model.w.layers[layer]), cfg_(c.config) {}

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

  const LayerWeights& lw_;
  const JambaConfig& cfg_;
  std::vector<MlpDev> mlps_;         // the dense MLP, or the E experts
  const ExpertW* table_ = nullptr;  // device copy of mlps_
};

class CudaDenseFfn final : public CudaMlps {
 public:
  CudaDenseFfn(const CudaModuleContext& c, int64_t layer)
      : CudaMlps(c, layer), relu2_(!c.schedule[layer].ffn_params.gated) {}

  void upload(CudaWeights& w) override {
    if (!relu2_) return upload_mlps(w, {&lw_.mlp});
    up_ = w.upload(lw_.mlp.up);
    down_ = w.upload(lw_.mlp.down);
    up_bias_ = w.upload_vec(lw_.mlp.up_bias, "an MLP bias");
    down_bias_ = w.upload_vec(lw_.mlp.down_bias, "an MLP bias");
  }

  // g, u (S, I).
  std::vector<CudaScratchNeed> scratch(int64_t cap, const CudaRun&) const override {
    return {{"ffn.g", cap * cfg_.intermediate_size}, {"ffn.u", cap * cfg_.intermediate_size}};
  }
  void bind_scratch(const CudaScratch& s, const CudaRun&) override {
    g_ = s.device("ffn.g");
    uf_ = s.device("ffn.u");
  }

  void enqueue(CudaRun& r, int64_t S, float*) override {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    if (relu2_) return enqueue_relu2(r, S);
    if (S == 1) {
      launch_glu(table_, nullptr, 1, I, H, r.x(), g_, r.stream());
      launch_down(table_, nullptr, nullptr, 1, H, I, g_, r.h(), r.tail(), r.stream());
      r.counted(2);
      return;
    }
    const MlpDev& m = mlps_[0];
    r.gemm(m.gate, r.x(), S, g_, I);
    r.gemm(m.up, r.x(), S, uf_, I);
    launch_silu_mul(g_, uf_, S * I, r.stream());
    r.counted(1);
    r.gemm(m.down, g_, S, r.y(), H);
  }

 private:
  // u = relu(x·upᵀ + b_up)², then down: decode h += u·downᵀ + b_down (then the norm), prefill y.
  void enqueue_relu2(CudaRun& r, int64_t S) {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    if (S == 1) {
      r.gemv({{up_, uf_, 0, up_bias_}}, r.x(), 0);
    } else {
      r.gemm(up_, r.x(), S, uf_, I);
      if (up_bias_) {
        launch_add_bias(uf_, up_bias_, static_cast<int>(S), I, r.stream());
        r.counted(1);
      }
    }
    launch_relu2(uf_, S * I, r.stream());
    r.counted(1);
    if (S == 1) {
      r.gemv({{down_, r.h(), 0, down_bias_}}, uf_, 1, r.tail());
      return;
    }
    r.gemm(down_, uf_, S, r.y(), H);
    if (down_bias_) {
      launch_add_bias(r.y(), down_bias_, static_cast<int>(S), H, r.stream());
      r.counted(1);
    }
  }

  const bool relu2_;  // Nemotron-H's MLP without gate (up and down, their mlp_bias biases)
  DW up_, down_;      // relu²
  const float *up_bias_ = nullptr, *down_bias_ = nullptr;
  float *g_ = nullptr, *uf_ = nullptr;
};

class CudaMoeFfn final : public CudaMlps {
 public:
  CudaMoeFfn(const CudaModuleContext& c, int64_t layer)
      : CudaMlps(c, layer), layer_(layer), xi_(c.schedule[layer].moe_index) {
    if (cfg_.num_experts > 256 || cfg_.num_experts_per_tok > 64)
      throw BackendFailure("cuda: the router kernel takes at most 256 experts and 64 per token");
  }

  void upload(CudaWeights& w) override {
    router_ = w.upload(lw_.moe.router);
    std::vector<const MlpWeights*> mlps;
    for (const MlpWeights& e : lw_.moe.experts) mlps.push_back(&e);
    upload_mlps(w, mlps);
  }

  // g (max(S, K), I), u (S, I); prefill: the rows of one expert xe, ye (S, H); the router's probs
  // (S, E), sel and selw (S, K); the per-expert row lists on the device and pinned on the host, and
  // the routing read back (sel, selw).
  std::vector<CudaScratchNeed> scratch(int64_t cap, const CudaRun&) const override {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
    return {{"ffn.g", std::max(cap, K) * I},
            {"ffn.u", cap * I},
            {"moe.xe", cap * H},
            {"moe.ye", cap * H},
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
    a.probs = probs_;
    a.sel = sel_;
    a.selw = selw_;
    a.router_rec = rec && r.options().instruments ? rec : nullptr;
    a.off_probs = rl.rprobs;
    a.off_topk = rl.rtopk;
    a.off_lse = rl.rlse;
  }

  void enqueue(CudaRun& r, int64_t S, float*) override {
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size;
    // The router ran in the norm before (fuse_into_norm): probs_, sel_, selw_ and the record.
    const int64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
    cudaStream_t st = r.stream();
    r.observe("router_probs", layer_, probs_, E, E, S);
    if (S == 1) {  // experts chosen on the device, in ascending index, weighted by their probabilities
      launch_glu(table_, sel_, static_cast<int>(K), I, H, r.x(), g_, st);
      launch_down(table_, sel_, selw_, static_cast<int>(K), H, I, g_, r.h(), r.tail(), st);
      r.counted(2);
      return;
    }
    // Prefill: the routing to the host, then each chosen expert once on the rows that chose it.
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
    float* y = r.y();
    check(cudaMemsetAsync(y, 0, static_cast<size_t>(S * H * 4), st), "clearing the expert sum");
    const int32_t* rows_d = reinterpret_cast<const int32_t*>(idx_d_);
    const float* w_d = reinterpret_cast<const float*>(rows_d + o);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t n = first[e + 1] - first[e];
      if (n == 0) continue;
      const MlpDev& m = mlps_[e];
      launch_gather(r.x(), rows_d + first[e], static_cast<int>(n), H, xe_, st);
      r.gemm(m.gate, xe_, n, g_, I);
      r.gemm(m.up, xe_, n, uf_, I);
      launch_silu_mul(g_, uf_, n * I, st);
      r.gemm(m.down, g_, n, ye_, H);
      launch_scatter(y, rows_d + first[e], w_d + first[e], static_cast<int>(n), H, ye_, st);
      r.counted(3);
    }
    // The host buffers are shared by every MoE layer: the next one's copies come after these uploads.
    r.sync("running the experts");
  }

 private:
  const int64_t layer_, xi_;  // the layer, its index among the MoE layers (X_n slot)
  DW router_;
  float *g_ = nullptr, *uf_ = nullptr, *xe_ = nullptr, *ye_ = nullptr, *probs_ = nullptr, *selw_ = nullptr;
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
