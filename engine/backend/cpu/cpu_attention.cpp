// The attention mixer of the CPU backend (jamba-spec.md §3.4): no positional encoding (Jamba) or
// RoPE on the first rotary dims of q and k at the row's slot (Bamba; Su et al. 2021, HF's rotate_half), GQA
// kv = q_head / (nh/nkv), scale 1/sqrt(hd) (Granite: attention_multiplier), the normalizers of trace-format.md §2 with the row
// instruments fused (probes/attention_probe.h). The unit owns its layer's KV cache (registers first).
// Decode computes q|k|v in one threaded pass.
#include <cmath>

#include "engine/backend/cpu/cpu_module.h"
#include "engine/backend/cpu/cpu_ops.h"
#include "engine/backend/cpu/cpu_simd.h"
#include "engine/core/thread_pool.h"
#include "engine/probes/attention_probe.h"

namespace hl::cpu {
namespace {

struct AttnScratch {
  std::vector<float> q, o;  // (S, nh*hd) each
};

class CpuAttention final : public CpuMixer {
 public:
  CpuAttention(CpuRun& run, int64_t layer)
      : run_(run), layer_(layer), w_(run.model.w.layers[layer].attn), ai_(run.sched[layer].attn_index) {
    const AttentionParams& a = run.sched[layer].attn;
    for (int64_t i = 0; i < a.rotary_dim / 2; ++i)  // θ_i = base^(−2i/rot)
      inv_freq_.push_back(std::pow(a.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(a.rotary_dim)));
  }

  void start(const RunPlan& plan) override {
    const int64_t kvw = run_.cfg.num_key_value_heads * run_.cfg.head_dim();
    len_ = 0;
    grow(k_, (run_.n_reg + 256) * kvw);  // reserved KV rows; forward() doubles them when full
    grow(v_, (run_.n_reg + 256) * kvw);
    norm_ = plan.normalizer[layer_];
    null_logit_.assign(static_cast<size_t>(run_.cfg.num_attention_heads), 0.0f);
    if (plan.sinks[layer_]) null_logit_ = w_.sinks;
  }

  void forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) override;

 private:
  CpuRun& run_;
  const int64_t layer_;
  const AttentionWeights& w_;
  const int64_t ai_;              // among the attention layers: the A_n slot of the records
  std::vector<float> k_, v_;      // (capacity, nkv*hd) each, registers first; rows [0, len_) in use
  int64_t len_ = 0;
  Normalizer norm_ = Normalizer::Softmax;
  std::vector<float> null_logit_;  // (nh,) sink logits (0 for softmax-1)
  std::vector<double> inv_freq_;   // (rotary_dim / 2,) RoPE frequencies; empty without RoPE

  // RoPE at position pos on `heads` vectors of hd: (v_i, v_{i+r/2}) rotated by pos · inv_freq_i.
  void rope(float* v, int64_t heads, int64_t hd, int64_t pos) const {
    const int64_t half = static_cast<int64_t>(inv_freq_.size());
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos) * inv_freq_[i];
      const float cs = static_cast<float>(std::cos(angle)), sn = static_cast<float>(std::sin(angle));
      for (int64_t h = 0; h < heads; ++h) {
        float* a = v + h * hd;
        const float x1 = a[i], x2 = a[i + half];
        a[i] = x1 * cs - x2 * sn;
        a[i + half] = x2 * cs + x1 * sn;
      }
    }
  }
};

