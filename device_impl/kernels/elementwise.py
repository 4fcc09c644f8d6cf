"""Elementwise kernels: arithmetic, comparisons, bitwise/logical ops, unary math,
activations and their backward formulas.

Each op is a row in a table: which engine instruction computes it, how its
result dtype is promoted, and which dtypes CPU refuses (so we refuse them
the same way). The tile loop is ``common.elementwise``: DMA in, compute on
VectorE (ALU ops) or ScalarE (transcendentals), DMA out.

numpy references of each op are the ALU/ACTIVATIONS tables of engine/isa.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from device_impl.engine import Tile
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import (
    SCALAR_TYPE_NAMES,
    TYPE_META_NAMES,
    broadcast_shape,
    cast_scalar,
    check_scalar_fits,
    elementwise,
    fma32,
    is_device_tensor,
    numpy_dtype,
    numpy_compute,
    promote,
    result_type,
    scalar_of,
)
from device_impl.kernels import cpu_host, scalars
from device_impl.kernels.registry import register_family

BOOL = np.dtype(np.bool_)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _refuse(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    """The error CPU kernels raise for a dtype they have no implementation for."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{SCALAR_TYPE_NAMES[dtype]}\'')


def _narrow(dtype: torch.dtype) -> np.dtype:
    """Compute dtype of CPU's rounding divisions: bf16/fp16 round every intermediate step to the
    dtype there (Vectorized<BFloat16> arithmetic), unlike the single-rounding opmath of other ops."""
    return numpy_dtype(dtype) if dtype in (torch.bfloat16, torch.float16) else numpy_compute(dtype)


def binary(nc, out: Tile, x: Any, y: Any, op: str, cd: np.dtype) -> None:
    """out = x <op> y where either side may be a tile or an immediate scalar."""
    if isinstance(x, Tile) and isinstance(y, Tile):
        nc.vector.tensor_tensor(out, x, y, op, dtype=cd)
    elif isinstance(x, Tile):
        nc.vector.tensor_scalar(out, x, op, y, dtype=cd)
    else:
        nc.vector.tensor_scalar(out, y, op, x, reverse=True, dtype=cd)


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


# --- binary arithmetic ---------------------------------------------------------

def _meta_binary(first: str, second: str, rule: str):
    def meta(a: dict) -> tuple:
        x, y = a[first], a[second]
        shape = broadcast_shape(x, y)
        if rule == "compare" or rule == "logical":
            return shape, torch.bool, (x, y)
        return shape, promote(x, y, int_to_float=(rule == "float")), (x, y)

    return meta


def _register_binary(packet: str, op: str, rule: str = "promote", first: str = "self", second: str = "other",
                     integral_only: bool = False, zero_check: bool = False, overloads=None,
                     refuse_bool: str | None = None, round_scalars: bool = True,
                     narrow_compute: bool = False) -> None:
    meta = _meta_binary(first, second, rule)

    def compute(out: torch.Tensor, a: dict) -> None:
        x, y = a[first], a[second]
        common = result_type(x, y)
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

        def emit(nc, o, tx, ty):
            if zero_check:
                _check_integer_divisor(nc, ty, cd)
            binary(nc, o, tx, ty, op, cd)

        elementwise(packet, out, (x, y), emit, common_dtype=result_type(x, y), round_scalars=round_scalars)

    register_family(packet, compute, meta, overloads=overloads)


# mul reads a scalar/0-d operand at full precision on CPU (original_scalar_value); maximum/minimum round it
_register_binary("mul", "multiply", round_scalars=False)
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


def _add_like(op: str):
    def compute(out: torch.Tensor, a: dict) -> None:
        x, y, alpha = a["self"], a["other"], a.get("alpha", 1)
        common = result_type(x, y)
        if common == torch.bool and op == "subtract":
            raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                               "Use the `^` or `logical_xor()` operator instead.")
        if isinstance(alpha, float) and not (common.is_floating_point or common.is_complex):
            raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
        cd = numpy_compute(common)
        if alpha != 1 and common in _FLOATS:
            _add_alpha_float(op, out, x, y, alpha, common)
            return

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

        elementwise(op, out, (x, y), emit, common_dtype=common)

    return compute


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


register_family("add", _add_like("add"), _meta_add)
register_family("sub", _add_like("subtract"), _meta_add)


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
    cd = numpy_compute(common) if mode is None else _narrow(common)

    def emit(nc, o, tx, ty):
        if mode is not None:
            _check_integer_divisor(nc, ty, cd)
        binary(nc, o, tx, ty, op, cd)

    elementwise("div", out, (x, y), emit, common_dtype=result_type(x, y), round_scalars=False)


def _div_meta(a: dict) -> tuple:
    x, y = a["self"], a["other"]
    int_to_float = a.get("rounding_mode") is None
    return broadcast_shape(x, y), promote(x, y, int_to_float=int_to_float), (x, y)


register_family("div", _div_compute, _div_meta)


