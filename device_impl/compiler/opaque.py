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

from device_impl.compiler import (activations, factories, opaque_cnn, opaque_conv, opaque_indexing, opaque_moments,
                                  opaque_pads, opaque_products, opaque_resample)
from device_impl.compiler.fxargs import bound as _bound
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
    from device_impl.kernels import cpu_host

    # CPU's flash kernel for the traced layouts (its NaN row max and never-started rows: kernels.attention
    # _row_max), asked when the graph is cut, as the eager kernel asks at the call; an option, so it keys the cache
    flash, tail = cpu_host.sdpa_flash_rules(metas[0], metas[1], metas[2], metas[3] if bias is not None else None, 0.0,
                                            bool(a["is_causal"]), None if scale is None else float(scale))
    return operands, {0: 0, 1: 1}, {"scale": None if scale is None else float(scale),
                                    "causal": bool(a["is_causal"]), "mask": bias is not None,
                                    "flash": bool(flash), "flash_tail": int(tail)}


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


def layer_norm_backward_whole(grad: Any, x: Any, normalized_shape: Any, mean: Any, rstd: Any, weight: Any,
                              bias: Any, output_mask: Any) -> bool:
    """Whether ``native_layer_norm_backward`` of these operands (fake tensors or FX metas) is cut whole: floating
    operands (one dtype for grad and input), the statistics in CPU's stat shape, weight and bias of the normalised
    shape where present, and each asked-for parameter gradient's parameter present (else the eager kernel raises,
    and so does the decomposition's fallback). numerics.DECOMPOSITIONS leaves exactly these calls undecomposed."""
    tensors = [grad, x, mean, rstd] + [t for t in (weight, bias) if t is not None]
    if not all(isinstance(t, torch.Tensor) and t.dtype in _FLOATS for t in tensors) or grad.dtype != x.dtype:
        return False
    normalized = [int(n) for n in normalized_shape]
    axis = x.dim() - len(normalized)
    mask = [bool(m) for m in output_mask]
    if not normalized or axis < 0 or list(x.shape[axis:]) != normalized or tuple(grad.shape) != tuple(x.shape):
        return False
    stat = list(x.shape[:axis]) + [1] * len(normalized)
    if list(mean.shape) != stat or list(rstd.shape) != stat:
        return False
    if any(t is not None and list(t.shape) != normalized for t in (weight, bias)):
        return False
    return any(mask) and not (mask[1] and weight is None) and not (mask[2] and bias is None)


