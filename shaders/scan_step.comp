#version 450
// Mamba's selective-scan update token by token (jamba-spec.md §3.6, selective_state_update): B, C
// RMS-normalised here (§3.5 step 4), Δ = softplus(dt) (threshold 20), h = exp(Δ·A) ⊙ h + Δ·B·u,
// y = h·C + D·u, out = y · silu(z), fp32, state kept on the device; Δ written back for the Δ mean,
// Δ and mean_n exp(Δ·A) into full records. Decode path; prefill: scan_prefill.comp. Dispatch: (ceil(Di/64)).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 3) buffer State { float st[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };

layout(push_constant) uniform PC {
  uint Di, N, S;
  uint dt_off, u_off;      // (S, Di) each; dt is overwritten with Δ
  uint z_off, z_stride;    // z of token s at act[z_off + s·z_stride + d]
  uint b_off, c_off;       // B (S, N), C (S, N)
  uint out_off;            // gated output (S, Di)
  uint a_off, d_off;       // vec: A (Di, N) = -exp(A_log), D (Di,)
  uint h_off;              // state offset of h (Di, N)
  uint full;               // write Δ and the retained share to the records
  uint rec_stride, delta_off, ret_off;
  uint bc_stride;          // row stride of B and C
  int bn_off, cn_off;      // vec offsets of the B / C RMSNorm weights (N,), -1: already normalised
  float eps;
} pc;

void main() {
  uint d = gl_GlobalInvocationID.x;
  if (d >= pc.Di) return;
  uint hi = pc.h_off + d * pc.N, ai = pc.a_off + d * pc.N;
  for (uint s = 0u; s < pc.S; ++s) {
    float delta = softplus(act[pc.dt_off + s * pc.Di + d]);
    float u = act[pc.u_off + s * pc.Di + d];
    uint bi = pc.b_off + s * pc.bc_stride, ci = pc.c_off + s * pc.bc_stride;
    float ib = 1.0, ic = 1.0;  // 1 / rms of B and C
    if (pc.bn_off >= 0) {
      float sb = 0.0, sc = 0.0;
      for (uint n = 0u; n < pc.N; ++n) {
        sb += act[bi + n] * act[bi + n];
        sc += act[ci + n] * act[ci + n];
      }
      ib = 1.0 / sqrt(sb / float(pc.N) + pc.eps);
      ic = 1.0 / sqrt(sc / float(pc.N) + pc.eps);
    }
    float y = 0.0, keep = 0.0;
    for (uint n = 0u; n < pc.N; ++n) {
      float Bn = act[bi + n], Cn = act[ci + n];
      if (pc.bn_off >= 0) {
        Bn = vec[pc.bn_off + int(n)] * (Bn * ib);
        Cn = vec[pc.cn_off + int(n)] * (Cn * ic);
      }
      float dA = exp(delta * vec[ai + n]);
      float h = dA * st[hi + n] + (delta * Bn) * u;
      st[hi + n] = h;
      y += h * Cn;
      keep += dA;
    }
    y += vec[pc.d_off + d] * u;
    act[pc.out_off + s * pc.Di + d] = y * silu(act[pc.z_off + s * pc.z_stride + d]);
    act[pc.dt_off + s * pc.Di + d] = delta;
    if (pc.full != 0u) {
      rec[s * pc.rec_stride + pc.delta_off + d] = delta;
      rec[s * pc.rec_stride + pc.ret_off + d] = keep / float(pc.N);
    }
  }
}
