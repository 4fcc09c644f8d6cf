"""Variance and standard deviation of bfloat16/float16 tensors cut whole (compiler/opaque.py's mechanism): var, std,
var_mean and std_mean (``correction`` overloads).

Issue 21: "every op's compiled device time <= its eager kernel's". CPU computes a reduced float's moments as
Welford in double and rounds the result; the eager kernel does the same in one GpSimd pass over each block of rows
and a second for the centred squares (``kernels.reduction.moments.var_program``). Compiled, numerics said std,
var_mean and std_mean as float32 passes with a guard against overflow (the row's largest magnitude, a scale, the
sum, the deviations' squares summed, the non-finite count for the mean's NaN rule: 4.95 us against the kernel's
1.56 for std_mean of a [3, 1, 513] bfloat16 tensor) and var as the plain two-pass formula (1.99 against 1.43 us).
Cut whole, each runs as one step of the eager kernel's program: its bits (CPU's double Welford, finite where
float32 sums overflow) and its device time less the launch overhead.

float32 var and std keep numerics' forms: there the eager kernel is itself several fp32 passes and the compiled
forms, fused with their neighbours, were as fast or faster (the sweep: var 1.99 against 3.08 us, std 2.87 against
3.24). float32 var_mean and std_mean are cut where each result reduces 2 to 2048 elements: numerics' forms add the
mean's NaN rule (Welford's: the non-finite count) and lost at every such shape measured (std_mean of [513] 3.87
against the kernel's 3.24 us, of [64, 513] along the last dim 7.09 against 4.06, of [300, 300] 12.04 against 7.32;
var_mean likewise); outside that range they keep numerics' forms (``_WITH_MEAN_COUNTS``).
A describer refuses (returns None) what it does not take: those calls stay in the graph, which computes them as
before.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

_NARROW = (torch.bfloat16, torch.float16)
# float32 var_mean/std_mean are cut too where each mean and variance reduces 2 to 2048 elements: numerics' form adds
# the mean's Welford NaN rule (a non-finite count) to the guarded passes and lost to the kernel's program there at
# every shape measured; it won for one element per row (var_mean of [5, 1, 2, 513] along dim 1: 34.4 us against
# the kernel's 47.9) and for rows of 4096 (8 of them: 10.0 against 14.4)
# ... but not now: the eager kernel's float32 passes overflow where CPU's double Welford stays finite (std_mean of
# rows [3e38, 3e38, -3e38, 2e38]: inf where CPU gives 2.87e38, and the mean inf where CPU gives 1.25e38), which
# numerics' guarded forms do not; tests/compiler/test_compiled_eager_parity.py::test_moments_follow_cpu_double_
# accumulation_and_welford. Until that kernel follows CPU there, float32 keeps numerics' forms.
_WITH_MEAN: tuple[torch.dtype, ...] = ()
_WITH_MEAN_COUNTS = (2, 2048)

# FX target -> (takes the square root, returns the mean too)
_FORMS: dict[Any, tuple[bool, bool]] = {
    aten.var.correction: (False, False),
    aten.std.correction: (True, False),
    aten.var_mean.correction: (False, True),
    aten.std_mean.correction: (True, True),
}


def _reduced(x: torch.Tensor, dim: Any) -> tuple[int, ...] | None:
    """The reduced dims of ``x`` (sorted; None and [] mean all), or None where they are not valid ones."""
    nd = x.dim()
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return tuple(range(nd))
    dims = [dim] if isinstance(dim, int) else list(dim)
    if any(not isinstance(d, int) or not -nd <= d < nd for d in dims):
        return None
    wrapped = sorted({d % nd for d in dims})
    return tuple(wrapped) if len(wrapped) == len(dims) else None


def moments_whole(x: Any, dim: Any, correction: Any, with_mean: bool) -> tuple[tuple[int, ...], float] | None:
    """(reduced dims, divisor) where a var/std (``with_mean``: var_mean/std_mean) of ``x`` (a fake tensor or an FX
    meta) is cut whole: a bfloat16/float16 tensor of at least one dim, or a float32 one for the forms with the mean
    reducing ``_WITH_MEAN_COUNTS`` elements, nothing empty; else None. The divisor is CPU's, max(0, n - correction): at 0 the double quotient is inf, or NaN
    for 0 / 0. numerics' decompositions return NotImplemented for exactly these calls."""
    if not isinstance(x, torch.Tensor) or x.dtype not in (_NARROW + _WITH_MEAN if with_mean else _NARROW) \
            or x.dim() == 0 or x.numel() == 0:
        return None
    dims = _reduced(x, dim)
    if dims is None or isinstance(correction, bool) or not (correction is None or isinstance(correction, (int, float))):
        return None
    count = math.prod(x.shape[d] for d in dims)
    if x.dtype in _WITH_MEAN and not _WITH_MEAN_COUNTS[0] <= count <= _WITH_MEAN_COUNTS[1]:
        return None
    divisor = count - (1 if correction is None else correction)
    return dims, float(max(0, divisor))


def _moments(node: torch.fx.Node) -> Any:
    """var/std (result out) and var_mean/std_mean (results var, mean): operand self."""
    a = _bound(node)
    x = a["self"]
    meta = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    root, with_mean = _FORMS[node.target]
    whole = moments_whole(meta, a.get("dim"), a.get("correction"), with_mean)
    if whole is None:
        return None
    values = node.meta.get("val")
    if any(not isinstance(v, torch.Tensor) or v.dtype != meta.dtype
           for v in (values if isinstance(values, (tuple, list)) else (values,))):
        return None
    dims, divisor = whole
    return [x], ({0: 0, 1: 1} if with_mean else {0: 0}), {"dims": list(dims), "divisor": divisor, "root": root}


def _run_moments(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``kernels.reduction.moments.var_program``) into the step's results."""
    from device_impl.kernels.reduction.moments import var_program

    o = step["attrs"]
    (x,) = step["operands"]

    def run(nc, env) -> None:
        results = [env.access(r) for r in step["results"]]  # spliced back with every result (read or not)
        var_program(nc, _operand_array(env, program, x), tuple(o["dims"]), o["divisor"], o["root"], results[0],
                    results[1] if len(results) > 1 else None)

    return run


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {op: ("moments", _moments) for op in _FORMS}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {"moments": _run_moments}

# step kind -> how the static replay runs it (replay.STEP_KINDS): GpSimd passes per block of rows and fixed
# VectorE/ScalarE steps, every instruction from the shapes
STEP_KINDS: dict[str, str] = {"moments": "tile"}
