// The CPU reference backend: the Jamba forward of jamba-spec.md §3 in fp32 with the instruments of
// trace-format.md §3 computed next to the data. One code path serves decode (S = 1) and prefill
// (S > 1): every reduction runs in the same order for both, so they agree bit for bit.
#pragma once
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/probes/rank1.h"

namespace hl::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<const Model> model);
  std::string name() const override { return "cpu"; }
  void start(const RunOptions& opts) override;
  void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) override;
  int64_t position() const override { return position_; }
  const Model& model() const override { return *model_; }
  const RunOptions& options() const override { return opts_; }
  int registers() const override { return n_reg_; }

 private:
  struct AttnState {
    std::vector<float> k, v;  // (len, nkv*hd) each, registers first
    int64_t len = 0;
    Normalizer norm = Normalizer::Softmax;
    std::vector<float> null_logit;  // (nh,) sink logits (0 for softmax-1)
  };
  struct MambaState {
    std::vector<float> conv;  // (Di, W): raw inputs u0, newest last
    std::vector<float> ssm;   // (Di, N)
  };

  // Runs S rows of embeddings h (S, H) through the model; recs[s] is null for registers.
  void run_block(float* h, int64_t S, TokenTrace* const* recs);
  void attention(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs);
  void mamba(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs);
  void feed_forward(int64_t layer, const float* x, int64_t S, float* y, TokenTrace* const* recs);
  void observe_residual(int64_t column, const float* h, int64_t S, TokenTrace* const* recs);
  void init_record(TokenTrace& r, int32_t token, int64_t t) const;

  std::shared_ptr<const Model> model_;
  const JambaConfig& cfg_;
  RunOptions opts_;
  int n_reg_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> kind_index_;  // per layer: its index among attention or Mamba layers
  std::vector<int64_t> moe_index_;   // per layer: its index among MoE layers, or -1
  int64_t n_attn_ = 0, n_mamba_ = 0, n_moe_ = 0;
  std::vector<AttnState> attn_;
  std::vector<MambaState> mamba_;
  std::vector<Rank1Tracker> rank1_;  // (L+1) columns
};

}  // namespace hl::cpu
