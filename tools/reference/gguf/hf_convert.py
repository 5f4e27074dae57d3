#!/usr/bin/python3
"""Hugging Face checkpoint <-> GGUF tensors and metadata, as llama.cpp's converter writes them.

What it is: an independent model of llama.cpp's convert_hf_to_gguf.py (conversion/jamba.py, mamba.py,
granite.py, nemotron.py, falcon_h1.py; gguf-py tensor_mapping.py and constants.py) for the families
HybridLens runs, plus the type choices of `convert_hf_to_gguf --outtype` and `llama-quantize`
(src/llama-quant.cpp: tensor_allows_quantization, llama_tensor_get_type_impl, tensor_type_fallback).
Read, not copied; GGUF.md sections 5-7 describe the same rules in prose.

Every mapping is an Entry: GGUF tensor names, HF tensor names, a forward function (HF arrays ->
GGUF arrays, numpy order) and its inverse. convert() applies the forward functions; to_hf() applies the
inverses to (dequantized) GGUF tensors so the numpy references can run a GGUF file (make_gguf_fixtures
uses it for expected logits; check_gguf.py checks to_hf(convert(x)) == x on the golden checkpoints).
"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from jamba_ref import load_tensors  # noqa: E402  (the project's own safetensors reader)
import gguf_io as gi  # noqa: E402

F32 = np.float32
# llama.h llama_ftype values written as general.file_type
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q4_K_S": 14, "Q4_K_M": 15,
             "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "BF16": 32}


class Entry:
    def __init__(self, gguf, hf, fwd=None, inv=None):
        self.gguf, self.hf = list(gguf), list(hf)
        self.fwd = fwd or (lambda xs: xs)
        self.inv = inv or (lambda ys: ys)


def one(g, h, fwd=None, inv=None):
    """A single tensor, optionally transformed (functions of one array)."""
    return Entry([g], [h], (lambda xs: [fwd(xs[0])]) if fwd else None, (lambda ys: [inv(ys[0])]) if inv else None)


def rope_permute(w, n_head):
    """LlamaModel.permute: rows of each head from HF's half-split rotary order to interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rope_unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def a_from_log(a_log):
    return (-np.exp(a_log.astype(np.float64))).astype(F32)              # converter: -torch.exp(A_log)


def log_from_a(a):
    """float64 on purpose: the references take A = -exp(A_log) in float64, so this returns A exactly."""
    return np.log(-a.astype(np.float64))


def stack(names, gguf_name):
    return Entry([gguf_name], names, lambda xs: [np.stack(xs)], lambda ys: list(ys[0]))


def split_rows(h, g1, g2, n):
    """One HF tensor whose rows [0, n) and [n, 2n) (last-but-one axis) become two GGUF tensors."""
    return Entry([g1, g2], [h], lambda xs: [xs[0][..., :n, :], xs[0][..., n:, :]],
                 lambda ys: [np.concatenate(ys, axis=-2)])


def u32(k, v):
    return (k, gi.UINT32, int(v))


def f32(k, v):
    return (k, gi.FLOAT32, float(v))


def i32_array(k, vals):
    return (k, gi.ARRAY, (gi.INT32, [int(v) for v in vals]))


# ---------------------------------------------------------------------------------------------
# families
# ---------------------------------------------------------------------------------------------

