#!/usr/bin/python3
"""Falcon-H1 golden cases for make_golden.py: config.json, seeded random weights in HF's names, runs.

What it is: the case list (falcon_basic, falcon_variant) and a weight maker in FalconH1ForCausalLM's
state-dict names; make_golden.py writes the files and computes the traces with falcon_ref.py.
What it is not: a trainer (random weights).
References: HF configuration_falcon_h1.py / modeling_falcon_h1.py; tests/golden/README.md (Falcon-H1 cases).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import falcon_ref  # noqa: E402

BASE_CONFIG = {
    "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1", "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "hidden_act": "silu", "initializer_range": 0.02,
    "max_position_embeddings": 4096, "num_logits_to_keep": 1, "use_cache": True, "transformers_version": "4.53.0",
}


def make_config(**kw):
    c = dict(BASE_CONFIG)
    c.update(kw)
    return dict(sorted(c.items()))


def make_weights(cfg, rng):
    """Ordered (name, float64 array) list, scaled so that every multiplier matters at O(1): embeddings
    N(0, 1/embedding_multiplier); q N(0, 1.2/sqrt(H)/attention_in), k the same / key_multiplier (logits with
    std about 1.5), v 1/sqrt(H)/attention_in, o 0.7/sqrt(nh hd)/attention_out; in_proj row r N(0, 1/sqrt(H)
    / (ssm_in mup[r])) and its bias N(0, 0.1/mup[r]); out_proj 0.7/sqrt(Di)/ssm_out; gate 1/sqrt(H)/
    gate_multiplier, up 1/sqrt(H), down 0.7/sqrt(I)/down_multiplier; lm_head 1/sqrt(H)/lm_head_multiplier;
    conv 1/sqrt(W); other biases N(0, 0.1); norms 1 +- U(0.1); dt_bias = inverse softplus of dt ~
    logU[time_step_min, time_step_max]; A_log = log U[1, 16]; D = 1 +- U(0.2)."""
    c = falcon_ref.FalconH1Config(cfg)
    H = c.H
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    norm_w = lambda n: 1.0 + rng.uniform(-0.1, 0.1, size=n)                # noqa: E731
    mup = c.mup_vector()
    w = [("model.embed_tokens.weight", nrm(c.V, H, std=1.0 / c.emb_mult))]
    for i in range(c.L):
        p = f"model.layers.{i}."
        w.append((p + "input_layernorm.weight", norm_w(H)))
        a = p + "self_attn."
        qk = 1.2 / math.sqrt(H) / c.attn_in
        for k, rows, std in (("q", c.nh, qk), ("k", c.nkv, qk / c.key_mult), ("v", c.nkv, 1.0 / math.sqrt(H) / c.attn_in)):
            w.append((a + k + "_proj.weight", nrm(rows * c.hd, H, std=std)))
            if c.attn_bias:
                w.append((a + k + "_proj.bias", nrm(rows * c.hd, std=0.1)))
        w.append((a + "o_proj.weight", nrm(H, c.nh * c.hd, std=0.7 / math.sqrt(c.nh * c.hd) / c.attn_out)))
        if c.attn_bias:
            w.append((a + "o_proj.bias", nrm(H, std=0.1)))
        m = p + "mamba."
        w.append((m + "in_proj.weight", nrm(len(mup), H, std=1.0 / math.sqrt(H) / c.ssm_in) / mup[:, None]))
        if c.proj_bias:
            w.append((m + "in_proj.bias", nrm(len(mup), std=0.1) / mup))
        w.append((m + "conv1d.weight", nrm(c.conv_dim, 1, c.W, std=1.0 / math.sqrt(c.W))))
        if c.conv_bias:
            w.append((m + "conv1d.bias", nrm(c.conv_dim, std=0.1)))
        lo, hi = math.log(cfg["time_step_min"]), math.log(cfg["time_step_max"])
        dt = np.exp(rng.uniform(lo, hi, size=c.mh))
        w += [(m + "dt_bias", dt + np.log(-np.expm1(-dt))),
              (m + "A_log", np.log(rng.uniform(1.0, 16.0, size=c.mh))),
              (m + "D", 1.0 + rng.uniform(-0.2, 0.2, size=c.mh))]
        if c.rms_norm:
            w.append((m + "norm.weight", norm_w(c.Di)))
        w.append((m + "out_proj.weight", nrm(H, c.Di, std=0.7 / math.sqrt(c.Di) / c.ssm_out)))
        if c.out_bias:
            w.append((m + "out_proj.bias", nrm(H, std=0.1)))
        w.append((p + "pre_ff_layernorm.weight", norm_w(H)))
        f = p + "feed_forward."
        for k, shape, std in (("gate", (c.I, H), 1.0 / math.sqrt(H) / c.gate_mult), ("up", (c.I, H), 1.0 / math.sqrt(H)),
                              ("down", (H, c.I), 0.7 / math.sqrt(c.I) / c.down_mult)):
            w.append((f + k + "_proj.weight", nrm(*shape, std=std)))
            if c.mlp_bias:
                w.append((f + k + "_proj.bias", nrm(shape[0], std=0.1)))
    w.append(("model.final_layernorm.weight", norm_w(H)))
    if not c.tie:
        w.append(("lm_head.weight", nrm(c.V, H, std=1.0 / math.sqrt(H) / c.lm_mult)))
    return w


def case_specs():
    """Like make_golden.case_specs(), read with falcon_ref.FalconH1Ref."""
    common = dict(ref=falcon_ref.FalconH1Ref, make_weights=make_weights, weights={}, shards=1)
    return [
        dict(common, name="falcon_basic", seed=1212,
             doc="Falcon-H1: 3 layers, each attention + Mamba-2 in parallel then the MLP (A_n = M_n = L = 3); "
                 "H 32, V 96, nh 4 / nkv 2 (hd 8 = H/nh, no head_dim key), RoPE over the whole head with "
                 "top-level rope_theta 10000, no attention bias; multipliers embedding 3, lm_head 0.3, key 0.5, "
                 "attention_in 1.5, attention_out 0.8, ssm_in 1.25, ssm_out 0.6, ssm_multipliers [z 0.5, x 2, "
                 "B 0.7, C 1.4, dt 0.9], mlp_multipliers [gate 1.3, down 0.45]; Mamba-2 with mamba_d_ssm 64 "
                 "given (mamba_expand 1 would say 32), 8 heads (mamba_d_head auto = 8), mamba_n_groups 1, "
                 "d_state 8, d_conv 4, chunk 8 (T 20 spans 3 chunks), conv bias, no in_proj bias "
                 "(mamba_proj_bias false), no out_proj bias (projectors_bias false), mamba_rms_norm false (gate "
                 "y silu(z), no norm.weight), time_step_limit [0, Infinity] (bare Infinity); gated-SiLU MLP I 64 "
                 "without bias; untied lm_head, eps 1e-6, all F32.",
             config=make_config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=2, attention_bias=False, mlp_bias=False,
                                rope_theta=10000.0, embedding_multiplier=3.0, lm_head_multiplier=0.3,
                                key_multiplier=0.5, attention_in_multiplier=1.5, attention_out_multiplier=0.8,
                                ssm_in_multiplier=1.25, ssm_out_multiplier=0.6,
                                ssm_multipliers=[0.5, 2.0, 0.7, 1.4, 0.9], mlp_multipliers=[1.3, 0.45],
                                mamba_d_ssm=64, mamba_expand=1, mamba_n_heads=8, mamba_d_head="auto",
                                mamba_n_groups=1, mamba_d_state=8, mamba_d_conv=4, mamba_chunk_size=8,
                                mamba_conv_bias=True, mamba_proj_bias=False, projectors_bias=False,
                                mamba_rms_norm=False, mamba_norm_before_gate=True, time_step_min=0.001,
                                time_step_max=0.1, time_step_limit=[0.0, math.inf], rms_norm_eps=1e-6,
                                tie_word_embeddings=False, torch_dtype="float32"),
             dtype=lambda name, k: "F32",
             runs=[("as_trained", 20, None, None), ("normalizer_softmax1", 20, "softmax1", None),
                   ("registers_2", 20, None, 2)]),
        dict(common, name="falcon_variant", seed=1313,
             doc="Falcon-H1: 2 layers (A_n = M_n = 2), H 48, V 128, nh 4 / nkv 1 (MQA) with head_dim 16 given "
                 "(nh hd 64 != H), RoPE over all 16 dims with rope_parameters {default, rope_theta 1e11}, "
                 "attention_bias true (q/k/v/o biases), mlp_bias true (gate/up/down biases, I 80); multipliers embedding 2, lm_head "
                 "0.25, key 1.7, attention_in 0.6, attention_out 1.3, ssm_in 0.8, ssm_out 1.5, ssm_multipliers "
                 "[z 1.6, x 0.4, B 1.2, C 0.6, dt 1.1], mlp_multipliers [gate 0.7, down 1.6]; Mamba-2 with "
                 "mamba_d_ssm null (Di = mamba_expand 2 x H = 96), 6 heads with mamba_d_head 16 given, "
                 "mamba_n_groups 2 (heads 0-2 use group 0), d_state 16, d_conv 3, chunk 4 (T 16 spans 4 chunks), "
                 "no conv bias, in_proj bias (mamba_proj_bias true), out_proj bias (projectors_bias true), "
                 "mamba_rms_norm true with mamba_norm_before_gate false (norm(y silu(z)) in 2 groups of 48, "
                 "times norm.weight), time_step_limit [0.05, 0.3] (clamps at both ends; time_step_min/max "
                 "0.01/0.5 for the dt_bias init only); tied embeddings (no lm_head tensor), eps 1e-5, every "
                 "tensor BF16.",
             config=make_config(vocab_size=128, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=1, head_dim=16, attention_bias=True,
                                mlp_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 1e11},
                                embedding_multiplier=2.0, lm_head_multiplier=0.25, key_multiplier=1.7,
                                attention_in_multiplier=0.6, attention_out_multiplier=1.3, ssm_in_multiplier=0.8,
                                ssm_out_multiplier=1.5, ssm_multipliers=[1.6, 0.4, 1.2, 0.6, 1.1],
                                mlp_multipliers=[0.7, 1.6], mamba_d_ssm=None, mamba_expand=2, mamba_n_heads=6,
                                mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16, mamba_d_conv=3,
                                mamba_chunk_size=4, mamba_conv_bias=False, mamba_proj_bias=True,
                                projectors_bias=True, mamba_rms_norm=True, mamba_norm_before_gate=False,
                                time_step_min=0.01, time_step_max=0.5, time_step_limit=[0.05, 0.3],
                                rms_norm_eps=1e-5, tie_word_embeddings=True, torch_dtype="bfloat16"),
             dtype=lambda name, k: "BF16",
             runs=[("as_trained", 16, None, None), ("normalizer_sink", 16, "sink", None),
                   ("registers_1", 16, None, 1)]),
    ]
