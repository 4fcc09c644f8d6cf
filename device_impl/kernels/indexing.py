"""Indexing kernels: gathers, scatters, advanced indexing, masks, embeddings, sort, topk, unique.

Every op here is a *row access*: the output (gathers) or the destination
(scatters) is a set of rows, each ``C`` elements at a fixed inner stride,
whose start addresses are computed on the device from the row number and
from index tensors:

    offset(row) = sum_j coord_j(row) * stride_j  +  sum_k wrap(index_k[row]) * stride_k

``coord_j`` are the row's coordinates in the "lead" shape (GpSimd ``iota``
then VectorE integer divide/remainder), index values are DMA'd from HBM
(or gathered by indirect DMA when their view is not a flat run), negative
indices wrap on VectorE. Rows then move by indirect DMA (``dma.load_rows`` /
``dma.store_rows``). Tiles are ``[p, f]`` rows in row-major order
(row = r0 + partition * f + column), so offset and index tiles load with
long contiguous DMA runs.

Index ranges are validated before anything is written (a min/max reduction
over the index tensor read back once), so errors match CPU's class and the
destination is untouched on error.

Accumulation follows CPU's serial loops exactly: integer sums use DMA
compute-on-write (exact in any order); float sums, products and max/min
gather the current destination rows and combine them with every source row
aimed at them, in row order, on GpSimd's cores, rounding to the destination
dtype after each step (index_put(accumulate=True), embedding backward) or,
where CPU accumulates bf16/fp16 in fp32 and rounds once (scatter_add,
scatter_reduce sum/mean/prod, index_add), on a float32 copy of the
destination. Non-accumulating scatters resolve duplicate destinations so the
last row wins, as CPU's serial loop.

Other irregular work on GpSimd (``gpsimd.run``): stream compaction for
nonzero/masks, and CPU's tie order for sort(stable=False) / topk (an
emulation of libstdc++'s introsort / partial_sort / nth_element, only for rows
with ties; without ties GpSimd's stable ``sort`` already gives CPU's order).
Rows up to SORT_ROW_MAX elements sort 128 per instruction, one per partition;
longer rows are sorted by one GpSimd program over the row spread across the
partitions.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from device_impl.dispatch.table import TABLE, resolve
from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32, is_float
from device_impl.kernels import cpu_host, overlap
from device_impl.kernels.common import (
    SCALAR_TYPE_NAMES,
    check_out,
    check_scalar_fits,
    flat_tiles,
    hbm,
    resize_output,
    scalar_of,
)
from device_impl.kernels.registry import Binder, register_family

P = 128
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
ROW_BYTES = 32 * 1024  # per partition, for one data tile of gathered/scattered rows
ROWS_MAX = 512  # rows per partition per tile ([P, ROWS_MAX] int64 offset tiles are 4 KiB per partition)
SORT_ROW_MAX = 4096  # longest row sorted by one GpSimd sort instruction per partition
SORT_SBUF_BYTES = 160 * 1024  # per partition, for a longer row spread over the partitions (values in/out, indices)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _as_dtype(value, dtype: np.dtype):
    """A host number converted as C++ does (truncation, wrap, round to nearest-even)."""
    return np.asarray(value).astype(dtype)[()]


# --- numpy views (metadata only: nothing here moves or computes data) ------------------------

def _reshaped(v: np.ndarray, shape) -> np.ndarray | None:
    """``v`` with ``shape`` as a view (no copy), or None when the strides do not allow it."""
    try:
        return np.reshape(v, shape, copy=False)
    except ValueError:
        return None


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


# --- tiles of rows ------------------------------------------------------------------------

def _row_tiles(n: int, fmax: int):
    """Cover [0, n) with [p, f] blocks of rows (row-major): (r0, p, f)."""
    r, full = 0, P * fmax
    while n - r >= full:
        yield r, P, fmax
        r += full
    f = (n - r) // P
    if f:
        yield r, P, f
        r += P * f
    if n > r:
        yield r, n - r, 1


class _Coords:
    """Row numbers of one [p, f] tile and their coordinates in the lead shape (computed on demand)."""

    def __init__(self, nc, lead: Sequence[int], r0: int, p: int, f: int):
        self.nc, self.lead, self.r0, self.p, self.f = nc, tuple(lead), r0, p, f
        self._rows: Tile | None = None
        self._axes: dict[int, Tile] = {}
        self.cache: dict[int, Tile] = {}  # offsets per _Rows

    def rows(self) -> Tile:
        if self._rows is None:
            t = self.nc.sbuf_tile((self.p, self.f), I64)
            self.nc.gpsimd.iota(t, base=self.r0, partition_step=self.f, free_step=1)
            self._rows = t
        return self._rows

    def axis(self, j: int) -> Tile:
        tile = self._axes.get(j)
        if tile is not None:
            return tile
        nc, lead = self.nc, self.lead
        div = _prod(lead[j + 1:])
        tile = self.rows()
        if div > 1:
            q = nc.sbuf_tile((self.p, self.f), I64)
            nc.vector.tensor_scalar(q, tile, "floor_divide", div, dtype=I64)
            tile = q
        if _prod(lead[:j]) > 1:
            m = nc.sbuf_tile((self.p, self.f), I64)
            nc.vector.tensor_scalar(m, tile, "remainder", lead[j], dtype=I64)
            tile = m
        self._axes[j] = tile
        return tile

    def element_offsets(self, strides: Sequence[int]) -> Tile:
        """sum_j coord_j * strides[j] over the lead axes."""
        nc = self.nc
        acc = None
        for j, s in enumerate(strides):
            if s == 0 or self.lead[j] == 1:
                continue
            term = nc.sbuf_tile((self.p, self.f), I64)
            nc.vector.tensor_scalar(term, self.axis(j), "multiply", s, dtype=I64)
            if acc is None:
                acc = term
            else:
                nc.vector.tensor_tensor(acc, acc, term, "add", dtype=I64)
        if acc is None:
            acc = nc.sbuf_tile((self.p, self.f), I64)
            nc.vector.memset(acc, 0)
        return acc


class _Index:
    """One index tensor as seen by a row access: its values per row (a view of the lead shape),
    the stride they multiply and the size they index (negative values wrap when ``wrap``)."""

    def __init__(self, view: np.ndarray, stride: int, size: int, wrap: bool):
        self.view, self.stride, self.size, self.wrap = view, stride, size, wrap
        self.flat = _reshaped(view, (view.size,))

    def load(self, nc, co: _Coords) -> Tile:
        r0, p, f = co.r0, co.p, co.f
        t = nc.sbuf_tile((p, f), self.view.dtype)
        if self.flat is not None:
            nc.dma.load(t, self.flat[r0:r0 + p * f])
            return t
        # Not one run (broadcast over some lead axes): gather the values by indirect DMA.
        offs = co.element_offsets(_estrides(self.view))
        table = _table(self.view, 0, 1, 1)
        for j in range(f):
            nc.dma.load_rows(t[:, j:j + 1], table, offs[:, j:j + 1])
        return t


class _Rows:
    """Rows of a strided HBM view: ``lead`` rows of C elements at inner stride s_in.

    ``base`` is the view whose first element is row 0's first element and whose
    extent bounds every row; ``lead_strides`` (elements) place the rows; index
    terms add data-dependent offsets."""

    def __init__(self, base: np.ndarray, lead: Sequence[int], lead_strides: Sequence[int], c: int, s_in: int,
                 terms: Sequence[_Index] = (), direct: np.ndarray | None = None):
        self.base, self.lead, self.lead_strides = base, tuple(lead), tuple(lead_strides)
        self.C, self.s_in, self.terms = c, s_in, tuple(terms)
        self.dtype = base.dtype
        self.direct = direct  # [R, C] view when rows are a plain strided 2-D array

    @classmethod
    def of(cls, view: np.ndarray, lead_ndim: int, c: int, s_in: int) -> "_Rows":
        """Rows of a view whose trailing dims (after ``lead_ndim``) merge into C elements at s_in."""
        lead = view.shape[:lead_ndim]
        direct = _reshaped(view, (_prod(lead), c))
        return cls(view, lead, _estrides(view)[:lead_ndim], c, s_in, (), direct)

    def offsets(self, nc, co: _Coords) -> Tile:
        cached = co.cache.get(id(self))
        if cached is not None:
            return cached
        acc = co.element_offsets(self.lead_strides)
        for term in self.terms:
            idx = term.load(nc, co)
            t = nc.sbuf_tile((co.p, co.f), I64)
            nc.vector.tensor_scalar(t, idx, "multiply", term.stride, dtype=I64)
            if term.wrap:
                neg = nc.sbuf_tile((co.p, co.f), I64)
                nc.vector.tensor_scalar(neg, idx, "less", 0, dtype=I64)
                nc.vector.tensor_scalar(neg, neg, "multiply", term.size * term.stride, dtype=I64)
                nc.vector.tensor_tensor(t, t, neg, "add", dtype=I64)
            nc.vector.tensor_tensor(acc, acc, t, "add", dtype=I64)
        co.cache[id(self)] = acc
        return acc

    def load(self, nc, co: _Coords, c0: int, c1: int) -> Tile:
        p, f, cc = co.p, co.f, c1 - c0
        t = nc.sbuf_tile((p, f * cc), self.dtype)
        if self.direct is not None:
            nc.dma.load(t, self.direct[co.r0:co.r0 + p * f, c0:c1])
            return t
        offs = self.offsets(nc, co)
        table = _table(self.base, c0, cc, self.s_in)
        for j in range(f):
            nc.dma.load_rows(t[:, j * cc:(j + 1) * cc], table, offs[:, j:j + 1])
        return t

    def store(self, nc, co: _Coords, t: Tile, c0: int, c1: int, accumulate: bool = False) -> None:
        p, f, cc = co.p, co.f, c1 - c0
        if self.direct is not None and not accumulate:
            nc.dma.store(self.direct[co.r0:co.r0 + p * f, c0:c1], t)
            return
        offs = self.offsets(nc, co)
        table = _table(self.base, c0, cc, self.s_in)
        for j in range(f):
            nc.dma.store_rows(table, offs[:, j:j + 1], t[:, j * cc:(j + 1) * cc], accumulate=accumulate)


class _Const:
    """A row source whose every element is one value: a host number, or a 0-d device tensor."""

    def __init__(self, nc, value: Any, dtype: np.dtype):
        self.dtype = dtype
        self.value = value
        if isinstance(value, np.ndarray):  # a one-element HBM view: broadcast it across partitions once
            one = nc.sbuf_tile((1, 1), value.dtype)
            nc.dma.load(one, value.reshape(1, 1))
            col = nc.sbuf_tile((P, 1), value.dtype)
            nc.gpsimd.partition_broadcast(col, one)
            self.col = col

    def load(self, nc, co: _Coords, c0: int, c1: int) -> Tile:
        t = nc.sbuf_tile((co.p, co.f * (c1 - c0)), self.dtype)
        if isinstance(self.value, np.ndarray):
            ones = nc.sbuf_tile(t.shape, self.dtype)
            nc.vector.memset(ones, 1)
            nc.vector.tensor_tensor(t, ones, self.col[:co.p, :], "multiply")  # 1 * v keeps -0.0, inf, nan
        else:
            nc.vector.memset(t, _as_dtype(self.value, self.dtype))
        return t


def _tile_shape(c: int, itemsize: int) -> tuple[int, int]:
    """(rows per partition, columns per chunk) for rows of c elements."""
    if c * itemsize <= ROW_BYTES:
        return max(1, min(ROWS_MAX, ROW_BYTES // (c * itemsize))), c
    return 1, ROW_BYTES // itemsize


def _move(nc, dst: _Rows, src, n_rows: int, lead: Sequence[int], mode: str = "assign", unique: bool = True,
          transform: Callable | None = None, scale: float | Callable | None = None) -> None:
    """dst rows <- src rows for every row of ``lead``.

    mode: "assign" (duplicate destinations resolved so the last row wins unless
    ``unique``), or a ufunc name ("add", "multiply", "maximum", "minimum"): the
    current destination and every row aimed at it are combined in row order,
    rounding to the destination dtype after each step, as CPU's serial loops do
    (integer "add" uses DMA compute-on-write accumulation, exact in any order).
    ``transform(nc, tile, co)`` may rewrite each loaded source tile. ``scale`` (a number, or
    ``scale(nc, co)`` giving a [p, f] tile of per-row factors) makes a float "add" a fused
    multiply-add, dst + scale * src rounded once, as CPU's ``add_(src, alpha)``."""
    c = dst.C
    if n_rows == 0 or c == 0:
        return
    fmax, chunk = _tile_shape(c, max(dst.dtype.itemsize, 4))
    for r0, p, f in _row_tiles(n_rows, fmax):
        mark = nc.mark()
        co = _Coords(nc, lead, r0, p, f)
        for rows in (dst, src):  # row offsets once per row tile, shared by its column chunks
            if isinstance(rows, _Rows) and rows.direct is None:
                rows.offsets(nc, co)
        for c0 in range(0, c, chunk):
            c1 = min(c, c0 + chunk)
            inner = nc.mark()
            t = src.load(nc, co, c0, c1)
            if transform is not None:
                t = transform(nc, t, co)
            if mode == "add" and not is_float(dst.dtype):
                dst.store(nc, co, t, c0, c1, accumulate=True)  # integer sums are exact in any order
                nc.release_to(inner)
                continue
            if mode != "assign":
                cur = dst.load(nc, co, c0, c1)
                factor = scale(nc, co) if callable(scale) else scale
                t = _combine(nc, dst.offsets(nc, co), cur, t, mode, factor)
            elif not unique and p * f > 1 and dst.terms:
                t = _last_wins(nc, dst.offsets(nc, co), t)
            dst.store(nc, co, t, c0, c1)
            nc.release_to(inner)
        nc.release_to(mark)