# --- unary ops -----------------------------------------------------------------

def _meta_unary(rule: str):
    def meta(a: dict) -> tuple:
        x = a["self"]
        if rule == "bool":
            return tuple(x.shape), torch.bool, (x,)
        dtype = promote(x, int_to_float=True) if rule == "float" else x.dtype
        return tuple(x.shape), dtype, (x,)

    return meta


def _register_activation(packet: str, func: str) -> None:
    """Transcendental unary ops on ScalarE; integer inputs give float32 (as CPU)."""

    def compute(out: torch.Tensor, a: dict) -> None:
        elementwise(packet, out, (a["self"],), lambda nc, o, t: nc.scalar.activation(o, t, func))

    register_family(packet, compute, _meta_unary("float"))


for _packet, _func in [("exp", "exp"), ("exp2", "exp2"), ("expm1", "expm1"), ("log", "log"), ("log2", "log2"),
                       ("log10", "log10"), ("log1p", "log1p"), ("sqrt", "sqrt"), ("rsqrt", "rsqrt"),
                       ("sin", "sin"), ("cos", "cos"), ("tan", "tan"), ("asin", "asin"), ("acos", "acos"),
                       ("atan", "atan"), ("sinh", "sinh"), ("cosh", "cosh"), ("tanh", "tanh"),
                       ("asinh", "asinh"), ("acosh", "acosh"), ("atanh", "atanh"), ("sigmoid", "sigmoid"),
                       ("erf", "erf"), ("erfc", "erfc"), ("erfinv", "erfinv"), ("reciprocal", "reciprocal")]:
    _register_activation(_packet, _func)


def _register_alu_unary(packet: str, op: str, rule: str = "same", integer_identity: bool = False,
                        refuse_bool: str | Exception | None = None, refuse_float: str | None = None,
                        overloads=("default", "out")) -> None:
    def compute(out: torch.Tensor, a: dict) -> None:
        x = a["self"]
        if refuse_bool and x.dtype == torch.bool:
            raise refuse_bool if isinstance(refuse_bool, Exception) else RuntimeError(refuse_bool)
        if refuse_float and (x.dtype.is_floating_point or x.dtype.is_complex):
            raise _refuse(refuse_float, x.dtype)
        if integer_identity and not x.dtype.is_floating_point:
            elementwise(packet, out, (x,), lambda nc, o, t: nc.vector.tensor_copy(o, t))
            return
        elementwise(packet, out, (x,), lambda nc, o, t: nc.vector.tensor_unary(o, t, op))

    register_family(packet, compute, _meta_unary(rule), overloads=overloads)


_register_alu_unary("abs", "abs", refuse_bool=_refuse("abs_cpu", torch.bool))
_register_alu_unary("neg", "negative", refuse_bool="Negation, the `-` operator, on a bool tensor is not supported. "
                    "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")
for _packet in ("floor", "ceil", "trunc", "round"):
    _register_alu_unary(_packet, _packet, integer_identity=True, refuse_bool=_refuse(f"{_packet}_vml_cpu", torch.bool))
_register_alu_unary("bitwise_not", "bitwise_not", refuse_float="bitwise_not_cpu")
_register_alu_unary("logical_not", "logical_not", rule="bool")
_register_alu_unary("isnan", "isnan", rule="bool")
_register_alu_unary("isinf", "isinf", rule="bool")


def _sign_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]

    def emit(nc, o, t):
        if t.dtype == BOOL:
            nc.vector.tensor_copy(o, t)
            return
        cd = numpy_compute(x.dtype)
        positive = nc.sbuf_tile(t.shape, cd)
        negative = nc.sbuf_tile(t.shape, cd)
        nc.vector.tensor_scalar(positive, t, "greater", 0, dtype=cd)
        nc.vector.tensor_scalar(negative, t, "less", 0, dtype=cd)
        nc.vector.tensor_tensor(o, positive, negative, "subtract", dtype=cd)

    elementwise("sign", out, (x,), emit)


register_family("sign", _sign_compute, _meta_unary("same"))


# --- activations and their gradients -------------------------------------------

def _float_only(kernel: str, *tensors: Any) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype not in _FLOATS:
            raise _refuse(kernel, t.dtype)


def _relu_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    if x.dtype == torch.bool:
        raise _refuse("clamp_min_scalar_cpu", x.dtype)
    if x.dtype in _FLOATS:
        elementwise("relu", out, (x,), lambda nc, o, t: nc.scalar.activation(o, t, "relu"))
    else:
        elementwise("relu", out, (x,), lambda nc, o, t: nc.vector.tensor_scalar(o, t, "maximum", 0))


register_family("relu", _relu_compute, _meta_unary("same"))


