// What the engine outside the backends knows of a mixer kind, given by the kind's own file
// (mixer_attention.cpp, mixer_mamba1.cpp) through MixerOpsTable: its tensors and how to bind them,
// the floats binding widens, its matrices with their module names (adapters, DoRA, counts) and the
// state a layer of it keeps. The loader, the counts, the adapter merge and the memory instrument read
// these and name no kind. Not the math: reference/ref_mixer.h and the backends' units.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/registry.h"
#include "engine/io/config.h"
#include "engine/model/layer_schedule.h"
#include "engine/model/weights.h"

namespace hl {

class WeightBinder;

// One matrix of a mixer: its module path under the layer ("self_attn.q_proj", the adapter's and the
// DoRA view's name), the matrix, and its bias (null when the module has none).
using MixerMatrixVisitor = std::function<void(const char* module, const Mat& m, const std::vector<float>* bias)>;

struct MixerOps {
  MixerKind kind;
  // Binds the mixer's tensors of one layer, named under `prefix` ("model.layers.3."), into lw. Throws
  // LoadError (one line naming the file and the tensor).
  void (*bind)(WeightBinder& b, const JambaConfig& c, const std::string& prefix, LayerWeights& lw);
  // Floats bind() widens for one layer (its norms, biases, conv, A, D...): known from the config
  // alone, so the memory budget is checked before anything is allocated.
  uint64_t (*widened_floats)(const JambaConfig& c);
  // Each bound matrix of the layer's mixer, in a fixed order.
  void (*each_matrix)(const LayerWeights& lw, const MixerMatrixVisitor& f);
  // The layer's widened vectors in floats (parameter counts; 4 bytes each per decode step).
  int64_t (*vector_floats)(const LayerWeights& lw);
  // Elements of the state one layer keeps between tokens besides a KV cache (conv window and SSM
  // state), for the memory instrument (trace-format.md §4).
  int64_t (*state_elements)(const JambaConfig& c);
};
using MixerOpsTable = Registry<MixerOps, struct MixerOpsTag>;

// The ops of `kind`; a kind whose file registered none throws Error naming it.
const MixerOps& mixer_ops(MixerKind kind);

}  // namespace hl