def _last_wins(nc, offs: Tile, data: Tile) -> Tile:
    """Rows sharing a destination all take the data of the last of them (in row order)."""
    out = nc.sbuf_tile(data.shape, data.dtype)

    def program(o, keys, d):
        k = keys.reshape(-1)
        rows = d.reshape(k.size, -1)
        uniq, first_rev = np.unique(k[::-1], return_index=True)
        last = k.size - 1 - first_rev
        o.reshape(k.size, -1)[...] = rows[last[np.searchsorted(uniq, k)]]

    nc.gpsimd.run("scatter_last_wins", program, (out,), (offs, data), factor=math.log2(max(offs.data.size, 2)))
    return out


def _combine(nc, offs: Tile, cur: Tile, src: Tile, op: str, scale: float | Tile | None = None) -> Tile:
    """Per destination: reduce(current value, every source row aimed at it, in row order), on GpSimd.

    Sequential in row order and in the destination dtype, ((cur + s1) + s2) rounded after each
    step, which is what CPU's serial loops compute. With ``scale`` each step adds scale * s
    computed exactly (float64) and rounded once, CPU's fused multiply-add; where this host's CPU kernels
    do not fuse (cpu_host.fused_multiply_add) the product is rounded to the dtype first."""
    out = nc.sbuf_tile(cur.shape, cur.dtype)
    fn = getattr(np, op)
    ins = (offs, cur, src) + ((scale,) if isinstance(scale, Tile) else ())

    def program(o, keys, c, s, *factor):
        k = keys.reshape(-1)
        uniq, first, inverse = np.unique(k, return_index=True, return_inverse=True)
        state = c.reshape(k.size, -1)[first].copy()
        values = s.reshape(k.size, -1)
        if factor or scale is not None:
            f = factor[0].reshape(k.size, 1) if factor else scale
            if cpu_host.fused_multiply_add():
                values = values.astype(np.float64) * np.asarray(f, dtype=np.float64)
            else:  # DEFAULT kernels: the product rounds to the dtype (c10 half arithmetic) before the add
                values = (values.astype(np.float32) * np.asarray(f, dtype=np.float32)).astype(state.dtype)
        start = state.copy()
        fn.at(state, inverse, values)
        if op in ("maximum", "minimum") and is_float(state.dtype):
            _first_zero_sign(state, start, values, inverse)
        o.reshape(k.size, -1)[...] = state[inverse]

    nc.gpsimd.run(f"scatter_{op}", program, (out,), ins, factor=math.log2(max(offs.data.size, 2)))
    return out


def _first_zero_sign(state: np.ndarray, start: np.ndarray, values: np.ndarray, inverse: np.ndarray) -> None:
    """Give zero results the sign of the first zero to arrive, as CPU's ``if (src > cur) cur = src``.

    CPU replaces the current value only on a strict win, so among ties (+0.0 and -0.0 compare
    equal) the earliest value stays; a ufunc's ``at`` does not promise which tie it keeps."""
    zero = state == 0
    if not zero.any():
        return
    rows = values.shape[0]
    order = np.where(values == 0, np.arange(rows)[:, None], rows)
    first = np.full(state.shape, rows, dtype=np.int64)
    np.minimum.at(first, inverse, order)
    cols = np.arange(state.shape[1])[None, :]
    from_src = np.signbit(values[np.minimum(first, rows - 1), cols])
    sign = np.where(start == 0, np.signbit(start), np.where(first < rows, from_src, np.signbit(state)))
    state[zero] = np.where(sign, -0.0, 0.0).astype(state.dtype)[zero]


# --- index validation ---------------------------------------------------------------------

def _index_range(nc, view: np.ndarray) -> tuple[int, int]:
    """(min, max) of an index tensor: VectorE/GpSimd reductions, read back once."""
    lo_acc = nc.sbuf_tile((1, 1), I64)
    hi_acc = nc.sbuf_tile((1, 1), I64)
    first = True
    for start, stop, p, f in flat_tiles(view.size):
        mark = nc.mark()
        t = nc.sbuf_tile((p, f), view.dtype)
        nc.dma.load_flat(t, view, start, stop)
        pl = nc.sbuf_tile((p, 1), I64)
        ph = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_reduce(pl, t, "minimum", dtype=I64)
        nc.vector.tensor_reduce(ph, t, "maximum", dtype=I64)
        if first:
            nc.gpsimd.partition_reduce(lo_acc, pl, "minimum")
            nc.gpsimd.partition_reduce(hi_acc, ph, "maximum")
            first = False
        else:
            ql = nc.sbuf_tile((1, 1), I64)
            qh = nc.sbuf_tile((1, 1), I64)
            nc.gpsimd.partition_reduce(ql, pl, "minimum")
            nc.gpsimd.partition_reduce(qh, ph, "maximum")
            nc.vector.tensor_tensor(lo_acc, lo_acc, ql, "minimum", dtype=I64)
            nc.vector.tensor_tensor(hi_acc, hi_acc, qh, "maximum", dtype=I64)
        nc.release_to(mark)
    return int(lo_acc.read()[0, 0]), int(hi_acc.read()[0, 0])


def _check_range(nc, view: np.ndarray, size: int, negative: bool, error: Callable[[int], Exception]) -> None:
    """Raise ``error(bad_value)`` unless every index is in [0, size) (or [-size, size) with ``negative``)."""
    if view.size == 0:
        return
    lo, hi = _index_range(nc, view)
    low = -size if negative else 0
    if hi >= size:
        raise error(hi)
    if lo < low:
        raise error(lo)


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

    def __init__(self, nc, view: np.ndarray, like: torch.Tensor, enabled: bool = True):
        self.nc, self.target, self.temp = nc, view, None
        self.view = view
        if enabled and _narrow_float(view.dtype):
            self.temp = torch.empty(view.shape, dtype=torch.float32, device=like.device)
            self.view = hbm(self.temp)
            _copy_into(nc, self.view, view)

    def finish(self) -> None:
        if self.temp is not None:
            _copy_into(self.nc, self.target, self.view)


# --- registration helpers ----------------------------------------------------------------

# Ops whose index tensors may live on the host, as on CUDA.
_HOST_INDICES = frozenset({"aten::index.Tensor", "aten::index.Tensor_out", "aten::_index_put_impl_",
                           "aten::index_put_", "aten::index_put"})


def _check_devices(op: str, args: dict) -> None:
    """All tensors on one neuron device (host 0-d scalars anywhere, host indices where CUDA allows them)."""
    device = None
    host = None
    for value in args.values():
        for t in (value if isinstance(value, (list, tuple)) else (value,)):
            if not isinstance(t, torch.Tensor):
                continue
            if t.device.type != "neuron":
                if t.dim() and op not in _HOST_INDICES:
                    host = t
                continue
            if device is None:
                device = t.device
            elif t.device != device:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                                   f"{device} and {t.device}! (when running {op} on neuron)")
    if host is not None and device is not None:
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{device} and {host.device}! (when running {op} on neuron)")


def _native(*ops: str, dtypes: frozenset = COMPUTE_DTYPES, serves: Sequence[str] = ()):
    """Register ``fn(args: dict)`` (schema names bound, defaults filled) as the kernel of ``ops``."""

    def register(fn):
        for op in ops:
            binder = Binder.of(resolve(op))

            def kernel(*args, _binder=binder, _op=op, **kwargs):
                bound = _binder.bind(args, kwargs)
                _check_devices(_op, bound)
                return fn(bound)

            kernel.__module__ = __name__
            kernel.__name__ = fn.__name__
            TABLE.native(op, dtypes=dtypes)(kernel)
        for op in serves:
            TABLE.serves(op, ops[0])
        return fn

    return register


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


# --- index_select / embedding --------------------------------------------------------------

def _select_rows(nc, out: torch.Tensor, self: torch.Tensor, dim: int, index_view: np.ndarray) -> None:
    """out = self.index_select(dim, index) (index already validated, 1-D view)."""
    sv = _view(self)
    shape = tuple(out.shape) if out.dim() else (1,)
    ov = _view(out)
    inner = len(shape) - dim - 1
    k, c, (s_self, s_out) = _merge_suffix(shape, [_estrides(sv), _estrides(ov)], inner)
    lead = shape[:len(shape) - k]
    self_strides = list(_estrides(sv)[:len(lead)])
    self_strides[dim] = 0
    axes = [None] * len(lead)
    axes[dim] = 0
    term = _Index(_embed(index_view, lead, axes), _estrides(sv)[dim], sv.shape[dim], False)
    src = _Rows(sv, lead, self_strides, c, s_self, (term,))
    dst = _Rows.of(ov, len(lead), c, s_out)
    _move(nc, dst, src, _prod(lead), lead)


def _index_select_check(self: torch.Tensor, dim: int, index: torch.Tensor) -> int:
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"index_select(): Expected dtype int32 or int64 for index")
    dim = _wrap_dim(dim, self.dim())
    if self.dim() == 0 and index.numel() != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.numel()} value(s)")
    return dim


def _index_select_shape(self, dim, index):
    if self.dim() == 0:
        return ()
    shape = list(self.shape)
    shape[dim] = index.numel()
    return tuple(shape)


def _index_select_into(out: torch.Tensor, self: torch.Tensor, dim: int, index: torch.Tensor, name: str,
                       error: Callable[[int], Exception]) -> None:
    size = self.shape[dim] if self.dim() else 1
    # index_select_out_cpu_ (TensorAdvancedIndexing.cpp) checks with check_indexarray_range, a RuntimeError
    # naming the first bad index, when self has more than one dimension and either no elements or dim == 1
    # with a contiguous result (its index_select_out_cpu_dim1_ fast path); elsewhere TORCH_CHECK_INDEX.
    array_check = self.dim() > 1 and index.numel() > 0 and (self.numel() == 0 or (dim == 1 and out.is_contiguous()))
    if self.dim() > 1 and index.numel() > 0 and self.numel() == 0 and size <= 0:
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    with launch(name, out.device.index) as nc:
        iv = _view(index)
        if array_check:
            try:
                _check_range(nc, iv, size, False, error)
            except IndexError:
                flat = np.asarray(iv).reshape(-1)
                first = int(flat[np.flatnonzero((flat < 0) | (flat >= size))[0]])
                raise RuntimeError(f"INDICES element is out of DATA bounds, id={first} axis_dim={size}") from None
        else:
            _check_range(nc, iv, size, False, error)
        if out.numel():
            _select_rows(nc, out, self, dim, iv)


