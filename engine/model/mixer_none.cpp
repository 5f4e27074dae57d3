// A layer without a mixer (Nemotron-H's MLP layers, pattern letter '-'): no tensors, no widened
// floats, no matrices, no state. Registered so that the loader, the counts, the adapter merge and the
// memory instrument take it like any kind (mixer_ops.h). The backends and the reference make no unit
// for it: their loops skip the mixer and its norm (see mixer_present).
#include "engine/model/mixer_ops.h"

namespace hl {
namespace {

void bind(WeightBinder&, const JambaConfig&, const std::string&, LayerWeights&) {}
uint64_t widened_floats(const JambaConfig&) { return 0; }
void each_matrix(const LayerWeights&, const MixerMatrixVisitor&) {}
int64_t vector_floats(const LayerWeights&) { return 0; }
int64_t state_elements(const JambaConfig&) { return 0; }

const MixerOpsTable::Add kRegistered{{MixerKind::None, bind, widened_floats, each_matrix, vector_floats, state_elements}};

}  // namespace
}  // namespace hl
