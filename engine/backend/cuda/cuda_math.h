// The per-element math of the CUDA backend as `__host__ __device__` inline functions, so the same
// lines run in the kernels (cuda_kernels.cu, cuda_kernels_ssm.cu, cuda_kernels_mamba2.cu) and in the
// host tests (tests/engine/test_cuda_math.cpp, built by g++ without nvcc), which check them against
// the CPU reference: bf16/fp16 widening (core/dtype.h), SiLU, relu² and softplus (threshold 20,
// jamba-spec.md §3.5), the RMSNorm scale (§3.2), the attention normalizers and row instruments
// (probes/attention_probe.h), one selective-scan update (§3.5), Mamba-2's Δ, channel update and
// gated-norm value, one RoPE pair, the router's softmax/top-k/lse (probes/router_probe.h) and the
// rank-to-1 distance (probes/rank1.h). Not a kernel: reductions over rows live in the kernels, these
// are their terms.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define HL_HD __host__ __device__
#else
#define HL_HD
#endif

namespace hl::cudam {

// Device weight element types (the values are the kernels' runtime dtype codes): F32, F16, BF16 and
// the ggml block formats the kernels dequantise (core/ggml_quant.h; the other block types are widened
// to F32 at upload).
enum : int { kF32 = 0, kF16 = 1, kBF16 = 2, kQ8_0 = 3, kQ4_0 = 4, kQ5_0 = 5, kQ5_1 = 6, kQ4_K = 7, kQ5_K = 8, kQ6_K = 9 };

HL_HD inline float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// bfloat16: the upper 16 bits of binary32 (exact).
HL_HD inline float bf16_to_float(uint16_t h) {
  return bits_to_float(static_cast<uint32_t>(h) << 16);
}

// IEEE binary16 to binary32 (exact, subnormals and NaN payloads included).
HL_HD inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);  // ±0
    int e = -1;                                // subnormal: normalise the mantissa
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    return bits_to_float(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | ((man & 0x3ffu) << 13));
  }
  return bits_to_float(sign | (exp + 112u) << 23 | (man << 13));
}

// Elements and bytes of one block of dtype t (an element of F32/F16/BF16 is a block of one).
HL_HD inline int64_t block_elems(int t) {
  return t == kF32 || t == kF16 || t == kBF16 ? 1 : t >= kQ4_K ? 256 : 32;
}
HL_HD inline int64_t block_bytes(int t) {
  constexpr int64_t bytes[] = {4, 2, 2, 34, 18, 22, 24, 144, 176, 210};
  return bytes[t];
}
// The byte offset of element n of a matrix of dtype t (n a whole number of blocks: rows start on one).
HL_HD inline int64_t elem_bytes(int t, int64_t n) {
  return n / block_elems(t) * block_bytes(t);
}

// a · b rounded once: no fused multiply-add with a following add, on the device as on the host
// (ggml's dequantisation rounds every product, core/ggml_quant.cpp).
HL_HD inline float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

HL_HD inline float half_at(const uint8_t* b) {
  return f16_to_float(static_cast<uint16_t>(b[0] | (b[1] << 8)));
}

// Six-bit scale (k = 0) or min (k = 1) of group g of a Q4_K/Q5_K block's 12 scale bytes s (ggml's
// get_scale_min_k4).
HL_HD inline float k4_scale(const uint8_t* s, int g, int k) {
  if (g < 4) return static_cast<float>(s[g + 4 * k] & 63);
  if (k == 0) return static_cast<float>((s[g + 4] & 15) | ((s[g - 4] >> 6) << 4));
  return static_cast<float>((s[g + 4] >> 4) | ((s[g] >> 6) << 4));
}

