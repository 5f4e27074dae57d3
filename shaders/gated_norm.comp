#version 450
// Mamba-2's gated RMSNorm after the gate (HF MambaRMSNormGated; the CPU's cpu_mamba2.cpp): per token
// s and group of `group` channels, v = y ⊙ silu(z), then y ← w ⊙ v / sqrt(mean(v²) + eps) over the
// group, in place. One workgroup per (group, token). Dispatch: (Di / group, S).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };

layout(push_constant) uniform PC {
  uint Di, group;
  uint y_off;            // y (S, Di), overwritten with the output
  uint z_off, z_stride;  // z of token s at act[z_off + s·z_stride]
  uint w_off;            // vec offset of the weight (Di,)
  float eps;
} pc;

shared float red[64];

void main() {
  uint t = gl_LocalInvocationID.x, c0 = gl_WorkGroupID.x * pc.group;
  uint yi = pc.y_off + gl_WorkGroupID.y * pc.Di + c0, zi = pc.z_off + gl_WorkGroupID.y * pc.z_stride + c0;
  float ss = 0.0;
  for (uint i = t; i < pc.group; i += 64u) {
    float v = act[yi + i] * silu(act[zi + i]);
    ss += v * v;
  }
  red[t] = ss;
  barrier();
  for (uint k = 32u; k > 0u; k >>= 1) {
    if (t < k) red[t] += red[t + k];
    barrier();
  }
  float inv = 1.0 / sqrt(red[0] / float(pc.group) + pc.eps);
  for (uint i = t; i < pc.group; i += 64u) {
    float v = act[yi + i] * silu(act[zi + i]);  // only this thread reads and writes element i
    act[yi + i] = vec[pc.w_off + c0 + i] * (v * inv);
  }
}
