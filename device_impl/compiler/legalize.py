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
* ``aten.bitwise_left_shift``/``bitwise_right_shift`` of operands that broadcast abort the process
  inside torch-mlir (seen for int64 [20, 1] << [20, 20]; same shapes import): each operand is
  expanded to the result's shape first;
* a reduction of a 0-d tensor with ``keepdim=True`` (``sum``, ``amax``, ``mean`` ...; ``logsumexp``
  of a scalar decomposes into them) crashes the process inside torch-mlir: keeping a reduced
  dimension of a 0-d tensor leaves it 0-d, so ``keepdim`` is dropped (the same shape and values);
* ``aten.div.Tensor_mode`` with ``rounding_mode=None`` does not import: it is ``div.Tensor``;
* zero-size tensors crash or fail torch-mlir; the common source is ``torch.cat`` with an empty
  operand (an empty KV cache in transformers), which ATen skips: empty operands are dropped from
  ``aten.cat`` and the constants that fed them die with dead-code elimination;
* factory ops (``full``, ``arange``, ``scalar_tensor`` ...) naming a ``neuron`` device fail to
  import (torch-mlir knows cpu/cuda/meta devices only): the device argument is dropped, since the
  whole StableHLO program runs on the device anyway.

Rewrites that keep PyTorch's numerics where torch-mlir's lowering changes them live in
``numerics.py``; ``legalize`` applies both tables.

Each rewrite keeps the node's ``meta['val']`` so later passes still see static shapes.
"""

from __future__ import annotations

import torch
import torch.fx

from device_impl.compiler import numerics, opaque
from device_impl.compiler.numerics import _call, _cast, aten


def _static_shape(node: torch.fx.Node) -> list[int]:
    return [int(s) for s in node.meta["val"].shape]


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


def _cat(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    tensors = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    kept = [t for t in tensors if t.meta["val"].numel() != 0]
    if len(kept) == len(tensors) or not kept:
        return None
    if len(kept) == 1:
        return _cast(graph, _call(graph, aten.clone.default, kept[0]), node)
    return _call(graph, aten.cat.default, kept, dim)


def _empty_permuted(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """empty_permuted (uninitialised memory in a physical order) has no lowering; its values are
    unspecified either way, so it is a plain ``empty`` of the same size and dtype."""
    dtype = node.meta["val"].dtype
    return _call(graph, aten.empty.memory_format, _static_shape(node), dtype=dtype)


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


def _explicit_broadcast(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    shape = _static_shape(node)
    operands = list(node.args)
    changed = False
    for i, operand in enumerate(operands[:2]):
        if isinstance(operand, torch.fx.Node) and list(operand.meta["val"].shape) != shape:
            expanded = graph.call_function(aten.expand.default, (operand, shape))
            expanded.meta["val"] = operand.meta["val"].expand(shape)
            operands[i] = expanded
            changed = True
    if not changed:
        return None
    return graph.call_function(node.target, tuple(operands), node.kwargs)


_SHIFTS = tuple(getattr(getattr(aten, name), "Tensor") for name in (
    "bitwise_left_shift", "bitwise_right_shift", "__lshift__", "__rshift__") if hasattr(getattr(aten, name), "Tensor"))


def _sliced(graph: torch.fx.Graph, base: torch.fx.Node, dim: int, start: int, end: int) -> torch.fx.Node:
    node = graph.call_function(aten.slice.Tensor, (base, dim, start, end))
    node.meta["val"] = aten.slice.Tensor(base.meta["val"], dim, start, end)  # fake tensor: metadata only
    return node


_REWRITES = {
    aten.squeeze.dims: _squeeze_dims,
    aten.slice_scatter.default: _slice_scatter,
    aten.clamp.Tensor: _clamp_tensor,
    aten.cat.default: _cat,
    aten.empty_permuted.default: _empty_permuted,
    **dict.fromkeys(_SHIFTS, _explicit_broadcast),
    **numerics.REWRITES,
}


def _drop_device(node: torch.fx.Node) -> bool:
    device = node.kwargs.get("device")
    if isinstance(device, torch.device) and device.type not in ("cpu", "meta"):
        node.kwargs = {k: v for k, v in node.kwargs.items() if k != "device"}
        return True
    return False


def _zero_dim_keepdim(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return False
    value = node.args[0].meta.get("val")
    if not isinstance(value, torch.Tensor) or value.dim() != 0:
        return False
    names = [a.name for a in schema.arguments]
    if "keepdim" not in names:
        return False
    index = names.index("keepdim")
    if index < len(node.args) and node.args[index] is True:
        node.args = node.args[:index] + (False,) + node.args[index + 1:]
        return True
    if node.kwargs.get("keepdim") is True:
        node.kwargs = {**node.kwargs, "keepdim": False}
        return True
    return False


def _every_dim(node: torch.fx.Node) -> bool:
    """``any.dims``/``all.dims`` with no dims (reduce every dim: PyTorch's decomposition of ``torch.all(x)`` is
    ``not any.dims(not x)``) name every dim: torch-mlir converts the op only with a list (ccovb). ``dims=[]``
    reduces nothing and a 0-d input has no dim to name: both stay as they are."""
    if node.target not in (aten.any.dims, aten.all.dims) or not isinstance(node.args[0], torch.fx.Node):
        return False
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    value = node.args[0].meta.get("val")
    if dims is not None or not isinstance(value, torch.Tensor) or value.dim() == 0:
        return False
    every = list(range(value.dim()))
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    node.args = (node.args[0], every, bool(keepdim))
    node.kwargs = {}
    return True


def legalize(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Rewrite in place the node forms torch-mlir cannot import (see module docstring)."""
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if getattr(node, "_erased", False):  # a rewrite above replaced this node already
            continue
        if node.op == "call_function" and _drop_device(node):
            changed = True
        if node.op == "call_function" and _zero_dim_keepdim(node):
            changed = True
        if node.op == "call_function" and _every_dim(node):
            changed = True
        rewrite = _REWRITES.get(node.target) if node.op == "call_function" else None
        if rewrite is None and node.op == "call_function" and numerics.needs_opmath(node) \
                and not opaque.cuttable(node):
            # (a call compiler/opaque.py cuts whole as it is runs the eager kernel's program in its own dtype: widened,
            # a bfloat16 group_norm ran float32's program between two convert steps, 3.18 us against 2.99)
            rewrite = numerics.opmath
        if rewrite is None:
            continue
        with graph.inserting_before(node):
            new = rewrite(graph, node)
        if new is None:
            continue
        new.meta = {**node.meta, **new.meta}  # a rewrite's own type (computed on fake tensors) wins
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.eliminate_dead_code()
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
