#version 450
// SwiGLU activation of the prefill feed-forward (jamba-spec.md §3.8): a = silu(g) ⊙ u for the first
// M rows, reading the packed gate|up product rows (M, 2I) and writing (M, I) (M from
// route[count_idx] for one expert's tokens, else the push constant). Decode fuses this into
// matvec.comp. Dispatch: (ceil(I/64), M_max).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 6) readonly buffer Route { int route[]; };

layout(push_constant) uniform PC {
  uint I, M;
  uint gu_off;   // (M, 2I): gate | up per row
  uint out_off;  // (M, I)
  int count_idx;
} pc;

void main() {
  uint c = gl_GlobalInvocationID.x, i = gl_WorkGroupID.y;
  uint M = pc.count_idx >= 0 ? uint(route[pc.count_idx]) : pc.M;
  if (c >= pc.I || i >= M) return;
  uint g = pc.gu_off + i * 2u * pc.I + c;
  act[pc.out_off + i * pc.I + c] = silu(act[g]) * act[g + pc.I];
}
