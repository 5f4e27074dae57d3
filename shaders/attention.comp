#version 450
// Attention of S queries over the cached keys (jamba-spec.md §3.4: no positions, GQA kv = h/(nh/nkv),
// scale 1/sqrt(hd)) under the normalizers of trace-format.md §2, with entropy, normalized entropy,
// mass and max |logit| fused (CPU twin: probes/attention_probe.h). With e_j = exp(z_j − m) and
// D = Σ e_j + e_null: o = Σ e_j v_j / D, H = ln D − (Σ e_j (z_j − m) + e_null (z_null − m)) / D.
// One workgroup per (head, query), logits recomputed per pass (any context fits). Dispatch: (nh, S).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 3) readonly buffer KCache { float kc[]; };  // (capacity, nkv·hd)
layout(std430, binding = 4) readonly buffer VCache { float vc[]; };  // (capacity, nkv·hd)
layout(std430, binding = 5) buffer Rec { float rec[]; };
layout(std430, binding = 7) readonly buffer Params { int params[]; };

layout(push_constant) uniform PC {
  uint nh, nkv, hd;
  float scale;
  uint q_off, q_stride;  // act: q of token s at q_off + s·q_stride (nh·hd)
  uint o_off;            // act: o (S, nh·hd)
  uint has_null;         // softmax1 or sink
  int null_off;          // vec offset of the sink logits (nh,), -1: null logit 0
  uint rec_on;           // write the instruments (records of tokens, not registers)
  uint rec_stride;       // floats per token record
  uint attn_off;         // record offset of entropy | entropy_norm | mass | max_logit, each (A_n·nh)
  uint attn_count;       // A_n·nh
  uint slot0;            // this layer's first slot: attention index · nh
  uint full;             // also the attention rows
  uint rows_off, rows_stride;  // record offset of the rows (A_n·nh, rows_stride)
} pc;

shared float qs[256];
shared float red_a[64];
shared float red_b[64];
shared float et[64];

float logit(uint j, uint kbase) {
  float z = 0.0;
  uint ki = j * (pc.nkv * pc.hd) + kbase;
  for (uint d = 0u; d < pc.hd; ++d) z += qs[d] * kc[ki + d];
  return z * pc.scale;
}

void main() {
  uint h = gl_WorkGroupID.x, s = gl_WorkGroupID.y, t = gl_LocalInvocationID.x;
  uint nkeys = uint(params[0]) + s + 1u;
  uint kvw = pc.nkv * pc.hd;
  uint hk = h / (pc.nh / pc.nkv);
  uint kbase = hk * pc.hd;
  uint qi = pc.q_off + s * pc.q_stride + h * pc.hd;
  for (uint d = t; d < pc.hd; d += 64u) qs[d] = act[qi + d];
  barrier();
  float zn = pc.null_off >= 0 ? vec[pc.null_off + int(h)] : 0.0;

  // Pass 1: the row maximum and the largest |logit| over the keys.
  float m = -1.0 / 0.0, ma = 0.0;
  for (uint j = t; j < nkeys; j += 64u) {
    float z = logit(j, kbase);
    m = max(m, z);
    ma = max(ma, abs(z));
  }
  red_a[t] = m;
  red_b[t] = ma;
  barrier();
  for (uint k = 32u; k > 0u; k >>= 1) {
    if (t < k) {
      red_a[t] = max(red_a[t], red_a[t + k]);
      red_b[t] = max(red_b[t], red_b[t + k]);
    }
    barrier();
  }
  m = red_a[0];
  ma = red_b[0];
  if (pc.has_null != 0u) m = max(m, zn);
  barrier();

  // Pass 2: e_j, their sums, and the unnormalised output in tiles of 64 keys.
  float se = 0.0, sw = 0.0;
  float oacc[4] = float[4](0.0, 0.0, 0.0, 0.0);  // dims t, t+64, t+128, t+192
  for (uint j0 = 0u; j0 < nkeys; j0 += 64u) {
    uint j = j0 + t;
    float e = 0.0;
    if (j < nkeys) {
      float zm = logit(j, kbase) - m;
      e = exp(zm);
      se += e;
      sw += e * zm;
    }
    et[t] = e;
    barrier();
    uint cnt = min(64u, nkeys - j0);
    for (uint q = 0u; q < 4u; ++q) {
      uint d = t + 64u * q;
      if (d >= pc.hd) break;
      float a = oacc[q];
      for (uint i = 0u; i < cnt; ++i) a += et[i] * vc[(j0 + i) * kvw + kbase + d];
      oacc[q] = a;
    }
    barrier();
  }
  red_a[t] = se;
  red_b[t] = sw;
  barrier();
  for (uint k = 32u; k > 0u; k >>= 1) {
    if (t < k) {
      red_a[t] += red_a[t + k];
      red_b[t] += red_b[t + k];
    }
    barrier();
  }
  se = red_a[0];
  sw = red_b[0];
  float en = pc.has_null != 0u ? exp(zn - m) : 0.0;
  float D = se + en;
  uint oi = pc.o_off + s * pc.nh * pc.hd + h * pc.hd;
  for (uint q = 0u; q < 4u; ++q) {
    uint d = t + 64u * q;
    if (d < pc.hd) act[oi + d] = oacc[q] / D;
  }
  if (pc.rec_on == 0u) return;
  uint rb = s * pc.rec_stride;
  uint slot = pc.slot0 + h;
  if (t == 0u) {
    float ent = log(D) - (sw + en * (zn - m)) / D;
    ent = max(ent, 0.0);  // rounding on one-hot rows
    float keys = float(nkeys) + (pc.has_null != 0u ? 1.0 : 0.0);
    rec[rb + pc.attn_off + slot] = ent;
    rec[rb + pc.attn_off + pc.attn_count + slot] = keys > 1.0 ? ent / log(keys) : 0.0;
    rec[rb + pc.attn_off + 2u * pc.attn_count + slot] = pc.has_null != 0u ? se / D : 1.0;
    rec[rb + pc.attn_off + 3u * pc.attn_count + slot] = ma;
  }
  if (pc.full == 0u) return;
  // Pass 3 (full traces): the probabilities, then p_null in the last column.
  uint ri = rb + pc.rows_off + slot * pc.rows_stride;
  for (uint j = t; j < nkeys; j += 64u) rec[ri + j] = exp(logit(j, kbase) - m) / D;
  if (t == 0u) rec[ri + nkeys] = en / D;
}
