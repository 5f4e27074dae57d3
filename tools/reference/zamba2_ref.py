#!/usr/bin/python3
"""Independent numpy reference of the Zyphra Zamba2 forward pass (model_type "zamba2") and its trace.

What it is: a plain, slow, float64 implementation of Hugging Face's Zamba2ForCausalLM as modeling_zamba2.py /
modular_zamba2.py / configuration_zamba2.py define it (Zamba2HybridLayer, Zamba2AttentionDecoderLayer with its
per-use adapters, Zamba2MambaDecoderLayer, Zamba2MambaMixer.torch_forward and its cached one-token branch,
Zamba2RMSNorm, Zamba2RMSNormGated), after Glorioso et al. 2024 (Zamba; the Zamba2 suite), plus the HybridLens
extensions and trace tensors of trace-format.md §1-§3. The Mamba-2 mixer is nemotron_ref.py's (bamba_ref.py's
scan, Dao & Gu 2024, with the time_step_min floor and the grouped gated norm), imported.
What it is not: shared with the C++ code, or a copy of HF's code. Decisions: tools/reference/ZAMBA2.md.

The model (HF's names; e = embed_tokens[ids], the "original hidden states", h_0 = e):
  "mamba" layer i:   h += mamba_i(input_layernorm_i(h))
  "hybrid" layer i, the j-th hybrid layer, shared block b = j % num_mem_blocks:
      x = block_b.input_layernorm([h, e])                         (2H wide: the concat)
      a = block_b.self_attn(x), q/k/v = (W + B_j A_j) x           (per-use adapters when
                                                                   use_shared_attention_adapter; RoPE when
                                                                   use_mem_rope; head dim 2H/nh, scale (hd/2)^-0.5)
      f = block_b.feed_forward(block_b.pre_ff_layernorm(a))        (no residual inside the block:
          = down(gelu(g) * u), [g | u] = (W_gu + B_j A_j) x        gate_up with its per-use adapter)
      h += mamba_i(mamba_decoder.input_layernorm_i(h + linear_i(f)))   (the block's output feeds the Mamba
                                                                        input only, not the residual)
  logits = lm_head(final_layernorm(h)) (tied to embed_tokens by default).
Trace axes: A_n = number of hybrid layers (row a = the a-th hybrid layer's use of its block), M_n = L (every
layer has a Mamba-2 mixer), no router; L+1 residual points (point i+1 after layer i).
Two forward paths: run(..., path="sequence") and run(..., path="step"); they agree to 1e-10 (check_zamba2.py).
"""
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bamba_ref import BambaRef  # noqa: E402
from jamba_ref import JambaConfig, JambaRef, cli, linear, rmsnorm  # noqa: E402
from nemotron_ref import NemotronHRef  # noqa: E402

DEFAULT_SCHEDULE = (["mamba"] + (["mamba"] * 5 + ["hybrid"]) * 7 + ["mamba"] * 4 + ["hybrid"] + ["mamba"] * 3
                    + ["hybrid"] + ["mamba"] * 2)                       # Zamba2Config's 54-layer default
KIND_OF_NAME = {"mamba": "M", "linear_attention": "M", "hybrid": "H"}   # v5 renames "mamba" linear_attention
GATED_NORM_EPS = 1e-5                                                   # Zamba2MambaMixer: hard-coded, not rms_norm_eps


