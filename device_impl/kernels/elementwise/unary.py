"""Unary elementwise ops: transcendentals on ScalarE (exp, exp2, expm1, log, log2, log10, log1p, sqrt,
rsqrt, trigonometric and hyperbolic functions and their inverses, sigmoid, erf, erfc, erfinv, reciprocal)
and ALU ops on VectorE (abs, neg, floor, ceil, trunc, round, bitwise_not, logical_not, isnan, isinf, sign,
nan_to_num).

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``, consecutive
elements along the free axis): DMA in, one ScalarE ``activation`` or VectorE instruction per tile, DMA out.
Transcendentals of integer inputs give float32 (as CPU); floor/ceil/trunc/round of integers are copies.
rsqrt of bfloat16/float16 follows CPU's two lambdas (``loop._vector_split``): ``1 / sqrt(x)`` in fp32 on the
full vector blocks of the AVX2/AVX-512 kernels, the square root rounded to the dtype before ``1 /`` elsewhere.

numpy reference of each op: the ACTIVATIONS and ALU tables of engine/isa.py.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from device_impl.kernels import cpu_host
from device_impl.kernels.common import elementwise, numpy_compute, numpy_dtype, promote
from device_impl.kernels.elementwise import recurring
from device_impl.kernels.elementwise.loop import BOOL, _refuse, _vector_split
from device_impl.kernels.registry import register_family


def _meta_unary(rule: str):
    def meta(a: dict) -> tuple:
        x = a["self"]
        if rule == "bool":
            return tuple(x.shape), torch.bool, (x,)
        dtype = promote(x, int_to_float=True) if rule == "float" else x.dtype
        return tuple(x.shape), dtype, (x,)

    return meta


def _activation_emit(func: str):
    """An activation's emit: one function for the kernel and its recurring-call plans, so both key the same
    launch (kernels/replay.py keys an emit by its code and closure values)."""
    return lambda nc, o, t: nc.scalar.activation(o, t, func)


def _alu_unary_emit(op: str):
    """An ALU unary op's emit (as ``_activation_emit``)."""
    return lambda nc, o, t: nc.vector.tensor_unary(o, t, op)


def _unary_plans(packet: str, make_emit: Callable[[str], Callable], how: str) -> recurring.Plans:
    """Recurring ``(self, out=)`` calls of ``packet``'s out= kernel served from plans
    (kernels/elementwise/recurring.py): the emit is ``make_emit(how)`` whatever the dtypes (``common_dtype``
    None), as the op's compute makes it for every call the plans serve (a refused dtype raises there first)."""
    emit = make_emit(how)
    return recurring.Plans(packet, lambda x: (emit, None), arity=1)


# Unary ops whose recurring out= calls are served from plans (the functional and in-place calls reach out=).
RECURRING_UNARY = ("exp", "tanh", "sigmoid", "neg")
RECURRING: dict[str, recurring.Plans] = {}


def _register_activation(packet: str, func: str) -> None:
    """Transcendental unary ops on ScalarE; integer inputs give float32 (as CPU)."""
    plans = _unary_plans(packet, _activation_emit, func) if packet in RECURRING_UNARY else None
    if plans is not None:
        RECURRING[packet] = plans

    def compute(out: torch.Tensor, a: dict) -> None:
        elementwise(packet, out, (a["self"],), _activation_emit(func))

    register_family(packet, compute, _meta_unary("float"), recurring=plans)


for _packet, _func in [("exp", "exp"), ("exp2", "exp2"), ("expm1", "expm1"), ("log", "log"), ("log2", "log2"),
                       ("log10", "log10"), ("log1p", "log1p"), ("sqrt", "sqrt"),
                       ("sin", "sin"), ("cos", "cos"), ("tan", "tan"), ("asin", "asin"), ("acos", "acos"),
                       ("atan", "atan"), ("sinh", "sinh"), ("cosh", "cosh"), ("tanh", "tanh"),
                       ("asinh", "asinh"), ("acosh", "acosh"), ("atanh", "atanh"), ("sigmoid", "sigmoid"),
                       ("erf", "erf"), ("erfc", "erfc"), ("erfinv", "erfinv"), ("reciprocal", "reciprocal")]:
    _register_activation(_packet, _func)


def _rsqrt_vector(nc, o, t) -> None:
    """CPU's vector lambda ``x.rsqrt()`` on AVX2/AVX-512: 1 / sqrt(x) in fp32, rounded to the dtype once."""
    nc.scalar.activation(o, t, "rsqrt")


def _rsqrt_scalar(dtype: torch.dtype):
    """CPU's scalar lambda ``(scalar_t)1 / std::sqrt(a)`` for bfloat16/float16: c10's sqrt of a Half or
    BFloat16 returns the dtype, so the root is rounded to it before the fp32 division is rounded again
    (x = 6.1512e-4 in float16: 40.34375 where one rounding gives 40.3125; cubed in rsqrt's backward, the
    first overflows float16 and the second does not)."""
    narrow = numpy_dtype(dtype)

    def emit(nc, o, t) -> None:
        root = nc.sbuf_tile(o.shape, narrow)
        nc.scalar.activation(root, t, "sqrt")
        nc.scalar.activation(o, root, "reciprocal")

    return emit


