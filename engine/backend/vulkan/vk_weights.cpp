// Weight upload (see vk_weights.h). Plan first (dtype and place of every block, total bytes), check
// the plan against the device (free memory, largest binding), then allocate and copy: straight
// into mapped memory on devices that share host memory, else through a staging buffer.
// A block whose members differ in dtype is widened to F32 (exact), never narrowed; so is a matrix in a
// ggml block type that no shader reads.
#include "engine/backend/vulkan/vk_weights.h"

#include "engine/backend/backend_util.h"
#include "engine/model/mixer_mamba2.h"
#include "engine/model/stage_load.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

namespace hl::vk {
namespace {

constexpr VkDeviceSize kAlign = 256;
constexpr VkDeviceSize kChunk = VkDeviceSize{1} << 30;  // weight buffers of at most 1 GiB (or the binding limit)

static_assert(kDeviceWeightTypes[kF32] == DType::F32 && kDeviceWeightTypes[kF16] == DType::F16 &&
              kDeviceWeightTypes[kBF16] == DType::BF16);

// The device dtype a matrix of host dtype t is uploaded as (kF32 for a type no shader reads), and the
// host dtype of a device one.
uint32_t device_dtype(DType t) {
  const int c = device_weight_code(t);
  return c < 0 ? kF32 : static_cast<uint32_t>(c);
}
DType host_dtype(uint32_t d) {
  return kDeviceWeightTypes[d];
}

// Device bytes of n elements of device dtype d (n a whole number of blocks).
VkDeviceSize device_bytes(uint32_t d, int64_t n) {
  return static_cast<VkDeviceSize>(dtype_row_bytes(host_dtype(d), n));
}

struct Block {
  std::vector<const Mat*> mats;  // equal column counts, packed in order
  DMat* dst;
  int64_t experts = 1;  // mats form this many equal-shape groups
  VkDeviceSize bytes = 0;
  VkDeviceSize at = 0;  // byte offset in its chunk
};

struct VecItem {
  const float* data;
  size_t n;
  int32_t* dst;
};

// Copies host bytes into device buffers: memcpy when mapped, else batched through a staging buffer.
class Uploader {
 public:
  explicit Uploader(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  ~Uploader() {
    VkDevice d = ctx_->device();
    if (fence_) vkDestroyFence(d, fence_, nullptr);
    if (pool_) vkDestroyCommandPool(d, pool_, nullptr);
  }
  Uploader(const Uploader&) = delete;
  Uploader& operator=(const Uploader&) = delete;

  void write(Buffer& dst, VkDeviceSize off, const void* src, size_t n) {
    if (dst.mapped()) {
      std::memcpy(static_cast<uint8_t*>(dst.mapped()) + off, src, n);
      return;
    }
    if (!staging_.valid()) start_staging();
    const uint8_t* p = static_cast<const uint8_t*>(src);
    while (n > 0) {
      if (used_ == staging_.size()) flush();
      const size_t k = std::min<size_t>(n, staging_.size() - used_);
      std::memcpy(static_cast<uint8_t*>(staging_.mapped()) + used_, p, k);
      copies_.push_back({dst.handle(), VkBufferCopy{used_, off, k}});
      used_ += k;
      off += k;
      p += k;
      n -= k;
    }
  }

  void flush() {
    if (copies_.empty()) return;
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    ctx_->check(vkResetCommandBuffer(cmd_, 0), "uploading the weights");
    ctx_->check(vkBeginCommandBuffer(cmd_, &bi), "uploading the weights");
    for (const auto& [dst, region] : copies_) vkCmdCopyBuffer(cmd_, staging_.handle(), dst, 1, &region);
    ctx_->check(vkEndCommandBuffer(cmd_), "uploading the weights");
    ctx_->submit_wait(cmd_, fence_, "uploading the weights");
    copies_.clear();
    used_ = 0;
  }

 private:
  void start_staging() {
    staging_ = Buffer(ctx_, VkDeviceSize{64} << 20, MemKind::Upload, "the weight upload staging buffer");
    VkDevice d = ctx_->device();
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = ctx_->queue_family();
    ctx_->check(vkCreateCommandPool(d, &pi, nullptr, &pool_), "creating a command pool");
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    ctx_->check(vkAllocateCommandBuffers(d, &ai, &cmd_), "allocating a command buffer");
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    ctx_->check(vkCreateFence(d, &fi, nullptr, &fence_), "creating a fence");
  }

  std::shared_ptr<Context> ctx_;
  Buffer staging_;
  VkDeviceSize used_ = 0;
  std::vector<std::pair<VkBuffer, VkBufferCopy>> copies_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
};

}  // namespace

DeviceWeights::DeviceWeights(const std::shared_ptr<Context>& ctx, const Model& m, bool f32_as_f16) {
  const ModelWeights& w = m.w;
  const int64_t L = m.config.num_hidden_layers, H = m.config.hidden_size;
  layers.resize(static_cast<size_t>(L));
  std::vector<Block> blocks;
  std::vector<VecItem> vecs;
  auto add_block = [&](std::vector<const Mat*> mats, DMat* dst, int64_t experts = 1) {
    // None of a pipeline stage's absent embedding or head (stage_load.h); a loaded matrix is never empty.
    if (std::all_of(mats.begin(), mats.end(), [](const Mat* x) { return x->empty(); })) return;
    blocks.push_back(Block{std::move(mats), dst, experts});
  };
  auto add_vec = [&](const std::vector<float>& v, int32_t* dst) {
    if (!v.empty()) vecs.push_back(VecItem{v.data(), v.size(), dst});
  };
  // Vectors made here (concatenated biases, factors) live until the upload; a deque keeps them in place.
  std::deque<std::vector<float>> made;
  // The concatenation of `parts` (n_i each; an empty part: n_i zeros), or nothing when all are empty.
  auto add_concat = [&](std::initializer_list<std::pair<const std::vector<float>*, int64_t>> parts, int32_t* dst) {
    if (std::all_of(parts.begin(), parts.end(), [](const auto& p) { return p.first->empty(); })) return;
    std::vector<float>& v = made.emplace_back();
    for (const auto& [part, n] : parts)
      if (part->empty())
        v.insert(v.end(), static_cast<size_t>(n), 0.0f);
      else
        v.insert(v.end(), part->begin(), part->end());
    add_vec(v, dst);
  };
  const std::vector<float> mup = mamba2_mup_vector(m.config);  // empty: all 1

  add_block({&w.embed}, &embed);
  const bool tied = w.lm_head.data == w.embed.data;
  if (!tied) add_block({&w.lm_head}, &lm_head);
  add_vec(w.final_norm, &final_norm);
  // Register rows: the trained ones, then the mean embedding row (test-time registers).
  std::vector<float> regs(w.register_rows);
  regs.insert(regs.end(), w.mean_embedding.begin(), w.mean_embedding.end());
  trained_registers = static_cast<int64_t>(w.register_rows.size()) / H;
  add_vec(regs, &registers);
  const LayerRange held = loaded_layers(m);  // every layer, or a pipeline stage's
  for (int64_t i = held.begin; i < held.end; ++i) {
    const LayerWeights& lw = w.layers[i];
    DLayer& d = layers[i];
    add_vec(lw.input_norm, &d.input_norm);
    add_vec(lw.pre_ff_norm, &d.pre_ff_norm);
    // The weights of the kinds this upload knows; a unit of another kind uploads its own.
    // Falcon-H1's parallel layer has both the attention's and the Mamba-2's.
    const MixerKind kind = m.schedule[i].mixer;
    if (kind == MixerKind::Attention || kind == MixerKind::Parallel) {
      const AttentionWeights& a = lw.attn;
      add_block({&a.q, &a.k, &a.v}, &d.qkv);
      add_block({&a.o}, &d.o);
      add_vec(a.sinks, &d.sinks);
      add_concat({{&a.q_bias, a.q.rows}, {&a.k_bias, a.k.rows}, {&a.v_bias, a.v.rows}}, &d.qkv_bias);
      add_vec(a.o_bias, &d.o_bias);
    }
    if (kind == MixerKind::Mamba1) {
      const MambaWeights& mw = lw.mamba;
      add_block({&mw.in_proj}, &d.in_proj);
      add_block({&mw.x_proj}, &d.x_proj);
      add_block({&mw.dt_proj}, &d.dt_proj);
      add_block({&mw.out_proj}, &d.out_proj);
      add_vec(mw.in_bias, &d.in_bias);
      add_vec(mw.conv_w, &d.conv_w);
      add_vec(mw.conv_b, &d.conv_b);
      add_vec(mw.dt_norm, &d.dt_norm);
      add_vec(mw.b_norm, &d.b_norm);
      add_vec(mw.c_norm, &d.c_norm);
      add_vec(mw.dt_bias, &d.dt_bias);
      add_vec(mw.A, &d.A);
      add_vec(mw.D, &d.D);
      add_vec(mw.out_bias, &d.out_bias);
    } else if (kind == MixerKind::Mamba2 || kind == MixerKind::Parallel) {
      const Mamba2Weights& mw = lw.mamba2;
      add_block({&mw.in_proj}, &d.in_proj);
      add_block({&mw.out_proj}, &d.out_proj);
      add_vec(mw.in_bias, &d.in_bias);
      add_vec(mw.conv_w, &d.conv_w);
      add_vec(mw.conv_b, &d.conv_b);
      add_vec(mw.dt_bias, &d.dt_bias);
      add_vec(mw.A, &d.A);
      add_vec(mw.D, &d.D);
      add_vec(mw.norm_w, &d.gate_norm);
      add_vec(mw.out_bias, &d.out_bias);
      add_vec(mup, &d.in_scale);
    }
    if (m.schedule[i].ffn == FfnKind::None) continue;  // a mixer-only layer: no feed-forward weights
    std::vector<const Mat*> gu, dn;  // per expert: gate, up | down
    const bool moe = m.schedule[i].is_moe();
    if (moe) add_block({&lw.moe.router}, &d.router);
    std::vector<const MlpWeights*> mlps;  // pointers into the model: the Mats must stay where they are
    if (moe)
      for (const MlpWeights& e : lw.moe.experts) mlps.push_back(&e);
    else
      mlps.push_back(&lw.mlp);
    for (const MlpWeights* e : mlps) {
      if (m.schedule[i].ffn_params.gated) gu.push_back(&e->gate);  // else the relu² MLP: up alone
      gu.push_back(&e->up);
      dn.push_back(&e->down);
    }
    const int64_t E = static_cast<int64_t>(dn.size());
    add_block(gu, &d.gate_up, E);
    add_block(dn, &d.down, E);
    if (moe && !lw.moe.shared.down.empty()) {  // gate|up as the experts' (up alone without gate)
      std::vector<const Mat*> sg;
      if (m.schedule[i].ffn_params.gated) sg.push_back(&lw.moe.shared.gate);
      sg.push_back(&lw.moe.shared.up);
      add_block(sg, &d.shared_gate_up);
      add_block({&lw.moe.shared.down}, &d.shared_down);
      add_vec(lw.moe.shared.up_bias, &d.shared_up_bias);
      add_vec(lw.moe.shared.down_bias, &d.shared_down_bias);
    }
    if (moe) {
      add_vec(lw.moe.router_bias, &d.router_bias);
      if (!lw.moe.latent_in.empty()) {
        add_block({&lw.moe.latent_in}, &d.latent_in);
        add_block({&lw.moe.latent_out}, &d.latent_out);
        add_vec(lw.moe.latent_in_bias, &d.latent_in_bias);
        add_vec(lw.moe.latent_out_bias, &d.latent_out_bias);
      }
    }
    if (moe && !m.schedule[i].ffn_params.gated) {  // relu² experts' biases (check_vk_modules), concatenated
      std::vector<float>& ub = made.emplace_back();
      std::vector<float>& db = made.emplace_back();
      for (const MlpWeights* e : mlps) {
        ub.insert(ub.end(), e->up_bias.begin(), e->up_bias.end());
        db.insert(db.end(), e->down_bias.begin(), e->down_bias.end());
      }
      add_vec(ub, &d.gate_up_bias);
      add_vec(db, &d.down_bias);
    }
    if (!moe) {  // a dense MLP's biases and Falcon-H1's gate multiplier
      const FfnParams& fp = m.schedule[i].ffn_params;
      const int64_t I = lw.mlp.up.rows;
      if (fp.gated)
        add_concat({{&lw.mlp.gate_bias, I}, {&lw.mlp.up_bias, I}}, &d.gate_up_bias);
      else
        add_vec(lw.mlp.up_bias, &d.gate_up_bias);
      add_vec(lw.mlp.down_bias, &d.down_bias);
      if (fp.gated && fp.gate_multiplier != 1.0) {
        std::vector<float>& v = made.emplace_back(static_cast<size_t>(2 * I), 1.0f);
        std::fill(v.begin(), v.begin() + I, static_cast<float>(fp.gate_multiplier));
        add_vec(v, &d.gate_up_scale);
      }
    }
  }

  // Plan: dtype, size and place of every block.
  const VkDeviceSize range = ctx->max_range() / kAlign * kAlign;
  std::vector<VkDeviceSize> chunk_bytes;
  for (Block& b : blocks) {
    const Mat& first = *b.mats[0];
    bool same = true;
    int64_t rows = 0;
    for (const Mat* x : b.mats) {
      same = same && x->dtype == first.dtype;
      rows += x->rows;
    }
    uint32_t dt = same ? device_dtype(first.dtype) : kF32;
    if (dt == kF32 && f32_as_f16 && same && first.dtype == DType::F32) dt = kF16;
    b.dst->dtype = dt;
    b.dst->rows = rows / b.experts;
    b.dst->cols = first.cols;
    b.dst->experts = b.experts;
    // A block format starts on a whole block of its chunk, so that element offsets count blocks.
    const DType ht = host_dtype(dt);
    const VkDeviceSize bb = static_cast<VkDeviceSize>(dtype_block_bytes(ht)), qk = static_cast<VkDeviceSize>(dtype_block(ht));
    b.bytes = (device_bytes(dt, rows * first.cols) + kAlign - 1) / kAlign * kAlign;
    if (b.bytes > range)
      throw BackendFailure("vulkan: tensor '" + first.name + "'" +
                           (b.mats.size() > 1 ? " (packed with its siblings)" : "") + " needs " +
                           format_bytes(b.bytes) + " in one buffer; device '" + ctx->device_name() +
                           "' binds at most " + format_bytes(range));
    // A new buffer when this one would pass min(range, 1 GiB); a larger block gets one to itself.
    const auto start = [&](VkDeviceSize used) { return (used + bb - 1) / bb * bb; };
    if (chunk_bytes.empty() ||
        (chunk_bytes.back() > 0 && start(chunk_bytes.back()) + b.bytes > std::min(range, kChunk)))
      chunk_bytes.push_back(0);
    b.dst->chunk = static_cast<int>(chunk_bytes.size() - 1);
    b.at = start(chunk_bytes.back());
    // The shaders index elements with 32-bit integers.
    const VkDeviceSize last = b.at / bb * qk + static_cast<VkDeviceSize>(rows * first.cols);
    if (last > VkDeviceSize{0xffffffffu})
      throw BackendFailure("vulkan: tensor '" + first.name + "' ends at element " + std::to_string(last) +
                           " of its weight buffer; the kernels index at most 4294967295");
    b.dst->off = static_cast<uint32_t>(b.at / bb * qk);
    // Whole 256-byte units: a block starting off a word boundary must not end in a partial word
    // (the shaders see floor(size / 4) words).
    chunk_bytes.back() = (b.at + b.bytes + kAlign - 1) / kAlign * kAlign;
  }
  if (tied) lm_head = embed;
  size_t nvec = 0;
  for (VecItem& v : vecs) {
    *v.dst = static_cast<int32_t>(nvec);
    nvec += v.n;
  }
  const VkDeviceSize vec_bytes = std::max<VkDeviceSize>(16, nvec * 4);
  if (vec_bytes > range)
    throw BackendFailure("vulkan: the model's small vectors need " + format_bytes(vec_bytes) +
                         " in one buffer; device '" + ctx->device_name() + "' binds at most " + format_bytes(range));
  bytes = vec_bytes;
  for (VkDeviceSize c : chunk_bytes) bytes += c;
  if (bytes > ctx->device_free())
    throw BackendFailure("vulkan: not enough device memory: the weights need " + format_bytes(bytes) + ", device '" +
                         ctx->device_name() + "' has " + format_bytes(ctx->device_free()) + " free of " +
                         format_bytes(ctx->device_heap()));

  // Allocate and copy.
  for (size_t c = 0; c < chunk_bytes.size(); ++c)
    chunks.emplace_back(ctx, chunk_bytes[c], MemKind::Device, "weights (buffer " + std::to_string(c) + ")");
  vec = Buffer(ctx, vec_bytes, MemKind::Device, "norms, biases and Mamba vectors");
  Uploader up(ctx);
  std::vector<uint8_t> tmp, plain_all;  // plain_all: a rows16 matrix in ggml's layout, to be widened
  constexpr int64_t kPiece = int64_t{1} << 20;  // elements converted at a time
  for (const Block& b : blocks) {
    const uint32_t dt = b.dst->dtype;
    VkDeviceSize at = b.at;
    for (const Mat* x : b.mats) {
      const int64_t n = x->rows * x->cols;
      if (host_dtype(dt) == x->dtype && x->rows16) {  // ggml's layout on the device: rows out of their groups
        std::vector<uint8_t> plain;
        const int64_t rb = x->row_bytes(), step = std::max<int64_t>(1, kPiece / x->cols);
        for (int64_t r0 = 0; r0 < x->rows; r0 += step) {
          const int64_t k = std::min(step, x->rows - r0);
          up.write(chunks[b.dst->chunk], at + static_cast<VkDeviceSize>(r0 * rb), plain_rows(*x, r0, k, plain),
                   static_cast<size_t>(k * rb));
        }
      } else if (host_dtype(dt) == x->dtype) {
        up.write(chunks[b.dst->chunk], at, x->data, static_cast<size_t>(device_bytes(dt, n)));
      } else {  // widened to F32, or F32 narrowed to F16 on request
        const VkDeviceSize esize = dt == kF32 ? 4 : 2;
        const uint8_t* src = plain_rows(*x, 0, x->rows, plain_all);
        std::vector<float> wide;
        for (int64_t e0 = 0; e0 < n; e0 += kPiece) {
          const int64_t k = std::min(kPiece, n - e0);
          wide.resize(static_cast<size_t>(k));
          to_float(x->dtype, src + dtype_row_bytes(x->dtype, e0), wide.data(),
                   wide.size());
          tmp.resize(static_cast<size_t>(k * esize));
          from_float(host_dtype(dt), wide.data(), tmp.data(), wide.size());
          up.write(chunks[b.dst->chunk], at + e0 * esize, tmp.data(), tmp.size());
        }
      }
      at += device_bytes(dt, n);
    }
  }
  for (const VecItem& v : vecs) up.write(vec, static_cast<VkDeviceSize>(*v.dst) * 4, v.data, v.n * 4);
  up.flush();
}

}  // namespace hl::vk
