"""Constant folding and static-shape check.

torch-mlir materialises Python scalars as tiny constant chains (``arith.constant
dense<2> : tensor<1xi64>`` -> convert -> reshape -> broadcast_in_dim) and computes
``dynamic_iota`` lengths from f64 scalar arithmetic. These are compile-time facts,
not device work: ops whose operands are all constants are evaluated here (numpy
on the constants only), so splats reach the lowering as immediates and every
``dynamic_iota`` with a constant length becomes a static ``iota``.
"""

from __future__ import annotations

import numpy as np

from device_impl.compiler import lowering
from device_impl.compiler.errors import ShapeContractError
from device_impl.compiler.ir import Graph, Op

FOLD_LIMIT = 1 << 16  # elements: larger constant results stay as device work
_NOT_FOLDED = frozenset({"reduce", "reduce_window", "dot_general", "gather", "scatter", "sort", "concatenate",
                         "pad", "slice", "reverse", "iota", "convolution"})


def check_static(graph: Graph, input_names: list[str] | None = None) -> None:
    """Raise ShapeContractError for the first dynamic dimension of an input or a value."""
    for position, vid in enumerate(graph.inputs):
        t = graph.types[vid]
        if t.dynamic:
            name = input_names[position] if input_names and position < len(input_names) else f"input {position}"
            raise shape_error(name, t.dynamic[0], str(t))
    for op in graph.ops:
        for t in op.types:
            if t.dynamic and op.name != "dynamic_iota":
                raise shape_error(f"the result of stablehlo.{op.name}", t.dynamic[0], str(t))


def shape_error(what: str, dim: int, shape: str) -> ShapeContractError:
    return ShapeContractError(
        f"neuron compiles static shapes only, but {what} has a dynamic dimension {dim} ({shape}). "
        f"Pad or bucket the input to a fixed set of sizes (device_impl.shapes: pad to a multiple of 128 or a "
        f"bucket list, with an attention mask) or call torch.compile(..., dynamic=False) with static shapes; "
        f"each distinct static shape compiles once.")


def _value(graph: Graph, vid: int):
    """A constant operand: a 0-d array for a splat (any shape), the payload otherwise, or None."""
    if vid in graph.splats:
        return np.asarray(graph.splats[vid]).astype(graph.types[vid].np_dtype)
    return graph.constants.get(vid)


def _broadcast(x: np.ndarray, op: Op) -> np.ndarray:
    dims = op.attrs.get("broadcast_dimensions", [])
    shape = op.type.shape
    order = np.argsort(dims)
    x = np.transpose(x, order) if x.ndim else x
    expanded = [1] * len(shape)
    for i, d in enumerate(sorted(dims)):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def _evaluate(graph: Graph, op: Op, args: list[np.ndarray]) -> np.ndarray | None:
    """The op's result on constant operands (0-d arrays stand for splats and broadcast)."""
    out = op.type
    if op.name in ("convert", "reshape"):
        x = args[0].astype(out.np_dtype) if op.name == "convert" else args[0]
        return x if x.ndim == 0 else np.reshape(x, out.shape)
    if op.name == "broadcast_in_dim":
        return args[0] if args[0].ndim == 0 else _broadcast(args[0], op)
    if op.name == "transpose":
        return args[0] if args[0].ndim == 0 else np.transpose(args[0], op.attrs["permutation"])
    fn = lowering.host_function(op, [graph.types[v] for v in op.operands])
    if fn is None:
        return None
    result = np.asarray(fn(*args)).astype(out.np_dtype)
    return result if result.ndim == 0 else np.broadcast_to(result, out.shape)


def scalar(x) -> float | int | bool:
    """A numpy scalar (bfloat16 included) as a Python number."""
    x = np.asarray(x)
    if x.dtype == np.bool_:
        return bool(x)
    if x.dtype.kind in "iu":
        return int(x)
    return float(x.astype(np.float64))


def fold_constants(graph: Graph) -> Graph:
    """Evaluate constant-only ops in place; drops ops whose results became constants."""
    kept: list[Op] = []
    for op in graph.ops:
        if op.name == "constant":
            continue
        if op.name == "dynamic_iota":
            length = _value(graph, op.operands[0])
            if length is not None and not op.type.dynamic:
                kept.append(Op("iota", (), op.results, op.types, {"iota_dimension": op.attrs["iota_dimension"]}))
                continue
        args = [_value(graph, v) for v in op.operands]
        small = op.type.numel <= FOLD_LIMIT or all(v in graph.splats for v in op.operands)
        if op.operands and all(a is not None for a in args) and len(op.results) == 1 and small \
                and not op.type.dynamic and op.name not in _NOT_FOLDED:
            with np.errstate(all="ignore"):
                result = _evaluate(graph, op, args)
            if result is not None:
                if result.ndim == 0 or (result.size and result.dtype.kind in "iub"
                                        and np.all(result == result.flat[0])):
                    graph.splats[op.result] = scalar(result.flat[0]) if result.size else 0
                else:
                    graph.constants[op.result] = np.ascontiguousarray(np.broadcast_to(result, op.type.shape))
                continue
        kept.append(op)
    graph.ops = kept
    return _integer_identities(graph)


# (op, the splat operand that leaves an integer value unchanged, whether it may be the first operand)
_IDENTITIES = {"multiply": (1, True), "add": (0, True), "subtract": (0, False)}


def _integer_identities(graph: Graph) -> Graph:
    """``x * 1``, ``x + 0``, ``x - 0`` of integers are ``x`` (exactly; not of floats, where ``-0.0 + 0`` is
    +0.0): PyTorch's arange decomposition multiplies its iota by the step and adds the start, 1 and 0 for an
    index (index_fill's, eye's), two passes over a value that is already the result. Their readers read ``x``."""
    renamed: dict[int, int] = {}
    kept: list[Op] = []
    for op in graph.ops:
        if renamed:
            op.operands = tuple(renamed.get(v, v) for v in op.operands)
        rule = _IDENTITIES.get(op.name)
        if rule is not None and len(op.operands) == 2 and op.type.np_dtype.kind in "iu":
            value, either = rule
            for k in ((0, 1) if either else (1,)):
                other = op.operands[1 - k]
                if graph.splats.get(op.operands[k]) == value and op.operands[k] in graph.splats \
                        and graph.types[other] == op.type:
                    renamed[op.result] = other
                    break
            if op.result in renamed:
                continue
        kept.append(op)
    graph.ops = kept
    graph.outputs = [renamed.get(v, v) for v in graph.outputs]
    return graph
