#!/usr/bin/python3
"""Checks the shipped demo checkpoints with an independent reader and forward pass.

    /usr/bin/python3 tools/train/check_export.py [--models resources/models] [--golden tests/golden/demo]

For every checkpoint folder (variants and full fine-tune steps) and every PEFT adapter folder:
  1. parses the safetensors files itself (numpy only, not the trainer's reader) and checks the tensor
     names and shapes against jamba-spec.md §2.1 / §5.3 and the config;
  2. runs a numpy float64 forward written separately from tools/train/model.py (explicit causal
     conv taps, the recurrence one token at a time, MoE top-k by sorting) on a fixed token list;
  3. compares it with the trainer's PyTorch model (tools/train/model.py, float32, fused scan) loaded
     with the same BF16 values, and with the expected logits in tests/golden/demo (runs.json).
Prints one line per comparison; exits non-zero if a relative error (max |a - b| / max |b|) exceeds
1e-4 (float32 model) or 1e-6 (golden, float64 on both sides).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


# ---------------------------------------------------------------- reader
def read_st(path):
    with open(path, "rb") as fh:
        blob = fh.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = np.frombuffer(blob, dtype=np.uint8, count=e - b, offset=base + b)
        dt = info["dtype"]
        if dt == "BF16":
            arr = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt == "F16":
            arr = raw.view("<f2")
        elif dt == "F32":
            arr = raw.view("<f4")
        elif dt in ("I32", "I64"):
            arr = raw.view("<i4" if dt == "I32" else "<i8")
        else:
            raise ValueError(f"{path}: {name}: dtype {dt}")
        shape = info["shape"]
        assert arr.size == int(np.prod(shape)), (path, name)
        out[name] = (dt, arr.astype(np.float64).reshape(shape))
    return out


# ---------------------------------------------------------------- reference forward (numpy, fp64)
def rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


class Ref:
    def __init__(self, cfg, W):
        self.c = cfg
        self.W = W
        L = cfg["num_hidden_layers"]
        self.attn = [i % cfg["attn_layer_period"] == cfg["attn_layer_offset"] for i in range(L)]
        self.moe = [cfg["num_experts"] > 1 and i % cfg["expert_layer_period"] == cfg["expert_layer_offset"] for i in range(L)]

    def w(self, name):
        return self.W[name]

    def forward(self, ids, normalizer=None, registers=None):
        c = self.c
        H = c["hidden_size"]
        eps = c["rms_norm_eps"]
        emb = self.w("model.embed_tokens.weight")
        x = emb[np.asarray(ids)]
        n_tr = c.get("num_register_tokens", 0)
        n_reg = n_tr if registers is None else registers
        regs = []
        for r in range(n_reg):
            regs.append(self.w("model.register_tokens")[r] if r < n_tr else emb.mean(0))
        if regs:
            x = np.concatenate([np.stack(regs), x], 0)
        S = x.shape[0]
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            y = rms(x, self.w(p + "input_layernorm.weight"), eps)
            if self.attn[i]:
                norm = normalizer or c.get("attention_normalizer", "softmax")
                y = self.attention(y, p + "self_attn.", norm)
            else:
                y = self.mamba(y, p + "mamba.")
            x = x + y
            y = rms(x, self.w(p + "pre_ff_layernorm.weight"), eps)
            y = self.moe_ff(y, p + "feed_forward.") if self.moe[i] else self.mlp(y, p + "feed_forward.")
            x = x + y
        x = rms(x[n_reg:], self.w("model.final_layernorm.weight"), eps)
        head = self.W.get("lm_head.weight", emb)
        return x @ head.T

    def attention(self, x, p, norm):
        c = self.c
        nh = c["num_attention_heads"]
        nkv = c.get("num_key_value_heads") or nh
        hd = c["hidden_size"] // nh
        S = x.shape[0]
        q = (x @ self.w(p + "q_proj.weight").T).reshape(S, nh, hd)
        k = (x @ self.w(p + "k_proj.weight").T).reshape(S, nkv, hd)
        v = (x @ self.w(p + "v_proj.weight").T).reshape(S, nkv, hd)
        sinks = self.W.get(p + "sinks")
        out = np.zeros((S, nh, hd))
        for h in range(nh):
            g = h // (nh // nkv)
            for t in range(S):
                z = k[:t + 1, g] @ q[t, h] / math.sqrt(hd)
                if norm == "softmax":
                    extra = None
                elif norm == "softmax1":
                    extra = 0.0
                else:
                    extra = 0.0 if sinks is None else sinks[h]
                m = z.max() if extra is None else max(z.max(), extra)
                e = np.exp(z - m)
                den = e.sum() + (0.0 if extra is None else math.exp(extra - m))
                out[t, h] = (e / den) @ v[:t + 1, g]
        return out.reshape(S, nh * hd) @ self.w(p + "o_proj.weight").T

    def mamba(self, x, p):
        c = self.c
        Di = c["mamba_expand"] * c["hidden_size"]
        N = c["mamba_d_state"]
        R = math.ceil(c["hidden_size"] / 16) if c["mamba_dt_rank"] == "auto" else c["mamba_dt_rank"]
        Wc = c["mamba_d_conv"]
        eps = c["rms_norm_eps"]
        S = x.shape[0]
        xz = x @ self.w(p + "in_proj.weight").T
        u0, z = xz[:, :Di], xz[:, Di:]
        cw = self.w(p + "conv1d.weight")[:, 0, :]
        cb = self.w(p + "conv1d.bias")
        conv = np.tile(cb, (S, 1))
        for t in range(S):
            for k in range(Wc):
                src = t - (Wc - 1) + k
                if src >= 0:
                    conv[t] += cw[:, k] * u0[src]
        u = silu(conv)
        proj = u @ self.w(p + "x_proj.weight").T
        dt_r = rms(proj[:, :R], self.w(p + "dt_layernorm.weight"), eps)
        Bm = rms(proj[:, R:R + N], self.w(p + "b_layernorm.weight"), eps)
        Cm = rms(proj[:, R + N:], self.w(p + "c_layernorm.weight"), eps)
        dt = softplus(dt_r @ self.w(p + "dt_proj.weight").T + self.w(p + "dt_proj.bias"))
        A = -np.exp(self.w(p + "A_log"))
        h = np.zeros((Di, N))
        y = np.zeros((S, Di))
        for t in range(S):
            h = np.exp(dt[t][:, None] * A) * h + (dt[t] * u[t])[:, None] * Bm[t][None, :]
            y[t] = h @ Cm[t]
        y = (y + u * self.w(p + "D")) * silu(z)
        return y @ self.w(p + "out_proj.weight").T

    def mlp(self, x, p):
        return (silu(x @ self.w(p + "gate_proj.weight").T) * (x @ self.w(p + "up_proj.weight").T)) @ self.w(p + "down_proj.weight").T

    def moe_ff(self, x, p):
        c = self.c
        E, K = c["num_experts"], c["num_experts_per_tok"]
        logits = x @ self.w(p + "router.weight").T
        pr = np.exp(logits - logits.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            top = np.argsort(-pr[t], kind="stable")[:K]
            for e in sorted(top):
                out[t] += pr[t, e] * self.mlp(x[t:t + 1], p + f"experts.{e}.")[0]
        return out


# ---------------------------------------------------------------- structure checks
def expected_names(cfg):
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    V, I = cfg["vocab_size"], cfg["intermediate_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = H // nh
    Di, N, Wc = cfg["mamba_expand"] * H, cfg["mamba_d_state"], cfg["mamba_d_conv"]
    R = math.ceil(H / 16)
    E = cfg["num_experts"]
    names = {"model.embed_tokens.weight": [V, H], "model.final_layernorm.weight": [H], "lm_head.weight": [V, H]}
    if cfg.get("num_register_tokens", 0):
        names["model.register_tokens"] = [cfg["num_register_tokens"], H]
    for i in range(L):
        p = f"model.layers.{i}."
        names[p + "input_layernorm.weight"] = [H]
        names[p + "pre_ff_layernorm.weight"] = [H]
        if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"]:
            names.update({p + "self_attn.q_proj.weight": [nh * hd, H], p + "self_attn.k_proj.weight": [nkv * hd, H],
                          p + "self_attn.v_proj.weight": [nkv * hd, H], p + "self_attn.o_proj.weight": [H, nh * hd]})
        else:
            m = p + "mamba."
            names.update({m + "in_proj.weight": [2 * Di, H], m + "conv1d.weight": [Di, 1, Wc], m + "conv1d.bias": [Di],
                          m + "x_proj.weight": [R + 2 * N, Di], m + "dt_layernorm.weight": [R], m + "b_layernorm.weight": [N],
                          m + "c_layernorm.weight": [N], m + "dt_proj.weight": [Di, R], m + "dt_proj.bias": [Di],
                          m + "A_log": [Di, N], m + "D": [Di], m + "out_proj.weight": [H, Di]})
        f = p + "feed_forward."
        if E > 1 and i % cfg["expert_layer_period"] == cfg["expert_layer_offset"]:
            names[f + "router.weight"] = [E, H]
            for e in range(E):
                names.update({f + f"experts.{e}.gate_proj.weight": [I, H], f + f"experts.{e}.up_proj.weight": [I, H],
                              f + f"experts.{e}.down_proj.weight": [H, I]})
        else:
            names.update({f + "gate_proj.weight": [I, H], f + "up_proj.weight": [I, H], f + "down_proj.weight": [H, I]})
    return names


def load_dir(d):
    with open(os.path.join(d, "config.json")) as fh:
        cfg = json.load(fh)
    st = read_st(os.path.join(d, "model.safetensors"))
    exp = expected_names(cfg)
    problems = []
    if set(st) != set(exp):
        problems.append(f"names differ: missing {sorted(set(exp) - set(st))[:5]}, extra {sorted(set(st) - set(exp))[:5]}")
    for k, (dt, a) in st.items():
        if k in exp and list(a.shape) != exp[k]:
            problems.append(f"{k}: shape {list(a.shape)} != {exp[k]}")
        if dt != "BF16":
            problems.append(f"{k}: dtype {dt}")
    if not os.path.isfile(os.path.join(d, "tokenizer.model")):
        problems.append("no tokenizer.model")
    return cfg, {k: a for k, (_, a) in st.items()}, problems


def merge_peft(W, ad):
    with open(os.path.join(ad, "adapter_config.json")) as fh:
        acfg = json.load(fh)
    st = read_st(os.path.join(ad, "adapter_model.safetensors"))
    problems = []
    for key in ("peft_type", "r", "lora_alpha", "use_dora", "target_modules", "use_rslora", "fan_in_fan_out"):
        if key not in acfg:
            problems.append(f"adapter_config.json lacks {key}")
    if acfg.get("peft_type") != "LORA" or acfg.get("use_rslora") or acfg.get("fan_in_fan_out"):
        problems.append("unexpected adapter_config values")
    s = acfg["lora_alpha"] / acfg["r"]
    W = dict(W)
    mods = sorted({k[len("base_model.model."):].rsplit(".lora_", 1)[0] for k in st})
    for mpath in mods:
        A = st[f"base_model.model.{mpath}.lora_A.weight"][1]
        B = st[f"base_model.model.{mpath}.lora_B.weight"][1]
        W0 = W[mpath + ".weight"]
        if A.shape != (acfg["r"], W0.shape[1]) or B.shape != (W0.shape[0], acfg["r"]):
            problems.append(f"{mpath}: lora shapes {A.shape} {B.shape}")
        if not any(mpath == t or mpath.endswith("." + t) for t in acfg["target_modules"]):
            problems.append(f"{mpath}: not matched by target_modules")
        V = W0 + s * (B @ A)
        if acfg["use_dora"]:
            m = st[f"base_model.model.{mpath}.lora_magnitude_vector"][1]
            V = (m / np.linalg.norm(V, axis=1))[:, None] * V
        W[mpath + ".weight"] = V
    expected_keys = 3 if acfg["use_dora"] else 2
    if len(st) != expected_keys * len(mods):
        problems.append(f"{len(st)} tensors for {len(mods)} modules")
    return W, problems


def torch_logits(d, W, ids, normalizer, registers):
    """The trainer's model (float32) holding the same values."""
    sys.path.insert(0, HERE)
    import torch
    import model as M
    with open(os.path.join(d, "config.json")) as fh:
        cfg = M.Config.from_hf(json.load(fh))
    m = M.JambaForCausalLM(cfg)
    sd = m.state_dict()
    with torch.no_grad():
        for k in sd:
            sd[k].copy_(torch.from_numpy(W[k]).to(sd[k].dtype))
        logits, _ = m(torch.tensor([ids]), normalizer=normalizer, registers=registers)
    return logits[0].double().numpy()


def rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=os.path.join(REPO, "resources", "models"))
    ap.add_argument("--golden", default=os.path.join(REPO, "tests", "golden", "demo"))
    args = ap.parse_args()
    with open(os.path.join(args.golden, "runs.json")) as fh:
        runs = json.load(fh)["runs"]
    golden_files = {}
    bad = 0
    loaded = {}
    for run in runs:
        ck = os.path.join(REPO, run["checkpoint"])
        if ck not in loaded:
            cfg, W, probs = load_dir(ck)
            loaded[ck] = (cfg, W)
            print(f"{run['checkpoint']}: {len(W)} tensors, structure {'ok' if not probs else probs}")
            bad += bool(probs)
        cfg, W = loaded[ck]
        if run.get("adapter"):
            W, probs = merge_peft(W, os.path.join(REPO, run["adapter"]))
            if probs:
                print(f"{run['adapter']}: {probs}")
                bad += 1
        ref = Ref(cfg, W).forward(run["token_ids"], run["normalizer"], run["registers"])
        tl = torch_logits(ck, W, run["token_ids"], run["normalizer"], run["registers"])
        gf = os.path.join(args.golden, run["file"])
        if gf not in golden_files:
            golden_files[gf] = {k: v for k, (_, v) in read_st(gf).items()}
        g = golden_files[gf][run["tensor"]]
        e_torch, e_gold = rel(tl, ref), rel(g, ref)
        ok = e_torch <= 1e-4 and e_gold <= 1e-6 and g.shape == ref.shape
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {run['name']:36s} trainer-fp32 vs reference {e_torch:.2e}   golden vs reference {e_gold:.2e}")
    # Adapter steps not covered by a golden run: structure and merge only.
    ft = os.path.join(args.models, "finetunes")
    for method in ("dora", "lora"):
        md = os.path.join(ft, method)
        if not os.path.isdir(md):
            continue
        base = load_dir(os.path.join(args.models, "baseline"))[1]
        for s in sorted(os.listdir(md)):
            _, probs = merge_peft(base, os.path.join(md, s))
            print(f"{'ok  ' if not probs else 'FAIL'} adapter finetunes/{method}/{s} structure {probs or ''}")
            bad += bool(probs)
    print("all checks passed" if bad == 0 else f"{bad} check(s) failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
