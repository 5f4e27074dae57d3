// Falcon-H1's parallel layer (mixer kind `parallel`): the attention mixer's and the Mamba-2 mixer's
// weights side by side under their own names (`self_attn.*`, `mamba.*`), registered for the loader,
// counts and adapters (mixer_ops.h) as the sum of the two kinds' own ops. Not its math:
// reference/ref_parallel.cpp and the CPU backend's parallel unit.
#include "engine/model/mixer_ops.h"

namespace hl {
namespace {

const MixerOps& attn() { return mixer_ops(MixerKind::Attention); }
const MixerOps& ssm() { return mixer_ops(MixerKind::Mamba2); }

void bind(WeightBinder& b, const JambaConfig& c, const std::string& prefix, LayerWeights& lw) {
  attn().bind(b, c, prefix, lw);
  ssm().bind(b, c, prefix, lw);
}
uint64_t widened_floats(const JambaConfig& c) { return attn().widened_floats(c) + ssm().widened_floats(c); }
void each_matrix(const LayerWeights& lw, const MixerMatrixVisitor& f) {
  attn().each_matrix(lw, f);
  ssm().each_matrix(lw, f);
}
int64_t vector_floats(const LayerWeights& lw) { return attn().vector_floats(lw) + ssm().vector_floats(lw); }
int64_t state_elements(const JambaConfig& c) { return attn().state_elements(c) + ssm().state_elements(c); }

const MixerOpsTable::Add kRegistered{{MixerKind::Parallel, bind, widened_floats, each_matrix, vector_floats, state_elements}};

}  // namespace
}  // namespace hl
