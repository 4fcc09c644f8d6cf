"""Shape and data-movement kernels: cat, flip, roll, repeat, padding, tril/triu, unfold, narrow_copy.

These ops move bytes and compute (almost) nothing, so most of them are DMA
programs over strided HBM views, the strides doing the work:

* cat: one HBM -> HBM copy per input into its slice of the output (a VectorE
  cast through SBUF where type promotion changes an input's dtype);
* flip: the input read with negative strides along the flipped dims; a flip
  of the innermost dim goes through SBUF instead (contiguous rows in, the
  columns reversed by a GpSimd permutation, contiguous rows out), because a
  descriptor per element would cost 5x the bytes;
* roll: one copy per box of the output (2 per rolled dim);
* repeat: one copy from the input broadcast over the repeated dims;
* reflection/replication pads: one copy per box of the output (<= 3 per padded
  dim), reflected boxes read with negative strides, replicated ones with zero
  strides; their backward ops fold the padded dims back one at a time,
  accumulating in fp32 on VectorE;
* constant_pad_nd: the interior copied, the pad boxes stored from a tile
  memset to the value;
* tril/triu: rows on partitions (several small matrices per tile), a mask
  from GpSimd iotas, VectorE select; blocks entirely kept or entirely zero
  skip the engines (a DMA copy or a store of zeros).

View ops (permute, expand, select, slice, ...) are PyTorch composites over
``as_strided`` (a C++ metadata kernel); ``unfold`` is implemented here as one.
They are recorded in the lowering table as served by what they reach.

numpy reference of each op: the same index maps applied with numpy slicing.
"""

from __future__ import annotations

import itertools
import warnings
from functools import reduce
from typing import Any, Sequence

import numpy as np
import torch

from device_impl._compat import internal
from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels import overlap, scalars
from device_impl.kernels.common import FREE_MAX, P, SCALAR_TYPE_NAMES, flat_tiles, hbm, launch, scalar_of
from device_impl.kernels.registry import in_dispatcher, routed_by_composite

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
    shape = tuple(int(s) for s in shape)
    if tuple(out.shape) == shape:
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does "
            f"not match the required output shape {list(shape)}. This behavior is deprecated, and in a future "
            f"PyTorch release outputs will not be resized unless they have zero elements. You can explicitly "
            f"reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).", UserWarning,
            stacklevel=4)
    if memory_format is None:
        out.resize_(shape)
    else:
        out.resize_(shape, memory_format=memory_format)


def _exact_dtype(out: torch.Tensor, dtype: torch.dtype) -> None:
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {scalars.CPP_NAMES.get(dtype, dtype)}, but got "
                           f"{scalars.CPP_NAMES.get(out.dtype, out.dtype)} instead")


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


# --- cat ---------------------------------------------------------------------------

def _legacy_empty(t: torch.Tensor) -> bool:
    return t.dim() == 1 and t.shape[0] == 0


def _cat_memory_format(tensors: Sequence[torch.Tensor]) -> torch.memory_format:
    """compute_output_memory_format: every input's suggested format, contiguous unless they all agree."""
    fmt = None
    for t in tensors:
        f = suggest_memory_format(t)
        if f == torch.contiguous_format:
            return f
        if fmt is not None and fmt != f:
            return torch.contiguous_format
        fmt = f
    return fmt if fmt is not None else torch.contiguous_format


def _cat_meta(tensors: Sequence[torch.Tensor], dim: int) -> tuple[tuple[int, ...], int]:
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    ref = next((t for t in tensors if not _legacy_empty(t)), None)
    if ref is None:
        return (0,), dim
    d = _wrap(dim, ref.dim())
    total = 0
    for i, t in enumerate(tensors):
        if _legacy_empty(t):
            continue
        if t.dim() != ref.dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.dim()} and {t.dim()}")
        for k in range(ref.dim()):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the list.")
        total += t.shape[d]
    shape = list(ref.shape)
    shape[d] = total
    return tuple(shape), d


