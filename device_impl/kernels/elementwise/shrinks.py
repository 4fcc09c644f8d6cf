"""Thresholds and shrinks: threshold, hardshrink, softshrink, and the shrinks' gradient (hardshrink_backward,
softshrink_backward: ATen's one shrink_backward_kernel).

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``); the gradient and the
input stream through the same tiles. Everything is VectorE: comparisons against the op's scalar, a subtraction
or addition, and ``select`` between branches, each exact, so the results are CPU's bits (including the sign of a
zero). The scalars are read as the CPU kernel reads them (``Scalar::to<T>``, checked: ``kernels.scalars``):
hardshrink's and the gradient's lambda in the tensor's dtype, softshrink's and threshold's threshold in float for
the reduced floats.

Where CPU's vector and scalar lambdas differ, ``loop._vector_split`` gives each element the one CPU runs there
(the block asked of the running torch, ``cpu_host.lambda_block``): the gradient of a NaN input is 0 in the vector
lambda and the incoming gradient in the scalar one; softshrink inside [-lambda, lambda] is +0.0 in the vector
lambda and ``x * 0`` (-0.0 for a negative x, NaN for NaN) in the scalar one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import (broadcast_shape, check_same_dtype, elementwise, numpy_compute,
                                        result_type)
from device_impl.kernels.elementwise.loop import BOOL, _FLOATS, _refuse, _vector_split
from device_impl.kernels.registry import register_family
from device_impl.kernels.scalars import checked_convert, to_numpy

_REDUCED = (torch.bfloat16, torch.float16)


def _float_only(kernel: str, *tensors: Any) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype not in _FLOATS:
            raise _refuse(kernel, t.dtype)


def _meta_same(a: dict) -> tuple:
    x = a["self"]
    return tuple(x.shape), x.dtype, (x,)


# --- threshold ---------------------------------------------------------------------------------------------------

def _threshold_compute(out: torch.Tensor, a: dict) -> None:
    """``x <= threshold ? value : x`` (a NaN x is kept). Every dtype but bool; an integer threshold and value are
    truncated toward zero (checked: an out-of-range one is CPU's RuntimeError)."""
    x = a["self"]
    if x.dtype == torch.bool:
        raise _refuse("threshold_cpu", x.dtype)
    dtype = x.dtype
    threshold = float(np.float32(checked_convert(a["threshold"], torch.float32))) if dtype in _REDUCED \
        else to_numpy(a["threshold"], dtype).item()
    value = to_numpy(a["value"], dtype).item()
    cd = numpy_compute(dtype)

    def emit(nc, o, t):
        low = nc.sbuf_tile(t.shape, BOOL)
        fill = nc.sbuf_tile(t.shape, cd)
        nc.vector.tensor_scalar(low, t, "less_equal", threshold, dtype=cd)
        nc.vector.memset(fill, value)
        nc.vector.select(o, low, fill, t)

    elementwise("threshold", out, (x,), emit)


register_family("threshold", _threshold_compute, _meta_same)


# --- hardshrink, softshrink ----------------------------------------------------------------------------------------

def _hardshrink_compute(out: torch.Tensor, a: dict) -> None:
    """``-lambda <= x <= lambda ? +0.0 : x``, lambda in the tensor's dtype."""
    x = a["self"]
    _float_only("hardshrink_cpu", x)
    lambd = float(to_numpy(a.get("lambd", 0.5), x.dtype))

    def emit(nc, o, t):
        inside = nc.sbuf_tile(t.shape, BOOL)
        other = nc.sbuf_tile(t.shape, BOOL)
        zero = nc.sbuf_tile(t.shape, FP32)
        nc.vector.tensor_scalar(inside, t, "greater_equal", -lambd, dtype=FP32)
        nc.vector.tensor_scalar(other, t, "less_equal", lambd, dtype=FP32)
        nc.vector.tensor_tensor(inside, inside, other, "logical_and")
        nc.vector.memset(zero, 0.0)
        nc.vector.select(o, inside, zero, t)

    elementwise("hardshrink", out, (x,), emit)


register_family("hardshrink", _hardshrink_compute, _meta_same)

# the largest lambda softshrink accepts per dtype, as ATen's check prints it (std::ostream's 6 significant digits)
_SOFTSHRINK_MAX = {torch.float32: (float(np.finfo(np.float32).max), "3.40282e+38"),
                   torch.bfloat16: (float(torch.finfo(torch.bfloat16).max), "3.38953e+38"),
                   torch.float16: (65504.0, "65504")}
_DTYPE_WORDS = {torch.float32: "Float", torch.bfloat16: "BFloat16", torch.float16: "Half"}


def _softshrink_emit(lambd: float, vector: bool):
    """``x > l ? x - l : x < -l ? x + l : inside`` in fp32, ``inside`` +0.0 (NaN kept) in the vector lambda and
    ``x * 0`` in the scalar one."""
    def emit(nc, o, t):
        above = nc.sbuf_tile(t.shape, BOOL)
        below = nc.sbuf_tile(t.shape, BOOL)
        moved = nc.sbuf_tile(t.shape, FP32)
        inside = nc.sbuf_tile(t.shape, FP32)
        if vector:
            nan = nc.sbuf_tile(t.shape, BOOL)
            nc.vector.memset(inside, 0.0)
            nc.vector.tensor_tensor(nan, t, t, "not_equal", dtype=FP32)
            nc.vector.select(inside, nan, t, inside)
        else:
            nc.vector.tensor_scalar(inside, t, "multiply", 0.0, dtype=FP32)
        nc.vector.tensor_scalar(below, t, "less", -lambd, dtype=FP32)
        nc.vector.tensor_scalar(moved, t, "add", lambd, dtype=FP32)
        nc.vector.select(inside, below, moved, inside)
        nc.vector.tensor_scalar(above, t, "greater", lambd, dtype=FP32)
        nc.vector.tensor_scalar(moved, t, "subtract", lambd, dtype=FP32)
        nc.vector.select(o, above, moved, inside)

    return emit


def _softshrink_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    _float_only("softshrink_check", x)  # ATen dispatches on the dtype to check lambda: floats only
    check_same_dtype(out, x.dtype)  # then builds a unary op (check_all_same_dtype): after the refusal above
    raw = a.get("lambd", 0.5)
    high, shown = _SOFTSHRINK_MAX[x.dtype]
    if not 0 <= float(raw) <= high:
        raise RuntimeError(f"lambda must be in range [0, {shown}] for input dtype {_DTYPE_WORDS[x.dtype]}, but found "
                           f"{raw}")
    lambd = float(np.float32(float(raw)))  # to<float>() for every float dtype it runs (reduced: in float)
    parts = _vector_split(out, (x,), cpu_host.lambda_block("softshrink", x.dtype))
    for part, vector in zip(parts, (True, False)):
        if part is not None:
            elementwise("softshrink", part[0], part[1:], _softshrink_emit(lambd, vector))


register_family("softshrink", _softshrink_compute, _meta_same)


# --- the shrinks' gradient -----------------------------------------------------------------------------------------

def _shrink_backward_emit(lambd: float, vector: bool):
    """The gradient where x < -l or x > l, else +0.0; a NaN x: +0.0 in the vector lambda (its mask is false), the
    gradient in the scalar one (``-l <= x <= l`` is false)."""
    def emit(nc, o, g, x):
        keep = nc.sbuf_tile(x.shape, BOOL)
        other = nc.sbuf_tile(x.shape, BOOL)
        zero = nc.sbuf_tile(x.shape, FP32)
        if vector:
            nc.vector.tensor_scalar(keep, x, "less", -lambd, dtype=FP32)
            nc.vector.tensor_scalar(other, x, "greater", lambd, dtype=FP32)
            nc.vector.tensor_tensor(keep, keep, other, "logical_or")
        else:
            nc.vector.tensor_scalar(keep, x, "greater_equal", -lambd, dtype=FP32)
            nc.vector.tensor_scalar(other, x, "less_equal", lambd, dtype=FP32)
            nc.vector.tensor_tensor(keep, keep, other, "logical_and")
            nc.vector.tensor_scalar(keep, keep, "equal", 0, dtype=FP32)
        nc.vector.memset(zero, 0.0)
        nc.vector.select(o, keep, g, zero)

    return emit


def _meta_grad(grad: str):
    def meta(a: dict) -> tuple:
        g, x = a[grad], a["self"]
        return broadcast_shape(g, x), result_type(g, x), (g, x)

    return meta


def _shrink_backward(grad: str):
    def compute(out: torch.Tensor, a: dict) -> None:
        g, x = a[grad], a["self"]
        common = result_type(g, x)
        if common not in _FLOATS:
            raise _refuse("shrink_backward_cpu", common)
        lambd = float(to_numpy(a["lambd"], common))
        parts = _vector_split(out, (g, x), cpu_host.lambda_block("shrink_backward", common))
        for part, vector in zip(parts, (True, False)):
            if part is not None:
                elementwise("shrink_backward", part[0], part[1:], _shrink_backward_emit(lambd, vector),
                            common_dtype=common)

    return compute


register_family("hardshrink_backward", _shrink_backward("grad_out"), _meta_grad("grad_out"))
register_family("softshrink_backward", _shrink_backward("grad_output"), _meta_grad("grad_output"))
