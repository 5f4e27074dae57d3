#!/usr/bin/python3
"""Granite 4.0-H golden cases for make_golden.py: config.json, seeded random weights in HF's names, runs.

What it is: the case list (granite_moe, granite_dense) and a weight maker in GraniteMoeHybridForCausalLM's
state-dict names; make_golden.py writes the files and computes the traces with granite_ref.py.
What it is not: a trainer (random weights).
References: HF configuration_granitemoehybrid.py / modeling_granitemoehybrid.py; tests/golden/README.md
(Granite 4.0-H cases).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_nemotron  # noqa: E402
import granite_ref  # noqa: E402

BASE_CONFIG = {
    "architectures": ["GraniteMoeHybridForCausalLM"], "model_type": "granitemoehybrid", "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "hidden_act": "silu", "initializer_range": 0.02,
    "max_position_embeddings": 4096, "normalization_function": "rmsnorm", "output_router_logits": False,
    "router_aux_loss_coef": 0.0, "use_cache": True, "transformers_version": "4.56.0",
}


def make_config(**kw):
    c = dict(BASE_CONFIG)
    c.update(kw)
    return dict(sorted(c.items()))


def make_weights(cfg, rng):
    """Ordered (name, float64 array) list, scaled so that every multiplier matters at O(1):
    embeddings N(0, 1/embedding_multiplier) (so h_0 has unit scale); q/k N(0, 1.2 sqrt(hd^-0.5 /
    attention_multiplier) / sqrt(H)) (attention logits with std about 1.5 under attention_multiplier);
    v 1/sqrt(H); branch outputs (o_proj, out_proj, output_linear) 0.7/sqrt(fan_in)/residual_multiplier;
    lm_head logits_scaling/sqrt(H) (logits with std about 1); other linears 1/sqrt(fan_in); router 2/sqrt(H);
    conv 1/sqrt(W); biases N(0, 0.1); norms 1 +- U(0.1); the Mamba-2 mixer as golden_nemotron.mamba2_weights."""
    c = granite_ref.GraniteConfig(cfg)
    H = c.H
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    norm_w = lambda n: 1.0 + rng.uniform(-0.1, 0.1, size=n)                # noqa: E731
    out_std = lambda fan_in: 0.7 / math.sqrt(fan_in) / c.resid_mult       # noqa: E731
    qk = 1.2 * math.sqrt(c.hd ** -0.5 / c.attn_mult) / math.sqrt(H)
    w = [("model.embed_tokens.weight", nrm(c.V, H, std=1.0 / c.emb_mult))]
    for i in range(c.L):
        p = f"model.layers.{i}."
        w.append((p + "input_layernorm.weight", norm_w(H)))
        if c.is_attn[i]:
            a = p + "self_attn."
            for k, rows, std in (("q", c.nh, qk), ("k", c.nkv, qk), ("v", c.nkv, 1.0 / math.sqrt(H))):
                w.append((a + k + "_proj.weight", nrm(rows * c.hd, H, std=std)))
                if c.attn_bias:
                    w.append((a + k + "_proj.bias", nrm(rows * c.hd, std=0.1)))
            w.append((a + "o_proj.weight", nrm(H, c.nh * c.hd, std=out_std(c.nh * c.hd))))
            if c.attn_bias:
                w.append((a + "o_proj.bias", nrm(H, std=0.1)))
        else:
            w += golden_nemotron.mamba2_weights(p + "mamba.", c, cfg, rng, out_std(c.Di))
        w.append((p + "post_attention_layernorm.weight", norm_w(H)))
        if c.E > 0:
            f = p + "block_sparse_moe."
            w += [(f + "input_linear.weight", nrm(c.E, 2 * c.I, H, std=1.0 / math.sqrt(H))),
                  (f + "output_linear.weight", nrm(c.E, H, c.I, std=out_std(c.I))),
                  (f + "router.layer.weight", nrm(c.E, H, std=2.0 / math.sqrt(H)))]
        s = p + "shared_mlp."
        w += [(s + "input_linear.weight", nrm(2 * c.Is, H, std=1.0 / math.sqrt(H))),
              (s + "output_linear.weight", nrm(H, c.Is, std=out_std(c.Is)))]
    w.append(("model.norm.weight", norm_w(H)))
    if not c.tie:
        w.append(("lm_head.weight", nrm(c.V, H, std=c.logits_div / math.sqrt(H))))
    return w


def case_specs():
    """Like make_golden.case_specs(), read with granite_ref.GraniteRef."""
    common = dict(ref=granite_ref.GraniteRef, make_weights=make_weights, weights={}, shards=1)
    return [
        dict(common, name="granite_moe", seed=1010,
             doc="Granite 4.0-H: layer_types [mamba, attention, mamba, mamba], H 32, V 96, attention nh 4 / nkv 2 "
                 "(hd 8), position_embedding_type \"nope\" (no positional encoding), no attention bias; MoE on "
                 "every layer: 4 experts, top-2 (I 32; fused input_linear (E, 2I, H) = [gate | up], output_linear "
                 "(E, H, I), router.layer (E, H)) plus the shared MLP (shared_intermediate_size 48); multipliers "
                 "embedding 12, residual 0.22, attention 0.0078125 (the softmax scale), logits_scaling 8; Mamba-2 "
                 "with mamba_expand 2 (Di 64), 8 heads of 8, n_groups 2 (heads 0-3 use group 0; the gated norm "
                 "runs over all 64 channels), d_state 8, d_conv 4, chunk 8 (T 20 spans 3 chunks), conv bias, no "
                 "proj bias, time_step_limit [0, Infinity] (bare Infinity) and time_step_min 0.02 used for the "
                 "dt_bias init only (HF does not floor dt at it: some dt values lie below 0.02); untied lm_head "
                 "(HF default tie_word_embeddings false), eps 1e-6, all F32.",
             config=make_config(vocab_size=96, hidden_size=32, num_hidden_layers=4,
                                layer_types=["mamba", "attention", "mamba", "mamba"], num_attention_heads=4,
                                num_key_value_heads=2, attention_bias=False, position_embedding_type="nope",
                                rope_theta=10000.0, num_local_experts=4, num_experts_per_tok=2, intermediate_size=32,
                                shared_intermediate_size=48, embedding_multiplier=12.0, residual_multiplier=0.22,
                                attention_multiplier=0.0078125, logits_scaling=8.0, mamba_expand=2, mamba_n_heads=8,
                                mamba_d_head="auto", mamba_n_groups=2, mamba_d_state=8, mamba_d_conv=4,
                                mamba_chunk_size=8, mamba_conv_bias=True, mamba_proj_bias=False,
                                time_step_min=0.02, time_step_max=0.2, time_step_limit=[0.0, math.inf],
                                rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="float32"),
             dtype=lambda name, k: "F32",
             runs=[("as_trained", 20, None, None), ("normalizer_softmax1", 20, "softmax1", None),
                   ("registers_2", 20, None, 2)]),
        dict(common, name="granite_dense", seed=1111,
             doc="Granite 4.0-H dense (H-micro style): num_local_experts 0, so every layer's feed-forward is the "
                 "shared MLP alone (shared_intermediate_size 96; no block_sparse_moe tensors, no router; "
                 "num_experts_per_tok 0 as in the published dense configs; intermediate_size unused); "
                 "layer_types [attention, mamba, mamba, attention], H 48, V 128, nh 4 / nkv 1 (hd 12), "
                 "attention_bias false (published Granite 4.0 configs; HybridLens refuses attention biases), position_embedding_type \"rope\": RoPE over all 12 dims of "
                 "each head (rotate_half), rope_theta 10000 top-level with rope_scaling null; multipliers "
                 "embedding 4, residual 0.5, attention 0.25 (head_dim^-0.5 would be 0.2887), logits_scaling 3; "
                 "Mamba-2 with Di 96, 6 heads with mamba_d_head 16 given, n_groups 1, d_state 16, d_conv 3, chunk 4, "
                 "no conv bias, mamba_proj_bias true (in_proj.bias, out_proj.bias), time_step_limit [0.05, 0.3] "
                 "(the clamp changes values at both ends); tied embeddings (no lm_head tensor, as the published "
                 "Granite 4.0 checkpoints), eps 1e-5, every tensor BF16.",
             config=make_config(vocab_size=128, hidden_size=48, num_hidden_layers=4,
                                layer_types=["attention", "mamba", "mamba", "attention"], num_attention_heads=4,
                                num_key_value_heads=1, attention_bias=False, position_embedding_type="rope",
                                rope_theta=10000.0, rope_scaling=None, num_local_experts=0, num_experts_per_tok=0,
                                intermediate_size=80, shared_intermediate_size=96, embedding_multiplier=4.0,
                                residual_multiplier=0.5, attention_multiplier=0.25, logits_scaling=3.0,
                                mamba_expand=2, mamba_n_heads=6, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=16,
                                mamba_d_conv=3, mamba_chunk_size=4, mamba_conv_bias=False, mamba_proj_bias=True,
                                time_step_min=0.01, time_step_max=0.5, time_step_limit=[0.05, 0.3],
                                rms_norm_eps=1e-5, tie_word_embeddings=True, torch_dtype="bfloat16"),
             dtype=lambda name, k: "BF16",
             runs=[("as_trained", 16, None, None), ("normalizer_sink", 16, "sink", None),
                   ("registers_1", 16, None, 1)]),
    ]


def dt_counts(ref, trace, below):
    """(head-token dt values of a trace strictly below `below`, total)."""
    d = trace["ssm_delta"][:, :, ::ref.cfg.P]                              # (T, M_n, nh)
    return int(np.sum(d < below)), int(d.size)
