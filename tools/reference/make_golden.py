#!/usr/bin/python3
"""Generates the golden test data under tests/golden/: tiny random Jamba checkpoints and their traces.

What it is: own safetensors and config.json writers (no C++ code involved), a seeded random init per
case, and the expected trace of every run computed by jamba_ref.py from the files as written (so the
stored dtype rounding is part of the expectation). What it is not: a trainer; the weights are random.
References: jamba-spec.md §1-§3 (checkpoint layout, init §3.12), trace-format.md §1-§3 (extensions, trace).

Usage: /usr/bin/python3 tools/reference/make_golden.py [--out tests/golden]
       /usr/bin/python3 tools/reference/make_golden.py --zamba2 DIR   (only the Zamba2 cases, into DIR: they stay
       out of tests/golden until the engine reads Zamba2; check_ref.py writes them into a temporary folder)
Deterministic: rerunning reproduces every file byte for byte.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bamba_ref  # noqa: E402
import golden_falcon  # noqa: E402
import golden_granite  # noqa: E402
import golden_nemotron  # noqa: E402
import jamba_ref  # noqa: E402

# ----------------------------------------------------------------------------------------------
# safetensors writer
# ----------------------------------------------------------------------------------------------


def to_bf16_bits(a):
    """float -> bf16 bit pattern with round-to-nearest-even (finite inputs)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype("<u2")


def encode(arr, dtype):
    if dtype == "F32":
        return np.ascontiguousarray(arr, "<f4").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(arr, "<f2").tobytes()
    if dtype == "BF16":
        return to_bf16_bits(arr).tobytes()
    if dtype == "I32":
        return np.ascontiguousarray(arr, "<i4").tobytes()
    if dtype == "I64":
        return np.ascontiguousarray(arr, "<i8").tobytes()
    raise ValueError(dtype)


