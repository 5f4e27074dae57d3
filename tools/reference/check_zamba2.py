#!/usr/bin/python3
"""Zamba2 section of check_ref.py: self-checks of zamba2_ref.py and of the zamba2_* golden cases.

What it is: (a) an independent torch float64 model in HF's module structure (Zamba2Model with num_mem_blocks
Zamba2AttentionDecoderLayer objects shared by the Zamba2HybridLayers in cycle() order; Zamba2Attention over the
2H concat with the per-use linear_{q,k,v}_adapter_list, rotate_half RoPE, repeat_kv and the (head_dim/2)^-0.5
scale; Zamba2MLP with gate_up_proj, its per-use gate_up_proj_adapter_list and exact gelu; the per-layer linear;
Zamba2MambaDecoderLayer adding the block's output to the Mamba input only; Zamba2MambaMixer.torch_forward, i.e.
check_nemotron's Mixer with a conv1d bias always present and Zamba2RMSNormGated's eps fixed at 1e-5), reading
config.json itself with Zamba2Config's defaults and filled by load_state_dict(strict) under HF's names (the tied
copies of each block filled from its first hybrid layer, as HF's tying does), compared with the reference on
every run; (b) the mixer against the direct O(T^2) sum; (c) prefill == step, the golden files reproduce and
make_golden.py --zamba2 writes them outside tests/golden; (d) each wrong reading moves the logits far past the
tolerance; (e) synthetic files (use_conv_bias false, duplicated block copies); (f) config rules.
What it is not: HF's code (transformers is not installed here; written from reading it), or a C++ test.
Usage: run by check_ref.py (run_checks(check, close)).
"""
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_bamba as cb  # noqa: E402
import check_granite as cg  # noqa: E402
import check_nemotron as cn  # noqa: E402
import golden_zamba2 as gz  # noqa: E402
import jamba_ref as jr  # noqa: E402
import make_golden as mg  # noqa: E402
import zamba2_ref as zr  # noqa: E402

GOLDEN = os.path.join(HERE, "..", "..", "tests", "golden")


def read_config(folder):
    """The fields HF's modules read, straight from config.json with Zamba2Config's defaults (not through
    zamba2_ref.Zamba2Config, so that the comparison also checks the reference's config reading)."""
    d = json.load(open(os.path.join(folder, "config.json")))
    get = lambda k, default: d[k] if d.get(k) is not None else default  # noqa: E731
    H, nh = d["hidden_size"], get("num_attention_heads", 32)
    types = [{"linear_attention": "mamba"}.get(t, t) for t in get("layers_block_type", get("layer_types", None))]
    Di = int(get("mamba_expand", 2) * H)
    rope = d.get("rope_parameters") or {}
    return SimpleNamespace(
        H=H, V=get("vocab_size", 32000), types=types, hybrid=[i for i, t in enumerate(types) if t == "hybrid"],
        nh=nh, nkv=get("num_key_value_heads", nh), hd=2 * H // nh, I=get("intermediate_size", 4 * H),
        eps=get("rms_norm_eps", 1e-5), nmb=get("num_mem_blocks", 1), r=get("adapter_rank", 128),
        attn_adapter=get("use_shared_attention_adapter", False), rope=get("use_mem_rope", False),
        theta=rope.get("rope_theta", get("rope_theta", 10000.0)), add_bias=get("add_bias_linear", False),
        tie=get("tie_word_embeddings", True), Di=Di, mh=get("n_mamba_heads", 8), G=get("mamba_ngroups", 1),
        N=get("mamba_d_state", 64), W=get("mamba_d_conv", 4), chunk=get("chunk_size", 256),
        use_conv_bias=get("use_conv_bias", True), tmin=get("time_step_min", 0.001))


