#!/usr/bin/python3
"""Generates tests/golden/adapters/: tiny PEFT adapters for the golden checkpoints and their expected ΔM/ΔD.

What it is: seeded random LoRA / DoRA factors written in PEFT's saved layout (jamba-spec.md §5.1-5.3:
adapter_config.json with sort_keys, adapter_model.safetensors with base_model.model.{P}.lora_A.weight etc.),
a "fine-tuned" copy of gqa_basic for `--tuned`, and the expected rows computed by dora_ref.py from the
files as written (so stored bf16 rounding is part of the expectation). What it is not: a trainer.
References: jamba-spec.md §5, trace-format.md §4 (`hybridlens dora`), Liu et al. 2024.

  dora/        gqa_basic base; DoRA, r 4, alpha 8, rank_pattern + alpha_pattern, one lora_A stored BF16;
               expected_merged.safetensors holds the merged W_merged (F32) of every adapted module.
  lora/        gqa_basic base; plain LoRA with use_rslora, target_modules as a regex, rank_pattern.
  dora_fused/  mixed_sharded base (layer 4 stores fused experts, mixed F32/F16/BF16): DoRA on single
               experts of the fused tensors and on attention; expected_merged.safetensors as above.
  tuned/       gqa_basic with every 2-D layer weight perturbed (rows rescaled and rotated, a few unchanged).
Each folder has expected.csv (dora_ref.py, %.17g) and expected_slope.txt.

Usage: /usr/bin/python3 tools/reference/make_dora_golden.py [--golden tests/golden]
Deterministic: rerunning reproduces every file byte for byte.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dora_ref  # noqa: E402
from jamba_ref import load_tensors, read_safetensors  # noqa: E402
from make_golden import write_safetensors  # noqa: E402


def write_adapter(folder, config, factors, bf16=()):
    """factors: {module path: dict(A, B[, m][, bias])}; modules in `bf16` store lora_A as BF16."""
    os.makedirs(folder, exist_ok=True)
    full = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "bias": "none", "fan_in_fan_out": False,
            "lora_dropout": 0.0, "inference_mode": True, "init_lora_weights": True, "modules_to_save": None,
            "layer_replication": None, "layers_to_transform": None, "layers_pattern": None,
            "megatron_config": None, "megatron_core": "megatron.core", "loftq_config": {}, "revision": None,
            "use_dora": False, "use_rslora": False, "lora_bias": False, "rank_pattern": {}, "alpha_pattern": {}}
    full.update(config)
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump(full, f, indent=2, sort_keys=True)
        f.write("\n")
    f32, b16 = [], []
    for path, parts in factors.items():
        p = "base_model.model." + path
        (b16 if path in bf16 else f32).append((p + ".lora_A.weight", "BF16" if path in bf16 else "F32", parts["A"]))
        f32.append((p + ".lora_B.weight", "F32", parts["B"]))
        if "bias" in parts:
            f32.append((p + ".lora_B.bias", "F32", parts["bias"]))
        if "m" in parts:
            f32.append((p + ".lora_magnitude_vector", "F32", parts["m"]))
    write_safetensors(os.path.join(folder, "adapter_model.safetensors"), f32 + b16)  # 4-byte tensors first


def random_factors(rng, base, paths, rank_of, dora):
    out = {}
    for path in paths:
        w0 = base[path + ".weight"].astype(np.float64)
        rows, cols = w0.shape
        r = rank_of(path)
        parts = {"A": (rng.standard_normal((r, cols)) / np.sqrt(cols)).astype(np.float32),
                 "B": (0.05 * rng.standard_normal((rows, r))).astype(np.float32)}
        if dora:  # a trained magnitude: the row norms of W0 rescaled by 1 ± ~10 %
            parts["m"] = (np.linalg.norm(w0, axis=1) * (1 + 0.1 * rng.standard_normal(rows))).astype(np.float32)
        out[path] = parts
    return out


def finish(folder, base_dir, merged_too=True):
    rows, merged = dora_ref.rows_adapter(base_dir, folder)
    with open(os.path.join(folder, "expected.csv"), "w") as f:
        f.write(dora_ref.csv_text(rows))
    with open(os.path.join(folder, "expected_slope.txt"), "w") as f:
        f.write("%.17g\n" % dora_ref.slope(rows))
    if merged_too:
        write_safetensors(os.path.join(folder, "expected_merged.safetensors"),
                          [(p + ".weight", "F32", w.astype(np.float32)) for p, w in merged.items()])
    return rows


def make_dora(golden, rng):
    base_dir = os.path.join(golden, "gqa_basic")
    base, _ = load_tensors(base_dir)
    folder = os.path.join(golden, "adapters", "dora")
    paths = ["model.layers.0.mamba.in_proj", "model.layers.0.mamba.x_proj", "model.layers.0.mamba.dt_proj",
             "model.layers.0.mamba.out_proj", "model.layers.0.feed_forward.router",
             "model.layers.0.feed_forward.experts.2.up_proj", "model.layers.1.self_attn.q_proj",
             "model.layers.1.self_attn.v_proj", "model.layers.1.feed_forward.down_proj",
             "model.layers.2.mamba.in_proj", "model.layers.3.self_attn.q_proj", "model.layers.3.self_attn.o_proj"]
    # First matching key wins (file order = sorted order, as PEFT writes it): layer 1's q_proj gets 2,
    # every in_proj 6 (layer 0 too: "in_proj" precedes its own key), the rest r = 4; dt_proj gets alpha 3.
    cfg = {"r": 4, "lora_alpha": 8, "use_dora": True,
           "rank_pattern": {"in_proj": 6, "model.layers.0.mamba.in_proj": 5, "model.layers.1.self_attn.q_proj": 2},
           "alpha_pattern": {"mamba\\.dt_proj": 3},
           "target_modules": ["in_proj", "x_proj", "dt_proj", "out_proj", "router", "up_proj", "q_proj", "v_proj",
                              "o_proj", "down_proj"]}
    rank = lambda p: 6 if p.endswith("in_proj") else 2 if p == "model.layers.1.self_attn.q_proj" else 4  # noqa: E731
    write_adapter(folder, cfg, random_factors(rng, base, paths, rank, True), bf16=("model.layers.2.mamba.in_proj",))
    return finish(folder, base_dir)


def make_lora(golden, rng):
    base_dir = os.path.join(golden, "gqa_basic")
    base, _ = load_tensors(base_dir)
    folder = os.path.join(golden, "adapters", "lora")
    paths = ["model.layers.0.mamba.out_proj", "model.layers.0.feed_forward.experts.0.gate_proj",
             "model.layers.0.feed_forward.experts.3.gate_proj", "model.layers.1.self_attn.q_proj",
             "model.layers.1.self_attn.k_proj", "model.layers.2.mamba.out_proj",
             "model.layers.2.feed_forward.experts.1.gate_proj", "model.layers.3.self_attn.k_proj"]
    cfg = {"r": 8, "lora_alpha": 16, "use_rslora": True,
           "rank_pattern": {"k_proj": 4}, "alpha_pattern": {"experts\\.[13]\\.gate_proj": 4},
           "target_modules": "model\\.layers\\.[0-3]\\.(self_attn\\.(q|k)_proj|mamba\\.out_proj|"
                             "feed_forward\\.experts\\.[0-9]+\\.gate_proj)"}
    rank = lambda p: 4 if p.endswith("k_proj") else 8  # noqa: E731
    write_adapter(folder, cfg, random_factors(rng, base, paths, rank, False))
    return finish(folder, base_dir, merged_too=False)


def make_dora_fused(golden, rng):
    base_dir = os.path.join(golden, "mixed_sharded")
    tensors, _ = load_tensors(base_dir)
    views = dora_ref.expert_views(tensors)
    base = {p + ".weight": w for p, w in views.items()}
    folder = os.path.join(golden, "adapters", "dora_fused")
    paths = ["model.layers.3.self_attn.q_proj", "model.layers.4.feed_forward.router",
             "model.layers.4.feed_forward.experts.1.gate_proj", "model.layers.4.feed_forward.experts.2.up_proj",
             "model.layers.4.feed_forward.experts.3.down_proj", "model.layers.7.feed_forward.experts.0.down_proj"]
    cfg = {"r": 3, "lora_alpha": 5, "use_dora": True, "use_rslora": True,
           "target_modules": ["q_proj", "gate_proj", "up_proj", "down_proj", "router"]}
    write_adapter(folder, cfg, random_factors(rng, base, paths, lambda p: 3, True))
    # dora_ref.rows_adapter reads per-expert names only; give it the split views of the fused base.
    modules_cfg, modules = dora_ref.read_adapter(folder)
    rows, merged = [], {}
    for path in paths:
        w0 = views[path].astype(np.float64)
        w1 = dora_ref.adapted_weight(modules_cfg, path, modules[path], w0)
        merged[path] = w1
        layer, module = dora_ref.split_module(path)
        rows.append((layer, module) + dora_ref.row_deltas(w0, w1))
    with open(os.path.join(folder, "expected.csv"), "w") as f:
        f.write(dora_ref.csv_text(rows))
    with open(os.path.join(folder, "expected_slope.txt"), "w") as f:
        f.write("%.17g\n" % dora_ref.slope(rows))
    write_safetensors(os.path.join(folder, "expected_merged.safetensors"),
                      [(p + ".weight", "F32", w.astype(np.float32)) for p, w in merged.items()])
    return rows


def make_tuned(golden, rng):
    base_dir = os.path.join(golden, "gqa_basic")
    folder = os.path.join(golden, "adapters", "tuned")
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(os.path.join(base_dir, "config.json"), os.path.join(folder, "config.json"))
    tensors, dtypes, _ = read_safetensors(os.path.join(base_dir, "model.safetensors"))
    entries = []
    for k, (name, w) in enumerate(tensors.items()):
        w = w.astype(np.float64)
        if name.startswith("model.layers.") and name.endswith(".weight") and w.ndim == 2 and k % 7 != 3:
            noise = rng.standard_normal(w.shape) * np.std(w) * (0.02 + 0.1 * rng.random())
            scale = 1 + 0.05 * rng.standard_normal((w.shape[0], 1))
            w = scale * (w + noise)
        entries.append((name, dtypes[name], w.astype(np.float32)))
    write_safetensors(os.path.join(folder, "model.safetensors"), entries)
    rows = dora_ref.rows_tuned(base_dir, folder)
    with open(os.path.join(folder, "expected.csv"), "w") as f:
        f.write(dora_ref.csv_text(rows))
    with open(os.path.join(folder, "expected_slope.txt"), "w") as f:
        f.write("%.17g\n" % dora_ref.slope(rows))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "..", "..", "tests", "golden"))
    a = ap.parse_args()
    golden = os.path.normpath(a.golden)
    for name, fn, seed in (("dora", make_dora, 1311), ("lora", make_lora, 1312),
                           ("dora_fused", make_dora_fused, 1313), ("tuned", make_tuned, 1314)):
        rows = fn(golden, np.random.default_rng(seed))
        print(f"{name}: {len(rows)} rows, slope_dM_on_dD {dora_ref.slope(rows):.9g}")


if __name__ == "__main__":
    main()