def write_safetensors(path, entries, metadata=None):
    """entries: list of (name, dtype, array). Data is laid out contiguously in list order, offsets
    start at 0; the JSON header is padded with spaces to a multiple of 8 bytes."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dt, arr in entries:
        b = encode(arr, dt)
        header[name] = {"dtype": dt, "shape": [int(s) for s in np.shape(arr)], "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    return off


# ----------------------------------------------------------------------------------------------
# config + random weights
# ----------------------------------------------------------------------------------------------

BASE_CONFIG = {
    "architectures": ["JambaForCausalLM"], "model_type": "jamba", "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "hidden_act": "silu",
    "initializer_range": 0.02, "max_position_embeddings": 4096, "num_logits_to_keep": 1,
    "output_router_logits": False, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "use_cache": True, "use_mamba_kernels": False, "transformers_version": "4.44.0",
}


def make_config(**kw):
    c = dict(BASE_CONFIG)
    c.update(kw)
    return dict(sorted(c.items()))


def inv_softplus(y):
    return y + np.log(-np.expm1(-y))


def attention_weights(p, c, nrm):
    """q/k: N(0, 1.2/sqrt(H)) (attention logits with std about 1.5), v: 1/sqrt(H), o: 0.7/sqrt(H)."""
    H = c.H
    return [(p + "self_attn.q_proj.weight", nrm(c.nh * c.hd, H, std=1.2 / math.sqrt(H))),
            (p + "self_attn.k_proj.weight", nrm(c.nkv * c.hd, H, std=1.2 / math.sqrt(H))),
            (p + "self_attn.v_proj.weight", nrm(c.nkv * c.hd, H, std=1.0 / math.sqrt(H))),
            (p + "self_attn.o_proj.weight", nrm(H, c.nh * c.hd, std=0.7 / math.sqrt(H)))]


def dense_mlp_weights(f, c, nrm):
    """Gated-SiLU MLP under prefix f: gate/up 1/sqrt(H), down 0.7/sqrt(I)."""
    H, I = c.H, c.I
    return [(f + "gate_proj.weight", nrm(I, H, std=1.0 / math.sqrt(H))),
            (f + "up_proj.weight", nrm(I, H, std=1.0 / math.sqrt(H))),
            (f + "down_proj.weight", nrm(H, I, std=0.7 / math.sqrt(I)))]


def make_weights(cfg, rng, fused_layers=(), sinks_layers=(), router_tie=None):
    """Ordered list of (name, float64 array). Scales keep activations O(1) with non-trivial attention."""
    c = jamba_ref.JambaConfig(cfg)
    H, I, V, E, Di, N, W, R = c.H, c.I, c.V, c.E, c.Di, c.N, c.W, c.R
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    norm_w = lambda n: 1.0 + rng.uniform(-0.1, 0.1, size=n)                # noqa: E731
    w = [("model.embed_tokens.weight", nrm(V, H, std=1.0))]
    if c.n_reg_trained:
        w.append(("model.register_tokens", nrm(c.n_reg_trained, H, std=1.0)))
    for i in range(c.L):
        p = f"model.layers.{i}."
        w.append((p + "input_layernorm.weight", norm_w(H)))
        if c.is_attn[i]:
            w += attention_weights(p, c, nrm)
            if i in sinks_layers:
                s = rng.normal(0.0, 1.5, size=c.nh)
                s[0] = 3.0                                                   # one strong sink head
                w.append((p + "self_attn.sinks", s))
        else:
            m = p + "mamba."
            w.append((m + "in_proj.weight", nrm(2 * Di, H, std=1.0 / math.sqrt(H))))
            if c.proj_bias:
                w.append((m + "in_proj.bias", nrm(2 * Di, std=0.1)))
            w.append((m + "conv1d.weight", nrm(Di, 1, W, std=1.0 / math.sqrt(W))))
            if c.conv_bias:
                w.append((m + "conv1d.bias", nrm(Di, std=0.1)))
            dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), size=Di))
            w += [(m + "x_proj.weight", nrm(R + 2 * N, Di, std=1.0 / math.sqrt(Di))),
                  (m + "dt_layernorm.weight", norm_w(R)),
                  (m + "b_layernorm.weight", norm_w(N)),
                  (m + "c_layernorm.weight", norm_w(N)),
                  (m + "dt_proj.weight", rng.uniform(-1, 1, size=(Di, R)) / math.sqrt(R)),
                  (m + "dt_proj.bias", inv_softplus(dt)),
                  (m + "A_log", np.log(np.arange(1, N + 1, dtype=np.float64))[None, :] + nrm(Di, N, std=0.1)),
                  (m + "D", 1.0 + rng.uniform(-0.2, 0.2, size=Di)),
                  (m + "out_proj.weight", nrm(H, Di, std=0.7 / math.sqrt(Di)))]
            if c.proj_bias:
                w.append((m + "out_proj.bias", nrm(H, std=0.1)))
        w.append((p + "pre_ff_layernorm.weight", norm_w(H)))
        f = p + "feed_forward."
        if c.is_moe[i]:
            router = nrm(E, H, std=2.0 / math.sqrt(H))
            if router_tie is not None and router_tie[0] == i:               # exact probability ties
                router[router_tie[2]] = router[router_tie[1]]
            w.append((f + "router.weight", router))
            ex = [(nrm(I, H, std=1.0 / math.sqrt(H)), nrm(I, H, std=1.0 / math.sqrt(H)),
                   nrm(H, I, std=0.7 / math.sqrt(I))) for _ in range(E)]
            if i in fused_layers:
                w.append((f + "experts.gate_up_proj", np.stack([np.concatenate([g, u]) for g, u, _ in ex])))
                w.append((f + "experts.down_proj", np.stack([d for _, _, d in ex])))
            else:
                for e, (g, u, d) in enumerate(ex):
                    w += [(f + f"experts.{e}.gate_proj.weight", g), (f + f"experts.{e}.up_proj.weight", u),
                          (f + f"experts.{e}.down_proj.weight", d)]
        else:
            w += dense_mlp_weights(f, c, nrm)
    w.append(("model.final_layernorm.weight", norm_w(H)))
    if not c.tie:
        w.append(("lm_head.weight", nrm(V, H, std=1.0 / math.sqrt(H))))
    return w


# ----------------------------------------------------------------------------------------------
# the cases
# ----------------------------------------------------------------------------------------------

def case_specs():
    """Each: name, seed, config, weight options, dtype rule, shards, runs (name, T, normalizer, registers)."""
    return [
        dict(name="gqa_basic", seed=101,
             doc="GQA nh 4 / nkv 2, untied head, attention layers 1,3, MoE layers 0,2 (E 4, K 2), explicit "
                 "dt rank 8, no proj bias, all F32. Router rows 1 and 3 of layer 0 are identical: exact "
                 "probability ties, broken by the lower expert index.",
             config=make_config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                                expert_layer_offset=0, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                                mamba_dt_rank=8, mamba_conv_bias=True, mamba_proj_bias=False,
                                rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="float32"),
             weights=dict(router_tie=(0, 1, 3)), dtype=lambda name, k: "F32", shards=1,
             runs=[("as_trained", 12, None, None), ("normalizer_softmax1", 12, "softmax1", None),
                   ("normalizer_sink", 12, "sink", None), ("registers_2", 12, None, 2),
                   ("long", 16, None, None)]),
        dict(name="mqa_tied_bias", seed=202,
             doc="MQA (nkv 1), tied embeddings with no lm_head tensor, mamba_proj_bias and mamba_conv_bias "
                 "true, dt rank \"auto\" (= 3), d_conv 3, K 1, every tensor BF16.",
             config=make_config(vocab_size=128, hidden_size=48, intermediate_size=80, num_hidden_layers=4,
                                num_attention_heads=4, num_key_value_heads=1, num_experts=4, num_experts_per_tok=1,
                                attn_layer_period=4, attn_layer_offset=2, expert_layer_period=2,
                                expert_layer_offset=1, mamba_d_state=16, mamba_d_conv=3, mamba_expand=2,
                                mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=True,
                                rms_norm_eps=1e-6, tie_word_embeddings=True, torch_dtype="bfloat16"),
             weights={}, dtype=lambda name, k: "BF16", shards=1,
             runs=[("as_trained", 14, None, None), ("registers_3", 14, None, 3),
                   ("softmax1_registers_1", 14, "softmax1", 1)]),
        dict(name="mixed_sharded", seed=303,
             doc="GQA nh 8 / nkv 2 (given explicitly), H 64, 8 layers: attention layers 3,7, MoE layers "
                 "1,4,7 (E 4, K 2; layer 7 is attention + MoE), mamba_expand 1 (Di = H). Per-tensor dtypes cycle F32/F16/BF16; three "
                 "shards with model.safetensors.index.json; layer 4 stores fused experts "
                 "(experts.gate_up_proj (E,2I,H), experts.down_proj (E,H,I)), layers 1 and 7 per-expert names.",
             config=make_config(vocab_size=128, hidden_size=64, intermediate_size=64, num_hidden_layers=8,
                                num_attention_heads=8, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                attn_layer_period=4, attn_layer_offset=3, expert_layer_period=3,
                                expert_layer_offset=1, mamba_d_state=16, mamba_d_conv=4, mamba_expand=1,
                                mamba_dt_rank=4, mamba_conv_bias=True, mamba_proj_bias=False,
                                rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16"),
             weights=dict(fused_layers=(4,)), dtype=lambda name, k: ("F32", "F16", "BF16")[k % 3], shards=3,
             runs=[("as_trained", 12, None, None), ("normalizer_sink", 12, "sink", None)]),
        dict(name="dense_no_moe", seed=404,
             doc="num_experts 1 (every feed-forward dense), mamba_conv_bias false, num_key_value_heads null "
                 "(= nh = 4), attention layer 1 of 3, d_state 4, eps 1e-5, F32.",
             config=make_config(vocab_size=64, hidden_size=32, intermediate_size=96, num_hidden_layers=3,
                                num_attention_heads=4, num_key_value_heads=None, num_experts=1,
                                num_experts_per_tok=1, attn_layer_period=3, attn_layer_offset=1,
                                expert_layer_period=2, expert_layer_offset=1, mamba_d_state=4, mamba_d_conv=4,
                                mamba_expand=2, mamba_dt_rank=4, mamba_conv_bias=False, mamba_proj_bias=False,
                                rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="float32"),
             weights={}, dtype=lambda name, k: "F32", shards=1,
             runs=[("as_trained", 10, None, None), ("normalizer_softmax1", 10, "softmax1", None),
                   ("registers_1", 10, None, 1)]),
        dict(name="extensions", seed=505,
             doc="attention_normalizer \"softmax1\" in config.json, self_attn.sinks on layer 3 (of attention "
                 "layers 1,3), num_register_tokens 2 with model.register_tokens; attention layers are also "
                 "the MoE layers (E 4, K 2), F32.",
             config=make_config(vocab_size=80, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                                attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                                expert_layer_offset=1, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2,
                                mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=False,
                                rms_norm_eps=1e-6, tie_word_embeddings=False, torch_dtype="float32",
                                attention_normalizer="softmax1", num_register_tokens=2),
             weights=dict(sinks_layers=(3,)), dtype=lambda name, k: "F32", shards=1,
             runs=[("as_trained", 12, None, None), ("normalizer_softmax", 12, "softmax", None),
                   ("normalizer_softmax1", 12, "softmax1", None), ("normalizer_sink", 12, "sink", None),
                   ("registers_0", 12, None, 0), ("registers_4", 12, None, 4)]),
    ]


# ----------------------------------------------------------------------------------------------
# Bamba (Mamba-2 + attention; Hugging Face model_type "bamba", state-dict names of modeling_bamba.py)
# ----------------------------------------------------------------------------------------------

BAMBA_BASE_CONFIG = {
    "architectures": ["BambaForCausalLM"], "model_type": "bamba", "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "hidden_act": "silu",
    "initializer_range": 0.02, "max_position_embeddings": 4096, "num_logits_to_keep": 1,
    "use_cache": True, "z_loss_coefficient": 0.0, "transformers_version": "4.56.0",
}


def make_bamba_config(**kw):
    c = dict(BAMBA_BASE_CONFIG)
    c.update(kw)
    return dict(sorted(c.items()))


def make_bamba_weights(cfg, rng):
    """Ordered list of (name, float64 array) in BambaForCausalLM's state-dict names. dt_bias and A_log as
    HF's Mamba-2 init: dt_bias = inverse softplus of dt ~ logU[time_step_min, time_step_max], A = U[1, 16]."""
    c = bamba_ref.BambaConfig(cfg)
    H, V, Di, nh = c.H, c.V, c.Di, c.mh
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    norm_w = lambda n: 1.0 + rng.uniform(-0.1, 0.1, size=n)                # noqa: E731
    w = [("model.embed_tokens.weight", nrm(V, H, std=1.0))]
    for i in range(c.L):
        p = f"model.layers.{i}."
        w.append((p + "input_layernorm.weight", norm_w(H)))
        if c.is_attn[i]:
            w += attention_weights(p, c, nrm)
        else:
            m = p + "mamba."
            w.append((m + "in_proj.weight", nrm(Di + c.conv_dim + nh, H, std=1.0 / math.sqrt(H))))
            if c.proj_bias:
                w.append((m + "in_proj.bias", nrm(Di + c.conv_dim + nh, std=0.1)))
            w.append((m + "conv1d.weight", nrm(c.conv_dim, 1, c.W, std=1.0 / math.sqrt(c.W))))
            if c.conv_bias:
                w.append((m + "conv1d.bias", nrm(c.conv_dim, std=0.1)))
            lo, hi = math.log(cfg["time_step_min"]), math.log(cfg["time_step_max"])
            dt = np.exp(rng.uniform(lo, hi, size=nh))
            w += [(m + "dt_bias", inv_softplus(dt)),
                  (m + "A_log", np.log(rng.uniform(1.0, 16.0, size=nh))),
                  (m + "D", 1.0 + rng.uniform(-0.2, 0.2, size=nh)),
                  (m + "norm.weight", norm_w(Di)),
                  (m + "out_proj.weight", nrm(H, Di, std=0.7 / math.sqrt(Di)))]
            if c.proj_bias:
                w.append((m + "out_proj.bias", nrm(H, std=0.1)))
        w.append((p + "pre_ff_layernorm.weight", norm_w(H)))
        f = p + "feed_forward."
        w += dense_mlp_weights(f, c, nrm)
    w.append(("model.final_layernorm.weight", norm_w(H)))
    if not c.tie:
        w.append(("lm_head.weight", nrm(V, H, std=1.0 / math.sqrt(H))))
    return w


