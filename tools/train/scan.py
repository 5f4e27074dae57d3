"""Selective scan of the Mamba mixer (jamba-spec.md §3.5 step 6), vectorized over time.

    h_t = exp(dt_t * A) * h_{t-1} + dt_t * B_t * u_t        (per channel d, state n; h_{-1} = 0)
    y_t = sum_n h_t[:, n] * C_t[n]

The sequence is cut into chunks of `chunk` steps. Inside a chunk the decay from the chunk start is
a cumulative sum in log space, exp(cumsum(dt * A)) (always <= 1, so it cannot overflow); the
zero-start states of all chunks are computed together, `chunk` vectorized steps for the whole
batch; one short loop over the chunks carries each chunk's final state into the next one:

    h_t = h_t^(chunk, zero start) + exp(L_t) * H_(chunk start)

The result equals the sequential recurrence up to floating-point summation order.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import torch


def selective_scan_chunked(u, dt, A, Bm, Cm, chunk=16):
    """u, dt: (B, S, Di); A: (Di, N) (negative); Bm, Cm: (B, S, N). Returns y (B, S, Di) without
    the D skip and the gate."""
    Bsz, S, Di = u.shape
    N = A.shape[1]
    c = min(chunk, S)
    pad = (-S) % c
    if pad:
        # dt = 0 past the end: decay exp(0) = 1 and input 0, so padding changes nothing before it.
        u = torch.nn.functional.pad(u, (0, 0, 0, pad))
        dt = torch.nn.functional.pad(dt, (0, 0, 0, pad))
        Bm = torch.nn.functional.pad(Bm, (0, 0, 0, pad))
        Cm = torch.nn.functional.pad(Cm, (0, 0, 0, pad))
    Sp = S + pad
    nc = Sp // c
    # (c, B, nc, Di, N) layout so that one step of the chunk loop is a contiguous slice.
    dtc = dt.view(Bsz, nc, c, Di).permute(2, 0, 1, 3)
    log_a = dtc.unsqueeze(-1) * A                                      # dt * A <= 0
    dbu = (dtc * u.view(Bsz, nc, c, Di).permute(2, 0, 1, 3)).unsqueeze(-1) * \
        Bm.view(Bsz, nc, c, N).permute(2, 0, 1, 3).unsqueeze(-2)       # dt * u * B
    log_cum = torch.cumsum(log_a, dim=0)                               # log decay since chunk start
    decay = torch.exp(log_cum)
    a = torch.exp(log_a)
    # unbind (not indexing): its backward stacks the slices instead of zero-filling a full-size
    # gradient per slice.
    a_steps = a.unbind(0)
    dbu_steps = dbu.unbind(0)
    h = dbu_steps[0]
    hs = [h]
    for i in range(1, c):
        h = a_steps[i] * h + dbu_steps[i]
        hs.append(h)
    h_zero = torch.stack(hs, 0)                                        # (c, B, nc, Di, N)
    # Carry across chunks.
    last_decay = decay[c - 1].unbind(1)                                # nc x (B, Di, N)
    last_h = hs[-1].unbind(1)
    carry = [torch.zeros_like(last_h[0])]
    for k in range(1, nc):
        carry.append(last_decay[k - 1] * carry[-1] + last_h[k - 1])
    H0 = torch.stack(carry, 1)                                         # (B, nc, Di, N)
    h_full = h_zero + decay * H0.unsqueeze(0)
    Cc = Cm.view(Bsz, nc, c, N).permute(2, 0, 1, 3)                    # (c, B, nc, N)
    y = torch.einsum("cbkdn,cbkn->bkcd", h_full, Cc).reshape(Bsz, Sp, Di)
    return y[:, :S]


def selective_scan_sequential(u, dt, A, Bm, Cm):
    """Reference: one step at a time (jamba-spec.md §6.1 selective_scan_ref)."""
    Bsz, S, Di = u.shape
    h = torch.zeros(Bsz, Di, A.shape[1], dtype=u.dtype, device=u.device)
    ys = []
    for t in range(S):
        h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t] * u[:, t])[:, :, None] * Bm[:, t, None, :]
        ys.append((h * Cm[:, t, None, :]).sum(-1))
    return torch.stack(ys, 1)


class _ScanFn(torch.autograd.Function):
    """The recurrence as one autograd node with a hand-written backward. Each time step works on a
    (B, Di, N) tile that stays in cache; the states are written once (forward) and read once
    (backward); everything that does not need the recurrence is batched over time."""

    @staticmethod
    def forward(ctx, u, dt, A, Bm, Cm):
        Bsz, S, Di = u.shape
        N = A.shape[1]
        H = torch.empty(S, Bsz, Di, N, dtype=u.dtype)
        dtu = (dt * u).transpose(0, 1).contiguous()              # (S, B, Di)
        dtT = dt.transpose(0, 1).contiguous()
        BT = Bm.transpose(0, 1).contiguous()                     # (S, B, N)
        a = torch.empty(Bsz, Di, N, dtype=u.dtype)
        for t in range(S):
            torch.mul(dtT[t].unsqueeze(-1), A, out=a)
            a.exp_()
            if t == 0:
                torch.mul(dtu[0].unsqueeze(-1), BT[0].unsqueeze(1), out=H[0])
            else:
                torch.mul(H[t - 1], a, out=H[t])
                H[t].addcmul_(dtu[t].unsqueeze(-1), BT[t].unsqueeze(1))
        CT = Cm.transpose(0, 1).contiguous()
        y = torch.matmul(H, CT.unsqueeze(-1)).squeeze(-1).transpose(0, 1)   # sum_n h_t C_t
        ctx.save_for_backward(u, dt, A, Bm, Cm, H)
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, A, Bm, Cm, H = ctx.saved_tensors
        Bsz, S, Di = u.shape
        N = A.shape[1]
        gyT = gy.transpose(0, 1).contiguous()                    # (S, B, Di)
        dtT = dt.transpose(0, 1).contiguous()
        CT = Cm.transpose(0, 1).contiguous()
        G = torch.empty(S, Bsz, Di, N, dtype=u.dtype)            # dL/dh_t (total)
        T = torch.empty(S, Bsz, Di, N, dtype=u.dtype)            # dL/d(dt_t * A) per (b, d, n)
        T[0].zero_()
        a = torch.empty(Bsz, Di, N, dtype=u.dtype)
        for t in range(S - 1, -1, -1):
            if t == S - 1:
                torch.mul(gyT[t].unsqueeze(-1), CT[t].unsqueeze(1), out=G[t])
            else:
                torch.mul(G[t + 1], a, out=G[t])                 # a = exp(dt_{t+1} A)
                G[t].addcmul_(gyT[t].unsqueeze(-1), CT[t].unsqueeze(1))
            if t > 0:
                torch.mul(dtT[t].unsqueeze(-1), A, out=a)
                a.exp_()
                torch.mul(G[t], H[t - 1], out=T[t])
                T[t].mul_(a)
        dA = (T * dtT.unsqueeze(-1)).sum(dim=(0, 1))
        ddt_decay = (T.mul_(A)).sum(-1).transpose(0, 1)
        # Input terms, batched over time: h_t += (dt_t u_t)[d] B_t[n]; y_t = sum_n h_t C_t.
        dC = torch.matmul(gyT.unsqueeze(-2), H).squeeze(-2).transpose(0, 1)
        dtuT = (dt * u).transpose(0, 1).contiguous()
        dB = torch.matmul(dtuT.unsqueeze(-2), G).squeeze(-2).transpose(0, 1)
        BT = Bm.transpose(0, 1).contiguous()
        d_dtu = torch.matmul(G, BT.unsqueeze(-1)).squeeze(-1).transpose(0, 1)
        ddt = d_dtu * u + ddt_decay
        du = d_dtu * dt
        return du, ddt, dA, dB, dC


def selective_scan_fused(u, dt, A, Bm, Cm):
    return _ScanFn.apply(u.contiguous(), dt.contiguous(), A.contiguous(), Bm.contiguous(), Cm.contiguous())


# ---- the same recurrence in C (scan_native.c), built on first use with the system C compiler

_NATIVE = {}
NATIVE_MAX_STATE = 64      # scan_native.c keeps one channel's state on the stack


def native_library():
    """The compiled scan_native.c (ctypes), or None where no C compiler is found or it fails. Built
    once per source text into ~/.cache/hybridlens-train/ (or $XDG_CACHE_HOME; the temporary folder where
    that cannot be written), atomically, so that
    --jobs workers starting together do not read a half-written file."""
    if "lib" in _NATIVE:
        return _NATIVE["lib"]
    lib = None
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scan_native.c")
    flags = ["-O3", "-march=native", "-ffast-math", "-shared", "-fPIC"]
    try:
        with open(src, "rb") as fh:
            key = hashlib.sha256(fh.read() + " ".join(flags).encode()).hexdigest()[:16]
        so = None
        for base in (os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), tempfile.gettempdir()):
            cache = os.path.join(base, "hybridlens-train")
            so = os.path.join(cache, f"scan_native-{key}.so")
            if os.path.exists(so):
                break
            try:                                  # an unwritable cache: the next place
                os.makedirs(cache, exist_ok=True)
                tmp = f"{so}.{os.getpid()}.tmp"
                cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
                if cc is None:
                    raise OSError("no C compiler")
                subprocess.run([cc, *flags, src, "-o", tmp, "-lm"], check=True, capture_output=True)
                os.replace(tmp, so)
                break
            except OSError:
                so = None
        if so is None:
            raise OSError("scan_native.c could not be built")
        lib = ctypes.CDLL(so)
        L, P = ctypes.c_long, ctypes.c_void_p
        for s in ("f32", "f64"):
            getattr(lib, f"scan_fwd_{s}").argtypes = [L, L, L, L] + [P] * 6
            getattr(lib, f"scan_fwd_{s}").restype = None
            getattr(lib, f"scan_bwd_{s}").argtypes = [L, L, L, L] + [P] * 11
            getattr(lib, f"scan_bwd_{s}").restype = ctypes.c_int
    except (OSError, subprocess.CalledProcessError):
        lib = None
    _NATIVE["lib"] = lib
    return lib


def _suffix(x):
    return {torch.float32: "f32", torch.float64: "f64"}[x.dtype]


class _NativeScanFn(torch.autograd.Function):
    """scan_native.c as one autograd node: the forward keeps no states (the backward recomputes
    them channel by channel), so a layer's saved memory is its inputs only."""

    @staticmethod
    def forward(ctx, u, dt, A, Bm, Cm):
        lib = native_library()
        Bsz, S, Di = u.shape
        N = A.shape[1]
        y = torch.empty_like(u)
        getattr(lib, f"scan_fwd_{_suffix(u)}")(Bsz, S, Di, N, u.data_ptr(), dt.data_ptr(), A.data_ptr(),
                                                 Bm.data_ptr(), Cm.data_ptr(), y.data_ptr())
        ctx.save_for_backward(u, dt, A, Bm, Cm)
        return y

    @staticmethod
    def backward(ctx, gy):
        u, dt, A, Bm, Cm = ctx.saved_tensors
        lib = native_library()
        Bsz, S, Di = u.shape
        N = A.shape[1]
        gy = gy.contiguous()
        du, ddt = torch.empty_like(u), torch.empty_like(u)
        dA, dB, dC = torch.zeros_like(A), torch.zeros_like(Bm), torch.zeros_like(Cm)
        rc = getattr(lib, f"scan_bwd_{_suffix(u)}")(Bsz, S, Di, N, u.data_ptr(), dt.data_ptr(), A.data_ptr(),
                                                      Bm.data_ptr(), Cm.data_ptr(), gy.data_ptr(), du.data_ptr(),
                                                      ddt.data_ptr(), dA.data_ptr(), dB.data_ptr(), dC.data_ptr())
        if rc != 0:
            raise MemoryError(f"scan_native.c: no memory for a {S} x {N} scratch buffer")
        return du, ddt, dA, dB, dC


def native_available(u, A):
    return (native_library() is not None and u.dtype in (torch.float32, torch.float64)
            and A.shape[1] <= NATIVE_MAX_STATE and not u.is_cuda)


def selective_scan_native(u, dt, A, Bm, Cm):
    """The C scan where it can run (a C compiler, float32/float64, d_state <= 64), else the fused
    one; the two agree to rounding."""
    if not native_available(u, A):
        return selective_scan_fused(u, dt, A, Bm, Cm)
    return _NativeScanFn.apply(u.contiguous(), dt.contiguous(), A.contiguous(), Bm.contiguous(), Cm.contiguous())
