// Binds a checkpoint's tensors to ModelWeights by name with shape checks against the config
// (jamba-spec.md §2.1–2.2: per-expert and fused expert names, tied embeddings, extensions).
#pragma once
#include <memory>
#include <string>

#include "engine/io/checkpoint.h"
#include "engine/model/weights.h"

namespace hl {

struct LoadOptions {
  LoadProgress progress;
  bool scan_values = false;          // reject NaN/Inf in weights (llama.cpp check_tensors)
  uint64_t memory_budget_bytes = 0;  // 0: physical RAM; refuse a model that will not fit
};

// Opens, validates and binds. Throws LoadError (message names file and tensor) or Cancelled.
std::shared_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts = {});
std::shared_ptr<Model> bind_model(const Checkpoint& ckpt, const LoadOptions& opts = {});

}  // namespace hl
