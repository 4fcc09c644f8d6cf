"""The shape family's shared pieces: dims and out= rules, numpy views, and the DMA programs every op is
built from.

Tiling: none for a plain move: ``_move`` is one HBM -> HBM DMA over strided views, walked in the
destination's memory order (``_in_order``) so each descriptor covers a long contiguous run. Where bytes
change, SBUF tiles: a dtype conversion streams flat tiles ``[p <= 128, f <= FREE_MAX]`` (DMA in, VectorE
``tensor_copy``, DMA out); ``_accumulate`` adds a source into an fp32 accumulator with the same tiles on
VectorE, ``_accumulate_sum`` reduces rows of ``[p <= 128, n]`` on VectorE (n on the free axis);
``_fill`` stores one memset tile (``_const_tile``) over 2-D pieces ``[p <= 128, f <= FREE_MAX]``
(``_pieces2d``). ``_serve`` records in the lowering table which of our kernels PyTorch's composites reach.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from device_impl._compat import internal
from device_impl.dispatch.table import TABLE
from device_impl.dispatch.written import resize_output
from device_impl.kernels import scalars
from device_impl.kernels.common import FREE_MAX, P, check_exact_dtype, flat_tiles, scalar_of
from device_impl.kernels.registry import in_dispatcher

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)

suggest_memory_format = internal("torch._prims_common", "suggest_memory_format", "memory-format propagation")


# --- dims, layouts, out= -----------------------------------------------------------

def _wrap(dim: int, ndim: int, scalar_ok: bool = True) -> int:
    """c10::maybe_wrap_dim: a 0-dim tensor accepts dims -1 and 0 (unless ``scalar_ok`` is false)."""
    if ndim == 0:
        if not scalar_ok:
            raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
        ndim = 1
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    return dim % ndim


def _resize_out(out: torch.Tensor, shape: Sequence[int], memory_format=None) -> None:
    """Structured out= rules: resize (warning when out had elements) and then restride to the op's format."""
    resize_output(out, shape, memory_format, stacklevel=5)


_exact_dtype = check_exact_dtype  # the out= dtype rule of the shape ops' generated out= wrappers


def _same_device(tensors: Sequence[torch.Tensor], like: torch.Tensor) -> None:
    for t in tensors:
        if t.device != like.device:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{like.device} and {t.device}!")


# --- numpy views and the DMA helpers ------------------------------------------------

def _memory_order(view: np.ndarray) -> list[int]:
    return sorted(range(view.ndim), key=lambda d: -abs(view.strides[d]))


def _in_order(dst: np.ndarray, *srcs: np.ndarray) -> tuple[np.ndarray, ...]:
    """All views transposed so that ``dst`` is walked in memory order (long contiguous runs)."""
    if dst.ndim < 2:
        return (dst,) + srcs
    order = _memory_order(dst)
    if order == list(range(dst.ndim)):
        return (dst,) + srcs
    return (dst.transpose(order),) + tuple(s.transpose(order) for s in srcs)


def _merged(view: np.ndarray) -> np.ndarray:
    """The same elements with size-1 dims dropped and adjacent dims merged where the strides allow (a view)."""
    shape: list[int] = []
    strides: list[int] = []
    for n, s in zip(view.shape, view.strides):
        if n == 1:
            continue
        if shape and strides[-1] == s * n:
            shape[-1] *= n
            strides[-1] = s
        else:
            shape.append(n)
            strides.append(s)
    if not shape:
        return view.reshape((1,))
    return np.lib.stride_tricks.as_strided(view, tuple(shape), tuple(strides))


def _pieces2d(view: np.ndarray, free: int):
    """Cover ``view`` with 2-D views [p <= 128, f <= free] (for stores of a constant tile)."""
    v = _merged(view)
    if v.ndim == 1:
        n = v.shape[0]
        rows = n // free
        for r0 in range(0, rows, P):
            r1 = min(rows, r0 + P)
            yield v[r0 * free:r1 * free].reshape(r1 - r0, free)
        if n - rows * free:
            yield v[rows * free:].reshape(1, -1)
        return
    if v.shape[-1] > free:
        for idx in np.ndindex(*v.shape[:-1]):
            yield from _pieces2d(v[idx], free)
        return
    for idx in np.ndindex(*v.shape[:-2]):
        m = v[idx]
        for r0 in range(0, m.shape[0], P):
            yield m[r0:r0 + P]


