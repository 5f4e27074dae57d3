// The reference forward of a whole model (jamba-spec.md §3.1, §3.3; trace-format.md §2–§3): registers,
// then one token at a time through embed → layers (norm, mixer, residual, norm, feed-forward,
// residual) → final norm → LM head, leaving a TokenTrace per token with every instrument computed
// from its definition, and calling the observer at the named intermediates (model/intermediates.h).
// Not a backend (no threads, no fast paths, nothing reused between tokens but the state): the oracle.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model/intermediates.h"
#include "engine/model/token_trace.h"
#include "engine/model/weights.h"
#include "engine/reference/ref_attention.h"
#include "engine/reference/ref_mamba.h"
#include "engine/reference/ref_mixer.h"

namespace hl::ref {

class ReferenceModel {
 public:
  explicit ReferenceModel(std::shared_ptr<const Model> model);
  void set_observer(IntermediateObserver f) { observer_ = std::move(f); }
  // Clears the state and feeds the registers (trained rows first, then the mean embedding row).
  void start(const RunOptions& opts);
  // One token after those fed since start(); its record.
  TokenTrace step(int32_t token);
  // start(opts), then step() over ids.
  std::vector<TokenTrace> run(const std::vector<int32_t>& ids, const RunOptions& opts);
  int registers() const { return n_reg_; }

 private:
  // Row x (H,) at run row `row` through every layer; r is null for a register.
  void layers(float* x, int64_t row, TokenTrace* r);
  void residual_column(int64_t column, const float* x, TokenTrace* r);
  void observe(const char* name, int64_t layer, int64_t row, const float* data, int64_t n) const;

  std::shared_ptr<const Model> model_;
  const JambaConfig& cfg_;
  RunOptions opts_;
  int n_reg_ = 0;
  int64_t fed_ = 0;                          // tokens fed since start()
  std::vector<std::unique_ptr<RefMixer>> mixers_;  // per layer, its kind's unit (ref_mixer.h)
  std::vector<std::vector<float>> columns_;  // (L+1) residual columns: (tokens so far, H) each
  IntermediateObserver observer_;
};

// Rank-to-1 distance of X (T, H) (Dong, Cordonnier & Loukas 2021): ‖X − 1x̄ᵀ‖_F / ‖X‖_F with x̄ the
// mean row; 0 when T < 2 or ‖X‖ = 0. Two passes in fp64 straight from the definition.
float rank1_distance(const float* X, int64_t T, int64_t H);

}  // namespace hl::ref
