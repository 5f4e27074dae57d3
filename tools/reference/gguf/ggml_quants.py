#!/usr/bin/python3
"""ggml's weight formats in numpy: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, and the
dequantize-only Q4_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS (no quantizer: files made by llama-quantize are read).

What it is: an independent re-implementation of the reference (scalar) quantizers and the
dequantizers of ggml (ggml project, src/ggml-quants.c: quantize_row_*_ref, dequantize_row_*;
block structs in src/ggml-common.h), written to be bit-exact with them, including the K-quants'
scale search (make_qkx2_quants, make_qx_quants). Q5_0/Q5_1 are here because llama.cpp's quantizer
falls back to them for rows that are not a multiple of 256 (Q4_K -> Q5_0, Q5_K -> Q5_1; Q6_K -> Q8_0).

Bit-exactness rests on evaluating every float operation of the C code in IEEE float32, in the C
order, without fused multiply-add: each loop over the elements of a block is a Python loop over the
element index with numpy float32 vectors across all blocks (the C sums are sequential, never pairwise).
GGUF.md section 4 describes the byte layouts; check_gguf.py holds hand-derived known answers.

API: quantize(x, t) -> bytes (x float32, size a multiple of the block size, row-major as ggml stores
rows: the element order of the file); dequantize(buf, t, n) -> float32 array of n values.
"""
import numpy as np

F = np.float32

# ggml_type id -> (name, elements per block, bytes per block). ggml's include/ggml.h numbering and
# src/ggml.c type_traits; None = removed ids that a file must not use.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 4: None, 5: None,
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292), 16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74),
    18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    31: None, 32: None, 33: None, 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 36: None, 37: None,
    38: None, 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36), 41: ("Q1_0", 128, 18), 42: ("Q2_0", 64, 18),
}
TYPE_ID = {v[0]: k for k, v in GGML_TYPES.items() if v}
SUPPORTED = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
DEQUANT_ONLY = ("Q4_1", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS")
# The 16 levels of the non-linear 4-bit codes of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
IQ4NL_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int64)


def type_info(t):
    """(id, name, block elements, block bytes) of a type given by id or name."""
    tid = TYPE_ID[t] if isinstance(t, str) else int(t)
    name, blk, size = GGML_TYPES[tid]
    return tid, name, blk, size


def row_bytes(t, n):
    _, name, blk, size = type_info(t)
    if n % blk:
        raise ValueError(f"{name}: {n} elements are not a multiple of the block size {blk}")
    return n // blk * size


# ---------------------------------------------------------------------------------------------
# scalars: fp16, bf16, rounding
# ---------------------------------------------------------------------------------------------

def fp16_bits(x):
    """float32 -> IEEE half bits, round to nearest even (ggml_compute_fp32_to_fp16; overflow -> inf)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, F).astype(np.float16).view(np.uint16)


def fp16_value(bits):
    return np.asarray(bits, np.uint16).view(np.float16).astype(F)


def bf16_bits(x):
    """float32 -> bfloat16 bits as ggml_compute_fp32_to_bf16: NaN -> quiet (top half | 0x40), else RNE."""
    u = np.asarray(x, F).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rne = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    return np.where(nan, (u >> 16) | 64, rne).astype(np.uint16)


def bf16_value(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(F)


def nearest_int(v):
    """ggml's nearest_int (adds 1.5*2^23): round half to even, exact for |v| < 2^22."""
    return np.rint(np.asarray(v, F)).astype(np.int64)


def roundf(v):
    """C roundf: half away from zero (exact: v - trunc(v) is exact in float32)."""
    v = np.asarray(v, F)
    t = np.trunc(v)
    return (t + np.where(np.abs(v - t) >= F(0.5), np.sign(v), F(0))).astype(np.int64)


def first_absmax(x):
    """(amax, max) per row: the first element of largest |x| wins, as `if (amax < fabsf(v))`."""
    i = np.argmax(np.abs(x), axis=1)
    mx = x[np.arange(x.shape[0]), i]
    mx = np.where(mx != 0, mx, F(0)).astype(F)                           # all zero: max stays +0.0
    return np.abs(mx), mx


# ---------------------------------------------------------------------------------------------
# 32-element blocks: Q8_0, Q4_0, Q5_0, Q5_1
# ---------------------------------------------------------------------------------------------