@TABLE.native("aten::cat.out", dtypes=None, serves=("aten::cat",))
def cat_out(tensors, dim=0, *, out):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    _same_device(tensors, out)
    shape, d = _cat_meta(tensors, dim)
    dtype = reduce(torch.promote_types, (t.dtype for t in tensors))
    if not torch.can_cast(dtype, out.dtype):
        raise TypeError(f"torch.cat(): input types can't be cast to the desired output type "
                        f"{SCALAR_TYPE_NAMES[out.dtype]}")
    _resize_out(out, shape, _cat_memory_format(tensors))
    overlap.assert_out_apart(out, *tensors)  # after the resize, as CPU's meta function checks them
    if out.numel() == 0:
        return out
    view = hbm(out)
    later = []
    with launch("cat", out.device.index) as nc:
        offset = 0
        for t in tensors:
            if _legacy_empty(t):
                continue
            n = t.shape[d]
            if t.numel():
                if t.dtype == out.dtype or (t.dtype in COMPUTE_DTYPES and out.dtype in COMPUTE_DTYPES):
                    _move(nc, view[(slice(None),) * d + (slice(offset, offset + n),)], hbm(t))
                else:  # a conversion no engine does (float64, complex): copy_'s own path, after this launch
                    later.append((offset, n, t))
            offset += n
    for offset, n, t in later:
        out.narrow(d, offset, n).copy_(t)
    return out


# --- flip, roll, repeat ------------------------------------------------------------

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


# --- constant padding --------------------------------------------------------------

@TABLE.native("aten::constant_pad_nd", dtypes=COMPUTE_DTYPES, serves=("aten::constant_pad_nd.out",))
def constant_pad_nd(self, pad, value=0):
    pad = [int(p) for p in pad]
    if len(pad) % 2:
        raise RuntimeError(f"Length of pad must be even but instead it equals {len(pad)}")
    l_inp, l_pad = self.dim(), len(pad) // 2
    l_diff = l_inp - l_pad
    if l_inp < l_pad:
        raise RuntimeError(f"Length of pad should be no more than twice the number of dimensions of the input. "
                           f"Pad length is {len(pad)}while the input has {l_inp}dimensions.")
    c_input = self
    all_non_positive = True
    for i in range(l_diff, l_inp):
        k = 2 * (l_inp - i - 1)
        if pad[k] < 0:
            c_input = c_input.narrow(i, -pad[k], c_input.size(i) + pad[k])
        elif pad[k] != 0:
            all_non_positive = False
        if pad[k + 1] < 0:
            c_input = c_input.narrow(i, 0, c_input.size(i) + pad[k + 1])
        elif pad[k + 1] != 0:
            all_non_positive = False
    if all_non_positive:  # a crop: clone of the narrowed view
        out = torch.empty_like(c_input)
        if out.numel():
            with launch("constant_pad_nd", out.device.index) as nc:
                _move(nc, hbm(out), hbm(c_input))
        return out
    new_shape = list(self.shape[:l_diff])
    for i in range(l_pad):
        k = len(pad) - (i + 1) * 2
        size = self.shape[l_diff + i]
        new = size + pad[k] + pad[k + 1]
        if new < 0:
            raise RuntimeError(f"The input size {size}, plus negative padding {pad[k]} and {pad[k + 1]} resulted in "
                               f"a negative output size, which is invalid. Check dimension {l_diff + i} of your "
                               f"input.")
        new_shape.append(new)
    fill = _fill_value(value, self.dtype)
    out = torch.empty(new_shape, dtype=self.dtype, device=self.device, memory_format=suggest_memory_format(self))
    if out.numel() == 0:
        return out
    dst = hbm(out)
    interior = [slice(None)] * l_inp
    regions = []
    for i in range(l_diff, l_inp):
        k = 2 * (l_inp - i - 1)
        lo, hi = max(pad[k], 0), new_shape[i] - max(pad[k + 1], 0)
        for sl in (slice(0, lo), slice(hi, new_shape[i])):
            if sl.stop > sl.start:
                regions.append(dst[tuple(interior[:i] + [sl] + [slice(None)] * (l_inp - i - 1))])
        interior[i] = slice(lo, hi)
    with launch("constant_pad_nd", out.device.index) as nc:
        const = _const_tile(nc, dst.dtype, fill, regions)
        for region in regions:
            _fill(nc, region, const)
        _move(nc, dst[tuple(interior)], hbm(c_input))
    return out