def jamba(cfg, T):
    """JambaForCausalLM -> "jamba" (conversion/jamba.py): no RoPE, no q/k permutation."""
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    ao, ap = cfg["attn_layer_offset"], cfg["attn_layer_period"]
    eo, ep = cfg["expert_layer_offset"], cfg["expert_layer_period"]
    E = cfg.get("num_experts", 16)
    dt_rank = cfg.get("mamba_dt_rank", "auto")
    nkv = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    kv = [u32("jamba.block_count", L), u32("jamba.context_length", cfg.get("max_position_embeddings", 262144)),
          u32("jamba.embedding_length", H), u32("jamba.feed_forward_length", cfg["intermediate_size"]),
          u32("jamba.attention.head_count", cfg["num_attention_heads"]),
          i32_array("jamba.attention.head_count_kv", [nkv if i >= ao and (i - ao) % ap == 0 else 0 for i in range(L)]),
          u32("jamba.ssm.conv_kernel", cfg.get("mamba_d_conv", 4)),
          u32("jamba.ssm.inner_size", cfg.get("mamba_expand", 2) * H),
          u32("jamba.ssm.state_size", cfg.get("mamba_d_state", 16)),
          u32("jamba.ssm.time_step_rank", -(H // -16) if dt_rank == "auto" else dt_rank),
          f32("jamba.attention.layer_norm_rms_epsilon", cfg.get("rms_norm_eps", 1e-6)),
          u32("jamba.expert_count", E), u32("jamba.expert_used_count", cfg.get("num_experts_per_tok", 2))]
    es = [one("token_embd.weight", "model.embed_tokens.weight"),
          one("output_norm.weight", "model.final_layernorm.weight")]
    if "lm_head.weight" in T:
        es.append(one("output.weight", "lm_head.weight"))
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        es += [one(b + "attn_norm.weight", p + "input_layernorm.weight"),
               one(b + "ffn_norm.weight", p + "pre_ff_layernorm.weight")]
        if i >= ao and (i - ao) % ap == 0:
            es += [one(b + f"attn_{g}.weight", p + f"self_attn.{h}_proj.weight")
                   for g, h in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o"))]
        else:
            m = p + "mamba."
            es += [one(b + "ssm_in.weight", m + "in_proj.weight"),
                   one(b + "ssm_conv1d.weight", m + "conv1d.weight", lambda w: w[:, 0, :], lambda w: w[:, None, :]),
                   one(b + "ssm_x.weight", m + "x_proj.weight"),
                   one(b + "ssm_dt_norm.weight", m + "dt_layernorm.weight"),
                   one(b + "ssm_dt.weight", m + "dt_proj.weight"), one(b + "ssm_dt.bias", m + "dt_proj.bias"),
                   one(b + "ssm_b_norm.weight", m + "b_layernorm.weight"),
                   one(b + "ssm_c_norm.weight", m + "c_layernorm.weight"),
                   one(b + "ssm_a", m + "A_log", a_from_log, log_from_a), one(b + "ssm_d", m + "D"),
                   one(b + "ssm_out.weight", m + "out_proj.weight")]
            es += [one(b + g, m + h) for g, h in (("ssm_conv1d.bias", "conv1d.bias"), ("ssm_in.bias", "in_proj.bias"),
                                                  ("ssm_out.bias", "out_proj.bias")) if m + h in T]
        f = p + "feed_forward."
        if E > 1 and i >= eo and (i - eo) % ep == 0:
            es.append(one(b + "ffn_gate_inp.weight", f + "router.weight"))
            if f + "experts.gate_up_proj" in T:                       # transformers v5 fused layout
                n = cfg["intermediate_size"]
                es += [split_rows(f + "experts.gate_up_proj", b + "ffn_gate_exps.weight", b + "ffn_up_exps.weight", n),
                       one(b + "ffn_down_exps.weight", f + "experts.down_proj")]
            else:
                es += [stack([f + f"experts.{e}.{w}_proj.weight" for e in range(E)], b + f"ffn_{w}_exps.weight")
                       for w in ("gate", "up", "down")]
        else:
            es += [one(b + f"ffn_{w}.weight", f + f"{w}_proj.weight") for w in ("gate", "up", "down")]
    return "jamba", kv, es


def mamba2_mixer(cfg, T, m, b, di, ng):
    """The Mamba-2 mixer of conversion/mamba.py (Mamba2Model.modify_tensors) under HF prefix m."""
    es = [one(b + "ssm_in.weight", m + "in_proj.weight"),
          one(b + "ssm_conv1d.weight", m + "conv1d.weight", lambda w: w[:, 0, :], lambda w: w[:, None, :]),
          one(b + "ssm_dt.bias", m + "dt_bias"),
          one(b + "ssm_a", m + "A_log", lambda a: a_from_log(a)[:, None], lambda a: log_from_a(a[:, 0])),
          one(b + "ssm_d", m + "D", lambda d: d[:, None], lambda d: d[:, 0]),
          one(b + "ssm_out.weight", m + "out_proj.weight")]
    if m + "norm.weight" in T:
        es.append(one(b + "ssm_norm.weight", m + "norm.weight", lambda w: w.reshape(ng, di // ng),
                      lambda w: w.reshape(-1)))
    es += [one(b + g, m + h) for g, h in (("ssm_conv1d.bias", "conv1d.bias"), ("ssm_in.bias", "in_proj.bias"),
                                          ("ssm_out.bias", "out_proj.bias")) if m + h in T]
    return es


def attention(T, p, b, nh, nkv, permute):
    """q/k/v/o (+ biases); permute = LlamaModel's undo_permute (q rows by nh heads, k rows by nkv)."""
    es = []
    for g, h in (("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")):
        n = nh if h == "q" else nkv
        for suf in ("weight", "bias"):
            name = p + f"{h}_proj.{suf}"
            if name not in T:
                continue
            if permute and h in "qk":
                es.append(one(b + f"attn_{g}.{suf}", name, lambda w, n=n: rope_permute(w, n),
                              lambda w, n=n: rope_unpermute(w, n)))
            else:
                es.append(one(b + f"attn_{g}.{suf}", name))
    return es


def ssm_kv(arch, cfg, conv, state, groups, inner, heads):
    return [u32(f"{arch}.ssm.conv_kernel", conv), u32(f"{arch}.ssm.state_size", state),
            u32(f"{arch}.ssm.group_count", groups), u32(f"{arch}.ssm.inner_size", inner),
            u32(f"{arch}.ssm.time_step_rank", heads)]


def nemotron_h(cfg, T):
    """NemotronHForCausalLM -> "nemotron_h" / "nemotron_h_moe" (conversion/nemotron.py + granite.py)."""
    moe = "num_experts_per_tok" in cfg
    arch = "nemotron_h_moe" if moe else "nemotron_h"
    pat = cfg.get("hybrid_override_pattern") or cfg.get("layers_block_type")
    L = len(pat)
    kind = [{"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}[c] if isinstance(pat, str) else c for c in pat]
    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    di, ng = cfg["mamba_num_heads"] * cfg["mamba_head_dim"], cfg["n_groups"]
    ff = cfg.get("moe_intermediate_size") if moe else cfg["intermediate_size"]
    kv = [u32(f"{arch}.block_count", L), u32(f"{arch}.context_length", cfg.get("max_position_embeddings", 4096)),
          u32(f"{arch}.embedding_length", H), u32(f"{arch}.attention.head_count", nh),
          i32_array(f"{arch}.attention.head_count_kv", [nkv if k == "attention" else 0 for k in kind]),
          i32_array(f"{arch}.feed_forward_length", [ff if k in ("mlp", "moe") else 0 for k in kind]),
          u32(f"{arch}.attention.key_length", cfg["head_dim"]), u32(f"{arch}.attention.value_length", cfg["head_dim"]),
          f32(f"{arch}.attention.layer_norm_rms_epsilon", cfg.get("layer_norm_epsilon", 1e-5))]
    kv += ssm_kv(arch, cfg, cfg["conv_kernel"], cfg["ssm_state_size"], ng, di, cfg["mamba_num_heads"])
    if moe:
        kv += [u32(f"{arch}.expert_count", cfg["n_routed_experts"]), u32(f"{arch}.expert_used_count", cfg["num_experts_per_tok"]),
               u32(f"{arch}.expert_feed_forward_length", cfg["moe_intermediate_size"]),
               u32(f"{arch}.expert_shared_feed_forward_length", cfg["moe_shared_expert_intermediate_size"]),
               u32(f"{arch}.expert_shared_count", cfg.get("n_shared_experts", 1)),
               (f"{arch}.expert_weights_norm", gi.BOOL, bool(cfg.get("norm_topk_prob", True))),
               f32(f"{arch}.expert_weights_scale", cfg.get("routed_scaling_factor", 1.0)),
               u32(f"{arch}.expert_group_count", cfg.get("n_group", 1))]
        if cfg.get("moe_latent_size"):
            kv.append(u32(f"{arch}.moe_latent_size", cfg["moe_latent_size"]))
    top = "backbone." if "backbone.embeddings.weight" in T else "model."  # NVIDIA code / transformers names
    es = [one("token_embd.weight", top + "embeddings.weight"), one("output_norm.weight", top + "norm_f.weight")]
    if "lm_head.weight" in T:
        es.append(one("output.weight", "lm_head.weight"))
    for i, k in enumerate(kind):
        p, b = f"{top}layers.{i}.", f"blk.{i}."
        x = p + "mixer."
        es.append(one(b + "attn_norm.weight", p + "norm.weight"))
        if k == "mamba":
            es += mamba2_mixer(cfg, T, x, b, di, ng)
        elif k == "attention":
            es += attention(T, x, b, nh, nkv, permute=True)
        elif k == "mlp":
            es += [one(b + g, x + h) for g, h in (("ffn_up.weight", "up_proj.weight"), ("ffn_down.weight", "down_proj.weight"),
                                                  ("ffn_up.bias", "up_proj.bias"), ("ffn_down.bias", "down_proj.bias"))
                   if x + h in T]
        else:
            E = cfg["n_routed_experts"]
            es += [one(b + "ffn_gate_inp.weight", x + "gate.weight"),
                   one(b + "exp_probs_b.bias", x + "gate.e_score_correction_bias"),
                   stack([x + f"experts.{e}.up_proj.weight" for e in range(E)], b + "ffn_up_exps.weight"),
                   stack([x + f"experts.{e}.down_proj.weight" for e in range(E)], b + "ffn_down_exps.weight"),
                   one(b + "ffn_up_shexp.weight", x + "shared_experts.up_proj.weight"),
                   one(b + "ffn_down_shexp.weight", x + "shared_experts.down_proj.weight")]
            es += [one(b + g, x + h) for g, h in (("ffn_latent_down.weight", "fc1_latent_proj.weight"),
                                                  ("ffn_latent_up.weight", "fc2_latent_proj.weight")) if x + h in T]
    return arch, kv, es


def granite_hybrid(cfg, T):
    """GraniteMoeHybridForCausalLM and BambaForCausalLM -> "granitehybrid" (conversion/granite.py)."""
    bamba = "BambaForCausalLM" in cfg["architectures"]
    L, H, nh = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    if cfg.get("layer_types"):
        attn = [i for i, t in enumerate(cfg["layer_types"]) if t == "attention"]
    else:
        attn = cfg.get("attn_layer_indices") or [i for i in range(L) if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"]]
    heads, hd = cfg["mamba_n_heads"], cfg.get("mamba_d_head")
    di = cfg["mamba_expand"] * H
    ng = cfg["mamba_n_groups"]
    E = cfg.get("num_local_experts") or 0
    kv = [u32("granitehybrid.block_count", L), u32("granitehybrid.embedding_length", H),
          u32("granitehybrid.feed_forward_length", cfg["intermediate_size"] if bamba or E else cfg["shared_intermediate_size"]),
          u32("granitehybrid.attention.head_count", nh),
          i32_array("granitehybrid.attention.head_count_kv", [nkv if i in attn else 0 for i in range(L)]),
          f32("granitehybrid.attention.layer_norm_rms_epsilon", cfg.get("rms_norm_eps", 1e-5)),
          u32("granitehybrid.rope.dimension_count", H // nh),
          f32("granitehybrid.rope.freq_base", cfg.get("rope_theta", 10000.0))]
    use_rope = bamba or cfg.get("position_embedding_type") == "rope"
    kv.append(("granitehybrid.rope.scaling.finetuned", gi.BOOL, use_rope))
    kv.append(u32("granitehybrid.context_length", cfg.get("max_position_embeddings", 4096) if use_rope else 2 ** 20))
    for key, hk in (("attention.scale", "attention_multiplier"), ("embedding_scale", "embedding_multiplier"),
                    ("residual_scale", "residual_multiplier"), ("logit_scale", "logits_scaling")):
        if cfg.get(hk):
            kv.append(f32(f"granitehybrid.{key}", cfg[hk]))
    if E:
        kv += [u32("granitehybrid.expert_count", E), u32("granitehybrid.expert_used_count", cfg["num_experts_per_tok"])]
    if not bamba and cfg.get("shared_intermediate_size") and E:
        kv.append(u32("granitehybrid.expert_shared_feed_forward_length", cfg["shared_intermediate_size"]))
    kv += ssm_kv("granitehybrid", cfg, cfg["mamba_d_conv"], cfg["mamba_d_state"], ng, di, heads)
    norm = "model.final_layernorm.weight" if bamba else "model.norm.weight"
    es = [one("token_embd.weight", "model.embed_tokens.weight"), one("output_norm.weight", norm)]
    if "lm_head.weight" in T:
        es.append(one("output.weight", "lm_head.weight"))
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        es += [one(b + "attn_norm.weight", p + "input_layernorm.weight"),
               one(b + "ffn_norm.weight", p + ("pre_ff_layernorm.weight" if bamba else "post_attention_layernorm.weight"))]
        if i in attn:
            es += attention(T, p + "self_attn.", b, nh, nkv, permute=True)
        else:
            es += mamba2_mixer(cfg, T, p + "mamba.", b, di, ng)
        if bamba:
            es += [one(b + f"ffn_{w}.weight", p + f"feed_forward.{w}_proj.weight") for w in ("gate", "up", "down")]
            continue
        s, shared = p + "shared_mlp.", cfg["shared_intermediate_size"]
        sx = "_shexp" if E else ""
        es += [split_rows(s + "input_linear.weight", b + f"ffn_gate{sx}.weight", b + f"ffn_up{sx}.weight", shared),
               one(b + f"ffn_down{sx}.weight", s + "output_linear.weight")]
        if E:
            m = p + "block_sparse_moe."
            es += [one(b + "ffn_gate_inp.weight", m + "router.layer.weight"),
                   split_rows(m + "input_linear.weight", b + "ffn_gate_exps.weight", b + "ffn_up_exps.weight",
                              cfg["intermediate_size"]),
                   one(b + "ffn_down_exps.weight", m + "output_linear.weight")]
    return "granitehybrid", kv, es


def falcon_h1(cfg, T):
    """FalconH1ForCausalLM -> "falcon-h1" (conversion/falcon_h1.py): every muP multiplier is folded into
    the weights (the file has no multiplier keys); attention keeps HF's rotary order (NEOX RoPE)."""
    L, H, nh, nkv = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    di = cfg.get("mamba_d_ssm") or cfg["mamba_expand"] * H
    ng, ns, heads = cfg["mamba_n_groups"], cfg["mamba_d_state"], cfg["mamba_n_heads"]
    mul = lambda k: F32(cfg.get(k, 1.0))                                  # noqa: E731
    ain, aout, kmul = mul("attention_in_multiplier"), mul("attention_out_multiplier"), mul("key_multiplier")
    mlp_m = [F32(v) for v in cfg.get("mlp_multipliers", [1.0, 1.0])]
    zx = np.concatenate([np.full(n, F32(v), F32) for n, v in zip([di, di, ng * ns, ng * ns, heads],
                                                                   cfg.get("ssm_multipliers", [1.0] * 5))])
    kv = [u32("falcon-h1.block_count", L), u32("falcon-h1.context_length", cfg.get("max_position_embeddings", 0)),
          u32("falcon-h1.embedding_length", H), u32("falcon-h1.feed_forward_length", cfg["intermediate_size"]),
          u32("falcon-h1.attention.head_count", nh), u32("falcon-h1.attention.head_count_kv", nkv),
          u32("falcon-h1.attention.key_length", cfg.get("head_dim") or H // nh),
          u32("falcon-h1.attention.value_length", cfg.get("head_dim") or H // nh),
          f32("falcon-h1.attention.layer_norm_rms_epsilon", cfg.get("rms_norm_eps", 1e-5)),
          f32("falcon-h1.rope.freq_base", cfg.get("rope_theta", 10000.0)), u32("falcon-h1.vocab_size", cfg["vocab_size"])]
    kv += ssm_kv("falcon-h1", cfg, cfg["mamba_d_conv"], ns, ng, di, heads)

    def scaled(g, h, s):
        return one(g, h, lambda w: (w * s).astype(F32), lambda w: (w / s).astype(F32))

    es = [scaled("token_embd.weight", "model.embed_tokens.weight", mul("embedding_multiplier")),
          one("output_norm.weight", "model.final_layernorm.weight")]
    if "lm_head.weight" in T:
        es.append(scaled("output.weight", "lm_head.weight", mul("lm_head_multiplier")))
    for i in range(L):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        es += [one(b + "attn_norm.weight", p + "input_layernorm.weight"), one(b + "ffn_norm", p + "pre_ff_layernorm.weight")]
        a = p + "self_attn."
        es += [scaled(b + "attn_q.weight", a + "q_proj.weight", ain), scaled(b + "attn_k.weight", a + "k_proj.weight", F32(kmul * ain)),
               scaled(b + "attn_v.weight", a + "v_proj.weight", ain), scaled(b + "attn_output.weight", a + "o_proj.weight", aout)]
        mix = mamba2_mixer(cfg, T, p + "mamba.", b, di, ng)
        mix[0] = one(b + "ssm_in.weight", p + "mamba.in_proj.weight", lambda w: (w * (zx * mul("ssm_in_multiplier")).astype(F32)[:, None]).astype(F32),
                     lambda w: (w / (zx * mul("ssm_in_multiplier")).astype(F32)[:, None]).astype(F32))
        mix[5] = scaled(b + "ssm_out.weight", p + "mamba.out_proj.weight", mul("ssm_out_multiplier"))
        es += [e for e in mix if not e.gguf[0].endswith(("ssm_in.bias", "ssm_out.bias"))]
        f = p + "feed_forward."
        es += [scaled(b + "ffn_gate.weight", f + "gate_proj.weight", mlp_m[0]), one(b + "ffn_up.weight", f + "up_proj.weight"),
               scaled(b + "ffn_down.weight", f + "down_proj.weight", mlp_m[1])]
    return "falcon-h1", kv, es


FAMILIES = {"JambaForCausalLM": jamba, "NemotronHForCausalLM": nemotron_h, "GraniteMoeHybridForCausalLM": granite_hybrid,
            "BambaForCausalLM": granite_hybrid, "FalconH1ForCausalLM": falcon_h1}


# ---------------------------------------------------------------------------------------------
# conversion and its inverse
# ---------------------------------------------------------------------------------------------

def entries(cfg, T):
    fam = FAMILIES.get(cfg["architectures"][0])
    if fam is None:
        raise ValueError(f"architecture {cfg['architectures'][0]} has no GGUF mapping here (have {', '.join(FAMILIES)})")
    return fam(cfg, T)


def load_checkpoint(folder):
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.loads(f.read())
    T, _ = load_tensors(folder)
    return cfg, {k: np.asarray(v, F32) for k, v in T.items()}


def convert(cfg, T):
    """-> (arch, kv, [(gguf name, float32 array in numpy order)]) ordered as llama.cpp's loader sorts
    weights (non-block tensors, then blk.0, blk.1, ... each by name). Refuses unmapped HF tensors."""
    arch, kv, es = entries(cfg, T)
    used = {h for e in es for h in e.hf}
    extra = sorted(set(T) - used)
    if extra:
        raise ValueError(f"{arch}: HF tensors with no GGUF mapping: {extra[:6]}")
    out = {}
    for e in es:
        for g, y in zip(e.gguf, e.fwd([T[h] for h in e.hf])):
            out[g] = np.ascontiguousarray(y, dtype=F32)
    return arch, kv, sorted(out.items(), key=lambda it: weight_order(it[0]))


def weight_order(name):
    if name.startswith("blk."):
        return (int(name.split(".")[1]), name)
    return (-1, name)


def to_hf(cfg, hf_names, gguf_tensors):
    """Inverse of convert: {gguf name: float32 array (numpy order)} -> {HF name: array}. hf_names, the
    tensor names of the source checkpoint, decides the optional tensors (biases, lm_head, layouts)."""
    out = {}
    for e in entries(cfg, set(hf_names))[2]:
        for h, x in zip(e.hf, e.inv([gguf_tensors[g] for g in e.gguf])):
            out[h] = x if x.dtype == np.float64 else np.asarray(x, F32)
    return out


# ---------------------------------------------------------------------------------------------
# tensor types: convert --outtype, then llama-quantize
# ---------------------------------------------------------------------------------------------

def outtype_type(name, arr, outtype):
    """convert_hf_to_gguf.py prepare_tensors: 1-D tensors, *_norm.weight, the router, ssm_conv1d and
    names not ending in .weight stay F32; Q8_0 falls back to F16 when a row is not a multiple of 32."""
    if arr.ndim <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return "F32"
    if name.endswith(("ffn_gate_inp.weight", "ssm_conv1d.weight", "ffn_gate_inp_shexp.weight")):
        return "F32"
    if outtype == "Q8_0" and arr.shape[-1] % 32:
        return "F16"
    return outtype


def n_dims(shape):
    """ggml_n_dims: trailing (GGUF order) size-1 dimensions do not count."""
    dims = list(reversed(shape)) or [1]
    n = len(dims)
    while n > 1 and dims[n - 1] == 1:
        n -= 1
    return n


def allows_quantization(name, shape):
    """llama-quant.cpp tensor_allows_quantization, the parts that can apply to these families."""
    if n_dims(shape) < 2 or not name.endswith("weight") or "_norm.weight" in name:
        return False
    return not any(s in name for s in ("ffn_gate_inp.weight", "ssm_conv1d", "position_embd", "token_types"))


def use_more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


BLOCK = {"Q4_0": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
DEFAULT = {"Q4_0": "Q4_0", "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q8_0": "Q8_0", "Q4_K_S": "Q4_K", "Q4_K_M": "Q4_K",
           "Q5_K_S": "Q5_K", "Q5_K_M": "Q5_K", "Q6_K": "Q6_K"}


def quantize_plan(tensors, ftype, n_layer, n_expert):
    """llama-quantize's type for each (name, shape, current type) in loader order -> {name: type}.
    Covers the ftypes of DEFAULT without an importance matrix (llama_tensor_get_type_impl)."""
    tied = not any(n == "output.weight" for n, _, _ in tensors)
    n_wv = sum(1 for n, _, _ in tensors if "attn_v.weight" in n or "attn_qkv.weight" in n)
    i_wv = i_down = 0
    plan = {}
    for name, shape, cur in tensors:
        if not allows_quantization(name, shape):
            plan[name] = cur
            continue
        t = DEFAULT[ftype]
        ncols = shape[-1]
        if name == "output.weight" or (tied and name == "token_embd.weight"):
            t = "Q8_0" if ncols % BLOCK[t] else ("Q6_K" if t != "Q8_0" else t)
        elif name == "token_embd.weight":
            pass
        elif "attn_v.weight" in name or "attn_qkv.weight" in name:
            if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(i_wv, n_wv):
                t = "Q6_K"
            elif ftype == "Q4_K_S" and i_wv < 4:
                t = "Q5_K"
            if n_expert == 8:
                t = "Q8_0"
            i_wv += 1
        elif "attn_k.weight" in name and n_expert == 8:
            t = "Q8_0"
        elif "ffn_down" in name:
            layer = int(name.split(".")[1]) if n_expert > 1 else i_down
            if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(layer, n_layer):
                t = "Q6_K"
            elif ftype == "Q4_K_S" and layer < n_layer // 8:
                t = "Q5_K"
            i_down += 1
        elif "attn_output.weight" in name and n_expert == 8 and ftype in ("Q4_K_S", "Q4_K_M"):
            t = "Q5_K"
        if ncols % BLOCK[t]:                                             # tensor_type_fallback
            if t not in FALLBACK:
                raise ValueError(f"{name}: {ncols} columns do not fit {t} and llama-quantize has no fallback")
            t = FALLBACK[t]
            if ncols % BLOCK[t]:
                t = "F16"
        plan[name] = t
    return plan