void CpuAttention::forward(const float* x, int64_t S, float* y, TokenTrace* const* recs) {
  const JambaConfig& cfg = run_.cfg;
  AttnScratch& sc = run_.scratch<AttnScratch>();
  const int64_t nh = cfg.num_attention_heads, nkv = cfg.num_key_value_heads, hd = cfg.head_dim();
  const int64_t kvw = nkv * hd, group = nh / nkv;
  float* q = grow(sc.q, S * nh * hd);  // (S, nh*hd)
  const int64_t base = len_;
  if ((base + S) * kvw > static_cast<int64_t>(k_.size())) {  // double the reserved rows
    const int64_t rows = std::max(base + S, 2 * static_cast<int64_t>(k_.size()) / kvw);
    grow(k_, rows * kvw);
    grow(v_, rows * kvw);
  }
  for (std::vector<float>& t : run_.thread_rows) grow(t, 2 * static_cast<int64_t>(k_.size()) / kvw);  // as the KV rows
  float* kn = &k_[base * kvw];  // (S, nkv*hd) new keys
  float* vn = &v_[base * kvw];  // (S, nkv*hd) new values
  if (S == 1) {
    const MatvecJob jobs[3] = {{&w_.q, 0, w_.q.rows, x, q}, {&w_.k, 0, w_.k.rows, x, kn}, {&w_.v, 0, w_.v.rows, x, vn}};
    matvec(jobs, 3);
    for (auto [v, b] : {std::pair{q, &w_.q_bias}, std::pair{kn, &w_.k_bias}, std::pair{vn, &w_.v_bias}})
      for (size_t i = 0; i < b->size(); ++i) v[i] += (*b)[i];  // attention_bias (Falcon-H1, Granite)
  } else {
    linear(w_.q, x, S, q, w_.q_bias);
    linear(w_.k, x, S, kn, w_.k_bias);
    linear(w_.v, x, S, vn, w_.v_bias);
  }
  if (!inv_freq_.empty())
    for (int64_t s = 0; s < S; ++s) {  // the row's position is its KV slot (registers first)
      rope(&q[s * nh * hd], nh, hd, base + s);
      rope(&kn[s * kvw], nkv, hd, base + s);
    }
  len_ = base + S;
  float* o = grow(sc.o, S * nh * hd);  // (S, nh*hd)
  std::fill(o, o + S * nh * hd, 0.0f);
  // 1/√hd; Granite's attention_multiplier replaces it, Falcon-H1's key_multiplier scales it.
  const float scale = run_.cfg.attention_scale_f32();
  const bool instr = run_.opts.instruments, full = run_.opts.full;
  const simd::Kernels& kern = simd::kernels();
  const float* K = k_.data();  // (len, nkv*hd)
  const float* Vc = v_.data();
  const int64_t grain = std::max<int64_t>(1, 8192 / ((base + S) * hd));  // rows of (query, head) per chunk
  ThreadPool::global().parallel_for(S * nh, grain, [&](int64_t b, int64_t e) {
    float* z = run_.thread_rows[ThreadPool::thread_index()].data();  // (nkeys,) logits
    float* p = z + (base + S);                                       // (nkeys,) probabilities
    for (int64_t item = b; item < e; ++item) {
      const int64_t s = item / nh, hq = item % nh, hk = hq / group;
      const int64_t nkeys = base + s + 1;  // registers and tokens up to and including the query
      const float* qv = &q[(s * nh + hq) * hd];
      kern.dot_rows(qv, K + hk * hd, kvw, nkeys, hd, scale, z);  // z (nkeys,) = q·k_j / sqrt(hd)
      TokenTrace* r = recs[s];
      AttnRowStats stats;
      attention_row(z, nkeys, norm_, null_logit_[hq], p, r && instr ? &stats : nullptr);
      kern.axpy_rows(p, Vc + hk * hd, kvw, nkeys, hd, &o[(s * nh + hq) * hd]);  // o (hd,) = Σ_j p_j v_j
      if (!r || !instr) continue;
      const int64_t slot = ai_ * nh + hq;
      r->attn_entropy[slot] = stats.entropy;
      r->attn_entropy_norm[slot] = stats.entropy_norm;
      r->attn_mass[slot] = stats.mass;
      r->attn_max_logit[slot] = stats.max_abs_logit;
      if (full) {
        float* row = &r->attn_rows[slot * (nkeys + 1)];
        std::copy(p, p + nkeys, row);
        row[nkeys] = stats.p_null;
      }
    }
  });
  run_.observe("attn_heads", layer_, o, S, nh * hd, recs);
  linear(w_.o, o, S, y, w_.o_bias);
}

}  // namespace

std::unique_ptr<CpuMixer> make_cpu_attention(CpuRun& run, int64_t layer) {
  return std::make_unique<CpuAttention>(run, layer);
}

HL_REGISTER_MODULE(CpuMixerTable, MixerKind::Attention, make_cpu_attention);

}  // namespace hl::cpu
