"""Masks: nonzero (argwhere, nonzero_numpy), masked_select, masked_scatter_.

Tiling: the mask streams as flat [p, f] tiles; stream compaction on GpSimd
(``gpsimd.run``) turns it into positions in memory order (``_nonzero_into``), a row of
coordinates per true element; masked_select then gathers those rows and masked_scatter_
scatters consecutive source elements to them with ``rows._move``. masked_fill and where are
pointwise and live in ``kernels.elementwise``.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.engine import launch
from device_impl.kernels import overlap
from device_impl.kernels.common import SCALAR_TYPE_NAMES, flat_tiles, hbm, resize_output
from device_impl.kernels.indexing.rows import BOOL, I64, _Index, _Rows, _move, _native
from device_impl.kernels.indexing.views import _Staged, _copy_into, _empty, _estrides, _prod, _reshaped, _view

# --- nonzero and masks -------------------------------------------------------------------

def _nonzero_into(nc, view: np.ndarray, like: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Coordinates [n, ndim] (int64, in the elements' row-major order) of the nonzero elements of an HBM view.

    Laid out as CPU's nonzero lays them: a result it allocates or resizes is column-major (strides (1, n):
    ATen's nonzero_out restrides a resized result so, gh-46224), each dimension's coordinates one contiguous
    run, written straight from the tile; an out= of the right shape keeps its own strides."""
    shape = view.shape
    ndim = len(shape)
    flat_view = view.reshape(1) if ndim == 0 else view
    tiles = list(flat_tiles(flat_view.size))
    counts = [0] * len(tiles)
    if tiles:
        count_tile = nc.sbuf_tile((1, len(tiles)), I64)
        for t, (start, stop, p, f) in enumerate(tiles):
            mark = nc.mark()
            x = nc.sbuf_tile((p, f), view.dtype)
            nc.dma.load_flat(x, flat_view, start, stop)
            m = nc.sbuf_tile((p, f), BOOL)
            nc.vector.tensor_scalar(m, x, "not_equal", 0)
            part = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_reduce(part, m, "add", dtype=I64)
            nc.gpsimd.partition_reduce(count_tile[:, t:t + 1], part, "add")
            nc.release_to(mark)
        counts = [int(c) for c in count_tile.read()[0]]  # the device -> host sync that sizes the output
    n = sum(counts)
    if out is None:
        out = torch.empty_strided((n, ndim), (1, n), dtype=torch.int64, device=like.device)
    elif tuple(out.shape) != (n, ndim):
        resize_output(out, (n, ndim))
        out.as_strided_((n, ndim), (1, n))
    if n == 0 or ndim == 0:
        return out
    # by column: dimension d's coordinates are the run columns[d, :] (a tile holds them blocked, [d * f, (d+1) * f))
    by_column = ndim > 1 and n > 1 and out.stride() == (1, n)
    staged = None if by_column else _Staged(out)
    columns = hbm(out.t()) if by_column else None
    dst = None if by_column else \
        staged.view.reshape(-1) if staged.temp is not None else _reshaped(staged.view, (n * ndim,))
    written = 0
    for (start, stop, p, f), k in zip(tiles, counts):
        if k == 0:
            continue
        mark = nc.mark()
        x = nc.sbuf_tile((p, f), view.dtype)
        nc.dma.load_flat(x, flat_view, start, stop)
        m = nc.sbuf_tile((p, f), BOOL)
        nc.vector.tensor_scalar(m, x, "not_equal", 0)
        pos = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.run("nonzero_compact", _compact(start), (pos,), (m,))
        coords = nc.sbuf_tile((p, f * ndim), I64)
        for d in range(ndim):
            region = coords[:, d * f:(d + 1) * f] if by_column else coords[:, d::ndim]
            div = _prod(shape[d + 1:])
            src = pos
            if div > 1:
                q = nc.sbuf_tile((p, f), I64)
                nc.vector.tensor_scalar(q, pos, "floor_divide", div, dtype=I64)
                src = q
            if d > 0:
                nc.vector.tensor_scalar(region, src, "remainder", shape[d], dtype=I64)
            else:
                nc.vector.tensor_copy(region, src)
        q_full, rem = divmod(k, f)
        if by_column:
            for d in range(ndim):
                run = columns[d]
                if q_full:
                    nc.dma.store(run[written:written + q_full * f].reshape(q_full, f),
                                 coords[:q_full, d * f:(d + 1) * f])
                if rem:
                    b2 = written + q_full * f
                    nc.dma.store(run[b2:b2 + rem].reshape(1, rem), coords[q_full:q_full + 1, d * f:d * f + rem])
        else:
            base = written * ndim
            if q_full:
                nc.dma.store(dst[base:base + q_full * f * ndim].reshape(q_full, f * ndim), coords[:q_full, :])
            if rem:
                b2 = base + q_full * f * ndim
                nc.dma.store(dst[b2:b2 + rem * ndim].reshape(1, rem * ndim), coords[q_full:q_full + 1, :rem * ndim])
        written += k
        nc.release_to(mark)
    if staged is not None:
        staged.finish(nc)
    return out


