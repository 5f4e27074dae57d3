#!/usr/bin/python3
"""Nemotron-H section of check_ref.py: self-checks of nemotron_ref.py and of the nemotron_* golden cases.

What it is: (a) an independent torch float64 model built from HF's module structure (NemotronHBlock:
residual + mixer(norm(h)); NemotronHMamba2Mixer.torch_forward with its naive chunked SSD and its cached
one-token branch; NemotronHAttention with eager_attention_forward and repeat_kv, no RoPE; NemotronHMLP;
Zamba2RMSNormGated; NemotronHMoE with NemotronHTopkRouter and route_tokens_to_experts in HF's own torch
ops (sigmoid, topk, scatter_, masked_fill 0.0, gather), HF's stacked NemotronHExperts or, for published
per-expert names, NVIDIA's ModuleList of NemotronHMLP experts, both with index_add_), whose parameters
are nn.Linear / nn.Conv1d / nn.Parameter / buffers filled by load_state_dict(strict) from the checkpoint
under its names, so names, shapes and bias flags are checked too; compared with the reference on logits,
attention rows, dt, router instruments and the residual stream of every run; (b) the mixer against the
direct O(T^2) sum with the grouped gated norm by hand; (c) config rules, the dt clamp, byte counters;
(d) the MoE cases exercise what they claim (correction bias, group limit, no near-ties, float32 routes
alike) and HF's masked_fill(0.0) quirk on a hand-made row.
Prefill vs step (1e-10) and the files reproducing: check_ref.py (b).
What it is not: HF's code (transformers is not installed here; written from reading it), or a C++ test.
Usage: run by check_ref.py (run_checks(check, close)).
"""
import json
import math
import os
import sys
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_bamba as cb  # noqa: E402
import golden_nemotron as gn  # noqa: E402
import jamba_ref as jr  # noqa: E402
import nemotron_ref as nr  # noqa: E402

GOLDEN = os.path.join(HERE, "..", "..", "tests", "golden")


MOE_DEFAULTS = dict(n_routed_experts=8, moe_intermediate_size=7688, moe_shared_expert_intermediate_size=7688,
                   moe_latent_size=None, num_experts_per_tok=2, routed_scaling_factor=1.0, n_group=1, topk_group=1,
                   norm_topk_prob=True)                                      # HF NemotronHConfig defaults


class Cfg:
    """The config fields HF's modules read, straight from config.json (pattern form or list form)."""
    def __init__(self, d, per_expert=False):
        kinds = d.get("layers_block_type")
        self.types = ([{"linear_attention": "mamba", "full_attention": "attention"}.get(k, k) for k in kinds]
                      if kinds else [{"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}[ch]
                                     for ch in d["hybrid_override_pattern"]])
        self.__dict__.update({k: d[k] for k in (
            "hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads", "head_dim", "attention_bias",
            "intermediate_size", "mlp_bias", "mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size",
            "conv_kernel", "chunk_size", "use_conv_bias", "use_bias", "time_step_min", "time_step_limit",
            "layer_norm_epsilon", "tie_word_embeddings")})
        self.__dict__.update({k: d.get(k, v) for k, v in MOE_DEFAULTS.items()})
        self.per_expert = per_expert                                         # published experts.{e}.* names


class RMSNorm(nn.Module):                                                    # NemotronHRMSNorm
    def __init__(self, n, eps):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(n)), eps

    def forward(self, h):
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps))


