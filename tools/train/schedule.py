"""The training loop of tools/train and what a schedule is made of: stages (each its own batches,
learning-rate cosine and optimizer), the recipe file that lists them, and the snapshots that let a
stopped run continue exactly where it stopped (`train_demo.py --resume`)."""
import ctypes
import ctypes.util
import json
import math
import os
import time

import torch

import data

T0 = time.time()


def log(msg):
    el = time.time() - T0
    print(f"[{int(el // 60):3d}:{int(el % 60):02d}] {msg}", flush=True)


def floats(text):
    return tuple(float(x) for x in str(text).split(","))


def ints(text):
    return tuple(int(x) for x in str(text).split(","))


def keep_freed_memory():
    """Asks glibc's allocator to keep freed memory for reuse instead of handing it back to the
    kernel. A training step frees and reallocates the same 16 MiB scan buffers many times; by
    default each one is a fresh mmap whose first touch page-faults every 4 KiB page, which on the
    2-core machines here made a step about twice as slow (1.0 s against 0.5 s, stage-1 rows).
    Numbers are unchanged: only where the buffers live changes. Returns False where the C library
    has no mallopt (not glibc)."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
    ok = libc.mallopt(M_MMAP_THRESHOLD, 32 << 20)   # glibc's largest: blocks up to 32 MiB from the heap
    ok &= libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)  # never shrink the heap below 1 GiB of free top
    ok &= libc.mallopt(M_TOP_PAD, 256 << 20)       # grow it in 256 MiB steps
    return bool(ok)


LR_SCHEDULES = ("cosine", "constant")


def lr_at(step, total, peak, warm, schedule="cosine"):
    """Linear warm-up over `warm` steps, then `peak` held ("constant") or a cosine to peak/10."""
    if step < warm:
        return peak * (step + 1) / warm
    if schedule == "constant":
        return peak
    p = (step - warm) / max(1, total - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(model, lr, wd):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.dim() == 2 and not n.endswith("A_log") and "register_tokens" not in n:
            decay.append(p)
        else:
            no_decay.append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8)


class Progress:
    """Whole-run ETA from the measured seconds per token (stages of different row sizes weighted by
    the tokens of their steps)."""

    def __init__(self, total_tokens):
        self.total = total_tokens
        self.done = 0
        self.t = 0.0
        self.steps = 0

    def tick(self, dt, tokens):
        self.done += tokens
        self.t += dt
        self.steps += 1

    def per_step(self):
        return self.t / max(1, self.steps)

    def eta(self):
        if self.done == 0:
            return "?"
        s = self.t / self.done * max(0, self.total - self.done)
        return f"{int(s // 60)}m{int(s % 60):02d}s"


# ---- stages and recipes

STAGE_KEYS = {"seq": int, "batch": int, "steps": int, "lr": float, "mix": floats, "pairs": ints, "gap": ints}
OPTIONAL_STAGE_KEYS = {"task_weight": float, "keys": str, "lr_schedule": str}


def stage(seq, batch, steps, lr, mix, pairs, gap, task_weight=None, keys=None, lr_schedule=None):
    """One stage of pre-training: `steps` AdamW steps on batches of `batch` rows of `seq` tokens,
    `mix` the shares of text, recall (MQAR) and copy rows and optionally of induction rows
    (data.induction_instance), `pairs` the inclusive range of recall
    pairs per instance, `gap` the range of training-text tokens between pairs and queries; the
    learning rate warms up over a twelfth of the steps to `lr` and follows a cosine to lr/10.
    `task_weight` (optional) replaces --task-weight in this stage (model.loss); `keys` (optional, default
    "letters") picks the recall vocabulary (data.RECALL_KEY_SETS); `lr_schedule` "constant" (optional)
    holds `lr` after the warm-up instead of the cosine."""
    st = {"seq": seq, "batch": batch, "steps": steps, "lr": lr, "mix": mix, "pairs": pairs, "gap": gap}
    out = {k: STAGE_KEYS[k](v) if not isinstance(v, (list, tuple)) else STAGE_KEYS[k](",".join(map(str, v)))
           for k, v in st.items()}
    if task_weight is not None:
        out["task_weight"] = float(task_weight)
    for k, v in (("keys", keys), ("lr_schedule", lr_schedule)):
        if v is not None:
            if not isinstance(v, str):
                raise ValueError(f"{k} must be a string")
            out[k] = v
    return out


def check_stage(st, where):
    """Exits with `where: …` naming the first value of a stage (stage()'s dict) out of its range."""
    if not (st["seq"] > 0 and st["batch"] > 0 and st["steps"] > 0 and st["lr"] > 0):
        raise SystemExit(f"{where}: seq, batch, steps and lr must be positive")
    if len(st["mix"]) not in (3, 4) or min(st["mix"]) < 0 or sum(st["mix"]) <= 0:
        raise SystemExit(f"{where}: mix must be three or four shares >= 0 (text, recall, copy[, induction]), not all 0")
    keys = st.get("keys", "letters")
    if keys not in data.RECALL_KEY_SETS:
        raise SystemExit(f"{where}: keys must be one of {', '.join(data.RECALL_KEY_SETS)}, not {keys!r}")
    if st.get("lr_schedule", "cosine") not in LR_SCHEDULES:
        raise SystemExit(f"{where}: lr_schedule must be one of {', '.join(LR_SCHEDULES)}, not {st['lr_schedule']!r}")
    top = data.MAX_PAIRS[keys]
    if len(st["pairs"]) != 2 or not 1 <= st["pairs"][0] <= st["pairs"][1] <= top:
        raise SystemExit(f"{where}: pairs must be a range lo <= hi within 1..{top} (the {keys} recall keys)")
    if len(st["gap"]) != 2 or not 0 <= st["gap"][0] <= st["gap"][1]:
        raise SystemExit(f"{where}: gap must be a range 0 <= lo <= hi")
    if not 0 <= st.get("task_weight", 0.5) <= 1:
        raise SystemExit(f"{where}: task_weight must be within 0..1")


def read_recipe(path):
    """A recipe file: {"about": text, "defaults": {option: value}, "stages": [{seq, batch, steps, lr,
    mix, pairs, gap}, …]}. `defaults` are command-line defaults (names as argparse stores them:
    ft_steps, task_weight, …); the command line still overrides them. Errors name the file and key."""
    with open(path) as fh:
        r = json.load(fh)
    if not isinstance(r, dict) or not isinstance(r.get("stages"), list) or not r["stages"]:
        raise SystemExit(f"{path}: a recipe needs a non-empty list 'stages'")
    stages = []
    for i, s in enumerate(r["stages"]):
        if not isinstance(s, dict) or not set(STAGE_KEYS) <= set(s) <= set(STAGE_KEYS) | set(OPTIONAL_STAGE_KEYS):
            raise SystemExit(f"{path}: stage {i} must have the keys {sorted(STAGE_KEYS)} "
                             f"and may have {sorted(OPTIONAL_STAGE_KEYS)}")
        try:
            stages.append(stage(**s))
        except (TypeError, ValueError) as e:
            raise SystemExit(f"{path}: stage {i}: {e}") from None
        check_stage(stages[-1], f"{path}: stage {i}")
    defaults = r.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SystemExit(f"{path}: 'defaults' must be an object")
    return stages, defaults


# ---- snapshots


class Snapshot:
    """A variant's training state in one file (model, optimizer, batch generator, history, stage and
    step), replaced atomically at every logged step (where the loop's running sums are empty), so
    that a stopped run continues with the same batches and updates it would have made: nothing in a
    step is random but the batches."""

    def __init__(self, path):
        self.path = path

    def load(self):
        if self.path is None or not os.path.exists(self.path):
            return None
        return torch.load(self.path, weights_only=False)

    def save(self, state):
        if self.path is None:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, self.path)


