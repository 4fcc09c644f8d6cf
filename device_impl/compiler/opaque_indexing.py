"""embedding_dense_backward with scale_grad_by_freq cut whole (compiler/opaque.py's mechanism): the eager kernel's
program as one step.

Issue 21: "every op's compiled device time <= its eager kernel's". PyTorch's decomposition of
``embedding_dense_backward`` with ``scale_grad_by_freq`` makes scratch tensors the kernel does not: a zero-filled
count per row and an index_put of ones into it, a gather of each index's count, a divide, a zero-filled result and
an index_put of the scaled rows (11 steps, each a round trip through the scratch arena: 3.47 us against the eager
kernel's 2.15 for a [5, 16] gradient into 7 rows). The eager kernel's program
(``kernels.indexing.embedding.dense_backward_program``) counts and adds every row in one indirect pass each on
GpSimd, in index order with CPU's rounding; cut whole, the step runs it on the step's HBM arrays, its scratch from
the environment's (``env.scratch``).

A describer refuses (returns None) what it does not take; ``dense_backward_whole`` is also what numerics'
decomposition asks before returning NotImplemented, so a refused call keeps PyTorch's decomposition.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def dense_backward_whole(grad: Any, indices: Any, num_weights: Any, scale_grad_by_freq: Any) -> bool:
    """Whether an ``embedding_dense_backward`` of these operands (fake tensors or FX metas) is cut whole: with
    ``scale_grad_by_freq``, a float gradient of at least one dim whose leading dims hold one row per index,
    int32/int64 indices, a non-empty result. Other calls keep numerics' decomposition (CPU's refusal of other index
    dtypes first). Without the scaling the decomposition is one zero fill and one scatter step, faster than the
    kernel's program from a few dozen rows up (a [300, 64] gradient into 50 rows: 4.46 us against 7.00; a [5, 16]
    one into 7: 2.20 against 1.63), so those calls keep it."""
    if not (isinstance(grad, torch.Tensor) and isinstance(indices, torch.Tensor)) or isinstance(num_weights, bool) \
            or not isinstance(num_weights, int) or scale_grad_by_freq is not True:
        return False
    return grad.dtype in _FLOATS and grad.dim() >= 1 and indices.dtype in (torch.int64, torch.int32) \
        and num_weights > 0 and grad.shape[-1] > 0 and grad.numel() == indices.numel() * grad.shape[-1]


def _dense_backward(node: torch.fx.Node) -> Any:
    """``embedding_dense_backward``: operands (grad_output, indices), result the weight's gradient; options
    padding_idx and scale_grad_by_freq (the result's rows, num_weights, are its shape)."""
    a = _bound(node)
    grad, indices = a["grad_output"], a["indices"]
    metas = [t.meta.get("val") if isinstance(t, torch.fx.Node) else None for t in (grad, indices)]
    out = node.meta.get("val")
    num_weights = a["num_weights"]
    if not dense_backward_whole(*metas, num_weights, a["scale_grad_by_freq"]) or not isinstance(out, torch.Tensor) \
            or out.dtype != metas[0].dtype or tuple(out.shape) != (num_weights, metas[0].shape[-1]):
        return None
    return [grad, indices], {0: 0}, {"padding_idx": int(a["padding_idx"]), "scale": True}


def _run_dense_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``kernels.indexing.embedding.dense_backward_program``) into the step's result."""
    from device_impl.kernels.indexing.embedding import dense_backward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        grad, indices = (_operand_array(env, program, v) for v in step["operands"])
        dense_backward_program(nc, env.scratch, grad, indices, env.access(step["results"][0]), o["padding_idx"],
                               o["scale"])

    return run


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.embedding_dense_backward.default: ("embedding_dense_backward", _dense_backward),
}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {"embedding_dense_backward": _run_dense_backward}

# step kind -> how the static replay runs it (replay.STEP_KINDS): the program reads the indices' range back and
# redirects every index to a dummy row where one is out of range, so its instructions depend on the values
STEP_KINDS: dict[str, str] = {"embedding_dense_backward": "data"}
