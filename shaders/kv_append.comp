#version 450
// Appends the S new key and value rows (nkv·hd each) to one attention layer's cache at rows
// [base, base + S), base = params[0] (registers and tokens already cached): the raw k/v of
// jamba-spec.md §3.4, no rotation. Not the attention itself. Dispatch: (ceil(kvw/64), S).

layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Act { float act[]; };
layout(std430, binding = 3) buffer KCache { float kc[]; };  // (capacity, kvw)
layout(std430, binding = 4) buffer VCache { float vc[]; };  // (capacity, kvw)
layout(std430, binding = 7) readonly buffer Params { int params[]; };

layout(push_constant) uniform PC {
  uint kvw;
  uint k_off, v_off;  // act offsets of the new rows k, v (S rows of kvw)
  uint stride;        // their row stride (the packed q|k|v rows)
} pc;

void main() {
  uint c = gl_GlobalInvocationID.x, s = gl_WorkGroupID.y;
  if (c >= pc.kvw) return;
  uint row = uint(params[0]) + s;
  kc[row * pc.kvw + c] = act[pc.k_off + s * pc.stride + c];
  vc[row * pc.kvw + c] = act[pc.v_off + s * pc.stride + c];
}
