"""Constant folding and static-shape check.

torch-mlir materialises Python scalars as tiny constant chains (``arith.constant
dense<2> : tensor<1xi64>`` -> convert -> reshape -> broadcast_in_dim) and computes
``dynamic_iota`` lengths from f64 scalar arithmetic. These are compile-time facts,
not device work: ops whose operands are all constants are evaluated here (numpy
on the constants only), so splats reach the lowering as immediates and every
``dynamic_iota`` with a constant length becomes a static ``iota``.
"""

from __future__ import annotations

import math

import numpy as np

from device_impl.compiler import lowering
from device_impl.compiler.errors import ShapeContractError
from device_impl.compiler.ir import Graph, Op, TensorType

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
    return _negated_addends(_integer_identities(_unit_windows(graph)))


# reduce_window region ops whose one-element window is that op of the init and the element (the elementwise op of
# the same name computes it: alu(init, x) in the compute dtype, rounded once, as the reduce_window runner does)
_UNIT_WINDOW_OPS = frozenset({"add", "maximum", "minimum", "multiply"})


def _unit_windows(graph: Graph) -> Graph:
    """A ``reduce_window`` whose windows are single elements (every window dimension 1, strides 1, no padding or
    dilation) is ``op(init, x)`` element for element: avg_pool2d(x, 1, 1) imported as one, a step of its own
    between the conversions to float32 and back (1.62 us against the eager kernel's 1.26 in bfloat16). As the
    elementwise op it fuses with them; the init stays an operand (a splat of the result's shape), so the sum
    ``0.0 + -0.0`` is +0.0 as the window's was."""
    for i, op in enumerate(graph.ops):
        if op.name != "reduce_window" or len(op.operands) != 2 or len(op.results) != 1:
            continue
        x, init = op.operands
        body = lowering.body_ops(op)
        rank = len(op.type.shape)
        attrs = op.attrs
        if init not in graph.splats or lowering.reducer(op) is None or body[0]["name"] not in _UNIT_WINDOW_OPS \
                or graph.types[x] != op.type or op.type.dynamic:
            continue
        ones = [1] * rank
        if list(attrs.get("window_dimensions", ())) != ones or list(attrs.get("window_strides", ones)) != ones \
                or list(attrs.get("base_dilations", ones)) != ones or list(attrs.get("window_dilations", ones)) != ones \
                or any(list(p) != [0, 0] for p in attrs.get("padding", [[0, 0]] * rank)):
            continue
        splat = max(graph.types) + 1
        graph.types[splat] = op.type
        graph.splats[splat] = graph.splats[init]
        graph.ops[i] = Op(body[0]["name"], (splat, x), op.results, op.types)
    return graph


def _same(value, splat) -> bool:
    """``splat`` is ``value`` (a float's sign too: -0.0 is not 0.0)."""
    if isinstance(splat, bool) or not isinstance(splat, (int, float)):
        return False
    return splat == value and math.copysign(1.0, splat) == math.copysign(1.0, value)


# (op, the splat operand that leaves a value unchanged, whether it may be the first operand), per dtype kind.
# Integers: x * 1, x + 0, x - 0. Floats (IEEE, round to nearest; exactly, -0.0 and NaN included): x * 1,
# x / 1, x + -0.0, x - +0.0, but not x + 0.0 (-0.0 + 0.0 is +0.0) nor x - -0.0.
_FLOATS = ("float32", "bfloat16", "float16")
_IDENTITIES = {
    "iu": {"multiply": (1, True), "add": (0, True), "subtract": (0, False)},
    "f": {"multiply": (1.0, True), "divide": (1.0, False), "add": (-0.0, True), "subtract": (0.0, False)},
}


def _integer_identities(graph: Graph) -> Graph:
    """Ops that return an operand unchanged are that operand; their readers read it. Integers: PyTorch's
    arange decomposition multiplies its iota by the step and adds the start, 1 and 0 for an index (index_fill's,
    eye's), two passes over a value that is already the result. Floats: decompositions scale by a Python 1.0
    (linear's and addmm's beta, addcmul's value, elu's scales), a VectorE pass each, and on a small operand
    (a bias) a step of its own before the group that reads it broadcast (issue 21: compiled ops losing to
    eager by that step)."""
    renamed: dict[int, int] = {}
    kept: list[Op] = []
    for op in graph.ops:
        if renamed:
            op.operands = tuple(renamed.get(v, v) for v in op.operands)
        kind = "f" if op.type.dtype in _FLOATS else "iu" if op.type.np_dtype.kind in "iu" else None
        rule = _IDENTITIES[kind].get(op.name) if kind else None
        if rule is not None and len(op.operands) == 2:
            value, either = rule
            for k in ((0, 1) if either else (1,)):
                other = op.operands[1 - k]
                if op.operands[k] in graph.splats and _same(value, graph.splats[op.operands[k]]) \
                        and graph.types[other] == op.type:
                    renamed[op.result] = other
                    break
            if op.result in renamed:
                continue
        kept.append(op)
    graph.ops = kept
    graph.outputs = [renamed.get(v, v) for v in graph.outputs]
    return graph