def _index_range_error(_value: int) -> IndexError:
    return IndexError("index out of range in self")


@_native("aten::index_select")
def _index_select(a: dict) -> torch.Tensor:
    self, index = a["self"], a["index"]
    dim = _index_select_check(self, a["dim"], index)
    out = _empty(_index_select_shape(self, dim, index), self.dtype, self)
    _index_select_into(out, self, dim, index, "index_select", _index_range_error)
    return out


@_native("aten::index_select.out")
def _index_select_out(a: dict) -> torch.Tensor:
    self, index, out = a["self"], a["index"], a["out"]
    dim = _index_select_check(self, a["dim"], index)
    if out.dtype != self.dtype:
        raise RuntimeError("index_select(): self and result must have the same scalar type")
    overlap.assert_out_apart(out, self, index)
    check_out(out, _index_select_shape(self, dim, index), self.dtype)
    _index_select_into(out, self, dim, index, "index_select", _index_range_error)
    return out


def _check_embedding_indices(indices: torch.Tensor, fn: str) -> None:
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.type().replace('neuron', 'torch')} instead (while checking "
                           f"arguments for {fn})")


@_native("aten::embedding")
def _embedding(a: dict) -> torch.Tensor:
    weight, indices = a["weight"], a["indices"]
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    _check_embedding_indices(indices, "embedding")
    out = _empty(tuple(indices.shape) + (weight.shape[1],), weight.dtype, weight)
    with launch("embedding", weight.device.index) as nc:
        iv = hbm(indices)
        _check_range(nc, iv, weight.shape[0], False, _index_range_error)
        if out.numel() == 0:
            return out
        wv, ov = hbm(weight), hbm(out)
        lead = tuple(indices.shape)
        _, c, (s_w, s_o) = _merge_suffix((weight.shape[1],), [(_estrides(wv)[1],), (_estrides(ov)[-1],)], 1)
        term = _Index(iv, _estrides(wv)[0], weight.shape[0], False)
        src = _Rows(wv, lead, (0,) * len(lead), c, s_w, (term,))
        dst = _Rows.of(ov, len(lead), c, s_o)
        _move(nc, dst, src, _prod(lead), lead)
    return out


# --- gather / scatter ------------------------------------------------------------------------

def _gather_checks(self: torch.Tensor, dim: int, index: torch.Tensor, fn: str = "gather") -> int:
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{fn}(): Expected dtype int32/int64 for index")
    dim = _wrap_dim(dim, self.dim())
    nd = max(self.dim(), 1)
    if max(index.dim(), 1) != nd:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    ishape = tuple(index.shape) or (1,)
    sshape = tuple(self.shape) or (1,)
    for d in range(nd):
        if d != dim and ishape[d] > sshape[d]:
            raise RuntimeError(f"Size does not match at dimension {d} expected index {list(index.shape)} to be no "
                               f"larger than self {list(self.shape)} apart from dimension {dim}")
    return dim


def _bounds_error(dim: int, size: int, exc=RuntimeError, prefix: str = ""):
    return lambda v: exc(f"{prefix}index {v} is out of bounds for dimension {dim} with size {size}")


def _elementwise_rows(view: np.ndarray, ishape) -> np.ndarray:
    """The part of a gather/scatter operand that index addresses (index shape, from element 0)."""
    return view[tuple(slice(0, n) for n in ishape)]


def _scatter_dst(out_view: np.ndarray, dim: int, index_view: np.ndarray) -> _Rows:
    ishape = index_view.shape
    strides = list(_estrides(out_view))
    term = _Index(index_view, strides[dim], out_view.shape[dim], False)
    strides[dim] = 0
    return _Rows(out_view, ishape, strides, 1, 1, (term,))


def _gather_compute(out: torch.Tensor, a: dict) -> None:
    """CPU's order: out resized, then its aliasing checked (the input may not overlap out at all, the
    index not partially), then the index checked, and an empty index checked for nothing else."""
    _check_devices("aten::gather", dict(a, out=out))
    self, index = a["self"], a["index"]
    overlap.assert_no_internal_overlap(out)
    overlap.assert_no_overlap(out, self)
    overlap.assert_no_partial_overlap(out, index)
    if index.numel() == 0:
        if out.dtype != self.dtype:
            raise RuntimeError(f"Expected out tensor to have dtype {self.dtype}, but got {out.dtype} instead")
        return
    dim = _gather_checks(self, a["dim"], index)
    if out.dtype != self.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {self.dtype}, but got {out.dtype} instead")
    with launch("gather", out.device.index) as nc:
        sv, iv, ov = _view(self), _view(index), _view(out)
        _check_range(nc, iv, sv.shape[dim], False, _bounds_error(dim, sv.shape[dim]))
        if out.numel() == 0:
            return
        src = _scatter_dst(sv, dim, iv)  # same addressing as a scatter destination
        dst = _Rows.of(ov, ov.ndim, 1, 1)
        _move(nc, dst, src, iv.size, iv.shape)


def _gather_meta(a: dict):
    return tuple(a["index"].shape), a["self"].dtype, (a["self"], a["index"])


register_family("gather", _gather_compute, _gather_meta, overloads=("default", "out"))


def _scatter_checks(self: torch.Tensor, dim: int, index: torch.Tensor, src: Any, fn: str = "scatter") -> int:
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{fn}(): Expected dtype int32/int64 for index")
    dim = _wrap_dim(dim, self.dim())
    if isinstance(src, torch.Tensor) and src.dtype != self.dtype:
        raise RuntimeError(f"{fn}(): Expected self.dtype to be equal to src.dtype")
    if index.numel() == 0:
        return dim
    nd = max(self.dim(), 1)
    if max(index.dim(), 1) != nd or (isinstance(src, torch.Tensor) and max(src.dim(), 1) != nd):
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    ishape = tuple(index.shape) or (1,)
    sshape = tuple(self.shape) or (1,)
    srcshape = (tuple(src.shape) or (1,)) if isinstance(src, torch.Tensor) else None
    for d in range(nd):
        if (d != dim and ishape[d] > sshape[d]) or (srcshape is not None and ishape[d] > srcshape[d]):
            msg = (f"Expected index {list(index.shape)} to be no larger than self {list(self.shape)} apart from "
                   f"dimension {dim}")
            if srcshape is not None:
                msg += f" and to be no larger size than src {list(src.shape)}"
            raise RuntimeError(msg)
    return dim


def _scatter_run(out: torch.Tensor, self: torch.Tensor, dim: int, index: torch.Tensor, src: Any, mode: str,
                 name: str, include_self: bool = True, mean: bool = False) -> None:
    """out = self with src scattered at index along dim (mode: assign / add / ufunc)."""
    if out.dtype != self.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {self.dtype}, but got {out.dtype} instead")
    with launch(name, out.device.index) as nc:
        ov, iv = _view(out), _view(index)
        if not overlap.same_view(out, self):
            _copy_into(nc, ov, _view(self))
        size = ov.shape[dim]
        _check_range(nc, iv, size, False, _bounds_error(dim, size))
        if iv.size == 0 or ov.size == 0:
            return
        lead = iv.shape
        if isinstance(src, torch.Tensor):
            source = _Rows.of(_elementwise_rows(_view(src), lead), len(lead), 1, 1)
        else:
            source = _Const(nc, src, ov.dtype)
        # CPU sums and products of bf16/fp16 accumulate in fp32 and round once
        stage = _Fp32Stage(nc, ov, out, enabled=mode in ("add", "multiply"))
        dst = _scatter_dst(stage.view, dim, iv)
        if not include_self:
            init = {"add": 0, "multiply": 1}.get(mode)
            if init is None:
                init = _reduce_identity(ov.dtype, mode)
            _move(nc, dst, _Const(nc, init, stage.view.dtype), iv.size, lead, "assign", unique=True)
        _move(nc, dst, source, iv.size, lead, mode, unique=False)
        stage.finish()
        if mean:
            _mean_finish(nc, out, ov, dim, iv, include_self)


def _reduce_identity(dtype: np.dtype, op: str):
    if is_float(dtype):
        return -np.inf if op == "maximum" else np.inf
    if dtype == BOOL:
        return op != "maximum"
    info = np.iinfo(dtype)
    return info.min if op == "maximum" else info.max


def _mean_finish(nc, out: torch.Tensor, ov: np.ndarray, dim: int, iv: np.ndarray, include_self: bool) -> None:
    """out /= number of contributions (+1 with include_self); untouched elements keep their value."""
    counts_t = torch.empty(tuple(ov.shape), dtype=torch.int64, device=out.device)
    cv = hbm(counts_t)
    _fill(nc, cv, 1 if include_self else 0)
    _move(nc, _scatter_dst(cv, dim, iv), _Const(nc, 1, I64), iv.size, iv.shape, "add")
    floor = not is_float(ov.dtype)
    for start, stop, p, f in flat_tiles(ov.size):
        mark = nc.mark()
        x = nc.sbuf_tile((p, f), ov.dtype)
        nc.dma.load_flat(x, ov, start, stop)
        n = nc.sbuf_tile((p, f), I64)
        nc.dma.load_flat(n, cv, start, stop)
        nc.vector.tensor_scalar(n, n, "maximum", 1, dtype=I64)
        y = nc.sbuf_tile((p, f), ov.dtype)
        if floor:
            nc.vector.tensor_tensor(y, x, n, "floor_divide", dtype=I64)
        else:
            nc.vector.tensor_tensor(y, x, n, "divide", dtype=FP32)
        nc.dma.store_flat(ov, start, stop, y)
        nc.release_to(mark)
    del counts_t


def _scatter_compute(out: torch.Tensor, a: dict) -> None:
    _check_devices("aten::scatter", dict(a, out=out))
    self, index = a["self"], a["index"]
    src = a.get("src")
    value = a.get("value")
    reduce = a.get("reduce")
    source = src if src is not None else scalar_of(value)
    dim = _scatter_checks(self, a["dim"], index, src)
    if src is None:
        check_scalar_fits(source, self.dtype)
    mode = "assign"
    if reduce is not None:
        mode = {"add": "add", "multiply": "multiply"}.get(reduce)
        if mode is None:
            raise RuntimeError("reduce argument must be either add or multiply.")
    _scatter_run(out, self, dim, index, source, mode, "scatter")


def _self_meta(*names: str):
    def meta(a: dict):
        return tuple(a["self"].shape), a["self"].dtype, tuple(a[n] for n in names if isinstance(a.get(n), torch.Tensor))

    return meta


register_family("scatter", _scatter_compute, _self_meta("index", "src"))


def _scatter_add_compute(out: torch.Tensor, a: dict) -> None:
    _check_devices("aten::scatter_add", dict(a, out=out))
    self, index, src = a["self"], a["index"], a["src"]
    dim = _scatter_checks(self, a["dim"], index, src, "scatter_add")
    _scatter_run(out, self, dim, index, src, "add", "scatter_add")


register_family("scatter_add", _scatter_add_compute, _self_meta("index", "src"))

_SCATTER_REDUCE = {"sum": "add", "prod": "multiply", "mean": "add", "amax": "maximum", "amin": "minimum"}


def _scatter_reduce_compute(out: torch.Tensor, a: dict) -> None:
    _check_devices("aten::scatter_reduce", dict(a, out=out))
    self, index, src, reduce = a["self"], a["index"], a["src"], a["reduce"]
    include_self = a.get("include_self", True)
    include_self = True if include_self is None else include_self
    mode = _SCATTER_REDUCE.get(reduce)
    if mode is None:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    dim = _scatter_checks(self, a["dim"], index, src, "scatter_reduce")
    if reduce == "mean" and self.dtype == torch.bool:
        raise NotImplementedError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented for 'Bool'")
    _scatter_run(out, self, dim, index, src, mode, "scatter_reduce", include_self=include_self,
                 mean=reduce == "mean")


