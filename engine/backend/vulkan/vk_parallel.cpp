// Falcon-H1's parallel layer on the Vulkan backend (HF FalconH1DecoderLayer, as cpu_parallel.cpp):
// this layer's Mamba-2 and attention units, each made by its own kind's maker, on the same normalised
// rows x; h += ssm_out_multiplier · mamba(ssm_in_multiplier · x)
//          + attention_out_multiplier · attention(attention_in_multiplier · x).
// Each part takes its multipliers in its products (VkMixer::set_multipliers: the input one on x
// before the biases, the output one with the residual add), keeps its own state and fills its own
// record fields and observations (the layer's A_n and M_n slots).
#include "engine/backend/vulkan/vk_module.h"

namespace hl::vk {
namespace {

class VkParallel final : public VkMixer {
 public:
  VkParallel(const VkModuleContext& c, int64_t layer)
      : attn_(find_module(VkMixerTable::entries(), MixerKind::Attention, "vulkan", layer)(c, layer)),
        ssm_(find_module(VkMixerTable::entries(), MixerKind::Mamba2, "vulkan", layer)(c, layer)) {
    const JambaConfig& cfg = c.model.config;
    ssm_->set_multipliers(static_cast<float>(cfg.ssm_in_multiplier), static_cast<float>(cfg.ssm_out_multiplier));
    attn_->set_multipliers(static_cast<float>(cfg.attention_in_multiplier),
                           static_cast<float>(cfg.attention_out_multiplier));
  }

  void start(const RunPlan& plan) override {
    attn_->start(plan);
    ssm_->start(plan);
  }
  void clear(VkCommandBuffer c) override {
    attn_->clear(c);
    ssm_->clear(c);
  }
  // The per-position state is the attention's KV cache (the Mamba-2 state does not grow).
  uint64_t position_bytes() const override { return attn_->position_bytes(); }
  const char* position_state() const override { return attn_->position_state(); }
  void reserve_positions(int64_t cap, int64_t kept, std::vector<DeviceCopy>* copies) override {
    attn_->reserve_positions(cap, kept, copies);
  }

  // Both read x (neither writes it) and add into h: the Mamba-2 first, as the CPU.
  void record(VkRecorder& r, int64_t S, bool records) override {
    ssm_->record(r, S, records);
    attn_->record(r, S, records);
  }

 private:
  std::unique_ptr<VkMixer> attn_, ssm_;
};

std::unique_ptr<VkMixer> make_vk_parallel(const VkModuleContext& c, int64_t layer) {
  return std::make_unique<VkParallel>(c, layer);
}

}  // namespace

HL_REGISTER_MODULE(VkMixerTable, MixerKind::Parallel, make_vk_parallel);

}  // namespace hl::vk