# --- reflection and replication padding ----------------------------------------------

def _pad_pieces(w: int, pl: int, pr: int, mode: str) -> list[tuple[int, int, Any]]:
    """Boxes of one padded dim: (out start, out stop, input slice | ('edge', index)).

    Output index j reads input index reflect(j - pl) or clamp(j - pl) (negative pads crop)."""
    t0, t1 = -pl, w + pr
    pieces = []
    a, b = t0, min(t1, 0)
    if b > a:
        src = slice(-a, -b, -1) if mode == "reflect" else ("edge", 0)
        pieces.append((a + pl, b + pl, src))
    a, b = max(t0, 0), min(t1, w)
    if b > a:
        pieces.append((a + pl, b + pl, slice(a, b)))
    a, b = max(t0, w), t1
    if b > a:
        if mode == "reflect":
            start = 2 * (w - 1) - a
            stop = start - (b - a)
            src = slice(start, stop if stop >= 0 else None, -1)
        else:
            src = ("edge", w - 1)
        pieces.append((a + pl, b + pl, src))
    return pieces


def _src_index(src) -> slice:
    return src if isinstance(src, slice) else slice(src[1], src[1] + 1)


class _Pad:
    """One of reflection_pad{1,2,3}d / replication_pad{1,2,3}d: argument checks and layouts."""

    def __init__(self, mode: str, n: int):
        self.mode, self.n = mode, n
        self.name = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{n}d"

    def pads(self, padding) -> list[tuple[int, int]]:
        """(left, right) per padded dim, outermost first."""
        padding = [int(p) for p in padding]
        if len(padding) != 2 * self.n:
            suffix = f", but got: {len(padding)}" if self.mode == "reflect" else ""
            raise RuntimeError(f"padding size is expected to be {2 * self.n}{suffix}")
        return [(padding[2 * k], padding[2 * k + 1]) for k in reversed(range(self.n))]

    def check_input(self, x: torch.Tensor) -> None:
        n = self.n
        ok = x.dim() in (n + 1, n + 2) and all(s != 0 for s in x.shape[(1 if x.dim() == n + 2 else 0):])
        if not ok:
            raise RuntimeError(f"Expected {n + 1}D or {n + 2}D (batch mode) tensor with possibly 0 batch size and "
                               f"other non-zero dimensions for input, but got: {list(x.shape)}")

    def out_shape(self, x: torch.Tensor, pads: list[tuple[int, int]]) -> list[int]:
        dims = list(range(x.dim() - self.n, x.dim()))
        if self.mode == "reflect":
            for k, (d, (pl, pr)) in reversed(list(enumerate(zip(dims, pads)))):
                if not (pl < x.shape[d] and pr < x.shape[d]):
                    arg = 4 + 2 * (self.n - 1 - k)
                    raise RuntimeError(f"Argument #{arg}: Padding size should be less than the corresponding input "
                                       f"dimension, but got: padding ({pl}, {pr}) at dimension {d} of input "
                                       f"{list(x.shape)}")
        shape = list(x.shape)
        for d, (pl, pr) in zip(dims, pads):
            shape[d] = x.shape[d] + pl + pr
        # 1-D needs an output column; 2-D/3-D only refuse an output empty in every padded dim (a
        # CPU quirk: one empty dim gives an empty result), then any negative size.
        if all(shape[d] < 1 for d in dims) or (self.n == 1 and shape[dims[0]] < 1):
            names = "DHW"[3 - self.n:]
            given = " ".join(f"{c}: {x.shape[d]}" for c, d in zip(names, dims))
            calc = " ".join(f"{c}: {shape[d]}" for c, d in zip(names, dims))
            raise RuntimeError(f"input ({given}) is too small. Calculated output {calc}")
        if any(shape[d] < 0 for d in dims):
            bad = next(shape[d] for d in dims if shape[d] < 0)
            raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {shape}")
        return shape

    def memory_format(self, x: torch.Tensor):
        return torch.contiguous_format if self.n == 1 else suggest_memory_format(x)

    def resize(self, out: torch.Tensor, shape, x: torch.Tensor, restride: bool = True) -> None:
        """Structured resize; the 2-D and 3-D CPU kernels then restride even a correctly sized out."""
        fmt = self.memory_format(x) if restride else torch.contiguous_format
        _resize_out(out, shape, fmt)
        if self.n > 1 and restride:
            out.resize_(tuple(shape), memory_format=fmt)

    def _restrides_grad(self, g: torch.Tensor) -> bool:
        # CPU's reflection_pad3d_backward returns before its restride (and before zeroing the
        # result) when grad_output is empty; the device zeroes it but keeps CPU's layout.
        return not (self.mode == "reflect" and self.n == 3 and g.numel() == 0)

    def refuse(self, dtype: torch.dtype, backward: bool = False) -> NotImplementedError:
        name = self.name + ("_backward" if backward else "")
        return NotImplementedError(f'"{name}" not implemented for \'{SCALAR_TYPE_NAMES[dtype]}\'')

    # forward
    def meta(self, x: torch.Tensor, padding) -> list[int]:
        pads = self.pads(padding)
        self.check_input(x)
        shape = self.out_shape(x, pads)
        if x.dtype == torch.bool:
            raise self.refuse(x.dtype)
        return shape

    def compute(self, out: torch.Tensor, x: torch.Tensor, padding) -> None:
        if out.numel() == 0:
            return
        pads = self.pads(padding)
        dims = list(range(x.dim() - self.n, x.dim()))
        per_dim = [_pad_pieces(x.shape[d], pl, pr, self.mode) for d, (pl, pr) in zip(dims, pads)]
        dst, src = hbm(out), hbm(x)
        with launch(self.name, out.device.index) as nc:
            for combo in itertools.product(*per_dim):
                di = [slice(None)] * x.dim()
                si = [slice(None)] * x.dim()
                for d, (o0, o1, piece) in zip(dims, combo):
                    di[d] = slice(o0, o1)
                    si[d] = _src_index(piece)
                _move(nc, dst[tuple(di)], src[tuple(si)])

    def functional(self, x, padding):
        shape = self.meta(x, padding)
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=self.memory_format(x))
        self.compute(out, x, padding)
        return out

    def out_variant(self, x, padding, *, out):
        shape = self.meta(x, padding)
        _exact_dtype(out, x.dtype)
        self.resize(out, shape, x)
        self.compute(out, x, padding)
        return out

    # backward
    def backward_meta(self, g: torch.Tensor, x: torch.Tensor, padding) -> None:
        pads = self.pads(padding)
        self.check_input(x)
        shape = self.out_shape(x, pads)
        names = {1: ["width"], 2: ["height", "width"], 3: ["depth", "height", "width"]}[self.n]
        if g.dim() != x.dim() or any(g.shape[d] != x.shape[d] for d in range(x.dim() - self.n)):
            raise RuntimeError(f"{self.name}_backward: grad_output of shape {list(g.shape)} does not match the "
                               f"output shape {shape}")
        for name, d in zip(names, range(x.dim() - self.n, x.dim())):
            if g.shape[d] != shape[d]:
                sep = "," if self.mode == "reflect" or self.n > 1 else ""
                label = "grad_output" if (self.mode == "reflect" and self.n == 1) else "gradOutput"
                raise RuntimeError(f"{label} {name} unexpected. Expected: {shape[d]}{sep} Got: {g.shape[d]}")
        if g.dtype != x.dtype:
            if g.dtype in _FLOATS or g.dtype.is_floating_point:
                raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[x.dtype]} but found "
                                   f"{SCALAR_TYPE_NAMES[g.dtype]}")
        if g.dtype not in _FLOATS:
            raise self.refuse(g.dtype, backward=True)

    def backward_compute(self, gi: torch.Tensor, g: torch.Tensor, x: torch.Tensor, padding) -> None:
        if gi.numel() == 0:
            return
        pads = self.pads(padding)
        dims = list(range(x.dim() - self.n, x.dim()))
        keep: list[torch.Tensor] = []
        with launch(self.name + "_backward", gi.device.index) as nc:
            cur = hbm(g)
            for step, (d, (pl, pr)) in enumerate(zip(reversed(dims), reversed(pads))):
                shape = list(cur.shape)
                shape[d] = x.shape[d]
                last = step == len(dims) - 1
                if last and gi.dtype == torch.float32:
                    dst = hbm(gi)
                else:
                    keep.append(torch.empty(shape, dtype=torch.float32, device=gi.device))
                    dst = hbm(keep[-1])
                self._fold(nc, dst, cur, d, x.shape[d], pl, pr)
                cur = dst
            if gi.dtype != torch.float32:
                _move(nc, hbm(gi), cur)

    def _fold(self, nc, dst: np.ndarray, src: np.ndarray, d: int, w: int, pl: int, pr: int) -> None:
        """dst (input size along d, fp32) = the adjoint of padding dim d applied to src."""
        pieces = _pad_pieces(w, pl, pr, self.mode)
        lead = (slice(None),) * d
        middle = next(((o0, o1, s) for o0, o1, s in pieces if isinstance(s, slice) and s.step is None), None)
        uncovered = [slice(0, w)] if middle is None else [slice(0, middle[2].start), slice(middle[2].stop, w)]
        regions = [dst[lead + (sl,)] for sl in uncovered if sl.stop > sl.start]
        if regions:
            zero = _const_tile(nc, dst.dtype, 0, regions)
            for r in regions:
                _fill(nc, r, zero)
        if middle is not None:
            _move(nc, dst[lead + (middle[2],)], src[lead + (slice(middle[0], middle[1]),)])
        for o0, o1, s in pieces:
            if middle is not None and s is middle[2]:
                continue
            if isinstance(s, slice):
                _accumulate(nc, dst[lead + (s,)], src[lead + (slice(o0, o1),)])
            else:
                _accumulate_sum(nc, dst[lead + (s[1],)], src[lead + (slice(o0, o1),)], d)

    def backward_functional(self, grad_output, self_, padding):
        self.backward_meta(grad_output, self_, padding)
        fmt = self.memory_format(self_) if self._restrides_grad(grad_output) else torch.contiguous_format
        gi = torch.empty(tuple(self_.shape), dtype=grad_output.dtype, device=self_.device, memory_format=fmt)
        self.backward_compute(gi, grad_output, self_, padding)
        return gi

    def backward_out(self, grad_output, self_, padding, *, grad_input):
        self.backward_meta(grad_output, self_, padding)
        _exact_dtype(grad_input, grad_output.dtype)
        self.resize(grad_input, self_.shape, self_, self._restrides_grad(grad_output))
        self.backward_compute(grad_input, grad_output, self_, padding)
        return grad_input