def _inv(d):
    """C `d ? 1.0f/d : 0.0f` for float32 vectors."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F(1) / np.where(d != 0, d, F(1)), F(0)).astype(F)


def quantize_q8_0(x):
    b = x.reshape(-1, 32)
    d = (np.max(np.abs(b), axis=1) / F(127)).astype(F)
    q = roundf(b * _inv(d)[:, None]).astype(np.int8)
    out = np.zeros((b.shape[0], 34), np.uint8)
    out[:, 0:2] = fp16_bits(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def dequantize_q8_0(blocks):
    d = fp16_value(blocks[:, 0:2].copy().view(np.uint16)[:, 0])
    q = blocks[:, 2:].view(np.int8).astype(F)
    return (q * d[:, None]).astype(F)


def _q_xi(b, nmax):
    """Q4_0 / Q5_0 codes: d = max / -(nmax+1)/2.., code = MIN(nmax, (int8_t)(x*id + half))."""
    half = (nmax + 1) // 2                                               # 8 for Q4_0, 16 for Q5_0
    _, mx = first_absmax(b)
    d = (mx / F(-half)).astype(F)
    v = (b * _inv(d)[:, None]).astype(F) + F(half + 0.5)
    return d, np.minimum(nmax, np.trunc(v).astype(np.int64))


def quantize_q4_0(x):
    b = x.reshape(-1, 32)
    d, xi = _q_xi(b, 15)
    out = np.zeros((b.shape[0], 18), np.uint8)
    out[:, 0:2] = fp16_bits(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = (xi[:, :16] | (xi[:, 16:] << 4)).astype(np.uint8)
    return out.tobytes()


def dequantize_q4_0(blocks):
    d = fp16_value(blocks[:, 0:2].copy().view(np.uint16)[:, 0])[:, None]
    qs = blocks[:, 2:18].astype(np.int64)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1) - 8
    return (q.astype(F) * d).astype(F)


def _pack_q5(xi):
    """16 nibble bytes (low 4 bits, j | j+16) and the 32-bit word of fifth bits (bit j = element j)."""
    qs = ((xi[:, :16] & 0xF) | ((xi[:, 16:] & 0xF) << 4)).astype(np.uint8)
    bits = ((xi & 0x10) >> 4).astype(np.uint64)
    qh = np.sum(bits << np.arange(32, dtype=np.uint64), axis=1).astype(np.uint32)
    return qs, qh.view(np.uint8).reshape(-1, 4)


def quantize_q5_0(x):
    b = x.reshape(-1, 32)
    d, xi = _q_xi(b, 31)
    qs, qh = _pack_q5(xi)
    out = np.zeros((b.shape[0], 22), np.uint8)
    out[:, 0:2] = fp16_bits(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:6], out[:, 6:] = qh, qs
    return out.tobytes()


def _unpack_q5(qh_bytes, qs):
    qh = qh_bytes.copy().view(np.uint32)[:, 0].astype(np.int64)
    hi = (qh[:, None] >> np.arange(32)) & 1
    lo = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.int64)
    return lo | (hi << 4)


def dequantize_q5_0(blocks):
    d = fp16_value(blocks[:, 0:2].copy().view(np.uint16)[:, 0])[:, None]
    q = _unpack_q5(blocks[:, 2:6], blocks[:, 6:22]) - 16
    return (q.astype(F) * d).astype(F)


def quantize_q5_1(x):
    b = x.reshape(-1, 32)
    mn, mx = np.min(b, axis=1), np.max(b, axis=1)
    d = ((mx - mn) / F(31)).astype(F)
    v = ((b - mn[:, None]) * _inv(d)[:, None]).astype(F) + F(0.5)
    xi = np.trunc(v).astype(np.int64) & 0xFF                             # (uint8_t) conversion
    qs, qh = _pack_q5(xi)
    out = np.zeros((b.shape[0], 24), np.uint8)
    out[:, 0:2] = fp16_bits(d).view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = fp16_bits(mn).view(np.uint8).reshape(-1, 2)
    out[:, 4:8], out[:, 8:] = qh, qs
    return out.tobytes()


def dequantize_q5_1(blocks):
    h = blocks[:, 0:4].copy().view(np.uint16)
    d, m = fp16_value(h[:, 0])[:, None], fp16_value(h[:, 1])[:, None]
    q = _unpack_q5(blocks[:, 4:8], blocks[:, 8:24])
    return ((q.astype(F) * d).astype(F) + m).astype(F)


# ---------------------------------------------------------------------------------------------
# K-quants: 256-element super-blocks
# ---------------------------------------------------------------------------------------------

def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """ggml's make_qkx2_quants (use_mad = false) for M groups at once: x, w (M, n) float32.
    Returns (L (M, n) int64, scale (M,), the_min (M,)): x ~ scale * L - the_min."""
    M, n = x.shape
    mn, mx = x[:, 0].copy(), x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = (sum_w * x[:, 0]).astype(F)
    for i in range(1, n):
        mn = np.where(x[:, i] < mn, x[:, i], mn)
        mx = np.where(x[:, i] > mx, x[:, i], mx)
        sum_w = (sum_w + w[:, i]).astype(F)
        sum_x = (sum_x + (w[:, i] * x[:, i]).astype(F)).astype(F)
    mn = np.where(mn > 0, F(0), mn).astype(F)
    flat = mx == mn
    rng = np.where(flat, F(1), mx - mn).astype(F)
    iscale = (F(nmax) / rng).astype(F)
    scale = (F(1) / iscale).astype(F)
    L = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None]).astype(F)), 0, nmax)
    best = np.zeros(M, F)
    for i in range(n):
        diff = ((scale * L[:, i].astype(F)).astype(F) + mn).astype(F) - x[:, i]
        best = (best + (w[:, i] * (diff * diff).astype(F)).astype(F)).astype(F)
    for s in range(nstep + 1):                                           # min moves with each better fit
        num = F(F(F(rmin) + F(F(rdelta) * F(s))) + F(nmax))
        rng = np.where(flat, F(1), mx - mn).astype(F)
        isc = (num / rng).astype(F)
        La = np.clip(nearest_int(isc[:, None] * (x - mn[:, None]).astype(F)), 0, nmax)
        Lf = La.astype(F)
        sl, sl2, sxl = np.zeros(M, F), np.zeros(M, F), np.zeros(M, F)
        for i in range(n):
            wl = (w[:, i] * Lf[:, i]).astype(F)
            sl = (sl + wl).astype(F)
            sl2 = (sl2 + (wl * Lf[:, i]).astype(F)).astype(F)
            sxl = (sxl + (wl * x[:, i]).astype(F)).astype(F)
        D = ((sum_w * sl2).astype(F) - (sl * sl).astype(F)).astype(F)
        ok = D > 0
        Ds = np.where(ok, D, F(1)).astype(F)
        with np.errstate(divide="ignore", invalid="ignore"):
            t_scale = (((sum_w * sxl).astype(F) - (sum_x * sl).astype(F)).astype(F) / Ds).astype(F)
            t_min = (((sl2 * sum_x).astype(F) - (sl * sxl).astype(F)).astype(F) / Ds).astype(F)
            pos = t_min > 0
            t_min = np.where(pos, F(0), t_min).astype(F)
            t_scale = np.where(pos, (sxl / np.where(sl2 != 0, sl2, F(1))).astype(F), t_scale).astype(F)
        cur = np.zeros(M, F)
        for i in range(n):
            diff = ((t_scale * Lf[:, i]).astype(F) + t_min).astype(F) - x[:, i]
            cur = (cur + (w[:, i] * (diff * diff).astype(F)).astype(F)).astype(F)
        upd = ok & (cur < best) & ~flat
        L = np.where(upd[:, None], La, L)
        best = np.where(upd, cur, best)
        scale = np.where(upd, t_scale, scale).astype(F)
        mn = np.where(upd, t_min, mn).astype(F)
    L = np.where(flat[:, None], 0, L)
    scale = np.where(flat, F(0), scale).astype(F)
    return L, scale, (-mn).astype(F)


def pack_scale_min_k4(ls, lm):
    """The 12 bytes of 8 six-bit scales and mins (ls, lm (nb, 8) in 0..63), as quantize_row_q4_K_ref."""
    s = np.zeros((ls.shape[0], 12), np.int64)
    s[:, 0:4], s[:, 4:8] = ls[:, :4], lm[:, :4]
    s[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    s[:, 0:4] |= (ls[:, 4:] >> 4) << 6
    s[:, 4:8] |= (lm[:, 4:] >> 4) << 6
    return s.astype(np.uint8)


def unpack_scale_min_k4(s):
    """get_scale_min_k4 for j = 0..7: (sc, m) (nb, 8) int64 from the 12 bytes s (nb, 12)."""
    s = s.astype(np.int64)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    m = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc, m


def _quantize_qk_sub(x, nmax, rmin, rdelta, nstep):
    """Shared part of Q4_K / Q5_K: returns (d bits, dmin bits, scale bytes, L (nb, 256))."""
    nb = x.shape[0]
    sub = x.reshape(nb * 8, 32)
    sum_x2 = np.zeros(nb * 8, F)
    for i in range(32):
        sum_x2 = (sum_x2 + (sub[:, i] * sub[:, i]).astype(F)).astype(F)
    av_x = np.sqrt((sum_x2 / F(32)).astype(F)).astype(F)
    w = (av_x[:, None] + np.abs(sub)).astype(F)
    L, scales, mins = make_qkx2_quants(sub, w, nmax, rmin, rdelta, nstep)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 256)
    max_scale, max_min = np.zeros(nb, F), np.zeros(nb, F)                # +0.0, as the C initialisers
    for j in range(8):                                                   # `if (scale > max_scale) ...`
        max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale).astype(F)
        max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min).astype(F)
    inv_s = np.where(max_scale > 0, F(63) / np.where(max_scale > 0, max_scale, F(1)), F(0)).astype(F)
    inv_m = np.where(max_min > 0, F(63) / np.where(max_min > 0, max_min, F(1)), F(0)).astype(F)
    ls = np.minimum(63, nearest_int(inv_s[:, None] * scales) & 0xFF)     # uint8_t, then MIN(63, .)
    lm = np.minimum(63, nearest_int(inv_m[:, None] * mins) & 0xFF)
    sbytes = pack_scale_min_k4(ls, lm)
    dbits = fp16_bits((max_scale / F(63)).astype(F))
    mbits = fp16_bits((max_min / F(63)).astype(F))
    sc, m = unpack_scale_min_k4(sbytes)
    d = (fp16_value(dbits)[:, None] * sc.astype(F)).astype(F)            # (nb, 8)
    dm = (fp16_value(mbits)[:, None] * m.astype(F)).astype(F)
    xs = x.reshape(nb, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = ((xs + dm[:, :, None]).astype(F) / np.where(d != 0, d, F(1))[:, :, None]).astype(F)
    Ln = np.clip(nearest_int(v), 0, nmax)
    L = np.where((d != 0)[:, :, None], Ln, L.reshape(nb, 8, 32)).reshape(nb, 256)   # `if (!d) continue;`
    return dbits, mbits, sbytes, L


def quantize_q4_k(x):
    b = x.reshape(-1, 256)
    dbits, mbits, sbytes, L = _quantize_qk_sub(b, 15, -1.0, 0.1, 20)
    c = L.reshape(-1, 4, 64)
    qs = (c[:, :, :32] | (c[:, :, 32:] << 4)).reshape(-1, 128).astype(np.uint8)
    out = np.zeros((b.shape[0], 144), np.uint8)
    out[:, 0:2] = dbits.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = mbits.view(np.uint8).reshape(-1, 2)
    out[:, 4:16], out[:, 16:] = sbytes, qs
    return out.tobytes()


def _dequant_qk(blocks, q):
    """y = d*sc * q - dmin*m per 32-group (two float32 operations, no FMA)."""
    h = blocks[:, 0:4].copy().view(np.uint16)
    d, dmin = fp16_value(h[:, 0]), fp16_value(h[:, 1])
    sc, m = unpack_scale_min_k4(blocks[:, 4:16])
    d1 = (d[:, None] * sc.astype(F)).astype(F)
    m1 = (dmin[:, None] * m.astype(F)).astype(F)
    y = (d1[:, :, None] * q.reshape(-1, 8, 32).astype(F)).astype(F) - m1[:, :, None]
    return y.astype(F).reshape(-1, 256)


def dequantize_q4_k(blocks):
    qs = blocks[:, 16:144].astype(np.int64).reshape(-1, 4, 32)
    q = np.stack([qs & 0xF, qs >> 4], axis=2).reshape(-1, 256)           # 64-chunk: low nibbles, high
    return _dequant_qk(blocks, q)


def quantize_q5_k(x):
    b = x.reshape(-1, 256)
    dbits, mbits, sbytes, L = _quantize_qk_sub(b, 31, -0.5, 0.1, 15)
    c = L.reshape(-1, 4, 2, 32)                                          # chunk n, half, j
    lo = c & 0xF
    qs = (lo[:, :, 0, :] | (lo[:, :, 1, :] << 4)).reshape(-1, 128).astype(np.uint8)
    hib = (c >> 4) & 1                                                   # bit (2n + half) of qh[j]
    shifts = (2 * np.arange(4)[:, None] + np.arange(2)[None, :]).reshape(1, 4, 2, 1)
    qh = np.sum(hib << shifts, axis=(1, 2)).astype(np.uint8)            # (nb, 32)
    out = np.zeros((b.shape[0], 176), np.uint8)
    out[:, 0:2] = dbits.view(np.uint8).reshape(-1, 2)
    out[:, 2:4] = mbits.view(np.uint8).reshape(-1, 2)
    out[:, 4:16], out[:, 16:48], out[:, 48:] = sbytes, qh, qs
    return out.tobytes()


def dequantize_q5_k(blocks):
    qh = blocks[:, 16:48].astype(np.int64)
    qs = blocks[:, 48:176].astype(np.int64).reshape(-1, 4, 32)
    q = np.stack([qs & 0xF, qs >> 4], axis=2)                            # (nb, 4, 2, 32)
    shifts = (2 * np.arange(4)[:, None] + np.arange(2)[None, :])[None, :, :, None]
    q = q + 16 * ((qh[:, None, None, :] >> shifts) & 1)
    return _dequant_qk(blocks, q.reshape(-1, 256))


def make_qx_quants(x, nmax):
    """ggml's make_qx_quants with rmse_type = 1 and no weights, for M groups: (L in 0..2nmax-1, scale)."""
    M, n = x.shape
    amax, mx = first_absmax(x)
    zero = amax < F(1e-15)
    mxs = np.where(zero, F(1), mx).astype(F)
    xf = x.astype(F)
    w = (xf * xf).astype(F)

    def fit(iscale):
        l = np.clip(nearest_int(iscale[:, None] * xf), -nmax, nmax - 1)
        lf = l.astype(F)
        slx, sl2 = np.zeros(M, F), np.zeros(M, F)
        for i in range(n):
            slx = (slx + ((w[:, i] * xf[:, i]).astype(F) * lf[:, i]).astype(F)).astype(F)
            sl2 = (sl2 + ((w[:, i] * lf[:, i]).astype(F) * lf[:, i]).astype(F)).astype(F)
        return l + nmax, slx, sl2

    L, slx, sl2 = fit((F(-nmax) / mxs).astype(F))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(sl2 != 0, slx / np.where(sl2 != 0, sl2, F(1)), F(0)).astype(F)
    best = (scale * slx).astype(F)
    for s in range(-9, 10):
        if s == 0:
            continue
        isc = (-(F(nmax) + F(F(0.1) * F(s))) / mxs).astype(F)
        La, a, b = fit(isc)
        upd = (b > 0) & ((a * a).astype(F) > (best * b).astype(F))
        L = np.where(upd[:, None], La, L)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(upd, a / np.where(b > 0, b, F(1)), scale).astype(F)
        best = np.where(upd, (scale * a).astype(F), best).astype(F)
    L = np.where(zero[:, None], 0, L)
    return L, np.where(zero, F(0), scale).astype(F)


