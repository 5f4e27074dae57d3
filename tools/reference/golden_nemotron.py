#!/usr/bin/python3
"""Nemotron-H golden cases for make_golden.py: config.json, seeded random weights in HF's names, runs.

What it is: the case list (nemotron_basic, nemotron_list, nemotron_moe, nemotron_moe_latent) and a weight
maker in NemotronHForCausalLM's state-dict names, under the published "backbone." prefix or HF's "model."
prefix, with the MoE experts per expert (published) or stacked (HF); make_golden.py writes the files and
computes the traces with nemotron_ref.py. What it is not: a trainer (random weights).
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


def make_weights(cfg, rng, prefix, experts="per_expert"):
    """Ordered (name, float64 array) list. Linears 1/sqrt(fan_in), output projections 0.7/sqrt(fan_in),
    q/k 1.2/sqrt(H), biases N(0, 0.1), norms 1 +- U(0.1); dt_bias = inverse softplus of dt ~
    logU[time_step_min, time_step_max] (HF's init), A_log = log U[1, 16], D = 1 +- U(0.2); MoE layers as
    moe_weights with `experts` "per_expert" (published names) or "stacked" (HF's state dict)."""
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
        elif kind == "E":
            w += moe_weights(m, c, rng, experts)
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


def moe_weights(m, c, rng, layout):
    """An 'E' mixer under prefix m in NVIDIA's module order: experts (up 1/sqrt(Hin), down
    0.7/sqrt(I)/routed_scaling_factor; per expert "experts.{e}.up_proj.weight" or stacked "experts.up_proj"
    (E, I, Hin)), gate.weight N(0, 2/sqrt(H)) (router logits with std about 2, far from uniform),
    gate.e_score_correction_bias N(0, 0.1) (of the order of the sigmoid gaps, so it changes choices),
    shared_experts, fc1/fc2_latent_proj with moe_latent_size; biases N(0, 0.1) iff mlp_bias (none on
    stacked experts: HF's NemotronHExperts has none)."""
    nrm = lambda *s, std: rng.normal(0.0, std, size=s)                     # noqa: E731
    H, E, I, hin = c.H, c.E, c.I_moe, c.Lat or c.H
    ups = [nrm(I, hin, std=1.0 / math.sqrt(hin)) for _ in range(E)]
    downs = [nrm(hin, I, std=0.7 / math.sqrt(I) / c.route_scale) for _ in range(E)]
    w = []
    if layout == "stacked":
        w += [(m + "experts.up_proj", np.stack(ups)), (m + "experts.down_proj", np.stack(downs))]
    else:
        assert layout == "per_expert", layout
        for e in range(E):
            q = f"{m}experts.{e}."
            w.append((q + "up_proj.weight", ups[e]))
            if c.mlp_bias:
                w.append((q + "up_proj.bias", nrm(I, std=0.1)))
            w.append((q + "down_proj.weight", downs[e]))
            if c.mlp_bias:
                w.append((q + "down_proj.bias", nrm(hin, std=0.1)))
    w += [(m + "gate.weight", nrm(E, H, std=2.0 / math.sqrt(H))),
          (m + "gate.e_score_correction_bias", nrm(E, std=0.1))]
    linears = [("shared_experts.up_proj", c.I_sh, H, 1.0), ("shared_experts.down_proj", H, c.I_sh, 0.7)]
    if c.Lat is not None:
        linears += [("fc1_latent_proj", c.Lat, H, 1.0), ("fc2_latent_proj", H, c.Lat, 0.7)]
    for name, rows, cols, gain in linears:
        w.append((m + name + ".weight", nrm(rows, cols, std=gain / math.sqrt(cols))))
        if c.mlp_bias:
            w.append((m + name + ".bias", nrm(rows, std=0.1)))
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
        dict(common, name="nemotron_moe", seed=1212, weights=dict(prefix="backbone.", experts="per_expert"),
             doc="Nemotron-H with MoE: hybrid_override_pattern \"MEM*E-\" (Mamba-2 layers 0,2; MoE 1,4; attention "
                 "3; MLP 5), published \"backbone.\" names with per-expert tensors (mixer.experts.{e}.up_proj.weight "
                 "(40, 32), .down_proj.weight (32, 40)), H 32, V 96, nh 4 / nkv 2, head_dim 8; MoE: n_routed_experts "
                 "8 in n_group 4 groups of 2, topk_group 2, num_experts_per_tok 3, sigmoid router with "
                 "gate.e_score_correction_bias (F32; it changes the choice for some tokens, and the group limit "
                 "excludes experts that would otherwise be chosen), norm_topk_prob true, routed_scaling_factor "
                 "2.5, moe_intermediate_size 40, shared expert moe_shared_expert_intermediate_size 56, no latent "
                 "projection; relu2 MLP intermediate_size 80; mlp_bias false; Mamba-2 8 heads of 8 (Di 64), "
                 "n_groups 2, N 8, conv_kernel 4, chunk_size 8, conv bias, use_bias false, time_step_min 0.02, "
                 "time_step_limit [0, Infinity]; untied lm_head, eps 1e-6; every tensor BF16 except the F32 "
                 "e_score_correction_bias (HF keeps it in float32).",
             config=make_config(vocab_size=96, hidden_size=32, num_hidden_layers=6,
                                hybrid_override_pattern="MEM*E-", num_attention_heads=4, num_key_value_heads=2,
                                head_dim=8, attention_bias=False, intermediate_size=80, mlp_bias=False,
                                n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=3, n_group=4,
                                topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                                moe_intermediate_size=40, moe_shared_expert_intermediate_size=56,
                                moe_latent_size=None, mamba_num_heads=8, mamba_head_dim=8, n_groups=2,
                                ssm_state_size=8, conv_kernel=4, expand=2, chunk_size=8, use_conv_bias=True,
                                use_bias=False, mamba_proj_bias=False, time_step_min=0.02,
                                time_step_limit=[0.0, math.inf], layer_norm_epsilon=1e-6,
                                tie_word_embeddings=False, torch_dtype="bfloat16"),
             dtype=lambda name, k: "F32" if name.endswith("e_score_correction_bias") else "BF16",
             router_margin=routing_margin,
             runs=[("as_trained", 20, None, None), ("normalizer_softmax1", 20, "softmax1", None),
                   ("registers_2", 20, None, 2)]),
        dict(common, name="nemotron_moe_latent", seed=1313, weights=dict(prefix="model.", experts="stacked"),
             doc="Nemotron-H with latent MoE: layers_block_type [\"mamba\", \"moe\", \"attention\", \"mamba\", "
                 "\"moe\"], HF's \"model.\" names with HF's stacked experts (mixer.experts.up_proj (6, 32, 24), "
                 "mixer.experts.down_proj (6, 24, 32), no \".weight\", no biases), H 48, V 128, nh 4 / nkv 1, "
                 "head_dim 12; MoE: n_routed_experts 6, num_experts_per_tok 2, n_group 1, topk_group 1, "
                 "norm_topk_prob false (weights = sigmoid x 1.5), routed_scaling_factor 1.5, moe_latent_size 24: "
                 "fc1_latent_proj (24, 48) before the experts, fc2_latent_proj (48, 24) after their weighted sum, "
                 "moe_intermediate_size 32, shared expert 40 on the unprojected input; mlp_bias true (biases on "
                 "fc1/fc2 and the shared expert); Mamba-2 6 heads of 16 (Di 96), n_groups 1, N 16, conv_kernel "
                 "3, chunk_size 4, no conv bias, use_bias true, time_step_min 0.001, time_step_limit "
                 "[0, Infinity]; tied embeddings (no lm_head tensor), eps 1e-5, all F32.",
             config=make_config(vocab_size=128, hidden_size=48, num_hidden_layers=5,
                                layers_block_type=["mamba", "moe", "attention", "mamba", "moe"],
                                num_attention_heads=4, num_key_value_heads=1, head_dim=12, attention_bias=False,
                                intermediate_size=80, mlp_bias=True, n_routed_experts=6, n_shared_experts=1,
                                num_experts_per_tok=2, n_group=1, topk_group=1, norm_topk_prob=False,
                                routed_scaling_factor=1.5, moe_intermediate_size=32,
                                moe_shared_expert_intermediate_size=40, moe_latent_size=24, mamba_num_heads=6,
                                mamba_head_dim=16, n_groups=1, ssm_state_size=16, conv_kernel=3, expand=1,
                                chunk_size=4, use_conv_bias=False, use_bias=True, mamba_proj_bias=False,
                                time_step_min=0.001, time_step_limit=[0.0, math.inf], layer_norm_epsilon=1e-5,
                                tie_word_embeddings=True, torch_dtype="float32"),
             dtype=lambda name, k: "F32",
             router_margin=routing_margin,
             runs=[("as_trained", 16, None, None), ("normalizer_sink", 16, "sink", None),
                   ("registers_1", 16, None, 1)]),
    ]


def routing_records(ref, ids, normalizer, registers):
    """The sequence path's routing records (NemotronHRef.route) of every MoE layer, registers included."""
    emb = np.concatenate([ref.register_rows(registers), ref.embed[np.asarray(ids)]])
    return ref.forward_sequence(emb, normalizer)["moe"]


def routing_margin(ref, ids, normalizer, registers):
    """Smallest score gap that decides a routing choice, over every position (registers too: their routed
    output feeds the tokens): the topk_group-th vs the next group score, and the order inside the top K plus
    the K-th vs the next masked choice. 0 if masked-out experts (0.0) would tie for a top-K slot."""
    c, m = ref.cfg, np.inf
    for r in routing_records(ref, ids, normalizer, registers):
        if c.topk_group < c.n_group:
            g = -np.sort(-r["gscore"], axis=-1)
            m = min(m, float(np.min(g[:, c.topk_group - 1] - g[:, c.topk_group])))
        s = -np.sort(-r["masked"], axis=-1)
        m = min(m, float(np.min((s[:, :-1] - s[:, 1:])[:, :c.K])))
    return m


def clamp_counts(ref, trace):
    """(changed by the time_step_min clamp, total) over the head-token dt values of a trace: dt equal to the
    floor where the softplus output was below it is recognised as dt == time_step_min exactly."""
    d = trace["ssm_delta"][:, :, ::ref.cfg.P]                              # (T, M_n, nh)
    return int(np.sum(d == ref.cfg.dt_floor)), int(d.size)
