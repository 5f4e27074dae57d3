#!/usr/bin/python3
"""Writes the GGUF test fixtures of GGUF.md section 8 into OUTDIR (deterministic: same bytes every run).

    /usr/bin/python3 tools/reference/gguf/make_gguf_fixtures.py OUTDIR [--extra] [--archive FILE.tar.xz]
                                                                        [--archive-extra FILE.tar.xz]

OUTDIR/
  quant_vectors.gguf                 `src` (F32 [256, 4]) and, per type, `<T>` (src quantized as ggml's
                                     reference quantizer does) and `<T>.deq` (dequantized, F32); F16/BF16
                                     conversions of `special`
  vocab-tiny_spm.gguf                tokenizer-only: tests/data/tiny_spm.model as tokenizer.ggml.* "llama"
  jamba-gqa_basic-Q4_K_M.gguf        tests/golden/gqa_basic as `convert --outtype f32` + `llama-quantize
                                     Q4_K_M` would write it (K-quant rows fall back, see GGUF.md 7.3)
  jamba-dense_no_moe-Q8_0-0000k-of-00003.gguf   dense_no_moe as `convert --outtype q8_0`, then
                                     gguf-split into 3 shards
  <fixture>.expected.safetensors     token_ids (I32) and logits (F32 (T, V)): the numpy reference run on
                                     the file's dequantized weights (float64 math)
  corrupt/<name>.gguf, corrupt/table.json   malformed files and the one-line error each must give
  with --extra also: nemotron_h-nemotron_list-Q8_0.gguf (gpt2 tokenizer), granitehybrid-granite_moe-Q8_0.gguf,
  falcon-h1-falcon_basic-Q8_0.gguf, granitehybrid-bamba_basic-Q8_0.gguf and their expected logits
  (--archive-extra: gguf-fixtures-extra.tar.xz, a second archive beside the first)
"""
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import ggml_quants as gq  # noqa: E402
import gguf_io as gi  # noqa: E402
import hf_convert as hc  # noqa: E402
from corrupt_gguf import write_corruptions  # noqa: E402
from make_golden import write_safetensors  # noqa: E402