def quantize_q6_k(x):
    b = x.reshape(-1, 256)
    nb = b.shape[0]
    L, scales = make_qx_quants(b.reshape(nb * 16, 16), 32)
    L, scales = L.reshape(nb, 256), scales.reshape(nb, 16)
    amax, mx = first_absmax(scales)                                       # first largest |scale|
    zero = amax < F(1e-15)
    iscale = (F(-128) / np.where(zero, F(1), mx)).astype(F)
    dbits = fp16_bits((F(1) / iscale).astype(F))
    sc = np.minimum(127, nearest_int(iscale[:, None] * scales))
    sc = ((sc + 128) & 0xFF) - 128                                       # int8_t
    d = (fp16_value(dbits)[:, None] * sc.astype(F)).astype(F)            # (nb, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (b.reshape(nb, 16, 16) / np.where(d != 0, d, F(1))[:, :, None]).astype(F)
    Ln = np.clip(nearest_int(v), -32, 31) + 32
    L = np.where((d != 0)[:, :, None], Ln, L.reshape(nb, 16, 16)).reshape(nb, 2, 4, 32)
    ql = np.concatenate([L[:, :, 0] & 0xF | ((L[:, :, 2] & 0xF) << 4),
                         L[:, :, 1] & 0xF | ((L[:, :, 3] & 0xF) << 4)], axis=2).reshape(nb, 128)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4)
          | ((L[:, :, 3] >> 4) << 6)).reshape(nb, 64)
    out = np.zeros((nb, 210), np.uint8)
    out[:, 0:128], out[:, 128:192] = ql.astype(np.uint8), qh.astype(np.uint8)
    out[:, 192:208] = sc.astype(np.int8).view(np.uint8)
    out[:, 208:210] = dbits.view(np.uint8).reshape(-1, 2)
    out[zero] = 0                                                        # memset(&y[i], 0, ...)
    return out.tobytes()


