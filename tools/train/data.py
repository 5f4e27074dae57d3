"""Training data for the HybridLens demo models.

Natural text: GNU manuals in Info format shipped by Debian packages (all under the GNU Free
Documentation License 1.3 or later, no invariant sections):
  base domain    coreutils, diffutils, sed, grep, findutils, gzip manuals
  shifted domain wget manual (used only for the fine-tunes)
Exact-recall tasks, generated: multi-query associative recall (MQAR) and span copying.
"""
import gzip
import os
import re
import subprocess

import numpy as np

INFO = "/usr/share/info"
BASE_SOURCES = [  # (debian package, info files)
    ("coreutils", ["coreutils.info.gz"]),
    ("diffutils", ["diffutils.info.gz"]),
    ("sed", ["sed.info.gz"]),
    ("grep", ["grep.info.gz"]),
    ("findutils", ["find.info-1.gz", "find.info-2.gz"]),
    ("gzip", ["gzip.info.gz"]),
]
SHIFT_SOURCES = [("wget", ["wget.info.gz"])]

# Task symbols. Keys: the 24 lowercase Greek letters; values: the digits 0-9 (split_digits makes
# every digit its own piece). QUERY starts the query section of an MQAR instance, COPY separates a
# span from its copy. All keys and markers are user-defined SentencePiece symbols: always one piece.
KEYS = list("αβγδεζηθικλμνξοπρστυφχψω")
VALUES = list("0123456789")
QUERY = "→"
COPY = "↻"
USER_SYMBOLS = KEYS + [QUERY, COPY]

# Recall vocabularies (a stage's "keys"): "letters" are KEYS -> VALUES above; "words" draws keys and
# values from the tokenizer's whole-word pieces (WORD_KEYS and WORD_VALUES slice the list of
# word-initial alphabetic pieces in vocabulary order; the first 128 are the copy rows' words), so that
# there are far more pairs than a state can tabulate and a query must find its key (model card).
RECALL_KEY_SETS = ("letters", "words")
WORD_KEYS = (128, 1280)
WORD_VALUES = (1280, None)
MAX_PAIRS = {"letters": len(KEYS), "words": WORD_KEYS[1] - WORD_KEYS[0]}


def info_to_text(raw):
    """Strips Info navigation (node headers, menus, tag tables) and keeps the prose paragraphs."""
    out = []
    for part in raw.split("\x1f"):
        head = part.lstrip()
        if head.startswith("Tag Table:") or head.startswith("Indirect:") or head.startswith("End Tag Table"):
            continue
        for line in part.split("\n"):
            s = line.rstrip()
            if s.startswith("File: ") and "Node:" in s:
                continue
            if s.startswith("* Menu:") or re.match(r"^\* [^:]*::", s) or re.match(r"^\* [^:]+: [^.]*\.", s):
                continue
            if re.match(r"^[=\-\*\.]{4,}$", s.strip()):
                continue  # underlines of headings
            if any(ord(c) < 32 and c not in "\t" for c in s):
                continue
            out.append(s.replace("\t", " "))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text)


def load_sources(sources):
    texts = []
    for _pkg, files in sources:
        for f in files:
            with gzip.open(os.path.join(INFO, f), "rt", encoding="utf-8", errors="replace") as fh:
                texts.append(info_to_text(fh.read()))
    return "\n\n".join(texts)


def paragraphs(text):
    return [p.strip() for p in text.split("\n\n") if len(p.strip()) > 0]


