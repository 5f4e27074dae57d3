// The attention mixer's weights (jamba-spec.md §2.1): q, k, v, o projections without biases and the
// optional learned sink logits (trace-format.md §1), registered for the loader, counts and adapters
// (mixer_ops.h). Not its math: reference/ref_attention.cpp and the backends' attention units.
#include "engine/model/mixer_ops.h"
#include "engine/model/weight_binder.h"

namespace hl {
namespace {

void bind(WeightBinder& b, const JambaConfig& c, const std::string& p, LayerWeights& lw) {
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim();
  AttentionWeights& w = lw.attn;
  w.q = b.mat(p + "self_attn.q_proj.weight", nh * hd, H);   // (nh*hd, H)
  w.k = b.mat(p + "self_attn.k_proj.weight", nkv * hd, H);  // (nkv*hd, H)
  w.v = b.mat(p + "self_attn.v_proj.weight", nkv * hd, H);  // (nkv*hd, H)
  w.o = b.mat(p + "self_attn.o_proj.weight", H, nh * hd);   // (H, nh*hd)
  w.sinks = b.opt_vec(p + "self_attn.sinks", {nh});         // (nh,)
}

uint64_t widened_floats(const JambaConfig& c) {
  return static_cast<uint64_t>(c.num_attention_heads);  // the sinks, at most
}

void each_matrix(const LayerWeights& lw, const MixerMatrixVisitor& f) {
  f("self_attn.q_proj", lw.attn.q, nullptr);
  f("self_attn.k_proj", lw.attn.k, nullptr);
  f("self_attn.v_proj", lw.attn.v, nullptr);
  f("self_attn.o_proj", lw.attn.o, nullptr);
}

int64_t vector_floats(const LayerWeights& lw) {
  return static_cast<int64_t>(lw.attn.sinks.size());
}

int64_t state_elements(const JambaConfig&) {
  return 0;  // its state is the KV cache, which grows with the context (counted apart)
}

const MixerOpsTable::Add kRegistered{{MixerKind::Attention, bind, widened_floats, each_matrix, vector_floats, state_elements}};

}  // namespace
}  // namespace hl