register_family("scatter_reduce", _scatter_reduce_compute, _self_meta("index", "src"), overloads=("two", "two_out"))


# --- nonzero and masks -------------------------------------------------------------------

def _nonzero_into(nc, view: np.ndarray, like: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Coordinates [n, ndim] (int64, row-major order) of the nonzero elements of an HBM view."""
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
        out = torch.empty((n, ndim), dtype=torch.int64, device=like.device)
    else:
        if tuple(out.shape) != (n, ndim):
            resize_output(out, (n, ndim))
    if n == 0 or ndim == 0:
        return out
    staged = _Staged(out)
    dst = staged.view.reshape(-1) if staged.temp is not None else _reshaped(staged.view, (n * ndim,))
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
            region = coords[:, d::ndim]
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
        base = written * ndim
        if q_full:
            nc.dma.store(dst[base:base + q_full * f * ndim].reshape(q_full, f * ndim), coords[:q_full, :])
        if rem:
            b2 = base + q_full * f * ndim
            nc.dma.store(dst[b2:b2 + rem * ndim].reshape(1, rem * ndim), coords[q_full:q_full + 1, :rem * ndim])
        written += k
        nc.release_to(mark)
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


# --- advanced indexing: index.Tensor and index_put --------------------------------------

class _Plan:
    """aten::index's view of one call: result shape and the row access into self."""

    def __init__(self, nc, src: torch.Tensor, indices: Sequence[torch.Tensor | None], keep: list):
        shape = tuple(src.shape)
        ndim = len(shape)
        if len(indices) > ndim:
            raise IndexError(f"too many indices for tensor of dimension {ndim} (got {len(indices)})")
        entries: list[tuple[np.ndarray, int] | None] = []  # per self dim: (index view, self dim)
        for i, idx in enumerate(indices):
            if idx is None:
                entries.append(None)
                continue
            if idx.dtype in (torch.bool, torch.uint8):
                if idx.dtype == torch.uint8:
                    warnings.warn("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
                                  "instead.", UserWarning, stacklevel=4)
                start = len(entries)
                for j in range(idx.dim()):
                    d = start + j
                    if d >= ndim:
                        raise IndexError(f"too many indices for tensor of dimension {ndim} (got {d + 1})")
                    if idx.shape[j] != shape[d]:
                        raise IndexError(f"The shape of the mask {list(idx.shape)} at index {j} does not match the "
                                         f"shape of the indexed tensor {list(shape)} at index {d}")
                coords = _nonzero_into(nc, hbm(idx), src)
                keep.append(coords)
                cv = hbm(coords)
                for j in range(idx.dim()):
                    entries.append((cv[:, j], len(entries)))
            elif idx.dtype in (torch.int64, torch.int32):
                entries.append((hbm(idx), len(entries)))
            else:
                raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if len(entries) > ndim:
            raise IndexError(f"too many indices for tensor of dimension {ndim} (got {len(entries)})")
        entries += [None] * (ndim - len(entries))
        dims = [d for d, e in enumerate(entries) if e is not None]
        if not dims:
            raise RuntimeError("aten::index: at least one index must be a tensor (ntensor >= 3 INTERNAL ASSERT)")
        views = [entries[d][0] for d in dims]
        try:
            bshape = tuple(np.broadcast_shapes(*(v.shape for v in views)))
        except ValueError:
            shapes = ", ".join(str(list(v.shape)) for v in views)
            raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together with shapes "
                             f"{shapes}") from None
        adjacent = dims == list(range(dims[0], dims[-1] + 1))
        if adjacent:
            layout = ([("s", d) for d in range(dims[0])] + [("b", i) for i in range(len(bshape))]
                      + [("s", d) for d in range(dims[-1] + 1, ndim)])
        else:
            layout = [("b", i) for i in range(len(bshape))] + [("s", d) for d in range(ndim) if entries[d] is None]
        self.shape = tuple(shape[x] if kind == "s" else bshape[x] for kind, x in layout)
        self.layout = layout
        self.bshape = bshape
        self.dims = dims
        self.views = views
        self.sview = hbm(src)
        self.self_shape = shape
        n_trailing = 0
        for kind, _ in reversed(layout):
            if kind != "s":
                break
            n_trailing += 1
        self.n_trailing = n_trailing

    def validate(self, nc) -> None:
        for v, d in zip(self.views, self.dims):
            size = self.self_shape[d]
            if v.size and size == 0:
                raise IndexError(f"index is out of bounds for dimension with size 0")
            _check_range(nc, v, size, True, _bounds_error(d, size, IndexError))

    def access(self, other_views: Sequence[np.ndarray]) -> tuple[_Rows, list[tuple[int, int]], tuple]:
        """The self-side rows, and (C, s_in) for each other view sharing the rows (result / values)."""
        sst = _estrides(self.sview)
        self_full = [sst[x] if kind == "s" else 0 for kind, x in self.layout]
        sets = [self_full] + [list(_estrides(v)) for v in other_views]
        k, c, inner = _merge_suffix(self.shape, sets, self.n_trailing)
        lead = self.shape[:len(self.shape) - k]
        lead_layout = self.layout[:len(lead)]
        terms = []
        for v, d in zip(self.views, self.dims):
            vb = np.broadcast_to(v, self.bshape)
            axes = [x if kind == "b" else None for kind, x in lead_layout]
            terms.append(_Index(_embed(vb, lead, axes), sst[d], self.self_shape[d], True))
        rows = _Rows(self.sview, lead, self_full[:len(lead)], c, inner[0], terms)
        return rows, [(c, s) for s in inner[1:]], lead


def _index_into(nc, out: torch.Tensor | None, self: torch.Tensor, indices) -> torch.Tensor:
    keep: list = []
    plan = _Plan(nc, self, indices, keep)
    plan.validate(nc)
    if out is None:
        out = _empty(plan.shape, self.dtype, self)
    elif tuple(out.shape) != plan.shape:
        resize_output(out, plan.shape)
    if out.numel() == 0:
        return out
    ov = hbm(out)
    src, others, lead = plan.access([ov])
    c, s_out = others[0]
    dst = _Rows.of(ov, len(lead), c, s_out)
    _move(nc, dst, src, _prod(lead), lead)
    return out


@_native("aten::index.Tensor")
def _index(a: dict) -> torch.Tensor:
    self = a["self"]
    with launch("index", self.device.index) as nc:
        return _index_into(nc, None, self, a["indices"])


@_native("aten::index.Tensor_out")
def _index_out(a: dict) -> torch.Tensor:
    self, out = a["self"], a["out"]
    if out.dtype != self.dtype:
        raise RuntimeError(f"index_out: self ({SCALAR_TYPE_NAMES[self.dtype]}) and result "
                           f"({SCALAR_TYPE_NAMES[out.dtype]}) must have the same scalar type")
    with launch("index", self.device.index) as nc:
        return _index_into(nc, out, self, a["indices"])


def _index_put_into(self: torch.Tensor, indices, values: torch.Tensor, accumulate: bool) -> torch.Tensor:
    if values.dtype != self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{SCALAR_TYPE_NAMES[self.dtype]} for the destination and "
                           f"{SCALAR_TYPE_NAMES[values.dtype]} for the source.")
    if overlap.has_internal_overlap(self):
        warnings.warn("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before "
                      "performing this operation. This also applies to advanced indexing e.g. tensor[indices] = "
                      "tensor", UserWarning, stacklevel=4)
    overlap.assert_no_partial_overlap(self, values)
    for idx in indices:
        if idx is not None:
            overlap.assert_no_overlap(self, idx)
    with launch("index_put", self.device.index) as nc:
        keep: list = []
        plan = _Plan(nc, self, indices, keep)
        vshape = tuple(values.shape)
        try:
            if np.broadcast_shapes(vshape, plan.shape) != plan.shape:
                raise ValueError
        except ValueError:
            raise RuntimeError(f"shape mismatch: value tensor of shape {list(vshape)} cannot be broadcast to "
                               f"indexing result of shape {list(plan.shape)}") from None
        plan.validate(nc)
        if _prod(plan.shape) == 0:
            return self
        vv = np.broadcast_to(hbm(values), plan.shape)
        dst, others, lead = plan.access([vv])
        c, s_v = others[0]
        src = _Rows.of(vv, len(lead), c, s_v)
        masks_only = all(i is None or i.dtype in (torch.bool, torch.uint8) for i in indices)
        if accumulate:
            _move(nc, dst, src, _prod(lead), lead, "add")
        else:
            _move(nc, dst, src, _prod(lead), lead, "assign", unique=masks_only and sum(
                i is not None for i in indices) == 1)
    return self


@_native("aten::_index_put_impl_")
def _index_put_impl_(a: dict) -> torch.Tensor:
    return _index_put_into(a["self"], a["indices"], a["values"], bool(a.get("accumulate")))


@_native("aten::index_put_")
def _index_put_(a: dict) -> torch.Tensor:
    return _index_put_into(a["self"], a["indices"], a["values"], bool(a.get("accumulate")))


@_native("aten::index_put")
def _index_put(a: dict) -> torch.Tensor:
    self = a["self"]
    out = torch.empty_like(self)
    with launch("clone", self.device.index) as nc:
        _copy_into(nc, hbm(out), hbm(self))
    return _index_put_into(out, a["indices"], a["values"], bool(a.get("accumulate")))


# --- index_add / index_copy / index_fill -------------------------------------------------

def _index_dim_access(out_view: np.ndarray, dim: int, index_view: np.ndarray, other: np.ndarray | None):
    """Rows of out addressed by out[..., index[i], ...] for the source layout (index along dim)."""
    shape = list(out_view.shape)
    shape[dim] = index_view.size
    shape = tuple(shape)
    sets = [list(_estrides(out_view))]
    if other is not None:
        sets.append(list(_estrides(other)))
    k, c, inner = _merge_suffix(shape, sets, len(shape) - dim - 1)
    lead = shape[:len(shape) - k]
    strides = list(_estrides(out_view)[:len(lead)])
    strides[dim] = 0
    axes = [None] * len(lead)
    axes[dim] = 0
    return shape, lead, c, inner, strides, axes


def _index_add_checks(self, dim, index, source, fn="index_add_"):
    dim = _wrap_dim(dim, self.dim())
    if index.dim() > 1:
        raise IndexError(f"{fn}(): Index is supposed to be a vector")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"{fn}(): Expected dtype int32/int64 for index")
    if self.dtype != source.dtype:
        raise RuntimeError(f"{fn}(): self ({SCALAR_TYPE_NAMES[self.dtype]}) and source "
                           f"({SCALAR_TYPE_NAMES[source.dtype]}) must have the same scalar type")
    sshape = tuple(self.shape) or (1,)
    srcshape = tuple(source.shape) or (1,)
    if len(sshape) != len(srcshape):
        raise IndexError(f"{fn}(): Source/destination tensor must have same slice shapes, but got source of "
                         f"shape {list(source.shape)} and destination of shape {list(self.shape)}")
    for d in range(len(sshape)):
        if d != dim and sshape[d] != srcshape[d]:
            raise RuntimeError(f"{fn}(): Source/destination tensor must have same slice shapes. Destination "
                               f"slice shape: {list(self.shape)} at dimension {dim} and source slice shape: "
                               f"{list(source.shape)} at dimension {dim}.")
    if index.numel() != srcshape[dim]:
        raise RuntimeError(f"{fn}(): Number of indices ({index.numel()}) should be equal to source.size(dim) "
                           f"({srcshape[dim]})")
    return dim