def _rsqrt_compute(out: torch.Tensor, a: dict) -> None:
    """rsqrt as ATen's rsqrt_kernel (UnaryOpsKernel.cpp, cpu_kernel_vec): for bfloat16/float16 the vector
    lambda on full vector blocks of contiguous runs when the host's vector loops compute them in fp32
    (cpu_host.reduced_float_vectors), the scalar lambda on the rest; every other dtype rounds once."""
    x = a["self"]
    common = promote(x, int_to_float=True)
    if common not in (torch.float16, torch.bfloat16):
        elementwise("rsqrt", out, (x,), _rsqrt_vector)
        return
    if not cpu_host.reduced_float_vectors():
        elementwise("rsqrt", out, (x,), _rsqrt_scalar(common), common_dtype=common)
        return
    parts = _vector_split(out, [x], cpu_host.vector_block(common))
    for part, emit in zip(parts, (_rsqrt_vector, _rsqrt_scalar(common))):
        if part is not None:
            elementwise("rsqrt", part[0], part[1:], emit, common_dtype=common)


register_family("rsqrt", _rsqrt_compute, _meta_unary("float"))


_PI32 = float(np.float32(np.pi))  # c10::pi<float>: the opmath of every floating dtype here


def _sinc_emit(nc, o, t) -> None:
    """CPU's sinc lambda (UnaryOpsKernel.cpp, scalar only) in fp32 opmath: ``x == 0 ? 1 : sin(pi * x) / (pi * x)``,
    the product rounded to fp32 once and read twice (ScalarE's sine of it, VectorE's division by it), so a tiny x gives
    exactly 1 (sin(p) = p) and an infinity or NaN gives NaN; one rounding to the dtype at the end."""
    product = nc.sbuf_tile(t.shape, np.float32)
    sine = nc.sbuf_tile(t.shape, np.float32)
    zero = nc.sbuf_tile(t.shape, BOOL)
    ones = nc.sbuf_tile(t.shape, np.float32)
    nc.vector.tensor_scalar(product, t, "multiply", _PI32, dtype=np.float32)
    nc.scalar.activation(sine, product, "sin")
    nc.vector.tensor_tensor(sine, sine, product, "divide", dtype=np.float32)
    nc.vector.tensor_scalar(zero, t, "equal", 0, dtype=np.float32)
    nc.vector.memset(ones, 1.0)
    nc.vector.select(o, zero, ones, sine)


def _sinc_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    elementwise("sinc", out, (x,), _sinc_emit, common_dtype=promote(x, int_to_float=True))


register_family("sinc", _sinc_compute, _meta_unary("float"))


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
        elementwise(packet, out, (x,), _alu_unary_emit(op))

    # (an integer_identity op's emit depends on the dtype: such ops are not planned)
    plans = _unary_plans(packet, _alu_unary_emit, op) if packet in RECURRING_UNARY and not integer_identity else None
    if plans is not None:
        RECURRING[packet] = plans
    register_family(packet, compute, _meta_unary(rule), overloads=overloads, recurring=plans)


_register_alu_unary("abs", "abs", refuse_bool=_refuse("abs_cpu", torch.bool))
_register_alu_unary("neg", "negative", refuse_bool="Negation, the `-` operator, on a bool tensor is not supported. "
                    "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")
for _packet in ("floor", "ceil", "trunc", "round"):
    _register_alu_unary(_packet, _packet, integer_identity=True, refuse_bool=_refuse(f"{_packet}_vml_cpu", torch.bool))
_register_alu_unary("bitwise_not", "bitwise_not", refuse_float="bitwise_not_cpu")
_register_alu_unary("logical_not", "logical_not", rule="bool")
_register_alu_unary("isnan", "isnan", rule="bool")
_register_alu_unary("isinf", "isinf", rule="bool")


def _nan_to_num_compute(out: torch.Tensor, a: dict) -> None:
    """CPU's kernel: ``a == a ? (a == inf ? posinf : (a == -inf ? neginf : a)) : nan``, each replacement the
    Python float cast to the dtype (through float32 for bfloat16/float16, as c10's constructors take a float;
    default posinf/neginf the dtype's largest and lowest finite values), so a replacement beyond the dtype's
    range is an infinity as on CPU. Each class's mask is taken of the input, never of an earlier replacement
    (``nan=inf`` must not then become posinf). Integer and bool tensors are copied: nothing to replace."""
    x = a["self"]
    if not x.dtype.is_floating_point:
        elementwise("nan_to_num", out, (x,), lambda nc, o, t: nc.vector.tensor_copy(o, t))
        return
    cd = numpy_compute(x.dtype)
    info = torch.finfo(x.dtype)

    def cast(value: float | None, default: float) -> np.ndarray:
        wide = np.float64(default if value is None else value)
        with np.errstate(over="ignore"):  # beyond the dtype's range: an infinity, as C's cast gives
            as_float = wide.astype(np.float32) if x.dtype != torch.float64 else wide
            return as_float.astype(numpy_dtype(x.dtype)).astype(cd)

    classes = (("isnan", None, cast(a.get("nan"), 0.0)), ("equal", np.inf, cast(a.get("posinf"), info.max)),
               ("equal", -np.inf, cast(a.get("neginf"), info.min)))

    def emit(nc, o, t):
        mask = nc.sbuf_tile(t.shape, BOOL)
        value = nc.sbuf_tile(t.shape, cd)
        current = t
        for i, (test, infinity, replacement) in enumerate(classes):
            if test == "isnan":
                nc.vector.tensor_unary(mask, t, "isnan")
            else:
                nc.vector.tensor_scalar(mask, t, "equal", infinity, dtype=cd)
            nc.vector.memset(value, replacement)
            step = o if i == len(classes) - 1 else nc.sbuf_tile(t.shape, cd)
            nc.vector.select(step, mask, value, current)
            current = step

    elementwise("nan_to_num", out, (x,), emit)


def _nan_to_num_meta(a: dict) -> tuple:
    return tuple(a["self"].shape), a["self"].dtype, (a["self"],)


register_family("nan_to_num", _nan_to_num_compute, _nan_to_num_meta)


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