class Zamba2Config(JambaConfig):
    """config.json of model_type "zamba2" (Zamba2Config defaults), with the trace-format.md §1 extensions."""
    DEFAULTS = dict(vocab_size=32000, tie_word_embeddings=True, hidden_size=2560, num_hidden_layers=None,
                    layers_block_type=None, layer_types=None, mamba_d_state=64, mamba_d_conv=4, mamba_expand=2,
                    mamba_ngroups=1, time_step_min=0.001, time_step_limit=None, n_mamba_heads=8, mamba_headdim=None,
                    use_conv_bias=True, chunk_size=256, add_bias_linear=False, intermediate_size=None,
                    hidden_act="gelu", num_attention_heads=32, num_key_value_heads=None, attention_head_dim=None,
                    head_dim=None, attention_hidden_size=None, num_mem_blocks=1, use_shared_mlp_adapter=True,
                    use_shared_attention_adapter=False, adapter_rank=128, use_mem_rope=False,
                    rope_parameters=None, rope_scaling=None, rope_theta=None, use_long_context=False,
                    rms_norm_eps=1e-5, attention_normalizer="softmax", num_register_tokens=0)

    def __init__(self, d):
        assert d.get("model_type", "zamba2") == "zamba2", d.get("model_type")
        v = dict(self.DEFAULTS)
        v.update(d)
        self.raw = d
        names = v["layers_block_type"] if v["layers_block_type"] is not None else v["layer_types"]
        names = DEFAULT_SCHEDULE if names is None else names
        assert all(n in KIND_OF_NAME for n in names), f"layers_block_type {names}"
        self.kinds = "".join(KIND_OF_NAME[n] for n in names)
        self.L = len(self.kinds)
        L_cfg = v["num_hidden_layers"] if v["num_hidden_layers"] is not None else 54
        assert L_cfg == self.L, f"num_hidden_layers {L_cfg} != {self.L} entries of layers_block_type"
        self.V, self.H = int(v["vocab_size"]), int(v["hidden_size"])
        self.tie = bool(v["tie_word_embeddings"])
        self.I = int(v["intermediate_size"]) if v["intermediate_size"] is not None else 4 * self.H
        assert v["hidden_act"] == "gelu", f"hidden_act {v['hidden_act']!r} (every Zamba2 checkpoint: gelu)"
        self.eps, self.gated_eps = float(v["rms_norm_eps"]), GATED_NORM_EPS
        # shared attention: input 2H (the concat), head dim 2H/nh whatever a config writes (HF recomputes it)
        self.nh = int(v["num_attention_heads"])
        self.nkv = self.nh if v["num_key_value_heads"] is None else int(v["num_key_value_heads"])
        assert (2 * self.H) % self.nh == 0 and self.nh % self.nkv == 0
        self.hd = 2 * self.H // self.nh
        for k in ("attention_head_dim", "head_dim"):
            assert v[k] in (None, self.hd), f"{k} {v[k]} != 2 hidden_size / num_attention_heads = {self.hd}"
        assert v["attention_hidden_size"] in (None, 2 * self.H), "attention_hidden_size != 2 hidden_size"
        self.nmb = int(v["num_mem_blocks"])
        self.rank = int(v["adapter_rank"])
        assert v["use_shared_mlp_adapter"], "HF's Zamba2MLP always has the gate_up adapters (flag not read)"
        self.attn_adapter = bool(v["use_shared_attention_adapter"])
        assert not self.attn_adapter or self.nkv == self.nh, \
            "attention adapters add a 2H-wide output to k and v: num_key_value_heads must equal the heads"
        self.rope = bool(v["use_mem_rope"])
        assert not v["use_long_context"], "use_long_context: HF versions disagree on the rope_theta rescale"
        rp = v["rope_parameters"] or v["rope_scaling"] or {}
        assert rp.get("rope_type", rp.get("type", "default")) == "default", f"rope {rp}"
        theta = rp.get("rope_theta", v["rope_theta"])
        self.theta = 10000.0 if theta is None else float(theta)           # HF's default in every version
        self.rd = self.hd                                                 # rotary over the whole 2H/nh head
        # Mamba-2 (Zamba2MambaMixer)
        self.Di = int(v["mamba_expand"] * self.H)
        self.mh = int(v["n_mamba_heads"])
        assert self.Di % self.mh == 0, "n_mamba_heads must divide mamba_expand * hidden_size"
        self.P = self.Di // self.mh                                        # mamba_headdim, derived by HF
        assert v["mamba_headdim"] in (None, self.P), f"mamba_headdim {v['mamba_headdim']} != Di/heads {self.P}"
        self.G, self.N, self.W = int(v["mamba_ngroups"]), int(v["mamba_d_state"]), int(v["mamba_d_conv"])
        assert self.mh % self.G == 0 and self.Di % self.G == 0
        self.norm_group = self.Di // self.G
        self.chunk = int(v["chunk_size"])
        self.conv_dim = self.Di + 2 * self.G * self.N
        self.conv_bias = True                                             # conv1d.bias is always stored ...
        self.use_conv_bias = bool(v["use_conv_bias"])                     # ... and added only when this is true
        self.proj_bias = self.mlp_bias = bool(v["add_bias_linear"])       # in/out_proj and gate_up/down biases
        self.dt_floor = float(v["time_step_min"])
        lim = v["time_step_limit"]
        self.dt_min, self.dt_max = (0.0, math.inf) if lim is None else (float(lim[0]), float(lim[1]))
        self.normalizer = v["attention_normalizer"] or "softmax"
        assert self.normalizer in ("softmax", "softmax1")
        self.n_reg_trained = int(v["num_register_tokens"] or 0)
        # layer lists: attention rows = hybrid layers (use j = j-th hybrid layer), every layer a Mamba-2 layer
        self.E, self.K = 0, 0
        self.hybrid = [i for i, k in enumerate(self.kinds) if k == "H"]
        self.is_attn, self.is_moe = [k == "H" for k in self.kinds], [False] * self.L
        self.attn_layers, self.mamba_layers, self.moe_layers = list(self.hybrid), list(range(self.L)), []

    def block_of_use(self, j):
        """Shared block used by the j-th hybrid layer: rotation in hybrid order (HF's cycle())."""
        return j % self.nmb

    def source_layer(self, b):
        """The layer whose shared_transformer names hold block b in the file: the first hybrid layer using it."""
        return self.hybrid[b]


