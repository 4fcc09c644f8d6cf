"""The order a flat (elementwise) fused group walks its elements in: the one whose DMA moves the fewest runs.

A flat group (``groups.GroupRunner._flat``) loads and stores [p, f] tiles of consecutive elements of its
iteration space, each load and store a strided view of the group's shape read in row-major order. Any order of
the dims gives the same results (every op is elementwise and every view is walked in the same order), but not the
same DMA: a view whose memory order is not the walk's moves one descriptor per run. ``torch.where(x0 > 0, x1, x2)``
of a transposed float32 x0 (the sweep's bfloat16 case: [1, 2, 5, 513], strides (1, 1, 2, 10)) gives a result in
x0's layout (CPU's TensorIterator strides, stored straight into it: ``Executable.writes_strided``), so walking the
logical order moved x0 and the result one element a run (5130 runs each, ~0.34 us a view) where adaptive eager,
walking x0's memory order, moved each in one run: compiled 2.72 us against 2.20
(benches/compiled_vs_eager_specs.py).

``order`` answers, from the views' strides, the permutation of the dims the group walks: the logical order or
the memory order of one of its views, whichever moves the fewest runs in all (ties to the logical order, so a
group of contiguous views walks as before and the schedule recorded at compile time on contiguous arrays is the
same).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from device_impl.engine.isa import contiguous_runs


def memory_order(view: np.ndarray) -> tuple[int, ...]:
    """``view``'s dims outermost first in memory: broadcast (stride 0) and single-element dims first, in their
    order, then the others by decreasing stride (their order kept among equal strides)."""
    moving = [d for d in range(view.ndim) if view.shape[d] > 1 and view.strides[d] != 0]
    still = [d for d in range(view.ndim) if d not in moving]
    return tuple(still + sorted(moving, key=lambda d: -abs(view.strides[d])))


def runs(views: Iterable[np.ndarray], perm: tuple[int, ...]) -> int:
    """The contiguous runs moving every view walked in ``perm``'s order takes."""
    return sum(contiguous_runs(v.transpose(perm)) for v in views)


def order(views: list[np.ndarray], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The permutation of ``shape``'s dims to walk ``views`` (each of ``shape``) in, or None for the logical
    order (also where a view has another shape)."""
    if len(shape) < 2 or any(v.shape != shape for v in views):
        return None
    identity = tuple(range(len(shape)))
    best, fewest = identity, runs(views, identity)
    for view in views:
        perm = memory_order(view)
        if perm == best:
            continue
        count = runs(views, perm)
        if count < fewest:
            best, fewest = perm, count
    return None if best == identity else best