// Element i of the blocks at p, block type t, computed as ggml's dequantize_row_* computes it
// (shaders/common.glsl's loader is the same per-element arithmetic).
HL_HD inline float dequant(int t, const uint8_t* p, int64_t i) {
  if (t == kQ8_0) {
    const uint8_t* b = p + (i >> 5) * 34;
    return mul_rn(static_cast<float>(static_cast<int8_t>(b[2 + (i & 31)])), half_at(b));
  }
  if (t == kQ4_0 || t == kQ5_0 || t == kQ5_1) {
    const int j = static_cast<int>(i & 31);
    const uint8_t* b = p + (i >> 5) * block_bytes(t);
    const uint8_t* qs = b + (t == kQ4_0 ? 2 : t == kQ5_0 ? 6 : 8);
    int q = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
    if (t == kQ4_0) return mul_rn(static_cast<float>(q - 8), half_at(b));
    const uint8_t* qh = b + (t == kQ5_0 ? 2 : 4);  // bit j of a little-endian u32
    q |= ((qh[j >> 3] >> (j & 7)) & 1) << 4;
    if (t == kQ5_0) return mul_rn(static_cast<float>(q - 16), half_at(b));
    const float v = mul_rn(static_cast<float>(q), half_at(b));
    return v + half_at(b + 2);
  }
  const int e = static_cast<int>(i & 255);
  const uint8_t* b = p + (i >> 8) * block_bytes(t);
  if (t == kQ6_K) {
    const int n = e >> 7, k = (e >> 5) & 3, l = e & 31;
    int lo = b[64 * n + 32 * (k & 1) + l];
    lo = k < 2 ? (lo & 15) : (lo >> 4);
    const int hi = (b[128 + 32 * n + l] >> (2 * k)) & 3;
    const float ds = mul_rn(half_at(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + (e >> 4)])));
    return mul_rn(ds, static_cast<float>((lo | (hi << 4)) - 32));
  }
  // Q4_K (d, dmin, scales[12], qs[128]) or Q5_K (the same with qh[32] before qs): group g of 32,
  // chunk g / 2, low nibbles for even g.
  const int g = e >> 5, l = e & 31;
  const int qb = b[(t == kQ4_K ? 16 : 48) + 32 * (g >> 1) + l];
  int q = (g & 1) ? (qb >> 4) : (qb & 15);
  if (t == kQ5_K) q += ((b[16 + l] >> g) & 1) << 4;
  const float d1 = mul_rn(half_at(b), k4_scale(b + 4, g, 0));
  const float m1 = mul_rn(half_at(b + 2), k4_scale(b + 4, g, 1));
  const float v = mul_rn(d1, static_cast<float>(q));
  return v - m1;
}

// Element i of a row of dtype `t` (p a row start: for a block type, the start of a block).
HL_HD inline float widen(int t, const void* p, int64_t i) {
  if (t == kBF16) return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  if (t == kF16) return f16_to_float(static_cast<const uint16_t*>(p)[i]);
  if (t == kF32) return static_cast<const float*>(p)[i];
  return dequant(t, static_cast<const uint8_t*>(p), i);
}

// silu(v) = v / (1 + e^-v), as cpu_simd.cpp's silu_ref.
HL_HD inline float silu(float v) {
  return v / (1.0f + expf(-v));
}

// relu(v)² (Nemotron-H's MLP without gate, HF's relu2; cpu_ffn.cpp relu2_mlp).
HL_HD inline float relu2(float v) {
  const float r = v > 0.0f ? v : 0.0f;
  return r * r;
}

// softplus(v) = log1p(e^v) for v ≤ 20, else v (jamba-spec.md §3.5, the CPU's threshold).
HL_HD inline float softplus(float v) {
  return v <= 20.0f ? log1pf(expf(v)) : v;
}

// RMSNorm: from the fp64 sum of squares of n elements, the fp32 factor 1/sqrt(mean + eps); then
// each output is weight · (x · inv) (cpu_ops.cpp's rmsnorm).
HL_HD inline float rms_inv(double sum_sq, int64_t n, double eps) {
  return static_cast<float>(1.0 / sqrt(sum_sq / static_cast<double>(n) + eps));
}
HL_HD inline float rms_scale(float weight, float x, float inv) {
  return weight * (x * inv);
}

// The attention normalizers (trace-format.md §2): 0 softmax (no null key), 1 softmax-1 (a virtual
// null key of logit 0), 2 sink (a learned logit s_h). `norm` uses the values of hl::Normalizer.
HL_HD inline bool attn_has_null(int norm) {
  return norm != 0;
}
HL_HD inline float attn_null_logit(int norm, float sink) {
  return norm == 1 ? 0.0f : sink;
}

struct AttnStats {
  float entropy, entropy_norm, mass, p_null, max_abs_logit;
};