F = np.float32
GOLDEN = os.path.join(ROOT, "tests", "golden")
QTYPES = ["Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]


# ---------------------------------------------------------------------------------------------
# deterministic inputs (an LCG, so the values do not depend on numpy's generators)
# ---------------------------------------------------------------------------------------------

def lcg_uniform(n, seed):
    out, s = np.empty(n, np.float64), seed
    for i in range(n):
        s = (s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out[i] = ((s >> 11) + 0.5) / float(1 << 53)
    return out


def quant_vector_rows():
    """Four rows of 256: Gaussian; eight special 32-blocks; large Laplace-like; sparse with zero
    sub-blocks inside non-zero super-blocks (the K-quants' `if (!d) continue` path)."""
    u = lcg_uniform(1024, 20240519)
    g = np.sqrt(-2 * np.log(u[:128])) * np.cos(2 * np.pi * u[128:256])
    g = np.concatenate([g, np.sqrt(-2 * np.log(u[:128])) * np.sin(2 * np.pi * u[128:256])])
    r1 = np.concatenate([np.zeros(32), np.full(32, 0.5), np.full(32, -2.0), (u[256:288] - 0.5) * 2e-7,
                         np.where(np.arange(32) == 7, 100.0, (u[288:320] - 0.5) * 0.02), np.arange(32) % 16 - 8.0,
                         (np.arange(32) - 16) * 0.5 + 0.25, -u[320:352] - 0.1])
    r2 = np.log(u[352:608] / (1 - u[352:608])) * 1500.0
    r3 = np.zeros(256)
    r3[40:64] = (u[608:632] - 0.5) * 3
    r3[100] = -5.0
    r3[160:192] = (u[632:664] - 0.5) * 0.001
    return np.stack([g, r1, r2, r3]).astype(F)


SPECIAL = np.array([0.0, -0.0, 1.0, -1.5, 65504.0, 65519.0, 65520.0, 1e6, 6.0e-8, 3.0e-8, 1e-40, 3.4e38, -3.4e38,
                    1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 0.1], F)


def write_quant_vectors(path):
    src = quant_vector_rows()
    w = gi.Writer()
    w.add("general.architecture", gi.STRING, "hybridlens-quant-vectors")
    w.add("general.description", gi.STRING, "ggml reference quantizers on `src`; `<T>.deq` = dequantize(<T>)")
    w.add_tensor("src", [256, 4], "F32", src.tobytes())
    for t in QTYPES:
        q = gq.quantize(src, t)
        w.add_tensor(t, [256, 4], t, q)
        w.add_tensor(t + ".deq", [256, 4], "F32", gq.dequantize(q, t, src.size).tobytes())
    w.add_tensor("special", [len(SPECIAL)], "F32", SPECIAL.tobytes())
    for t in ("F16", "BF16"):
        w.add_tensor("special." + t, [len(SPECIAL)], t, gq.quantize(SPECIAL, t))
    return w.write(path)


# ---------------------------------------------------------------------------------------------
# tokenizers
# ---------------------------------------------------------------------------------------------

def _varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return v, i


def _fields(b):
    """Protocol-buffer fields of a message: yields (field number, wire type, value)."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise ValueError(f"protobuf wire type {wt}")
        yield f, wt, v


def read_sentencepiece(path):
    """ModelProto.pieces (field 1): (piece, score, type) with SentencePiece's type numbers, which
    tokenizer.ggml.token_type shares (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte)."""
    pieces = []
    with open(path, "rb") as f:
        data = f.read()
    for fn, _, v in _fields(data):
        if fn == 1:
            piece, score, typ = "", 0.0, 1
            for g, _, x in _fields(v):
                if g == 1:
                    piece = x.decode("utf-8")
                elif g == 2:
                    score = struct.unpack("<f", x)[0]
                elif g == 3:
                    typ = x
            pieces.append((piece, score, typ))
    return pieces


def spm_kv(pieces, bos=1, eos=2, unk=3, pad=0):
    """What convert_hf_to_gguf's _set_vocab_sentencepiece writes (user-defined pieces become normal)."""
    types = [1 if t == 4 else t for _, _, t in pieces]
    return [("tokenizer.ggml.model", gi.STRING, "llama"), ("tokenizer.ggml.pre", gi.STRING, "default"),
            ("tokenizer.ggml.tokens", gi.ARRAY, (gi.STRING, [p for p, _, _ in pieces])),
            ("tokenizer.ggml.scores", gi.ARRAY, (gi.FLOAT32, [float(s) for _, s, _ in pieces])),
            ("tokenizer.ggml.token_type", gi.ARRAY, (gi.INT32, types)),
            hc.u32("tokenizer.ggml.bos_token_id", bos), hc.u32("tokenizer.ggml.eos_token_id", eos),
            hc.u32("tokenizer.ggml.unknown_token_id", unk), hc.u32("tokenizer.ggml.padding_token_id", pad),
            ("tokenizer.ggml.add_bos_token", gi.BOOL, True), ("tokenizer.ggml.add_eos_token", gi.BOOL, False)]


def small_spm(n):
    """A SentencePiece-style vocabulary of n pieces for the tiny models: tiny_spm's 4 specials and its
    first n - 4 learned pieces (ids 260...). Structurally valid; it cannot encode every byte."""
    p = read_sentencepiece(os.path.join(ROOT, "tests", "data", "tiny_spm.model"))
    return spm_kv(p[:4] + p[260:260 + n - 4])


GPT2_MERGES = ["Ġ t", "h e", "Ġt he", "i n", "a n", "e r", "o n", "r e", "Ġ a", "e n", "a t", "o r", "e s", "i s",
               "Ġ s", "Ġ w", "Ġ o", "Ġ c", "Ġ b", "Ġ f", "Ġ m", "Ġ p", "i t", "a l", "a r", "l e", "Ġ d", "Ġo f",
               "Ġa n"]


def small_gpt2(n):
    """A byte-level BPE vocabulary (tokenizer.ggml.model "gpt2") of n <= 128 tokens: <unk> <s> </s>
    (control), 'Ġ' (space) 'Ċ' (newline), the 94 printable ASCII characters, then merges in order."""
    toks = ["<unk>", "<s>", "</s>", "Ġ", "Ċ"] + [chr(c) for c in range(33, 127)]
    for m in GPT2_MERGES[:n - len(toks)]:
        toks.append(m.replace(" ", ""))
    types = [3, 3, 3] + [1] * (len(toks) - 3)
    return [("tokenizer.ggml.model", gi.STRING, "gpt2"), ("tokenizer.ggml.pre", gi.STRING, "default"),
            ("tokenizer.ggml.tokens", gi.ARRAY, (gi.STRING, toks)),
            ("tokenizer.ggml.token_type", gi.ARRAY, (gi.INT32, types)),
            ("tokenizer.ggml.merges", gi.ARRAY, (gi.STRING, GPT2_MERGES[:n - 99])),
            hc.u32("tokenizer.ggml.bos_token_id", 1), hc.u32("tokenizer.ggml.eos_token_id", 2),
            hc.u32("tokenizer.ggml.unknown_token_id", 0), ("tokenizer.ggml.add_bos_token", gi.BOOL, True)]


def write_vocab_spm(path):
    p = read_sentencepiece(os.path.join(ROOT, "tests", "data", "tiny_spm.model"))
    w = gi.Writer()
    w.add("general.architecture", gi.STRING, "jamba").add("general.type", gi.STRING, "vocab")
    w.add("general.name", gi.STRING, "tiny_spm")
    for k, vt, v in spm_kv(p):
        w.add(k, vt, v)
    return w.write(path)


# ---------------------------------------------------------------------------------------------
# model fixtures
# ---------------------------------------------------------------------------------------------

REFS = {"jamba": ("jamba_ref", "JambaRef"), "nemotron_h": ("nemotron_ref", "NemotronHRef"),
        "nemotron_h_moe": ("nemotron_ref", "NemotronHRef"), "falcon-h1": ("falcon_ref", "FalconH1Ref")}


def reference_class(arch, cfg):
    if arch == "granitehybrid":
        mod, cls = ("bamba_ref", "BambaRef") if "BambaForCausalLM" in cfg["architectures"] else ("granite_ref", "GraniteRef")
    else:
        mod, cls = REFS[arch]
    return getattr(__import__(mod), cls)


def model_tensors(case, mode):
    """(cfg, hf tensors, arch, kv, [(name, dims, type, raw)]): mode "Q8_0" = convert --outtype q8_0;
    "Q4_K_M" = convert --outtype f32, then llama-quantize Q4_K_M."""
    cfg, T = hc.load_checkpoint(os.path.join(GOLDEN, case))
    arch, kv, ts = hc.convert(cfg, T)
    if mode == "Q4_K_M":
        n_exp = next((v for k, _, v in kv if k.endswith(".expert_count")), 0)
        n_layer = next(v for k, _, v in kv if k.endswith(".block_count"))
        plan = hc.quantize_plan([(n, a.shape, hc.outtype_type(n, a, "F32")) for n, a in ts], mode, n_layer, n_exp)
    else:
        plan = {n: hc.outtype_type(n, a, mode) for n, a in ts}
    out = [(n, list(reversed(a.shape)), plan[n], gq.quantize(a, plan[n])) for n, a in ts]
    return cfg, T, arch, kv, out


def model_kv(arch, case, kv, mode, vocab):
    head = [("general.architecture", gi.STRING, arch), ("general.type", gi.STRING, "model"),
            ("general.name", gi.STRING, f"HybridLens golden {case}")]
    tail = [hc.u32("general.file_type", hc.FILE_TYPE[mode]), hc.u32("general.quantization_version", 2)]
    return head + kv + tail + vocab


def expected_logits(path, cfg, T, arch, tensors, token_ids):
    """Run the family's numpy reference on the dequantized GGUF weights mapped back to HF names."""
    deq = {n: gq.dequantize(raw, t, int(np.prod(dims))).reshape(tuple(reversed(dims))) for n, dims, t, raw in tensors}
    c = dict(cfg)
    if arch == "falcon-h1":                                              # the multipliers live in the weights now:
        c.update({k: 1.0 for k in cfg if k.endswith("_multiplier")})     # map back and run without them
        c.update(mlp_multipliers=[1.0, 1.0], ssm_multipliers=[1.0] * 5)
    hf = hc.to_hf(c, T.keys(), deq)
    ref_cls = reference_class(arch, cfg)
    ref = ref_cls(ref_cls.CONFIG(c), hf)
    tr = ref.run(token_ids)
    write_safetensors(path, [("token_ids", "I32", np.asarray(token_ids, np.int32)),
                             ("logits", "F32", tr["logits"].astype(F))],
                      {"format": "hybridlens-gguf-expected", "fixture": os.path.basename(path).split(".expected")[0]})
    return tr["logits"]


def golden_ids(case):
    with open(os.path.join(GOLDEN, case, "expected", "runs.json")) as f:
        return json.load(f)["runs"][0]["token_ids"]


def write_model(outdir, case, mode, vocab, n_split=1):
    cfg, T, arch, kv, tensors = model_tensors(case, mode)
    name = f"{arch}-{case}-{mode}"
    kvs = model_kv(arch, case, kv, mode, vocab)
    if n_split > 1:
        paths = gi.write_split(os.path.join(outdir, name), kvs, tensors, n_split)
    else:
        w = gi.Writer()
        for k, vt, v in kvs:
            w.add(k, vt, v)
        for t in tensors:
            w.add_tensor(*t)
        paths = [w.write(os.path.join(outdir, name + ".gguf"))]
    expected_logits(os.path.join(outdir, name + ".expected.safetensors"), cfg, T, arch, tensors, golden_ids(case))
    return paths


EXTRA = ("nemotron_h-", "granitehybrid-", "falcon-h1-")


def fixture_files(out, extra=False):
    """The committed sets as sorted relative paths: every file under out except the --extra models
    (gguf-fixtures.tar.xz), or those models only (extra=True: gguf-fixtures-extra.tar.xz)."""
    files = [os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs]
    return sorted(f for f in files if f.startswith(EXTRA) == extra)


def archive_bytes(out, extra=False):
    """A deterministic .tar.xz of fixture_files(out, extra) (no times, owners or modes from this machine)."""
    import io
    import lzma
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for rel in fixture_files(out, extra):
            with open(os.path.join(out, rel), "rb") as f:
                data = f.read()
            ti = tarfile.TarInfo(rel)
            ti.size, ti.mtime, ti.mode, ti.uid, ti.gid, ti.uname, ti.gname = len(data), 0, 0o644, 0, 0, "", ""
            tf.addfile(ti, io.BytesIO(data))
    return lzma.compress(buf.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9 | lzma.PRESET_EXTREME)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    out = argv[1]
    os.makedirs(os.path.join(out, "corrupt"), exist_ok=True)
    write_quant_vectors(os.path.join(out, "quant_vectors.gguf"))
    write_vocab_spm(os.path.join(out, "vocab-tiny_spm.gguf"))
    write_model(out, "gqa_basic", "Q4_K_M", small_spm(96))
    write_model(out, "dense_no_moe", "Q8_0", small_spm(64), n_split=3)
    if "--extra" in argv:
        write_model(out, "nemotron_list", "Q8_0", small_gpt2(128))
        write_model(out, "granite_moe", "Q8_0", small_gpt2(128))
        write_model(out, "falcon_basic", "Q8_0", small_gpt2(128))
        write_model(out, "bamba_basic", "Q8_0", small_gpt2(128))
    write_corruptions(os.path.join(out, "corrupt"))
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    print(f"wrote {out} ({total} bytes)")
    for opt, extra in (("--archive", False), ("--archive-extra", True)):
        if opt in argv:
            path = argv[argv.index(opt) + 1]
            with open(path, "wb") as f:
                f.write(archive_bytes(out, extra))
            print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(fixture_files(out, extra))} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
