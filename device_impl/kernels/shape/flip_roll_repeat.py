"""flip (fliplr, flipud, rot90), roll, repeat (tile).

Tiling:

* flip: the input read with negative strides along the flipped dims, one HBM -> HBM DMA; a flip
  of the innermost dim goes through SBUF instead (contiguous rows in, the columns reversed by a
  GpSimd permutation, contiguous rows out), because a descriptor per element would cost 5x the
  bytes. Rows sit on partitions (short rows packed several to a partition along the free axis,
  rows longer than FREE_MAX in column blocks stored at the mirrored columns);
* roll: one copy per box of the output (2 per rolled dim); the roll of the flattened tensor is two
  copies, through flat tiles ``[p <= 128, f]`` when the source is strided;
* repeat: one copy from the input broadcast over the repeated dims (zero strides).
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.kernels.common import FREE_MAX, P, flat_tiles, hbm, launch
from device_impl.kernels.shape.cat_stack import _cat_memory_format
from device_impl.kernels.shape.moves import _in_order, _merged, _move, _serve, _wrap


def _flip_dims(ndim: int, dims: Sequence[int]) -> list[int]:
    wrapped: list[int] = []
    for d in dims:
        w = _wrap(d, ndim)
        if w in wrapped:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        wrapped.append(w)
    return wrapped if ndim else []


def _rows_view(view: np.ndarray) -> np.ndarray | None:
    """``view`` as [rows, last] without copying, or None when its outer dims do not merge."""
    merged = _merged(view[..., 0]) if view.ndim > 1 else None
    if view.ndim == 1:
        return view[None]
    if merged.ndim != 1:
        return None
    return np.lib.stride_tricks.as_strided(view, (merged.shape[0], view.shape[-1]),
                                           (merged.strides[0], view.strides[-1]))


def _flip_last_through_sbuf(nc, dst: np.ndarray, src: np.ndarray) -> bool:
    """dst <- src[..., ::-1] with contiguous rows both ways, the reversal a GpSimd permutation.

    ``dst`` is C-contiguous, ``src`` has unit inner stride. Short rows are packed several to a
    partition (one DMA descriptor per partition instead of per row). False when src's rows
    cannot be tiled (a strided gather of rows longer than a tile)."""
    w = src.shape[-1]
    rows = src.size // w
    d2 = dst.reshape(rows, w)
    s2 = _rows_view(src)
    if s2 is None and w > FREE_MAX:
        return False
    if w > FREE_MAX:  # long rows: column blocks, each reversed and stored at the mirrored columns
        for r0 in range(0, rows, P):
            r1 = min(rows, r0 + P)
            for c0 in range(0, w, FREE_MAX):
                c1 = min(w, c0 + FREE_MAX)
                mark = nc.mark()
                a = nc.sbuf_tile((r1 - r0, c1 - c0), src.dtype)
                nc.dma.load(a, s2[r0:r1, c0:c1])
                b = nc.sbuf_tile((r1 - r0, c1 - c0), src.dtype)
                nc.gpsimd.run("reverse_free", _reverse_segments(c1 - c0), (b,), (a,))
                nc.dma.store(d2[r0:r1, w - c1:w - c0], b)
                nc.release_to(mark)
        return True
    k = max(1, min(FREE_MAX // w, rows // P))  # rows per partition
    reverse = _reverse_segments(w)
    r0 = 0
    while r0 < rows:
        per = k if rows - r0 >= k else 1
        p = min(P, (rows - r0) // per)
        r1 = r0 + p * per
        mark = nc.mark()
        a = nc.sbuf_tile((p, per * w), src.dtype)
        if s2 is not None:
            nc.dma.load(a, s2[r0:r1])
        else:
            nc.dma.load_flat(a, src, r0 * w, r1 * w)
        b = nc.sbuf_tile((p, per * w), src.dtype)
        nc.gpsimd.run("reverse_free", reverse, (b,), (a,))
        nc.dma.store(d2[r0:r1], b)
        nc.release_to(mark)
        r0 = r1
    return True


def _reverse_segments(w: int):
    def program(out: np.ndarray, a: np.ndarray) -> None:
        p, f = a.shape
        out.reshape(p, f // w, w)[...] = a.reshape(p, f // w, w)[:, :, ::-1]

    return program


@TABLE.native("aten::flip", dtypes=None, serves=("aten::flip.out", "aten::fliplr", "aten::flipud"))
def flip(self, dims):
    wrapped = _flip_dims(self.dim(), list(dims))
    out = torch.empty_like(self)
    if out.numel() == 0:
        return out
    src = hbm(self)
    index = [slice(None)] * self.dim()
    for d in wrapped:
        index[d] = slice(None, None, -1)
    src = src[tuple(index)]
    dst = hbm(out)
    with launch("flip", out.device.index) as nc:
        dst_o, src_o = _in_order(dst, src)
        # The innermost dim flipped: a descriptor per element, unless the rows go through SBUF.
        inner_flipped = (dst_o.ndim >= 1 and dst_o.shape[-1] > 1 and dst_o.flags.c_contiguous
                         and src_o.strides[-1] == -src_o.itemsize)
        if not (inner_flipped and _flip_last_through_sbuf(nc, dst_o, src_o[..., ::-1])):
            nc.dma.hbm_copy(dst_o, src_o)
    return out


def _roll_strides(self: torch.Tensor, shifts: Sequence[int], dims: Sequence[int]) -> tuple[int, ...]:
    """The strides CPU's roll gives a non-empty tensor: each dim's roll is a cat of two narrows of the
    previous result (its layout worked out on meta tensors)."""
    t = torch.empty_strided(tuple(self.shape), self.stride(), dtype=self.dtype, device="meta")
    for s, d in zip(shifts, dims):
        size = t.shape[d]
        start = (size - s) % size
        fmt = _cat_memory_format([t.narrow(d, start, size - start), t.narrow(d, 0, start)])
        t = torch.empty(tuple(t.shape), dtype=t.dtype, device="meta", memory_format=fmt)
    return t.stride()


@TABLE.native("aten::roll", dtypes=None, serves=("aten::roll.out",))
def roll(self, shifts, dims=()):
    shifts, dims = list(shifts), list(dims)
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not dims and len(shifts) == 1:  # roll of the flattened tensor
        out = torch.empty(tuple(self.shape), dtype=self.dtype, device=self.device)
        n = self.numel()
        if n == 0:  # CPU: self.contiguous().view(n) keeps a 1-D tensor's stride through clone(Preserve)
            return torch.empty_like(self) if self.dim() == 1 else out
        s = shifts[0] % n
        dst = hbm(out).reshape(-1)
        src = hbm(self)
        with launch("roll", out.device.index) as nc:
            for d0, s0, length in ((s, 0, n - s), (0, n - s, s)):
                if length == 0:
                    continue
                if src.flags.c_contiguous:
                    nc.dma.hbm_copy(dst[d0:d0 + length], src.reshape(-1)[s0:s0 + length])
                    continue
                for a, b, p, f in flat_tiles(length):  # row-major reads of a strided source
                    mark = nc.mark()
                    tile = nc.sbuf_tile((p, f), src.dtype)
                    nc.dma.load_flat(tile, src, s0 + a, s0 + b)
                    nc.dma.store(dst[d0 + a:d0 + b].reshape(p, f), tile)
                    nc.release_to(mark)
        return out
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    wrapped = [_wrap(d, self.dim(), scalar_ok=False) for d in dims]
    if self.numel() == 0:  # CPU: clone(Preserve)
        return torch.empty_like(self)
    out = torch.empty_strided(tuple(self.shape), _roll_strides(self, shifts, wrapped), dtype=self.dtype,
                              device=self.device)
    total: dict[int, int] = {}
    for s, d in zip(shifts, wrapped):
        total[d] = total.get(d, 0) + s
    per_dim = []
    for d, s in total.items():
        n = self.shape[d]
        s %= n
        per_dim.append([(d, s, n - s, slice(0, n - s))] + ([(d, 0, s, slice(n - s, n))] if s else []))
    dst, src = hbm(out), hbm(self)
    with launch("roll", out.device.index) as nc:
        for combo in itertools.product(*per_dim):
            di = [slice(None)] * self.dim()
            si = [slice(None)] * self.dim()
            for d, o0, length, sl in combo:
                di[d] = slice(o0, o0 + length)
                si[d] = sl
            _move(nc, dst[tuple(di)], src[tuple(si)])
    return out


@TABLE.native("aten::repeat", dtypes=None, serves=("aten::repeat.out", "aten::tile"))
def repeat(self, repeats):
    repeats = [int(r) for r in repeats]
    if len(repeats) < self.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    lead = len(repeats) - self.dim()
    padded = [1] * lead + list(self.shape)
    target = [p * r for p, r in zip(padded, repeats)]
    if any(t < 0 for t in target):
        bad = next(t for t in target if t < 0)
        raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {target}")
    out = torch.empty(target, dtype=self.dtype, device=self.device)
    if out.numel() == 0:
        return out
    interleaved = [x for p, r in zip(padded, repeats) for x in (r, p)]
    dst = hbm(out).reshape(interleaved)
    src = hbm(self).reshape(padded) if self.dim() else hbm(self).reshape([1] * len(padded))
    src = np.expand_dims(src, tuple(range(0, 2 * len(padded), 2)))
    with launch("repeat", out.device.index) as nc:
        _move(nc, dst, src)
    return out


_serve(["aten::rot90"], "aten::flip")
