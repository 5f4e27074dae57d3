#version 450
// RoPE (Su et al. 2021; HF's rotate_half) in place on the q and k heads of S new rows before the keys
// are cached: in each head, dims i and i + r (i < r, 2r the rotary dims; the rest unrotated) turn by
// the angle of the row's position, its KV slot (registers first). The cos and sin come from the
// host (params[table + s·2r + i] and [… + r + i], float bits): angles in double rounded to float, as
// the CPU backend computes them. Dispatch: (ceil((nh + nkv)·r / 64), S).

layout(local_size_x = 64) in;
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 7) readonly buffer Params { int params[]; };

layout(push_constant) uniform PC {
  uint nh, nkv, hd;
  uint r;             // rotary pairs per head: rotary dims / 2
  uint q_off, k_off;  // act offsets of row 0's q (nh·hd) and k (nkv·hd)
  uint stride;        // floats between rows (the packed q|k|v rows)
  uint table;         // params index of row 0's cos | sin (2r ints)
} pc;

void main() {
  uint idx = gl_GlobalInvocationID.x, s = gl_WorkGroupID.y;
  if (idx >= (pc.nh + pc.nkv) * pc.r) return;
  uint head = idx / pc.r, i = idx % pc.r;
  uint a = s * pc.stride + (head < pc.nh ? pc.q_off + head * pc.hd : pc.k_off + (head - pc.nh) * pc.hd);
  uint t = pc.table + s * 2u * pc.r;
  float cs = intBitsToFloat(params[t + i]), sn = intBitsToFloat(params[t + pc.r + i]);
  float x1 = act[a + i], x2 = act[a + i + pc.r];
  act[a + i] = x1 * cs - x2 * sn;
  act[a + i + pc.r] = x2 * cs + x1 * sn;
}
