#!/usr/bin/python3
"""Independent numpy reference of the Bamba forward pass (Mamba-2 + attention hybrid) and its trace.

What it is: a plain, slow, float64 implementation of Hugging Face's `bamba` family (BambaModel with
BambaMixer's slow path, BambaAttention with partial RoPE, BambaMLP, BambaRMSNorm / BambaRMSNormGated),
read from transformers' modeling_bamba.py and configuration_bamba.py, plus the HybridLens extensions
and trace tensors of trace-format.md §1-§3. The Mamba-2 recurrence follows the state-space duality of
Dao & Gu 2024 ("Transformers are SSMs"): head h uses B/C group h // (nh / G).
What it is not: shared with the C++ code, or a copy of HF's code; the safetensors reader, the
elementwise helpers, the normalizers and the trace assembly are jamba_ref.py's (imported).

Two forward paths share the weights but not the state handling:
  run(..., path="sequence")  whole prompt: causal attention, full causal conv, chunked SSD scan
  run(..., path="step")      one position at a time: KV cache, conv window of W raw rows, SSM state
check_ref.py asserts they agree to 1e-10 and checks the scan against a direct O(T^2) evaluation.
"""
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jamba_ref import (JambaRef, TRACE_ORDER, load_tensors, normalize_attention, rmsnorm, silu,  # noqa: E402
                       softplus)

PARTIAL_ROTARY_FACTOR = 0.5   # BambaConfig hard-codes kwargs["partial_rotary_factor"] = 0.5


class BambaConfig:
    """config.json of model_type "bamba" (BambaConfig defaults), with the trace-format.md §1 extensions."""
    DEFAULTS = dict(vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
                    rms_norm_eps=1e-5, attn_layer_indices=None, mamba_n_heads=128, mamba_d_head="auto",
                    mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256,
                    mamba_conv_bias=True, mamba_proj_bias=False, time_step_limit=[0.0, math.inf],
                    rope_parameters=None, rope_theta=None, head_dim=None,
                    attention_normalizer="softmax", num_register_tokens=0)

    def __init__(self, d):
        assert d.get("model_type", "bamba") == "bamba", d.get("model_type")
        v = dict(self.DEFAULTS)
        v.update(d)
        self.raw = d
        self.V = int(v["vocab_size"])
        self.tie = bool(v["tie_word_embeddings"])
        self.H = int(v["hidden_size"])
        self.I = int(v["intermediate_size"])
        self.L = int(v["num_hidden_layers"])
        self.nh = int(v["num_attention_heads"])
        self.nkv = self.nh if v["num_key_value_heads"] is None else int(v["num_key_value_heads"])
        assert self.nh % self.nkv == 0
        self.hd = int(v["head_dim"]) if v["head_dim"] else self.H // self.nh
        assert v["hidden_act"] == "silu"
        self.eps = float(v["rms_norm_eps"])
        self.Di = int(v["mamba_expand"]) * self.H
        self.mh = int(v["mamba_n_heads"])                                  # Mamba-2 heads
        assert self.Di % self.mh == 0, "mamba_n_heads must divide mamba_expand * hidden_size"
        self.P = self.Di // self.mh if v["mamba_d_head"] == "auto" else int(v["mamba_d_head"])
        assert self.P * self.mh == self.Di
        self.G = int(v["mamba_n_groups"])
        assert self.mh % self.G == 0
        self.N = int(v["mamba_d_state"])
        self.W = int(v["mamba_d_conv"])
        self.chunk = int(v["mamba_chunk_size"])
        self.conv_dim = self.Di + 2 * self.G * self.N
        self.conv_bias = bool(v["mamba_conv_bias"])
        self.proj_bias = bool(v["mamba_proj_bias"])
        lim = v["time_step_limit"]
        self.dt_min, self.dt_max = (0.0, math.inf) if lim is None else (float(lim[0]), float(lim[1]))
        rp = v["rope_parameters"]
        if rp is not None:
            assert rp.get("rope_type", "default") == "default", f"rope_type {rp.get('rope_type')}"
            self.theta = float(rp["rope_theta"])
        else:
            self.theta = float(v["rope_theta"]) if v["rope_theta"] is not None else 10000.0
        self.rd = int(self.hd * PARTIAL_ROTARY_FACTOR)                    # rotary dims (first rd of a head)
        assert self.rd % 2 == 0
        self.normalizer = v["attention_normalizer"] or "softmax"
        assert self.normalizer in ("softmax", "softmax1")
        self.n_reg_trained = int(v["num_register_tokens"] or 0)
        idx = v["attn_layer_indices"] or []
        self.is_attn = [i in idx for i in range(self.L)]
        self.is_moe = [False] * self.L
        self.attn_layers = [i for i in range(self.L) if self.is_attn[i]]
        self.mamba_layers = [i for i in range(self.L) if not self.is_attn[i]]
        self.moe_layers = []

    @staticmethod
    def from_file(path):
        with open(path) as f:
            return BambaConfig(json.load(f))                              # json reads bare Infinity