def bamba_case_specs():
    """Like case_specs(), read with bamba_ref.BambaRef."""
    common = dict(ref=bamba_ref.BambaRef, make_weights=make_bamba_weights, weights={}, shards=1)
    return [
        dict(common, name="bamba_basic", seed=606,
             doc="Bamba: L 4, attention layer 2 only (nh 4 / nkv 2, hd 8, RoPE on the first 4 dims, "
                 "rope_theta 10000 as a top-level field), Mamba-2 layers 0,1,3 with Di 64, 8 heads of P 8, "
                 "G 2 groups of N 8 (heads 0-3 use group 0, heads 4-7 group 1), d_conv 4, chunk 8 (T 20 "
                 "spans 3 chunks), conv bias, no proj bias, time_step_limit [0, Infinity] (bare Infinity in "
                 "config.json), untied lm_head, all F32.",
             config=make_bamba_config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, attn_layer_indices=[2],
                                      mamba_n_heads=8, mamba_d_head="auto", mamba_n_groups=2, mamba_d_state=8,
                                      mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=8, mamba_conv_bias=True,
                                      mamba_proj_bias=False, time_step_min=0.001, time_step_max=0.1,
                                      time_step_limit=[0.0, math.inf], rope_theta=10000.0, rms_norm_eps=1e-6,
                                      tie_word_embeddings=False, torch_dtype="float32"),
             dtype=lambda name, k: "F32",
             runs=[("as_trained", 20, None, None), ("normalizer_softmax1", 20, "softmax1", None),
                   ("registers_2", 20, None, 2)]),
        dict(common, name="bamba_clamped", seed=707,
             doc="Bamba: L 3, attention layers 0 and 2 (nh 4 / nkv 4 given as null, hd 12, RoPE on 6 dims, "
                 "rope_parameters {default, theta 500000}), Mamba-2 layer 1 with H 48, Di 96, 6 heads of "
                 "P 16 (d_head given), G 1, N 16, d_conv 3, chunk 4, mamba_conv_bias false, mamba_proj_bias "
                 "true (in_proj.bias, out_proj.bias), time_step_limit [0.05, 0.3], which clamps at both ends: of "
                 "the 6 x 16 head-token dt values of each run, the softplus output before the clamp is "
                 "below 0.05 for 27-28 and above 0.3 for 17-18 (range 0.0016-1.40), time_step_min/max "
                 "0.01/0.5 for the dt_bias init; tied "
                 "embeddings (no lm_head tensor), eps 1e-5, every tensor BF16.",
             config=make_bamba_config(vocab_size=128, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=None, attn_layer_indices=[0, 2],
                                      mamba_n_heads=6, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=16,
                                      mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=4, mamba_conv_bias=False,
                                      mamba_proj_bias=True, time_step_min=0.01, time_step_max=0.5,
                                      time_step_limit=[0.05, 0.3],
                                      rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
                                      rms_norm_eps=1e-5, tie_word_embeddings=True, torch_dtype="bfloat16"),
             dtype=lambda name, k: "BF16",
             runs=[("as_trained", 16, None, None), ("normalizer_sink", 16, "sink", None),
                   ("registers_1", 16, None, 1)]),
    ]


