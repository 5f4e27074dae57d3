#!/usr/bin/python3
"""Re-measures every number of the demo models' card from the shipped files (issue 20):

    /usr/bin/python3 tools/train/evaluate.py                      # all of it, a few minutes
    /usr/bin/python3 tools/train/evaluate.py --seed 99            # on held-out data drawn afresh
    /usr/bin/python3 tools/train/evaluate.py --quick --check resources/models/evaluation.json
    /usr/bin/python3 tools/train/evaluate.py --tour               # the guided tour's numbers

Reads only what is shipped: `resources/models/<variant>/` (config.json, model.safetensors,
tokenizer.model), the adapter and full fine-tune folders under `finetunes/`, and the GNU manuals the
trainer used (`/usr/share/info`, data.py). The forward is the trainer's model in float64 on the
stored BF16 weights (tests/golden/demo checks that the engine computes the same logits).

Every estimate comes with a 95 % interval: mean ± 1.96 standard errors over independent units
(text windows, task instances, adapted matrices), never over correlated positions.

- text:   held-out loss (the last 5 % of the manuals' tokens, windows of `--seq`) against an
          interpolated Kneser–Ney bigram model (discount 0.75) of the training 95 %, paired per window;
- recall: multi-query associative recall in the trainer's format, with and without a filler of
          held-out text between the pairs and the queries (data.mqar_gap_instance);
- sinks:  per attention layer and head, the mean attention mass on the first token (BOS; for a
          model with registers, also on the registers) over query positions t >= 8, divided by the
          uniform share of those keys; and the same for the first token alone (the sink that
          registers are meant to take over, Darcet et al. 2023);
- outliers: the largest |x| of the residual stream after any layer, and its ratio to the RMS;
- ΔM–ΔD:  Liu et al. 2024's measure: for each adapted matrix at each stored fine-tuning step one
          point (ΔD, ΔM) (finetune.delta_m_d), the least-squares slope of ΔM on ΔD over all points.

--check FILE compares the estimates with a stored evaluation: a number passes when the two differ
by less than the sum of their interval half-widths (slopes, which are deterministic functions of the
shipped files, must agree to 1e-9). Exit status 1 when any number fails.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import data  # noqa: E402
import finetune  # noqa: E402
import train_demo as T  # noqa: E402

VARIANTS = ["baseline", "softmax1", "registers", "no-attention"]
RECALL_SETTINGS = [(2, 0), (4, 0), (8, 0), (8, 96), (16, 96)]   # (pairs, filler tokens)
QUICK_RECALL = [(8, 0), (8, 96)]
SINK_FROM = 8        # query positions t >= SINK_FROM count for the sink statistic


Z95 = 1.96           # standard errors of a 95 % interval (normal approximation)


def estimate(values):
    """Mean and 95 % half-width (normal approximation) of independent per-unit values."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) < 2:
        return {"mean": float(v.mean()) if len(v) else float("nan"), "ci95": float("nan"), "n": int(len(v))}
    return {"mean": float(v.mean()), "ci95": float(Z95 * v.std(ddof=1) / math.sqrt(len(v))), "n": int(len(v))}


def tokenizer_for(model_dir, work):
    """data.Tokenizer over a shipped tokenizer.model (it wants the .vocab file beside it)."""
    os.makedirs(work, exist_ok=True)
    dst = os.path.join(work, "tokenizer.model")
    with open(os.path.join(model_dir, "tokenizer.model"), "rb") as src, open(dst, "wb") as out:
        out.write(src.read())
    with open(os.path.join(work, "tokenizer.vocab"), "w", encoding="utf-8") as fh:
        subprocess.run(["spm_export_vocab", f"--model={dst}"], stdout=fh, check=True)
    return data.Tokenizer(dst)


