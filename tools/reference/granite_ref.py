#!/usr/bin/python3
"""Independent numpy reference of the IBM Granite 4.0-H forward pass (model_type "granitemoehybrid") and its trace.

What it is: a plain, slow, float64 implementation of Hugging Face's GraniteMoeHybridForCausalLM as
modeling_granitemoehybrid.py / configuration_granitemoehybrid.py define it (GraniteMoeHybridDecoderLayer,
GraniteMoeHybridMambaLayer = BambaMixer's slow path torch_forward, GraniteMoeHybridAttention,
GraniteMoeHybridMoE with its top-k gating, GraniteMoeHybridMLP as the shared expert), plus the HybridLens
extensions and trace tensors of trace-format.md §1-§3. The Mamba-2 mixer is bamba_ref.py's (Dao & Gu 2024).
What it is not: shared with the C++ code, or a copy of HF's code.

The model (HF's names): h_0 = embedding_multiplier * embed_tokens[ids]; layer i:
  h += residual_multiplier * mixer_i(input_layernorm(h))         mixer: "mamba" Mamba-2 | "attention"
  h += residual_multiplier * (moe(x) + shared_mlp(x)),  x = post_attention_layernorm(h)
      (num_local_experts == 0: shared_mlp(x) only, no router)
  logits = lm_head(norm(h)) / logits_scaling
Attention: softmax scale = attention_multiplier (not head_dim^-0.5); RoPE over the WHOLE head (rotate_half)
only when position_embedding_type == "rope", else none. MoE: router logits (E,) -> top-k over the logits ->
softmax over the k chosen -> sum of those k experts, each silu(gate) * up from input_linear's [gate | up]
halves, then output_linear. Decisions: tests/golden/README.md, "Granite 4.0-H cases".
Two forward paths: run(..., path="sequence") and run(..., path="step"); they agree to 1e-10 (check_ref.py).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bamba_ref import BambaRef  # noqa: E402
from jamba_ref import JambaConfig, JambaRef, cli  # noqa: E402


class GraniteConfig(JambaConfig):
    """config.json of model_type "granitemoehybrid" (GraniteMoeHybridConfig defaults), with the trace-format.md
    §1 extensions."""
    DEFAULTS = dict(vocab_size=32000, tie_word_embeddings=False, hidden_size=4096, intermediate_size=11008,
                    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None, hidden_act="silu",
                    rms_norm_eps=1e-6, attention_bias=False, embedding_multiplier=1.0, logits_scaling=1.0,
                    residual_multiplier=1.0, attention_multiplier=1.0, num_local_experts=8, num_experts_per_tok=2,
                    shared_intermediate_size=1024, position_embedding_type=None, layer_types=None,
                    layers_block_type=None, mamba_n_heads=128, mamba_n_groups=1, mamba_d_state=256,
                    mamba_d_head="auto", mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=256, mamba_conv_bias=True,
                    mamba_proj_bias=False, time_step_limit=[0.0, math.inf], rope_parameters=None, rope_scaling=None,
                    rope_theta=None, head_dim=None, attention_normalizer="softmax", num_register_tokens=0)

    def __init__(self, d):
        assert d.get("model_type", "granitemoehybrid") == "granitemoehybrid", d.get("model_type")
        v = dict(self.DEFAULTS)
        v.update(d)
        self.raw = d
        self.read_shared(v)
        self.hd = int(v["head_dim"]) if v["head_dim"] else self.H // self.nh   # getattr(config, "head_dim", H/nh)
        self.attn_bias = bool(v["attention_bias"])
        self.emb_mult, self.resid_mult = float(v["embedding_multiplier"]), float(v["residual_multiplier"])
        self.attn_mult, self.logits_div = float(v["attention_multiplier"]), float(v["logits_scaling"])
        self.E, self.K = int(v["num_local_experts"] or 0), int(v["num_experts_per_tok"])
        assert self.E == 0 or 1 <= self.K <= self.E, "num_experts_per_tok must lie in 1..num_local_experts"
        self.Is = int(v["shared_intermediate_size"])
        names = v["layer_types"] if v["layer_types"] is not None else v["layers_block_type"]  # attribute_map alias
        names = names if names is not None else ["mamba"] * self.L         # HF: all Mamba without a list
        assert len(names) == self.L and set(names) <= {"mamba", "attention"}, f"layer_types {names}"
        # Mamba-2: as BambaConfig (Di = mamba_expand * hidden_size); the dt clamp is time_step_limit only
        self.Di = int(v["mamba_expand"]) * self.H
        self.mh = int(v["mamba_n_heads"])
        assert self.Di % self.mh == 0, "mamba_n_heads must divide mamba_expand * hidden_size"
        self.P = self.Di // self.mh if v["mamba_d_head"] == "auto" else int(v["mamba_d_head"])
        assert self.P * self.mh == self.Di
        self.G, self.N, self.W = int(v["mamba_n_groups"]), int(v["mamba_d_state"]), int(v["mamba_d_conv"])
        assert self.mh % self.G == 0
        self.chunk = int(v["mamba_chunk_size"])
        self.conv_dim = self.Di + 2 * self.G * self.N
        lim = v["time_step_limit"]
        self.dt_min, self.dt_max = (0.0, math.inf) if lim is None else (float(lim[0]), float(lim[1]))
        pe = v["position_embedding_type"]
        assert pe in (None, "nope", "rope"), f"position_embedding_type {pe!r}"
        self.rope = pe == "rope"                                           # HF: rotary_emb only for "rope"
        rp = v["rope_scaling"] or v["rope_parameters"]                     # HF: rope_scaling or rope_parameters
        assert rp is None or rp.get("rope_type", rp.get("type", "default")) == "default", f"rope {rp}"
        theta = rp.get("rope_theta") if rp else None
        self.theta = float(theta if theta is not None else v["rope_theta"] if v["rope_theta"] is not None else 1e4)
        self.rd = self.hd                                                  # rotary over the whole head
        self.set_schedule([n == "attention" for n in names], [self.E > 0] * self.L)


class GraniteRef(BambaRef):
    """BambaRef's Mamba-2 mixer (dt clamp time_step_limit only, gated norm over all Di), RoPE tables and
    step state, and JambaRef's attention, registers, normalizers, forward loops and trace assembly (run),
    with Granite's names, multipliers, attention scale, optional RoPE and MoE + shared MLP."""

    CONFIG = GraniteConfig
    NAMES = dict(embed="model.embed_tokens.weight", final_norm="model.norm.weight",
                 registers="model.register_tokens", attn="self_attn.")

    def __init__(self, cfg, tensors, dtype=np.float64):
        self.cfg = c = cfg
        self.dt = dtype
        g = lambda name: np.asarray(tensors[name], dtype=dtype)  # noqa: E731
        has = lambda name: name in tensors  # noqa: E731
        self.load_shared(g, has)
        # embedding_multiplier scales every input row (HF multiplies inputs_embeds): token rows, trained
        # registers and mean-row registers alike; the tied head keeps the stored rows. logits_scaling divides
        # the head (logits = lm_head(norm(h)) / logits_scaling).
        self.head = self.head / c.logits_div
        self.embed = self.embed * c.emb_mult
        self.registers_trained = self.registers_trained * c.emb_mult
        self.mean_row = self.mean_row * c.emb_mult
        self.layers = []
        for i in range(c.L):
            p = f"model.layers.{i}."
            ly = dict(attn=c.is_attn[i], moe=c.is_moe[i], in_norm=g(p + "input_layernorm.weight"),
                      ff_norm=g(p + "post_attention_layernorm.weight"))                     # (H,), (H,)
            if c.is_attn[i]:
                ly.update(self.load_attention(p, g, has))
                nb = sum(k + "_b" in ly for k in "qkvo")
                assert nb == 4 * c.attn_bias, f"layer {i}: {nb} attention biases, attention_bias {c.attn_bias}"
            else:
                ly.update(self.load_mamba(p + "mamba.", g, has))
            s = p + "shared_mlp."
            si, so = g(s + "input_linear.weight"), g(s + "output_linear.weight")             # (2 Is, H), (H, Is)
            assert si.shape == (2 * c.Is, c.H) and so.shape == (c.H, c.Is), (si.shape, so.shape)
            ly["shared"] = (si[:c.Is], si[c.Is:], so)                                       # gate, up, down
            if c.E > 0:
                f = p + "block_sparse_moe."
                ly["router"] = g(f + "router.layer.weight")                                 # (E, H)
                wi, wo = g(f + "input_linear.weight"), g(f + "output_linear.weight")       # (E, 2I, H), (E, H, I)
                assert ly["router"].shape == (c.E, c.H), ly["router"].shape
                assert wi.shape == (c.E, 2 * c.I, c.H) and wo.shape == (c.E, c.H, c.I), (wi.shape, wo.shape)
                ly["experts"] = [(wi[e, :c.I], wi[e, c.I:], wo[e]) for e in range(c.E)]
            else:
                assert not has(p + "block_sparse_moe.router.layer.weight"), f"layer {i}: experts with E = 0"
            self.layers.append(ly)

    # -- Granite's differences -------------------------------------------------------------------

    def position(self, q, k, pos):
        """RoPE over the whole head when position_embedding_type is "rope"; NoPE otherwise."""
        return BambaRef.position(self, q, k, pos) if self.cfg.rope else (q, k)

    def scale_logits(self, z):
        """GraniteMoeHybridAttention.scaling = attention_multiplier."""
        return z * self.cfg.attn_mult

    # each residual branch is scaled by residual_multiplier before it is added (h = h + branch * m)
    def attention_seq(self, ly, x, null):
        o, rec = BambaRef.attention_seq(self, ly, x, null)
        return o * self.cfg.resid_mult, rec

    def attention_step(self, ly, x, t, cache, null):
        o, p, p_null, zmax = BambaRef.attention_step(self, ly, x, t, cache, null)
        return o * self.cfg.resid_mult, p, p_null, zmax

    def mamba_seq(self, ly, x):
        o, rec = BambaRef.mamba_seq(self, ly, x)
        return o * self.cfg.resid_mult, rec

    def mamba_step(self, ly, x, st):
        o, dt, retained = BambaRef.mamba_step(self, ly, x, st)
        return o * self.cfg.resid_mult, dt, retained

    def feed_forward(self, ly, x):
        """x (S, H) after post_attention_layernorm. Returns (residual_multiplier * (moe(x) + shared_mlp(x)),
        router record or None). Routing (JetMoe/GraniteMoe top-k gating): the k largest router logits (ties
        to the lower expert index), gate weights softmax over those k logits, i.e. the all-E softmax
        renormalised over the chosen experts. Record: probs = softmax over all E (trace-format.md §3),
        topk = the chosen experts by descending logit, lse = logsumexp of all E logits."""
        c = self.cfg
        out = JambaRef.mlp(x, *ly["shared"])                             # (S, H)
        if not ly["moe"]:
            return out * c.resid_mult, None
        logits = x @ ly["router"].T                                      # (S, E)
        mx = np.max(logits, axis=-1, keepdims=True)
        ex = np.exp(logits - mx)
        probs = ex / np.sum(ex, axis=-1, keepdims=True)                  # (S, E) all E: the instruments' view
        lse = mx[:, 0] + np.log(np.sum(ex, axis=-1))                     # (S,)
        topk = np.argsort(-logits, axis=-1, kind="stable")[:, :c.K]      # (S, K) by logit, ties lower index
        chosen = np.take_along_axis(logits, topk, axis=-1)               # (S, K)
        gw = np.exp(chosen - chosen[:, :1])
        gw = gw / np.sum(gw, axis=-1, keepdims=True)                     # (S, K) softmax over the chosen
        for e in range(c.E):
            rows, ranks = np.nonzero(topk == e)
            if rows.size:
                out[rows] += self.mlp(x[rows], *ly["experts"][e]) * gw[rows, ranks][:, None]
        return out * c.resid_mult, dict(probs=probs, topk=topk, lse=lse)


if __name__ == "__main__":
    cli(GraniteRef.load, "Run the Granite 4.0-H reference on a checkpoint and print a trace summary.")