TRACE_DTYPES = {"token_ids": "I32", "router_topk": "I32", "nonfinite_layer": "I32",
                "kv_cache_bytes": "I64", "ssm_state_bytes": "I64"}


def write_checkpoint(folder, spec):
    rng = np.random.default_rng(spec["seed"])
    cfg = spec["config"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    weights = spec.get("make_weights", make_weights)(cfg, rng, **spec["weights"])
    entries = [(name, spec["dtype"](name, k), arr) for k, (name, arr) in enumerate(weights)]
    if spec["shards"] == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), entries, {"format": "pt"})
        return
    n = spec["shards"]
    sizes = np.cumsum([len(encode(a, d)) for _, d, a in entries])
    cut = [int(np.searchsorted(sizes, sizes[-1] * j / n)) for j in range(1, n)]
    groups = np.split(np.arange(len(entries)), cut)
    weight_map, total = {}, 0
    for j, g in enumerate(groups):
        fname = f"model-{j + 1:05d}-of-{n:05d}.safetensors"
        total += write_safetensors(os.path.join(folder, fname), [entries[k] for k in g], {"format": "pt"})
        weight_map.update({entries[k][0]: fname for k in g})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
        f.write("\n")


def format_runs(case, doc, runs):
    """runs.json with one line per run (json.dumps of each run object)."""
    body = ",\n".join("  " + json.dumps(r) for r in runs)
    return (f'{{\n "case": {json.dumps(case)},\n "description": {json.dumps(doc)},\n'
            f' "runs": [\n{body}\n ]\n}}\n')