// The row instruments from the row's reductions (probes/attention_probe.cpp): m the maximum over
// the keys and the null logit, denom = Σ_j e^(z_j−m) + e^(zn−m) (with e_null its null term),
// mass = Σ_j p_j and weighted = Σ_j p_j (z_j − m) over the n keys, max_abs = max_j |z_j|.
// H = ln denom − weighted − p_null (zn − m), clamped at 0; normalised by ln(n + [null]).
HL_HD inline AttnStats attn_finish(int norm, double denom, double e_null, float zn, float m, double mass,
                                   double weighted, float max_abs, int64_t n) {
  const bool has_null = attn_has_null(norm);
  const double inv = 1.0 / denom;
  const double p_null = e_null * inv;
  if (has_null) weighted += p_null * (static_cast<double>(zn) - m);
  double h = log(denom) - weighted;
  if (h < 0) h = 0;
  const double keys = static_cast<double>(n) + (has_null ? 1.0 : 0.0);
  AttnStats s;
  s.entropy = static_cast<float>(h);
  s.entropy_norm = keys > 1.0 ? static_cast<float>(h / log(keys)) : 0.0f;
  s.mass = has_null ? static_cast<float>(mass) : 1.0f;
  s.p_null = static_cast<float>(p_null);
  s.max_abs_logit = max_abs;
  return s;
}

// One state lane of the selective scan for one token: h ← e^(Δ·A)·h + (Δ·B)·u; returns e^(Δ·A)
// (the retained share of this lane). The output is Σ_n h_n·C_n + D·u, gated by silu(z).
HL_HD inline float scan_update(float& h, float delta, float A, float B, float u) {
  const float dA = expf(delta * A);
  h = dA * h + delta * B * u;
  return dA;
}
HL_HD inline float scan_output(float acc, float D, float u, float z) {
  return (acc + D * u) * silu(z);
}

// Mamba-2 (HF BambaMixer's slow path, cpu_mamba2.cpp): Δ of one head = clamp(softplus(dt + dt_bias),
// lo, hi), the clamp of time_step_limit (Nemotron-H's floor time_step_min, JambaConfig::mamba2_dt_lo);
// hi may be +∞. The comparisons are std::clamp's, so a NaN Δ stays NaN as on the CPU.
HL_HD inline float mamba2_delta(float dt, float dt_bias, float lo, float hi) {
  const float d = softplus(dt + dt_bias);
  return d < lo ? lo : hi < d ? hi : d;
}

// One channel of a Mamba-2 head for one token (cpu_ssd.cpp scan_in_order, operation for operation):
// with the head's decay dA = e^(Δ·A_h) (its retained share) and Δ, the channel's state row s (N
// lanes at stride `ld`) ← dA·s + (Δ·x)·B_g; returns y = s·C_g + D_h·x, the output before the gate.
HL_HD inline float mamba2_decay(float delta, float A) {
  return expf(delta * A);
}
HL_HD inline float mamba2_channel(float* s, int64_t ld, int N, float dA, float delta, float x, const float* B,
                                  const float* C, float D) {
  const float dx = delta * x;
  float acc = 0.0f;
  for (int n = 0; n < N; ++n) {
    const float v = dA * s[n * ld] + dx * B[n];
    s[n * ld] = v;
    acc += v * C[n];
  }
  return acc + D * x;
}

// The gated RMSNorm after the gate (HF MambaRMSNormGated, Bamba's order): v = silu(z)·y per channel;
// each group of channels is then normalised with rms_inv over its fp64 Σv² and rms_scale by the
// weight (the group: JambaConfig::mamba2_norm_group).
HL_HD inline float gated_value(float y, float z) {
  return silu(z) * y;
}

// RoPE (Su et al. 2021; HF's rotate_half, cpu_attention.cpp): the pair (x1, x2) = dims (i, i + r) of a
// head turned by angle = position · inv_freq_i (inv_freq_i = θ^(−2i/rotary_dims), computed on the
// host in double), cos and sin in double rounded to float as the CPU computes them.
HL_HD inline void rope_pair(float& x1, float& x2, double angle) {
  const float cs = static_cast<float>(cos(angle)), sn = static_cast<float>(sin(angle));
  const float a = x1 * cs - x2 * sn, b = x2 * cs + x1 * sn;
  x1 = a;
  x2 = b;
}

// The K largest of v (n,), highest first, ties to the lower index (router_probe.cpp top_indices).
HL_HD inline void top_indices(const float* v, int n, int K, int32_t* out) {
  for (int r = 0; r < K; ++r) {
    int32_t best = -1;
    for (int e = 0; e < n; ++e) {
      bool taken = false;
      for (int q = 0; q < r; ++q) taken |= out[q] == e;
      if (!taken && (best < 0 || v[e] > v[best])) best = e;
    }
    out[r] = best;
  }
}