def _index_scatter_run(out, self, dim, index, source, mode, name, error, negative=False, alpha=1,
                       once: bool = False, fused: bool = False):
    """out = self with source slices assigned / added at index along dim.

    For "add": ``once`` accumulates bf16/fp16 in fp32 and rounds at the end; otherwise every add
    rounds, adding ``alpha * source`` exactly (``fused``) or ``source * alpha`` rounded to the dtype."""
    if out.dtype != self.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {self.dtype}, but got {out.dtype} instead")
    with launch(name, out.device.index) as nc:
        ov, iv = _view(out), _view(index).reshape(-1)
        if not overlap.same_view(out, self):
            _copy_into(nc, ov, _view(self))
        size = ov.shape[dim]
        _check_range(nc, iv, size, negative, error)
        if iv.size == 0 or ov.size == 0:
            return
        srcv = _view(source) if isinstance(source, torch.Tensor) else None
        stage = _Fp32Stage(nc, ov, out, enabled=mode == "add" and once)
        work = stage.view
        shape, lead, c, inner, strides, axes = _index_dim_access(work, dim, iv, srcv)
        if _prod(shape) == 0:
            return
        term = _Index(_embed(iv, lead, axes), _estrides(work)[dim], size, negative)
        dst = _Rows(work, lead, strides, c, inner[0], (term,))
        src = _Rows.of(srcv, len(lead), c, inner[1]) if srcv is not None else _Const(nc, source, ov.dtype)
        transform, scale = None, None
        if mode == "add" and alpha != 1:
            factor = _as_dtype(alpha, ov.dtype)
            if fused and is_float(ov.dtype):
                scale = float(factor)
            else:
                def transform(nc_, t, co):
                    scaled = nc_.sbuf_tile(t.shape, ov.dtype)
                    nc_.vector.tensor_scalar(scaled, t, "multiply", factor,
                                             dtype=FP32 if is_float(ov.dtype) else ov.dtype)
                    return scaled
        _move(nc, dst, src, _prod(lead), lead, mode, unique=mode != "assign" or srcv is None, transform=transform,
              scale=scale)
        stage.finish()


def _index_add_compute(out: torch.Tensor, a: dict) -> None:
    _check_devices("aten::index_add", dict(a, out=out))
    self, index, source = a["self"], a["index"], a["source"]
    dim = _index_add_checks(self, a["dim"], index, source)
    alpha = scalar_of(a.get("alpha", 1))
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        alpha = int(alpha) if self.dtype != torch.bool else bool(alpha)
    size = self.shape[dim] if self.dim() else 1
    # CPU: for dim 0 or the last, alpha 1 and int64 indices index_add_ is scatter_add_ (fp32
    # accumulation for bf16/fp16, RuntimeError out of range); otherwise a loop of add_(slice, alpha)
    # (vectorized: one rounding per add; 0-d/1-d: source * alpha rounded first), IndexError.
    via_scatter = (self.dim() > 1 and dim in (0, self.dim() - 1) and alpha == 1 and index.dtype == torch.int64)
    error = _bounds_error(dim, size) if via_scatter else _index_range_error
    _index_scatter_run(out, self, dim, index, source, "add", "index_add", error, alpha=alpha, once=via_scatter,
                       fused=self.dim() > 1 and cpu_host.fused_multiply_add())


register_family("index_add", _index_add_compute, _self_meta("index", "source"), overloads=("default", "out"))


def _index_copy_compute(out: torch.Tensor, a: dict) -> None:
    _check_devices("aten::index_copy", dict(a, out=out))
    self, index, source = a["self"], a["index"], a["source"]
    if index.dtype != torch.int64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got "
                           f"{SCALAR_TYPE_NAMES[index.dtype]}")
    dim = _index_add_checks(self, a["dim"], index, source, "index_copy_")
    size = self.shape[dim] if self.dim() else 1
    _index_scatter_run(out, self, dim, index, source, "assign", "index_copy",
                       _bounds_error(dim, size, IndexError, "index_copy_(): "))


register_family("index_copy", _index_copy_compute, _self_meta("index", "source"), overloads=("default", "out"))


def _index_fill_(a: dict) -> torch.Tensor:
    self, index, value = a["self"], a["index"], a["value"]
    dim = _wrap_dim(a["dim"], self.dim())
    if index.dtype != torch.int64:
        raise IndexError("index_fill_(): Expected dtype int64 for index.")
    if index.dim() > 1:
        raise IndexError("Index has to be a vector/scalar")
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.dim()} dimension(s).")
    if isinstance(value, torch.Tensor) and value.device.type == "neuron":
        source: Any = hbm(value).reshape(1)
        if value.dtype != self.dtype:
            source = None
    else:
        source = scalar_of(value)
        if isinstance(source, complex) and not self.dtype.is_complex:
            raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")
        check_scalar_fits(source, self.dtype)
    if source is None:  # a device value of another dtype: convert it on the engine first
        conv = _empty((), self.dtype, self)
        with launch("cast", self.device.index) as nc:
            _copy_into(nc, hbm(conv).reshape(1), hbm(value).reshape(1))
        source = hbm(conv).reshape(1)
    size = self.shape[dim] if self.dim() else 1
    _index_scatter_run(self, self, dim, index, source, "assign", "index_fill",
                       _bounds_error(dim, size, IndexError), negative=True)
    return self


_native("aten::index_fill_.int_Scalar", "aten::index_fill_.int_Tensor",
        serves=("aten::index_fill.int_Scalar", "aten::index_fill.int_Tensor"))(_index_fill_)


@_native("aten::take")
def _take(a: dict) -> torch.Tensor:
    self, index = a["self"], a["index"]
    if index.dtype != torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {SCALAR_TYPE_NAMES[index.dtype]}")
    out = _empty(tuple(index.shape), self.dtype, self)
    _take_into(out, self, index)
    return out


@_native("aten::take.out")
def _take_out(a: dict) -> torch.Tensor:
    self, index, out = a["self"], a["index"], a["out"]
    if index.dtype != torch.int64:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {SCALAR_TYPE_NAMES[index.dtype]}")
    if out.dtype != self.dtype:
        raise RuntimeError(f"take(): self and result expected to have the same dtype, but got self dtype "
                           f"{self.dtype} and result dtype {out.dtype}")
    overlap.assert_out_apart(out, index, self)
    check_out(out, tuple(index.shape), self.dtype)
    _take_into(out, self, index)
    return out


def _take_into(out: torch.Tensor, self: torch.Tensor, index: torch.Tensor) -> None:
    n = self.numel()
    if n == 0 and index.numel():
        raise IndexError("take(): tried to take from an empty tensor")
    with launch("take", out.device.index) as nc:
        iv = _view(index)
        _check_range(nc, iv, n, True, lambda v: IndexError(
            f"out of range: tried to access index {v} on a tensor of {n} elements."))
        if out.numel() == 0:
            return
        sflat = _reshaped(hbm(self), (n,))
        keep = None
        if sflat is None:
            keep = _empty(tuple(self.shape), self.dtype, self)
            _copy_into(nc, hbm(keep), hbm(self))
            sflat = hbm(keep).reshape(-1)
        ov = _view(out)
        term = _Index(iv, _estrides(sflat)[0], n, True)
        src = _Rows(sflat, iv.shape, (0,) * iv.ndim, 1, 1, (term,))
        dst = _Rows.of(ov, ov.ndim, 1, 1)
        _move(nc, dst, src, iv.size, iv.shape)
        del keep


# --- select_scatter / slice_scatter / diagonal_scatter ---------------------------------

def _scatter_view_op(self: torch.Tensor, src: torch.Tensor, region: Callable[[np.ndarray], np.ndarray],
                     slice_shape, out: torch.Tensor | None, name: str) -> torch.Tensor:
    if tuple(src.shape) != tuple(slice_shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = {list(src.shape)}, "
                           f"slice size = {list(slice_shape)}")
    if out is None:
        out = torch.empty_like(self) if not overlap.has_internal_overlap(self) else \
            torch.empty(tuple(self.shape), dtype=self.dtype, device=self.device)
    else:
        check_out(out, tuple(self.shape), self.dtype, (self, src))
    with launch(name, self.device.index) as nc:
        ov = hbm(out)
        if not overlap.same_view(out, self):
            _copy_into(nc, ov, hbm(self))
        _copy_into(nc, region(ov), hbm(src))
    return out


def _select_region(self: torch.Tensor, dim: int, index: int):
    if self.dim() == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = _wrap_dim(dim, self.dim())
    size = self.shape[dim]
    if not -size <= index < size:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(self.shape)} at dimension "
                         f"{dim}")
    index %= size
    shape = tuple(s for d, s in enumerate(self.shape) if d != dim)
    # a slice then a squeeze keeps a view (plain integer indexing of a 1-D array gives a scalar)
    return (lambda v: np.squeeze(v[(slice(None),) * dim + (slice(index, index + 1),)], axis=dim)), shape


def _select_scatter_fn(a: dict, out=None):
    region, shape = _select_region(a["self"], a["dim"], a["index"])
    return _scatter_view_op(a["self"], a["src"], region, shape, out, "select_scatter")


_native("aten::select_scatter")(lambda a: _select_scatter_fn(a))
_native("aten::select_scatter.out")(lambda a: _select_scatter_fn(a, a["out"]))


def _slice_region(self: torch.Tensor, dim: int, start, end, step: int):
    if self.dim() == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    dim = _wrap_dim(dim, self.dim())
    if step <= 0:
        raise RuntimeError("slice step must be positive")
    size = self.shape[dim]
    start = 0 if start is None else start
    end = size if end is None else end
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    length = (end - start + step - 1) // step
    shape = list(self.shape)
    shape[dim] = length
    return (lambda v: v[(slice(None),) * dim + (slice(start, end, step),)]), tuple(shape)


def _slice_scatter_fn(a: dict, out=None):
    region, shape = _slice_region(a["self"], a["dim"], a.get("start"), a.get("end"), a.get("step", 1) or 1)
    return _scatter_view_op(a["self"], a["src"], region, shape, out, "slice_scatter")


_native("aten::slice_scatter")(lambda a: _slice_scatter_fn(a))
_native("aten::slice_scatter.out")(lambda a: _slice_scatter_fn(a, a["out"]))


def _diagonal_region(self: torch.Tensor, offset: int, dim1: int, dim2: int):
    nd = self.dim()
    d1, d2 = _wrap_dim(dim1, nd), _wrap_dim(dim2, nd)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n1, n2 = self.shape[d1], self.shape[d2]
    if offset >= 0:
        length = max(min(n1, n2 - offset), 0)
    else:
        length = max(min(n1 + offset, n2), 0)
    shape = tuple(s for d, s in enumerate(self.shape) if d not in (d1, d2)) + (length,)

    def region(v: np.ndarray) -> np.ndarray:
        if length == 0:
            return np.empty(shape, dtype=v.dtype)
        key = [slice(None)] * nd
        if offset >= 0:
            key[d2] = slice(offset, None)
        else:
            key[d1] = slice(-offset, None)
        start = v[tuple(key)]
        strides = tuple(s for d, s in enumerate(v.strides) if d not in (d1, d2)) + (v.strides[d1] + v.strides[d2],)
        return as_strided(start, shape=shape, strides=strides)

    return region, shape


def _diagonal_scatter_fn(a: dict, out=None):
    region, shape = _diagonal_region(a["self"], a.get("offset", 0), a.get("dim1", 0), a.get("dim2", 1))
    return _scatter_view_op(a["self"], a["src"], region, shape, out, "diagonal_scatter")


_native("aten::diagonal_scatter")(lambda a: _diagonal_scatter_fn(a))
_native("aten::diagonal_scatter.out")(lambda a: _diagonal_scatter_fn(a, a["out"]))


# --- embedding backward and embedding_bag ----------------------------------------------

