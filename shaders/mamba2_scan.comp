#version 450
// Mamba-2's recurrence (Dao & Gu 2024; HF BambaMixer's slow path) over S tokens in token order: the
// decode step at S = 1 and the prefill alike. Per token, head h's Δ = clamp(softplus(dt + dt_bias),
// lo, hi) and decay exp(Δ·A_h); channel c = h·P + p (head h reads B/C group g = h / (nh/G)) updates
// its row s (N,) of the state S_h (P, N): s ← exp(Δ·A_h) s + Δ x_c B_g, y_c = s·C_g + D_h x_c, the
// output before the gate. Δ (S, nh) goes to the activations (the Δ mean, the ssm_delta intermediate);
// with `full`, each channel's head Δ and exp(Δ·A_h) into the records (trace-format.md §3). One thread
// per channel walking the tokens in order: the CPU's token-order scan (cpu_ssd.h scan_in_order) step
// for step, so a prefill equals its decode steps. Dispatch: (ceil(Di/64)).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 3) buffer State { float st[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };

layout(push_constant) uniform PC {
  uint nh, P, N, G, S;
  uint xbc_off, xbc_stride;    // token s: x (Di) | B (G·N) | C (G·N) at act[xbc_off + s·xbc_stride]
  uint dt_off, dt_stride;      // token s: dt (nh,) at act[dt_off + s·dt_stride]
  uint y_off;                  // y (S, Di)
  uint delta_off;              // Δ (S, nh)
  uint dtb_off, a_off, d_off;  // vec offsets of dt_bias, A = −exp(A_log) and D, (nh,) each
  uint h_off;                  // state offset of S (nh, P, N)
  uint full;                   // write Δ and exp(Δ·A) per channel to the records
  uint rec_stride, rdelta_off, rret_off;
  float lo, hi;                // the Δ clamp (hi may be +∞)
} pc;

void main() {
  uint c = gl_GlobalInvocationID.x, Di = pc.nh * pc.P, N = pc.N;
  if (c >= Di) return;
  uint h = c / pc.P, g = h / (pc.nh / pc.G), si = pc.h_off + c * N;
  float A = vec[pc.a_off + h], Dh = vec[pc.d_off + h], bias = vec[pc.dtb_off + h];
  for (uint s = 0u; s < pc.S; ++s) {
    uint row = pc.xbc_off + s * pc.xbc_stride;
    uint bi = row + Di + g * N, ci = row + Di + pc.G * N + g * N;
    float delta = min(max(softplus(act[pc.dt_off + s * pc.dt_stride + h] + bias), pc.lo), pc.hi);
    float dA = exp(delta * A);
    float x = act[row + c], dx = delta * x;
    float y = 0.0;
    for (uint n = 0u; n < N; ++n) {
      float v = dA * st[si + n] + dx * act[bi + n];
      st[si + n] = v;
      y += v * act[ci + n];
    }
    act[pc.y_off + s * Di + c] = y + Dh * x;
    if (c == h * pc.P) act[pc.delta_off + s * pc.nh + h] = delta;
    if (pc.full != 0u) {
      rec[s * pc.rec_stride + pc.rdelta_off + c] = delta;
      rec[s * pc.rec_stride + pc.rret_off + c] = dA;
    }
  }
}
