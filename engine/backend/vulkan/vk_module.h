// The Vulkan backend's layer modules (issue 14 item 2): one unit per layer for its mixer (VkMixer:
// vk_attention.cpp, vk_mamba1.cpp, vk_mamba2.cpp, vk_parallel.cpp) and one for its feed-forward (VkFfn: vk_ffn.cpp),
// made through the tables of vk_modules.cpp (the lookup: layer_modules.h). A unit records its layer's commands through
// VkRecorder, the narrow view of the backend's recording state, and owns its own state buffers. Not the model loop
// (vk_record.cpp) nor the run's buffers (vk_backend.cpp).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend/device_record.h"
#include "engine/backend/layer_modules.h"
#include "engine/backend/run_plan.h"
#include "engine/backend/vulkan/vk_context.h"
#include "engine/backend/vulkan/vk_weights.h"
#include "engine/model/layer_schedule.h"

namespace hl::vk {

// Float offsets inside one token's record, shared with CUDA (device_record.h); the residual rows
// (L+1, H) are recorded and the host computes the rank-to-1 distances.
using RecLayout = DeviceRecordLayout<uint32_t>;

// Float offsets of the activations of a block of `cap` tokens (one buffer).
struct ActLayout {
  // g: gate|up (·, 2I), uf: (·, I). Mamba-1: xz u0|z (·, 2Di), u (·, Di), dt (·, Di); Mamba-2: xz
  // z | x|B|C | dt (·, Di + conv_dim + nh), u x|B|C after the conv (·, conv_dim), dt Δ (·, nh).
  // lat, lato: Nemotron-H's latent MoE input and weighted sum (·, Lat).
  uint32_t h, x, qkv, o, xz, u, p, dtr, bm, cm, dt, gated, rl, g, uf, ye, lat, lato;
  uint64_t total = 0;
};

// Int offsets in the routing buffer.
struct RouteLayout {
  uint32_t prob, sel, selw, cnt, in, out;
  uint64_t total = 0;
};

using Binds = std::array<VkBuffer, kBindingCount>;

inline uint32_t u32(int64_t v) {
  return static_cast<uint32_t>(v);
}
inline uint32_t ceil_div(int64_t a, int64_t b) {
  return static_cast<uint32_t>((a + b - 1) / b);
}
constexpr uint32_t kMaxGroups = 65535;
constexpr int64_t kMatvecRows = 8;  // rows per workgroup of matvec.comp / matvec_moe_down.comp

// Workgroups of a matrix–vector kernel over `rows`, split (x, y) below the 65535 limit per axis.
inline void matvec_groups(int64_t rows, uint32_t* gx, uint32_t* gy) {
  const int64_t groups = (rows + kMatvecRows - 1) / kMatvecRows;
  *gx = static_cast<uint32_t>(std::min<int64_t>(groups, kMaxGroups));
  *gy = static_cast<uint32_t>((groups + *gx - 1) / *gx);
}

class VulkanBackend;

// A product's factors (1 and none elsewhere): y [+]= alpha·((beta·x) Wᵀ [+ bias]) ⊙ vec[row_scale + ·].
struct ProductFactors {
  float alpha = 1.0f;      // on the output: Granite's residual multiplier, the logits' factor, an out multiplier
  float beta = 1.0f;       // on x, before the bias: Falcon-H1's attention / SSM input multipliers
  int32_t row_scale = -1;  // vec offset of per-output-row factors after the bias (Falcon-H1's µP vector)
};

// What a unit may use while recording: the kernels' launch helpers (one descriptor set per distinct
// Binds, cached until the backend reallocates) and the run's layouts, options and configuration.
// Made by VulkanBackend::record_block for one recording; defined in vk_record.cpp.
class VkRecorder {
 public:
  explicit VkRecorder(VulkanBackend& b) : b_(b) {}

