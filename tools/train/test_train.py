#!/usr/bin/python3
"""Quick self-tests of the trainer's pieces (a few seconds, no training):

    /usr/bin/python3 tools/train/test_train.py

- the C, the fused and the chunked log-space scans equal the step-by-step recurrence; the C and the
  fused scans' hand-written backwards pass torch.autograd.gradcheck and equal its autograd;
- the trainer's model (float64) equals the independent numpy reference of check_export.py on a
  random exported BF16 checkpoint, for every normalizer and register count, with and without
  attention layers;
- ΔM/ΔD: an untrained DoRA/LoRA adapter gives (0, 0); a pure row rescale gives ΔD = 0; a rotation
  keeps ΔM = 0; the slope within (step, module) groups removes the drift shared by a step's points;
- a two-stage recipe stopped after a snapshot and run again with --resume exports the same bytes as
  one uninterrupted run (a tiny model, 2 × 30 steps on random ids);
- a stage's options: word recall keys and values, a constant learning rate, the checks of both.
"""
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import argparse  # noqa: E402
import filecmp  # noqa: E402
import hashlib  # noqa: E402
import types  # noqa: E402

import check_export as C  # noqa: E402
import data  # noqa: E402
import schedule  # noqa: E402
import train_demo  # noqa: E402
import export  # noqa: E402
import finetune  # noqa: E402
import model as M  # noqa: E402
from scan import (native_library, selective_scan_chunked, selective_scan_fused, selective_scan_native,  # noqa: E402
                  selective_scan_sequential)


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    return 0 if cond else 1


def resume_equals_uninterrupted(tmp):
    """train_variant through two stages, once straight through and once stopped (an exception
    raised right after the third snapshot: stage 1, step 25 of 30) and resumed."""
    open(os.path.join(tmp, "tokenizer.model"), "wb").close()
    rng = np.random.default_rng(5)
    text = rng.integers(4, 300, size=4000)
    spec = types.SimpleNamespace(key_set="letters", bos=1, space=4, keys=list(range(10, 22)), values=list(range(30, 40)), query=5, copy=6,
                                 copy_pool=list(range(50, 120)))
    D = types.SimpleNamespace(tok=types.SimpleNamespace(vocab=[""] * 300), tok_model=os.path.join(tmp, "tokenizer.model"),
                              base_train=text[:3500], base_val=text[3500:], shift_val=text[3500:], spec=spec)
    stages = [schedule.stage(16, 2, 30, 3e-3, "0.4,0.4,0.2", "2,4", "0,0"),
              schedule.stage(24, 2, 30, 1e-3, "0.5,0.4,0.1", "2,6", "0,8", task_weight=0.7)]
    outs = []
    for stop in (None, 3):
        args = argparse.Namespace(stages=stages, task_weight=0.5, scan="fused", resume=True, eval_instances=4, seq=16,
                                  work=os.path.join(tmp, f"work-{stop}"), out=os.path.join(tmp, f"out-{stop}"))
        saves = [0]
        orig = schedule.Snapshot.save

        def save_then_stop(self, state, stop=stop, saves=saves, orig=orig):
            orig(self, state)
            saves[0] += 1
            if saves[0] == stop:
                raise KeyboardInterrupt
        schedule.Snapshot.save = save_then_stop
        try:
            try:
                train_demo.train_variant(args, "baseline", {}, D, schedule.Progress(1))
            except KeyboardInterrupt:
                schedule.Snapshot.save = orig
                train_demo.train_variant(args, "baseline", {}, D, schedule.Progress(1))
        finally:
            schedule.Snapshot.save = orig
        outs.append(os.path.join(args.out, "baseline", "model.safetensors"))
    return filecmp.cmp(outs[0], outs[1], shallow=False)


