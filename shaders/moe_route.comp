#version 450
// MoE routing (jamba-spec.md §3.9; CPU twin probes/router_probe.h), per token:
// - softmax router: p = fp32 softmax over all E router logits; the top k by p (exact ties to the lower
//   index);
// - sigmoid router (DeepSeek-V3's, Nemotron-H; route_sigmoid): s = sigmoid(logits); the choice c = s +
//   correction bias; each of `groups` equal expert groups scored by the sum of its two largest c, the
//   experts outside the `topk_groups` best groups given c = 0; the top k by c; the instruments' p =
//   s / Σ s.
// Records get p, the top k (highest first) and the log-sum-exp of the logits; the routing buffer the
// chosen experts in ascending index with their weights and, for prefill, each expert's token list (row
// in, slot s·k + rank out). A chosen expert's weight is its p (softmax) or s (sigmoid), divided by the
// sum over the k chosen when `renorm` (+1e-20 for the sigmoid router, as HF), times `scale` (the routed
// scaling factor and Granite's residual multiplier, folded in here so the down and combine kernels
// add the scaled branch). One workgroup. Dispatch: (1).

layout(local_size_x = 64) in;
layout(std430, binding = 1) readonly buffer Vec { float vec[]; };
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
  uint sel_off, selw_off;   // route: (S, K) ascending expert ids, their weights
  uint lists;               // 1: also build the per-expert lists
  uint cnt_off, in_off, out_off;  // route: counts (E,), lists (E, S) of token rows and output slots
  uint renorm;              // 1: the k weights renormalised to sum 1
  float scale;              // every weight × scale
  uint sigmoid;             // 1: the sigmoid router with groups
  uint groups, topk_groups; // sigmoid router: expert groups (≤ 64), how many are kept
  int bias_off;             // sigmoid router: vec offset of the correction bias (E,), -1: none
} pc;

uint kept_lo = 0u, kept_hi = 0u;  // sigmoid router: the kept groups of the token in hand (bit g)

bool group_kept(uint g) {
  return ((g < 32u ? kept_lo : kept_hi) & (1u << (g & 31u))) != 0u;
}

// The choice value of expert e of the token whose probabilities (or scores) start at pi.
float raw_choice(uint pi, uint e) {
  return routef[pi + e] + (pc.bias_off >= 0 ? vec[pc.bias_off + int(e)] : 0.0);
}
float choice(uint pi, uint e) {
  if (pc.sigmoid == 0u) return routef[pi + e];
  return group_kept(e / (pc.E / pc.groups)) ? raw_choice(pi, e) : 0.0;
}

// Sigmoid router: marks the topk_groups groups of the largest scores (the sum of each group's two
// largest raw choices; exact ties to the lower group).
void keep_groups(uint pi) {
  kept_lo = 0u;
  kept_hi = 0u;
  if (pc.groups <= 1u) {
    kept_lo = 1u;
    return;
  }
  uint per = pc.E / pc.groups;
  for (uint r = 0u; r < pc.topk_groups; ++r) {
    int best = -1;
    float best_score = 0.0;
    for (uint g = 0u; g < pc.groups; ++g) {
      if (group_kept(g)) continue;
      float a = -1.0 / 0.0, b = -1.0 / 0.0;  // the two largest choices of the group
      for (uint q = 0u; q < per; ++q) {
        float c = raw_choice(pi, g * per + q);
        if (c > a) {
          b = a;
          a = c;
        } else if (c > b) {
          b = c;
        }
      }
      float score = per > 1u ? a + b : a;
      if (best < 0 || score > best_score) {
        best = int(g);
        best_score = score;
      }
    }
    if (best < 32) kept_lo |= 1u << uint(best);
    else kept_hi |= 1u << uint(best - 32);
  }
}

void main() {
  uint t = gl_LocalInvocationID.x;
  for (uint s = t; s < pc.S; s += 64u) {
    uint li = pc.lg_off + s * pc.E, pi = pc.prob_tmp + s * pc.E;
    float m = -1.0 / 0.0;
    for (uint e = 0u; e < pc.E; ++e) m = max(m, act[li + e]);
    float sum = 0.0, ssum = 0.0;  // Σ exp(logit − m); the sigmoid router's Σ s
    for (uint e = 0u; e < pc.E; ++e) {
      float p = exp(act[li + e] - m);
      sum += p;
      if (pc.sigmoid != 0u) {
        p = 1.0 / (1.0 + exp(-act[li + e]));
        ssum += p;
      }
      routef[pi + e] = p;
    }
    if (pc.sigmoid == 0u) {
      float inv = 1.0 / sum;
      for (uint e = 0u; e < pc.E; ++e) routef[pi + e] = routef[pi + e] * inv;
    } else {
      keep_groups(pi);
    }
    uint rb = s * pc.rec_stride;
    // Top k by repeated scans (k is small); strict > keeps the lower index on exact ties.
    uint si = pc.sel_off + s * pc.K;
    for (uint r = 0u; r < pc.K; ++r) {
      int best = -1;
      float best_c = 0.0;
      for (uint e = 0u; e < pc.E; ++e) {
        bool taken = false;
        for (uint q = 0u; q < r; ++q) taken = taken || route[si + q] == int(e);
        if (taken) continue;
        float c = choice(pi, e);
        if (best < 0 || c > best_c) {
          best = int(e);
          best_c = c;
        }
      }
      route[si + r] = best;
      if (pc.rec_on != 0u) reci[rb + pc.topk_off + r] = best;
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
    if (pc.sigmoid != 0u) wsum += 1e-20;
    float wm = pc.renorm != 0u ? pc.scale / wsum : pc.scale;
    for (uint r = 0u; r < pc.K; ++r) routef[pc.selw_off + s * pc.K + r] = routef[pi + uint(route[si + r])] * wm;
    if (pc.sigmoid != 0u) {  // the instruments' view: s / Σ s
      float inv = 1.0 / ssum;
      for (uint e = 0u; e < pc.E; ++e) routef[pi + e] = routef[pi + e] * inv;
    }
    if (pc.rec_on != 0u) {
      for (uint e = 0u; e < pc.E; ++e) rec[rb + pc.probs_off + e] = routef[pi + e];
      rec[rb + pc.lse_off] = m + log(sum);
    }
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
