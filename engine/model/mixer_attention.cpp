// The attention mixer's weights (jamba-spec.md §2.1): q, k, v, o projections (biases where
// attention_bias says: Falcon-H1, Granite 4.0-H) and the
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
  const bool on = c.attention_bias;
  w.q_bias = b.flagged_vec(on, "attention_bias", p + "self_attn.q_proj.bias", {nh * hd});
  w.k_bias = b.flagged_vec(on, "attention_bias", p + "self_attn.k_proj.bias", {nkv * hd});
  w.v_bias = b.flagged_vec(on, "attention_bias", p + "self_attn.v_proj.bias", {nkv * hd});
  w.o_bias = b.flagged_vec(on, "attention_bias", p + "self_attn.o_proj.bias", {H});
}

uint64_t widened_floats(const JambaConfig& c) {
  const uint64_t biases = c.attention_bias ? static_cast<uint64_t>((c.num_attention_heads + 2 * c.num_key_value_heads) *
                                                                       c.head_dim() + c.hidden_size)
                                           : 0;
  return static_cast<uint64_t>(c.num_attention_heads) + biases;  // the sinks, at most, and the biases
}

void each_matrix(const LayerWeights& lw, const MixerMatrixVisitor& f) {
  f("self_attn.q_proj", lw.attn.q, &lw.attn.q_bias);
  f("self_attn.k_proj", lw.attn.k, &lw.attn.k_bias);
  f("self_attn.v_proj", lw.attn.v, &lw.attn.v_bias);
  f("self_attn.o_proj", lw.attn.o, &lw.attn.o_bias);
}

int64_t vector_floats(const LayerWeights& lw) {
  const AttentionWeights& a = lw.attn;
  return static_cast<int64_t>(a.sinks.size() + a.q_bias.size() + a.k_bias.size() + a.v_bias.size() + a.o_bias.size());
}

int64_t state_elements(const JambaConfig&) {
  return 0;  // its state is the KV cache, which grows with the context (counted apart)
}

const MixerOpsTable::Add kRegistered{{MixerKind::Attention, bind, widened_floats, each_matrix, vector_floats, state_elements}};

}  // namespace
}  // namespace hl