def _negated_addends(graph: Graph) -> Graph:
    """``x + y * -1`` is ``x - y`` (exactly: y * -1 is -y, and IEEE defines x - y as x + (-y); integers wrap
    alike): PyTorch's decomposition of ``add(x, y, alpha=-1)`` (and ``sub``'s of alpha) scales y by -1 first,
    a VectorE pass more than the eager kernel's one instruction. The product, read by nothing else, is then
    dead."""
    producers = graph.producers()
    for op in graph.ops:
        if op.name != "add" or len(op.operands) != 2:
            continue
        for k in (1, 0):
            scaled = producers.get(op.operands[k])
            if scaled is None or scaled.name != "multiply" or scaled.type != op.type:
                continue
            y, c = scaled.operands
            if c not in graph.splats:
                y, c = c, y
            other = op.operands[1 - k]
            if c in graph.splats and _same(-1.0, graph.splats[c]) and graph.types[y] == op.type \
                    and graph.types[other] == op.type:
                op.name, op.operands = "subtract", (other, y)
                break
    return graph


SINK_SOURCE = 1 << 12  # elements: a convert at most this large may move past the views that spread it
SINK_LIMIT = 1 << 12  # elements: ... onto values at most this large, where it runs once per element (and its
# broadcast operand is loaded per element: lt of a [3, 3, 3, 513] tensor and a 0-d int64 tensor lost 0.14 us by it)
SINK_WIDENING_LIMIT = 1 << 16  # elements: ... or this large for a convert to a wider dtype (bfloat16 -> float32):
# the broadcast operand is then loaded narrower than the converted value would be (a broadcast load moves a
# descriptor per element, so its bytes barely count; the step saved does), and the per-element convert is a VectorE
# pass over a group its broadcast loads keep DMA-bound: bfloat16 addcmul(x0, x1, x2) of [1, 1, 1] x0, x2 and a
# [1, 5, 2, 513] x1 (5130 elements) 2.34 -> 2.04 us, where eager takes 2.19; lt's int64 -> float32 convert
# narrows and keeps SINK_LIMIT (sunk onto its 13851 elements it took 2.96 us against 2.83)


def sink_small_ops(graph: Graph) -> Graph:
    """A convert of a small graph input or constant (through views), read only through views (a broadcast) by
    elementwise ops or as an output, is computed on the views instead: ``convert(x)`` broadcast becomes
    ``convert(x broadcast)`` (a view op only relocates elements, so both are the same elements, bit for bit).
    Kept where it was, such a convert (a 0-d or row operand of another dtype, an index's) is a fused group of
    its own: a step, its store and the reload of its result before the group that reads it, ~0.2 us a program,
    where the eager kernel converts the broadcast tile in its loop (issue 21: compiled gt, floor division and
    remainder by a tensor of another dtype, copy from one, losing to eager by that step). Moved, it joins its
    readers' group, run per element as the eager kernel runs it; limited to small values (``SINK_SOURCE``)
    spread onto at most ``SINK_LIMIT`` elements (``SINK_WIDENING_LIMIT`` for a convert to a wider dtype, whose
    broadcast load gets narrower), where the step it saves outweighs the per-element convert and broadcast load.
    Other ops are not moved: moved into a large group whose other inputs come from other steps
    (nll_loss's selects) they saved no step and cost a pass (nll_loss 4.16 -> 4.51 us)."""
    views = lowering.VIEWS
    producers, users = graph.producers(), graph.users()
    outputs = set(graph.outputs)

    def from_inputs(vid: int) -> bool:
        """Whether ``vid`` is a graph input, constant or splat, or views of one."""
        op = producers.get(vid)
        while op is not None and op.name in views:
            op = producers.get(op.operands[0])
        return op is None

    def reaches(vid: int, limit: int) -> bool:
        """Whether every reader of view ``vid`` is an elementwise op of at most ``limit`` elements, an
        output, or another such view."""
        if graph.types[vid].numel > limit:
            return False
        for user in users.get(vid, ()):
            if user.name in views:
                if not reaches(user.result, limit):
                    return False
            elif user.name not in lowering.ELEMENTWISE:
                return False
        return bool(users.get(vid)) or vid in outputs

    moved: dict[int, list[Op]] = {}  # position of a view op -> the ops that replace it
    for op in graph.ops:
        if op.name != "convert" or op.type.numel > SINK_SOURCE or op.result in outputs \
                or not all(from_inputs(v) for v in op.operands):
            continue
        readers = users.get(op.result, [])
        widens = all(graph.types[v].np_dtype.itemsize < op.type.np_dtype.itemsize for v in op.operands)
        limit = SINK_WIDENING_LIMIT if widens else SINK_LIMIT
        if not readers or any(u.name not in views or u.operands[0] != op.result for u in readers) \
                or not all(reaches(u.result, limit) for u in readers):
            continue
        for view in readers:
            moved[id(view)] = _sunk(graph, op, view)
    if moved:
        graph.ops = [new for op in graph.ops for new in moved.get(id(op), [op])]
    return graph


