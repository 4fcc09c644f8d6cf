"""Reflection/replication padding and im2col cut whole (compiler/opaque.py's mechanism): the eager kernels' moves, one step.

``moves`` says a pad as one concatenation of the input and its reversed or broadcast edge slices per padded dim,
so a 2-d or 3-d pad was two or three concatenate steps, each waiting for the stores of the one before (the HBM
latency between steps: compiled ``F.pad(x, (1, 1, 1, 0), mode='reflect')`` of a [2, 6, 5, 2] float32 input took
1.167 us against the eager kernel's 1.090, benches/compiled_vs_eager_specs.py). The eager kernel moves every box of
the padded dims' pieces straight from the input (``kernels.shape.pad._Pad.forward_program``): cut whole, the call is
one step running those moves, the eager kernel's instructions less its launch.

im2col likewise (below). Reflection padding's backward (``_Pad.backward_program``: a fill and CPU's order of adds
per padded dim, innermost first, through float32 scratch) only where it is cheaper: moves' sum of edge blocks beats
the eager kernel in 2-d (1.513 us against 2.574) and in bfloat16 3-d (1.635 against 2.111), loses in float32 3-d
(2.289 against 2.203), so each call is costed both ways when it is compiled (``costed.cut_wins``).

A call the eager kernel refuses (its checks: ``_Pad.meta``/``backward_meta``), or of a dtype compiled programs only
store (float64, complex), keeps moves' decomposition (``DECOMPOSITIONS`` passes it on), so its error or its
fallback is what it was.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

# the dtypes whose pads run as the eager kernel's moves (float64 and complex are storage-only in compiled programs;
# bool is refused by the kernel): the backward is the floating ones' only (the eager kernel's COMPUTE_DTYPES)
WHOLE_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16,
                          torch.int8, torch.uint8})
BACKWARD_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})
_MODES = {"reflection": "reflect", "replication": "replicate"}


def _kernel(mode: str, n: int):
    from device_impl.kernels.shape.pad import _Pad

    return _Pad(_MODES[mode], n)


def _static(padding: Any) -> list[int] | None:
    if isinstance(padding, (list, tuple)) and all(isinstance(p, int) and not isinstance(p, bool) for p in padding):
        return [int(p) for p in padding]
    return None


def pad_whole(mode: str, n: int, x: Any, padding: Any) -> bool:
    """Is ``{mode}_pad{n}d(x, padding)`` (a tensor or fake tensor) compiled as the eager kernel's moves?"""
    padding = _static(padding)
    if not isinstance(x, torch.Tensor) or padding is None or x.dtype not in WHOLE_DTYPES:
        return False
    try:
        _kernel(mode, n).meta(x, padding)
    except (RuntimeError, NotImplementedError):
        return False
    return True


def pad_backward_whole(mode: str, n: int, grad: Any, x: Any, padding: Any) -> bool:
    """Is ``{mode}_pad{n}d_backward(grad, x, padding)`` compiled as the eager kernel's program? Only calls the eager
    kernel takes, and only where its program's modelled device time beats moves' sum of edge blocks, costed at
    compile time (``costed.cut_wins``): the sweep's float32 3-d case cut (2.203 us against 2.289), its 2-d one
    decomposed (1.513 against 2.574)."""
    from device_impl.compiler import costed

    static = _static(padding)
    if not isinstance(x, torch.Tensor) or not isinstance(grad, torch.Tensor) or static is None \
            or grad.dtype not in BACKWARD_DTYPES or x.dtype != grad.dtype or x.numel() == 0:
        return False
    try:
        _kernel(mode, n).backward_meta(grad, x, static)
    except (RuntimeError, NotImplementedError):
        return False
    return costed.cut_wins(getattr(aten, f"{mode}_pad{n}d_backward").default, (grad, x, static))


