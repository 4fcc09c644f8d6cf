"""index_copy cut whole (compiler/opaque.py's mechanism): the eager kernel's indirect-DMA program, one step.

PyTorch's decomposition of ``index_copy`` is an index_put, which compiled to a fused step wrapping the index and a
scatter step, the scatter waiting for the fused step's stores (the sweep's case: 1.526 us against the eager kernel's
1.446, benches/compiled_vs_eager_specs.py). The eager kernel addresses the rows from the index tensor itself
(``kernels.indexing.index_put.index_scatter_program``, "assign"): cut whole, the call is one step running that
program, with the eager kernel's bits, its range check and CPU's IndexError for an index out of range.

Not gather: cut whole it matched the eager kernel in float32 (1.513 against torch-mlir's 1.580 us) but bfloat16's
compiled gather (1.343) beats the eager kernel (1.513), so a cut needs a per-call choice by modelled cost.

Only calls the eager kernel takes (its checks: ``_index_add_checks``, an int64 index) with tensors of at least one
dim and of dtypes compiled programs compute; the others keep PyTorch's decomposition (``decompositions`` passes them
on), so their errors are what they were.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

# the dtypes whose rows the eager programs move in a compiled program (float64 and complex are storage-only there)
WHOLE_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16,
                          torch.int8, torch.uint8, torch.bool})


def _meta(node: Any) -> Any:
    meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, torch.Tensor) else None


def index_copy_whole(x: Any, dim: Any, index: Any, source: Any) -> bool:
    """Is ``index_copy(x, dim, index, source)`` compiled as the eager kernel's program?"""
    from device_impl.kernels.indexing.index_put import _index_add_checks

    if not all(isinstance(t, torch.Tensor) for t in (x, index, source)) or not isinstance(dim, int) \
            or x.dtype not in WHOLE_DTYPES or index.dtype != torch.int64 or x.dim() == 0 or source.dim() == 0:
        return False
    try:
        _index_add_checks(x, dim, index, source, "index_copy_")
    except (RuntimeError, IndexError):
        return False
    return True


def _index_copy(node: torch.fx.Node) -> Any:
    """``index_copy``: operands (self, index, source), the result; dim (non-negative) as an option."""
    a = _bound(node)
    x, index, source = _meta(a["self"]), _meta(a["index"]), _meta(a["source"])
    if not index_copy_whole(x, a["dim"], index, source):
        return None
    return [a["self"], a["index"], a["source"]], {0: 0}, {"dim": int(a["dim"]) % x.dim()}


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """The same elements at the same addresses (``gather._same_memory``'s test; lowering imports this module, and
    gather imports lowering, so it is not imported from there)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.strides == b.strides \
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def _run_index_copy(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``index_scatter_program``, "assign"): self moved into the result, then source's
    slices written at the index, an index out of range raising CPU's IndexError."""
    from device_impl.kernels.indexing.index_put import index_scatter_program
    from device_impl.kernels.indexing.rows import _bounds_error

    x, index, source = step["operands"]
    (result,) = step["results"]
    dim = step["attrs"]["dim"]
    error = _bounds_error(dim, program.shape(x)[dim], IndexError, "index_copy_(): ")

    def run(nc, env) -> None:
        out, selfv = env.access(result), _operand_array(env, program, x)
        # written into self's own memory (executor.writable_into, ``x.index_copy_``): no copy of self
        index_scatter_program(nc, out, None if _same_memory(out, selfv) else selfv,
                              _operand_array(env, program, index), _operand_array(env, program, source), dim,
                              "assign", error)

    return run


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.index_copy.default: ("index_copy", _index_copy),
}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {"index_copy": _run_index_copy}

# step kind -> how the static replay runs it (replay.STEP_KINDS): indirect DMA rows whose instructions follow from
# the shapes (the index count and row width), as the index_add step's; the range check's raise is the only branch
# on values
STEP_KINDS: dict[str, str] = {"index_copy": "tile"}

# step kinds whose result is their operand 0 with rows overwritten, that operand read nowhere else in the step: an
# in-place call's result may be written into that operand's memory, whose copy the runner then skips
# (executor.Executable._scatters_into, as for a scatter step)
SCATTERS_INTO = frozenset({"index_copy"})


# op -> which of its calls are cut whole
WHOLE_CALLS: dict[Any, Callable[..., bool]] = {aten.index_copy.default: index_copy_whole}


def decompositions(earlier: dict) -> dict[Any, Callable]:
    """AOTAutograd decompositions (merged into backend's table after the others, which it passes as ``earlier``):
    the calls cut whole reach the graph (NotImplemented), the others keep PyTorch's decomposition."""
    from device_impl.compiler.opaque_pads import whole_or

    return {op: whole_or(whole, earlier.get(op)) for op, whole in WHOLE_CALLS.items()}
