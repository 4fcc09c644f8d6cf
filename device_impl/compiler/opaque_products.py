"""Vector and summed products cut whole (compiler/opaque.py's mechanism): dot, vdot and addbmm; reduced-float
baddbmm and mv.

Issue 21: "every op's compiled device time <= its eager kernel's". The eager kernels of these ops
(``kernels.products``) say each as the matrix product it is and run it on TensorE (``matmul._matmul_into``: fp32
PSUM accumulation, ScalarE's evacuation scaling by alpha, VectorE adding beta * bias). Compiled, PyTorch's
decomposition made ``dot`` a multiply and a sum over one partition on VectorE (1.96 us against the eager
kernel's 1.62 us at 257 elements; ``vdot`` 1.61 against 1.35 us, and in bfloat16 the graph ran eagerly at twice
the kernel), and torch-mlir made ``addbmm`` a product into the scratch arena followed by two elementwise steps
re-reading it (3.06 against 2.60 us). Cut whole, each runs as one step of the eager kernel's program: its bits
(TensorE's sum order, CPU's rounding after each batch of addbmm) and its device time less the launch overhead.

baddbmm and mv of bfloat16/float16 tensors likewise (``kernels.matmul``'s batched plan, ``products``' addmv): PyTorch's
decompositions (``bias * beta + bmm * alpha``, ``mv`` as a multiply and a sum) reached the program computing the
product in float32, after a convert of each operand (TensorE's float32 rate a quarter of bfloat16's), or on
VectorE (bfloat16 sweep cases: baddbmm(beta=1, alpha=2.0) [2, 128, 257] x [2, 257, 127] 7.69 us against the eager
kernel's 5.68, mv [5, 129] 1.72 against 1.48). float32 calls keep their decomposition (they do not lose).

A describer refuses (returns None) the calls the eager kernel refuses (shapes, mixed dtypes, dtypes it has no
kernel for): they stay in the graph, which then computes or raises as before.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _meta(node: Any) -> torch.Tensor | None:
    meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, torch.Tensor) else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- dot, vdot ----------------------------------------------------------------------------------------------

def dot_whole(a: Any, b: Any) -> bool:
    """Whether a dot/vdot of these tensors (or their metas) is cut whole: two 1-d tensors of one float dtype and
    length, the calls the eager kernel computes (``products._dot_meta``)."""
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() == 1 and b.dim() == 1 \
        and a.dtype == b.dtype and a.dtype in _FLOATS and a.numel() == b.numel()


def _dot(node: torch.fx.Node) -> Any:
    """``dot``/``vdot`` (real tensors): operands (self, other), result out."""
    a = _bound(node)
    first, second = a["self"], a["tensor"] if "tensor" in a else a["other"]
    if not dot_whole(_meta(first), _meta(second)):
        return None
    return [first, second], {0: 0}, {}


def _run_dot(step: dict, program: Any) -> Callable:
    """The eager kernel's dot (``products._dot_compute``): a [1, K] row times a [K, 1] column on TensorE."""
    from device_impl.kernels.matmul import _matmul_into

    def run(nc, env) -> None:
        x, y = (_operand_array(env, program, v) for v in step["operands"])
        out = env.access(step["results"][0])
        _matmul_into(nc, out.reshape(1, 1), x[None, :], y[:, None])

    return run


def _dot_decomposition(name: str) -> Callable:
    def decompose(self: torch.Tensor, other: torch.Tensor) -> Any:
        """PyTorch's decomposition, except for the calls cut whole (``dot_whole``): NotImplemented keeps the op
        in the traced graph, where ``cut`` takes it."""
        if dot_whole(self, other):
            return NotImplemented
        return torch._decomp.decomposition_table[getattr(aten, name).default](self, other)

    return decompose


# -- addbmm -------------------------------------------------------------------------------------------------