// Router (probes/router_probe.cpp, for the small E of a block's one thread): fp32 softmax with
// an fp64 sum, top-k by probability (ties: lower index first), returns lse = m + ln Σ.
HL_HD inline float route(const float* logits, int E, int K, float* probs, int32_t* topk) {
  float m = -INFINITY;
  for (int e = 0; e < E; ++e) m = fmaxf(m, logits[e]);
  double sum = 0;
  for (int e = 0; e < E; ++e) {
    probs[e] = expf(logits[e] - m);
    sum += probs[e];
  }
  const double inv = 1.0 / sum;
  for (int e = 0; e < E; ++e) probs[e] = static_cast<float>(probs[e] * inv);
  top_indices(probs, E, K, topk);
  return static_cast<float>(m + log(sum));
}

// Nemotron-H's router (router_probe.cpp route_sigmoid; DeepSeek-V3's grouped choice): s_e =
// sigmoid(logit_e), choice_e = s_e + bias_e (bias may be null); a group's score is the sum of its
// two largest choices, the topk_groups best groups stay and the rest choose 0; top-k of the choices;
// weights[j] = s / (Σ s of the chosen + 1e-20 when renormalize) × scale; probs = s / Σ s; returns
// lse of the logits. Scratch: choice (E), gscore (groups), gbest (topk_groups).
HL_HD inline float route_sigmoid(const float* logits, const float* bias, int E, int K, int groups, int topk_groups,
                                 bool renormalize, double scale, float* probs, int32_t* topk, float* weights,
                                 float* choice, float* gscore, int32_t* gbest) {
  float m = -INFINITY;
  double ssum = 0;
  for (int e = 0; e < E; ++e) {
    m = fmaxf(m, logits[e]);
    probs[e] = 1.0f / (1.0f + expf(-logits[e]));
    ssum += probs[e];
    choice[e] = probs[e] + (bias ? bias[e] : 0.0f);
  }
  const int per = E / groups;
  for (int g = 0; g < groups; ++g) {
    int32_t two[2];
    top_indices(choice + g * per, per, per < 2 ? per : 2, two);
    gscore[g] = choice[g * per + two[0]] + (per > 1 ? choice[g * per + two[1]] : 0.0f);
  }
  top_indices(gscore, groups, topk_groups, gbest);
  for (int g = 0; g < groups; ++g) {
    bool kept = false;
    for (int q = 0; q < topk_groups; ++q) kept |= gbest[q] == g;
    if (!kept)
      for (int e = g * per; e < (g + 1) * per; ++e) choice[e] = 0.0f;
  }
  top_indices(choice, E, K, topk);
  double wsum = 0;
  for (int j = 0; j < K; ++j) wsum += probs[topk[j]];
  const double div = renormalize ? wsum + 1e-20 : 1.0;
  for (int j = 0; j < K; ++j) weights[j] = static_cast<float>(probs[topk[j]] / div * scale);
  for (int e = 0; e < E; ++e) probs[e] = static_cast<float>(probs[e] / ssum);
  double lsum = 0;
  for (int e = 0; e < E; ++e) lsum += exp(static_cast<double>(logits[e]) - m);
  return static_cast<float>(m + log(lsum));
}

// The chosen experts in ascending index (the order the CPU sums their outputs, jamba-spec.md §3.9),
// each weight (w, or null) moving with its expert.
HL_HD inline void sort_ascending(int32_t* v, int K, float* w = nullptr) {
  for (int i = 1; i < K; ++i)
    for (int j = i; j > 0 && v[j - 1] > v[j]; --j) {
      const int32_t t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
      if (!w) continue;
      const float u = w[j];
      w[j] = w[j - 1];
      w[j - 1] = u;
    }
}

// Rank-to-1 distance from Welford's state (probes/rank1.cpp): sqrt(M2 / Σ‖x‖²), 0 for one row.
HL_HD inline float rank1_distance(double m2, double sq, int64_t n) {
  if (n < 2 || !(sq > 0)) return 0.0f;
  return static_cast<float>(sqrt(m2 > 0 ? m2 / sq : 0.0));
}

}  // namespace hl::cudam