def train_loop(model, params_model, batch_fn, steps, peak_lr, warm, wd, prog, tag, log_every=25, on_step=None,
               loss_kw=None, resume=None, snapshot=None, lr_schedule="cosine"):
    """AdamW over `steps` batches of batch_fn with gradient clipping at 1. `snapshot(step, opt, hist)`
    is called at every logged step; `resume` is a dict with the opt state dict, hist and step of such
    a call (the model and batch generator already restored): the loop continues after that step.
    Returns the loss history (every log_every steps)."""
    opt = make_optimizer(params_model, peak_lr, wd)
    trainable = [p for p in params_model.parameters() if p.requires_grad]
    hist = []
    start = 0
    if resume is not None:
        opt.load_state_dict(resume["opt"])
        hist = list(resume["hist"])
        start = resume["step"]
    run = {"loss": 0.0, "lm": 0.0, "bal": 0.0, "z": 0.0, "n": 0}
    for step in range(start, steps):
        t = time.time()
        lr = lr_at(step, steps, peak_lr, warm, lr_schedule)
        for g in opt.param_groups:
            g["lr"] = lr
        X, Y = batch_fn()
        loss, lm, aux = model.loss(torch.from_numpy(X), torch.from_numpy(Y), **(loss_kw or {}))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        prog.tick(time.time() - t, X.size)
        run["loss"] += loss.item()
        run["lm"] += lm.item()
        run["bal"] += float(aux["balance"])
        run["z"] += float(aux["z"])
        run["n"] += 1
        logged = (step + 1) % log_every == 0 or step == steps - 1
        if logged:
            n = run["n"]
            rec = {"step": step + 1, "loss": run["loss"] / n, "lm": run["lm"] / n, "balance": run["bal"] / n,
                   "z": run["z"] / n, "lr": lr}
            hist.append(rec)
            log(f"{tag} step {step + 1}/{steps} loss {rec['loss']:.3f} lm {rec['lm']:.3f} "
                f"balance {rec['balance']:.3f} z {rec['z']:.3f} lr {lr:.2e} "
                f"({prog.per_step():.2f} s/step, ETA {prog.eta()})")
            run = {"loss": 0.0, "lm": 0.0, "bal": 0.0, "z": 0.0, "n": 0}
        if snapshot is not None and logged:
            snapshot(step + 1, opt, hist)
        if on_step is not None:
            on_step(step + 1)
    return hist