class KneserNeyBigram:
    """Interpolated Kneser–Ney bigram: P(w|v) = max(c(v,w) − d, 0)/c(v) + d·N1+(v•)/c(v)·Pc(w), with
    the continuation probability Pc(w) = N1+(•w)/N1+(••) interpolated with the uniform distribution
    (weight 1e-3) so that no token has probability 0."""

    def __init__(self, ids, vocab, d=0.75):
        self.V, self.d = vocab, d
        pairs = ids[:-1] * vocab + ids[1:]
        uniq, counts = np.unique(pairs, return_counts=True)
        self.counts = dict(zip(uniq.tolist(), counts.tolist()))
        prev = uniq // vocab
        nxt = uniq % vocab
        self.c_prev = np.bincount(ids[:-1], minlength=vocab).astype(np.float64)
        self.n1_prev = np.bincount(prev, minlength=vocab).astype(np.float64)
        cont = np.bincount(nxt, minlength=vocab).astype(np.float64)
        self.p_cont = 0.999 * cont / cont.sum() + 0.001 / vocab

    def nll(self, prev, nxt):
        c = self.c_prev[prev]
        pc = self.p_cont[nxt]
        if c == 0:
            return -math.log(pc)
        pair = self.counts.get(int(prev) * self.V + int(nxt), 0)
        p = max(pair - self.d, 0.0) / c + self.d * self.n1_prev[prev] / c * pc
        return -math.log(p)


def text_windows(ids, seq, n, seed):
    rng = np.random.default_rng(seed)
    X, Y = data.text_batch(rng, ids, seq, n)
    return X, Y


class Recorder:
    """Attention probabilities (the model's own, model.Attention.keep_probs) and residual-stream
    extremes during one forward."""

    def __init__(self, model):
        self.model = model
        self.probs = []
        self.resid_max = []
        self.resid_rms = []
        self.hooks = []
        self.mixers = [layer.self_attn for layer in model.model.layers if layer.is_attention]
        for mixer in self.mixers:
            mixer.keep_probs = True
            self.hooks.append(mixer.register_forward_hook(self._attn))
        for layer in model.model.layers:
            self.hooks.append(layer.register_forward_hook(self._resid))

    def _attn(self, mod, _inputs, _out):
        self.probs.append(mod.last_probs)

    def _resid(self, _mod, _inputs, out):
        h = out[0] if isinstance(out, tuple) else out
        self.resid_max.append(h.abs().amax(dim=(1, 2)))
        self.resid_rms.append(h.pow(2).mean(dim=(1, 2)).sqrt())

    def close(self):
        for h in self.hooks:
            h.remove()
        for mixer in self.mixers:
            mixer.keep_probs = False
            mixer.last_probs = None


@torch.no_grad()
def eval_text_and_sinks(model, X, Y, bigram):
    """Per-window model and bigram losses; per-window sink masses; residual extremes."""
    model_nll, bigram_nll = [], []
    n_reg = model.cfg.num_register_tokens
    sink_rows, bos_rows, null_rows, maxes, ratios = [], [], [], [], []
    for i in range(len(X)):
        x, y = torch.from_numpy(X[i:i + 1]), torch.from_numpy(Y[i:i + 1])
        rec = Recorder(model)
        _, lm, _ = model.loss(x, y)
        rec.close()
        model_nll.append(lm.item())
        bigram_nll.append(float(np.mean([bigram.nll(X[i, t], Y[i, t]) for t in range(Y.shape[1])])))
        per_layer, per_bos, per_null = [], [], []
        for p in rec.probs:           # (1, heads, S_total, S_total); keys 0..n_reg-1 registers, n_reg = BOS
            S = p.shape[-1]
            t = torch.arange(SINK_FROM + n_reg, S)
            visible = (t + 1).double()                                        # keys a query at t sees
            mass = p[0][:, t][:, :, :n_reg + 1].sum(-1)                     # (heads, queries)
            per_layer.append((mass * visible / (n_reg + 1)).mean(-1).tolist())  # over their uniform share
            per_bos.append((p[0][:, t, n_reg] * visible).mean(-1).tolist())     # the first token alone
            per_null.append((1.0 - p[0][:, t].sum(-1)).mean(-1).tolist())
        sink_rows.append(per_layer)
        bos_rows.append(per_bos)
        null_rows.append(per_null)
        mx = torch.stack(rec.resid_max).max().item()
        maxes.append(mx)
        ratios.append(mx / torch.stack(rec.resid_rms).mean().item())
    return {"model_nll": model_nll, "bigram_nll": bigram_nll, "sink": np.asarray(sink_rows), "bos_sink": np.asarray(bos_rows),
            "null": np.asarray(null_rows), "resid_max": maxes, "resid_ratio": ratios}


