#!/usr/bin/python3
"""Nemotron-H golden cases for make_golden.py: config.json, seeded random weights in HF's names, runs.

What it is: the case list (nemotron_basic, nemotron_list) and a weight maker in NemotronHForCausalLM's
state-dict names, under the published "backbone." prefix or HF's "model." prefix; make_golden.py writes
the files and computes the traces with nemotron_ref.py. What it is not: a trainer (random weights).
References: HF configuration_nemotron_h.py / modeling_nemotron_h.py; tests/golden/README.md (Nemotron-H).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nemotron_ref  # noqa: E402

BASE_CONFIG = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "hidden_dropout": 0.0, "initializer_range": 0.02,
    "max_position_embeddings": 4096, "mamba_hidden_act": "silu", "mlp_hidden_act": "relu2",
    "num_logits_to_keep": 1, "rescale_prenorm_residual": True, "residual_in_fp32": False, "sliding_window": None,
    "time_step_floor": 1e-4, "time_step_max": 0.1, "use_cache": True, "use_mamba_kernels": False,
    "transformers_version": "4.57.0",
}


def make_config(**kw):
    c = dict(BASE_CONFIG)
    c.update(kw)
    return dict(sorted(c.items()))


def make_weights(cfg, rng, prefix):
    """Ordered (name, float64 array) list. Linears 1/sqrt(fan_in), output projections 0.7/sqrt(fan_in),
    q/k 1.2/sqrt(H), biases N(0, 0.1), norms 1 +- U(0.1); dt_bias = inverse softplus of dt ~
    logU[time_step_min, time_step_max] (HF's init), A_log = log U[1, 16], D = 1 +- U(0.2)."""
    c = nemotron_ref.NemotronHConfig(cfg)
    H = c.H
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    norm_w = lambda n: 1.0 + rng.uniform(-0.1, 0.1, size=n)                # noqa: E731
    w = [(prefix + "embeddings.weight", nrm(c.V, H, std=1.0))]
    for i, kind in enumerate(c.kinds):
        p = f"{prefix}layers.{i}."
        m = p + "mixer."
        w.append((p + "norm.weight", norm_w(H)))
        if kind == "*":
            for k, rows, std in (("q", c.nh, 1.2), ("k", c.nkv, 1.2), ("v", c.nkv, 1.0)):
                w.append((m + k + "_proj.weight", nrm(rows * c.hd, H, std=std / math.sqrt(H))))
                if c.attn_bias:
                    w.append((m + k + "_proj.bias", nrm(rows * c.hd, std=0.1)))
            w.append((m + "o_proj.weight", nrm(H, c.nh * c.hd, std=0.7 / math.sqrt(c.nh * c.hd))))
            if c.attn_bias:
                w.append((m + "o_proj.bias", nrm(H, std=0.1)))
        elif kind == "M":
            w += mamba2_weights(m, c, cfg, rng, 0.7 / math.sqrt(c.Di))
        else:
            w.append((m + "up_proj.weight", nrm(c.I, H, std=1.0 / math.sqrt(H))))
            if c.mlp_bias:
                w.append((m + "up_proj.bias", nrm(c.I, std=0.1)))
            w.append((m + "down_proj.weight", nrm(H, c.I, std=0.7 / math.sqrt(c.I))))
            if c.mlp_bias:
                w.append((m + "down_proj.bias", nrm(H, std=0.1)))
    w.append((prefix + "norm_f.weight", norm_w(H)))
    if not c.tie:
        w.append(("lm_head.weight", nrm(c.V, H, std=1.0 / math.sqrt(H))))
    return w


def mamba2_weights(m, c, cfg, rng, out_std):
    """A Mamba-2 mixer's tensors under prefix m (in HF's order): in_proj 1/sqrt(H), conv 1/sqrt(W), biases
    N(0, 0.1) where c.proj_bias / c.conv_bias, dt_bias = inverse softplus of dt ~ logU[time_step_min,
    time_step_max] (HF's init), A_log = log U[1, 16], D = 1 +- U(0.2), norm 1 +- U(0.1), out_proj N(0, out_std).
    Shared by golden_granite.py."""
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    H, nh, rows = c.H, c.mh, c.Di + c.conv_dim + c.mh
    w = [(m + "in_proj.weight", nrm(rows, H, std=1.0 / math.sqrt(H)))]
    if c.proj_bias:
        w.append((m + "in_proj.bias", nrm(rows, std=0.1)))
    w.append((m + "conv1d.weight", nrm(c.conv_dim, 1, c.W, std=1.0 / math.sqrt(c.W))))
    if c.conv_bias:
        w.append((m + "conv1d.bias", nrm(c.conv_dim, std=0.1)))
    lo, hi = math.log(cfg["time_step_min"]), math.log(cfg["time_step_max"])
    dt = np.exp(rng.uniform(lo, hi, size=nh))
    w += [(m + "dt_bias", dt + np.log(-np.expm1(-dt))),
          (m + "A_log", np.log(rng.uniform(1.0, 16.0, size=nh))),
          (m + "D", 1.0 + rng.uniform(-0.2, 0.2, size=nh)),
          (m + "norm.weight", 1.0 + rng.uniform(-0.1, 0.1, size=c.Di)),
          (m + "out_proj.weight", nrm(H, c.Di, std=out_std))]
    if c.proj_bias:
        w.append((m + "out_proj.bias", nrm(H, std=0.1)))
    return w


def case_specs():
    """Like make_golden.case_specs(), read with nemotron_ref.NemotronHRef."""
    common = dict(ref=nemotron_ref.NemotronHRef, make_weights=make_weights, shards=1)
    return [
        dict(common, name="nemotron_basic", seed=808, weights=dict(prefix="backbone."),
             doc="Nemotron-H: hybrid_override_pattern \"M-M*-M-\" (Mamba-2 layers 0,2,5; attention 4; MLP 1,3,6), "
                 "published \"backbone.\" names, H 32, V 96, attention nh 4 / nkv 2 with head_dim 16 given (nh*hd "
                 "64 != H), NoPE; Mamba-2 with 8 heads of mamba_head_dim 8 (Di 64), n_groups 2 (heads 0-3 use "
                 "group 0; gated norm in 2 groups of 32 channels), N 8, conv_kernel 4, chunk_size 8 (T 20 spans "
                 "3 chunks), use_conv_bias true, use_bias false, time_step_limit [0, Infinity] (bare Infinity), "
                 "time_step_min 0.02 so that the slow path's lower dt clamp changes some head-token values; "
                 "relu2 MLP (I 64) without bias, untied lm_head, eps 1e-6, all F32.",
             config=make_config(vocab_size=96, hidden_size=32, num_hidden_layers=7,
                                hybrid_override_pattern="M-M*-M-", num_attention_heads=4, num_key_value_heads=2,
                                head_dim=16, attention_bias=False, intermediate_size=64, mlp_bias=False,
                                mamba_num_heads=8, mamba_head_dim=8, n_groups=2, ssm_state_size=8, conv_kernel=4,
                                expand=2, chunk_size=8, use_conv_bias=True, use_bias=False, mamba_proj_bias=False,
                                time_step_min=0.02, time_step_limit=[0.0, math.inf], layer_norm_epsilon=1e-6,
                                tie_word_embeddings=False, torch_dtype="float32"),
             dtype=lambda name, k: "F32",
             runs=[("as_trained", 20, None, None), ("normalizer_softmax1", 20, "softmax1", None),
                   ("registers_2", 20, None, 2)]),
        dict(common, name="nemotron_list", seed=909, weights=dict(prefix="model."),
             doc="Nemotron-H: layers_block_type [\"attention\", \"mamba\", \"mlp\", \"mamba\"] (legacy names; "
                 "attention is layer 0), HF's \"model.\" names, H 48, V 128, nh 4 / nkv 1 (MQA), head_dim 12, "
                 "attention_bias false (HF's NemotronHAttention has no biases), mlp_bias true (up/down biases, "
                 "I 80); Mamba-2 with 6 heads "
                 "of mamba_head_dim 16 (Di 96, while expand 1 would say 48: Di ignores expand), n_groups 1 (one "
                 "norm group of 96), N 16, conv_kernel 3, chunk_size 4, use_conv_bias false, use_bias true "
                 "(in_proj.bias, out_proj.bias) beside a stale mamba_proj_bias false (use_bias wins), "
                 "time_step_min 0.001, time_step_limit [0, Infinity]; tied embeddings (no lm_head tensor), "
                 "eps 1e-5, every tensor BF16.",
             config=make_config(vocab_size=128, hidden_size=48, num_hidden_layers=4,
                                layers_block_type=["attention", "mamba", "mlp", "mamba"], num_attention_heads=4,
                                num_key_value_heads=1, head_dim=12, attention_bias=False, intermediate_size=80,
                                mlp_bias=True, mamba_num_heads=6, mamba_head_dim=16, n_groups=1, ssm_state_size=16,
                                conv_kernel=3, expand=1, chunk_size=4, use_conv_bias=False, use_bias=True,
                                mamba_proj_bias=False, time_step_min=0.001, time_step_limit=[0.0, math.inf],
                                layer_norm_epsilon=1e-5, tie_word_embeddings=True, torch_dtype="bfloat16"),
             dtype=lambda name, k: "BF16",
             runs=[("as_trained", 16, None, None), ("normalizer_sink", 16, "sink", None),
                   ("registers_1", 16, None, 1)]),
    ]


def clamp_counts(ref, trace):
    """(changed by the time_step_min clamp, total) over the head-token dt values of a trace: dt equal to the
    floor where the softplus output was below it is recognised as dt == time_step_min exactly."""
    d = trace["ssm_delta"][:, :, ::ref.cfg.P]                              # (T, M_n, nh)
    return int(np.sum(d == ref.cfg.dt_floor)), int(d.size)