def _register_pad(mode: str, n: int) -> None:
    pad = _Pad(mode, n)
    base = f"aten::{pad.name}"
    TABLE.native(f"{base}.out", dtypes=None)(pad.out_variant)
    if routed_by_composite(base):
        TABLE.serves(base, f"{base}.out")
    else:
        TABLE.native(base, dtypes=None)(pad.functional)
    TABLE.native(f"{base}_backward.grad_input", dtypes=COMPUTE_DTYPES)(pad.backward_out)
    if routed_by_composite(f"{base}_backward"):
        TABLE.serves(f"{base}_backward", f"{base}_backward.grad_input")
    else:
        TABLE.native(f"{base}_backward", dtypes=COMPUTE_DTYPES)(pad.backward_functional)


for _mode in ("reflect", "replicate"):
    for _n in (1, 2, 3):
        _register_pad(_mode, _n)


# --- tril / triu -------------------------------------------------------------------

def _lead_merged(view: np.ndarray, lead: int) -> np.ndarray | None:
    """``view`` [*lead, R, C] as [B, R, C] without copying, or None when the lead dims do not merge."""
    dims = [(n, s) for n, s in zip(view.shape[:lead], view.strides[:lead]) if n != 1]
    b = 1
    for i, (n, s) in enumerate(dims):
        if i and dims[i - 1][1] != s * n:
            return None
        b *= n
    stride = dims[-1][1] if dims else 0
    return np.lib.stride_tricks.as_strided(view, (b,) + view.shape[lead:], (stride,) + view.strides[lead:])


