#!/usr/bin/python3
"""Independent numpy reference of the TII Falcon-H1 forward pass (model_type "falcon_h1") and its trace.

What it is: a plain, slow, float64 implementation of Hugging Face's FalconH1ForCausalLM as
modeling_falcon_h1.py / configuration_falcon_h1.py define it (FalconH1DecoderLayer, FalconH1Mixer's slow
path torch_forward and its cached one-token branch, FalconH1Attention, FalconH1MLP, FalconH1RMSNormGated,
compute_mup_vector), plus the HybridLens extensions and trace tensors of trace-format.md §1-§3. The
Mamba-2 scan is bamba_ref.py's (state-space duality, Dao & Gu 2024).
What it is not: shared with the C++ code, or a copy of HF's code.

The model (HF's names): h_0 = embedding_multiplier * embed_tokens[ids]; every layer is "hybrid", an
attention and a Mamba-2 mixer side by side on the same normalised input:
  x = input_layernorm(h)
  h += ssm_out_multiplier * mamba(x) + attention_out_multiplier * self_attn(attention_in_multiplier * x)
  h += feed_forward(pre_ff_layernorm(h))
  logits = lm_head_multiplier * lm_head(final_layernorm(h))
mamba(x): p = in_proj(ssm_in_multiplier * x) * mup, mup = ssm_multipliers [z, x, B, C, dt] over the five
  segments (widths Di, Di, G N, G N, nh) of the in_proj output; then the Mamba-2 mixer (conv, silu,
  dt = clamp(softplus(dt + dt_bias), time_step_limit), scan, D term); then y silu(z), or with
  mamba_rms_norm the grouped gated RMSNorm (n_groups groups of Di/G; norm_before_gate: norm(y) w silu(z),
  else norm(y silu(z)) w); out_proj (bias: projectors_bias; in_proj bias: mamba_proj_bias).
self_attn: k = k_proj(x) * key_multiplier before RoPE; RoPE (rotate_half) over the whole head; GQA;
  scale head_dim^-0.5. feed_forward: down_multiplier * down(up(x) * silu(gate_multiplier * gate(x))).
Decisions: tests/golden/README.md, "Falcon-H1 cases". Two forward paths: run(..., path="sequence") and
run(..., path="step"); they agree to 1e-10 (check_ref.py).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bamba_ref import BambaRef, apply_rope, rope_tables  # noqa: E402
from jamba_ref import JambaConfig, cli, linear, rmsnorm, silu  # noqa: E402


def one(v):
    """A scalar multiplier: null reads as 1.0 (HF's older config turns None into 1.0)."""
    return 1.0 if v is None else float(v)


class FalconH1Config(JambaConfig):
    """config.json of model_type "falcon_h1" (FalconH1Config defaults), with the trace-format.md §1 extensions."""
    DEFAULTS = dict(vocab_size=128000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=14336,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, hidden_act="silu",
                    rms_norm_eps=1e-5, head_dim=None, attention_bias=False, mlp_bias=False, mamba_d_ssm=1024,
                    mamba_n_heads=128, mamba_d_head="auto", mamba_n_groups=1, mamba_d_state=256, mamba_d_conv=4,
                    mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True, mamba_proj_bias=False,
                    mamba_norm_before_gate=True, mamba_rms_norm=False, time_step_limit=[0.0, math.inf],
                    projectors_bias=False, rope_parameters=None, rope_scaling=None, rope_theta=None,
                    lm_head_multiplier=1.0, embedding_multiplier=1.0, mlp_multipliers=None, key_multiplier=1.0,
                    attention_out_multiplier=1.0, attention_in_multiplier=1.0, ssm_multipliers=None,
                    ssm_in_multiplier=1.0, ssm_out_multiplier=1.0, attention_normalizer="softmax",
                    num_register_tokens=0)

    def __init__(self, d):
        assert d.get("model_type", "falcon_h1") == "falcon_h1", d.get("model_type")
        v = dict(self.DEFAULTS)
        v.update(d)
        self.raw = d
        self.read_shared(v)                                                # proj_bias = mamba_proj_bias (in_proj)
        self.hd = int(v["head_dim"]) if v["head_dim"] else self.H // self.nh   # getattr(config, "head_dim")
        self.attn_bias, self.mlp_bias = bool(v["attention_bias"]), bool(v["mlp_bias"])
        self.out_bias = bool(v["projectors_bias"])                         # out_proj bias
        self.emb_mult, self.lm_mult = one(v["embedding_multiplier"]), one(v["lm_head_multiplier"])
        self.key_mult = one(v["key_multiplier"])
        self.attn_in, self.attn_out = one(v["attention_in_multiplier"]), one(v["attention_out_multiplier"])
        self.ssm_in, self.ssm_out = one(v["ssm_in_multiplier"]), one(v["ssm_out_multiplier"])
        mm = v["mlp_multipliers"] if v["mlp_multipliers"] is not None else [1.0, 1.0]
        sm = v["ssm_multipliers"] if v["ssm_multipliers"] is not None else [1.0] * 5
        assert len(mm) == 2 and len(sm) == 5, f"mlp_multipliers {mm}, ssm_multipliers {sm}"
        self.gate_mult, self.down_mult = float(mm[0]), float(mm[1])
        self.ssm_mults = [float(s) for s in sm]                            # z, x, B, C, dt
        # Mamba-2: Di = mamba_d_ssm, or mamba_expand * hidden_size when it is null
        self.Di = int(v["mamba_d_ssm"]) if v["mamba_d_ssm"] is not None else int(v["mamba_expand"]) * self.H
        self.mh = int(v["mamba_n_heads"])
        assert self.Di % self.mh == 0, "mamba_n_heads must divide the Mamba intermediate size"
        self.P = self.Di // self.mh if v["mamba_d_head"] in ("auto", None) else int(v["mamba_d_head"])
        assert self.P * self.mh == self.Di, "mamba_d_head * mamba_n_heads != the Mamba intermediate size"
        self.G, self.N, self.W = int(v["mamba_n_groups"]), int(v["mamba_d_state"]), int(v["mamba_d_conv"])
        assert self.mh % self.G == 0 and self.Di % self.G == 0
        self.chunk = int(v["mamba_chunk_size"])
        self.conv_dim = self.Di + 2 * self.G * self.N
        self.rms_norm, self.norm_before_gate = bool(v["mamba_rms_norm"]), bool(v["mamba_norm_before_gate"])
        lim = v["time_step_limit"]
        self.dt_min, self.dt_max = (0.0, math.inf) if lim is None else (float(lim[0]), float(lim[1]))
        rp = v["rope_parameters"] or v["rope_scaling"] or {}
        assert rp.get("rope_type", rp.get("type", "default")) == "default", f"rope {rp}"
        theta = rp.get("rope_theta", v["rope_theta"])
        assert theta is not None, "no rope_theta: HF versions disagree on its default (1e5 / 1e4)"
        self.theta = float(theta)
        self.rd = self.hd                                                  # rotary over the whole head
        self.set_schedule([True] * self.L, [False] * self.L)
        self.mamba_layers = list(range(self.L))                            # every layer is both

    def mup_vector(self):
        """compute_mup_vector: (2 Di + 2 G N + nh,) = ssm_multipliers over the z | x | B | C | dt segments."""
        widths = [self.Di, self.Di, self.G * self.N, self.G * self.N, self.mh]
        return np.concatenate([np.full(w, m) for w, m in zip(widths, self.ssm_mults)])


class FalconH1Ref(BambaRef):
    """BambaRef's Mamba-2 scan, step state and RoPE tables, JambaRef's attention, registers, normalizers and
    trace assembly (run), with Falcon-H1's parallel layer, µP multipliers, optional gated norm and names."""

    CONFIG = FalconH1Config
    NAMES = dict(embed="model.embed_tokens.weight", final_norm="model.final_layernorm.weight",
                 registers="model.register_tokens", attn="self_attn.")

    def __init__(self, cfg, tensors, dtype=np.float64):
        self.cfg = c = cfg
        self.dt = dtype
        g = lambda name: np.asarray(tensors[name], dtype=dtype)  # noqa: E731
        has = lambda name: name in tensors  # noqa: E731
        self.load_shared(g, has)
        # embedding_multiplier scales every input row (HF multiplies inputs_embeds): tokens, trained and
        # mean-row registers; a tied head keeps the stored rows; lm_head_multiplier scales the logits.
        self.head = self.head * c.lm_mult
        self.embed = self.embed * c.emb_mult
        self.registers_trained = self.registers_trained * c.emb_mult
        self.mean_row = self.mean_row * c.emb_mult
        self.mup = c.mup_vector().astype(dtype)                            # (2Di + 2GN + nh,)
        self.layers = []
        for i in range(c.L):
            p = f"model.layers.{i}."
            ly = dict(attn=True, moe=False, in_norm=g(p + "input_layernorm.weight"),      # (H,)
                      ff_norm=g(p + "pre_ff_layernorm.weight"))                          # (H,)
            ly.update(self.load_attention(p, g, has))
            nb = sum(k + "_b" in ly for k in "qkvo")
            assert nb == 4 * c.attn_bias, f"layer {i}: {nb} attention biases, attention_bias {c.attn_bias}"
            ly.update(self.load_mamba(p + "mamba.", g, has))
            f = p + "feed_forward."
            opt = lambda n: g(f + n) if has(f + n) else None  # noqa: E731
            ly.update(gate=g(f + "gate_proj.weight"), up=g(f + "up_proj.weight"),     # (I, H), (I, H)
                      down=g(f + "down_proj.weight"), gate_b=opt("gate_proj.bias"),   # (H, I)
                      up_b=opt("up_proj.bias"), down_b=opt("down_proj.bias"))
            assert ly["gate"].shape == ly["up"].shape == (c.I, c.H) and ly["down"].shape == (c.H, c.I)
            assert all((ly[k + "_b"] is not None) == c.mlp_bias for k in ("gate", "up", "down"))
            self.layers.append(ly)

    def load_mamba(self, m, g, has):
        """FalconH1Mixer's weights under prefix m ("mamba."): norm.weight only with mamba_rms_norm,
        in_proj.bias with mamba_proj_bias, out_proj.bias with projectors_bias."""
        c = self.cfg
        opt = lambda n: g(m + n) if has(m + n) else None  # noqa: E731
        ly = dict(in_w=g(m + "in_proj.weight"), in_b=opt("in_proj.bias"),            # (2Di + 2GN + nh, H)
                  conv_w=g(m + "conv1d.weight")[:, 0, :], conv_b=opt("conv1d.bias"),  # (conv_dim, W)
                  dt_bias=g(m + "dt_bias"), A=-np.exp(g(m + "A_log")), D=g(m + "D"),  # (nh,) each
                  norm=opt("norm.weight"),                                            # (Di,) or None
                  out_w=g(m + "out_proj.weight"), out_b=opt("out_proj.bias"))         # (H, Di)
        assert ly["in_w"].shape == (c.Di + c.conv_dim + c.mh, c.H), ly["in_w"].shape
        assert ly["conv_w"].shape == (c.conv_dim, c.W) and ly["A"].shape == ly["D"].shape == (c.mh,)
        assert ly["out_w"].shape == (c.H, c.Di)
        assert (ly["in_b"] is not None) == c.proj_bias and (ly["out_b"] is not None) == c.out_bias
        assert (ly["conv_b"] is not None) == c.conv_bias and (ly["norm"] is not None) == c.rms_norm
        return ly

    # -- Falcon-H1's differences in the pieces ---------------------------------------------------

    def mamba_in(self, ly, x):
        """x (S, H) -> gate z (S, Di), raw xBC (S, conv_dim), raw dt (S, nh): in_proj of ssm_in_multiplier x
        (with its bias), times the µP vector."""
        c = self.cfg
        p = linear(x * c.ssm_in, ly["in_w"], ly["in_b"]) * self.mup
        return p[:, :c.Di], p[:, c.Di:c.Di + c.conv_dim], p[:, c.Di + c.conv_dim:]

    def mamba_out(self, ly, y, z):
        """y (S, Di) with the D term, gate z (S, Di): y silu(z), or FalconH1RMSNormGated (n_groups groups of
        Di/G channels, before or after the gate), then out_proj."""
        c = self.cfg
        if ly["norm"] is None:
            g = y * silu(z)
        else:
            S = y.shape[0]
            g = y if c.norm_before_gate else y * silu(z)
            g = g.reshape(S, c.G, c.Di // c.G)
            g = (g / np.sqrt(np.mean(g * g, axis=-1, keepdims=True) + c.eps)).reshape(S, c.Di) * ly["norm"]
            if c.norm_before_gate:
                g = g * silu(z)
        return linear(g, ly["out_w"], ly["out_b"])

    def position(self, q, k, pos):
        """k times key_multiplier (HF: after k_proj, before RoPE), then RoPE over the whole head."""
        cos, sin = rope_tables(self.cfg, pos, self.dt)                   # (S, hd)
        return apply_rope(q, cos, sin, self.cfg.rd), apply_rope(k * self.cfg.key_mult, cos, sin, self.cfg.rd)

    def mlp_block(self, ly, x):
        """FalconH1MLP: down_multiplier * down(up(x) * silu(gate_multiplier * gate(x))), x (S, H)."""
        c = self.cfg
        u = linear(x, ly["up"], ly["up_b"]) * silu(linear(x, ly["gate"], ly["gate_b"]) * c.gate_mult)
        return linear(u, ly["down"], ly["down_b"]) * c.down_mult

    # -- forward loops (both mixers on every layer) ----------------------------------------------

    def forward_sequence(self, emb, override):
        c = self.cfg
        h = emb.copy()
        resid, attn, mamba = [h.copy()], [], []                          # L+1 entries of (S, H)
        for i, ly in enumerate(self.layers):
            x = rmsnorm(h, ly["in_norm"], c.eps)
            m, mrec = self.mamba_seq(ly, x)
            a, arec = self.attention_seq(ly, x * c.attn_in, self.layer_normalizer(i, override)[1])
            mamba.append(mrec)
            attn.append(arec)
            h = h + (m * c.ssm_out + a * c.attn_out)
            h = h + self.mlp_block(ly, rmsnorm(h, ly["ff_norm"], c.eps))
            resid.append(h.copy())
        logits = rmsnorm(h, self.final_norm, c.eps) @ self.head.T         # (S, V)
        return dict(resid=np.stack(resid), logits=logits, attn=attn, mamba=mamba, moe=[], S=emb.shape[0])

    def forward_steps(self, emb, override):
        c = self.cfg
        S = emb.shape[0]
        cache, state, resid, logits, attn, mamba, _ = self.step_buffers(S)
        for t in range(S):
            h = emb[t].copy()                                            # (H,)
            resid[0, t] = h
            for i, ly in enumerate(self.layers):
                x = rmsnorm(h, ly["in_norm"], c.eps)
                r, q = mamba[i], attn[i]                                 # layer i is both the i-th of each kind
                m, r["dt"][t], r["retained"][t] = self.mamba_step(ly, x, state[i])
                a, q["p"][t, :, :t + 1], q["p_null"][t], q["zmax"][t] = self.attention_step(
                    ly, x * c.attn_in, t, cache[i], self.layer_normalizer(i, override)[1])
                h = h + (m * c.ssm_out + a * c.attn_out)
                h = h + self.mlp_block(ly, rmsnorm(h, ly["ff_norm"], c.eps)[None])[0]
                resid[i + 1, t] = h
            logits[t] = self.head @ rmsnorm(h, self.final_norm, c.eps)
        return dict(resid=resid, logits=logits, attn=attn, mamba=mamba, moe=[], S=S)


if __name__ == "__main__":
    cli(FalconH1Ref.load, "Run the Falcon-H1 reference on a checkpoint and print a trace summary.")
