// The Vulkan feed-forward units, as cpu_ffn.cpp: the dense SwiGLU MLP (jamba-spec.md §3.8) or
// Nemotron-H's relu² MLP without gate (up → relu(·)² → down, with mlp_bias's up and down biases), and
// the mixture of experts (§3.9: router, top-k with its instruments, each chosen expert's SwiGLU or relu²
// MLP, the weighted sum), with Granite's renormalised weights and shared expert, and Nemotron-H's
// DeepSeek-V3 sigmoid router, relu² experts with biases, shared expert and latent projections.
// They share the one-token path: every chosen expert's (or the one MLP's) silu(gate x) ⊙ (up x) in
// one matrix–vector kernel. At S > 1 the MoE runs each expert once over the tokens routed to it.
#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {
namespace {

class VkFeedForward : public VkFfn {
 public:
  explicit VkFeedForward(const DLayer& d) : d_(d) {}

 protected:
  // S = 1: uf (K, I) = the activations of the K MLPs of `gu` listed at route `sel` (-1: its one matrix,
  // K = 1) on x at act[x_off] (cols = gu.cols): silu(gate x) ⊙ (up x) when `gated`, else relu(up x + b)²
  // with the experts' up biases `up_bias` ((E_l, I) or -1).
  static void record_gate_up_one(VkRecorder& r, const DMat& gu, int32_t sel, uint32_t K, bool gated = true,
                                 uint32_t x_off = ~0u, int32_t up_bias = -1) {
    const ActLayout& al = r.act();
    const uint32_t I = u32(gated ? gu.rows / 2 : gu.rows), cols = u32(gu.cols);
    if (x_off == ~0u) x_off = al.x;
    uint32_t gx, gy;
    matvec_groups(I, &gx, &gy);
    MatvecPC a{gu.off, I, cols, x_off, 0, al.uf, I, 0, up_bias, gx, sel, gu.stride(), 0, gated ? 1u : 0u, -1, 0.0f};
    r.dispatch_w(Kernel::Matvec, gu.dtype, r.binds(gu.chunk), a, gx, gy, K);
    r.barrier();
    if (gated) return;
    r.dispatch(Kernel::Relu2, r.binds(), Relu2PC{I, K, al.uf}, ceil_div(I, 64), K);
    r.barrier();
  }
  // h += residual(mlp(x)) of one MLP: SwiGLU (gate_up (1, 2I, H)) or, not `gated`, Nemotron-H's relu²
  // MLP down(relu(up x [+ bias])²) [+ down_bias] (gate_up holding up alone); with Falcon-H1's gate|up
  // biases, gate multiplier inside the SiLU (gate_up_scale: factors of the gate|up rows after their
  // bias) and down multiplier `dm` on the output.
  static void record_mlp(VkRecorder& r, const DMat& gate_up, const DMat& down, bool gated, int32_t gate_up_bias,
                         int32_t down_bias, int64_t S, int32_t gate_up_scale = -1, float dm = 1.0f) {
    const ActLayout& al = r.act();
    const uint32_t H = u32(r.config().hidden_size), I = u32(down.cols);
    if (!gated) {
      r.linear(gate_up, al.x, H, S, al.uf, I, false, gate_up_bias);  // (S, I)
      r.barrier();
      r.dispatch(Kernel::Relu2, r.binds(), Relu2PC{I, u32(S), al.uf}, ceil_div(I, 64), u32(S));
      r.barrier();
      r.residual(down, al.uf, I, S, down_bias, dm);
      r.barrier();
      return;
    }
    if (S == 1 && gate_up_bias < 0 && gate_up_scale < 0) {  // the fused kernel has no bias or gate factor
      record_gate_up_one(r, gate_up, -1, 1);
    } else {
      // (S, 2I) = ((x Wᵀ + bias) ⊙ (gate multiplier | 1)), then silu(gate) ⊙ up
      r.linear(gate_up, al.x, H, S, al.g, 2 * I, false, gate_up_bias, false, {1.0f, 1.0f, gate_up_scale});
      r.barrier();
      r.dispatch(Kernel::Swiglu, r.binds(), SwigluPC{I, u32(S), al.g, al.uf, -1}, ceil_div(I, 64), u32(S));
      r.barrier();
    }
    r.residual(down, al.uf, I, S, down_bias, dm);
    r.barrier();
  }
  const DLayer& d_;
};

// Falcon-H1's MLP (HF FalconH1MLP) adds gate/up/down biases (mlp_bias), the gate multiplier inside
// the SiLU (on gate x + bias: gate_up_scale) and the down multiplier on the output (dm_).
class VkDense final : public VkFeedForward {
 public:
  VkDense(const DLayer& d, bool gated, float down_multiplier) : VkFeedForward(d), gated_(gated), dm_(down_multiplier) {}
  void record(VkRecorder& r, int64_t S, bool /*records*/) override {
    record_mlp(r, d_.gate_up, d_.down, gated_, d_.gate_up_bias, d_.down_bias, S, d_.gate_up_scale, dm_);
  }

