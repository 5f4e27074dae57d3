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
import multiprocessing
import os
import shutil
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import data  # noqa: E402
import export  # noqa: E402
import finetune  # noqa: E402
import model as M  # noqa: E402
from schedule import (Progress, Snapshot, check_stage, keep_freed_memory, log, read_recipe, stage,  # noqa: E402
                      train_loop)

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


def golden_tokens(tok):
    ids = [1] + tok.encode("α3β7γ1δ4→γ1β") + tok.encode("The sort command")
    return ids[:12]


def parse_args(argv=None):
    """The command line over the defaults of --recipe (if given) over the built-in ones."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--recipe")
    known, _ = pre.parse_known_args(argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--recipe", help="JSON file of stages and option defaults (tools/train/README.md)")
    ap.add_argument("--out", default=os.path.join(REPO, "resources", "models"))
    ap.add_argument("--golden", default=os.path.join(REPO, "tests", "golden", "demo"))
    ap.add_argument("--work", default=os.path.join(REPO, "build-train"))
    ap.add_argument("--steps", type=int, default=900, help="training steps per variant (one stage, no --recipe)")
    ap.add_argument("--ft-steps", type=int, default=60, help="steps per fine-tune")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64, help="row length of the stage (no --recipe), the fine-tunes and the text evaluation")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--mix", default="0.15,0.45,0.4", help="shares of text, recall (MQAR) and copy rows, optionally a fourth: induction rows")
    ap.add_argument("--pairs", default="2,8", help="MQAR pairs per instance, inclusive range")
    ap.add_argument("--gap", default="0,0", help="held-out-free text filler between MQAR pairs and queries, tokens")
    ap.add_argument("--task-weight", type=float, default=None,
                    help="mix the text rows' and the task rows' mean losses (1-w):w (default: one mean over all labels)")
    ap.add_argument("--eval-instances", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads; 1 is fastest on a loaded 2-core machine (OpenMP barriers)")
    ap.add_argument("--jobs", type=int, default=1, help="variants (then fine-tunes) trained by this many processes at once")
    ap.add_argument("--resume", action="store_true",
                    help="keep each variant's training state in WORK/state/ and continue from it after a stop")
    ap.add_argument("--scan", choices=["native", "fused", "chunked"], default="native",
                    help="selective scan: C (scan_native.c, built on first use; the fused one without a C compiler), "
                         "fused or chunked PyTorch")
    ap.add_argument("--variants", default=",".join(v for v, _ in VARIANTS))
    ap.add_argument("--skip-finetune", action="store_true")
    ap.add_argument("--golden-only", action="store_true", help="only rewrite tests/golden/demo from the shipped files")
    stages = None
    if known.recipe:
        stages, defaults = read_recipe(known.recipe)
        dests = {a.dest for a in ap._actions}
        bad = sorted(set(defaults) - dests)
        if bad:
            raise SystemExit(f"{known.recipe}: unknown option(s) in 'defaults': {', '.join(bad)}")
        ap.set_defaults(**defaults)
    args = ap.parse_args(argv)
    if not stages:
        stages = [stage(args.seq, args.batch, args.steps, args.lr, args.mix, args.pairs, args.gap)]
        check_stage(stages[0], "the command line")
    args.stages = stages
    return args


def setup_torch(args):
    keep_freed_memory()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    M.SCAN["impl"] = args.scan


def prepare(args, train_tok):
    """Tokenizer (trained with spm_train when train_tok, else the one in WORK/tok), the token ids of
    the base and shifted texts with their held-out parts, and the task vocabulary."""
    base_text = data.load_sources(data.BASE_SOURCES)
    shift_text = data.load_sources(data.SHIFT_SOURCES)
    tok_model = (data.train_tokenizer(os.path.join(args.work, "tok"), base_text, shift_text, VOCAB) if train_tok
                 else os.path.join(args.work, "tok", "tokenizer.model"))
    tok = data.Tokenizer(tok_model)
    base_ids = data.encode_corpus(tok, base_text)
    shift_ids = data.encode_corpus(tok, shift_text)
    nb = int(len(base_ids) * 0.95)
    # The end of the Wget manual is its licence text and index, so its held-out part is every
    # 10th block of 1024 tokens rather than the tail.
    shift_train, shift_val = block_split(shift_ids, 1024, 10)
    return types.SimpleNamespace(tok=tok, tok_model=tok_model, base_ids=base_ids, shift_ids=shift_ids,
                                 base_train=base_ids[:nb], base_val=base_ids[nb:], shift_train=shift_train,
                                 shift_val=shift_val, spec=data.TaskSpec(tok), specs={})


def spec_for(D, keys):
    """The task vocabulary with the recall key set `keys` (one TaskSpec per set, made once)."""
    if keys == "letters":
        return D.spec
    if keys not in D.specs:
        D.specs[keys] = data.TaskSpec(D.tok, keys)
    return D.specs[keys]


def same_recipe(saved, now, stage):
    """A saved state continues under the recipe `now` when the loss options and every stage up to
    and including the one it stopped in are the same (later stages may have been changed)."""
    return (saved.get("task_weight") == now["task_weight"] and saved.get("scan") == now["scan"]
            and saved.get("stages", [])[:stage + 1] == now["stages"][:stage + 1])


def recall_keys(args):
    """The recall key set the trained models are measured with: the last stage's."""
    stages = getattr(args, "stages", None) or [{}]
    return stages[-1].get("keys", "letters")


