#!/usr/bin/python3
"""Independent numpy reference of `hybridlens dora` (trace-format.md §4): ΔM / ΔD rows per adapted matrix.

What it is: a plain float64 implementation of the PEFT LoRA / DoRA adapted weight (jamba-spec.md §5.4:
V = W0 + s·B·A, W' = m·V/‖V‖ per output row for DoRA, W' = V for LoRA; s = alpha/r or alpha/sqrt(r) with
use_rslora; r and alpha from rank_pattern / alpha_pattern via Python's own `re`, exactly PEFT's
get_pattern_key rule) and of Liu et al. 2024's ΔM = mean_j |‖W'_j‖ − ‖W0_j‖|, ΔD = mean_j (1 − cos(W'_j, W0_j)),
with its own safetensors reader (jamba_ref.py). What it is not: the C++ code, nor a validator of every
corruption case (the C++ tests cover those). References: jamba-spec.md §5, Liu et al. 2024.

Usage: /usr/bin/python3 tools/reference/dora_ref.py --base DIR (--adapter DIR | --tuned DIR) [--out CSV]
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from jamba_ref import load_tensors, read_safetensors  # noqa: E402

PREFIX = "base_model.model."
LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def pattern_value(patterns, name, default):
    """PEFT get_pattern_key: the first key (dict order) with re.match(rf"(.*\\.)?({key})$", name)."""
    for key, value in patterns.items():
        if re.match(rf"(.*\.)?({key})$", name):
            return value
    return default


def split_module(path):
    """'model.layers.3.self_attn.q_proj' -> (3, 'self_attn.q_proj'); 'lm_head' -> (-1, 'lm_head')."""
    m = LAYER_RE.match(path)
    if m:
        return int(m.group(1)), m.group(2)
    return -1, path


def row_deltas(w0, w1):
    """ΔM, ΔD of W' = w1 against W0 = w0, both (out, in) float64; cos = 0 for an all-zero row."""
    n0 = np.linalg.norm(w0, axis=1)
    n1 = np.linalg.norm(w1, axis=1)
    dot = np.sum(w0 * w1, axis=1)
    denom = n0 * n1
    cos = np.where(denom > 0, dot / np.where(denom > 0, denom, 1.0), 0.0)
    return float(np.mean(np.abs(n1 - n0))), float(np.mean(1.0 - cos))


def read_adapter(folder):
    with open(os.path.join(folder, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["peft_type"] == "LORA", "peft_type must be LORA"
    assert not cfg.get("fan_in_fan_out", False), "fan_in_fan_out must be false"
    tensors, _, _ = read_safetensors(os.path.join(folder, "adapter_model.safetensors"))
    modules = {}
    for name, arr in tensors.items():
        assert name.startswith(PREFIX), name
        rest = name[len(PREFIX):]
        for suffix, slot in ((".lora_A.weight", "A"), (".lora_B.weight", "B"), (".lora_B.bias", "bias"),
                             (".lora_magnitude_vector.weight", "m"), (".lora_magnitude_vector", "m")):
            if rest.endswith(suffix):
                modules.setdefault(rest[: -len(suffix)], {})[slot] = arr.astype(np.float64)
                break
        else:
            raise ValueError(f"unexpected tensor {name}")
    return cfg, modules


def adapted_weight(cfg, path, parts, w0):
    """W' (out, in) in float64 from W0 and one module's factors (jamba-spec.md §5.4)."""
    r = pattern_value(cfg.get("rank_pattern") or {}, path, cfg.get("r", 8))
    alpha = pattern_value(cfg.get("alpha_pattern") or {}, path, cfg.get("lora_alpha", 8))
    s = alpha / math.sqrt(r) if cfg.get("use_rslora", False) else alpha / r
    A, B = parts["A"], parts["B"]
    assert A.shape == (r, w0.shape[1]) and B.shape == (w0.shape[0], r), (path, A.shape, B.shape, r)
    v = w0 + s * (B @ A)
    if cfg.get("use_dora", False):
        m = parts["m"]
        return (m / np.linalg.norm(v, axis=1))[:, None] * v
    return v


def base_order(base):
    """Position of every '<path>.weight' in the base checkpoint (the row order of the output)."""
    return {name[: -len(".weight")]: i for i, name in enumerate(base) if name.endswith(".weight")}


def rows_adapter(base_dir, adapter_dir):
    base, _ = load_tensors(base_dir)
    cfg, modules = read_adapter(adapter_dir)
    order = base_order(base)
    rows, merged = [], {}
    for path in sorted(modules, key=lambda p: order[p]):
        w0 = base[path + ".weight"].astype(np.float64)
        w1 = adapted_weight(cfg, path, modules[path], w0)
        merged[path] = w1
        layer, module = split_module(path)
        dm, dd = row_deltas(w0, w1)
        rows.append((layer, module, dm, dd))
    return rows, merged


def expert_views(tensors):
    """Per-expert (name -> matrix) for every 2-D '.weight' in the layers, splitting v5 fused experts."""
    out = {}
    for name, arr in tensors.items():
        if not name.startswith("model.layers."):
            continue
        if name.endswith(".weight") and arr.ndim == 2:
            out[name[: -len(".weight")]] = arr
        elif name.endswith("experts.gate_up_proj") and arr.ndim == 3:
            p = name[: -len("gate_up_proj")]
            inter = arr.shape[1] // 2
            for e in range(arr.shape[0]):
                out[f"{p}{e}.gate_proj"] = arr[e, :inter]
                out[f"{p}{e}.up_proj"] = arr[e, inter:]
        elif name.endswith("experts.down_proj") and arr.ndim == 3:
            p = name[: -len("down_proj")]
            for e in range(arr.shape[0]):
                out[f"{p}{e}.down_proj"] = arr[e]
    return out


def rows_tuned(base_dir, tuned_dir):
    base, _ = load_tensors(base_dir)
    tuned, _ = load_tensors(tuned_dir)
    b, t = expert_views(base), expert_views(tuned)
    rows = []
    for path in sorted(b, key=lambda p: (split_module(p)[0], list(b).index(p))):
        if path not in t or t[path].shape != b[path].shape:
            continue
        layer, module = split_module(path)
        dm, dd = row_deltas(b[path].astype(np.float64), t[path].astype(np.float64))
        rows.append((layer, module, dm, dd))
    return rows


def slope(rows):
    """Least-squares b of ΔM = a + b·ΔD; NaN for fewer than two rows or constant ΔD."""
    if len(rows) < 2:
        return float("nan")
    x = np.array([r[3] for r in rows])
    y = np.array([r[2] for r in rows])
    sxx = np.sum((x - x.mean()) ** 2)
    if not sxx > 0:
        return float("nan")
    return float(np.sum((x - x.mean()) * (y - y.mean())) / sxx)


def csv_text(rows, fmt="%.17g"):
    lines = ["layer,module,delta_m,delta_d"]
    for layer, module, dm, dd in rows:
        lines.append(f"{layer},{module},{fmt % dm},{fmt % dd}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--adapter")
    g.add_argument("--tuned")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = rows_adapter(a.base, a.adapter)[0] if a.adapter else rows_tuned(a.base, a.tuned)
    text = csv_text(rows)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    print(f"slope_dM_on_dD: {slope(rows):.9g}")


if __name__ == "__main__":
    main()
