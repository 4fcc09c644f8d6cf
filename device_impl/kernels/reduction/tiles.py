"""The reduction family's shared tiling: K x R views, boxes, row blocks, streams, registration.

Layout. Every kernel first views its input in HBM as ``K x R``: the kept dimensions ``K`` (one
output element each) and the reduced dimensions ``R``, permuted with numpy strides (no copies)
and coalesced where neighbouring dimensions are contiguous with respect to each other in every
array the kernel touches (``_Grid``). Tiles are then *boxes* of that index space (``_boxes``):
products of slices, so each tile is one strided DMA. K sits on partitions (<= 128 rows per
block), R along the free axis in chunks of ``CHUNK`` elements. Row blocks small enough
(``RESIDENT_BYTES``, double-buffered) stay in SBUF between passes (``_blocks``), so softmax,
var and the norm layers read HBM once; longer rows stream their chunks again per pass, each
load issued ahead of its use (``_stream``) so DMA overlaps compute.

Also here: ``_kernel``, the family's registration (its wrapper takes the kernel's module, so
``TABLE.lookup(op).source`` names the op-group file); the dimension rules (``_dims``,
``_out_shape``); ``_fill`` (a constant into an HBM view, for empty reductions); ``_row_reduce``
(a [p, 1] fp32 reduction of a row block); ``RowKernel``, a launch reading one input block by
block that adaptive eager (device_impl.eager) may feed from the launches producing it
(softmax, log_softmax, layer_norm); and the pieces the normalisation layers share (CPU's
mixed-dtype rule, [p, 1] per-row values from and to HBM, TensorE column sums).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from device_impl.dispatch.table import TABLE, resolve
from device_impl.engine import Tile
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import COMPUTE_DTYPES, SCALAR_TYPE_NAMES, fma32, hbm
from device_impl.kernels.registry import Binder

P = 128
CHUNK = 2048  # free elements per streamed tile
PE_CHUNK = 512  # free elements per TensorE moving tile (one PSUM bank of fp32)
RESIDENT_COLS = 4096  # parameter vectors / accumulators up to this length stay in SBUF for a launch
PARAM_COLS = 8192  # broadcast parameter vectors (layer-norm weights) up to this length are loaded once
RESIDENT_BYTES = 96 * 1024  # per partition: row blocks (double-buffered) this small stay in SBUF across passes
FLAT_MAX_ROWS = 16  # at most this many outputs use the flat tiling ...
FLAT_MIN_COLS = 4096  # ... and only when each reduces at least this many elements
I64 = np.dtype(np.int64)
F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _refuse(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    return NotImplementedError(f'"{kernel}" not implemented for \'{SCALAR_TYPE_NAMES[dtype]}\'')


def _kernel(*ops: str, serves: Sequence[str] = (), dtypes: frozenset = COMPUTE_DTYPES, submits: bool = False):
    """Register ``fn(args)`` (args: the schema's argument names -> values, outs included) for ``ops``;
    ``serves``: overloads PyTorch's composite kernels route to ops[0]. ``submits``: the kernel reads
    no tensor data before handing its launch to ``_reduce(..., queue=True)``, which orders it
    against adaptive eager's queue itself (see dispatch.table.HOOKS)."""

    def register(fn: Callable[[dict], Any]):
        for op in ops:
            binder = Binder.of(resolve(op))

            def kernel(*args: Any, _binder=binder, **kwargs: Any) -> Any:
                return fn(_binder.bind(args, kwargs))

            kernel.__module__ = fn.__module__  # the op-group module: TABLE.lookup(op).source names it
            kernel.__name__ = fn.__name__
            kernel.submits = submits
            TABLE.native(op, dtypes=dtypes)(kernel)
        for op in serves:
            TABLE.serves(op, ops[0])
        return fn

    return register


# --- dimensions -------------------------------------------------------------------

def _wrap(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if dim < -n or dim >= n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def _dims(x: torch.Tensor, dim, empty_is_all: bool = True) -> tuple[int, ...]:
    """The reduced dimensions, sorted; ``None`` (and ``[]`` where PyTorch says so) means all."""
    nd = x.dim()
    if dim is None:
        return tuple(range(nd))
    if isinstance(dim, int):
        dim = [dim]
    dim = list(dim)
    if not dim:
        return tuple(range(nd)) if empty_is_all else ()
    seen: list[int] = []
    for d in dim:
        w = _wrap(d, nd)
        if w in seen:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        seen.append(w)
    return tuple(sorted(seen)) if nd else ()


def _out_shape(x: torch.Tensor, dims: Sequence[int], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if d in dims else n for d, n in enumerate(x.shape))
    return tuple(n for d, n in enumerate(x.shape) if d not in dims)


def _count(x: torch.Tensor, dims: Sequence[int]) -> int:
    return math.prod(x.shape[d] for d in dims)


def _kept_view(out: torch.Tensor | np.ndarray, dims: Sequence[int], ndim: int) -> np.ndarray:
    """HBM view of a reduction output (a tensor, or already its HBM array) with only the kept dimensions
    (keepdim's 1s indexed away)."""
    v = out if isinstance(out, np.ndarray) else hbm(out)
    if v.ndim == ndim and ndim and dims:
        v = v[tuple(0 if d in dims else slice(None) for d in range(ndim)) + (Ellipsis,)]
    return v


def _at(a: np.ndarray, sl: tuple) -> np.ndarray:
    return a[sl + (Ellipsis,)]


def _order_by_stride(x: torch.Tensor, dims: Sequence[int]) -> list[int]:
    strides = x.stride()
    return sorted(dims, key=lambda d: -strides[d])


# --- layout: K x R views, coalescing and boxes --------------------------------------

def _coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], list[tuple]]:
    """Drop size-1 dimensions and merge neighbours that are contiguous in every stride list."""
    new_shape: list[int] = []
    new: list[list[int]] = [[] for _ in strides]
    for i, n in enumerate(shape):
        if n == 1:
            continue
        if new_shape and all(st[-1] == n * s[i] for st, s in zip(new, strides)):
            new_shape[-1] *= n
            for st, s in zip(new, strides):
                st[-1] = s[i]
        else:
            new_shape.append(n)
            for st, s in zip(new, strides):
                st.append(s[i])
    return tuple(new_shape), [tuple(st) for st in new]