def _addbmm(node: torch.fx.Node) -> Any:
    """``addbmm``: operands (self, batch1, batch2), result out; beta and alpha as options."""
    a = _bound(node)
    bias, b1, b2, out = _meta(a["self"]), _meta(a["batch1"]), _meta(a["batch2"]), _meta(node)
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    if bias is None or b1 is None or b2 is None or out is None or not _number(beta) or not _number(alpha):
        return None
    if not bias.dtype == b1.dtype == b2.dtype == out.dtype or b1.dtype not in _FLOATS or b1.dim() != 3 \
            or b2.dim() != 3 or out.dim() != 2 or b1.shape[0] != b2.shape[0] or b1.shape[2] != b2.shape[1]:
        return None
    try:
        torch.broadcast_shapes(tuple(bias.shape), tuple(out.shape))
    except RuntimeError:
        return None
    return [a["self"], a["batch1"], a["batch2"]], {0: 0}, {"beta": beta, "alpha": alpha}


def _run_addbmm(step: dict, program: Any) -> Callable:
    """The eager kernel's addbmm (``products._addbmm_compute``): CPU's loop, one product per batch, rounded after
    each, the first taking beta * self."""
    import numpy as np

    from device_impl.kernels.matmul import _matmul_into

    o = step["attrs"]
    beta, alpha = o["beta"], o["alpha"]

    def run(nc, env) -> None:
        bias, b1, b2 = (_operand_array(env, program, v) for v in step["operands"])
        out = env.access(step["results"][0])
        if out.size == 0:
            return
        bias2d = np.broadcast_to(bias, out.shape)
        if b1.shape[0] == 0:  # no batch: beta * self
            _matmul_into(nc, out, b1[:, :, :0].reshape(out.shape[0], 0), b2[:, :0, :].reshape(0, out.shape[1]),
                         alpha, beta, bias2d)
            return
        for i in range(b1.shape[0]):
            _matmul_into(nc, out, b1[i], b2[i], alpha, beta if i == 0 else 1.0, bias2d if i == 0 else out)

    return run


# -- baddbmm, mv of reduced floats -----------------------------------------------------------------------

_NARROW = (torch.bfloat16, torch.float16)


def baddbmm_whole(bias: Any, b1: Any, b2: Any, beta: Any, alpha: Any) -> bool:
    """Whether a baddbmm of these tensors (or their metas) is cut whole: three bfloat16/float16 tensors of one
    dtype, 3-d batches of matching sizes, a bias broadcast to the result, number scalars (``matmul._baddbmm_meta``'s
    calls; float32 keeps PyTorch's decomposition)."""
    if not all(isinstance(t, torch.Tensor) for t in (bias, b1, b2)) or not _number(beta) or not _number(alpha):
        return False
    if not bias.dtype == b1.dtype == b2.dtype or b1.dtype not in _NARROW or b1.dim() != 3 or b2.dim() != 3 \
            or b1.shape[0] != b2.shape[0] or b1.shape[2] != b2.shape[1]:
        return False
    try:
        torch.broadcast_shapes(tuple(bias.shape), (b1.shape[0], b1.shape[1], b2.shape[2]))
    except RuntimeError:
        return False
    return True


def _baddbmm(node: torch.fx.Node) -> Any:
    """``baddbmm``: operands (self, batch1, batch2), result out; beta and alpha as options."""
    a = _bound(node)
    beta, alpha = a.get("beta", 1), a.get("alpha", 1)
    out = _meta(node)
    if out is None or not baddbmm_whole(_meta(a["self"]), _meta(a["batch1"]), _meta(a["batch2"]), beta, alpha) \
            or out.dtype != _meta(a["batch1"]).dtype:
        return None
    return [a["self"], a["batch1"], a["batch2"]], {0: 0}, {"beta": beta, "alpha": alpha}