def induction_rows_repeat_their_window():
    """data.induction_instance: the window, other text, the window again, the loss on the repeat from
    its second token; a four-share mix packs such rows, and a three-share mix draws the same batches
    as before the fourth kind existed (the Batcher's first draws do not depend on it)."""
    rng = np.random.default_rng(3)
    text = np.arange(1000, 1400)
    spec = types.SimpleNamespace(key_set="letters", bos=1, space=4, keys=list(range(10, 22)), values=list(range(30, 40)), query=5, copy=6,
                                 copy_pool=list(range(50, 120)))
    ids, tgt = data.induction_instance(rng, spec, text, 12, 7)
    seg, rep = ids[2:14], ids[21:]
    ok = len(ids) == 2 + 12 + 7 + 12 and len(tgt) == len(ids) and seg == rep
    ok &= all(seg[i + 1] - seg[i] == 1 for i in range(11))  # a window of the text, in order
    ok &= [i for i, t in enumerate(tgt) if t] == list(range(21, 32))  # predicting rep[1:] from rep[:-1]
    ok &= all(ids[i + 1] == seg[i - 21 + 1] for i in range(21, 32))
    row, m = data.pack_tasks(np.random.default_rng(4), spec, 64, "induction", text)
    ok &= len(row) == 65 and len(m) == 64 and m.any()
    b4 = data.Batcher(text, spec, 32, 64, 9, mix=(0, 0, 0, 1)).next()
    ok &= bool((b4[1] != -100).any()) and not np.isin(b4[0], spec.keys + [spec.copy, spec.query]).any()
    # The digest of this batch as the trainer drew it before induction rows were added (data.py at a44df86).
    X, Y = data.Batcher(text, spec, 32, 8, 11, mix=(0.3, 0.4, 0.3), gap=(0, 6)).next()
    return ok and hashlib.sha256(X.tobytes() + Y.tobytes()).hexdigest()[:16] == "e7086e0e5554faac"


