"""Activations and their gradients: relu, gelu, silu, clamp (clamp_min, clamp_max), hardtanh, leaky_relu,
elu; threshold_backward, sigmoid_backward, tanh_backward, gelu_backward, silu_backward, hardtanh_backward,
leaky_relu_backward, elu_backward.

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``, consecutive
elements along the free axis); a backward op's two operands (the gradient and the forward's input or
output) stream through the same tiles. Nonlinearities run on ScalarE (``activation``: relu, gelu, silu,
erf, exp, tanh, sigmoid), everything else on VectorE in fp32: products, comparisons and ``select`` between
branches. Float dtypes only where CPU refuses others (``_float_only``).

numpy reference of each op: the ACTIVATIONS and ALU tables of engine/isa.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from device_impl.engine import Tile
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import broadcast_shape, elementwise, numpy_compute, result_type
from device_impl.kernels.elementwise import recurring
from device_impl.kernels.elementwise.loop import BOOL, _FLOATS, _refuse, _vector_split, binary
from device_impl.kernels.elementwise.unary import _meta_unary
from device_impl.kernels.registry import register_family


def _float_only(kernel: str, *tensors: Any) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype not in _FLOATS:
            raise _refuse(kernel, t.dtype)


def _relu_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    if x.dtype == torch.bool:
        raise RuntimeError("Boolean inputs not supported for relu")  # ATen's relu check, before any kernel
    elementwise("relu", out, (x,), _relu_launch(x)[0])


def _relu_float(nc, o, t) -> None:
    nc.scalar.activation(o, t, "relu")


def _relu_integer(nc, o, t) -> None:
    nc.vector.tensor_scalar(o, t, "maximum", 0)


def _relu_launch(x: torch.Tensor) -> tuple:
    """relu's emit for ``x``'s dtype (and no common dtype): the kernel's and its recurring plans'
    (kernels/elementwise/recurring.py; relu has no out= overload, so its functional calls are planned)."""
    return (_relu_float if x.dtype in _FLOATS else _relu_integer), None


register_family("relu", _relu_compute, _meta_unary("same"),
                recurring=recurring.Plans("relu", _relu_launch, arity=1, functional=True))


def _gelu_compute(out: torch.Tensor, a: dict) -> None:
    x, approximate = a["self"], a.get("approximate", "none")
    _float_only("GeluKernelImpl", x)
    if approximate not in ("none", "tanh"):
        raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate}")
    form = cpu_host.onednn_gelu_form(x, approximate)
    if form is not None:
        elementwise("gelu", out, (x,), _GELU_ONEDNN[form])
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


def _gelu_onednn_halves(nc, o: Tile, t: Tile) -> None:
    """oneDNN's eltwise_gelu_erf as its AVX2 kernel forms it (cpu_host.onednn_gelu_form "halves"): h = x / 2, then
    h + h * erf(x / sqrt(2)) in fp32, so finite up to FLT_MAX and +0.0 where the erf is -1 (h + -h) or x is -0.0."""
    h = nc.sbuf_tile(o.shape, FP32)
    nc.vector.tensor_scalar(h, t, "multiply", 0.5, dtype=FP32)
    e = nc.sbuf_tile(o.shape, FP32)
    nc.scalar.activation(e, t, "erf", scale=float(np.float32(1 / math.sqrt(2))))
    nc.vector.tensor_tensor(e, e, h, "multiply", dtype=FP32)
    nc.vector.tensor_tensor(o, h, e, "add", dtype=FP32)


_GELU_ONEDNN = {"product": _gelu_onednn, "halves": _gelu_onednn_halves}


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


def _gelu_backward_onednn(nc, o: Tile, g: Tile, x: Tile) -> None:
    """oneDNN's eltwise_gelu_erf backward, which CPU runs where ``cpu_host.onednn_gelu_backward`` says: R = x / sqrt(2),
    T = R / sqrt(pi) * exp(-R * R), d = (T + 0.5) + 0.5 * erf(R) (its fma is exact: 0.5 * erf needs no rounding),
    dx = dy * d; each step rounded to fp32. Where the erf is -1 and T is below half a unit of 0.5 (x below about -6)
    d is exactly +0.0, so dx takes dy's sign (ATen's cdf + x * pdf is a tiny negative there)."""
    r = nc.sbuf_tile(x.shape, FP32)
    nc.vector.tensor_scalar(r, x, "multiply", float(np.float32(1 / math.sqrt(2))), dtype=FP32)
    q = nc.sbuf_tile(x.shape, FP32)
    nc.vector.tensor_tensor(q, r, r, "multiply", dtype=FP32)
    nc.scalar.activation(q, q, "exp", scale=-1.0)  # exp(-R * R)
    t = nc.sbuf_tile(x.shape, FP32)
    nc.vector.tensor_scalar(t, r, "multiply", float(np.float32(1 / math.sqrt(math.pi))), dtype=FP32)
    nc.vector.tensor_tensor(t, t, q, "multiply", dtype=FP32)
    nc.vector.tensor_scalar(t, t, "add", 0.5, dtype=FP32)  # P = T + 0.5
    nc.scalar.activation(q, r, "erf")
    nc.vector.tensor_scalar(q, q, "multiply", 0.5, dtype=FP32)
    nc.vector.tensor_tensor(t, t, q, "add", dtype=FP32)  # P + 0.5 * erf
    nc.vector.tensor_tensor(o, g, t, "multiply", dtype=FP32)


def _gelu_backward(a):
    approximate = a.get("approximate", "none")
    if cpu_host.onednn_gelu_backward(a["self"], approximate):
        return _gelu_backward_onednn

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


def _hardtanh_backward_emit(lo, hi, vector: bool):
    """The gradient where min < x < max, else 0. CPU's two lambdas differ for a NaN x: its vectorized loop keeps
    ``(x > min) & (x < max) & grad`` (0 for NaN), its scalar lambda ``x <= min || x >= max ? 0 : grad`` (the
    gradient for NaN); ``vector`` picks which."""
    def emit(nc, o, g, x):
        keep = nc.sbuf_tile(x.shape, BOOL)
        other = nc.sbuf_tile(x.shape, BOOL)
        zero = nc.sbuf_tile(x.shape, FP32)
        if vector:
            nc.vector.tensor_scalar(keep, x, "greater", lo, dtype=FP32)
            nc.vector.tensor_scalar(other, x, "less", hi, dtype=FP32)
            nc.vector.tensor_tensor(keep, keep, other, "logical_and")
        else:  # drop where x <= min or x >= max: a NaN x is kept
            nc.vector.tensor_scalar(keep, x, "less_equal", lo, dtype=FP32)
            nc.vector.tensor_scalar(other, x, "greater_equal", hi, dtype=FP32)
            nc.vector.tensor_tensor(keep, keep, other, "logical_or")
            nc.vector.tensor_scalar(keep, keep, "equal", 0, dtype=FP32)
        nc.vector.memset(zero, 0.0)
        nc.vector.select(o, keep, g, zero)

    return emit


def _hardtanh_backward_compute(out: torch.Tensor, a: dict) -> None:
    """CPU's cpu_kernel_vec split (``loop._vector_split``): its vector lambda's elements and its scalar tail's."""
    g, x = a["grad_output"], a["self"]
    _float_only("hardtanh_backward", g, x)
    lo, hi = a["min_val"], a["max_val"]
    block = cpu_host.lambda_block("hardtanh_backward", out.dtype)
    for part, vector in zip(_vector_split(out, (g, x), block), (True, False)):
        if part is not None:
            elementwise("hardtanh_backward", part[0], part[1:], _hardtanh_backward_emit(lo, hi, vector))


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
register_family("hardtanh_backward", _hardtanh_backward_compute, _meta_grad("grad_output", "self"))
_register_grad("leaky_relu_backward", "self", _leaky_relu_backward)