def _tri(x: torch.Tensor, out: torch.Tensor, k: int, lower: bool, name: str) -> None:
    if out.numel() == 0:
        return
    rows, cols = x.shape[-2], x.shape[-1]
    k = max(min(k, cols), -rows)  # beyond these every element is kept or every one zeroed
    inplace = overlap.same_view(out, x)
    xv, ov = hbm(x), hbm(out)
    lead = x.dim() - 2
    xb, ob = _lead_merged(xv, lead), _lead_merged(ov, lead)
    if xb is not None and ob is not None:
        stacks = [(xb, ob)]
    else:
        stacks = [(xv[idx][None], ov[idx][None]) for idx in np.ndindex(*x.shape[:-2])]
    packed = rows <= P
    group = P // rows if packed else 1
    row_blocks = [(0, rows)] if packed else [(r0, min(rows, r0 + P)) for r0 in range(0, rows, P)]
    dtype = xv.dtype
    with launch(name, out.device.index) as nc:
        fmax = min(cols, FREE_MAX)
        zero = nc.sbuf_tile((min(P, group * rows) if packed else P, fmax), dtype)
        nc.vector.memset(zero, 0)
        for r0, r1 in row_blocks:
            for c0 in range(0, cols, fmax):
                c1 = min(cols, c0 + fmax)
                f = c1 - c0
                lo, hi = c0 - (r1 - 1), (c1 - 1) - r0  # extremes of j - i over the block
                full = hi <= k if lower else lo >= k
                empty = lo > k if lower else hi < k
                mark = nc.mark()
                mask = None
                if not full and not empty:
                    p = group * rows if packed else r1 - r0
                    diff = nc.sbuf_tile((p, f), np.int32)
                    if packed:  # partition q holds row q % rows of matrix q // rows
                        row = nc.sbuf_tile((p, 1), np.int32)
                        nc.gpsimd.iota(row, base=0, partition_step=1, free_step=0)
                        nc.vector.tensor_scalar(row, row, "remainder", rows)
                        nc.gpsimd.iota(diff, base=c0, partition_step=0, free_step=1)
                        nc.vector.tensor_tensor(diff, diff, row, "subtract")
                    else:
                        nc.gpsimd.iota(diff, base=c0 - r0, partition_step=-1, free_step=1)
                    mask = nc.sbuf_tile((p, f), np.bool_)
                    nc.vector.tensor_scalar(mask, diff, "less_equal" if lower else "greater_equal", k)
                for xs, os_ in stacks:
                    for b0 in range(0, xs.shape[0], group):
                        b1 = min(xs.shape[0], b0 + group)
                        src = xs[b0:b1, r0:r1, c0:c1]
                        dst = os_[b0:b1, r0:r1, c0:c1]
                        n = (b1 - b0) * (r1 - r0)
                        if full:
                            if not inplace:
                                nc.dma.hbm_copy(dst, src)
                            continue
                        if empty:
                            nc.dma.store(dst, zero[:n, :f])
                            continue
                        inner = nc.mark()
                        t = nc.sbuf_tile((n, f), dtype)
                        nc.dma.load(t, src)
                        o = nc.sbuf_tile((n, f), dtype)
                        nc.vector.select(o, mask[:n], t, zero[:n, :f])
                        nc.dma.store(dst, o)
                        nc.release_to(inner)
                nc.release_to(mark)


