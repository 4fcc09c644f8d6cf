"""Binary elementwise ops: add, sub (with alpha), mul, div (rounding modes), floor_divide, remainder, fmod,
pow, atan2, maximum, minimum; comparisons eq, ne, lt, le, gt, ge; bitwise and logical and/or/xor.

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``, consecutive
elements along the free axis), both operands broadcast to the output and DMA'd tile by tile, a host
scalar kept as an immediate. Each op is one VectorE ALU instruction (``tensor_tensor`` for two tiles,
``tensor_scalar`` for a tile and a scalar: ``loop.binary``), its row in the table below giving how its
result dtype is promoted and which dtypes CPU refuses. Integer division first reduces a zero test of the
divisor tile on VectorE and raises CPU's error. pow(Tensor, Scalar) follows CPU's fast paths (sqrt,
rsqrt, reciprocal on ScalarE; squares and cubes as VectorE products rounded per step). add/sub with an
alpha in a float dtype fuse ``other * alpha + self`` on GpSimd (``loop._fma``) where CPU's vector loop
fuses it, and round ``alpha * other`` first where its scalar loop does (``loop._vector_split``).

numpy reference of each op: the ALU table of engine/isa.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_impl.engine import Tile
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import (
    broadcast_shape,
    cast_scalar,
    check_scalar_fits,
    elementwise,
    is_device_tensor,
    numpy_compute,
    numpy_dtype,
    promote,
    result_type,
    scalar_of,
)
from device_impl.kernels.elementwise.loop import (
    BOOL,
    _FLOATS,
    _as_tile,
    _fma,
    _narrow,
    _refuse,
    _tiles,
    _vector_split,
    binary,
)
from device_impl.kernels.elementwise import recurring
from device_impl.kernels.registry import register_family


def _iterator_scalar(y: Any) -> bool:
    """TensorIterator's ``is_scalar`` for a second operand: a host scalar, or a tensor that every output
    element reads at one place (each dimension of size 1 or stride 0), as 0-d and expanded one-element ones."""
    if not isinstance(y, torch.Tensor):
        return True
    return all(size == 1 or stride == 0 for size, stride in zip(y.shape, y.stride()))


def _check_integer_divisor(nc, divisor: Any, cd: np.dtype) -> None:
    """Integer division by zero raises on CPU; the kernel raises the same error."""
    if cd.kind not in "iub":
        return
    if isinstance(divisor, Tile):
        is_zero = nc.sbuf_tile(divisor.shape, BOOL)
        nc.vector.tensor_scalar(is_zero, divisor, "equal", 0)
        flag = nc.sbuf_tile((divisor.partitions, 1), BOOL)
        nc.vector.tensor_reduce(flag, is_zero, "logical_or")
        found = bool(flag.read().any())
    else:
        found = divisor == 0
    if found:
        raise RuntimeError("ZeroDivisionError")  # what CPU raises, message included


def _meta_binary(first: str, second: str, rule: str):
    def meta(a: dict) -> tuple:
        x, y = a[first], a[second]
        shape = broadcast_shape(x, y)
        if rule == "compare" or rule == "logical":
            return shape, torch.bool, (x, y)
        return shape, promote(x, y, int_to_float=(rule == "float")), (x, y)

    return meta


def _common_dtype(first: str, second: str, int_to_float: bool = False):
    """The dtype CPU's binary, comparison and logical iterators cast both inputs to (registry's ``promotes``)."""
    def promotes(a: dict) -> torch.dtype:
        return promote(a[first], a[second], int_to_float=int_to_float)

    return promotes


def _div_common(a: dict) -> torch.dtype:
    """True division's iterator is a float op (``build_borrowing_binary_float_op``); with a rounding mode a
    plain binary op."""
    return promote(a["self"], a["other"], int_to_float=a.get("rounding_mode") is None)


def _register_binary(packet: str, op: str, rule: str = "promote", first: str = "self", second: str = "other",
                     integral_only: bool = False, zero_check: bool = False, overloads=None,
                     refuse_bool: str | None = None, round_scalars: bool = True,
                     narrow_compute: bool = False, recurring: Any = None) -> None:
    meta = _meta_binary(first, second, rule)

    def compute(out: torch.Tensor, a: dict) -> None:
        x, y = a[first], a[second]
        common = iterator_dtype = result_type(x, y)
        if integral_only and (common.is_floating_point or common.is_complex):
            raise _refuse(f"{packet}_cpu", common)
        if refuse_bool and common == torch.bool:
            raise _refuse(refuse_bool, common)
        if rule == "float":
            common = promote(x, y, int_to_float=True)
        cd = BOOL if rule == "logical" else (_narrow(common) if narrow_compute else numpy_compute(common))
        if narrow_compute and not round_scalars and _iterator_scalar(y):
            # ATen's reduced-float branch for a scalar divisor (iter.is_scalar(2)): opmath (fp32) with the
            # divisor's original value read as float, one rounding of the result
            cd = numpy_compute(common)

        elementwise(packet, out, (x, y), _binary_emit(op, zero_check, cd), common_dtype=iterator_dtype,
                    round_scalars=round_scalars)

    register_family(packet, compute, meta, overloads=overloads, recurring=recurring,
                    promotes=_common_dtype(first, second, rule == "float"))


def _binary_emit(op: str, zero_check: bool, cd: np.dtype):
    """A ``_register_binary`` op's emit: one function for the kernel and its recurring-call plans, so both key
    the same launch (kernels/replay.py keys an emit by its code and closure values)."""

    def emit(nc, o, tx, ty):
        if zero_check:
            _check_integer_divisor(nc, ty, cd)
        binary(nc, o, tx, ty, op, cd)

    return emit


def _mul_launch(x: torch.Tensor, y: torch.Tensor) -> tuple:
    """mul's emit and common dtype for a plan, as ``_register_binary``'s compute makes them (rule promote)."""
    common = result_type(x, y)
    return _binary_emit("multiply", False, numpy_compute(common)), common


# mul reads a scalar/0-d operand at full precision on CPU (original_scalar_value); maximum/minimum round it
_register_binary("mul", "multiply", round_scalars=False,
                 recurring=recurring.Plans("mul", _mul_launch, round_scalars=False))
for _packet, _op in [("maximum", "maximum"), ("minimum", "minimum")]:
    _register_binary(_packet, _op)
_register_binary("atan2", "atan2", rule="float")
_register_binary("remainder", "remainder", zero_check=True, refuse_bool="remainder_cpu")
_register_binary("fmod", "fmod", zero_check=True, refuse_bool="fmod_cpu")
_register_binary("floor_divide", "floor_divide", zero_check=True, refuse_bool="div_floor_cpu", round_scalars=False,
                 narrow_compute=True)
for _packet, _op in [("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
                     ("gt", "greater"), ("ge", "greater_equal")]:
    _register_binary(_packet, _op, rule="compare")
for _packet in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _register_binary(_packet, _packet, integral_only=True)
for _packet in ("logical_and", "logical_or", "logical_xor"):
    _register_binary(_packet, _packet, rule="logical")
_register_binary("pow", "power", second="exponent", overloads=("Tensor_Tensor", "Tensor_Tensor_out", "Scalar",
                                                                 "Scalar_out"), refuse_bool="pow")


def _pow_tensor_scalar(out: torch.Tensor, a: dict) -> None:
    x, exponent = a["self"], a["exponent"]
    e = scalar_of(exponent)
    # CPU's fast paths: x ** 0 is ones and x ** 1 a copy, for every dtype (bool included).
    if e == 0:
        elementwise("pow", out, (), lambda nc, o: nc.vector.memset(o, 1))
        return
    if e == 1:
        elementwise("pow", out, (x,), lambda nc, o, t: nc.vector.tensor_copy(o, t))
        return
    if result_type(x, exponent) == torch.bool:
        raise _refuse("pow", torch.bool)
    if not (x.dtype.is_floating_point or x.dtype.is_complex) and not isinstance(e, float) and e < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    common = result_type(x, exponent)
    if common in _FLOATS:
        _pow_float_scalar(out, x, e, common)
        return
    cd = numpy_compute(common)
    elementwise("pow", out, (x,), lambda nc, o, t: nc.vector.tensor_scalar(o, t, "power", e, dtype=cd))


def _pow_float_scalar(out: torch.Tensor, x: torch.Tensor, e, common: torch.dtype) -> None:
    """pow(Tensor, Scalar) for floating dtypes as ATen's pow_tensor_scalar_kernel (PowKernel.cpp) computes it:
    float32 and bfloat16 (not float16) exponents 0.5, -0.5 and -1 run sqrt, rsqrt and reciprocal
    (sqrt(-0.0) = -0.0, rsqrt(-0.0) = -inf, unlike pow); every other exponent is first converted to the
    dtype (c10's checked conversion for float16/bfloat16: out of range raises; 1e-8 becomes 0 and
    x ** 0 = 1); then float32 and bfloat16 compute exponents 2, 3 and -2 as x * x, x * x * x and
    1 / (x * x), each step rounded to the dtype, and the others as pow in fp32."""
    special = {0.5: "sqrt", -0.5: "rsqrt", -1.0: "reciprocal"}.get(e) if not isinstance(e, complex) else None
    if special is not None and common != torch.float16:
        elementwise("pow", out, (x,), lambda nc, o, t: nc.scalar.activation(o, t, special), common_dtype=common)
        return
    if common != torch.float32:
        check_scalar_fits(e, common)
    e = cast_scalar(e, common)
    cd = _narrow(common)
    steps = {2.0: 2, 3.0: 3, -2.0: -2}.get(e) if common != torch.float16 else None

    def emit(nc, o, t):
        if steps is None:
            nc.vector.tensor_scalar(o, t, "power", e, dtype=FP32)
            return
        square = nc.sbuf_tile(o.shape, cd)
        nc.vector.tensor_tensor(square if steps != 2 else o, t, t, "multiply", dtype=cd)
        if steps == 3:
            nc.vector.tensor_tensor(o, square, t, "multiply", dtype=cd)
        elif steps == -2:
            nc.vector.tensor_scalar(o, square, "divide", 1.0, reverse=True, dtype=cd)

    elementwise("pow", out, (x,), emit, common_dtype=common)


register_family("pow", _pow_tensor_scalar, _meta_binary("self", "exponent", "promote"),
                overloads=("Tensor_Scalar", "Tensor_Scalar_out"))


def _meta_add(a: dict) -> tuple:
    return broadcast_shape(a["self"], a["other"]), result_type(a["self"], a["other"]), (a["self"], a["other"])


def _is_bool(v: Any) -> bool:
    return v.dtype == torch.bool if isinstance(v, torch.Tensor) else isinstance(v, bool)


def _sub_check(x: Any, y: Any) -> None:
    """ATen's sub_check, for every sub overload (the functional one is checked above the kernel, sub.out here):
    no bool operand at all, whatever the other's dtype."""
    if _is_bool(x) and _is_bool(y):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if _is_bool(x) or _is_bool(y):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                           "to invert a mask, use the `~` or `logical_not()` operator instead.")