class Mixer(cn.Mixer):                                                       # Zamba2MambaMixer, slow path
    def __init__(self, d):
        super().__init__(SimpleNamespace(
            hidden_size=d.H, mamba_num_heads=d.mh, mamba_head_dim=d.Di // d.mh, n_groups=d.G, ssm_state_size=d.N,
            conv_kernel=d.W, chunk_size=d.chunk, use_conv_bias=True, use_bias=d.add_bias,   # conv1d: bias=True
            time_step_min=d.tmin, time_step_limit=(0.0, math.inf), layer_norm_epsilon=1e-5))   # HF's literal
        self.use_conv_bias = d.use_conv_bias

    def forward_cached(self, x):
        """HF's cached branch adds the conv bias only when use_conv_bias."""
        if self.use_conv_bias:
            return super().forward_cached(x)
        bias, self.conv1d.bias = self.conv1d.bias, None
        try:
            return super().forward_cached(x)
        finally:
            self.conv1d.bias = bias


def adapter_list(d, block_id, n_in, n_out):
    """A per-use adapter list: Sequential(A, B) for the uses j with j % num_mem_blocks == block_id, else Identity."""
    return nn.ModuleList([nn.Sequential(nn.Linear(n_in, d.r, bias=False), nn.Linear(d.r, n_out, bias=False))
                          if j % d.nmb == block_id else nn.Identity() for j in range(len(d.hybrid))])


