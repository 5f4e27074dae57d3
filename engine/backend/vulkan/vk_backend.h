// The Vulkan backend (vulkan_backend.h): the run's device buffers, command buffers recorded once per
// shape and re-submitted per token, and the one readback per step (logits, every instrument, the
// residual rows for the host's rank-to-1 Welford update of probes/rank1.h); nothing is allocated per
// token. Recording: vk_record.cpp (the model loop over the layer units of vk_module.h); running:
// vk_backend.cpp. Contract: backend.h, as cpu_backend.h.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/device_record.h"
#include "engine/backend/vulkan/vk_context.h"
#include "engine/backend/vulkan/vk_module.h"
#include "engine/backend/vulkan/vk_weights.h"
#include "engine/backend/vulkan/vulkan_backend.h"
#include "engine/model/intermediates.h"
#include "engine/probes/rank1.h"

namespace hl::vk {

class VulkanBackend final : public Backend {
 public:
  // With a link: one stage of a pipeline (make_vulkan_stage_backend), layers ranges[link->rank()].
  VulkanBackend(std::shared_ptr<const Model> model, const VulkanOptions& opts, StageLink* link = nullptr,
                std::vector<LayerRange> ranges = {});
  ~VulkanBackend() override;
  std::string name() const override { return "vulkan"; }
  void start(const RunOptions& opts) override;
  void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) override;
  int64_t position() const override { return position_; }
  const Model& model() const override { return *model_; }
  const RunOptions& options() const override { return opts_; }
  int registers() const override { return n_reg_; }
  // Reports the named intermediates (model/intermediates.h) the kernels materialise, after each block,
  // in forward order; mixer_out and ffn_out are not among them (the kernels add into h). Setting or
  // clearing it re-records the commands; an empty function: nothing observed, decode cost unchanged.
  void set_observer(IntermediateObserver f) { observer_ = std::move(f); }

 private:
  friend class VkRecorder;  // records through the buffers, descriptor sets and command buffer below
  // One observed tensor of a recording: S rows of `cols` floats at float `at` of the observation buffer.
  struct Observation {
    const char* name;
    int64_t layer, rows, cols;
    uint64_t at;
  };
  struct Recorded {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    uint64_t gen = 0;  // 0: nothing recorded
    int64_t S = 0;
    bool records = false;
    bool observing = false;             // recorded with the observation copies
    std::vector<Observation> observed;  // in recording order
    uint32_t query0 = 0;                // HL_VULKAN_PROFILE: first timestamp query of this slot
    std::vector<Kernel> kernels;        // the kernel after each timestamp
  };

  // Capacity (vk_backend.cpp). Any reallocation makes descriptor sets and recordings stale.
  void plan_records();
  int64_t block_limit() const;   // most tokens one submission can hold now
  ActLayout act_layout(uint64_t cap) const;  // the activations of a block of `cap` tokens
  void ensure_kv(int64_t rows);  // KV caches hold at least `rows` positions
  void ensure_block(int64_t S);  // activations, routing and records hold S tokens
  void invalidate();
  void release();  // frees the Vulkan objects that are not Buffers
  void run_one_off(const std::function<void(VkCommandBuffer)>& rec, const char* what);
  void fail_guard() const;
  // Runs S positions (token ids, or register rows as -row-1) and leaves their records mapped. A stage
  // after the first takes its input rows from rows_ at row `row0`, a stage before the last leaves
  // its output rows there.
  void run_block(const int32_t* ids, int64_t S, bool records, int64_t row0 = 0);
  bool first_stage() const { return !link_ || link_->rank() == 0; }
  bool last_stage() const { return !link_ || link_->rank() == link_->size() - 1; }
  void read_records(int64_t S, TokenTrace* recs);
  void report_observations(const Recorded& r) const;  // the observer on each, rows from kv_len_

  // Recording (vk_record.cpp).
  VkCommandBuffer commands(int64_t S, bool records);
  void record_block(VkCommandBuffer cmd, int64_t S, bool records);
  // The S rows of the residual stream between the stages (pipeline): in from hin_ (not the first
  // stage), out to hout_ (not the last).
  void record_rows_in(int64_t S);
  void record_rows_out(int64_t S);
  // The records' one device→host transfer (a copy to readback_ unless rec_ is host-visible).
  void record_readback(int64_t S);
  // RMSNorm of h into x that also observes residual point `column` into the records.
  void record_norm_observe(VkRecorder& r, int32_t w_off, int64_t S, int64_t column, bool records);
  VkDescriptorSet descriptor_set(const Binds& b);

  std::shared_ptr<const Model> model_;
  const JambaConfig& cfg_;
  VulkanOptions vopts_;
  std::shared_ptr<Context> ctx_;
  std::unique_ptr<DeviceWeights> dw_;
  RunOptions opts_;
  int n_reg_ = 0;
  int64_t position_ = 0;
  int64_t kv_len_ = 0;  // cached positions: registers + tokens
  // RoPE (the attention layers' rotary dims, one set for the schedule): θ_i = base^(−2i/rot), i < r.
  // Each block's rows get their cos | sin in the step parameters after the ids (rope.comp).
  std::vector<double> rope_freq_;
  std::string failed_;  // non-empty: a BackendFailure happened; every call rethrows it

  const LayerSchedule& sched_;  // model_->schedule: per layer its kinds and its index among each kind
  // Pipeline (pipeline.h): the link to the other stages (null: the whole model), every stage's
  // layers, this stage's, and the host rows of the call in flight (registers or tokens, (n, H)).
  StageLink* link_ = nullptr;
  std::vector<LayerRange> ranges_;
  LayerRange mine_;
  std::vector<float> rows_;
  // Per layer: its mixer's unit, and its feed-forward's (null where the layer has none). Each unit
  // owns its state (KV rows, SSM window and state); made through vk_modules.cpp's tables.
  std::vector<std::unique_ptr<VkMixer>> mixers_;
  std::vector<std::unique_ptr<VkFfn>> ffns_;
  std::vector<Rank1Tracker> rank1_;

  // Device buffers of the run.
  Buffer dummy_;  // bound where a kernel uses no buffer
  Buffer act_, route_, rec_, readback_, params_;
  Buffer hin_, hout_;  // a stage's residual rows in (Upload) and out (Readback), (act_cap_, H)
  int64_t kv_cap_ = 0, act_cap_ = 0;
  uint32_t rec_alloc_stride_ = 0;
  bool rec_direct_ = false;  // the record buffer is host-visible: no copy
  RecLayout rl_;
  ActLayout al_;
  RouteLayout ro_;
  bool tiled_ = true;  // prefill products: matmul.comp (else matmul_rows.comp)
  // Observation (set_observer): host-visible copies of the observed rows; obs_need_ floats the
  // recording in progress asked for (above obs_'s size: re-recorded after growing it).
  IntermediateObserver observer_;
  Buffer obs_;
  uint64_t obs_need_ = 0;

  // Vulkan objects of this backend.
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  Recorded decode_, block_;
  VkCommandBuffer misc_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;  // being recorded
  uint64_t gen_ = 1;
  std::vector<VkDescriptorPool> dpools_;
  // HL_VULKAN_PROFILE=1: a timestamp after every kernel; per-kernel totals printed at destruction.
  VkQueryPool queries_ = VK_NULL_HANDLE;
  Recorded* recording_ = nullptr;
  std::vector<double> kernel_ms_;
  int64_t profiled_steps_ = 0;
  void profile_collect(const Recorded& r);
  std::map<Binds, VkDescriptorSet> sets_;
};

}  // namespace hl::vk
