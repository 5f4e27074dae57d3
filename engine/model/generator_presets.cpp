// Named Jamba (and Bamba) configs for the generator, the random demo, benchmarks and memory math.
// Not checkpoints: only the JambaConfig; generator.cpp draws the weights. The values the Hub
// configs leave unverified (jamba-spec.md §1.3, §8: heads, intermediate size, vocab) are our choice.
// Reference: jamba-spec.md §1.1 (fields), §1.3 (Jamba-v0.1 and the tiny checkpoints' schedules).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/model/generator.h"

namespace hl {
namespace {

// Fields every preset shares: silu, no proj bias, conv bias, d_state 16, d_conv 4, expand 2,
// dt_rank "auto" (ceil(H/16)), pad 0 / bos 1 / eos 2.
JambaConfig base(int64_t H, int64_t I, int64_t L, int64_t V, int64_t nh, int64_t nkv) {
  JambaConfig c;
  c.hidden_size = H;
  c.intermediate_size = I;
  c.num_hidden_layers = L;
  c.vocab_size = V;
  c.num_attention_heads = nh;
  c.num_key_value_heads = nkv;
  c.mamba_d_state = 16;
  c.mamba_d_conv = 4;
  c.mamba_expand = 2;
  c.mamba_dt_rank_auto = true;
  c.mamba_dt_rank = (H + 15) / 16;
  c.eos_token_ids = {2};
  c.tie_word_embeddings = false;
  c.torch_dtype = "bfloat16";
  return c;
}

void schedule(JambaConfig* c, int64_t attn_period, int64_t attn_offset, int64_t E, int64_t K) {
  c->attn_layer_period = attn_period;
  c->attn_layer_offset = attn_offset;
  c->expert_layer_period = 2;  // MoE on odd layers
  c->expert_layer_offset = 1;
  c->num_experts = E;
  c->num_experts_per_tok = K;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "tiny-dev", "demo-random", "3b", "jamba-v0.1", "bamba-tiny", "nemotron-h-tiny", "nemotron-h-moe-tiny", "granite-h-tiny", "falcon-h1-tiny"};
}

JambaConfig preset_config(const std::string& name) {
  if (name == "tiny") {
    // ≈ ai21labs/Jamba-tiny-random: H 128, 8 layers, attention at i%4==2, MoE E4/K2 on odd layers,
    // nkv 1. Our choices: nh 4 (hd 32), I 256, V 65536. ≈ 19 M parameters.
    JambaConfig c = base(128, 256, 8, 65536, 4, 1);
    schedule(&c, 4, 2, 4, 2);
    return c;
  }
  if (name == "tiny-dev") {
    // ≈ ai21labs/Jamba-tiny-dev: H 512, I 2048, 16 layers, attention at 4 and 12, MoE E8/K2 on odd
    // layers, nh 8, nkv 2, V 65536. ≈ 319 M parameters.
    JambaConfig c = base(512, 2048, 16, 65536, 8, 2);
    schedule(&c, 8, 4, 8, 2);
    return c;
  }
  if (name == "demo-random") {
    // The app's random demo: a few MB. H 128, I 128, 8 layers, attention at i%4==2, MoE E8/K2 on
    // odd layers, nh 4, nkv 2, V 4096. ≈ 3.5 M parameters (≈ 7 MB in bf16).
    JambaConfig c = base(128, 128, 8, 4096, 4, 2);
    schedule(&c, 4, 2, 8, 2);
    return c;
  }
  if (name == "3b") {
    // Jamba-shaped ≈ 3 B parameters for the GPU benchmark: H 2048, I 5120, 16 layers, attention at
    // 4 and 12, MoE E8/K2 on odd layers, nh 16 (hd 128), nkv 4, V 65536. ≈ 2.9 B parameters.
    JambaConfig c = base(2048, 5120, 16, 65536, 16, 4);
    schedule(&c, 8, 4, 8, 2);
    return c;
  }
  if (name == "jamba-v0.1") {
    // jamba-spec.md §1.3 verbatim (v0.1: eos 2). ≈ 51.6 B parameters: for memory math, not generation.
    JambaConfig c = base(4096, 14336, 32, 65536, 32, 8);
    schedule(&c, 8, 4, 16, 2);
    c.mamba_dt_rank_auto = false;
    c.mamba_dt_rank = 256;
    return c;
  }
  if (name == "bamba-tiny") {
    // A small HF Bamba (model_type "bamba"): H 128, I 256, 8 layers, attention at 2 and 6 with RoPE
    // (θ 10000 on half of each head), Mamba-2 elsewhere with 8 heads of 32 channels, 2 B/C groups,
    // d_state 16, d_conv 4, Δ unclamped; nh 4, nkv 2, V 4096, dense MLP on every layer. ≈ 3.4 M parameters.
    JambaConfig c = bamba_defaults();
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.num_hidden_layers = 8;
    c.vocab_size = 4096;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.attn_layer_indices = {2, 6};
    c.mamba_n_heads = 8;
    c.mamba_d_head = 32;
    c.mamba_n_groups = 2;
    c.mamba_d_state = 16;
    c.mamba_chunk_size = 64;
    c.eos_token_ids = {2};
    c.torch_dtype = "bfloat16";
    return c;
  }
  if (name == "nemotron-h-tiny") {
    // A small NVIDIA Nemotron-H (model_type "nemotron_h", NVIDIA's "backbone." names): H 128, 12 layers
    // "M-M-M*-M-M*-" (Mamba-2, relu² MLP, attention without positions), nh 4 / nkv 2 of head_dim 48
    // (nh · hd ≠ H, as in Nemotron-H's own sizes), Mamba-2 with 8 heads of 32 channels, 2 B/C groups
    // (the gated norm in 2 groups), d_state 16, d_conv 4, MLP width 384, V 4096. ≈ 2.6 M parameters.
    JambaConfig c = nemotron_h_defaults();
    c.hidden_size = 128;
    c.intermediate_size = 384;
    c.layer_pattern = "M-M-M*-M-M*-";
    c.num_hidden_layers = static_cast<int64_t>(c.layer_pattern.size());
    c.num_experts = c.num_experts_per_tok = 1;  // no MoE layer (config.json written without the MoE fields)
    c.vocab_size = 4096;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim_explicit = 48;
    c.mamba_n_heads = 8;
    c.mamba_d_head = 32;
    c.mamba_n_groups = 2;
    c.mamba_d_state = 16;
    c.mamba_chunk_size = 64;
    c.eos_token_ids = {2};
    c.torch_dtype = "bfloat16";
    return c;
  }
  if (name == "nemotron-h-moe-tiny") {
    // A small Nemotron-H with MoE layers (the Nemotron 3 shape): H 128, 8 layers "MEM*EM-E"; each E
    // layer 16 relu² experts of width 96 in 4 groups, top-4 within the 2 best groups on sigmoid +
    // correction bias, weights renormalised × 2.5 (DeepSeek-V3's router), beside a shared relu² expert
    // of 192; the rest as nemotron-h-tiny. ≈ 2.9 M parameters (2.0 M active per token).
    JambaConfig c = preset_config("nemotron-h-tiny");
    c.layer_pattern = "MEM*EM-E";
    c.num_hidden_layers = static_cast<int64_t>(c.layer_pattern.size());
    c.num_experts = 16;
    c.num_experts_per_tok = 4;
    c.moe_intermediate_size = 96;
    c.shared_intermediate_size = 192;
    c.moe_n_group = 4;
    c.moe_topk_group = 2;
    c.moe_routed_scaling = 2.5;
    return c;
  }
  if (name == "granite-h-tiny") {
    // A small IBM Granite 4.0-H (model_type "granitemoehybrid"): H 128, 8 layers, attention at 3 and 7
    // without positions, Mamba-2 elsewhere (8 heads of 32, 1 group, d_state 16); on every layer 8 routed
    // experts of width 128, top-2 (softmax over the two), beside a shared MLP of 256; Granite's µP
    // multipliers (embedding 12, residual 0.22, attention 1/128, logits ÷ 6); tied head, V 4096.
    JambaConfig c = granite_h_defaults();
    c.hidden_size = 128;
    c.intermediate_size = 128;
    c.num_hidden_layers = 8;
    c.vocab_size = 4096;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.attn_layer_indices = {3, 7};
    c.mamba_n_heads = 8;
    c.mamba_d_head = 32;
    c.mamba_n_groups = 1;
    c.mamba_d_state = 16;
    c.mamba_chunk_size = 64;
    c.num_experts = 8;
    c.num_experts_per_tok = 2;
    c.shared_intermediate_size = 256;
    c.embedding_multiplier = 12.0;
    c.residual_multiplier = 0.22;
    c.attention_multiplier = 0.0078125;
    c.logits_scaling = 6.0;
    c.tie_word_embeddings = true;
    c.eos_token_ids = {2};
    c.torch_dtype = "bfloat16";
    return c;
  }
  if (name == "falcon-h1-tiny") {
    // A small TII Falcon-H1 (model_type "falcon_h1"): H 128, 6 layers, each attention ∥ Mamba-2 then
    // a SwiGLU MLP of 384; attention nh 4 / nkv 2 of head_dim 48 (nh · hd ≠ H) with RoPE θ 1e11;
    // Mamba-2 of mamba_d_ssm 192 (6 heads of 32, 1 group, d_state 16) without the gated norm
    // (y · silu(z)); µP multipliers of the magnitudes Falcon-H1 ships (embedding 5.66, keys 0.39,
    // attention out 0.94, SSM in 1.25 / out 0.24, in_proj segments 0.25–0.5, MLP gate 0.88 / down
    // 0.59, LM head 0.039); untied head, V 4096.
    JambaConfig c = falcon_h1_defaults();
    c.hidden_size = 128;
    c.intermediate_size = 384;
    c.num_hidden_layers = 6;
    c.vocab_size = 4096;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim_explicit = 48;
    c.rope_theta = 1e11;
    c.mamba_d_ssm = 192;
    c.mamba_n_heads = 6;
    c.mamba_d_head = 32;
    c.mamba_n_groups = 1;
    c.mamba_d_state = 16;
    c.mamba_chunk_size = 64;
    c.embedding_multiplier = 5.656854249492381;
    c.lm_head_multiplier = 0.0390625;
    c.key_multiplier = 0.390625;
    c.attention_out_multiplier = 0.9375;
    c.ssm_in_multiplier = 1.25;
    c.ssm_out_multiplier = 0.23570226039551587;
    c.ssm_multipliers = {0.3535533905932738, 0.25, 0.3535533905932738, 0.5, 0.3535533905932738};
    c.mlp_gate_multiplier = 0.8838834764831844;
    c.mlp_down_multiplier = 0.5859375;
    c.eos_token_ids = {2};
    c.torch_dtype = "bfloat16";
    return c;
  }
  std::string known;
  for (const auto& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown preset '" + name + "' (known: " + known + ")");
}

}  // namespace hl
