"""Indexing ops cut whole (compiler/opaque.py's mechanism), each the eager kernel's program as one step:
``embedding_dense_backward`` (with scale_grad_by_freq always, without it where costed cheaper), ``index_copy``, and
``gather`` where costed cheaper (``costed.cut_wins``).

Issue 21: "every op's compiled device time <= its eager kernel's".

embedding_dense_backward: PyTorch's decomposition with ``scale_grad_by_freq`` makes scratch tensors the kernel does
not: a zero-filled count per row and an index_put of ones into it, a gather of each index's count, a divide, a
zero-filled result and an index_put of the scaled rows (11 steps, each a round trip through the scratch arena: 3.47 us
against the eager kernel's 2.15 for a [5, 16] gradient into 7 rows). The eager kernel's program
(``kernels.indexing.embedding.dense_backward_program``) counts and adds every row in one indirect pass each on
GpSimd, in index order with CPU's rounding; cut whole, the step runs it on the step's HBM arrays, its scratch from
the environment's (``env.scratch``). ``dense_backward_whole`` is also what numerics' decomposition asks before
returning NotImplemented, so a refused call keeps PyTorch's decomposition.

index_copy: PyTorch's decomposition is an index_put, which compiled to a fused step wrapping the index and a
scatter step, the scatter waiting for the fused step's stores (the sweep's case: 1.526 us against the eager kernel's
1.446, benches/compiled_vs_eager_specs.py). The eager kernel addresses the rows from the index tensor itself
(``kernels.indexing.index_put.index_scatter_program``, "assign"): cut whole, the call is one step running that
program, with the eager kernel's bits, its range check and CPU's IndexError for an index out of range. Only calls the
eager kernel takes (its checks: ``_index_add_checks``, an int64 index) with tensors of at least one dim and of dtypes
compiled programs compute; the others keep PyTorch's decomposition (``decompositions`` passes them on), so their
errors are what they were.

gather: torch-mlir imports it as a StableHLO gather whose index vectors are the index tensor concatenated with an
iota per other dim (iota and concatenate steps before the gather step). The eager program (``gather_program``)
addresses the rows from the index itself: cut whole it beats that for the sweep's float32 [2, 2, 513] case (1.513
against 1.580 us) but loses to it for the bfloat16 [513] one (1.513 against 1.343), so each call is costed both ways
when compiled and cut only where the cut is modelled faster.

A describer refuses (returns None) what it does not take.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def dense_backward_whole(grad: Any, indices: Any, num_weights: Any, scale_grad_by_freq: Any,
                         padding_idx: Any = -1) -> bool:
    """Whether an ``embedding_dense_backward`` of these operands (fake tensors or FX metas) is cut whole: a float
    gradient of at least one dim whose leading dims hold one row per index, int32/int64 indices, a non-empty result;
    with ``scale_grad_by_freq`` always (its decomposition's count tensor, index_puts and gather took 11 steps, 1.61x
    the kernel), without it only where the kernel's program is modelled faster than the decomposition's one zero fill
    and one scatter step (``costed.cut_wins``): the decomposition wins from a few dozen rows up (a [300, 64] gradient
    into 50 rows: 4.46 us against 7.00), the program for few (the sweep's bfloat16 [2, 3, 16] into 129 rows: 1.705
    against 2.466). Other calls keep numerics' decomposition (CPU's refusal of other index dtypes first)."""
    from device_impl.compiler import costed

    if not (isinstance(grad, torch.Tensor) and isinstance(indices, torch.Tensor)) or isinstance(num_weights, bool) \
            or not isinstance(num_weights, int) or not isinstance(scale_grad_by_freq, bool) \
            or isinstance(padding_idx, bool) or not isinstance(padding_idx, int):
        return False
    if not (grad.dtype in _FLOATS and grad.dim() >= 1 and indices.dtype in (torch.int64, torch.int32)
            and num_weights > 0 and grad.shape[-1] > 0 and grad.numel() == indices.numel() * grad.shape[-1]):
        return False
    return scale_grad_by_freq or costed.cut_wins(aten.embedding_dense_backward.default,
                                                 (grad, indices, num_weights, padding_idx, False))


def _dense_backward(node: torch.fx.Node) -> Any:
    """``embedding_dense_backward``: operands (grad_output, indices), result the weight's gradient; options
    padding_idx and scale_grad_by_freq (the result's rows, num_weights, are its shape)."""
    a = _bound(node)
    grad, indices = a["grad_output"], a["indices"]
    metas = [t.meta.get("val") if isinstance(t, torch.fx.Node) else None for t in (grad, indices)]
    out = node.meta.get("val")
    num_weights = a["num_weights"]
    if not dense_backward_whole(*metas, num_weights, a["scale_grad_by_freq"], a["padding_idx"]) \
            or not isinstance(out, torch.Tensor) \
            or out.dtype != metas[0].dtype or tuple(out.shape) != (num_weights, metas[0].shape[-1]):
        return None
    return [grad, indices], {0: 0}, {"padding_idx": int(a["padding_idx"]), "scale": bool(a["scale_grad_by_freq"])}


def _run_dense_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``kernels.indexing.embedding.dense_backward_program``) into the step's result."""
    from device_impl.kernels.indexing.embedding import dense_backward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        grad, indices = (_operand_array(env, program, v) for v in step["operands"])
        dense_backward_program(nc, env.scratch, grad, indices, env.access(step["results"][0]), o["padding_idx"],
                               o["scale"])

    return run


