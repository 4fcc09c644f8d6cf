"""Where each StableHLO op is lowered: tables from op name to engine instructions.

Three families, each a table:

* ``ELEMENTWISE``: ops a fused group evaluates on SBUF tiles. Each entry is an
  emitter ``emit(nc, out, args, op)`` where ``args`` are tiles or immediates
  (Python numbers from folded splats); binary ALU ops go to VectorE, transcendental
  functions to ScalarE's activation table, compare/select/convert/clamp to VectorE.
* ``REDUCERS``: the body op of a ``stablehlo.reduce`` -> VectorE reduction op
  (fused into the group that produces its input).
* ``VIEWS``: layout ops that cost nothing: they become DMA access patterns
  (strided, broadcast, sliced views of HBM buffers) of the steps that read them.

Other ops (``STEP_OPS``: dot_general, concatenate, gather, iota, ...) are whole
steps with their own runners in ``steps.py``. An op in none of these tables is
unsupported, which makes the graph fall back to eager (``fallback.py``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from device_impl.engine.dtypes import FP32, compute_dtype
from device_impl.engine.isa import ACTIVATIONS, ALU_BINARY, ALU_UNARY
from device_impl.engine.memory import Tile
from device_impl.compiler import (bitcast, factories, opaque_cnn, opaque_conv, opaque_indexing, opaque_moments,
                                  opaque_pads, opaque_products, opaque_resample)
from device_impl.compiler.ir import Op, TensorType

VIEWS = frozenset({"reshape", "transpose", "broadcast_in_dim", "slice", "reverse"})
STEP_OPS = frozenset({"attention", "attention_backward", "layer_norm", "layer_norm_backward", "softmax_backward", "dot_general",
                      "concatenate", "gather", "scatter", "iota", "pad", "sort", "reduce_window", "convolution",
                      # the eager kernels' programs compiler/opaque.py cuts whole (ccovb)
                      "isin", "sort_whole", "amp_unscale", "amp_update_scale", "cumprod", "unfold_backward",
                      "view_scatter", "index_add"}
                     ) | frozenset(opaque_cnn.RUNNERS) | frozenset(opaque_products.RUNNERS) \
           | frozenset(opaque_moments.RUNNERS)  # CNN ops, products, reduced-float moments cut whole
STEP_OPS |= frozenset(factories.RUNNERS)  # float32 linspace cut whole
STEP_OPS |= frozenset(opaque_conv.RUNNERS)  # convolution_backward torch-mlir cannot import, cut whole
STEP_OPS |= frozenset(opaque_indexing.RUNNERS)  # embedding_dense_backward, index_copy cut whole
STEP_OPS |= frozenset(opaque_pads.RUNNERS)  # reflection/replication padding cut whole
STEP_OPS |= frozenset(opaque_resample.RUNNERS)  # upsampling's forward cut whole
STEP_OPS |= frozenset(bitcast.RUNNERS)  # bitcast_convert (Tensor.view(dtype)): a byte copy
STORAGE_ONLY = ("float64", "complex64", "complex128")

_INT_KINDS = "iub"


# ops folded from numerics' float16/bfloat16 formulas whose every step CPU rounds to the dtype (ATen's
# Vectorized<BFloat16> floor and trunc division; compiler/expansions.py REWRITTEN_DTYPES): the ALU computes
# them in the dtype itself, each step rounded, as the eager kernel (``kernels.elementwise.loop._narrow``)
STEPWISE = frozenset({"floor_divide", "trunc_divide"})


def _compute(dtype: np.dtype) -> np.dtype:
    return dtype if dtype.kind in _INT_KINDS else FP32


def _is_tile(x: Any) -> bool:
    return isinstance(x, Tile)


def _binary_name(op: Op, dtype: np.dtype) -> str:
    name = op.name
    if name in ("and", "or", "xor"):  # logical where the result is bool (its operands may be any dtype's truth:
        # expansions.fold_conversions)
        return ("logical_" if dtype == np.bool_ or op.type.dtype == "bool" else "bitwise_") + name
    if name == "divide":
        return "trunc_divide" if dtype.kind in "iu" else "divide"
    return _BINARY[name]


_BINARY = {"add": "add", "subtract": "subtract", "multiply": "multiply", "maximum": "maximum",
           "minimum": "minimum", "power": "power", "remainder": "fmod", "atan2": "atan2",
           "shift_left": "left_shift", "shift_right_arithmetic": "right_shift", "divide": "divide",
           # folded from numerics' formulas (compiler/expansions.py REWRITTEN): PyTorch's, not StableHLO's ops
           "floor_divide": "floor_divide", "python_remainder": "remainder", "trunc_divide": "trunc_divide",
           # aten ops compiler/opaque.py splices back under these names (no StableHLO op says them)
           "copysign": "copysign", "hypot": "hypot"}
# StableHLO semantics the engines' ALU gives directly: remainder is C's fmod (the sign of the dividend),
# integer divide truncates, shift_right_arithmetic keeps the sign.
_COMMUTATIVE = frozenset({"add", "multiply", "maximum", "minimum", "logical_and", "logical_or", "logical_xor",
                          "bitwise_and", "bitwise_or", "bitwise_xor", "equal", "not_equal"})
_MIRROR = {"less": "greater", "greater": "less", "less_equal": "greater_equal", "greater_equal": "less_equal"}
_COMPARE = {"EQ": "equal", "NE": "not_equal", "LT": "less", "LE": "less_equal", "GT": "greater",
            "GE": "greater_equal"}
_UNARY = {"negate": "negative", "abs": "abs", "sign": "sign", "floor": "floor", "ceil": "ceil",
          "round_nearest_even": "round", "is_finite": "isfinite", "trunc": "trunc",
          "signbit": "signbit"}  # aten.signbit, spliced back by compiler/opaque.py
_ACTIVATION = {"exponential": "exp", "log": "log", "log_plus_one": "log1p", "exponential_minus_one": "expm1",
               "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh", "logistic": "sigmoid", "sine": "sin",
               "cosine": "cos", "tan": "tan", "erf": "erf", "atan": "atan", "sinh": "sinh", "cosh": "cosh",
               "asin": "asin", "acos": "acos", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
               "erf_inv": "erfinv",
               "erfc": "erfc",  # no StableHLO op: compiler/opaque.py splices aten.erfc back under this name
               # no StableHLO op either: compiler/activations.py splices these back, the eager kernels' one activation
               "silu": "silu", "gelu": "gelu", "log2": "log2", "log10": "log10"}


def widen(nc, tile: Tile, shape: tuple[int, int]) -> Tile:
    """A [P, 1] tile broadcast along the free axis into a full tile (a VectorE copy)."""
    if tile.shape == shape:
        return tile
    full = nc.sbuf_tile(shape, tile.dtype)
    nc.vector.tensor_copy(full, tile)
    return full


def immediate_tile(nc, value, shape: tuple[int, int], dtype: np.dtype) -> Tile:
    t = nc.sbuf_tile(shape, dtype)
    nc.vector.memset(t, value)
    return t


def _binary(alu: str, nc, out: Tile, a, b, compute: np.dtype) -> None:
    vector = nc.vector
    if _is_tile(a) and _is_tile(b):
        if a.free < b.free:  # a per-partition scalar must be the second operand
            if alu in _COMMUTATIVE:
                a, b = b, a
            elif alu in _MIRROR:
                alu, a, b = _MIRROR[alu], b, a
            else:
                a = widen(nc, a, b.shape)
        vector.tensor_tensor(out, a, b, alu, dtype=compute)
    elif _is_tile(a):
        vector.tensor_scalar(out, a, alu, b, dtype=compute)
    elif _is_tile(b):
        vector.tensor_scalar(out, b, alu, a, reverse=True, dtype=compute)
    else:
        raise AssertionError("constant-only ops are folded before lowering")


def _check_integer_divisor(nc, divisor) -> None:
    """Integer division by zero raises, as on CPU (which raises ZeroDivisionError from its kernel)."""
    if _is_tile(divisor):
        zero = nc.sbuf_tile(divisor.shape, np.dtype(np.bool_))
        nc.vector.tensor_scalar(zero, divisor, "equal", 0)
        flag = nc.sbuf_tile((divisor.partitions, 1), np.dtype(np.bool_))
        nc.vector.tensor_reduce(flag, zero, "logical_or")
        found = bool(flag.read().any())
    else:
        found = divisor == 0
    if found:
        raise RuntimeError("ZeroDivisionError")


# maximum/minimum against an immediate constant: the value wins a tie, as CPU's relu and clamp to a
# scalar bound keep -0.0; between two tensors the second wins, as CPU's vector loop
_BOUND = {"maximum": "clamp_min", "minimum": "clamp_max"}


def _emit_binary(nc, out: Tile, args: list, op: Op, in_types: list[TensorType]) -> None:
    dtype = in_types[0].np_dtype
    a, b = args
    if op.name in ("divide", "remainder") and dtype.kind in "iu":
        _check_integer_divisor(nc, b)
    alu = _binary_name(op, dtype)
    compute = dtype if op.name in STEPWISE and compute_dtype(dtype) != dtype else _compute(dtype)  # a narrow float
    if alu in _BOUND and _is_tile(a) != _is_tile(b):
        alu, a, b = _BOUND[alu], *((a, b) if _is_tile(a) else (b, a))
    # a logical op reads each operand's truth, whatever its dtype (operands of two dtypes: fold_conversions)
    _binary(alu, nc, out, a, b, np.dtype(np.bool_) if alu.startswith("logical_") else compute)


def _emit_compare(nc, out: Tile, args: list, op: Op, in_types: list[TensorType]) -> None:
    dtype = in_types[0].np_dtype
    if args[0] is args[1] and _is_tile(args[0]) and op.attrs["comparison_direction"] == "NE" \
            and dtype.kind not in _INT_KINDS:
        # x != x is isnan(x) (PyTorch's decomposition of isnan): VectorE's one-operand test, as the eager kernel
        nc.vector.tensor_unary(out, args[0], "isnan", dtype=FP32)
        return
    _binary(_COMPARE[op.attrs["comparison_direction"]], nc, out, args[0], args[1], _compute(dtype))


def _emit_unary(nc, out: Tile, args: list, op: Op, in_types: list[TensorType]) -> None:
    dtype = in_types[0].np_dtype
    if op.name == "not":
        name = "logical_not" if dtype == np.bool_ or op.type.dtype == "bool" else "bitwise_not"
    else:
        name = _UNARY[op.name]
    nc.vector.tensor_unary(out, args[0], name, dtype=_compute(dtype))


def _emit_activation(nc, out: Tile, args: list, op: Op, in_types: list[TensorType]) -> None:
    nc.scalar.activation(out, args[0], _ACTIVATION[op.name])


def _emit_convert(nc, out: Tile, args: list, op: Op, in_types: list[TensorType]) -> None:
    if not _is_tile(args[0]):  # a scalar constant (a folded reduce of one: torch.masked.mean of a 0-d tensor)
        value = np.asarray(args[0], dtype=in_types[0].np_dtype)
        nc.vector.memset(out, (value != 0) if out.dtype == np.bool_ else value.astype(out.dtype))
        return
    if out.dtype == np.bool_ and in_types[0].np_dtype != np.bool_:
        nc.vector.tensor_scalar(out, args[0], "not_equal", 0, dtype=_compute(in_types[0].np_dtype))
    else:
        nc.vector.tensor_copy(out, args[0])


def _emit_select(nc, out: Tile, args: list, op: Op, in_types: list[TensorType]) -> None:
    mask, on_true, on_false = args
    shape = out.shape
    if not _is_tile(mask):
        chosen = on_true if mask else on_false
        if _is_tile(chosen):
            nc.vector.tensor_copy(out, chosen)
        else:
            nc.vector.memset(out, chosen)
        return
    dtype = out.dtype
    on_true = on_true if _is_tile(on_true) else immediate_tile(nc, on_true, shape, dtype)
    on_false = on_false if _is_tile(on_false) else immediate_tile(nc, on_false, shape, dtype)
    nc.vector.select(out, widen(nc, mask, shape), widen(nc, on_true, shape), widen(nc, on_false, shape))


def _emit_clamp(nc, out: Tile, args: list, op: Op, in_types: list[TensorType]) -> None:
    low, x, high = args
    compute = _compute(in_types[1].np_dtype)
    # min(max(x, low), high): NaN in x propagates, as torch.clamp; an immediate bound loses ties
    # an immediate bound of -inf below or +inf above leaves every value (NaN too) as it is: that pass is skipped
    # (clamp_min(x, v) reaches the device as clamp(v, x, +inf): one VectorE pass, as the eager kernel)
    if not _is_tile(high) and compute.kind == "f" and high == np.inf and _is_tile(x):
        _binary("maximum" if _is_tile(low) else "clamp_min", nc, out, x, low, compute)
        return
    if not _is_tile(low) and compute.kind == "f" and low == -np.inf and _is_tile(x):
        _binary("minimum" if _is_tile(high) else "clamp_max", nc, out, x, high, compute)
        return
    if _is_tile(x):
        _binary("maximum" if _is_tile(low) else "clamp_min", nc, out, x, low, compute)
    else:
        _binary("maximum", nc, out, low, x, compute)
    _binary("minimum" if _is_tile(high) else "clamp_max", nc, out, out, high, compute)


# Ops whose emitter computes in fp32 and rounds once, when it stores the result tile: writing a narrower
# tile directly gives what a following narrowing convert would (groups._select relies on it). Converts
# (int -> fp32 -> bf16 would round twice) and clamp (it stores twice) are not among them.
ROUNDS_ONCE = frozenset({*_BINARY, *_UNARY, *_ACTIVATION, "select"})
ACTIVATION_OPS = frozenset(_ACTIVATION)


def activation_function(name: str) -> str:
    """ScalarE's activation-table function of a StableHLO activation op."""
    return _ACTIVATION[name]