def _zeros_scratch(nc, shape, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    t = _empty(shape, dtype, like)
    _fill(nc, hbm(t), 0)
    return t


@_native("aten::embedding_dense_backward")
def _embedding_dense_backward(a: dict) -> torch.Tensor:
    grad, indices = a["grad_output"], a["indices"]
    num_weights, padding_idx, scale = int(a["num_weights"]), int(a["padding_idx"]), bool(a["scale_grad_by_freq"])
    _check_embedding_indices(indices, "embedding_backward")
    d = grad.shape[-1] if grad.dim() else 1
    out = _empty((num_weights, d), grad.dtype, grad)
    n = indices.numel()
    with launch("embedding_dense_backward", grad.device.index) as nc:
        iv = hbm(indices).reshape(-1) if indices.dim() else hbm(indices).reshape(1)
        _check_range(nc, iv, num_weights, False, _index_range_error)
        _fill(nc, hbm(out), 0)
        av = hbm(out)
        gv = _reshaped(hbm(grad), (n, d))
        keep = None
        if gv is None:
            keep = _empty((n, d), grad.dtype, grad)
            _copy_into(nc, hbm(keep).reshape(grad.shape), hbm(grad))
            gv = hbm(keep)
        if n and d:
            flat_idx = _reshaped(iv, (n,))
            if flat_idx is None:
                keep2 = _empty((n,), indices.dtype, indices)
                _copy_into(nc, hbm(keep2).reshape(indices.shape), hbm(indices))
                flat_idx = hbm(keep2)
            factors = None
            if scale:
                counts = _zeros_scratch(nc, (num_weights, 1), torch.int64, grad)
                cv = hbm(counts)
                cdst = _Rows(cv, (n,), (0,), 1, 1, (_Index(flat_idx, _estrides(cv)[0], num_weights, False),))
                _move(nc, cdst, _Const(nc, 1, I64), n, (n,), "add")

                def factors(nc_, co):  # 1 / count of each row's index: the alpha of CPU's add_(grad, alpha),
                    cnt = cdst.load(nc_, co, 0, 1)  # which is rounded to the grad dtype
                    inv = nc_.sbuf_tile(cnt.shape, av.dtype)
                    nc_.vector.tensor_scalar(inv, cnt, "divide", 1.0, reverse=True, dtype=FP32)
                    return inv
            _, c, (s_a, s_g) = _merge_suffix((d,), [(_estrides(av)[1],), (_estrides(gv)[1],)], 1)
            dst = _Rows(av, (n,), (0,), c, s_a, (_Index(flat_idx, _estrides(av)[0], num_weights, False),))
            src = _Rows.of(gv, 1, c, s_g)
            _move(nc, dst, src, n, (n,), "add", scale=factors)
        if 0 <= padding_idx < num_weights:
            _fill(nc, av[padding_idx:padding_idx + 1], 0)
        del keep
    return out


def _check_bag_args(weight, indices, offsets, mode, psw, ilo):
    if weight.dtype not in _FLOATS:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have one of the following scalar types: "
                           f"Half, BFloat16, Float, Double; but got {weight.type().replace('neuron', 'torch')} "
                           f"instead (while checking arguments for embedding_bag)")
    for t, name in ((indices, "indices"), (offsets, "offsets")):
        if t.dtype not in (torch.int64, torch.int32):
            raise RuntimeError(f"Expected tensor for argument #{2 if name == 'indices' else 3} '{name}' to have one "
                               f"of the following scalar types: Long, Int; but got "
                               f"{t.type().replace('neuron', 'torch')} instead (while checking arguments for "
                               f"embedding_bag)")
    if indices.dim() != 1 or offsets.dim() != 1:
        raise RuntimeError("input has to be 1D or 2D Tensor, offsets has to be a 1D Tensor")
    if weight.dim() != 2:
        raise RuntimeError("weight has to be a 2D Tensor")
    if mode not in (0, 1, 2):
        raise RuntimeError(f"mode has to be one of sum, mean or max")
    if psw is not None:
        if mode != 0:
            raise RuntimeError("embedding_bag: per_sample_weights only supported with mode='sum'")
        if psw.dtype != weight.dtype:
            raise RuntimeError(f"Expected per_sample_weights dtype {weight.dtype} but got {psw.dtype}")
        if psw.dim() != 1 or psw.numel() != indices.numel():
            raise RuntimeError("expected per_sample_weights to be 1D tensor with the same number of elements as input")
    if ilo and offsets.numel() < 1:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")


def _embedding_bag_impl(a: dict, forward_only: bool):
    weight, indices, offsets = a["weight"], a["indices"], a["offsets"]
    mode = int(a.get("mode", 0) or 0)
    psw = a.get("per_sample_weights")
    ilo = bool(a.get("include_last_offset", False))
    padding_idx = a.get("padding_idx", -1)
    padding_idx = -1 if padding_idx is None else int(padding_idx)
    _check_bag_args(weight, indices, offsets, mode, psw, ilo)
    index_dtype = torch.promote_types(indices.dtype, offsets.dtype)
    n, nw, d = indices.numel(), weight.shape[0], weight.shape[1]
    n_off = offsets.numel()
    bags = n_off - 1 if ilo else n_off
    fast = (mode != 2 and weight.stride(1) == 1 and padding_idx < 0
            and (psw is None or psw.stride(0) == 1))  # CPU's index_select fast path: sums run to offsets[b + 1]
    out = torch.empty((bags, d), dtype=weight.dtype, device=weight.device)
    with launch("embedding_bag", weight.device.index) as nc:
        ov_off = hbm(offsets)
        iv = hbm(indices)
        if n_off:
            lo_hi = nc.sbuf_tile((1, 2), ov_off.dtype)
            nc.dma.load(lo_hi[:, 0:1], ov_off[0:1].reshape(1, 1))
            nc.dma.load(lo_hi[:, 1:2], ov_off[n_off - 1:n_off].reshape(1, 1))
            first, last = (int(v) for v in lo_hi.read()[0])
            if first != 0:
                raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                                   f"from position 0. However, got {first}")
            if last > n:
                raise RuntimeError(f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of "
                                   f"{last}")
        if n:
            lo, hi = _index_range(nc, iv)
            bad = hi if hi >= nw else lo if lo < 0 else None
            if bad is not None:
                pos = 0
                raise RuntimeError(f"Index {pos} of input takes value {bad} which is not in the valid range [0, {nw})")
        # offset2bag: bag of every position (a scan of +1 marks at each bag start)
        o2b = _empty((n,), index_dtype, weight)
        o2b_v = hbm(o2b)
        if n:
            marks = _zeros_scratch(nc, (n + 1, 1), torch.int64, weight)
            mv = hbm(marks)
            if bags > 1:
                starts = ov_off[1:bags]
                dst = _Rows(mv, (bags - 1,), (0,), 1, 1, (_Index(starts, 1, n + 1, False),))
                _move(nc, dst, _Const(nc, 1, I64), bags - 1, (bags - 1,), "add")
            _scan_into(nc, o2b_v, mv.reshape(-1)[:n])
        # which bag each position adds into (bags = a dummy bag that is dropped)
        sum_bag = o2b_v
        keep = []
        if n and (padding_idx >= 0 or (fast and ilo)):
            sb = _empty((n,), torch.int64, weight)
            keep.append(sb)
            sum_bag = hbm(sb)
            _redirect_bags(nc, sum_bag, o2b_v, iv, padding_idx, bags,
                           ov_off[bags:bags + 1] if (fast and ilo) else None)
        count_bag = sum_bag if padding_idx >= 0 else o2b_v  # (padding and the fast path exclude each other)
        counts = _zeros_scratch(nc, (bags + 1, 1), torch.int64, weight)
        cv = hbm(counts)
        if n and mode != 0:
            cdst = _Rows(cv, (n,), (0,), 1, 1, (_Index(count_bag, 1, bags + 1, False),))
            _move(nc, cdst, _Const(nc, 1, I64), n, (n,), "add")
        wv = hbm(weight)
        max_idx = None
        if mode in (0, 1):
            acc = _zeros_scratch(nc, (bags + 1, d), torch.float32, weight)
            av = hbm(acc)
            if n and d:
                src = _Rows(wv, (n,), (0,), d, _estrides(wv)[1], (_Index(iv, _estrides(wv)[0], nw, False),))
                dst = _Rows(av, (n,), (0,), d, 1, (_Index(sum_bag, d, bags + 1, False),))
                transform = None
                if psw is not None:
                    pv = hbm(psw)

                    def transform(nc_, t, co):
                        w = nc_.sbuf_tile((co.p, co.f), pv.dtype)
                        nc_.dma.load(w, pv[co.r0:co.r0 + co.p * co.f])
                        scaled = nc_.sbuf_tile(t.shape, FP32)
                        cc = t.free // co.f
                        for j in range(co.f):
                            nc_.vector.tensor_tensor(scaled[:, j * cc:(j + 1) * cc], t[:, j * cc:(j + 1) * cc],
                                                     w[:, j:j + 1], "multiply", dtype=FP32)
                        return scaled
                _move(nc, dst, src, n, (n,), "add", transform=transform)
            _finish_bags(nc, hbm(out), av[:bags], cv[:bags] if mode == 1 else None)
        else:
            max_idx = _empty((bags, d), index_dtype, weight)
            _bag_max(nc, hbm(out), hbm(max_idx), wv, iv, ov_off, bags, n, padding_idx)
        bag_size = _empty((bags + 1 if (forward_only and ilo and mode == 0) else bags,), index_dtype, weight)
        if mode == 0:
            _fill(nc, hbm(bag_size), 0)
        else:
            _copy_into(nc, hbm(bag_size), cv[:bags, 0])
        if mode == 0:
            max_idx = _empty(tuple(bag_size.shape), index_dtype, weight)
            _fill(nc, hbm(max_idx), 0)
        elif mode == 1:
            max_idx = _empty((bags,), index_dtype, weight)
            _copy_into(nc, hbm(max_idx), cv[:bags, 0])
        if mode == 0 and fast:
            o2b = _empty((0,), index_dtype, weight)
    return out, o2b, bag_size, max_idx


def _scan_into(nc, dst: np.ndarray, marks: np.ndarray, start: int = 0) -> None:
    """dst = start + inclusive prefix sum of marks (one partition, tile by tile with a carry)."""
    chunk = 2048
    carry = nc.sbuf_tile((1, 1), I64)
    nc.vector.memset(carry, start)
    for s in range(0, marks.size, chunk):
        e = min(marks.size, s + chunk)
        mark = nc.mark()
        t = nc.sbuf_tile((1, e - s), I64)
        nc.dma.load(t, marks[s:e].reshape(1, -1))
        sc = nc.sbuf_tile((1, e - s), I64)
        nc.vector.tensor_scan(sc, t, "add", dtype=I64)
        nc.vector.tensor_tensor(sc, sc, carry, "add", dtype=I64)
        nc.vector.tensor_copy(carry, sc[:, e - s - 1:e - s])
        out = nc.sbuf_tile((1, e - s), dst.dtype)
        nc.vector.tensor_copy(out, sc)
        nc.dma.store(dst[s:e].reshape(1, -1), out)
        nc.release_to(mark)


def _redirect_bags(nc, dst: np.ndarray, bag: np.ndarray, idx: np.ndarray, padding_idx: int, dummy: int,
                   last_offset: np.ndarray | None) -> None:
    """dst = bag, or the dummy bag for padding entries (and positions past the last offset)."""
    n = bag.size
    last = None
    if last_offset is not None:
        one = nc.sbuf_tile((1, 1), last_offset.dtype)
        nc.dma.load(one, last_offset.reshape(1, 1))
        last = nc.sbuf_tile((P, 1), I64)
        wide = nc.sbuf_tile((1, 1), I64)
        nc.vector.tensor_copy(wide, one)
        nc.gpsimd.partition_broadcast(last, wide)
    for r0, p, f in _row_tiles(n, 2048):
        mark = nc.mark()
        b = nc.sbuf_tile((p, f), bag.dtype)
        nc.dma.load(b, bag[r0:r0 + p * f])
        drop = nc.sbuf_tile((p, f), I64)
        nc.vector.memset(drop, 0)
        if padding_idx >= 0:
            i = nc.sbuf_tile((p, f), idx.dtype)
            nc.dma.load(i, idx[r0:r0 + p * f])
            nc.vector.tensor_scalar(drop, i, "equal", padding_idx, dtype=I64)
        if last is not None:
            pos = nc.sbuf_tile((p, f), I64)
            nc.gpsimd.iota(pos, base=r0, partition_step=f, free_step=1)
            past = nc.sbuf_tile((p, f), I64)
            nc.vector.tensor_tensor(past, pos, last[:p, :], "greater_equal", dtype=I64)
            nc.vector.tensor_tensor(drop, drop, past, "maximum", dtype=I64)
        # dst = bag + drop * (dummy - bag)
        diff = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_scalar(diff, b, "subtract", dummy, reverse=True, dtype=I64)
        nc.vector.tensor_tensor(diff, diff, drop, "multiply", dtype=I64)
        res = nc.sbuf_tile((p, f), dst.dtype)
        nc.vector.tensor_tensor(res, b, diff, "add", dtype=I64)
        nc.dma.store(dst[r0:r0 + p * f], res)
        nc.release_to(mark)


