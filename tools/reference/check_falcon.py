#!/usr/bin/python3
"""Falcon-H1 section of check_ref.py: self-checks of falcon_ref.py and of the falcon_* golden cases.

What it is: (a) an independent torch float64 model in HF's module structure (FalconH1DecoderLayer: mamba and
attention side by side on input_layernorm(h), with ssm_out / attention_in / attention_out multipliers, then
the MLP on pre_ff_layernorm; FalconH1Mixer.torch_forward with ssm_in_multiplier, the non-persistent
mup_vector buffer, the naive chunked SSD with HF's transpose(1, 3) and sum over dim 1, and its cached
one-token branch; FalconH1RMSNormGated with n_groups and norm_before_gate; FalconH1Attention with
key_multiplier, rotate_half RoPE and repeat_kv; FalconH1MLP with mlp_multipliers; embedding and lm_head
multipliers), reading config.json itself with FalconH1Config's defaults and filled by load_state_dict(strict)
under HF's names, compared with the reference on every run (logits, residuals, attention rows, dt); (b) the
mixer against the direct O(T^2) sum; (c) config rules, dt clamp, byte counters; (d) each multiplier or rule
done wrong moves the logits far past the tolerance; (e) a synthetic checkpoint with attention biases and the
norm-before-gate gated norm. Prefill vs step (1e-10) and the files reproducing: check_ref.py (b).
What it is not: HF's code (transformers is not installed here; written from reading it), or a C++ test.
Usage: run by check_ref.py (run_checks(check, close)).
"""
import json
import math
import os
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
import falcon_ref as fr  # noqa: E402
import golden_falcon as gf  # noqa: E402
import jamba_ref as jr  # noqa: E402
import make_golden as mg  # noqa: E402

GOLDEN = os.path.join(HERE, "..", "..", "tests", "golden")