def _sunk(graph: Graph, op: Op, view: Op) -> list[Op]:
    """``view(op(x, ...))`` as ``op(view(x), ...)``: the view applied to each operand (a splat becomes a splat
    of the view's shape), then the op, writing the view's result."""
    shape = view.type.shape
    ops, operands = [], []
    for v in op.operands:
        t = graph.types[v]
        new = max(graph.types) + 1
        graph.types[new] = TensorType(shape, t.dtype)
        if v in graph.splats:
            graph.splats[new] = graph.splats[v]
        else:
            ops.append(Op(view.name, (v,), (new,), (graph.types[new],), dict(view.attrs)))
        operands.append(new)
    ops.append(Op(op.name, tuple(operands), view.results, view.types, dict(op.attrs)))
    return ops


def conv_bias(graph: Graph) -> Graph:
    """``add(convolution(x, w), broadcast(b))`` with ``b`` one value per output feature becomes
    ``convolution(x, w, b)``: torch-mlir says a biased convolution as the convolution and an add of the
    broadcast bias, which fusion makes a group of its own (a step: the convolution's store, its reload, the
    bias add and another store), where the eager kernel adds the bias on the way out of PSUM (ScalarE's
    evacuation, ``kernels.spatial.conv._conv_forward_core``) and the outputs no tap reaches are the bias
    (issue 21: compiled conv1d/conv2d/conv_transpose2d/_convolution 1.07x eager by that step). The step
    runner (``steps._convolution``) passes the third operand as the eager kernel's bias. Only where the
    convolution's one reader is that add and it is no graph output; for float32 the bits are the same
    (PSUM's float32 sum plus the bias, rounded once either way); a reduced float gets the eager kernel's
    (and CPU's) single rounding of sum + bias instead of two."""
    producers, users = graph.producers(), graph.users()
    outputs = set(graph.outputs)
    replaced: dict[int, Op | None] = {}  # id(op) -> its replacement (None: dropped)
    for op in graph.ops:
        if op.name != "add" or len(op.operands) != 2:
            continue
        for conv_vid, other in (op.operands, op.operands[::-1]):
            conv = producers.get(conv_vid)
            if conv is None or conv.name != "convolution" or len(conv.operands) != 2 or conv_vid in outputs \
                    or [u for u in users.get(conv_vid, ())] != [op] or id(conv) in replaced:
                continue
            bias = _feature_bias(graph, producers, conv, other)
            if bias is None or not _every_output_reached(graph, conv):
                continue
            replaced[id(conv)] = None
            replaced[id(op)] = Op("convolution", conv.operands + (bias,), op.results, op.types, dict(conv.attrs))
            break
    if replaced:
        # the convolution now runs where the add was: after the bias's producers, which precede the add
        graph.ops = [replaced.get(id(op), op) for op in graph.ops]
        graph.ops = [op for op in graph.ops if op is not None]
    return graph


