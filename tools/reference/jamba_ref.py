#!/usr/bin/python3
"""Independent numpy reference of the Jamba forward pass and every HybridLens trace tensor.

What it is: a plain, slow, float64 implementation of jamba-spec.md §3 (fp32-semantics math evaluated
in float64) plus the extensions and trace tensors of trace-format.md §1-§3, with its own minimal
safetensors / config.json reader. It is the oracle the C++ engine's golden tests compare against.
What it is not: a bit-exact replica of any Hugging Face bf16 path, and not shared with the C++ code.
References: jamba-spec.md §3.1-3.10, §6.1-6.3 (selective_scan_ref, causal_conv1d_ref);
trace-format.md §2 (normalizers, registers) and §3 (trace tensor definitions).

Two forward paths share the per-layer weights but not the state handling:
  run(..., path="sequence")  all positions at once (causal mask, full conv, sequential scan)
  run(..., path="step")      one position at a time with a KV cache, a conv window and an SSM state
check_ref.py asserts they agree to 1e-10.
"""
import json
import math
import os
import struct

import numpy as np

# ----------------------------------------------------------------------------------------------
# safetensors reader (own code: 8-byte LE header length, JSON header, raw little-endian data)
# ----------------------------------------------------------------------------------------------

_NP_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
              "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    """Returns (tensors: {name: np.ndarray}, dtypes: {name: str}, metadata: {str: str}).
    BF16 is widened exactly to float32 (uint16 << 16); F16/F32 keep their numpy dtype."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(data)}")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    tensors, dtypes = {}, {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        shape = [int(s) for s in info["shape"]]
        dt = info["dtype"]
        buf = data[base + b: base + e]
        if dt == "BF16":
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif dt in _NP_DTYPES:
            arr = np.frombuffer(buf, dtype=_NP_DTYPES[dt])
        else:
            raise ValueError(f"{path}: tensor '{name}': unsupported dtype {dt}")
        count = int(np.prod(shape)) if shape else 1
        if arr.size != count:
            raise ValueError(f"{path}: tensor '{name}': {arr.size} elements, shape {shape}")
        tensors[name] = arr.reshape(shape).copy()
        dtypes[name] = dt
    return tensors, dtypes, meta


def load_tensors(folder):
    """All tensors of a checkpoint folder: model.safetensors, or the shards of
    model.safetensors.index.json (each tensor must live in the shard the weight_map names)."""
    index_path = os.path.join(folder, "model.safetensors.index.json")
    tensors, dtypes = {}, {}
    if os.path.exists(index_path):
        with open(index_path) as f:
            weight_map = json.load(f)["weight_map"]
        for shard in sorted(set(weight_map.values())):
            if os.path.basename(shard) != shard or shard in ("..", "."):
                raise ValueError(f"{index_path}: shard name '{shard}' is not a plain file name")
            t, d, _ = read_safetensors(os.path.join(folder, shard))
            for name in t:
                if weight_map.get(name) != shard:
                    raise ValueError(f"{shard}: tensor '{name}' not mapped to this shard in the index")
                if name in tensors:
                    raise ValueError(f"{shard}: duplicate tensor '{name}'")
            tensors.update(t)
            dtypes.update(d)
        missing = set(weight_map) - set(tensors)
        if missing:
            raise ValueError(f"{index_path}: tensors listed but not found: {sorted(missing)[:5]}")
    else:
        tensors, dtypes, _ = read_safetensors(os.path.join(folder, "model.safetensors"))
    return tensors, dtypes


# ----------------------------------------------------------------------------------------------
# config.json (jamba-spec.md §1.1 defaults; trace-format.md §1 extensions)
# ----------------------------------------------------------------------------------------------

class JambaConfig:
    DEFAULTS = dict(vocab_size=65536, tie_word_embeddings=False, hidden_size=4096,
                    intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=8, hidden_act="silu", rms_norm_eps=1e-6,
                    num_experts_per_tok=2, num_experts=16, expert_layer_period=2,
                    expert_layer_offset=1, attn_layer_period=8, attn_layer_offset=4,
                    mamba_d_state=16, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto",
                    mamba_conv_bias=True, mamba_proj_bias=False, bos_token_id=1, eos_token_id=2,
                    attention_normalizer="softmax", num_register_tokens=0)

    def __init__(self, d):
        v = dict(self.DEFAULTS)
        v.update(d)
        self.raw = d
        self.read_shared(v)
        assert self.H % self.nh == 0
        self.hd = self.H // self.nh
        self.K = int(v["num_experts_per_tok"])
        self.E = int(v["num_experts"])
        self.N = int(v["mamba_d_state"])
        self.W = int(v["mamba_d_conv"])
        self.Di = int(v["mamba_expand"]) * self.H
        r = v["mamba_dt_rank"]
        self.R = math.ceil(self.H / 16) if r == "auto" else int(r)
        ap, ao = int(v["attn_layer_period"]), int(v["attn_layer_offset"])
        ep, eo = int(v["expert_layer_period"]), int(v["expert_layer_offset"])
        assert ao < ap and eo < ep
        # jamba-spec.md §1.2
        self.set_schedule([i % ap == ao for i in range(self.L)], [self.E > 1 and i % ep == eo for i in range(self.L)])

    def read_shared(self, v):
        """The fields every family here reads alike (HF names), and the trace-format.md §1 extensions."""
        self.V = int(v["vocab_size"])
        self.tie = bool(v["tie_word_embeddings"])
        self.H = int(v["hidden_size"])
        self.I = int(v["intermediate_size"])
        self.L = int(v["num_hidden_layers"])
        self.nh = int(v["num_attention_heads"])
        self.nkv = self.nh if v["num_key_value_heads"] is None else int(v["num_key_value_heads"])
        assert self.nh % self.nkv == 0
        assert v["hidden_act"] == "silu"
        self.eps = float(v["rms_norm_eps"])
        self.conv_bias = bool(v["mamba_conv_bias"])
        self.proj_bias = bool(v["mamba_proj_bias"])
        self.normalizer = v["attention_normalizer"] or "softmax"
        assert self.normalizer in ("softmax", "softmax1")
        self.n_reg_trained = int(v["num_register_tokens"] or 0)

    def set_schedule(self, is_attn, is_moe):
        """Per-layer kinds (lists of L bools) and the layer lists of each kind, in increasing index."""
        self.is_attn, self.is_moe = is_attn, is_moe
        self.attn_layers = [i for i in range(self.L) if self.is_attn[i]]
        self.mamba_layers = [i for i in range(self.L) if not self.is_attn[i]]
        self.moe_layers = [i for i in range(self.L) if self.is_moe[i]]

    @classmethod
    def from_file(cls, path):
        with open(path) as f:
            return cls(json.load(f))                                     # json reads a bare Infinity too


# ----------------------------------------------------------------------------------------------
# elementwise math
# ----------------------------------------------------------------------------------------------

def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    # torch.nn.functional.softplus(beta=1, threshold=20): x when x > 20
    with np.errstate(over="ignore"):
        return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def rmsnorm(x, w, eps):
    # jamba-spec.md §3.2: mean over the last dim, eps inside the rsqrt, then times the weight
    var = np.mean(x * x, axis=-1, keepdims=True)
    return w * (x / np.sqrt(var + eps))


def causal_conv(u, w, b):
    """Depthwise causal conv1d over the rows of u (S, C) with weight w (C, W), bias b (C,) or None:
    row t sees rows t-W+1..t (zeros before the start), w[:, W-1] hits row t (causal_conv1d_ref)."""
    S, W = u.shape[0], w.shape[1]
    pad = np.concatenate([np.zeros((W - 1, u.shape[1]), u.dtype), u])   # (S+W-1, C)
    conv = np.zeros_like(u)
    for k in range(W):
        conv += pad[k:k + S] * w[:, k]
    return conv + b if b is not None else conv


def linear(x, w, b=None):
    """x (..., in) times w (out, in) transposed, plus b (out,) where a layer has a bias."""
    y = x @ w.T
    return y if b is None else y + b


def xlogx(p):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)


