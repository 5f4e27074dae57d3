#version 450
// RMSNorm of S strided rows (jamba-spec.md §3.2): y = w ⊙ x / sqrt(mean(x²) + eps), fp32. The layer
// and final norms also observe the residual stream point they read (trace-format.md §3): max |x|
// (NaN skipped, ±Inf counted, as std::fmax), a non-finite flag, and the row itself for the host's
// rank-to-1 Welford update (probes/rank1.h). One workgroup per row. Dispatch: (S).

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };

layout(push_constant) uniform PC {
  uint in_off, in_stride;    // x row s at act[in_off + s·in_stride], n values
  uint out_off, out_stride;  // y row s at act[out_off + s·out_stride]
  uint n;
  uint w_off;                // vec offset of the weight (n,)
  float eps;
  uint observe;              // 0: no; 1: the non-finite flag; 2: flag, max |x| and the row
  uint rec_stride, max_off, flag_off, row_off;  // record offsets of this residual point
} pc;

shared float red[64];
shared float big[64];
shared float bad[64];

void main() {
  uint s = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
  uint xi = pc.in_off + s * pc.in_stride, rb = s * pc.rec_stride;
  float ss = 0.0, mx = 0.0, nf = 0.0;
  for (uint i = t; i < pc.n; i += 64u) {
    float v = act[xi + i];
    ss += v * v;
    if (pc.observe != 0u) {
      if (isnan(v) || isinf(v)) nf = 1.0;
      if (!isnan(v)) mx = max(mx, abs(v));
      if (pc.observe == 2u) rec[rb + pc.row_off + i] = v;
    }
  }
  red[t] = ss;
  big[t] = mx;
  bad[t] = nf;
  barrier();
  for (uint k = 32u; k > 0u; k >>= 1) {
    if (t < k) {
      red[t] += red[t + k];
      big[t] = max(big[t], big[t + k]);
      bad[t] = max(bad[t], bad[t + k]);
    }
    barrier();
  }
  float inv = 1.0 / sqrt(red[0] / float(pc.n) + pc.eps);
  uint yi = pc.out_off + s * pc.out_stride;
  for (uint i = t; i < pc.n; i += 64u) act[yi + i] = vec[pc.w_off + i] * (act[xi + i] * inv);
  if (t == 0u && pc.observe != 0u) {
    rec[rb + pc.flag_off] = bad[0];
    if (pc.observe == 2u) rec[rb + pc.max_off] = big[0];
  }
}
