#!/usr/bin/python3
"""Granite 4.0-H section of check_ref.py: self-checks of granite_ref.py and of the granite_* golden cases.

What it is: (a) an independent torch float64 model in HF's module structure (GraniteMoeHybridDecoderLayer:
two residual branches times residual_multiplier; the Mamba-2 mixer's slow path torch_forward and its cached
one-token branch, with the dt clamp at time_step_limit only and the gated norm over all Di; attention with
attention_multiplier as the scale, rotate_half RoPE over the whole head or none, repeat_kv; the top-k gating
(topk of the logits, softmax over the k, sort and index_add) with ParallelExperts; the shared MLP; embedding
and logits multipliers), filled by load_state_dict(strict) from the checkpoint under HF's names and compared
with the reference on every run; (b) the mixer against the direct O(T^2) sum; (c) config rules, dt clamp,
routing identities, byte counters; (d) each multiplier or rule done wrong moves the logits far past the
tolerance (so the comparisons can fail). Prefill vs step (1e-10) and the files reproducing: check_ref.py (b).
What it is not: HF's code (transformers is not installed here; written from reading it), or a C++ test.
Usage: run by check_ref.py (run_checks(check, close)).
"""
import json
import math
import os
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_bamba as cb  # noqa: E402
import check_nemotron as cn  # noqa: E402
import golden_granite as gg  # noqa: E402
import granite_ref as gr  # noqa: E402
import jamba_ref as jr  # noqa: E402

GOLDEN = os.path.join(HERE, "..", "..", "tests", "golden")