def _register_tri(name: str, lower: bool) -> None:
    def kernel(self, diagonal=0, *, out):
        if self.dim() < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        _exact_dtype(out, self.dtype)
        _resize_out(out, self.shape)
        _tri(self, out, int(diagonal), lower, name)
        return out

    kernel.__name__ = f"{name}_out"
    TABLE.native(f"aten::{name}.out", dtypes=COMPUTE_DTYPES, serves=(f"aten::{name}", f"aten::{name}_"))(kernel)


_register_tri("tril", True)
_register_tri("triu", False)


# --- unfold, narrow_copy --------------------------------------------------------------

@TABLE.native("aten::unfold", dtypes=None, serves=("aten::unfold_copy",))
def unfold(self, dimension, size, step):
    ndim = self.dim()
    d = _wrap(dimension, ndim)
    max_size = self.shape[d] if ndim else 1
    if size > max_size:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {max_size} but size is {size}")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if ndim == 0:
        return self.as_strided((size,), (1,), self.storage_offset())
    sizes, strides = list(self.shape), list(self.stride())
    sizes.append(size)
    strides.append(strides[d])
    sizes[d] = (self.shape[d] - size) // step + 1
    strides[d] = step * self.stride(d)
    return self.as_strided(sizes, strides, self.storage_offset())


