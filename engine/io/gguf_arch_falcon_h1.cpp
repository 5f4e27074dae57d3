// GGUF architecture `falcon-h1` (llama.cpp's FalconH1 converter; tools/reference/gguf/GGUF.md §5.5):
// attention ∥ Mamba-2 in every layer, then a SwiGLU MLP. The converter folded every µP multiplier
// into the weights, so the config has all of them 1. RoPE keeps HF's rotate-half layout (no q/k
// permutation). The FFN norm is "blk.i.ffn_norm" (no ".weight"). The Mamba-2 gated norm is optional
// (mamba_rms_norm); llama.cpp applies it to y·silu(z) per group, i.e. mamba_norm_before_gate false
// (as the published Falcon-H1 configs have it). Refused: a tied file (no output tensor) — the
// converter folded embedding_multiplier into token_embd and lm_head_multiplier is lost, so the
// logits would be off by lm_head_multiplier / embedding_multiplier (GGUF.md §9); biases, which the
// converter cannot fold (they stay unused and are refused by name).
#include <cmath>

#include "engine/io/gguf_arch.h"

namespace hl {
namespace {

JambaConfig falcon_config(const GgufMeta& m, GgufTensors& t) {
  JambaConfig c = falcon_h1_defaults();
  gguf_read_dims(m, c, c.max_position_embeddings);
  const int64_t L = c.num_hidden_layers;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads;
  const std::vector<int64_t> nkv = m.per_layer(m.key("attention.head_count_kv"), L, 1, nh);
  for (size_t i = 1; i < nkv.size(); ++i)
    if (nkv[i] != nkv[0])
      throw LoadError(m.where(m.key("attention.head_count_kv")) + "[" + std::to_string(i) + "]: " + std::to_string(nkv[i]) +
                      " (allowed " + std::to_string(nkv[0]) + ": every Falcon-H1 layer has the same)");
  c.num_key_value_heads = nkv[0];
  const int64_t hd = m.integer_or(m.key("attention.key_length"), H / nh, 1, 4096);
  if (hd != H / nh || H % nh != 0) c.head_dim_explicit = hd;
  c.rope_theta = m.real_or(m.key("rope.freq_base"), 10000.0, 1e-6, 1e12);
  const int64_t dims = m.integer_or(m.key("rope.dimension_count"), hd, 2, hd);
  if (dims % 2 != 0)
    throw LoadError(m.where(m.key("rope.dimension_count")) + ": " + std::to_string(dims) + " (allowed an even number: RoPE rotates pairs)");
  c.partial_rotary_factor = static_cast<double>(dims) / static_cast<double>(hd);
  while (static_cast<int64_t>(static_cast<double>(hd) * c.partial_rotary_factor) < dims)  // int(hd · f) must give dims back
    c.partial_rotary_factor = std::nextafter(c.partial_rotary_factor, 2.0);
  gguf_read_vocab(t, c);
  if (c.tie_word_embeddings)
    throw LoadError(t.file() + ": tensor 'output.weight' is missing (allowed a Falcon-H1 file with its own output: in a tied one the "
                    "converter folded embedding_multiplier into token_embd and lm_head_multiplier is lost)");
  c.intermediate_size = m.integer(m.key("feed_forward_length"), 1, int64_t{1} << 20);
  c.mamba_d_ssm = gguf_read_mamba2(m, t, 0, c);
  c.mamba_proj_bias = false;  // in_proj / out_proj biases: not mappable (the multipliers are folded)
  c.projectors_bias = false;
  c.mamba_rms_norm = t.has(gguf_blk(0, "ssm_norm.weight"));
  c.mamba_norm_before_gate = !c.mamba_rms_norm;  // gate, then norm (llama.cpp); without a norm: HF's default
  return c;
}

void falcon_tensors(const GgufMeta&, const JambaConfig& c, GgufTensors& t) {
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size;
  t.emit("model.embed_tokens.weight", {V, H}, t.take("token_embd.weight", {H, V}));
  t.emit("lm_head.weight", {V, H}, t.take("output.weight", {H, V}));
  t.emit("model.final_layernorm.weight", {H}, t.take("output_norm.weight", {H}));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto g = [&](const char* name, std::vector<int64_t> ne) -> const GgufTensor& { return t.take(gguf_blk(i, name), ne); };
    t.emit(p + "input_layernorm.weight", {H}, g("attn_norm.weight", {H}));
    t.emit(p + "pre_ff_layernorm.weight", {H}, g("ffn_norm", {H}));
    gguf_emit_attention(t, c, i, p + "self_attn.", false);
    gguf_emit_mamba2(t, c, i, p + "mamba.");
    t.emit(p + "feed_forward.gate_proj.weight", {I, H}, g("ffn_gate.weight", {H, I}));
    t.emit(p + "feed_forward.up_proj.weight", {I, H}, g("ffn_up.weight", {H, I}));
    t.emit(p + "feed_forward.down_proj.weight", {H, I}, g("ffn_down.weight", {I, H}));
  }
}

const GgufArchRegistry::Add reg{GgufArch{"falcon-h1", falcon_config, falcon_tensors}};

}  // namespace
}  // namespace hl