def read_config(folder):
    """The fields HF's modules read, straight from config.json with FalconH1Config's defaults (not through
    falcon_ref.FalconH1Config, so that the comparison also checks the reference's config reading)."""
    d = json.load(open(os.path.join(folder, "config.json")))
    get = lambda k, default: d[k] if d.get(k) is not None else default  # noqa: E731
    H, nh = d["hidden_size"], d["num_attention_heads"]
    Di = 1024 if "mamba_d_ssm" not in d else get("mamba_d_ssm", get("mamba_expand", 2) * H)   # null: expand H
    mh = get("mamba_n_heads", 128)
    rope = d.get("rope_parameters") or {}
    return SimpleNamespace(
        H=H, V=d["vocab_size"], L=d["num_hidden_layers"], nh=nh, nkv=get("num_key_value_heads", nh),
        hd=get("head_dim", H // nh), I=get("intermediate_size", 14336), eps=get("rms_norm_eps", 1e-5),
        attn_bias=get("attention_bias", False), mlp_bias=get("mlp_bias", False),
        tie=get("tie_word_embeddings", False), theta=rope.get("rope_theta", d.get("rope_theta")),
        emb_mult=get("embedding_multiplier", 1.0), lm_mult=get("lm_head_multiplier", 1.0),
        key_mult=get("key_multiplier", 1.0), attn_in=get("attention_in_multiplier", 1.0),
        attn_out=get("attention_out_multiplier", 1.0), ssm_in=get("ssm_in_multiplier", 1.0),
        ssm_out=get("ssm_out_multiplier", 1.0), mlp_mults=get("mlp_multipliers", [1.0, 1.0]),
        ssm_mults=get("ssm_multipliers", [1.0] * 5), Di=Di, mh=mh,
        P=Di // mh if get("mamba_d_head", "auto") == "auto" else d["mamba_d_head"],
        G=get("mamba_n_groups", 1), N=get("mamba_d_state", 256), W=get("mamba_d_conv", 4),
        chunk=get("mamba_chunk_size", 256), conv_bias=get("mamba_conv_bias", True),
        proj_bias=get("mamba_proj_bias", False), out_bias=get("projectors_bias", False),
        rms_norm=get("mamba_rms_norm", False), norm_before_gate=get("mamba_norm_before_gate", True),
        limit=tuple(get("time_step_limit", [0.0, math.inf])))


def mup_vector(d):
    """compute_mup_vector, in HF's way: ones, each slice multiplied in place."""
    v = torch.ones(1, 1, 2 * d.Di + 2 * d.G * d.N + d.mh)
    a, b = d.Di, 2 * d.Di
    for k, (lo, hi) in enumerate([(0, a), (a, b), (b, b + d.G * d.N), (b + d.G * d.N, b + 2 * d.G * d.N),
                                  (b + 2 * d.G * d.N, v.shape[-1])]):
        v[:, :, lo:hi] *= d.ssm_mults[k]
    return v


class GatedNorm(nn.Module):                                                  # FalconH1RMSNormGated
    def __init__(self, n, eps, n_groups, norm_before_gate):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps
        self.n_groups, self.norm_before_gate = n_groups, norm_before_gate

    def forward(self, h, gate):
        if not self.norm_before_gate:
            h = h * F.silu(gate)
        b, L, dim = h.shape
        h = h.view(b, L, self.n_groups, dim // self.n_groups)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        h = (self.weight.view(self.n_groups, dim // self.n_groups) * h).view(b, L, dim)
        return h * F.silu(gate) if self.norm_before_gate else h


class Mixer(nn.Module):                                                      # FalconH1Mixer, slow path
    def __init__(self, d):
        super().__init__()
        self.d, self.nh, self.hd, self.G, self.N, self.Di = d, d.mh, d.P, d.G, d.N, d.Di
        self.conv_dim = d.Di + 2 * d.G * d.N
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d.W, groups=self.conv_dim, padding=d.W - 1,
                                bias=d.conv_bias)
        self.in_proj = nn.Linear(d.H, d.Di + self.conv_dim + d.mh, bias=d.proj_bias)
        self.dt_bias, self.A_log = nn.Parameter(torch.ones(d.mh)), nn.Parameter(torch.ones(d.mh))
        if d.rms_norm:
            self.norm = GatedNorm(d.Di, d.eps, d.G, d.norm_before_gate)
        self.D = nn.Parameter(torch.ones(d.mh))
        self.out_proj = nn.Linear(d.Di, d.H, bias=d.out_bias)
        self.register_buffer("mup_vector", mup_vector(d), persistent=False)
        self.ssm_in_multiplier, self.dts = d.ssm_in, []

    def project(self, x):
        p = self.in_proj(x * self.ssm_in_multiplier) * self.mup_vector
        return p.split([self.Di, self.conv_dim, self.nh], dim=-1)

    def gate_out(self, y, gate):
        return self.out_proj(self.norm(y, gate) if hasattr(self, "norm") else y * F.silu(gate))

    def forward(self, x):                                                    # no cache: x (b, L, H)
        b, L, _ = x.shape
        Q = self.d.chunk
        gate, hbc, dt = self.project(x)
        hbc = F.silu(self.conv1d(hbc.transpose(1, 2))[..., :L].transpose(1, 2))
        hs, B, C = torch.split(hbc, [self.Di, self.G * self.N, self.G * self.N], dim=-1)
        A = -torch.exp(self.A_log)
        dt = torch.clamp(F.softplus(dt + self.dt_bias), *self.d.limit)
        self.dts.append(dt[0])
        hs = hs.reshape(b, L, -1, self.hd)
        B = B.reshape(b, L, -1, self.N).repeat_interleave(self.nh // self.G, dim=2)
        C = C.reshape(b, L, -1, self.N).repeat_interleave(self.nh // self.G, dim=2)
        pad = (Q - L % Q) % Q
        padL = lambda t: F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))       # noqa: E731
        chunks = lambda t: padL(t).reshape(b, -1, Q, *t.shape[2:])          # noqa: E731
        D_res = self.D[..., None] * padL(hs)
        hs, A = hs * dt[..., None], A * dt
        hs, A, B, C = (chunks(t) for t in (hs, A, B, C))
        A = A.permute(0, 3, 1, 2)                                            # (b, h, c, l)
        A_cum = torch.cumsum(A, dim=-1)
        Lm = torch.exp(cn.segment_sum(A))
        G = (C[:, :, :, None, :, :] * B[:, :, None, :, :, :]).sum(-1)      # (b, c, l, s, h)
        M = (G[..., None] * Lm.permute(0, 2, 3, 4, 1)[..., None]).sum(-1)
        Y_diag = (M[..., None] * hs[:, :, None]).sum(3)
        decay_states = torch.exp(A_cum[:, :, :, -1:] - A_cum)
        Bd = B * decay_states.permute(0, -2, -1, 1)[..., None]
        states = (Bd[..., None, :] * hs[..., None]).sum(dim=2)              # (b, c, h, p, n)
        states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
        decay_chunk = torch.exp(cn.segment_sum(F.pad(A_cum[:, :, :, -1], (1, 0)))).transpose(1, 3)
        new = (decay_chunk[..., None, None] * states[:, :, None, ...]).sum(dim=1)   # HF: over the source chunk
        Y_off = (C[..., None, :] * new[:, :-1, None]).sum(-1) * torch.exp(A_cum).permute(0, 2, 3, 1)[..., None]
        y = ((Y_diag + Y_off).reshape(b, -1, self.nh, self.hd) + D_res)[:, :L].reshape(b, L, -1)
        return self.gate_out(y, gate)

    def forward_cached(self, x):
        """The use_precomputed_states branch, one token at a time from zero states. x (1, L, H)."""
        conv = torch.zeros(1, self.conv_dim, self.d.W)
        ssm = torch.zeros(1, self.nh, self.hd, self.N)
        out = []
        for t in range(x.shape[1]):
            gate, hbc, dt = self.project(x[:, t:t + 1])
            conv = conv.roll(shifts=-1, dims=-1)
            conv[:, :, -1] = hbc[:, 0]
            hbc = torch.sum(conv * self.conv1d.weight[:, 0, :], dim=-1)
            if self.conv1d.bias is not None:
                hbc = hbc + self.conv1d.bias
            hs, B, C = torch.split(F.silu(hbc), [self.Di, self.G * self.N, self.G * self.N], dim=-1)
            dt = dt[:, 0, :, None].expand(1, self.nh, self.hd)
            dt = torch.clamp(F.softplus(dt + self.dt_bias[:, None]), *self.d.limit)
            dA = torch.exp(dt[..., None] * -torch.exp(self.A_log)[:, None, None])
            B = B.reshape(1, self.G, 1, self.N).expand(1, self.G, self.nh // self.G, self.N).reshape(1, self.nh, self.N)
            C = C.reshape(1, self.G, 1, self.N).expand(1, self.G, self.nh // self.G, self.N).reshape(1, self.nh, self.N)
            hs = hs.reshape(1, self.nh, self.hd)
            ssm = ssm * dA + dt[..., None] * B[:, :, None, :] * hs[..., None]
            y = torch.bmm(ssm.view(self.nh, self.hd, self.N), C.view(self.nh, self.N, 1)).view(1, self.nh, self.hd)
            y = (y + hs * self.D[:, None]).reshape(1, 1, -1)
            out.append(self.gate_out(y, gate)[:, 0])
        return torch.stack(out, dim=1)


class Attention(nn.Module):                                                  # FalconH1Attention, eager
    def __init__(self, d):
        super().__init__()
        self.d, self.scaling, self.key_multiplier = d, d.hd ** -0.5, d.key_mult
        self.q_proj = nn.Linear(d.H, d.nh * d.hd, bias=d.attn_bias)
        self.k_proj = nn.Linear(d.H, d.nkv * d.hd, bias=d.attn_bias)
        self.v_proj = nn.Linear(d.H, d.nkv * d.hd, bias=d.attn_bias)
        self.o_proj = nn.Linear(d.nh * d.hd, d.H, bias=d.attn_bias)
        self.null, self.rows = None, []

    def forward(self, x, cos, sin):
        b, L, _ = x.shape
        d = self.d
        q = self.q_proj(x).view(b, L, -1, d.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, L, -1, d.hd).transpose(1, 2) * self.key_multiplier
        v = self.v_proj(x).view(b, L, -1, d.hd).transpose(1, 2)
        rd = cos.shape[-1]                                                   # whole head unless a test narrows it
        rot = lambda t: torch.cat([t[..., :rd] * cos + cg.rotate_half(t[..., :rd]) * sin, t[..., rd:]], -1)  # noqa
        q, k = rot(q), rot(k)
        k, v = (t.repeat_interleave(d.nh // d.nkv, dim=1) for t in (k, v))  # repeat_kv
        w = (q @ k.transpose(2, 3)) * self.scaling + torch.full((L, L), -torch.inf).triu(1)
        col = torch.full((b, d.nh, L, 1), -torch.inf) if self.null is None else self.null.view(1, -1, 1, 1).expand(
            b, d.nh, L, 1)
        pp = torch.softmax(torch.cat([w, col], -1), -1)
        self.rows.append(pp[0])
        return self.o_proj((pp[..., :L] @ v).transpose(1, 2).reshape(b, L, -1))


class MLP(nn.Module):                                                        # FalconH1MLP
    def __init__(self, d):
        super().__init__()
        self.gate_proj = nn.Linear(d.H, d.I, bias=d.mlp_bias)
        self.up_proj = nn.Linear(d.H, d.I, bias=d.mlp_bias)
        self.down_proj = nn.Linear(d.I, d.H, bias=d.mlp_bias)
        self.gate_multiplier, self.down_multiplier = d.mlp_mults

    def forward(self, x):
        return self.down_proj(self.up_proj(x) * F.silu(self.gate_proj(x) * self.gate_multiplier)) * self.down_multiplier


class Layer(nn.Module):                                                      # FalconH1DecoderLayer
    def __init__(self, d):
        super().__init__()
        self.feed_forward, self.mamba, self.self_attn = MLP(d), Mixer(d), Attention(d)
        self.attention_in_multiplier, self.ssm_out_multiplier = d.attn_in, d.ssm_out
        self.attn_out_multiplier = d.attn_out
        self.input_layernorm = cn.RMSNorm(d.H, d.eps)
        self.pre_ff_layernorm = cn.RMSNorm(d.H, d.eps)

    def forward(self, h, cos, sin):
        x = self.input_layernorm(h)
        m = self.mamba(x) * self.ssm_out_multiplier
        a = self.self_attn(x * self.attention_in_multiplier, cos, sin) * self.attn_out_multiplier
        h = h + (m + a)
        return h + self.feed_forward(self.pre_ff_layernorm(h))


class CausalLM(nn.Module):
    """FalconH1ForCausalLM: model.{embed_tokens, layers, final_layernorm}, lm_head (tied: the embedding)."""
    def __init__(self, folder):
        super().__init__()
        self.d = d = read_config(folder)
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(d.V, d.H)
        self.model.layers = nn.ModuleList([Layer(d) for _ in range(d.L)])
        self.model.final_layernorm = cn.RMSNorm(d.H, d.eps)
        self.lm_head = nn.Linear(d.H, d.V, bias=False)
        tensors, _, _ = jr.read_safetensors(os.path.join(folder, "model.safetensors"))
        sd = {k: torch.tensor(np.asarray(v, np.float64)) for k, v in tensors.items()}
        if d.tie:
            sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
        self.load_state_dict(sd, strict=True)                                # names, shapes and bias flags
        self.emb_mult, self.lm_mult, self.rope_dims = d.emb_mult, d.lm_mult, d.hd

    def forward(self, ids, n_reg, null):
        """ids (T,); n_reg test-time registers (mean embedding row); null (nh,) or None. Returns logits
        (n_reg+T, V) and the residual stream (L+1, n_reg+T, H)."""
        emb = self.model.embed_tokens.weight
        h = torch.cat([emb.mean(0, keepdim=True).expand(n_reg, -1), emb[ids]])[None] * self.emb_mult
        rd = self.rope_dims                                                  # FalconH1RotaryEmbedding, default
        inv = 1.0 / self.d.theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
        f = torch.arange(h.shape[1], dtype=torch.float64)[:, None] * inv[None]
        f = torch.cat([f, f], -1)
        resid = [h[0]]
        for layer in self.model.layers:
            layer.self_attn.null = null
            h = layer(h, f.cos(), f.sin())
            resid.append(h[0])
        return (self.lm_head(self.model.final_layernorm(h)) * self.lm_mult)[0], torch.stack(resid)


def torch_run(tm, run, nh):
    for layer in tm.model.layers:
        layer.self_attn.rows, layer.mamba.dts = [], []
    n_reg = run["registers"] or 0
    null = None if run["normalizer"] not in ("softmax1", "sink") else torch.zeros(nh)   # no sinks tensors here
    with torch.no_grad():
        logits, resid = tm(torch.tensor(run["token_ids"]), n_reg, null)
    return n_reg, logits[n_reg:].numpy(), resid[:, n_reg:]


def check_mixers(check, close, tag, ref, tm, rng):
    c = ref.cfg
    for S in (1, c.W - 1, c.W, c.chunk, 2 * c.chunk + 3):                    # conv edges, chunk crossings
        xx = rng.normal(size=(S, c.H))
        for i in range(min(2, c.L)):
            mx = tm.model.layers[i].mamba
            with torch.no_grad():
                want = mx(cb.T(xx)[None])[0].numpy()
                cached = mx.forward_cached(cb.T(xx)[None])[0].numpy()
            close(f"{tag}: layer {i} mixer == torch torch_forward (chunked), S={S}", ref.mamba_seq(ref.layers[i], xx)[0],
                  want)
            close(f"{tag}: layer {i} torch cached branch == torch chunked, S={S}", cached, want)
    ly = ref.layers[0]                                                       # direct O(T^2) form, 3+ chunks
    xx = rng.normal(size=(2 * c.chunk + 4, c.H))
    z, xbc0, dt_raw = ref.mamba_in(ly, xx)
    xs, Bm, Cm, dt = ref.mamba_split(ly, jr.silu(jr.causal_conv(xbc0, ly["conv_w"], ly["conv_b"])), dt_raw)
    yd = cb.direct_scan(xs, dt, ly["A"], Bm, Cm, ly["D"]).reshape(len(xx), c.Di)
    if ly["norm"] is None:
        g = yd * jr.silu(z)
    else:
        g = (yd if c.norm_before_gate else yd * jr.silu(z)).reshape(len(xx), c.G, c.Di // c.G)
        g = (g / np.sqrt(np.mean(g * g, axis=-1, keepdims=True) + c.eps)).reshape(len(xx), c.Di) * ly["norm"]
        g = g * jr.silu(z) if c.norm_before_gate else g
    close(f"{tag}: mixer == direct O(T^2) sum + gate (rms_norm {c.rms_norm}, before gate {c.norm_before_gate}) "
          "by hand", ref.mamba_seq(ly, xx)[0], jr.linear(g, ly["out_w"], ly["out_b"]))


def run_checks(check, close):
    torch.set_default_dtype(torch.float64)
    print("(h) Falcon-H1 (falcon_ref.py)")
    rng = np.random.default_rng(37)
    for spec in gf.case_specs():
        tag = spec["name"]
        folder = os.path.join(GOLDEN, tag)
        ref = fr.FalconH1Ref.load(folder)
        c = ref.cfg
        tm = CausalLM(folder)
        check(f"{tag}: torch model loads the file strictly under HF's names", True)
        check_mixers(check, close, tag, ref, tm, rng)
        if c.rms_norm:                                                       # the other norm_before_gate value
            for flag in (not c.norm_before_gate, c.norm_before_gate):
                for x in [ref.cfg] + [layer.mamba.norm for layer in tm.model.layers]:
                    x.norm_before_gate = flag
                if flag != spec["config"]["mamba_norm_before_gate"]:
                    check_mixers(check, close, tag + " (norm_before_gate flipped)", ref, tm, rng)
        runs = json.load(open(os.path.join(folder, "expected", "runs.json")))["runs"]
        for run in runs:
            rt = f"{tag}/{run['name']}"
            a = ref.run(run["token_ids"], run["normalizer"], run["registers"])
            n_reg, logits, resid = torch_run(tm, run, c.nh)
            close(f"{rt}: logits == torch HF-structure model", a["logits"], logits)
            close(f"{rt}: resid_max_abs == torch", a["resid_max_abs"], resid.abs().amax(-1).T.numpy())
            rows = [layer.self_attn.rows[0][:, n_reg:, :].transpose(0, 1).numpy() for layer in tm.model.layers]
            close(f"{rt}: attn_rows == torch", a["attn_rows"], np.stack(rows, axis=1))
            dtm = np.stack([layer.mamba.dts[0][n_reg:].numpy() for layer in tm.model.layers], axis=1)  # (T, L, nh)
            close(f"{rt}: ssm_delta == torch dt of the channel's head", a["ssm_delta"], np.repeat(dtm, c.P, axis=2))
            close(f"{rt}: ssm_delta_mean = mean over heads", a["ssm_delta_mean"], dtm.mean(-1))
            A_ch = np.stack([np.repeat(ly["A"], c.P) for ly in ref.layers])
            close(f"{rt}: ssm_retained = exp(dt A) of the channel's head", a["ssm_retained"],
                  np.exp(a["ssm_delta"] * A_ch[None]), 1e-12)
            Tn = len(run["token_ids"])
            check(f"{rt}: shapes A_n = M_n = L = {c.L}, L+1 residual points, no router",
                  a["attn_entropy"].shape == (Tn, c.L, c.nh) and a["ssm_delta"].shape == (Tn, c.L, c.Di)
                  and a["attn_rows"].shape == (Tn, c.L, c.nh, n_reg + Tn + 1)
                  and a["rank1_distance"].shape == (Tn, c.L + 1) and not any(k.startswith("router") for k in a))
            check(f"{rt}: ssm_state_bytes = L (conv_dim W + Di N) 4", np.all(
                a["ssm_state_bytes"] == c.L * (c.conv_dim * c.W + c.Di * c.N) * 4))
            check(f"{rt}: kv_cache_bytes = 2 L nkv hd (n_reg + t + 1) 4", np.array_equal(
                a["kv_cache_bytes"], 2 * c.L * c.nkv * c.hd * (n_reg + np.arange(Tn) + 1) * 4))
            d = a["ssm_delta"][:, :, ::c.P]
            if c.dt_max < math.inf:
                check(f"{rt}: time_step_limit clamp reached: {int(np.sum(d == c.dt_min))} at {c.dt_min}, "
                      f"{int(np.sum(d == c.dt_max))} at {c.dt_max} of {d.size}",
                      np.sum(d == c.dt_min) > 0 and np.sum(d == c.dt_max) > 0 and d.min() >= c.dt_min)
            else:
                lo = spec["config"]["time_step_min"]
                check(f"{rt}: no time_step_min floor: {int(np.sum(d < lo))} of {d.size} head-token dt values lie "
                      f"below {lo}", np.sum(d < lo) > 0)
        check_mistakes(check, tag, tm, ref, runs[0])
    check_synthetic(check, close)
    check_config(check)


def check_mistakes(check, tag, tm, ref, run):
    """Each wrong reading of HF's file moves the logits far past the 1e-10 tolerance of the comparisons."""
    c = ref.cfg
    want = ref.run(run["token_ids"], run["normalizer"], run["registers"])["logits"]

    def moved(name, objs, attr, wrong):
        saved = [getattr(o, attr) for o in objs]
        for o in objs:
            setattr(o, attr, wrong(getattr(o, attr)) if callable(wrong) else wrong)
        _, got, _ = torch_run(tm, run, c.nh)
        for o, s in zip(objs, saved):
            setattr(o, attr, s)
        d = float(np.abs(got - want).max())
        check(f"{tag}: {name} would be caught (logits move by {d:.2f})", d > 1e-3)

    layers = list(tm.model.layers)
    mixers, attns, mlps = [x.mamba for x in layers], [x.self_attn for x in layers], [x.feed_forward for x in layers]
    moved("embedding_multiplier ignored", [tm], "emb_mult", 1.0)
    moved("lm_head_multiplier ignored", [tm], "lm_mult", 1.0)
    moved("key_multiplier ignored", attns, "key_multiplier", 1.0)
    moved("attention_in_multiplier ignored", layers, "attention_in_multiplier", 1.0)
    moved("attention_out_multiplier ignored", layers, "attn_out_multiplier", 1.0)
    moved("ssm_in_multiplier ignored", mixers, "ssm_in_multiplier", 1.0)
    moved("ssm_out_multiplier ignored", layers, "ssm_out_multiplier", 1.0)
    moved("gate multiplier (mlp_multipliers[0]) ignored", mlps, "gate_multiplier", 1.0)
    moved("down multiplier (mlp_multipliers[1]) ignored", mlps, "down_multiplier", 1.0)
    segs = np.cumsum([0, c.Di, c.Di, c.G * c.N, c.G * c.N, c.mh])
    for k, seg in enumerate("z x B C dt".split()):
        def one_seg(v, k=k):
            v = v.clone()
            v[..., segs[k]:segs[k + 1]] = 1.0
            return v
        moved(f"ssm_multipliers[{k}] ({seg} segment) ignored", mixers, "mup_vector", one_seg)
    moved("head_dim^-0.5 scale left out", attns, "scaling", 1.0)
    moved("Bamba's partial rotary (half the head)", [tm], "rope_dims", c.hd // 2)
    if c.G > 1:                                                              # head h -> group h % G
        def tiled(ly, xbc, dt_raw):
            x, _, _, dt = fr.FalconH1Ref.mamba_split(ref, ly, xbc, dt_raw)
            g = xbc[:, c.Di:].reshape(len(xbc), 2, c.G, c.N)[:, :, np.arange(c.mh) % c.G]
            return x, g[:, 0], g[:, 1], dt
        ref.mamba_split = tiled
        d = float(np.abs(ref.run(run["token_ids"], run["normalizer"], run["registers"])["logits"] - want).max())
        del ref.mamba_split
        check(f"{tag}: head h on B/C group h % G would be caught (logits move by {d:.2f})", d > 1e-3)
    if c.rms_norm:
        moved("mamba_norm_before_gate flipped", [x.norm for x in mixers], "norm_before_gate", lambda b: not b)
        moved("gated norm over all Di (one group)", [x.norm for x in mixers], "n_groups", 1)
    else:
        d = float(np.abs(want - FakeNorm(tm, run, c)).max())
        check(f"{tag}: a gated RMSNorm where mamba_rms_norm is false would be caught (logits move by {d:.2f})", d > 1e-3)


def FakeNorm(tm, run, c):
    """Logits with an all-Di RMSNorm (unit weight) after the gate in every mixer."""
    for layer in tm.model.layers:
        layer.mamba.norm = GatedNorm(c.Di, c.eps, 1, False)
    _, got, _ = torch_run(tm, run, c.nh)
    for layer in tm.model.layers:
        del layer.mamba.norm
    return got


def check_synthetic(check, close):
    """falcon_basic's config with attention biases, the gated norm before the gate in 2 groups, in/out_proj
    biases and a partial-chunk length: reference (both paths) == torch model."""
    spec = dict(gf.case_specs()[0], seed=4242)
    spec["config"] = gf.make_config(**dict(spec["config"], attention_bias=True, mamba_n_groups=2,
                                           mamba_rms_norm=True, mamba_norm_before_gate=True, mamba_proj_bias=True,
                                           projectors_bias=True, mamba_conv_bias=False))
    with tempfile.TemporaryDirectory() as folder:
        mg.write_checkpoint(folder, spec)
        ref, tm = fr.FalconH1Ref.load(folder), CausalLM(folder)
        ids = [int(v) for v in np.random.default_rng(5).integers(0, ref.cfg.V, size=13)]
        run = dict(token_ids=ids, normalizer="softmax1", registers=1)
        a = ref.run(ids, "softmax1", 1)
        b = ref.run(ids, "softmax1", 1, path="step")
        _, logits, _ = torch_run(tm, run, ref.cfg.nh)
        close("synthetic (attention biases, G 2 norm before gate, proj biases): logits == torch", a["logits"], logits)
        close("synthetic: step == prefill", b["logits"], a["logits"])


def check_config(check):
    base = gf.case_specs()[0]["config"]
    C = fr.FalconH1Config
    drop = lambda *ks: {k: v for k, v in base.items() if k not in ks}  # noqa: E731
    check("config: mamba_d_ssm wins over mamba_expand; null -> mamba_expand * H; absent -> 1024 (HF default)",
          C(base).Di == 64 and C(dict(base, mamba_d_ssm=None)).Di == 32
          and C(dict(drop("mamba_d_ssm"), mamba_n_heads=128)).Di == 1024)
    check("config: mamba_d_head auto -> Di / heads; given is read", C(base).P == 8
          and C(dict(base, mamba_n_heads=4, mamba_d_head=16)).P == 16)
    m = C(dict(drop("mlp_multipliers", "ssm_multipliers"), key_multiplier=None, ssm_out_multiplier=None))
    check("config: absent / null multipliers -> 1.0 (lists -> ones)", m.gate_mult == m.down_mult == m.key_mult
          == m.ssm_out == 1.0 and m.ssm_mults == [1.0] * 5)
    check("config: µP vector = ssm_multipliers over z | x | B | C | dt (widths Di, Di, GN, GN, nh)",
          np.array_equal(C(base).mup_vector(), np.repeat([0.5, 2.0, 0.7, 1.4, 0.9], [64, 64, 8, 8, 8])))
    check("config: every layer is an attention and a Mamba layer", C(base).attn_layers == C(base).mamba_layers
          == [0, 1, 2] and C(base).moe_layers == [])
    check("config: rope_parameters' rope_theta wins over the top-level one; rotary over the whole head",
          C(dict(base, rope_parameters={"rope_type": "default", "rope_theta": 5e5})).theta == 5e5
          and C(base).theta == 1e4 and C(base).rd == C(base).hd == 8)
    check("config: head_dim given is read, null -> hidden / heads", C(dict(base, head_dim=16)).hd == 16
          and C(dict(base, head_dim=None)).hd == 8)
    check("config: tie_word_embeddings defaults to false; mamba_rms_norm false, mamba_norm_before_gate true",
          not C(drop("tie_word_embeddings")).tie and not C(drop("mamba_rms_norm")).rms_norm
          and C(drop("mamba_norm_before_gate")).norm_before_gate)
    check("config: bare Infinity in time_step_limit reads as inf",
          "Infinity" in open(os.path.join(GOLDEN, "falcon_basic", "config.json")).read()
          and C.from_file(os.path.join(GOLDEN, "falcon_basic", "config.json")).dt_max == math.inf)
    for bad in (dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}),
                dict(mlp_multipliers=[1.0]), dict(ssm_multipliers=[1.0] * 4), dict(hidden_act="gelu"),
                dict(mamba_d_head=16), dict(model_type="bamba")):
        try:
            C(dict(base, **bad))
            ok = False
        except AssertionError:
            ok = True
        check(f"config: {bad} is refused", ok)
    try:
        C(drop("rope_theta"))
        ok = False
    except AssertionError:
        ok = True
    check("config: no rope_theta anywhere is refused (HF versions disagree on the default)", ok)
