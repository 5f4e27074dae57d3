// Plain loops of ref_attention.h. The normalizers (trace-format.md §2): softmax p_j = e^z_j / Σ e^z_k;
// softmax-1 (Miller 2023) adds a virtual null key of logit 0 and value 0 to the denominator; a learned
// sink (Xiao et al. 2023; gpt-oss's self_attn.sinks) adds e^s_h. Stable: the maximum over the keys and
// the virtual logit is subtracted first.
#include "engine/reference/ref_attention.h"

#include <algorithm>
#include <cmath>

#include "engine/reference/ref_mixer.h"
#include "engine/reference/ref_ops.h"

namespace hl::ref {

namespace {

// x ln x with 0 ln 0 = 0.
double xlnx(double x) {
  return x > 0 ? x * std::log(x) : 0.0;
}

// RoPE (Su et al. 2021) as HF's rotate_half applies it to the first `rot` dims of each of `heads`
// vectors of hd at position pos: for i < rot/2, with θ_i = pos · base^(−2i/rot),
// (v_i, v_{i+rot/2}) ← (v_i cos θ_i − v_{i+rot/2} sin θ_i, v_{i+rot/2} cos θ_i + v_i sin θ_i).
void rope(float* v, int64_t heads, int64_t hd, int64_t rot, int64_t pos, double base) {
  const int64_t half = rot / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rot));
    const double cs = std::cos(angle), sn = std::sin(angle);
    for (int64_t h = 0; h < heads; ++h) {
      float* a = v + h * hd;
      const double x1 = a[i], x2 = a[i + half];
      a[i] = static_cast<float>(x1 * cs - x2 * sn);
      a[i + half] = static_cast<float>(x2 * cs + x1 * sn);
    }
  }
}

}  // namespace

AttnRow attention_row(const float* z, int64_t n, Normalizer norm, float null_logit, float* p) {
  const bool has_null = norm != Normalizer::Softmax;
  const double zn = norm == Normalizer::Sink ? null_logit : 0.0;  // the virtual key's logit
  double m = has_null ? zn : -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, static_cast<double>(z[j]));
  double denom = has_null ? std::exp(zn - m) : 0.0;
  for (int64_t j = 0; j < n; ++j) denom += std::exp(z[j] - m);
  AttnRow r;
  double mass = 0, h = 0;
  for (int64_t j = 0; j < n; ++j) {
    const double pj = std::exp(z[j] - m) / denom;
    p[j] = static_cast<float>(pj);
    mass += pj;
    h -= xlnx(pj);
  }
  const double p_null = has_null ? std::exp(zn - m) / denom : 0.0;
  h -= xlnx(p_null);
  // Entropy over the keys plus the null share: H = −Σ_j p_j ln p_j − p_null ln p_null (Zhai et al.
  // 2023's attention entropy, with Miller 2023's null slot).
  r.entropy = static_cast<float>(h);
  // Normalised by ln(n_keys + [normalizer ≠ softmax]), the entropy of the uniform row (1 = uniform);
  // 0 where that is ln 1 (Kazemnejad et al. 2023 use the same ln N scale).
  const double keys = static_cast<double>(n) + (has_null ? 1.0 : 0.0);
  r.entropy_norm = keys > 1.0 ? static_cast<float>(h / std::log(keys)) : 0.0f;
  // Mass on the keys Σ_j p_j = 1 − p_null: what softmax-1 / a sink lets a head abstain with.
  r.mass = static_cast<float>(mass);
  r.p_null = static_cast<float>(p_null);
  // The largest |logit| of the row (Sun et al. 2024: massive activations feed attention sinks).
  double mx = 0;
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, std::fabs(static_cast<double>(z[j])));
  r.max_abs_logit = static_cast<float>(mx);
  return r;
}

void attention_heads(const float* q, const float* K, const float* V, int64_t n, int64_t nh, int64_t nkv, int64_t hd,
                     Normalizer norm, const float* null_logits, float* heads, AttnRow* rows, float* probs,
                     double scale) {
  const int64_t kvw = nkv * hd, group = nh / nkv;
  std::vector<float> z(static_cast<size_t>(n)), p(static_cast<size_t>(n));  // (n,) each
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (int64_t h = 0; h < nh; ++h) {
    const int64_t g = h / group;
    for (int64_t j = 0; j < n; ++j) {  // z_j = q · k_j · scale (1/√hd unless the family sets it)
      double dot = 0;
      for (int64_t i = 0; i < hd; ++i) dot += static_cast<double>(q[h * hd + i]) * K[j * kvw + g * hd + i];
      z[j] = static_cast<float>(dot * scale);
    }
    rows[h] = attention_row(z.data(), n, norm, null_logits[h], p.data());
    for (int64_t i = 0; i < hd; ++i) {  // o = Σ_j p_j v_j (the null key's value is 0)
      double o = 0;
      for (int64_t j = 0; j < n; ++j) o += static_cast<double>(p[j]) * V[j * kvw + g * hd + i];
      heads[h * hd + i] = static_cast<float>(o);
    }
    if (probs) std::copy(p.begin(), p.end(), probs + h * n);
  }
}

