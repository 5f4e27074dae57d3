// Vulkan backend: run state, capacities and the per-token host side (see vk_backend.h). Mirrors
// cpu_backend.cpp's contract: registers fed at start(), S-token blocks through the recorded
// commands, records filled from the one readback per block (rank-to-1 Welford on the host from the
// residual rows, Dong, Cordonnier & Loukas 2021 via probes/rank1.h). A BackendFailure poisons the backend and leaves the
// caller's records as they were, so the caller can rebuild the run on the CPU.
#include "engine/backend/vulkan/vk_backend.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "engine/backend/backend_util.h"
#include "engine/backend/run_plan.h"
#include "engine/core/error.h"
#include "engine/probes/memory.h"

namespace hl::vk {

VulkanBackend::VulkanBackend(std::shared_ptr<const Model> model, const VulkanOptions& opts, StageLink* link,
                             std::vector<LayerRange> ranges)
    : model_(std::move(model)),
      cfg_(model_->config),
      vopts_(opts),
      sched_(model_->schedule),
      link_(link),
      ranges_(std::move(ranges)) {
  mine_ = stage_layers(*model_, link_, &ranges_);
  ctx_ = Context::get(opts.gpu_only, opts.device_slot);
  tiled_ = opts.matmul == VulkanOptions::Matmul::Tiled ||
           (opts.matmul == VulkanOptions::Matmul::Auto && !ctx_->cpu_device());
  try {
    check_vk_modules(*model_);  // before the upload
    const AttentionParams& ap = sched_.params().attn;
    for (int64_t i = 0; i < ap.rotary_dim / 2; ++i)  // as the CPU backend's attention unit
      rope_freq_.push_back(std::pow(ap.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(ap.rotary_dim)));
    dw_ = std::make_unique<DeviceWeights>(ctx_, *model_, opts.f32_as_f16);
    // One unit per layer of the stage for its mixer and its feed-forward; a kind without a unit throws here.
    const VkModuleContext mc{*model_, *dw_, ctx_};
    mixers_.resize(static_cast<size_t>(sched_.size()));
    ffns_.resize(static_cast<size_t>(sched_.size()));
    for (int64_t i = mine_.begin; i < mine_.end; ++i) {
      mixers_[static_cast<size_t>(i)] = make_vk_mixer(mc, i);
      ffns_[static_cast<size_t>(i)] = make_vk_ffn(mc, i);
    }
    VkDevice d = ctx_->device();
    VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pi.queueFamilyIndex = ctx_->queue_family();
    ctx_->check(vkCreateCommandPool(d, &pi, nullptr, &pool_), "creating a command pool");
    VkCommandBuffer cmds[3];
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 3;
    ctx_->check(vkAllocateCommandBuffers(d, &ai, cmds), "allocating command buffers");
    decode_.cmd = cmds[0];
    block_.cmd = cmds[1];
    misc_ = cmds[2];
    VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    ctx_->check(vkCreateFence(d, &fi, nullptr, &fence_), "creating a fence");
    dummy_ = Buffer(ctx_, 256, MemKind::Device, "a placeholder binding");
    if (const char* prof = std::getenv("HL_VULKAN_PROFILE"); prof && std::strcmp(prof, "1") == 0) {
      VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
      qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qi.queryCount = 4096;
      ctx_->check(vkCreateQueryPool(d, &qi, nullptr, &queries_), "creating a query pool");
      kernel_ms_.assign(static_cast<size_t>(Kernel::Count), 0.0);
    }
    start(RunOptions{});
  } catch (...) {
    release();  // the destructor does not run for a constructor that throws; members unwind themselves
    throw;
  }
}

VulkanBackend::~VulkanBackend() {
  release();
}

void VulkanBackend::release() {
  if (!ctx_) return;
  VkDevice d = ctx_->device();
  if (queries_) {
    double total = 0;
    for (double v : kernel_ms_) total += v;
    std::fprintf(stderr, "vulkan profile: %lld steps, %.3f ms of kernels per step\n",
                 static_cast<long long>(profiled_steps_), total / std::max<int64_t>(1, profiled_steps_));
    for (int k = 0; k < static_cast<int>(Kernel::Count); ++k)
      if (kernel_ms_[k] > 0)
        std::fprintf(stderr, "  %-16s %6.1f%%  %.3f ms/step\n", kernel_spirv(static_cast<Kernel>(k)).name,
                     100.0 * kernel_ms_[k] / std::max(total, 1e-12),
                     kernel_ms_[k] / std::max<int64_t>(1, profiled_steps_));
    vkDestroyQueryPool(d, queries_, nullptr);
    queries_ = VK_NULL_HANDLE;
  }
  for (VkDescriptorPool p : dpools_) vkDestroyDescriptorPool(d, p, nullptr);
  dpools_.clear();
  sets_.clear();
  if (pool_) vkDestroyCommandPool(d, pool_, nullptr);
  if (fence_) vkDestroyFence(d, fence_, nullptr);
  pool_ = VK_NULL_HANDLE;
  fence_ = VK_NULL_HANDLE;
}

void VulkanBackend::fail_guard() const {
  if (!failed_.empty()) throw BackendFailure(failed_ + " (the Vulkan backend is disabled; use the CPU backend)");
}

void VulkanBackend::invalidate() {
  VkDevice d = ctx_->device();
  for (VkDescriptorPool p : dpools_) vkDestroyDescriptorPool(d, p, nullptr);
  dpools_.clear();
  sets_.clear();
  ++gen_;
}

void VulkanBackend::run_one_off(const std::function<void(VkCommandBuffer)>& rec, const char* what) {
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  ctx_->check(vkResetCommandBuffer(misc_, 0), what);
  ctx_->check(vkBeginCommandBuffer(misc_, &bi), what);
  rec(misc_);
  ctx_->check(vkEndCommandBuffer(misc_), what);
  ctx_->submit_wait(misc_, fence_, what);
}

void VulkanBackend::plan_records() {
  uint64_t o = 0;
  const RecLayout r = plan_device_record<uint32_t>(cfg_, sched_, opts_, kv_cap_, true, 1, &o);
  if (o * 4 > ctx_->max_range())
    throw BackendFailure("vulkan: one token's record needs " + format_bytes(o * 4) + "; device '" +
                         ctx_->device_name() + "' binds at most " + format_bytes(ctx_->max_range()));
  rl_ = r;
}

int64_t VulkanBackend::block_limit() const {
  const uint64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
  // Floats per token of the largest of the three per-block buffers.
  const uint64_t per = std::max({act_layout(1).total, static_cast<uint64_t>(rl_.stride), 3 * E + 2 * K});
  const int64_t fit = static_cast<int64_t>(ctx_->max_range() / (4 * per));
  return std::max<int64_t>(1, std::min(vopts_.max_block, fit));
}

ActLayout VulkanBackend::act_layout(uint64_t c) const {
  const uint64_t H = cfg_.hidden_size, Di = cfg_.mamba_inner();
  // The widest feed-forward: a layer's own width (Granite's dense layers: its shared MLP's), not only
  // intermediate_size.
  uint64_t I = cfg_.intermediate_size, Lat = 0;  // and the widest latent MoE input (Nemotron-H)
  for (const LayerSpec& l : sched_.layers()) {
    I = std::max<uint64_t>(I, static_cast<uint64_t>(std::max(l.ffn_params.d_ff, l.ffn_params.shared_d_ff)));
    Lat = std::max<uint64_t>(Lat, static_cast<uint64_t>(l.ffn_params.latent));
  }
  const uint64_t E = cfg_.num_experts, K = cfg_.num_experts_per_tok, R = cfg_.mamba_dt_rank, N = cfg_.mamba_d_state;
  const uint64_t qw = cfg_.num_attention_heads * cfg_.head_dim(), kvw = cfg_.num_key_value_heads * cfg_.head_dim();
  const bool A = sched_.num_attention() > 0, M = sched_.num_ssm() > 0, X = sched_.num_moe() > 0;
  // Mamba-2 (heads > 0) widens in_proj's output to z | x|B|C | dt and the conv's to x|B|C.
  const SsmParams& ssm = sched_.params().ssm;
  const uint64_t bc = ssm.heads > 0 ? 2 * ssm.groups * N : 0, dtw = ssm.heads > 0 ? ssm.heads : 0;
  ActLayout a;
  uint64_t o = 0;
  auto take = [&](uint32_t* at, uint64_t n) {
    *at = static_cast<uint32_t>(o);
    o += n;
  };
  take(&a.h, c * H);
  take(&a.x, c * H);
  take(&a.qkv, A ? c * (qw + 2 * kvw) : 0);
  take(&a.o, A ? c * qw : 0);
  take(&a.xz, M ? c * (2 * Di + bc + dtw) : 0);
  take(&a.u, M ? c * (Di + bc) : 0);
  take(&a.p, M ? c * (R + 2 * N) : 0);
  take(&a.dtr, M ? c * R : 0);
  take(&a.bm, M ? c * N : 0);
  take(&a.cm, M ? c * N : 0);
  take(&a.dt, M ? c * Di : 0);
  take(&a.gated, M ? c * Di : 0);
  take(&a.rl, X ? c * E : 0);
  take(&a.g, std::max(c, K) * 2 * I);
  take(&a.uf, std::max(c, K) * I);
  take(&a.ye, X ? c * K * std::max(H, Lat) : 0);
  take(&a.lat, c * Lat);
  take(&a.lato, c * Lat);
  a.total = o;
  return a;
}

void VulkanBackend::ensure_kv(int64_t rows) {
  if (rows <= kv_cap_) return;
  int64_t cap = std::max(rows, 2 * kv_cap_);
  // The units' per-position buffers (an attention layer's K and V rows) each fit one binding.
  const VkMixer* widest = nullptr;
  for (const auto& m : mixers_)
    if (m && m->position_bytes() > 0 && (!widest || m->position_bytes() > widest->position_bytes())) widest = m.get();
  if (widest) {
    const uint64_t per = widest->position_bytes();
    cap = std::min(cap, static_cast<int64_t>(ctx_->max_range() / per));
    if (cap < rows)
      throw BackendFailure("vulkan: a context of " + std::to_string(rows) + " positions needs " +
                           format_bytes(static_cast<uint64_t>(rows) * per) + " per " + widest->position_state() +
                           "; device '" + ctx_->device_name() + "' binds at most " + format_bytes(ctx_->max_range()));
    std::vector<DeviceCopy> copies;  // hold the old buffers until the kept rows are copied
    for (const auto& m : mixers_)
      if (m && m->position_bytes() > 0) m->reserve_positions(cap, kv_len_, &copies);
    if (!copies.empty())
      run_one_off(
          [&](VkCommandBuffer c) {
            for (const DeviceCopy& copy : copies) copy(c);
          },
          "growing the KV cache");
  }
  kv_cap_ = cap;
  plan_records();  // the attention rows of full traces are as wide as the cache
  invalidate();
}

void VulkanBackend::ensure_block(int64_t S) {
  if (S <= act_cap_ && rl_.stride == rec_alloc_stride_ && act_.valid()) return;
  int64_t cap = 1;
  while (cap < std::max(S, act_cap_)) cap *= 2;
  cap = std::max(S, std::min(cap, block_limit()));
  const uint64_t c = cap, E = cfg_.num_experts, K = cfg_.num_experts_per_tok;
  const ActLayout a = act_layout(c);
  uint64_t o = 0;
  auto take = [&](uint32_t* at, uint64_t n) {
    *at = static_cast<uint32_t>(o);
    o += n;
  };
  RouteLayout r;
  o = 0;
  take(&r.prob, c * E);
  take(&r.sel, c * K);
  take(&r.selw, c * K);
  take(&r.cnt, E);
  take(&r.in, E * c);
  take(&r.out, E * c);
  r.total = o;
  const uint64_t range = ctx_->max_range();
  if (a.total * 4 > range || r.total * 4 > range || c * rl_.stride * 4 > range)
    throw BackendFailure("vulkan: a block of " + std::to_string(cap) +
                         " tokens does not fit the device's largest buffer binding (" + format_bytes(range) + ")");
  act_ = Buffer();  // free before allocating the larger ones
  rec_ = Buffer();
  readback_ = Buffer();
  act_ = Buffer(ctx_, a.total * 4, MemKind::Device, "the activations");
  route_ = Buffer(ctx_, r.total * 4, MemKind::Device, "the MoE routing");
  rec_ = Buffer(ctx_, c * rl_.stride * 4, MemKind::Device, "the per-token records");
  rec_direct_ = rec_.mapped() != nullptr;
  if (!rec_direct_) readback_ = Buffer(ctx_, c * rl_.stride * 4, MemKind::Readback, "the records' readback");
  const uint64_t rows_bytes = c * static_cast<uint64_t>(cfg_.hidden_size) * 4;
  hin_ = Buffer();
  hout_ = Buffer();
  if (!first_stage()) hin_ = Buffer(ctx_, rows_bytes, MemKind::Upload, "the stage's input rows");
  if (!last_stage()) hout_ = Buffer(ctx_, rows_bytes, MemKind::Readback, "the stage's output rows");
  // (2 + c) ints: cached positions, S, ids; then c rows of RoPE cos | sin (2r floats each).
  params_ = Buffer(ctx_, (2 + c + c * 2 * rope_freq_.size()) * 4, MemKind::Upload, "the step parameters");
  al_ = a;
  ro_ = r;
  act_cap_ = cap;
  rec_alloc_stride_ = rl_.stride;
  invalidate();
}

void VulkanBackend::start(const RunOptions& opts) {
  fail_guard();
  const int64_t H = cfg_.hidden_size, L = cfg_.num_hidden_layers;
  const RunPlan plan = plan_run(*model_, opts);
  const int64_t trained = plan.trained_registers;
  opts_ = opts;
  n_reg_ = plan.registers;
  position_ = 0;
  kv_len_ = 0;
  for (const auto& m : mixers_)
    if (m) m->start(plan);  // per layer: this run's normalizer and sinks
  rank1_.assign(static_cast<size_t>(L + 1), Rank1Tracker(H));
  ++gen_;  // the options are baked into the recorded commands
  try {
    ensure_kv(n_reg_ + 256);
    plan_records();
    ensure_block(1);
    run_one_off(
        [&](VkCommandBuffer c) {
          for (const auto& m : mixers_)
            if (m) m->clear(c);
        },
        "clearing the Mamba state");
    // Registers: trained rows first, then the mean embedding row (row `trained` of the block); a
    // later stage receives their rows from the stage before.
    stage_rows_in(link_, rows_, n_reg_, H);
    int64_t fed = 0;
    feed_registers(
        n_reg_, trained, [&] { return block_limit(); }, [&](int64_t n) { ensure_block(n); },
        [&](const int32_t* ids, int64_t n) {
          run_block(ids, n, false, fed);
          kv_len_ += n;
          fed += n;
        });
    stage_rows_out(link_, rows_);
  } catch (const BackendFailure& e) {
    failed_ = e.what();
    throw;
  }
}

void VulkanBackend::run_block(const int32_t* ids, int64_t S, bool records, int64_t row0) {
  const size_t H = static_cast<size_t>(cfg_.hidden_size), n = static_cast<size_t>(S) * H;
  if (!first_stage()) std::memcpy(hin_.mapped(), rows_.data() + static_cast<size_t>(row0) * H, n * sizeof(float));
  int32_t* p = static_cast<int32_t*>(params_.mapped());  // (2 + S,): cached positions, S, ids
  p[0] = static_cast<int32_t>(kv_len_);
  p[1] = static_cast<int32_t>(S);
  std::memcpy(p + 2, ids, static_cast<size_t>(S) * 4);
  const size_t r = rope_freq_.size();
  float* rope = reinterpret_cast<float*>(p + 2 + act_cap_);
  for (int64_t s = 0; s < S; ++s)  // the row's position is its KV slot (registers first)
    for (size_t i = 0; i < r; ++i) {
      const double angle = static_cast<double>(kv_len_ + s) * rope_freq_[i];
      rope[static_cast<size_t>(s) * 2 * r + i] = static_cast<float>(std::cos(angle));
      rope[static_cast<size_t>(s) * 2 * r + r + i] = static_cast<float>(std::sin(angle));
    }
  VkCommandBuffer cmd = commands(S, records);
  ctx_->submit_wait(cmd, fence_, records ? "running the model" : "feeding the registers");
  if (!last_stage()) std::memcpy(rows_.data() + static_cast<size_t>(row0) * H, hout_.mapped(), n * sizeof(float));
  const Recorded& slot = cmd == decode_.cmd ? decode_ : block_;
  if (queries_) profile_collect(slot);
  if (observer_) report_observations(slot);
}

void VulkanBackend::report_observations(const Recorded& r) const {
  const float* base = static_cast<const float*>(obs_.mapped());
  // The block's first run row: registers 0.., token t at n_reg + t (model/intermediates.h).
  for (const Observation& o : r.observed)
    observer_(Intermediate{o.name, o.layer, kv_len_, o.rows, o.cols, o.cols, base + o.at});
}

void VulkanBackend::profile_collect(const Recorded& r) {
  const size_t n = r.kernels.size() + 1;
  std::vector<uint64_t> t(n);
  if (vkGetQueryPoolResults(ctx_->device(), queries_, r.query0, static_cast<uint32_t>(n), n * 8, t.data(), 8,
                            VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) != VK_SUCCESS)
    return;
  const double ns = ctx_->props().limits.timestampPeriod;
  for (size_t i = 1; i < n; ++i)
    kernel_ms_[static_cast<size_t>(r.kernels[i - 1])] += static_cast<double>(t[i] - t[i - 1]) * ns * 1e-6;
  ++profiled_steps_;
}

void VulkanBackend::read_records(int64_t S, TokenTrace* recs) {
  const float* base = static_cast<const float*>(rec_direct_ ? rec_.mapped() : readback_.mapped());
  read_device_records(base, S, rl_, *model_, opts_, n_reg_, recs, &rank1_);
}

void VulkanBackend::forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) {
  fail_guard();
  model_->check_files();  // the checkpoint still the one loaded (Model::files)
  if (S <= 0) return;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t first = out->size();
  const int64_t H = cfg_.hidden_size;
  forward_in_blocks(
      tokens, S, out, cfg_, opts_, sched_, n_reg_, position_, failed_,
      [&](int64_t total) {
        ensure_kv(kv_len_ + total);
        stage_rows_in(link_, rows_, total, H);  // after the checks every stage makes
      },
      [&] { return block_limit(); }, [&](int64_t n) { ensure_block(n); },
      [&](const int32_t* ids, int64_t n, TokenTrace* recs) {
        run_block(ids, n, true, ids - tokens);
        read_records(n, recs);
        kv_len_ += n;
      });
  finish_device_stage(link_, rows_, ranges_, sched_, out, first, S, t0);
}

}  // namespace hl::vk

namespace hl {

std::unique_ptr<Backend> make_vulkan_backend(std::shared_ptr<const Model> model, const VulkanOptions& opts) {
  return std::make_unique<vk::VulkanBackend>(std::move(model), opts);
}

std::unique_ptr<Backend> make_vulkan_stage_backend(std::shared_ptr<const Model> model, const VulkanOptions& opts,
                                                   StageLink* link, std::vector<LayerRange> ranges) {
  return std::make_unique<vk::VulkanBackend>(std::move(model), opts, link, std::move(ranges));
}

void set_vulkan_observer(Backend& b, IntermediateObserver f) {
  auto* v = dynamic_cast<vk::VulkanBackend*>(&b);
  if (!v) throw std::invalid_argument("set_vulkan_observer: backend '" + b.name() + "' is not the Vulkan backend");
  v->set_observer(std::move(f));
}

bool vulkan_available(bool gpu_only) {
  return vk::Context::available(gpu_only);
}

void vulkan_simulate_device_loss(int64_t submissions) {
  vk::Context::simulate_loss_everywhere(submissions);
}

}  // namespace hl
