// GGUF architectures `nemotron_h` and `nemotron_h_moe` (llama.cpp's NemotronH converter;
// tools/reference/gguf/GGUF.md §5.3) as HF NemotronHForCausalLM ("model." names, one "norm" a
// layer, every mixer under "mixer."). A layer's kind is read from its tensors — ssm_in: Mamba-2 (M),
// attn_q: attention (*), ffn_gate_inp: MoE (E), ffn_up: relu² MLP (-) — and checked against
// head_count_kv (> 0 exactly at the attention layers); widths come from the tensors, since the
// converter's feed_forward_length is wrong for some layer lists (GGUF.md §9). q and k rows are
// permuted by the converter (undone). Not in the file: HF's time_step_min / time_step_limit (their
// defaults apply) and the MoE's topk_group, which llama.cpp does not use: every group is eligible
// (topk_group = n_group), as llama.cpp routes.
#include "engine/io/gguf_arch.h"

namespace hl {
namespace {

// ne[k] of a layer's tensor, which must exist with `rank` dimensions and ne[0] = `cols`.
int64_t dim_of(GgufTensors& t, int64_t layer, const char* name, size_t rank, int64_t cols, size_t k) {
  const std::vector<int64_t> ne = t.ne_of(gguf_blk(layer, name));
  if (ne.size() != rank || ne[0] != cols || ne[k] < 1 || ne[k] > (int64_t{1} << 20))
    throw LoadError(t.file() + ": tensor '" + gguf_blk(layer, name) + "' " + (ne.empty() ? "is missing" : "has another shape") +
                    " (expected " + std::to_string(rank) + " dimensions with ne[0] = " + std::to_string(cols) + ")");
  return ne[k];
}

JambaConfig nemotron_config(const GgufMeta& m, GgufTensors& t) {
  JambaConfig c = nemotron_h_defaults();
  gguf_read_dims(m, c, c.max_position_embeddings);
  const int64_t L = c.num_hidden_layers;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads;
  c.head_dim_explicit = m.integer_or(m.key("attention.key_length"), H / nh, 1, 4096);
  if (m.integer_or(m.key("attention.value_length"), c.head_dim_explicit, 1, 4096) != c.head_dim_explicit)
    throw LoadError(m.where(m.key("attention.value_length")) + ": differs from attention.key_length " +
                    std::to_string(c.head_dim_explicit) + " (allowed equal: Nemotron-H has one head_dim)");
  const std::vector<int64_t> nkv = m.per_layer(m.key("attention.head_count_kv"), L, 0, nh);

  c.layer_pattern.clear();
  c.num_key_value_heads = 0;
  int64_t first[4] = {-1, -1, -1, -1};  // the first M, *, - and E layer
  for (int64_t i = 0; i < L; ++i) {
    const char k = t.has(gguf_blk(i, "ssm_in.weight"))         ? 'M'
                   : t.has(gguf_blk(i, "attn_q.weight"))       ? '*'
                   : t.has(gguf_blk(i, "ffn_gate_inp.weight")) ? 'E'
                   : t.has(gguf_blk(i, "ffn_up.weight"))       ? '-'
                                                               : 0;
    if (!k)
      throw LoadError(t.file() + ": layer " + std::to_string(i) +
                      " has none of ssm_in, attn_q, ffn_gate_inp, ffn_up (allowed a Mamba-2, attention, MoE or MLP layer)");
    c.layer_pattern += k;
    int64_t& f = first[k == 'M' ? 0 : k == '*' ? 1 : k == '-' ? 2 : 3];
    if (f < 0) f = i;
    const int64_t kv = nkv[static_cast<size_t>(i)];
    if ((kv > 0) != (k == '*') || (kv > 0 && c.num_key_value_heads > 0 && kv != c.num_key_value_heads))
      throw LoadError(m.where(m.key("attention.head_count_kv")) + "[" + std::to_string(i) + "]: " + std::to_string(kv) + " (allowed " +
                      (k == '*' ? (c.num_key_value_heads > 0 ? std::to_string(c.num_key_value_heads) : std::string("1..") + std::to_string(nh))
                                : std::string("0")) +
                      ": layer " + std::to_string(i) + " is " + (k == '*' ? "an attention layer" : "not an attention layer") + ")");
    if (kv > 0) c.num_key_value_heads = kv;
  }
  if (c.num_key_value_heads == 0) c.num_key_value_heads = nh;
  gguf_read_vocab(t, c);
  gguf_read_mamba2(m, t, first[0], c);

  const int64_t mlp = first[2], moe = first[3];
  c.mlp_bias = mlp >= 0 && t.has(gguf_blk(mlp, "ffn_up.bias"));
  if (mlp >= 0)
    c.intermediate_size = dim_of(t, mlp, "ffn_up.weight", 2, H, 1);
  else if (moe >= 0)
    c.intermediate_size = dim_of(t, moe, "ffn_up_exps.weight", 3, H, 1);  // no dense MLP: not used
  if (moe < 0) return c;
  if (c.mlp_bias)
    throw LoadError(t.file() + ": tensor '" + gguf_blk(mlp, "ffn_up.bias") +
                    "': MLP biases with MoE layers (allowed none: the shared expert's biases have no GGUF name)");
  c.num_experts = m.integer(m.key("expert_count"), 2, 1 << 16);
  c.num_experts_per_tok = m.integer(m.key("expert_used_count"), 1, c.num_experts);
  c.shared_intermediate_size = dim_of(t, moe, "ffn_up_shexp.weight", 2, H, 1);
  c.moe_latent_size = t.has(gguf_blk(moe, "ffn_latent_down.weight")) ? dim_of(t, moe, "ffn_latent_down.weight", 2, H, 1) : 0;
  const int64_t Hin = c.moe_latent_size > 0 ? c.moe_latent_size : H;
  c.moe_intermediate_size = dim_of(t, moe, "ffn_up_exps.weight", 3, Hin, 1);
  c.moe_renormalize = m.boolean_or(m.key("expert_weights_norm"), false);  // llama.cpp's default
  const double scale = m.real_or(m.key("expert_weights_scale"), 0.0, 0.0, 1e6);
  c.moe_routed_scaling = scale > 0 ? scale : 1.0;  // 0 or absent: none
  c.moe_n_group = m.integer_or(m.key("expert_group_count"), 1, 1, c.num_experts);
  c.moe_topk_group = c.moe_n_group;
  return c;
}

void nemotron_tensors(const GgufMeta&, const JambaConfig& c, GgufTensors& t) {
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_experts;
  t.emit("model.embeddings.weight", {V, H}, t.take("token_embd.weight", {H, V}));
  if (!c.tie_word_embeddings) t.emit("lm_head.weight", {V, H}, t.take("output.weight", {H, V}));
  t.emit("model.norm_f.weight", {H}, t.take("output_norm.weight", {H}));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", x = p + "mixer.";
    auto g = [&](const char* name, std::vector<int64_t> ne) -> const GgufTensor& { return t.take(gguf_blk(i, name), ne); };
    t.emit(p + "norm.weight", {H}, g("attn_norm.weight", {H}));
    const char k = c.layer_pattern[static_cast<size_t>(i)];
    if (k == 'M') {
      gguf_emit_mamba2(t, c, i, x);
    } else if (k == '*') {
      gguf_emit_attention(t, c, i, x, true);
    } else if (k == '-') {
      const int64_t I = c.intermediate_size;
      t.emit(x + "up_proj.weight", {I, H}, g("ffn_up.weight", {H, I}));
      t.emit(x + "down_proj.weight", {H, I}, g("ffn_down.weight", {I, H}));
      if (c.mlp_bias) {
        t.emit(x + "up_proj.bias", {I}, g("ffn_up.bias", {I}));
        t.emit(x + "down_proj.bias", {H}, g("ffn_down.bias", {H}));
      }
    } else {
      const int64_t I = c.moe_intermediate_size, Is = c.shared_intermediate_size, Lat = c.moe_latent_size;
      const int64_t Hin = Lat > 0 ? Lat : H;
      t.emit(x + "gate.weight", {E, H}, g("ffn_gate_inp.weight", {H, E}));
      if (const GgufTensor* b = t.optional(gguf_blk(i, "exp_probs_b.bias"), {E}))
        t.emit(x + "gate.e_score_correction_bias", {E}, *b);
      const GgufTensor& up = g("ffn_up_exps.weight", {Hin, I, E});
      const GgufTensor& down = g("ffn_down_exps.weight", {I, Hin, E});
      for (int64_t e = 0; e < E; ++e) {
        const std::string q = x + "experts." + std::to_string(e) + ".";
        t.emit(q + "up_proj.weight", {I, Hin}, up, e * I, I);
        t.emit(q + "down_proj.weight", {Hin, I}, down, e * Hin, Hin);
      }
      t.emit(x + "shared_experts.up_proj.weight", {Is, H}, g("ffn_up_shexp.weight", {H, Is}));
      t.emit(x + "shared_experts.down_proj.weight", {H, Is}, g("ffn_down_shexp.weight", {Is, H}));
      if (Lat > 0) {
        t.emit(x + "fc1_latent_proj.weight", {Lat, H}, g("ffn_latent_down.weight", {H, Lat}));
        t.emit(x + "fc2_latent_proj.weight", {H, Lat}, g("ffn_latent_up.weight", {Lat, H}));
      }
    }
  }
}

const GgufArchRegistry::Add reg_dense{GgufArch{"nemotron_h", nemotron_config, nemotron_tensors}};
const GgufArchRegistry::Add reg_moe{GgufArch{"nemotron_h_moe", nemotron_config, nemotron_tensors}};

}  // namespace
}  // namespace hl
