"""round(x, decimals=d) (round.decimals, its out= and in-place forms) on VectorE.

CPU's ``round_decimals_kernel`` (UnaryOpsKernel.cpp) is a scalar ``cpu_kernel`` in the dtype's opmath (float32
for float32/bfloat16/float16, double for float64): ``ten_pow = (opmath) std::pow(10, |d|)`` (a double power cast
once, so 10^39 and beyond are inf in float32), then ``nearbyint(x * ten_pow) / ten_pow`` for d > 0 and
``nearbyint(x / ten_pow) * ten_pow`` for d < 0, rounded to the dtype once. Each step here is that one rounding
in the opmath dtype (multiply or divide by the immediate, round half to even, the inverse step), so the rounding
points are CPU's: round(0.125, 1) is 0.1 because 0.125 * 10 is exactly 1.25. d = 0 is CPU's round_stub (half to
even of x itself). Integer and bool tensors: CPU has no kernel for them (NotImplementedError, "round_vml_cpu"
for d = 0, "round_cpu" otherwise), nor here.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import elementwise
from device_impl.kernels.elementwise.loop import _refuse
from device_impl.kernels.registry import register_family

F64 = np.dtype(np.float64)


def ten_power(decimals: int, opmath: np.dtype) -> np.floating:
    """``static_cast<opmath>(std::pow(10, |decimals|))``: the double power (inf past double's range), cast."""
    try:
        power = 10.0 ** abs(decimals)
    except OverflowError:
        power = float("inf")
    with np.errstate(over="ignore"):
        return opmath.type(power)


def _round_decimals_compute(out: torch.Tensor, a: dict) -> None:
    x, decimals = a["self"], int(a.get("decimals", 0))
    if not x.dtype.is_floating_point:
        raise _refuse("round_vml_cpu" if decimals == 0 else "round_cpu", x.dtype)
    if decimals == 0:
        elementwise("round", out, (x,), lambda nc, o, t: nc.vector.tensor_unary(o, t, "round"))
        return
    opmath = F64 if x.dtype == torch.float64 else FP32
    scale = ten_power(decimals, opmath)
    there, back = ("multiply", "divide") if decimals > 0 else ("divide", "multiply")

    def emit(nc, o, t) -> None:
        step = nc.sbuf_tile(t.shape, opmath)
        with np.errstate(all="ignore"):  # x * inf, inf / inf: CPU's NaN and inf, no warning
            nc.vector.tensor_scalar(step, t, there, scale, dtype=opmath)
            nc.vector.tensor_unary(step, step, "round", dtype=opmath)
            nc.vector.tensor_scalar(o, step, back, scale, dtype=opmath)

    elementwise("round", out, (x,), emit)


def _round_decimals_meta(a: dict) -> tuple:
    return tuple(a["self"].shape), a["self"].dtype, (a["self"],)


register_family("round", _round_decimals_compute, _round_decimals_meta, overloads=("decimals", "decimals_out"))