@torch.no_grad()
def eval_recall(model, spec, filler_ids, settings, n_inst, seed):
    out = {}
    for n, gap in settings:
        rng = np.random.default_rng(seed + 1000 * n + gap)
        per = []
        for _ in range(n_inst):
            if gap > 0:
                ids, tgt = data.mqar_gap_instance(rng, spec, n, data.text_window(rng, filler_ids, gap))
            else:
                ids, tgt = data.mqar_instance(rng, spec, n)
            X = torch.tensor([ids])
            m = torch.tensor(tgt[:-1])
            logits, _ = model(X)
            pred = logits[0, :-1].argmax(-1)
            per.append(float((pred[m] == X[0, 1:][m]).double().mean()))
        out[f"{n}_pairs_gap_{gap}"] = estimate(per)
    return out


def slope_estimate(rows, seed, within=False):
    """Slope of ΔM on ΔD over rows (group, ΔM, ΔD) and a bootstrap 95 % interval over the rows:
    least squares over all rows, or (within) across layers inside each (step, module kind) group
    (finetune.within_slope)."""
    def fit(rs):
        return finetune.within_slope(rs) if within else finetune.slope([(dm, dd) for _, dm, dd in rs])
    b = fit(rows)
    rng = np.random.default_rng(seed)
    boot = [fit([rows[i] for i in rng.integers(0, len(rows), len(rows))]) for _ in range(2000)]
    lo, hi = np.nanpercentile(boot, [2.5, 97.5])
    return {"mean": b, "lo": float(lo), "hi": float(hi), "n": int(len(rows))}


def eval_finetunes(models):
    """ΔM–ΔD points of every stored fine-tuning step, per method (Liu et al. 2024, section 2)."""
    base_dir = os.path.join(models, "baseline")
    base_sd = T.export.read_safetensors_torch(os.path.join(base_dir, "model.safetensors"))
    root = os.path.join(models, "finetunes")
    out = {}
    for method in ("dora", "lora", "full"):
        mdir = os.path.join(root, method)
        if not os.path.isdir(mdir):
            continue
        points, per_step = [], {}
        for s in sorted(int(d.split("-")[1]) for d in os.listdir(mdir)):
            # The adapter's own modules; for a full fine-tune the same modules (the adapters' targets).
            pairs = [(path, w0, w1) for path, w0, w1 in finetune.stored_step_pairs(base_sd, os.path.join(mdir, f"step-{s}"),
                                                                            method, T.export.read_safetensors_torch)
                     if finetune.targeted(path)]
            rows = [((s, finetune.module_kind(path)), *finetune.delta_m_d(w0, w1)) for path, w0, w1 in pairs]
            per_step[str(s)] = {"slope": finetune.slope([(dm, dd) for _, dm, dd in rows]), "n": len(rows)}
            points += rows
        out[method] = {"pooled": slope_estimate(points, 5), "within": slope_estimate(points, 6, within=True),
                       "per_step": per_step}
    return out


