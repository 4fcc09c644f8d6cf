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
    inexact ``s`` one double ULP towards the exact sum), which is then correct: 53 >= 24 + 2 bits."""
    f64 = np.float64
    with np.errstate(all="ignore"):
        p = np.asarray(a, dtype=F32).astype(f64) * np.asarray(b, dtype=F32).astype(f64)
        p, c = np.broadcast_arrays(p, np.asarray(c, dtype=F32).astype(f64))
        s = p + c
        low = s.view(np.int64) & _BELOW_FP32
        boundary = (low == _FP32_MIDPOINT) | (np.abs(s) < _FP32_NORMAL)
        if boundary.any():
            at = np.nonzero(boundary)
            ps, cs, ss = p[at], c[at], s[at]
            bb = ss - ps
            err = (ps - (ss - bb)) + (cs - bb)
            odd = np.isfinite(ss) & (err != 0) & ((ss.view(np.int64) & 1) == 0)
            s[at] = np.where(odd, np.nextafter(ss, np.where(err > 0, np.inf, -np.inf)), ss)
        return s.astype(F32)


_BELOW_FP32 = (1 << 29) - 1  # a double's significand bits below fp32's 24
_FP32_MIDPOINT = 1 << 28  # ... of a double halfway between two adjacent normal fp32 values
_FP32_NORMAL = 2.0 ** -126


# SLEEF's expf_u10 (xexpf): q = rint(x / ln 2); s = x - q * ln 2 in two fused steps (ln 2 split into L2U + L2L);
# exp(s) = 1 + s + s^2 * P(s); the result scaled by 2^q. Its published float32 constants:
_SLEEF_R_LN2 = F32(1.442695040888963407359924681001892137426645954152985934135449406931)
_SLEEF_L2U = F32(0.693145751953125)
_SLEEF_L2L = F32(1.428606765330187045e-06)
_SLEEF_POLY = tuple(F32(c) for c in (0.000198527617612853646278381, 0.00139304355252534151077271,
                                     0.00833336077630519866943359, 0.0416664853692054748535156,
                                     0.166666671633720397949219, 0.5))


def expf_sleef_u10(x) -> np.ndarray:
    """SLEEF's ``expf_u10`` as its AVX2/AVX-512 build computes it (every multiply-add fused): within one ULP of
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


def expf_libm(x) -> np.ndarray:
    """glibc's ``expf``: within 0.502 ULP of exp (correctly rounded but near a few rounding midpoints: 16 of
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


# The float32 exps CPU's loops may call, by the name cpu_host's probes give (ScalarE's ``exp_<name>``).
EXPF: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sleef_u10": expf_sleef_u10,
    "libm": expf_libm,
}