def _gelu_compute(out: torch.Tensor, a: dict) -> None:
    x, approximate = a["self"], a.get("approximate", "none")
    _float_only("GeluKernelImpl", x)
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    if cpu_host.onednn_gelu(x, approximate):
        elementwise("gelu", out, (x,), _gelu_onednn)
        return
    func = "gelu" if approximate == "none" else "gelu_tanh"
    elementwise("gelu", out, (x,), lambda nc, o, t: nc.scalar.activation(o, t, func))


def _gelu_onednn(nc, o: Tile, t: Tile) -> None:
    """oneDNN's eltwise_gelu_erf, which CPU runs for contiguous float32/bf16 inputs (cpu_host.onednn_gelu):
    x * (1 + erf(x / sqrt(2))) formed in fp32, then halved, so it is inf where |x| > FLT_MAX / 2."""
    e = nc.sbuf_tile(o.shape, FP32)
    nc.scalar.activation(e, t, "erf", scale=float(np.float32(1 / math.sqrt(2))))
    nc.vector.tensor_scalar(e, e, "add", 1.0, dtype=FP32)
    nc.vector.tensor_tensor(e, e, t, "multiply", dtype=FP32)
    nc.vector.tensor_scalar(o, e, "multiply", 0.5, dtype=FP32)


register_family("gelu", _gelu_compute, _meta_unary("same"))


def _silu_compute(out: torch.Tensor, a: dict) -> None:
    _float_only("silu", a["self"])
    elementwise("silu", out, (a["self"],), lambda nc, o, t: nc.scalar.activation(o, t, "silu"))


register_family("silu", _silu_compute, _meta_unary("same"))


def _clamp_tiles(nc, o, t, lo, hi, cd):
    """o = min(max(t, lo), hi); lo/hi are tiles, scalars or None. NaN propagates; lo > hi gives hi."""
    current = t
    # a scalar bound loses ties (clamp(-0.0, min=0.0) is -0.0 on CPU); a tensor bound wins them as
    # CPU's vector loop does
    if lo is not None:
        step = nc.sbuf_tile(t.shape, cd) if hi is not None else o
        binary(nc, step, current, lo, "maximum" if isinstance(lo, Tile) else "clamp_min", cd)
        current = step
    if hi is not None:
        binary(nc, o, current, hi, "minimum" if isinstance(hi, Tile) else "clamp_max", cd)
    elif lo is None:
        nc.vector.tensor_copy(o, t)


def _clamp_meta(a: dict) -> tuple:
    x, lo, hi = a["self"], a.get("min"), a.get("max")
    if lo is None and hi is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    return broadcast_shape(x, lo, hi), result_type(x, lo, hi), (x, lo, hi)


def _clamp_compute(out: torch.Tensor, a: dict) -> None:
    x, lo, hi = a["self"], a.get("min"), a.get("max")
    cd = numpy_compute(result_type(x, lo, hi))
    operands = [x] + [v for v in (lo, hi) if v is not None]

    def emit(nc, o, t, *bounds):
        it = iter(bounds)
        lo_v = next(it) if lo is not None else None
        hi_v = next(it) if hi is not None else None
        _clamp_tiles(nc, o, t, lo_v, hi_v, cd)

    elementwise("clamp", out, operands, emit, common_dtype=result_type(x, lo, hi))


register_family("clamp", _clamp_compute, _clamp_meta)


def _one_sided_clamp(bound: str):
    """clamp_min / clamp_max: clamp with only one bound (named ``min`` or ``max`` in their schema)."""
    def compute(out: torch.Tensor, a: dict) -> None:
        _clamp_compute(out, {"self": a["self"], bound: a[bound]})

    def meta(a: dict) -> tuple:
        return _clamp_meta({"self": a["self"], bound: a[bound]})

    return compute, meta


register_family("clamp_min", *_one_sided_clamp("min"))
register_family("clamp_max", *_one_sided_clamp("max"))


def _hardtanh_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    if x.dtype == torch.bool:
        raise _refuse("hardtanh", x.dtype)
    lo, hi = a.get("min_val", -1), a.get("max_val", 1)
    cd = numpy_compute(x.dtype)
    elementwise("hardtanh", out, (x,), lambda nc, o, t: _clamp_tiles(nc, o, t, lo, hi, cd))


register_family("hardtanh", _hardtanh_compute, _meta_unary("same"))


def _leaky_relu_compute(out: torch.Tensor, a: dict) -> None:
    x, slope = a["self"], a.get("negative_slope", 0.01)
    _float_only("leaky_relu_cpu", x)

    def emit(nc, o, t):
        scaled = nc.sbuf_tile(t.shape, FP32)
        positive = nc.sbuf_tile(t.shape, BOOL)
        nc.vector.tensor_scalar(scaled, t, "multiply", slope, dtype=FP32)
        nc.vector.tensor_scalar(positive, t, "greater", 0, dtype=FP32)
        nc.vector.select(o, positive, t, scaled)

    elementwise("leaky_relu", out, (x,), emit)


register_family("leaky_relu", _leaky_relu_compute, _meta_unary("same"))


