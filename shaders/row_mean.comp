#version 450
// Mean of each of S rows into the records: the Δ mean over the Di channels of a Mamba layer
// (trace-format.md ssm_delta_mean). Fixed-order tree sum. One workgroup per row. Dispatch: (S).

layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Act { float act[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };

layout(push_constant) uniform PC {
  uint n;
  uint in_off, in_stride;  // row s at act[in_off + s·in_stride]
  uint rec_stride, out_off;
} pc;

shared float red[64];

void main() {
  uint s = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
  uint xi = pc.in_off + s * pc.in_stride;
  float acc = 0.0;
  for (uint i = t; i < pc.n; i += 64u) acc += act[xi + i];
  red[t] = acc;
  barrier();
  for (uint k = 32u; k > 0u; k >>= 1) {
    if (t < k) red[t] += red[t + k];
    barrier();
  }
  if (t == 0u) rec[s * pc.rec_stride + pc.out_off] = red[0] / float(pc.n);
}
