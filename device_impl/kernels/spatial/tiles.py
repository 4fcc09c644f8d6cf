"""The spatial family's shared pieces: tile sizes, HBM scratch and padding, boxes, strided windows, flat tiles.

Tiles are ``[p <= P, f]``: ``N_MAX`` (one PSUM bank of fp32) bounds the free size of TensorE's moving operand,
``FREE`` the free size of flat elementwise tiles, ``CACHE_BYTES`` the per-partition budget for operands kept
resident in SBUF.

* ``_boxes`` cuts an index space (batch, output positions, planes) into boxes of at most ``limit`` points (a
  PSUM bank's free size, or the 128 partitions), inner dims whole when they fit; ``_window`` is the strided
  access pattern of one kernel offset over a padded buffer; ``_split`` / ``_to5d`` / ``_batched5`` reshape
  HBM views without copies (1d and 2d problems get leading singleton spatial axes).
* ``_Scratch`` holds the HBM scratch buffers of one launch; ``_pad`` materialises padding (zeros, -inf) and
  the zero insertion of transposed convolution there (DMA fills of the border from a memset tile, ``_fill``,
  plus one HBM->HBM copy of the interior), so every window afterwards is a plain strided DMA.
* ``_Flat``: flat ``[p, f]`` tiles over views that share a logical shape, in the memory order of one of them,
  with each element's coordinates from GpSimd ``iota`` and VectorE integer divide/remainder; ``_copy_cast``
  copies through them, converting dtype on VectorE.

``Scratch`` and ``pad_view`` are shared with the compiler (``device_impl.compiler``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from device_impl.kernels.common import flat_tiles, hbm

P = 128
N_MAX = 512  # moving free size (one PSUM bank of fp32)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
FREE = 2048  # elements per partition in flat elementwise tiles
CACHE_BYTES = 64 * 1024  # per partition budget for operand tiles kept resident in SBUF


def _meta(t):
    """A meta stand-in with t's metadata (for running PyTorch's own shape checks, which compute nothing)."""
    if not isinstance(t, torch.Tensor):
        return t
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


def _empty_like_meta(m: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(m.shape), m.stride(), dtype=m.dtype, device=like.device)


def _split(view: np.ndarray, axis: int, sizes: Sequence[int]) -> np.ndarray:
    """Split one axis of a strided view into several (always a view: strides multiply out)."""
    shape = list(view.shape)
    strides = list(view.strides)
    n = shape[axis]
    inner = 1
    new_strides = []
    for s in reversed(sizes):
        new_strides.append(strides[axis] * inner)
        inner *= s
    assert inner == n, (sizes, n)
    shape[axis:axis + 1] = list(sizes)
    strides[axis:axis + 1] = list(reversed(new_strides))
    return np.lib.stride_tricks.as_strided(view, shape, strides, writeable=view.flags.writeable)


def _to5d(view: np.ndarray, nsp: int) -> np.ndarray:
    """[N, C, *spatial(nsp)] -> [N, C, D, H, W] with leading singleton spatial axes."""
    for _ in range(3 - nsp):
        view = np.expand_dims(view, 2)
    return view


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Consts:
    """Memset tiles of given shape/value, allocated once per launch phase."""

    def __init__(self, nc):
        self.nc = nc
        self.tiles: dict[tuple, Any] = {}

    def get(self, shape, dtype, value):
        key = (tuple(shape), np.dtype(dtype).str, float(value) if not isinstance(value, bool) else value)
        t = self.tiles.get(key)
        if t is None:
            t = self.nc.sbuf_tile(shape, dtype)
            self.nc.vector.memset(t, value)
            self.tiles[key] = t
        return t


def _fill(nc, view: np.ndarray, value, consts: _Consts | None = None) -> None:
    """Fill an HBM view (any strides) with a constant: DMA stores of a memset tile."""
    if view.size == 0:
        return
    consts = consts or _Consts(nc)
    for start, stop, p, f in flat_tiles(view.size, FREE):
        nc.dma.store_flat(view, start, stop, consts.get((p, f), view.dtype, value))


class _Scratch:
    """HBM scratch buffers of one launch (device tensors kept alive until the launch ends)."""

    def __init__(self, device):
        self.device = device
        self.keep: list[torch.Tensor] = []

    def new(self, shape, dtype: np.dtype | torch.dtype) -> np.ndarray:
        if isinstance(dtype, np.dtype):
            from device_impl.engine.dtypes import NUMPY_TO_TORCH
            dtype = NUMPY_TO_TORCH[dtype]
        t = torch.empty(tuple(int(s) for s in shape), dtype=dtype, device=self.device)
        self.keep.append(t)
        return hbm(t)


def _pad(nc, scratch: _Scratch, view: np.ndarray, lo: Sequence[int], hi: Sequence[int], value,
         step: Sequence[int] | None = None, consts: _Consts | None = None) -> np.ndarray:
    """View of ``view`` padded on its trailing len(lo) axes by lo/hi elements of ``value``.

    With ``step``, input elements are placed ``step`` apart (zero insertion of transposed convolution).
    Negative lo/hi crop. Returns ``view`` itself when nothing changes.
    """
    nsp = len(lo)
    step = list(step) if step is not None else [1] * nsp
    if all(a == 0 for a in lo) and all(b == 0 for b in hi) and all(s == 1 for s in step):
        return view
    lead = view.shape[:view.ndim - nsp]
    sizes = view.shape[view.ndim - nsp:]
    out_sizes = [(n - 1) * s + 1 + a + b if n > 0 else max(0, a + b) for n, s, a, b in zip(sizes, step, lo, hi)]
    out_sizes = [max(0, o) for o in out_sizes]
    buf = scratch.new(tuple(lead) + tuple(out_sizes), view.dtype)
    if buf.size == 0:
        return buf
    consts = consts or _Consts(nc)
    # source range kept and destination placement per axis
    src_idx, dst_idx = [], []
    for n, s, a, o in zip(sizes, step, lo, out_sizes):
        i0 = _ceil_div(-a, s) if a < 0 else 0
        i1 = min(n, _ceil_div(o - a, s)) if n > 0 else 0
        i1 = max(i1, i0)
        src_idx.append(slice(i0, i1))
        j0 = a + i0 * s
        dst_idx.append(slice(j0, j0 + (i1 - i0 - 1) * s + 1 if i1 > i0 else j0, s))
    lead_sl = (slice(None),) * len(lead)
    if any(s > 1 for s in step):
        _fill(nc, buf, value, consts)
    else:
        for axis in range(nsp):  # border slabs
            d = dst_idx[axis]
            for sl in (slice(0, d.start), slice(d.stop, out_sizes[axis])):
                if sl.stop > sl.start:
                    idx = [slice(None)] * nsp
                    idx[axis] = sl
                    _fill(nc, buf[lead_sl + tuple(idx)], value, consts)
    src = view[lead_sl + tuple(src_idx)]
    if src.size:
        nc.dma.hbm_copy(buf[lead_sl + tuple(dst_idx)], src)
    return buf


# Shared with the compiler (device_impl.compiler.steps runs stablehlo.convolution and reduce_window with
# them): HBM scratch of one launch, padding (with zero insertion) into scratch; the convolution tile loops
# are conv.conv_run.
Scratch = _Scratch
pad_view = _pad


def _boxes(dims: Sequence[int], limit: int):
    """Tile an index space of shape ``dims`` into boxes (products of ranges) of at most ``limit`` points.

    Yields tuples of (start, stop) per dim; inner dims are covered whole when they fit.
    """
    dims = list(dims)
    if any(d == 0 for d in dims):
        return
    nd = len(dims)
    inner = 1
    split = nd - 1
    # find the outermost axis where the box can no longer cover the inner block whole
    for axis in range(nd - 1, -1, -1):
        if inner * dims[axis] > limit:
            split = axis
            break
        inner *= dims[axis]
    else:
        yield tuple((0, d) for d in dims)
        return
    chunk = max(1, limit // inner)  # count along the split axis per box
    outer = dims[:split]
    for idx in np.ndindex(*outer) if outer else [()]:
        for a in range(0, dims[split], chunk):
            b = min(dims[split], a + chunk)
            yield tuple((i, i + 1) for i in idx) + ((a, b),) + tuple((0, d) for d in dims[split + 1:])


def _box_size(box) -> int:
    n = 1
    for a, b in box:
        n *= b - a
    return n


def _window(view: np.ndarray, axis0: int, offsets: Sequence[int], starts: Sequence[int], counts: Sequence[int],
            strides: Sequence[int]) -> np.ndarray:
    """Strided window: along axes axis0.. take counts[i] elements from offsets[i] + starts[i]*strides[i], step strides[i]."""
    idx = [slice(None)] * view.ndim
    for i, (o, a, c, s) in enumerate(zip(offsets, starts, counts, strides)):
        first = o + a * s
        idx[axis0 + i] = slice(first, first + (c - 1) * s + 1, s) if c > 0 else slice(first, first)
    return view[tuple(idx)]


def _order(view: np.ndarray) -> list[int]:
    """Axes from outermost to innermost in memory (ties keep logical order)."""
    return sorted(range(view.ndim), key=lambda d: (-abs(view.strides[d]) if view.shape[d] != 1 else 0, d))


class _Flat:
    """Flat [p, f] tiles over views that share a logical shape, in the memory order of ``like``.

    ``coords(nc, t0, axis)`` gives an int64 tile of each element's coordinate along ``axis`` (of
    the logical shape), computed on GpSimd (iota) and VectorE from the flat position.
    """

    def __init__(self, like: np.ndarray):
        self.shape = like.shape
        self.perm = _order(like)
        pshape = [like.shape[a] for a in self.perm]
        self.inner = {}
        acc = 1
        for pos in range(len(pshape) - 1, -1, -1):
            self.inner[self.perm[pos]] = (acc, pshape[pos], pos == 0)
            acc *= pshape[pos]
        self.numel = acc

    def view(self, v: np.ndarray) -> np.ndarray:
        return v.transpose(self.perm)

    def tiles(self):
        return flat_tiles(self.numel, FREE)

    def flat_index(self, nc, start, p, f):
        t = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.iota(t, base=start, partition_step=f, free_step=1)
        return t

    def coord(self, nc, flat, axis):
        inner, n, outermost = self.inner[axis]
        t = nc.sbuf_tile(flat.shape, I64)
        if n == 1:
            nc.vector.memset(t, 0)
            return t
        if inner == 1:
            nc.vector.tensor_scalar(t, flat, "remainder", n)
            return t
        nc.vector.tensor_scalar(t, flat, "floor_divide", inner)
        if not outermost:
            nc.vector.tensor_scalar(t, t, "remainder", n)
        return t


def _copy_cast(nc, dst: np.ndarray, src: np.ndarray) -> None:
    """dst = src (same logical shape, any strides), converting dtype on VectorE."""
    flat = _Flat(dst)
    dv, sv = flat.view(dst), flat.view(src)
    for start, stop, p, f in flat.tiles():
        mark = nc.mark()
        t = nc.sbuf_tile((p, f), src.dtype)
        nc.dma.load_flat(t, sv, start, stop)
        if src.dtype != dst.dtype:
            o = nc.sbuf_tile((p, f), dst.dtype)
            nc.vector.tensor_copy(o, t)
            t = o
        nc.dma.store_flat(dv, start, stop, t)
        nc.release_to(mark)


def _batched5(view: np.ndarray, nsp: int) -> np.ndarray:
    """[(N,) C, *spatial] -> [N, C, D, H, W]."""
    if view.ndim == nsp + 1:
        view = view[None]
    return _to5d(view, nsp)
