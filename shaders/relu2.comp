#version 450
// The activation of Nemotron-H's MLP without gate (HF NemotronHMLP, relu2): a = relu(u)², in place
// over M rows of I (NaN gives 0, as the CPU's u > 0 ? u : 0). Dispatch: (ceil(I/64), M).

layout(local_size_x = 64) in;
layout(std430, binding = 2) buffer Act { float act[]; };

layout(push_constant) uniform PC {
  uint I, M;
  uint off;  // (M, I)
} pc;

void main() {
  uint c = gl_GlobalInvocationID.x, i = gl_WorkGroupID.y;
  if (c >= pc.I || i >= pc.M) return;
  uint k = pc.off + i * pc.I + c;
  float u = act[k];
  float r = u > 0.0 ? u : 0.0;
  act[k] = r * r;
}