ELEMENTWISE: dict[str, Callable] = {
    **{name: _emit_binary for name in (*_BINARY, "and", "or", "xor")},
    **{name: _emit_unary for name in (*_UNARY, "not")},
    **{name: _emit_activation for name in _ACTIVATION},
    "compare": _emit_compare, "convert": _emit_convert, "select": _emit_select, "clamp": _emit_clamp,
}

# stablehlo.reduce body op -> (VectorE reduction, identity element or None)
REDUCERS: dict[str, str] = {"add": "add", "maximum": "maximum", "minimum": "minimum", "multiply": "multiply",
                            "or": "logical_or", "and": "logical_and"}


def body_ops(op: Op | dict) -> list[dict]:
    """The region's ops without the terminator."""
    body = op.attrs.get("body", []) if isinstance(op, Op) else op.get("body", [])
    return [b for b in body if b["name"] != "return"]


def reducer(op: Op | dict) -> str | None:
    """The VectorE reduction of a single-operand reduction region (reduce, reduce_window), or None."""
    body = body_ops(op)
    if len(body) != 1 or sorted(body[0]["operands"]) != ["a0", "a1"]:
        return None
    return REDUCERS.get(body[0]["name"])


def supported_step(op: Op, in_types: list[TensorType]) -> str | None:
    """None if a step runner can execute ``op``, else why not."""
    for t in (*in_types, *op.types):
        if t.dtype in STORAGE_ONLY:
            return f"{t.dtype} is storage-only on the engines"
    if op.name == "dot_general" and any(t.np_dtype.kind in "iub" for t in in_types):
        return "TensorE multiplies floating-point operands only"
    if op.name == "reduce_window" and (len(op.operands) != 2 or reducer(op) is None):
        return "only single-operand add/max/min windows lower"
    if op.name == "scatter":
        body = body_ops(op)
        if len(op.operands) != 3 or len(body) > 1 or (body and (body[0]["name"] != "add"
                                                                or sorted(body[0]["operands"]) != ["a0", "a1"])):
            return "only single-operand scatters that assign or add lower"
        if op.attrs["scatter_dimension_numbers"].get("input_batching_dims"):
            return "batching dimensions"
    if op.name == "gather" and op.attrs["dimension_numbers"].get("operand_batching_dims"):
        return "batching dimensions"
    if op.name == "sort":
        body = body_ops(op)
        if len(body) != 1 or body[0]["name"] != "compare" or body[0]["operands"] not in (["a0", "a1"], ["a1", "a0"]) \
                or body[0]["attrs"].get("comparison_direction") not in ("LT", "GT"):
            return "only sorts comparing the first operand with LT/GT lower"
    if op.name == "attention_backward" and (len({t.dtype for t in in_types[:5]}) != 1
                                            or in_types[0].dtype not in ("float32", "bfloat16", "float16")):
        return "gradient, query, key, value and output of one floating dtype (float32, bfloat16, float16)"
    if op.name == "attention" and (len({t.dtype for t in in_types[:3]}) != 1 or in_types[0].dtype not in
                                   ("float32", "bfloat16", "float16")):
        return "query, key and value of one floating dtype (float32, bfloat16, float16)"
    if op.name == "convolution" and op.attrs.get("batch_group_count", 1) != 1:
        return "batch_group_count > 1"
    return None


