"""Fused ops that reach the compiler whole: carried around torch-mlir as graph cuts, spliced back as steps.

torch-mlir imports only ops it can lower to StableHLO, and it has no way to carry an op of its own
(the device's fused scaled-dot-product attention) through to StableHLO as one unit. Decomposing such
an op into the ops torch-mlir knows costs what fusing it is for: attention lowered as separate
products and a softmax writes the scores and the probabilities to HBM between groups (issue 21:
"attention as one tiled kernel with the online softmax (scores and probabilities never in HBM)").

So the op is cut out of the FX graph before the import (``cut``): each result it produces becomes a
new graph input and each tensor operand a new graph output, the op itself a ``Cut`` record (its kind,
the positions of those inputs and outputs, its static options). After the import, ``splice`` turns
the extra inputs and outputs back into one ``ir.Op`` of that kind between its operands' producers
and its results' users (the ops re-sorted topologically: torch-mlir ordered them without knowing
that the new inputs depend on the new outputs). The op is then a step like ``dot_general``
(``lowering.STEP_OPS``; its runner in ``steps.py`` runs the eager kernel's own tile program). SDPA's
forward and backward are both cut: a training graph's forward saves O and logsumexp for the backward
step (and zeros for the dropout seed and offset the backward op reads).

Which FX targets are cut, and how their arguments become a ``Cut``, is the table ``CUTTERS``. A call
the table refuses (attention with dropout: the compiler does not model the device's counter-based
random stream) stays in the graph, torch-mlir fails to import it, and the graph runs eagerly,
counted as a fallback, as before.
"""

from __future__ import annotations

import heapq
import operator
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler import opaque_cnn
from device_impl.compiler.ir import Graph, Op, TensorType

aten = torch.ops.aten


@dataclass
class Cut:
    """One op cut out of an FX graph: ``operands`` are positions in the graph's outputs, ``results``
    positions in its inputs (None: a result nobody reads; ``result_types`` gives its type), ``attrs``
    its static options (part of the compile-cache key: they are not in the StableHLO text)."""

    kind: str
    operands: list[int]
    results: list[int | None]
    result_types: list[tuple[list[int], str]]
    attrs: dict[str, Any] = field(default_factory=dict)

    def key(self) -> dict[str, Any]:
        return asdict(self)


