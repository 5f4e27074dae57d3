#version 450
// Heatmap rendering for the views (issue 5 item 7, views/vulkan_heatmap_renderer.h): one thread per
// output pixel pools the cells of its span exactly as CpuHeatmapRenderer does — per column the rows
// in order (a row covers its first len cells), then the columns in order; max, or signed max-|v| —
// and writes the colour map entry (ARGB32) or 0 (transparent: no cell, or only NaN). Not the model.
// Dispatch: (ceil(W/16), ceil(H/16)).

layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 2) readonly buffer Cells { float cells[]; };  // (nr, nc) from (r_base, c0)
layout(std430, binding = 5) writeonly buffer Image { uint img[]; };    // (H, W)
layout(std430, binding = 6) readonly buffer Ints { int ints[]; };      // lut (256) | spans | lens

layout(push_constant) uniform PC {
  int W, H;
  int r_base, c0, nc;    // cells[(r - r_base)·nc + (c - c0)]
  float lo, span;
  uint abs_pool;
  int cb_off, ce_off, rb_off, re_off, len_off;  // ints: column spans (W,), row spans (H,), row lengths (nr,)
} pc;

// v replaces m when larger (in magnitude for abs pooling) or when m is NaN: NaN cells lose against
// any number, so a pixel is transparent only when all its cells are NaN.
float pool(float v, float m) {
  if (pc.abs_pool != 0u) return (abs(v) > abs(m) || isnan(m)) ? v : m;
  return (v > m || isnan(m)) ? v : m;
}

void main() {
  int px = int(gl_GlobalInvocationID.x), py = int(gl_GlobalInvocationID.y);
  if (px >= pc.W || py >= pc.H) return;
  uint colour = 0u;
  int r0 = ints[pc.rb_off + py], r1 = ints[pc.re_off + py];
  int covered = pc.c0;  // the columns some row of the span reaches
  for (int r = r0; r < r1; ++r) covered = max(covered, ints[pc.len_off + r - pc.r_base]);
  int b = ints[pc.cb_off + px], e = min(ints[pc.ce_off + px], covered);
  if (r0 < r1 && b < e) {
    float m = 0.0;
    for (int c = b; c < e; ++c) {
      float f = 0.0;
      bool have = false;
      for (int r = r0; r < r1; ++r) {
        if (ints[pc.len_off + r - pc.r_base] <= c) continue;
        float v = cells[(r - pc.r_base) * pc.nc + (c - pc.c0)];
        f = have ? pool(v, f) : v;
        have = true;
      }
      m = c == b ? f : pool(f, m);
    }
    if (!isnan(m)) {
      float t = clamp((m - pc.lo) / pc.span, 0.0, 1.0);
      precise float idx = t * 255.0 + 0.5;  // no fused multiply-add: the CPU rounds twice
      colour = uint(ints[int(idx)]);
    }
  }
  img[py * pc.W + px] = colour;
}