def _elu_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    alpha, scale, input_scale = a.get("alpha", 1), a.get("scale", 1), a.get("input_scale", 1)
    _float_only("elu_cpu", x)

    def emit(nc, o, t):
        negative = nc.sbuf_tile(t.shape, FP32)
        positive = nc.sbuf_tile(t.shape, FP32)
        mask = nc.sbuf_tile(t.shape, BOOL)
        nc.scalar.activation(negative, t, "expm1", scale=float(input_scale))
        nc.vector.tensor_scalar(negative, negative, "multiply", float(alpha) * float(scale), dtype=FP32)
        nc.vector.tensor_scalar(positive, t, "multiply", float(scale), dtype=FP32)
        nc.vector.tensor_scalar(mask, t, "greater", 0, dtype=FP32)
        nc.vector.select(o, mask, positive, negative)

    elementwise("elu", out, (x,), emit)


register_family("elu", _elu_compute, _meta_unary("same"))


def _meta_grad(grad: str, other: str):
    def meta(a: dict) -> tuple:
        g, y = a[grad], a[other]
        return broadcast_shape(g, y), result_type(g, y), (g, y)

    return meta


def _register_grad(packet: str, other: str, emit_factory) -> None:
    def compute(out: torch.Tensor, a: dict) -> None:
        g, y = a["grad_output"], a[other]
        _float_only(packet, g, y)
        elementwise(packet, out, (g, y), emit_factory(a))

    register_family(packet, compute, _meta_grad("grad_output", other))


def _threshold_backward(a):
    threshold = a["threshold"]

    def emit(nc, o, g, x):  # grad where x <= threshold is zero; NaN x passes the gradient (as CPU)
        drop = nc.sbuf_tile(x.shape, BOOL)
        zero = nc.sbuf_tile(x.shape, FP32)
        nc.vector.tensor_scalar(drop, x, "less_equal", threshold, dtype=FP32)
        nc.vector.memset(zero, 0.0)
        nc.vector.select(o, drop, zero, g)

    return emit


def _sigmoid_backward(a):
    def emit(nc, o, g, y):  # g * (1 - y) * y
        one_minus = nc.sbuf_tile(y.shape, FP32)
        nc.vector.tensor_scalar(one_minus, y, "subtract", 1.0, reverse=True, dtype=FP32)
        nc.vector.tensor_tensor(one_minus, one_minus, y, "multiply", dtype=FP32)
        nc.vector.tensor_tensor(o, g, one_minus, "multiply", dtype=FP32)

    return emit