def _bound(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    values: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            values[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            values[arg.name] = node.kwargs[arg.name]
        else:
            values[arg.name] = arg.default_value if arg.has_default_value() else None
    return values


_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.bool: "bool",
           torch.int64: "int64"}


def _attention(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """SDPA's OVERRIDEABLE forward: operands (query, key, value[, mask]), results {0: out, 1: logsumexp}.
    Refused with dropout or a debug mask (see module docstring), and for 3-D inputs or a mask dtype
    the eager kernel refuses (it raises there: the fallback runs it and raises the same)."""
    a = _bound(node)
    if a["dropout_p"] or a["return_debug_mask"]:
        return None
    operands = [a["query"], a["key"], a["value"]]
    bias = a["attn_bias"]
    if bias is not None:
        operands.append(bias)
    if any(not isinstance(x, torch.fx.Node) for x in operands):
        return None
    metas = [x.meta.get("val") for x in operands]
    if any(not isinstance(m, torch.Tensor) for m in metas) or metas[0].dim() != 4:
        return None
    dtype = metas[0].dtype
    if dtype not in (torch.float32, torch.bfloat16, torch.float16) or any(m.dtype != dtype for m in metas[1:3]):
        return None
    if bias is not None and metas[3].dtype not in (dtype, torch.bool):
        return None
    scale = a["scale"]
    return operands, {0: 0, 1: 1}, {"scale": None if scale is None else float(scale),
                                    "causal": bool(a["is_causal"]), "mask": bias is not None}


def _attention_backward(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """SDPA's OVERRIDEABLE backward: operands (grad_out, query, key, value, out, logsumexp[, mask]), results
    {0: dQ, 1: dK, 2: dV}. numerics._fused_attention_backward keeps the op whole exactly where this takes it
    (no dropout, no bias gradient: the eager kernel's bias gradient is a torch reduction after its launch)."""
    a = _bound(node)
    bias = a["attn_bias"]
    if a["dropout_p"] or (bias is not None and needs_bias_gradient(bias, a["grad_input_mask"])):
        return None
    operands = [a["grad_out"], a["query"], a["key"], a["value"], a["out"], a["logsumexp"]]
    if bias is not None:
        operands.append(bias)
    if any(not isinstance(x, torch.fx.Node) for x in operands):
        return None
    metas = [x.meta.get("val") for x in operands]
    if any(not isinstance(m, torch.Tensor) for m in metas) or metas[1].dim() != 4:
        return None
    scale = a["scale"]
    return operands, {0: 0, 1: 1, 2: 2}, {"scale": None if scale is None else float(scale),
                                          "causal": bool(a["is_causal"]), "mask": bias is not None}


def needs_bias_gradient(bias: Any, grad_input_mask: Any) -> bool:
    """Whether SDPA's backward must return the gradient of a float ``attn_bias`` (an FX node or a tensor)."""
    meta = bias.meta.get("val") if isinstance(bias, torch.fx.Node) else bias
    dtype = getattr(meta, "dtype", None)
    return dtype is not None and dtype != torch.bool and len(grad_input_mask) > 3 and bool(grad_input_mask[3])


def _layer_norm(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``native_layer_norm``: operands (input[, weight][, bias]), results {0: out, 1: mean, 2: rstd}. Cut whole
    so the step runs the eager kernel's tile program (``kernels.reduction.layer_norm.forward_program``): CPU's
    affine step is one fused multiply-add where the host's kernels fuse, which StableHLO cannot say (its
    zero signs: numerics._layer_norm_affine), and the eager kernel computes it on GpSimd. ``fused`` (asked of
    this process's CPU kernels when the graph is cut) is an option, so a compile cache entry is never shared
    between hosts whose kernels differ. Refused for what the eager kernel refuses (non-float dtypes, shapes
    that do not match): the graph then takes numerics' rewrite, or the fallback raises as the eager op."""
    from device_impl.kernels import cpu_host

    a = _bound(node)
    x, weight, bias = a["input"], a["weight"], a["bias"]
    operands = [x] + [t for t in (weight, bias) if t is not None]
    if any(not isinstance(t, torch.fx.Node) for t in operands):
        return None
    metas = [t.meta.get("val") for t in operands]
    if any(not isinstance(m, torch.Tensor) or m.dtype not in _FLOATS for m in metas):
        return None
    normalized = [int(s) for s in a["normalized_shape"]]
    axis = metas[0].dim() - len(normalized)
    if not normalized or axis < 0 or list(metas[0].shape[axis:]) != normalized \
            or any(list(m.shape) != normalized for m in metas[1:]):
        return None
    fused = cpu_host.fused_multiply_add() or weight is None or bias is None
    return operands, {0: 0, 1: 1, 2: 2}, {"axis": axis, "eps": float(a["eps"]), "weight": weight is not None,
                                          "bias": bias is not None, "fused": bool(fused)}


_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def softmax_backward_whole(grad: Any, output: Any, dim: int, input_dtype: Any, log: bool) -> bool:
    """Whether ``_softmax_backward_data`` (``log``: ``_log_softmax_backward_data``) of these operands (fake
    tensors or FX metas) is cut whole: floating operands of one dtype and shape, the gradient in the input's
    dtype (the mixed float16/float32 call and the calls CPU refuses keep numerics' decomposition), and only
    where CPU fuses a multiply-add: always for log_softmax (g - exp(y) * sum(g)), for softmax along a dim that
    is not the last (its fma chain; along the last CPU's kernel rounds each step, which the decomposition,
    fused with its neighbours, already computes: cutting it there cost up to 1.3 us a 256x512 call).
    numerics.DECOMPOSITIONS leaves exactly these calls undecomposed."""
    if not (isinstance(grad, torch.Tensor) and isinstance(output, torch.Tensor) and grad.dtype in _FLOATS
            and output.dtype == grad.dtype and input_dtype == grad.dtype
            and tuple(grad.shape) == tuple(output.shape)):
        return False
    rank = max(grad.dim(), 1)
    wrapped = int(dim) + (rank if int(dim) < 0 else 0)
    return 0 <= wrapped < rank and (log or wrapped != rank - 1)


def _softmax_backward(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``_softmax_backward_data`` and ``_log_softmax_backward_data``: operands (grad_output, output), the one
    result; only the calls ``softmax_backward_whole`` names. Cut whole so the step runs the eager kernels' tile
    program (``kernels.reduction.softmax.backward_program``): CPU sums g * y along a dim that is not the last as
    a chain of fused multiply-adds, and log_softmax's g - exp(y) * sum(g) rounds once; StableHLO has no fma
    (the op suite's NaN positions and zero signs)."""
    a = _bound(node)
    grad, output = a["grad_output"], a["output"]
    if not isinstance(grad, torch.fx.Node) or not isinstance(output, torch.fx.Node):
        return None
    gm, om = grad.meta.get("val"), output.meta.get("val")
    log = node.target is aten._log_softmax_backward_data.default
    if not softmax_backward_whole(gm, om, a["dim"], a["input_dtype"], log):
        return None
    from device_impl.kernels import cpu_host

    dim = int(a["dim"]) + (max(gm.dim(), 1) if int(a["dim"]) < 0 else 0)
    # whether CPU's loops fuse the multiply-adds: asked when the graph is cut, so it keys the compile cache
    return [grad, output], {0: 0}, {"dim": dim, "log": log, "fused": cpu_host.fused_multiply_add()}


def cuttable(node: torch.fx.Node) -> bool:
    """Whether ``cut`` takes ``node`` whole (rewrites that would otherwise decompose it, numerics._layer_norm,
    leave it alone)."""
    entry = CUTTERS.get(node.target) if node.op == "call_function" else None
    return entry is not None and entry[1](node) is not None and (
        _single(node) or all(u.target is operator.getitem for u in node.users))


def _single(node: torch.fx.Node) -> bool:
    """Whether ``node`` returns one tensor (its users read it directly, not through getitem)."""
    return isinstance(node.meta.get("val"), torch.Tensor)


# Results of the forward that the backward op reads but the compiled step does not make: its dropout
# seed and offset (the compiler compiles attention without dropout: zeros, as the eager kernel returns then)
_ZERO_RESULTS = {aten._scaled_dot_product_fused_attention_overrideable.default: (6, 7)}

# FX target -> (step kind, how its arguments become operands, results and options; None refuses the call)
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten._scaled_dot_product_fused_attention_overrideable.default: ("attention", _attention),
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: ("attention_backward",
                                                                             _attention_backward),
    aten.native_layer_norm.default: ("layer_norm", _layer_norm),
    aten._softmax_backward_data.default: ("softmax_backward", _softmax_backward),
    aten._log_softmax_backward_data.default: ("softmax_backward", _softmax_backward),
}
# CNN ops with eager tile programs (pooling with indices, batch norm): compiler/opaque_cnn.py
CUTTERS.update(opaque_cnn.CUTTERS)


def cut(gm: torch.fx.GraphModule) -> list[Cut]:
    """Cut every op of ``CUTTERS`` out of ``gm`` (in place; see module docstring). A call is cut only
    when each of its used results is a tensor result the table names (its other results would need
    values the compiled program does not make)."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    output = graph.output_node()
    n_outputs = len(output.args[0]) if isinstance(output.args[0], (tuple, list)) else 1
    extra: list[torch.fx.Node] = []  # the cut ops' operands, returned after the graph's own outputs
    n_inputs = len(placeholders)
    cuts: list[Cut] = []
    last_input = placeholders[-1] if placeholders else None
    for node in list(graph.nodes):
        entry = CUTTERS.get(node.target) if node.op == "call_function" else None
        if entry is None:
            continue
        kind, describe = entry
        described = describe(node)
        if described is None:
            continue
        operands, result_items, attrs = described
        zeros = _ZERO_RESULTS.get(node.target, ())
        single = _single(node)
        users = [] if single else list(node.users)
        if any(u.target is not operator.getitem or u.args[1] not in (*result_items, *zeros) for u in users):
            continue
        for user in [u for u in users if u.args[1] in zeros]:
            with graph.inserting_before(user):
                zero = graph.call_function(aten.zeros.default, ([],), {"dtype": user.meta["val"].dtype})
            zero.meta = dict(user.meta)
            user.replace_all_uses_with(zero)
            graph.erase_node(user)
            users.remove(user)
        metas = (node.meta["val"],) if single else node.meta["val"]
        results: list[int | None] = [None] * len(result_items)
        types = []
        for item, position in sorted(result_items.items(), key=lambda kv: kv[1]):
            meta = metas[item]
            types.append(([int(s) for s in meta.shape], _DTYPES.get(meta.dtype, str(meta.dtype))))
        # each read result: (its position, the node standing for it: a getitem, or a single-result op itself)
        reads = [(result_items[0], node)] if single and node.users else [(result_items[u.args[1]], u) for u in users]
        for position, user in reads:
            if results[position] is not None:  # a second getitem of the same result
                user.replace_all_uses_with(_placeholder_of(graph, results[position]))
                graph.erase_node(user)
                continue
            insert_after = last_input if last_input is not None else next(iter(graph.nodes))
            with graph.inserting_after(insert_after):
                new = graph.placeholder(f"{kind}_{len(cuts)}_result{position}")
            new.meta = dict(user.meta)
            last_input = new
            results[position] = n_inputs
            n_inputs += 1
            user.replace_all_uses_with(new)
            if user is not node:
                graph.erase_node(user)
        positions = list(range(n_outputs + len(extra), n_outputs + len(extra) + len(operands)))
        extra.extend(operands)
        graph.erase_node(node)
        cuts.append(Cut(kind, positions, results, types, attrs))
    if cuts:
        own = output.args[0]
        output.args = (tuple(own) if isinstance(own, (tuple, list)) else (own,)) + tuple(extra),
        graph.lint()
        gm.recompile()
    return cuts


def _placeholder_of(graph: torch.fx.Graph, index: int) -> torch.fx.Node:
    return [n for n in graph.nodes if n.op == "placeholder"][index]


def splice(graph: Graph, cuts: list[Cut], n_inputs: int, n_outputs: int) -> Graph:
    """Put the cut ops back into the imported graph (in place): the extra inputs become their results,
    the extra outputs their operands; ``n_inputs``/``n_outputs`` are the graph's own counts."""
    if not cuts:
        return graph
    extra_in, extra_out = graph.inputs[n_inputs:], graph.outputs[n_outputs:]
    graph.inputs, graph.outputs = graph.inputs[:n_inputs], graph.outputs[:n_outputs]
    next_id = max(graph.types) + 1
    new_ops = []
    for c in cuts:
        results = []
        types = []
        for position, (shape, dtype) in zip(c.results, c.result_types):
            if position is None:
                vid, next_id = next_id, next_id + 1
                graph.types[vid] = TensorType(tuple(shape), dtype)
            else:
                vid = extra_in[position - n_inputs]
            results.append(vid)
            types.append(graph.types[vid])
        operands = tuple(extra_out[p - n_outputs] for p in c.operands)
        new_ops.append(Op(c.kind, operands, tuple(results), tuple(types), dict(c.attrs)))
    graph.ops = _topological(graph.ops, new_ops)
    return graph


def _topological(ops: list[Op], new_ops: list[Op]) -> list[Op]:
    """``ops`` and ``new_ops`` in a dependency order, otherwise as close to the given order as possible:
    an original op keeps its position as its priority, a new op comes right after its last operand's
    producer (Kahn's algorithm, lowest priority first)."""
    producer_index = {r: i for i, op in enumerate(ops) for r in op.results}
    all_ops = list(ops) + list(new_ops)
    priority = [float(i) for i in range(len(ops))]
    for op in new_ops:
        priority.append(max((producer_index.get(v, -1) for v in op.operands), default=-1) + 0.5)
    producer = {r: i for i, op in enumerate(all_ops) for r in op.results}
    users: dict[int, list[int]] = {}
    waiting = []
    for i, op in enumerate(all_ops):
        deps = {producer[v] for v in op.operands if v in producer}
        waiting.append(len(deps))
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [(priority[i], i) for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(all_ops[i])
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (priority[u], u))
    if len(order) != len(all_ops):
        raise AssertionError("a cut op depends on its own results")
    return order
