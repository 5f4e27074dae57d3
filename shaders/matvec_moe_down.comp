#version 450
// Decode MoE down projection and combination (jamba-spec.md §3.9): y[c] (+)= Σ_j w_j · (Wd_{e_j} a_j + b_{e_j})[c]
// over the k chosen experts in ascending index (as the CPU adds them), w the routing weights of
// moe_route.comp, a_j the expert's activation (silu(g_j) ⊙ u_j, or relu(u_j)²), b the experts' down
// biases (Nemotron-H's mlp_bias) if any; y the residual h (added) or the latent sum (Nemotron-H: set). fp32. Subgroup rows as matvec.comp (8 per workgroup).
// Dispatch: (groups_x, ceil(ceil(H/8)/groups_x)).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 6) readonly buffer Route { int route[]; };
layout(std430, binding = 6) readonly buffer RouteF { float routef[]; };

layout(push_constant) uniform PC {
  uint w_off, rows, cols;  // one expert's down matrix (H, I) of a packed (E, H, I) block
  uint x_off, x_slot;             // a_j (I,) at act[x_off + j·x_slot]
  uint y_off;                     // h (H,)
  uint K;
  uint sel_off, selw_off;         // route: expert ids (K,) ascending, their weights (K,)
  uint expert_stride;
  uint groups_x;
  int bias_off;                   // vec offset of the experts' down biases (E, rows), -1: none
  uint accumulate;                // 1: y += …, 0: y = …
} pc;

WEIGHT_LOADER(load_w, w)

const uint kRows = 8u;

void main() {
  uint r0 = flat_group(pc.groups_x) * kRows;
  uint r1 = min(pc.rows, r0 + kRows);
  for (uint r = r0 + gl_SubgroupID; r < r1; r += gl_NumSubgroups) {
    float y = 0.0;
    for (uint j = 0u; j < pc.K; ++j) {
      uint e = uint(route[pc.sel_off + j]);
      uint wbase = pc.w_off + e * pc.expert_stride + r * pc.cols;
      uint xi = pc.x_off + j * pc.x_slot;
      float acc = 0.0;
      for (uint c = gl_SubgroupInvocationID; c < pc.cols; c += gl_SubgroupSize)
        acc += load_w(wbase + c) * act[xi + c];
      float v = subgroupAdd(acc);
      if (pc.bias_off >= 0) v += vec[uint(pc.bias_off) + e * pc.rows + r];
      y += routef[pc.selw_off + j] * v;
    }
    if (!subgroupElect()) continue;
    if (pc.accumulate != 0u)
      act[pc.y_off + r] += y;
    else
      act[pc.y_off + r] = y;
  }
}
