"""Unary elementwise ops: transcendentals on ScalarE (exp, exp2, expm1, log, log2, log10, log1p, sqrt,
rsqrt, trigonometric and hyperbolic functions and their inverses, sigmoid, erf, erfc, erfinv, reciprocal)
and ALU ops on VectorE (abs, neg, floor, ceil, trunc, round, bitwise_not, logical_not, isnan, isinf, sign).

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``, consecutive
elements along the free axis): DMA in, one ScalarE ``activation`` or VectorE instruction per tile, DMA out.
Transcendentals of integer inputs give float32 (as CPU); floor/ceil/trunc/round of integers are copies.

numpy reference of each op: the ACTIVATIONS and ALU tables of engine/isa.py.
"""

from __future__ import annotations

import torch

from device_impl.kernels.common import elementwise, numpy_compute, promote
from device_impl.kernels.elementwise.loop import BOOL, _refuse
from device_impl.kernels.registry import register_family


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
