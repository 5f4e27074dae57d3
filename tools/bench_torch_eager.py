#!/usr/bin/python3
"""Decode speed of PyTorch eager float32 against `hybridlens bench`, on one checkpoint, in one run.

What a user of the Hugging Face Jamba implementation without the custom kernels runs
(`use_mamba_kernels=False`, eager attention, float32): the same modules and ops, written here from
jamba-spec.md §3 (RMSNorm, attention with repeat_kv and an fp32 softmax, the Mamba slow path's
single-step update with conv_state roll, the MoE block's loop over experts), reading the safetensors
itself. Decodes one token at a time with a KV cache and conv/SSM states. Not the reference for
correctness (that is tools/reference/jamba_ref.py); it checks its logits against `hybridlens trace`.

Run with Debian's /usr/bin/python3 (torch + numpy):
    /usr/bin/python3 tools/bench_torch_eager.py --checkpoint DIR --hybridlens build/hybridlens [--tokens 64]
"""
import argparse
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# ---- checkpoint reading (safetensors: u64 header size, JSON header, raw little-endian data) ----

_NP = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def read_safetensors(path):
    """name -> float32/int numpy array (BF16 and F16 widened exactly)."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        raw = data[b:e]
        if t["dtype"] == "BF16":
            a = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            a = raw.view(_NP[t["dtype"]]).astype(np.float32 if t["dtype"] in ("F32", "F16") else _NP[t["dtype"]])
        out[name] = a.reshape(t["shape"])
    return out


def load_checkpoint(d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    tensors = {}
    for fn in files:
        tensors.update(read_safetensors(os.path.join(d, fn)))
    return cfg, tensors


# ---- the model, float32, modules as in transformers' modeling_jamba (eager, slow Mamba path) ----


def param(a):
    return nn.Parameter(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)), requires_grad=False)


class Linear(nn.Module):  # nn.Linear without the random init of 317M parameters
    def __init__(self, w, b=None):
        super().__init__()
        self.weight = param(w)
        self.bias = param(b) if b is not None else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class RMSNorm(nn.Module):
    def __init__(self, w, eps):
        super().__init__()
        self.weight, self.eps = param(w), eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


class Attention(nn.Module):
    def __init__(self, c, t, p):
        super().__init__()
        self.nh = c["num_attention_heads"]
        self.nkv = c.get("num_key_value_heads") or self.nh  # null: plain multi-head
        self.hd = c["hidden_size"] // self.nh
        self.q_proj, self.k_proj = Linear(t[p + "q_proj.weight"]), Linear(t[p + "k_proj.weight"])
        self.v_proj, self.o_proj = Linear(t[p + "v_proj.weight"]), Linear(t[p + "o_proj.weight"])

    def forward(self, x, cache):  # x (B, S, H); cache: dict with "k", "v" (B, nkv, T, hd)
        B, S, _ = x.shape
        q = self.q_proj(x).view(B, S, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, S, self.nkv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, S, self.nkv, self.hd).transpose(1, 2)
        if "k" in cache:
            k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
        rep = self.nh // self.nkv  # repeat_kv: query head j reads kv head j // rep
        T = k.shape[2]
        k = k[:, :, None].expand(B, self.nkv, rep, T, self.hd).reshape(B, self.nh, T, self.hd)
        v = v[:, :, None].expand(B, self.nkv, rep, T, self.hd).reshape(B, self.nh, T, self.hd)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)  # (B, nh, S, T); S == 1: no mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(probs, v).transpose(1, 2).reshape(B, S, self.nh * self.hd)
        return self.o_proj(o)


class Mamba(nn.Module):
    def __init__(self, c, t, p):
        super().__init__()
        H, eps = c["hidden_size"], c["rms_norm_eps"]
        self.Di = c.get("mamba_expand", 2) * H
        self.N = c.get("mamba_d_state", 16)
        r = c.get("mamba_dt_rank", "auto")
        self.R = math.ceil(H / 16) if r == "auto" else int(r)
        self.in_proj = Linear(t[p + "in_proj.weight"], t.get(p + "in_proj.bias"))
        self.conv_w = param(t[p + "conv1d.weight"][:, 0, :])  # (Di, W)
        self.conv_b = param(t[p + "conv1d.bias"]) if p + "conv1d.bias" in t else None
        self.x_proj = Linear(t[p + "x_proj.weight"])
        self.dt_proj = Linear(t[p + "dt_proj.weight"], t[p + "dt_proj.bias"])
        self.A_log, self.D = param(t[p + "A_log"]), param(t[p + "D"])
        self.out_proj = Linear(t[p + "out_proj.weight"], t.get(p + "out_proj.bias"))
        self.dt_norm = RMSNorm(t[p + "dt_layernorm.weight"], eps)
        self.b_norm = RMSNorm(t[p + "b_layernorm.weight"], eps)
        self.c_norm = RMSNorm(t[p + "c_layernorm.weight"], eps)

    def forward(self, x, cache):  # one token: x (B, 1, H); cache: "conv" (B, Di, W), "ssm" (B, Di, N)
        proj = self.in_proj(x).transpose(1, 2)  # (B, 2Di, 1)
        u0, gate = proj.chunk(2, dim=1)
        conv = torch.roll(cache["conv"], shifts=-1, dims=-1)
        conv[:, :, -1] = u0[:, :, 0]
        cache["conv"] = conv
        u = torch.sum(conv * self.conv_w, dim=-1)
        if self.conv_b is not None:
            u = u + self.conv_b
        u = F.silu(u).unsqueeze(-1)  # (B, Di, 1)
        ssm_p = self.x_proj(u.transpose(1, 2))  # (B, 1, R + 2N)
        dt, Bm, Cm = torch.split(ssm_p, [self.R, self.N, self.N], dim=-1)
        dt, Bm, Cm = self.dt_norm(dt), self.b_norm(Bm), self.c_norm(Cm)
        delta = F.softplus(self.dt_proj(dt)).transpose(1, 2)  # (B, Di, 1)
        A = -torch.exp(self.A_log.float())  # (Di, N)
        dA = torch.exp(A[None, :, None, :] * delta[:, :, :, None])  # (B, Di, 1, N)
        dBu = delta[:, :, :, None] * Bm[:, None, :, :].float() * u[:, :, :, None].float()
        h = dA[:, :, 0, :] * cache["ssm"] + dBu[:, :, 0, :]
        cache["ssm"] = h
        y = torch.matmul(h, Cm[:, 0, :].unsqueeze(-1))  # (B, Di, 1)
        y = (y + u * self.D[None, :, None]) * F.silu(gate)
        return self.out_proj(y.transpose(1, 2))

    def new_cache(self, B, W):
        return {"conv": torch.zeros(B, self.Di, W), "ssm": torch.zeros(B, self.Di, self.N)}


class MLP(nn.Module):
    def __init__(self, g, u, d):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = Linear(g), Linear(u), Linear(d)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(nn.Module):
    def __init__(self, c, t, p):
        super().__init__()
        self.E, self.K = c["num_experts"], c["num_experts_per_tok"]
        self.router = Linear(t[p + "router.weight"])
        I = c["intermediate_size"]
        if p + "experts.gate_up_proj" in t:  # transformers v5 fused names
            gu, dn = t[p + "experts.gate_up_proj"], t[p + "experts.down_proj"]
            self.experts = nn.ModuleList(MLP(gu[e, :I], gu[e, I:], dn[e]) for e in range(self.E))
        else:
            q = p + "experts.{}."
            self.experts = nn.ModuleList(
                MLP(t[q.format(e) + "gate_proj.weight"], t[q.format(e) + "up_proj.weight"],
                    t[q.format(e) + "down_proj.weight"]) for e in range(self.E))

    def forward(self, x):  # the v4 block: softmax in fp32, top-k, no renormalisation, loop over experts
        B, S, H = x.shape
        x = x.view(-1, H)
        logits = self.router(x)
        w = F.softmax(logits, dim=1, dtype=torch.float)
        w, chosen = torch.topk(w, self.K, dim=-1)
        w = w.to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, num_classes=self.E).permute(2, 1, 0)
        for e in range(self.E):
            slot, rows = torch.where(mask[e])
            if rows.shape[0] == 0:
                continue
            y = self.experts[e](x[None, rows].reshape(-1, H)) * w[rows, slot, None]
            out.index_add_(0, rows, y.to(x.dtype))
        return out.view(B, S, H)


class Layer(nn.Module):
    def __init__(self, c, t, i):
        super().__init__()
        p = "model.layers.%d." % i
        eps = c["rms_norm_eps"]
        self.is_attn = i % c["attn_layer_period"] == c["attn_layer_offset"]
        self.input_layernorm = RMSNorm(t[p + "input_layernorm.weight"], eps)
        self.pre_ff_layernorm = RMSNorm(t[p + "pre_ff_layernorm.weight"], eps)
        self.mixer = Attention(c, t, p + "self_attn.") if self.is_attn else Mamba(c, t, p + "mamba.")
        moe = c["num_experts"] > 1 and i % c["expert_layer_period"] == c["expert_layer_offset"]
        f = p + "feed_forward."
        self.feed_forward = SparseMoe(c, t, f) if moe else MLP(
            t[f + "gate_proj.weight"], t[f + "up_proj.weight"], t[f + "down_proj.weight"])

    def forward(self, h, cache):
        h = h + self.mixer(self.input_layernorm(h), cache)
        return h + self.feed_forward(self.pre_ff_layernorm(h))


class Jamba(nn.Module):
    def __init__(self, c, t):
        super().__init__()
        self.c = c
        self.embed = param(t["model.embed_tokens.weight"])
        self.layers = nn.ModuleList(Layer(c, t, i) for i in range(c["num_hidden_layers"]))
        self.final_layernorm = RMSNorm(t["model.final_layernorm.weight"], c["rms_norm_eps"])
        self.lm_head = Linear(t["lm_head.weight"]) if "lm_head.weight" in t else None

    def new_cache(self):
        return [l.mixer.new_cache(1, self.c.get("mamba_d_conv", 4)) if not l.is_attn else {} for l in self.layers]

    def step(self, token, cache):  # one decode step: logits (V,)
        h = F.embedding(torch.tensor([[token]]), self.embed)
        for layer, lc in zip(self.layers, cache):
            h = layer(h, lc)
        h = self.final_layernorm(h)
        head = self.lm_head.weight if self.lm_head is not None else self.embed
        return F.linear(h, head)[0, -1]


# ---- measurement ----


def torch_rate(model, ids, steps=None):
    """Tokens/s of decoding ids from an empty cache; each step's seconds are appended to steps."""
    cache = model.new_cache()
    total = 0.0
    for tok in ids:
        t0 = time.perf_counter()
        model.step(int(tok), cache)
        dt = time.perf_counter() - t0
        total += dt
        if steps is not None:
            steps.append(dt)
    return len(ids) / total