def measure(args):
    models = args.models
    tok = tokenizer_for(os.path.join(models, "baseline"), args.work)
    base_ids = data.encode_corpus(tok, data.load_sources(data.BASE_SOURCES))
    nb = int(len(base_ids) * 0.95)
    train_ids, val_ids = base_ids[:nb], base_ids[nb:]
    spec = data.TaskSpec(tok, args.keys)
    bigram = KneserNeyBigram(train_ids, len(tok.vocab))
    n_win = 16 if args.quick else args.windows
    n_inst = 64 if args.quick else args.instances
    X, Y = text_windows(val_ids, args.seq, n_win, args.seed)
    res = {"settings": {"seed": args.seed, "seq": args.seq, "recall_keys": args.keys, "windows": n_win, "instances": n_inst,
                        "held_out_tokens": int(len(val_ids)), "quick": bool(args.quick)}, "variants": {}}
    for name in VARIANTS:
        d = os.path.join(models, name)
        if not os.path.isdir(d):
            continue
        model = T.load_checkpoint(d, torch.float64)
        model.eval()
        tx = eval_text_and_sinks(model, X, Y, bigram)
        diff = np.asarray(tx["model_nll"]) - np.asarray(tx["bigram_nll"])
        sink = tx["sink"]                                  # (windows, attention layers, heads)
        v = {"params": int(sum(p.numel() for p in model.parameters())),
             "val_loss": estimate(tx["model_nll"]), "bigram_loss": estimate(tx["bigram_nll"]),
             "val_minus_bigram": estimate(diff),
             "recall": eval_recall(model, spec, val_ids, QUICK_RECALL if args.quick else RECALL_SETTINGS,
                                   n_inst, args.seed),
             "resid_max": estimate(tx["resid_max"]), "resid_max_over_rms": estimate(tx["resid_ratio"])}
        if sink.size:
            heads = {}
            for li in range(sink.shape[1]):
                for h in range(sink.shape[2]):
                    heads[f"attn{li}.head{h}"] = estimate(sink[:, li, h])
            best = max(heads, key=lambda k: heads[k]["mean"])
            v["sink_ratio"] = heads
            v["sink_ratio_max_head"] = dict(heads[best], head=best)
            bos = {f"attn{li}.head{h}": estimate(tx["bos_sink"][:, li, h])
                   for li in range(sink.shape[1]) for h in range(sink.shape[2])}
            top = max(bos, key=lambda k: bos[k]["mean"])
            v["first_token_ratio_max_head"] = dict(bos[top], head=top)
            if model.cfg.attention_normalizer != "softmax":
                v["null_mass"] = estimate(tx["null"].mean(axis=(1, 2)))
        res["variants"][name] = v
        print(f"{name}: val {v['val_loss']['mean']:.3f} (bigram {v['bigram_loss']['mean']:.3f}), recall "
              + ", ".join(f"{k} {r['mean']:.3f}" for k, r in v["recall"].items())
              + (f", sink max {v['sink_ratio_max_head']['mean']:.2f}x ({v['sink_ratio_max_head']['head']})"
                 if "sink_ratio_max_head" in v else "")
              + f", max|x| {v['resid_max']['mean']:.1f}", flush=True)
    if "baseline" in res["variants"] and "no-attention" in res["variants"]:
        res["recall_baseline_minus_no_attention"] = {
            k: {"mean": res["variants"]["baseline"]["recall"][k]["mean"] - res["variants"]["no-attention"]["recall"][k]["mean"],
                "ci95": res["variants"]["baseline"]["recall"][k]["ci95"] + res["variants"]["no-attention"]["recall"][k]["ci95"]}
            for k in res["variants"]["baseline"]["recall"]}
    res["finetunes"] = eval_finetunes(models)
    for m, f in res["finetunes"].items():
        p, w = f["pooled"], f["within"]
        print(f"{m}: ΔM–ΔD slope {p['mean']:+.4f} [{p['lo']:+.4f}, {p['hi']:+.4f}] over {p['n']} points; across layers "
              f"within step and module {w['mean']:+.4f} [{w['lo']:+.4f}, {w['hi']:+.4f}]", flush=True)
    return res


