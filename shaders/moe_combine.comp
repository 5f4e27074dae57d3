#version 450
// MoE prefill combination (jamba-spec.md §3.9): y[s] (+)= Σ_j w_{s,j} · ye[s·k + j] over each
// token's k experts in ascending expert index (the order the CPU reference adds them), w the
// routing weights of moe_route.comp (probabilities, renormalised where the family does, × the residual
// multiplier). ye holds each expert's output at the token's slot; y is the residual h (added) or
// Nemotron-H's latent sum (set).
// Dispatch: (ceil(H/64), S).

layout(local_size_x = 64) in;
layout(std430, binding = 2) buffer Act { float act[]; };
layout(std430, binding = 6) readonly buffer RouteF { float routef[]; };

layout(push_constant) uniform PC {
  uint H, K;
  uint ye_off;    // (S·K, H): slot s·K + rank
  uint h_off;     // y (S, H)
  uint selw_off;  // route: (S, K) weights of the ascending experts
  uint accumulate;  // 1: y += …, 0: y = …
} pc;

void main() {
  uint c = gl_GlobalInvocationID.x, s = gl_WorkGroupID.y;
  if (c >= pc.H) return;
  // Slot s·K + j holds the output of token s's j-th expert in ascending index (moe_route.comp).
  float y = 0.0;
  for (uint j = 0u; j < pc.K; ++j)
    y += routef[pc.selw_off + s * pc.K + j] * act[pc.ye_off + (s * pc.K + j) * pc.H + c];
  if (pc.accumulate != 0u)
    act[pc.h_off + s * pc.H + c] += y;
  else
    act[pc.h_off + s * pc.H + c] = y;
}
