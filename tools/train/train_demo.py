#!/usr/bin/python3
"""Trains and exports the HybridLens demo models (issue 4). One command, deterministic:

    /usr/bin/python3 tools/train/train_demo.py            # everything, ~1 h on 2 shared CPU cores

Stages: tokenizer -> 4 variants (baseline, softmax1, registers, no-attention; same data, seed and
schedule) -> held-out recall evaluation -> fine-tunes of baseline on the shifted domain (DoRA, LoRA,
full) -> ΔM–ΔD slopes -> expected logits for the engine test (tests/golden/demo/). Progress and ETA
go to stdout (run it with nohup ... > build-train/train.log).
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import data  # noqa: E402
import export  # noqa: E402
import finetune  # noqa: E402
import model as M  # noqa: E402

SEED = 1234          # model init
DATA_SEED = 4321     # training batches (same stream for every variant)
EVAL_SEED = 777      # held-out recall tasks
VOCAB = 4096

VARIANTS = [
    ("baseline", {}),
    ("softmax1", {"attention_normalizer": "softmax1"}),
    ("registers", {"num_register_tokens": 4}),
    ("no-attention", {"attn_layer_period": 9, "attn_layer_offset": 8}),  # i % 9 == 8: never for i < 8
]

T0 = time.time()


def log(msg):
    el = time.time() - T0
    print(f"[{int(el // 60):3d}:{int(el % 60):02d}] {msg}", flush=True)


def lr_at(step, total, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
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
    """Whole-run ETA from the measured seconds per step (steps of every stage weighted alike)."""

    def __init__(self, total_steps):
        self.total = total_steps
        self.done = 0
        self.t = 0.0

    def tick(self, dt):
        self.done += 1
        self.t += dt

    def eta(self):
        if self.done == 0:
            return "?"
        s = self.t / self.done * (self.total - self.done)
        return f"{int(s // 60)}m{int(s % 60):02d}s"


def train_loop(model, params_model, batch_fn, steps, peak_lr, warm, wd, prog, tag, log_every=25, on_step=None,
               loss_kw=None):
    opt = make_optimizer(params_model, peak_lr, wd)
    trainable = [p for p in params_model.parameters() if p.requires_grad]
    hist = []
    run = {"loss": 0.0, "lm": 0.0, "bal": 0.0, "z": 0.0, "n": 0}
    for step in range(steps):
        t = time.time()
        lr = lr_at(step, steps, peak_lr, warm)
        for g in opt.param_groups:
            g["lr"] = lr
        X, Y = batch_fn()
        loss, lm, aux = model.loss(torch.from_numpy(X), torch.from_numpy(Y), **(loss_kw or {}))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        prog.tick(time.time() - t)
        run["loss"] += loss.item()
        run["lm"] += lm.item()
        run["bal"] += float(aux["balance"])
        run["z"] += float(aux["z"])
        run["n"] += 1
        if (step + 1) % log_every == 0 or step == steps - 1:
            n = run["n"]
            rec = {"step": step + 1, "loss": run["loss"] / n, "lm": run["lm"] / n, "balance": run["bal"] / n,
                   "z": run["z"] / n, "lr": lr}
            hist.append(rec)
            log(f"{tag} step {step + 1}/{steps} loss {rec['loss']:.3f} lm {rec['lm']:.3f} "
                f"balance {rec['balance']:.3f} z {rec['z']:.3f} lr {lr:.2e} "
                f"({prog.t / prog.done:.2f} s/step, ETA {prog.eta()})")
            run = {"loss": 0.0, "lm": 0.0, "bal": 0.0, "z": 0.0, "n": 0}
        if on_step is not None:
            on_step(step + 1)
    return hist


@torch.no_grad()
def round_to_bf16(model):
    for p in model.parameters():
        p.copy_(export.bf16_round(p))


@torch.no_grad()
def eval_recall(model, spec, n_inst, seed):
    model.eval()
    rng = np.random.default_rng(seed)
    out = {"mqar": {}, "copy": {}}
    for n in (2, 4, 8, 12):
        inst = [data.mqar_instance(rng, spec, n) for _ in range(n_inst)]
        X = torch.tensor([a for a, _ in inst])
        m = torch.tensor([b for _, b in inst])
        logits, _ = model(X)
        pred = logits.argmax(-1)[:, :-1]
        tgt = X[:, 1:]
        mm = m[:, :-1]
        out["mqar"][str(n)] = float((pred[mm] == tgt[mm]).float().mean())
    for span in (4, 8, 16):
        inst = [data.copy_instance(rng, spec, span) for _ in range(n_inst)]
        X = torch.tensor([a for a, _ in inst])
        m = torch.tensor([b for _, b in inst])
        logits, _ = model(X)
        pred = logits.argmax(-1)[:, :-1]
        tgt = X[:, 1:]
        mm = m[:, :-1]
        out["copy"][str(span)] = float((pred[mm] == tgt[mm]).float().mean())
    model.train()
    return out


@torch.no_grad()
def eval_text(model, ids, S, n_win, seed):
    model.eval()
    rng = np.random.default_rng(seed)
    X, Y = data.text_batch(rng, ids, S, n_win)
    tot = 0.0
    for i in range(0, n_win, 16):
        _, lm, _ = model.loss(torch.from_numpy(X[i:i + 16]), torch.from_numpy(Y[i:i + 16]))
        tot += lm.item() * len(X[i:i + 16])
    model.train()
    return tot / n_win


def load_checkpoint(path, dtype=torch.float64):
    with open(os.path.join(path, "config.json")) as fh:
        cfg = M.Config.from_hf(json.load(fh))
    model = M.JambaForCausalLM(cfg)
    sd = export.read_safetensors_torch(os.path.join(path, "model.safetensors"))
    model.load_state_dict(sd, strict=True)
    return model.to(dtype)


@torch.no_grad()
def merge_adapter_into(model, adapter_dir):
    with open(os.path.join(adapter_dir, "adapter_config.json")) as fh:
        acfg = json.load(fh)
    asd = export.read_safetensors_torch(os.path.join(adapter_dir, "adapter_model.safetensors"))
    base_sd = {k: v for k, v in model.state_dict().items()}
    merged = finetune.adapter_weights(base_sd, asd, acfg["r"], acfg["lora_alpha"], acfg["use_dora"])
    sd = model.state_dict()
    for path, (_w0, w1) in merged.items():
        sd[path + ".weight"].copy_(torch.from_numpy(w1))
    return model


def block_split(ids, block, every):
    held = np.zeros(len(ids), dtype=bool)
    for b in range(every - 1, len(ids) // block, every):
        held[b * block:(b + 1) * block] = True
    return ids[~held], ids[held]


def module_kind(module):
    """'layers.3.feed_forward.experts.5.up_proj' style names -> 'experts.up_proj' etc."""
    parts = module.split(".")
    if "experts" in parts:
        return "experts." + parts[-1]
    return ".".join(parts[-2:]) if parts[-2] == "feed_forward" else parts[-1]


def golden_tokens(tok):
    ids = [1] + tok.encode("α3β7γ1δ4→γ1β") + tok.encode("The sort command")
    return ids[:12]


def floats(text):
    return tuple(float(x) for x in text.split(","))


def ints(text):
    return tuple(int(x) for x in text.split(","))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "resources", "models"))
    ap.add_argument("--golden", default=os.path.join(REPO, "tests", "golden", "demo"))
    ap.add_argument("--work", default=os.path.join(REPO, "build-train"))
    ap.add_argument("--steps", type=int, default=900, help="training steps per variant")
    ap.add_argument("--ft-steps", type=int, default=60, help="steps per fine-tune")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--mix", default="0.15,0.45,0.4", help="shares of text, recall (MQAR) and copy rows")
    ap.add_argument("--pairs", default="2,8", help="MQAR pairs per instance, inclusive range")
    ap.add_argument("--gap", default="0,0", help="held-out-free text filler between MQAR pairs and queries, tokens")
    ap.add_argument("--task-weight", type=float, default=None,
                    help="mix the text rows' and the task rows' mean losses (1-w):w (default: one mean over all labels)")
    ap.add_argument("--eval-instances", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; 1 is fastest on a loaded 2-core machine (OpenMP barriers)")
    ap.add_argument("--scan", choices=["fused", "chunked"], default="fused")
    ap.add_argument("--variants", default=",".join(v for v, _ in VARIANTS))
    ap.add_argument("--skip-finetune", action="store_true")
    ap.add_argument("--golden-only", action="store_true", help="only rewrite tests/golden/demo from the shipped files")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    M.SCAN["impl"] = args.scan
    if args.golden_only:
        write_golden(args, data.Tokenizer(os.path.join(args.work, "tok", "tokenizer.model")))
        return
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    metrics_path = os.path.join(args.out, "metrics.json")
    metrics = {}
    if os.path.exists(metrics_path):
        with open(metrics_path) as fh:
            metrics = json.load(fh)

    # ---- data and tokenizer
    base_text = data.load_sources(data.BASE_SOURCES)
    shift_text = data.load_sources(data.SHIFT_SOURCES)
    tok_model = data.train_tokenizer(os.path.join(args.work, "tok"), base_text, shift_text, VOCAB)
    tok = data.Tokenizer(tok_model)
    base_ids = data.encode_corpus(tok, base_text)
    shift_ids = data.encode_corpus(tok, shift_text)
    nb = int(len(base_ids) * 0.95)
    base_train, base_val = base_ids[:nb], base_ids[nb:]
    # The end of the Wget manual is its licence text and index, so its held-out part is every
    # 10th block of 1024 tokens rather than the tail.
    shift_train, shift_val = block_split(shift_ids, 1024, 10)
    spec = data.TaskSpec(tok)
    log(f"tokenizer: vocab {len(tok.vocab)}; base text {len(base_ids)} tokens, shifted {len(shift_ids)}; "
        f"recall sample {[tok.vocab[i] for i in tok.encode('α3β7→β')]}")
    metrics["data"] = {"base_tokens": int(len(base_ids)), "shift_tokens": int(len(shift_ids)), "vocab": len(tok.vocab),
                       "batch": args.batch, "seq": args.seq, "steps": args.steps, "ft_steps": args.ft_steps,
                       "lr": args.lr, "mix": floats(args.mix), "pairs": ints(args.pairs), "gap": ints(args.gap),
                       "task_weight": args.task_weight}

    variants = [(n, o) for n, o in VARIANTS if n in args.variants.split(",")]
    ft_total = 0 if args.skip_finetune else 3 * args.ft_steps
    prog = Progress(len(variants) * args.steps + ft_total)

    for name, over in variants:
        cfg = M.Config(vocab_size=len(tok.vocab), **over)
        torch.manual_seed(SEED)
        model = M.JambaForCausalLM(cfg)
        batcher = data.Batcher(base_train, spec, args.seq, args.batch, DATA_SEED, mix=floats(args.mix),
                               pairs=ints(args.pairs), gap=ints(args.gap))
        t0 = time.time()
        hist = train_loop(model, model, batcher.next, args.steps, args.lr, max(1, args.steps // 12), 0.1, prog, name,
                          loss_kw=None if args.task_weight is None else {"task_weight": args.task_weight})
        train_s = time.time() - t0
        round_to_bf16(model)
        ev = eval_recall(model, spec, args.eval_instances, EVAL_SEED)
        val = eval_text(model, base_val, args.seq, 64, EVAL_SEED)
        val_shift = eval_text(model, shift_val, args.seq, 64, EVAL_SEED)
        log(f"{name}: recall {json.dumps(ev)} val loss {val:.3f} (shifted {val_shift:.3f}) train {train_s:.0f}s")
        d = os.path.join(args.out, name)
        export.export_checkpoint(model, d, tok_model)
        metrics.setdefault("variants", {})[name] = {"recall": ev, "val_loss": val, "val_loss_shifted": val_shift,
                                                    "train_seconds": train_s, "history": hist,
                                                    "params": sum(p.numel() for p in model.parameters())}
        with open(metrics_path, "w") as fh:
            json.dump(metrics, fh, indent=1)

    if not args.skip_finetune:
        finetunes(args, tok, base_val, shift_train, shift_val, spec, prog, metrics, metrics_path)

    write_golden(args, tok)
    log("done")


def finetunes(args, tok, base_val, shift_train, shift_val, spec, prog, metrics, metrics_path):
    base_dir = os.path.join(args.out, "baseline")
    ft_root = os.path.join(args.out, "finetunes")
    if os.path.isdir(ft_root):
        shutil.rmtree(ft_root)
    base_sd = export.read_safetensors_torch(os.path.join(base_dir, "model.safetensors"))
    r, alpha = 8, 16
    steps = args.ft_steps
    save_adapter = sorted(set([max(1, steps // 8), steps // 4, steps // 2, (3 * steps) // 4, steps]))
    save_full = sorted(set([steps // 4, steps]))
    res = {}
    for method in ("dora", "lora", "full"):
        torch.manual_seed(SEED + 1)
        model = load_checkpoint(base_dir, torch.float32)
        model.train()
        rng = np.random.default_rng(DATA_SEED + 1)
        batch_fn = lambda: data.text_batch(rng, shift_train, args.seq, args.batch)  # noqa: E731
        before = eval_text(model, shift_val, args.seq, 64, EVAL_SEED)
        if method == "full":
            lr = 5e-4

            def on_step(s, model=model):
                if s in save_full:
                    export.export_checkpoint(model, os.path.join(ft_root, "full", f"step-{s}"), os.path.join(base_dir, "tokenizer.model"))
            hist = train_loop(model, model, batch_fn, steps, lr, max(1, steps // 10), 0.0, prog, "ft-full", 10, on_step)
        else:
            lr = 4e-3
            adapted = finetune.attach_adapters(model, r, alpha, method == "dora", SEED + 2)

            def on_step(s, adapted=adapted, method=method):
                if s in save_adapter:
                    export.export_adapter(adapted, os.path.join(ft_root, method, f"step-{s}"), r, alpha, method == "dora",
                                          finetune.TARGET_MODULES, "../../../baseline")
            hist = train_loop(model, model, batch_fn, steps, lr, max(1, steps // 10), 0.0, prog, f"ft-{method}", 10, on_step)
        # Quality of the last stored step (bf16 for full, fp32 adapters merged into the bf16 base).
        if method == "full":
            m2 = load_checkpoint(os.path.join(ft_root, "full", f"step-{steps}"), torch.float32)
        else:
            m2 = merge_adapter_into(load_checkpoint(base_dir, torch.float64), os.path.join(ft_root, method, f"step-{steps}")).float()
        after = eval_text(m2, shift_val, args.seq, 64, EVAL_SEED)
        after_base = eval_text(m2, base_val, args.seq, 64, EVAL_SEED)
        recall = eval_recall(m2, spec, 64, EVAL_SEED)
        # ΔM–ΔD from the stored files.
        per_step = {}
        pooled = []
        by_kind = {}
        for s in (save_full if method == "full" else save_adapter):
            d = os.path.join(ft_root, method, f"step-{s}")
            pts = []
            if method == "full":
                sd1 = export.read_safetensors_torch(os.path.join(d, "model.safetensors"))
                rows = []
                for k in sorted(base_sd):
                    if k.startswith("model.layers.") and k.endswith(".weight") and base_sd[k].dim() == 2:
                        dm, dd = finetune.delta_m_d(base_sd[k].numpy(), sd1[k].numpy())
                        module = k[len("model.layers."):-len(".weight")].split(".", 1)[1]
                        rows.append((k, module, dm, dd))
                pts = [(dm, dd) for _, _, dm, dd in rows]
                for _, module, dm, dd in rows:
                    by_kind.setdefault(module_kind(module), []).append((dm, dd))
                sub = [(dm, dd) for k, _, dm, dd in rows if finetune.targeted(k[:-len(".weight")])]
                per_step[str(s)] = {"slope_all_layer_matrices": finetune.slope(pts), "n_all": len(pts),
                                    "slope_adapter_targets": finetune.slope(sub), "n_targets": len(sub),
                                    "mean_dM": float(np.mean([p[0] for p in pts])), "mean_dD": float(np.mean([p[1] for p in pts]))}
            else:
                with open(os.path.join(d, "adapter_config.json")) as fh:
                    acfg = json.load(fh)
                asd = export.read_safetensors_torch(os.path.join(d, "adapter_model.safetensors"))
                for path, (w0, w1) in sorted(finetune.adapter_weights(base_sd, asd, acfg["r"], acfg["lora_alpha"], acfg["use_dora"]).items()):
                    pts.append(finetune.delta_m_d(w0, w1))
                    by_kind.setdefault(module_kind(path), []).append(pts[-1])
                per_step[str(s)] = {"slope": finetune.slope(pts), "n": len(pts),
                                    "mean_dM": float(np.mean([p[0] for p in pts])), "mean_dD": float(np.mean([p[1] for p in pts]))}
            pooled += pts
        res[method] = {"val_loss_shifted_before": before, "val_loss_shifted_after": after, "val_loss_base_after": after_base,
                       "recall_after": recall, "per_step": per_step, "slope_pooled_over_steps": finetune.slope(pooled),
                       "slope_by_module_kind_pooled_over_steps": {k: {"slope": finetune.slope(v), "n": len(v)}
                                                                  for k, v in sorted(by_kind.items())},
                       "lr": lr, "history": hist}
        log(f"ft-{method}: shifted val {before:.3f} -> {after:.3f}, base val {after_base:.3f}; slopes "
            + json.dumps({k: (v.get('slope', v.get('slope_all_layer_matrices'))) for k, v in per_step.items()})
            + f" pooled {res[method]['slope_pooled_over_steps']:.4f}")
        metrics["finetunes"] = res
        with open(metrics_path, "w") as fh:
            json.dump(metrics, fh, indent=1)


@torch.no_grad()
def write_golden(args, tok):
    """Expected logits of the shipped checkpoints for the engine test: the checkpoint's BF16 values
    in float64, the trainer's model with the sequential scan."""
    os.makedirs(args.golden, exist_ok=True)
    ids = golden_tokens(tok)
    runs = []
    plan = {
        "baseline": [("as_trained", None, None), ("normalizer_softmax1", "softmax1", None), ("normalizer_sink", "sink", None),
                     ("registers_2", None, 2)],
        "softmax1": [("as_trained", None, None), ("normalizer_softmax", "softmax", None), ("registers_1", None, 1)],
        "registers": [("as_trained", None, None), ("registers_0", None, 0), ("registers_2", None, 2), ("registers_6", None, 6),
                      ("normalizer_softmax1", "softmax1", None)],
        "no-attention": [("as_trained", None, None), ("registers_1", None, 1)],
    }
    rel = lambda p: os.path.relpath(p, REPO)  # noqa: E731
    for name, rs in plan.items():
        d = os.path.join(args.out, name)
        if not os.path.isdir(d):
            continue
        model = load_checkpoint(d)
        tensors = {}
        for run, norm, reg in rs:
            logits, _ = model(torch.tensor([ids]), normalizer=norm, registers=reg, sequential=True)
            tensors[f"logits_{run}"] = logits[0].float()
            runs.append({"name": f"{name}/{run}", "checkpoint": rel(d), "adapter": None, "token_ids": ids,
                         "normalizer": norm, "registers": reg, "file": f"{name}.safetensors", "tensor": f"logits_{run}"})
        export.write_safetensors(os.path.join(args.golden, f"{name}.safetensors"), tensors)
    # Fine-tunes: every full fine-tune step, the last adapter step.
    ft_root = os.path.join(args.out, "finetunes")
    tensors = {}
    if os.path.isdir(ft_root):
        for method in ("full", "dora", "lora"):
            mdir = os.path.join(ft_root, method)
            if not os.path.isdir(mdir):
                continue
            steps = sorted(int(s.split("-")[1]) for s in os.listdir(mdir))
            pick = steps if method == "full" else [steps[-1]]
            for s in pick:
                sd = os.path.join(mdir, f"step-{s}")
                if method == "full":
                    model = load_checkpoint(sd)
                    ck, ad = rel(sd), None
                else:
                    model = merge_adapter_into(load_checkpoint(os.path.join(args.out, "baseline")), sd)
                    ck, ad = rel(os.path.join(args.out, "baseline")), rel(sd)
                logits, _ = model(torch.tensor([ids]), sequential=True)
                tn = f"logits_{method}_step_{s}"
                tensors[tn] = logits[0].float()
                runs.append({"name": f"finetunes/{method}/step-{s}", "checkpoint": ck, "adapter": ad, "token_ids": ids,
                             "normalizer": None, "registers": None, "file": "finetunes.safetensors", "tensor": tn})
        export.write_safetensors(os.path.join(args.golden, "finetunes.safetensors"), tensors)
    with open(os.path.join(args.golden, "runs.json"), "w") as fh:
        json.dump({"description": "Expected logits (F32, shape (T, V)) of the shipped demo checkpoints, computed by "
                   "tools/train (the trainer's own model) in float64 from the stored BF16 weights, sequential scan. "
                   "normalizer null = as trained; registers null = trained count; extra registers use the mean "
                   "embedding row; 'sink' on layers without sinks = s_h 0. adapter: PEFT folder merged in fp32/fp64 "
                   "into the checkpoint (not cast back to BF16).",
                   "tolerance_relative": 1e-3, "runs": runs}, fh, indent=1)
    log(f"golden: {len(runs)} runs written to {args.golden}")


if __name__ == "__main__":
    main()
