// Binds a checkpoint's tensors to ModelWeights by name with shape checks against the config
// (jamba-spec.md §2.1–2.2: per-expert and fused expert names, tied embeddings, extensions).
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "engine/io/checkpoint.h"
#include "engine/model/weights.h"

namespace hl {

struct LoadOptions {
  // Called through Checkpoint::open (one unit per file), then once per layer while binding.
  LoadProgress progress;
  bool scan_values = false;          // reject NaN/Inf in weights (llama.cpp check_tensors)
  uint64_t memory_budget_bytes = 0;  // 0: physical RAM; refuse a model that will not fit
  // --weights: quantise the large matrices on load into this ggml block format (model/quantize.h);
  // nullopt keeps them as stored. The budget then counts the quantised sizes, and load_model reads
  // the files through a mapping it releases once every matrix is in owned memory.
  std::optional<DType> weights;
  bool quantize_head = false;  // with `weights`: the LM head too (`--weights q8_0+head`)
  // `--weights ...+fp32-activations`: the CPU's decode products keep x in fp32 (keep_fp32_activations)
  // instead of rounding it to 8 bits per block as llama.cpp does.
  bool fp32_activations = false;
};

// Opens, validates and binds. Throws LoadError (message names file and tensor) or Cancelled.
// Before binding, the resident size (tensor bytes + widened float vectors; with `weights`, the
// planned quantised sizes, checked after binding the mapped files and before quantising) is
// compared with the budget. Every tensor of the checkpoint must be bound: a missing, misshaped, non-float matrix or
// unexpected tensor is a LoadError. The Model keeps the file mappings alive (Model::keep_alive).
std::shared_ptr<Model> load_model(const std::string& dir, const LoadOptions& opts = {});
std::shared_ptr<Model> bind_model(const Checkpoint& ckpt, const LoadOptions& opts = {});

}  // namespace hl
