"""The indexing family's row machinery: tiles of rows, their offsets, moves and index checks.

Tiling: a tile is ``[p, f]`` rows in row-major order (row = r0 + partition * f + column,
``_row_tiles``), so offset and index tiles load with long contiguous DMA runs. A row's
start address is ``sum_j coord_j(row) * stride_j + sum_k wrap(index_k[row]) * stride_k``:
coordinates in the lead shape from GpSimd ``iota`` and VectorE integer divide/remainder
(``_Coords``), index values DMA'd from HBM or gathered by indirect DMA (``_Index``),
negative indices wrapped on VectorE. ``_move`` then moves ``C`` elements per row by
indirect DMA (``dma.load_rows`` / ``dma.store_rows``): assignment with duplicates resolved
so the last row wins (``_last_wins``), integer sums by DMA compute-on-write, float
combines in row order on GpSimd's cores (``_combine``).

Index ranges are validated before anything is written (``_check_range``: a min/max
reduction read back once), so errors carry CPU's class and the destination is untouched.
``_native`` registers a kernel taking the bound arguments and checks that all tensors sit
on one neuron device.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from device_impl.dispatch.devices import HOST_INDEX_OPS
from device_impl.dispatch.table import TABLE, resolve
from device_impl.engine import Tile
from device_impl.engine.dtypes import COMPUTE_DTYPES, is_float
from device_impl.kernels import cpu_host
from device_impl.kernels.common import flat_tiles
from device_impl.kernels.registry import Binder
from device_impl.kernels.indexing.views import _estrides, _prod, _reshaped, _table

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
            def twice() -> np.ndarray:  # the product rounded to the dtype (c10 half arithmetic) before the add
                return (values.astype(np.float32) * np.asarray(f, dtype=np.float32)).astype(state.dtype)

            if cpu_host.fused_multiply_add():
                once = values.astype(np.float64) * np.asarray(f, dtype=np.float64)
                if state.dtype.itemsize == 2 and is_float(state.dtype):
                    # bf16/fp16 (CPU's add_ of each row): its whole vector blocks round a + alpha * b once, in
                    # float32; the tail takes the scalar lambda, which rounds the product to the dtype first
                    block = cpu_host.vector_block(torch.float16)  # bf16 and fp16 blocks: both 2-byte elements
                    width = values.shape[1]
                    vector = np.arange(width) < width - width % block
                    once = np.where(vector, once, twice().astype(np.float64))
                values = once
            else:  # DEFAULT kernels
                values = twice()
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


# --- registration helpers ----------------------------------------------------------------



def _check_devices(op: str, args: dict) -> None:
    """All tensors on one neuron device (host 0-d scalars anywhere, host indices where CUDA allows them)."""
    device = None
    host = None
    for value in args.values():
        for t in (value if isinstance(value, (list, tuple)) else (value,)):
            if not isinstance(t, torch.Tensor):
                continue
            if t.device.type != "neuron":
                if t.dim() and op not in HOST_INDEX_OPS:
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

            kernel.__module__ = fn.__module__  # the op-group module: TABLE.lookup(op).source names it
            kernel.__name__ = fn.__name__
            TABLE.native(op, dtypes=dtypes)(kernel)
        for op in serves:
            TABLE.serves(op, ops[0])
        return fn

    return register


# --- errors and scans shared by the op groups ---------------------------------------------

def _index_range_error(_value: int) -> IndexError:
    return IndexError("index out of range in self")


def _bounds_error(dim: int, size: int, exc=RuntimeError, prefix: str = ""):
    return lambda v: exc(f"{prefix}index {v} is out of bounds for dimension {dim} with size {size}")


def _self_meta(*names: str):
    def meta(a: dict):
        return tuple(a["self"].shape), a["self"].dtype, tuple(a[n] for n in names if isinstance(a.get(n), torch.Tensor))

    return meta


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