def supported_elementwise(op: Op, in_types: list[TensorType]) -> str | None:
    """None if a fused group can evaluate ``op``, else why not."""
    if op.name not in ELEMENTWISE:
        return "no lowering"
    for t in (*in_types, *op.types):
        if t.dtype in ("float64", "complex64", "complex128"):
            return f"{t.dtype} is storage-only on the engines"
    if op.name == "compare" and op.attrs.get("comparison_direction") not in _COMPARE:
        return "comparison direction"
    return None


def host_function(op: Op, in_types: list[TensorType]) -> Callable | None:
    """The numpy function of an elementwise op, for folding constants at compile time."""
    if op.name not in ELEMENTWISE or op.name in ("select", "clamp", "convert"):
        if op.name == "select":
            return lambda m, a, b: np.where(m, a, b)
        if op.name == "clamp":
            return lambda lo, x, hi: np.minimum(np.maximum(x, lo), hi)
        return None
    dtype = in_types[0].np_dtype if in_types else np.dtype(np.float32)
    if op.name == "compare":
        return ALU_BINARY[_COMPARE[op.attrs["comparison_direction"]]]
    if op.name in _BINARY or op.name in ("and", "or", "xor"):
        return ALU_BINARY[_binary_name(op, dtype)]
    if op.name == "not":
        return ALU_UNARY["logical_not" if dtype == np.bool_ else "bitwise_not"]
    if op.name in _UNARY:
        return ALU_UNARY[_UNARY[op.name]]
    return ACTIVATIONS[_ACTIVATION[op.name]]