def _feature_bias(graph: Graph, producers: dict[int, Op], conv: Op, vid: int) -> int | None:
    """The 1-d value of one element per output feature that ``vid`` broadcasts along the convolution's
    feature dim (``broadcast_in_dim`` of it, or of its reshape to [O, 1, ...]), of the result's dtype; else
    None."""
    out = conv.type
    layout = conv.attrs.get("dimension_numbers", {}).get("layouts")
    if not layout or len(layout) != 3 or "f" not in layout[2]:
        return None
    fdim = layout[2].index("f")
    features = out.shape[fdim]
    op = producers.get(vid)
    if op is None or op.name != "broadcast_in_dim" or op.type.shape != out.shape:
        return None
    src = op.operands[0]
    src_shape = graph.types[src].shape
    dims = list(op.attrs.get("broadcast_dimensions", ()))
    if len(dims) != len(src_shape):
        return None
    # the source's one non-unit dim (or its only dim) lands on the feature dim; every other is size 1
    kept = [i for i, n in enumerate(src_shape) if n != 1] or [0]
    if len(kept) != 1 or dims[kept[0]] != fdim or src_shape[kept[0]] != features:
        return None
    if len(src_shape) != 1:
        reshape = producers.get(src)
        if reshape is None or reshape.name != "reshape" or graph.types[reshape.operands[0]].shape != (features,):
            return None
        src = reshape.operands[0]
    if graph.types[src].dtype != out.dtype or graph.types[src].shape != (features,):
        return None
    return src


def _every_output_reached(graph: Graph, conv: Op) -> bool:
    """Whether every output of the convolution sums at least one product with an input element. The eager
    kernel writes an output no such product reaches as the bias itself (a DMA copy), where CPU (and the
    unfolded add) compute 0 + bias: a -0.0 bias would come out -0.0 instead of +0.0 there. A transposed
    convolution (lhs dilation: the stride) leaves such outputs where no kernel tap lands on an input element of
    its phase (a stride above the dilated kernel) or every tap lands beyond the input (output padding past a
    dilated kernel's reach); so does an empty contraction. A direct convolution multiplies its padding (the
    step runs ``conv_run`` on the padded input): every output sums products."""
    layouts = conv.attrs["dimension_numbers"]["layouts"]
    lhs_t, rhs_t = graph.types[conv.operands[0]], graph.types[conv.operands[1]]
    if rhs_t.numel == 0 or lhs_t.numel == 0:
        return False
    nsp = len(layouts[1]) - 2
    if "lhs_dilation" not in conv.attrs:
        return True
    kernel = [rhs_t.shape[layouts[1].index(str(i))] for i in range(nsp)]
    size = [lhs_t.shape[layouts[0].index(str(i))] for i in range(nsp)]
    out = [conv.type.shape[layouts[2].index(str(i))] for i in range(nsp)]
    strides = list(conv.attrs.get("window_strides", [1] * nsp))
    dilated = conv.attrs.get("lhs_dilation", [1] * nsp)
    dilation = conv.attrs.get("rhs_dilation", [1] * nsp)
    padding = conv.attrs.get("padding", [[0, 0]] * nsp)
    for k, n, o, st, s, d, (lo, _) in zip(kernel, size, out, strides, dilated, dilation, padding):
        # output j reads the padded, dilated input at j * st + t * d, input element (that - lo) / s where
        # that is a multiple of s within [0, (n - 1) * s]
        for j in range(o):
            if not any((j * st - lo + t * d) % s == 0 and 0 <= j * st - lo + t * d <= (n - 1) * s
                       for t in range(k)):
                return False
    return True


# reductions whose result does not depend on how the reduced elements are grouped, NaN included (a max of
# maxes is the max, bit for bit): a sum's is its order of addition, so add and multiply are not among them
_REGROUPABLE = frozenset({"maximum", "minimum", "logical_and", "logical_or"})


def _same_init(a, b) -> bool:
    """Two reductions' init splats are one value (a float's sign too)."""
    if type(a) is not type(b) or a != b:
        return False
    return not isinstance(a, float) or math.copysign(1.0, a) == math.copysign(1.0, b)


