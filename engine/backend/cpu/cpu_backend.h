// The CPU reference backend: the Jamba forward of jamba-spec.md §3 in fp32 with the instruments of
// trace-format.md §3 computed next to the data. The model loop (embed → layers → final norm → head,
// registers, residual instruments) is here and names no layer kind; each layer's mixer and
// feed-forward are units of cpu_module.h. One code path serves decode (S = 1) and prefill (S > 1) up
// to the matrix products (vector matvec vs BLAS panels, equal within fp32 rounding), so they agree to
// ~1e-6. Decode allocates nothing per token: every buffer is owned here or by a unit and reused.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/pipeline.h"
#include "engine/backend/cpu/cpu_module.h"
#include "engine/model/intermediates.h"
#include "engine/probes/rank1.h"

namespace hl::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::shared_ptr<const Model> model);
  // One stage of a pipeline (pipeline.h): `model` holds layers ranges[link->rank()] (LoadOptions::stage);
  // stage 0 embeds, the others receive the residual stream from the stage before, and the last
  // applies the final norm and the head. Each forward() ends with every stage holding the merged
  // records (gather_stage_records). Throws Error when the model's layers are not that range.
  CpuBackend(std::shared_ptr<const Model> model, StageLink* link, std::vector<LayerRange> ranges);
  std::string name() const override { return "cpu"; }
  void start(const RunOptions& opts) override;
  void forward(const int32_t* tokens, int64_t S, std::vector<TokenTrace>* out) override;
  int64_t position() const override { return position_; }
  const Model& model() const override { return *model_; }
  const RunOptions& options() const override { return run_.opts; }
  int registers() const override { return run_.n_reg; }
  // Called with every named intermediate (model/intermediates.h) of later blocks; empty: none (the
  // unset observer costs one test per name and block).
  void set_observer(IntermediateObserver f) { run_.observer = std::move(f); }

 private:
  // Buffers of one forward call, grown to the largest S seen and then reused (never shrunk).
  struct Scratch {
    std::vector<float> h, x, y;      // (S, H) residual stream, normed input, mixer/FF output
    std::vector<TokenTrace*> recs;   // (S,)
    std::vector<float*> logit_rows;  // (S,) the records' logits
  };

  // Runs S rows of embeddings h (S, H) through the model; recs[s] is null for registers.
  void run_block(float* h, int64_t S, TokenTrace* const* recs);
  bool first_stage() const { return !link_ || link_->rank() == 0; }
  bool last_stage() const { return !link_ || link_->rank() == link_->size() - 1; }
  // The end of a forward: the stages' records merged (a pipeline), step_seconds, the position.
  void finish_stage(std::chrono::steady_clock::time_point t0, int64_t S, TokenTrace* const* recs);
  void observe_residual(int64_t column, const float* h, int64_t S, TokenTrace* const* recs);

  std::shared_ptr<const Model> model_;
  const JambaConfig& cfg_;
  CpuRun run_;  // what the units share: options, registers, observer, scratch
  int64_t position_ = 0;
  std::vector<std::unique_ptr<CpuMixer>> mixers_;  // (L,) one per layer
  std::vector<std::unique_ptr<CpuFfn>> ffns_;      // (L,) null where the layer has no feed-forward
  std::vector<Rank1Tracker> rank1_;                // (L+1) columns
  Scratch sc_;
  StageLink* link_ = nullptr;      // null: the whole model in this process
  std::vector<LayerRange> ranges_; // (stages,) every stage's layers; {[0, L)} without a pipeline
  LayerRange mine_;                // this stage's
};

}  // namespace hl::cpu
