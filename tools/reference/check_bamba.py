#!/usr/bin/python3
"""Bamba section of check_ref.py: self-checks of bamba_ref.py and of the committed bamba_* golden cases.

What it is: (a) the chunked Mamba-2 scan against a direct O(T^2) evaluation of
y_t = sum_{s<=t} (C_t . B_s) exp(A_h sum_{r=s+1..t} dt_r) dt_s x_s + D x_t, for several chunk sizes;
(b) the mixer against a torch float64 version of Hugging Face's BambaMixer slow path (F.conv1d, the
masked-cumsum segment sum and the four-term chunked SSD, the cached one-token update), and the whole
model against a torch float64 model with HF's rotate_half RoPE and repeat_kv; (c) closed forms: byte
counters, the dt clamp, RoPE's relative-position property, the gated RMSNorm over all Di channels.
Prefill vs one-token-at-a-time (1e-10) and the golden files of the bamba_* cases: check_ref.py (b).
What it is not: a test of the C++ engine, or HF's own code (not installed here; written from reading it).
Usage: run by check_ref.py (run_checks(check, close)).
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bamba_ref as br  # noqa: E402
import jamba_ref as jr  # noqa: E402
import make_golden as mg  # noqa: E402

GOLDEN = os.path.join(HERE, "..", "..", "tests", "golden")
T = lambda a: torch.tensor(np.asarray(a, np.float64))  # noqa: E731


def direct_scan(x, dt, A, Bm, Cm, D):
    """O(T^2) hidden-attention form. x (S, nh, P), dt (S, nh), A, D (nh,), Bm/Cm (S, nh, N)."""
    S = x.shape[0]
    y = D[None, :, None] * x
    for t in range(S):
        for s in range(t + 1):
            decay = np.exp(A * np.sum(dt[s + 1:t + 1], axis=0))            # (nh,)
            m = np.sum(Cm[t] * Bm[s], axis=-1) * decay * dt[s]              # (nh,)
            y[t] += m[:, None] * x[s]
    return y


# ----------------------------------------------------------------------------------------------
# torch float64, Hugging Face style (batch axis; chunked SSD with segment sums)
# ----------------------------------------------------------------------------------------------

def segsum(a):
    """a (..., Q) -> (..., Q, Q) with [i, j] = sum_{k=j+1..i} a_k for j <= i, -inf above the diagonal."""
    Q = a.shape[-1]
    rep = a[..., :, None].expand(*a.shape, Q)                               # [.., k, j] = a_k
    below = torch.tril(torch.ones(Q, Q, dtype=torch.bool), diagonal=-1)
    s = torch.cumsum(rep.masked_fill(~below, 0.0), dim=-2)
    return s.masked_fill(~torch.tril(torch.ones(Q, Q, dtype=torch.bool)), -math.inf)


def torch_mixer(ref, ly, x):
    """BambaMixer.torch_forward without a cache. x (1, S, H) -> (1, S, H), dt (1, S, nh)."""
    c = ref.cfg
    b, S, _ = x.shape
    p = x @ T(ly["in_w"]).T + (T(ly["in_b"]) if ly["in_b"] is not None else 0.0)
    gate, xbc, dt = torch.split(p, [c.Di, c.conv_dim, c.mh], dim=-1)
    cb = T(ly["conv_b"]) if ly["conv_b"] is not None else None
    xbc = F.silu(F.conv1d(xbc.transpose(1, 2), T(ly["conv_w"])[:, None, :], cb, padding=c.W - 1,
                          groups=c.conv_dim)[..., :S].transpose(1, 2))
    xs, B, C = torch.split(xbc, [c.Di, c.G * c.N, c.G * c.N], dim=-1)
    dt = torch.clamp(F.softplus(dt + T(ly["dt_bias"])), c.dt_min, c.dt_max)   # (b, S, nh)
    A = T(ly["A"])
    xs = xs.reshape(b, S, c.mh, c.P)
    B = B.reshape(b, S, c.G, c.N).repeat_interleave(c.mh // c.G, dim=2)
    C = C.reshape(b, S, c.G, c.N).repeat_interleave(c.mh // c.G, dim=2)
    Q = c.chunk
    pad = (Q - S % Q) % Q
    padS = lambda t: F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))            # noqa: E731  pad the S axis
    d_res = T(ly["D"])[:, None] * padS(xs)
    chunks = lambda t: padS(t).reshape(b, -1, Q, *t.shape[2:])              # noqa: E731
    X, Adt, Bc, Cc = chunks(xs * dt[..., None]), chunks(A * dt), chunks(B), chunks(C)
    Adt = Adt.permute(0, 3, 1, 2)                                            # (b, nh, nc, Q)
    acs = torch.cumsum(Adt, dim=-1)
    Lm = torch.exp(segsum(Adt))                                              # (b, nh, nc, Q, Q)
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", Cc, Bc, Lm, X)
    decay_states = torch.exp(acs[..., -1:] - acs)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", Bc, decay_states, X)
    states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(acs[..., -1], (1, 0))))             # (b, nh, nc+1, nc+1)
    states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)[:, :-1]
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", Cc, states, torch.exp(acs))
    y = (y_diag + y_off).reshape(b, -1, c.mh, c.P) + d_res
    y = y[:, :S].reshape(b, S, c.Di)
    g = y * F.silu(gate)
    g = T(ly["norm"]) * g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + c.eps)
    out = g @ T(ly["out_w"]).T + (T(ly["out_b"]) if ly["out_b"] is not None else 0.0)
    return out, dt


def torch_mixer_cached(ref, ly, x):
    """The cached one-token path of torch_forward, token by token. x (1, S, H) -> (1, S, H)."""
    c = ref.cfg
    conv = torch.zeros(1, c.conv_dim, c.W)
    ssm = torch.zeros(1, c.mh, c.P, c.N)
    outs = []
    for t in range(x.shape[1]):
        p = x[:, t] @ T(ly["in_w"]).T + (T(ly["in_b"]) if ly["in_b"] is not None else 0.0)
        gate, xbc, dt = torch.split(p, [c.Di, c.conv_dim, c.mh], dim=-1)
        conv = conv.roll(shifts=-1, dims=-1)
        conv[:, :, -1] = xbc
        xbc = torch.sum(conv * T(ly["conv_w"]), dim=-1)
        if ly["conv_b"] is not None:
            xbc = xbc + T(ly["conv_b"])
        xs, B, C = torch.split(F.silu(xbc), [c.Di, c.G * c.N, c.G * c.N], dim=-1)
        dt = torch.clamp(F.softplus(dt + T(ly["dt_bias"])), c.dt_min, c.dt_max)[..., None]  # (1, nh, 1)
        dA = torch.exp(dt[..., None] * T(ly["A"])[:, None, None])                # (1, nh, 1, 1)
        B = B.reshape(1, c.G, 1, c.N).expand(1, c.G, c.mh // c.G, c.N).reshape(1, c.mh, c.N)
        C = C.reshape(1, c.G, 1, c.N).expand(1, c.G, c.mh // c.G, c.N).reshape(1, c.mh, c.N)
        xs = xs.reshape(1, c.mh, c.P)
        ssm = ssm * dA + (dt[..., None] * B[:, :, None, :]) * xs[..., None]
        y = torch.einsum("bhpn,bhn->bhp", ssm, C) + T(ly["D"])[:, None] * xs
        g = y.reshape(1, c.Di) * F.silu(gate)
        g = T(ly["norm"]) * g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + c.eps)
        outs.append(g @ T(ly["out_w"]).T + (T(ly["out_b"]) if ly["out_b"] is not None else 0.0))
    return torch.stack(outs, dim=1)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def torch_attention(ref, ly, x, null):
    """BambaAttention (eager) with partial RoPE; null (nh,) or None for plain softmax. x (1, S, H)."""
    c = ref.cfg
    b, S, _ = x.shape
    q = (x @ T(ly["q"]).T).view(b, S, c.nh, c.hd).transpose(1, 2)
    k = (x @ T(ly["k"]).T).view(b, S, c.nkv, c.hd).transpose(1, 2)
    v = (x @ T(ly["v"]).T).view(b, S, c.nkv, c.hd).transpose(1, 2)
    rd = c.hd // 2                                                           # partial_rotary_factor 0.5
    theta = (c.raw.get("rope_parameters") or {}).get("rope_theta", c.raw.get("rope_theta", 10000.0))
    inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    freqs = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[None, None], emb.sin()[None, None]
    q = torch.cat([q[..., :rd] * cos + rotate_half(q[..., :rd]) * sin, q[..., rd:]], dim=-1)
    k = torch.cat([k[..., :rd] * cos + rotate_half(k[..., :rd]) * sin, k[..., rd:]], dim=-1)
    rep = c.nh // c.nkv
    k = k[:, :, None].expand(b, c.nkv, rep, S, c.hd).reshape(b, c.nh, S, c.hd)   # repeat_kv
    v = v[:, :, None].expand(b, c.nkv, rep, S, c.hd).reshape(b, c.nh, S, c.hd)
    scores = (q @ k.transpose(2, 3)) * c.hd ** -0.5
    scores = scores.masked_fill(torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1), -math.inf)
    if null is None:
        p, pn = torch.softmax(scores, dim=-1), torch.zeros(b, c.nh, S)
    else:
        pp = torch.softmax(torch.cat([scores, T(null).view(1, c.nh, 1, 1).expand(b, c.nh, S, 1)], -1), -1)
        p, pn = pp[..., :S], pp[..., S]
    o = (p @ v).transpose(1, 2).reshape(b, S, c.nh * c.hd) @ T(ly["o"]).T
    return o, p, pn


def torch_model(ref, emb, override):
    c = ref.cfg
    rms = lambda h, w: T(w) * h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + c.eps)  # noqa: E731
    h = T(emb)[None]
    attn, dts = [], []
    for i, ly in enumerate(ref.layers):
        x = rms(h, ly["in_norm"])
        if ly["attn"]:
            kind, null = ref.layer_normalizer(i, override)
            o, p, pn = torch_attention(ref, ly, x, None if kind == "softmax" else null)
            attn.append((p[0], pn[0]))
        else:
            o, dt = torch_mixer(ref, ly, x)
            dts.append(dt[0])
        h = h + o
        g, u, d = (T(a) for a in ly["mlp"])
        x = rms(h, ly["ff_norm"])
        h = h + (F.silu(x @ g.T) * (x @ u.T)) @ d.T
    return (rms(h, ref.final_norm) @ T(ref.head).T)[0], attn, dts


# ----------------------------------------------------------------------------------------------

def run_checks(check, close):
    torch.set_default_dtype(torch.float64)
    print("(e) Bamba / Mamba-2 (bamba_ref.py)")
    rng = np.random.default_rng(23)
    S, nh, P, N, G = 13, 4, 3, 5, 2
    x = rng.normal(size=(S, nh, P))
    dt = np.exp(rng.uniform(np.log(1e-3), np.log(0.8), size=(S, nh)))
    A = -rng.uniform(0.5, 8.0, size=nh)
    grp = np.arange(nh) // (nh // G)
    Bm, Cm = rng.normal(size=(S, G, N))[:, grp], rng.normal(size=(S, G, N))[:, grp]
    D = rng.uniform(0.5, 1.5, size=nh)
    want = direct_scan(x, dt, A, Bm, Cm, D)
    for q in (1, 3, 4, 8, 13, 64):
        y, _ = br.ssd_chunked(x, dt, A, Bm, Cm, q)
        close(f"chunked scan (chunk {q}) == direct O(T^2) sum", y + D[None, :, None] * x, want, 1e-12)
    y1, h1 = br.ssd_chunked(x[:7], dt[:7], A, Bm[:7], Cm[:7], 3)
    y2, _ = br.ssd_chunked(x[7:], dt[7:], A, Bm[7:], Cm[7:], 4, h0=h1)
    close("chunked scan split at t=7 with the carried state", np.concatenate([y1, y2]) + D[None, :, None] * x,
          want, 1e-12)

    for spec in mg.bamba_case_specs():
        folder = os.path.join(GOLDEN, spec["name"])
        ref = br.BambaRef.load(folder)
        c = ref.cfg
        tag = spec["name"]
        for S in (1, c.W - 1, c.W, 9, 2 * c.chunk + 3):                   # conv edges, chunk crossings
            xx = rng.normal(size=(S, c.H))
            for i in c.mamba_layers[:2]:
                ly = ref.layers[i]
                o, rec = ref.mamba_seq(ly, xx)
                to, tdt = torch_mixer(ref, ly, T(xx)[None])
                close(f"{tag}: layer {i} mixer == torch HF-style chunked, S={S}", o, to[0].numpy())
                close(f"{tag}: layer {i} dt == torch, S={S}", rec["dt"][:, ::c.P], tdt[0].numpy())
                close(f"{tag}: layer {i} torch cached path == torch chunked, S={S}",
                      torch_mixer_cached(ref, ly, T(xx)[None])[0].numpy(), to[0].numpy())
        # the mixer's y against the direct form, on a real layer's projections
        ly = ref.layers[c.mamba_layers[0]]
        xx = rng.normal(size=(11, c.H))
        z, xbc0, dt_raw = ref.mamba_in(ly, xx)
        conv = F.conv1d(T(xbc0).T[None], T(ly["conv_w"])[:, None, :], None if ly["conv_b"] is None else
                        T(ly["conv_b"]), padding=c.W - 1, groups=c.conv_dim)[0, :, :11].T.numpy()
        xs, Bm, Cm, dtt = ref.mamba_split(ly, jr.silu(conv), dt_raw)
        yd = direct_scan(xs, dtt, ly["A"], Bm, Cm, ly["D"]).reshape(11, c.Di)
        g = yd * jr.silu(z)
        by_hand = (ly["norm"] * g / np.sqrt(np.mean(g * g, axis=1, keepdims=True) + c.eps)) @ ly["out_w"].T
        by_hand = by_hand + (ly["out_b"] if ly["out_b"] is not None else 0.0)
        close(f"{tag}: mixer == direct form + gated RMSNorm over all Di by hand", ref.mamba_seq(ly, xx)[0], by_hand)

        for run in json.load(open(os.path.join(folder, "expected", "runs.json")))["runs"]:
            a = ref.run(run["token_ids"], run["normalizer"], run["registers"])   # == step, == file: check (b)
            gold, _, meta = jr.read_safetensors(os.path.join(folder, "expected", run["name"] + ".safetensors"))
            rt = f"{tag}/{run['name']}"
            check(f"{rt}: no router tensors", not any(k.startswith("router") for k in gold))
            # whole model in torch
            regs = ref.register_rows(run["registers"])
            n_reg = regs.shape[0]
            emb = np.concatenate([regs, ref.embed[run["token_ids"]]])
            logits, attn, dts = torch_model(ref, emb, run["normalizer"])
            close(f"{rt}: logits == torch model", a["logits"], logits[n_reg:].numpy())
            rows = np.stack([torch.cat([p[:, n_reg:, :], pn[:, n_reg:, None]], -1).transpose(0, 1).numpy()
                             for p, pn in attn], axis=1)
            close(f"{rt}: attn_rows == torch model", a["attn_rows"], rows)
            dtm = np.stack([d[n_reg:].numpy() for d in dts], axis=1)                 # (T, M_n, nh)
            close(f"{rt}: ssm_delta == torch dt repeated over P", a["ssm_delta"], np.repeat(dtm, c.P, axis=2))
            close(f"{rt}: ssm_delta_mean = mean over heads", a["ssm_delta_mean"], dtm.mean(-1))
            A_ch = np.stack([np.repeat(ref.layers[i]["A"], c.P) for i in c.mamba_layers])  # (M_n, Di)
            close(f"{rt}: ssm_retained = exp(dt A) of the channel's head", a["ssm_retained"],
                  np.exp(a["ssm_delta"] * A_ch[None]), 1e-12)
            Tn = len(run["token_ids"])
            check(f"{rt}: ssm_state_bytes = M_n (conv_dim W + Di N) 4",
                  np.all(a["ssm_state_bytes"] == len(c.mamba_layers) * (c.conv_dim * c.W + c.Di * c.N) * 4))
            check(f"{rt}: kv_cache_bytes", np.array_equal(
                a["kv_cache_bytes"], 2 * len(c.attn_layers) * c.nkv * c.hd * (n_reg + np.arange(Tn) + 1) * 4))
            check(f"{rt}: metadata names bamba_ref", meta.get("engine_version", "").startswith(
                "tools/reference/bamba_ref.py"))
            if c.dt_min > 0:
                d = a["ssm_delta"]
                check(f"{rt}: dt clamped to [{c.dt_min}, {c.dt_max}], both bounds reached",
                      d.min() >= c.dt_min and d.max() <= c.dt_max and np.any(d == c.dt_min) and np.any(d == c.dt_max),
                      f"min {d.min():.4g} max {d.max():.4g}")

    # RoPE: q.k after rotation depends only on the position difference; dims past rd pass through
    cfg = br.BambaConfig(mg.bamba_case_specs()[0]["config"])
    q, k = rng.normal(size=(1, cfg.hd)), rng.normal(size=(1, cfg.hd))
    dots = []
    for p0 in (0, 5, 37):
        cq, sq = br.rope_tables(cfg, [p0 + 3])
        ck, sk = br.rope_tables(cfg, [p0])
        dots.append(float(br.apply_rope(q, cq, sq, cfg.rd) @ br.apply_rope(k, ck, sk, cfg.rd).T))
    close("RoPE: q.k depends on the position difference only", np.array(dots), np.full(3, dots[0]), 1e-12)
    c5, s5 = br.rope_tables(cfg, [5])
    r = br.apply_rope(q, c5, s5, cfg.rd)
    close("RoPE: dims rd..hd pass through", r[:, cfg.rd:], q[:, cfg.rd:], 0)
    close("RoPE: rotation keeps the norm of the rotary part", np.linalg.norm(r[:, :cfg.rd]),
          np.linalg.norm(q[:, :cfg.rd]), 1e-12)
    check("config: bare Infinity in time_step_limit reads as inf",
          "Infinity" in open(os.path.join(GOLDEN, "bamba_basic", "config.json")).read()
          and br.BambaConfig.from_file(os.path.join(GOLDEN, "bamba_basic", "config.json")).dt_max == math.inf)