def stage_tokens(stages):
    return sum(st["steps"] * st["batch"] * st["seq"] for st in stages)


def train_variant(args, name, over, D, prog):
    """Pre-trains one variant through the stages, exports it to OUT/name and returns its metrics.
    With --resume the state after every logged step is kept in WORK/state/name.pt, and a run that
    finds it (for the same stages and loss) continues from it."""
    cfg = M.Config(vocab_size=len(D.tok.vocab), **over)
    torch.manual_seed(SEED)
    model = M.JambaForCausalLM(cfg)
    snap = Snapshot(os.path.join(args.work, "state", f"{name}.pt") if args.resume else None)
    state = snap.load()
    recipe_key = {"stages": args.stages, "task_weight": args.task_weight, "scan": args.scan}
    if state is not None and not same_recipe(state["recipe"], recipe_key, state["stage"]):
        log(f"{name}: {snap.path} is from another recipe (its stages up to {state['stage']} or its loss differ); "
            "training from the start")
        state = None
    if state is not None:
        model.load_state_dict(state["model"])
        log(f"{name}: resuming at stage {state['stage']} step {state['step']}")
    done_hist = state["done_hist"] if state else []
    seconds = state["seconds"] if state else 0.0
    for i, st in enumerate(args.stages):
        if state is not None and i < state["stage"]:
            continue
        # Stage 0 draws from DATA_SEED itself: one stage from the command line is the shipped recipe.
        batcher = data.Batcher(D.base_train, spec_for(D, st.get("keys", "letters")), st["seq"], st["batch"], DATA_SEED + i, mix=st["mix"],
                               pairs=st["pairs"], gap=st["gap"])
        resume = None
        if state is not None and state["stage"] == i:
            batcher.rng.bit_generator.state = state["batcher"]
            resume = {"opt": state["opt"], "hist": state["hist"], "step": state["step"]}
        t0, base_s = time.time(), seconds

        def keep(step, opt, hist, i=i, batcher=batcher, t0=t0, base_s=base_s):
            snap.save({"recipe": recipe_key, "stage": i, "step": step, "model": model.state_dict(),
                       "opt": opt.state_dict(), "batcher": batcher.rng.bit_generator.state, "hist": hist,
                       "done_hist": done_hist, "seconds": base_s + time.time() - t0})
        tag = name if len(args.stages) == 1 else f"{name}[{i}]"
        w = st.get("task_weight", args.task_weight)
        loss_kw = None if w is None else {"task_weight": w}
        hist = train_loop(model, model, batcher.next, st["steps"], st["lr"], max(1, st["steps"] // 12), 0.1, prog, tag,
                          loss_kw=loss_kw, resume=resume, snapshot=keep if args.resume else None,
                          lr_schedule=st.get("lr_schedule", "cosine"))
        seconds = base_s + time.time() - t0
        done_hist = done_hist + ([dict(r, stage=i) for r in hist] if len(args.stages) > 1 else hist)
        state = None
    round_to_bf16(model)
    ev = eval_recall(model, spec_for(D, recall_keys(args)), args.eval_instances, EVAL_SEED)
    val = eval_text(model, D.base_val, args.seq, 64, EVAL_SEED)
    val_shift = eval_text(model, D.shift_val, args.seq, 64, EVAL_SEED)
    log(f"{name}: recall {json.dumps(ev)} val loss {val:.3f} (shifted {val_shift:.3f}) train {seconds:.0f}s")
    export.export_checkpoint(model, os.path.join(args.out, name), D.tok_model)
    return {"recall": ev, "val_loss": val, "val_loss_shifted": val_shift, "train_seconds": seconds,
            "history": done_hist, "params": sum(p.numel() for p in model.parameters())}


def job(args, kind, name):
    """One unit of --jobs work in its own process: a variant or a fine-tune method."""
    setup_torch(args)
    D = prepare(args, train_tok=False)
    if kind == "variant":
        over = dict(VARIANTS)[name]
        return kind, name, train_variant(args, name, over, D, Progress(stage_tokens(args.stages)))
    return kind, name, finetune_method(args, name, D, Progress(args.ft_steps * args.batch * args.seq))


def run_jobs(args, todo, D, prog, record):
    """Runs ("variant"|"finetune", name) units in order, record(kind, name, metrics) after each; with
    --jobs N > 1 in N worker processes (each one torch thread, results identical to one process)."""
    if args.jobs <= 1 or len(todo) <= 1:
        for kind, name in todo:
            res = (train_variant(args, name, dict(VARIANTS)[name], D, prog) if kind == "variant"
                   else finetune_method(args, name, D, prog))
            record(kind, name, res)
        return
    with multiprocessing.get_context("spawn").Pool(min(args.jobs, len(todo))) as pool:
        for kind, name, res in pool.starmap(job, [(args, kind, name) for kind, name in todo], chunksize=1):
            record(kind, name, res)


def main():
    args = parse_args()
    setup_torch(args)
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

    D = prepare(args, train_tok=True)
    log(f"tokenizer: vocab {len(D.tok.vocab)}; base text {len(D.base_ids)} tokens, shifted {len(D.shift_ids)}; "
        f"recall sample {[D.tok.vocab[i] for i in D.tok.encode('α3β7→β')]}")
    one = args.stages[0]
    metrics["data"] = {"base_tokens": int(len(D.base_ids)), "shift_tokens": int(len(D.shift_ids)), "vocab": len(D.tok.vocab),
                       "batch": one["batch"], "seq": args.seq, "steps": sum(st["steps"] for st in args.stages),
                       "ft_steps": args.ft_steps, "lr": one["lr"], "mix": one["mix"], "pairs": one["pairs"],
                       "gap": one["gap"], "task_weight": args.task_weight, "recall_keys": recall_keys(args)}
    if len(args.stages) > 1:
        metrics["data"]["stages"] = args.stages
        metrics["data"]["recipe"] = os.path.relpath(os.path.abspath(args.recipe), REPO)

    variants = [n for n, _ in VARIANTS if n in args.variants.split(",")]
    methods = [] if args.skip_finetune else ["dora", "lora", "full"]
    prog = Progress(len(variants) * stage_tokens(args.stages) + len(methods) * args.ft_steps * args.batch * args.seq)
    t_start = time.time()

    def record(kind, name, res):
        if kind == "variant":
            metrics.setdefault("variants", {})[name] = res
        else:
            metrics.setdefault("finetunes", {})[name] = res
        with open(metrics_path, "w") as fh:
            json.dump(metrics, fh, indent=1)

    run_jobs(args, [("variant", n) for n in variants], D, prog, record)
    if methods:
        ft_root = os.path.join(args.out, "finetunes")
        if os.path.isdir(ft_root):
            shutil.rmtree(ft_root)
        run_jobs(args, [("finetune", m) for m in methods], D, prog, record)
    metrics["data"]["wall_seconds"] = time.time() - t_start
    metrics["data"]["jobs"] = args.jobs
    with open(metrics_path, "w") as fh:
        json.dump(metrics, fh, indent=1)
    write_golden(args, D.tok)
    log("done")


def finetune_method(args, method, D, prog):
    """Fine-tunes the exported baseline on the shifted domain with one method (dora, lora, full),
    stores its steps under OUT/finetunes/method/ and returns the quality before/after and the
    ΔM–ΔD slopes of the stored steps (Liu et al. 2024)."""
    base_dir = os.path.join(args.out, "baseline")
    mdir = os.path.join(args.out, "finetunes", method)
    if os.path.isdir(mdir):
        shutil.rmtree(mdir)
    base_sd = export.read_safetensors_torch(os.path.join(base_dir, "model.safetensors"))
    r, alpha = 8, 16
    steps = args.ft_steps
    save = (sorted(set([steps // 4, steps])) if method == "full"
            else sorted(set([max(1, steps // 8), steps // 4, steps // 2, (3 * steps) // 4, steps])))
    torch.manual_seed(SEED + 1)
    model = load_checkpoint(base_dir, torch.float32)
    model.train()
    rng = np.random.default_rng(DATA_SEED + 1)
    batch_fn = lambda: data.text_batch(rng, D.shift_train, args.seq, args.batch)  # noqa: E731
    before = eval_text(model, D.shift_val, args.seq, 64, EVAL_SEED)
    if method == "full":
        lr = 5e-4

        def on_step(s):
            if s in save:
                export.export_checkpoint(model, os.path.join(mdir, f"step-{s}"), os.path.join(base_dir, "tokenizer.model"))
        hist = train_loop(model, model, batch_fn, steps, lr, max(1, steps // 10), 0.0, prog, "ft-full", 10, on_step)
    else:
        lr = 4e-3
        adapted = finetune.attach_adapters(model, r, alpha, method == "dora", SEED + 2)

        def on_step(s):
            if s in save:
                export.export_adapter(adapted, os.path.join(mdir, f"step-{s}"), r, alpha, method == "dora",
                                      finetune.TARGET_MODULES, "../../../baseline")
        hist = train_loop(model, model, batch_fn, steps, lr, max(1, steps // 10), 0.0, prog, f"ft-{method}", 10, on_step)
    # Quality of the last stored step (bf16 for full, fp32 adapters merged into the bf16 base).
    if method == "full":
        m2 = load_checkpoint(os.path.join(mdir, f"step-{steps}"), torch.float32)
    else:
        m2 = merge_adapter_into(load_checkpoint(base_dir, torch.float64), os.path.join(mdir, f"step-{steps}")).float()
    after = eval_text(m2, D.shift_val, args.seq, 64, EVAL_SEED)
    after_base = eval_text(m2, D.base_val, args.seq, 64, EVAL_SEED)
    recall = eval_recall(m2, spec_for(D, recall_keys(args)), 64, EVAL_SEED)
    # ΔM–ΔD from the stored files.
    per_step, pooled, by_kind, grouped = {}, [], {}, []
    for s in save:
        rows = [(path, *finetune.delta_m_d(w0, w1))
                for path, w0, w1 in finetune.stored_step_pairs(base_sd, os.path.join(mdir, f"step-{s}"), method,
                                                               export.read_safetensors_torch)]
        pts = [(dm, dd) for _, dm, dd in rows]
        for path, dm, dd in rows:
            by_kind.setdefault(finetune.module_kind(path), []).append((dm, dd))
            if finetune.targeted(path):
                grouped.append(((s, finetune.module_kind(path)), dm, dd))
        mean = {"mean_dM": float(np.mean([p[0] for p in pts])), "mean_dD": float(np.mean([p[1] for p in pts]))}
        if method == "full":
            sub = [(dm, dd) for path, dm, dd in rows if finetune.targeted(path)]
            per_step[str(s)] = {"slope_all_layer_matrices": finetune.slope(pts), "n_all": len(pts),
                                "slope_adapter_targets": finetune.slope(sub), "n_targets": len(sub), **mean}
        else:
            per_step[str(s)] = {"slope": finetune.slope(pts), "n": len(pts), **mean}
        pooled += pts
    res = {"val_loss_shifted_before": before, "val_loss_shifted_after": after, "val_loss_base_after": after_base,
           "recall_after": recall, "per_step": per_step, "slope_pooled_over_steps": finetune.slope(pooled),
           "slope_across_layers_within_step_and_kind": finetune.within_slope(grouped),
           "slope_by_module_kind_pooled_over_steps": {k: {"slope": finetune.slope(v), "n": len(v)}
                                                      for k, v in sorted(by_kind.items())},
           "lr": lr, "history": hist}
    log(f"ft-{method}: shifted val {before:.3f} -> {after:.3f}, base val {after_base:.3f}; slopes "
        + json.dumps({k: (v.get('slope', v.get('slope_all_layer_matrices'))) for k, v in per_step.items()})
        + f" pooled {res['slope_pooled_over_steps']:.4f}, within step and kind {res['slope_across_layers_within_step_and_kind']:.4f}")
    return res


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
