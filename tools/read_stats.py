#!/usr/bin/python3
# Reads a HybridLens stats file (.hlstats from `hybridlens sweep`: safetensors + JSON manifest) with
# only numpy and json, prints each instrument's shape, count and median, and with --check verifies it
# independently of the C++ reader: counts, histograms and sketches agree, min <= quantiles <= max,
# variance = m2 / count, and the router balance recomputed from the sums; --compare OTHER says whether
# two files hold the same statistics (integers exactly, the rest within 1e-6; resources/docs/stats-format.md).
import json
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def read_stats(path):
    """Returns (manifest dict, {tensor name: numpy array}). Progress files ("storage": "f64-bits")
    keep their doubles as the bits in I64 tensors: those come back as float64."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    manifest = json.loads(header.pop("__metadata__")["hybridlens_stats"])
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        tensors[name] = np.frombuffer(raw[8 + n + begin:8 + n + end], DTYPES[t["dtype"]]).reshape(t["shape"])
    if manifest["storage"] == "f64-bits":
        for name in tensors:
            if name.split(".")[-1] in ("mean", "m2", "var", "min", "max", "quantiles", "prob_sum", "lse_sq_sum", "load",
                                       "importance", "balance_loss", "z_loss", "max_load"):
                tensors[name] = tensors[name].view(np.float64)
    return manifest, tensors


def sketch_quantile(keys, counts, q, gamma, lo, hi):
    """The sketch's q-quantile of one cell as the C++ writer computes it (rank q (n - 1))."""
    n = counts.sum()
    rank, seen = q * (n - 1), 0
    for k, c in zip(keys, counts):
        seen += c
        if seen > rank:
            i = abs(int(k)) - 100000
            v = 0.0 if k == 0 else np.sign(k) * 2.0 * gamma ** i / (gamma + 1.0)
            return min(max(v, lo), hi)
    return hi


def check(manifest, tensors):
    problems = []
    gamma = manifest["sketch"]["gamma"]
    for ins in manifest["instruments"]:
        p, shape = ins["name"], tuple(ins["shape"])
        count = tensors[p + ".count"].reshape(-1)
        if tensors[p + ".count"].shape != shape:
            problems.append("%s: count shape %s, manifest %s" % (p, tensors[p + ".count"].shape, shape))
        hist = tensors[p + ".hist"].reshape(len(count), manifest["histogram_bins"])
        if (hist.sum(axis=1) != count).any():
            problems.append("%s: histogram sums differ from the counts" % p)
        off, keys, cnt = tensors[p + ".sketch_offsets"], tensors[p + ".sketch_keys"], tensors[p + ".sketch_counts"]
        qs = tensors[p + ".quantiles"].reshape(len(count), len(manifest["quantile_levels"])).astype(np.float64)
        lo, hi = tensors[p + ".min"].reshape(-1).astype(np.float64), tensors[p + ".max"].reshape(-1).astype(np.float64)
        var, m2 = tensors[p + ".var"].reshape(-1).astype(np.float64), tensors[p + ".m2"].reshape(-1).astype(np.float64)
        for c in range(len(count)):
            k, n = keys[off[c]:off[c + 1]], cnt[off[c]:off[c + 1]]
            if n.sum() != count[c]:
                problems.append("%s cell %d: sketch holds %d values, count %d" % (p, c, n.sum(), count[c]))
                continue
            if count[c] == 0:
                continue
            for j, q in enumerate(manifest["quantile_levels"]):
                mine = sketch_quantile(k, n, q, gamma, lo[c], hi[c])
                if not (lo[c] <= qs[c, j] <= hi[c]) or abs(mine - qs[c, j]) > 1e-6 * max(1.0, abs(mine)):
                    problems.append("%s cell %d: quantile %g is %g, from the sketch %g" % (p, c, q, qs[c, j], mine))
            if abs(var[c] - m2[c] / count[c]) > 1e-6 * max(1e-12, abs(var[c])):
                problems.append("%s cell %d: var %g, m2 / count %g" % (p, c, var[c], m2[c] / count[c]))
    r = manifest["router"]
    if r["moe_layers"]:
        f = tensors["router.topk_count"] / (tensors["router.tokens"][:, None] * r["top_k"])
        P = tensors["router.prob_sum"].astype(np.float64) / tensors["router.tokens"][:, None]
        balance = r["experts"] * (f * P).sum(axis=1)
        if np.max(np.abs(balance - tensors["router.balance_loss"])) > 1e-5 * max(1.0, np.max(np.abs(balance))):
            problems.append("router: balance_loss differs from E sum f P")
        if (tensors["router.topk_count"].sum(axis=1) != tensors["router.tokens"] * r["top_k"]).any():
            problems.append("router: top-k counts do not sum to tokens x k")
    return problems


def compare(a, b, rel=1e-6):
    """Differences between two stats files' tensors: integer tensors (counts, histograms, sketches)
    must be equal, floating ones within `rel` relative (NaN equal to NaN)."""
    problems = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b or a[name].shape != b[name].shape:
            problems.append("%s: only in one file, or shapes differ" % name)
        elif a[name].dtype.kind in "iu":
            if not np.array_equal(a[name], b[name]):
                problems.append("%s: integers differ" % name)
        elif not np.allclose(a[name], b[name], rtol=rel, atol=0, equal_nan=True):
            d = np.nanmax(np.abs(a[name].astype(np.float64) - b[name]) / np.maximum(np.abs(a[name]), 1e-300))
            problems.append("%s: relative difference %g" % (name, d))
    return problems


def main(argv):
    files = [a for a in argv[1:] if not a.startswith("-")]
    if len(files) != (2 if "--compare" in argv else 1) or "-h" in argv or "--help" in argv:
        print("usage: read_stats.py FILE.hlstats [--check] [--compare OTHER.hlstats]")
        return 0 if "-h" in argv or "--help" in argv else 2
    manifest, tensors = read_stats(files[0])
    if "--compare" in argv:
        problems = compare(tensors, read_stats(files[1])[1])
        for p in problems:
            print("differs:", p)
        print("compare:", "equal (integers exactly, the rest within 1e-6)" if not problems else "%d difference(s)" % len(problems))
        return 1 if problems else 0
    ck = manifest["checkpoint"]
    print("format_version %d, checkpoint %s (config sha256 %s...), %d prompts, %d tokens, sketch accuracy %g"
          % (manifest["format_version"], ck["name"], ck["config_sha256"][:12], manifest["prompts"], manifest["tokens"],
             manifest["sketch"]["relative_accuracy"]))
    median = manifest["quantile_levels"].index(0.5)
    for ins in manifest["instruments"]:
        p = ins["name"]
        q = tensors[p + ".quantiles"]
        med = q[..., median].reshape(-1)
        print("  %-18s %-10s shape %-8s values %-7d median %s" % (p, ins["axes"], tuple(ins["shape"]),
              tensors[p + ".count"].sum(), np.array2string(med[:6], precision=4) + (" ..." if med.size > 6 else "")))
    if manifest["router"]["moe_layers"]:
        print("  router balance_loss per MoE layer:", np.array2string(tensors["router.balance_loss"], precision=4))
    if "--check" in argv[1:]:
        problems = check(manifest, tensors)
        for p in problems:
            print("problem:", p)
        print("check:", "ok" if not problems else "%d problem(s)" % len(problems))
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
