#!/usr/bin/python3
# Reads a HybridLens session file (.hlsession: safetensors + JSON manifest) with only numpy and json,
# prints what it holds, and with --check verifies it independently of the C++ reader: shapes against
# the manifest's config, attention rows summing to 1 (keys + p_null), entropy recomputed from the rows.
import json
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I32": np.int32, "I64": np.int64}


def read_session(path):
    """Returns (manifest dict, {tensor name: numpy array}); BF16 tensors are widened to float32."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    manifest = json.loads(header.pop("__metadata__")["hybridlens_session"])
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        a = np.frombuffer(raw[8 + n + begin:8 + n + end], DTYPES[t["dtype"]]).reshape(t["shape"])
        tensors[name] = (a.astype(np.uint32) << 16).view(np.float32) if t["dtype"] == "BF16" else a
    return manifest, tensors


def layer_counts(c):
    L = c["num_hidden_layers"]
    attn = [i for i in range(L) if i % c["attn_layer_period"] == c["attn_layer_offset"]]
    moe = [i for i in range(L) if c["num_experts"] > 1 and i % c["expert_layer_period"] == c["expert_layer_offset"]]
    return len(attn), L - len(attn), len(moe)


def check(manifest, tensors):
    """Independent checks; returns a list of problems (empty when the file is consistent)."""
    problems = []
    c = manifest["config"]
    An, Mn, Xn = layer_counts(c)
    nh, V, L = c["num_attention_heads"], c["vocab_size"], c["num_hidden_layers"]
    Di = c["mamba_expand"] * c["hidden_size"]
    per_token = {"logits": (V,), "attn_entropy": (An, nh), "attn_entropy_norm": (An, nh), "attn_mass": (An, nh),
                 "attn_max_logit": (An, nh), "ssm_delta_mean": (Mn,), "router_probs": (Xn, c["num_experts"]),
                 "router_topk": (Xn, c["num_experts_per_tok"]), "router_lse": (Xn,), "rank1_distance": (L + 1,),
                 "resid_max_abs": (L + 1,), "ssm_delta": (Mn, Di), "ssm_retained": (Mn, Di)}
    if tensors["tokens"].shape != (manifest["n_tokens"],):
        problems.append("tokens: shape %s, manifest n_tokens %d" % (tensors["tokens"].shape, manifest["n_tokens"]))
    for run in manifest["runs"]:
        lab, T, R = run["label"], run["n_tokens"], run["n_reg"]
        for field in run["fields"]:
            a = tensors.get("runs/%s/%s" % (lab, field))
            want = (T,) + per_token.get(field, ())
            if field == "attn_rows":
                want = (T, An, nh, R + T + 1)
            if a is None or a.shape != want:
                problems.append("run %s %s: shape %s, expected %s" % (lab, field, None if a is None else a.shape, want))
        if "attn_rows" in run["fields"] and "attn_rows" not in run.get("absent", {}):
            rows = tensors["runs/%s/attn_rows" % lab].astype(np.float64)  # (T, A_n, nh, n_reg + T + 1)
            mass = rows.sum(axis=-1)                                        # keys + p_null: 1 for every row
            p = np.where(rows > 0, rows, 1.0)
            entropy = -(rows * np.log(p)).sum(axis=-1)                      # nats, keys and p_null
            stored = tensors["runs/%s/attn_entropy" % lab].astype(np.float64)
            tol = 1e-5 if rows.dtype == np.float32 and tensors["runs/%s/attn_rows" % lab].dtype == np.float32 else 2e-2
            if T and np.max(np.abs(mass - 1)) > tol:
                problems.append("run %s: attention rows sum to %g..%g, expected 1" % (lab, mass.min(), mass.max()))
            if T and np.max(np.abs(entropy - stored)) > tol * max(1.0, np.log(R + T + 1)):
                problems.append("run %s: entropy from attn_rows differs from attn_entropy by %g"
                                % (lab, np.max(np.abs(entropy - stored))))
    return problems


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print("usage: read_session.py FILE.hlsession [--check]")
        return 0 if len(argv) >= 2 else 2
    manifest, tensors = read_session(argv[1])
    ck = manifest["checkpoint"]
    print("format_version %d, checkpoint %s (config sha256 %s...), %d tokens, prompt %r"
          % (manifest["format_version"], ck["name"], ck["config_sha256"][:12], manifest["n_tokens"], manifest["prompt"]))
    for run in manifest["runs"]:
        s = run["settings"]
        print("run %s: %d tokens, normalizer %s, %d registers, backend %s, %.2f ms/token"
              % (run["label"], run["n_tokens"], s["normalizer"], run["n_reg"], s["backend"],
                 1e3 * run["timings"]["run_seconds"] / max(1, run["n_tokens"])))
    for name in sorted(tensors):
        print("  %-28s %-5s %s" % (name, str(tensors[name].dtype), tuple(tensors[name].shape)))
    if "--check" in argv[2:]:
        problems = check(manifest, tensors)
        for p in problems:
            print("problem:", p)
        print("check:", "ok" if not problems else "%d problem(s)" % len(problems))
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
