#version 450
// Prefill matrix–matrix product on stored-dtype weights, fp32 accumulation: Y (M, rows) = X (M, cols)
// · Wᵀ (+ bias). A workgroup computes a tile of 16 tokens × 64 output features (each thread 4
// features of one token) over 32-wide K panels staged in shared memory. For the MoE prefill the X
// rows can be gathered (route[gather_off + i]), the Y rows scattered (route[scatter_off + i]) and M
// read from route[count_idx] (the tokens routed to one expert). Dispatch: (ceil(rows/64), ceil(M/16)).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };
layout(std430, binding = 6) readonly buffer Route { int route[]; };

layout(push_constant) uniform PC {
  uint w_off, rows, cols;
  uint x_off, x_stride;   // X row i at act[x_off + i·x_stride]
  uint y_off, y_stride;   // Y row i at act[y_off + i·y_stride] (rec with to_rec)
  uint M;
  uint accumulate;
  int bias_off;
  int gather_off, scatter_off, count_idx;  // -1: identity rows / M from the push constant
  uint to_rec;
  uint groups_x;  // matmul_rows.comp's (unused here)
  float alpha;    // Y (+)= alpha·(X Wᵀ + bias): Granite's residual multiplier, 1 / logits_scaling; else 1
  float beta;     // X's factor before the bias: Y (+)= alpha·((beta·X) Wᵀ + bias) (Falcon-H1's input multipliers)
  int scale_off;  // vec offset of per-feature factors (rows,) after the bias (Falcon-H1's µP vector), -1: none
} pc;

WEIGHT_LOADER(load_w, w)

const uint TM = 16u, TN = 64u, TK = 32u;
shared float xs[TM][TK + 1u];  // (tokens, k)
shared float ws[TN][TK + 1u];  // (features, k)

void main() {
  uint t = gl_LocalInvocationID.x;
  uint tx = t % 16u, ty = t / 16u;  // outputs: token i0 + ty, features r0 + tx + 16q
  uint r0 = gl_WorkGroupID.x * TN, i0 = gl_WorkGroupID.y * TM;
  uint M = pc.count_idx >= 0 ? uint(route[pc.count_idx]) : pc.M;
  if (i0 >= M) return;  // uniform over the workgroup
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint k0 = 0u; k0 < pc.cols; k0 += TK) {
    // Stage X (16 × 32: 2 per thread) and W (64 × 32: 8 per thread), consecutive threads along k.
    for (uint l = 0u; l < 2u; ++l) {
      uint idx = t + 256u * l, xi = idx / TK, k = k0 + idx % TK;
      float v = 0.0;
      if (i0 + xi < M && k < pc.cols) {
        uint row = pc.gather_off >= 0 ? uint(route[pc.gather_off + int(i0 + xi)]) : i0 + xi;
        v = act[pc.x_off + row * pc.x_stride + k];
      }
      xs[xi][idx % TK] = v;
    }
    for (uint l = 0u; l < 8u; ++l) {
      uint idx = t + 256u * l, wr = idx / TK, k = k0 + idx % TK;
      ws[wr][idx % TK] = (r0 + wr < pc.rows && k < pc.cols) ? load_w(pc.w_off + (r0 + wr) * pc.cols + k) : 0.0;
    }
    barrier();
    for (uint k = 0u; k < TK; ++k) {
      float x = xs[ty][k];
      for (uint q = 0u; q < 4u; ++q) acc[q] += x * ws[tx + 16u * q][k];
    }
    barrier();
  }
  uint i = i0 + ty;
  if (i >= M) return;
  uint yrow = pc.scatter_off >= 0 ? uint(route[pc.scatter_off + int(i)]) : i;
  for (uint q = 0u; q < 4u; ++q) {
    uint r = r0 + tx + 16u * q;
    if (r >= pc.rows) continue;
    float v = acc[q];
    v *= pc.beta;
    if (pc.bias_off >= 0) v += vec[pc.bias_off + int(r)];
    if (pc.scale_off >= 0) v *= vec[pc.scale_off + int(r)];
    v *= pc.alpha;
    uint yi = pc.y_off + yrow * pc.y_stride + r;
    if (pc.to_rec != 0u)
      rec[yi] = v;
    else if (pc.accumulate != 0u)
      act[yi] += v;
    else
      act[yi] = v;
  }
}
