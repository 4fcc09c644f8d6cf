"""Ops on a float's representation: nextafter, frexp.

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``); operands (broadcast,
or a host 0-dim tensor as a memset tile) stream through the same tiles in the result's dtype. Both are exact:

* nextafter: VectorE's ALU nextafter computed in the dtype itself (not widened to fp32: the next
  bfloat16 after 1 is 1 + 2^-7), then ``to`` selected where the two are equal, so the result is C's ``nextafter``, which CPU's kernels and c10's bit-stepping
  BFloat16/Half versions agree on: ``to`` where the two are equal (nextafter(0.0, -0.0) is -0.0), the smallest
  subnormal with ``to``'s sign from a zero, NaN where either is NaN, an infinity stepping to the largest
  finite value. Integer and bool dtypes are CPU's NotImplementedError ("nextafter_cpu").
* frexp: ``x = mantissa * 2^exponent`` with ``0.5 <= |mantissa| < 1``, the mantissa in x's dtype and the
  exponent int32 (subnormal inputs normalised: frexp(1e-40) is 0.544 * 2^-132); zeros, infinities and NaN
  give themselves and exponent 0. A GpSimd program per tile (the instruction set has no exponent extraction):
  bfloat16/float16 widened to fp32 exactly, as c10's ``std::frexp`` of them does, the mantissa narrowed back
  exactly. CPU's out= rules: a mantissa of x's dtype and an int32 exponent or its RuntimeError, integer
  inputs its RuntimeError ("torch.frexp() only supports floating-point dtypes").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels.common import broadcast_shape, check_out, elementwise, numpy_dtype, result_type
from device_impl.kernels.elementwise.loop import BOOL, _FLOATS, _refuse, _tiles
from device_impl.kernels.registry import promotes_to_result, register_family


def _nextafter_compute(out: torch.Tensor, a: dict) -> None:
    x, y = a["self"], a["other"]
    common = result_type(x, y)
    if common not in _FLOATS:
        raise _refuse("nextafter_cpu", common)
    cd = numpy_dtype(common)

    def emit(nc, o, tx, ty):
        tx, ty = _tiles(nc, o, cd, tx, ty)
        stepped = nc.sbuf_tile(o.shape, cd)
        same = nc.sbuf_tile(o.shape, BOOL)
        nc.vector.tensor_tensor(stepped, tx, ty, "nextafter", dtype=cd)
        nc.vector.tensor_tensor(same, tx, ty, "equal", dtype=cd)
        nc.vector.select(o, same, ty, stepped)  # C's ``to`` on a tie (numpy's float16 loop returns ``from``)

    elementwise("nextafter", out, (x, y), emit, common_dtype=common)


def _nextafter_meta(a: dict) -> tuple:
    x, y = a["self"], a["other"]
    return broadcast_shape(x, y), result_type(x, y), (x, y)


register_family("nextafter", _nextafter_compute, _nextafter_meta, promotes=promotes_to_result(_nextafter_meta))


_FREXP_STEPS = 3  # GpSimd element-steps per element: exponent field, normalise, select the specials


def _frexp_parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C's frexpf of each element (x widened to fp32, exactly): mantissa in fp32, exponent int32, 0 for the
    non-finite values (whose mantissa is the value itself)."""
    wide = x if x.dtype == FP32 else x.astype(FP32)
    mantissa, exponent = np.frexp(wide)
    finite = np.isfinite(wide)
    return np.where(finite, mantissa, wide), np.where(finite, exponent, 0).astype(np.int32)


def _frexp_launch(which: int, out: torch.Tensor, x: torch.Tensor) -> None:
    """One of frexp's results (0: the mantissa, 1: the exponent) over ``out``'s tiles."""
    def emit(nc, o, t):
        part = nc.sbuf_tile(o.shape, FP32 if which == 0 else np.dtype(np.int32))

        def program(result, values):
            result[...] = _frexp_parts(values)[which]

        nc.gpsimd.run("frexp", program, (part,), (t,), elements=t.data.size, factor=_FREXP_STEPS)
        nc.vector.tensor_copy(o, part)

    elementwise("frexp", out, (x,), emit)


@TABLE.native("aten::frexp.Tensor_out", dtypes=COMPUTE_DTYPES)
def frexp_out(self: torch.Tensor, *, mantissa: torch.Tensor, exponent: torch.Tensor) -> Any:
    """frexp.Tensor_out as ATen's frexp_out (UnaryOps.cpp) checks it, then the two results; the functional
    frexp is PyTorch's composite, which allocates both like ``self`` and calls this. The exponent is written
    first, so a mantissa that is ``self`` (full overlap, which CPU allows) is read before it is written."""
    if not self.dtype.is_floating_point:
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    if mantissa.dtype != self.dtype:
        raise RuntimeError(f"torch.frexp() expects mantissa to have dtype {self.dtype} but got {mantissa.dtype}")
    if exponent.dtype != torch.int32:
        raise RuntimeError(f"torch.frexp() expects exponent to have dtype int but got {exponent.dtype}")
    shape = tuple(self.shape)
    check_out(exponent, shape, torch.int32, (self,), exact_dtype=True)
    check_out(mantissa, shape, self.dtype, (self,), exact_dtype=True)
    _frexp_launch(1, exponent, self)
    _frexp_launch(0, mantissa, self)
    return mantissa, exponent