def train_tokenizer(workdir, base_text, shift_text, vocab_size):
    """Trains the SentencePiece unigram model with spm_train; returns the model path."""
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "spm_corpus.txt")
    with open(corpus, "w", encoding="utf-8") as fh:
        for p in paragraphs(base_text) + paragraphs(shift_text):
            for line in p.split("\n"):
                if line.strip():
                    fh.write(line.strip() + "\n")
    prefix = os.path.join(workdir, "tokenizer")
    cmd = [
        "spm_train", f"--input={corpus}", f"--model_prefix={prefix}", f"--vocab_size={vocab_size}",
        "--model_type=unigram", "--character_coverage=1.0", "--split_digits=true",
        "--byte_fallback=true", "--pad_id=0", "--bos_id=1", "--eos_id=2", "--unk_id=3",
        "--pad_piece=<pad>", "--bos_piece=<|startoftext|>", "--eos_piece=<|endoftext|>",
        "--unk_piece=<unk>", "--user_defined_symbols=" + ",".join(USER_SYMBOLS),
        "--num_threads=2", "--input_sentence_size=2000000", "--shuffle_input_sentence=false",
        "--max_sentence_length=8192", "--seed_sentencepiece_size=200000",
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return prefix + ".model"


class Tokenizer:
    """Thin wrapper over the sentencepiece Python module if present, else the spm_encode binary."""

    def __init__(self, model_path):
        self.model_path = model_path
        self.sp = None
        try:
            import sentencepiece as spm  # noqa: F401
            self.sp = spm.SentencePieceProcessor(model_file=model_path)
        except Exception:
            self.sp = None
        self.vocab = self._read_vocab()
        self.piece_to_id = {p: i for i, p in enumerate(self.vocab)}

    def _read_vocab(self):
        vocab_file = self.model_path[:-len(".model")] + ".vocab"
        with open(vocab_file, encoding="utf-8") as fh:
            return [line.split("\t")[0] for line in fh]

    def encode_lines(self, lines):
        if self.sp is not None:
            return [self.sp.encode(l) for l in lines]
        p = subprocess.run(["spm_encode", f"--model={self.model_path}", "--output_format=id"],
                           input="\n".join(lines) + "\n", capture_output=True, text=True, check=True)
        rows = p.stdout.split("\n")
        return [[int(x) for x in r.split()] for r in rows[:len(lines)]]

    def encode(self, text):
        return self.encode_lines([text.replace("\n", " ")])[0]

    def decode_ids(self, ids):
        return "".join(self.vocab[i] for i in ids).replace("\u2581", " ")


def encode_corpus(tok, text):
    """Token ids of a text: paragraphs encoded one per line, joined with newline-free separation."""
    paras = [p.replace("\n", " ") for p in paragraphs(text)]
    ids = []
    for row in tok.encode_lines(paras):
        ids.extend(row)
    return np.asarray(ids, dtype=np.int64)


class TaskSpec:
    """The task vocabulary: recall keys and values of the key set `keys` (RECALL_KEY_SETS), the query
    and copy marks, the copy rows' words."""

    def __init__(self, tok, keys="letters"):
        if keys not in RECALL_KEY_SETS:
            raise ValueError(f"recall keys must be one of {', '.join(RECALL_KEY_SETS)}, not {keys!r}")
        self.key_set = keys
        self.bos = 1
        self.space = tok.piece_to_id["\u2581"]
        self.keys = [tok.piece_to_id[k] for k in KEYS]
        self.values = [tok.piece_to_id[v] for v in VALUES]
        self.query = tok.piece_to_id[QUERY]
        self.copy = tok.piece_to_id[COPY]
        # Span-copy vocabulary: word-initial natural pieces (no task symbols, no bytes, no digits).
        pool = []
        for i, p in enumerate(tok.vocab):
            if i < 4 or not p.startswith("\u2581") or len(p) < 3:
                continue
            body = p[1:]
            if body.isalpha() and body.isascii():
                pool.append(i)
        self.copy_pool = pool[:WORD_KEYS[0]]
        if keys == "words":
            if len(pool) < WORD_VALUES[0] + len(VALUES):
                raise ValueError(f"the tokenizer has {len(pool)} whole-word pieces; word recall needs at least "
                                 f"{WORD_VALUES[0] + len(VALUES)}")
            self.keys = pool[WORD_KEYS[0]:WORD_KEYS[1]]
            self.values = pool[WORD_VALUES[0]:WORD_VALUES[1]]


def lead(spec):
    """The pieces between BOS and the first key: what the tokenizer makes of a typed prompt. Greek keys
    are user symbols, so "α3β7→β" starts with a lone ▁ (the dummy prefix); a word key is itself a
    word-initial piece ("pages unit→ pages" encodes as ▁pages ▁unit → ▁pages)."""
    return [] if spec.key_set == "words" else [spec.space]


def mqar_instance(rng, spec, n_pairs):
    """[BOS ▁ k1 v1 … kn vn → q1 a1 … qn an] (word keys: no lone ▁, see lead): every key queried once,
    in random order. Returns ids and a mask of the positions whose NEXT token is an answer (the loss
    targets)."""
    keys = rng.choice(len(spec.keys), size=n_pairs, replace=False)
    vals = rng.integers(0, len(spec.values), size=n_pairs)
    ids = [spec.bos] + lead(spec)
    for k, v in zip(keys, vals):
        ids += [spec.keys[k], spec.values[v]]
    ids.append(spec.query)
    target = [False] * len(ids)
    order = rng.permutation(n_pairs)
    for j in order:
        ids.append(spec.keys[keys[j]])
        target.append(True)  # predicting the value after the query key
        ids.append(spec.values[vals[j]])
        target.append(False)
    return ids, target


def mqar_gap_instance(rng, spec, n_pairs, filler):
    """[BOS ▁ k1 v1 … kn vn  <filler text>  → q1 a1 … qn an]: MQAR whose queries come after a stretch
    of natural text (`filler`, token ids), so a model must hold the pairs across unrelated tokens —
    the regime where a fixed-size SSM state falls behind attention (Arora et al. 2023, Zoology).
    Returns ids and the answer mask as mqar_instance."""
    ids, target = mqar_instance(rng, spec, n_pairs)
    cut = 1 + len(lead(spec)) + 2 * n_pairs
    fill = [int(t) for t in filler]
    return ids[:cut] + fill + ids[cut:], target[:cut] + [False] * len(fill) + target[cut:]


def copy_instance(rng, spec, span):
    """[BOS ▁ w1 … wm ↻ w1 … wm]: the loss targets the copied span."""
    words = rng.choice(spec.copy_pool, size=span, replace=True).tolist()
    ids = [spec.bos, spec.space] + words + [spec.copy] + words
    target = [False] * (2 + span) + [True] * span + [False]
    return ids, target


def induction_instance(rng, spec, text_ids, span, gap):
    """[BOS ▁ s1 … sm  <gap tokens of other text>  s1 … sm]: a window of training text, a stretch of
    other text, then the window again; the loss targets the repeat from its second token on. The
    offset between the two copies varies and the tokens are natural text, so the repeat can only be
    predicted by finding the earlier occurrence of the current token and reading the token after it
    (an induction head, Olsson et al. 2022) — the lookup a recall query needs too (k … k → v)."""
    seg = [int(t) for t in text_window(rng, text_ids, span)]
    fill = [int(t) for t in text_window(rng, text_ids, gap)] if gap > 0 else []
    ids = [spec.bos, spec.space] + seg + fill + seg
    target = [False] * (2 + span + len(fill)) + [True] * (span - 1) + [False]
    return ids, target


def text_window(rng, text_ids, n):
    st = int(rng.integers(0, len(text_ids) - n - 1))
    return text_ids[st:st + n]


def pack_tasks(rng, spec, seq_len, kind, text_ids=None, pairs=(2, 8), gap=(0, 0)):
    """One training row of `seq_len + 1` ids packed with task instances, plus its loss mask (on inputs:
    mask[t] true means the label ids[t+1] counts). `kind` is "mqar", "copy" or "induction". MQAR
    instances have `pairs` (inclusive range) pairs and, when gap[1] > 0, a filler of gap[0]..gap[1]
    text tokens between the pairs and the queries; induction instances repeat a window of 8–32 text
    tokens after 0–24 tokens of other text (induction_instance)."""
    ids, tgt = [], []
    while len(ids) < seq_len + 1:
        if kind == "mqar":
            n = int(rng.integers(pairs[0], pairs[1] + 1))
            g = int(rng.integers(gap[0], gap[1] + 1)) if gap[1] > 0 else 0
            if g > 0:
                a, b = mqar_gap_instance(rng, spec, n, text_window(rng, text_ids, g))
            else:
                a, b = mqar_instance(rng, spec, n)
        elif kind == "induction":
            a, b = induction_instance(rng, spec, text_ids, int(rng.integers(8, 33)), int(rng.integers(0, 25)))
        else:
            a, b = copy_instance(rng, spec, int(rng.integers(4, 17)))
        ids += a
        tgt += b
    return np.asarray(ids[:seq_len + 1]), np.asarray(tgt[:seq_len], dtype=bool)


class Batcher:
    """Deterministic mixed batches: natural-text windows and packed tasks. `mix` holds the shares of
    text, recall (MQAR) and copy rows, and optionally a fourth, of induction rows; a mix of three
    draws exactly the batches it drew before the fourth kind existed."""
    KINDS = ("text", "mqar", "copy", "induction")

    def __init__(self, text_ids, spec, seq_len, batch, seed, mix=(0.15, 0.45, 0.4), pairs=(2, 8), gap=(0, 0)):
        self.text = text_ids
        self.pairs = pairs
        self.gap = gap
        self.spec = spec
        self.S = seq_len
        self.B = batch
        self.rng = np.random.default_rng(seed)
        self.mix = np.asarray(mix) / np.sum(mix)

    def next(self):
        X = np.zeros((self.B, self.S), dtype=np.int64)
        Y = np.full((self.B, self.S), -100, dtype=np.int64)
        kinds = self.rng.choice(len(self.mix), size=self.B, p=self.mix)
        for b, k in enumerate(kinds):
            if k == 0 or self.spec is None:
                st = int(self.rng.integers(0, len(self.text) - self.S - 1))
                row = self.text[st:st + self.S + 1].copy()
                row[0] = self.spec.bos if self.spec is not None else 1
                X[b] = row[:-1]
                Y[b] = row[1:]
            else:
                row, m = pack_tasks(self.rng, self.spec, self.S, self.KINDS[k], self.text,
                                    self.pairs, self.gap)
                X[b] = row[:-1]
                y = row[1:].copy()
                y[~m] = -100
                Y[b] = y
        return X, Y


def text_batch(rng, text_ids, seq_len, batch, bos=1):
    X = np.zeros((batch, seq_len), dtype=np.int64)
    Y = np.zeros((batch, seq_len), dtype=np.int64)
    for b in range(batch):
        st = int(rng.integers(0, len(text_ids) - seq_len - 1))
        row = text_ids[st:st + seq_len + 1].copy()
        row[0] = bos
        X[b] = row[:-1]
        Y[b] = row[1:]
    return X, Y
