#version 450
// Chunked parallel selective scan for prefill (jamba-spec.md §3.5 step 6): h_t = a_t h_{t-1} + b_t is
// linear, so each of C time chunks scans from zero (pass 1: end state, Π a), chunk carries are chained
// (pass 2), and each chunk rescans from its carry (pass 3) for y, out, Δ and the retained share.
// One workgroup per channel: N state entries × C chunks = 256 threads. Twin of scan_step.comp.
// Dispatch: (Di).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 3) buffer State { float st[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };

layout(push_constant) uniform PC {
  uint Di, N, S;
  uint dt_off, u_off;
  uint z_off, z_stride;
  uint b_off, c_off;
  uint out_off;
  uint a_off, d_off;
  uint h_off;
  uint full;
  uint rec_stride, delta_off, ret_off;
  uint bc_stride;          // row stride of B and C (already normalised here: bn_off, cn_off unused)
  int bn_off, cn_off;
  float eps;
} pc;

shared float hend[256], prod[256], carry[256], red[256], keep[256];

void main() {
  uint d = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
  uint N = pc.N, C = 256u / N;
  uint n = t % N, c = t / N;
  bool live = c < C;
  uint Lc = (pc.S + C - 1u) / C;  // tokens per chunk
  float A = vec[pc.a_off + d * N + n];

  // Pass 1: each chunk from a zero state.
  float h = 0.0, P = 1.0;
  if (live) {
    uint t1 = min(pc.S, (c + 1u) * Lc);
    for (uint s = c * Lc; s < t1; ++s) {
      float delta = softplus(act[pc.dt_off + s * pc.Di + d]);
      float a = exp(delta * A);
      h = a * h + (delta * act[pc.b_off + s * pc.bc_stride + n]) * act[pc.u_off + s * pc.Di + d];
      P *= a;
    }
  }
  hend[t] = h;
  prod[t] = P;
  barrier();
  // Pass 2: carries into each chunk, starting from the cached state.
  if (c == 0u) {
    float run = st[pc.h_off + d * N + n];
    for (uint k = 0u; k < C; ++k) {
      carry[k * N + n] = run;
      run = prod[k * N + n] * run + hend[k * N + n];
    }
  }
  barrier();
  // Pass 3: rescan each chunk from its carry; the outputs of step i of every chunk together.
  h = live ? carry[t] : 0.0;
  float Dd = vec[pc.d_off + d];
  for (uint i = 0u; i < Lc; ++i) {
    uint s = c * Lc + i;
    bool valid = live && s < pc.S;
    float delta = 0.0, u = 0.0;
    if (valid) {
      delta = softplus(act[pc.dt_off + s * pc.Di + d]);
      u = act[pc.u_off + s * pc.Di + d];
      float a = exp(delta * A);
      h = a * h + (delta * act[pc.b_off + s * pc.bc_stride + n]) * u;
      red[t] = h * act[pc.c_off + s * pc.bc_stride + n];
      keep[t] = a;
      if (s == pc.S - 1u) st[pc.h_off + d * N + n] = h;
    }
    barrier();
    if (valid && n == 0u) {
      float y = 0.0, kp = 0.0;
      for (uint k = 0u; k < N; ++k) {
        y += red[c * N + k];
        kp += keep[c * N + k];
      }
      y += Dd * u;
      act[pc.out_off + s * pc.Di + d] = y * silu(act[pc.z_off + s * pc.z_stride + d]);
      act[pc.dt_off + s * pc.Di + d] = delta;
      if (pc.full != 0u) {
        rec[s * pc.rec_stride + pc.delta_off + d] = delta;
        rec[s * pc.rec_stride + pc.ret_off + d] = kp / float(N);
      }
    }
    barrier();
  }
}
