#version 450
// Mamba-2's gate and gated RMSNorm (HF MambaRMSNormGated, FalconH1RMSNormGated; the CPU's
// cpu_mamba2.cpp): per token s and group of `group` channels, v = y ⊙ silu(z), then
// y ← w ⊙ v / sqrt(mean(v²) + eps) over the group, in place. Falcon-H1 may normalise first and gate
// after (before: y ← (w ⊙ y / sqrt(mean(y²) + eps)) ⊙ silu(z)) or have no norm (w_off −1:
// y ← y ⊙ silu(z)). One workgroup per (group, token). Dispatch: (Di / group, S).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };

layout(push_constant) uniform PC {
  uint Di, group;
  uint y_off;            // y (S, Di), overwritten with the output
  uint z_off, z_stride;  // z of token s at act[z_off + s·z_stride]
  int w_off;             // vec offset of the weight (Di,), -1: no norm
  float eps;
  uint before;           // 1: the norm before the gate
} pc;

shared float red[64];

void main() {
  uint t = gl_LocalInvocationID.x, c0 = gl_WorkGroupID.x * pc.group;
  uint yi = pc.y_off + gl_WorkGroupID.y * pc.Di + c0, zi = pc.z_off + gl_WorkGroupID.y * pc.z_stride + c0;
  if (pc.w_off < 0) {  // uniform over the workgroup
    for (uint i = t; i < pc.group; i += 64u) act[yi + i] = act[yi + i] * silu(act[zi + i]);
    return;
  }
  bool before = pc.before != 0u;
  float ss = 0.0;
  for (uint i = t; i < pc.group; i += 64u) {
    float v = before ? act[yi + i] : act[yi + i] * silu(act[zi + i]);
    ss += v * v;
  }
  red[t] = ss;
  barrier();
  for (uint k = 32u; k > 0u; k >>= 1) {
    if (t < k) red[t] += red[t + k];
    barrier();
  }
  float inv = 1.0 / sqrt(red[0] / float(pc.group) + pc.eps);
  for (uint i = t; i < pc.group; i += 64u) {  // only this thread reads and writes element i
    float v = before ? act[yi + i] : act[yi + i] * silu(act[zi + i]);
    float n = vec[pc.w_off + int(c0 + i)] * (v * inv);
    act[yi + i] = before ? n * silu(act[zi + i]) : n;
  }
}