def _layer_norm_backward(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``native_layer_norm_backward``: operands (grad_out, input, mean, rstd[, weight]), results: the gradients
    ``output_mask`` asks for, in order (dx, dw, db); only the calls ``layer_norm_backward_whole`` names. Cut whole
    so the step runs the eager kernel's tile program (``kernels.reduction.layer_norm.backward_program``): its sums
    in float and one rounding to a reduced-float output, as CPU's backward kernel; PyTorch's decomposition in
    float32 opmath rounded float16 per op (grad_input overflowing elsewhere near float16's limits, the weight
    gradient up to 41 ULP from CPU's: op suite, compiled layer_norm float16 extremes)."""
    a = _bound(node)
    names = ("grad_out", "input", "mean", "rstd", "weight", "bias")
    if any(a[n] is not None and not isinstance(a[n], torch.fx.Node) for n in names):
        return None
    metas = {n: (None if a[n] is None else a[n].meta.get("val")) for n in names}
    mask = [bool(m) for m in a["output_mask"]]
    if not layer_norm_backward_whole(metas["grad_out"], metas["input"], a["normalized_shape"], metas["mean"],
                                     metas["rstd"], metas["weight"], metas["bias"], mask):
        return None
    operands = [a["grad_out"], a["input"], a["mean"], a["rstd"]] + ([a["weight"]] if a["weight"] is not None else [])
    asked = [i for i in range(3) if mask[i]]
    x = metas["input"]
    axis = x.dim() - len(a["normalized_shape"])
    # the statistics as CPU's forward saves them: a float16/bfloat16 input without float32 parameters keeps them
    # in its own dtype, where PyTorch's meta function (the traced forward, so the saved tensors) makes float32;
    # the eager backward reads the rounded ones, so the step rounds them first (``stats``)
    reduced = x.dtype in (torch.float16, torch.bfloat16) and metas["mean"].dtype == torch.float32 and not any(
        metas[n] is not None and metas[n].dtype == torch.float32 for n in ("weight", "bias"))
    return operands, {item: position for position, item in enumerate(asked)}, {
        "axis": axis, "weight": a["weight"] is not None, "mask": mask,
        "stats": str(x.dtype).removeprefix("torch.") if reduced else None}


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


# -- ops whose eager kernels are hand-written tile programs the compiled step runs as is (issue 21: "every op's
# compiled device time <= its eager kernel's"); PyTorch's decompositions of them (isin's sort + searchsorted)
# import nowhere or cost several times the kernel. backend._decomposition_table leaves the ops of ``WHOLE`` whole.

def _isin(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``isin.Tensor_Tensor`` (operands elements, test_elements) and ``isin.Scalar_Tensor`` (operand
    test_elements; the element an option): the eager kernel's program (``kernels.membership``: VectorE compares
    against few test values, else a GpSimd sort and binary search), in the dtype CPU compares in
    (``membership.common_dtype``, asked at the cut). Refused for the dtypes CPU refuses (bool, complex): the
    graph then runs eagerly and raises CPU's error."""
    from device_impl.kernels import membership

    a = _bound(node)
    elements, tests = (a["elements"] if "elements" in a else a["element"]), a["test_elements"]
    tensors = [t for t in (elements, tests) if isinstance(t, torch.fx.Node)]
    metas = [t.meta.get("val") for t in tensors]
    if not isinstance(tests, torch.fx.Node) or any(not isinstance(m, torch.Tensor) for m in metas) \
            or any(m.dtype == torch.bool or m.dtype.is_complex for m in metas):
        return None
    scalar = None if isinstance(elements, torch.fx.Node) else elements
    if isinstance(scalar, bool) or (scalar is not None and not isinstance(scalar, (int, float))):
        return None
    values = [m if isinstance(t, torch.fx.Node) else t for t, m in ((elements, metas[0]), (tests, metas[-1]))]
    common = membership.common_dtype(*values)
    return tensors, {0: 0}, {"invert": bool(a["invert"]), "scalar": scalar, "common": str(common).split(".")[-1]}


def _sort(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``sort.stable`` (torch.sort with ``stable``, argsort; torch-mlir converts only ``sort``) and ``sort``
    (whose stablehlo.sort knew nothing of CPU's tie rule along an expanded dim): operand self, results {0: values,
    1: indices}. The step runs the eager kernel's GpSimd sort (``indexing.sort_rows``) with the eager kernel's
    choice of stable order (``indexing.sort.stable_order``, asked of the traced input's meta: an expanded dim,
    fbgemm's radix sort), so ties come out where CPU's do. A 0-dim input or a dim out of range stays in the graph (eager)."""
    from device_impl.kernels.indexing.sort import stable_order

    a = _bound(node)
    x = a["self"]
    meta = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or not -meta.dim() <= int(a["dim"]) < meta.dim():
        return None  # an out-of-range dim (the meta function accepts it) raises CPU's IndexError eagerly
    dim = int(a["dim"]) % meta.dim()
    descending = bool(a["descending"])
    return [x], {0: 0, 1: 1}, {"dim": dim, "descending": descending,
                               "stable": stable_order(meta, dim, descending, bool(a.get("stable")))}


def _topk(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``topk``: operand self, results {0: values, 1: indices}, each k wide along ``dim``. torch-mlir said it as a
    full sort and a slice, so tied values' indices came out in std::sort's order, not in the order CPU's topk
    (std::partial_sort, or nth_element and a sort of the first k-1) leaves them; the step runs the eager topk
    kernel's GpSimd sort with that tie rule (``indexing.sort_rows(topk=True)``). Values tie for any input, so every
    call is cut, except where the sorted dim holds one element (nothing to tie: torch-mlir's sort of one element
    folds to a copy, 1.21 us against the sort's 4.72 for a [1, 2049] bfloat16 topk along dim 0). A 0-dim input, a
    k that is not a number, or a dim out of range stays in the graph (eager)."""
    a = _bound(node)
    x, k = a["self"], a["k"]
    meta = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or meta.dim() == 0 or not isinstance(k, int) \
            or not -meta.dim() <= int(a["dim"]) < meta.dim() or meta.shape[int(a["dim"])] == 1:
        return None
    return [x], {0: 0, 1: 1}, {"dim": int(a["dim"]) % meta.dim(), "descending": bool(a["largest"]), "stable": False,
                               "topk": True, "sorted": bool(a["sorted"])}


def _one_element(node: Any, dtype: torch.dtype) -> bool:
    meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(meta, torch.Tensor) and meta.dtype == dtype and meta.numel() == 1


def _amp_update_scale(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``_amp_update_scale`` (GradScaler.update's functional form): operands (scale, growth_tracker, found_inf),
    results {0: new scale, 1: new tracker}; the eager kernel's program (``amp.scaler.update_scale_program``).
    Refused where the eager kernel raises (not one-element tensors of its dtypes): the graph runs eagerly."""
    a = _bound(node)
    operands = [a["self"], a["growth_tracker"], a["found_inf"]]
    if not all(_one_element(t, d) for t, d in zip(operands, (torch.float32, torch.int32, torch.float32))):
        return None
    return operands, {0: 0, 1: 1}, {"growth": float(a["scale_growth_factor"]), "backoff": float(a["scale_backoff_factor"]),
                                    "interval": int(a["growth_interval"])}


def _amp_unscale(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``_amp_foreach_non_finite_check_and_unscale`` (GradScaler.unscale_'s functional form): operands (*grads,
    found_inf, inv_scale), results {i: grad i unscaled, n: found_inf} (``cut`` flattens its (list, tensor) result
    first, ``_LIST_RESULTS``); the eager kernel's program (``amp.scaler.unscale_program``). Refused where the eager
    kernel raises (a gradient that is not floating or whose elements share memory, state tensors that are not one
    float32 element each): the graph runs eagerly."""
    a = _bound(node)
    grads = list(a["self"])
    found, inv = a["found_inf"], a["inv_scale"]
    if not grads or not all(isinstance(g, torch.fx.Node) for g in grads) \
            or not (_one_element(found, torch.float32) and _one_element(inv, torch.float32)):
        return None
    metas = [g.meta.get("val") for g in grads]
    if any(not isinstance(m, torch.Tensor) or m.dtype not in _FLOATS
           or any(st == 0 and sz > 1 for st, sz in zip(m.stride(), m.shape)) for m in metas):
        return None
    return grads + [found, inv], {i: i for i in range(len(grads) + 1)}, {"grads": len(grads)}


def _flatten_list_result(node: torch.fx.Node) -> None:
    """A (Tensor[], Tensor) result read as ``r[0][i]`` and ``r[1]`` becomes a flat tuple read as ``r[i]`` and
    ``r[n]`` (in place), the form ``cut`` takes."""
    val = node.meta.get("val")
    if not (isinstance(val, tuple) and len(val) == 2 and isinstance(val[0], (list, tuple))):
        return
    n = len(val[0])
    for user in list(node.users):
        if user.target is not operator.getitem:
            return
    for user in list(node.users):
        if user.args[1] == 0:
            for inner in list(user.users):
                if inner.target is not operator.getitem:
                    return
            for inner in list(user.users):
                inner.args = (node, inner.args[1])
            node.graph.erase_node(user)
        else:
            user.args = (node, n)
    node.meta["val"] = (*val[0], val[1])


def _activation(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``erfc``/``erfinv`` of a float32 tensor (torch-mlir converts neither), and ``sinh``/``cosh`` (torch-mlir's expansion
    rounds ``x + log(0.5)``; numerics' exact form needs copysign, which imports as bitcasts and masks): cut
    and spliced back as the
    elementwise op itself (``lowering.ELEMENTWISE``: ScalarE's activation, the eager kernel's one rounding of the
    float64 value), which fuses with its neighbours as any elementwise op. float16/bfloat16 stay in the graph
    (a fused group computes in float32 and would round twice; the graph runs eagerly, as before)."""
    x = node.args[0]
    meta = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or meta.dtype != torch.float32 or node.meta["val"].dtype != torch.float32:
        return None
    return [x], {0: 0}, {}


def _exact_elementwise(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``copysign``, ``signbit`` and ``hypot`` of floating tensors of one dtype: cut and spliced back as the
    elementwise op itself (VectorE's one ALU op, ``lowering._BINARY``/``_UNARY``, as the eager kernels issue it),
    which fuses with its neighbours. torch-mlir imports copysign and signbit as ``stablehlo.bitcast_convert``
    and masks (each graph ran eagerly until compiler/bitcast.py lowered the bitcast; imported, they are still a
    byte copy and integer passes where this is one op), and hypot as nothing it converts. The ALU
    op is exact for copysign and signbit (every sign bit, a NaN's too); hypot is computed in float32 and rounded
    once, as the eager kernel. A broadcast operand is broadcast to the result's shape where the op is spliced
    back (``_BROADCAST_KINDS``). Integer inputs (CPU promotes them to float) and mixed dtypes stay in the graph,
    as before."""
    a = _bound(node)
    names = ("self",) if node.target is aten.signbit.default else ("self", "other")
    operands = [a[n] for n in names]
    metas = [t.meta.get("val") if isinstance(t, torch.fx.Node) else None for t in operands]
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or out.numel() == 0 or any(
            not isinstance(m, torch.Tensor) or m.dtype not in _FLOATS or m.dtype != metas[0].dtype for m in metas):
        return None
    if out.dtype != (torch.bool if node.target is aten.signbit.default else metas[0].dtype):
        return None
    if any(m.dim() > out.dim() for m in metas):
        return None
    return operands, {0: 0}, {}


# elementwise kinds spliced back with their operands broadcast to the result's shape (``splice``): an operand
# expanded in the FX graph instead came back from the import as the unexpanded input (the expand of a graph
# output is a view torch-mlir returns as its base)
_BROADCAST_KINDS = frozenset({"copysign", "hypot", "signbit"})


def _cumprod(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``cumprod`` (torch-mlir converts cumsum, as a reduce_window, but not cumprod): the eager kernel's scan
    program (``kernels.reduction.scans.scan_program``: float32 carried in double on GpSimd, as CPU's acc_type;
    an integer input's int64 result in int64). Only for the dtypes the engines compute and a dim in range; other
    calls run eagerly."""
    a = _bound(node)
    x = a["self"]
    meta = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    out = node.meta.get("val")
    if not isinstance(meta, torch.Tensor) or not isinstance(out, torch.Tensor) or meta.dim() == 0 \
            or any(t.dtype not in _SCANNED for t in (meta, out)) or not -meta.dim() <= int(a["dim"]) < meta.dim():
        return None
    return [x], {0: 0}, {"dim": int(a["dim"]) % meta.dim(), "input": str(meta.dtype).split(".")[-1],
                         "result": str(out.dtype).split(".")[-1]}


_SCANNED = (*_FLOATS, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _unfold_backward(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``unfold_backward`` (operand grad_in; PyTorch's decomposition, an index_add over an arange, imports as
    nothing torch-mlir converts and ran eagerly at 4.4x the kernel): the eager kernel's program
    (``kernels.shape.views.unfold_backward_program``: a zero fill, then each window offset's gradient slice added,
    or copied where windows do not overlap). Only for the dtypes the kernel computes and a non-empty result."""
    from device_impl.engine.dtypes import COMPUTE_DTYPES

    a = _bound(node)
    grad = a["grad_in"]
    meta = grad.meta.get("val") if isinstance(grad, torch.fx.Node) else None
    sizes = [int(s) for s in a["input_sizes"]]
    if not isinstance(meta, torch.Tensor) or meta.dtype not in COMPUTE_DTYPES or 0 in sizes \
            or not (-max(len(sizes), 1) <= int(a["dim"]) < max(len(sizes), 1)):
        return None
    return [grad], {0: 0}, {"dim": int(a["dim"]) % max(len(sizes), 1), "size": int(a["size"]),
                            "step": int(a["step"])}


def _view_scatter(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``slice_scatter`` with a step (legalize turns the rest into a concatenation) and ``diagonal_scatter``
    (torch-mlir converts neither): operands (self, src), the eager kernels' program
    (``indexing.gather_scatter.view_scatter_program``: self moved into the result, src into its region). The
    region (``VIEW_REGIONS``) is asked of the traced meta at the cut, so arguments CPU refuses and a src of the
    wrong size stay in the graph (eager: CPU's error)."""
    from device_impl.kernels.indexing.gather_scatter import VIEW_REGIONS

    a = _bound(node)
    name = node.target._schema.name.split("::")[-1]
    x, src = a["self"], a["src"]
    if not all(isinstance(t, torch.fx.Node) and isinstance(t.meta.get("val"), torch.Tensor) for t in (x, src)):
        return None
    args = [a[arg.name] for arg in node.target._schema.arguments[2:]]
    if any(not (v is None or isinstance(v, int)) for v in args):
        return None
    try:
        _, shape = VIEW_REGIONS[name](torch.empty(x.meta["val"].shape, device="meta"), *args)
    except (RuntimeError, IndexError):
        return None
    if tuple(shape) != tuple(src.meta["val"].shape) or src.meta["val"].dtype != x.meta["val"].dtype:
        return None
    return [x, src], {0: 0}, {"op": name, "args": args}


def index_add_whole(self: Any, index: Any, source: Any, alpha: Any) -> bool:
    """Whether an ``index_add`` of these tensors (fake tensors or FX metas) is cut whole: alpha other than 1 (a
    number), self of at least one dim and a dtype the engines compute, source of self's dtype and shape outside
    ``dim``, an int32/int64 index of at most one dim, nothing empty. numerics' decomposition made such a call
    CPU's loop unrolled per index entry (an index_select, the fused add and an index_copy each: 26.7 us against
    the eager kernel's 4.7 for 6 entries of [5, 513] bfloat16); the eager kernel's program moves every entry's
    rows in one indirect pass, its adds on GpSimd in index order with CPU's rounding. alpha 1 keeps numerics'
    decomposition (one scatter step, no slower than the kernel). numerics._index_add returns NotImplemented for
    exactly these calls."""
    from device_impl.engine.dtypes import COMPUTE_DTYPES

    tensors = (self, index, source)
    if not all(isinstance(t, torch.Tensor) for t in tensors) or isinstance(alpha, bool) \
            or not isinstance(alpha, (int, float)) or alpha == 1:
        return False
    return self.dim() >= 1 and self.dtype in COMPUTE_DTYPES and source.dtype == self.dtype \
        and source.dim() == self.dim() and index.dtype in (torch.int64, torch.int32) and index.dim() <= 1 \
        and all(t.numel() > 0 for t in tensors)


def _index_add(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """``index_add`` (operands self, index, source): the eager kernel's program
    (``kernels.indexing.index_put.index_scatter_program``) with CPU's path for the call
    (``index_put.index_add_paths``: fp32 accumulation or a loop of adds, each one fused multiply-add where the
    host's kernels fuse; asked here, so the compile cache keys it) and that path's out-of-range exception. Only the
    calls ``index_add_whole`` names; a source whose shape CPU refuses raised while AOTAutograd traced."""
    from device_impl.kernels.indexing.index_put import index_add_paths

    a = _bound(node)
    x, index, source = a["self"], a["index"], a["source"]
    metas = [t.meta.get("val") if isinstance(t, torch.fx.Node) else None for t in (x, index, source)]
    alpha = a.get("alpha", 1)
    if not index_add_whole(*metas, alpha):
        return None
    meta = metas[0]
    dim = int(a["dim"]) % meta.dim()
    if any(s != t for d, (s, t) in enumerate(zip(meta.shape, metas[2].shape)) if d != dim) \
            or metas[1].numel() != metas[2].shape[dim]:
        return None
    if not meta.dtype.is_floating_point:
        alpha = int(alpha) if meta.dtype != torch.bool else bool(alpha)
    once, fused = index_add_paths(meta.dim(), dim, alpha, metas[1].dtype)
    return [x, index, source], {0: 0}, {"dim": dim, "alpha": alpha, "once": once, "fused": fused}


# ops with a (Tensor[], Tensor) result, flattened before their cut
_LIST_RESULTS = (aten._amp_foreach_non_finite_check_and_unscale.default,)

# step kinds whose runner reads its operand k element for element before writing its result k, tile by tile, and
# reads it nowhere else: the result may be written into that operand's memory (executor.Executable.writable_into)
IN_PLACE_KINDS = frozenset({"amp_unscale", "amp_update_scale"})


# ops the compiled step runs whole, which AOTAutograd must therefore not decompose
WHOLE = (aten.isin.Tensor_Tensor, aten.isin.Scalar_Tensor, aten.unfold_backward.default,
         aten._euclidean_dist.default)  # the cdist step's matrix-product path (compiler/opaque_cnn.py)


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
    aten.native_layer_norm_backward.default: ("layer_norm_backward", _layer_norm_backward),
    aten._softmax_backward_data.default: ("softmax_backward", _softmax_backward),
    aten._log_softmax_backward_data.default: ("softmax_backward", _softmax_backward),
    # eager kernels' programs (ccovb)
    aten.isin.Tensor_Tensor: ("isin", _isin),
    aten.isin.Scalar_Tensor: ("isin", _isin),
    aten.sort.stable: ("sort_whole", _sort),
    aten.sort.default: ("sort_whole", _sort),
    aten.topk.default: ("sort_whole", _topk),
    aten.cumprod.default: ("cumprod", _cumprod),
    aten.slice_scatter.default: ("view_scatter", _view_scatter),
    aten.diagonal_scatter.default: ("view_scatter", _view_scatter),
    aten.unfold_backward.default: ("unfold_backward", _unfold_backward),
    aten.index_add.default: ("index_add", _index_add),
    aten._amp_update_scale.default: ("amp_update_scale", _amp_update_scale),
    aten._amp_foreach_non_finite_check_and_unscale.default: ("amp_unscale", _amp_unscale),
    # spliced back as elementwise ops (their names are lowering.ELEMENTWISE's), not steps
    aten.erfc.default: ("erfc", _activation),
    aten.erfinv.default: ("erf_inv", _activation),
    aten.sinh.default: ("sinh", _activation),
    aten.cosh.default: ("cosh", _activation),
    aten.copysign.Tensor: ("copysign", _exact_elementwise),
    aten.signbit.default: ("signbit", _exact_elementwise),
    aten.hypot.default: ("hypot", _exact_elementwise),
}
# CNN ops with eager tile programs (pooling with indices, batch norm): compiler/opaque_cnn.py
CUTTERS.update(opaque_cnn.CUTTERS)
# dot, vdot, addbmm (and reduced-float baddbmm, mv) as the eager kernels' TensorE products: compiler/opaque_products.py
CUTTERS.update(opaque_products.CUTTERS)
# bfloat16/float16 var, std, var_mean, std_mean as the eager kernel's program: compiler/opaque_moments.py
CUTTERS.update(opaque_moments.CUTTERS)
# embedding_dense_backward and index_copy as the eager kernels' programs: compiler/opaque_indexing.py
CUTTERS.update(opaque_indexing.CUTTERS)
# silu, gelu, log2, log10 of float32 as ScalarE's one activation, the eager kernels' (compiler/activations.py)
CUTTERS.update(activations.CUTTERS)
# float32 linspace as the eager kernel's GpSimd program (compiler/factories.py)
CUTTERS.update(factories.CUTTERS)
# convolution_backward torch-mlir cannot import, as the eager kernel's launch body (compiler/opaque_conv.py)
CUTTERS.update(opaque_conv.CUTTERS)
# reflection/replication padding and reflection padding's backward as the eager kernel's moves (compiler/opaque_pads.py)
CUTTERS.update(opaque_pads.CUTTERS)
# upsampling's forward where the eager kernel's program is cheaper (compiler/opaque_resample.py)
CUTTERS.update(opaque_resample.CUTTERS)


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
        if node.target in _LIST_RESULTS:
            _flatten_list_result(node)
        described = describe(node)
        if described is None:
            continue
        operands, result_items, attrs = described[:3]
        # a describer may name results whose dtype the step gives otherwise than the trace (CPU's, where the meta
        # function's differs); read only as graph outputs, nothing in the graph sees the difference
        retyped: dict[int, torch.dtype] = described[3] if len(described) > 3 else {}
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
            dtype = retyped.get(item, meta.dtype)
            types.append(([int(s) for s in meta.shape], _DTYPES.get(dtype, str(dtype).split(".")[-1])))
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
                if graph.types[vid].dtype != dtype:  # a result the step gives in CPU's dtype (``cut``'s retyped)
                    graph.types[vid] = TensorType(tuple(shape), dtype)
            results.append(vid)
            types.append(graph.types[vid])
        operands = tuple(extra_out[p - n_outputs] for p in c.operands)
        if c.kind in _BROADCAST_KINDS:
            shape = tuple(types[0].shape)
            spread = []
            for vid in operands:
                source = graph.types[vid]
                if tuple(source.shape) != shape:
                    wide, next_id = next_id, next_id + 1
                    graph.types[wide] = TensorType(shape, source.dtype)
                    rank = len(source.shape)
                    new_ops.append(Op("broadcast_in_dim", (vid,), (wide,), (graph.types[wide],),
                                      {"broadcast_dimensions": list(range(len(shape) - rank, len(shape)))}))
                    vid = wide
                spread.append(vid)
            operands = tuple(spread)
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