def _move(nc, dst: np.ndarray, src: np.ndarray) -> None:
    """dst <- src (broadcast to dst): one DMA, or through SBUF with a VectorE cast when the dtypes differ."""
    if dst.size == 0:
        return
    if src.shape != dst.shape:
        src = np.broadcast_to(src, dst.shape)
    dst, src = _in_order(dst, src)
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


def _accumulate(nc, dst: np.ndarray, src: np.ndarray) -> None:
    """dst += src elementwise (dst an accumulator: fp32 for floats), on VectorE."""
    if dst.size == 0:
        return
    if src.shape != dst.shape:
        src = np.broadcast_to(src, dst.shape)
    dst, src = _in_order(dst, src)
    acc = dst.dtype
    for start, stop, p, f in flat_tiles(dst.size):
        mark = nc.mark()
        a = nc.sbuf_tile((p, f), acc)
        nc.dma.load_flat(a, dst, start, stop)
        b = nc.sbuf_tile((p, f), src.dtype)
        nc.dma.load_flat(b, src, start, stop)
        c = nc.sbuf_tile((p, f), acc)
        nc.vector.tensor_tensor(c, a, b, "add", dtype=acc)
        nc.dma.store_flat(dst, start, stop, c)
        nc.release_to(mark)


def _accumulate_sum(nc, dst: np.ndarray, src: np.ndarray, axis: int) -> None:
    """dst += src.sum(axis) where dst is src's shape without ``axis``; the sum on VectorE."""
    n = src.shape[axis]
    if dst.size == 0 or n == 0:
        return
    if n <= 16:  # a few full-width adds beat many narrow [128, n] reductions
        for j in range(n):
            _accumulate(nc, dst, src[(slice(None),) * axis + (j,)])
        return
    rows = np.moveaxis(src, axis, -1).reshape(dst.size, n)  # may gather: only ever a DMA source
    acc = dst.dtype
    chunk = min(n, 8 * FREE_MAX)
    for r0 in range(0, dst.size, P):
        r1 = min(dst.size, r0 + P)
        mark = nc.mark()
        total = nc.sbuf_tile((r1 - r0, 1), acc)
        nc.dma.load_flat(total, dst, r0, r1)
        part = nc.sbuf_tile((r1 - r0, 1), acc)
        for c0 in range(0, n, chunk):
            c1 = min(n, c0 + chunk)
            block = nc.sbuf_tile((r1 - r0, c1 - c0), src.dtype)
            nc.dma.load(block, rows[r0:r1, c0:c1])
            nc.vector.tensor_reduce(part, block, "add", dtype=acc)
            nc.vector.tensor_tensor(total, total, part, "add", dtype=acc)
            nc.release(block)
        nc.dma.store_flat(dst, r0, r1, total)
        nc.release_to(mark)


def _fill(nc, dst: np.ndarray, const) -> None:
    """Store the constant tile ``const`` over every element of ``dst``."""
    if dst.size == 0:
        return
    (dst,) = _in_order(dst)
    for piece in _pieces2d(dst, FREE_MAX):  # the same pieces _const_tile sized the tile for
        nc.dma.store(piece, const[:piece.shape[0], :piece.shape[1]])


def _const_tile(nc, dtype: np.dtype, value, regions: Sequence[np.ndarray]):
    """A tile memset to ``value``, just large enough for the pieces of ``regions``."""
    p = f = 0
    for r in regions:
        if r.size == 0:
            continue
        (r,) = _in_order(r)
        for piece in _pieces2d(r, FREE_MAX):
            p = max(p, piece.shape[0])
            f = max(f, piece.shape[1])
    if p == 0:
        return None
    tile = nc.sbuf_tile((p, f), dtype)
    nc.vector.memset(tile, value)
    return tile


def _fill_value(value: Any, dtype: torch.dtype):
    """A Python scalar as ``dtype`` with c10::checked_convert's overflow rules (what CPU fill_ raises)."""
    return scalars.to_numpy(scalar_of(value), dtype)


# --- what PyTorch's composites reach ---------------------------------------------------

def _server(target: str) -> str | None:
    """The registered kernel behind ``target`` (itself, or what it is recorded as served by)."""
    entry = TABLE.lookup(target)
    if entry.tier.value != "native":
        return None
    if "(via " in entry.source:
        return entry.source.split("(via ", 1)[1].rstrip(")")
    return target


def _serve(ops: Sequence[str], target: str) -> None:
    server = _server(target)
    if server is None:
        return
    for op in ops:
        if in_dispatcher(op) and TABLE.lookup(op).tier.value != "native":
            TABLE.serves(op, server)
