#version 450
// Decode matrix–vector product, stored-dtype weights, fp32 accumulation: y = W x (+ bias), W (rows,
// cols) in PyTorch's (out, in) layout. Options: z index = expert slot of a packed (E, ·, cols) block
// (§3.9), a gate|up pair giving silu(gate x) ⊙ (up x) (§3.8), x RMS-normalised on the fly (Mamba's dt
// norm). Each subgroup takes whole rows (lanes along the columns, one subgroupAdd, no barriers), a
// workgroup 8 rows. Dispatch: (groups_x, ceil(ceil(rows/8)/groups_x), slots).
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
  uint x_off, x_slot;       // x (cols,) at act[x_off + j·x_slot]
  uint y_off, y_slot;       // y (rows,) at act[y_off + j·y_slot] (or rec[...] with to_rec)
  uint accumulate;          // 1: y += W x (the residual adds)
  int bias_off;             // vec offset of the bias (rows,) (with expert slots: (E, rows), the slot's expert's), -1: none
  uint groups_x;
  int sel_off;              // route offset of the slots' expert ids, -1: a plain matrix
  uint expert_stride;       // elements per expert matrix
  uint to_rec;              // 1: y lives in the records buffer (the logits)
  uint swiglu;              // 1: rows [0, rows) gate and [rows, 2·rows) up of each matrix
  int norm_off;             // vec offset of an RMSNorm weight (cols,) applied to x, -1: none
  float eps;
  float alpha;              // y (+)= alpha·(W x + bias): Granite's residual multiplier, 1 / logits_scaling; else 1
  float beta;               // x's factor before the bias: y (+)= alpha·(W (beta·x) + bias) (Falcon-H1's input multipliers)
  int scale_off;            // vec offset of per-row factors (rows,) after the bias (Falcon-H1's µP vector), -1: none
} pc;

WEIGHT_LOADER(load_w, w)

const uint kRows = 8u;  // rows per workgroup (vk_record.cpp dispatches ceil(rows / 8) groups)

void main() {
  uint j = gl_WorkGroupID.z;
  uint r0 = flat_group(pc.groups_x) * kRows;
  uint r1 = min(pc.rows, r0 + kRows);
  uint expert = pc.sel_off >= 0 ? uint(route[pc.sel_off + int(j)]) : 0u;
  uint eoff = expert * pc.expert_stride;
  uint xi = pc.x_off + j * pc.x_slot;
  float inv = 1.0;
  if (pc.norm_off >= 0) {
    float ss = 0.0;
    for (uint c = gl_SubgroupInvocationID; c < pc.cols; c += gl_SubgroupSize) ss += act[xi + c] * act[xi + c];
    inv = 1.0 / sqrt(subgroupAdd(ss) / float(pc.cols) + pc.eps);
  }
  for (uint r = r0 + gl_SubgroupID; r < r1; r += gl_NumSubgroups) {
    uint wbase = pc.w_off + eoff + r * pc.cols;
    uint ubase = wbase + pc.rows * pc.cols;  // the up row of a gate|up pair
    float acc = 0.0, accu = 0.0;
    for (uint c = gl_SubgroupInvocationID; c < pc.cols; c += gl_SubgroupSize) {
      float x = act[xi + c];
      if (pc.norm_off >= 0) x = vec[pc.norm_off + int(c)] * (x * inv);
      acc += load_w(wbase + c) * x;
      if (pc.swiglu != 0u) accu += load_w(ubase + c) * x;
    }
    float v = subgroupAdd(acc);
    if (pc.swiglu != 0u) v = silu(v) * subgroupAdd(accu);
    if (!subgroupElect()) continue;
    v *= pc.beta;
    if (pc.bias_off >= 0) v += vec[uint(pc.bias_off) + expert * pc.rows + r];
    if (pc.scale_off >= 0) v *= vec[pc.scale_off + int(r)];
    v *= pc.alpha;
    uint yi = pc.y_off + j * pc.y_slot + r;
    if (pc.to_rec != 0u)
      rec[yi] = v;
    else if (pc.accumulate != 0u)
      act[yi] += v;
    else
      act[yi] = v;
  }
}
