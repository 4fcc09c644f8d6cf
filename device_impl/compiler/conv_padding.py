"""Whether a program's convolutions multiply their zero padding: decided at compile time, as CPU would decide it.

CPU's direct convolution either forms a product with every padded zero (ATen's native kernels, im2col on a padded
copy, and some of oneDNN's) or forms none (oneDNN's direct kernels, where it picks one), and the difference shows
where a weight is infinite or NaN: ``0 * inf`` is NaN. Which one runs depends on the live torch (its oneDNN switch
and thread count, oneDNN's ISA) and on the problem, the tensors' strides included (a channels-last grouped input
takes a oneDNN kernel that skips padding where the contiguous one multiplies it). The eager kernel asks
``cpu_host.conv_skips_padding`` at each call (``kernels.spatial.conv.skips_padding``); a program asks it once,
here, of each ``aten.convolution`` of the legalized FX graph, whose example values carry the strides the StableHLO
text no longer has:

* ``decide(gm)`` lists the answers, keyed by what the StableHLO convolution still says of the problem (``_key``:
  input and weight sizes, stride, padding, dilation, groups, dtype). The driver puts the list in the build flags,
  so the NEFF's cache keys (``cache.key``, ``cache.fx_key``) cover the decision itself: a NEFF compiled where CPU
  skips padding is not replayed where it would multiply it (``torch.backends.mkldnn.flags(enabled=False)``,
  another thread count or ISA), whatever made CPU change its mind.
* ``mark(graph, decided)`` records each answer on its StableHLO convolution as the attribute ``skip_padding``,
  which ``steps._convolution`` passes to the eager kernel's ``conv_run`` (so the step costs what the eager launch
  does). Two FX convolutions of one key that CPU answers differently (their strides differ) both multiply, as
  before this module: the StableHLO op cannot tell them apart.

The backward's weight gradient (``aten.convolution_backward`` of a direct, ungrouped convolution) is decided here too,
asking ``cpu_host.conv_backward_skips_padding``: torch-mlir says it as a direct convolution of the input by
grad_output (``_weight_gradient``), which ``mark`` then finds by the same key. Transposed convolutions never multiply
padding on the device (``conv._conv_transposed``); the backward of a grouped, transposed, dilated, 1-d
or 3-d convolution is not decided here: torch-mlir cannot import it, so ``compiler/opaque_conv.py`` cuts it whole, asks CPU
when it cuts it and runs the eager kernel's program with the answers.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import torch

from device_impl.compiler.ir import Graph

log = logging.getLogger("torch_neuronx.compiler")

aten = torch.ops.aten


# The FX ops of a direct or transposed convolution whose first nine arguments are aten.convolution's (_convolution,
# which Dynamo keeps when it is called, adds cuDNN's switches after them).
_CONVOLUTIONS = frozenset({aten.convolution.default, aten._convolution.default})


def _key(x_shape, w_shape, stride, padding, dilation, groups: int, dtype: str) -> str:
    return json.dumps([list(x_shape), list(w_shape), list(stride), list(padding), list(dilation), int(groups),
                       dtype])


def decide(gm: torch.fx.GraphModule) -> dict[str, bool]:
    """{key: CPU skips padding} for each padded direct convolution of ``gm`` (``_CONVOLUTIONS``) and each direct
    convolution's weight gradient (``_weight_gradient``; none: an empty dict); a key CPU answers both ways is False."""
    from device_impl.kernels import cpu_host

    decided: dict[str, bool] = {}

    def record(key: str, skip: bool) -> None:
        if decided.get(key, skip) != skip:
            log.info("convolutions of key %s: CPU skips padding for one problem, not another; both multiply it", key)
            skip = False
        decided[key] = skip

    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is aten.convolution_backward.default:
            answer = _weight_gradient(node)
            if answer is not None:
                record(*answer)
            continue
        if node.target not in _CONVOLUTIONS:
            continue
        x, w, _, stride, padding, dilation, transposed, _, groups = node.args[:9]
        x, w = _val(x), _val(w)
        if transposed or x is None or w is None or not any(padding):
            continue
        key = _key(x.shape, w.shape, stride, padding, dilation, groups, str(x.dtype).replace("torch.", ""))
        try:
            skip = cpu_host.conv_skips_padding(x, w, list(stride), list(padding), list(dilation), int(groups))
        except RuntimeError:  # arguments CPU refuses: the program raises before computing (parity.refusal)
            continue
        record(key, skip)
    return decided


