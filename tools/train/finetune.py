"""LoRA / DoRA wrappers (PEFT semantics, jamba-spec.md §5.4) and the ΔM–ΔD measurement
(trace-format.md §4 `hybridlens dora`, Liu et al. 2024)."""
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn

# PEFT target_modules: an entry matches a module path equal to it or ending with "." + entry.
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj", "out_proj",
                  "feed_forward.gate_proj", "feed_forward.up_proj", "feed_forward.down_proj"]


def targeted(path):
    return any(path == t or path.endswith("." + t) for t in TARGET_MODULES)


class LoraLinear(nn.Module):
    """Replaces an nn.Linear: W' = W0 + s·B·A (LoRA) or m · (W0 + s·B·A) / ‖W0 + s·B·A‖_row (DoRA,
    the norm detached as in PEFT's DoraLinearLayer). W0 frozen."""

    def __init__(self, base, r, alpha, dora, gen):
        super().__init__()
        self.base = base
        for p in base.parameters():
            p.requires_grad_(False)
        out_f, in_f = base.weight.shape
        self.s = alpha / r
        self.dora = dora
        bound = 1.0 / math.sqrt(in_f)  # kaiming_uniform_(a=sqrt(5)) as PEFT initialises lora_A
        self.lora_A = nn.Parameter((torch.rand(r, in_f, generator=gen) * 2 - 1) * bound)
        self.lora_B = nn.Parameter(torch.zeros(out_f, r))
        if dora:
            self.magnitude = nn.Parameter(base.weight.detach().norm(dim=1).clone())

    def effective_weight(self):
        V = self.base.weight + self.s * (self.lora_B @ self.lora_A)
        if not self.dora:
            return V
        norm = V.norm(dim=1).detach()
        return (self.magnitude / norm).unsqueeze(1) * V


def attach_adapters(model, r, alpha, dora, seed):
    gen = torch.Generator().manual_seed(seed)
    adapted = {}
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            path = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and targeted(path):
                w = LoraLinear(child, r, alpha, dora, gen)
                setattr(mod, child_name, w)
                adapted[path] = w
    for p in model.parameters():
        p.requires_grad_(False)
    for w in adapted.values():
        w.lora_A.requires_grad_(True)
        w.lora_B.requires_grad_(True)
        if dora:
            w.magnitude.requires_grad_(True)
    return adapted


def delta_m_d(W0, W1):
    """trace-format.md §4: per output row j (norm over the input dim),
    ΔM = mean_j |‖W'_j‖ − ‖W0_j‖|, ΔD = mean_j (1 − cos(W'_j, W0_j)). float64."""
    W0 = np.asarray(W0, dtype=np.float64)
    W1 = np.asarray(W1, dtype=np.float64)
    n0 = np.linalg.norm(W0, axis=1)
    n1 = np.linalg.norm(W1, axis=1)
    cos = (W0 * W1).sum(1) / np.maximum(n0 * n1, 1e-300)
    return float(np.mean(np.abs(n1 - n0))), float(np.mean(1.0 - cos))


def adapter_weights(base_sd, adapter_sd, r, alpha, dora):
    """W' per adapted module from the stored tensors (PEFT merge semantics, fp64)."""
    s = alpha / r
    out = {}
    for k in adapter_sd:
        if not k.endswith(".lora_A.weight"):
            continue
        path = k[len("base_model.model."):-len(".lora_A.weight")]
        A = adapter_sd[k].double().numpy()
        B = adapter_sd[f"base_model.model.{path}.lora_B.weight"].double().numpy()
        W0 = base_sd[path + ".weight"].double().numpy()
        V = W0 + s * (B @ A)
        if dora:
            m = adapter_sd[f"base_model.model.{path}.lora_magnitude_vector"].double().numpy()
            V = (m / np.linalg.norm(V, axis=1))[:, None] * V
        out[path] = (W0, V)
    return out


def slope(points):
    """Least-squares slope b of ΔM = a + b·ΔD."""
    x = np.array([p[1] for p in points])
    y = np.array([p[0] for p in points])
    if len(x) < 2 or np.var(x) == 0:
        return float("nan")
    return float(np.cov(x, y, bias=True)[0, 1] / np.var(x))


def module_kind(module):
    """'layers.3.feed_forward.experts.5.up_proj' style names -> 'experts.up_proj' etc."""
    parts = module.split(".")
    if "experts" in parts:
        return "experts." + parts[-1]
    return ".".join(parts[-2:]) if parts[-2] == "feed_forward" else parts[-1]


def stored_step_pairs(base_sd, step_dir, method, read_safetensors):
    """(module path, W0, W') of every matrix a stored fine-tuning step changed: a full fine-tune's
    every 2-D layer weight (model.layers.*), an adapter's every adapted module (PEFT merge, fp64).
    Sorted by path."""
    if method == "full":
        sd1 = read_safetensors(os.path.join(step_dir, "model.safetensors"))
        return [(k[len("model.layers."):-len(".weight")], base_sd[k].double().numpy(), sd1[k].double().numpy())
                for k in sorted(base_sd)
                if k.startswith("model.layers.") and k.endswith(".weight") and base_sd[k].dim() == 2]
    with open(os.path.join(step_dir, "adapter_config.json")) as fh:
        acfg = json.load(fh)
    asd = read_safetensors(os.path.join(step_dir, "adapter_model.safetensors"))
    merged = adapter_weights(base_sd, asd, acfg["r"], acfg["lora_alpha"], acfg["use_dora"])
    return [(k[len("model.layers."):] if k.startswith("model.layers.") else k, *merged[k]) for k in sorted(merged)]


def within_slope(rows):
    """The slope of ΔM on ΔD across layers within each (step, module kind) group, pooled over the
    groups (each group's means removed first; groups of one point add nothing). rows: (group, ΔM, ΔD).
    This is the comparison of Liu et al. 2024's Figure 2 — one matrix type's layers at one
    training step — without the drift that makes ΔM and ΔD grow together over the steps."""
    groups = {}
    for g, dm, dd in rows:
        groups.setdefault(g, []).append((dm, dd))
    xs, ys = [], []
    for pts in groups.values():
        if len(pts) < 2:
            continue
        a = np.asarray(pts, dtype=np.float64)
        ys.append(a[:, 0] - a[:, 0].mean())
        xs.append(a[:, 1] - a[:, 1].mean())
    if not xs:
        return float("nan")
    x, y = np.concatenate(xs), np.concatenate(ys)
    sxx = float((x * x).sum())
    return float((x * y).sum() / sxx) if sxx > 0 else float("nan")