class _Grid:
    """Arrays over one K x R index space, coalesced jointly: ``kr`` (shape K + R), ``k`` (shape K) and
    ``r`` (shape R) views."""

    def __init__(self, kshape, rshape, kr: Sequence[np.ndarray] = (), k: Sequence[np.ndarray] = (),
                 r: Sequence[np.ndarray] = ()):
        nk = len(kshape)
        kst = [a.strides[:nk] for a in kr] + [a.strides for a in k]
        rst = [a.strides[nk:] for a in kr] + [a.strides for a in r]
        self.kshape, kst = _coalesce(kshape, kst)
        self.rshape, rst = _coalesce(rshape, rst)
        self.kr = [as_strided(a, self.kshape + self.rshape, ks + rs) for a, ks, rs in zip(kr, kst, rst)]
        self.k = [as_strided(a, self.kshape, ks) for a, ks in zip(k, kst[len(kr):])]
        self.r = [as_strided(a, self.rshape, rs) for a, rs in zip(r, rst[len(kr):])]
        self.rows = math.prod(self.kshape)
        self.cols = math.prod(self.rshape)


def _boxes(shape: Sequence[int], limit: int):
    """Cover shape's row-major index space with boxes of <= limit elements, each a contiguous
    flat range: yields (flat start, element count, tuple of slices)."""
    n = len(shape)
    inner, j = 1, n
    while j > 0 and inner * shape[j - 1] <= limit:
        j -= 1
        inner *= shape[j]
    if j == 0:
        yield 0, inner, tuple(slice(None) for _ in shape)
        return
    d = j - 1
    step = max(1, limit // inner)
    start = 0
    full = (slice(None),) * (n - j)
    for outer in np.ndindex(*shape[:d]):
        head = tuple(slice(i, i + 1) for i in outer)
        for c0 in range(0, shape[d], step):
            c1 = min(shape[d], c0 + step)
            count = (c1 - c0) * inner
            yield start, count, head + (slice(c0, c1),) + full
            start += count


def _flat_pieces(numel: int, free_max: int = CHUNK):
    """[p, f] tiles of consecutive elements covering [0, numel): (start, stop, p, f)."""
    if numel == 0:
        return
    f = min(free_max, math.ceil(numel / P))
    for start in range(0, numel, P * f):
        n = min(P * f, numel - start)
        rows, rest = divmod(n, f)
        if rows:
            yield start, start + rows * f, rows, f
        if rest:
            yield start + rows * f, start + n, 1, rest


def _stream_groups(nc, groups, depth: int = 2):
    """Lists of tiles for ``groups`` (lists of (shape, dtype, issue(tile))), each group's DMAs issued ``depth``
    groups ahead of its use so transfers overlap compute; a group is released when the next one is taken."""
    pending: deque = deque()
    it = iter(groups)

    def issue() -> None:
        group = next(it, None)
        if group is not None:
            tiles = []
            for shape, dtype, fn in group:
                t = nc.sbuf_tile(shape, dtype)
                fn(t)
                tiles.append(t)
            pending.append(tiles)

    for _ in range(depth):
        issue()
    while pending:
        tiles = pending.popleft()
        issue()
        yield tiles
        for t in tiles:
            nc.release(t)


def _stream(nc, loads, depth: int = 2):
    """Tiles for ``loads`` [(shape, dtype, issue(tile))], one at a time (see _stream_groups)."""
    for (t,) in _stream_groups(nc, ([item] for item in loads), depth):
        yield t


def _box_load(nc, src: np.ndarray):
    return lambda t: nc.dma.load(t, src)


def _flat_load(nc, src: np.ndarray, start: int, stop: int):
    return lambda t: nc.dma.load_flat(t, src, start, stop)


# source(nc, tile, rsl, csl): fills ``tile`` with the box (rsl, csl) of a block's first array instead of
# a DMA load. Adaptive eager (device_impl.eager) computes it there from the launches producing it.
Source = Callable[..., None]


class _Block:
    """One row block (p rows of a _Grid's kr arrays): its column chunks, loaded once and kept when
    ``resident`` (see _blocks), otherwise streamed again on every pass."""

    def __init__(self, nc, arrays: Sequence[np.ndarray], rsl: tuple, p: int, chunks: list, resident: bool,
                 source: Source | None = None, row0: int = 0):
        self.nc, self.arrays, self.rsl, self.p, self.chunks = nc, list(arrays), rsl, p, chunks
        self.row0 = row0  # the block's first row in the grid's row-major order of its (coalesced) row dims
        self.resident = resident
        self.source = source
        self.cache: list[list[Tile]] | None = None
        if resident:
            self.cache = [[self._tile(w, ch) for ch in chunks] for w in range(len(self.arrays))]

    def _loader(self, w: int, ch) -> Callable[[Tile], None]:
        if w == 0 and self.source is not None:
            return lambda t: self.source(self.nc, t, self.rsl, ch[2])
        return _box_load(self.nc, _at(self.arrays[w], self.rsl + ch[2]))

    def _tile(self, w: int, ch) -> Tile:
        t = self.nc.sbuf_tile((self.p, ch[1]), self.arrays[w].dtype)
        self._loader(w, ch)(t)
        return t

    def each(self, *which: int):
        """(chunk, [tiles of the arrays ``which``]) for every column chunk."""
        if self.cache is not None:
            for j, ch in enumerate(self.chunks):
                yield ch, [self.cache[w][j] for w in which]
            return
        groups = [[((self.p, ch[1]), self.arrays[w].dtype, self._loader(w, ch)) for w in which]
                  for ch in self.chunks]
        for tiles, ch in zip(_stream_groups(self.nc, groups), self.chunks):  # the stream first: it releases last
            yield ch, tiles

    def store(self, dst: np.ndarray, ch, tile: Tile) -> None:
        self.nc.dma.store(_at(dst, self.rsl + ch[2]), tile)

    def release(self) -> None:
        if self.cache is not None:
            for row in self.cache:
                for t in row:
                    self.nc.release(t)
            self.cache = None


def _blocks(nc, grid: _Grid, arrays: Sequence[np.ndarray], extra: int = 0, source: Source | None = None):
    """Row blocks of ``grid`` over ``arrays`` (kr views). Blocks stay resident when two of them (the one
    computed on and the next, loaded ahead) plus ``extra`` bytes per column of kept scratch fit
    RESIDENT_BYTES per partition; otherwise every pass streams its chunks again. ``source``: see Source."""
    chunks = list(_boxes(grid.rshape, CHUNK))
    row_bytes = grid.cols * sum(a.itemsize for a in arrays)
    resident = bool(arrays) and 2 * row_bytes + grid.cols * extra <= RESIDENT_BYTES
    boxes = list(_boxes(grid.kshape, P))
    ahead: _Block | None = None
    for i, (row0, p, rsl) in enumerate(boxes):
        blk = ahead if ahead is not None else _Block(nc, arrays, rsl, p, chunks, resident, source, row0)
        ahead = None
        if resident and i + 1 < len(boxes):
            row2, p2, rsl2 = boxes[i + 1]
            ahead = _Block(nc, arrays, rsl2, p2, chunks, resident, source, row2)
        yield blk
        blk.release()


def _row_scalar(nc, p: int, dtype=FP32) -> Tile:
    return nc.sbuf_tile((p, 1), dtype)


def _memset(nc, shape, dtype, value) -> Tile:
    t = nc.sbuf_tile(shape, dtype)
    nc.vector.memset(t, value)
    return t


def _broadcast_row(nc, src: np.ndarray, f: int, dtype=None, rows: int = P) -> Tile:
    """A [rows, f] tile holding the 1-D HBM vector ``src`` (f elements) on every partition."""
    row = nc.sbuf_tile((1, f), src.dtype)
    nc.dma.load(row, src)
    cast = row
    if dtype is not None and np.dtype(dtype) != src.dtype:
        cast = nc.sbuf_tile((1, f), dtype)
        nc.vector.tensor_copy(cast, row)
    full = nc.sbuf_tile((rows, f), cast.dtype)
    nc.gpsimd.partition_broadcast(full, cast)
    nc.release(row)
    if cast is not row:
        nc.release(cast)
    return full


def _identity(op: str, dtype: np.dtype):
    if op == "add" or op == "logical_or":
        return False if dtype == BOOL else 0
    if op == "multiply" or op == "logical_and":
        return True if dtype == BOOL else 1
    if dtype == BOOL:
        return op == "minimum"
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if op == "maximum" else info.max
    return -np.inf if op == "maximum" else np.inf


def _fill(nc, view: np.ndarray, value, dtype=None) -> None:
    """Write ``value`` (cast to the view's dtype on VectorE) to every element of ``view``."""
    for start, stop, p, f in _flat_pieces(view.size):
        mark = nc.mark()
        src = _memset(nc, (p, f), dtype or view.dtype, value)
        if src.dtype != view.dtype:
            cast = nc.sbuf_tile((p, f), view.dtype)
            nc.vector.tensor_copy(cast, src)
            src = cast
        nc.dma.store_flat(view, start, stop, src)
        nc.release_to(mark)


# --- partials, row reductions of a block, row kernels ---------------------------------------------

def _combine(nc, acc: Tile, part: Tile, op: str, cd) -> None:
    nc.vector.tensor_tensor(acc, acc, part, op, dtype=cd)


def _row_reduce(nc, blk: _Block, which: int, op: str, pre: Callable | None = None) -> Tile:
    """[p, 1] fp32 reduction of array ``which`` of the block (optionally of pre(tile))."""
    acc = _row_scalar(nc, blk.p)
    for j, (_, (t,)) in enumerate(blk.each(which)):
        mark = nc.mark()
        src = pre(t) if pre is not None else t
        if j == 0:
            nc.vector.tensor_reduce(acc, src, op, dtype=FP32)
        else:
            part = _row_scalar(nc, blk.p)
            nc.vector.tensor_reduce(part, src, op, dtype=FP32)
            _combine(nc, acc, part, op, FP32)
        nc.release_to(mark)
    return acc


class RowKernel(NamedTuple):
    """A launch reading one input ``x`` through ``_blocks`` row block by row block (softmax,
    log_softmax, layer_norm): ``launch(kernel, source)`` runs it. Adaptive eager (device_impl.eager)
    queues it and, through ``source``, computes its input tiles from the launches producing ``x``.
    ``axis``: the kernel reduces x's dimensions from ``axis`` on (None: some other layout);
    ``inputs``: other tensors it reads (weights; None where absent)."""

    name: str
    x: torch.Tensor
    outs: tuple
    axis: int | None
    params: tuple
    launch: Callable[..., None]
    inputs: tuple = ()

    def run(self, source: Source | None = None) -> None:
        self.launch(self, source)

    def shape(self) -> tuple[int, int] | None:
        """(rows, cols) when x and the outputs are contiguous (the first shaped as x), so the kernel's
        grid coalesces to [rows] x [cols] and its boxes are boxes of x viewed so; else None."""
        x, axis = self.x, self.axis
        if axis is None or x.dim() == 0 or not x.is_contiguous():
            return None
        if self.outs[0].shape != x.shape or any(not o.is_contiguous() for o in self.outs):
            return None
        cols = math.prod(x.shape[axis:])
        rows = x.numel() // cols if cols else 0
        return (rows, cols) if rows >= 2 and cols >= 2 else None


class _QueuedRowKernel:
    """What a row kernel hands adaptive eager: callable as a family compute, ``plan`` the RowKernel."""

    __slots__ = ("kernel",)

    def __init__(self, kernel: RowKernel):
        self.kernel = kernel

    def __call__(self, out: torch.Tensor, args: dict) -> None:
        self.kernel.run()

    def plan(self, out: torch.Tensor, args: dict) -> RowKernel:
        return self.kernel


# --- normalisation layers: shared pieces ------------------------------------------------------------

_REDUCED = (torch.bfloat16, torch.float16)


def _stats_dtype(x: torch.Tensor, *params: torch.Tensor | None) -> torch.dtype:
    """CPU's mixed-type rule: a bf16/fp16 input with fp32 parameters keeps its statistics in fp32."""
    if x.dtype in _REDUCED and any(p is not None and p.dtype == torch.float32 for p in params):
        return torch.float32
    return x.dtype


def _check_mixed(x: torch.Tensor, *params: torch.Tensor | None) -> None:
    if x.dtype in _REDUCED:
        given = [p for p in params if p is not None]
        if any(p.dtype == torch.float32 for p in given) and any(p.dtype != torch.float32 for p in given):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
    for p in params:
        if p is not None and p.dtype != x.dtype and not (x.dtype in _REDUCED and p.dtype == torch.float32):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")


def _load_scalars(nc, view: np.ndarray, p: int) -> Tile:
    """A [p, 1] fp32 tile of p per-row values from HBM (cast on VectorE when stored narrower)."""
    t = nc.sbuf_tile((p, 1), view.dtype)
    nc.dma.load(t, view)
    if t.dtype != FP32:
        c = nc.sbuf_tile((p, 1), FP32)
        nc.vector.tensor_copy(c, t)
        nc.release(t)
        t = c
    return t


def _store_scalars(nc, view: np.ndarray, t: Tile) -> None:
    if t.dtype != view.dtype:
        c = nc.sbuf_tile(t.shape, view.dtype)
        nc.vector.tensor_copy(c, t)
        nc.dma.store(view, c)
        nc.release(c)
    else:
        nc.dma.store(view, t)


def _colsum_into(nc, acc: Tile, c0: int, src: Tile, ones: Tile) -> None:
    """acc[0, c0:c0+f] += column sums of src[p, f] (TensorE against a ones vector, 512 columns a bank)."""
    p, f = src.shape
    for k0 in range(0, f, PE_CHUNK):
        k1 = min(f, k0 + PE_CHUNK)
        bank = nc.psum_tile((1, k1 - k0), FP32)
        nc.tensor.matmul(bank, ones[:p], src[:, k0:k1])
        nc.vector.tensor_tensor(acc[:, c0 + k0:c0 + k1], acc[:, c0 + k0:c0 + k1], bank, "add", dtype=FP32)
        nc.release(bank)


def _ones(nc, dtype=FP32) -> Tile:
    return _memset(nc, (P, 1), dtype, 1.0)


def _store_row(nc, view: np.ndarray, acc: Tile) -> None:
    """A [1, n] fp32 accumulator into an HBM vector over R (cast to its dtype)."""
    res = nc.sbuf_tile(acc.shape, view.dtype)
    nc.vector.tensor_copy(res, acc)
    nc.dma.store(view, res)
    nc.release(res)


_FMA_STEPS = 4  # GpSimd element-steps per emulated fma (as elementwise.loop._FMA_STEPS)


def _affine_rows(nc, out: Tile, t: Tile, scale: Tile, shift: Tile, fused: bool, name: str) -> None:
    """out = t * scale + shift with a [p, 1] scale and shift per row: rounded once, on GpSimd (program ``name``),
    where CPU's kernels fuse the multiply-add (``fused``: ``cpu_host.fused_multiply_add``), so a product beyond
    float's range still gives the shift's infinity, not inf - inf; else ScalarE's scale-and-bias, the product
    rounded first (the DEFAULT kernels)."""
    if not fused:
        nc.scalar.activation(out, t, "identity", scale=scale, bias=shift)
        return

    def program(o, x, a, c):
        o[...] = fma32(x, np.broadcast_to(a, x.shape), np.broadcast_to(c, x.shape))

    nc.gpsimd.run(name, program, (out,), (t, scale, shift), elements=t.data.size, factor=_FMA_STEPS)


def _store_affine(nc, blk: "_Block", O, dtype, scale: Tile, shift: Tile, fused: bool, name: str) -> None:
    """O = x * scale + shift per row (``_affine_rows``) for each chunk of the block, stored in ``dtype``."""
    for ch, (t,) in blk.each(0):
        res = nc.sbuf_tile(t.shape, dtype)
        _affine_rows(nc, res, t, scale, shift, fused, name)
        blk.store(O, ch, res)
        nc.release(res)


_STATS64_STEPS = 3  # GpSimd element-steps per element of a double-accumulated statistic


def _row_sum64(nc, blk: _Block, term: Callable, name: str, about: Tile | None = None) -> Tile:
    """[p, 1] double sum over the block's rows of term(x[, about]) (a numpy function of a chunk and of the
    [p, 1] tile ``about``), on GpSimd."""
    acc = nc.sbuf_tile((blk.p, 1), F64)
    extra = (about,) if about is not None else ()
    for j, (_, (t,)) in enumerate(blk.each(0)):
        def program(o, x, *rest):
            with np.errstate(all="ignore"):
                part = term(x, *rest[:len(extra)]).sum(axis=1, keepdims=True, dtype=np.float64)
                o[...] = rest[-1] + part if j else part
        nc.gpsimd.run(name, program, (acc,), (t,) + extra + ((acc,) if j else ()), elements=t.data.size,
                      factor=_STATS64_STEPS)
    return acc