@torch.no_grad()
def tour_facts(args):
    """The numbers behind the guided tour's sentences (resources/models/tour.json): for each stop, the
    next-token candidates after its prompt and, per attention layer and head, the mass on the first
    token, on the registers, on nothing (softmax-1), on earlier copies of the last token (the key a
    recall query asks for) and on the tokens right after them (the value an induction-style lookup
    reads), as run A (as trained) and as the stop's run B. Fine-tune stops: the slope."""
    with open(os.path.join(args.models, "tour.json")) as fh:
        tour = json.load(fh)
    tok = tokenizer_for(os.path.join(args.models, "baseline"), args.work)
    fts = None
    for stop in tour["stops"]:
        print(f"== {stop['id']} ({stop['model']})")
        if "/" in stop["model"]:
            fts = fts or eval_finetunes(args.models)
            method, step = stop["model"].split("/")
            print(f"   {method}: slope over the stored steps {fts[method]['pooled']['mean']:+.4f}, at {step}: "
                  f"{fts[method]['per_step'][step.split('-')[1]]['slope']:+.4f}")
            continue
        model = T.load_checkpoint(os.path.join(args.models, stop["model"]), torch.float64)
        model.eval()
        ids = [1] + tok.encode(stop["prompt"])
        runs = [("A", None, None)]
        cmp = stop.get("compare", {})
        if cmp:
            runs.append(("B", cmp.get("normalizer"), cmp.get("registers")))
        for label, norm, reg in runs:
            rec = Recorder(model)
            logits, _ = model(torch.tensor([ids]), normalizer=norm, registers=reg)
            rec.close()
            p = torch.softmax(logits[0, -1], -1)
            top = p.topk(3)
            print(f"   run {label}: next " + ", ".join(f"{tok.vocab[int(i)]} {float(v):.2f}" for v, i in zip(top.values, top.indices)))
            nr = model.cfg.num_register_tokens if reg is None else reg
            keys = [j for j in range(len(ids) - 1) if ids[j] == ids[-1]]
            attn_layers = [i for i, layer in enumerate(model.model.layers) if layer.is_attention]
            for li, pr in zip(attn_layers, rec.probs):
                rows = pr[0, :, SINK_FROM + nr:, :]
                line = (f"   run {label} layer {li}: first token " + " ".join(f"{float(x):.3f}" for x in rows[:, :, nr].mean(-1))
                        + " | nothing " + " ".join(f"{float(x):.3f}" for x in (1 - rows.sum(-1)).mean(-1)))
                if nr:
                    line += " | registers " + " ".join(f"{float(x):.3f}" for x in rows[:, :, :nr].sum(-1).mean(-1))
                if li == stop.get("layer") and "head" in stop:
                    row = pr[0, stop["head"], nr + stop.get("token", len(ids) - 1), nr:]
                    line += (f" | head {stop['head']} at token {stop.get('token', len(ids) - 1)}: first token "
                             f"{float(row[0]):.3f}, last token's row {float(pr[0, stop['head'], -1, nr]):.3f}")
                if keys:
                    line += (" | last row on the key " + " ".join(f"{float(x):.3f}" for x in pr[0, :, -1, [nr + k for k in keys]].sum(-1))
                             + " | on the token after it " + " ".join(
                                 f"{float(x):.3f}" for x in pr[0, :, -1, [nr + k + 1 for k in keys]].sum(-1)))
                print(line)


