"""Factories whose eager kernel is one tile program, cut whole (compiler/opaque.py's mechanism): linspace.

PyTorch's decomposition of linspace is an iota, a compare with ``steps // 2``, two multiply-adds and a select,
which compiled to VectorE and ScalarE passes over the index (less, multiply, add, a copy, subtract, select: 1.46 us
against the eager kernel's 1.18 at 226 values, benches/compiled_vs_eager_specs.py). The eager kernel computes both
halves' fused multiply-adds in one GpSimd program per index tile (``kernels.random.factories.linspace_float32``, CPU's
formula and bits). Cut whole, the call is one step running that program into its result: the eager kernel's
instructions less the launch overhead.

Every dtype the eager kernel computes on the device (``WHOLE_DTYPES``), with at least two steps (steps 0 and 1 are an
empty result and a fill, which keep the decomposition). bfloat16 and float16 must be cut: the decomposition computes
in float32 and rounds once, where CPU's kernel rounds every operation to the dtype (compiled bfloat16
``linspace(5, -5, 153)`` was up to 12 ULP from CPU's near zero; the op suite's bfloat16 linspace spec found it). ``DECOMPOSITIONS`` keeps those calls whole while AOTAutograd traces (NotImplemented: the op
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


# the dtypes whose linspace runs as the eager kernel's program (kernels.random.factories.linspace_program); bool
# (CPU refuses it), float64 and complex (storage-only in compiled programs) keep the decomposition
WHOLE_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16, torch.uint8, torch.int8, torch.int16,
                          torch.int32, torch.int64})


def linspace_whole(start: Any, end: Any, steps: Any, dtype: torch.dtype | None) -> bool:
    """Is ``linspace(start, end, steps, dtype=dtype)`` compiled as the eager kernel's program?"""
    return (dtype or torch.get_default_dtype()) in WHOLE_DTYPES and _number(start) and _number(end) \
        and isinstance(steps, int) and not isinstance(steps, bool) and steps >= 2


def _linspace(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
    """No operands; the result; start, end and steps as options."""
    a = _bound(node)
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or not linspace_whole(a["start"], a["end"], a["steps"], out.dtype):
        return None
    return [], {0: 0}, {"start": a["start"], "end": a["end"], "steps": int(a["steps"]),
                        "dtype": str(out.dtype).removeprefix("torch.")}  # a name: the attrs go into the NEFF's JSON


def _run_linspace(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``linspace_program``) into the step's result, start and end converted as the
    eager kernel converts them."""
    from device_impl.kernels.random.factories import linspace_program
    from device_impl.kernels.scalars import checked_convert

    attrs = step["attrs"]
    (result,) = step["results"]
    dtype = getattr(torch, attrs["dtype"])
    start, end = checked_convert(attrs["start"], dtype), checked_convert(attrs["end"], dtype)

    def run(nc, env) -> None:
        linspace_program(nc, env.access(result), dtype, start, end, attrs["steps"])

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