def _add_like(op: str):
    def compute(out: torch.Tensor, a: dict) -> None:
        x, y, alpha = a["self"], a["other"], a.get("alpha", 1)
        common = result_type(x, y)
        if op == "subtract":
            _sub_check(x, y)
        if isinstance(alpha, float) and not (common.is_floating_point or common.is_complex):
            raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
        cd = numpy_compute(common)
        if alpha != 1 and common in _FLOATS:
            _add_alpha_float(op, out, x, y, alpha, common)
            return
        elementwise(op, out, (x, y), _add_emit(op, alpha, common, cd), common_dtype=common)

    return compute


def _add_emit(op: str, alpha: Any, common: torch.dtype, cd: np.dtype):
    """add/sub's emit (integer alpha, or alpha 1): one function for the kernel and its recurring-call plans
    (``elementwise.recurring``), so both key the same launch (kernels/replay.py keys an emit by its code)."""

    def emit(nc, o, tx, ty):
        if alpha != 1:
            alpha_ = cast_scalar(alpha, common)  # CPU's add kernel reads alpha in the common dtype
            if isinstance(ty, Tile):
                scaled = nc.sbuf_tile(ty.shape, cd)
                nc.vector.tensor_scalar(scaled, ty, "multiply", alpha_, dtype=cd)
                ty = scaled
            else:
                ty = np.asarray(ty).astype(cd) * np.asarray(alpha_).astype(cd)
        binary(nc, o, tx, ty, op, cd)

    return emit