def _meta(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _pad(mode: str, n: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``{mode}_pad{n}d``: operand (input), result (the padded tensor); the padding as an option."""
        a = _bound(node)
        if not pad_whole(mode, n, _meta(a["self"]), a["padding"]):
            return None
        return [a["self"]], {0: 0}, {"mode": mode, "n": n, "padding": _static(a["padding"])}

    return describe


def _pad_backward(mode: str, n: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``{mode}_pad{n}d_backward``: operand (grad_output), result grad_input (self read for its shape)."""
        a = _bound(node)
        if not pad_backward_whole(mode, n, _meta(a["grad_output"]), _meta(a["self"]), a["padding"]):
            return None
        return [a["grad_output"]], {0: 0}, {"mode": mode, "n": n, "padding": _static(a["padding"])}

    return describe


def _run_pad(step: dict, program: Any) -> Callable:
    """The eager kernel's moves (``_Pad.forward_program``) from the input into the step's result."""
    o = step["attrs"]
    pad = _kernel(o["mode"], o["n"])
    pads = pad.pads(o["padding"])

    def run(nc, env) -> None:
        x = _operand_array(env, program, step["operands"][0])
        out = env.access(step["results"][0])
        if out.size:
            pad.forward_program(nc, out, x, pads)

    return run


def run_pad_backward(step: dict, program: Any, mode: str | None = None) -> Callable:
    """The eager kernel's backward (``_Pad.backward_program``), its float32 folds in the step's own scratch; ``mode``
    where the step's options do not name it (opaque_cnn's replication-padding backward)."""
    from device_impl.engine.dtypes import FP32

    o = step["attrs"]
    pad = _kernel(mode or o["mode"], o["n"])
    pads = pad.pads(o["padding"])

    def run(nc, env) -> None:
        g = _operand_array(env, program, step["operands"][0])
        gi = env.access(step["results"][0])
        if gi.size:
            pad.backward_program(nc, gi, g, pads, lambda shape: env.scratch_array(shape, FP32))

    return run


# -- im2col: the zero-padded input's windows ----------------------------------------------------------------------

IM2COL_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


def _pairs(*values: Any) -> list[list[int]] | None:
    pairs = [_static(v) for v in values]
    return pairs if all(p is not None and len(p) == 2 for p in pairs) else None


def im2col_whole(x: Any, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> bool:
    """Is ``im2col(x, ...)`` compiled as the eager kernel's program (``kernels.spatial.fold.im2col_program``: the
    input padded in scratch, then one strided copy per kernel offset)? moves' decomposition is the same copies after
    a pad step and a concatenate step, each waiting for the last one's stores (the sweep's 2x2 padded case: 1.342 us
    against the eager kernel's 1.217)."""
    pairs = _pairs(kernel_size, dilation, padding, stride)
    if not isinstance(x, torch.Tensor) or pairs is None or x.dtype not in IM2COL_DTYPES or x.dim() not in (3, 4) \
            or x.numel() == 0 or any(v < 0 for v in pairs[2]) or any(v <= 0 for p in (pairs[0], pairs[1], pairs[3])
                                                                    for v in p):
        return False
    try:
        out = torch.ops.aten.im2col.default(torch.empty(x.shape, dtype=x.dtype, device="meta"), *pairs)
    except (RuntimeError, ValueError):
        return False
    return out.numel() > 0


def _im2col(node: torch.fx.Node) -> Any:
    """``im2col``: operand (input), the columns; the kernel size, dilation, padding and stride as options."""
    a = _bound(node)
    args = [a[k] for k in ("kernel_size", "dilation", "padding", "stride")]
    if not im2col_whole(_meta(a["self"]), *args):
        return None
    kernel_size, dilation, padding, stride = _pairs(*args)
    return [a["self"]], {0: 0}, {"kernel_size": kernel_size, "dilation": dilation, "padding": padding,
                                 "stride": stride}


def _run_im2col(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``im2col_program``), its padded input in the step's own scratch."""
    from device_impl.kernels.spatial.fold import im2col_program

    o = step["attrs"]

    def run(nc, env) -> None:
        x = _operand_array(env, program, step["operands"][0])
        out = env.access(step["results"][0])
        if out.size:
            im2col_program(nc, env.scratch, out, x, o["kernel_size"], o["dilation"], o["padding"], o["stride"])

    return run


# FX target -> (step kind, describer): merged into opaque.CUTTERS. Replication padding's backward is opaque_cnn's.
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.im2col.default: ("im2col", _im2col),
    **{getattr(aten, f"{mode}_pad{n}d").default: ("edge_pad", _pad(mode, n))
       for mode in _MODES for n in (1, 2, 3)},
    **{getattr(aten, f"reflection_pad{n}d_backward").default: ("reflection_pad_backward",
                                                               _pad_backward("reflection", n)) for n in (1, 2, 3)},
}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {
    "edge_pad": _run_pad,
    "reflection_pad_backward": run_pad_backward,
    "im2col": _run_im2col,
}

# step kind -> how the static replay runs it (replay.STEP_KINDS): DMA moves of fixed boxes (the forward, a plan as
# concatenate's); fills and VectorE adds of fixed slices (the backward, as unfold_backward's)
STEP_KINDS: dict[str, str] = {"edge_pad": "plan", "reflection_pad_backward": "tile", "im2col": "tile"}


def whole_or(whole: Callable[..., bool], earlier: Callable | None) -> Callable:
    """A decomposition keeping the calls ``whole`` takes (NotImplemented: AOTAutograd leaves the op for
    ``opaque.cut``); the others go to ``earlier``, the decomposition the table had before (moves', numerics'), or
    keep the op where it had none."""
    def decomposition(*args: Any, **kwargs: Any) -> Any:
        if whole(*args, **kwargs) or earlier is None:
            return NotImplemented
        return earlier(*args, **kwargs)

    return decomposition


# op -> which of its calls are cut whole
WHOLE_CALLS: dict[Any, Callable[..., bool]] = {
    **{getattr(aten, f"{mode}_pad{n}d").default: (lambda x, padding, mode=mode, n=n: pad_whole(mode, n, x, padding))
       for mode in _MODES for n in (1, 2, 3)},
    **{getattr(aten, f"reflection_pad{n}d_backward").default:
       (lambda g, x, padding, n=n: pad_backward_whole("reflection", n, g, x, padding)) for n in (1, 2, 3)},
    aten.im2col.default: im2col_whole,
}


def decompositions(earlier: dict) -> dict[Any, Callable]:
    """AOTAutograd decompositions (merged into backend's table after the others, which it passes as ``earlier``):
    the calls cut whole reach the graph, the others keep their earlier decomposition."""
    return {op: whole_or(whole, earlier.get(op)) for op, whole in WHOLE_CALLS.items()}
