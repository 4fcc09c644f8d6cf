"""gcd and lcm of integer tensors, as CPU's scalar loop computes them, on GpSimd.

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``); both operands
(broadcast, or a host scalar as a memset tile) in the promoted integer dtype. Euclid's loop runs a data-dependent
number of steps per element, which no fixed-function engine expresses: a GpSimd program runs it over the tile,
its cost the tile's elements times the dtype's bound on the steps (Lame's), so not the data's.

CPU (``calc_gcd`` in ATen's Math.h, ``gcd_kernel``/``lcm_kernel`` in BinaryOpsKernel.cpp, scalar lambdas only):
``a = abs(a); b = abs(b); while (a != 0) { c = a; a = b % a; b = c; } return b;`` in the dtype, so the
absolute value of the dtype's minimum wraps to itself (gcd(INT_MIN, 0) is INT_MIN) and ``%`` is C's
truncating remainder; lcm is ``g == 0 ? 0 : abs(a / g * b)`` with C's integer promotion: computed in int32
for int8/int16/uint8 (then wrapped to the dtype), in the dtype itself (wrapping) for int32/int64. Floating and
bool dtypes are CPU's NotImplementedError ("gcd_cpu" / "lcm_cpu").
"""

from __future__ import annotations

import math

import numpy as np
import torch

from device_impl.kernels.common import broadcast_shape, elementwise, numpy_dtype, result_type
from device_impl.kernels.elementwise.loop import _refuse, _tiles
from device_impl.kernels.registry import promotes_to_result, register_family


def _euclid(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """CPU's calc_gcd per element, in ``a``'s dtype (wrapping abs, C's remainder)."""
    with np.errstate(over="ignore"):
        a, b = np.abs(a), np.abs(b)
    active = a != 0
    while active.any():
        divisor = np.where(active, a, 1)
        a, b = np.where(active, np.fmod(b, divisor), a), np.where(active, a, b)
        active = a != 0
    return b


def _lcm_of(a: np.ndarray, b: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``g == 0 ? 0 : abs(a / g * b)`` with C's promotion (int32 below 32 bits), wrapped to ``a``'s dtype.
    ``g`` divides ``a`` exactly, so floor division is C's truncating one."""
    wide = np.dtype(np.int32) if a.dtype.itemsize < 4 else a.dtype
    a, b, g = a.astype(wide), b.astype(wide), g.astype(wide)
    with np.errstate(over="ignore"):
        value = np.abs((a // np.where(g == 0, 1, g)) * b)
    return np.where(g == 0, 0, value)


def _steps_bound(bits: int) -> int:
    """Lame's bound on Euclid's steps for operands below 2^bits (log base phi of sqrt(5) * 2^bits, plus one),
    so the declared cost does not depend on the data (a replayed launch reports the same figures)."""
    return math.ceil((bits * math.log(2) + math.log(math.sqrt(5))) / math.log((1 + math.sqrt(5)) / 2)) + 1


def _compute(packet: str):
    def compute(out: torch.Tensor, args: dict) -> None:
        x, y = args["self"], args["other"]
        common = result_type(x, y)
        if common.is_floating_point or common.is_complex or common == torch.bool:
            raise _refuse(f"{packet}_cpu", common)
        cd = numpy_dtype(common)
        steps = _steps_bound(cd.itemsize * 8)

        def emit(nc, o, tx, ty):
            tx, ty = _tiles(nc, o, cd, tx, ty)

            def program(result, a, b):
                g = _euclid(a, b)
                result[...] = (g if packet == "gcd" else _lcm_of(a, b, g)).astype(cd, copy=False)

            result = nc.sbuf_tile(o.shape, cd)
            # per element and step: a remainder and two selects; lcm's division, product and abs at the end
            nc.gpsimd.run(packet, program, (result,), (tx, ty), elements=result.data.size,
                          factor=3 * steps + (3 if packet == "lcm" else 0))
            nc.vector.tensor_copy(o, result)

        elementwise(packet, out, (x, y), emit, common_dtype=common)

    return compute


def _meta(a: dict) -> tuple:
    x, y = a["self"], a["other"]
    return broadcast_shape(x, y), result_type(x, y), (x, y)


register_family("gcd", _compute("gcd"), _meta, promotes=promotes_to_result(_meta))
register_family("lcm", _compute("lcm"), _meta, promotes=promotes_to_result(_meta))
