#version 450
// Prefill product without shared memory or barriers, for CPU Vulkan devices (lavapipe) where those
// are expensive: each subgroup takes one weight row and 8 tokens (lanes along the row, 8 products
// per weight element, 8 subgroupAdds). Same contract and push constants as matmul.comp.
// Dispatch: (groups_x, ceil(ceil(rows/8)/groups_x), ceil(M/8)).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };
layout(std430, binding = 6) readonly buffer Route { int route[]; };

layout(push_constant) uniform PC {
  uint w_off, rows, cols;
  uint x_off, x_stride;
  uint y_off, y_stride;
  uint M;
  uint accumulate;
  int bias_off;
  int gather_off, scatter_off, count_idx;
  uint to_rec;
  uint groups_x;
  float alpha;  // as matmul.comp
  float beta;
  int scale_off;
} pc;

WEIGHT_LOADER(load_w, w)

const uint kRows = 8u, kTok = 8u;

void main() {
  uint M = pc.count_idx >= 0 ? uint(route[pc.count_idx]) : pc.M;
  uint i0 = gl_WorkGroupID.z * kTok;
  if (i0 >= M) return;
  uint n = min(kTok, M - i0);
  uint xrow[kTok];
  for (uint q = 0u; q < kTok; ++q) {
    uint i = min(i0 + q, M - 1u);
    xrow[q] = pc.x_off + (pc.gather_off >= 0 ? uint(route[pc.gather_off + int(i)]) : i) * pc.x_stride;
  }
  uint r0 = flat_group(pc.groups_x) * kRows;
  uint r1 = min(pc.rows, r0 + kRows);
  for (uint r = r0 + gl_SubgroupID; r < r1; r += gl_NumSubgroups) {
    uint wbase = pc.w_off + r * pc.cols;
    float acc[kTok];
    for (uint q = 0u; q < kTok; ++q) acc[q] = 0.0;
    for (uint c = gl_SubgroupInvocationID; c < pc.cols; c += gl_SubgroupSize) {
      float wv = load_w(wbase + c);
      for (uint q = 0u; q < kTok; ++q) acc[q] += wv * act[xrow[q] + c];
    }
    for (uint q = 0u; q < kTok; ++q) {
      float v = subgroupAdd(acc[q]);
      if (q >= n || !subgroupElect()) continue;
      v *= pc.beta;
      if (pc.bias_off >= 0) v += vec[pc.bias_off + int(r)];
      if (pc.scale_off >= 0) v *= vec[pc.scale_off + int(r)];
      v *= pc.alpha;
      uint i = i0 + q;
      uint yrow = pc.scatter_off >= 0 ? uint(route[pc.scatter_off + int(i)]) : i;
      uint yi = pc.y_off + yrow * pc.y_stride + r;
      if (pc.to_rec != 0u)
        rec[yi] = v;
      else if (pc.accumulate != 0u)
        act[yi] += v;
      else
        act[yi] = v;
    }
  }
}
