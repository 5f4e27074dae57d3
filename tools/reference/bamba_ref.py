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
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jamba_ref import JambaConfig, JambaRef, causal_conv, cli, rmsnorm, silu, softplus  # noqa: E402

PARTIAL_ROTARY_FACTOR = 0.5   # BambaConfig hard-codes kwargs["partial_rotary_factor"] = 0.5


class BambaConfig(JambaConfig):
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
        self.read_shared(v)
        self.hd = int(v["head_dim"]) if v["head_dim"] else self.H // self.nh
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
        idx = v["attn_layer_indices"] or []
        self.set_schedule([i in idx for i in range(self.L)], [False] * self.L)


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
    """JambaRef with Mamba-2 mixers and RoPE: its loading, register rows, normalizers, dense MLP, both
    forward loops and the trace assembly (run) are reused through the hooks load_mamba, position,
    mamba_seq, mamba_state, mamba_step and ssm_state_elements."""

    CONFIG = BambaConfig

    def load_mamba(self, m, g, has):
        """The Mamba-2 mixer weights under prefix m (".mamba.")."""
        c = self.cfg
        ly = dict(in_w=g(m + "in_proj.weight"),                          # (Di + conv_dim + nh, H)
                  in_b=g(m + "in_proj.bias") if has(m + "in_proj.bias") else None,
                  conv_w=g(m + "conv1d.weight")[:, 0, :],                # (conv_dim, W)
                  conv_b=g(m + "conv1d.bias") if has(m + "conv1d.bias") else None,
                  dt_bias=g(m + "dt_bias"),                              # (nh,)
                  A=-np.exp(g(m + "A_log")),                             # (nh,)
                  D=g(m + "D"),                                          # (nh,)
                  norm=g(m + "norm.weight"),                             # (Di,)
                  out_w=g(m + "out_proj.weight"),                        # (H, Di)
                  out_b=g(m + "out_proj.bias") if has(m + "out_proj.bias") else None)
        assert ly["in_w"].shape == (c.Di + c.conv_dim + c.mh, c.H), ly["in_w"].shape
        assert ly["conv_w"].shape == (c.conv_dim, c.W) and ly["A"].shape == (c.mh,) and ly["D"].shape == (c.mh,)
        assert ly["norm"].shape == (c.Di,) and ly["out_w"].shape == (c.H, c.Di)
        assert (ly["in_b"] is not None) == c.proj_bias and (ly["out_b"] is not None) == c.proj_bias
        assert (ly["conv_b"] is not None) == c.conv_bias
        return ly

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
        dt = self.dt_clamp(softplus(dt_raw + ly["dt_bias"]))            # (S, nh)
        return x, Bm, Cm, dt

    def dt_clamp(self, dt):
        """Bamba: clamp(dt, time_step_limit[0], time_step_limit[1])."""
        return np.clip(dt, self.cfg.dt_min, self.cfg.dt_max)

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

    def position(self, q, k, pos):
        """RoPE (HF rotate_half) on the first rd dims of q (nh, S, hd) and k (nkv, S, hd)."""
        cos, sin = rope_tables(self.cfg, pos, self.dt)                   # (S, rd)
        return apply_rope(q, cos, sin, self.cfg.rd), apply_rope(k, cos, sin, self.cfg.rd)

    # -- sequence path: JambaRef.forward_sequence / attention_seq with these pieces ---------------

    def mamba_seq(self, ly, x):                                          # x (S, H)
        c = self.cfg
        S = x.shape[0]
        z, xbc0, dt_raw = self.mamba_in(ly, x)
        conv = causal_conv(xbc0, ly["conv_w"], ly["conv_b"])             # (S, conv_dim)
        xs, Bm, Cm, dt = self.mamba_split(ly, silu(conv), dt_raw)
        y, _ = ssd_chunked(xs, dt, ly["A"], Bm, Cm, c.chunk)
        y = (y + ly["D"][None, :, None] * xs).reshape(S, c.Di)
        return self.mamba_out(ly, y, z), self.mamba_record(dt, ly["A"])

    # -- step path: JambaRef.forward_steps with these per-layer pieces ---------------------------

    def mamba_state(self):
        """Decode state: conv window of raw xBC rows (conv_dim, W), newest last; SSM state (nh, P, N)."""
        c = self.cfg
        return dict(conv=np.zeros((c.conv_dim, c.W), self.dt), ssm=np.zeros((c.mh, c.P, c.N), self.dt))

    def mamba_step(self, ly, x, st):
        """One position x (H,), updating st. Returns o (H,), dt and exp(dt A) per channel (Di,)."""
        c = self.cfg
        zg, xbc0, dt_raw = self.mamba_in(ly, x[None])
        cs = np.roll(st["conv"], -1, axis=1)                             # drop the oldest column
        cs[:, c.W - 1] = xbc0[0]                                         # append the newest
        st["conv"] = cs
        cv = np.sum(cs * ly["conv_w"], axis=1)
        if ly["conv_b"] is not None:
            cv = cv + ly["conv_b"]
        xs, Bm, Cm, dt = self.mamba_split(ly, silu(cv)[None], dt_raw)
        xs, Bm, Cm, dt = xs[0], Bm[0], Cm[0], dt[0]                      # (nh,P), (nh,N), (nh,N), (nh,)
        dA = np.exp(dt * ly["A"])                                        # (nh,)
        st["ssm"] = dA[:, None, None] * st["ssm"] + (dt[:, None] * xs)[:, :, None] * Bm[:, None, :]
        y = np.einsum("hpn,hn->hp", st["ssm"], Cm) + ly["D"][:, None] * xs
        rec = self.mamba_record(dt[None], ly["A"])
        return self.mamba_out(ly, y.reshape(1, c.Di), zg)[0], rec["dt"][0], rec["retained"][0]


if __name__ == "__main__":
    cli(BambaRef.load, "Run the Bamba reference on a checkpoint and print a trace summary.")