def _add_alpha_float(op: str, out: torch.Tensor, x: Any, y: Any, alpha: Any, common: torch.dtype) -> None:
    """add/sub with alpha != 1 in a float dtype as ATen's add kernel (ufunc add; sub passes -alpha): the
    vector lambda is vec::fmadd(other, alpha, self), the scalar one self + alpha * other with alpha in the
    dtype. float32 fuses both where the host's kernels fuse (common.fma32). bfloat16/float16 fuse in fp32 on
    CPU's full vector blocks only; the scalar lambda (tails, non-contiguous runs, every element under the
    DEFAULT kernels) rounds alpha * other to the dtype first, so it can overflow where fmadd does not."""
    a = cast_scalar(alpha, common)
    a = -a if op == "subtract" else a
    dt = numpy_dtype(common)

    def fused(nc, o, tx, ty):
        tx, ty = _tiles(nc, o, FP32, tx, ty)
        _fma(nc, o, ty, _as_tile(nc, a, o, FP32), tx)

    def rounded(nc, o, tx, ty):
        ty = _as_tile(nc, ty, o, dt)
        scaled = nc.sbuf_tile(o.shape, dt)
        nc.vector.tensor_scalar(scaled, ty, "multiply", a, dtype=FP32)
        binary(nc, o, tx, scaled, "add", FP32)

    if out.numel() == 0:
        return
    if common == torch.float32:
        elementwise(op, out, (x, y), fused, common_dtype=common)
        return
    if not cpu_host.fused_multiply_add():
        elementwise(op, out, (x, y), rounded, common_dtype=common)
        return
    tensors = [t for t in (x, y) if is_device_tensor(t)]
    parts = _vector_split(out, tensors, cpu_host.vector_block(common), scalar_operands=2 - len(tensors))
    for part, emit in zip(parts, (fused, rounded)):
        if part is None:
            continue
        views = iter(part[1:])
        operands = tuple(next(views) if is_device_tensor(t) else t for t in (x, y))
        elementwise(op, part[0], operands, emit, common_dtype=common)