def markdown(res):
    """The model card's evaluation tables from an evaluation (JSON written by --out)."""
    pct = lambda e: f"{100 * e['mean']:.1f} ± {100 * e['ci95']:.1f} %"  # noqa: E731
    num = lambda e, d=3: f"{e['mean']:.{d}f} ± {e['ci95']:.{d}f}"  # noqa: E731
    st = res["settings"]
    out = [f"Held-out text: {st['windows']} windows of {st['seq']} tokens from the last 5 % of the manuals "
           f"({st['held_out_tokens']:,} tokens); tasks: {st['instances']} fresh instances per setting; seed {st['seed']}; "
           "± is the 95 % interval over windows or instances.", "",
           "| variant | params | val loss | bigram (KN) | model − bigram | max sink ratio (head) | first token alone (head) | max abs(x) | max abs(x) / RMS |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name, v in res["variants"].items():
        sink, bos = v.get("sink_ratio_max_head"), v.get("first_token_ratio_max_head")
        out.append(f"| `{name}` | {v['params']:,} | {num(v['val_loss'])} | {num(v['bigram_loss'])} | "
                   f"{num(v['val_minus_bigram'])} | " + (f"{num(sink, 2)}× ({sink['head']})" if sink else "—")
                   + " | " + (f"{num(bos, 2)}× ({bos['head']})" if bos else "—")
                   + f" | {num(v['resid_max'], 1)} | {num(v['resid_max_over_rms'], 1)} |")
    keys = list(next(iter(res["variants"].values()))["recall"].keys())
    out += ["", "| variant | " + " | ".join(k.replace("_pairs_gap_", " pairs, gap ") for k in keys) + " |",
            "|---|" + "---|" * len(keys)]
    for name, v in res["variants"].items():
        out.append(f"| `{name}` | " + " | ".join(pct(v["recall"][k]) for k in keys) + " |")
    if "recall_baseline_minus_no_attention" in res:
        out.append("| `baseline` − `no-attention` | " + " | ".join(
            f"{100 * res['recall_baseline_minus_no_attention'][k]['mean']:+.1f} ± {100 * res['recall_baseline_minus_no_attention'][k]['ci95']:.1f}"
            for k in keys) + " |")
    out += ["", "| fine-tune | ΔM–ΔD slope across layers, within each step and module kind (95 % bootstrap) "
            "| pooled over the stored steps | points | slope per stored step |",
            "|---|---|---|---|---|"]
    for m, f in res["finetunes"].items():
        p, w = f["pooled"], f.get("within", {"mean": float("nan"), "lo": float("nan"), "hi": float("nan")})
        out.append(f"| {m} | {w['mean']:+.3f} [{w['lo']:+.3f}, {w['hi']:+.3f}] | {p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}] | {p['n']} | "
                   + ", ".join(f"{s}: {v['slope']:+.3f}" for s, v in f["per_step"].items()) + " |")
    out += ["", *targets(res)]
    return "\n".join(out)


SINK_CUT = 0.1   # a sink counts as reduced when the largest first-token ratio falls by this fraction


def targets(res):
    """Issue 20's targets against an evaluation, as the card's table: "yes" when the whole 95 %
    interval is on the target's side, "mean only" when the estimate is but the interval crosses the
    line, else "no". Sinks are the first token alone (registers may take the sink over)."""
    V, rows = res["variants"], []

    def verdict(lo_ok, mean_ok):
        return "yes" if lo_ok else ("mean only" if mean_ok else "no")

    for name, v in V.items():
        d = v["val_minus_bigram"]
        rows.append((f"`{name}` validation loss ≥ 0.3 nats below the bigram model",
                     f"{d['mean']:+.3f} ± {d['ci95']:.3f} nats", verdict(d["mean"] + d["ci95"] <= -0.3, d["mean"] <= -0.3)))
    if "baseline" in V and "8_pairs_gap_0" in V["baseline"]["recall"]:
        r = V["baseline"]["recall"]["8_pairs_gap_0"]
        rows.append(("`baseline` recall at 8 pairs ≥ 90 %", f"{100 * r['mean']:.1f} ± {100 * r['ci95']:.1f} %",
                     verdict(r["mean"] - r["ci95"] >= 0.9, r["mean"] >= 0.9)))
    diff = res.get("recall_baseline_minus_no_attention", {}).get("8_pairs_gap_0")
    if diff:
        rows.append(("`baseline` ≥ 30 points above `no-attention` at 8 pairs",
                     f"{100 * diff['mean']:+.1f} ± {100 * diff['ci95']:.1f} points",
                     verdict(diff["mean"] - diff["ci95"] >= 0.3, diff["mean"] >= 0.3)))
    base = V.get("baseline", {}).get("first_token_ratio_max_head")
    if base:
        rows.append(("a first-token sink ≥ 3× the uniform share in one `baseline` head",
                     f"{base['mean']:.2f} ± {base['ci95']:.2f}× ({base['head']})",
                     verdict(base["mean"] - base["ci95"] >= 3, base["mean"] >= 3)))
        for name in ("softmax1", "registers"):
            o = V.get(name, {}).get("first_token_ratio_max_head")
            if o:
                # "Reduces" asks for at least a tenth less than baseline's largest head, not any
                # difference an interval can resolve (a 2 % change leaves the sink as it was).
                rows.append((f"`{name}` reduces it (largest first-token ratio at least {100 * SINK_CUT:.0f} % below `baseline`'s)",
                             f"{o['mean']:.2f} ± {o['ci95']:.2f}× ({o['head']}), {100 * (o['mean'] / base['mean'] - 1):+.0f} %",
                             verdict(o["mean"] + o["ci95"] <= (1 - SINK_CUT) * (base["mean"] - base["ci95"]),
                                     o["mean"] <= (1 - SINK_CUT) * base["mean"])))
    for m, sign in (("dora", -1), ("lora", 1)):
        w = res.get("finetunes", {}).get(m, {}).get("within")
        if w:
            rows.append((f"{dict(dora='DoRA', lora='LoRA')[m]}'s ΔM–ΔD slope {'negative' if sign < 0 else 'positive'} "
                         "(across layers, within step and module kind)", f"{w['mean']:+.3f} [{w['lo']:+.3f}, {w['hi']:+.3f}]",
                         verdict(w["hi"] < 0 if sign < 0 else w["lo"] > 0, sign * w["mean"] > 0)))
    return ["| target | measured | met |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]


SUBSET_Z = 3.5   # standard errors of a subset's mean allowed by --check (about 1 in 2,000 per number)


def check(res, stored):
    """Each measured estimate against the stored one. Slopes (bootstrap intervals) must be equal to
    1e-9; any other number within ci_a + ci_b, or — when the measured sample is the first part of the
    stored one (same seed, fewer windows or instances: what --quick measures) — within SUBSET_Z
    standard errors of a subset's mean, from the stored sample's spread: the subset's own interval
    is too narrow when a few units are far from the rest (per-window sink ratios are skewed), and a
    subset is not independent of the sample it is part of. A relative 1e-9 covers rounding."""
    bad, n = [], 0
    same_seed = res.get("settings", {}).get("seed") == stored.get("settings", {}).get("seed")

    def walk(a, b, path):
        nonlocal n
        if isinstance(a, dict) and "mean" in a and isinstance(b, dict) and "mean" in b:
            n += 1
            if "lo" in a:
                tol = 1e-9
            else:
                tol = a.get("ci95", 0) + b.get("ci95", 0)
                na, nb = a.get("n", 0), b.get("n", 0)
                if same_seed and 1 < na < nb and math.isfinite(b.get("ci95", math.nan)):
                    sd_b = b["ci95"] * math.sqrt(nb) / Z95     # the units' spread, as estimate() made ci95
                    tol = max(tol, SUBSET_Z * sd_b * math.sqrt(1 / na - 1 / nb))
                tol += 1e-9 * abs(b["mean"])
            if not abs(a["mean"] - b["mean"]) <= tol:
                bad.append(f"{path}: measured {a['mean']:.6g}, stored {b['mean']:.6g} (allowed ±{tol:.3g})")
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in a:
                if k in b and k != "per_step":
                    walk(a[k], b[k], f"{path}.{k}" if path else k)
    walk(res, stored, "")
    return n, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=os.path.join(REPO, "resources", "models"))
    ap.add_argument("--seed", type=int, default=2024, help="held-out windows and task instances")
    ap.add_argument("--seq", type=int, default=0,
                    help="text window length (default: the training rows' length in MODELS/metrics.json, else 256)")
    ap.add_argument("--keys", choices=("",) + data.RECALL_KEY_SETS, default="",
                    help="recall vocabulary (default: the last training stage's in MODELS/metrics.json, else letters)")
    ap.add_argument("--windows", type=int, default=128)
    ap.add_argument("--instances", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="16 windows, 64 instances, 8-pair recall only")
    ap.add_argument("--out", help="write the estimates (JSON)")
    ap.add_argument("--check", metavar="FILE", help="compare with a stored evaluation")
    ap.add_argument("--tour", action="store_true", help="only print the numbers behind the guided tour's sentences")
    ap.add_argument("--markdown", metavar="FILE", help="only print the model card's tables from a stored evaluation")
    args = ap.parse_args()
    T.keep_freed_memory()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="hl-eval-") as work:  # the tokenizer's copy and vocabulary
        args.work = work
        run(args)


def run(args):
    try:
        with open(os.path.join(args.models, "metrics.json")) as fh:
            trained = json.load(fh)["data"]
    except (OSError, KeyError, ValueError, TypeError):
        trained = {}
    if not isinstance(trained, dict):
        trained = {}
    if args.seq <= 0:
        seq = trained.get("seq", 256)
        args.seq = seq if isinstance(seq, int) and seq > 0 else 256
    if not args.keys:
        keys = trained.get("recall_keys", "letters")
        args.keys = keys if keys in data.RECALL_KEY_SETS else "letters"
    if args.tour:
        tour_facts(args)
        return
    if args.markdown:
        with open(args.markdown) as fh:
            print(markdown(json.load(fh)))
        return
    res = measure(args)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    if args.check:
        with open(args.check) as fh:
            n, bad = check(res, json.load(fh))
        for b in bad:
            print("MISMATCH " + b)
        print(f"checked {n} numbers against {args.check}: {n - len(bad)} agree")
        if bad or n == 0:
            sys.exit(1)


if __name__ == "__main__":
    main()
