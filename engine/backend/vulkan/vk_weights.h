// The model's weights on the Vulkan device: matrices in their stored dtype (BF16/F16 stay 16-bit and
// Q8_0/Q4_0/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K stay in ggml's blocks, widened exactly in the shaders; F32
// stays F32, or F16 on request) packed into a few buffers —
// experts as (E, rows, cols) so kernels pick them by index, q|k|v and each gate|up as one matrix;
// small vectors in one float buffer. Not the forward pass. Reference: jamba-spec.md §2.1.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend/vulkan/vk_context.h"
#include "engine/model/weights.h"

namespace hl::vk {

// Device dtypes, as the shaders number them (shaders/common.glsl; the index into kDeviceWeightTypes,
// backend_util.h): F32, F16, BF16 and the ggml block formats the shaders dequantise (ggml's other
// block types are widened to F32 at upload).
constexpr uint32_t kF32 = 0, kF16 = 1, kBF16 = 2;

// A matrix (or a packed block of `experts` equal-shape matrices) in one weight buffer.
struct DMat {
  int chunk = -1;    // index into DeviceWeights::chunks
  uint32_t off = 0;  // element offset of the first matrix in the chunk (a block format: block index · QK)
  uint32_t dtype = kF32;
  int64_t rows = 0, cols = 0;  // one matrix: (rows, cols) row-major, PyTorch (out, in)
  int64_t experts = 1;
  uint32_t stride() const { return static_cast<uint32_t>(rows * cols); }  // elements per matrix
};

// Offsets into the float buffer are -1 where the tensor is absent.
struct DLayer {
  int32_t input_norm = -1, pre_ff_norm = -1;
  DMat qkv, o;  // attention: rows q (nh·hd), k (nkv·hd), v (nkv·hd)
  int32_t sinks = -1;
  int32_t qkv_bias = -1, o_bias = -1;       // attention_bias (Falcon-H1, Granite): q|k|v's (zeros where absent), o's
  DMat in_proj, x_proj, dt_proj, out_proj;  // Mamba (Mamba-2: no x_proj, dt_proj)
  int32_t in_bias = -1, conv_w = -1, conv_b = -1, dt_norm = -1, b_norm = -1, c_norm = -1, dt_bias = -1;
  int32_t A = -1, D = -1, out_bias = -1;  // A: Mamba-1 (Di, N), Mamba-2 (nh,); D: (Di,), (nh,)
  int32_t gate_norm = -1;                 // Mamba-2: the gated RMSNorm's weight (Di,)
  int32_t in_scale = -1;                  // Mamba-2: Falcon-H1's µP factors of in_proj's rows (mamba2_mup_vector)
  DMat router;                            // MoE
  int32_t router_bias = -1;               // a sigmoid router's correction bias (E,) (Nemotron-H)
  DMat latent_in, latent_out;             // Nemotron-H's latent projections (Lat, H), (H, Lat), or rows 0
  int32_t latent_in_bias = -1, latent_out_bias = -1;
  // (E_l, 2I, H): gate rows then up rows (the relu² MLP without gate: up alone, (1, I, H)); (E_l, H, I);
  // E_l = 1 if dense.
  DMat gate_up, down;
  // An MoE layer's shared expert (Granite's shared_mlp), beside the routed ones: (1, 2I_s, H) (up alone
  // without gate: (1, I_s, H)), (1, H, I_s); rows 0 where the layer has none.
  DMat shared_gate_up, shared_down;
  // A dense MLP's biases (mlp_bias: Nemotron-H's relu² MLP, Falcon-H1's SwiGLU): gate_up's rows (gate |
  // up, or up alone) and down's; of an MoE layer's relu² experts (E, I) and (E, H_in) in expert order;
  // -1: none. gate_up_scale: (2I,) Falcon-H1's gate multiplier on the gate rows and 1 on the up rows,
  // or -1. The shared expert's biases, (I_s,), (H,).
  int32_t gate_up_bias = -1, down_bias = -1, gate_up_scale = -1;
  int32_t shared_up_bias = -1, shared_down_bias = -1;
};

class DeviceWeights {
 public:
  // Uploads every weight of `m`. Checks first that they fit the device's free memory and that each
  // packed block fits one buffer binding; throws BackendFailure naming the tensor or the sizes.
  DeviceWeights(const std::shared_ptr<Context>& ctx, const Model& m, bool f32_as_f16);

  std::vector<Buffer> chunks;  // weight buffers
  Buffer vec;                  // float vectors
  DMat embed, lm_head;         // lm_head shares embed's copy when tied
  int32_t final_norm = -1;
  int32_t registers = -1;  // (trained + 1, H): trained register rows, then the mean embedding row
  int64_t trained_registers = 0;
  std::vector<DLayer> layers;
  uint64_t bytes = 0;  // device bytes of all of the above
};

}  // namespace hl::vk