 private:
  bool gated_;  // SwiGLU, or the relu² MLP without gate
  float dm_;    // Falcon-H1's down multiplier (1 elsewhere)
};

class VkMoe final : public VkFeedForward {
 public:
  VkMoe(const DLayer& d, int64_t layer, const LayerSpec& spec)
      : VkFeedForward(d), layer_(layer), xi_(spec.moe_index), fp_(spec.ffn_params) {}

  void record(VkRecorder& r, int64_t S, bool records) override {
    const JambaConfig& cfg = r.config();
    const ActLayout& al = r.act();
    const uint32_t H = u32(cfg.hidden_size), E = u32(cfg.num_experts);
    const bool latent = d_.latent_in.rows > 0;
    r.linear(d_.router, al.x, H, S, al.rl, E, false, -1);  // (S, E)
    r.barrier();
    // The routed branch: h += res · Σ w y through the weights, or, between latent projections, into
    // lato (S, Lat) whose product out adds res · (…) itself.
    route(r, S, records && r.options().instruments, latent ? 1.0 : cfg.residual_multiplier);
    r.observe("router_probs", layer_, r.route().prob, E, E, S, VkRecorder::From::Route);
    uint32_t xin = al.x, yout = al.h;
    if (latent) {
      r.linear(d_.latent_in, al.x, H, S, al.lat, u32(d_.latent_in.rows), false, d_.latent_in_bias);
      r.barrier();
      xin = al.lat;
      yout = al.lato;
    }
    if (S == 1)
      record_experts_one(r, xin, yout, !latent);
    else
      record_experts(r, S, xin, yout, !latent);
    if (latent) {
      r.residual(d_.latent_out, al.lato, u32(d_.latent_out.cols), S, d_.latent_out_bias);
      r.barrier();
    }
    // The shared expert on every token, weight 1 (its residual product applies the multiplier).
    if (d_.shared_down.rows > 0)
      record_mlp(r, d_.shared_gate_up, d_.shared_down, fp_.gated, d_.shared_up_bias, d_.shared_down_bias, S);
  }

 private:
  // The router's choice (moe_route.comp): records, the k experts of each token in ascending index with
  // their weights × `scale` · routed_scaling, and at S > 1 each expert's token list.
  void route(VkRecorder& r, int64_t S, bool instr, double scale) {
    const JambaConfig& cfg = r.config();
    const RouteLayout& ro = r.route();
    const RecLayout& rl = r.rec();
    const uint32_t E = u32(cfg.num_experts), K = u32(cfg.num_experts_per_tok);
    MoeRoutePC rp{E,
                  K,
                  u32(S),
                  r.act().rl,
                  instr ? 1u : 0u,
                  rl.stride,
                  rl.rprobs + u32(xi_) * E,
                  rl.rtopk + u32(xi_) * K,
                  rl.rlse + u32(xi_),
                  ro.prob,
                  ro.sel,
                  ro.selw,
                  S > 1 ? 1u : 0u,
                  ro.cnt,
                  ro.in,
                  ro.out,
                  fp_.renormalize ? 1u : 0u,
                  static_cast<float>(scale * fp_.routed_scaling),
                  fp_.sigmoid_router ? 1u : 0u,
                  u32(fp_.groups),
                  u32(fp_.topk_groups),
                  d_.router_bias};
    r.dispatch(Kernel::MoeRoute, r.binds(), rp, 1);
    r.barrier();
  }

