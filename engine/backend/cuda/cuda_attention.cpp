// The CUDA attention mixer (jamba-spec.md §3.4): q|k|v products (k, v written straight into this
// layer's fp32 KV cache), the attention kernel with the row instruments and the run's normalizer
// (trace-format.md §2), then o. Decode: one 3-segment matrix-vector launch, o accumulated into h with
// the next norm fused. Prefill: cuBLAS products. RoPE (Bamba) turns the first rotary dims of the new q
// and key rows at their KV slots before the attention. State: the key and value caches (per position).
#include <cmath>

#include "engine/backend/cuda/cuda_module.h"

namespace hl::cuda {

namespace {

class CudaAttention final : public CudaMixer {
 public:
  CudaAttention(const CudaModuleContext& c, int64_t layer)
      : w_(c.model.w.layers[layer].attn), cfg_(c.config), layer_(layer), ai_(c.schedule[layer].attn_index),
        an_(c.schedule.num_attention()) {
    const AttentionParams& a = c.schedule[layer].attn;
    for (int64_t i = 0; i < a.rotary_dim / 2; ++i)  // θ_i = base^(−2i/rot), in double as cpu_attention.cpp
      inv_freq_.push_back(std::pow(a.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(a.rotary_dim)));
    if (cfg_.head_dim() > 256)
      throw BackendFailure("cuda: head_dim " + std::to_string(cfg_.head_dim()) +
                           " is above the attention kernel's limit of 256");
  }

  void upload(CudaWeights& w) override {
    q_ = w.upload(w_.q);
    k_ = w.upload(w_.k);
    v_ = w.upload(w_.v);
    o_ = w.upload(w_.o);
    sinks_ = w.upload_vec(w_.sinks, "the sink logits");
    rope_freq_ = static_cast<const double*>(
        w.upload_bytes(inv_freq_.data(), inv_freq_.size() * sizeof(double), "the RoPE frequencies"));
  }

  std::vector<CudaStateNeed> state() const override {
    const int64_t row = kvw() * 4;  // one cached position: (nkv·hd,) fp32
    return {{"the key cache", row, 0}, {"the value cache", row, 0}};
  }
  void bind_state(const std::vector<float*>& b) override {
    kc_ = b[0];
    vc_ = b[1];
  }

  // q and o (S, nh·hd); z, the kernel's scratch, S·nh rows of 2·kv_cap floats.
  std::vector<CudaScratchNeed> scratch(int64_t cap, const CudaRun& r) const override {
    const int64_t nh = cfg_.num_attention_heads, qw = nh * cfg_.head_dim();
    return {{"attn.q", cap * qw}, {"attn.o", cap * qw}, {"attn.z", cap * nh * 2 * r.context_cap()}};
  }
  void bind_scratch(const CudaScratch& s, const CudaRun& r) override {
    q_buf_ = s.device("attn.q");
    o_buf_ = s.device("attn.o");
    z_ = s.device("attn.z");
    zstride_ = 2 * r.context_cap();
  }
  // The scratch z stays under 1 GiB.
  int64_t max_block(const CudaRun& r) const override {
    const int64_t z_row = cfg_.num_attention_heads * 2 * r.context_cap() * 4;
    return std::max<int64_t>(1, (int64_t{1} << 30) / z_row);
  }

  void start(const RunPlan& plan, std::vector<int>& baked) override {
    norm_ = static_cast<int>(plan.normalizer[layer_]);
    baked.push_back(norm_);
  }

  void enqueue(CudaRun& r, int64_t S, float* rec) override {
    const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads, hd = cfg_.head_dim();
    const int64_t kvw = nkv * hd;
    float* x = r.x();
    if (S == 1) {
      r.gemv({{q_, q_buf_, 0, nullptr}, {k_, kc_, kvw, nullptr}, {v_, vc_, kvw, nullptr}}, x, 0);
    } else {
      r.gemm(q_, x, S, q_buf_, nh * hd);
      r.gemm(k_, x, S, kc_ + r.cached() * kvw, kvw);
      r.gemm(v_, x, S, vc_ + r.cached() * kvw, kvw);
    }
    if (rope_freq_) {
      launch_rope(q_buf_, kc_, r.params(), rope_freq_, static_cast<int>(S), static_cast<int>(nh), static_cast<int>(nkv),
                  static_cast<int>(hd), static_cast<int>(inv_freq_.size()), r.stream());
      r.counted(1);
    }
    const RecLayout& rl = r.record();
    const RunOptions& opts = r.options();
    AttnArgs a;
    a.q = q_buf_;
    a.kc = kc_;
    a.vc = vc_;
    a.nh = static_cast<int>(nh);
    a.group = static_cast<int>(nh / nkv);
    a.hd = static_cast<int>(hd);
    a.kvw = static_cast<int>(kvw);
    a.params = r.params();
    a.S = static_cast<int>(S);
    a.scale = r.config().attention_scale_f32();  // 1/sqrt(hd), or Granite's attention_multiplier
    a.norm = norm_;
    a.sinks = norm_ == static_cast<int>(Normalizer::Sink) ? sinks_ : nullptr;
    a.o = o_buf_;
    a.z = z_;
    a.zstride = zstride_;
    a.rec = rec;
    a.rec_stride = rl.stride;
    a.off_attn = rl.attn;
    a.an = an_ * nh;
    a.slot0 = ai_ * nh;
    a.off_rows = rl.arows;
    a.row_stride = rl.arow_stride;
    a.instruments = opts.instruments;
    a.full = opts.instruments && opts.full;
    launch_attention(a, r.stream());
    r.counted(1);
    r.observe("attn_heads", layer_, o_buf_, nh * hd, nh * hd, S);
    if (S == 1) {
      r.gemv({{o_, r.h(), 0, nullptr}}, o_buf_, 1, r.tail());  // h += o·Woᵀ, then the norm
    } else {
      r.gemm(o_, o_buf_, S, r.y(), cfg_.hidden_size);
    }
  }

 private:
  int64_t kvw() const { return cfg_.num_key_value_heads * cfg_.head_dim(); }

  const AttentionWeights& w_;
  const JambaConfig& cfg_;
  const int64_t layer_, ai_, an_;  // the layer, its index among the attention layers (A_n slot), A_n
  DW q_, k_, v_, o_;
  const float* sinks_ = nullptr;
  std::vector<double> inv_freq_;       // (rotary dims / 2,) RoPE frequencies; empty without RoPE
  const double* rope_freq_ = nullptr;  // their device copy, or null
  int norm_ = 0;  // the Normalizer of this run
  float *kc_ = nullptr, *vc_ = nullptr;                                   // (kv_cap, nkv·hd)
  float *q_buf_ = nullptr, *o_buf_ = nullptr, *z_ = nullptr;
  int64_t zstride_ = 0;
};

}  // namespace

std::unique_ptr<CudaMixer> make_cuda_attention(const CudaModuleContext& c, int64_t layer) {
  return std::make_unique<CudaAttention>(c, layer);
}

HL_REGISTER_MODULE(CudaMixerTable, MixerKind::Attention, make_cuda_attention);

}  // namespace hl::cuda
