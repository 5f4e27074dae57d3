"""A small Jamba (Hugging Face JambaForCausalLM math, jamba-spec.md §3) in PyTorch, written for the
demo trainer. Parameter names are the checkpoint tensor names of jamba-spec.md §2.1, so the state
dict is the checkpoint. Extensions of trace-format.md §1: attention_normalizer (softmax | softmax1)
and trained register tokens.

Precision: whatever dtype the parameters have (fp32 for training, fp64 for reference logits);
no bf16 rounding points inside the forward.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from scan import selective_scan_chunked, selective_scan_fused, selective_scan_native, selective_scan_sequential

SCAN = {"impl": "native", "chunk": 16}  # trainer option --scan (native: C, else fused)


@dataclass
class Config:
    vocab_size: int = 4096
    hidden_size: int = 128
    intermediate_size: int = 128
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    attn_layer_period: int = 4
    attn_layer_offset: int = 2
    expert_layer_period: int = 2
    expert_layer_offset: int = 1
    num_experts: int = 8
    num_experts_per_tok: int = 2
    mamba_d_state: int = 16
    mamba_d_conv: int = 4
    mamba_expand: int = 2
    rms_norm_eps: float = 1e-6
    attention_normalizer: str = "softmax"
    num_register_tokens: int = 0
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    router_aux_loss_coef: float = 0.01   # Fedus, Zoph & Shazeer 2022; Zoph et al. 2022 alpha (balance loss)
    router_z_loss_coef: float = 0.001    # Fedus, Zoph & Shazeer 2022; Zoph et al. 2022 beta (z-loss)

    @property
    def dt_rank(self):
        return math.ceil(self.hidden_size / 16)

    @property
    def d_inner(self):
        return self.mamba_expand * self.hidden_size

    def is_attention(self, i):
        return i % self.attn_layer_period == self.attn_layer_offset

    def is_moe(self, i):
        return self.num_experts > 1 and i % self.expert_layer_period == self.expert_layer_offset

    def hf_dict(self):
        """config.json contents (jamba-spec.md §1.1 fields plus the trace-format.md §1 extensions)."""
        d = {
            "architectures": ["JambaForCausalLM"],
            "model_type": "jamba",
            "attention_dropout": 0.0,
            "attn_layer_offset": self.attn_layer_offset,
            "attn_layer_period": self.attn_layer_period,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "expert_layer_offset": self.expert_layer_offset,
            "expert_layer_period": self.expert_layer_period,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "initializer_range": self.initializer_range,
            "intermediate_size": self.intermediate_size,
            "mamba_conv_bias": True,
            "mamba_d_conv": self.mamba_d_conv,
            "mamba_d_state": self.mamba_d_state,
            "mamba_dt_rank": "auto",
            "mamba_expand": self.mamba_expand,
            "mamba_proj_bias": False,
            "max_position_embeddings": 4096,
            "num_attention_heads": self.num_attention_heads,
            "num_experts": self.num_experts,
            "num_experts_per_tok": self.num_experts_per_tok,
            "num_hidden_layers": self.num_hidden_layers,
            "num_key_value_heads": self.num_key_value_heads,
            "num_logits_to_keep": 1,
            "output_router_logits": False,
            "pad_token_id": 0,
            "rms_norm_eps": self.rms_norm_eps,
            # HF sums the balance term over the k slots (k times Fedus, Zoph & Shazeer 2022; Zoph et al. 2022's N·Σ f P): same weight.
            "router_aux_loss_coef": self.router_aux_loss_coef / self.num_experts_per_tok,
            "sliding_window": None,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.44.0",
            "use_cache": True,
            "use_mamba_kernels": False,
            "vocab_size": self.vocab_size,
        }
        if self.attention_normalizer != "softmax":
            d["attention_normalizer"] = self.attention_normalizer
        if self.num_register_tokens > 0:
            d["num_register_tokens"] = self.num_register_tokens
        return dict(sorted(d.items()))

    @staticmethod
    def from_hf(d):
        c = Config()
        for k in ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "attn_layer_period", "attn_layer_offset", "expert_layer_period", "expert_layer_offset",
                  "num_experts", "num_experts_per_tok", "mamba_d_state", "mamba_d_conv", "mamba_expand",
                  "rms_norm_eps", "tie_word_embeddings"]:
            setattr(c, k, d[k])
        c.num_key_value_heads = d.get("num_key_value_heads") or d["num_attention_heads"]
        assert d.get("mamba_dt_rank", "auto") in ("auto", c.dt_rank)
        c.attention_normalizer = d.get("attention_normalizer", "softmax")
        c.num_register_tokens = d.get("num_register_tokens", 0)
        return c


def rms_norm(x, weight, eps):
    """jamba-spec.md §3.2: mean of squares over the last dim, eps inside the rsqrt."""
    var = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(var + eps))


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def linear(x, lin):
    """nn.Linear or an adapter wrapper exposing .effective_weight()."""
    if hasattr(lin, "effective_weight"):
        return F.linear(x, lin.effective_weight(), lin.base.bias)
    return lin(x)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, nh, nkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
        self.nh, self.nkv, self.hd = nh, nkv, H // nh
        self.q_proj = nn.Linear(H, nh * self.hd, bias=False)
        self.k_proj = nn.Linear(H, nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(nh * self.hd, H, bias=False)
        self.keep_probs = False
        self.last_probs = None

    def forward(self, x, normalizer, sinks=None):
        """normalizer: softmax | softmax1 | sink (sink needs `sinks` (nh,), or means s_h = 0)."""
        Bsz, S, _ = x.shape
        q = linear(x, self.q_proj).view(Bsz, S, self.nh, self.hd).transpose(1, 2)
        k = linear(x, self.k_proj).view(Bsz, S, self.nkv, self.hd).transpose(1, 2)
        v = linear(x, self.v_proj).view(Bsz, S, self.nkv, self.hd).transpose(1, 2)
        rep = self.nh // self.nkv
        k = k.repeat_interleave(rep, dim=1)   # query head j uses kv head j // rep
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        causal = torch.ones(S, S, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        if normalizer == "softmax":
            p = torch.softmax(scores, dim=-1)
        else:
            if normalizer == "softmax1" or sinks is None:
                extra = torch.zeros(Bsz, self.nh, S, 1, dtype=scores.dtype, device=x.device)
            else:
                extra = sinks.to(scores.dtype).view(1, self.nh, 1, 1).expand(Bsz, self.nh, S, 1)
            p = torch.softmax(torch.cat([scores, extra], dim=-1), dim=-1)[..., :S]  # null key: value 0
        if self.keep_probs:  # for tools/train/evaluate.py: the probabilities of the last call
            self.last_probs = p.detach()
        o = (p @ v).transpose(1, 2).reshape(Bsz, S, self.nh * self.hd)
        return linear(o, self.o_proj)


class Mamba(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        H, Di, N, W, R = cfg.hidden_size, cfg.d_inner, cfg.mamba_d_state, cfg.mamba_d_conv, cfg.dt_rank
        self.Di, self.N, self.W, self.R, self.eps = Di, N, W, R, cfg.rms_norm_eps
        self.in_proj = nn.Linear(H, 2 * Di, bias=False)
        self.conv1d = nn.Conv1d(Di, Di, W, groups=Di, padding=W - 1, bias=True)
        self.x_proj = nn.Linear(Di, R + 2 * N, bias=False)
        self.dt_layernorm = RMSNorm(R, cfg.rms_norm_eps)
        self.b_layernorm = RMSNorm(N, cfg.rms_norm_eps)
        self.c_layernorm = RMSNorm(N, cfg.rms_norm_eps)
        self.dt_proj = nn.Linear(R, Di, bias=True)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(Di, 1))
        self.D = nn.Parameter(torch.ones(Di))
        self.out_proj = nn.Linear(Di, H, bias=False)

    def forward(self, x, sequential=False):
        S = x.shape[1]
        xz = linear(x, self.in_proj)
        u0, z = xz[..., :self.Di], xz[..., self.Di:]            # x branch first, gate second
        c = self.conv1d(u0.transpose(1, 2))[..., :S]             # causal: w[..., W-1] hits token t
        u = F.silu(c).transpose(1, 2)                            # (B, S, Di)
        p = linear(u, self.x_proj)
        dt_r, Bm, Cm = torch.split(p, [self.R, self.N, self.N], dim=-1)
        dt_r = self.dt_layernorm(dt_r)
        Bm = self.b_layernorm(Bm)
        Cm = self.c_layernorm(Cm)
        dt = F.softplus(linear(dt_r, self.dt_proj), beta=1.0, threshold=20.0)  # bias before softplus
        A = -torch.exp(self.A_log)
        if sequential:
            y = selective_scan_sequential(u, dt, A, Bm, Cm)
        elif SCAN["impl"] == "native":
            y = selective_scan_native(u, dt, A, Bm, Cm)
        elif SCAN["impl"] == "chunked":
            y = selective_scan_chunked(u, dt, A, Bm, Cm, SCAN["chunk"])
        else:
            y = selective_scan_fused(u, dt, A, Bm, Cm)
        y = y + u * self.D
        out = y * F.silu(z)
        self.last_dt = dt
        return linear(out, self.out_proj)


class MLP(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return linear(F.silu(linear(x, self.gate_proj)) * linear(x, self.up_proj), self.down_proj)


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.E, self.K = cfg.num_experts, cfg.num_experts_per_tok
        self.router = nn.Linear(cfg.hidden_size, self.E, bias=False)
        self.experts = nn.ModuleList([MLP(cfg.hidden_size, cfg.intermediate_size) for _ in range(self.E)])

    def forward(self, x):
        shape = x.shape
        xf = x.reshape(-1, shape[-1])
        logits = linear(xf, self.router)
        probs = torch.softmax(logits, dim=-1)                    # over all E
        w, idx = torch.topk(probs, self.K, dim=-1)              # NOT renormalised
        out = torch.zeros_like(xf)
        for e in range(self.E):
            tok, rank = torch.nonzero(idx == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            y = self.experts[e](xf[tok]) * w[tok, rank].unsqueeze(-1)
            out = out.index_add(0, tok, y)
        # Fedus, Zoph & Shazeer 2022; Zoph et al. 2022 / trace-format.md §3: load f_i over the T*k assignments, importance P_i, N sum f P.
        f = torch.bincount(idx.reshape(-1), minlength=self.E).to(probs.dtype) / idx.numel()
        P = probs.mean(0)
        balance = self.E * (f * P).sum()
        z = torch.logsumexp(logits, dim=-1).pow(2).mean()
        self.last_stats = (f.detach(), P.detach())
        return out.view(shape), balance, z


class DecoderLayer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        self.is_attention = cfg.is_attention(i)
        self.is_moe = cfg.is_moe(i)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.pre_ff_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if self.is_attention:
            self.self_attn = Attention(cfg)
        else:
            self.mamba = Mamba(cfg)
        self.feed_forward = MoE(cfg) if self.is_moe else MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, h, normalizer, sequential=False):
        x = self.input_layernorm(h)
        x = self.self_attn(x, normalizer) if self.is_attention else self.mamba(x, sequential)
        h = h + x
        x = self.pre_ff_layernorm(h)
        if self.is_moe:
            x, bal, z = self.feed_forward(x)
        else:
            x, bal, z = self.feed_forward(x), None, None
        return h + x, bal, z


class JambaBody(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.final_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.num_register_tokens > 0:
            self.register_tokens = nn.Parameter(torch.zeros(cfg.num_register_tokens, cfg.hidden_size))


class JambaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = JambaBody(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        cfg = self.cfg
        std = cfg.initializer_range
        for name, p in self.named_parameters():
            if name.endswith("layernorm.weight"):
                p.fill_(1.0)
            elif name.endswith("A_log"):
                p.copy_(torch.log(torch.arange(1, cfg.mamba_d_state + 1, dtype=p.dtype)).repeat(cfg.d_inner, 1))
            elif name.endswith(".D"):
                p.fill_(1.0)
            elif "conv1d" in name:
                if name.endswith("bias"):
                    p.zero_()
                else:
                    nn.init.uniform_(p, -0.5, 0.5)
            elif "dt_proj" in name:
                # reference Mamba init (mamba_simple.py): dt in [1e-3, 1e-1], bias = softplus^-1(dt)
                if name.endswith("bias"):
                    dt = torch.exp(torch.rand(p.shape) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
                    dt = dt.clamp(min=1e-4)
                    p.copy_(dt + torch.log(-torch.expm1(-dt)))
                else:
                    nn.init.uniform_(p, -cfg.dt_rank ** -0.5, cfg.dt_rank ** -0.5)
            elif name.endswith("register_tokens"):
                nn.init.normal_(p, 0.0, std)
            elif p.dim() == 2:
                s = std
                if name.endswith(("o_proj.weight", "out_proj.weight", "down_proj.weight")):
                    s = std / math.sqrt(2 * cfg.num_hidden_layers)
                nn.init.normal_(p, 0.0, s)

    def register_rows(self, n):
        """Registers for a run: trained rows first, then the mean embedding row (trace-format.md §2)."""
        trained = self.model.register_tokens if self.cfg.num_register_tokens > 0 else None
        rows = []
        nt = 0 if trained is None else trained.shape[0]
        if n > 0:
            if nt > 0:
                rows.append(trained[:min(n, nt)])
            if n > nt:
                mean = self.model.embed_tokens.weight.mean(0, keepdim=True)
                rows.append(mean.expand(n - nt, -1))
        return torch.cat(rows, 0) if rows else None

    def forward(self, ids, normalizer=None, registers=None, sequential=False, return_hidden=False):
        """ids (B, S). normalizer None = as trained. registers None = trained count."""
        cfg = self.cfg
        norm = normalizer or cfg.attention_normalizer
        n_reg = cfg.num_register_tokens if registers is None else registers
        h = self.model.embed_tokens(ids)
        reg = self.register_rows(n_reg)
        if reg is not None:
            h = torch.cat([reg.to(h.dtype).unsqueeze(0).expand(h.shape[0], -1, -1), h], dim=1)
        bals, zs = [], []
        for layer in self.model.layers:
            h, bal, z = layer(h, norm, sequential)
            if bal is not None:
                bals.append(bal)
                zs.append(z)
        if reg is not None:
            h = h[:, reg.shape[0]:]
        h = self.model.final_layernorm(h)
        aux = {"balance": torch.stack(bals).mean() if bals else torch.zeros(()),
               "z": torch.stack(zs).mean() if zs else torch.zeros(())}
        self._aux = aux
        if return_hidden:
            return h, aux
        logits = linear(h, self.lm_head)
        aux = {"balance": torch.stack(bals).mean() if bals else torch.zeros(()),
               "z": torch.stack(zs).mean() if zs else torch.zeros(())}
        return logits, aux

    def loss(self, ids, labels, task_weight=None, **kw):
        """Next-token cross-entropy over the labelled positions (labels != -100; the head runs only
        there) + alpha * balance + beta * z-loss (Fedus, Zoph & Shazeer 2022; Zoph et al. 2022), both averaged over the MoE layers."""
        self._aux = None
        h, _ = self.forward(ids, return_hidden=True, **kw)
        if task_weight is None:
            keep = labels != -100
            lm = F.cross_entropy(linear(h[keep], self.lm_head), labels[keep])
        else:
            # Rows labelled at every position are text, the others recall tasks (answers only): each
            # kind's mean cross-entropy, mixed (1 − w) : w, so that a few answers per row are not
            # drowned by the text rows' hundreds of positions.
            text_rows = (labels != -100).all(dim=1)
            parts = []
            for rows, w in ((text_rows, 1.0 - task_weight), (~text_rows, task_weight)):
                keep = (labels != -100) & rows[:, None]
                if bool(keep.any()):
                    parts.append((w, F.cross_entropy(linear(h[keep], self.lm_head), labels[keep])))
            lm = sum(w * l for w, l in parts) / sum(w for w, _ in parts)
        aux = self._aux
        total = lm + self.cfg.router_aux_loss_coef * aux["balance"] + self.cfg.router_z_loss_coef * aux["z"]
        return total, lm, aux
