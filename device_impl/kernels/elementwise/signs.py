"""Signs, classes and NaN-ignoring extrema: sgn, signbit, isposinf, isneginf, frac, heaviside, copysign, fmax, fmin.

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``); a binary op's operands
(broadcast, or a host scalar as an immediate) stream through the same tiles. Everything is VectorE and exact:
comparisons, ``isnan``, ``trunc``, one subtraction, ``copysign`` and ``select``, so the results are CPU's bits:

* sgn of a real tensor is ``sign`` (``(x > 0) - (x < 0)``: +0.0 for -0.0 and for NaN); a bool tensor is copied
* signbit: the sign bit of a float (-0.0 and a negative NaN included), ``x < 0`` of an integer, false for bool
* isposinf/isneginf: ``x == +-inf`` of a float, false for integers and bool (a bool out only: ``OUT_DTYPE_RULES``)
* frac: ``x - trunc(x)``, floats only (frac(-3.0) is +0.0, of an infinity NaN)
* heaviside: ``x == 0 ? values : x > 0`` (-0.0 takes ``values``; NaN gives 0); both of one dtype, as CPU requires
* copysign: ``|x|`` with ``y``'s sign bit, integers and bools promoted to the default float dtype
* fmax/fmin: the other operand where one is NaN; on a tie of zeros the operand CPU's kernel returns on this host
  for the dtype (``cpu_host.extremum_tie_first``: float32 the first, bfloat16 the second, float16 the first under
  AVX2/AVX-512 and the second under DEFAULT), so a select on a strict or a non-strict comparison, not ALU fmax
"""

from __future__ import annotations

import math
from typing import Any

import torch

from device_impl.engine import Tile
from device_impl.kernels import cpu_host
from device_impl.kernels.common import broadcast_shape, elementwise, numpy_compute, promote, result_type
from device_impl.kernels.elementwise.loop import BOOL, _FLOATS, _refuse, binary
from device_impl.kernels.elementwise.unary import _meta_unary, _sign_compute
from device_impl.kernels.registry import promotes_to_result, register_family

register_family("sgn", _sign_compute, _meta_unary("same"))


def _bool_of(test: str):
    """A unary op with a bool result: ``test`` of a float tile, false for integers and bools (``signbit`` of an
    integer is ``x < 0``)."""
    def compute(out: torch.Tensor, a: dict) -> None:
        x = a["self"]
        floating = x.dtype in _FLOATS

        def emit(nc, o, t):
            if floating and test == "signbit":
                nc.vector.tensor_unary(o, t, "signbit", dtype=numpy_compute(x.dtype))
            elif floating:
                nc.vector.tensor_scalar(o, t, "equal", math.inf if test == "isposinf" else -math.inf,
                                        dtype=numpy_compute(x.dtype))
            elif test == "signbit" and x.dtype != torch.bool:
                nc.vector.tensor_scalar(o, t, "less", 0, dtype=numpy_compute(x.dtype))
            else:
                nc.vector.memset(o, False)

        elementwise(test, out, (x,), emit)

    return compute


for _test in ("signbit", "isposinf", "isneginf"):
    register_family(_test, _bool_of(_test), _meta_unary("bool"))


def _frac_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    if x.dtype not in _FLOATS:
        raise _refuse("frac_cpu", x.dtype)

    def emit(nc, o, t):
        whole = nc.sbuf_tile(t.shape, numpy_compute(x.dtype))
        nc.vector.tensor_unary(whole, t, "trunc", dtype=numpy_compute(x.dtype))
        nc.vector.tensor_tensor(o, t, whole, "subtract", dtype=numpy_compute(x.dtype))

    elementwise("frac", out, (x,), emit)


register_family("frac", _frac_compute, _meta_unary("same"))


def _meta_binary(first: str, second: str, int_to_float: bool = False):
    def meta(a: dict) -> tuple:
        x, y = a[first], a[second]
        dtype = promote(x, y, int_to_float=True) if int_to_float else result_type(x, y)
        return broadcast_shape(x, y), dtype, (x, y)

    return meta


