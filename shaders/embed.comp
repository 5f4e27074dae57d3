#version 450
// Embedding lookup for a block of S positions (jamba-spec.md §3.1: no positions): row ids[s] of
// embed_tokens widened to fp32, or for a register (id < 0) row -id-1 of the register block (trained
// register rows, then the mean embedding row: trace-format.md §2), × scale (Granite's
// embedding_multiplier, registers too, as the CPU backend; 1 elsewhere).
// Not the LM head. Dispatch: (ceil(H/64), S).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Weights { uint w[]; };
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 7) readonly buffer Params { int params[]; };  // [2 + s]: id of position s

layout(push_constant) uniform PC {
  uint w_off;    // element offset of embed (V, H)
  uint H;
  uint reg_off;  // vec offset of the register rows (n, H)
  uint h_off;    // act offset of h (S, H)
  float scale;
} pc;

WEIGHT_LOADER(load_w, w)

void main() {
  uint c = gl_GlobalInvocationID.x, s = gl_WorkGroupID.y;
  if (c >= pc.H) return;
  int id = params[2 + s];
  float v;
  if (id >= 0)
    v = load_w(pc.w_off + uint(id) * pc.H + c);
  else
    v = vec[pc.reg_off + uint(-id - 1) * pc.H + c];
  act[pc.h_off + s * pc.H + c] = v * pc.scale;
}
