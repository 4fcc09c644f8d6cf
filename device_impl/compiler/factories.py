"""Factories whose eager kernel is one tile program, cut whole (compiler/opaque.py's mechanism): linspace of float32.

PyTorch's decomposition of linspace is an iota, a compare with ``steps // 2``, two multiply-adds and a select,
which compiled to VectorE and ScalarE passes over the index (less, multiply, add, a copy, subtract, select: 1.46 us
against the eager kernel's 1.18 at 226 values, benches/compiled_vs_eager_specs.py). The eager kernel computes both
halves' fused multiply-adds in one GpSimd program per index tile (``kernels.random.factories.linspace_float32``, CPU's
formula and bits). Cut whole, the call is one step running that program into its result: the eager kernel's
instructions less the launch overhead.

Only float32 with at least two steps (steps 0 and 1 are an empty result and a fill; the other dtypes keep the
decomposition, as before). ``DECOMPOSITIONS`` keeps those calls whole while AOTAutograd traces (NotImplemented: the op
stays for ``opaque.cut``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound

aten = torch.ops.aten


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def linspace_whole(start: Any, end: Any, steps: Any, dtype: torch.dtype | None) -> bool:
    """Is ``linspace(start, end, steps, dtype=dtype)`` compiled as the eager kernel's float32 program?"""
    return (dtype or torch.get_default_dtype()) == torch.float32 and _number(start) and _number(end) \
        and isinstance(steps, int) and not isinstance(steps, bool) and steps >= 2


def _linspace(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """No operands; the result; start, end and steps as options."""
    a = _bound(node)
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or not linspace_whole(a["start"], a["end"], a["steps"], out.dtype):
        return None
    return [], {0: 0}, {"start": a["start"], "end": a["end"], "steps": int(a["steps"])}


def _run_linspace(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``linspace_float32``) into the step's result, start and end converted as the
    eager kernel converts them."""
    from device_impl.kernels.random.factories import linspace_float32
    from device_impl.kernels.scalars import checked_convert

    attrs = step["attrs"]
    (result,) = step["results"]
    start, end = checked_convert(attrs["start"], torch.float32), checked_convert(attrs["end"], torch.float32)

    def run(nc, env) -> None:
        linspace_float32(nc, env.access(result), start, end, attrs["steps"])

    return run


def _linspace_decomposition(start: Any, end: Any, steps: int, *, dtype: torch.dtype | None = None,
                            layout: Any = None, device: Any = None, pin_memory: Any = None) -> Any:
    """PyTorch's decomposition, except for the calls cut whole (``linspace_whole``)."""
    if linspace_whole(start, end, steps, dtype):
        return NotImplemented
    return torch._decomp.decomposition_table[aten.linspace.default](
        start, end, steps, dtype=dtype, layout=layout, device=device, pin_memory=pin_memory)


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {aten.linspace.default: ("linspace", _linspace)}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {"linspace": _run_linspace}

# step kind -> how the static replay runs it (replay.STEP_KINDS): a GpSimd program of the result's size, shape-only
STEP_KINDS: dict[str, str] = {"linspace": "tile"}

# AOTAutograd decompositions (merged into backend's table after the core ones)
DECOMPOSITIONS: dict[Any, Callable] = {aten.linspace.default: _linspace_decomposition}