class Attention(nn.Module):                                                  # Zamba2Attention, eager
    def __init__(self, d, block_id):
        super().__init__()
        self.d, self.scaling = d, (d.hd / 2) ** -0.5
        self.q_proj = nn.Linear(2 * d.H, d.nh * d.hd, bias=False)
        self.k_proj = nn.Linear(2 * d.H, d.nkv * d.hd, bias=False)
        self.v_proj = nn.Linear(2 * d.H, d.nkv * d.hd, bias=False)
        self.o_proj = nn.Linear(d.nh * d.hd, d.H, bias=False)
        if d.attn_adapter:
            for k in "qkv":
                setattr(self, f"linear_{k}_adapter_list", adapter_list(d, block_id, 2 * d.H, 2 * d.H))
        self.layer_dic = {layer: j for j, layer in enumerate(d.hybrid)}
        self.null, self.rows, self.rope_dims = None, {}, d.hd

    def forward(self, x, layer_idx, cos, sin):
        b, L, _ = x.shape
        d, j = self.d, self.layer_dic[layer_idx]
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if d.attn_adapter:
            q = q + self.linear_q_adapter_list[j](x)
            k = k + self.linear_k_adapter_list[j](x)
            v = v + self.linear_v_adapter_list[j](x)
        q, k, v = (t.view(b, L, -1, d.hd).transpose(1, 2) for t in (q, k, v))
        if d.rope:
            rd = self.rope_dims                                              # whole head unless a test narrows it
            rot = lambda t: torch.cat([t[..., :rd] * cos[..., :rd] + cg.rotate_half(t[..., :rd]) * sin[..., :rd],  # noqa
                                       t[..., rd:]], -1)
            if rd != d.hd:                                                   # tables of a narrower rotary
                inv = 1.0 / d.theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
                f = torch.arange(L, dtype=torch.float64)[:, None] * inv[None]
                cos, sin = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()
            q, k = rot(q), rot(k)
        k, v = (t.repeat_interleave(d.nh // d.nkv, dim=1) for t in (k, v))  # repeat_kv
        w = (q @ k.transpose(2, 3)) * self.scaling + torch.full((L, L), -torch.inf).triu(1)
        col = torch.full((b, d.nh, L, 1), -torch.inf) if self.null is None else self.null.view(1, -1, 1, 1).expand(
            b, d.nh, L, 1)
        pp = torch.softmax(torch.cat([w, col], -1), -1)
        self.rows[layer_idx] = pp[0]
        return self.o_proj((pp[..., :L] @ v).transpose(1, 2).reshape(b, L, -1))


class MLP(nn.Module):                                                        # Zamba2MLP
    def __init__(self, d, block_id):
        super().__init__()
        self.gate_up_proj = nn.Linear(d.H, 2 * d.I, bias=d.add_bias)
        self.down_proj = nn.Linear(d.I, d.H, bias=d.add_bias)
        self.gate_up_proj_adapter_list = adapter_list(d, block_id, d.H, 2 * d.I)
        self.layer_dic = {layer: j for j, layer in enumerate(d.hybrid)}
        self.act, self.adapter_of = (lambda t: F.gelu(t)), (lambda j: j)     # tests swap these

    def forward(self, x, layer_idx):
        gu = self.gate_up_proj(x) + self.gate_up_proj_adapter_list[self.adapter_of(self.layer_dic[layer_idx])](x)
        g, u = torch.chunk(gu, 2, dim=-1)
        return self.down_proj(self.act(g) * u)


class AttentionDecoderLayer(nn.Module):                                      # the shared block
    def __init__(self, d, block_id):
        super().__init__()
        self.self_attn, self.feed_forward = Attention(d, block_id), MLP(d, block_id)
        self.input_layernorm, self.pre_ff_layernorm = cn.RMSNorm(2 * d.H, d.eps), cn.RMSNorm(d.H, d.eps)
        self.concat = lambda h, e: torch.cat([h, e], -1)                    # tests swap this

    def forward(self, h, orig, layer_idx, cos, sin):
        a = self.self_attn(self.input_layernorm(self.concat(h, orig)), layer_idx, cos, sin)
        return self.feed_forward(self.pre_ff_layernorm(a), layer_idx)


class MambaDecoderLayer(nn.Module):                                          # Zamba2MambaDecoderLayer
    def __init__(self, d):
        super().__init__()
        self.mamba, self.input_layernorm = Mixer(d), cn.RMSNorm(d.H, d.eps)

    def forward(self, h, transformer_hidden_states=None):
        x = h if transformer_hidden_states is None else h + transformer_hidden_states
        return h + self.mamba(self.input_layernorm(x))


class HybridLayer(nn.Module):                                                # Zamba2HybridLayer
    def __init__(self, shared_transformer, linear, mamba_decoder):
        super().__init__()
        self.shared_transformer, self.linear, self.mamba_decoder = shared_transformer, linear, mamba_decoder
        self.into_residual = False                                           # a test's wrong reading

    def forward(self, h, orig, layer_idx, cos, sin):
        t = self.linear(self.shared_transformer(h, orig, layer_idx, cos, sin))
        return self.mamba_decoder(h, t) + (t if self.into_residual else 0.0)


class CausalLM(nn.Module):
    """Zamba2ForCausalLM: model.{embed_tokens, layers, final_layernorm}, lm_head (tied: the embedding)."""
    def __init__(self, folder):
        super().__init__()
        self.d = d = read_config(folder)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(d.V, d.H)
        blocks = [AttentionDecoderLayer(d, k) for k in range(d.nmb)]
        rotation, layers = itertools.cycle(blocks), []
        for t in d.types:
            layers.append(HybridLayer(next(rotation), nn.Linear(d.H, d.H, bias=False), MambaDecoderLayer(d))
                          if t == "hybrid" else MambaDecoderLayer(d))
        self.model.layers = nn.ModuleList(layers)
        self.model.final_layernorm = cn.RMSNorm(d.H, d.eps)
        self.lm_head = nn.Linear(d.H, d.V, bias=False)
        self.blocks = blocks                                                 # a list: not registered twice
        tensors, _, _ = jr.read_safetensors(os.path.join(folder, "model.safetensors"))
        sd = {k: torch.tensor(np.asarray(v, np.float64)) for k, v in tensors.items()}
        for j, i in enumerate(d.hybrid):                                     # HF ties the copies to the source
            src = f"model.layers.{d.hybrid[j % d.nmb]}.shared_transformer."
            for k in [k for k in sd if k.startswith(src)]:
                sd.setdefault(k.replace(src, f"model.layers.{i}.shared_transformer."), sd[k])
        if d.tie:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        self.load_state_dict(sd, strict=True)                                # names, shapes and bias flags

    def forward(self, ids, n_reg, null):
        """ids (T,); n_reg test-time registers (mean embedding row); null (nh,) or None. Returns logits
        (n_reg+T, V) and the residual stream (L+1, n_reg+T, H)."""
        emb = self.model.embed_tokens.weight
        h = torch.cat([emb.mean(0, keepdim=True).expand(n_reg, -1), emb[ids]])[None]
        orig = h.clone()
        inv = 1.0 / self.d.theta ** (torch.arange(0, self.d.hd, 2, dtype=torch.float64) / self.d.hd)
        f = torch.arange(h.shape[1], dtype=torch.float64)[:, None] * inv[None]
        cos, sin = torch.cat([f, f], -1).cos(), torch.cat([f, f], -1).sin()
        resid = [h[0]]
        for i, layer in enumerate(self.model.layers):
            if isinstance(layer, HybridLayer):
                layer.shared_transformer.self_attn.null = null
                h = layer(h, orig, i, cos, sin)
            else:
                h = layer(h)
            resid.append(h[0])
        return self.lm_head(self.model.final_layernorm(h))[0], torch.stack(resid)


def mixers(tm):
    return [ly.mamba if isinstance(ly, MambaDecoderLayer) else ly.mamba_decoder.mamba for ly in tm.model.layers]


def torch_run(tm, run, nh):
    for mx in mixers(tm):
        mx.dts = []
    n_reg = run["registers"] or 0
    null = None if run["normalizer"] not in ("softmax1", "sink") else torch.zeros(nh)   # no sinks tensors here
    with torch.no_grad():
        logits, resid = tm(torch.tensor(run["token_ids"]), n_reg, null)
    return n_reg, logits[n_reg:].numpy(), resid[:, n_reg:]


def check_mixers(check, close, tag, ref, tm, rng):
    c = ref.cfg
    mx_all = mixers(tm)
    for S in (1, c.W - 1, c.W, c.chunk, 2 * c.chunk + 3):                    # conv edges, chunk crossings
        xx = rng.normal(size=(S, c.H))
        for i in (c.kinds.index("M"), c.hybrid[0]):                          # a mamba and a hybrid layer
            with torch.no_grad():
                want = mx_all[i](cb.T(xx)[None])[0].numpy()
                cached = mx_all[i].forward_cached(cb.T(xx)[None])[0].numpy()
            close(f"{tag}: layer {i} mixer == torch torch_forward (chunked), S={S}", ref.mamba_seq(ref.layers[i], xx)[0],
                  want)
            close(f"{tag}: layer {i} torch cached branch == torch chunked, S={S}", cached, want)
    mx, d = mx_all[0], []
    with torch.no_grad():
        for S in (c.chunk, c.chunk + 1, 2 * c.chunk + 3):
            xx = cb.T(rng.normal(size=(S, c.H)))[None]
            mx.hf_axis = True
            d.append(float((mx(xx) - mx.forward_cached(xx)).abs().max()))
            mx.hf_axis = False
    check(f"{tag}: HF's decay_chunk .sum(dim=2) matches its cached branch within one chunk only "
          f"(S = chunk, chunk+1, 2 chunk+3: max|d| {d[0]:.1e}, {d[1]:.1e}, {d[2]:.1e})",
          d[0] < 1e-12 and d[1] > 1e-3 and d[2] > 1e-3)
    ly = ref.layers[c.hybrid[-1]]                                            # direct O(T^2) form, 3+ chunks
    xx = rng.normal(size=(2 * c.chunk + 4, c.H))
    z, xbc0, dt_raw = ref.mamba_in(ly, xx)
    xs, Bm, Cm, dt = ref.mamba_split(ly, jr.silu(jr.causal_conv(xbc0, ly["conv_w"], ly["conv_b"])), dt_raw)
    yd = cb.direct_scan(xs, dt, ly["A"], Bm, Cm, ly["D"]).reshape(len(xx), c.Di)
    g = (yd * jr.silu(z)).reshape(len(xx), c.G, c.Di // c.G)
    g = (g / np.sqrt(np.mean(g * g, axis=-1, keepdims=True) + 1e-5)).reshape(len(xx), c.Di) * ly["norm"]
    close(f"{tag}: mixer == direct O(T^2) sum + gated norm in groups of Di/G = {c.Di // c.G}, eps 1e-5, by hand",
          ref.mamba_seq(ly, xx)[0], jr.linear(g, ly["out_w"], ly["out_b"]))


def check_runs(check, close, tag, folder, ref, tm):
    c = ref.cfg
    runs = json.load(open(os.path.join(folder, "expected", "runs.json")))["runs"]
    worst_step, worst_file, f32 = 0.0, 0.0, 0.0
    ref32 = zr.Zamba2Ref.load(folder, dtype=np.float32)
    for run in runs:
        rt = f"{tag}/{run['name']}"
        a = ref.run(run["token_ids"], run["normalizer"], run["registers"])
        b = ref.run(run["token_ids"], run["normalizer"], run["registers"], path="step")
        g, _, _ = jr.read_safetensors(os.path.join(folder, "expected", run["name"] + ".safetensors"))
        t32 = ref32.run(run["token_ids"], run["normalizer"], run["registers"])
        check(f"{rt}: same tensor names in both paths and the file", set(a) == set(b) == set(g))
        for name in a:
            scale = max(1.0, float(np.max(np.abs(a[name]))))
            worst_step = max(worst_step, float(np.max(np.abs(a[name] - b[name].astype(np.float64)))) / scale)
            worst_file = max(worst_file, float(np.max(np.abs(a[name].astype(np.float32) - g[name]))) / scale)
            if a[name].dtype.kind == "f":
                f32 = max(f32, mg.spread(t32[name], a[name])[2])
        n_reg, logits, resid = torch_run(tm, run, c.nh)
        close(f"{rt}: logits == torch HF-structure model", a["logits"], logits)
        close(f"{rt}: resid_max_abs == torch", a["resid_max_abs"], resid.abs().amax(-1).T.numpy())
        rows = [tm.model.layers[i].shared_transformer.self_attn.rows[i][:, n_reg:, :].transpose(0, 1).numpy()
                for i in c.hybrid]
        close(f"{rt}: attn_rows == torch (one row per hybrid layer)", a["attn_rows"], np.stack(rows, axis=1))
        dtm = np.stack([mx.dts[0][n_reg:].numpy() for mx in mixers(tm)], axis=1)  # (T, L, nh)
        close(f"{rt}: ssm_delta == torch dt of the channel's head", a["ssm_delta"], np.repeat(dtm, c.P, axis=2))
        close(f"{rt}: ssm_delta_mean = mean over heads", a["ssm_delta_mean"], dtm.mean(-1))
        A_ch = np.stack([np.repeat(ly["A"], c.P) for ly in ref.layers])
        close(f"{rt}: ssm_retained = exp(dt A) of the channel's head", a["ssm_retained"],
              np.exp(a["ssm_delta"] * A_ch[None]), 1e-12)
        Tn, A_n = len(run["token_ids"]), len(c.hybrid)
        check(f"{rt}: shapes A_n = {A_n} hybrid layers, M_n = L = {c.L}, L+1 residual points, no router",
              a["attn_entropy"].shape == (Tn, A_n, c.nh) and a["ssm_delta"].shape == (Tn, c.L, c.Di)
              and a["attn_rows"].shape == (Tn, A_n, c.nh, n_reg + Tn + 1)
              and a["rank1_distance"].shape == (Tn, c.L + 1) and not any(k.startswith("router") for k in a))
        check(f"{rt}: ssm_state_bytes = L (conv_dim W + Di N) 4", np.all(
            a["ssm_state_bytes"] == c.L * (c.conv_dim * c.W + c.Di * c.N) * 4))
        check(f"{rt}: kv_cache_bytes = 2 A_n nkv (2H/nh) (n_reg + t + 1) 4", np.array_equal(
            a["kv_cache_bytes"], 2 * A_n * c.nkv * c.hd * (n_reg + np.arange(Tn) + 1) * 4))
        n_cl, n_all = gz.clamp_counts(ref, a)
        check(f"{rt}: dt >= time_step_min {c.dt_floor}; the floor holds {n_cl} of {n_all} head-token values",
              a["ssm_delta"].min() >= c.dt_floor and n_cl > 0)
    check(f"{tag}: step == prefill", worst_step <= 1e-10, f"max rel {worst_step:.2e}")
    check(f"{tag}: golden files == reference", worst_file <= 2.0 ** -21, f"max rel {worst_file:.2e}")
    check(f"{tag}: float32 run of the reference within 10 % of the golden tolerance", f32 < 0.1,
          f"worst {100 * f32:.1f} %")
    return runs


def check_mistakes(check, tag, tm, ref, run):
    """Each wrong reading of HF's file moves the logits; the ones that matter far past the tolerance."""
    c = ref.cfg
    want = ref.run(run["token_ids"], run["normalizer"], run["registers"])["logits"]

    def moved(name, objs, attr, wrong, big=True):
        saved = [getattr(o, attr) for o in objs]
        for o in objs:
            setattr(o, attr, wrong(getattr(o, attr)) if callable(wrong) and not isinstance(wrong, nn.Module) else wrong)
        try:
            _, got, _ = torch_run(tm, run, c.nh)
        finally:
            for o, s in zip(objs, saved):
                setattr(o, attr, s)
        d, frac = float(np.abs(got - want).max()), mg.spread(got, want)[2]
        if big:
            check(f"{tag}: {name} would be caught (logits move by {d:.2f})", d > 1e-2)
        else:                                                                # small: is the golden tolerance enough?
            check(f"{tag}: {name}: logits move by {d:.1e}, {frac:.1f} x the golden tolerance", frac > 1.0)

    blocks = tm.blocks
    mlps, attns = [b.feed_forward for b in blocks], [b.self_attn for b in blocks]
    hyb = [tm.model.layers[i] for i in c.hybrid]
    zero = lambda lst: nn.ModuleList([_Zero() for _ in lst])  # noqa: E731
    moved("gate_up adapters left out", mlps, "gate_up_proj_adapter_list", zero)
    if c.attn_adapter:
        for k in "qkv":
            moved(f"linear_{k}_adapter left out", attns, f"linear_{k}_adapter_list", zero)
    if len(c.hybrid) > c.nmb:                                                # a block used twice: adapters swap
        def partner(j):                                                      # the block's uses in reverse order
            uses = list(range(j % c.nmb, len(c.hybrid), c.nmb))
            return uses[len(uses) - 1 - uses.index(j)]
        moved("another use's gate_up adapter (a block's uses in reverse)", mlps, "adapter_of", lambda f: partner)
    moved("concat [e, h] instead of [h, e]", blocks, "concat", lambda f: (lambda h, e: torch.cat([e, h], -1)))
    moved("concat [h, h] (original embeddings left out)", blocks, "concat", lambda f: (lambda h, e: torch.cat([h, h], -1)))
    moved("scale head_dim^-0.5 instead of (head_dim/2)^-0.5", attns, "scaling", (c.hd) ** -0.5)
    moved("block output added to the residual too", hyb, "into_residual", True)
    moved("no time_step_min floor", mixers(tm), "c", lambda cc: SimpleNamespace(**dict(vars(cc), time_step_min=0.0)))
    moved("HF's literal cross-chunk sum over the target chunk", mixers(tm), "hf_axis", True)
    if c.rope:
        moved("RoPE over half the head", attns, "rope_dims", c.hd // 2)
        moved("no RoPE", attns, "d", lambda dd: SimpleNamespace(**dict(vars(dd), rope=False)))
    if c.G > 1:
        moved("gated norm over all Di (one group)", [m.norm for m in mixers(tm)], "group_size", c.Di)
    moved("gelu tanh approximation", mlps, "act", lambda f: (lambda t: F.gelu(t, approximate="tanh")), big=False)
    if c.eps != 1e-5:
        moved(f"gated-norm eps rms_norm_eps {c.eps} instead of 1e-5", [m.norm for m in mixers(tm)], "eps", c.eps,
              big=False)


class _Zero(nn.Module):
    def forward(self, x):
        return 0.0


def check_synthetic(check, close):
    """Files HF may meet but the goldens do not have: use_conv_bias false (the conv1d.bias still stored), a block
    stored again under a later hybrid layer (a save without tie de-duplication), a tied lm_head stored too."""
    spec = dict(gz.case_specs()[0], seed=4343)
    spec["config"] = gz.make_config(**dict(spec["config"], use_conv_bias=False))
    with tempfile.TemporaryDirectory() as folder:
        mg.write_checkpoint(folder, spec)
        ref, tm = zr.Zamba2Ref.load(folder), CausalLM(folder)
        xx = np.random.default_rng(6).normal(size=(2 * ref.cfg.chunk + 3, ref.cfg.H))
        mx = mixers(tm)[0]
        with torch.no_grad():
            cached = mx.forward_cached(cb.T(xx)[None])[0].numpy()
            full = mx(cb.T(xx)[None])[0].numpy()
        mine = ref.mamba_seq(ref.layers[0], xx)[0]
        close("use_conv_bias false: mixer == HF's cached branch (no conv bias, as the original Mamba-2)", mine, cached)
        d = float(np.abs(full - mine).max())
        check(f"use_conv_bias false: HF's full-sequence path adds the stored bias anyway (differs by {d:.2f})", d > 1e-3)
        ids = [int(v) for v in np.random.default_rng(7).integers(0, ref.cfg.V, size=13)]
        close("use_conv_bias false: step == prefill", ref.run(ids, None, 1, path="step")["logits"],
              ref.run(ids, None, 1)["logits"])
    spec = gz.case_specs()[1]
    with tempfile.TemporaryDirectory() as folder:
        mg.write_checkpoint(folder, spec)
        tensors, _ = jr.load_tensors(folder)
        cfg = zr.Zamba2Config.from_file(os.path.join(folder, "config.json"))
        want = zr.Zamba2Ref(cfg, tensors).run([3, 5, 7], None, None)["logits"]
        dup = dict(tensors)
        for k in [k for k in tensors if k.startswith("model.layers.0.shared_transformer.")]:
            dup[k.replace("layers.0.", "layers.3.")] = tensors[k]
        dup["lm_head.weight"] = tensors["model.embed_tokens.weight"]
        close("a block stored again under its later hybrid layer, a tied lm_head stored: same logits",
              zr.Zamba2Ref(cfg, dup).run([3, 5, 7], None, None)["logits"], want, 0)
        bad = dict(dup)
        k = "model.layers.3.shared_transformer.pre_ff_layernorm.weight"
        bad[k] = bad[k] + 1.0
        check("a later copy that differs from the block's source layer is refused", refused(lambda: zr.Zamba2Ref(cfg, bad)))
        bad = dict(tensors)
        bad["model.layers.0.shared_transformer.feed_forward.gate_up_proj_adapter_list.5.0.weight"] = np.zeros((6, 48))
        check("an adapter of a use that is not the block's is refused", refused(lambda: zr.Zamba2Ref(cfg, bad)))


def refused(f):
    try:
        f()
    except AssertionError:
        return True
    return False


def check_config(check):
    C = zr.Zamba2Config
    base = gz.case_specs()[0]["config"]
    drop = lambda *ks: {k: v for k, v in base.items() if k not in ks}  # noqa: E731
    dflt = C({"model_type": "zamba2"})
    check("config: defaults (54 layers, hybrid at 6, 12, ..., 42, 47, 51; H 2560; nh 32 -> head dim 160; "
          "nkv = nh; I = 4H; Di 5120 in 8 heads of 640; N 64; W 4; chunk 256; 1 block; tied; no RoPE; eps 1e-5)",
          dflt.L == 54 and dflt.hybrid == [6, 12, 18, 24, 30, 36, 42, 47, 51] and dflt.hd == 160
          and dflt.nkv == 32 and dflt.I == 4 * 2560 and (dflt.Di, dflt.mh, dflt.P) == (5120, 8, 640)
          and (dflt.N, dflt.W, dflt.chunk, dflt.nmb, dflt.rank) == (64, 4, 256, 1, 128) and dflt.tie
          and not dflt.rope and not dflt.attn_adapter and dflt.eps == dflt.gated_eps == 1e-5
          and dflt.dt_floor == 0.001 and dflt.dt_max == math.inf and dflt.theta == 10000.0)
    check("config: layer_types alias and v5's linear_attention name read as layers_block_type",
          C(dict(drop("layers_block_type"), layer_types=["linear_attention", "hybrid"] * 3)).kinds == "MHMHMH"
          == C(base).kinds)
    check("config: rope_parameters' theta wins over rope_theta; RoPE over the whole 2H/nh head",
          C(dict(base, rope_parameters={"rope_type": "default", "rope_theta": 5e5})).theta == 5e5
          and C(base).rd == C(base).hd == 16)
    check("config: head_dim / attention_head_dim / mamba_headdim equal to the derived values are accepted",
          C(dict(base, head_dim=16, attention_head_dim=16, attention_hidden_size=64, mamba_headdim=8)).hd == 16)
    check("config: gated-norm eps is 1e-5 whatever rms_norm_eps says", C(base).gated_eps == 1e-5 and C(base).eps == 1e-6)
    for bad in (dict(use_long_context=True), dict(hidden_act="silu"), dict(attention_head_dim=8),
                dict(mamba_headdim=16), dict(use_shared_mlp_adapter=False), dict(num_hidden_layers=5),
                dict(use_shared_attention_adapter=True),                         # with nkv 2 < nh 4
                dict(layers_block_type=["attention"] * 6),
                dict(rope_parameters={"rope_type": "linear", "factor": 2.0}), dict(model_type="nemotron_h")):
        check(f"config: {bad} is refused", refused(lambda: C(dict(base, **bad))))


def run_checks(check, close):
    torch.set_default_dtype(torch.float64)
    print("(i) Zamba2 (zamba2_ref.py; cases generated into a temporary folder, pending the engine)")
    check("no zamba2_* folder under tests/golden (the engine's golden test would run it)",
          not any(n.startswith("zamba2") for n in os.listdir(GOLDEN)))
    rng = np.random.default_rng(41)
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as tmp2:
        for spec in gz.case_specs():
            mg.write_case(tmp, spec, {})
        out = subprocess.run([sys.executable, os.path.join(HERE, "make_golden.py"), "--zamba2", tmp2],
                             capture_output=True, text=True)
        same = out.returncode == 0 and sorted(os.listdir(tmp2)) == [s["name"] for s in gz.case_specs()] and all(
            open(os.path.join(r, f), "rb").read() == open(os.path.join(r.replace(tmp2, tmp), f), "rb").read()
            for r, _, fs in os.walk(tmp2) for f in fs)
        check("make_golden.py --zamba2 DIR writes exactly these cases into DIR, byte for byte", same)
        for spec in gz.case_specs():
            tag = spec["name"]
            folder = os.path.join(tmp, tag)
            ref, tm = zr.Zamba2Ref.load(folder), CausalLM(folder)
            c = ref.cfg
            check(f"{tag}: torch model loads the file strictly under HF's names (tied block copies filled in)", True)
            check(f"{tag}: hybrid layer j uses block j % num_mem_blocks, in hybrid order",
                  all(tm.model.layers[i].shared_transformer is tm.blocks[j % c.nmb] for j, i in enumerate(c.hybrid))
                  and [ly["block"] for ly in ref.layers if ly["attn"]] == [j % c.nmb for j in range(len(c.hybrid))])
            check_mixers(check, close, tag, ref, tm, rng)
            runs = check_runs(check, close, tag, folder, ref, tm)
            check_mistakes(check, tag, tm, ref, runs[0])
    check_synthetic(check, close)
    check_config(check)
