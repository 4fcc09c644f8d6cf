"""Decompositions of pointwise ops that say what the eager kernel computes, in fewer steps than PyTorch's.

Issue 21 ("every op's compiled device time <= its eager kernel's"): PyTorch's core decompositions of a few
pointwise ops are correct but compile to more VectorE passes than the device's fused eager kernel issues
(``kernels/elementwise``), so the compiled single op lost to eager:

* heaviside: PyTorch's ``where(x == 0, values, where(x < 0 or isnan(x), 0, 1))`` is seven passes (an integer
  select and its conversion among them); the eager kernel's ``x == 0 ? values : x > 0`` is three: an equality,
  a compare written as the number type (``expansions.fold_conversions``) and one select. The same bits: NaN
  compares false both ways (0), -0.0 equals 0 (``values``).
* logit: PyTorch's ``clamp(x, eps, 1 - eps)`` (also for eps None, as ``clamp(x, -1, 2)``) lowers to two
  compares and two selects; the eager kernel clamps with VectorE's NaN-propagating maximum and minimum, and
  none at all where eps is None or negative (CPU's kernel does not clamp there: ``log(x / (1 - x))`` is the
  same NaN outside [0, 1] either way). The bounds are the eager kernel's: eps read in the dtype and
  ``1 - eps`` rounded to it, not Python's double ``1 - eps`` rounded once at the import.

Each returns PyTorch's decomposition for the calls it does not cover (``_or_core``), so nothing else changes.
Merged into ``backend._decomposition_table`` after ``numerics`` and ``loops``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

aten = torch.ops.aten


def _or_core(op: Any) -> Callable:
    """PyTorch's own decomposition of ``op`` (the calls a rewrite here does not cover)."""
    from torch._decomp import decomposition_table

    return decomposition_table[op]


def _heaviside(x: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``x == 0 ? values : (x > 0)`` in the result dtype: the eager kernel's three passes (signs.py). Calls of
    two dtypes keep PyTorch's form (CPU refuses them; the meta function has already raised)."""
    if x.dtype != values.dtype:
        return _or_core(aten.heaviside.default)(x, values)
    # x expanded to the result's shape first: its compares then fuse with the select over the whole result (x
    # loaded once, broadcast), not computed apart on x's shape and their two results loaded broadcast
    x = x.expand(torch.broadcast_shapes(x.shape, values.shape))
    return aten.where.self(aten.eq.Scalar(x, 0), values, aten.gt.Scalar(x, 0).to(x.dtype))


def _logit(x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """``log(c / (1 - c))``, c = x clamped to [eps, 1 - eps] by maximum then minimum (NaN kept) where eps >= 0,
    else x itself: the eager kernel's passes (logs.py) for float32. Other dtypes keep PyTorch's form (integers
    are promoted there; bfloat16/float16 calls run eagerly, ``backend.EAGER_CALLS``)."""
    if x.dtype != torch.float32:
        return _or_core(aten.logit.default)(x, eps)
    if eps is not None and float(np.float32(eps)) >= 0:
        lo = np.float32(eps)
        hi = np.float32(np.float32(1) - lo)  # scalar_t(1) - eps, rounded in the dtype
        x = aten.minimum.default(aten.maximum.default(x, x.new_full((), float(lo))), x.new_full((), float(hi)))
    return aten.log.default(aten.div.Tensor(x, aten.rsub.Scalar(x, 1)))


DECOMPOSITIONS: dict[Any, Callable] = {
    aten.heaviside.default: _heaviside,
    aten.logit.default: _logit,
}