  // y (S, rows) [+]= the product of x (S, cols) and W with `f`: the matrix–vector kernel at S = 1, else the matmul.
  void linear(const DMat& W, uint32_t x_off, uint32_t x_stride, int64_t S, uint32_t y_off, uint32_t y_stride,
              bool accumulate, int32_t bias, bool to_rec = false, ProductFactors f = {});
  // h += residual_multiplier · out · (y Wᵀ [+ bias]): a residual branch's output product (Granite's
  // residual_multiplier; `out`: Falcon-H1's attention / SSM / MLP-down output multiplier).
  void residual(const DMat& W, uint32_t x_off, uint32_t x_stride, int64_t S, int32_t bias, float out = 1.0f);
  void matmul(MatmulPC pc, const DMat& W, int64_t S);  // pc may describe a part of W (one expert)
  void rmsnorm(uint32_t in_off, uint32_t in_stride, uint32_t out_off, uint32_t out_stride, uint32_t n, int32_t w_off,
               int64_t S);
  // The bindings: weight chunk (or none), the vectors, activations, two state buffers, records, routing, params.
  Binds binds(int weight_chunk = -1, VkBuffer a = VK_NULL_HANDLE, VkBuffer b = VK_NULL_HANDLE);
  template <class PC>
  void dispatch(Kernel k, const Binds& b, const PC& pc, uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) {
    raw(k, 0, b, &pc, sizeof(PC), gx, gy, gz);
  }
  // A kernel that reads weights of device dtype `dtype` (its pipeline variant).
  template <class PC>
  void dispatch_w(Kernel k, uint32_t dtype, const Binds& b, const PC& pc, uint32_t gx, uint32_t gy = 1,
                  uint32_t gz = 1) {
    raw(k, dtype, b, &pc, sizeof(PC), gx, gy, gz);
  }
  void barrier();  // every later kernel sees every earlier kernel's writes
  // Where an observed tensor lives: the activations, the MoE routing (router_probs) or the records (logits).
  enum class From { Act, Route, Records };
  // With an observer set (VulkanBackend::set_observer): copies S rows of `cols` floats, row s at float
  // `off` + s·`stride` of `from`, into the observation buffer as intermediate `name` of `layer`
  // (model/intermediates.h; −1: model-level). Records nothing without an observer.
  void observe(const char* name, int64_t layer, uint32_t off, uint32_t stride, uint32_t cols, int64_t S,
               From from = From::Act);
  // The end of an SSM unit (Mamba-1 and Mamba-2): observes Δ (S, delta_cols, in act().dt) and the
  // gated y (S, Di, in act().gated), writes Δ's row mean as SSM layer m's ssm_delta_mean when
  // `instruments`, then h += out · (y Woutᵀ [+ bias]) (residual()).
  void ssm_output(const DLayer& d, int64_t layer, int64_t m, uint32_t delta_cols, uint32_t Di, int64_t S,
                  bool instruments, float out = 1.0f);

  const JambaConfig& config() const;
  const RunOptions& options() const;
  const ActLayout& act() const;
  const RouteLayout& route() const;
  const RecLayout& rec() const;
  // RoPE: the rotary pairs r per head (0: none) and where row 0's cos | sin sit in the step parameters.
  uint32_t rope_pairs() const;
  uint32_t rope_table() const;

 private:
  void raw(Kernel k, uint32_t dtype, const Binds& b, const void* pc, uint32_t bytes, uint32_t gx, uint32_t gy,
           uint32_t gz);
  VulkanBackend& b_;
};

// What a unit is made from: the model, its schedule, the device weights and the device.
struct VkModuleContext {
  const Model& model;
  const DeviceWeights& weights;
  std::shared_ptr<Context> ctx;
};

// Commands that move kept state into newly allocated buffers; the backend runs them in one
// submission and then drops them (with the old buffers they hold).
using DeviceCopy = std::function<void(VkCommandBuffer)>;

// The mixer of one layer. Its state (KV rows, SSM window and state) is its own.
class VkMixer {
 public:
  virtual ~VkMixer() = default;
  // Run start: the per-run choices of this layer (the normalizer and sinks of an attention layer).
  virtual void start(const RunPlan&) {}
  // Run start: records the commands that zero this layer's recurrent state.
  virtual void clear(VkCommandBuffer) {}
  // Bytes per cached position in this unit's largest per-position buffer (0: none), and the name
  // of that buffer for the error when a context does not fit one binding.
  virtual uint64_t position_bytes() const { return 0; }
  virtual const char* position_state() const { return ""; }
  // Makes room for `cap` positions keeping the first `kept`: allocates new buffers and appends the
  // copies of the kept rows to `copies`. The backend invalidates its recordings afterwards.
  virtual void reserve_positions(int64_t /*cap*/, int64_t /*kept*/, std::vector<DeviceCopy>* /*copies*/) {}
  // Records S positions of this layer: reads x (the normed residual), adds its output into h.
  virtual void record(VkRecorder& r, int64_t S, bool records) = 0;
  // Falcon-H1's parallel layer (vk_parallel.cpp): this unit reads in · x and adds out · its output.
  void set_multipliers(float in, float out) {
    in_ = in;
    out_ = out;
  }

 protected:
  float in_ = 1.0f, out_ = 1.0f;
};

// The feed-forward of one layer: reads x (the normed residual), adds its output into h.
class VkFfn {
 public:
  virtual ~VkFfn() = default;
  virtual void record(VkRecorder& r, int64_t S, bool records) = 0;
};

using MakeVkMixer = std::unique_ptr<VkMixer> (*)(const VkModuleContext&, int64_t layer);
using MakeVkFfn = std::unique_ptr<VkFfn> (*)(const VkModuleContext&, int64_t layer);
// The Vulkan module tables: each unit's file adds its line with HL_REGISTER_MODULE.
using VkMixerTable = ModuleTable<MixerKind, MakeVkMixer, struct VkMixerTag>;
using VkFfnTable = ModuleTable<FfnKind, MakeVkFfn, struct VkFfnTag>;

// The units of layer `layer` through the tables (vk_modules.cpp); a kind without a unit throws
// the one-line BackendFailure of find_module. make_vk_mixer returns null for MixerKind::None,
// make_vk_ffn for FfnKind::None.
std::unique_ptr<VkMixer> make_vk_mixer(const VkModuleContext& c, int64_t layer);
// Throws that same BackendFailure for the first layer of `m` whose kind has no unit here: called
// before the weights go to the device, so a model this backend cannot run costs no upload.
void check_vk_modules(const Model& m);
std::unique_ptr<VkFfn> make_vk_ffn(const VkModuleContext& c, int64_t layer);

}  // namespace hl::vk