def rope_tables(cfg, positions, dtype=np.float64):
    """cos, sin (S, rd) for integer positions: inv_freq = theta^(-arange(0, rd, 2)/rd), halves repeated."""
    inv = 1.0 / cfg.theta ** (np.arange(0, cfg.rd, 2, dtype=np.float64) / cfg.rd)  # (rd/2,)
    f = np.asarray(positions, np.float64)[:, None] * inv[None, :]                 # (S, rd/2)
    f = np.concatenate([f, f], axis=-1)
    return np.cos(f).astype(dtype), np.sin(f).astype(dtype)


def apply_rope(x, cos, sin, rd):
    """x (..., S, hd); rotate the first rd dims as two halves [x1, x2] -> [x1 c - x2 s, x2 c + x1 s]."""
    xr, xp = x[..., :rd], x[..., rd:]
    h = rd // 2
    rot = np.concatenate([-xr[..., h:], xr[..., :h]], axis=-1)
    return np.concatenate([xr * cos + rot * sin, xp], axis=-1)


def ssd_chunked(x, dt, A, Bm, Cm, chunk, h0=None):
    """Mamba-2 scan over a whole sequence, chunk by chunk (Dao & Gu 2024, SSD block decomposition).
    x (S, nh, P), dt (S, nh) after softplus and clamp, A (nh,) negative, Bm/Cm (S, nh, N) already
    expanded to heads. Returns y without the D term (S, nh, P) and the final state (nh, P, N)."""
    S, nh, P = x.shape
    N = Bm.shape[-1]
    h = np.zeros((nh, P, N), x.dtype) if h0 is None else h0.copy()
    y = np.zeros_like(x)
    for s0 in range(0, S, chunk):
        s1 = min(S, s0 + chunk)
        a = dt[s0:s1] * A[None, :]                                       # (Q, nh) log-decay per step
        cs = np.cumsum(a, axis=0)                                        # (Q, nh) decay from chunk start
        Q = s1 - s0
        seg = cs[:, None, :] - cs[None, :, :]                            # (Q_t, Q_s, nh): Σ_{r=s+1..t} a_r
        causal = np.tril(np.ones((Q, Q), bool))[:, :, None]
        decay = np.where(causal, np.exp(np.where(causal, seg, 0.0)), 0.0)
        cb = np.einsum("thn,shn->tsh", Cm[s0:s1], Bm[s0:s1])             # (Q, Q, nh)
        w = cb * decay * dt[s0:s1][None, :, :]                           # (Q_t, Q_s, nh)
        y[s0:s1] = np.einsum("tsh,shp->thp", w, x[s0:s1])                # intra-chunk
        y[s0:s1] += np.exp(cs)[:, :, None] * np.einsum("thn,hpn->thp", Cm[s0:s1], h)  # carried state
        tail = np.exp(cs[-1][None, :] - cs) * dt[s0:s1]                  # (Q, nh): decay to chunk end
        h = np.exp(cs[-1])[:, None, None] * h + np.einsum("sh,shp,shn->hpn", tail, x[s0:s1], Bm[s0:s1])
    return y, h