# the dtypes whose rows the eager programs move in a compiled program (float64 and complex are storage-only there)
WHOLE_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16,
                          torch.int8, torch.uint8, torch.bool})


def _meta(node: Any) -> Any:
    meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, torch.Tensor) else None


def gather_whole(x: Any, dim: Any, index: Any, sparse_grad: Any = False) -> bool:
    """Is ``gather(x, dim, index)`` (tensors or fake tensors) compiled as the eager kernel's program? Only calls the
    eager kernel takes, and only where its program's modelled device time beats torch-mlir's gather (an iota per other
    dim and a concatenate of index vectors before the gather step), costed at compile time (``costed.cut_wins``): the
    float32 [2, 2, 513] case cut 1.513 us against 1.580, the bfloat16 one decomposed 1.343 against 1.513."""
    from device_impl.compiler import costed
    from device_impl.kernels.indexing.gather_scatter import _gather_checks

    if not isinstance(x, torch.Tensor) or not isinstance(index, torch.Tensor) or not isinstance(dim, int) \
            or sparse_grad or x.dtype not in WHOLE_DTYPES or x.dim() == 0 or index.dim() == 0 or index.numel() == 0:
        return False
    try:
        _gather_checks(x, dim, index)
    except (RuntimeError, IndexError):
        return False
    return costed.cut_wins(aten.gather.default, (x, dim, index))


def index_copy_whole(x: Any, dim: Any, index: Any, source: Any) -> bool:
    """Is ``index_copy(x, dim, index, source)`` compiled as the eager kernel's program? Not where source is
    broadcast (a stride 0 over more than one element): PyTorch's index_fill decomposes to an index_copy of its value
    expanded, which the decomposition's fused step computes from the one value, where the eager program would move
    every slice of the expanded source (x.index_fill_(-1, i, 2) of [.., 513]: 1.83 us against 1.60)."""
    from device_impl.kernels.indexing.index_put import _index_add_checks

    if not all(isinstance(t, torch.Tensor) for t in (x, index, source)) or not isinstance(dim, int) \
            or x.dtype not in WHOLE_DTYPES or index.dtype != torch.int64 or x.dim() == 0 or source.dim() == 0:
        return False
    if any(stride == 0 and size > 1 for stride, size in zip(source.stride(), source.shape)):
        return False
    try:
        _index_add_checks(x, dim, index, source, "index_copy_")
    except (RuntimeError, IndexError):
        return False
    return True


def _gather(node: torch.fx.Node) -> Any:
    """``gather``: operands (self, index), the result; dim (non-negative) as an option."""
    a = _bound(node)
    x, index = _meta(a["self"]), _meta(a["index"])
    if not gather_whole(x, a["dim"], index, a.get("sparse_grad", False)):
        return None
    return [a["self"], a["index"]], {0: 0}, {"dim": int(a["dim"]) % x.dim()}


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


def _run_gather(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``gather_program``) into the step's result."""
    from device_impl.kernels.indexing.gather_scatter import gather_program

    x, index = step["operands"]
    (result,) = step["results"]
    dim = step["attrs"]["dim"]

    def run(nc, env) -> None:
        gather_program(nc, env.access(result), _operand_array(env, program, x), _operand_array(env, program, index),
                       dim)

    return run


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.embedding_dense_backward.default: ("embedding_dense_backward", _dense_backward),
    aten.index_copy.default: ("index_copy", _index_copy),
    aten.gather.default: ("gather_whole", _gather),
}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {"embedding_dense_backward": _run_dense_backward, "index_copy": _run_index_copy,
                                "gather_whole": _run_gather}

# step kind -> how the static replay runs it (replay.STEP_KINDS): embedding_dense_backward's program reads the
# indices' range back and redirects every index to a dummy row where one is out of range, so its instructions depend
# on the values ("data"); index_copy's indirect DMA rows' instructions follow from the shapes (the index count and
# row width), as the index_add step's; the range check's raise is its only branch on values ("tile")
STEP_KINDS: dict[str, str] = {"embedding_dense_backward": "data", "index_copy": "tile", "gather_whole": "tile"}

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
