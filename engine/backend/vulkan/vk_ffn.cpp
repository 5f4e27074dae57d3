// The Vulkan feed-forward units: the dense SwiGLU MLP (jamba-spec.md §3.8) or Nemotron-H's relu² MLP
// without gate (up → relu(·)² → down, as cpu_ffn.cpp; with mlp_bias's up and down biases), and the mixture of experts (§3.9: router,
// top-k with its instruments, each chosen expert's SwiGLU, the weighted sum).
// They share the one-token path: every chosen expert's (or the one MLP's) silu(gate x) ⊙ (up x) in
// one matrix–vector kernel. At S > 1 the MoE runs each expert once over the tokens routed to it.
#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {
namespace {

class VkFeedForward : public VkFfn {
 public:
  explicit VkFeedForward(const DLayer& d) : d_(d) {}

 protected:
  // S = 1: uf (K, I) = silu(gate x) ⊙ (up x) of the K experts listed at route `sel` (-1: the dense MLP).
  void record_gate_up_one(VkRecorder& r, int32_t sel, uint32_t K) {
    const DMat& gu = d_.gate_up;  // (E_l, 2I, H)
    const ActLayout& al = r.act();
    const uint32_t H = u32(r.config().hidden_size), I = u32(d_.down.cols);
    uint32_t gx, gy;
    matvec_groups(I, &gx, &gy);
    MatvecPC a{gu.off, I, H, al.x, 0, al.uf, I, 0, -1, gx, sel, gu.stride(), 0, 1, -1, 0.0f};
    r.dispatch_w(Kernel::Matvec, gu.dtype, r.binds(gu.chunk), a, gx, gy, K);
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
    const ActLayout& al = r.act();
    const uint32_t H = u32(r.config().hidden_size), I = u32(d_.down.cols);
    if (!gated_) {  // Nemotron-H's relu² MLP: down(relu(up x)²); gate_up holds up alone
      r.linear(d_.gate_up, al.x, H, S, al.uf, I, false, d_.gate_up_bias);  // (S, I)
      r.barrier();
      r.dispatch(Kernel::Relu2, r.binds(), Relu2PC{I, u32(S), al.uf}, ceil_div(I, 64), u32(S));
      r.barrier();
      r.residual(d_.down, al.uf, I, S, d_.down_bias);
      r.barrier();
      return;
    }
    if (S == 1 && d_.gate_up_bias < 0 && d_.gate_up_scale < 0) {  // the fused kernel has no bias or gate factor
      record_gate_up_one(r, -1, 1);
    } else {
      // (S, 2I) = ((x Wᵀ + bias) ⊙ (gate multiplier | 1)), then silu(gate) ⊙ up
      r.linear(d_.gate_up, al.x, H, S, al.g, 2 * I, false, d_.gate_up_bias, false, {1.0f, 1.0f, d_.gate_up_scale});
      r.barrier();
      r.dispatch(Kernel::Swiglu, r.binds(), SwigluPC{I, u32(S), al.g, al.uf, -1}, ceil_div(I, 64), u32(S));
      r.barrier();
    }
    r.residual(d_.down, al.uf, I, S, d_.down_bias, dm_);
    r.barrier();
  }

 private:
  bool gated_;  // SwiGLU, or the relu² MLP without gate
  float dm_;    // Falcon-H1's down multiplier (1 elsewhere)
};

class VkMoe final : public VkFeedForward {
 public:
  VkMoe(const DLayer& d, int64_t layer, int64_t moe_index) : VkFeedForward(d), layer_(layer), xi_(moe_index) {}

  void record(VkRecorder& r, int64_t S, bool records) override {
    const JambaConfig& cfg = r.config();
    const ActLayout& al = r.act();
    const RouteLayout& ro = r.route();
    const RecLayout& rl = r.rec();
    const DMat& gu = d_.gate_up;  // (E, 2I, H)
    const uint32_t H = u32(cfg.hidden_size), I = u32(d_.down.cols);
    const uint32_t E = u32(cfg.num_experts), K = u32(cfg.num_experts_per_tok);
    const bool instr = records && r.options().instruments;
    r.linear(d_.router, al.x, H, S, al.rl, E, false, -1);  // (S, E)
    r.barrier();
    MoeRoutePC rp{E,
                  K,
                  u32(S),
                  al.rl,
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
                  ro.out};
    r.dispatch(Kernel::MoeRoute, r.binds(), rp, 1);
    r.barrier();
    r.observe("router_probs", layer_, ro.prob, E, E, S, VkRecorder::From::Route);
    if (S == 1) {
      record_gate_up_one(r, static_cast<int32_t>(ro.sel), K);
      uint32_t hx, hy;
      matvec_groups(H, &hx, &hy);
      MoeDownPC dn{d_.down.off, H, I, al.uf, I, al.h, K, ro.sel, ro.selw, d_.down.stride(), hx};
      r.dispatch_w(Kernel::MatvecMoeDown, d_.down.dtype, r.binds(d_.down.chunk), dn, hx, hy);
      r.barrier();
      return;
    }
    // Prefill: each expert once over the tokens routed to it (gathered rows, outputs to their slots).
    for (uint32_t e = 0; e < E; ++e) {
      const int32_t cnt = static_cast<int32_t>(ro.cnt + e);
      const int32_t in = static_cast<int32_t>(ro.in + e * u32(S)), out = static_cast<int32_t>(ro.out + e * u32(S));
      r.matmul(MatmulPC{gu.off + e * gu.stride(), 2 * I, H, al.x, H, al.g, 2 * I, u32(S), 0, -1, in, -1, cnt, 0, 0}, gu,
               S);
      r.barrier();
      r.dispatch(Kernel::Swiglu, r.binds(), SwigluPC{I, u32(S), al.g, al.uf, cnt}, ceil_div(I, 64), u32(S));
      r.barrier();
      r.matmul(
          MatmulPC{d_.down.off + e * d_.down.stride(), H, I, al.uf, I, al.ye, H, u32(S), 0, -1, -1, out, cnt, 0, 0},
          d_.down, S);
      r.barrier();
    }
    r.dispatch(Kernel::MoeCombine, r.binds(), MoeCombinePC{H, K, al.ye, al.h, ro.selw}, ceil_div(H, 64), u32(S));
    r.barrier();
  }

 private:
  int64_t layer_;
  int64_t xi_;  // this layer's index among the MoE layers (the X_n axis)
};

}  // namespace

std::unique_ptr<VkFfn> make_vk_dense(const VkModuleContext& c, int64_t layer) {
  const FfnParams& fp = c.model.schedule[layer].ffn_params;
  return std::make_unique<VkDense>(c.weights.layers[layer], fp.gated, static_cast<float>(fp.down_multiplier));
}

std::unique_ptr<VkFfn> make_vk_moe(const VkModuleContext& c, int64_t layer) {
  return std::make_unique<VkMoe>(c.weights.layers[layer], layer, c.model.schedule[layer].moe_index);
}

HL_REGISTER_MODULE(VkFfnTable, FfnKind::Dense, make_vk_dense);
HL_REGISTER_MODULE(VkFfnTable, FfnKind::MoE, make_vk_moe);

}  // namespace hl::vk
