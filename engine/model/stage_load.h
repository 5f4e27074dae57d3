// Loading one pipeline stage of a checkpoint (issue 21 item 3, engine/backend/pipeline.h): only
// the weights of a contiguous range of layers, the embedding and the LM head only where the stage
// needs them; and the stored bytes per layer that balance the stages. Not the split itself
// (split_stages) nor the stage's forward pass (the CPU backend).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/loader.h"

namespace hl {

// Layers [begin, end) of a model.
struct LayerRange {
  int64_t begin = 0, end = 0;
};

// Bytes of a checkpoint's tensors as stored, by where a stage needs them: per layer (L,), the
// embedding, and the LM head (0 when tied to the embedding). Reads the headers only. A GGUF file
// throws Error (a pipeline of one is not supported yet).
struct CheckpointBytes {
  std::vector<int64_t> layers;
  int64_t embedding = 0, head = 0;
};
CheckpointBytes checkpoint_bytes(const std::string& dir);

// The layer a tensor name belongs to ("<root>.layers.N.…"), or -1 (embedding, norms, head).
int64_t tensor_layer(const std::string& name);

// load_model for a stage: the files are mapped, every tensor's name and shape checked as for the
// whole model, then only the matrices of layers [range.begin, range.end), of the embedding when
// range.begin == 0 (or the head is tied to it and range.end == L) and of the LM head when
// range.end == L are copied into owned memory (each one's mapped pages dropped after its copy) and
// the mappings released: the other layers' weights are never read, and their LayerWeights (and the
// embedding / head a stage does not need) are left empty. With o.weights (quantise on load) the
// stage's matrices are quantised from the mapping as load_model would quantise them in the whole
// model (a tied head with its embedding), the budget counting their quantised bytes. Safetensors
// checkpoints only: a GGUF file throws LoadError; so does a range outside [0, L). With `adapter` (a
// PEFT LoRA/DoRA folder) every module is checked against the whole model's shapes as load_adapter
// does, and those of the stage's layers (the LM head's on the last stage) are merged before
// quantising, as one process merges then quantises (run_args.h loadModelOptions).
std::shared_ptr<Model> load_stage(const std::string& dir, const LoadOptions& o, LayerRange range,
                                  const std::string& adapter = "");

// bind_model (loader.h) for load_stage: the mean embedding row only when range.begin == 0.
std::shared_ptr<Model> bind_model_stage(const Checkpoint& ck, const LoadOptions& o, LayerRange range);

// The layers whose weights `m` holds: [0, L) for a whole model, a stage's otherwise (judged from
// which layers have their norms bound: every layer has at least one).
LayerRange loaded_layers(const Model& m);

}  // namespace hl
