// The compute kernels of the Vulkan backend (shaders/*.comp, compiled to SPIR-V by glslc at build
// time and embedded in the binary) and their push constants, mirrored field by field from the
// GLSL blocks (all 32-bit, so the std430 push-constant layout is the declaration order). The
// weights' dtype is not a push constant but specialization constant 0 (one pipeline per dtype).
// Bindings (one descriptor set layout for all): see shaders/common.glsl.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hl::vk {

enum class Kernel : int {
  Embed,
  RmsNorm,
  Matvec,
  MatvecMoeDown,
  Matmul,
  MatmulRows,
  KvAppend,
  Attention,
  Conv,
  ScanStep,
  ScanPrefill,
  MoeRoute,
  Swiglu,
  MoeCombine,
  RowMean,
  Mamba2Scan,
  GatedNorm,
  Relu2,
  Heatmap,
  Rope,
  Count
};

struct Spirv {
  const uint32_t* words;
  size_t count;
  const char* name;
};
Spirv kernel_spirv(Kernel k);

// Binding slots of the universal layout.
enum Binding : int { kWeights = 0, kVec, kAct, kStateA, kStateB, kRec, kRoute, kParams, kBindingCount };

struct EmbedPC {
  uint32_t w_off, H, reg_off, h_off;
  float scale = 1.0f;
};
struct RmsNormPC {
  uint32_t in_off, in_stride, out_off, out_stride, n, w_off;
  float eps;
  uint32_t observe, rec_stride, max_off, flag_off, row_off;
};
struct MatvecPC {
  uint32_t w_off, rows, cols, x_off, x_slot, y_off, y_slot, accumulate;
  int32_t bias_off;
  uint32_t groups_x;
  int32_t sel_off;
  uint32_t expert_stride, to_rec, swiglu;
  int32_t norm_off;
  float eps;
  float alpha = 1.0f;      // y (+)= alpha·(W x + bias)
  float beta = 1.0f;       // x's factor before the bias: y (+)= alpha·(W (beta·x) + bias)
  int32_t scale_off = -1;  // vec offset of per-row factors after the bias, -1: none
};
struct MoeDownPC {
  uint32_t w_off, rows, cols, x_off, x_slot, y_off, K, sel_off, selw_off, expert_stride, groups_x;
  int32_t bias_off;     // the experts' down biases (E, rows), -1: none
  uint32_t accumulate;  // y += (the residual) or y = (a latent sum)
};
// matmul.comp and matmul_rows.comp (which also reads groups_x).
struct MatmulPC {
  uint32_t w_off, rows, cols, x_off, x_stride, y_off, y_stride, M, accumulate;
  int32_t bias_off, gather_off, scatter_off, count_idx;
  uint32_t to_rec, groups_x;
  float alpha = 1.0f;      // Y (+)= alpha·(X Wᵀ + bias)
  float beta = 1.0f;       // X's factor before the bias: Y (+)= alpha·((beta·X) Wᵀ + bias)
  int32_t scale_off = -1;  // vec offset of per-feature factors after the bias, -1: none
};
struct RopePC {
  uint32_t nh, nkv, hd, r, q_off, k_off, stride, table;
};
struct KvAppendPC {
  uint32_t kvw, k_off, v_off, stride;
};
struct AttentionPC {
  uint32_t nh, nkv, hd;
  float scale;
  uint32_t q_off, q_stride, o_off, has_null;
  int32_t null_off;
  uint32_t rec_on, rec_stride, attn_off, attn_count, slot0, full, rows_off, rows_stride;
};
struct ConvPC {
  uint32_t Di, W, S, xz_off, xz_stride, u_off, win_off, cw_off;
  int32_t cb_off;
};
struct ScanPC {
  uint32_t Di, N, S, dt_off, u_off, z_off, z_stride, b_off, c_off, out_off, a_off, d_off, h_off, full, rec_stride,
      delta_off, ret_off, bc_stride;
  int32_t bn_off, cn_off;
  float eps;
};
struct MoeRoutePC {
  uint32_t E, K, S, lg_off, rec_on, rec_stride, probs_off, topk_off, lse_off, prob_tmp, sel_off, selw_off, lists,
      cnt_off, in_off, out_off;
  uint32_t renorm;      // the k weights renormalised to sum 1 (Granite, Nemotron-H's norm_topk_prob)
  float scale;          // every weight × scale (the routed scaling factor × the residual multiplier)
  uint32_t sigmoid;     // DeepSeek-V3's sigmoid router with groups (Nemotron-H)
  uint32_t groups, topk_groups;
  int32_t bias_off;     // its correction bias (E,), -1: none
};
struct SwigluPC {
  uint32_t I, M, gu_off, out_off;
  int32_t count_idx;
};
struct MoeCombinePC {
  uint32_t H, K, ye_off, h_off, selw_off;
  uint32_t accumulate;  // y += (the residual) or y = (a latent sum)
};
struct RowMeanPC {
  uint32_t n, in_off, in_stride, rec_stride, out_off;
};
struct Mamba2ScanPC {
  uint32_t nh, P, N, G, S, xbc_off, xbc_stride, dt_off, dt_stride, y_off, delta_off, dtb_off, a_off, d_off, h_off, full,
      rec_stride, rdelta_off, rret_off;
  float lo, hi;
};
struct GatedNormPC {
  uint32_t Di, group, y_off, z_off, z_stride;
  int32_t w_off;  // -1: no norm (y · silu(z) alone)
  float eps;
  uint32_t before;  // 1: normalise y, then gate
};
struct Relu2PC {
  uint32_t I, M, off;
};
// heatmap.comp (views/vulkan_heatmap_renderer.cpp).
struct HeatmapPC {
  int32_t W, H, r_base, c0, nc;
  float lo, span;
  uint32_t abs_pool;
  int32_t cb_off, ce_off, rb_off, re_off, len_off;
};

static_assert(sizeof(MatmulPC) <= 128 && sizeof(AttentionPC) <= 128 && sizeof(ScanPC) <= 128 &&
                  sizeof(Mamba2ScanPC) <= 128 && sizeof(MoeRoutePC) <= 128 && sizeof(MatvecPC) <= 128,
              "push constants are limited to 128 bytes on many devices");

}  // namespace hl::vk
