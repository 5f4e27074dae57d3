// GGUF architecture `jamba` (llama.cpp's JambaModel converter; tools/reference/gguf/GGUF.md §5.1):
// head_count_kv per layer is 0 at Mamba layers (the attention schedule), a layer is MoE iff it has
// ffn_gate_inp, A is stored as −exp(A_log), stacked experts are split per expert, the conv kernel
// [W, Di] is HF's (Di, 1, W). Both schedules must be periodic, as HF's JambaConfig describes them.
#include <algorithm>

#include "engine/io/gguf_arch.h"

namespace hl {
namespace {

std::string blk(int64_t i, const char* name) { return "blk." + std::to_string(i) + "." + name; }

JambaConfig jamba_config(const GgufMeta& m, GgufTensors& t) {
  JambaConfig c;
  c.family = Family::Jamba;
  gguf_read_dims(m, c, -1);
  c.intermediate_size = m.integer(m.key("feed_forward_length"), 1, 1 << 24);
  c.mamba_d_conv = m.integer(m.key("ssm.conv_kernel"), 1, 1024);
  c.mamba_d_state = m.integer(m.key("ssm.state_size"), 1, 1 << 16);
  c.mamba_dt_rank = m.integer(m.key("ssm.time_step_rank"), 1, 1 << 20);
  const int64_t Di = m.integer(m.key("ssm.inner_size"), 1, int64_t{1} << 30);
  if (Di % c.hidden_size)
    throw LoadError(m.where(m.key("ssm.inner_size")) + ": " + std::to_string(Di) + " (allowed a multiple of embedding_length " +
                    std::to_string(c.hidden_size) + ": Jamba's inner size is mamba_expand x hidden size)");
  c.mamba_expand = Di / c.hidden_size;
  const int64_t L = c.num_hidden_layers;
  const std::vector<int64_t> nkv = m.per_layer(m.key("attention.head_count_kv"), L, 0, c.num_attention_heads);
  std::vector<bool> attn(static_cast<size_t>(L)), moe(static_cast<size_t>(L));
  c.num_key_value_heads = 0;
  for (int64_t i = 0; i < L; ++i) {
    const int64_t k = nkv[static_cast<size_t>(i)];
    attn[static_cast<size_t>(i)] = k > 0;
    if (k > 0 && c.num_key_value_heads > 0 && k != c.num_key_value_heads)
      throw LoadError(m.where(m.key("attention.head_count_kv")) + "[" + std::to_string(i) + "]: " + std::to_string(k) +
                      " (allowed 0 or " + std::to_string(c.num_key_value_heads) + ": every attention layer of a Jamba model has the same)");
    if (k > 0) c.num_key_value_heads = k;
    moe[static_cast<size_t>(i)] = t.has(blk(i, "ffn_gate_inp.weight"));
  }
  if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
  gguf_schedule_period(m, attn, "attention layers (head_count_kv > 0)", &c.attn_layer_period, &c.attn_layer_offset);
  const bool any_moe = std::find(moe.begin(), moe.end(), true) != moe.end();
  if (any_moe) {
    c.num_experts = m.integer(m.key("expert_count"), 2, 1 << 16);
    c.num_experts_per_tok = m.integer(m.key("expert_used_count"), 1, c.num_experts);
    gguf_schedule_period(m, moe, "MoE layers (with ffn_gate_inp)", &c.expert_layer_period, &c.expert_layer_offset);
  } else {
    c.num_experts = 1;
    c.num_experts_per_tok = 1;
    c.expert_layer_period = 1;
    c.expert_layer_offset = 0;
  }
  const std::vector<int64_t> embd = t.ne_of("token_embd.weight");
  if (embd.size() != 2 || embd[0] != c.hidden_size)
    throw LoadError(t.file() + ": tensor 'token_embd.weight' " + (embd.empty() ? "is missing" : "has " + std::to_string(embd.size()) + " dimensions") +
                    " (expected ne [" + std::to_string(c.hidden_size) + ", vocabulary size])");
  c.vocab_size = embd[1];
  c.tie_word_embeddings = !t.has("output.weight");
  int64_t first_mamba = -1;
  for (int64_t i = 0; i < L && first_mamba < 0; ++i)
    if (!attn[static_cast<size_t>(i)]) first_mamba = i;
  c.mamba_conv_bias = first_mamba >= 0 && t.has(blk(first_mamba, "ssm_conv1d.bias"));
  c.mamba_proj_bias = false;  // llama.cpp has no in/out_proj biases for Jamba
  return c;
}

void jamba_tensors(const GgufMeta&, const JambaConfig& c, GgufTensors& t) {
  const int64_t H = c.hidden_size, V = c.vocab_size, I = c.intermediate_size, E = c.num_experts;
  const int64_t hd = c.head_dim(), nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t Di = c.mamba_inner(), N = c.mamba_d_state, W = c.mamba_d_conv, R = c.mamba_dt_rank;
  t.emit("model.embed_tokens.weight", {V, H}, t.take("token_embd.weight", {H, V}));
  if (!c.tie_word_embeddings) t.emit("lm_head.weight", {V, H}, t.take("output.weight", {H, V}));
  t.emit("model.final_layernorm.weight", {H}, t.take("output_norm.weight", {H}));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto g = [&](const char* name, std::vector<int64_t> ne) -> const GgufTensor& { return t.take(blk(i, name), ne); };
    t.emit(p + "input_layernorm.weight", {H}, g("attn_norm.weight", {H}));
    t.emit(p + "pre_ff_layernorm.weight", {H}, g("ffn_norm.weight", {H}));
    // HF JambaConfig's schedule, which the config was derived to reproduce.
    if (i % c.attn_layer_period == c.attn_layer_offset) {
      t.emit(p + "self_attn.q_proj.weight", {nh * hd, H}, g("attn_q.weight", {H, nh * hd}));
      t.emit(p + "self_attn.k_proj.weight", {nkv * hd, H}, g("attn_k.weight", {H, nkv * hd}));
      t.emit(p + "self_attn.v_proj.weight", {nkv * hd, H}, g("attn_v.weight", {H, nkv * hd}));
      t.emit(p + "self_attn.o_proj.weight", {H, nh * hd}, g("attn_output.weight", {nh * hd, H}));
    } else {
      const std::string q = p + "mamba.";
      t.emit(q + "in_proj.weight", {2 * Di, H}, g("ssm_in.weight", {H, 2 * Di}));
      t.emit(q + "conv1d.weight", {Di, 1, W}, g("ssm_conv1d.weight", {W, Di}));
      if (c.mamba_conv_bias) t.emit(q + "conv1d.bias", {Di}, g("ssm_conv1d.bias", {Di}));
      t.emit(q + "x_proj.weight", {R + 2 * N, Di}, g("ssm_x.weight", {Di, R + 2 * N}));
      t.emit(q + "dt_proj.weight", {Di, R}, g("ssm_dt.weight", {R, Di}));
      t.emit(q + "dt_proj.bias", {Di}, g("ssm_dt.bias", {Di}));
      t.emit(q + "dt_layernorm.weight", {R}, g("ssm_dt_norm.weight", {R}));
      t.emit(q + "b_layernorm.weight", {N}, g("ssm_b_norm.weight", {N}));
      t.emit(q + "c_layernorm.weight", {N}, g("ssm_c_norm.weight", {N}));
      const GgufTensor& a = g("ssm_a", {N, Di});
      t.emit(q + "A_log", {Di, N}, a, 0, -1, GgufImportOp::Kind::LogNeg);
      t.emit(q + "D", {Di}, g("ssm_d", {Di}));
      t.emit(q + "out_proj.weight", {H, Di}, g("ssm_out.weight", {Di, H}));
    }
    const std::string f = p + "feed_forward.";
    if (E > 1 && i % c.expert_layer_period == c.expert_layer_offset) {
      t.emit(f + "router.weight", {E, H}, g("ffn_gate_inp.weight", {H, E}));
      const GgufTensor& gate = g("ffn_gate_exps.weight", {H, I, E});
      const GgufTensor& up = g("ffn_up_exps.weight", {H, I, E});
      const GgufTensor& down = g("ffn_down_exps.weight", {I, H, E});
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = f + "experts." + std::to_string(e) + ".";
        t.emit(x + "gate_proj.weight", {I, H}, gate, e * I, I);
        t.emit(x + "up_proj.weight", {I, H}, up, e * I, I);
        t.emit(x + "down_proj.weight", {H, I}, down, e * H, H);
      }
    } else {
      t.emit(f + "gate_proj.weight", {I, H}, g("ffn_gate.weight", {H, I}));
      t.emit(f + "up_proj.weight", {I, H}, g("ffn_up.weight", {H, I}));
      t.emit(f + "down_proj.weight", {H, I}, g("ffn_down.weight", {I, H}));
    }
  }
}

const GgufArchRegistry::Add reg{GgufArch{"jamba", jamba_config, jamba_tensors}};

}  // namespace
}  // namespace hl
