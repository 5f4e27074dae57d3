#!/usr/bin/python3
"""Independent numpy reference of the NVIDIA Nemotron-H forward pass (model_type "nemotron_h") and its trace.

What it is: a plain, slow, float64 implementation of Hugging Face's NemotronHForCausalLM as
modeling_nemotron_h.py / configuration_nemotron_h.py define it (NemotronHBlock, NemotronHMamba2Mixer's
slow path torch_forward, NemotronHAttention, NemotronHMLP, Zamba2RMSNormGated), plus the HybridLens
extensions and trace tensors of trace-format.md §1-§3. The Mamba-2 mixer is bamba_ref.py's (state-space
duality, Dao & Gu 2024) with two Nemotron-H differences, the dt clamp and the grouped gated norm.
What it is not: shared with the C++ code, or a copy of HF's code; MoE ('E') layers are not supported.

The model: h_0 = embeddings[ids]; layer i: h += mixer_i(RMSNorm_i(h)), ONE norm per layer, and each layer
has exactly one mixer: 'M' Mamba-2, '*' attention (NoPE: no positional encoding at all; GQA; scale
head_dim^-0.5), '-' MLP down(relu(up(x))^2) (not gated); logits = lm_head(RMSNorm_f(h)).
Decisions (tests/golden/README.md, "Nemotron-H cases"):
  dt = clamp(softplus(dt_raw + dt_bias), min=time_step_min), then clamp to [time_step_limit[0],
      time_step_limit[1]] (HF's slow path clamps at time_step_min only; the limit [0, inf] of every
      published config makes the second clamp a no-op).
  The gated norm multiplies y by silu(z) first, then RMS-normalises each group of Di/n_groups channels.
  q/k/v/o biases are used where the checkpoint holds them (all four or none): NVIDIA's remote code
      creates them when attention_bias is true, HF's current file (JambaAttention) never does.
Two forward paths: run(..., path="sequence") (chunked SSD scan) and run(..., path="step") (one position
at a time: KV cache, conv window, SSM state); check_nemotron.py asserts they agree to 1e-10.
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bamba_ref import BambaRef  # noqa: E402
from jamba_ref import JambaConfig, JambaRef, cli, linear, rmsnorm, silu  # noqa: E402

KIND_OF_NAME = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
                "moe": "E"}


class NemotronHConfig(JambaConfig):
    """config.json of model_type "nemotron_h" (NemotronHConfig defaults), with the trace-format.md §1 extensions."""
    DEFAULTS = dict(vocab_size=131072, tie_word_embeddings=False, hidden_size=4096, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=128, attention_bias=False, intermediate_size=21504,
                    mlp_hidden_act="relu2", mlp_bias=False, ssm_state_size=128, mamba_num_heads=128,
                    mamba_head_dim=64, mamba_hidden_act="silu", n_groups=8, conv_kernel=4, use_conv_bias=True,
                    chunk_size=128, time_step_min=0.001, time_step_limit=[0.0, math.inf], layer_norm_epsilon=1e-5,
                    hybrid_override_pattern=None, layers_block_type=None,
                    attention_normalizer="softmax", num_register_tokens=0)
    LEGACY = dict(mamba_n_groups="n_groups", mamba_d_conv="conv_kernel", mamba_dt_min="time_step_min",
                  mamba_dt_limit="time_step_limit", mamba_conv_bias="use_conv_bias", mamba_chunk_size="chunk_size")

    def __init__(self, d):
        assert d.get("model_type", "nemotron_h") == "nemotron_h", d.get("model_type")
        v = dict(self.DEFAULTS)
        v.update(d)
        v.update({new: d[old] for old, new in self.LEGACY.items() if old in d})   # HF __post_init__: old names win
        self.raw = d
        names = v["layers_block_type"] if v["layers_block_type"] is not None else d.get("layer_types")
        if names is not None:                                           # the list wins over the pattern, as in HF
            self.kinds = "".join(KIND_OF_NAME[n] for n in names)
        else:
            self.kinds = v["hybrid_override_pattern"] or "ME*-"         # HF's default list
            assert set(self.kinds) <= set("M*-E"), f"hybrid_override_pattern {self.kinds!r}"
        assert "E" not in self.kinds, "MoE ('E') layers are not in this reference"
        self.L = len(self.kinds)                                        # num_hidden_layers follows the pattern
        self.V, self.H = int(v["vocab_size"]), int(v["hidden_size"])
        self.tie = bool(v["tie_word_embeddings"])
        self.I = int(v["intermediate_size"])
        self.nh = int(v["num_attention_heads"])
        self.nkv = self.nh if v["num_key_value_heads"] is None else int(v["num_key_value_heads"])
        assert self.nh % self.nkv == 0
        self.hd = int(v["head_dim"]) if v["head_dim"] is not None else self.H // self.nh
        assert v["mlp_hidden_act"] == "relu2" and v["mamba_hidden_act"] == "silu"
        self.eps = float(v["layer_norm_epsilon"])
        self.attn_bias, self.mlp_bias = bool(v["attention_bias"]), bool(v["mlp_bias"])
        self.conv_bias = bool(v["use_conv_bias"])
        # in_proj / out_proj bias: HF reads use_bias; configs without it have only the older mamba_proj_bias
        self.proj_bias = bool(d["use_bias"] if "use_bias" in d else d.get("mamba_proj_bias", False))
        self.mh, self.P = int(v["mamba_num_heads"]), int(v["mamba_head_dim"])
        self.Di = self.mh * self.P                                      # not expand * hidden_size
        self.G, self.N, self.W = int(v["n_groups"]), int(v["ssm_state_size"]), int(v["conv_kernel"])
        assert self.mh % self.G == 0 and self.Di % self.G == 0
        self.norm_group = self.Di // self.G                             # Zamba2RMSNormGated group_size
        self.gated_eps = self.eps                                       # its eps (Zamba2 itself: 1e-5)
        self.chunk = int(v["chunk_size"])
        self.conv_dim = self.Di + 2 * self.G * self.N
        self.dt_floor = float(v["time_step_min"])                       # the slow path's lower clamp
        lim = v["time_step_limit"]
        self.dt_min, self.dt_max = (0.0, math.inf) if lim is None else (float(lim[0]), float(lim[1]))
        self.normalizer = v["attention_normalizer"] or "softmax"
        assert self.normalizer in ("softmax", "softmax1")
        self.n_reg_trained = int(v["num_register_tokens"] or 0)
        self.E, self.K = 0, 0
        self.is_attn = [k == "*" for k in self.kinds]
        self.is_moe = [False] * self.L
        self.attn_layers = [i for i, k in enumerate(self.kinds) if k == "*"]
        self.mamba_layers = [i for i, k in enumerate(self.kinds) if k == "M"]
        self.moe_layers = []


class NemotronHRef(BambaRef):
    """BambaRef's Mamba-2 pieces (load_mamba, mamba_in/split/seq/step) and JambaRef's attention, registers,
    normalizers and trace assembly (run), with Nemotron-H's block structure, names, clamp and gated norm."""

    CONFIG = NemotronHConfig
    position = JambaRef.position                                         # NoPE: q and k as projected

    def __init__(self, cfg, tensors, dtype=np.float64):
        self.cfg = c = cfg
        self.dt = dtype
        pre = "backbone." if "backbone.embeddings.weight" in tensors else "model."  # published vs HF names
        self.NAMES = dict(embed=pre + "embeddings.weight", final_norm=pre + "norm_f.weight",
                          registers=pre + "register_tokens", attn="mixer.")
        g = lambda name: np.asarray(tensors[name], dtype=dtype)  # noqa: E731
        has = lambda name: name in tensors  # noqa: E731
        self.load_shared(g, has)
        self.layers = []
        for i, kind in enumerate(c.kinds):
            p = f"{pre}layers.{i}."
            ly = dict(kind=kind, attn=kind == "*", moe=False, in_norm=g(p + "norm.weight"))  # (H,)
            if kind == "*":
                ly.update(self.load_attention(p, g, has))
                nb = sum(k + "_b" in ly for k in "qkvo")
                assert nb in (0, 4), f"layer {i}: {nb} of the 4 attention biases"
            elif kind == "M":
                ly.update(self.load_mamba(p + "mixer.", g, has))
            else:
                m = p + "mixer."
                ly.update(up=g(m + "up_proj.weight"), down=g(m + "down_proj.weight"),        # (I, H), (H, I)
                          up_b=g(m + "up_proj.bias") if has(m + "up_proj.bias") else None,
                          down_b=g(m + "down_proj.bias") if has(m + "down_proj.bias") else None)
                assert ly["up"].shape == (c.I, c.H) and ly["down"].shape == (c.H, c.I)
                assert (ly["up_b"] is not None) == c.mlp_bias and (ly["down_b"] is not None) == c.mlp_bias
            self.layers.append(ly)

    # -- the two Nemotron-H differences in the Mamba-2 mixer -------------------------------------

    def dt_clamp(self, dt):
        """torch.clamp(dt, time_step_min) of HF's slow path, then the time_step_limit clamp."""
        return np.clip(np.maximum(dt, self.cfg.dt_floor), self.cfg.dt_min, self.cfg.dt_max)

    def mamba_out(self, ly, y, z):
        """y (S, Di) with the D term, gate z (S, Di): y silu(z), RMS-normalised per group of Di/G channels
        with eps cfg.gated_eps, times norm.weight (Zamba2RMSNormGated), then out_proj."""
        c = self.cfg
        S = y.shape[0]
        g = (y * silu(z)).reshape(S, c.G, c.norm_group)
        g = g / np.sqrt(np.mean(g * g, axis=-1, keepdims=True) + c.gated_eps)
        return linear(ly["norm"] * g.reshape(S, c.Di), ly["out_w"], ly["out_b"])

    def mlp_block(self, ly, x):
        """NemotronHMLP: down(relu(up(x))^2), x (S, H)."""
        u = np.maximum(linear(x, ly["up"], ly["up_b"]), 0.0)
        return linear(u * u, ly["down"], ly["down_b"])

    # -- forward loops (one norm and one mixer per layer) ------------------------------------------

    def forward_sequence(self, emb, override):
        c = self.cfg
        h = emb.copy()
        resid, attn, mamba = [h.copy()], [], []                          # L+1 entries of (S, H)
        for i, ly in enumerate(self.layers):
            x = rmsnorm(h, ly["in_norm"], c.eps)
            if ly["kind"] == "*":
                o, rec = self.attention_seq(ly, x, self.layer_normalizer(i, override)[1])
                attn.append(rec)
            elif ly["kind"] == "M":
                o, rec = self.mamba_seq(ly, x)
                mamba.append(rec)
            else:
                o = self.mlp_block(ly, x)
            h = h + o
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
                if ly["kind"] == "*":
                    r = attn[c.attn_layers.index(i)]
                    o, r["p"][t, :, :t + 1], r["p_null"][t], r["zmax"][t] = self.attention_step(
                        ly, x, t, cache[i], self.layer_normalizer(i, override)[1])
                elif ly["kind"] == "M":
                    r = mamba[c.mamba_layers.index(i)]
                    o, r["dt"][t], r["retained"][t] = self.mamba_step(ly, x, state[i])
                else:
                    o = self.mlp_block(ly, x[None])[0]
                h = h + o
                resid[i + 1, t] = h
            logits[t] = self.head @ rmsnorm(h, self.final_norm, c.eps)
        return dict(resid=resid, logits=logits, attn=attn, mamba=mamba, moe=[], S=S)


if __name__ == "__main__":
    cli(NemotronHRef.load, "Run the Nemotron-H reference on a checkpoint and print a trace summary.")
