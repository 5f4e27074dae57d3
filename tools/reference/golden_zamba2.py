#!/usr/bin/python3
"""Zamba2 golden cases for make_golden.py --zamba2 DIR: config.json, seeded random weights in HF's names, runs.

What it is: the case list (zamba2_basic, zamba2_variant) and a weight maker in Zamba2ForCausalLM's state-dict
names, with each shared block stored once, under its first hybrid layer (as save_pretrained's tie de-duplication
and the published checkpoints store it); make_golden.py writes the files and computes the traces with
zamba2_ref.py. These cases are NOT written into tests/golden by default (the C++ engine cannot read Zamba2 yet
and its golden test runs every folder there): make_golden.py writes them only with --zamba2 DIR, and
check_ref.py generates them into a temporary folder.
What it is not: a trainer (random weights).
References: HF configuration_zamba2.py / modeling_zamba2.py; tools/reference/ZAMBA2.md.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_nemotron  # noqa: E402
import zamba2_ref  # noqa: E402

BASE_CONFIG = {
    "architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "pad_token_id": 0, "initializer_range": 0.02, "max_position_embeddings": 4096,
    "num_logits_to_keep": 1, "time_step_floor": 1e-4, "time_step_max": 0.1, "use_cache": True,
    "use_long_context": False, "use_mem_eff_path": False, "transformers_version": "4.57.0",
}


def make_config(**kw):
    c = dict(BASE_CONFIG)
    c.update(kw)
    return dict(sorted(c.items()))


def make_weights(cfg, rng):
    """Ordered (name, float64 array) list. Embeddings N(0, 1); shared q/k N(0, 1.1/sqrt(2H)) (attention logits
    with std about 1.5 under the (hd/2)^-0.5 scale), v 1/sqrt(2H), o 0.7/sqrt(nh hd); gate_up 1/sqrt(H), down
    0.7/sqrt(I); adapters A N(0, 1/sqrt(fan_in)), B N(0, 0.6/sqrt(r)) (each use's adapter moves its projection by
    about half of the shared weight's); linear 0.8/sqrt(H); Mamba-2 as golden_nemotron.mamba2_weights (conv1d.bias
    always: HF's Zamba2MambaMixer creates it whatever use_conv_bias says); biases N(0, 0.1); norms 1 +- U(0.1)."""
    c = zamba2_ref.Zamba2Config(cfg)
    H, H2 = c.H, 2 * c.H
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    norm_w = lambda n: 1.0 + rng.uniform(-0.1, 0.1, size=n)                # noqa: E731
    adapter = lambda a, n_in, n_out: [(a + "0.weight", nrm(c.rank, n_in, std=1.0 / math.sqrt(n_in))),  # noqa: E731
                                      (a + "1.weight", nrm(n_out, c.rank, std=0.6 / math.sqrt(c.rank)))]
    w = [("model.embed_tokens.weight", nrm(c.V, H, std=1.0))]
    for i, kind in enumerate(c.kinds):
        p = f"model.layers.{i}."
        if kind == "H":
            j = c.hybrid.index(i)
            if j < c.nmb:                                                 # the block's source layer
                s = p + "shared_transformer."
                w.append((s + "input_layernorm.weight", norm_w(H2)))
                for k, rows, std in (("q", c.nh, 1.1), ("k", c.nkv, 1.1), ("v", c.nkv, 1.0)):
                    w.append((s + f"self_attn.{k}_proj.weight", nrm(rows * c.hd, H2, std=std / math.sqrt(H2))))
                w.append((s + "self_attn.o_proj.weight", nrm(H, c.nh * c.hd, std=0.7 / math.sqrt(c.nh * c.hd))))
                uses = range(j, len(c.hybrid), c.nmb)
                if c.attn_adapter:
                    for k in "qkv":
                        for u in uses:
                            w += adapter(s + f"self_attn.linear_{k}_adapter_list.{u}.", H2, H2)
                w.append((s + "pre_ff_layernorm.weight", norm_w(H)))
                w.append((s + "feed_forward.gate_up_proj.weight", nrm(2 * c.I, H, std=1.0 / math.sqrt(H))))
                if c.mlp_bias:
                    w.append((s + "feed_forward.gate_up_proj.bias", nrm(2 * c.I, std=0.1)))
                w.append((s + "feed_forward.down_proj.weight", nrm(H, c.I, std=0.7 / math.sqrt(c.I))))
                if c.mlp_bias:
                    w.append((s + "feed_forward.down_proj.bias", nrm(H, std=0.1)))
                for u in uses:
                    w += adapter(s + f"feed_forward.gate_up_proj_adapter_list.{u}.", H, 2 * c.I)
            w.append((p + "linear.weight", nrm(H, H, std=0.8 / math.sqrt(H))))
            p += "mamba_decoder."
        w.append((p + "input_layernorm.weight", norm_w(H)))
        w += golden_nemotron.mamba2_weights(p + "mamba.", c, cfg, rng, 0.7 / math.sqrt(c.Di))
    w.append(("model.final_layernorm.weight", norm_w(H)))
    if not c.tie:
        w.append(("lm_head.weight", nrm(c.V, H, std=1.0 / math.sqrt(H))))
    return w


def case_specs():
    """Like make_golden.case_specs(), read with zamba2_ref.Zamba2Ref."""
    common = dict(ref=zamba2_ref.Zamba2Ref, make_weights=make_weights, weights={}, shards=1)
    return [
        dict(common, name="zamba2_basic", seed=1414,
             doc="Zamba2: L 6, layers_block_type [mamba, hybrid, mamba, hybrid, mamba, hybrid] (A_n 3 hybrid uses, "
                 "M_n = L = 6), num_mem_blocks 2 used in rotation by hybrid order (layers 1 and 5 use block 0, "
                 "stored under model.layers.1.shared_transformer; layer 3 uses block 1, stored under "
                 "model.layers.3.shared_transformer), per-use gate_up adapters (rank 4), no attention adapters; "
                 "H 32, V 96, shared attention over the 64-wide concat [h, embeddings] with nh 4 / nkv 2 (head "
                 "dim 2H/nh = 16, scale (16/2)^-0.5), use_mem_rope true (RoPE over all 16 dims, rope_theta "
                 "10000 top-level); gelu MLP I 48 without bias; Mamba-2: mamba_expand 2 (Di 64), 8 heads "
                 "(P 8), mamba_ngroups 1, N 8, d_conv 4, chunk_size 8 (T 20 spans 3 chunks), use_conv_bias true, "
                 "add_bias_linear false, time_step_min 0.02 (the slow path's dt floor changes some head-token "
                 "values), time_step_limit null; untied lm_head, rms_norm_eps 1e-6 (the gated norm keeps HF's "
                 "1e-5), all F32.",
             config=make_config(vocab_size=96, hidden_size=32, num_hidden_layers=6,
                                layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "mamba", "hybrid"],
                                num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                                hidden_act="gelu", num_mem_blocks=2, use_shared_mlp_adapter=True,
                                use_shared_attention_adapter=False, adapter_rank=4, use_mem_rope=True,
                                rope_theta=10000, mamba_expand=2, n_mamba_heads=8, mamba_headdim=8,
                                mamba_ngroups=1, mamba_d_state=8, mamba_d_conv=4, chunk_size=8,
                                use_conv_bias=True, add_bias_linear=False, time_step_min=0.02,
                                time_step_limit=None, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                torch_dtype="float32"),
             dtype=lambda name, k: "F32",
             runs=[("as_trained", 20, None, None), ("normalizer_softmax1", 20, "softmax1", None),
                   ("registers_2", 20, None, 2)]),
        dict(common, name="zamba2_variant", seed=1515,
             doc="Zamba2: L 4, layers_block_type [hybrid, mamba, linear_attention, hybrid] (a hybrid first layer: "
                 "its concat is [e, e]; \"linear_attention\" is HF v5's name for mamba), num_mem_blocks 1 (one "
                 "block, stored under model.layers.0.shared_transformer, used twice with different adapters), "
                 "use_shared_attention_adapter true (per-use q/k/v adapters, rank 6) and the gate_up adapters; "
                 "H 48, V 128, nh 4 with num_key_value_heads null (= 4; head dim 24), use_mem_rope false (no "
                 "positional encoding); gelu MLP with intermediate_size absent (HF's default 4H = 192), "
                 "add_bias_linear true (gate_up/down and in_proj/out_proj "
                 "biases); Mamba-2: mamba_expand 2 (Di 96), 6 heads (P 16), mamba_ngroups 2 (heads 0-2 use B/C "
                 "group 0; gated norm in 2 groups of 48), N 16, d_conv 3, chunk_size 4 (T 16 spans 4 chunks), "
                 "use_conv_bias true, time_step_min 0.01, no time_step_limit key; tie_word_embeddings absent "
                 "(HF's default true: no lm_head tensor), rms_norm_eps 1e-5, "
                 "every tensor BF16.",
             config=make_config(
                 vocab_size=128, hidden_size=48, num_hidden_layers=4,
                 layers_block_type=["hybrid", "mamba", "linear_attention", "hybrid"], num_attention_heads=4,
                 num_key_value_heads=None, hidden_act="gelu", num_mem_blocks=1,
                 use_shared_mlp_adapter=True, use_shared_attention_adapter=True, adapter_rank=6,
                 use_mem_rope=False, mamba_expand=2, n_mamba_heads=6, mamba_ngroups=2, mamba_d_state=16,
                 mamba_d_conv=3, chunk_size=4, use_conv_bias=True, add_bias_linear=True, time_step_min=0.01,
                 rms_norm_eps=1e-5, torch_dtype="bfloat16"),
             dtype=lambda name, k: "BF16",
             runs=[("as_trained", 16, None, None), ("normalizer_sink", 16, "sink", None),
                   ("registers_1", 16, None, 1)]),
    ]


def clamp_counts(ref, trace):
    """(dt values at the time_step_min floor, total) over the head-token dt values of a trace."""
    d = trace["ssm_delta"][:, :, ::ref.cfg.P]                              # (T, M_n, nh)
    return int(np.sum(d == ref.cfg.dt_floor)), int(d.size)
