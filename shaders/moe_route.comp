#version 450
// MoE routing (jamba-spec.md §3.9; CPU twin probes/router_probe.h): per token the fp32 softmax over
// all E router logits, the top k (exact ties to the lower index), log-sum-exp; records get probs,
// top-k and lse; the routing buffer the chosen experts in ascending index with their weights and, for
// prefill, each expert's token list (row in, slot s·k + rank out). A chosen expert's weight is its
// probability, or (renorm, Granite) that over the sum of the k chosen, times `scale` (Granite's
// residual_multiplier, folded in here so the down and combine kernels add the scaled branch).
// One workgroup. Dispatch: (1).

layout(local_size_x = 64) in;
layout(std430, binding = 2) readonly buffer Act { float act[]; };
layout(std430, binding = 5) buffer Rec { float rec[]; };
layout(std430, binding = 5) buffer RecI { int reci[]; };
layout(std430, binding = 6) buffer Route { int route[]; };
layout(std430, binding = 6) buffer RouteF { float routef[]; };

layout(push_constant) uniform PC {
  uint E, K, S;
  uint lg_off;              // act: router logits (S, E)
  uint rec_on, rec_stride;
  uint probs_off, topk_off, lse_off;  // record offsets of this layer's slices
  uint prob_tmp;            // route: probabilities (S, E) (float)
  uint sel_off, selw_off;   // route: (S, K) ascending expert ids, their probabilities
  uint lists;               // 1: also build the per-expert lists
  uint cnt_off, in_off, out_off;  // route: counts (E,), lists (E, S) of token rows and output slots
  uint renorm;              // 1: the k weights renormalised to sum 1
  float scale;              // every weight × scale
} pc;

void main() {
  uint t = gl_LocalInvocationID.x;
  for (uint s = t; s < pc.S; s += 64u) {
    uint li = pc.lg_off + s * pc.E, pi = pc.prob_tmp + s * pc.E;
    float m = -1.0 / 0.0;
    for (uint e = 0u; e < pc.E; ++e) m = max(m, act[li + e]);
    float sum = 0.0;
    for (uint e = 0u; e < pc.E; ++e) {
      float p = exp(act[li + e] - m);
      routef[pi + e] = p;
      sum += p;
    }
    float inv = 1.0 / sum;
    for (uint e = 0u; e < pc.E; ++e) routef[pi + e] = routef[pi + e] * inv;
    uint rb = s * pc.rec_stride;
    // Top k by repeated scans (k is small); strict > keeps the lower index on exact ties.
    uint si = pc.sel_off + s * pc.K;
    for (uint r = 0u; r < pc.K; ++r) {
      int best = -1;
      for (uint e = 0u; e < pc.E; ++e) {
        bool taken = false;
        for (uint q = 0u; q < r; ++q) taken = taken || route[si + q] == int(e);
        if (taken) continue;
        if (best < 0 || routef[pi + e] > routef[pi + uint(best)]) best = int(e);
      }
      route[si + r] = best;
      if (pc.rec_on != 0u) reci[rb + pc.topk_off + r] = best;
    }
    if (pc.rec_on != 0u) {
      for (uint e = 0u; e < pc.E; ++e) rec[rb + pc.probs_off + e] = routef[pi + e];
      rec[rb + pc.lse_off] = m + log(sum);
    }
    // Ascending expert order for the combination (insertion sort of k entries).
    for (uint r = 1u; r < pc.K; ++r) {
      int v = route[si + r];
      uint q = r;
      while (q > 0u && route[si + q - 1u] > v) {
        route[si + q] = route[si + q - 1u];
        --q;
      }
      route[si + q] = v;
    }
    float wsum = 0.0;
    for (uint r = 0u; r < pc.K; ++r) wsum += routef[pi + uint(route[si + r])];
    float wm = pc.renorm != 0u ? pc.scale / wsum : pc.scale;
    for (uint r = 0u; r < pc.K; ++r) routef[pc.selw_off + s * pc.K + r] = routef[pi + uint(route[si + r])] * wm;
  }
  if (pc.lists == 0u) return;
  memoryBarrierBuffer();
  barrier();
  for (uint e = t; e < pc.E; e += 64u) {
    int cnt = 0;
    for (uint s = 0u; s < pc.S; ++s)
      for (uint r = 0u; r < pc.K; ++r)
        if (route[pc.sel_off + s * pc.K + r] == int(e)) {
          route[pc.in_off + e * pc.S + uint(cnt)] = int(s);
          route[pc.out_off + e * pc.S + uint(cnt)] = int(s * pc.K + r);
          ++cnt;
        }
    route[pc.cnt_off + e] = cnt;
  }
}