def _compact(start: int):
    def program(pos, mask):
        found = np.flatnonzero(mask) + start
        flat = pos.reshape(-1)
        flat[:found.size] = found
        flat[found.size:] = 0

    return program


@_native("aten::nonzero", serves=("aten::argwhere", "aten::nonzero_numpy"))
def _nonzero(a: dict) -> torch.Tensor:
    self = a["self"]
    with launch("nonzero", self.device.index) as nc:
        return _nonzero_into(nc, hbm(self), self)


@_native("aten::nonzero.out")
def _nonzero_out(a: dict) -> torch.Tensor:
    self, out = a["self"], a["out"]
    if out.dtype != torch.int64:
        raise RuntimeError(f"nonzero: Expected out tensor to have scalar type Long but got scalar type "
                           f"{SCALAR_TYPE_NAMES[out.dtype]}")
    with launch("nonzero", self.device.index) as nc:
        return _nonzero_into(nc, hbm(self), self, out)


def _broadcast(*shapes) -> tuple[int, ...]:
    return tuple(torch.broadcast_shapes(*shapes))


def _masked_select_into(nc, out: torch.Tensor | None, self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    shape = _broadcast(tuple(self.shape), tuple(mask.shape))
    mv = np.broadcast_to(hbm(mask), shape)
    coords = _nonzero_into(nc, mv, self)
    n = coords.shape[0]
    if out is None:
        out = _empty((n,), self.dtype, self)
    elif tuple(out.shape) != (n,):
        resize_output(out, (n,))
    if n == 0:
        return out
    sv = np.broadcast_to(hbm(self), shape)
    if sv.ndim == 0:
        sv = sv.reshape(1)
    cv = hbm(coords)
    terms = [_Index(cv[:, d], _estrides(sv)[d], shape[d], False) for d in range(len(shape))]
    src = _Rows(sv, (n,), (0,), 1, 1, terms)
    ov = hbm(out)
    dst = _Rows.of(ov, 1, 1, 1)
    _move(nc, dst, src, n, (n,))
    return out


def _check_bool_mask(mask: torch.Tensor, fn: str) -> None:
    if mask.dtype != torch.bool:
        raise RuntimeError(f"{fn}: expected BoolTensor for mask")


@_native("aten::masked_select")
def _masked_select(a: dict) -> torch.Tensor:
    self, mask = a["self"], a["mask"]
    _check_bool_mask(mask, "masked_select")
    with launch("masked_select", self.device.index) as nc:
        return _masked_select_into(nc, None, self, mask)


@_native("aten::masked_select.out")
def _masked_select_out(a: dict) -> torch.Tensor:
    self, mask, out = a["self"], a["mask"], a["out"]
    _check_bool_mask(mask, "masked_select")
    if out.dtype != self.dtype:
        raise RuntimeError(f"masked_select(): self and result must have the same scalar type")
    overlap.assert_out_apart(out, self, mask)
    with launch("masked_select", self.device.index) as nc:
        return _masked_select_into(nc, out, self, mask)


@_native("aten::masked_scatter_", serves=("aten::masked_scatter",))
def _masked_scatter_(a: dict) -> torch.Tensor:
    self, mask, source = a["self"], a["mask"], a["source"]
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{SCALAR_TYPE_NAMES[mask.dtype]}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got"
                           f"{SCALAR_TYPE_NAMES[self.dtype]} and {SCALAR_TYPE_NAMES[source.dtype]}")
    shape = tuple(self.shape)
    if _broadcast(shape, tuple(mask.shape)) != shape:
        raise RuntimeError(f"expand({mask.type()}{{{list(mask.shape)}}}, size={list(shape)}): the number of sizes "
                           f"provided ({len(shape)}) must be greater or equal to the number of dimensions in the "
                           f"tensor ({mask.dim()})")
    with launch("masked_scatter", self.device.index) as nc:
        mv = np.broadcast_to(hbm(mask), shape)
        coords = _nonzero_into(nc, mv, self)
        n = coords.shape[0]
        if n > source.numel():
            raise RuntimeError("Number of elements of source < number of ones in mask")
        if n == 0:
            return self
        sv = _view(self)
        cv = hbm(coords)
        if shape:
            terms = [_Index(cv[:, d], _estrides(sv)[d], sv.shape[d], False) for d in range(len(shape))]
            dst = _Rows(sv, (n,), (0,), 1, 1, terms)
        else:
            dst = _Rows.of(sv, 1, 1, 1)
        src_flat = _reshaped(hbm(source), (source.numel(),))
        keep = None
        if src_flat is None:
            keep = _empty((source.numel(),), source.dtype, source)
            src_flat = hbm(keep)
            _copy_into(nc, src_flat.reshape(source.shape), hbm(source))
        src = _Rows.of(src_flat[:n], 1, 1, 1)
        _move(nc, dst, src, n, (n,), "assign", unique=True)
        del keep
    return self
