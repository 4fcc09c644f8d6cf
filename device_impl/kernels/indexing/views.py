"""The indexing family's metadata helpers and whole-region moves in HBM.

Numpy views (``_view``, ``_reshaped``, ``_table``, ...) only describe where a tensor's
elements sit; nothing here computes on data except the copies and fills, which tile the
destination as flat [p <= 128, f] runs (``common.flat_tiles``): DMA loads the source run,
VectorE casts when the dtypes differ, DMA stores. ``copy_into`` and ``fill`` are shared
with the compiler (``device_impl.compiler.steps``). ``_Fp32Stage`` / ``_Staged`` are the
float32 and contiguous device temporaries a kernel writes through and copies back.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from device_impl.engine.dtypes import FP32, is_float
from device_impl.kernels.common import flat_tiles, hbm, reshaped_view

# --- numpy views (metadata only: nothing here moves or computes data) ------------------------

_reshaped = reshaped_view


def _estrides(v: np.ndarray) -> tuple[int, ...]:
    return tuple(s // v.itemsize for s in v.strides)


def _span(v: np.ndarray) -> int:
    """Elements from ``v``'s first element to one past its last (strides are never negative)."""
    return 1 + sum((n - 1) * s for n, s in zip(v.shape, _estrides(v)) if n > 0)


def _embed(v: np.ndarray, shape, axes: Sequence[int | None]) -> np.ndarray:
    """A view of ``v`` with ``shape`` where output axis i reads v's axis axes[i] (None: broadcast)."""
    strides = tuple(0 if a is None or v.shape[a] == 1 else v.strides[a] for a in axes)
    return as_strided(v, shape=tuple(shape), strides=strides, writeable=False)


def _table(v: np.ndarray, c0: int, cc: int, s_in: int) -> np.ndarray:
    """The HBM region of ``v`` as rows [cc elements at stride s_in] starting at every element offset."""
    span = _span(v)
    isz = v.itemsize
    flat = as_strided(v, shape=(span,), strides=(isz,), writeable=v.flags.writeable)
    base = flat[c0 * s_in:]
    rows = span - (c0 + cc - 1) * s_in
    return as_strided(base, shape=(max(rows, 1), cc), strides=(isz, s_in * isz), writeable=v.flags.writeable)


def _view(t: torch.Tensor) -> np.ndarray:
    """The HBM view of a tensor, 0-d tensors as 1-element vectors."""
    v = hbm(t)
    return v.reshape(1) if v.ndim == 0 else v


def _merge_suffix(shape: Sequence[int], stride_sets: Sequence[Sequence[int]], limit: int):
    """How many trailing dims (at most ``limit``) merge into one run in every stride set.

    Returns (k, C, inner strides per set)."""
    k, c = 0, 1
    inner: list[int | None] = [None] * len(stride_sets)
    for i in range(len(shape) - 1, len(shape) - 1 - limit, -1):
        n = shape[i]
        if n != 1:
            if not all(inner[v] is None or st[i] == inner[v] * c for v, st in enumerate(stride_sets)):
                break
            for v, st in enumerate(stride_sets):
                if inner[v] is None:
                    inner[v] = st[i]
        c *= n
        k += 1
    return k, c, [1 if s is None else s for s in inner]


def _prod(xs) -> int:
    return math.prod(xs) if xs else 1


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


# --- copies and fills in HBM ----------------------------------------------------------------

def _copy_into(nc, dst: np.ndarray, src: np.ndarray) -> None:
    """dst <- src (broadcast), converting dtype on VectorE when they differ."""
    if dst.size == 0:
        return
    if src.shape != dst.shape:
        src = np.broadcast_to(src, dst.shape)
    if src.dtype == dst.dtype:
        nc.dma.hbm_copy(dst, src)
        return
    for start, stop, p, f in flat_tiles(dst.size):
        mark = nc.mark()
        a = nc.sbuf_tile((p, f), src.dtype)
        nc.dma.load_flat(a, src, start, stop)
        b = nc.sbuf_tile((p, f), dst.dtype)
        nc.vector.tensor_copy(b, a)
        nc.dma.store_flat(dst, start, stop, b)
        nc.release_to(mark)


def _fill(nc, dst: np.ndarray, value) -> None:
    for start, stop, p, f in flat_tiles(dst.size):
        mark = nc.mark()
        t = nc.sbuf_tile((p, f), dst.dtype)
        nc.vector.memset(t, value)
        nc.dma.store_flat(dst, start, stop, t)
        nc.release_to(mark)


# Shared with the compiler (device_impl.compiler.steps): HBM-to-HBM copies with VectorE casts, and fills.
copy_into = _copy_into
fill = _fill


def _empty(shape, dtype, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype, device=like.device)


def _narrow_float(dtype: np.dtype) -> bool:
    return is_float(dtype) and dtype != FP32


class _Fp32Stage:
    """A float32 copy of a bf16/fp16 destination, for ops CPU accumulates in fp32 and rounds once
    (scatter_add, scatter_reduce sum/mean/prod, index_add): the work happens on ``view``."""

    def __init__(self, nc, view: np.ndarray, like: torch.Tensor | Callable[[tuple[int, ...]], np.ndarray] | None,
                 enabled: bool = True):
        """``like``: a tensor on the device the float32 copy is made on, or (a compiled step's scratch) a function
        giving a float32 HBM array of a shape; only called when the copy is needed."""
        self.nc, self.target, self.temp = nc, view, None
        self.view = view
        if enabled and _narrow_float(view.dtype):
            if isinstance(like, torch.Tensor):
                self.temp = torch.empty(view.shape, dtype=torch.float32, device=like.device)
                self.view = hbm(self.temp)
            else:
                self.temp = self.view = like(tuple(view.shape))
            _copy_into(nc, self.view, view)

    def finish(self) -> None:
        if self.temp is not None:
            _copy_into(self.nc, self.target, self.view)


class _Staged:
    """An output written through a contiguous device temporary when its layout cannot take the rows."""

    def __init__(self, out: torch.Tensor, need_direct: bool = True):
        self.out = out
        v = _view(out)
        self.temp = None
        if need_direct and _reshaped(v, (v.size,)) is None:
            self.temp = torch.empty(tuple(out.shape), dtype=out.dtype, device=out.device)
            v = _view(self.temp)
        self.view = v

    def finish(self, nc) -> None:
        if self.temp is not None:
            nc.dma.hbm_copy(_view(self.out), self.view)