RTOL, ATOL_SCALE = 1e-4, 1e-5      # the tolerance README.md recommends to the C++ tests


def spread(a, b):
    """(max |a-b|, max |a-b| / max(1, max|b|), max |a-b| / (RTOL |b| + ATOL_SCALE max(1, max|b|)))."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    d = np.abs(a - b)
    scale = max(1.0, float(np.max(np.abs(b))))
    return float(d.max()), float(d.max() / scale), float(np.max(d / (RTOL * np.abs(b) + ATOL_SCALE * scale)))


def router_margin(tr):
    """Smallest probability gap that decides router_topk (order inside the top k and the k-th vs the
    next), ignoring exact ties (deliberate, broken by index). inf when there is no MoE layer."""
    if "router_probs" not in tr:
        return np.inf
    s = -np.sort(-tr["router_probs"], axis=-1)
    K = tr["router_topk"].shape[-1]
    gaps = (s[..., :-1] - s[..., 1:])[..., :K]
    gaps = gaps[gaps > 0]
    return float(gaps.min()) if gaps.size else np.inf


def write_case(out_root, spec, spreads, score_margins=None):
    """Writes one case folder (checkpoint, expected traces, runs.json) under out_root. Folds the float32 spread of
    the Jamba cases into spreads, and a case's own routing-score margin (spec["router_margin"], a router that is
    not a softmax) into score_margins; returns (summary rows, smallest router gap)."""
    import hashlib
    folder = os.path.join(out_root, spec["name"])
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(os.path.join(folder, "expected"))
    write_checkpoint(folder, spec)
    ref_cls = spec.get("ref", jamba_ref.JambaRef)
    model = ref_cls.load(folder)                                        # read back: dtype rounding included
    model32 = ref_cls.load(folder, dtype=np.float32)
    with open(os.path.join(folder, "config.json"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    run_list, summary, min_margin = [], [], np.inf
    for k, (rname, T, norm, regs) in enumerate(spec["runs"]):
        rng = np.random.default_rng(spec["seed"] * 100 + T)             # same T ⇒ same ids within a case
        ids = [int(v) for v in rng.integers(0, model.cfg.V, size=T)]
        tr = model.run(ids, norm, regs, path="sequence")
        st = model.run(ids, norm, regs, path="step")
        for name in tr:                                               # prefill == step-by-step
            d = np.max(np.abs(tr[name].astype(np.float64) - st[name].astype(np.float64)), initial=0.0)
            assert d <= 1e-10 * max(1.0, float(np.max(np.abs(tr[name])))), (spec["name"], rname, name, d)
        t32 = model32.run(ids, norm, regs, path="sequence")
        for name in tr:                                               # f32_spread.json: Jamba cases
            if name in TRACE_DTYPES or ref_cls is not jamba_ref.JambaRef:
                continue
            new = spread(t32[name], tr[name])
            old = spreads.get(name, (0.0, 0.0, 0.0))
            spreads[name] = tuple(max(x, y) for x, y in zip(old, new))
        if "router_margin" in spec:                                       # a router that is not a softmax
            margin = spec["router_margin"](model, ids, norm, regs)
            assert margin >= 2e-5, (spec["name"], rname, "routing score near-tie", margin)
            if score_margins is not None:
                score_margins[spec["name"]] = min(score_margins.get(spec["name"], np.inf), margin)
        else:
            margin = router_margin(tr)
            assert margin >= 2e-5, (spec["name"], rname, "router near-tie", margin)
            min_margin = min(min_margin, margin)
        entries = [(name, TRACE_DTYPES.get(name, "F32"), tr[name]) for name in jamba_ref.TRACE_ORDER if name in tr]
        n_reg = model.cfg.n_reg_trained if regs is None else regs
        write_safetensors(os.path.join(folder, "expected", rname + ".safetensors"), entries, {
            "format_version": "1", "checkpoint": spec["name"], "config_sha256": sha,
            "normalizer": norm or "as-trained", "registers": str(n_reg), "adapter": "",
            "backend": "reference",
            "engine_version": f"tools/reference/{ref_cls.__module__}.py (float64)"})
        run_list.append({"name": rname, "token_ids": ids, "normalizer": norm, "registers": regs})
        summary.append((spec["name"], rname, T, norm, regs, n_reg,
                        float(np.max(tr["resid_max_abs"])), float(np.std(tr["logits"])),
                        float(np.min(tr["attn_entropy_norm"])) if "attn_entropy_norm" in tr else None,
                        float(np.min(tr["attn_mass"])) if "attn_mass" in tr else None))
    with open(os.path.join(folder, "expected", "runs.json"), "w") as f:
        f.write(format_runs(spec["name"], spec["doc"], run_list))
    return summary, min_margin


def print_summary(summary):
    print("case / run / T / normalizer / registers(requested→used) / max|resid| / std(logits) / "
          "min entropy_norm / min mass")
    for s in summary:
        print("  ", s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                  "tests", "golden"))
    ap.add_argument("--zamba2", metavar="DIR",
                    help="write only the Zamba2 cases (golden_zamba2.py) into DIR; nothing under --out is touched")
    args = ap.parse_args()
    if args.zamba2:                                                   # pending the engine: never into tests/golden
        import golden_zamba2
        summary = []
        os.makedirs(args.zamba2, exist_ok=True)
        for spec in golden_zamba2.case_specs():
            summary += write_case(os.path.abspath(args.zamba2), spec, {})[0]
        print_summary(summary)
        return
    out_root = os.path.abspath(args.out)
    os.makedirs(out_root, exist_ok=True)
    spreads, min_margin, score_margins = {}, np.inf, {}
    summary = []
    for spec in (case_specs() + bamba_case_specs() + golden_nemotron.case_specs() + golden_granite.case_specs()
                 + golden_falcon.case_specs()):
        rows, margin = write_case(out_root, spec, spreads, score_margins)
        summary += rows
        min_margin = min(min_margin, margin)
    print_summary(summary)
    print(f"smallest router probability gap deciding router_topk (exact ties excluded): {min_margin:.2e}")
    for name, m in score_margins.items():
        print(f"{name}: smallest routing-score gap deciding a group or an expert (all positions): {m:.2e}")
    print("float32 evaluation of the reference vs float64: max|d|, max|d|/max(1,max|ref|), "
          f"max|d|/(rtol|ref| + atol_scale*max(1,max|ref|)) with rtol {RTOL}, atol_scale {ATOL_SCALE}:")
    for name in jamba_ref.TRACE_ORDER:
        if name in spreads:
            a, r, q = spreads[name]
            print(f"  {name:18s} {a:.2e}  {r:.2e}  {q:.3f}")
    with open(os.path.join(out_root, "f32_spread.json"), "w") as f:
        body = {k: {"max_abs": float(f"{v[0]:.2e}"), "max_abs_over_scale": float(f"{v[1]:.2e}"),
                    "fraction_of_recommended_tolerance": float(f"{v[2]:.2e}")} for k, v in sorted(spreads.items())}
        json.dump({"note": "reference evaluated in float32 vs the float64 expectation, worst over all runs",
                   "rtol": RTOL, "atol_scale": ATOL_SCALE, "router_min_gap": float(f"{min_margin:.2e}"),
                   "tensors": body}, f, indent=1)
        f.write("\n")

if __name__ == "__main__":
    main()
