"""Convolution backward cut whole (compiler/opaque.py's mechanism) where torch-mlir cannot import it, or where the
eager kernel's program is modelled faster than the imported one (``costed.cut_wins``).

torch-mlir lowers ``aten.convolution_backward`` to StableHLO only for a direct, ungrouped, undilated 2-d convolution
(then ``conv_padding`` decides its weight gradient's padding products). A grouped one fails its verifier ("expects
input feature dimension (2) / feature_group_count = kernel input feature dimension (2)"), a transposed, dilated,
1-d or 3-d one leaves 'torch.constant.int' unconverted; each failure sent the whole backward graph to eager, op by op (every
other op of the graph unfused with it). One torch-mlir imports becomes two StableHLO convolutions (the input's and the
weight's gradients) and a reduction for the bias, each a step with its own stores: for a plain 3x3 training step that
cost more than the eager kernel's one launch body, so it is costed both ways when compiled. Such a call is cut out of the FX graph here and spliced back as one
``convolution_backward`` step whose runner runs the eager kernel's launch body
(``kernels.spatial.conv_backward.backward_program``) on the step's HBM arrays: the eager kernel's results, bit for
bit, at what its launch costs less the launch overhead, and the rest of the graph compiles.

Whether CPU's backward kernels multiply the padding (``cpu_host.conv_backward_skips_padding``: oneDNN's choice per
problem, its strides included) is asked of the FX metas when the graph is cut, as ``conv_padding`` asks for the
convolutions torch-mlir imports; the answer is an option of the step, so the compile-cache keys cover it.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler import costed
from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _meta(node: Any) -> torch.Tensor | None:
    meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, torch.Tensor) else None


def imports(nsp: int, transposed: bool, groups: int, dilation: list[int]) -> bool:
    """Whether torch-mlir lowers this ``convolution_backward`` to StableHLO (a direct, ungrouped, undilated 2-d one)."""
    return nsp == 2 and not transposed and groups == 1 and all(d == 1 for d in dilation)


def _convolution_backward(node: torch.fx.Node) -> Any:
    """``convolution_backward`` that torch-mlir cannot import (``imports``): operands (grad_output, input, weight),
    results the gradients ``output_mask`` asks for, in order; floating operands of one dtype with elements (an
    empty one keeps the graph's eager run, whose kernel answers CPU's Empty backend)."""
    from device_impl.kernels import cpu_host
    from device_impl.kernels.spatial.conv import _conv_params

    a = _bound(node)
    go, x, w = _meta(a["grad_output"]), _meta(a["input"]), _meta(a["weight"])
    if go is None or x is None or w is None or x.dtype not in _FLOATS or {go.dtype, w.dtype} != {x.dtype}:
        return None
    if not go.numel() or not x.numel() or not w.numel() or not isinstance(a["transposed"], bool):
        return None
    mask = [bool(m) for m in a["output_mask"]]
    try:
        nsp, stride, padding, dilation, output_padding, groups = _conv_params(
            x, w, a["stride"], a["padding"], a["dilation"], a["transposed"], a["output_padding"], a["groups"])
    except (RuntimeError, TypeError):
        return None
    if not any(mask):
        return None
    if imports(nsp, a["transposed"], groups, dilation) and not costed.cut_wins(
            aten.convolution_backward.default, (go, x, w, a["bias_sizes"], list(stride), list(padding),
                                                list(dilation), a["transposed"], list(output_padding), groups, mask)):
        return None
    try:
        skips = cpu_host.conv_backward_skips_padding(go, x, w, stride, padding, dilation, a["transposed"],
                                                     output_padding, groups, mask[:2])
        # a direct convolution's grad_input that CPU adds into zeros holds no -0.0 (conv._evict)
        from_zero = not a["transposed"] and cpu_host.conv_sums_from_zero(cpu_host.conv_backend(
            x, w, None, stride, padding, dilation, False, output_padding, groups, backward=True))
    except RuntimeError:  # arguments CPU refuses: the graph's eager run raises as CPU does
        return None
    asked = [i for i in range(3) if mask[i]]
    return [a["grad_output"], a["input"], a["weight"]], {item: position for position, item in enumerate(asked)}, {
        "nsp": nsp, "stride": stride, "padding": padding, "dilation": dilation, "transposed": a["transposed"],
        "groups": groups, "mask": mask, "skips": [bool(s) for s in skips], "from_zero": from_zero}


def _run_convolution_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's convolution backward (``kernels.spatial.conv_backward.backward_program``)."""
    from device_impl.kernels.spatial.conv_backward import backward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        go, x, w = (_operand_array(env, program, v) for v in step["operands"])
        results = iter(env.access(v) for v in step["results"])
        gi, gw, gb = (next(results) if asked else None for asked in o["mask"])
        backward_program(nc, env.scratch, go, x, w, gi, gw, gb, o["nsp"], o["stride"], o["padding"], o["dilation"],
                         o["transposed"], o["groups"], tuple(o["skips"]), from_zero=o.get("from_zero", False))

    return run


CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.convolution_backward.default: ("convolution_backward", _convolution_backward),
}

RUNNERS: dict[str, Callable] = {
    "convolution_backward": _run_convolution_backward,
}

# step kind -> how the static replay runs it (replay.STEP_KINDS): the eager backward's tile program, whose instructions
# follow from the shapes and the step's static attributes (its ``skips``, CPU's answer asked when the call was cut)
STEP_KINDS: dict[str, str] = {kind: "tile" for kind in RUNNERS}