def _heaviside_compute(out: torch.Tensor, a: dict) -> None:
    x, values = a["self"], a["values"]
    if x.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes.")
    cd = numpy_compute(x.dtype)

    def emit(nc, o, t, v):
        zero = nc.sbuf_tile(t.shape, BOOL)
        step = nc.sbuf_tile(t.shape, cd)
        nc.vector.tensor_scalar(zero, t, "equal", 0, dtype=cd)
        nc.vector.tensor_scalar(step, t, "greater", 0, dtype=cd)
        nc.vector.select(o, zero, v if isinstance(v, Tile) else _filled(nc, t, v, cd), step)

    elementwise("heaviside", out, (x, values), emit, common_dtype=x.dtype)


def _filled(nc, like: Tile, value: Any, cd) -> Tile:
    tile = nc.sbuf_tile(like.shape, cd)
    nc.vector.memset(tile, value)
    return tile


register_family("heaviside", _heaviside_compute, _meta_binary("self", "values"))


def _copysign_compute(out: torch.Tensor, a: dict) -> None:
    x, y = a["self"], a["other"]
    common = promote(x, y, int_to_float=True)
    cd = numpy_compute(common)
    elementwise("copysign", out, (x, y), lambda nc, o, p, q: binary(nc, o, p, q, "copysign", cd), common_dtype=common)


_COPYSIGN_META = _meta_binary("self", "other", int_to_float=True)
register_family("copysign", _copysign_compute, _COPYSIGN_META, promotes=promotes_to_result(_COPYSIGN_META))


def _extremum(packet: str, larger: bool):
    """fmax (``larger``) / fmin: ``b`` where it wins (``a < b`` / ``b < a``, or ``<=`` where CPU returns the second
    operand on a tie of zeros) or where only ``a`` is NaN, else ``a``: a NaN operand loses to a number, both NaN
    give NaN. Equal nonzero values are the same bits whichever is taken."""
    def compute(out: torch.Tensor, a: dict) -> None:
        x, y = a["self"], a["other"]
        common = result_type(x, y)
        if common.is_complex:
            raise RuntimeError(f"{packet} not implemented for complex tensors.")
        cd = numpy_compute(common)
        floating = common in _FLOATS
        less = "less" if not floating or cpu_host.extremum_tie_first(packet, common) else "less_equal"

        def emit(nc, o, p, q):
            p_tile = p if isinstance(p, Tile) else _filled(nc, o, p, cd)
            q_tile = q if isinstance(q, Tile) else _filled(nc, o, q, cd)
            take = nc.sbuf_tile(o.shape, BOOL)
            if larger:
                nc.vector.tensor_tensor(take, p_tile, q_tile, less, dtype=cd)
            else:
                nc.vector.tensor_tensor(take, q_tile, p_tile, less, dtype=cd)
            if floating:
                p_nan = nc.sbuf_tile(o.shape, BOOL)
                q_num = nc.sbuf_tile(o.shape, BOOL)
                nc.vector.tensor_unary(p_nan, p_tile, "isnan", dtype=cd)
                nc.vector.tensor_tensor(q_num, q_tile, q_tile, "equal", dtype=cd)  # not NaN
                nc.vector.tensor_tensor(p_nan, p_nan, q_num, "logical_and")
                nc.vector.tensor_tensor(take, take, p_nan, "logical_or")
            nc.vector.select(o, take, q_tile, p_tile)

        elementwise(packet, out, (x, y), emit, common_dtype=common)

    return compute


_EXTREMUM_META = _meta_binary("self", "other")
register_family("fmax", _extremum("fmax", True), _EXTREMUM_META, promotes=promotes_to_result(_EXTREMUM_META))
register_family("fmin", _extremum("fmin", False), _EXTREMUM_META, promotes=promotes_to_result(_EXTREMUM_META))