def _run_baddbmm(step: dict, program: Any) -> Callable:
    """The eager kernel's baddbmm (``matmul.MatmulPlan.run``, batched): one product per batch, alpha scaling the
    PSUM evacuation, beta * the batch's bias added, rounded once to the dtype."""
    import numpy as np

    from device_impl.kernels.matmul import _matmul_into

    o = step["attrs"]
    beta, alpha = o["beta"], o["alpha"]

    def run(nc, env) -> None:
        bias, b1, b2 = (_operand_array(env, program, v) for v in step["operands"])
        out = env.access(step["results"][0])
        bias3d = np.broadcast_to(bias, out.shape)
        for i in range(out.shape[0]):
            _matmul_into(nc, out[i], b1[i], b2[i], alpha, beta, bias3d[i])

    return run


def _baddbmm_decomposition(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1,
                           alpha: Any = 1) -> Any:
    """PyTorch's decomposition, except for the calls cut whole (``baddbmm_whole``): NotImplemented keeps the op in
    the traced graph."""
    if baddbmm_whole(self, batch1, batch2, beta, alpha):
        return NotImplemented
    return torch._decomp.decomposition_table[aten.baddbmm.default](self, batch1, batch2, beta=beta, alpha=alpha)


def mv_whole(mat: Any, vec: Any) -> bool:
    """Whether ``mv(mat, vec)`` is cut whole: a 2-d and a 1-d bfloat16/float16 tensor of one dtype whose sizes
    match (``products._addmv_meta``'s calls, which mv reaches; float32 keeps PyTorch's decomposition)."""
    return isinstance(mat, torch.Tensor) and isinstance(vec, torch.Tensor) and mat.dim() == 2 and vec.dim() == 1 \
        and mat.dtype == vec.dtype and mat.dtype in _NARROW and mat.shape[1] == vec.shape[0]


def _mv(node: torch.fx.Node) -> Any:
    """``mv``: operands (self, vec), result out."""
    a = _bound(node)
    if not mv_whole(_meta(a["self"]), _meta(a["vec"])):
        return None
    return [a["self"], a["vec"]], {0: 0}, {}


def _run_mv(step: dict, program: Any) -> Callable:
    """The eager kernel's mv (``products._addmv_compute`` with beta 0, which never reads self): mat times vec as a
    [K, 1] column on TensorE."""
    from device_impl.kernels.matmul import _matmul_into

    def run(nc, env) -> None:
        mat, vec = (_operand_array(env, program, v) for v in step["operands"])
        out = env.access(step["results"][0])
        _matmul_into(nc, out[:, None], mat, vec[:, None])

    return run


def _mv_decomposition(self: torch.Tensor, vec: torch.Tensor) -> Any:
    """PyTorch's decomposition, except for the calls cut whole (``mv_whole``)."""
    if mv_whole(self, vec):
        return NotImplemented
    return torch._decomp.decomposition_table[aten.mv.default](self, vec)


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.dot.default: ("dot", _dot),
    aten.vdot.default: ("dot", _dot),
    aten.addbmm.default: ("addbmm", _addbmm),
    aten.baddbmm.default: ("baddbmm", _baddbmm),
    aten.mv.default: ("mv", _mv),
}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {
    "dot": _run_dot,
    "addbmm": _run_addbmm,
    "baddbmm": _run_baddbmm,
    "mv": _run_mv,
}

# step kind -> how the static replay runs it (replay.STEP_KINDS): TensorE products of fixed sizes, their
# instructions from the shapes (as the compiler's own dot_general steps)
STEP_KINDS: dict[str, str] = {kind: "tile" for kind in RUNNERS}

# AOTAutograd decompositions (merged into backend's table after the core ones): dot, vdot, and reduced-float
# baddbmm and mv reach the traced graph whole where they are cut
DECOMPOSITIONS: dict[Any, Callable] = {
    aten.dot.default: _dot_decomposition("dot"),
    aten.vdot.default: _dot_decomposition("vdot"),
    aten.baddbmm.default: _baddbmm_decomposition,
    aten.mv.default: _mv_decomposition,
}
