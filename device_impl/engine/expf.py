"""The float32 exps of CPU's math libraries, in numpy: ScalarE's ``exp_sleef_u10`` and ``exp_libm`` (isa.ACTIVATIONS),
so a kernel can compute the bits CPU's loop does where an exp's last place shows.

ATen's loops call one of two float32 exps, and which one depends on the host and on the loop:

* ``Vectorized<float>::exp`` (the vector body of a kernel's loop) is SLEEF's ``expf_u10`` on the AVX2 and
  AVX-512 kernels (``sleef_u10``: a degree-6 polynomial on a two-constant Cody-Waite reduction, every step a
  fused multiply-add) and, under the ``DEFAULT`` kernels, ``std::exp`` element by element;
* ``std::exp`` (a scalar loop, a vector loop's tail) is libm's ``expf``; glibc's (``libm``) evaluates
  2^(k/32) * p(r) in double, with a table of 32 powers of two and a degree-3 polynomial, and rounds once.

The two part ways in the last place on about 3% of inputs (measured in torch 2.13 over every finite float16
and bfloat16 value: 2144 of 63488 float16 ones), and both differ from ScalarE's plain ``exp``, numpy's float32
loop, which follows the host's numpy SIMD dispatch (17384 of those 63488 inputs): an exp one ULP off turns
CPU's exact zero ``g - exp(y) * sum(g)`` (log_softmax's gradient) into a tiny difference whose float16
rounding is -0.0. Which function a loop calls is not decided here: ``kernels.cpu_host`` asks the running
torch (``vector_exp``, ``scalar_exp``) and names an entry of ``EXPF``; ``tests/kernels/test_cpu_exp.py`` holds
the named models to CPU's bits (exact over every finite float16/bfloat16 value and 64k uniform float32 inputs
under DEFAULT, AVX2 and AVX-512).
"""

from __future__ import annotations

import decimal
import math
import threading
from typing import Callable

import numpy as np

F32 = np.float32