def hybridlens_logits(exe, ckpt, ids):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.safetensors")
        subprocess.run([exe, "trace", "--checkpoint", ckpt, "--backend", "cpu", "--ids", ",".join(map(str, ids)),
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
        return read_safetensors(out)["logits"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--hybridlens", required=True, help="path of the hybridlens executable")
    ap.add_argument("--tokens", type=int, default=64, help="decode steps per round (default 64)")
    ap.add_argument("--rounds", type=int, default=3, help="PyTorch rounds, around the hybridlens run (default 3)")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads (default: the faster of 1 and all cores on a short trial)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args()
    torch.set_grad_enabled(False)
    cfg, tensors = load_checkpoint(a.checkpoint)
    ext = [k for k in ("attention_normalizer", "num_register_tokens") if cfg.get(k) not in (None, "softmax", 0)]
    ext += [n for n in tensors if n.endswith(".sinks") or n == "model.register_tokens"]
    if ext:  # trace-format.md §1 extensions: not the Hugging Face model this compares against
        print("bench_torch_eager: %s uses HybridLens extensions (%s): no Hugging Face counterpart" % (
            a.checkpoint, ", ".join(ext[:3])), file=sys.stderr)
        return 2
    V = cfg["vocab_size"]
    model = Jamba(cfg, tensors)
    del tensors
    rng = np.random.default_rng(1234)
    ids = rng.integers(0, V, size=a.tokens).tolist()

    # Same math: logits of the first tokens against the engine's (both fp32 on the stored weights).
    check = ids[:8]
    cache = model.new_cache()
    ours = torch.stack([model.step(int(t), cache) for t in check]).numpy()
    theirs = hybridlens_logits(a.hybridlens, a.checkpoint, check)
    rel = float(np.max(np.abs(ours - theirs)) / max(np.max(np.abs(theirs)), 1e-30))

    # Thread count: OpenMP's barriers cost more than they save on small ops or a busy machine, so
    # unless told, give PyTorch the better of one thread and all cores.
    choices = [a.threads] if a.threads > 0 else sorted({1, os.cpu_count() or 1})
    trial = {}
    for n in choices:
        torch.set_num_threads(n)
        torch_rate(model, ids[:4])  # warm-up
        trial[n] = torch_rate(model, ids[: max(8, a.tokens // 4)])
    torch.set_num_threads(max(trial, key=trial.get))
    steps = []  # per-step seconds of every round
    rates = [torch_rate(model, ids, steps) for _ in range((a.rounds + 1) // 2)]
    r = subprocess.run([a.hybridlens, "bench", "--checkpoint", a.checkpoint, "--backend", "cpu", "--tokens",
                        str(a.tokens), "--json"], check=True, capture_output=True, text=True)
    hl = json.loads(r.stdout)
    rates += [torch_rate(model, ids, steps) for _ in range(a.rounds // 2)]
    tr = statistics.median(rates)
    # Median step times: robust to the steps a busy machine preempts (both sides measure them alike).
    p50 = statistics.median(steps)
    fp32_bytes = sum(p.numel() * 4 for p in model.parameters())
    res = {
        "checkpoint": os.path.basename(os.path.normpath(a.checkpoint)),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_thread_trial_tok_s": {str(k): v for k, v in trial.items()},
        "torch_decode_tok_s": tr,
        "torch_decode_tok_s_rounds": rates,
        "torch_fp32_param_bytes": fp32_bytes,
        "hybridlens_decode_tok_s_on": hl["decode_tok_s_on"],
        "hybridlens_decode_tok_s_off": hl["decode_tok_s_off"],
        "speedup_on": hl["decode_tok_s_on"] / tr,
        "speedup_off": hl["decode_tok_s_off"] / tr,
        "torch_decode_ms_p50": 1e3 * p50,
        "speedup_on_p50": 1e3 * p50 / hl["decode_ms_p50_on"],
        "speedup_off_p50": 1e3 * p50 / hl["decode_ms_p50_off"],
        "logits_max_rel_diff": rel,
        "hybridlens_bench": hl,
    }
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print("%s: PyTorch %s eager fp32 (%d threads) %.2f tok/s (rounds %s)" % (
            res["checkpoint"], torch.__version__, res["torch_threads"], tr, ", ".join("%.2f" % x for x in rates)))
        print("  hybridlens cpu: %.2f tok/s instruments on, %.2f off" % (hl["decode_tok_s_on"], hl["decode_tok_s_off"]))
        print("  decode speed ratio hybridlens/PyTorch: %.2f x (instruments on), %.2f x (off)" % (
            res["speedup_on"], res["speedup_off"]))
        print("  median step: PyTorch %.3f ms, hybridlens %.3f ms on, %.3f ms off: %.2f x (on), %.2f x (off)" % (
            res["torch_decode_ms_p50"], hl["decode_ms_p50_on"], hl["decode_ms_p50_off"], res["speedup_on_p50"],
            res["speedup_off_p50"]))
        print("  logits agree to %.1e of their largest magnitude (first %d tokens)" % (rel, len(check)))
    if not rel < 1e-3:
        print("bench_torch_eager: logits differ from hybridlens by %.3g: not the same model (or a router with exact"
              " probability ties, which torch.topk breaks differently from jamba-spec.md)" % rel, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