class GatedNorm(nn.Module):                                                  # Zamba2RMSNormGated
    def __init__(self, n, group_size, eps):
        super().__init__()
        self.weight, self.group_size, self.eps = nn.Parameter(torch.ones(n)), group_size, eps

    def forward(self, h, gate):
        h = h * F.silu(gate)
        *pre, last = h.shape
        hg = h.view(*pre, last // self.group_size, self.group_size)
        hg = hg * torch.rsqrt(hg.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * hg.view(*pre, last)


def segment_sum(a):
    Q = a.size(-1)
    a = a[..., None].expand(*a.size(), Q)
    a = a.masked_fill(~torch.tril(torch.ones(Q, Q, dtype=torch.bool), diagonal=-1), 0)
    s = torch.cumsum(a, dim=-2)
    return s.masked_fill(~torch.tril(torch.ones(Q, Q, dtype=torch.bool), diagonal=0), -torch.inf)


class Mixer(nn.Module):                                                      # NemotronHMamba2Mixer (slow path)
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.nh, self.hd, self.G, self.N = c.mamba_num_heads, c.mamba_head_dim, c.n_groups, c.ssm_state_size
        self.Di = self.nh * self.hd
        self.conv_dim = self.Di + 2 * self.G * self.N
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, c.conv_kernel, groups=self.conv_dim,
                                padding=c.conv_kernel - 1, bias=c.use_conv_bias)
        self.in_proj = nn.Linear(c.hidden_size, self.Di + self.conv_dim + self.nh, bias=c.use_bias)
        self.dt_bias, self.A_log, self.D = (nn.Parameter(torch.ones(self.nh)) for _ in range(3))
        self.norm = GatedNorm(self.Di, self.Di // self.G, c.layer_norm_epsilon)
        self.out_proj = nn.Linear(self.Di, c.hidden_size, bias=c.use_bias)
        self.dts, self.hf_axis = [], False

    def clamp(self, dt):
        lo, hi = self.c.time_step_limit
        return torch.clamp(torch.clamp(dt, self.c.time_step_min), lo, hi)

    def forward(self, x):                                                    # no cache: x (b, L, H)
        b, L, _ = x.shape
        Q = self.c.chunk_size
        gate, hbc, dt = self.in_proj(x).split([self.Di, self.conv_dim, self.nh], dim=-1)
        hbc = F.silu(self.conv1d(hbc.transpose(1, 2))[..., :L].transpose(1, 2))
        hs, B, C = torch.split(hbc, [self.Di, self.G * self.N, self.G * self.N], dim=-1)
        A = -torch.exp(self.A_log)
        dt = self.clamp(F.softplus(dt + self.dt_bias))
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
        A = A.permute(0, 3, 1, 2)
        A_cum = torch.cumsum(A, dim=-1)
        Lm = torch.exp(segment_sum(A))
        G = (C[:, :, :, None, :, :] * B[:, :, None, :, :, :]).sum(-1)      # (b, c, l, s, h)
        M = (G[..., None] * Lm.permute(0, 2, 3, 4, 1)[..., None]).sum(-1)
        Y_diag = (M[..., None] * hs[:, :, None]).sum(3)
        decay_states = torch.exp(A_cum[:, :, :, -1:] - A_cum)
        Bd = B * decay_states.permute(0, 2, 3, 1)[..., None]
        states = (Bd.permute(0, 1, 3, 2, 4)[..., None] * hs.permute(0, 1, 3, 2, 4)[..., None, :]).sum(3)
        states = torch.cat([torch.zeros_like(states[:, :1]), states.permute(0, 1, 2, 4, 3)], dim=1)
        decay_chunk = torch.exp(segment_sum(F.pad(A_cum[:, :, :, -1], (1, 0))))
        # new[z] = sum_c decay_chunk[z, c] states[c]: the sum runs over the source chunk c (dim 3); HF's file
        # sums over dim 2 (the target z), which only agrees within the first chunk (hf_axis=True reproduces it)
        new = (decay_chunk[..., None, None] * states.permute(0, 2, 1, 3, 4)[:, :, None]).sum(2 if self.hf_axis else 3)
        new = new.permute(0, 2, 1, 3, 4)
        Y_off = (C[..., None, :] * new[:, :-1, None]).sum(-1) * torch.exp(A_cum).permute(0, 2, 3, 1)[..., None]
        y = ((Y_diag + Y_off).reshape(b, -1, self.nh, self.hd) + D_res)[:, :L].reshape(b, L, -1)
        return self.out_proj(self.norm(y, gate))

    def forward_cached(self, x):
        """The use_precomputed_state branch, one token at a time from zero states. x (1, L, H)."""
        conv = torch.zeros(1, self.conv_dim, self.c.conv_kernel)
        ssm = torch.zeros(1, self.nh, self.hd, self.N)
        out = []
        for t in range(x.shape[1]):
            gate, hbc, dt = self.in_proj(x[:, t]).split([self.Di, self.conv_dim, self.nh], dim=-1)
            conv = conv.roll(shifts=-1, dims=-1)
            conv[:, :, -1] = hbc
            hbc = torch.sum(conv * self.conv1d.weight[:, 0, :], dim=-1)
            if self.conv1d.bias is not None:
                hbc = hbc + self.conv1d.bias
            hs, B, C = torch.split(F.silu(hbc), [self.Di, self.G * self.N, self.G * self.N], dim=-1)
            dt = self.clamp(F.softplus(dt[:, :, None].expand(1, self.nh, self.hd) + self.dt_bias[:, None]))
            dA = torch.exp(dt[..., None] * -torch.exp(self.A_log)[:, None, None])
            B = B.reshape(1, self.G, 1, self.N).expand(1, self.G, self.nh // self.G, self.N).reshape(1, self.nh, self.N)
            C = C.reshape(1, self.G, 1, self.N).expand(1, self.G, self.nh // self.G, self.N).reshape(1, self.nh, self.N)
            hs = hs.reshape(1, self.nh, self.hd)
            ssm = ssm * dA + dt[..., None] * B[:, :, None, :] * hs[..., None]
            y = torch.bmm(ssm.view(self.nh, self.hd, self.N), C.view(self.nh, self.N, 1)).view(1, self.nh, self.hd)
            y = (y + hs * self.D[:, None]).reshape(1, -1)
            out.append(self.out_proj(self.norm(y, gate)))
        return torch.stack(out, dim=1)


class Attention(nn.Module):                                                  # NemotronHAttention, eager, NoPE
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        bias = c.attention_bias
        self.q_proj = nn.Linear(c.hidden_size, self.nh * self.hd, bias=bias)
        self.k_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=bias)
        self.v_proj = nn.Linear(c.hidden_size, self.nkv * self.hd, bias=bias)
        self.o_proj = nn.Linear(self.nh * self.hd, c.hidden_size, bias=bias)
        self.null, self.rows = None, []

    def forward(self, x):
        b, L, _ = x.shape
        q, k, v = (p(x).view(b, L, -1, self.hd).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        rep = self.nh // self.nkv
        k = k[:, :, None].expand(b, self.nkv, rep, L, self.hd).reshape(b, self.nh, L, self.hd)   # repeat_kv
        v = v[:, :, None].expand(b, self.nkv, rep, L, self.hd).reshape(b, self.nh, L, self.hd)
        mask = torch.full((L, L), -torch.inf).triu(1)
        w = torch.matmul(q, k.transpose(2, 3)) * self.hd ** -0.5 + mask
        if self.null is None:
            p = torch.softmax(w, dim=-1)
            self.rows.append(torch.cat([p, torch.zeros(b, self.nh, L, 1)], -1)[0])
        else:
            pp = torch.softmax(torch.cat([w, self.null.view(1, -1, 1, 1).expand(b, self.nh, L, 1)], -1), -1)
            p = pp[..., :L]
            self.rows.append(pp[0])
        return self.o_proj(torch.matmul(p, v).transpose(1, 2).reshape(b, L, -1))


class MLP(nn.Module):                                                        # NemotronHMLP, relu2
    def __init__(self, c, n_in=None, n_mid=None):
        super().__init__()
        n_in, n_mid = n_in or c.hidden_size, n_mid or c.intermediate_size
        self.up_proj = nn.Linear(n_in, n_mid, bias=c.mlp_bias)
        self.down_proj = nn.Linear(n_mid, n_in, bias=c.mlp_bias)

    def forward(self, x):
        return self.down_proj(torch.relu(self.up_proj(x)) ** 2)


def hf_route(logits, corr, n_group, topk_group, top_k, norm_topk_prob, scale):
    """NemotronHMoE.route_tokens_to_experts, op for op. Returns (indices (S, K) in topk's order, weights,
    the masked choice scores (S, E))."""
    E = logits.shape[-1]
    s = logits.sigmoid()
    choice = s + corr
    group_scores = choice.view(-1, n_group, E // n_group).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(-1, n_group, E // n_group).reshape(-1, E)
    masked = choice.masked_fill(~score_mask.bool(), 0.0)
    idx = torch.topk(masked, k=top_k, dim=-1, sorted=False)[1]
    w = s.gather(1, idx)
    if norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return idx, w * scale, masked


def ordered(idx, masked):
    """Chosen experts in descending masked choice, ties to the lower index (the trace's router_topk)."""
    idx = idx.sort(dim=-1).values
    return idx.gather(1, torch.sort(-masked.gather(1, idx), dim=-1, stable=True).indices)


class TopkRouter(nn.Module):                                                 # NemotronHTopkRouter
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(c.n_routed_experts, c.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(c.n_routed_experts))

    def forward(self, h):                                                    # HF: in float32; float64 here
        return F.linear(h.view(-1, self.weight.shape[1]), self.weight)


class Experts(nn.Module):                                                    # NemotronHExperts (HF, stacked)
    def __init__(self, c, n_in):
        super().__init__()
        self.up_proj = nn.Parameter(torch.empty(c.n_routed_experts, c.moe_intermediate_size, n_in))
        self.down_proj = nn.Parameter(torch.empty(c.n_routed_experts, n_in, c.moe_intermediate_size))

    def forward(self, h, idx, w):
        out = torch.zeros_like(h)
        mask = F.one_hot(idx, num_classes=self.up_proj.shape[0]).permute(2, 1, 0)     # (E, K, tokens)
        for e in torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero().squeeze(-1).tolist():
            pos, tok = torch.where(mask[e])
            y = F.linear(torch.relu(F.linear(h[tok], self.up_proj[e])) ** 2, self.down_proj[e])
            out.index_add_(0, tok, y * w[tok, pos, None])
        return out


class ExpertList(nn.ModuleList):                 # NVIDIA's remote code: NemotronHMLP per expert, in Lat dims
    def forward(self, h, idx, w):
        out = torch.zeros_like(h)
        mask = F.one_hot(idx, num_classes=len(self)).permute(2, 0, 1)                  # (E, tokens, K)
        for e, expert in enumerate(self):
            tok, pos = torch.where(mask[e])
            if tok.numel() > 0:
                out.index_add_(0, tok, expert(h[tok]) * w[tok, pos].unsqueeze(-1))
        return out


class MoE(nn.Module):                                                        # NemotronHMoE
    def __init__(self, c):
        super().__init__()
        self.c, lat = c, c.moe_latent_size
        n_in = lat or c.hidden_size
        self.gate = TopkRouter(c)
        self.experts = (ExpertList([MLP(c, n_in, c.moe_intermediate_size) for _ in range(c.n_routed_experts)])
                        if c.per_expert else Experts(c, n_in))
        self.shared_experts = MLP(c, c.hidden_size, c.moe_shared_expert_intermediate_size)
        self.fc1_latent_proj = nn.Linear(c.hidden_size, lat, bias=c.mlp_bias) if lat else nn.Identity()
        self.fc2_latent_proj = nn.Linear(lat, c.hidden_size, bias=c.mlp_bias) if lat else nn.Identity()
        self.records = []

    def forward(self, h):
        c, shape = self.c, h.shape
        logits = self.gate(h)
        idx, w, masked = hf_route(logits, self.gate.e_score_correction_bias, c.n_group, c.topk_group,
                                  c.num_experts_per_tok, c.norm_topk_prob, c.routed_scaling_factor)
        self.records.append((logits, idx, masked))
        out = self.fc2_latent_proj(self.experts(self.fc1_latent_proj(h.view(-1, shape[-1])), idx, w))
        return out.view(*shape) + self.shared_experts(h)


class Block(nn.Module):                                                      # NemotronHBlock
    def __init__(self, c, kind):
        super().__init__()
        self.norm = RMSNorm(c.hidden_size, c.layer_norm_epsilon)
        self.mixer = {"mamba": Mixer, "attention": Attention, "mlp": MLP, "moe": MoE}[kind](c)

    def forward(self, h):
        return h + self.mixer(self.norm(h))


class Backbone(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c, k) for k in c.types])
        self.norm_f = RMSNorm(c.hidden_size, c.layer_norm_epsilon)


class CausalLM(nn.Module):
    """NemotronHForCausalLM with the backbone under `prefix` ("backbone" as published, "model" in HF)."""
    def __init__(self, folder):
        super().__init__()
        d = json.load(open(os.path.join(folder, "config.json")))
        tensors, _, _ = jr.read_safetensors(os.path.join(folder, "model.safetensors"))
        self.c = c = Cfg(d, per_expert=any(".mixer.experts.0." in k for k in tensors))
        self.prefix = "backbone" if "backbone.embeddings.weight" in tensors else "model"
        self.add_module(self.prefix, Backbone(c))
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        sd = {k: torch.tensor(np.asarray(v, np.float64)) for k, v in tensors.items()}
        if c.tie_word_embeddings:
            sd["lm_head.weight"] = sd[self.prefix + ".embeddings.weight"]
        self.load_state_dict(sd, strict=True)                                # names, shapes and bias flags
        self.bb = getattr(self, self.prefix)

    def forward(self, ids, n_reg, null):
        """ids (T,); n_reg test-time registers (the mean embedding row); null (nh,) or None (softmax).
        Returns logits (n_reg+T, V) and the residual stream (L+1, n_reg+T, H)."""
        emb = self.bb.embeddings.weight
        h = torch.cat([emb.mean(0, keepdim=True).expand(n_reg, -1), emb[ids]])[None]
        resid = [h[0]]
        for blk in self.bb.layers:
            if isinstance(blk.mixer, Attention):
                blk.mixer.null = None if null is None else torch.tensor(null)
            h = blk(h)
            resid.append(h[0])
        return self.lm_head(self.bb.norm_f(h))[0], torch.stack(resid)


def run_checks(check, close):
    torch.set_default_dtype(torch.float64)
    print("(f) Nemotron-H (nemotron_ref.py)")
    rng = np.random.default_rng(29)
    for spec in gn.case_specs():
        tag = spec["name"]
        folder = os.path.join(GOLDEN, tag)
        ref = nr.NemotronHRef.load(folder)
        c = ref.cfg
        tm = CausalLM(folder)
        check(f"{tag}: torch model loads the file strictly under HF's names ({tm.prefix}.)", True)
        check(f"{tag}: schedule", c.kinds == "".join({"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}[k]
                                                     for k in tm.c.types), c.kinds)
        moes = [(i, blk.mixer) for i, blk in enumerate(tm.bb.layers) if isinstance(blk.mixer, MoE)]
        for i, mo in moes:                                                   # the block on random rows
            xx = rng.normal(size=(9, c.H)) * 1.5
            mo.records = []
            with torch.no_grad():
                want = mo(cb.T(xx)[None])[0].numpy()
            o, r = ref.moe_block(ref.layers[i], xx)
            close(f"{tag}: layer {i} MoE block == torch NemotronHMoE ({'per-expert' if tm.c.per_expert else 'stacked'}"
                  f" experts{', latent' if c.Lat else ''})", o, want)
            _, idx, masked = mo.records[0]
            check(f"{tag}: layer {i} chosen experts == HF's topk, in masked-score order",
                  np.array_equal(r["topk"], ordered(idx, masked).numpy()))
        mixers = [(i, blk.mixer) for i, blk in enumerate(tm.bb.layers) if isinstance(blk.mixer, Mixer)]
        for S in (1, c.W - 1, c.W, c.chunk, 2 * c.chunk + 3):                 # conv edges, chunk crossings
            xx = rng.normal(size=(S, c.H))
            for i, mx in mixers[:2]:
                want = mx(cb.T(xx)[None])[0].detach().numpy()
                close(f"{tag}: layer {i} mixer == torch torch_forward (chunked), S={S}",
                      ref.mamba_seq(ref.layers[i], xx)[0], want)
                close(f"{tag}: layer {i} torch cached branch == torch chunked, S={S}",
                      mx.forward_cached(cb.T(xx)[None])[0].detach().numpy(), want)
        i, mx = mixers[0]                                                    # HF's literal axis: first chunk only
        with torch.no_grad():
            d = []
            for S in (c.chunk, c.chunk + 1, 2 * c.chunk + 3):
                xx = cb.T(rng.normal(size=(S, c.H)))[None]
                mx.hf_axis = True
                d.append(float((mx(xx) - mx.forward_cached(xx)).abs().max()))
                mx.hf_axis = False
        check(f"{tag}: HF's decay_chunk sum over dim 2 matches its cached branch within one chunk only "
              f"(S = chunk, chunk+1, 2 chunk+3: max|d| {d[0]:.1e}, {d[1]:.1e}, {d[2]:.1e})",
              d[0] < 1e-12 and d[1] > 1e-3 and d[2] > 1e-3)
        i = c.mamba_layers[0]                                                # direct O(T^2) form, 3 chunks
        ly = ref.layers[i]
        xx = rng.normal(size=(2 * c.chunk + 4, c.H))
        z, xbc0, dt_raw = ref.mamba_in(ly, xx)
        xs, Bm, Cm, dt = ref.mamba_split(ly, jr.silu(jr.causal_conv(xbc0, ly["conv_w"], ly["conv_b"])), dt_raw)
        yd = cb.direct_scan(xs, dt, ly["A"], Bm, Cm, ly["D"]).reshape(len(xx), c.Di)
        g = (yd * jr.silu(z)).reshape(len(xx), c.G, c.Di // c.G)
        g = (g / np.sqrt(np.mean(g * g, axis=-1, keepdims=True) + c.eps)).reshape(len(xx), c.Di) * ly["norm"]
        by_hand = g @ ly["out_w"].T + (ly["out_b"] if ly["out_b"] is not None else 0.0)
        close(f"{tag}: mixer == direct O(T^2) sum + gated norm in groups of Di/G = {c.Di // c.G} by hand",
              ref.mamba_seq(ly, xx)[0], by_hand)
        for run in json.load(open(os.path.join(folder, "expected", "runs.json")))["runs"]:
            rt = f"{tag}/{run['name']}"
            a = ref.run(run["token_ids"], run["normalizer"], run["registers"])
            n_reg = 0 if run["registers"] is None else run["registers"]
            null = None
            if run["normalizer"] in ("softmax1", "sink"):
                null = np.zeros(c.nh)                                         # no sinks tensors in these cases
            for _, mx in mixers:
                mx.dts = []
            for blk in tm.bb.layers:
                if isinstance(blk.mixer, (Attention, MoE)):
                    blk.mixer.rows, blk.mixer.records = [], []
            with torch.no_grad():
                logits, resid = tm(torch.tensor(run["token_ids"]), n_reg, null)
            close(f"{rt}: logits == torch HF-structure model", a["logits"], logits[n_reg:].numpy())
            close(f"{rt}: resid_max_abs == torch", a["resid_max_abs"], resid[:, n_reg:].abs().amax(-1).T.numpy())
            rows = [blk.mixer.rows[0][:, n_reg:, :].transpose(0, 1).numpy()
                    for blk in tm.bb.layers if isinstance(blk.mixer, Attention)]
            close(f"{rt}: attn_rows == torch", a["attn_rows"], np.stack(rows, axis=1))
            dtm = np.stack([mx.dts[0][n_reg:].numpy() for _, mx in mixers], axis=1)        # (T, M_n, nh)
            close(f"{rt}: ssm_delta == torch dt of the channel's head", a["ssm_delta"], np.repeat(dtm, c.P, axis=2))
            close(f"{rt}: ssm_delta_mean = mean over heads", a["ssm_delta_mean"], dtm.mean(-1))
            A_ch = np.stack([np.repeat(ref.layers[i]["A"], c.P) for i in c.mamba_layers])
            close(f"{rt}: ssm_retained = exp(dt A) of the channel's head", a["ssm_retained"],
                  np.exp(a["ssm_delta"] * A_ch[None]), 1e-12)
            Tn, X_n = len(run["token_ids"]), len(c.moe_layers)
            check(f"{rt}: shapes (A_n {len(c.attn_layers)}, M_n {len(c.mamba_layers)}, X_n {X_n}, L+1 {c.L + 1})",
                  a["attn_entropy"].shape == (Tn, len(c.attn_layers), c.nh) and a["ssm_delta"].shape ==
                  (Tn, len(c.mamba_layers), c.Di) and a["rank1_distance"].shape == (Tn, c.L + 1)
                  and (a["router_topk"].shape == (Tn, X_n, c.K) and a["router_probs"].shape == (Tn, X_n, c.E)
                       if X_n else not any(k.startswith("router") for k in a)))
            if moes:
                recs = [mo.records[0] for _, mo in moes]                          # (logits, idx, masked)
                s_ = [torch.sigmoid(lg[n_reg:]) for lg, _, _ in recs]
                close(f"{rt}: router_probs == torch sigmoid / its sum", a["router_probs"],
                      np.stack([(x / x.sum(-1, keepdim=True)).numpy() for x in s_], 1))
                close(f"{rt}: router_lse == torch logsumexp", a["router_lse"],
                      np.stack([torch.logsumexp(lg[n_reg:], -1).numpy() for lg, _, _ in recs], 1))
                check(f"{rt}: router_topk == HF's topk of the masked biased scores, descending",
                      np.array_equal(a["router_topk"], np.stack([ordered(i, m)[n_reg:].numpy() for _, i, m in recs], 1)))
            check(f"{rt}: ssm_state_bytes = M_n (conv_dim W + Di N) 4", np.all(
                a["ssm_state_bytes"] == len(c.mamba_layers) * (c.conv_dim * c.W + c.Di * c.N) * 4))
            check(f"{rt}: kv_cache_bytes over the '*' layers", np.array_equal(
                a["kv_cache_bytes"], 2 * len(c.attn_layers) * c.nkv * c.hd * (n_reg + np.arange(Tn) + 1) * 4))
            n_cl, n_all = gn.clamp_counts(ref, a)
            check(f"{rt}: dt >= time_step_min {c.dt_floor}; the clamp changed {n_cl} of {n_all} head-token values",
                  a["ssm_delta"].min() >= c.dt_floor and n_cl > 0)
    # config rules
    base = gn.case_specs()[1]["config"]
    pat = nr.NemotronHConfig(dict({k: v for k, v in base.items() if k != "layers_block_type"},
                                  hybrid_override_pattern="*M-M"))
    new = nr.NemotronHConfig(dict(base, layers_block_type=["full_attention", "linear_attention", "mlp",
                                                           "linear_attention"]))
    check("config: pattern '*M-M', legacy and current list names give one schedule",
          pat.kinds == new.kinds == nr.NemotronHConfig(base).kinds == "*M-M")
    check("config: use_bias wins over mamba_proj_bias; mamba_proj_bias alone is read",
          nr.NemotronHConfig(base).proj_bias and not nr.NemotronHConfig(dict(base, use_bias=False)).proj_bias
          and nr.NemotronHConfig(dict({k: v for k, v in base.items() if k != "use_bias"},
                                      mamba_proj_bias=True)).proj_bias)
    check("config: head_dim null -> hidden / heads; Di = heads x head_dim, not expand x hidden",
          nr.NemotronHConfig(dict(base, head_dim=None)).hd == 12 and nr.NemotronHConfig(base).Di == 96)
    check("config: legacy mamba_d_conv / mamba_n_groups / mamba_dt_min read (and win, as in HF)",
          (lambda k: (k.W, k.G, k.dt_floor) == (5, 2, 0.5))(nr.NemotronHConfig(dict(
              base, mamba_d_conv=5, mamba_n_groups=2, mamba_dt_min=0.5))))
    check("config: bare Infinity in time_step_limit reads as inf",
          "Infinity" in open(os.path.join(GOLDEN, "nemotron_basic", "config.json")).read()
          and nr.NemotronHConfig.from_file(os.path.join(GOLDEN, "nemotron_basic", "config.json")).dt_max == math.inf)
    moe_checks(check, close)


def moe_checks(check, close):
    """(d) The MoE cases exercise what their descriptions claim; HF's masked_fill(0.0); MoE config rules."""
    for spec in gn.case_specs():
        folder = os.path.join(GOLDEN, spec["name"])
        ref = nr.NemotronHRef.load(folder)
        c, tag = ref.cfg, spec["name"]
        if not c.moe_layers:
            continue
        ref32 = nr.NemotronHRef.load(folder, dtype=np.float32)
        n_pos = n_bias = n_grp = n_out = flips = 0
        margin, frac = np.inf, 0.0
        route = lambda lg, corr, ng, tg: hf_route(lg, corr, ng, tg, c.K, c.norm_topk, c.route_scale)[0]  # noqa: E731
        for run in json.load(open(os.path.join(folder, "expected", "runs.json")))["runs"]:
            args = (run["token_ids"], run["normalizer"], run["registers"])
            margin = min(margin, gn.routing_margin(ref, *args))
            for j, r in enumerate(gn.routing_records(ref, *args)):
                lg, corr = cb.T(r["logits"]), cb.T(ref.layers[c.moe_layers[j]]["corr"])
                chosen = route(lg, corr, c.n_group, c.topk_group).sort(-1).values
                n_bias += int(torch.any(route(lg, 0 * corr, c.n_group, c.topk_group).sort(-1).values != chosen, -1).sum())
                n_grp += int(torch.any(route(lg, corr, 1, 1).sort(-1).values != chosen, -1).sum())
                n_out += int(np.sum(~np.take_along_axis(np.repeat(r["kept"], c.group_size, -1), r["topk"], -1)))
                n_pos += len(chosen)
            a, b = ref.run(*args), ref32.run(*args)
            flips += int(np.sum(a["router_topk"] != b["router_topk"]))
            d = np.abs(b["logits"] - a["logits"]) / (1e-4 * np.abs(a["logits"]) + 1e-5 * max(1.0, np.abs(a["logits"]).max()))
            frac = max(frac, float(d.max()))
        check(f"{tag}: the correction bias changes the chosen experts at {n_bias} of {n_pos} positions", n_bias > 0)
        if c.topk_group < c.n_group:
            check(f"{tag}: the group limit ({c.topk_group} of {c.n_group} groups) excludes an expert the ungrouped "
                  f"top-{c.K} would choose at {n_grp} of {n_pos} positions", n_grp > 0)
        check(f"{tag}: no masked-out expert is chosen (HF's 0.0 fill never decides here)", n_out == 0)
        check(f"{tag}: smallest routing-score gap deciding a group or an expert {margin:.1e} >= 2e-5", margin >= 2e-5)
        check(f"{tag}: the float32 reference routes alike (logits at {frac:.3f} of the recommended tolerance)",
              flips == 0 and frac < 0.1)
    # HF's masked_fill(0.0): a masked-out expert's 0.0 beats a negative kept score (E 6, 3 groups, keep 2, K 4)
    cfg = nr.NemotronHConfig(dict(hybrid_override_pattern="E", n_routed_experts=6, n_group=3, topk_group=2,
                                  num_experts_per_tok=4, norm_topk_prob=True, routed_scaling_factor=2.0))
    sg = np.array([0.6, 0.3, 0.55, 0.25, 0.15, 0.1])
    corr = np.array([0.0, -0.5, 0.0, -0.5, 0.0, 0.0])                       # choices 0.6 -0.2 | 0.55 -0.25 | 0.15 0.1
    lg = np.log(sg / (1 - sg))[None]
    r = nr.NemotronHRef.route(SimpleNamespace(cfg=cfg), lg, corr)
    idx, w, _ = hf_route(cb.T(lg), cb.T(corr), 3, 2, 4, True, 2.0)
    want = sg[[0, 2, 4, 5]] / sg[[0, 2, 4, 5]].sum() * 2.0
    check("route: groups 0, 1 kept; experts [0, 2, 4, 5] (masked 0.0 > -0.2; -inf masking would give "
          "[0, 2, 1, 3]), as HF's ops", r["topk"].tolist() == [[0, 2, 4, 5]]
          and sorted(idx[0].tolist()) == [0, 2, 4, 5] and r["kept"].tolist() == [[True, True, False]])
    close("route: weights = sigmoid at the chosen / (sum + 1e-20) x routed_scaling_factor", r["w"][0], want, 1e-14)
    close("route: HF's weights alike", w[0][idx[0].argsort()].numpy(), want, 1e-14)
    close("route: router_probs = sigmoid / sum, router_lse = logsumexp(logits)",
          np.append(r["probs"][0], r["lse"]), np.append(sg / sg.sum(), np.log(np.exp(lg).sum())), 1e-14)
    # MoE config rules
    moe = gn.case_specs()[2]["config"]
    N = lambda **kw: nr.NemotronHConfig(dict(moe, **kw))  # noqa: E731
    lst = nr.NemotronHConfig(dict({k: v for k, v in moe.items() if k != "hybrid_override_pattern"},
                                  layers_block_type=["mamba", "moe", "mamba", "attention", "moe", "mlp"]))
    check("config: pattern 'MEM*E-' and the list with \"moe\" give one schedule, MoE layers [1, 4]",
          lst.kinds == N().kinds == "MEM*E-" and N().moe_layers == [1, 4])
    alias = nr.NemotronHConfig(dict({k: v for k, v in moe.items() if k != "n_routed_experts"}, num_local_experts=8))
    check("config: num_local_experts alone is read as n_routed_experts", alias.E == 8 and N(num_local_experts=8).E == 8)
    refused = 0
    for kw in (dict(num_local_experts=4), dict(n_group=3), dict(n_group=8, topk_group=4), dict(topk_group=5),
               dict(num_experts_per_tok=5)):
        try:
            N(**kw)
        except AssertionError:
            refused += 1
    check("config: refused: n_routed_experts != num_local_experts, n_group not dividing E, groups of 1 expert, "
          "topk_group > n_group, K > the kept groups' experts", refused == 5, f"{refused} of 5")
    check("config: no 'E' layer, no router (E = K = 0)",
          (lambda k: (k.E, k.K, k.moe_layers) == (0, 0, []))(nr.NemotronHConfig(gn.case_specs()[1]["config"])))