def _elu_backward_emit(negcoef: float, poscoef: float, negiptcoef: float, is_result: bool, vector: bool, exp: str):
    """CPU's elu_backward lambdas (ATen's Activation.cpp), in fp32 (the bfloat16/float16 kernel converts to float
    and rounds once): the negative branch ``g * negiptcoef * negcoef * exp(x * negiptcoef)`` (``g * negiptcoef *
    (x + negcoef)`` from the forward's result), left to right, each product rounded; the positive one ``g *
    poscoef``. Its vector lambda blends on ``x > 0`` (a NaN input takes the negative branch: a NaN gradient), its
    scalar lambda tests ``x <= 0`` (a NaN input passes ``g * poscoef`` on); ``vector`` picks which, ``exp`` the
    float32 exp that lambda calls on this host (cpu_host.vector_exp / scalar_exp)."""
    def emit(nc, o, g, x):
        negative = nc.sbuf_tile(x.shape, FP32)
        positive = nc.sbuf_tile(x.shape, FP32)
        mask = nc.sbuf_tile(x.shape, BOOL)
        nc.vector.tensor_scalar(positive, g, "multiply", negiptcoef, dtype=FP32)  # a scratch here: g * negiptcoef
        if is_result:
            nc.vector.tensor_scalar(negative, x, "add", negcoef, dtype=FP32)
        else:
            nc.vector.tensor_scalar(positive, positive, "multiply", negcoef, dtype=FP32)
            nc.scalar.activation(negative, x, exp, scale=negiptcoef)
        nc.vector.tensor_tensor(negative, positive, negative, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(positive, g, "multiply", poscoef, dtype=FP32)
        if vector:
            nc.vector.tensor_scalar(mask, x, "greater", 0, dtype=FP32)
            nc.vector.select(o, mask, positive, negative)
        else:
            nc.vector.tensor_scalar(mask, x, "less_equal", 0, dtype=FP32)
            nc.vector.select(o, mask, negative, positive)

    return emit


def _elu_backward_compute(out: torch.Tensor, a: dict) -> None:
    """elu_backward: the elements CPU's loop runs with its vector lambda and those its scalar lambda runs
    (``loop._vector_split`` with elu_backward's own block, ``cpu_host.elu_backward_block``), each with that
    lambda's NaN test and exp. The coefficients are the kernel's: float32 (``alpha.to<float>() *
    scale.to<float>()``, rounded once)."""
    g, x, is_result = a["grad_output"], a["self_or_result"], bool(a["is_result"])
    alpha, scale, input_scale = a["alpha"], a["scale"], a["input_scale"]
    if is_result and float(alpha) < 0:  # ATen's meta check, before any dtype refusal
        raise RuntimeError("In-place elu backward calculation is triggered with a negative slope which is not "
                           "supported. This is caused by calling in-place forward function with a negative slope, "
                           "please call out-of-place version instead.")
    _float_only("elu_backward_cpu", g, x)
    negcoef = float(np.float32(alpha) * np.float32(scale))
    poscoef, negiptcoef = float(np.float32(scale)), float(np.float32(input_scale))
    common = result_type(g, x)
    exps = (f"exp_{cpu_host.vector_exp()}", f"exp_{cpu_host.scalar_exp()}")
    parts = _vector_split(out, (g, x), cpu_host.elu_backward_block(common))
    for part, vector, exp in zip(parts, (True, False), exps):
        if part is not None:
            elementwise("elu_backward", part[0], part[1:],
                        _elu_backward_emit(negcoef, poscoef, negiptcoef, is_result, vector, exp),
                        common_dtype=common)


register_family("elu_backward", _elu_backward_compute, _meta_grad("grad_output", "self_or_result"))
