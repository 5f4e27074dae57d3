#!/usr/bin/python3
"""Self-checks of tools/reference/gguf (exit 0 = all passed). About 3 s on one core.

    /usr/bin/python3 tools/reference/gguf/check_gguf.py [--no-node]

1. known answers for the quant formats, derived by hand below (not by running the code);
2. digests of ggml's own C output (quantize_row_*_ref / dequantize_row_*, ggml commit d99724f2, built
   for this check outside the repository) on two deterministic inputs, and of its dequantize_row_* of
   the dequantize-only types (Q4_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS) on pseudo-random blocks;
3. error bounds: per-element bounds for Q8_0/Q4_0, ggml's test-quantize-fns total-error limit for all;
4. gguf_io: write -> read of every value type, v2 and v3, alignments, splits;
5. the corruption table: every case refused with its code;
6. hf_convert: HF -> GGUF -> HF is the identity on every golden checkpoint it maps; GGUF F32 logits
   equal the golden expected logits; the llama-quantize Q4_K_M plan of gqa_basic by hand;
7. the fixtures: rebuilt, equal to tests/data/gguf/gguf-fixtures.tar.xz and gguf-fixtures-extra.tar.xz, expected logits near the golden;
8. node/dump_gguf.mjs (@huggingface/gguf, an independent parser) agrees with gguf_io on every fixture
   (skipped with a note when node_modules is absent: `cd tools/reference/gguf/node && npm ci`).
"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corrupt_gguf as cg  # noqa: E402
import ggml_quants as gq  # noqa: E402
import gguf_io as gi  # noqa: E402
import hf_convert as hc  # noqa: E402
import make_gguf_fixtures as mf  # noqa: E402

F = np.float32
FAILED = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        FAILED.append(what)


def blocks(raw, size):
    return np.frombuffer(raw, np.uint8).reshape(-1, size)


# 1. known answers ---------------------------------------------------------------------------

def known_answers():
    # Q8_0, one block: amax = 127 -> d = 127/127 = 1 (fp16 0x3C00), id = 1; qs = roundf(x), halves away
    # from zero: -63.5 -> -64 (0xC0), 0.5 -> 1, 1.5 -> 2, -2.5 -> -3 (0xFD); the rest 0.
    x = np.zeros(32, F)
    x[:5] = [127, -63.5, 0.5, 1.5, -2.5]
    q = gq.quantize(x, "Q8_0")
    check(q[:7] == bytes([0x00, 0x3C, 0x7F, 0xC0, 0x01, 0x02, 0xFD]) and q[7:] == bytes(27), "Q8_0 known block bytes")
    check(np.array_equal(gq.dequantize(q, "Q8_0", 32)[:5], [127, -64, 1, 2, -3]), "Q8_0 known block values")
    # Q4_0: the first largest |x| is -8 -> max = -8, d = max / -8 = 1 (0x3C00); code = MIN(15, (int8)(x + 8.5)):
    # -8 -> 0, 4 -> 12, 7 -> 15, 1.4 -> 9, -0.6 -> 7 (truncation), 0 -> 8; byte j = code[j] | code[j+16] << 4.
    x = np.zeros(32, F)
    x[[0, 1, 16, 17, 18]] = [-8, 4, 7, 1.4, -0.6]
    q = gq.quantize(x, "Q4_0")
    codes = np.full(32, 8)
    codes[[0, 1, 16, 17, 18]] = [0, 12, 15, 9, 7]
    want = bytes([0x00, 0x3C]) + bytes(int(codes[j] | codes[j + 16] << 4) for j in range(16))
    check(q == want, "Q4_0 known block bytes")
    check(np.array_equal(gq.dequantize(q, "Q4_0", 32), (codes - 8).astype(F)), "Q4_0 known block values")
    # Q4_K, one super-block, every 32-group = 0..15 twice. make_qkx2_quants: min 0, max 15, iscale 1, L = x,
    # error 0, and no rmin + 0.1*is step can beat 0 (the step with iscale 1 ties). scale 1, min 0 in all 8
    # groups -> max_scale 1, ls = nearest(63/1 * 1) = 63, lm = 0; d = fp16(1/63) = 0x2410 (1040/65536),
    # dmin = 0. Packing: scales[0..3] = 63 | (63 >> 4) << 6 = 0xFF, scales[4..7] = 0, scales[8..11] = 63 & 15.
    # Requantized L = nearest(x / (63 * 1040/65536)) = x. Dequantized: x * 65520/65536 (exact in float32).
    x = np.tile(np.arange(16, dtype=F), 16)
    q = gq.quantize(x, "Q4_K")
    xi = x.astype(int)
    qs = bytes(int(a | b << 4) for c in range(4) for a, b in zip(xi[64 * c:64 * c + 32], xi[64 * c + 32:64 * c + 64]))
    want = bytes([0x10, 0x24, 0, 0]) + bytes([0xFF] * 4 + [0] * 4 + [0x0F] * 4) + qs
    check(q == want, "Q4_K known super-block bytes")
    check(np.array_equal(gq.dequantize(q, "Q4_K", 256), x * F(65520 / 65536)), "Q4_K known super-block values")
    # Q5_K, groups 0..31: the same argument with nmax 31 (the step is = 5 gives iscale (-0.5 + 0.5 + 31)/31 = 1);
    # ls 63, d 0x2410; codes x: low nibbles in qs like Q4_K, bit 4 of element 64c + 32h + j in qh[j] bit 2c + h.
    x = np.tile(np.arange(32, dtype=F), 8)
    q = gq.quantize(x, "Q5_K")
    L = x.astype(int).reshape(4, 2, 32)
    qh = bytes(int(sum(((L[c, h, j] >> 4) & 1) << (2 * c + h) for c in range(4) for h in range(2))) for j in range(32))
    ql = bytes(int((L[c, 0, j] & 15) | (L[c, 1, j] & 15) << 4) for c in range(4) for j in range(32))
    check(q == bytes([0x10, 0x24, 0, 0]) + bytes([0xFF] * 4 + [0] * 4 + [0x0F] * 4) + qh + ql, "Q5_K known super-block bytes")
    check(np.array_equal(gq.dequantize(q, "Q5_K", 256), x * F(65520 / 65536)), "Q5_K known super-block values")
    # Q6_K: each 16-group starts with -32 and holds integers in -31..31. make_qx_quants(nmax 32): max = -32,
    # iscale = -32/-32 = 1, L = x exactly, scale = sum(x^4)/sum(x^4) = 1; the is-steps cannot do better
    # (Cauchy-Schwarz, equality only for the same L). All 16 scales 1 -> iscale = -128, d = fp16(-1/128) =
    # 0xA000, scales[] = -128 (0x80); requantized with d*sc = 1: L = x, stored x + 32. Dequantized: x.
    g = (np.arange(256) * 7) % 63 - 31
    g[::16] = -32
    x = g.astype(F)
    q = gq.quantize(x, "Q6_K")
    L = (g + 32).reshape(2, 4, 32)
    ql = bytes(int((L[c, 0 + k, j] & 15) | (L[c, 2 + k, j] & 15) << 4) for c in range(2) for k in range(2) for j in range(32))
    qh = bytes(int(sum((L[c, k, j] >> 4) << (2 * k) for k in range(4))) for c in range(2) for j in range(32))
    check(q == ql + qh + bytes([0x80] * 16) + bytes([0x00, 0xA0]), "Q6_K known super-block bytes")
    check(np.array_equal(gq.dequantize(q, "Q6_K", 256), x), "Q6_K known super-block values")
    # all-zero input. Q8_0: d = 0/127 = +0, id = 0, codes 0 -> all bytes 0, values +0. Q4_0/Q5_0: max stays
    # +0.0, d = +0/-8 = -0.0 (fp16 0x8000), codes (int8)(0 + 8.5) = 8 / (0 + 16.5) = 16 -> qs 0x88 / qs 0x00 with
    # every fifth bit set; values (8 - 8) * -0.0 = -0.0. Q5_1: d = m = 0, codes 0, values +0. Q4_K/Q5_K: every
    # group is flat (scale 0, min -0.0 -> max_min stays +0) -> all bytes 0, values 0*q - 0 = +0. Q6_K: all
    # scales 0 -> memset 0; values (0 * 0) * (0 - 32) = -0.0. A bit-exact dequantizer reproduces the signs.
    zero = {"Q8_0": (bytes(34 * 8), 0), "Q4_0": ((b"\x00\x80" + b"\x88" * 16) * 8, 1),
            "Q5_0": ((b"\x00\x80" + b"\xff" * 4 + bytes(16)) * 8, 1), "Q5_1": (bytes(24 * 8), 0),
            "Q4_K": (bytes(144), 0), "Q5_K": (bytes(176), 0), "Q6_K": (bytes(210), 1)}
    for t, (want, neg) in zero.items():
        q = gq.quantize(np.zeros(256, F), t)
        y = gq.dequantize(q, t, 256)
        check(q == want and np.all(y == 0) and np.all(np.signbit(y) == bool(neg)), f"{t} all-zero block (zeros {'-0.0' if neg else '+0.0'})")
    # fp16 / bf16 by hand: 65519 -> 0x7BFF (65504, below the halfway point 65520), 65520 -> 0x7C00 (inf),
    # 1 + 2^-11 ties to even 0x3C00, 1 + 3*2^-11 -> 0x3C02, 6e-8 -> subnormal 0x0001 (2^-24 = 5.96e-8),
    # 2.9e-8 -> 0 (0.49 of 2^-24, below half);
    # bf16: 1 + 2^-8 ties to even 0x3F80, 1 + 3*2^-8 -> 0x3F82, 0.1 (0x3DCCCCCD) -> 0x3DCD.
    h = gq.fp16_bits(np.array([65519, 65520, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 6e-8, 2.9e-8], F))
    check(list(h) == [0x7BFF, 0x7C00, 0x3C00, 0x3C02, 0x0001, 0x0000], "fp16 rounding by hand")
    b = gq.bf16_bits(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 0.1, -0.0], F))
    check(list(b) == [0x3F80, 0x3F82, 0x3DCD, 0x8000], "bf16 rounding by hand")
    check(int(gq.bf16_bits(np.array([np.nan], F))[0]) & 0x7FC0 == 0x7FC0, "bf16 NaN stays a quiet NaN")


# 2. ggml's C output ---------------------------------------------------------------------------

GGML_C_DIGESTS = {  # sha256[:32] of (quantized bytes, dequantized float32 bytes) from ggml's C functions
    ("rows", "Q8_0"): ("35c0e2382394a78f87651825d93f2dc7", "874efb6e04ed174236a851c1271cc0ec"),
    ("rows", "Q4_0"): ("b44111a201094db8f3e3ffdf96259399", "7bccd157ff5ba98e08e29f03073d3c9d"),
    ("rows", "Q5_0"): ("afab1172a39aa37d2e6f4787e9306a82", "60518e5086611066b64755c78450eb09"),
    ("rows", "Q5_1"): ("894f4816b533b78d25ba9b2ef149b240", "b63ade8ff7860e3e849b9d2eb202fe9d"),
    ("rows", "Q4_K"): ("2c363798ddacf61e9201c0a34be7015d", "66a525d5413d3fd2d73c855afb4059a7"),
    ("rows", "Q5_K"): ("f7bad1517c329fcf356ce10baecf13b1", "d08135d4a5baa1a8f81bea2af8b0f4e3"),
    ("rows", "Q6_K"): ("72f019dded963694de6519c03c3cf00b", "193f6ea6b6af08cb19b4cea3c3e5f3f8"),
    ("rows", "F16"): ("3378e1b1484d408ff8fb9b6bdf63d0f7", "9de46214d0d27066aa699d546957d9c7"),
    ("rows", "BF16"): ("f5728e033f9c63a652c283bd7587033b", "96658e3ca5a8f8f6b1528b0a382f3de2"),
    ("cos", "Q8_0"): ("11f834840a5011cb4d72fc8604d8ded6", "7b5b25a11bef93d3aa8ecac3a6a5c164"),
    ("cos", "Q4_0"): ("523b1fd831e754976826ad4ad397539e", "5388fcaa3f2aac9542226aa57f24f9f4"),
    ("cos", "Q5_0"): ("d4b2cb6455ffb080545dd4c615039408", "16f8f2a199225c2b00a674b952d2b656"),
    ("cos", "Q5_1"): ("e6d7c2ed20284fa672488a43500b8cb2", "78d99a35a36202db3d5fa3be44e1baa6"),
    ("cos", "Q4_K"): ("c5b0ab128cca90695c2d3234c8d54a7b", "e1b5d2b7126edc4689e446df7993ff04"),
    ("cos", "Q5_K"): ("031cc3b5b2266ee68034a2aa81fbbe83", "e90e165bb3bf6b7c4c1012bfb15a4090"),
    ("cos", "Q6_K"): ("8b76c8de301bb3d0067970c14aff3e45", "c2f10cbaaa6be1e5ef23b6e6865c6cd3"),
    ("cos", "F16"): ("f72882f22e747423f2238bf0ad04f719", "da7f455538ea025518c67f9ac8d0ed67"),
    ("cos", "BF16"): ("3e67626ffd816e79befc587e4d2165a0", "4d4d57ea31830ebaa13f6dd646308798"),
}
INPUT_DIGESTS = {"rows": "41193303f3de944cea14dd820e6d0148", "cos": "65e6b4f2efc5b2411947d9855e4ddb2f"}


def ggml_digests():
    sets = {"rows": mf.quant_vector_rows().reshape(-1), "cos": (0.1 + 2 * np.cos(np.arange(4096, dtype=np.float64))).astype(F)}
    for name, x in sets.items():
        if hashlib.sha256(x.tobytes()).hexdigest()[:32] != INPUT_DIGESTS[name]:
            print(f"note  input '{name}' differs on this machine (libm rounding); its ggml digests are skipped")
            continue
        for t in mf.QTYPES + ["F16", "BF16"]:
            q = gq.quantize(x, t)
            d = gq.dequantize(q, t, x.size).tobytes()
            got = (hashlib.sha256(q).hexdigest()[:32], hashlib.sha256(d).hexdigest()[:32])
            check(got == GGML_C_DIGESTS[(name, t)], f"{t} on '{name}' bit-identical to ggml's C reference")


# Dequantize-only formats: pseudo-random blocks (dequant_only_input), digests of ggml's C
# dequantize_row_* output on them (commit d99724f2); tests/engine/test_ggml_quant_more.cpp checks the
# C++ against the same digests with the same generator.
DEQUANT_ONLY_HALVES = {"Q4_1": (0, 2), "Q2_K": (80, 82), "Q3_K": (108,), "IQ4_NL": (0,), "IQ4_XS": (0,)}
DEQUANT_ONLY_SPECIAL = [None, (0x7BFF, 0xFBFF), (0x0001, 0x8000), (0x0000, 0x0000), (0xBC00, 0x3C00), (0x8400, 0x03FF)]
GGML_C_DEQUANT_ONLY = {  # name: (sha256[:32] of the input bytes, of ggml's float32 output)
    "Q4_1": ("a2cf9a2786322a636bf7781393e6ee4c", "448b043c2ce2b7b919a9e2cd8848bbe8"),
    "Q2_K": ("711c63a5bb3ee0a55e9d87056d61d722", "5889c05226018067474210ba21105225"),
    "Q3_K": ("1d39b73a34c762fa4cf424275b194f92", "cac573dad4a53c50eb423221bb0ca78e"),
    "IQ4_NL": ("aa33ff6b6f7770bb76e17bd95cab4ab9", "07cd48128b04b57f1c5e9a79a0364e53"),
    "IQ4_XS": ("d877c7833808928ca05c0a3170dff4bb", "ce2c9163439fcfb283fbb4d996b1506b"),
}


def dequant_only_input(name, nblocks=16, seed=12345):
    """nblocks blocks of type name: a 64-bit LCG (MMIX constants), each draw its top 31 bits; a block is
    block-bytes draws (low byte each), then its fp16 fields: block b < 6 takes DEQUANT_ONLY_SPECIAL[b]
    (block 0 is then zeroed whole), later blocks draw sign, exponent 10..17 and mantissa in that order."""
    tid, _, _, size = gq.type_info(name)
    state = [seed + tid]

    def nxt():
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % 2 ** 64
        return state[0] >> 33
    out = bytearray()
    for b in range(nblocks):
        blk = bytearray(nxt() & 0xFF for _ in range(size))
        for k, off in enumerate(DEQUANT_ONLY_HALVES[name]):
            if b < len(DEQUANT_ONLY_SPECIAL):
                h = 0 if DEQUANT_ONLY_SPECIAL[b] is None else DEQUANT_ONLY_SPECIAL[b][k]
            else:
                sign = nxt() & 1
                expo = 10 + nxt() % 8
                h = (sign << 15) | (expo << 10) | (nxt() & 0x3FF)
            blk[off:off + 2] = h.to_bytes(2, "little")
        out += bytes(size) if b == 0 else blk
    return bytes(out)


def ggml_dequant_only_digests():
    for name, (din, dout) in GGML_C_DEQUANT_ONLY.items():
        raw = dequant_only_input(name)
        _, _, blk, size = gq.type_info(name)
        y = gq.dequantize(raw, name, len(raw) // size * blk)
        got = (hashlib.sha256(raw).hexdigest()[:32], hashlib.sha256(y.astype("<f4").tobytes()).hexdigest()[:32])
        check(got == (din, dout), f"{name} dequantization bit-identical to ggml's C on pseudo-random blocks")
    # Known answers by hand. Q4_1: d 1, m -8, code 15 -> 7. Q3_K: d 1, scale 0 = 1 | (2 << 4) = 33 -> 1,
    # code 3 with its high bit clear -> 3 - 4 = -1. IQ4_NL: d 0.5, nibble 0 -> 0.5 * -127 = -63.5; an
    # all-zero IQ4_NL block -> 0 * -127 = -0.0.
    b = bytearray(20)
    b[1], b[3], b[4] = 0x3C, 0xC8, 0x0F
    check(gq.dequantize(bytes(b), "Q4_1", 32)[0] == 7, "Q4_1 known value")
    b = bytearray(110)
    b[32], b[96], b[104], b[109] = 0x03, 0x01, 0x02, 0x3C
    check(gq.dequantize(bytes(b), "Q3_K", 256)[0] == -1, "Q3_K known value")
    y = gq.dequantize(bytes([0, 0x38] + [0] * 16), "IQ4_NL", 32)
    z = gq.dequantize(bytes(18), "IQ4_NL", 32)
    check(y[0] == -63.5 and bool(np.all(z.view(np.uint32) == 0x80000000)), "IQ4_NL known value, -0.0 of a zero block")

# 3. error bounds ------------------------------------------------------------------------------

def error_bounds():
    # x = q d + r with |r| <= d/2 (Q8_0, roundf) or |r| <= d (Q4_0: codes clip at 15, so x/d in [7.5, 8]
    # loses up to one step); the file holds d16 = fp16(d), so |x - q d16| <= |r| + |q| |d - d16| with
    # |q| <= 127 (Q8_0) or 8 (Q4_0). |d - d16| includes fp16 underflow (d below 2^-24 becomes 0).
    x = mf.quant_vector_rows().reshape(-1)
    for t, half, qmax, size in (("Q8_0", 0.5, 127, 34), ("Q4_0", 1.0, 8, 18)):
        b = x.reshape(-1, 32)
        q = gq.quantize(x, t)
        step = np.max(np.abs(b), axis=1) / (127 if t == "Q8_0" else 8)
        d16 = np.abs(gq.fp16_value(blocks(q, size)[:, 0:2].copy().view(np.uint16)[:, 0]))
        bound = half * step + qmax * np.abs(step - d16)
        err = np.max(np.abs(gq.dequantize(q, t, x.size).reshape(-1, 32) - b), axis=1)
        check(bool(np.all(err <= bound * (1 + 1e-5) + 1e-37)), f"{t} per-element error <= {half} d + {qmax} |d - fp16(d)|")
    # ggml tests/test-quantize-fns.cpp: data 0.1 + 2 cos(i), "rmse" = sqrt(sum d^2) / n < 0.002
    c = (0.1 + 2 * np.cos(np.arange(4096, dtype=np.float64))).astype(F)
    for t in mf.QTYPES:
        d = gq.dequantize(gq.quantize(c, t), t, c.size).astype(np.float64) - c
        e = np.sqrt(np.sum(d * d)) / c.size
        check(e < 0.002, f"{t} total quantization error {e:.2e} < 0.002 (ggml's limit)")
    g = mf.quant_vector_rows()[0]
    rel = {t: np.sqrt(np.mean((gq.dequantize(gq.quantize(g, t), t, 256) - g) ** 2) / np.mean(g * g)) for t in mf.QTYPES}
    order = ["Q4_0", "Q4_K", "Q5_0", "Q5_K", "Q6_K", "Q8_0"]
    check(all(rel[a] > rel[b] for a, b in zip(order, order[1:])), "relative RMS error falls with bits: " +
          ", ".join(f"{t} {rel[t]:.4f}" for t in order))


# 4. gguf_io round trip ------------------------------------------------------------------------

def io_round_trip(tmp):
    w = gi.Writer(version=2)
    vals = [("general.architecture", gi.STRING, "jamba"), ("general.alignment", gi.UINT32, 64),
            ("v.u8", gi.UINT8, 255), ("v.i8", gi.INT8, -128), ("v.u16", gi.UINT16, 65535), ("v.i16", gi.INT16, -32768),
            ("v.u32", gi.UINT32, 2 ** 32 - 1), ("v.i32", gi.INT32, -2 ** 31), ("v.f32", gi.FLOAT32, float(F(0.1))),
            ("v.bool", gi.BOOL, False), ("v.str", gi.STRING, "ÿ€ \udcff"), ("v.u64", gi.UINT64, 2 ** 64 - 1),
            ("v.i64", gi.INT64, -2 ** 63), ("v.f64", gi.FLOAT64, 0.1), ("v.empty", gi.ARRAY, (gi.FLOAT32, [])),
            ("v.strs", gi.ARRAY, (gi.STRING, ["", "a b", "Ġthe"])), ("v.bools", gi.ARRAY, (gi.BOOL, [True, False]))]
    for k, vt, v in vals:
        w.add(k, vt, v)
    raw = gq.quantize(np.arange(512, dtype=F), "Q6_K")
    w.add_tensor("q", [256, 2], "Q6_K", raw).add_tensor("f", [3, 1, 1, 2], "F32", np.ones(6, F).tobytes())
    p = w.write(os.path.join(tmp, "all_types.gguf"))
    g = gi.parse(p)
    check(g.version == 2 and g.alignment == 64 and g.data_start % 64 == 0, "v2 file with alignment 64")
    check([(k, vt, v) for k, (vt, v) in g.kv.items()] == vals, "every metadata value type round-trips")
    check(bytes(g.tensor_bytes(g.tensor("q"))) == raw and g.tensor("f").dims == [3, 1, 1, 2] and g.tensor("f").offset % 64 == 0,
          "tensor infos and data round-trip (4-D, aligned offsets)")
    check(open(p, "rb").read() == w.to_bytes(), "writer output is deterministic")
    ts = [("t%d" % i, [32], "F32", np.full(32, i, F).tobytes()) for i in range(5)]
    paths = gi.write_split(os.path.join(tmp, "m"), [("general.architecture", gi.STRING, "jamba")], ts, 3)
    m = gi.open_model(paths[1])
    check([os.path.basename(x) for x in paths] == ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"]
          and len(m.tensors) == 5 and bytes(m.tensor_bytes("t4")) == ts[4][3] and m.kv["split.count"] == (gi.UINT16, 3),
          "split: gguf-split names, opened from shard 2, all tensors found")


# 5. corruption table --------------------------------------------------------------------------

def corruptions(tmp):
    d = os.path.join(tmp, "corrupt")
    os.makedirs(d)
    table = cg.write_corruptions(d)
    codes = {r["code"] for r in table}
    need = {"magic", "version", "kv_count", "tensor_count", "string_length", "duplicate_key", "value_type", "array_type",
            "nested_array", "array_count", "bool_value", "alignment", "tensor_name", "duplicate_tensor", "n_dims", "dim",
            "element_count", "tensor_type", "block_size", "byte_size", "offset_alignment", "offset_range", "overlap",
            "data_start", "split_missing", "split_no", "split_count", "split_tensors", "eof"}
    check(need <= codes, f"corruption table covers {len(table)} cases, codes {sorted(codes)}")
    ok = True
    for r in table:
        try:
            (gi.open_model if r["name"].startswith("split") else gi.parse)(os.path.join(d, r["file"]))
            ok = False
        except gi.GGUFError as e:
            ok &= e.code == r["code"] and "\n" not in str(e) and os.path.join(d, r["file"]).split("/")[-1] in str(e) + r["file"]
    check(ok, "every corrupt file refused with its code, one line naming the file")
    return d, table


# 6. the converter -----------------------------------------------------------------------------

REFUSED = {"extensions": "sinks / register tokens", "falcon_variant": "projection biases",
           "nemotron_moe_latent": "stacked experts with biases"}


def converter():
    from jamba_ref import read_safetensors
    for case in sorted(os.listdir(mf.GOLDEN)):
        if not os.path.exists(os.path.join(mf.GOLDEN, case, "config.json")):
            continue
        cfg, T = hc.load_checkpoint(os.path.join(mf.GOLDEN, case))
        try:
            arch, kv, ts = hc.convert(cfg, T)
        except ValueError as e:
            check(case in REFUSED, f"{case}: refused ({REFUSED.get(case, 'unexpected')}): {str(e)[:70]}")
            continue
        back = hc.to_hf(cfg, T.keys(), dict(ts))
        exact = all(np.array_equal(back[k], T[k]) for k in T if not k.endswith("A_log") and arch != "falcon-h1")
        close = all(np.allclose(back[k], T[k], rtol=2e-4, atol=1e-6) for k in T)
        check(set(back) == set(T) and exact and close, f"{case}: HF -> {arch} -> HF is the identity ({len(ts)} GGUF tensors)")
        if case in ("gqa_basic", "mixed_sharded", "nemotron_basic", "nemotron_moe", "bamba_basic", "granite_moe",
                    "falcon_basic"):
            tensors = [(n, list(reversed(a.shape)), "F32", a.tobytes()) for n, a in ts]
            with tempfile.TemporaryDirectory() as d:
                ids = mf.golden_ids(case)
                got = mf.expected_logits(os.path.join(d, "e.safetensors"), cfg, T, arch, tensors, ids)
            want = read_safetensors(os.path.join(mf.GOLDEN, case, "expected", "as_trained.safetensors"))[0]["logits"]
            err = float(np.max(np.abs(got - want)))
            check(err < 1e-4, f"{case}: logits of the F32 GGUF weights = golden logits (max diff {err:.1e})")
    # llama-quantize Q4_K_M on gqa_basic by hand (src/llama-quant.cpp): n_layer 4, n_expert 4 > 1 so ffn_down
    # layers come from the names; use_more_bits(i, 4) is true for i = 2 ((2 - 0) % 3 == 2) and i = 3 (>= 7*4/8).
    # attn_v: 2 of them, use_more_bits(1, 2) (1 >= 7*2/8) -> the second. Q6_K -> Q8_0 and Q4_K -> Q5_0 fall
    # back (32/64/96 columns, not multiples of 256); ssm_dt.weight has 8 columns -> Q5_0 does not fit -> F16;
    # output.weight: 32 columns -> Q8_0. Norms, router, conv, ssm_a/ssm_d, biases stay F32.
    cfg, T = hc.load_checkpoint(os.path.join(mf.GOLDEN, "gqa_basic"))
    _, _, ts = hc.convert(cfg, T)
    plan = hc.quantize_plan([(n, a.shape, "F32") for n, a in ts], "Q4_K_M", 4, 4)
    want = {n: "F32" for n, a in ts if a.ndim == 1 or "norm" in n or "ffn_gate_inp" in n or "conv1d" in n or not n.endswith(".weight")}
    want.update({n: "Q5_0" for n, _ in ts if n not in want})
    want.update({"output.weight": "Q8_0", "blk.0.ssm_dt.weight": "F16", "blk.2.ssm_dt.weight": "F16", "blk.3.attn_v.weight": "Q8_0",
                 "blk.2.ffn_down_exps.weight": "Q8_0", "blk.3.ffn_down.weight": "Q8_0"})
    check(plan == want, "llama-quantize Q4_K_M type plan of gqa_basic matches the hand derivation")


# 7. fixtures ----------------------------------------------------------------------------------

ARCHIVE = os.path.join(mf.ROOT, "tests", "data", "gguf", "gguf-fixtures.tar.xz")
ARCHIVE_EXTRA = os.path.join(mf.ROOT, "tests", "data", "gguf", "gguf-fixtures-extra.tar.xz")


def fixtures(tmp):
    from jamba_ref import read_safetensors
    out = os.path.join(tmp, "fixtures")
    mf.main(["make_gguf_fixtures.py", out, "--extra"])
    files = mf.fixture_files(out)
    for archive, extra in ((ARCHIVE, False), (ARCHIVE_EXTRA, True)):
        names = mf.fixture_files(out, extra)
        if not os.path.exists(archive):
            check(False, f"{archive} is missing (make_gguf_fixtures.py OUTDIR --extra --archive {ARCHIVE} --archive-extra {ARCHIVE_EXTRA})")
            continue
        with tarfile.open(archive, "r:xz") as tf:
            same = sorted(tf.getnames()) == sorted(names) and all(
                tf.extractfile(n).read() == open(os.path.join(out, n), "rb").read() for n in names)
        check(same, f"rebuilt fixtures equal {os.path.relpath(archive, mf.ROOT)} ({len(names)} files)")
        same_xz = mf.archive_bytes(out, extra) == open(archive, "rb").read()    # depends on the liblzma version too
        print(f"note  {os.path.basename(archive)} itself is {'' if same_xz else 'not '}reproduced byte for byte on this machine")
    # Q4_K_M here is mostly Q5_0 (rows of 32/64 columns fall back) and flips 2 of gqa_basic's top-2 expert
    # choices, hence the larger change; Q8_0 flips none.
    # granite_moe's Q8_0 weights flip some of its top-2 expert choices too.
    for name, case, limit in (("jamba-gqa_basic-Q4_K_M", "gqa_basic", 0.3), ("jamba-dense_no_moe-Q8_0", "dense_no_moe", 0.05),
                              ("nemotron_h-nemotron_list-Q8_0", "nemotron_list", 0.05),
                              ("granitehybrid-granite_moe-Q8_0", "granite_moe", 0.2),
                              ("granitehybrid-bamba_basic-Q8_0", "bamba_basic", 0.05),
                              ("falcon-h1-falcon_basic-Q8_0", "falcon_basic", 0.05)):
        got = read_safetensors(os.path.join(out, name + ".expected.safetensors"))[0]["logits"]
        want = read_safetensors(os.path.join(mf.GOLDEN, case, "expected", "as_trained.safetensors"))[0]["logits"]
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        check(0 < err < limit, f"{name}: expected logits differ from the unquantized golden by {err:.2%} of max |logit|")
    m = gi.open_model(os.path.join(out, "jamba-dense_no_moe-Q8_0-00002-of-00003.gguf"))
    check(len(m.files) == 3 and len(m.tensors) == m.kv["split.tensors.count"][1], "the Q8_0 fixture opens as a 3-shard split")
    g = gi.parse(os.path.join(out, "quant_vectors.gguf"))
    src = np.frombuffer(g.tensor_bytes(g.tensor("src")), F)
    ok = all(bytes(g.tensor_bytes(g.tensor(t))) == gq.quantize(src, t) and
             bytes(g.tensor_bytes(g.tensor(t + ".deq"))) == gq.dequantize(g.tensor_bytes(g.tensor(t)), t, src.size).tobytes()
             for t in mf.QTYPES)
    check(ok, "quant_vectors.gguf: every <T> = quantize(src) and <T>.deq = dequantize(<T>)")
    return out, files


# 8. the independent parser --------------------------------------------------------------------

def node_cross_check(paths, corrupt_dir, table):
    script = os.path.join(HERE, "node", "dump_gguf.mjs")
    if not os.path.isdir(os.path.join(HERE, "node", "node_modules", "@huggingface", "gguf")):
        print("note  node cross-check skipped: run `npm ci` in tools/reference/gguf/node")
        return
    res = subprocess.run(["node", script] + paths, capture_output=True, text=True, check=True)
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    def utf8_replaced(v):                       # node decodes bytes that are not UTF-8 as U+FFFD
        if isinstance(v, str):
            return v.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if isinstance(v, list):
            return [utf8_replaced(x) for x in v]
        if isinstance(v, dict):
            return {k: utf8_replaced(x) for k, x in v.items()}
        return v

    bad = []
    for p, r in zip(paths, rows):
        mine = utf8_replaced(gi.to_json(gi.parse(p)))
        if "error" in r or r["version"] != mine["version"] or r["metadata"] != mine["metadata"] or r["tensors"] != mine["tensors"] \
                or int(r["tensorDataOffset"]) != gi.parse(p).data_start:
            bad.append(os.path.basename(p))
    check(not bad, f"@huggingface/gguf reads the same metadata, tensor infos and data offset in {len(paths)} files {bad or ''}")
    files = [os.path.join(corrupt_dir, r["file"]) for r in table if not r["name"].startswith("split")]
    res = subprocess.run(["node", script] + files, capture_output=True, text=True, check=True)
    rejected = [json.loads(line).get("error") is not None for line in res.stdout.splitlines()]
    accepted = [os.path.basename(f) for f, rj in zip(files, rejected) if not rj]
    print(f"note  @huggingface/gguf also refuses {sum(rejected)} of the {len(files)} single-file corruptions; "
          f"it accepts {', '.join(accepted) or 'none'} (it checks less: no offsets, alignment, types)")


def main(argv):
    known_answers()
    ggml_digests()
    ggml_dequant_only_digests()
    error_bounds()
    with tempfile.TemporaryDirectory() as tmp:
        io_round_trip(tmp)
        cdir, table = corruptions(tmp)
        converter()
        out, files = fixtures(tmp)
        if "--no-node" not in argv:
            node_cross_check([os.path.join(out, f) for f in files if f.endswith(".gguf") and not f.startswith("corrupt/")]
                             + [os.path.join(tmp, "all_types.gguf")], cdir, table)
    print(f"\n{'FAILED: ' + str(len(FAILED)) if FAILED else 'all checks passed'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
