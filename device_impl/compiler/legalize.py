"""FX-level rewrites that make an AOTAutograd graph importable by torch-mlir's StableHLO path.

torch-mlir 20261001 rejects or mis-lowers a few core ATen forms that backward graphs produce:

* ``aten.squeeze.dims`` (backward of ``repeat_interleave``/``expand``) has no Torch-backend
  lowering: it is a reshape to the node's known static shape;
* ``aten.slice_scatter`` with an open end (``end = 2**63 - 1``) makes the lowering build an
  index constant of that length (``std::bad_alloc``): it becomes a concatenation of the
  untouched prefix, the source and the untouched suffix (unit step), which is pure data
  movement for the compiler;
* ``None`` outputs (inputs without a gradient) break the StableHLO backend contract: they are
  dropped here and put back by the caller (``restore_none``);
* ``aten.clamp.Tensor`` with a missing bound or bounds that broadcast aborts the process inside
  torch-mlir: it becomes ``maximum``/``minimum`` (the same values: NaN propagates from any operand);
* ``aten.remainder`` lowers to ``stablehlo.remainder``, which is C's fmod (sign of the dividend), not
  Python's remainder (sign of the divisor): it becomes fmod plus the divisor where the signs differ,
  as ATen's own kernel computes it;
* ``aten.sign`` lowers to ``stablehlo.sign``, which keeps NaN, where PyTorch's sign of NaN is 0:
  it becomes ``(x > 0) - (x < 0)``;
* ``aten.div.Tensor_mode`` does not import with ``rounding_mode=None`` (it is ``div.Tensor``) and
  with ``"floor"`` lowers to divide-then-floor, which is off by one where the rounded quotient lands
  on an integer (and truncates for integers): floor division becomes ATen's own algorithm
  (``c10::div_floor_floating``: fmod, exact quotient, corrections), op by op in the tensor's dtype;
* factory ops (``full``, ``arange``, ``scalar_tensor`` ...) naming a ``neuron`` device fail to
  import (torch-mlir knows cpu/cuda/meta devices only): the device argument is dropped, since the
  whole StableHLO program runs on the device anyway.

Each rewrite keeps the node's ``meta['val']`` so later passes still see static shapes.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def _static_shape(node: torch.fx.Node) -> list[int]:
    return [int(s) for s in node.meta["val"].shape]


def _call(graph: torch.fx.Graph, target, *args) -> torch.fx.Node:
    """A new node whose ``meta['val']`` is ``target`` run on its arguments' fake tensors (torch-mlir
    reads every node's type from it)."""
    node = graph.call_function(target, args)

    def fake(a):
        return a.meta["val"] if isinstance(a, torch.fx.Node) else a

    node.meta["val"] = target(*[fake(a) for a in args])
    return node


def _cast(graph: torch.fx.Graph, value: torch.fx.Node, node: torch.fx.Node) -> torch.fx.Node:
    """``value`` converted to the dtype ``node`` had, when they differ."""
    dtype = node.meta["val"].dtype
    if value.meta["val"].dtype == dtype:
        return value
    return _call(graph, torch.ops.prims.convert_element_type.default, value, dtype)