def _tanh_backward(a):
    def emit(nc, o, g, y):  # g * (1 - y^2)
        square = nc.sbuf_tile(y.shape, FP32)
        nc.vector.tensor_tensor(square, y, y, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(square, square, "subtract", 1.0, reverse=True, dtype=FP32)
        nc.vector.tensor_tensor(o, g, square, "multiply", dtype=FP32)

    return emit


def _gelu_backward(a):
    approximate = a.get("approximate", "none")

    def emit(nc, o, g, x):
        d = nc.sbuf_tile(x.shape, FP32)
        t1 = nc.sbuf_tile(x.shape, FP32)
        t2 = nc.sbuf_tile(x.shape, FP32)
        if approximate == "tanh":
            # y = 0.5 x (1 + tanh(u)), u = k (x + c x^3): dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3c x^2)
            k, c = math.sqrt(2 / math.pi), 0.044715
            nc.vector.tensor_tensor(t1, x, x, "multiply", dtype=FP32)  # x^2
            nc.vector.tensor_scalar(t2, t1, "multiply", c, dtype=FP32)
            nc.vector.tensor_scalar(t2, t2, "add", 1.0, dtype=FP32)  # 1 + c x^2
            nc.vector.tensor_tensor(t2, t2, x, "multiply", dtype=FP32)  # x + c x^3
            nc.scalar.activation(t2, t2, "tanh", scale=k)  # t
            nc.vector.tensor_scalar(d, t2, "add", 1.0, dtype=FP32)
            nc.vector.tensor_scalar(d, d, "multiply", 0.5, dtype=FP32)  # 0.5 (1 + t)
            nc.vector.tensor_tensor(t2, t2, t2, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(t2, t2, "subtract", 1.0, reverse=True, dtype=FP32)  # 1 - t^2
            nc.vector.tensor_scalar(t1, t1, "multiply", 3 * c, dtype=FP32)
            nc.vector.tensor_scalar(t1, t1, "add", 1.0, dtype=FP32)
            nc.vector.tensor_scalar(t1, t1, "multiply", 0.5 * k, dtype=FP32)  # 0.5 k (1 + 3c x^2)
            nc.vector.tensor_tensor(t1, t1, t2, "multiply", dtype=FP32)
            nc.vector.tensor_tensor(t1, t1, x, "multiply", dtype=FP32)
            nc.vector.tensor_tensor(d, d, t1, "add", dtype=FP32)
        else:
            # Phi(x) + x phi(x)
            nc.scalar.activation(d, x, "erf", scale=1 / math.sqrt(2))
            nc.vector.tensor_scalar(d, d, "add", 1.0, dtype=FP32)
            nc.vector.tensor_scalar(d, d, "multiply", 0.5, dtype=FP32)
            nc.vector.tensor_tensor(t1, x, x, "multiply", dtype=FP32)
            nc.scalar.activation(t1, t1, "exp", scale=-0.5)
            nc.vector.tensor_scalar(t1, t1, "multiply", 1 / math.sqrt(2 * math.pi), dtype=FP32)
            nc.vector.tensor_tensor(t1, t1, x, "multiply", dtype=FP32)
            nc.vector.tensor_tensor(d, d, t1, "add", dtype=FP32)
        nc.vector.tensor_tensor(o, g, d, "multiply", dtype=FP32)

    return emit


def _silu_backward(a):
    def emit(nc, o, g, x):  # g * s * (1 + x (1 - s))
        s = nc.sbuf_tile(x.shape, FP32)
        t = nc.sbuf_tile(x.shape, FP32)
        nc.scalar.activation(s, x, "sigmoid")
        nc.vector.tensor_scalar(t, s, "subtract", 1.0, reverse=True, dtype=FP32)
        nc.vector.tensor_tensor(t, t, x, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(t, t, "add", 1.0, dtype=FP32)
        nc.vector.tensor_tensor(t, t, s, "multiply", dtype=FP32)
        nc.vector.tensor_tensor(o, g, t, "multiply", dtype=FP32)

    return emit


def _hardtanh_backward(a):
    lo, hi = a["min_val"], a["max_val"]

    def emit(nc, o, g, x):
        # gradient where min < x < max, else 0. NaN x gets 0, as in CPU's vectorized loop (its scalar
        # tail passes NaN's gradient instead; opsuite/xfails.toml records that inconsistency).
        inside = nc.sbuf_tile(x.shape, BOOL)
        below = nc.sbuf_tile(x.shape, BOOL)
        zero = nc.sbuf_tile(x.shape, FP32)
        nc.vector.tensor_scalar(inside, x, "greater", lo, dtype=FP32)
        nc.vector.tensor_scalar(below, x, "less", hi, dtype=FP32)
        nc.vector.tensor_tensor(inside, inside, below, "logical_and")
        nc.vector.memset(zero, 0.0)
        nc.vector.select(o, inside, g, zero)

    return emit


def _leaky_relu_backward(a):
    slope = a["negative_slope"]

    def emit(nc, o, g, x):
        positive = nc.sbuf_tile(x.shape, BOOL)
        scaled = nc.sbuf_tile(x.shape, FP32)
        nc.vector.tensor_scalar(positive, x, "greater", 0, dtype=FP32)
        nc.vector.tensor_scalar(scaled, g, "multiply", slope, dtype=FP32)
        nc.vector.select(o, positive, g, scaled)

    return emit


_register_grad("threshold_backward", "self", _threshold_backward)
_register_grad("sigmoid_backward", "output", _sigmoid_backward)
_register_grad("tanh_backward", "output", _tanh_backward)
_register_grad("gelu_backward", "self", _gelu_backward)
_register_grad("silu_backward", "self", _silu_backward)
_register_grad("hardtanh_backward", "self", _hardtanh_backward)
_register_grad("leaky_relu_backward", "self", _leaky_relu_backward)


# --- selection -------------------------------------------------------------------

def _where_meta(a: dict) -> tuple:
    c, x, y = a["condition"], a["self"], a["other"]
    if c.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{SCALAR_TYPE_NAMES[c.dtype]}")
    return broadcast_shape(c, x, y), result_type(x, y), (c, x, y)


def _where_compute(out: torch.Tensor, a: dict) -> None:
    c, x, y = a["condition"], a["self"], a["other"]
    cd = numpy_compute(result_type(x, y))

    def emit(nc, o, tc, tx, ty):
        tx = _as_tile(nc, tx, tc, cd)
        ty = _as_tile(nc, ty, tc, cd)
        nc.vector.select(o, tc, tx, ty)

    elementwise("where", out, (c, x, y), emit, common_dtype=result_type(x, y), promoted=(1, 2))


def _as_tile(nc, value: Any, like: Tile, dtype: np.dtype) -> Tile:
    if isinstance(value, Tile):
        return value
    tile = nc.sbuf_tile(like.shape, dtype)
    nc.vector.memset(tile, value)
    return tile


register_family("where", _where_compute, _where_meta, overloads=("self", "self_out"))


def _masked_fill_meta(a: dict) -> tuple:
    x, mask, value = a["self"], a["mask"], a["value"]
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{str(mask.dtype).replace('torch.', '')}")
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.dim()} dimension(s).")
    return tuple(x.shape), x.dtype, (x, mask)


def _masked_fill_compute(out: torch.Tensor, a: dict) -> None:
    x, mask, value = a["self"], a["mask"], a["value"]
    if not is_device_tensor(value):
        check_scalar_fits(scalar_of(value), x.dtype)
    cd = numpy_compute(x.dtype)
    operands = (x, mask, value)

    def emit(nc, o, tx, tm, tv):
        tv = _as_tile(nc, tv, tx, cd)
        nc.vector.select(o, tm, tv, tx)

    elementwise("masked_fill", out, operands, emit, common_dtype=x.dtype, promoted=(2,))


register_family("masked_fill", _masked_fill_compute, _masked_fill_meta)


# --- which elements CPU's vectorized loop computes ---------------------------------
# cpu_kernel_vec (ATen's native/cpu/Loops.h) runs each inner run of TensorIterator's loop with the vector
# lambda in blocks of 2 * Vec::size() elements and the remainder with the scalar lambda (basic_loop); a run
# whose operands are not all contiguous (one input may be broadcast, stride 0) is scalar throughout. Some
# kernels' two lambdas round differently (lerp's zero signs, add's alpha * other in bf16/fp16), so the device
# computes the two regions with the matching formula. Serial loops only: above GRAIN_SIZE with several
# threads at::parallel_for splits runs at chunk boundaries, which is not modelled.

def _ti_loop(out: torch.Tensor, inputs) -> tuple[list[int], list[list[int]]]:
    """TensorIterator's coalesced iteration shape (innermost first) and each operand's strides in elements
    (out first): reorder_dimensions' insertion sort by strides, then coalesce_dimensions."""
    shape = list(out.shape)
    nd = len(shape)
    ops = [list(out.stride())]
    for t in inputs:
        st = [0] * nd
        off = nd - t.dim()
        for i in range(t.dim()):
            st[off + i] = 0 if (t.shape[i] == 1 and shape[off + i] != 1) else t.stride(i)
        ops.append(st)
    perm = list(range(nd - 1, -1, -1))

    def should_swap(d0: int, d1: int) -> int:
        for st in ops:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    for i in range(1, nd):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            c = should_swap(perm[dim0], perm[dim1])
            if c > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif c < 0:
                break
    shp = [shape[d] for d in perm]
    sts = [[st[d] for d in perm] for st in ops]
    if not shp:
        return [1], [[1] for _ in sts]
    prev = 0
    for d in range(1, len(shp)):
        if shp[prev] == 1 or shp[d] == 1 or all(shp[prev] * st[prev] == st[d] for st in sts):
            if shp[prev] == 1:
                for st in sts:
                    st[prev] = st[d]
            shp[prev] *= shp[d]
        else:
            prev += 1
            if prev != d:
                for st in sts:
                    st[prev] = st[d]
                shp[prev] = shp[d]
    return shp[:prev + 1], [st[:prev + 1] for st in sts]


def _vector_split(out: torch.Tensor, tensors, block: int, scalar_operands: int = 0):
    """Split an elementwise launch over ``out`` and its tensor operands as CPU's cpu_kernel_vec does:
    ``(vector_part, scalar_part)``, each None or a tuple of views (out first, then the operands) of the
    elements that loop computes with its vector and with its scalar lambda."""
    shp, sts = _ti_loop(out, tensors)
    n0 = shp[0]
    inner = [st[0] for st in sts]
    inner += [0] * scalar_operands  # host scalars are 0-d operands of the iterator: stride 0
    contiguous = inner[0] == 1 and (all(s == 1 for s in inner[1:])
                                    or any(inner[k] == 0 and all(s == 1 for j, s in enumerate(inner[1:], 1)
                                                                 if j != k) for k in range(1, len(inner))))
    split = block * (n0 // block) if contiguous and n0 > 1 else 0
    tensors_all = [out, *tensors]

    def views(lo: int, hi: int):
        if hi <= lo:
            return None
        size = tuple(reversed(shp[1:])) + (hi - lo,)
        result = []
        for t, st in zip(tensors_all, sts):
            if t.dim() == 0:  # a 0-d operand (a host scalar may be one) broadcasts as it is: no view of it
                result.append(t)
                continue
            stride = tuple(reversed(st[1:])) + (st[0],)
            result.append(t.as_strided(size, stride, t.storage_offset() + lo * st[0]))
        return tuple(result)

    return views(0, split), views(split, n0)


# --- ternary arithmetic: addcmul, addcdiv, lerp ----------------------------------
# CPU computes these in opmath (fp32 for every float dtype, the dtype itself for integers) and its
# vectorized float loops use fused multiply-adds: addcmul is fma(value * t1, t2, self) and lerp
# fma(coeff, end - start, base) with one rounding. No fixed-function engine rounds a multiply-add
# once, so that step runs on GpSimd (common.fma32); everything else is VectorE.

_FMA_STEPS = 4  # GpSimd element-steps per emulated fma: widen, exact product, two-sum, round to odd


def _fma(nc, out: Tile, a: Tile, b: Tile, c: Tile) -> None:
    """out = a * b + c rounded once to fp32 (then to out's dtype on store), on GpSimd."""

    def program(o, x, y, z):
        o[...] = fma32(x, y, z)

    nc.gpsimd.run("fma", program, (out,), (a, b, c), elements=out.data.size, factor=_FMA_STEPS)


def _tiles(nc, like: Tile, dtype: np.dtype, *values: Any) -> list[Tile]:
    """Operands as tiles (host scalars, already in the op's dtype, are broadcast by a memset)."""
    return [_as_tile(nc, v, like, dtype) for v in values]


def _opmath_scalar(name: str, value: Any, common: torch.dtype):
    """CPU's ``value.to<opmath_t>()`` (``scalars.checked_convert``): float32 for float16/bfloat16/float32;
    for integers the value truncated (2.7 -> 2) and wrapped into the dtype. Out-of-range values raise as c10 does."""
    opmath = scalars.opmath_dtype(common)
    v = scalars.checked_convert(value, opmath)
    return float(np.float32(v)) if opmath == torch.float32 else cast_scalar(v, common)


def _meta_ternary(*names: str):
    def meta(a: dict) -> tuple:
        operands = tuple(a[n] for n in names)
        return broadcast_shape(*operands), result_type(*operands), operands

    return meta


def _addcmul_compute(out: torch.Tensor, a: dict) -> None:
    x, t1, t2 = a["self"], a["tensor1"], a["tensor2"]
    common = result_type(x, t1, t2)
    if common == torch.bool:
        raise _refuse("addcmul_cpu_out", common)
    value = _opmath_scalar("addcmul", a.get("value", 1), common)
    floating = common.is_floating_point
    cd = FP32 if floating else numpy_compute(common)

    def emit(nc, o, tx, ta, tb):
        tx, ta, tb = _tiles(nc, o, cd, tx, ta, tb)
        scaled = nc.sbuf_tile(o.shape, cd)
        nc.vector.tensor_scalar(scaled, ta, "multiply", value, dtype=cd)
        if floating:
            _fma(nc, o, scaled, tb, tx)
        else:  # exact with wrap: the order of integer products and sums does not matter
            nc.vector.tensor_tensor(scaled, scaled, tb, "multiply", dtype=cd)
            nc.vector.tensor_tensor(o, scaled, tx, "add", dtype=cd)

    elementwise("addcmul", out, (x, t1, t2), emit, common_dtype=common)


_ADDCDIV_INTEGER = ("Integer division with addcdiv is no longer supported, and in a future  release addcdiv will "
                    "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
                    "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer "
                    "inputs and as (input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior "
                    "is just the latter implementation: (input + value * tensor1 / tensor2), for all dtypes.")


def _integral(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex)
    return isinstance(x, (bool, int))


def _addcdiv_meta(a: dict) -> tuple:
    if _integral(a["tensor1"]) and _integral(a["tensor2"]):
        raise RuntimeError(_ADDCDIV_INTEGER)
    # Unlike addcmul's, addcdiv's TensorIterator takes no CPU scalars (the functional and in-place
    # variants raise in PyTorch's own meta function before reaching us): out= raises the same.
    operands = (a["self"], a["tensor1"], a["tensor2"])
    host = next((t for t in operands if not is_device_tensor(t)), None)
    if host is not None:
        device = next(t.device for t in operands if is_device_tensor(t))
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{device} and {host.device}!")
    return _meta_ternary("self", "tensor1", "tensor2")(a)


def _addcdiv_compute(out: torch.Tensor, a: dict) -> None:
    x, t1, t2 = a["self"], a["tensor1"], a["tensor2"]
    common = result_type(x, t1, t2)
    value = _opmath_scalar("addcdiv", a.get("value", 1), common)

    def emit(nc, o, tx, ta, tb):  # self + (value * t1) / t2, each step rounded to fp32 (no fma on CPU here)
        tx, ta, tb = _tiles(nc, o, FP32, tx, ta, tb)
        q = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_scalar(q, ta, "multiply", value, dtype=FP32)
        nc.vector.tensor_tensor(q, q, tb, "divide", dtype=FP32)
        nc.vector.tensor_tensor(o, tx, q, "add", dtype=FP32)

    elementwise("addcdiv", out, (x, t1, t2), emit, common_dtype=common)


register_family("addcmul", _addcmul_compute, _meta_ternary("self", "tensor1", "tensor2"))
register_family("addcdiv", _addcdiv_compute, _addcdiv_meta)


def _lerp_checks(a: dict) -> None:
    x, end, weight = a["self"], a["end"], a["weight"]
    if end.dtype != x.dtype:
        raise RuntimeError(f"expected dtype {TYPE_META_NAMES[x.dtype]} for `end` but got dtype "
                           f"{TYPE_META_NAMES[end.dtype]}")
    # a 0-dim weight of another dtype is converted (TensorIterator promotion); others must match
    if isinstance(weight, torch.Tensor) and weight.dim() != 0 and weight.dtype != x.dtype:
        raise RuntimeError(f"expected dtype {TYPE_META_NAMES[x.dtype]} for `weight` but got dtype "
                           f"{TYPE_META_NAMES[weight.dtype]}")


def _lerp_meta(a: dict) -> tuple:
    _lerp_checks(a)
    x, end, weight = a["self"], a["end"], a["weight"]
    if isinstance(weight, torch.Tensor):
        return broadcast_shape(x, end, weight), result_type(x, end, weight), (x, end, weight)
    return broadcast_shape(x, end), result_type(x, end), (x, end)


def _lerp_emit(nc, o: Tile, start: Any, end: Any, weight: Any) -> None:
    """CPU's lerp_vec: |w| < 0.5 ? fma(w, end - start, start) : fma(w - 1, end - start, end)."""
    start, end = _tiles(nc, o, FP32, start, end)
    diff = nc.sbuf_tile(o.shape, FP32)
    nc.vector.tensor_tensor(diff, end, start, "subtract", dtype=FP32)
    if isinstance(weight, Tile):
        small = nc.sbuf_tile(o.shape, BOOL)
        coeff = nc.sbuf_tile(o.shape, FP32)
        base = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_unary(coeff, weight, "abs", dtype=FP32)
        nc.vector.tensor_scalar(small, coeff, "less", 0.5, dtype=FP32)
        nc.vector.tensor_scalar(coeff, weight, "subtract", 1.0, dtype=FP32)
        nc.vector.select(coeff, small, weight, coeff)
        nc.vector.select(base, small, start, end)
    else:  # one weight for every element: the branch is known (NaN takes the second, as on CPU)
        w = np.float32(weight)
        small_weight = bool(abs(w) < 0.5)
        coeff = _as_tile(nc, w if small_weight else w - np.float32(1), o, FP32)
        base = start if small_weight else end
    _fma(nc, o, coeff, diff, base)


def _lerp_scalar_emit(nc, o: Tile, start: Any, end: Any, weight: Any) -> None:
    """CPU's scalar lerp (ATen's Lerp.h), which its loop runs on non-contiguous runs and vector tails:
    |w| < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w), the multiply-adds fused where the
    host's kernels fuse (common.fma32). Differs from lerp_vec in zero signs (end = -0.0, w = 1)."""
    start, end = _tiles(nc, o, FP32, start, end)
    diff = nc.sbuf_tile(o.shape, FP32)
    nc.vector.tensor_tensor(diff, end, start, "subtract", dtype=FP32)
    neg = nc.sbuf_tile(o.shape, FP32)
    nc.vector.tensor_unary(neg, diff, "negative", dtype=FP32)
    if isinstance(weight, Tile):
        small = nc.sbuf_tile(o.shape, BOOL)
        absw = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_unary(absw, weight, "abs", dtype=FP32)
        nc.vector.tensor_scalar(small, absw, "less", 0.5, dtype=FP32)
        rest = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_scalar(rest, weight, "subtract", 1.0, reverse=True, dtype=FP32)
        near = nc.sbuf_tile(o.shape, FP32)
        far = nc.sbuf_tile(o.shape, FP32)
        _fma(nc, near, weight, diff, start)
        _fma(nc, far, neg, rest, end)
        nc.vector.select(o, small, near, far)
        return
    w = np.float32(weight)
    if abs(w) < 0.5:
        _fma(nc, o, _as_tile(nc, w, o, FP32), diff, start)
    else:
        _fma(nc, o, neg, _as_tile(nc, np.float32(1) - w, o, FP32), end)


def _lerp_compute(out: torch.Tensor, a: dict) -> None:
    x, end, weight = a["self"], a["end"], a["weight"]
    tensor_weight = isinstance(weight, torch.Tensor)
    common = result_type(x, end, weight) if tensor_weight else result_type(x, end)
    if not common.is_floating_point:
        raise _refuse("lerp_kernel_tensor" if tensor_weight else "lerp_kernel_scalar", common)
    tensors = (x, end, weight) if tensor_weight else (x, end)
    w = None if tensor_weight else _opmath_scalar("lerp", weight, common)
    if out.numel() == 0:
        return
    # CPU's vector lambda (lerp_vec) on full vector blocks of contiguous runs, its scalar lambda elsewhere
    for part, emit in zip(_vector_split(out, tensors, cpu_host.vector_block(common)),
                          (_lerp_emit, _lerp_scalar_emit)):
        if part is None:
            continue
        o, *ins = part
        if tensor_weight:
            elementwise("lerp", o, tuple(ins), emit, common_dtype=common)
        else:
            elementwise("lerp", o, tuple(ins), lambda nc, t, ts, te, emit=emit: emit(nc, t, ts, te, w),
                        common_dtype=common)


register_family("lerp", _lerp_compute, _lerp_meta)