def _val(node: Any) -> torch.Tensor | None:
    val = getattr(node, "meta", {}).get("val")
    return val if isinstance(val, torch.Tensor) else None


def _weight_gradient(node: torch.fx.Node) -> tuple[str, bool] | None:
    """(key, CPU's backward-weights kernel skips padding) of a direct, ungrouped ``convolution_backward`` that asks
    for grad_weight; None for any other. torch-mlir says that gradient as a direct convolution of the input with
    batch and channels swapped ([C_in, N, spatial]) by grad_output as its weight ([C_out, N, spatial]), the forward's
    dilation as its window stride, its stride as the rhs dilation and its padding: ``_key`` of that convolution.
    (The input gradient is a transposed convolution on the device, which never multiplies padding, as CPU's
    col2im and oneDNN's backward-data kernels do not.)"""
    from device_impl.kernels import cpu_host

    go, x, w, _, stride, padding, dilation, transposed, output_padding, groups, mask = node.args[:11]
    go, x, w = _val(go), _val(x), _val(w)
    if transposed or groups != 1 or go is None or x is None or w is None or not any(padding) or not mask[1]:
        return None
    try:
        _, skip = cpu_host.conv_backward_skips_padding(go, x, w, list(stride), list(padding), list(dilation), False,
                                                       list(output_padding), 1, list(mask[:2]))
    except RuntimeError:
        return None
    swap = lambda t: (t.shape[1], t.shape[0], *t.shape[2:])  # noqa: E731
    return _key(swap(x), swap(go), dilation, padding, stride, 1, str(x.dtype).replace("torch.", "")), skip


def _stablehlo_key(graph: Graph, op: Any) -> str | None:
    """``_key`` of a StableHLO direct convolution in PyTorch's layout ([b, f, spatial], [o, i, spatial]), with one
    padding on both sides; None for any other (a transposed convolution's lhs dilation, the backward's layouts)."""
    attrs = op.attrs
    layouts = attrs.get("dimension_numbers", {}).get("layouts")
    if not layouts or len(layouts) != 3:
        return None
    nsp = len(layouts[0]) - 2
    spatial = [str(i) for i in range(nsp)]
    if layouts != [["b", "f", *spatial], ["o", "i", *spatial], ["b", "f", *spatial]]:
        return None
    if any(v != 1 for v in attrs.get("lhs_dilation", [1] * nsp)) or any(attrs.get("window_reversal", [])) \
            or attrs.get("batch_group_count", 1) != 1:
        return None
    padding = attrs.get("padding", [[0, 0]] * nsp)
    if any(lo != hi for lo, hi in padding):
        return None
    x, w = graph.types[op.operands[0]], graph.types[op.operands[1]]
    return _key(x.shape, w.shape, attrs.get("window_strides", [1] * nsp), [lo for lo, _ in padding],
                attrs.get("rhs_dilation", [1] * nsp), attrs.get("feature_group_count", 1), x.dtype)


def mark(graph: Graph, decided: dict[str, bool]) -> Graph:
    """Record ``decided``'s answer on each StableHLO convolution it names (the attribute ``skip_padding``)."""
    if not decided:
        return graph
    for op in graph.ops:
        if op.name == "convolution":
            key = _stablehlo_key(graph, op)
            if key is not None and key in decided:
                op.attrs["skip_padding"] = decided[key]
    return graph