void attention_token(const AttentionWeights& w, const JambaConfig& c, Normalizer norm, const float* null_logits,
                     const float* x, KvCache& kv, float* heads, float* y, AttnRow* rows, std::vector<float>* probs) {
  const int64_t nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim();
  const int64_t kvw = nkv * hd;
  std::vector<float> q(static_cast<size_t>(nh * hd));  // (nh*hd,)
  linear(w.q, x, q.data(), w.q_bias);
  kv.k.resize(static_cast<size_t>((kv.len + 1) * kvw));
  kv.v.resize(static_cast<size_t>((kv.len + 1) * kvw));
  linear(w.k, x, &kv.k[kv.len * kvw], w.k_bias);  // (nkv*hd,) Jamba: no positional encoding (jamba-spec.md §3.1)
  linear(w.v, x, &kv.v[kv.len * kvw], w.v_bias);
  if (const int64_t rot = c.rotary_dim(); rot > 0) {  // Bamba: RoPE; the row's position is its slot (registers first)
    rope(q.data(), nh, hd, rot, kv.len, c.rope_theta);
    rope(&kv.k[kv.len * kvw], nkv, hd, rot, kv.len, c.rope_theta);
  }
  ++kv.len;  // keys: registers and tokens up to and including this one
  if (probs) probs->assign(static_cast<size_t>(nh * kv.len), 0.0f);
  attention_heads(q.data(), kv.k.data(), kv.v.data(), kv.len, nh, nkv, hd, norm, null_logits, heads, rows,
                  probs ? probs->data() : nullptr, c.attention_scale());
  linear(w.o, heads, y, w.o_bias);  // (H,)
}

namespace {

// The attention layer of the reference forward: its KV cache, normalizer and null logits s_h
// (the trained sinks when the plan uses them, else 0) for one run.
class RefAttention final : public RefMixer {
 public:
  RefAttention(const Model& m, int64_t layer, const RunPlan& plan)
      : w_(m.w.layers[static_cast<size_t>(layer)].attn),
        c_(m.config),
        ai_(m.schedule[layer].attn_index),
        norm_(plan.normalizer[static_cast<size_t>(layer)]),
        null_(plan.sinks[static_cast<size_t>(layer)] ? w_.sinks
                                                      : std::vector<float>(static_cast<size_t>(c_.num_attention_heads), 0)) {}

  void token(const float* x, float* y, const RefRow& at) override {
    const int64_t nh = c_.num_attention_heads, hd = c_.head_dim();
    std::vector<float> heads(static_cast<size_t>(nh * hd)), probs;  // (nh*hd,)
    std::vector<AttnRow> rows(static_cast<size_t>(nh));
    attention_token(w_, c_, norm_, null_.data(), x, kv_, heads.data(), y, rows.data(), &probs);
    at.observe("attn_heads", heads.data(), nh * hd);
    if (!at.instruments) return;
    TokenTrace* r = at.rec;
    const int64_t n = kv_.len;
    for (int64_t q = 0; q < nh; ++q) {
      const int64_t slot = ai_ * nh + q;
      r->attn_entropy[slot] = rows[q].entropy;
      r->attn_entropy_norm[slot] = rows[q].entropy_norm;
      r->attn_mass[slot] = rows[q].mass;
      r->attn_max_logit[slot] = rows[q].max_abs_logit;
      if (!at.full) continue;
      float* dst = &r->attn_rows[slot * (n + 1)];  // (n + 1,): the keys, then p_null
      std::copy(probs.begin() + q * n, probs.begin() + (q + 1) * n, dst);
      dst[n] = rows[q].p_null;
    }
  }

 private:
  const AttentionWeights& w_;
  const JambaConfig& c_;
  int64_t ai_;  // among the attention layers
  Normalizer norm_;
  std::vector<float> null_;  // (nh,)
  KvCache kv_;
};

std::unique_ptr<RefMixer> make_ref_attention(const Model& m, int64_t layer, const RunPlan& plan) {
  return std::make_unique<RefAttention>(m, layer, plan);
}

}  // namespace

HL_REGISTER_MODULE(RefMixerTable, MixerKind::Attention, make_ref_attention);

}  // namespace hl::ref