def normalize_attention(z, null_logit):
    """trace-format.md §2. z: (..., n_keys) logits with -inf at invisible keys; null_logit broadcastable
    to z[..., :1] (-inf for softmax, 0 for softmax1, s_h for sink). Returns p (same shape as z) and
    p_null (z.shape[:-1]). Stable: the row maximum includes the virtual logit."""
    m = np.maximum(np.max(z, axis=-1, keepdims=True), null_logit)
    e = np.exp(z - m)
    en = np.exp(null_logit - m)
    zsum = np.sum(e, axis=-1, keepdims=True) + en
    return e / zsum, (en / zsum)[..., 0]


# ----------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------

class JambaRef:
    def __init__(self, cfg, tensors, dtype=np.float64):
        self.cfg = cfg
        self.dt = dtype
        c = cfg
        g = lambda name: np.asarray(tensors[name], dtype=dtype)  # noqa: E731
        has = lambda name: name in tensors  # noqa: E731
        self.load_shared(g, has)
        self.layers = []
        for i in range(c.L):
            p = f"model.layers.{i}."
            ly = dict(attn=c.is_attn[i], moe=c.is_moe[i],
                      in_norm=g(p + "input_layernorm.weight"), ff_norm=g(p + "pre_ff_layernorm.weight"))
            if c.is_attn[i]:
                ly.update(self.load_attention(p, g, has))
            else:
                ly.update(self.load_mamba(p + "mamba.", g, has))
            f = p + "feed_forward."
            if c.is_moe[i]:
                ly["router"] = g(f + "router.weight")                    # (E, H)
                if has(f + "experts.gate_up_proj"):                      # fused (v5) layout
                    gu = g(f + "experts.gate_up_proj")                   # (E, 2I, H)
                    dn = g(f + "experts.down_proj")                      # (E, H, I)
                    assert gu.shape == (c.E, 2 * c.I, c.H) and dn.shape == (c.E, c.H, c.I)
                    ly["experts"] = [(gu[e, :c.I], gu[e, c.I:], dn[e]) for e in range(c.E)]
                else:
                    ly["experts"] = [(g(f + f"experts.{e}.gate_proj.weight"), g(f + f"experts.{e}.up_proj.weight"),
                                      g(f + f"experts.{e}.down_proj.weight")) for e in range(c.E)]
            else:
                ly["mlp"] = (g(f + "gate_proj.weight"), g(f + "up_proj.weight"), g(f + "down_proj.weight"))
            self.layers.append(ly)

    def load_shared(self, g, has):
        """Embeddings, head (or tied), final norm, trained registers and their mean row."""
        c = self.cfg
        self.embed = g(self.NAMES["embed"])                      # (V, H)
        assert self.embed.shape == (c.V, c.H), self.embed.shape
        if has("lm_head.weight"):
            self.head = g("lm_head.weight")                              # (V, H)
        else:
            assert c.tie, "lm_head.weight absent and tie_word_embeddings is false"
            self.head = self.embed
        self.final_norm = g(self.NAMES["final_norm"])             # (H,)
        self.registers_trained = (g(self.NAMES["registers"]) if has(self.NAMES["registers"])
                                  else np.zeros((0, c.H), self.dt))      # (R, H)
        assert self.registers_trained.shape[0] == c.n_reg_trained
        self.mean_row = np.mean(self.embed, axis=0)                     # (H,)

    def load_attention(self, p, g, has):
        """The attention weights of the layer with prefix p (q/k/v/o biases where the checkpoint has them)."""
        c = self.cfg
        a = p + self.NAMES["attn"]
        ly = {k: g(a + k + "_proj.weight") for k in "qkvo"}              # (nh*hd | nkv*hd | nkv*hd, H), (H, nh*hd)
        assert ly["q"].shape == (c.nh * c.hd, c.H) and ly["k"].shape == (c.nkv * c.hd, c.H)
        assert ly["v"].shape == (c.nkv * c.hd, c.H) and ly["o"].shape == (c.H, c.nh * c.hd)
        ly.update({k + "_b": g(a + k + "_proj.bias") for k in "qkvo" if has(a + k + "_proj.bias")})  # (out,)
        ly["sinks"] = g(a + "sinks") if has(a + "sinks") else None       # (nh,)
        return ly

    def load_mamba(self, m, g, has):
        """The Mamba (v1) mixer weights under prefix m (".mamba.")."""
        c = self.cfg
        ly = dict(in_w=g(m + "in_proj.weight"), conv_w=g(m + "conv1d.weight")[:, 0, :],    # (2Di, H), (Di, W)
                  x_w=g(m + "x_proj.weight"), dt_norm=g(m + "dt_layernorm.weight"),          # (R+2N, Di), (R,)
                  b_norm=g(m + "b_layernorm.weight"), c_norm=g(m + "c_layernorm.weight"),    # (N,), (N,)
                  dt_w=g(m + "dt_proj.weight"), dt_b=g(m + "dt_proj.bias"),                  # (Di, R), (Di,)
                  A=-np.exp(g(m + "A_log")), D=g(m + "D"), out_w=g(m + "out_proj.weight"))   # (Di, N), (Di,), (H, Di)
        opt = lambda n: g(m + n) if has(m + n) else None  # noqa: E731
        ly.update(in_b=opt("in_proj.bias"), conv_b=opt("conv1d.bias"), out_b=opt("out_proj.bias"))
        assert ly["in_w"].shape == (2 * c.Di, c.H) and ly["conv_w"].shape == (c.Di, c.W)
        assert ly["x_w"].shape == (c.R + 2 * c.N, c.Di) and ly["A"].shape == (c.Di, c.N)
        assert (ly["in_b"] is not None) == c.proj_bias and (ly["conv_b"] is not None) == c.conv_bias
        return ly

    CONFIG = JambaConfig
    NAMES = dict(embed="model.embed_tokens.weight", final_norm="model.final_layernorm.weight",
                 registers="model.register_tokens", attn="self_attn.")

    @classmethod
    def load(cls, folder, dtype=np.float64):
        cfg = cls.CONFIG.from_file(os.path.join(folder, "config.json"))
        tensors, _ = load_tensors(folder)
        return cls(cfg, tensors, dtype)

    # -- per-run settings ------------------------------------------------------------------------

    def layer_normalizer(self, i, override):
        """(kind, null_logit (nh,)) of attention layer i: trace-format.md §2."""
        ly, nh = self.layers[i], self.cfg.nh
        if override is None:
            kind = "sink" if ly["sinks"] is not None else self.cfg.normalizer
        else:
            kind = override
        if kind == "softmax":
            return kind, np.full(nh, -np.inf, self.dt)
        if kind == "softmax1":
            return kind, np.zeros(nh, self.dt)
        assert kind == "sink"
        return kind, (ly["sinks"] if ly["sinks"] is not None else np.zeros(nh, self.dt))

    def register_rows(self, registers):
        n = self.cfg.n_reg_trained if registers is None else int(registers)
        rows = [self.registers_trained[j] for j in range(min(n, self.cfg.n_reg_trained))]
        rows += [self.mean_row] * (n - len(rows))
        return np.array(rows, dtype=self.dt).reshape(n, self.cfg.H)      # (n_reg, H)

    # -- blocks shared by both paths (row-wise, no state) -----------------------------------------

    @staticmethod
    def mlp(x, gate, up, down):                                          # x (S, H)
        return (silu(x @ gate.T) * (x @ up.T)) @ down.T                  # (S, H)

    def feed_forward(self, ly, x):
        """Returns (out (S,H), router info or None). jamba-spec.md §3.8-3.9."""
        if not ly["moe"]:
            return self.mlp(x, *ly["mlp"]), None
        c = self.cfg
        logits = x @ ly["router"].T                                      # (S, E)
        mx = np.max(logits, axis=-1, keepdims=True)
        ex = np.exp(logits - mx)
        probs = ex / np.sum(ex, axis=-1, keepdims=True)                  # (S, E), all E, not renormalised
        lse = mx[:, 0] + np.log(np.sum(ex, axis=-1))                     # (S,)
        # top-k by probability, ties broken by the lower expert index (stable sort of -p)
        topk = np.argsort(-probs, axis=-1, kind="stable")[:, :c.K]       # (S, K)
        out = np.zeros_like(x)
        for e in range(c.E):                                             # ascending expert index
            rows, ranks = np.nonzero(topk == e)
            if rows.size == 0:
                continue
            y = self.mlp(x[rows], *ly["experts"][e])                     # (n_e, H)
            out[rows] += y * probs[rows, e][:, None]
        return out, dict(probs=probs, topk=topk, lse=lse)

    def mamba_post_conv(self, ly, u, z):
        """From the post-conv, post-SiLU u (S, Di) and gate z (S, Di): dt (S, Di), B, C (S, N)."""
        c = self.cfg
        p = u @ ly["x_w"].T                                              # (S, R+2N)
        dt_r, Bm, Cm = p[:, :c.R], p[:, c.R:c.R + c.N], p[:, c.R + c.N:]
        dt_r = rmsnorm(dt_r, ly["dt_norm"], c.eps)
        Bm = rmsnorm(Bm, ly["b_norm"], c.eps)
        Cm = rmsnorm(Cm, ly["c_norm"], c.eps)
        dt = softplus(dt_r @ ly["dt_w"].T + ly["dt_b"])                  # (S, Di)
        return dt, Bm, Cm

    def position(self, q, k, pos):
        """Positional encoding of q (nh, S, hd) and k (nkv, S, hd) at positions pos (S,): none in Jamba."""
        return q, k

    def scale_logits(self, z):
        """Attention logits q.k times the softmax scale: 1/sqrt(hd) (Granite: attention_multiplier)."""
        return z / math.sqrt(self.cfg.hd)

    # -- sequence path ---------------------------------------------------------------------------

    def attention_seq(self, ly, x, null):                                # x (S, H), null (nh,)
        c = self.cfg
        S = x.shape[0]
        q = linear(x, ly["q"], ly.get("q_b")).reshape(S, c.nh, c.hd).transpose(1, 0, 2)   # (nh, S, hd)
        k = linear(x, ly["k"], ly.get("k_b")).reshape(S, c.nkv, c.hd).transpose(1, 0, 2)  # (nkv, S, hd)
        v = linear(x, ly["v"], ly.get("v_b")).reshape(S, c.nkv, c.hd).transpose(1, 0, 2)  # (nkv, S, hd)
        q, k = self.position(q, k, np.arange(S))                         # registers at 0..n_reg-1
        kv_of = np.arange(c.nh) // (c.nh // c.nkv)                       # GQA: kv = q_head // (nh/nkv)
        z = self.scale_logits(np.einsum("hqd,hkd->hqk", q, k[kv_of]))    # (nh, S, S)
        causal = np.tril(np.ones((S, S), bool))
        z = np.where(causal[None], z, -np.inf)
        p, p_null = normalize_attention(z, null[:, None, None])          # (nh,S,S), (nh,S)
        o = np.einsum("hqk,hkd->hqd", p, v[kv_of])                       # (nh, S, hd); null value 0
        out = linear(o.transpose(1, 0, 2).reshape(S, c.nh * c.hd), ly["o"], ly.get("o_b"))   # (S, H)
        zabs = np.max(np.where(causal[None], np.abs(z), -np.inf), axis=-1)   # (nh, S): largest |z_j|
        return out, dict(p=p.transpose(1, 0, 2), p_null=p_null.T, zmax=zabs.T)  # (S,nh,S), (S,nh), (S,nh)

    def mamba_seq(self, ly, x):                                          # x (S, H)
        c = self.cfg
        S = x.shape[0]
        xz = linear(x, ly["in_w"], ly["in_b"])                           # (S, 2Di)
        u0, z = xz[:, :c.Di], xz[:, c.Di:]                               # x branch first, gate second
        u = silu(causal_conv(u0, ly["conv_w"], ly["conv_b"]))           # (S, Di)
        dt, Bm, Cm = self.mamba_post_conv(ly, u, z)
        A = ly["A"]                                                      # (Di, N)
        h = np.zeros((c.Di, c.N), self.dt)
        y = np.zeros((S, c.Di), self.dt)
        retained = np.zeros((S, c.Di), self.dt)
        for t in range(S):                                               # selective_scan_ref
            dA = np.exp(dt[t][:, None] * A)                              # (Di, N)
            h = dA * h + (dt[t][:, None] * Bm[t][None, :]) * u[t][:, None]
            y[t] = h @ Cm[t] + ly["D"] * u[t]
            retained[t] = np.mean(dA, axis=1)
        out = linear(y * silu(z), ly["out_w"], ly["out_b"])             # (S, H)
        return out, dict(dt=dt, retained=retained)

    def forward_sequence(self, emb, override):
        """emb (S, H) including registers. Returns raw per-position records."""
        c = self.cfg
        S = emb.shape[0]
        h = emb.copy()
        resid = [h.copy()]                                               # L+1 entries of (S, H)
        attn, mamba, moe = [], [], []
        for i, ly in enumerate(self.layers):
            x = rmsnorm(h, ly["in_norm"], c.eps)
            if ly["attn"]:
                _, null = self.layer_normalizer(i, override)
                o, rec = self.attention_seq(ly, x, null)
                attn.append(rec)
            else:
                o, rec = self.mamba_seq(ly, x)
                mamba.append(rec)
            h = h + o
            f, rinfo = self.feed_forward(ly, rmsnorm(h, ly["ff_norm"], c.eps))
            if rinfo is not None:
                moe.append(rinfo)
            h = h + f
            resid.append(h.copy())
        logits = rmsnorm(h, self.final_norm, c.eps) @ self.head.T        # (S, V)
        return dict(resid=np.stack(resid), logits=logits, attn=attn, mamba=mamba, moe=moe, S=S)

    # -- step path (one position at a time with caches) ------------------------------------------

    def attention_step(self, ly, x, t, cache, null):
        """One query at position t (x (H,)), appending its k, v to cache. Returns o (H,), p (nh, t+1),
        p_null (nh,), largest |z| (nh,)."""
        c = self.cfg
        kv_of = np.arange(c.nh) // (c.nh // c.nkv)
        q, k = self.position(linear(x, ly["q"], ly.get("q_b")).reshape(c.nh, 1, c.hd),
                             linear(x, ly["k"], ly.get("k_b")).reshape(c.nkv, 1, c.hd), [t])
        cache["k"].append(k[:, 0])
        cache["v"].append(linear(x, ly["v"], ly.get("v_b")).reshape(c.nkv, c.hd))
        K = np.stack(cache["k"], axis=1)                                 # (nkv, t+1, hd)
        Vv = np.stack(cache["v"], axis=1)
        z = self.scale_logits(np.einsum("hd,hkd->hk", q[:, 0], K[kv_of]))  # (nh, t+1)
        p, p_null = normalize_attention(z, null[:, None])
        o = linear(np.einsum("hk,hkd->hd", p, Vv[kv_of]).reshape(c.nh * c.hd), ly["o"], ly.get("o_b"))
        return o, p, p_null, np.max(np.abs(z), axis=-1)

    def mamba_state(self):
        """A Mamba layer's decode state: conv window of raw u0 (Di, W), newest last; SSM state (Di, N)."""
        c = self.cfg
        return dict(conv=np.zeros((c.Di, c.W), self.dt), ssm=np.zeros((c.Di, c.N), self.dt))

    def mamba_step(self, ly, x, st):
        """One position x (H,) through a Mamba layer, updating st. Returns o (H,), dt (Di,), retained (Di,)."""
        c = self.cfg
        xz = linear(x, ly["in_w"], ly["in_b"])                           # (2Di,)
        u0, zg = xz[:c.Di], xz[c.Di:]
        cs = np.roll(st["conv"], -1, axis=1)                             # drop the oldest
        cs[:, c.W - 1] = u0                                              # append the newest
        st["conv"] = cs
        cv = np.sum(cs * ly["conv_w"], axis=1)
        if ly["conv_b"] is not None:
            cv = cv + ly["conv_b"]
        u = silu(cv)                                                     # (Di,)
        dt, Bm, Cm = self.mamba_post_conv(ly, u[None], zg[None])
        dt, Bm, Cm = dt[0], Bm[0], Cm[0]
        dA = np.exp(dt[:, None] * ly["A"])                               # selective_state_update_ref
        st["ssm"] = st["ssm"] * dA + (dt[:, None] * Bm[None, :]) * u[:, None]
        y = st["ssm"] @ Cm + ly["D"] * u
        o = ly["out_w"] @ (y * silu(zg))
        if ly["out_b"] is not None:
            o = o + ly["out_b"]
        return o, dt, np.mean(dA, axis=1)

    def step_buffers(self, S):
        """The step path's KV caches (lists of (nkv, hd)), decode states and zeroed records."""
        c, z = self.cfg, lambda *s: np.zeros(s, self.dt)  # noqa: E731
        return ({i: dict(k=[], v=[]) for i in c.attn_layers}, {i: self.mamba_state() for i in c.mamba_layers},
                z(c.L + 1, S, c.H), z(S, c.V),                                       # resid, logits
                [dict(p=z(S, c.nh, S), p_null=z(S, c.nh), zmax=z(S, c.nh)) for _ in c.attn_layers],
                [dict(dt=z(S, c.Di), retained=z(S, c.Di)) for _ in c.mamba_layers],
                [dict(probs=z(S, c.E), topk=np.zeros((S, c.K), np.int64), lse=z(S)) for _ in c.moe_layers])

    def forward_steps(self, emb, override):
        c = self.cfg
        S = emb.shape[0]
        cache, state, resid, logits, attn, mamba, moe = self.step_buffers(S)
        for t in range(S):
            h = emb[t].copy()                                            # (H,)
            resid[0, t] = h
            for i, ly in enumerate(self.layers):
                x = rmsnorm(h, ly["in_norm"], c.eps)
                if ly["attn"]:
                    a = c.attn_layers.index(i)
                    _, null = self.layer_normalizer(i, override)
                    o, p, p_null, zmax = self.attention_step(ly, x, t, cache[i], null)
                    attn[a]["p"][t, :, :t + 1] = p
                    attn[a]["p_null"][t] = p_null
                    attn[a]["zmax"][t] = zmax
                else:
                    m = c.mamba_layers.index(i)
                    o, mamba[m]["dt"][t], mamba[m]["retained"][t] = self.mamba_step(ly, x, state[i])
                h = h + o
                f, rinfo = self.feed_forward(ly, rmsnorm(h, ly["ff_norm"], c.eps)[None])
                if rinfo is not None:
                    for key in ("probs", "topk", "lse"):
                        moe[c.moe_layers.index(i)][key][t] = rinfo[key][0]
                h = h + f[0]
                resid[i + 1, t] = h
            logits[t] = self.head @ rmsnorm(h, self.final_norm, c.eps)
        return dict(resid=resid, logits=logits, attn=attn, mamba=mamba, moe=moe, S=S)

    # -- trace assembly (trace-format.md §3) -----------------------------------------------------

    def ssm_state_elements(self):
        """Elements of one Mamba layer's decode state: conv window (Di, W) + SSM state (Di, N)."""
        return self.cfg.Di * self.cfg.W + self.cfg.Di * self.cfg.N

    def run(self, token_ids, normalizer=None, registers=None, path="sequence"):
        c = self.cfg
        ids = np.asarray(token_ids, np.int64)
        assert ids.ndim == 1 and ids.size > 0 and ids.min() >= 0 and ids.max() < c.V
        assert normalizer in (None, "softmax", "softmax1", "sink")
        regs = self.register_rows(registers)
        n_reg, T = regs.shape[0], ids.size
        emb = np.concatenate([regs, self.embed[ids]])                    # (n_reg+T, H)
        raw = (self.forward_sequence if path == "sequence" else self.forward_steps)(emb, normalizer)
        tok = slice(n_reg, n_reg + T)
        out = {"token_ids": ids.astype(np.int32), "logits": raw["logits"][tok]}
        A_n, M_n, X_n = len(c.attn_layers), len(c.mamba_layers), len(c.moe_layers)
        if A_n:
            ent, entn, mass, zmax = (np.zeros((T, A_n, c.nh)) for _ in range(4))
            rows = np.zeros((T, A_n, c.nh, n_reg + T + 1))
            for a, i in enumerate(c.attn_layers):
                kind, _ = self.layer_normalizer(i, normalizer)
                rec = raw["attn"][a]
                p = rec["p"][tok]                                        # (T, nh, n_reg+T) over keys
                pn = rec["p_null"][tok]                                  # (T, nh)
                ent[:, a] = -np.sum(xlogx(p), axis=-1) - xlogx(pn)
                mass[:, a] = np.sum(p, axis=-1)
                zmax[:, a] = rec["zmax"][tok]
                n_keys = n_reg + np.arange(T) + 1                        # (T,)
                den = np.log(n_keys + (0 if kind == "softmax" else 1)).astype(np.float64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    entn[:, a] = np.where(den[:, None] > 0, ent[:, a] / np.where(den > 0, den, 1.0)[:, None], 0.0)
                rows[:, a, :, :n_reg + T] = p
                rows[:, a, :, n_reg + T] = pn
            out.update(attn_entropy=ent, attn_entropy_norm=entn, attn_mass=mass)
        if M_n:
            out["ssm_delta_mean"] = np.stack([np.mean(r["dt"][tok], axis=1) for r in raw["mamba"]], axis=1)
        if X_n:
            out["router_probs"] = np.stack([r["probs"][tok] for r in raw["moe"]], axis=1)   # (T, X_n, E)
            out["router_topk"] = np.stack([r["topk"][tok] for r in raw["moe"]], axis=1).astype(np.int32)
            out["router_lse"] = np.stack([r["lse"][tok] for r in raw["moe"]], axis=1)
        R = raw["resid"][:, tok].astype(np.float64)                      # (L+1, T, H) tokens only
        r1 = np.zeros((T, c.L + 1))
        for t in range(1, T):
            X = R[:, :t + 1]                                             # (L+1, t+1, H)
            num = np.sqrt(np.sum((X - X.mean(axis=1, keepdims=True)) ** 2, axis=(1, 2)))
            den = np.sqrt(np.sum(X ** 2, axis=(1, 2)))
            r1[t] = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
        out["rank1_distance"] = r1
        out["resid_max_abs"] = np.max(np.abs(R), axis=2).T               # (T, L+1)
        if A_n:
            out["attn_max_logit"] = zmax
        bad = ~np.all(np.isfinite(R[1:]), axis=2)                        # (L, T)
        out["nonfinite_layer"] = np.where(bad.any(axis=0), np.argmax(bad, axis=0), -1).astype(np.int32)
        out["kv_cache_bytes"] = (2 * A_n * c.nkv * c.hd * (n_reg + np.arange(T) + 1) * 4).astype(np.int64)
        out["ssm_state_bytes"] = np.full(T, M_n * self.ssm_state_elements() * 4, np.int64)
        if M_n:
            out["ssm_delta"] = np.stack([r["dt"][tok] for r in raw["mamba"]], axis=1)      # (T, M_n, Di)
            out["ssm_retained"] = np.stack([r["retained"][tok] for r in raw["mamba"]], axis=1)
        if A_n:
            out["attn_rows"] = rows
        return out


TRACE_ORDER = ["token_ids", "logits", "attn_entropy", "attn_entropy_norm", "attn_mass", "ssm_delta_mean",
               "router_probs", "router_topk", "router_lse", "rank1_distance", "resid_max_abs", "attn_max_logit",
               "nonfinite_layer", "kv_cache_bytes", "ssm_state_bytes", "ssm_delta", "ssm_retained", "attn_rows"]


def cli(load, description):
    """Command line of a reference module: run `load(folder)`'s model on --ids and print a trace summary."""
    import argparse
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("checkpoint")
    ap.add_argument("--ids", required=True)
    ap.add_argument("--normalizer", choices=["softmax", "softmax1", "sink"])
    ap.add_argument("--registers", type=int)
    ap.add_argument("--path", choices=["sequence", "step"], default="sequence")
    a = ap.parse_args()
    tr = load(a.checkpoint).run([int(s) for s in a.ids.split(",")], a.normalizer, a.registers, a.path)
    for name in TRACE_ORDER:
        if name in tr:
            v = tr[name]
            print(f"{name:18s} {str(v.shape):22s} {v.dtype}  min {v.min():.6g} max {v.max():.6g}")


if __name__ == "__main__":
    cli(JambaRef.load, "Run the Jamba reference on a checkpoint and print a trace summary.")