def fma32_fused(a, b, c) -> np.ndarray:
    """RN32(a * b + c), one rounding, whatever the host (an FMA instruction; ``kernels.common.fma32`` is the
    host's multiply-add, which is this only where CPU's kernels fuse). The product of two fp32 values is exact
    in double, so ``s = RN64(p + c)`` is the only rounding before the final one, and rounding ``s`` to fp32 is
    correct unless ``s`` is itself an fp32 rounding boundary (a midpoint, or in fp32's denormal range, where
    midpoints have fewer bits): every boundary is a double, so an exact sum on one side of it rounds to ``s``
    on the same side or onto it. Only those few positions get the two-sum error and round to odd (nudging an
    inexact ``s`` one double ULP towards the exact sum), which is then correct: 53 >= 24 + 2 bits.

    Computed in blocks of rows (about _FMA_BLOCK elements) through preallocated double buffers, the boundary
    test as two reductions a block (a midpoint's low 29 bits shifted to the top are int64's minimum; a
    denormal-range sum has a float32 rounding of magnitude at most 2^-126, fmin passing over NaNs); a block
    where either shows takes ``_fma32_fused_reference``'s exact fix-up at the positions it tests as
    boundaries."""
    a, b, c = np.asarray(a, dtype=F32), np.asarray(b, dtype=F32), np.asarray(c, dtype=F32)
    if a.size <= 8192 and b.size <= 8192 and c.size <= 8192:  # the blocks' set-up would cost more than they save
        return _fma32_whole(a, b, c)
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    nd, n = len(shape), math.prod(shape)
    if nd == 0 or n == 0:
        return _fma32_whole(a, b, c)
    rows = max(1, _FMA_BLOCK // max(n // shape[0], 1))
    out = np.empty(shape, F32)
    size = (min(rows, shape[0]),) + tuple(shape[1:])
    m = math.prod(size)
    s_buf, i_buf, f_buf = (v[:m].reshape(size) for v in _scratch(_FMA_BUFFERS, m, _FMA_BLOCK).values())
    a, b, c = _fma_operand(a, shape), _fma_operand(b, shape), _fma_operand(c, shape)

    def block(v: np.ndarray, lo: int, hi: int) -> np.ndarray:  # v's rows lo..hi, or v itself where it broadcasts
        return v[lo:hi] if v.ndim == nd and v.shape[0] != 1 else v

    with np.errstate(all="ignore"):
        for lo in range(0, shape[0], rows):
            hi = min(shape[0], lo + rows)
            s, bits, mag, o = s_buf[:hi - lo], i_buf[:hi - lo], f_buf[:hi - lo], out[lo:hi]
            ab, bb, cb = block(a, lo, hi), block(b, lo, hi), block(c, lo, hi)
            np.copyto(s, ab)
            np.multiply(s, bb, out=s)  # exact
            np.add(s, cb, out=s)
            np.copyto(o, s, casting="unsafe")
            np.left_shift(s.view(np.int64), 64 - 29, out=bits)
            if bits.min() == _INT64_MIN or np.fmin.reduce(np.abs(o, out=mag), axis=None) <= _FP32_NORMAL:
                boundary = ((s.view(np.int64) & _BELOW_FP32) == _FP32_MIDPOINT) | (np.abs(s) < _FP32_NORMAL)
                at = np.nonzero(boundary)
                p = np.broadcast_to(ab, o.shape)[at].astype(np.float64) * np.broadcast_to(bb, o.shape)[at]
                o[at] = _round_to_odd(p, np.broadcast_to(cb, o.shape)[at].astype(np.float64), s[at])
    return out


def _fma_operand(v: np.ndarray, shape: tuple) -> np.ndarray:
    """An fma32_fused operand as its blocks read it: a float32 array of the result's shape as it is; one that
    broadcasts (fewer axes, or axes of 1 or of stride 0, as np.broadcast_to makes) cut to its distinct values
    and widened to double once, exactly (numpy's mixed-type loops over a broadcast operand measured 4x slower
    than a double one)."""
    if v.shape == tuple(shape) and all(st or k == 1 for st, k in zip(v.strides, v.shape)):
        return v
    return v[tuple(slice(0, 1) if st == 0 else slice(None) for st in v.strides)].astype(np.float64)


def _round_to_odd(p: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """RN32(p + c) from ``s = RN64(p + c)`` (``p``, ``c`` doubles): s nudged one double ULP towards the exact
    sum where it is inexact and even (two-sum's error), then rounded to fp32."""
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    odd = np.isfinite(s) & (err != 0) & ((s.view(np.int64) & 1) == 0)
    return np.where(odd, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s).astype(F32)


def _fma32_fused_reference(a, b, c) -> np.ndarray:
    """``fma32_fused`` over whole arrays: the boundary test on every element, the fix-up where it holds."""
    return _fma32_whole(np.asarray(a, dtype=F32), np.asarray(b, dtype=F32), np.asarray(c, dtype=F32))


def _fma32_whole(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``_fma32_fused_reference`` of float32 arrays."""
    f64 = np.float64
    with np.errstate(all="ignore"):
        p = a.astype(f64) * b.astype(f64)
        p, c = np.broadcast_arrays(p, c.astype(f64))
        s = p + c
        low = s.view(np.int64) & _BELOW_FP32
        boundary = (low == _FP32_MIDPOINT) | (np.abs(s) < _FP32_NORMAL)
        out = s.astype(F32)
        if boundary.any():
            at = np.nonzero(boundary)
            out[at] = _round_to_odd(p[at], c[at], s[at])
        return out


_BELOW_FP32 = (1 << 29) - 1  # a double's significand bits below fp32's 24
_FP32_MIDPOINT = 1 << 28  # ... of a double halfway between two adjacent normal fp32 values
_FP32_NORMAL = 2.0 ** -126
_INT64_MIN = np.iinfo(np.int64).min
_FMA_BLOCK = 1 << 15  # elements a block: its few buffers stay in L2 through the passes (16K-64K within 10%)
_FMA_BUFFERS = {"s": np.float64, "bits": np.int64, "mag": F32}
_SCRATCH = threading.local()


def _scratch(buffers: dict, size: int, block: int) -> dict:
    """Scratch arrays for ``buffers`` (name -> dtype) of at least ``size`` elements: this thread's, of ``block``
    elements, made once and kept where ``size`` fits (a megabyte or two allocated afresh on every call goes
    back to the OS on every free, glibc's trim threshold, and is page-faulted in again: measured as slow as
    the arithmetic); new ones where it does not."""
    if size > block:
        return {name: np.empty(size, dtype) for name, dtype in buffers.items()}
    blocks = _SCRATCH.__dict__.setdefault("blocks", {})
    have = blocks.get((id(buffers), block))
    if have is None:
        have = blocks[id(buffers), block] = {name: np.empty(block, dtype) for name, dtype in buffers.items()}
    return have


# SLEEF's expf_u10 (xexpf): q = rint(x / ln 2); s = x - q * ln 2 in two fused steps (ln 2 split into L2U + L2L);
# exp(s) = 1 + s + s^2 * P(s); the result scaled by 2^q. Its published float32 constants:
_SLEEF_R_LN2 = F32(1.442695040888963407359924681001892137426645954152985934135449406931)
_SLEEF_L2U = F32(0.693145751953125)
_SLEEF_L2L = F32(1.428606765330187045e-06)
_SLEEF_POLY = tuple(F32(c) for c in (0.000198527617612853646278381, 0.00139304355252534151077271,
                                     0.00833336077630519866943359, 0.0416664853692054748535156,
                                     0.166666671633720397949219, 0.5))


def _sleef_u10_reference(x) -> np.ndarray:
    """SLEEF's ``expf_u10``, step by step as its C source (the specification ``expf_sleef_u10`` computes
    faster, to the bit: as its AVX2/AVX-512 build computes it (every multiply-add fused): within one ULP of
    exp, 0 below -104, inf above 100 (and where the scaling overflows), NaN for NaN."""
    d = np.asarray(x, dtype=F32)
    with np.errstate(all="ignore"):
        q = np.rint(np.clip(d * _SLEEF_R_LN2, -256, 256)).astype(np.int32)  # far outside: masked below
        qf = q.astype(F32)
        s = fma32_fused(qf, -_SLEEF_L2U, d)
        s = fma32_fused(qf, -_SLEEF_L2L, s)
        u = np.full(d.shape, _SLEEF_POLY[0], F32)
        for c in _SLEEF_POLY[1:]:
            u = fma32_fused(u, s, c)
        u = F32(1) + fma32_fused(s * s, u, s)
        half = q >> 1  # SLEEF's ldexp2: two exact power-of-two scalings, the second one rounding
        u = (u * np.ldexp(F32(1), half).astype(F32)) * np.ldexp(F32(1), q - half).astype(F32)
        u = np.where(d < F32(-104), F32(0), u)
        u = np.where(d > F32(100), F32(np.inf), u)
        return np.where(np.isnan(d), d, u).astype(F32)


# glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, since 2.27): x * 32 / ln 2 = k + r, |r| <= 1/2; exp(x) =
# 2^(k/32) * 2^(r/32), the first from a table of 2^(i/32) (its exponent bits added in k), the second a cubic;
# all in double, one final rounding to float. Its published constants:
_GLIBC_N = 32
_GLIBC_INVLN2N = float.fromhex("0x1.71547652b82fep+0") * _GLIBC_N
_GLIBC_SHIFT = float.fromhex("0x1.8p+52")
_GLIBC_C = (float.fromhex("0x1.c6af84b912394p-5") / _GLIBC_N ** 3,
            float.fromhex("0x1.ebfce50fac4f3p-3") / _GLIBC_N ** 2,
            float.fromhex("0x1.62e42ff0c52d6p-1") / _GLIBC_N)
_GLIBC_OVERFLOW = F32(float.fromhex("0x1.62e42ep6"))  # above: inf
_GLIBC_UNDERFLOW = F32(float.fromhex("-0x1.9fe368p6"))  # below: 0


def _glibc_table() -> np.ndarray:
    """tab[i] = bits(RN64(2^(i/32))) - (i << 47), the table's entries, from 2^(i/32) to 50 digits (decimal's
    power is correctly rounded to its context; converting that to a double rounds once more, far from a tie)."""
    with decimal.localcontext() as ctx:
        ctx.prec = 50
        powers = [float(decimal.Decimal(2) ** (decimal.Decimal(i) / _GLIBC_N)) for i in range(_GLIBC_N)]
    bits = np.array(powers, dtype=np.float64).view(np.uint64)
    return bits - (np.arange(_GLIBC_N, dtype=np.uint64) << np.uint64(52 - 5))


_GLIBC_TAB = _glibc_table()


def _libm_reference(x) -> np.ndarray:
    """glibc's ``expf``, step by step as its C source (the specification ``expf_libm`` computes faster, to
    the bit): within 0.502 ULP of exp (correctly rounded but near a few rounding midpoints: 16 of
    the 63488 finite float16 values round otherwise than float64's exp rounded to float32), 0 below
    -103.97, inf above 88.72, NaN for NaN."""
    xf = np.asarray(x, dtype=F32)
    with np.errstate(all="ignore"):
        xd = np.clip(xf.astype(np.float64), -200.0, 200.0)  # beyond the thresholds: masked below
        z = _GLIBC_INVLN2N * xd
        kd = z + _GLIBC_SHIFT  # rounds z to an integer (ties to even) in the low bits
        ki = kd.view(np.uint64)
        kd = kd - _GLIBC_SHIFT
        r = z - kd
        s = (_GLIBC_TAB[ki % np.uint64(_GLIBC_N)] + (ki << np.uint64(52 - 5))).view(np.float64)
        y = (_GLIBC_C[0] * r + _GLIBC_C[1]) * (r * r) + (_GLIBC_C[2] * r + 1.0)
        out = (y * s).astype(F32)
        out = np.where(xf > _GLIBC_OVERFLOW, F32(np.inf), out)
        out = np.where(xf < _GLIBC_UNDERFLOW, F32(0), out)
        return np.where(np.isnan(xf), xf, out).astype(F32)


# The fast forms. Both run over the input in blocks of _EXP_BLOCK elements through preallocated buffers (a few
# float64 blocks stay in L2 for the dozen passes of a block); every pass is an IEEE float32/float64 or
# integer numpy operation, so the bits are the host's no more than the references' are. Each step below
# says why it gives the reference's bits; tests/kernels/test_cpu_exp.py compares the two over every finite
# float16/bfloat16 value, uniform float32 and the special inputs, and benches/expf_exhaustive.py over all
# 2^32 float32 bit patterns. A block of 32K: fewer calls' overhead, its buffers (1.1 MB for SLEEF) still in
# L2 (measured 8K-64K on an EPYC with 1 MB L2 a core: 32K fastest, 16K 10% slower).
_EXP_BLOCK = 1 << 15


def _blocked(x, block: Callable[[np.ndarray, np.ndarray, dict], None], buffers: dict) -> np.ndarray:
    """``block(d, out, bufs)`` over the float32 input in blocks of _EXP_BLOCK elements, into a new float32
    array of the input's shape; ``buffers`` maps a name to the dtype of a scratch block (this thread's, each
    sliced to the block's length)."""
    d = np.asarray(x, dtype=F32)
    flat = d.reshape(-1)
    out = np.empty(flat.shape, F32)
    n = flat.size
    size = min(n, _EXP_BLOCK)
    bufs = {name: v[:size] for name, v in _scratch(buffers, size, _EXP_BLOCK).items()}
    with np.errstate(all="ignore"):
        for lo in range(0, n, _EXP_BLOCK):
            hi = min(n, lo + _EXP_BLOCK)
            m = hi - lo
            block(flat[lo:hi], out[lo:hi], bufs if m == size else {k: v[:m] for k, v in bufs.items()})
    return out.reshape(d.shape)


# glibc: s = 2^(k/32) for the k = rint(x * 32 / ln 2) of x in [_GLIBC_UNDERFLOW, _GLIBC_OVERFLOW] (k in
# [-4801, 4096]), built as the reference builds it (table entry plus k in the exponent bits), looked up by
# k's bits in kd = z + shift: one gather instead of four integer passes.
_GLIBC_KMIN, _GLIBC_KMAX = -4864, 4160
_GLIBC_KBASE = int(np.float64(_GLIBC_SHIFT).view(np.int64)) + _GLIBC_KMIN  # kd's bits at k = KMIN


def _glibc_scales() -> np.ndarray:
    ki = (np.float64(_GLIBC_SHIFT) + np.arange(_GLIBC_KMIN, _GLIBC_KMAX + 1, dtype=np.float64)).view(np.uint64)
    return (_GLIBC_TAB[ki % np.uint64(_GLIBC_N)] + (ki << np.uint64(52 - 5))).view(np.float64)


_GLIBC_SCALES = _glibc_scales()


def _libm_block(d: np.ndarray, out: np.ndarray, b: dict) -> None:
    """``_libm_reference`` on one block: the same double operations in the same order, the scale from a table
    of the reference's own values. Its selects cost nothing where a block has no input beyond the thresholds
    (most): elsewhere the input is clipped to the floats just beyond them, where the formula itself gives inf
    and 0 (exp(88.72284) > FLT_MAX + ulp / 2, exp(-103.97208) < 2^-150), and NaNs are put back."""
    z, k, t, s, i = b["z"], b["k"], b["t"], b["s"], b["i"]
    lo, hi = d.min(), d.max()  # NaN where the block has one
    if not (lo >= _GLIBC_UNDERFLOW and hi <= _GLIBC_OVERFLOW):
        x = np.clip(d, _GLIBC_CLIP[0], _GLIBC_CLIP[1], out=b["x"])
    else:
        x = d
    np.multiply(x, _GLIBC_INVLN2N, out=z, dtype=np.float64)  # z = InvLn2N * (double) x
    np.add(z, _GLIBC_SHIFT, out=k)  # kd, k in its low bits
    np.subtract(k.view(np.int64), _GLIBC_KBASE, out=i)
    np.take(_GLIBC_SCALES, i, out=s, mode="clip")  # s (a NaN's k: its result is put back below)
    np.subtract(k, _GLIBC_SHIFT, out=k)
    np.subtract(z, k, out=z)  # r
    np.multiply(z, _GLIBC_C[0], out=k)  # y = (C0 * r + C1) * (r * r) + (C2 * r + 1)
    np.add(k, _GLIBC_C[1], out=k)
    np.multiply(z, z, out=t)
    np.multiply(k, t, out=k)
    np.multiply(z, _GLIBC_C[2], out=t)
    np.add(t, 1.0, out=t)
    np.add(k, t, out=k)
    np.multiply(k, s, out=k)
    np.copyto(out, k, casting="unsafe")  # the one rounding to float
    if lo != lo:
        np.copyto(out, d, where=np.isnan(d))


_GLIBC_CLIP = (np.nextafter(_GLIBC_UNDERFLOW, F32(-np.inf)), np.nextafter(_GLIBC_OVERFLOW, F32(np.inf)))
_LIBM_BUFFERS = {"x": F32, "z": np.float64, "k": np.float64, "t": np.float64, "s": np.float64, "i": np.int64}


def expf_libm(x) -> np.ndarray:
    """glibc's ``expf``: within 0.502 ULP of exp (correctly rounded but near a few rounding midpoints: 16 of
    the 63488 finite float16 values round otherwise than float64's exp rounded to float32), 0 below
    -103.97, inf above 88.72, NaN for NaN. ``_libm_reference``'s bits, about 10x faster (block by block)."""
    return _blocked(x, _libm_block, _LIBM_BUFFERS)


# SLEEF: where every result is a normal float (q = rint(x / ln 2) in [-125, 127]), scaling by 2^q adds q to
# the exponent bits. A block with other inputs scales in double and rounds once (as the reference's two
# float32 scalings do: the first is exact), its input clipped to the floats just beyond the reference's
# selects, where the formula gives 0 and inf itself; NaNs are put back.
_SLEEF_FAST_LO, _SLEEF_FAST_HI = F32(-86.5), F32(88.0)
_SLEEF_CLIP = (np.nextafter(F32(-104), F32(-np.inf)), np.nextafter(F32(100), F32(np.inf)))
_SLEEF_SHIFT = F32(1.5 * 2 ** 23)  # y + shift rounds y (|y| < 2^22) to an integer as rint: ties to even
_SLEEF_LN2 = float(_SLEEF_L2U) + float(_SLEEF_L2L)  # exact: L2U's lowest bit is 2^-15, L2L's 2^-43
_SLEEF_SHIFT_BITS = int(_SLEEF_SHIFT.view(np.int32))  # ... whose bits are these plus the integer
# The polynomial's first four fused multiply-adds, u' = RN32(u * s + c), have their result in c's binade for
# every |s| <= ln 2 / 2 (|u * s| < c / 8, and for c = 0.00833 (2^-7 * 1.0667): |u * s| <= 5.1e-4 < c - 2^-7),
# so RN32 there is rounding to a multiple of ulp(c): (u * s + (M + c)) - M with M = 1.5 * 2^52 ulp(c) rounds
# the exact product (48 bits, exact in double) plus c once, to even as RN32 (M / ulp(c) is even), and the
# subtraction is exact. No midpoint test, no conversion to float32 and back.
_SLEEF_MAGIC = tuple((m + float(c), m) for c in _SLEEF_POLY[1:5]  # (M + c, M); ulp(c) = 2^(frexp exponent - 24)
                     for m in (math.ldexp(1.5, math.frexp(c)[1] - 24 + 52),))


def _sleef_block(d: np.ndarray, out: np.ndarray, b: dict) -> None:
    """``_sleef_u10_reference`` on one block. The reduction's two fused multiply-adds are one double
    expression rounded once: the first, s1 = d - q L2U, is exact in float32 (q L2U, 8 bits times 15, is a
    float32 within [d / 2, 2 d]: Sterbenz) and the second, s1 - q L2L, is a multiple of 2^-43 below 1, exact
    in double; so is d - q (L2U + L2L) (the sum's 44 bits times q's 8 fit a double), the same number, and its
    conversion to float32 is the second step's one rounding. The polynomial's first four steps round as
    _SLEEF_MAGIC says; its last step and s + s^2 u round the double sum to float32, which is the fused result
    unless that sum is a float32 midpoint: no input gives one (benches/expf_exhaustive.py: every float32
    input against the reference)."""
    y, qf, s32, s, t = b["y"], b["qf"], b["s32"], b["s"], b["t"]
    lo, hi = d.min(), d.max()  # NaN where the block has one
    fast = bool(lo >= _SLEEF_FAST_LO and hi <= _SLEEF_FAST_HI)
    x = d if fast else np.clip(d, _SLEEF_CLIP[0], _SLEEF_CLIP[1], out=b["x"])
    np.multiply(x, _SLEEF_R_LN2, out=y)  # float32 d * R_LN2
    np.add(y, _SLEEF_SHIFT, out=y)  # q in the low bits
    np.subtract(y, _SLEEF_SHIFT, out=qf)  # rint
    np.multiply(qf, -_SLEEF_LN2, out=t, dtype=np.float64)  # exact
    np.add(t, x, out=t, dtype=np.float64)  # d - q (L2U + L2L) = s1 - q L2L, exact
    np.copyto(s32, t, casting="unsafe")  # s = RN32(s1 - q L2L)
    np.copyto(s, s32)
    np.multiply(s, float(_SLEEF_POLY[0]), out=t)
    for i, (k, m) in enumerate(_SLEEF_MAGIC):
        if i:
            np.multiply(t, s, out=t)
        np.add(t, k, out=t)
        np.subtract(t, m, out=t)  # u = RN32(u * s + c)
    np.multiply(t, s, out=t)
    np.add(t, float(_SLEEF_POLY[5]), out=t)
    np.copyto(qf, t, casting="unsafe")  # u = RN32(u * s + 0.5)
    w = np.multiply(s32, s32, out=s32)  # float32 s * s (s32's last use)
    np.multiply(w, qf, out=t, dtype=np.float64)
    np.add(t, s, out=t)
    np.copyto(w, t, casting="unsafe")  # RN32(s^2 u + s)
    np.add(w, F32(1), out=w)
    yi = y.view(np.int32)
    if fast:
        np.left_shift(yi, 23, out=yi)  # q << 23 (the shift's bits fall off the top)
        np.add(w.view(np.int32), yi, out=out.view(np.int32))  # u * 2^q: a normal float here
        return
    np.subtract(yi, _SLEEF_SHIFT_BITS - 1023, out=yi)  # q + 1023
    bits = s.view(np.int64)
    np.left_shift(yi, 52, out=bits, dtype=np.int64)  # 2^q in double
    np.multiply(w, s, out=t, dtype=np.float64)  # exact
    np.copyto(out, t, casting="unsafe")  # RN32(u 2^q): denormal, or inf
    if lo != lo:
        np.copyto(out, d, where=np.isnan(d))


_SLEEF_BUFFERS = {"x": F32, "y": F32, "qf": F32, "s32": F32, "s": np.float64, "t": np.float64}


def expf_sleef_u10(x) -> np.ndarray:
    """SLEEF's ``expf_u10`` as its AVX2/AVX-512 build computes it (every multiply-add fused): within one ULP of
    exp, 0 below -104, inf above 100 (and where the scaling overflows), NaN for NaN. ``_sleef_u10_reference``'s
    bits, about 10x faster (block by block)."""
    return _blocked(x, _sleef_block, _SLEEF_BUFFERS)


# The float32 exps CPU's loops may call, by the name cpu_host's probes give (ScalarE's ``exp_<name>``).
EXPF: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sleef_u10": expf_sleef_u10,
    "libm": expf_libm,
}