def dequantize_q6_k(blocks):
    nb = blocks.shape[0]
    ql = blocks[:, 0:128].astype(np.int64).reshape(nb, 2, 2, 32)         # chunk, half, l
    qh = blocks[:, 128:192].astype(np.int64).reshape(nb, 2, 1, 32)
    sc = blocks[:, 192:208].view(np.int8).astype(F)
    d = fp16_value(blocks[:, 208:210].copy().view(np.uint16)[:, 0])
    lo = np.stack([ql[:, :, 0] & 0xF, ql[:, :, 1] & 0xF, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2)
    hi = (qh >> (2 * np.arange(4))[None, None, :, None]) & 3              # (nb, 2, 4, 32)
    q = ((lo | (hi << 4)) - 32).reshape(nb, 256).astype(F)
    ds = (d[:, None] * sc).astype(F)                                     # d * sc[e / 16]
    return (np.repeat(ds, 16, axis=1) * q).astype(F)


# ---------------------------------------------------------------------------------------------
# dequantize-only formats: Q4_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS
# ---------------------------------------------------------------------------------------------

def _f16_at(blocks, off):
    return fp16_value(blocks[:, off:off + 2].copy().view(np.uint16)[:, 0])


def dequantize_q4_1(blocks):
    """y = float(q) * d, then + m (two roundings); q = low nibbles (0..15), high nibbles (16..31)."""
    d, m = _f16_at(blocks, 0)[:, None], _f16_at(blocks, 2)[:, None]
    qs = blocks[:, 4:20].astype(np.int64)
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1)
    return ((q.astype(F) * d).astype(F) + m).astype(F)