@TABLE.native("aten::unfold_backward", dtypes=COMPUTE_DTYPES)
def unfold_backward(grad_in, input_sizes, dim, size, step):
    input_sizes = [int(s) for s in input_sizes]
    d = _wrap(dim, len(input_sizes))
    out = torch.empty(input_sizes, dtype=grad_in.dtype, device=grad_in.device)
    if out.numel() == 0:
        return out
    windows = (input_sizes[d] - size) // step + 1 if input_sizes else 1
    g = hbm(grad_in)
    if not input_sizes:  # 0-dim input: grad_in is [size] over the one element
        g = g.reshape(-1)
    acc_dtype = torch.float32 if grad_in.dtype in _FLOATS else grad_in.dtype
    scratch = None if acc_dtype == grad_in.dtype else torch.empty(input_sizes, dtype=acc_dtype, device=out.device)
    with launch("unfold_backward", out.device.index) as nc:
        acc = hbm(out) if scratch is None else hbm(scratch)
        const = _const_tile(nc, acc.dtype, 0, [acc])
        _fill(nc, acc, const)
        if input_sizes:
            lead = (slice(None),) * d
            for t in range(size):
                hit = slice(t, t + (windows - 1) * step + 1, step)
                _accumulate(nc, acc[lead + (hit,)], g[..., t])
        else:
            for t in range(size):
                _accumulate(nc, acc, g[t])
        if scratch is not None:
            _move(nc, hbm(out), acc)
    return out


def _narrow_meta(self, dim, start, length):
    if self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if dim >= self.dim():
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.  "
                           "(Could this error message be improved?  If so, please report an enhancement request "
                           "to PyTorch.)")
    d = _wrap(dim, self.dim())
    size = self.shape[d]
    if start < -size or start > size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
    if start < 0:
        start += size
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    shape = list(self.shape)
    shape[d] = length
    return d, start, shape


def _narrow_copy_into(out, self, d, start, length):
    if out.numel() == 0:
        return
    src = hbm(self)[(slice(None),) * d + (slice(start, start + length),)]
    with launch("narrow_copy", out.device.index) as nc:
        _move(nc, hbm(out), src)


@TABLE.native("aten::narrow_copy.out", dtypes=None)
def narrow_copy_out(self, dim, start, length, *, out):
    if self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if self.dtype != out.dtype:
        raise RuntimeError("Expected self.dtype() == output.dtype() to be true, but got false.  (Could this error "
                           "message be improved?  If so, please report an enhancement request to PyTorch.)")
    d, start, shape = _narrow_meta(self, dim, start, length)
    _resize_out(out, shape)
    _narrow_copy_into(out, self, d, start, length)
    return out


@TABLE.native("aten::narrow_copy", dtypes=None)
def narrow_copy(self, dim, start, length):
    d, start, shape = _narrow_meta(self, dim, start, length)
    out = torch.empty(shape, dtype=self.dtype, device=self.device)
    _narrow_copy_into(out, self, d, start, length)
    return out


# --- complex <-> real views ------------------------------------------------------------

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
_COMPLEX_OF = {v: k for k, v in _REAL_OF.items()}


def _reinterpret(t: torch.Tensor, dtype: torch.dtype, size, stride, offset: int) -> torch.Tensor:
    """A tensor of another dtype over ``t``'s storage (metadata only: set_ is a C++ kernel)."""
    return torch.empty(0, dtype=dtype, device=t.device).set_(t.untyped_storage(), offset, size, stride)


@TABLE.native("aten::view_as_real", dtypes=None)
def view_as_real(self):
    if not self.is_complex():
        raise RuntimeError("view_as_real is only supported for complex tensors")
    if self.is_conj():
        raise RuntimeError("view_as_real doesn't work on unresolved conjugated tensors.  To resolve the conjugate "
                           "tensor so you can view it as real, use self.resolve_conj(); however, be warned that the "
                           "resulting tensor will NOT alias the original.")
    return _reinterpret(self, _REAL_OF[self.dtype], list(self.shape) + [2], [2 * s for s in self.stride()] + [1],
                        2 * self.storage_offset())


