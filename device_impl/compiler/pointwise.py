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
* logaddexp/logaddexp2: maximum, minimum and one select of 0 where the operands are equal (six VectorE passes, as
  the eager kernel) instead of PyTorch's max and min as selects of a compare and its infinity test (eleven).
* xlogy: its operands expanded to the result's shape first, so that a 0-d y's log and NaN test fuse with the rest
  instead of running as steps of their own.
* mish: ``x * tanh(log1p(exp(x)))``, CPU's formula, without softplus's threshold (a compare and a select).

bfloat16/float16 calls of logaddexp, xlogy and mish compute in float32 and round once (the eager kernels, and
CPU's vectorized reduced-float kernels); xlogy's log rounded to the dtype first, as c10's log of those types.
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


def _float32(*values: Any) -> bool:
    return all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in values)


_NARROW = (torch.bfloat16, torch.float16)


def _floats(*values: Any) -> torch.dtype | None:
    """The one floating dtype of ``values`` (all tensors of it), which the eager kernels compute in float32 and
    round once on store; None for anything else (integers, mixed dtypes: PyTorch's form)."""
    dtypes = {v.dtype if isinstance(v, torch.Tensor) else None for v in values}
    if len(dtypes) != 1:
        return None
    (dtype,) = dtypes
    return dtype if dtype in (torch.float32, *_NARROW) else None


def _opmath(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32) if x.dtype in _NARROW else x


def _logaddexp_of(base2: bool) -> Callable:
    op = aten.logaddexp2.default if base2 else aten.logaddexp.default

    def decomposition(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``m + log1p(exp(d))`` (exp2, and the log1p times 1 / ln 2, for base 2), m = maximum(a, b) and
        d = minimum(a, b) - m, except d = 0 where a == b: the eager kernel's six VectorE passes (CPU's
        ``a == b and |a| == inf ? a : max + log1p(exp(-|a - b|))``) where PyTorch's form takes eleven (max and
        min as two selects of a compare, the infinity test as abs, compare, and). The same values: min - max is
        -|a - b| exactly; where a == b, d = 0 gives ``m + log1p(1)``, which is a itself for an infinite a (the
        eager kernel's select) and CPU's formula for a finite one; a NaN operand propagates through maximum and
        minimum. float32 only (other dtypes keep PyTorch's form)."""
        dtype = _floats(a, b)
        if dtype is None or (base2 and dtype != torch.float32):  # logaddexp2 of reduced floats: EAGER_CALLS
            return _or_core(op)(a, b)
        a, b = _opmath(a), _opmath(b)
        m = aten.maximum.default(a, b)
        d = aten.where.self(aten.eq.Tensor(a, b), a.new_zeros(()), aten.sub.Tensor(aten.minimum.default(a, b), m))
        if base2:
            tail = aten.mul.Tensor(aten.log1p.default(aten.exp2.default(d)), float(np.float32(1 / np.log(2))))
        else:
            tail = aten.log1p.default(aten.exp.default(d))
        return aten.add.Tensor(m, tail).to(dtype)

    return decomposition


def _xlogy(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``isnan(y) ? NaN : x == 0 ? 0 : x * log(y)`` (CPU's kernel) with both operands expanded to the result's
    shape first, so that a 0-d y's log and NaN test fuse with the rest (PyTorch's form computed them apart on
    y's shape: five steps, 2.57 us against the eager kernel's 2.31). float32 tensors only."""
    dtype = _floats(x, y)
    if dtype is None:
        return _or_core(aten.xlogy.Tensor)(x, y)
    shape = torch.broadcast_shapes(x.shape, y.shape)
    x, y = _opmath(x.expand(shape)), _opmath(y.expand(shape))
    zero = aten.eq.Scalar(x, 0)  # first: VectorE tests x while ScalarE takes the log
    log = aten.log.default(y)
    if dtype in _NARROW:  # c10's log of a BFloat16/Half returns the dtype: rounded before the product
        log = log.to(dtype).to(torch.float32)
    product = aten.where.self(zero, x.new_zeros(()), aten.mul.Tensor(x, log))
    return aten.where.self(aten.ne.Tensor(y, y), x.new_full((), float("nan")), product).to(dtype)


def _mish(x: torch.Tensor) -> torch.Tensor:
    """``x * tanh(log1p(exp(x)))``: CPU's kernel and the eager one (three ScalarE passes, one multiply);
    PyTorch's form goes through softplus's threshold (x > 20 ? x : log1p(exp(x))), a compare and a select more,
    which change nothing after the tanh (1 in float32 from x = 9 on). float32 only."""
    dtype = _floats(x)
    if dtype is None:
        return _or_core(aten.mish.default)(x)
    x = _opmath(x)
    return aten.mul.Tensor(x, aten.tanh.default(aten.log1p.default(aten.exp.default(x)))).to(dtype)


DECOMPOSITIONS: dict[Any, Callable] = {
    aten.heaviside.default: _heaviside,
    aten.logit.default: _logit,
    aten.logaddexp.default: _logaddexp_of(False),
    aten.logaddexp2.default: _logaddexp_of(True),
    aten.xlogy.Tensor: _xlogy,
    aten.mish.default: _mish,
}