def read_config(folder):
    """The fields HF's modules read, straight from config.json with GraniteMoeHybridConfig's defaults (not
    through granite_ref.GraniteConfig, so that the comparison also checks the reference's config reading)."""
    d = json.load(open(os.path.join(folder, "config.json")))
    get = lambda k, default: d[k] if d.get(k) is not None else default  # noqa: E731
    H, nh = d["hidden_size"], d["num_attention_heads"]
    Di = get("mamba_expand", 2) * H
    mh = get("mamba_n_heads", 128)
    rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
    return SimpleNamespace(
        H=H, V=d["vocab_size"], nh=nh, nkv=get("num_key_value_heads", nh), hd=get("head_dim", H // nh),
        attn_bias=get("attention_bias", False), E=get("num_local_experts", 8), K=get("num_experts_per_tok", 2),
        I=get("intermediate_size", 11008), Is=get("shared_intermediate_size", 1024), eps=get("rms_norm_eps", 1e-6),
        tie=get("tie_word_embeddings", False), emb_mult=get("embedding_multiplier", 1.0),
        resid_mult=get("residual_multiplier", 1.0), attn_mult=get("attention_multiplier", 1.0),
        logits_div=get("logits_scaling", 1.0), rope=d.get("position_embedding_type") == "rope",
        theta=rope.get("rope_theta", get("rope_theta", 10000.0)),
        is_attn=[t == "attention" for t in get("layer_types", ["mamba"] * d["num_hidden_layers"])],
        Di=Di, mh=mh, P=Di // mh if get("mamba_d_head", "auto") == "auto" else d["mamba_d_head"],
        G=get("mamba_n_groups", 1), N=get("mamba_d_state", 256), W=get("mamba_d_conv", 4),
        chunk=get("mamba_chunk_size", 256), conv_bias=get("mamba_conv_bias", True),
        proj_bias=get("mamba_proj_bias", False), dt_min=get("time_step_limit", [0.0, math.inf])[0],
        dt_max=get("time_step_limit", [0.0, math.inf])[1])


class Mixer(cn.Mixer):
    """GraniteMoeHybridMambaLayer (BambaMixer) slow path: the SSD scan and cached branch of check_nemotron's
    mixer (the cross-chunk sum over the source chunk, as Granite's transpose(1, 3).sum(dim=1) does), with
    dt clamped at time_step_limit only and one gated-norm group over all Di (GraniteMoeHybridRMSNormGated)."""
    def __init__(self, d, grouped_norm=False):
        c = SimpleNamespace(
            mamba_num_heads=d.mh, mamba_head_dim=d.P, n_groups=d.G, ssm_state_size=d.N, conv_kernel=d.W,
            use_conv_bias=d.conv_bias, hidden_size=d.H, use_bias=d.proj_bias, layer_norm_epsilon=d.eps,
            chunk_size=d.chunk, time_step_min=None, time_step_limit=(d.dt_min, d.dt_max))
        super().__init__(c)
        self.norm = cn.GatedNorm(self.Di, self.Di // self.G if grouped_norm else self.Di, d.eps)

    def clamp(self, dt):
        return torch.clamp(dt, *self.c.time_step_limit)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(nn.Module):                                                  # GraniteMoeHybridAttention, eager
    def __init__(self, d):
        super().__init__()
        self.d, self.scaling = d, d.attn_mult
        self.q_proj = nn.Linear(d.H, d.nh * d.hd, bias=d.attn_bias)
        self.k_proj = nn.Linear(d.H, d.nkv * d.hd, bias=d.attn_bias)
        self.v_proj = nn.Linear(d.H, d.nkv * d.hd, bias=d.attn_bias)
        self.o_proj = nn.Linear(d.nh * d.hd, d.H, bias=d.attn_bias)
        self.null, self.rows = None, []

    def forward(self, x, cos_sin):
        b, L, _ = x.shape
        d = self.d
        q, k, v = (p(x).view(b, L, -1, d.hd).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        if cos_sin is not None:                                              # apply_rotary_pos_emb on rd dims
            cos, sin = cos_sin
            rd = cos.shape[-1]
            rot = lambda t: torch.cat([t[..., :rd] * cos + rotate_half(t[..., :rd]) * sin, t[..., rd:]], -1)  # noqa
            q, k = rot(q), rot(k)
        k, v = (t.repeat_interleave(d.nh // d.nkv, dim=1) for t in (k, v))  # repeat_kv
        w = (q @ k.transpose(2, 3)) * self.scaling + torch.full((L, L), -torch.inf).triu(1)
        col = torch.full((b, d.nh, L, 1), -torch.inf) if self.null is None else self.null.view(1, -1, 1, 1).expand(
            b, d.nh, L, 1)
        pp = torch.softmax(torch.cat([w, col], -1), -1)                      # softmax: the null column gets 0
        self.rows.append(pp[0])
        return self.o_proj((pp[..., :L] @ v).transpose(1, 2).reshape(b, L, -1))


class SharedMLP(nn.Module):                                                  # GraniteMoeHybridMLP
    def __init__(self, H, inner):
        super().__init__()
        self.input_linear = nn.Linear(H, 2 * inner, bias=False)
        self.output_linear = nn.Linear(inner, H, bias=False)

    def forward(self, x):
        gate, up = self.input_linear(x).chunk(2, dim=-1)
        return self.output_linear(F.silu(gate) * up)


class ParallelExperts(nn.Module):
    def __init__(self, E, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(E, n_out, n_in))

    def forward(self, x, sizes):
        return torch.cat([F.linear(part, self.weight[e]) for e, part in enumerate(x.split(sizes, dim=0))])


class Router(nn.Module):                                                     # GraniteMoeHybridTopKGating
    def __init__(self, H, E, K):
        super().__init__()
        self.layer, self.K, self.E = nn.Linear(H, E, bias=False), K, E
        self.renormalise, self.logits = True, []

    def forward(self, x):                                                    # x (n, H)
        logits = self.layer(x)
        self.logits.append(logits)
        top_v, top_i = logits.topk(self.K, dim=1)
        gates = torch.softmax(top_v, dim=1) if self.renormalise else torch.softmax(logits, 1).gather(1, top_i)
        sizes = torch.zeros(x.shape[0], self.E).scatter(1, top_i, 1).long().sum(0).tolist()
        _, order = top_i.flatten().sort(0)
        return order.div(self.K, rounding_mode="trunc"), gates.flatten()[order], sizes


class MoE(nn.Module):                                                        # GraniteMoeHybridMoE
    def __init__(self, d):
        super().__init__()
        self.input_linear = ParallelExperts(d.E, d.H, 2 * d.I)
        self.output_linear = ParallelExperts(d.E, d.I, d.H)
        self.router = Router(d.H, d.E, d.K)

    def forward(self, x):
        b, L, H = x.shape
        x = x.reshape(-1, H)
        idx, gates, sizes = self.router(x)
        gate, up = self.input_linear(x[idx], sizes).chunk(2, dim=-1)
        y = self.output_linear(F.silu(gate) * up, sizes) * gates[:, None]
        return torch.zeros(b * L, H).index_add(0, idx, y).view(b, L, H)


class Layer(nn.Module):                                                      # GraniteMoeHybridDecoderLayer
    def __init__(self, d, attn, grouped_norm):
        super().__init__()
        self.input_layernorm = cn.RMSNorm(d.H, d.eps)
        self.post_attention_layernorm = cn.RMSNorm(d.H, d.eps)
        if attn:
            self.self_attn = Attention(d)
        else:
            self.mamba = Mixer(d, grouped_norm)
        if d.E > 0:
            self.block_sparse_moe = MoE(d)
        self.shared_mlp = SharedMLP(d.H, d.Is)
        self.residual_multiplier = d.resid_mult

    def forward(self, h, cos_sin):
        x = self.input_layernorm(h)
        h = h + (self.self_attn(x, cos_sin) if hasattr(self, "self_attn") else self.mamba(x)) * self.residual_multiplier
        x = self.post_attention_layernorm(h)
        f = self.shared_mlp(x)
        if hasattr(self, "block_sparse_moe"):
            f = self.block_sparse_moe(x) + f
        return h + f * self.residual_multiplier


class CausalLM(nn.Module):
    """GraniteMoeHybridForCausalLM: model.{embed_tokens, layers, norm}, lm_head (tied: the embedding)."""
    def __init__(self, folder, grouped_norm=False):
        super().__init__()
        self.d = d = read_config(folder)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(d.V, d.H)
        self.model.layers = nn.ModuleList([Layer(d, a, grouped_norm) for a in d.is_attn])
        self.model.norm = cn.RMSNorm(d.H, d.eps)
        self.lm_head = nn.Linear(d.H, d.V, bias=False)
        tensors, _, _ = jr.read_safetensors(os.path.join(folder, "model.safetensors"))
        sd = {k: torch.tensor(np.asarray(v, np.float64)) for k, v in tensors.items()}
        if d.tie:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        self.load_state_dict(sd, strict=True)                                # names, shapes and bias flags
        self.emb_mult, self.logits_div, self.rope_dims = d.emb_mult, d.logits_div, (d.hd if d.rope else 0)

    def forward(self, ids, n_reg, null):
        """ids (T,); n_reg test-time registers (mean embedding row); null (nh,) or None. Returns logits
        (n_reg+T, V) and the residual stream (L+1, n_reg+T, H)."""
        emb = self.model.embed_tokens.weight
        h = torch.cat([emb.mean(0, keepdim=True).expand(n_reg, -1), emb[ids]])[None] * self.emb_mult
        cos_sin = None
        if self.rope_dims:                                                   # default rope, whole head
            rd = self.rope_dims
            inv = 1.0 / self.d.theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
            f = torch.arange(h.shape[1], dtype=torch.float64)[:, None] * inv[None]
            f = torch.cat([f, f], -1)
            cos_sin = (f.cos(), f.sin())
        resid = [h[0]]
        for layer in self.model.layers:
            if hasattr(layer, "self_attn"):
                layer.self_attn.null = null
            h = layer(h, cos_sin)
            resid.append(h[0])
        return (self.lm_head(self.model.norm(h)) / self.logits_div)[0], torch.stack(resid)


def reset(tm):
    for layer in tm.model.layers:
        for m in layer.modules():
            if isinstance(m, Attention):
                m.rows = []
            elif isinstance(m, Mixer):
                m.dts = []
            elif isinstance(m, Router):
                m.logits = []


def torch_run(tm, run, nh):
    reset(tm)
    n_reg = run["registers"] or 0
    null = None if run["normalizer"] not in ("softmax1", "sink") else torch.zeros(nh)   # no sinks tensors here
    with torch.no_grad():
        logits, resid = tm(torch.tensor(run["token_ids"]), n_reg, null)
    return n_reg, logits[n_reg:].numpy(), resid[:, n_reg:]


def run_checks(check, close):
    torch.set_default_dtype(torch.float64)
    print("(g) Granite 4.0-H (granite_ref.py)")
    rng = np.random.default_rng(31)
    for spec in gg.case_specs():
        tag = spec["name"]
        folder = os.path.join(GOLDEN, tag)
        ref = gr.GraniteRef.load(folder)
        c = ref.cfg
        tm = CausalLM(folder)
        check(f"{tag}: torch model loads the file strictly under HF's names", True)
        mixers = [(i, layer.mamba) for i, layer in enumerate(tm.model.layers) if hasattr(layer, "mamba")]
        for S in (1, c.W - 1, c.W, c.chunk, 2 * c.chunk + 3):                 # conv edges, chunk crossings
            xx = rng.normal(size=(S, c.H))
            for i, mx in mixers[:2]:
                with torch.no_grad():
                    want = mx(cb.T(xx)[None])[0].numpy()
                    cached = mx.forward_cached(cb.T(xx)[None])[0].numpy()
                close(f"{tag}: layer {i} mixer * residual_multiplier == torch torch_forward (chunked), S={S}",
                      ref.mamba_seq(ref.layers[i], xx)[0], want * c.resid_mult)
                close(f"{tag}: layer {i} torch cached branch == torch chunked, S={S}", cached, want)
        i = c.mamba_layers[0]                                                # direct O(T^2) form, 3+ chunks
        ly = ref.layers[i]
        xx = rng.normal(size=(2 * c.chunk + 4, c.H))
        z, xbc0, dt_raw = ref.mamba_in(ly, xx)
        xs, Bm, Cm, dt = ref.mamba_split(ly, jr.silu(jr.causal_conv(xbc0, ly["conv_w"], ly["conv_b"])), dt_raw)
        yd = cb.direct_scan(xs, dt, ly["A"], Bm, Cm, ly["D"]).reshape(len(xx), c.Di)
        by_hand = jr.linear(jr.rmsnorm(yd * jr.silu(z), ly["norm"], c.eps), ly["out_w"], ly["out_b"])
        close(f"{tag}: mixer == direct O(T^2) sum + gated norm over all Di = {c.Di} by hand",
              ref.mamba_seq(ly, xx)[0], by_hand * c.resid_mult)
        runs = json.load(open(os.path.join(folder, "expected", "runs.json")))["runs"]
        for run in runs:
            rt = f"{tag}/{run['name']}"
            a = ref.run(run["token_ids"], run["normalizer"], run["registers"])
            n_reg, logits, resid = torch_run(tm, run, c.nh)
            close(f"{rt}: logits == torch HF-structure model", a["logits"], logits)
            close(f"{rt}: resid_max_abs == torch", a["resid_max_abs"], resid.abs().amax(-1).T.numpy())
            rows = [layer.self_attn.rows[0][:, n_reg:, :].transpose(0, 1).numpy()
                    for layer in tm.model.layers if hasattr(layer, "self_attn")]
            close(f"{rt}: attn_rows == torch", a["attn_rows"], np.stack(rows, axis=1))
            dtm = np.stack([mx.dts[0][n_reg:].numpy() for _, mx in mixers], axis=1)        # (T, M_n, nh)
            close(f"{rt}: ssm_delta == torch dt of the channel's head", a["ssm_delta"], np.repeat(dtm, c.P, axis=2))
            Tn = len(run["token_ids"])
            if c.E:
                lg = np.stack([layer.block_sparse_moe.router.logits[0][n_reg:].numpy() for layer in tm.model.layers], 1)
                close(f"{rt}: router_probs == torch softmax over all E", a["router_probs"], torch.softmax(
                    torch.tensor(lg), -1).numpy())
                close(f"{rt}: router_lse == torch logsumexp", a["router_lse"], torch.logsumexp(torch.tensor(lg), -1))
                check(f"{rt}: router_topk == torch topk of the logits", np.array_equal(
                    a["router_topk"], torch.tensor(lg).topk(c.K, dim=-1).indices.numpy()))
                s = -np.sort(-a["router_probs"], axis=-1)
                margin = float((s[..., :c.K] - s[..., 1:c.K + 1]).min())
                check(f"{rt}: router decisions far from ties (smallest deciding probability gap {margin:.1e})",
                      margin > 2e-5)
                check(f"{rt}: shapes X_n = L = {c.L}, K = {c.K}", a["router_probs"].shape == (Tn, c.L, c.E)
                      and a["router_topk"].shape == (Tn, c.L, c.K))
            else:
                check(f"{rt}: num_local_experts 0: no router tensors", not any(k.startswith("router") for k in a))
            check(f"{rt}: ssm_state_bytes = M_n (conv_dim W + Di N) 4", np.all(
                a["ssm_state_bytes"] == len(c.mamba_layers) * (c.conv_dim * c.W + c.Di * c.N) * 4))
            check(f"{rt}: kv_cache_bytes over the attention layers", np.array_equal(
                a["kv_cache_bytes"], 2 * len(c.attn_layers) * c.nkv * c.hd * (n_reg + np.arange(Tn) + 1) * 4))
            if tag == "granite_moe":
                n, tot = gg.dt_counts(ref, a, spec["config"]["time_step_min"])
                check(f"{rt}: no time_step_min floor: {n} of {tot} head-token dt values lie below it", n > 0)
            else:
                d = a["ssm_delta"][:, :, ::c.P]
                check(f"{rt}: time_step_limit clamp reached: {int(np.sum(d == c.dt_min))} at {c.dt_min}, "
                      f"{int(np.sum(d == c.dt_max))} at {c.dt_max} of {d.size}",
                      np.sum(d == c.dt_min) > 0 and np.sum(d == c.dt_max) > 0 and d.min() >= c.dt_min)
        check_mistakes(check, tag, folder, tm, ref, runs[0])
    check_config(check)


def check_mistakes(check, tag, folder, tm, ref, run):
    """Each wrong reading of HF's file moves the logits far past the 1e-10 tolerance of the comparisons."""
    c = ref.cfg
    want = ref.run(run["token_ids"], run["normalizer"], run["registers"])["logits"]

    def moved(name, undo):
        _, got, _ = torch_run(tm, run, c.nh)
        undo()
        d = float(np.abs(got - want).max())
        check(f"{tag}: {name} would be caught (logits move by {d:.2f})", d > 1e-3)

    layers = list(tm.model.layers)
    for layer in layers:
        layer.residual_multiplier = 1.0
    moved("residual_multiplier ignored", lambda: [setattr(x, "residual_multiplier", c.resid_mult) for x in layers])
    tm.emb_mult = 1.0
    moved("embedding_multiplier ignored", lambda: setattr(tm, "emb_mult", c.emb_mult))
    tm.logits_div = 1.0
    moved("logits_scaling ignored", lambda: setattr(tm, "logits_div", c.logits_div))
    attn = [x.self_attn for x in layers if hasattr(x, "self_attn")]
    for x in attn:
        x.scaling = c.hd ** -0.5
    moved("head_dim^-0.5 as the attention scale", lambda: [setattr(x, "scaling", c.attn_mult) for x in attn])
    if c.rope:
        tm.rope_dims = c.hd // 2
        moved("Bamba's partial rotary (half the head)", lambda: setattr(tm, "rope_dims", c.hd))
        tm.rope_dims = 0
        moved("RoPE left out", lambda: setattr(tm, "rope_dims", c.hd))
    if c.E:
        routers = [x.block_sparse_moe.router for x in layers]
        for r in routers:
            r.renormalise = False
        moved("top-k gate weights not renormalised (Jamba's rule)", lambda: [setattr(r, "renormalise", True)
                                                                          for r in routers])
        ws = [x.shared_mlp.output_linear.weight for x in layers]
        saved = [w.detach().clone() for w in ws]
        with torch.no_grad():
            for w in ws:
                w.zero_()
        moved("shared MLP left out", lambda: [w.data.copy_(s) for w, s in zip(ws, saved)])
    if c.G > 1:                                                              # older BambaMixer: B.repeat(...)
        def tiled(ly, xbc, dt_raw):                                          # head h -> group h % G
            x, _, _, dt = gr.GraniteRef.mamba_split(ref, ly, xbc, dt_raw)
            g = xbc[:, c.Di:].reshape(len(xbc), 2, c.G, c.N)[:, :, np.arange(c.mh) % c.G]
            return x, g[:, 0], g[:, 1], dt
        ref.mamba_split = tiled
        d = float(np.abs(ref.run(run["token_ids"], run["normalizer"], run["registers"])["logits"] - want).max())
        del ref.mamba_split
        check(f"{tag}: head h on B/C group h % G (HF's older full-sequence repeat) would be caught (logits move "
              f"by {d:.2f})", d > 1e-3)
        tg = CausalLM(folder, grouped_norm=True)
        _, got, _ = torch_run(tg, run, c.nh)
        d = float(np.abs(got - want).max())
        check(f"{tag}: gated norm in n_groups groups (mamba_ssm / Nemotron-H style) would be caught (logits "
              f"move by {d:.2f})", d > 1e-3)


def check_config(check):
    base = gg.case_specs()[0]["config"]
    G = gr.GraniteConfig
    alias = G(dict({k: v for k, v in base.items() if k != "layer_types"}, layers_block_type=base["layer_types"]))
    check("config: layers_block_type (attribute_map alias) == layer_types",
          alias.is_attn == G(base).is_attn == [False, True, False, False])
    none = G(dict({k: v for k, v in base.items() if k != "layer_types"}))
    check("config: no layer_types -> every layer Mamba", none.attn_layers == [] and len(none.mamba_layers) == 4)
    check("config: position_embedding_type null / nope -> no RoPE, rope -> RoPE over the whole head",
          not G(dict(base, position_embedding_type=None)).rope and not G(base).rope
          and G(dict(base, position_embedding_type="rope")).rope and G(dict(base, position_embedding_type="rope")).rd
          == G(base).hd == 8)
    check("config: rope_parameters' rope_theta wins; top-level rope_theta; default 10000",
          G(dict(base, rope_parameters={"rope_type": "default", "rope_theta": 5e5})).theta == 5e5
          and G(dict(base, rope_theta=123.0)).theta == 123.0
          and G({k: v for k, v in base.items() if k != "rope_theta"}).theta == 1e4)
    check("config: head_dim given is read, absent -> hidden / heads", G(dict(base, head_dim=16)).hd == 16
          and G(base).hd == 8)
    check("config: tie_word_embeddings defaults to false (HF), num_local_experts 0 -> no MoE layer (any top-k)",
          not G({k: v for k, v in base.items() if k != "tie_word_embeddings"}).tie
          and G(dict(base, num_local_experts=0)).moe_layers == [] and G(base).moe_layers == [0, 1, 2, 3]
          and G(dict(base, num_local_experts=0, num_experts_per_tok=0)).moe_layers == [])
    check("config: bare Infinity in time_step_limit reads as inf",
          "Infinity" in open(os.path.join(GOLDEN, "granite_moe", "config.json")).read()
          and G.from_file(os.path.join(GOLDEN, "granite_moe", "config.json")).dt_max == math.inf)
    for bad in (dict(position_embedding_type="alibi"), dict(layer_types=["mamba", "mlp", "mamba", "mamba"]),
                dict(layer_types=["mamba"] * 3), dict(num_experts_per_tok=5)):
        try:
            G(dict(base, **bad))
            ok = False
        except AssertionError:
            ok = True
        check(f"config: {bad} is refused", ok)