def _clamp_tensor(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    low = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    high = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    out = _cast(graph, x, node)
    if low is not None:
        out = _call(graph, aten.maximum.default, out, _cast(graph, low, node))
    if high is not None:
        out = _call(graph, aten.minimum.default, out, _cast(graph, high, node))
    return out if out is not x else _call(graph, aten.clone.default, x)


def _remainder(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    a, b = node.args[0], node.args[1]
    if not isinstance(a, torch.fx.Node):
        return None
    fmod_op = aten.fmod.Tensor if isinstance(b, torch.fx.Node) else aten.fmod.Scalar
    r = _call(graph, fmod_op, a, b)
    if node.meta["val"].dtype == torch.bool:
        return None
    # where(r != 0 and (r < 0) != (b < 0), r + b, r)
    nonzero = _call(graph, aten.ne.Scalar, r, 0)
    r_neg = _call(graph, aten.lt.Scalar, r, 0)
    b_neg = _call(graph, aten.lt.Scalar, b, 0) if isinstance(b, torch.fx.Node) else (b < 0)
    differ = _call(graph, aten.ne.Tensor if isinstance(b_neg, torch.fx.Node) else aten.ne.Scalar, r_neg, b_neg)
    fix = _call(graph, aten.logical_and.default, nonzero, differ)
    shifted = _call(graph, aten.add.Tensor, r, b)
    return _cast(graph, _call(graph, aten.where.self, fix, shifted, r), node)


def _sign(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    if node.meta["val"].dtype == torch.bool:
        return None
    positive = _call(graph, prims_convert, _call(graph, aten.gt.Scalar, x, 0), node.meta["val"].dtype)
    negative = _call(graph, prims_convert, _call(graph, aten.lt.Scalar, x, 0), node.meta["val"].dtype)
    return _call(graph, aten.sub.Tensor, positive, negative)


prims_convert = torch.ops.prims.convert_element_type.default


def _div_mode(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    a, b = node.args[0], node.args[1]
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    scalar_b = not isinstance(b, torch.fx.Node)
    if mode is None:
        return _call(graph, aten.div.Scalar if scalar_b else aten.div.Tensor, a, b)
    if mode != "floor" or not isinstance(a, torch.fx.Node):
        return None
    dtype = node.meta["val"].dtype
    a = _cast(graph, a, node)
    if not scalar_b:
        b = _cast(graph, b, node)
    op = (lambda tensor_op, scalar_op: scalar_op) if scalar_b else (lambda tensor_op, scalar_op: tensor_op)
    if scalar_b and b == 0:
        return None  # division by a zero scalar: inf/nan (floats) or an error (integers), as ATen's own path
    mod = _call(graph, op(aten.fmod.Tensor, aten.fmod.Scalar), a, b)
    mod_nonzero = _call(graph, aten.ne.Scalar, mod, 0)
    mod_negative = _call(graph, aten.lt.Scalar, mod, 0)
    if scalar_b:
        sign_differs = _call(graph, aten.ne.Scalar, mod_negative, bool(b < 0))
    else:
        sign_differs = _call(graph, aten.ne.Tensor, _call(graph, aten.lt.Scalar, b, 0), mod_negative)
    fix = _call(graph, aten.logical_and.default, mod_nonzero, sign_differs)
    if not dtype.is_floating_point:
        if scalar_b:
            return None
        quotient = _trunc_div(graph, a, b)
        return _call(graph, aten.where.self, fix, _call(graph, aten.sub.Scalar, quotient, 1), quotient)
    divide = op(aten.div.Tensor, aten.div.Scalar)
    div = _call(graph, divide, _call(graph, aten.sub.Tensor, a, mod), b)
    div = _call(graph, aten.where.self, fix, _call(graph, aten.sub.Scalar, div, 1), div)
    floor = _call(graph, aten.floor.default, div)
    up = _call(graph, aten.gt.Scalar, _call(graph, aten.sub.Tensor, div, floor), 0.5)
    floor = _call(graph, aten.where.self, up, _call(graph, aten.add.Scalar, floor, 1), floor)
    quotient = _call(graph, divide, a, b)
    signed_zero = _call(graph, aten.mul.Scalar, quotient, 0)
    result = _call(graph, aten.where.self, _call(graph, aten.ne.Scalar, div, 0), floor, signed_zero)
    if scalar_b:
        return result
    return _call(graph, aten.where.self, _call(graph, aten.eq.Scalar, b, 0), quotient, result)


def _trunc_div(graph: torch.fx.Graph, a: torch.fx.Node, b: torch.fx.Node) -> torch.fx.Node:
    """Integer division rounding toward zero (stablehlo.divide on integers)."""
    node = graph.call_function(aten.div.Tensor_mode, (a, b), {"rounding_mode": "trunc"})
    node.meta["val"] = aten.div.Tensor_mode(a.meta["val"], b.meta["val"], rounding_mode="trunc")
    return node


def _squeeze_dims(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    return graph.call_function(aten.view.default, (node.args[0], _static_shape(node)))


def _slice_scatter(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    base, src = node.args[0], node.args[1]
    dim = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim", 0)
    start = node.args[3] if len(node.args) > 3 else node.kwargs.get("start")
    end = node.args[4] if len(node.args) > 4 else node.kwargs.get("end")
    step = node.args[5] if len(node.args) > 5 else node.kwargs.get("step", 1)
    shape = _static_shape(node)
    dim = dim % len(shape)
    size = shape[dim]
    start = 0 if start is None else (start + size if start < 0 else start)
    end = size if end is None else (end + size if end < 0 else end)
    start, end = max(0, min(start, size)), max(0, min(end, size))
    if step != 1 or end <= start or _static_shape(src)[dim] != end - start:
        return None
    pieces = []
    if start > 0:
        pieces.append(_sliced(graph, base, dim, 0, start))
    pieces.append(src)
    if end < size:
        pieces.append(_sliced(graph, base, dim, end, size))
    if len(pieces) == 1:
        return graph.call_function(aten.clone.default, (src,))
    return graph.call_function(aten.cat.default, (pieces, dim))


def _sliced(graph: torch.fx.Graph, base: torch.fx.Node, dim: int, start: int, end: int) -> torch.fx.Node:
    node = graph.call_function(aten.slice.Tensor, (base, dim, start, end))
    node.meta["val"] = aten.slice.Tensor(base.meta["val"], dim, start, end)  # fake tensor: metadata only
    return node


_REWRITES = {
    aten.squeeze.dims: _squeeze_dims,
    aten.slice_scatter.default: _slice_scatter,
    aten.clamp.Tensor: _clamp_tensor,
    aten.remainder.Tensor: _remainder,
    aten.remainder.Scalar: _remainder,
    aten.sign.default: _sign,
    aten.div.Tensor_mode: _div_mode,
    aten.div.Scalar_mode: _div_mode,
}


def _drop_device(node: torch.fx.Node) -> bool:
    device = node.kwargs.get("device")
    if isinstance(device, torch.device) and device.type not in ("cpu", "meta"):
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "device"}
        return True
    return False


def legalize(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Rewrite in place the node forms torch-mlir cannot import (see module docstring)."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op == "call_function" and _drop_device(node):
            changed = True
        rewrite = _REWRITES.get(node.target) if node.op == "call_function" else None
        if rewrite is None:
            continue
        with graph.inserting_before(node):
            new = rewrite(graph, node)
        if new is None:
            continue
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.lint()
        gm.recompile()
    return gm


def drop_none_outputs(gm: torch.fx.GraphModule) -> list[bool]:
    """Remove ``None`` entries from the graph's output tuple; returns which positions were kept."""
    output = gm.graph.output_node()
    values = output.args[0]
    if not isinstance(values, (tuple, list)):
        return [True]
    kept = [v is not None for v in values]
    if not all(kept):
        output.args = (tuple(v for v in values if v is not None),)
        gm.recompile()
    return kept


def restore_none(results, kept: list[bool]) -> list:
    """Put ``None`` back at the positions ``drop_none_outputs`` removed."""
    it = iter(results)
    return [next(it) if k else None for k in kept]
