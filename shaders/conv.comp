#version 450
// Mamba's causal depthwise conv over S new tokens with the cached window (jamba-spec.md §3.5
// step 3, §3.6): per channel d the window holds the last W raw inputs u0 (newest last); each token
// shifts it, appends u0, and u = silu(conv_b[d] + Σ_k conv_w[d,k] · window[k]) (w[W-1] hits the
// current token). The window stays in the state buffer, so decode and prefill continue each other.
// Mamba-1 runs it over its Di channels, Mamba-2 (vk_mamba2.cpp) over the conv_dim channels of x|B|C
// (Di here is then conv_dim). One thread per channel. Dispatch: (ceil(Di/64)).

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 3) buffer State { float st[]; };

layout(push_constant) uniform PC {
  uint Di, W, S;
  uint xz_off, xz_stride;  // u0 of token s, channel d: act[xz_off + s·xz_stride + d]
  uint u_off;              // u (S, Di)
  uint win_off;            // state offset of the window (Di, W)
  uint cw_off;             // vec offset of conv_w (Di, W)
  int cb_off;              // vec offset of conv_b (Di,), -1: no bias
} pc;

float silu_f(float v) { return v / (1.0 + exp(-v)); }

void main() {
  uint d = gl_GlobalInvocationID.x;
  if (d >= pc.Di) return;
  uint wi = pc.win_off + d * pc.W, ci = pc.cw_off + d * pc.W;
  for (uint s = 0u; s < pc.S; ++s) {
    for (uint k = 0u; k + 1u < pc.W; ++k) st[wi + k] = st[wi + k + 1u];
    st[wi + pc.W - 1u] = act[pc.xz_off + s * pc.xz_stride + d];
    float c = pc.cb_off >= 0 ? vec[pc.cb_off + int(d)] : 0.0;
    for (uint k = 0u; k < pc.W; ++k) c += vec[ci + k] * st[wi + k];
    act[pc.u_off + s * pc.Di + d] = silu_f(c);
  }
}
