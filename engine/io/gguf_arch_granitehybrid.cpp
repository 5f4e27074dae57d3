// GGUF architecture `granitehybrid` (llama.cpp's GraniteHybridModel converter, for IBM Granite 4.0-H
// and for Bamba; tools/reference/gguf/GGUF.md §5.4): head_count_kv per layer is 0 at the Mamba-2
// layers, q and k rows are permuted (undone), Granite's fused gate|up MLPs (shared_mlp.input_linear
// (2·Is, H), block_sparse_moe.input_linear (E, 2·I, H)) were split into ffn_gate* / ffn_up* and are
// fused again here. Which family: a file with any of Granite's multiplier keys (attention.scale,
// embedding_scale, residual_scale, logit_scale), experts, or rope.scaling.finetuned false (Granite
// 4.0-H's NoPE) is Granite 4.0-H; one with RoPE and none of those is Bamba (the converter writes
// "use RoPE" true for Bamba, no multipliers and no experts). MLP widths come from the tensors.
#include <algorithm>
#include <cmath>

#include "engine/io/gguf_arch.h"

namespace hl {
namespace {

bool is_bamba(const GgufMeta& m, const GgufTensors& t, int64_t L) {
  for (const char* k : {"attention.scale", "embedding_scale", "residual_scale", "logit_scale", "expert_count"})
    if (m.has(m.key(k))) return false;
  for (int64_t i = 0; i < L; ++i)
    if (t.has(gguf_blk(i, "ffn_gate_inp.weight")) || t.has(gguf_blk(i, "ffn_gate_shexp.weight"))) return false;
  return m.boolean_or(m.key("rope.scaling.finetuned"), false);
}

// A Granite multiplier key; 0 or absent is "none" (llama.cpp applies each only when it is set).
double multiplier(const GgufMeta& m, const char* key, double none) {
  const double v = m.real_or(m.key(key), 0.0, 0.0, 1e6);
  return v > 0 ? v : none;
}

// ne[1] of a layer's tensor (an MLP's width), checked against ne[0] = `cols`.
int64_t width(const GgufMeta& m, GgufTensors& t, int64_t layer, const char* name, int64_t cols) {
  const std::vector<int64_t> ne = t.ne_of(gguf_blk(layer, name));
  if (ne.size() < 2 || ne[0] != cols || ne[1] < 1 || ne[1] > (int64_t{1} << 20))
    throw LoadError(t.file() + ": tensor '" + gguf_blk(layer, name) + "' " + (ne.empty() ? "is missing" : "has another shape") +
                    " (expected ne [" + std::to_string(cols) + ", width" + (ne.size() > 2 ? ", experts]" : "]") + " for architecture " +
                    m.arch + ")");
  return ne[1];
}

JambaConfig granite_config(const GgufMeta& m, GgufTensors& t) {
  const int64_t L = m.integer(m.key("block_count"), 1, 4096);
  const bool bamba = is_bamba(m, t, L);
  JambaConfig c = bamba ? bamba_defaults() : granite_h_defaults();
  gguf_read_dims(m, c, c.max_position_embeddings);
  const int64_t H = c.hidden_size, nh = c.num_attention_heads;
  const std::vector<int64_t> nkv = m.per_layer(m.key("attention.head_count_kv"), L, 0, nh);
  c.attn_layer_indices.clear();
  c.num_key_value_heads = 0;
  int64_t first_ssm = -1;
  for (int64_t i = 0; i < L; ++i) {
    const int64_t k = nkv[static_cast<size_t>(i)];
    if (k == 0 && first_ssm < 0) first_ssm = i;
    if (k == 0) continue;
    if (c.num_key_value_heads > 0 && k != c.num_key_value_heads)
      throw LoadError(m.where(m.key("attention.head_count_kv")) + "[" + std::to_string(i) + "]: " + std::to_string(k) +
                      " (allowed 0 or " + std::to_string(c.num_key_value_heads) + ": every attention layer has the same)");
    c.num_key_value_heads = k;
    c.attn_layer_indices.push_back(i);
  }
  if (c.num_key_value_heads == 0) c.num_key_value_heads = nh;
  const int64_t hd = m.integer_or(m.key("attention.key_length"), nh > 0 ? H / nh : 0, 1, 4096);
  if (hd != H / nh || H % nh != 0) {
    if (bamba)
      throw LoadError(m.where(m.key("attention.key_length")) + ": " + std::to_string(hd) + " (allowed embedding_length / head_count = " +
                      std::to_string(H / nh) + ": Bamba's heads split the hidden size)");
    c.head_dim_explicit = hd;
  }
  gguf_read_vocab(t, c);

  const int64_t Di = gguf_read_mamba2(m, t, first_ssm, c);
  if (Di % H != 0)
    throw LoadError(m.where(m.key("ssm.inner_size")) + ": " + std::to_string(Di) + " (allowed a multiple of embedding_length " +
                    std::to_string(H) + ": the inner size is mamba_expand x hidden size)");
  c.mamba_expand = Di / H;
  c.attention_bias = !c.attn_layer_indices.empty() && t.has(gguf_blk(c.attn_layer_indices.front(), "attn_q.bias"));

  // Positions: "use RoPE" (rope.scaling.finetuned); Bamba rotates half of each head (HF fixes
  // partial_rotary_factor 0.5; the converter writes the whole head or attn_rotary_emb), Granite the whole.
  const bool rope = m.boolean_or(m.key("rope.scaling.finetuned"), false);
  c.rope_theta = rope ? m.real_or(m.key("rope.freq_base"), 10000.0, 1e-6, 1e12) : 0.0;
  if (rope) {
    const int64_t dims = m.integer_or(m.key("rope.dimension_count"), hd, 1, hd);
    if (dims != hd && !(bamba && 2 * dims == hd))
      throw LoadError(m.where(m.key("rope.dimension_count")) + ": " + std::to_string(dims) + " (allowed " +
                      (bamba ? std::to_string(hd / 2) + " or " : std::string()) + std::to_string(hd) +
                      (bamba ? ": Bamba rotates half of each head)" : ": Granite 4.0-H rotates the whole head)"));
  }
  if (bamba) {
    c.intermediate_size = width(m, t, 0, "ffn_gate.weight", H);
    return c;
  }
  c.attention_multiplier = multiplier(m, "attention.scale", 1.0 / std::sqrt(static_cast<double>(hd)));
  c.embedding_multiplier = multiplier(m, "embedding_scale", 1.0);
  c.residual_multiplier = multiplier(m, "residual_scale", 1.0);
  c.logits_scaling = multiplier(m, "logit_scale", 1.0);
  if (t.has(gguf_blk(0, "ffn_gate_inp.weight"))) {  // routed experts on every layer, and the shared MLP
    c.num_experts = m.integer(m.key("expert_count"), 2, 1 << 16);
    c.num_experts_per_tok = m.integer(m.key("expert_used_count"), 1, c.num_experts);
    c.intermediate_size = width(m, t, 0, "ffn_gate_exps.weight", H);
    c.shared_intermediate_size = width(m, t, 0, "ffn_gate_shexp.weight", H);
  } else {  // the shared MLP alone
    c.num_experts = 1;
    c.num_experts_per_tok = 1;
    c.shared_intermediate_size = width(m, t, 0, "ffn_gate.weight", H);
    c.intermediate_size = m.integer_or(m.key("feed_forward_length"), c.shared_intermediate_size, 1, int64_t{1} << 20);
  }
  return c;
}

void granite_tensors(const GgufMeta&, const JambaConfig& c, GgufTensors& t) {
  const bool bamba = c.family == Family::Bamba;
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_experts;
  t.emit("model.embed_tokens.weight", {V, H}, t.take("token_embd.weight", {H, V}));
  if (!c.tie_word_embeddings) t.emit("lm_head.weight", {V, H}, t.take("output.weight", {H, V}));
  t.emit(bamba ? "model.final_layernorm.weight" : "model.norm.weight", {H}, t.take("output_norm.weight", {H}));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto g = [&](const char* name, std::vector<int64_t> ne) -> const GgufTensor& { return t.take(gguf_blk(i, name), ne); };
    t.emit(p + "input_layernorm.weight", {H}, g("attn_norm.weight", {H}));
    t.emit(p + (bamba ? "pre_ff_layernorm.weight" : "post_attention_layernorm.weight"), {H}, g("ffn_norm.weight", {H}));
    if (std::count(c.attn_layer_indices.begin(), c.attn_layer_indices.end(), i))
      gguf_emit_attention(t, c, i, p + "self_attn.", true);
    else
      gguf_emit_mamba2(t, c, i, p + "mamba.");
    if (bamba) {
      const int64_t I = c.intermediate_size;
      t.emit(p + "feed_forward.gate_proj.weight", {I, H}, g("ffn_gate.weight", {H, I}));
      t.emit(p + "feed_forward.up_proj.weight", {I, H}, g("ffn_up.weight", {H, I}));
      t.emit(p + "feed_forward.down_proj.weight", {H, I}, g("ffn_down.weight", {I, H}));
      continue;
    }
    // The shared MLP: input_linear rows [0, Is) gate, [Is, 2·Is) up.
    const int64_t Is = c.shared_intermediate_size;
    const bool moe = E > 1;
    const std::string in = p + "shared_mlp.input_linear.weight";
    t.declare(in, {2 * Is, H});
    t.emit_into(in, 0, g(moe ? "ffn_gate_shexp.weight" : "ffn_gate.weight", {H, Is}), 0, Is);
    t.emit_into(in, Is * H, g(moe ? "ffn_up_shexp.weight" : "ffn_up.weight", {H, Is}), 0, Is);
    t.emit(p + "shared_mlp.output_linear.weight", {H, Is}, g(moe ? "ffn_down_shexp.weight" : "ffn_down.weight", {Is, H}));
    if (!moe) continue;
    // Routed experts: input_linear (E, 2I, H), expert e's rows [0, I) gate, [I, 2I) up.
    const int64_t I = c.intermediate_size;
    const std::string m = p + "block_sparse_moe.";
    t.emit(m + "router.layer.weight", {E, H}, g("ffn_gate_inp.weight", {H, E}));
    const GgufTensor& gate = g("ffn_gate_exps.weight", {H, I, E});
    const GgufTensor& up = g("ffn_up_exps.weight", {H, I, E});
    t.declare(m + "input_linear.weight", {E, 2 * I, H});
    for (int64_t e = 0; e < E; ++e) {
      t.emit_into(m + "input_linear.weight", 2 * e * I * H, gate, e * I, I);
      t.emit_into(m + "input_linear.weight", (2 * e + 1) * I * H, up, e * I, I);
    }
    t.emit(m + "output_linear.weight", {E, H, I}, g("ffn_down_exps.weight", {I, H, E}));
  }
}

const GgufArchRegistry::Add reg{GgufArch{"granitehybrid", granite_config, granite_tensors}};

}  // namespace
}  // namespace hl