def _finish_bags(nc, out: np.ndarray, acc: np.ndarray, counts: np.ndarray | None) -> None:
    """out = acc (/ max(count, 1) for mean), rounded to out's dtype; one bag per partition."""
    bags, d = out.shape
    if bags == 0 or d == 0:
        return
    chunk = 4096
    for b0 in range(0, bags, P):
        b1 = min(bags, b0 + P)
        mark = nc.mark()
        div = None
        if counts is not None:
            cnt = nc.sbuf_tile((b1 - b0, 1), I64)
            nc.dma.load(cnt, counts[b0:b1])
            div = nc.sbuf_tile((b1 - b0, 1), FP32)
            nc.vector.tensor_scalar(div, cnt, "maximum", 1, dtype=FP32)
        for c0 in range(0, d, chunk):
            c1 = min(d, c0 + chunk)
            t = nc.sbuf_tile((b1 - b0, c1 - c0), FP32)
            nc.dma.load(t, acc[b0:b1, c0:c1])
            res = nc.sbuf_tile((b1 - b0, c1 - c0), out.dtype)
            if div is not None:
                nc.vector.tensor_tensor(res, t, div, "divide", dtype=FP32)
            else:
                nc.vector.tensor_copy(res, t)
            nc.dma.store(out[b0:b1, c0:c1], res)
        nc.release_to(mark)


def _bag_max(nc, out: np.ndarray, max_idx: np.ndarray, wv: np.ndarray, iv: np.ndarray, off: np.ndarray,
             bags: int, n: int, padding_idx: int) -> None:
    """Max mode, one bag per partition: walk each bag's positions, keep the first maximum."""
    d = out.shape[1]
    if bags == 0 or d == 0:
        return
    nw = wv.shape[0]
    wtable = _table(wv, 0, d, _estrides(wv)[1])
    itable = _table(iv.reshape(-1), 0, 1, 1) if n else None
    for b0 in range(0, bags, P):
        b1 = min(bags, b0 + P)
        p = b1 - b0
        mark = nc.mark()
        starts = nc.sbuf_tile((p, 1), I64)
        ends = nc.sbuf_tile((p, 1), I64)
        st = nc.sbuf_tile((p, 1), off.dtype)
        nc.dma.load(st, off[b0:b1].reshape(p, 1))
        nc.vector.tensor_copy(starts, st)
        # a bag ends where the next begins; the last bag runs to the end of the input
        nc.vector.memset(ends, n)
        nrows = max(0, min(b1, bags - 1) - b0)
        if nrows:
            en = nc.sbuf_tile((nrows, 1), off.dtype)
            nc.dma.load(en, off[b0 + 1:b0 + 1 + nrows].reshape(nrows, 1))
            nc.vector.tensor_copy(ends[:nrows, :], en)
        length = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_tensor(length, ends, starts, "subtract", dtype=I64)
        longest = nc.sbuf_tile((1, 1), I64)
        nc.gpsimd.partition_reduce(longest, length, "maximum")
        steps = max(0, int(longest.read()[0, 0]))
        cur = nc.sbuf_tile((p, d), out.dtype)
        nc.vector.memset(cur, 0)
        arg = nc.sbuf_tile((p, d), I64)
        nc.vector.memset(arg, 0)
        seen = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.memset(seen, False)
        ones = nc.sbuf_tile((p, d), I64)
        nc.vector.memset(ones, 1)
        for s in range(steps):
            inner = nc.mark()
            pos = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(pos, starts, "add", s, dtype=I64)
            valid = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_tensor(valid, pos, ends, "less", dtype=I64)
            nc.vector.tensor_scalar(pos, pos, "minimum", n - 1, dtype=I64)
            word = nc.sbuf_tile((p, 1), iv.dtype)
            nc.dma.load_rows(word, itable, pos)
            if padding_idx >= 0:
                notpad = nc.sbuf_tile((p, 1), BOOL)
                nc.vector.tensor_scalar(notpad, word, "not_equal", padding_idx, dtype=I64)
                nc.vector.tensor_tensor(valid, valid, notpad, "logical_and")
            safe = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(safe, word, "maximum", 0, dtype=I64)
            nc.vector.tensor_scalar(safe, safe, "minimum", nw - 1, dtype=I64)
            woff = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(woff, safe, "multiply", _estrides(wv)[0], dtype=I64)
            row = nc.sbuf_tile((p, d), wv.dtype)
            nc.dma.load_rows(row, wtable, woff)
            better = nc.sbuf_tile((p, d), BOOL)
            nc.vector.tensor_tensor(better, row, cur, "greater", dtype=FP32)
            first = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_unary(first, seen, "logical_not")
            nc.vector.tensor_tensor(better, better, first, "logical_or")
            nc.vector.tensor_tensor(better, better, valid, "logical_and")
            nc.vector.select(cur, better, row, cur)
            words = nc.sbuf_tile((p, d), I64)
            nc.vector.tensor_tensor(words, ones, safe, "multiply", dtype=I64)
            nc.vector.select(arg, better, words, arg)
            nc.vector.tensor_tensor(seen, seen, valid, "logical_or")
            nc.release_to(inner)
        nc.dma.store(out[b0:b1], cur)
        res = nc.sbuf_tile((p, d), max_idx.dtype)
        nc.vector.tensor_copy(res, arg)
        nc.dma.store(max_idx[b0:b1], res)
        nc.release_to(mark)


_native("aten::_embedding_bag")(lambda a: _embedding_bag_impl(a, False))
_native("aten::_embedding_bag_forward_only")(lambda a: _embedding_bag_impl(a, True))


# --- sort / topk ---------------------------------------------------------------------------

# CPU's sort(stable=False) is libstdc++'s std::sort (introsort) and topk is std::partial_sort
# (k * 64 <= n) or std::nth_element then std::sort of the first k - 1, all comparing keys only
# (NaN largest). With distinct keys every algorithm gives the stable order, so GpSimd's stable sort
# is exact; a row with ties gets the same permutation CPU computes from this emulation of the
# libstdc++ algorithms (run on GpSimd's general-purpose cores).

_STL_THRESHOLD = 16


def _stl_comparator(keys: np.ndarray, descending: bool) -> Callable[[int, int], bool]:
    values = keys.astype(np.float64).tolist() if is_float(keys.dtype) else keys.astype(np.int64).tolist()
    nan = [v != v for v in values]
    if descending:
        return lambda a, b: (nan[a] and not nan[b]) or values[a] > values[b]
    return lambda a, b: (not nan[a] and nan[b]) or values[a] < values[b]