@TABLE.native("aten::view_as_complex", dtypes=None)
def view_as_complex(self):
    if self.dtype not in _COMPLEX_OF:
        raise RuntimeError(f"view_as_complex is only supported for half, float and double tensors, but got a tensor "
                           f"of scalar type: {SCALAR_TYPE_NAMES.get(self.dtype, self.dtype)}")
    if self.dim() == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if self.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if self.stride(-1) != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in self.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if self.storage_offset() % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return _reinterpret(self, _COMPLEX_OF[self.dtype], list(self.shape[:-1]), [s // 2 for s in self.stride()[:-1]],
                        self.storage_offset() // 2)


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


# View ops: composites over as_strided (alias/detach build the alias directly: metadata only).
_serve(["aten::permute", "aten::expand", "aten::diagonal", "aten::select.int", "aten::slice.Tensor",
        "aten::squeeze", "aten::squeeze.dim", "aten::squeeze.dims", "aten::unsqueeze", "aten::split_with_sizes",
        "aten::split.Tensor", "aten::split.sizes", "aten::chunk", "aten::unbind.int", "aten::narrow",
        "aten::narrow.Tensor", "aten::t", "aten::transpose.int", "aten::alias", "aten::detach", "aten::unsafe_split.Tensor",
        "aten::unsafe_split_with_sizes", "aten::unsqueeze_", "aten::squeeze_", "aten::squeeze_.dim",
        "aten::squeeze_.dims", "aten::transpose_", "aten::t_", "aten::as_strided_", "aten::movedim.int",
        "aten::movedim.intlist", "aten::swapaxes", "aten::swapdims", "aten::expand_as", "aten::tensor_split.sections",
        "aten::tensor_split.indices", "aten::hsplit.int", "aten::vsplit.int", "aten::dsplit.int",
        "aten::unflatten.int", "aten::view_as", "aten::numpy_T", "aten::mT",
        "aten::broadcast_to"], "aten::as_strided")
_serve(["aten::_unsafe_view", "aten::view.dtype"], "aten::view")
# Copies: composites over empty/empty_like + copy_.
_serve(["aten::clone", "aten::contiguous", "aten::expand_copy", "aten::permute_copy", "aten::split_with_sizes_copy",
        "aten::split_copy.Tensor", "aten::unbind_copy.int", "aten::slice_copy.Tensor", "aten::select_copy.int",
        "aten::detach_copy", "aten::alias_copy", "aten::view_copy", "aten::view_copy.dtype", "aten::diagonal_copy",
        "aten::transpose_copy.int", "aten::t_copy", "aten::squeeze_copy", "aten::squeeze_copy.dim",
        "aten::squeeze_copy.dims", "aten::unsqueeze_copy", "aten::as_strided_copy", "aten::_reshape_copy",
        "aten::expand_copy.out", "aten::permute_copy.out", "aten::split_with_sizes_copy.out",
        "aten::split_copy.Tensor_out", "aten::unbind_copy.int_out", "aten::slice_copy.Tensor_out",
        "aten::select_copy.int_out", "aten::detach_copy.out", "aten::alias_copy.out", "aten::view_copy.out",
        "aten::diagonal_copy.out", "aten::transpose_copy.int_out", "aten::t_copy.out", "aten::squeeze_copy.out",
        "aten::unsqueeze_copy.out", "aten::as_strided_copy.out", "aten::slice_scatter", "aten::select_scatter",
        "aten::diagonal_scatter", "aten::as_strided_scatter"], "aten::copy_")
_serve(["aten::unfold_copy.out"], "aten::unfold")
_serve(["aten::stack", "aten::stack.out", "aten::hstack", "aten::hstack.out", "aten::vstack", "aten::vstack.out",
        "aten::dstack", "aten::dstack.out", "aten::column_stack", "aten::column_stack.out", "aten::row_stack",
        "aten::concat", "aten::concat.out", "aten::concatenate", "aten::concatenate.out"], "aten::cat.out")
_serve(["aten::rot90"], "aten::flip")
_serve(["aten::pad"], "aten::constant_pad_nd")
_serve(["aten::fill_diagonal_"], "aten::fill_.Scalar")
