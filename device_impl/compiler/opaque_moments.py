"""Variance and standard deviation of float tensors cut whole (compiler/opaque.py's mechanism): var, std,
var_mean and std_mean (``correction`` overloads).

Issue 21: "every op's compiled device time <= its eager kernel's". CPU computes a reduced float's moments as
Welford in double and rounds the result; the eager kernel does the same in one GpSimd pass over each block of rows
and a second for the centred squares (``kernels.reduction.moments.var_program``). Compiled, numerics said std,
var_mean and std_mean as float32 passes with a guard against overflow (the row's largest magnitude, a scale, the
sum, the deviations' squares summed, the non-finite count for the mean's NaN rule: 4.95 us against the kernel's
1.56 for std_mean of a [3, 1, 513] bfloat16 tensor) and var as the plain two-pass formula (1.99 against 1.43 us).
Cut whole, each runs as one step of the eager kernel's program: its bits (CPU's double Welford, finite where
float32 sums overflow) and its device time less the launch overhead.

float32 too, since the eager kernel computes every dtype as CPU's double Welford (its float32 two-pass form
overflowed where CPU stays finite): cut whole, float32 std 2.87 -> 1.43 us, std_mean 3.87 -> 1.49, var 1.99 -> 1.43,
var_mean 34.38 -> 9.28 (the sweep's cases), CPU's bits.
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

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)  # the kernel is CPU's double Welford for each

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
    meta) is cut whole: a float32/bfloat16/float16 tensor of at least one dim, nothing empty; else None. The divisor is CPU's, max(0, n - correction): at 0 the double quotient is inf, or NaN
    for 0 / 0. numerics' decompositions return NotImplemented for exactly these calls."""
    if not isinstance(x, torch.Tensor) or x.dtype not in _FLOATS \
            or x.dim() == 0 or x.numel() == 0:
        return None
    dims = _reduced(x, dim)
    if dims is None or isinstance(correction, bool) or not (correction is None or isinstance(correction, (int, float))):
        return None
    count = math.prod(x.shape[d] for d in dims)
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
