"""Transposing copies into fp32 tiles, fast: the wide (whole-array) runners' operand packing.

The static replay's products (compiler/replay.py) and a compiled attention step's wide runner
(kernels/attention.py ``forward_wide``) hand BLAS operands laid out as TensorE's SBUF tiles are: C-contiguous
fp32 copies of views whose last axis is often strided (x^T, W^T, P^T). numpy walks such a copy with one stride
across the whole source and misses the cache on every element; copying it in slabs of ``COPY_COLUMNS``
columns reads that many adjacent source elements per row, about twice as fast on a decoder block's operands
(a [8, 128, 128] P^T: 169 -> 71 us of thread time on this AVX2 host; shorter rows, a [.., 64, 128] Q^T of 256-byte source rows, copy faster in one call, so the attention keeps that for them). The values are the same (a copy, or an
exact widening to fp32), so every product's bits are.
"""

from __future__ import annotations

import numpy as np

from device_impl.engine.dtypes import FP32

COPY_COLUMNS = 32  # columns per slab of a transposing copy
ONE_COPY_ELEMENTS = 128 * 128  # up to here one copy is faster than slabs: its source stays in cache (a Llama's 64 x 128)


def fp32_contiguous(view: np.ndarray, copy: bool = False) -> np.ndarray:
    """``np.ascontiguousarray(view, dtype=float32)``: the same values, copied in slabs of ``COPY_COLUMNS`` columns
    when ``view``'s last axis is strided (module docstring). ``copy``: a new array even where ``view`` already is
    one (a packing kept beyond the execution whose array it read)."""
    if (view.ndim < 2 or view.strides[-1] == view.itemsize or view.shape[-1] <= COPY_COLUMNS
            or view.size <= ONE_COPY_ELEMENTS):
        return np.array(view, dtype=FP32, order="C", copy=True) if copy else np.ascontiguousarray(view, dtype=FP32)
    out = np.empty(view.shape, dtype=FP32)
    for c0 in range(0, view.shape[-1], COPY_COLUMNS):
        out[..., c0:c0 + COPY_COLUMNS] = view[..., c0:c0 + COPY_COLUMNS]
    return out


__all__ = ["COPY_COLUMNS", "ONE_COPY_ELEMENTS", "fp32_contiguous"]