  // S = 1: the k chosen experts' activations in one matrix–vector kernel, then their weighted down
  // products into yout (added to h, or set: the latent sum).
  void record_experts_one(VkRecorder& r, uint32_t xin, uint32_t yout, bool accumulate) {
    const RouteLayout& ro = r.route();
    const uint32_t K = u32(r.config().num_experts_per_tok), I = u32(d_.down.cols), Hout = u32(d_.down.rows);
    record_gate_up_one(r, d_.gate_up, static_cast<int32_t>(ro.sel), K, fp_.gated, xin, d_.gate_up_bias);
    uint32_t hx, hy;
    matvec_groups(Hout, &hx, &hy);
    MoeDownPC dn{d_.down.off, Hout, I, r.act().uf, I, yout, K, ro.sel, ro.selw, d_.down.stride(), hx,
                 d_.down_bias, accumulate ? 1u : 0u};
    r.dispatch_w(Kernel::MatvecMoeDown, d_.down.dtype, r.binds(d_.down.chunk), dn, hx, hy);
    r.barrier();
  }

  // Prefill: each expert once over the tokens routed to it (gathered rows of xin, outputs to their
  // slots of ye), then yout (+)= the weighted sum.
  void record_experts(VkRecorder& r, int64_t S, uint32_t xin, uint32_t yout, bool accumulate) {
    const ActLayout& al = r.act();
    const RouteLayout& ro = r.route();
    const DMat& gu = d_.gate_up;  // (E, 2I, Hin), or (E, I, Hin) without gate
    const uint32_t Hin = u32(gu.cols), I = u32(d_.down.cols), Hout = u32(d_.down.rows);
    const uint32_t E = u32(r.config().num_experts), K = u32(r.config().num_experts_per_tok);
    const uint32_t gw = u32(gu.rows);  // 2I, or I
    for (uint32_t e = 0; e < E; ++e) {
      const int32_t cnt = static_cast<int32_t>(ro.cnt + e);
      const int32_t in = static_cast<int32_t>(ro.in + e * u32(S)), out = static_cast<int32_t>(ro.out + e * u32(S));
      const int32_t ub = d_.gate_up_bias < 0 ? -1 : d_.gate_up_bias + static_cast<int32_t>(e * I);
      const int32_t db = d_.down_bias < 0 ? -1 : d_.down_bias + static_cast<int32_t>(e * Hout);
      const uint32_t act_out = fp_.gated ? al.g : al.uf;
      r.matmul(MatmulPC{gu.off + e * gu.stride(), gw, Hin, xin, Hin, act_out, gw, u32(S), 0, ub, in, -1, cnt, 0, 0},
               gu, S);
      r.barrier();
      if (fp_.gated)
        r.dispatch(Kernel::Swiglu, r.binds(), SwigluPC{I, u32(S), al.g, al.uf, cnt}, ceil_div(I, 64), u32(S));
      else
        r.dispatch(Kernel::Relu2, r.binds(), Relu2PC{I, u32(S), al.uf}, ceil_div(I, 64), u32(S));
      r.barrier();
      r.matmul(MatmulPC{d_.down.off + e * d_.down.stride(), Hout, I, al.uf, I, al.ye, Hout, u32(S), 0, db, -1, out,
                        cnt, 0, 0},
               d_.down, S);
      r.barrier();
    }
    r.dispatch(Kernel::MoeCombine, r.binds(), MoeCombinePC{Hout, K, al.ye, yout, ro.selw, accumulate ? 1u : 0u},
               ceil_div(Hout, 64), u32(S));
    r.barrier();
  }

  int64_t layer_;
  int64_t xi_;  // this layer's index among the MoE layers (the X_n axis)
  const FfnParams& fp_;  // the router (softmax or sigmoid with groups), renormalisation, gated experts
};

}  // namespace

std::unique_ptr<VkFfn> make_vk_dense(const VkModuleContext& c, int64_t layer) {
  const FfnParams& fp = c.model.schedule[layer].ffn_params;
  return std::make_unique<VkDense>(c.weights.layers[layer], fp.gated, static_cast<float>(fp.down_multiplier));
}

std::unique_ptr<VkFfn> make_vk_moe(const VkModuleContext& c, int64_t layer) {
  return std::make_unique<VkMoe>(c.weights.layers[layer], layer, c.model.schedule[layer]);
}

HL_REGISTER_MODULE(VkFfnTable, FfnKind::Dense, make_vk_dense);
HL_REGISTER_MODULE(VkFfnTable, FfnKind::MoE, make_vk_moe);

}  // namespace hl::vk