def _stl_adjust_heap(v, first, hole, length, value, comp):
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if comp(v[first + child], v[first + child - 1]):
            child -= 1
        v[first + hole] = v[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        v[first + hole] = v[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and comp(v[first + parent], value):
        v[first + hole] = v[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    v[first + hole] = value


def _stl_make_heap(v, first, last, comp):
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _stl_adjust_heap(v, first, parent, length, v[first + parent], comp)
        if parent == 0:
            return
        parent -= 1


def _stl_pop_heap(v, first, last, result, comp):
    value = v[result]
    v[result] = v[first]
    _stl_adjust_heap(v, first, 0, last - first, value, comp)


def _stl_heap_select(v, first, middle, last, comp):
    _stl_make_heap(v, first, middle, comp)
    for i in range(middle, last):
        if comp(v[i], v[first]):
            _stl_pop_heap(v, first, middle, i, comp)


def _stl_sort_heap(v, first, last, comp):
    while last - first > 1:
        last -= 1
        _stl_pop_heap(v, first, last, last, comp)


def _stl_partial_sort(v, first, middle, last, comp):
    _stl_heap_select(v, first, middle, last, comp)
    _stl_sort_heap(v, first, middle, comp)


def _stl_median_to_first(v, result, a, b, c, comp):
    if comp(v[a], v[b]):
        pick = b if comp(v[b], v[c]) else c if comp(v[a], v[c]) else a
    else:
        pick = a if comp(v[a], v[c]) else c if comp(v[b], v[c]) else b
    v[result], v[pick] = v[pick], v[result]


def _stl_partition_pivot(v, first, last, comp):
    mid = first + (last - first) // 2
    _stl_median_to_first(v, first, first + 1, mid, last - 1, comp)
    pivot, lo, hi = v[first], first + 1, last
    while True:
        while comp(v[lo], pivot):
            lo += 1
        hi -= 1
        while comp(pivot, v[hi]):
            hi -= 1
        if not lo < hi:
            return lo
        v[lo], v[hi] = v[hi], v[lo]
        lo += 1


def _stl_insertion_sort(v, first, last, comp, guarded=True):
    for i in range(first + (1 if guarded else 0), last):
        value = v[i]
        if guarded and comp(value, v[first]):
            v[first + 1:i + 1] = v[first:i]
            v[first] = value
            continue
        j = i
        while comp(value, v[j - 1]):
            v[j] = v[j - 1]
            j -= 1
        v[j] = value


def _stl_introsort_loop(v, first, last, depth, comp):
    while last - first > _STL_THRESHOLD:
        if depth == 0:
            _stl_partial_sort(v, first, last, last, comp)
            return
        depth -= 1
        cut = _stl_partition_pivot(v, first, last, comp)
        _stl_introsort_loop(v, cut, last, depth, comp)
        last = cut


def _stl_sort(v, first, last, comp) -> None:
    """std::sort(v.begin() + first, v.begin() + last, comp)."""
    n = last - first
    if n < 2:
        return
    _stl_introsort_loop(v, first, last, 2 * (n.bit_length() - 1), comp)
    if n > _STL_THRESHOLD:
        _stl_insertion_sort(v, first, first + _STL_THRESHOLD, comp)
        _stl_insertion_sort(v, first + _STL_THRESHOLD, last, comp, guarded=False)
    else:
        _stl_insertion_sort(v, first, last, comp)


def _stl_nth_element(v, nth, comp) -> None:
    first, last = 0, len(v)
    if last - first < 2:
        return
    depth = 2 * ((last - first).bit_length() - 1)
    while last - first > 3:
        if depth == 0:
            _stl_heap_select(v, first, nth + 1, last, comp)
            v[first], v[nth] = v[nth], v[first]
            return
        depth -= 1
        cut = _stl_partition_pivot(v, first, last, comp)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _stl_insertion_sort(v, first, last, comp)


def _cpu_order(keys: np.ndarray, descending: bool, k: int | None = None, sorted_: bool = True) -> list[int]:
    """The permutation CPU's std::sort (k None) or topk (k) produces for one row."""
    comp = _stl_comparator(keys, descending)
    v = list(range(keys.size))
    if k is None:
        _stl_sort(v, 0, len(v), comp)
        return v
    if k * 64 <= len(v):
        _stl_partial_sort(v, 0, k, len(v), comp)
    else:
        _stl_nth_element(v, k - 1, comp)
        if sorted_:
            _stl_sort(v, 0, k - 1, comp)
    return v[:k]


def _has_ties(sorted_row: np.ndarray) -> bool:
    if sorted_row.size < 2:
        return False
    a, b = sorted_row[:-1], sorted_row[1:]
    same = a == b
    if is_float(sorted_row.dtype):
        same = same | (np.isnan(a.astype(FP32)) & np.isnan(b.astype(FP32)))
    return bool(same.any())


def _cpu_tie_order(vals: np.ndarray, idx: np.ndarray, x: np.ndarray, n: int, descending: bool,
                   k: int | None, unsorted_topk: bool) -> None:
    """Rewrite stable results (rows of vals/idx) with CPU's order where the row has ties."""
    for r in range(x.shape[0]):
        row = x[r, :n]
        if not (unsorted_topk or (_has_ties(vals[r, :n]) and (n > _STL_THRESHOLD or k is not None))):
            continue
        order = np.asarray(_cpu_order(row, descending, k, not unsorted_topk), dtype=np.int64)
        idx[r, :order.size] = order
        vals[r, :order.size] = row[order]


def _order(x: np.ndarray, descending: bool) -> np.ndarray:
    """Stable order of a vector, NaN largest (GpSimd sort's rule, for rows longer than one partition)."""
    if is_float(x.dtype):
        key = x.astype(FP32)
        nan = np.isnan(key)
        finite = np.where(nan, 0, key)
        return np.lexsort((-finite, ~nan) if descending else (finite, nan))
    key = x.astype(np.uint8) if x.dtype == BOOL else x
    return np.argsort(~key if descending else key, kind="stable")


def _sort_rows(nc, x2d: np.ndarray, v2d: np.ndarray, i2d: np.ndarray, descending: bool, stable: bool = True,
               topk: bool = False, sorted_: bool = True) -> None:
    """v2d, i2d = the first k (= v2d's width) of each row of x2d sorted: stable, or in the order CPU's
    std::sort (``stable=False``) / topk (``topk``) leaves ties in."""
    rows, n = x2d.shape
    k = v2d.shape[1]
    if rows == 0 or k == 0:
        return
    cpu_ties = topk or not stable
    unsorted_topk = topk and not sorted_ and k * 64 > n
    tie_k = k if topk else None

    def fix_ties(vo, io, xi):
        _cpu_tie_order(vo, io, xi, n, descending, tie_k, unsorted_topk)
    if n <= SORT_ROW_MAX:
        for r0 in range(0, rows, P):
            r1 = min(rows, r0 + P)
            mark = nc.mark()
            x = nc.sbuf_tile((r1 - r0, n), x2d.dtype)
            nc.dma.load(x, x2d[r0:r1])
            vals = nc.sbuf_tile((r1 - r0, n), x2d.dtype)
            idx = nc.sbuf_tile((r1 - r0, n), I64)
            nc.gpsimd.sort(vals, idx, x, descending=descending)
            if cpu_ties:
                fixed_v = nc.sbuf_tile(vals.shape, vals.dtype)
                fixed_i = nc.sbuf_tile(idx.shape, I64)
                nc.vector.tensor_copy(fixed_v, vals)
                nc.vector.tensor_copy(fixed_i, idx)
                nc.gpsimd.run("sort_cpu_ties", fix_ties, (fixed_v, fixed_i), (x,), elements=x.data.size,
                              factor=math.log2(max(n, 2)))
                vals, idx = fixed_v, fixed_i
            nc.dma.store(v2d[r0:r1], vals[:, :k])
            nc.dma.store(i2d[r0:r1], idx[:, :k])
            nc.release_to(mark)
        return
    c = math.ceil(n / P)
    q_full, rem = divmod(n, c)
    q = q_full + (rem > 0)
    if c * (2 * x2d.dtype.itemsize + 8) > SORT_SBUF_BYTES:
        raise NotImplementedError(f"sort/topk on neuron: a row of {n} elements does not fit in SBUF (at most "
                                  f"{P * (SORT_SBUF_BYTES // (2 * x2d.dtype.itemsize + 8))} elements of "
                                  f"{x2d.dtype} per sorted row)")
    for r in range(rows):
        mark = nc.mark()
        row = x2d[r]
        x = nc.sbuf_tile((q, c), x2d.dtype)
        nc.dma.load(x[:q_full, :], row[:q_full * c])
        if rem:
            nc.dma.load(x[q_full:q, :rem], row[q_full * c:])
        vals = nc.sbuf_tile((q, c), x2d.dtype)
        idx = nc.sbuf_tile((q, c), I64)

        def program(vo, io, xi):
            flat = xi.reshape(-1)[:n]
            order = _order(flat, descending)
            vo.reshape(-1)[:n] = flat[order]
            io.reshape(-1)[:n] = order
            if cpu_ties:
                fv, fi = vo.reshape(1, -1), io.reshape(1, -1)
                _cpu_tie_order(fv, fi, flat.reshape(1, -1), n, descending, tie_k, unsorted_topk)

        nc.gpsimd.run("sort_row", program, (vals, idx), (x,), elements=n, factor=math.log2(n))
        kq, krem = divmod(k, c)
        for tile, dst in ((vals, v2d[r]), (idx, i2d[r])):
            if kq:
                nc.dma.store(dst[:kq * c], tile[:kq, :])
            if krem:
                nc.dma.store(dst[kq * c:k], tile[kq:kq + 1, :krem])
        nc.release_to(mark)


# Shared with the compiler (device_impl.compiler.steps runs stablehlo.sort with it).
sort_rows = _sort_rows


def _rows_view(v: np.ndarray, dim: int) -> np.ndarray | None:
    moved = np.moveaxis(v, dim, -1)
    return _reshaped(moved, (_prod(moved.shape[:-1]), moved.shape[-1]))


def _sort_into(nc, x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int, descending: bool,
               like: torch.Tensor, **order) -> None:
    xv, vv, iv = _view(x), _view(values), _view(indices)
    n = xv.shape[dim]
    k = vv.shape[dim]
    if vv.size == 0:
        return
    x2d = _rows_view(xv, dim)
    if x2d is None:
        staged = _empty(np.moveaxis(xv, dim, -1).shape, x.dtype, like)
        _copy_into(nc, hbm(staged), np.moveaxis(xv, dim, -1))
        x2d = hbm(staged).reshape(-1, n)
    outs = []
    for o, t in ((vv, values), (iv, indices)):
        o2d = _rows_view(o, dim)
        if o2d is None:
            temp = _empty(np.moveaxis(o, dim, -1).shape, t.dtype, like)
            outs.append((hbm(temp).reshape(-1, k), np.moveaxis(o, dim, -1), temp))
        else:
            outs.append((o2d, None, None))
    _sort_rows(nc, x2d, outs[0][0], outs[1][0], descending, **order)
    for o2d, final, temp in outs:
        if final is not None:
            nc.dma.hbm_copy(final, hbm(temp))


@_native("aten::sort.values_stable", serves=("aten::sort.stable", "aten::sort", "aten::sort.values",
                                              "aten::argsort", "aten::argsort.stable", "aten::msort"))
def _sort_values_stable(a: dict):
    self, values, indices = a["self"], a["values"], a["indices"]
    dim = _wrap_dim(a.get("dim", -1), self.dim())
    descending = bool(a.get("descending", False))
    if values.dtype != self.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {self.dtype}, but got {values.dtype} instead")
    if indices.dtype != torch.int64:
        raise RuntimeError(f"Expected out tensor to have dtype long int, but got {indices.dtype} instead")
    shape = tuple(self.shape)
    for o in (values, indices):
        if tuple(o.shape) != shape:
            resize_output(o, shape)
    # CPU sorts stably when asked, along an expanded dim (indices stay arange), and for long 1-D
    # integer ascending sorts (fbgemm's radix sort); otherwise ties come out in std::sort's order.
    radix = (self.dim() == 1 and not descending and not self.dtype.is_floating_point and self.dtype != torch.bool
             and self.numel() >= 32768)
    stable = bool(a.get("stable")) or radix or self.dim() == 0 or self.stride(dim) == 0
    with launch("sort", self.device.index) as nc:
        _sort_into(nc, self, values, indices, dim, descending, self, stable=stable)
    return values, indices


def _topk_check(self: torch.Tensor, k: int, dim: int) -> int:
    dim = _wrap_dim(dim, self.dim())
    n = self.shape[dim] if self.dim() else 1
    if not 0 <= k <= n:
        raise RuntimeError("selected index k out of range")
    if self.dtype == torch.bool:
        raise RuntimeError("topk does not support bool dtypes on CPU")
    return dim


@_native("aten::topk.values", serves=("aten::topk",))
def _topk_values(a: dict):
    self, values, indices = a["self"], a["values"], a["indices"]
    k = int(a["k"])
    dim = _topk_check(self, k, a.get("dim", -1))
    largest = bool(a.get("largest", True))
    shape = list(self.shape)
    if shape:
        shape[dim] = k
    shape = tuple(shape)
    if values.dtype != self.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {self.dtype}, but got {values.dtype} instead")
    for o in (values, indices):
        if tuple(o.shape) != shape:
            resize_output(o, shape)
    with launch("topk", self.device.index) as nc:
        _sort_into(nc, self, values, indices, dim, largest, self, topk=True, sorted_=bool(a.get("sorted", True)))
    return values, indices


# --- unique ----------------------------------------------------------------------------------

@_native("aten::_unique2")
def _unique2(a: dict):
    """Sorted unique values (CPU sorts for sorted=False too): sort, mark each value that differs from
    its predecessor (NaNs all differ, -0.0 == 0.0), number the groups with a scan, compact the marks."""
    self = a["self"]
    return_inverse, return_counts = bool(a.get("return_inverse")), bool(a.get("return_counts"))
    n = self.numel()
    inverse = _empty(tuple(self.shape) if return_inverse else (0,), torch.int64, self)
    with launch("unique", self.device.index) as nc:
        flat = _reshaped(hbm(self), (n,))
        keep = []
        if flat is None:
            staged = _empty(tuple(self.shape), self.dtype, self)
            keep.append(staged)
            _copy_into(nc, hbm(staged), hbm(self))
            flat = hbm(staged).reshape(n)
        if n == 0:
            return _empty((0,), self.dtype, self), inverse, _empty((0,), torch.int64, self)
        vals_t, perm_t = _empty((n,), self.dtype, self), _empty((n,), torch.int64, self)
        vals, perm = hbm(vals_t), hbm(perm_t)
        _sort_rows(nc, flat.reshape(1, n), vals.reshape(1, n), perm.reshape(1, n), False)
        flags_t = _empty((n,), torch.int64, self)
        flags = hbm(flags_t)
        one = nc.sbuf_tile((1, 1), I64)
        nc.vector.memset(one, 1)
        nc.dma.store(flags[0:1].reshape(1, 1), one)
        for r0, p, f in _row_tiles(n - 1, 2048):
            mark = nc.mark()
            cur = nc.sbuf_tile((p, f), vals.dtype)
            prev = nc.sbuf_tile((p, f), vals.dtype)
            nc.dma.load(cur, vals[r0 + 1:r0 + 1 + p * f])
            nc.dma.load(prev, vals[r0:r0 + p * f])
            differs = nc.sbuf_tile((p, f), I64)
            nc.vector.tensor_tensor(differs, cur, prev, "not_equal")
            nc.dma.store(flags[r0 + 1:r0 + 1 + p * f], differs)
            nc.release_to(mark)
        firsts = _nonzero_into(nc, flags, self)  # [K, 1]: where each group starts
        k = firsts.shape[0]
        out = _empty((k,), self.dtype, self)
        src = _Rows(vals, (k,), (0,), 1, 1, (_Index(hbm(firsts)[:, 0], 1, n, False),))
        _move(nc, _Rows.of(hbm(out), 1, 1, 1), src, k, (k,))
        gid_t = _empty((n,), torch.int64, self)
        gid = hbm(gid_t)
        _scan_into(nc, gid, flags, start=-1)
        if return_inverse:
            inv = hbm(inverse).reshape(n)
            dst = _Rows(inv, (n,), (0,), 1, 1, (_Index(perm, 1, n, False),))
            _move(nc, dst, _Rows.of(gid, 1, 1, 1), n, (n,), "assign", unique=True)
        counts = _empty((k,) if return_counts else (0,), torch.int64, self)
        if return_counts:
            cv = hbm(counts).reshape(k, 1)
            _fill(nc, cv, 0)
            dst = _Rows(cv, (n,), (0,), 1, 1, (_Index(gid, 1, k, False),))
            _move(nc, dst, _Const(nc, 1, I64), n, (n,), "add")
        del keep
    return out, inverse, counts