def gelu(x):
    """Exact (erf) GELU, ACT2FN["gelu"]."""
    return (0.5 * x * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(x / math.sqrt(2.0)))).astype(x.dtype)


SHARED_NAME = re.compile(r"model\.layers\.(\d+)\.shared_transformer\.(.+)$")


class Zamba2Ref(NemotronHRef):
    """NemotronHRef's Mamba-2 mixer (BambaRef's scan and step state, the time_step_min floor, the grouped gated
    norm), JambaRef's attention, registers, normalizers and trace assembly (run), with Zamba2's hybrid layers."""

    CONFIG = Zamba2Config
    NAMES = dict(embed="model.embed_tokens.weight", final_norm="model.final_layernorm.weight",
                 registers="model.register_tokens", attn="self_attn.")

    def __init__(self, cfg, tensors, dtype=np.float64):
        self.cfg = c = cfg
        self.dt = dtype
        used = set()

        def g(name):
            used.add(name)
            return np.asarray(tensors[name], dtype=dtype)
        has = lambda name: name in tensors  # noqa: E731
        self.load_shared(g, has)
        if c.tie and has("lm_head.weight"):                              # HF ties it to the embeddings
            assert np.array_equal(tensors["lm_head.weight"], tensors[self.NAMES["embed"]]), \
                "tie_word_embeddings with a different lm_head.weight"
        self.blocks = [self.load_block(b, g, has) for b in range(min(c.nmb, len(c.hybrid)))]
        self.layers = []
        for i, kind in enumerate(c.kinds):
            p = f"model.layers.{i}." + ("mamba_decoder." if kind == "H" else "")
            ly = dict(kind=kind, attn=kind == "H", moe=False, sinks=None, in_norm=g(p + "input_layernorm.weight"))
            ly.update(self.load_mamba(p + "mamba.", g, has))
            if not c.use_conv_bias:
                ly["conv_b"] = None                                      # stored but not part of the model
            if kind == "H":
                j = c.hybrid.index(i)
                ly.update(self.use_weights(self.blocks[c.block_of_use(j)], j), use=j, block=c.block_of_use(j),
                          linear=g(f"model.layers.{i}.linear.weight"))  # (H, H)
                assert ly["linear"].shape == (c.H, c.H)
            self.layers.append(ly)
        for name in set(tensors) - used:                                 # tied copies of a block: identical
            m = SHARED_NAME.match(name)
            assert m and int(m.group(1)) in c.hybrid, f"unexpected tensor {name}"
            src = f"model.layers.{c.source_layer(c.block_of_use(c.hybrid.index(int(m.group(1)))))}." \
                  f"shared_transformer.{m.group(2)}"
            assert src in used and np.array_equal(tensors[name], tensors[src]), f"{name} differs from {src}"

    def load_block(self, b, g, has):
        """Shared block b from the names of its source layer; adapters of every use j with j % nmb == b."""
        c = self.cfg
        p = f"model.layers.{c.source_layer(b)}.shared_transformer."
        opt = lambda n: g(p + n) if has(p + n) else None  # noqa: E731
        blk = dict(in_norm=g(p + "input_layernorm.weight"), ff_norm=g(p + "pre_ff_layernorm.weight"),  # (2H,), (H,)
                   gate_up=g(p + "feed_forward.gate_up_proj.weight"), gate_up_b=opt("feed_forward.gate_up_proj.bias"),
                   down=g(p + "feed_forward.down_proj.weight"), down_b=opt("feed_forward.down_proj.bias"),
                   mlp_ad={}, attn_ad={})
        blk.update({k: g(p + f"self_attn.{k}_proj.weight") for k in "qkvo"})
        assert blk["in_norm"].shape == (2 * c.H,) and blk["ff_norm"].shape == (c.H,)
        assert blk["q"].shape == (c.nh * c.hd, 2 * c.H) and blk["k"].shape == blk["v"].shape == (c.nkv * c.hd, 2 * c.H)
        assert blk["o"].shape == (c.H, c.nh * c.hd)
        assert blk["gate_up"].shape == (2 * c.I, c.H) and blk["down"].shape == (c.H, c.I)
        assert (blk["gate_up_b"] is not None) == c.mlp_bias and (blk["down_b"] is not None) == c.mlp_bias
        for j in range(b, len(c.hybrid), c.nmb):
            a = p + f"feed_forward.gate_up_proj_adapter_list.{j}."
            blk["mlp_ad"][j] = (g(a + "0.weight"), g(a + "1.weight"))    # (r, H), (2I, r)
            assert blk["mlp_ad"][j][0].shape == (c.rank, c.H) and blk["mlp_ad"][j][1].shape == (2 * c.I, c.rank)
            if c.attn_adapter:
                for k in "qkv":
                    a = p + f"self_attn.linear_{k}_adapter_list.{j}."
                    blk["attn_ad"][k, j] = (g(a + "0.weight"), g(a + "1.weight"))   # (r, 2H), (2H, r)
                    assert blk["attn_ad"][k, j][0].shape == (c.rank, 2 * c.H)
                    assert blk["attn_ad"][k, j][1].shape == (2 * c.H, c.rank)
        return blk

    def use_weights(self, blk, j):
        """The weights of use j of a block, each adapter folded in: W + B A (the same function of x as HF's
        W x + B (A x)), so that JambaRef's attention reads them as one projection."""
        fold = lambda w, ad: w if ad is None else w + ad[1] @ ad[0]  # noqa: E731
        u = {k: fold(blk[k], blk["attn_ad"].get((k, j))) for k in "qkv"}
        u.update(o=blk["o"], gate_up=fold(blk["gate_up"], blk["mlp_ad"][j]), gate_up_b=blk["gate_up_b"],
                 down=blk["down"], down_b=blk["down_b"], blk_in_norm=blk["in_norm"], blk_ff_norm=blk["ff_norm"])
        return u

    # -- Zamba2's pieces ------------------------------------------------------------------------

    def position(self, q, k, pos):
        """RoPE (rotate_half) over the whole 2H/nh head when use_mem_rope, else none."""
        return BambaRef.position(self, q, k, pos) if self.cfg.rope else (q, k)

    def scale_logits(self, z):
        """Zamba2Attention: scale (head_dim / 2)^-0.5, head_dim = 2H/nh."""
        return z / math.sqrt(self.cfg.hd / 2)

    def shared_mlp(self, ly, x):
        """Zamba2MLP of the layer's use: down(gelu(g) u), [g | u] = gate_up(x) (chunk(2): gate rows first)."""
        gu = linear(x, ly["gate_up"], ly["gate_up_b"])
        return linear(gelu(gu[:, :self.cfg.I]) * gu[:, self.cfg.I:], ly["down"], ly["down_b"])

    def block_in(self, ly, h, e):
        """The block's attention input: input_layernorm of [h, e] (S, 2H)."""
        return rmsnorm(np.concatenate([h, e], axis=-1), ly["blk_in_norm"], self.cfg.eps)

    def block_out(self, ly, a):
        """From the attention output a (S, H) to what the layer adds to the Mamba input: linear(mlp(norm(a)))."""
        return self.shared_mlp(ly, rmsnorm(a, ly["blk_ff_norm"], self.cfg.eps)) @ ly["linear"].T

    # -- forward loops ----------------------------------------------------------------------------

    def forward_sequence(self, emb, override):
        c = self.cfg
        h = emb.copy()
        resid, attn, mamba = [h.copy()], [], []                          # L+1 entries of (S, H)
        for i, ly in enumerate(self.layers):
            x = h
            if ly["kind"] == "H":
                a, rec = self.attention_seq(ly, self.block_in(ly, h, emb), self.layer_normalizer(i, override)[1])
                attn.append(rec)
                x = h + self.block_out(ly, a)
            o, rec = self.mamba_seq(ly, rmsnorm(x, ly["in_norm"], c.eps))
            mamba.append(rec)
            h = h + o
            resid.append(h.copy())
        logits = rmsnorm(h, self.final_norm, c.eps) @ self.head.T        # (S, V)
        return dict(resid=np.stack(resid), logits=logits, attn=attn, mamba=mamba, moe=[], S=emb.shape[0])

    def forward_steps(self, emb, override):
        c = self.cfg
        S = emb.shape[0]
        cache, state, resid, logits, attn, mamba, _ = self.step_buffers(S)
        for t in range(S):
            h = emb[t].copy()                                            # (H,)
            resid[0, t] = h
            for i, ly in enumerate(self.layers):
                x = h
                if ly["kind"] == "H":
                    r = attn[ly["use"]]
                    a, r["p"][t, :, :t + 1], r["p_null"][t], r["zmax"][t] = self.attention_step(
                        ly, self.block_in(ly, h[None], emb[t][None])[0], t, cache[i],
                        self.layer_normalizer(i, override)[1])
                    x = h + self.block_out(ly, a[None])[0]
                r = mamba[i]
                o, r["dt"][t], r["retained"][t] = self.mamba_step(ly, rmsnorm(x, ly["in_norm"], c.eps), state[i])
                h = h + o
                resid[i + 1, t] = h
            logits[t] = self.head @ rmsnorm(h, self.final_norm, c.eps)
        return dict(resid=resid, logits=logits, attn=attn, mamba=mamba, moe=[], S=S)


if __name__ == "__main__":
    cli(Zamba2Ref.load, "Run the Zamba2 reference on a checkpoint and print a trace summary.")