# add.out/sub.out calls that recur with the same metadata, served from a plan (elementwise/recurring.py)
def _add_launch(op: str):
    """add/sub's emit and common dtype for a plan (alpha 1), as ``_add_like``'s compute makes them."""

    def launch(x: torch.Tensor, y: torch.Tensor) -> tuple:
        common = result_type(x, y)
        return _add_emit(op, 1, common, numpy_compute(common)), common

    return launch


RECURRING = {"add": recurring.Plans("add", _add_launch("add")), "sub": recurring.Plans("subtract", _add_launch("subtract"))}
register_family("add", _add_like("add"), _meta_add, recurring=RECURRING["add"],
                promotes=_common_dtype("self", "other"))
register_family("sub", _add_like("subtract"), _meta_add, recurring=RECURRING["sub"],
                promotes=_common_dtype("self", "other"))


def _div_compute(out: torch.Tensor, a: dict) -> None:
    x, y, mode = a["self"], a["other"], a.get("rounding_mode")
    if mode is None:
        common = promote(x, y, int_to_float=True)
        op = "divide"
    else:
        common = result_type(x, y)
        op = {"floor": "floor_divide", "trunc": "trunc_divide"}.get(mode)
        if op is None:
            raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{mode}'")
        if common == torch.bool:
            raise _refuse(f"div_{mode}_cpu", common)
    # a rounding division by a scalar divisor (a number, or a tensor every output element reads at one place): ATen's
    # reduced-float branch divides in fp32 by the divisor's original value there, one rounding (as floor_divide's,
    # _iterator_scalar); fp16 x // -1.5627435 rounded the divisor to fp16 and gave 122 of 20,000 quotients off by one
    cd = numpy_compute(common) if mode is None or _iterator_scalar(y) else _narrow(common)
    elementwise("div", out, (x, y), _div_emit(mode, op, cd), common_dtype=result_type(x, y), round_scalars=False)


def _div_emit(mode: str | None, op: str, cd: np.dtype):
    """div's emit: one function for the kernel and its recurring-call plans (true division only)."""

    def emit(nc, o, tx, ty):
        if mode is not None:
            _check_integer_divisor(nc, ty, cd)
        binary(nc, o, tx, ty, op, cd)

    return emit


def _div_launch(x: torch.Tensor, y: torch.Tensor) -> tuple:
    """True division's emit and common dtype for a plan (a call with a rounding mode is never planned: the
    plans' key refuses any keyword but out), as ``_div_compute`` makes them."""
    return _div_emit(None, "divide", numpy_compute(promote(x, y, int_to_float=True))), result_type(x, y)


def _div_meta(a: dict) -> tuple:
    x, y = a["self"], a["other"]
    int_to_float = a.get("rounding_mode") is None
    return broadcast_shape(x, y), promote(x, y, int_to_float=int_to_float), (x, y)


register_family("div", _div_compute, _div_meta, promotes=_div_common,
                recurring=recurring.Plans("div", _div_launch, round_scalars=False))