def fake_tokenizer(n_words):
    """A vocabulary like the trained one's: specials, the task symbols, digits, then n_words whole-word
    pieces (word-initial, alphabetic, ASCII) interleaved with pieces the word pool must skip."""
    vocab = ["<unk>", "<s>", "</s>", "<pad>", "\u2581"] + data.KEYS + [data.QUERY, data.COPY] + data.VALUES
    for i in range(n_words):
        body = "".join(chr(97 + (i // 26 ** k) % 26) for k in range(3))
        vocab += ["\u2581" + body, body, "\u2581" + body[:1]]  # a word, a mid-word piece, a short one
    return types.SimpleNamespace(vocab=vocab, piece_to_id={p: i for i, p in enumerate(vocab)})


def recipe_options():
    """A stage's recall key set and learning-rate schedule: word keys/values disjoint from each other
    and from the copy words, their pair range checked against their own count; a constant schedule
    holds the peak; a saved state continues when only later stages changed."""
    ok = True
    tok = fake_tokenizer(2400)
    spec = data.TaskSpec(tok, "words")
    letters = data.TaskSpec(tok)
    ok &= len(spec.keys) == data.MAX_PAIRS["words"] == 1152 and len(spec.values) == 2400 - 1280
    ok &= not (set(spec.keys) & set(spec.values)) and not (set(spec.keys) | set(spec.values)) & set(spec.copy_pool)
    ok &= spec.copy_pool == letters.copy_pool and len(letters.keys) == 24
    ok &= all(tok.vocab[i].startswith("\u2581") and len(tok.vocab[i]) == 4 for i in spec.keys + spec.values)
    row, m = data.pack_tasks(np.random.default_rng(1), spec, 96, "mqar", np.arange(5000, 6000), (8, 8), (0, 0))
    ok &= bool(np.isin(row, spec.keys).any()) and not np.isin(row, letters.keys).any()
    # A word-key instance starts with its first key (a typed prompt has no lone ▁ before a word piece);
    # a gap instance puts its filler right before the query mark.
    ids, tgt = data.mqar_instance(np.random.default_rng(2), spec, 3)
    ok &= ids[0] == spec.bos and ids[1] in spec.keys and ids[7] == spec.query and tgt[8] and not tgt[7]
    gids, gtgt = data.mqar_gap_instance(np.random.default_rng(2), spec, 3, [900, 901])
    ok &= gids == ids[:7] + [900, 901] + ids[7:] and gtgt == tgt[:7] + [False, False] + tgt[7:]
    lids, _ = data.mqar_instance(np.random.default_rng(2), letters, 3)
    ok &= lids[:2] == [letters.bos, letters.space] and lids[2] in letters.keys
    try:
        data.TaskSpec(fake_tokenizer(1200), "words")
        ok = False
    except ValueError as e:
        ok &= "1290" in str(e)

    def refused(st, text):
        try:
            schedule.check_stage(st, "stage 1")
        except SystemExit as e:
            return text in str(e) and str(e).startswith("stage 1: ")
        return False
    schedule.check_stage(schedule.stage(128, 8, 10, 1e-3, "0.3,0.3,0,0.4", "4,200", "0,32", keys="words",
                                        lr_schedule="constant"), "stage 1")
    ok &= refused(schedule.stage(64, 8, 10, 1e-3, "1,1,1", "4,30", "0,0"), "1..24")
    ok &= refused(schedule.stage(64, 8, 10, 1e-3, "1,1,1", "4,2000", "0,0", keys="words"), "1..1152")
    ok &= refused(schedule.stage(64, 8, 10, 1e-3, "1,1,1", "2,4", "0,0", keys="greek"), "keys must be one of letters, words")
    ok &= refused(schedule.stage(64, 8, 10, 1e-3, "1,1,1", "2,4", "0,0", lr_schedule="linear"), "lr_schedule")
    ok &= schedule.lr_at(99, 100, 2e-3, 10, "constant") == 2e-3 and abs(schedule.lr_at(5, 100, 2e-3, 10, "constant") - 1.2e-3) < 1e-15
    ok &= abs(schedule.lr_at(100, 100, 2e-3, 10) - 2e-4) < 1e-12
    a = schedule.stage(64, 8, 10, 1e-3, "1,1,1", "2,4", "0,0")
    b = schedule.stage(128, 8, 10, 1e-3, "1,1,0,1", "4,8", "0,0", keys="words")
    c = schedule.stage(128, 8, 20, 5e-4, "1,1,0,1", "4,8", "0,0", keys="words")
    saved = {"stages": [a, b], "task_weight": 0.5, "scan": "fused"}
    ok &= train_demo.same_recipe(saved, {"stages": [a, c], "task_weight": 0.5, "scan": "fused"}, 0)
    ok &= not train_demo.same_recipe(saved, {"stages": [a, c], "task_weight": 0.5, "scan": "fused"}, 1)
    ok &= not train_demo.same_recipe(saved, {"stages": [a, b], "task_weight": 0.7, "scan": "fused"}, 0)
    ok &= train_demo.same_recipe(saved, {"stages": [a, b, c], "task_weight": 0.5, "scan": "fused"}, 1)
    return ok


def target_verdicts():
    """evaluate.targets: "yes" only when the whole interval is on the target's side, "mean only" when
    the estimate is but the interval crosses, "no" otherwise; the sink compares the first token alone, and
    counts as reduced at a tenth below baseline's (17 ± 2 against 20 ± 2: the estimate only)."""
    import evaluate
    e = lambda m, c: {"mean": m, "ci95": c}  # noqa: E731
    res = {"variants": {"baseline": {"val_minus_bigram": e(-0.5, 0.1), "recall": {"8_pairs_gap_0": e(0.95, 0.02)},
                                     "first_token_ratio_max_head": dict(e(20, 2), head="attn1.head0")},
                        "softmax1": {"val_minus_bigram": e(-0.25, 0.1), "recall": {"8_pairs_gap_0": e(0.9, 0.02)},
                                     "first_token_ratio_max_head": dict(e(17, 2), head="attn1.head0")},
                        "registers": {"val_minus_bigram": e(-0.35, 0.1), "recall": {"8_pairs_gap_0": e(0.9, 0.02)},
                                      "first_token_ratio_max_head": dict(e(2, 0.5), head="attn0.head1")}},
           "recall_baseline_minus_no_attention": {"8_pairs_gap_0": e(0.25, 0.03)},
           "finetunes": {"dora": {"within": {"mean": -0.1, "lo": -0.2, "hi": 0.05}},
                         "lora": {"within": {"mean": 0.5, "lo": 0.4, "hi": 0.6}}}}
    got = [row.rsplit("|", 2)[-2].strip() for row in evaluate.targets(res)[2:]]
    return got == ["yes", "no", "mean only", "yes", "no", "yes", "mean only", "yes", "mean only", "yes"]


def subset_check():
    """evaluate.check: a --quick subset of the stored sample (same seed) may sit a few of the subset's
    standard errors from the stored mean even when its own interval is narrow; further off, or with
    another seed beyond the two intervals (x; r is within them), it fails; rounding never fails."""
    import evaluate
    stored = {"settings": {"seed": 1}, "x": {"mean": 13.69, "ci95": 0.11, "n": 128}, "r": {"mean": 0.998, "ci95": 0.002, "n": 256}}
    sd = 0.11 * math.sqrt(128) / 1.96                                       # 0.635: the stored units' spread
    near = {"settings": {"seed": 1}, "x": {"mean": 13.99, "ci95": 0.05, "n": 16}, "r": {"mean": 1.0, "ci95": 0.0, "n": 64}}
    far = {"settings": {"seed": 1}, "x": {"mean": 13.69 + sd, "ci95": 0.05, "n": 16}, "r": {"mean": 0.9, "ci95": 0.0, "n": 64}}
    other_seed = dict(near, settings={"seed": 2})
    rounding = {"settings": {"seed": 1}, "x": {"mean": 13.69 * (1 + 1e-12), "ci95": 0.0, "n": 128},
                "r": {"mean": 0.998, "ci95": 0.0, "n": 256}}
    return (evaluate.check(near, stored) == (2, []) and len(evaluate.check(far, stored)[1]) == 2
            and [b.split(":")[0] for b in evaluate.check(other_seed, stored)[1]] == ["x"]
            and evaluate.check(rounding, stored) == (2, []))


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    bad = 0
    B, S, Di, N = 2, 37, 8, 4
    f64 = torch.float64
    u = torch.randn(B, S, Di, dtype=f64, requires_grad=True)
    dt = torch.nn.functional.softplus(torch.randn(B, S, Di, dtype=f64) * 3).requires_grad_()
    A = (-torch.exp(torch.randn(Di, N, dtype=f64) * 2)).requires_grad_()
    Bm = torch.randn(B, S, N, dtype=f64, requires_grad=True)
    Cm = torch.randn(B, S, N, dtype=f64, requires_grad=True)
    ref = selective_scan_sequential(u, dt, A, Bm, Cm)
    for c in (1, 5, 16, 64):
        bad += check(torch.allclose(selective_scan_chunked(u, dt, A, Bm, Cm, c), ref, atol=1e-12), f"chunked scan (chunk {c}) = sequential")
    bad += check(torch.allclose(selective_scan_fused(u, dt, A, Bm, Cm), ref, atol=1e-12), "fused scan = sequential")
    small = [t[:, :9].detach().clone().requires_grad_() if t.dim() == 3 else t for t in (u, dt, A, Bm, Cm)]
    bad += check(torch.autograd.gradcheck(selective_scan_fused, tuple(small)), "fused scan backward (gradcheck)")
    # The C scan (the trainer's default): built here, equal to the recurrence forward and backward.
    bad += check(native_library() is not None, "scan_native.c builds with the system C compiler")
    if native_library() is not None:
        bad += check(torch.allclose(selective_scan_native(u, dt, A, Bm, Cm), ref, atol=1e-12), "native scan = sequential")
        gy = torch.randn_like(ref)
        want = torch.autograd.grad(ref, (u, dt, A, Bm, Cm), gy)
        got = torch.autograd.grad(selective_scan_native(u, dt, A, Bm, Cm), (u, dt, A, Bm, Cm), gy)
        bad += check(all(torch.allclose(g, w, atol=1e-11) for g, w in zip(got, want)),
                     "native scan gradients = the sequential recurrence's autograd")
        bad += check(torch.autograd.gradcheck(selective_scan_native, tuple(small)), "native scan backward (gradcheck)")
        f32 = [t.detach().float().requires_grad_() for t in (u, dt, A, Bm, Cm)]
        y32 = selective_scan_native(*f32)
        bad += check(torch.allclose(y32.double(), ref, rtol=1e-4, atol=1e-4), "native scan in float32 = sequential")

    tmp = tempfile.mkdtemp()
    tok = os.path.join(tmp, "tokenizer.model")
    open(tok, "wb").close()
    for over in ({}, {"num_register_tokens": 4, "attention_normalizer": "softmax1"},
                 {"attn_layer_period": 9, "attn_layer_offset": 8}):
        cfg = M.Config(vocab_size=300, **over)
        m = M.JambaForCausalLM(cfg)
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "layernorm" in n or n.endswith(".D"):
                    p.add_(torch.randn_like(p) * 0.3)
                if "register" in n or "router" in n:
                    p.normal_(0, 0.5)
        d = os.path.join(tmp, "ck")
        export.export_checkpoint(m, d, tok)
        cfgj, W, probs = C.load_dir(d)
        bad += check(not probs, f"export structure {over}")
        m64 = M.JambaForCausalLM(M.Config.from_hf(cfgj)).double()
        m64.load_state_dict({k: torch.from_numpy(v) for k, v in W.items()})
        ids = [1, 5, 9, 100, 7, 7, 250, 3, 40, 41]
        worst = 0.0
        for norm, reg in ((None, None), ("softmax", None), ("softmax1", None), ("sink", None), (None, 0), (None, 2), (None, 6)):
            r = C.Ref(cfgj, W).forward(ids, norm, reg)
            with torch.no_grad():
                for seq in (True, False):
                    g = m64(torch.tensor([ids]), normalizer=norm, registers=reg, sequential=seq)[0][0].numpy()
                    worst = max(worst, C.rel(g, r))
        bad += check(worst < 1e-12, f"trainer model = numpy reference {over} (max rel {worst:.1e})")

    W0 = np.random.default_rng(0).normal(size=(6, 5))
    dm, dd = finetune.delta_m_d(W0, W0)
    bad += check(dm == 0.0 and abs(dd) < 1e-12, "ΔM, ΔD of an unchanged matrix are 0")
    dm, dd = finetune.delta_m_d(W0, W0 * 1.5)
    bad += check(abs(dd) < 1e-12 and dm > 0, "row rescale: ΔD = 0, ΔM > 0")
    Q = np.linalg.qr(np.random.default_rng(1).normal(size=(5, 5)))[0]
    dm, dd = finetune.delta_m_d(W0, W0 @ Q)
    bad += check(abs(dm) < 1e-12 and dd > 0, "rotation: ΔM = 0, ΔD > 0")
    rows = [("s1", 1.0, 0.0), ("s1", 0.0, 1.0), ("s2", 3.0, 2.0), ("s2", 2.0, 3.0)]
    bad += check(finetune.slope([(dm, dd) for _, dm, dd in rows]) > 0 and abs(finetune.within_slope(rows) + 1) < 1e-12,
                 "within-group slope: −1 inside each step although the pooled slope is positive")
    bad += check(resume_equals_uninterrupted(tempfile.mkdtemp()), "a stopped and resumed two-stage run exports the same bytes")
    bad += check(induction_rows_repeat_their_window(), "induction rows repeat a text window after other text")
    bad += check(target_verdicts(), "the card's target verdicts follow the intervals")
    bad += check(subset_check(), "--check: a quick subset within a few standard errors of the stored sample, else fails")
    bad += check(recipe_options(), "stage options: word recall keys, constant learning rate, resume across changed later stages")
    print("all passed" if bad == 0 else f"{bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
