#!/usr/bin/python3
"""Independent numpy reference of the NVIDIA Nemotron-H forward pass (model_type "nemotron_h") and its trace.

What it is: a plain, slow, float64 implementation of Hugging Face's NemotronHForCausalLM as
modeling_nemotron_h.py / configuration_nemotron_h.py define it (NemotronHBlock, NemotronHMamba2Mixer's
slow path torch_forward, NemotronHAttention, NemotronHMLP, Zamba2RMSNormGated), plus the HybridLens
extensions and trace tensors of trace-format.md §1-§3. The Mamba-2 mixer is bamba_ref.py's (state-space
duality, Dao & Gu 2024) with two Nemotron-H differences, the dt clamp and the grouped gated norm.
What it is not: shared with the C++ code, or a copy of HF's code.

The model: h_0 = embeddings[ids]; layer i: h += mixer_i(RMSNorm_i(h)), ONE norm per layer, and each layer
has exactly one mixer: 'M' Mamba-2, '*' attention (NoPE: no positional encoding at all; GQA; scale
head_dim^-0.5), '-' MLP down(relu(up(x))^2) (not gated), 'E' MoE (NemotronHMoE: DeepSeek-V3's sigmoid
router with a score-correction bias and group-limited top-k, relu2 experts, optional latent projections,
plus a shared relu2 expert); logits = lm_head(RMSNorm_f(h)).
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
                    n_routed_experts=8, moe_intermediate_size=7688, moe_shared_expert_intermediate_size=7688,
                    moe_latent_size=None, num_experts_per_tok=2, routed_scaling_factor=1.0, n_group=1,
                    topk_group=1, norm_topk_prob=True,
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
        self.is_attn = [k == "*" for k in self.kinds]
        self.is_moe = [k == "E" for k in self.kinds]
        self.attn_layers = [i for i, k in enumerate(self.kinds) if k == "*"]
        self.mamba_layers = [i for i, k in enumerate(self.kinds) if k == "M"]
        self.moe_layers = [i for i, k in enumerate(self.kinds) if k == "E"]
        self.E, self.K = 0, 0                                           # no router without 'E' layers
        if self.moe_layers:
            self.read_moe(v, d)

    def read_moe(self, v, d):
        """The MoE fields (HF NemotronHConfig names and defaults). num_local_experts is read as
        n_routed_experts when only it is given. n_shared_experts is not read: NemotronHMoE always has exactly
        one shared expert of moe_shared_expert_intermediate_size."""
        if "n_routed_experts" in d and "num_local_experts" in d:
            assert d["n_routed_experts"] == d["num_local_experts"], "n_routed_experts != num_local_experts"
        E = d["num_local_experts"] if "num_local_experts" in d and "n_routed_experts" not in d else v["n_routed_experts"]
        self.E, self.K = int(E), int(v["num_experts_per_tok"])
        self.I_moe = int(v["moe_intermediate_size"])
        self.I_sh = int(v["moe_shared_expert_intermediate_size"])
        self.Lat = None if v["moe_latent_size"] is None else int(v["moe_latent_size"])
        self.n_group, self.topk_group = int(v["n_group"]), int(v["topk_group"])
        self.route_scale, self.norm_topk = float(v["routed_scaling_factor"]), bool(v["norm_topk_prob"])
        assert self.n_group >= 1 and self.E % self.n_group == 0, "n_group must divide n_routed_experts"
        self.group_size = self.E // self.n_group
        assert self.group_size >= 2, "each routing group needs 2 experts (HF sums each group's top 2)"
        assert 1 <= self.topk_group <= self.n_group, "topk_group must lie in 1..n_group"
        assert 1 <= self.K <= self.topk_group * self.group_size, \
            "num_experts_per_tok exceeds the experts of the kept groups (HF would pick masked-out experts)"


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
            ly = dict(kind=kind, attn=kind == "*", moe=kind == "E", in_norm=g(p + "norm.weight"))  # (H,)
            if kind == "*":
                ly.update(self.load_attention(p, g, has))
                nb = sum(k + "_b" in ly for k in "qkvo")
                assert nb in (0, 4), f"layer {i}: {nb} of the 4 attention biases"
            elif kind == "M":
                ly.update(self.load_mamba(p + "mixer.", g, has))
            elif kind == "E":
                ly.update(self.load_moe(p + "mixer.", g, has))
            else:
                ly["mlp"] = self.load_relu2(p + "mixer.", g, has, c.H, c.I, c.mlp_bias)
            self.layers.append(ly)

    @staticmethod
    def load_relu2(m, g, has, n_in, n_mid, bias, suffix=".weight"):
        """(up (n_mid, n_in), up bias, down (n_in, n_mid), down bias) of a relu2 MLP under prefix m; the
        biases are None without `bias` and must then be absent."""
        up, down = g(m + "up_proj" + suffix), g(m + "down_proj" + suffix)
        assert up.shape == (n_mid, n_in) and down.shape == (n_in, n_mid), (m, up.shape, down.shape)
        b = [g(m + k + "_proj.bias") if has(m + k + "_proj.bias") else None for k in ("up", "down")]
        assert all((x is not None) == bias for x in b), f"{m}: up/down biases present != mlp_bias {bias}"
        return up, b[0], down, b[1]

    def load_moe(self, m, g, has):
        """An 'E' mixer under prefix m: gate.weight (E, H), gate.e_score_correction_bias (E,); experts either
        per expert as published (experts.{e}.up_proj.weight (I, Hin), .down_proj.weight (Hin, I), biases iff
        mlp_bias as NVIDIA's remote code creates them) or stacked as HF's state dict (experts.up_proj
        (E, I, Hin), experts.down_proj (E, Hin, I), no biases), Hin = moe_latent_size or H;
        shared_experts.{up,down}_proj (I_sh); fc1_latent_proj (Lat, H) / fc2_latent_proj (H, Lat) with
        moe_latent_size (biases iff mlp_bias)."""
        c = self.cfg
        hin = c.Lat or c.H
        ly = dict(router=g(m + "gate.weight"), corr=g(m + "gate.e_score_correction_bias"))
        assert ly["router"].shape == (c.E, c.H) and ly["corr"].shape == (c.E,), (ly["router"].shape, ly["corr"].shape)
        if has(m + "experts.up_proj"):                                    # HF's stacked NemotronHExperts
            assert not has(m + "experts.0.up_proj.weight"), f"{m}: stacked and per-expert experts"
            up, down = g(m + "experts.up_proj"), g(m + "experts.down_proj")
            assert up.shape == (c.E, c.I_moe, hin) and down.shape == (c.E, hin, c.I_moe), (up.shape, down.shape)
            ly["experts"] = [(up[e], None, down[e], None) for e in range(c.E)]
        else:
            ly["experts"] = [self.load_relu2(f"{m}experts.{e}.", g, has, hin, c.I_moe, c.mlp_bias)
                             for e in range(c.E)]
        ly["shared"] = self.load_relu2(m + "shared_experts.", g, has, c.H, c.I_sh, c.mlp_bias)
        if c.Lat is None:
            assert not has(m + "fc1_latent_proj.weight"), f"{m}: latent projections without moe_latent_size"
            ly["fc1"] = ly["fc2"] = None
        else:
            opt = lambda n: g(m + n) if has(m + n) else None  # noqa: E731
            ly["fc1"] = (g(m + "fc1_latent_proj.weight"), opt("fc1_latent_proj.bias"))     # (Lat, H), (Lat,)
            ly["fc2"] = (g(m + "fc2_latent_proj.weight"), opt("fc2_latent_proj.bias"))     # (H, Lat), (H,)
            assert ly["fc1"][0].shape == (c.Lat, c.H) and ly["fc2"][0].shape == (c.H, c.Lat)
            assert all((w[1] is not None) == c.mlp_bias for w in (ly["fc1"], ly["fc2"])), "latent biases != mlp_bias"
        return ly

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

    @staticmethod
    def relu2(x, up, up_b, down, down_b):
        """NemotronHMLP: down(relu(up(x))^2), x (S, n_in)."""
        u = np.maximum(linear(x, up, up_b), 0.0)
        return linear(u * u, down, down_b)

    def route(self, logits, corr):
        """NemotronHMoE.route_tokens_to_experts on router logits (S, E) with the correction bias corr (E,):
        s = sigmoid(logits); choice = s + corr; a group's score is the sum of its top 2 choices; the
        topk_group best groups are kept (ties: lower group index); the choices of the other groups become
        0.0 (HF's masked_fill, not -inf); the top K experts by that masked choice (ties: lower index) are
        chosen, in descending order; weights = s at the chosen experts, divided by (their sum + 1e-20) when
        norm_topk_prob, times routed_scaling_factor. Instruments: probs = s / sum(s) (the normalised
        affinities of DeepSeek-V3's sequence-wise balance loss, Liu et al. 2024), lse = logsumexp(logits)."""
        c = self.cfg
        S = logits.shape[0]
        with np.errstate(over="ignore"):
            s = 1.0 / (1.0 + np.exp(-logits))                            # (S, E)
        choice = s + corr
        grouped = choice.reshape(S, c.n_group, c.group_size)
        gscore = np.sum(-np.sort(-grouped, axis=-1)[..., :2], axis=-1)   # (S, n_group)
        kept = np.zeros((S, c.n_group), bool)
        np.put_along_axis(kept, np.argsort(-gscore, axis=-1, kind="stable")[:, :c.topk_group], True, axis=-1)
        masked = np.where(np.repeat(kept, c.group_size, axis=-1), choice, 0.0)
        topk = np.argsort(-masked, axis=-1, kind="stable")[:, :c.K]      # (S, K)
        w = np.take_along_axis(s, topk, axis=-1)
        if c.norm_topk:
            w = w / (np.sum(w, axis=-1, keepdims=True) + 1e-20)
        mx = np.max(logits, axis=-1, keepdims=True)
        lse = mx[:, 0] + np.log(np.sum(np.exp(logits - mx), axis=-1))
        return dict(topk=topk, w=w * c.route_scale, probs=s / np.sum(s, axis=-1, keepdims=True), lse=lse,
                    logits=logits, choice=choice, gscore=gscore, kept=kept, masked=masked)

    def moe_block(self, ly, x):
        """NemotronHMoE on x (S, H): the routed experts on fc1_latent_proj(x) (or x), their weighted sum
        through fc2_latent_proj (or as is), plus shared_experts(x). Returns (out (S, H), routing record)."""
        r = self.route(x @ ly["router"].T, ly["corr"])                   # router logits (S, E)
        xin = x if ly["fc1"] is None else linear(x, *ly["fc1"])          # (S, Hin)
        acc = np.zeros_like(xin)
        for e in range(self.cfg.E):                                      # ascending expert index
            rows, ranks = np.nonzero(r["topk"] == e)
            if rows.size:
                acc[rows] += self.relu2(xin[rows], *ly["experts"][e]) * r["w"][rows, ranks][:, None]
        routed = acc if ly["fc2"] is None else linear(acc, *ly["fc2"])
        return routed + self.relu2(x, *ly["shared"]), r

    # -- forward loops (one norm and one mixer per layer) ------------------------------------------

    def forward_sequence(self, emb, override):
        c = self.cfg
        h = emb.copy()
        resid, attn, mamba, moe = [h.copy()], [], [], []                 # L+1 entries of (S, H)
        for i, ly in enumerate(self.layers):
            x = rmsnorm(h, ly["in_norm"], c.eps)
            if ly["kind"] == "*":
                o, rec = self.attention_seq(ly, x, self.layer_normalizer(i, override)[1])
                attn.append(rec)
            elif ly["kind"] == "M":
                o, rec = self.mamba_seq(ly, x)
                mamba.append(rec)
            elif ly["kind"] == "E":
                o, rec = self.moe_block(ly, x)
                moe.append(rec)
            else:
                o = self.relu2(x, *ly["mlp"])
            h = h + o
            resid.append(h.copy())
        logits = rmsnorm(h, self.final_norm, c.eps) @ self.head.T         # (S, V)
        return dict(resid=np.stack(resid), logits=logits, attn=attn, mamba=mamba, moe=moe, S=emb.shape[0])

    def forward_steps(self, emb, override):
        c = self.cfg
        S = emb.shape[0]
        cache, state, resid, logits, attn, mamba, moe = self.step_buffers(S)
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
                elif ly["kind"] == "E":
                    o, rec = self.moe_block(ly, x[None])
                    o = o[0]
                    for key in ("probs", "topk", "lse"):
                        moe[c.moe_layers.index(i)][key][t] = rec[key][0]
                else:
                    o = self.relu2(x[None], *ly["mlp"])[0]
                h = h + o
                resid[i + 1, t] = h
            logits[t] = self.head @ rmsnorm(h, self.final_norm, c.eps)
        return dict(resid=resid, logits=logits, attn=attn, mamba=mamba, moe=moe, S=S)


if __name__ == "__main__":
    cli(NemotronHRef.load, "Run the Nemotron-H reference on a checkpoint and print a trace summary.")