class BambaRef(JambaRef):
    """Reuses JambaRef's register rows, normalizer choice, dense MLP and trace assembly (run)."""

    def __init__(self, cfg, tensors, dtype=np.float64):
        self.cfg = cfg
        self.dt = dtype
        c = cfg
        g = lambda name: np.asarray(tensors[name], dtype=dtype)  # noqa: E731
        has = lambda name: name in tensors  # noqa: E731
        self.embed = g("model.embed_tokens.weight")                      # (V, H)
        assert self.embed.shape == (c.V, c.H), self.embed.shape
        if has("lm_head.weight"):
            self.head = g("lm_head.weight")                              # (V, H)
        else:
            assert c.tie, "lm_head.weight absent and tie_word_embeddings is false"
            self.head = self.embed
        self.final_norm = g("model.final_layernorm.weight")             # (H,)
        self.registers_trained = (g("model.register_tokens") if has("model.register_tokens")
                                  else np.zeros((0, c.H), dtype))        # (R, H)
        assert self.registers_trained.shape[0] == c.n_reg_trained
        self.mean_row = np.mean(self.embed, axis=0)                     # (H,)
        self.layers = []
        for i in range(c.L):
            p = f"model.layers.{i}."
            ly = dict(attn=c.is_attn[i], moe=False,
                      in_norm=g(p + "input_layernorm.weight"), ff_norm=g(p + "pre_ff_layernorm.weight"))
            if c.is_attn[i]:
                ly["q"] = g(p + "self_attn.q_proj.weight")               # (nh*hd, H)
                ly["k"] = g(p + "self_attn.k_proj.weight")               # (nkv*hd, H)
                ly["v"] = g(p + "self_attn.v_proj.weight")               # (nkv*hd, H)
                ly["o"] = g(p + "self_attn.o_proj.weight")               # (H, nh*hd)
                assert ly["q"].shape == (c.nh * c.hd, c.H) and ly["k"].shape == (c.nkv * c.hd, c.H)
                assert ly["o"].shape == (c.H, c.nh * c.hd)
                ly["sinks"] = g(p + "self_attn.sinks") if has(p + "self_attn.sinks") else None  # (nh,)
            else:
                m = p + "mamba."
                ly["in_w"] = g(m + "in_proj.weight")                     # (Di + conv_dim + nh, H)
                ly["in_b"] = g(m + "in_proj.bias") if has(m + "in_proj.bias") else None
                ly["conv_w"] = g(m + "conv1d.weight")[:, 0, :]           # (conv_dim, W)
                ly["conv_b"] = g(m + "conv1d.bias") if has(m + "conv1d.bias") else None
                ly["dt_bias"] = g(m + "dt_bias")                         # (nh,)
                ly["A"] = -np.exp(g(m + "A_log"))                        # (nh,)
                ly["D"] = g(m + "D")                                     # (nh,)
                ly["norm"] = g(m + "norm.weight")                        # (Di,)
                ly["out_w"] = g(m + "out_proj.weight")                   # (H, Di)
                ly["out_b"] = g(m + "out_proj.bias") if has(m + "out_proj.bias") else None
                assert ly["in_w"].shape == (c.Di + c.conv_dim + c.mh, c.H), ly["in_w"].shape
                assert ly["conv_w"].shape == (c.conv_dim, c.W) and ly["A"].shape == (c.mh,)
                assert ly["norm"].shape == (c.Di,) and ly["out_w"].shape == (c.H, c.Di)
                assert (ly["in_b"] is not None) == c.proj_bias and (ly["out_b"] is not None) == c.proj_bias
                assert (ly["conv_b"] is not None) == c.conv_bias
            f = p + "feed_forward."
            ly["mlp"] = (g(f + "gate_proj.weight"), g(f + "up_proj.weight"), g(f + "down_proj.weight"))
            self.layers.append(ly)

    @staticmethod
    def load(folder, dtype=np.float64):
        cfg = BambaConfig.from_file(os.path.join(folder, "config.json"))
        tensors, _ = load_tensors(folder)
        return BambaRef(cfg, tensors, dtype)

    def ssm_state_elements(self):
        """One Mamba-2 layer's decode state: conv window (conv_dim, W) + SSM state (nh, P, N)."""
        return self.cfg.conv_dim * self.cfg.W + self.cfg.Di * self.cfg.N

    # -- Mamba-2 pieces shared by both paths (row-wise, no state) ---------------------------------

    def mamba_in(self, ly, x):
        """x (S, H) -> gate z (S, Di), raw xBC (S, conv_dim), raw dt (S, nh)."""
        c = self.cfg
        p = x @ ly["in_w"].T
        if ly["in_b"] is not None:
            p = p + ly["in_b"]
        return p[:, :c.Di], p[:, c.Di:c.Di + c.conv_dim], p[:, c.Di + c.conv_dim:]

    def mamba_split(self, ly, xbc, dt_raw):
        """Post-conv xBC (S, conv_dim) -> x (S, nh, P), B and C per head (S, nh, N), dt (S, nh)."""
        c = self.cfg
        S = xbc.shape[0]
        x = xbc[:, :c.Di].reshape(S, c.mh, c.P)
        grp = np.arange(c.mh) // (c.mh // c.G)                           # head h -> group h // (nh/G)
        Bm = xbc[:, c.Di:c.Di + c.G * c.N].reshape(S, c.G, c.N)[:, grp]
        Cm = xbc[:, c.Di + c.G * c.N:].reshape(S, c.G, c.N)[:, grp]
        dt = np.clip(softplus(dt_raw + ly["dt_bias"]), c.dt_min, c.dt_max)  # (S, nh)
        return x, Bm, Cm, dt

    def mamba_out(self, ly, y, z):
        """y (S, Di) with the D term, gate z (S, Di): gated RMSNorm over all Di channels, out_proj."""
        g = y * silu(z)
        g = rmsnorm(g, ly["norm"], self.cfg.eps)
        o = g @ ly["out_w"].T
        return o + ly["out_b"] if ly["out_b"] is not None else o

    def mamba_record(self, dt, A):
        """Trace rows: dt and exp(dt A) per channel (S, Di); channel d belongs to head d // P."""
        P = self.cfg.P
        return dict(dt=np.repeat(dt, P, axis=1), retained=np.repeat(np.exp(dt * A[None, :]), P, axis=1))

    # -- sequence path ---------------------------------------------------------------------------

    def attention_seq(self, ly, x, null):                                # x (S, H), null (nh,)
        c = self.cfg
        S = x.shape[0]
        q = (x @ ly["q"].T).reshape(S, c.nh, c.hd).transpose(1, 0, 2)   # (nh, S, hd)
        k = (x @ ly["k"].T).reshape(S, c.nkv, c.hd).transpose(1, 0, 2)  # (nkv, S, hd)
        v = (x @ ly["v"].T).reshape(S, c.nkv, c.hd).transpose(1, 0, 2)
        cos, sin = rope_tables(c, np.arange(S), self.dt)                 # registers at 0..n_reg-1
        q, k = apply_rope(q, cos, sin, c.rd), apply_rope(k, cos, sin, c.rd)
        kv_of = np.arange(c.nh) // (c.nh // c.nkv)
        z = np.einsum("hqd,hkd->hqk", q, k[kv_of]) / math.sqrt(c.hd)     # (nh, S, S)
        causal = np.tril(np.ones((S, S), bool))
        z = np.where(causal[None], z, -np.inf)
        p, p_null = normalize_attention(z, null[:, None, None])
        o = np.einsum("hqk,hkd->hqd", p, v[kv_of])
        out = o.transpose(1, 0, 2).reshape(S, c.nh * c.hd) @ ly["o"].T
        zabs = np.max(np.where(causal[None], np.abs(z), -np.inf), axis=-1)
        return out, dict(p=p.transpose(1, 0, 2), p_null=p_null.T, zmax=zabs.T)

    def mamba_seq(self, ly, x):                                          # x (S, H)
        c = self.cfg
        S = x.shape[0]
        z, xbc0, dt_raw = self.mamba_in(ly, x)
        pad = np.concatenate([np.zeros((c.W - 1, c.conv_dim), self.dt), xbc0])  # (S+W-1, conv_dim)
        conv = np.zeros((S, c.conv_dim), self.dt)
        for k in range(c.W):                                             # conv_w[:, W-1] hits token t
            conv += pad[k:k + S] * ly["conv_w"][:, k]
        if ly["conv_b"] is not None:
            conv = conv + ly["conv_b"]
        xs, Bm, Cm, dt = self.mamba_split(ly, silu(conv), dt_raw)
        y, _ = ssd_chunked(xs, dt, ly["A"], Bm, Cm, c.chunk)
        y = (y + ly["D"][None, :, None] * xs).reshape(S, c.Di)
        return self.mamba_out(ly, y, z), self.mamba_record(dt, ly["A"])

    def forward_sequence(self, emb, override):
        c = self.cfg
        h = emb.copy()
        resid = [h.copy()]
        attn, mamba = [], []
        for i, ly in enumerate(self.layers):
            x = rmsnorm(h, ly["in_norm"], c.eps)
            if ly["attn"]:
                _, null = self.layer_normalizer(i, override)
                o, rec = self.attention_seq(ly, x, null)
                attn.append(rec)
            else:
                o, rec = self.mamba_seq(ly, x)
                mamba.append(rec)
            h = h + o
            h = h + self.mlp(rmsnorm(h, ly["ff_norm"], c.eps), *ly["mlp"])
            resid.append(h.copy())
        logits = rmsnorm(h, self.final_norm, c.eps) @ self.head.T
        return dict(resid=np.stack(resid), logits=logits, attn=attn, mamba=mamba, moe=[], S=emb.shape[0])

    # -- step path (one position at a time with caches) ------------------------------------------

    def forward_steps(self, emb, override):
        c = self.cfg
        S = emb.shape[0]
        kv_of = np.arange(c.nh) // (c.nh // c.nkv)
        kcache = {i: [] for i in c.attn_layers}                          # lists of (nkv, hd), rotated
        vcache = {i: [] for i in c.attn_layers}
        conv_state = {i: np.zeros((c.conv_dim, c.W), self.dt) for i in c.mamba_layers}  # raw xBC, newest last
        ssm_state = {i: np.zeros((c.mh, c.P, c.N), self.dt) for i in c.mamba_layers}
        resid = np.zeros((c.L + 1, S, c.H), self.dt)
        logits = np.zeros((S, c.V), self.dt)
        attn = [dict(p=np.zeros((S, c.nh, S), self.dt), p_null=np.zeros((S, c.nh), self.dt),
                     zmax=np.zeros((S, c.nh), self.dt)) for _ in c.attn_layers]
        mamba = [dict(dt=np.zeros((S, c.Di), self.dt), retained=np.zeros((S, c.Di), self.dt))
                 for _ in c.mamba_layers]
        for t in range(S):
            h = emb[t].copy()
            resid[0, t] = h
            cos, sin = rope_tables(c, [t], self.dt)                      # (1, rd)
            for i, ly in enumerate(self.layers):
                x = rmsnorm(h, ly["in_norm"], c.eps)
                if ly["attn"]:
                    a = c.attn_layers.index(i)
                    _, null = self.layer_normalizer(i, override)
                    q = apply_rope((ly["q"] @ x).reshape(c.nh, c.hd), cos, sin, c.rd)
                    kcache[i].append(apply_rope((ly["k"] @ x).reshape(c.nkv, c.hd), cos, sin, c.rd))
                    vcache[i].append((ly["v"] @ x).reshape(c.nkv, c.hd))
                    K = np.stack(kcache[i], axis=1)                      # (nkv, t+1, hd)
                    Vv = np.stack(vcache[i], axis=1)
                    z = np.einsum("hd,hkd->hk", q, K[kv_of]) / math.sqrt(c.hd)
                    p, p_null = normalize_attention(z, null[:, None])
                    o = np.einsum("hk,hkd->hd", p, Vv[kv_of]).reshape(c.nh * c.hd) @ ly["o"].T
                    attn[a]["p"][t, :, :t + 1] = p
                    attn[a]["p_null"][t] = p_null
                    attn[a]["zmax"][t] = np.max(np.abs(z), axis=-1)
                else:
                    m = c.mamba_layers.index(i)
                    zg, xbc0, dt_raw = self.mamba_in(ly, x[None])
                    cs = np.roll(conv_state[i], -1, axis=1)              # drop the oldest column
                    cs[:, c.W - 1] = xbc0[0]                             # append the newest
                    conv_state[i] = cs
                    cv = np.sum(cs * ly["conv_w"], axis=1)
                    if ly["conv_b"] is not None:
                        cv = cv + ly["conv_b"]
                    xs, Bm, Cm, dt = self.mamba_split(ly, silu(cv)[None], dt_raw)
                    xs, Bm, Cm, dt = xs[0], Bm[0], Cm[0], dt[0]          # (nh,P), (nh,N), (nh,N), (nh,)
                    dA = np.exp(dt * ly["A"])                            # (nh,)
                    ssm_state[i] = (dA[:, None, None] * ssm_state[i]
                                    + (dt[:, None] * xs)[:, :, None] * Bm[:, None, :])
                    y = np.einsum("hpn,hn->hp", ssm_state[i], Cm) + ly["D"][:, None] * xs
                    o = self.mamba_out(ly, y.reshape(1, c.Di), zg)[0]
                    rec = self.mamba_record(dt[None], ly["A"])
                    mamba[m]["dt"][t] = rec["dt"][0]
                    mamba[m]["retained"][t] = rec["retained"][0]
                h = h + o
                h = h + self.mlp(rmsnorm(h, ly["ff_norm"], c.eps)[None], *ly["mlp"])[0]
                resid[i + 1, t] = h
            logits[t] = self.head @ rmsnorm(h, self.final_norm, c.eps)
        return dict(resid=resid, logits=logits, attn=attn, mamba=mamba, moe=[], S=S)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Run the Bamba reference on a checkpoint and print a trace summary.")
    ap.add_argument("checkpoint")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--normalizer", choices=["softmax", "softmax1", "sink"])
    ap.add_argument("--registers", type=int)
    ap.add_argument("--path", choices=["sequence", "step"], default="sequence")
    a = ap.parse_args()
    model = BambaRef.load(a.checkpoint)
    tr = model.run([int(s) for s in a.ids.split(",")], a.normalizer, a.registers, a.path)
    for name in TRACE_ORDER:
        if name in tr:
            v = tr[name]
            print(f"{name:18s} {str(v.shape):22s} {v.dtype}  min {v.min():.6g} max {v.max():.6g}")