def _two_bit_planes(qs):
    """(nb, 64) code bytes -> (nb, 16, 16) 2-bit codes in element order: half h (32 bytes), plane p
    (bits 2p..2p+1), part (bytes 0..15 or 16..31) -> sub-block 8h + 2p + part."""
    nb = qs.shape[0]
    q = qs.astype(np.int64).reshape(nb, 2, 1, 2, 16)                      # half, -, part, l
    planes = (q >> (2 * np.arange(4))[None, None, :, None, None]) & 3     # half, plane, part, l
    return planes.reshape(nb, 16, 16)


def dequantize_q2_k(blocks):
    """Sub-block s of 16: dl = d * (sc & 15), ml = dmin * (sc >> 4), y = dl * q - ml."""
    sc = blocks[:, 0:16].astype(np.int64)
    q = _two_bit_planes(blocks[:, 16:80])
    d, dmin = _f16_at(blocks, 80), _f16_at(blocks, 82)
    dl = (d[:, None] * (sc & 15).astype(F)).astype(F)
    ml = (dmin[:, None] * (sc >> 4).astype(F)).astype(F)
    y = (dl[:, :, None] * q.astype(F)).astype(F) - ml[:, :, None]
    return y.astype(F).reshape(-1, 256)


def q3k_scales(s):
    """(nb, 12) bytes -> (nb, 16) six-bit scales: low nibble of byte k (k < 8) or high nibble of byte
    k - 8; bits 4-5 = bits 2*(k // 4).. of byte 8 + k % 4."""
    s = s.astype(np.int64)
    k = np.arange(16)
    lo = np.where(k < 8, s[:, k % 8] & 15, s[:, k % 8] >> 4)
    hi = (s[:, 8 + k % 4] >> (2 * (k // 4))) & 3
    return lo | (hi << 4)


def dequantize_q3_k(blocks):
    """dl = d * (scale - 32); y = dl * (q - 4 * (high bit clear)); the high bit of element
    (half h, plane p, position l) is bit 4h + p of hmask byte l (l in 0..31)."""
    nb = blocks.shape[0]
    hm = blocks[:, 0:32].astype(np.int64).reshape(nb, 1, 1, 2, 16)      # -, -, part, l
    bit = (4 * np.arange(2)[:, None] + np.arange(4)[None, :])[None, :, :, None, None]
    high = ((hm >> bit) & 1).reshape(nb, 16, 16)
    q = _two_bit_planes(blocks[:, 32:96]) - np.where(high == 1, 0, 4)
    d = _f16_at(blocks, 108)
    dl = (d[:, None] * (q3k_scales(blocks[:, 96:108]) - 32).astype(F)).astype(F)
    return (dl[:, :, None] * q.astype(F)).astype(F).reshape(-1, 256)


def _iq4_codes(qs):
    """(nb, g, 16) bytes -> (nb, g, 32) levels: low nibbles then high nibbles."""
    qs = qs.astype(np.int64)
    return IQ4NL_LEVELS[np.concatenate([qs & 0xF, qs >> 4], axis=-1)]


def dequantize_iq4_nl(blocks):
    """y = d * level[nibble]."""
    d = _f16_at(blocks, 0)[:, None]
    return (d * _iq4_codes(blocks[:, 2:18]).astype(F)).astype(F)


def dequantize_iq4_xs(blocks):
    """Group g of 32: scale = nibble g % 2 of byte 4 + g // 2 | bits 2g..2g+1 of the u16 at 2 << 4;
    dl = d * (scale - 32); y = dl * level[nibble]."""
    nb = blocks.shape[0]
    d = _f16_at(blocks, 0)
    high = blocks[:, 2:4].copy().view("<u2")[:, 0].astype(np.int64)
    g = np.arange(8)
    lo = (blocks[:, 4 + g // 2].astype(np.int64) >> (4 * (g % 2))) & 15
    hi = (high[:, None] >> (2 * g)) & 3
    dl = (d[:, None] * ((lo | (hi << 4)) - 32).astype(F)).astype(F)
    lv = _iq4_codes(blocks[:, 8:136].reshape(nb, 8, 16))
    return (dl[:, :, None] * lv.astype(F)).astype(F).reshape(-1, 256)


# ---------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------

_QUANT = {"Q8_0": quantize_q8_0, "Q4_0": quantize_q4_0, "Q5_0": quantize_q5_0, "Q5_1": quantize_q5_1,
          "Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}
_DEQUANT = {"Q8_0": dequantize_q8_0, "Q4_0": dequantize_q4_0, "Q5_0": dequantize_q5_0,
            "Q5_1": dequantize_q5_1, "Q4_K": dequantize_q4_k, "Q5_K": dequantize_q5_k,
            "Q6_K": dequantize_q6_k, "Q4_1": dequantize_q4_1, "Q2_K": dequantize_q2_k,
            "Q3_K": dequantize_q3_k, "IQ4_NL": dequantize_iq4_nl, "IQ4_XS": dequantize_iq4_xs}


def quantize(x, t):
    """float32 values -> the bytes ggml stores for type t (blocks in element order)."""
    _, name, blk, _ = type_info(t)
    x = np.ascontiguousarray(x, dtype=F).reshape(-1)
    if x.size % blk:
        raise ValueError(f"{name}: {x.size} values are not a multiple of the block size {blk}")
    if name == "F32":
        return x.astype("<f4").tobytes()
    if name == "F16":
        return fp16_bits(x).astype("<u2").tobytes()
    if name == "BF16":
        return bf16_bits(x).astype("<u2").tobytes()
    if name not in _QUANT:
        raise ValueError(f"quantize: type {name} is not implemented here (have {', '.join(SUPPORTED)})")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"quantize {name}: input has non-finite values")
    return _QUANT[name](x)


def dequantize(buf, t, n):
    """The n float32 values stored as type t in buf (bytes-like)."""
    _, name, blk, size = type_info(t)
    raw = np.frombuffer(buf, np.uint8, count=row_bytes(t, n))
    if name == "F32":
        return raw.view("<f4").astype(F)
    if name == "F16":
        return fp16_value(raw.view("<u2"))
    if name == "BF16":
        return bf16_value(raw.view("<u2"))
    if name not in _DEQUANT:
        raise ValueError(f"dequantize: type {name} is not implemented here (have {', '.join(SUPPORTED + DEQUANT_ONLY)})")
    return _DEQUANT[name](raw.reshape(-1, size)).reshape(-1)