def merge_reductions(graph: Graph) -> Graph:
    """A max/min/and/or reduction of another one's result, with the same body and init, that is its only
    reader, becomes one reduction over the union of their dims: torch-mlir says amax/amin over several dims
    (``aminmax(x)``, ``amax(x, (0, 1))``) as one single-dim reduction per dim in a chain, each a fused group and
    a step of its own (its store and the next one's load), where the eager kernel reduces the flat tiles once:
    compiled aminmax of a [5, 2, 513] tensor took 1.53x the eager kernel's device time in six steps. One
    reduction of all dims (or of the trailing dims: whole rows) is one group, which runs on the partitions as
    the eager kernel's flat tiling."""
    producers, users = graph.producers(), graph.users()
    outputs = set(graph.outputs)
    for i, op in enumerate(graph.ops):
        if op.name != "reduce" or len(op.operands) != 2 or lowering.reducer(op) not in _REGROUPABLE:
            continue
        inner = producers.get(op.operands[0])
        if inner is None or inner.name != "reduce" or len(inner.operands) != 2 or inner.result in outputs \
                or len(users.get(inner.result, [])) != 1 or lowering.reducer(inner) != lowering.reducer(op) \
                or inner.attrs.get("body") != op.attrs.get("body") \
                or inner.operands[1] not in graph.splats or op.operands[1] not in graph.splats \
                or not _same_init(graph.splats[inner.operands[1]], graph.splats[op.operands[1]]):
            continue
        kept = [d for d in range(len(graph.types[inner.operands[0]].shape))
                if d not in set(inner.attrs["dimensions"])]
        dims = sorted({*inner.attrs["dimensions"], *(kept[d] for d in op.attrs["dimensions"])})
        rank = len(graph.types[inner.operands[0]].shape)
        if dims != list(range(rank - len(dims), rank)):
            # only trailing dims (rows of the row-major source, or all of it): a group reducing other dims
            # reads them strided (amax over dims 0 and 2 of [5, 2, 513]: 1.95 -> 3.87 us merged)
            continue
        merged = Op("reduce", (inner.operands[0], op.operands[1]), op.results, op.types,
                    dict(op.attrs, dimensions=dims))
        graph.ops[i] = merged
        producers[op.result] = merged
        users.setdefault(inner.operands[0], []).append(merged)
    return graph


_WIDENING_FLOATS = {("bfloat16", "float32"), ("float16", "float32")}  # converts that change no value


def infinite_rows_from_max(graph: Graph) -> Graph:
    """``all(x == -inf, dims)`` (a logical_and reduction of an EQ compare with -inf) becomes ``max(x, dims) == -inf``
    where the graph already reduces x (or x widened to float32) by max over the same dims before it: PyTorch's
    ``_safe_softmax`` decomposition zeroes the rows that are all -inf with such an ``all``, a full pass of compares
    and another of logical ands beside the softmax's own max, where the eager kernel tests the row max (bfloat16
    [3, 513]: compiled 3.24 us against 3.15). The same rows either way: a max is -inf exactly where every element
    is (a NaN makes both false: the max propagates it, and NaN == -inf is false; no element: both true, the max's
    init being -inf)."""
    producers = graph.producers()
    position = {id(op): i for i, op in enumerate(graph.ops)}

    def source(vid: int) -> int:
        op = producers.get(vid)
        if op is not None and op.name == "convert" and \
                (graph.types[op.operands[0]].dtype, op.type.dtype) in _WIDENING_FLOATS:
            return op.operands[0]
        return vid

    maxima: dict[tuple, Op] = {}  # (source of x, dims) -> the first max reduction of it
    for op in graph.ops:
        if op.name == "reduce" and len(op.operands) == 2 and lowering.reducer(op) == "maximum" \
                and graph.splats.get(op.operands[1], None) == float("-inf") \
                and graph.types[op.operands[0]].dtype in _FLOATS:
            maxima.setdefault((source(op.operands[0]), tuple(op.attrs["dimensions"])), op)
    if not maxima:
        return graph
    for i, op in enumerate(graph.ops):
        if op.name != "reduce" or len(op.operands) != 2 or lowering.reducer(op) != "logical_and" \
                or graph.splats.get(op.operands[1]) is not True:
            continue
        compare = producers.get(op.operands[0])
        if compare is None or compare.name != "compare" or compare.attrs.get("comparison_direction") != "EQ":
            continue
        a, b = compare.operands
        x = a if graph.splats.get(b) == float("-inf") else b if graph.splats.get(a) == float("-inf") else None
        if x is None or graph.types[x].dtype not in _FLOATS:
            continue
        found = maxima.get((source(x), tuple(op.attrs["dimensions"])))
        if found is None or position[id(found)] > i:
            continue
        row = graph.types[found.result]
        infinity = max(graph.types) + 1
        graph.types[infinity] = TensorType(row.shape, row.dtype)
        graph.splats[infinity] = float("-inf")
        graph.ops[i] = Op("compare", (found.result, infinity), op.results, op.types, dict(compare.attrs))
    return graph
