// The hidden attention of the SSM layers in a sweep (`sweep --hidden-attention`, stats-format.md §3):
// every row M[t, ·] of every SSM layer and head of one run (Ali, Zimerman & Wolf 2024; the definition
// and the Mamba-1 channel mean are those of trace-format.md §5), reduced to the statistics the
// attention rows have: the entropy of the normalised |M| row and its share on the first token.
#pragma once
#include <memory>

#include "engine/backend/pipeline.h"
#include "engine/model/weights.h"
#include "sessions/recording.h"
#include "sessions/sweep_stats.h"

namespace hl {

// Replays `run` (its records' tokens, registers first) through a CPU backend of its own that keeps the
// per-row B, C and Δ of every SSM layer, and adds one value per token, SSM layer and head to the
// ssm_hidden_* instruments of `stats`. `model` and `opts` must be the run's (registers, normaliser,
// adapter merged). Cost: one prefill of the run's tokens, then Σ_t (t + 1)·N multiply-adds per head
// (Mamba-1: per channel) and layer — quadratic in the run's length.
// In a pipeline (`sweep --pipeline`: a link, every stage's layers, `model` this stage's) every stage
// calls it with the same run: each replays the run through its own layers (a CPU stage in step with
// the others) and computes its SSM layers' values, and stage 0 adds every stage's values in layer
// order — the same additions in the same order as one process. The other stages' `stats` get none.
void add_hidden_attention(SweepStats& stats, std::shared_ptr<const Model> model, const RunOptions& opts,
                          const Run& run, StageLink* link = nullptr, std::vector<LayerRange> ranges = {});

}  // namespace hl
