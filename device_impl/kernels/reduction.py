"""Reductions, scans, softmax, normalisation layers and losses.

Layout. Every kernel first views its input in HBM as ``K x R``: the kept
dimensions ``K`` (one output element each) and the reduced dimensions ``R``,
permuted with numpy strides (no copies) and coalesced where neighbouring
dimensions are contiguous with respect to each other in every array the
kernel touches. Tiles are then *boxes* of that index space (``_boxes``):
products of slices, so each tile is one strided DMA. Three tilings:

* ``rows`` (the default): K on partitions (<= 128 rows per tile), R along the
  free axis in chunks of ``CHUNK`` elements; per-partition reductions on
  VectorE / ScalarE (``activation(..., accumulate=)`` fuses the elementwise
  part with the row sum), partials combined across chunks. Row blocks small
  enough (``RESIDENT_BYTES``, double-buffered) stay in SBUF between passes, so
  softmax, var and the norm layers read HBM once; longer rows stream their
  chunks again per pass (softmax then uses a running max / rescaled sum, so
  it needs two passes, not three).
* ``columns`` (a kept dimension is the innermost in memory, e.g. ``x.sum(0)``):
  R on partitions, K along the free axis, reduced across partitions with a
  TensorE matmul against a ones vector (float sums, fp32 PSUM accumulation)
  or GpSimdE partition reductions (max/min/prod/any/all, integers).
* ``flat`` (few output elements, long reductions, e.g. a full ``x.sum()``): each
  output's elements as flat ``[128, F]`` tiles, per-partition partials, one
  cross-partition reduction at the end.

Numerics follow CPU eager: floats accumulate in fp32 and round once into the
output; integer sums/products accumulate in int64 (wrapping as CPU);
max/min/argmax propagate NaN (argmax: first occurrence, first NaN); softmax,
log_softmax and logsumexp subtract the row maximum; var/std are two-pass.

Losses: nll_loss picks x[n, target[n]] by indirect DMA (``load_rows`` on a
flat view of the input) and its backward zero-fills and scatters
(``store_rows``); layouts that a flat view cannot describe compare a class
iota against the targets instead. Targets are bounds-checked on the engines
and raise IndexError as CPU does.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from device_impl._compat import torch_at_least
from device_impl.dispatch.table import HOOKS, TABLE, resolve
from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32, is_float, numpy_dtype

F64 = np.dtype(np.float64)
from device_impl.kernels import cpu_host
from device_impl.kernels.common import (
    COMPUTE_DTYPES,
    SCALAR_TYPE_NAMES,
    check_out,
    fma32,
    hbm,
    new_output,
    scalar_of,
)
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


def _kept_view(out: torch.Tensor, dims: Sequence[int], ndim: int) -> np.ndarray:
    """HBM view of a reduction output with only the kept dimensions (keepdim's 1s indexed away)."""
    v = hbm(out)
    if out.dim() == ndim and ndim and dims:
        v = v[tuple(0 if d in dims else slice(None) for d in range(ndim)) + (Ellipsis,)]
    return v


def _at(a: np.ndarray, sl: tuple) -> np.ndarray:
    return a[sl + (Ellipsis,)]


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
                 source: Source | None = None):
        self.nc, self.arrays, self.rsl, self.p, self.chunks = nc, list(arrays), rsl, p, chunks
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
    for i, (_, p, rsl) in enumerate(boxes):
        blk = ahead if ahead is not None else _Block(nc, arrays, rsl, p, chunks, resident, source)
        ahead = None
        if resident and i + 1 < len(boxes):
            _, p2, rsl2 = boxes[i + 1]
            ahead = _Block(nc, arrays, rsl2, p2, chunks, resident, source)
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


# --- simple reductions: sum, mean, prod, amax, amin, any, all, norms ---------------------

class _Spec:
    """What a one-pass reduction computes per element, how it combines, and how it finishes."""

    def __init__(self, op: str, cd: np.dtype, elem: np.dtype | None = None, pre: Any = None,
                 post: Callable | None = None, empty: Any = None):
        self.op = op  # VectorE/GpSimdE reduce op
        self.cd = np.dtype(cd)  # accumulation dtype
        self.elem = elem  # cast input elements to this dtype first (sum(dtype=...))
        self.pre = pre  # None | 'abs' | 'square' | 'ne0' | ('pow', p) | 'nonzero'
        self.post = post  # post(nc, out_tile, acc_tile): finish into the output dtype
        self.identity = _identity(op, self.cd)
        self.empty = self.identity if empty is None else empty  # value of an empty reduction

    @property
    def fused(self) -> bool:  # ScalarE computes the elementwise part and the row sum in one pass
        return self.op == "add" and self.pre in ("abs", "square")

    def transformed(self, dtype: np.dtype) -> np.dtype:
        """The dtype of transform()'s result for an input tile of ``dtype``."""
        if self.pre in ("ne0",):
            return BOOL
        if self.pre is not None:
            return FP32
        return self.elem if self.elem is not None else dtype

    def transform(self, nc, t: Tile) -> Tile:
        """The elements the reduction combines (t itself when nothing is to be done)."""
        if self.elem is not None and t.dtype != self.elem:
            cast = nc.sbuf_tile(t.shape, self.elem)
            nc.vector.tensor_copy(cast, t)
            t = cast
        pre = self.pre
        if pre is None:
            return t
        if pre == "ne0" or pre == "nonzero":
            out = nc.sbuf_tile(t.shape, BOOL if pre == "ne0" else FP32)
            nc.vector.tensor_scalar(out, t, "not_equal", 0)
            return out
        out = nc.sbuf_tile(t.shape, FP32)
        if pre == "abs":
            nc.vector.tensor_unary(out, t, "abs", dtype=FP32)
        elif pre == "square":
            nc.vector.tensor_tensor(out, t, t, "multiply", dtype=FP32)
        else:  # ('pow', p): |x|^p
            nc.vector.tensor_unary(out, t, "abs", dtype=FP32)
            nc.vector.tensor_scalar(out, out, "power", float(pre[1]), dtype=FP32)
        return out

    def partial(self, nc, t: Tile, dst: Tile) -> None:
        """dst[p, 1] = reduction of the tile's rows."""
        mark = nc.mark()
        if self.fused and (self.elem is None or self.elem == t.dtype):
            scratch = nc.sbuf_tile(t.shape, FP32)
            nc.scalar.activation(scratch, t, self.pre, accumulate=dst)
        else:
            nc.vector.tensor_reduce(dst, self.transform(nc, t), self.op, dtype=self.cd)
        nc.release_to(mark)

    def finish(self, nc, out: Tile, acc: Tile) -> None:
        if self.post is not None:
            self.post(nc, out, acc)
        else:
            nc.vector.tensor_copy(out, acc)


def _combine(nc, acc: Tile, part: Tile, op: str, cd) -> None:
    nc.vector.tensor_tensor(acc, acc, part, op, dtype=cd)


def _innermost(x: torch.Tensor) -> int | None:
    best = None
    for d, (n, s) in enumerate(zip(x.shape, x.stride())):
        if n > 1 and (best is None or s < x.stride()[best]):
            best = d
    return best


def _order_by_stride(x: torch.Tensor, dims: Sequence[int]) -> list[int]:
    strides = x.stride()
    return sorted(dims, key=lambda d: -strides[d])


def _reduce(name: str, x: torch.Tensor, out: torch.Tensor, dims: tuple[int, ...], spec: _Spec,
            queue: bool = False) -> None:
    """out (any layout, keepdim or not) = the reduction of x over ``dims``. ``queue``: the caller
    launches nothing else, so adaptive eager may queue this launch (and fuse it into its producers)."""
    if out.numel() == 0:
        return
    if queue and HOOKS.submit is not None:
        HOOKS.submit(f"aten::{name}", _QueuedReduction(name, x, dims, spec), out, {"self": x})
        return
    with launch(name, out.device.index) as nc:
        _reduce_in(nc, x, out, dims, spec)


def _reduce_in(nc, x: torch.Tensor, out: torch.Tensor, dims: tuple[int, ...], spec: _Spec) -> None:
    nd = x.dim()
    ov = _kept_view(out, dims, nd)
    if _count(x, dims) == 0:
        _fill_spec(nc, ov, spec)
        return
    kdims = [d for d in range(nd) if d not in dims]
    inner = _innermost(x)
    rows = math.prod(x.shape[d] for d in kdims)
    xv = hbm(x)
    rord = _order_by_stride(x, dims)
    if inner is not None and inner in kdims and rows > FLAT_MAX_ROWS:
        kord = _order_by_stride(x, kdims)
        ov_perm = ov.transpose([kdims.index(d) for d in kord])
        g = _Grid([x.shape[d] for d in rord], [x.shape[d] for d in kord], kr=[xv.transpose(rord + kord)],
                  r=[ov_perm])
        _reduce_columns(nc, g, spec)
        return
    g = _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in rord], kr=[xv.transpose(kdims + rord)], k=[ov])
    if _use_flat(g):
        _reduce_flat(nc, g, spec)
    else:
        _reduce_rows(nc, g, spec)


def _use_flat(g: _Grid) -> bool:
    return g.rows == 1 or (g.rows <= FLAT_MAX_ROWS and g.cols >= FLAT_MIN_COLS)


def _fill_spec(nc, ov: np.ndarray, spec: _Spec) -> None:
    """An empty reduction: the identity (finished: mean gives nan) in every output element."""
    for start, stop, p, f in _flat_pieces(ov.size):
        mark = nc.mark()
        acc = _memset(nc, (p, f), spec.cd, spec.empty)
        res = nc.sbuf_tile((p, f), ov.dtype)
        spec.finish(nc, res, acc)
        nc.dma.store_flat(ov, start, stop, res)
        nc.release_to(mark)


def _reduce_rows(nc, g: _Grid, spec: _Spec) -> None:
    X, O = g.kr[0], g.k[0]
    chunks = list(_boxes(g.rshape, CHUNK))
    blocks = list(_boxes(g.kshape, P))
    loads = [((p, f), X.dtype, _box_load(nc, _at(X, rsl + csl))) for _, p, rsl in blocks for _, f, csl in chunks]
    tiles = _stream(nc, loads)
    for _, p, rsl in blocks:
        acc = _row_scalar(nc, p, spec.cd)
        for j in range(len(chunks)):
            row_accumulate(nc, spec, acc, next(tiles), j)
        res = row_finish(nc, spec, acc, O.dtype)
        nc.dma.store(_at(O, rsl), res)
        nc.release(res)
        nc.release(acc)
    for _ in tiles:  # release the last tile
        pass


def row_accumulate(nc, spec: _Spec, acc: Tile, t: Tile, j: int) -> None:
    """Fold column chunk ``j`` ([p, f] tile ``t``) of a row block into the block's acc[p, 1]."""
    if j == 0:
        spec.partial(nc, t, acc)
        return
    part = _row_scalar(nc, t.partitions, spec.cd)
    spec.partial(nc, t, part)
    _combine(nc, acc, part, spec.op, spec.cd)
    nc.release(part)


def row_finish(nc, spec: _Spec, acc: Tile, dtype) -> Tile:
    """The row block's [p, 1] result in the output dtype (the caller stores and releases it)."""
    res = _row_scalar(nc, acc.partitions, dtype)
    spec.finish(nc, res, acc)
    return res


class RowReduction(NamedTuple):
    """A reduction over the last dimension of a contiguous input, as ``_reduce_rows`` tiles it:
    ``rows`` outputs of ``cols`` elements, blocks of 128 rows, column chunks of CHUNK, each chunk
    folded by ``row_accumulate`` and each block finished by ``row_finish``. Adaptive eager
    (device_impl.eager) runs the same calls on the tiles of the launches producing ``x``, so a
    fused reduction computes exactly what this kernel computes from HBM."""

    name: str
    x: torch.Tensor
    out: torch.Tensor
    spec: _Spec
    rows: int
    cols: int

    def row_blocks(self) -> list[tuple[int, int]]:
        return [(r0, min(self.rows, r0 + P)) for r0 in range(0, self.rows, P)]

    def column_chunks(self) -> list[tuple[int, int]]:
        return [(c0, min(self.cols, c0 + CHUNK)) for c0 in range(0, self.cols, CHUNK)]

    def out_rows(self) -> np.ndarray:
        """out's HBM view as [rows] (row_reduction checked that it is one)."""
        return _flat_view(_kept_view(self.out, (self.x.dim() - 1,), self.x.dim()), (self.rows,))

    def run_alone(self) -> None:
        """The launch ``_reduce`` makes for it, reading x from HBM."""
        _reduce(self.name, self.x, self.out, (self.x.dim() - 1,), self.spec)


def _flat_view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """``a`` reshaped to ``shape`` without copying, or None where strides do not allow it."""
    view = a.view()
    try:
        view.shape = shape
    except AttributeError:
        return None
    return view


def row_reduction(name: str, x: torch.Tensor, out: torch.Tensor, dims: tuple[int, ...], spec: _Spec
                  ) -> RowReduction | None:
    """The RowReduction ``_reduce`` would run, or None when it would tile otherwise (columns, flat,
    empty) or out's kept elements are not one strided run."""
    nd = x.dim()
    if nd == 0 or dims != (nd - 1,) or not x.is_contiguous() or out.numel() == 0:
        return None
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    if cols < 2 or rows < 2 or (rows <= FLAT_MAX_ROWS and cols >= FLAT_MIN_COLS):
        return None
    if _flat_view(_kept_view(out, dims, nd), (rows,)) is None:
        return None
    return RowReduction(name, x, out, spec, rows, cols)


class _QueuedReduction:
    """What ``_reduce`` hands adaptive eager: callable as a family compute (``(out, args)``), and
    ``plan`` says whether the launch is a RowReduction it can fuse."""

    __slots__ = ("name", "x", "dims", "spec")

    def __init__(self, name: str, x: torch.Tensor, dims: tuple[int, ...], spec: _Spec):
        self.name, self.x, self.dims, self.spec = name, x, dims, spec

    def __call__(self, out: torch.Tensor, args: dict) -> None:
        _reduce(self.name, self.x, out, self.dims, self.spec)

    def plan(self, out: torch.Tensor, args: dict) -> RowReduction | None:
        return row_reduction(self.name, self.x, out, self.dims, self.spec)


def _flat_partials(nc, xr: np.ndarray, acc: Tile, partial: Callable, op: str, cd, tiles=None) -> None:
    """acc[128, 1] (op)= per-partition partials of xr's elements in flat [p, f] tiles."""
    pieces = list(_flat_pieces(xr.size))
    if tiles is None:
        source = _stream(nc, [((p, f), xr.dtype, _flat_load(nc, xr, a, b)) for a, b, p, f in pieces])
    else:
        source = iter(tiles)
    for (a, b, p, f), t in zip(pieces, source):
        part = _row_scalar(nc, p, cd)
        partial(nc, t, part)
        _combine(nc, acc[:p], part, op, cd)
        nc.release(part)
    for _ in source:
        pass


def _reduce_flat(nc, g: _Grid, spec: _Spec) -> None:
    X, O = g.kr[0], g.k[0]
    for r in np.ndindex(*g.kshape):
        sl = tuple(slice(i, i + 1) for i in r)
        acc = _memset(nc, (P, 1), spec.cd, spec.identity)
        _flat_partials(nc, _at(X, sl), acc, spec.partial, spec.op, spec.cd)
        total = nc.sbuf_tile((1, 1), spec.cd)
        nc.gpsimd.partition_reduce(total, acc, spec.op, dtype=spec.cd)
        res = nc.sbuf_tile((1, 1), O.dtype)
        spec.finish(nc, res, total)
        nc.dma.store(_at(O, sl), res)
        for t in (res, total, acc):
            nc.release(t)


def _reduce_columns(nc, g: _Grid, spec: _Spec) -> None:
    """R on partitions (the grid's K), kept dims along the free axis (the grid's R): cross-partition
    sums on TensorE against a ones vector, other reductions on GpSimdE."""
    X, O = g.kr[0], g.r[0]
    use_pe = spec.op == "add" and spec.cd == FP32 and is_float(spec.transformed(X.dtype))
    rblocks = list(_boxes(g.kshape, P))
    kboxes = list(_boxes(g.rshape, PE_CHUNK if use_pe else CHUNK))
    loads = [((p, f), X.dtype, _box_load(nc, _at(X, rsl + ksl))) for _, f, ksl in kboxes for _, p, rsl in rblocks]
    ones = _memset(nc, (P, 1), spec.transformed(X.dtype), 1) if use_pe else None
    tiles = _stream(nc, loads)
    for _, f, ksl in kboxes:
        acc = nc.psum_tile((1, f), FP32) if use_pe else nc.sbuf_tile((1, f), spec.cd)
        for j in range(len(rblocks)):
            t = next(tiles)
            mark = nc.mark()
            src = spec.transform(nc, t)
            if use_pe:
                nc.tensor.matmul(acc, ones[:t.partitions], src, accumulate=j > 0)
            elif j == 0:
                nc.gpsimd.partition_reduce(acc, src, spec.op, dtype=spec.cd)
            else:
                part = nc.sbuf_tile((1, f), spec.cd)
                nc.gpsimd.partition_reduce(part, src, spec.op, dtype=spec.cd)
                _combine(nc, acc, part, spec.op, spec.cd)
            nc.release_to(mark)
        res = nc.sbuf_tile((1, f), O.dtype)
        spec.finish(nc, res, acc)
        nc.dma.store(_at(O, ksl), res)
        nc.release(res)
        nc.release(acc)
    for _ in tiles:
        pass


def _post_divide(n: int):
    def post(nc, out: Tile, acc: Tile) -> None:
        nc.vector.tensor_scalar(out, acc, "divide", float(n), dtype=FP32)

    return post


def _post_activation(func: str):
    def post(nc, out: Tile, acc: Tile) -> None:
        nc.scalar.activation(out, acc, func)

    return post


def _post_power(e: float):
    def post(nc, out: Tile, acc: Tile) -> None:
        nc.vector.tensor_scalar(out, acc, "power", e, dtype=FP32)

    return post


def _elem_for(x: torch.Tensor, rdtype: torch.dtype) -> np.dtype | None:
    """Cast elements to the result dtype first (as CPU does) unless the cast is exact anyway."""
    if x.dtype == rdtype:
        return None
    if rdtype.is_floating_point:
        if x.dtype in _FLOATS and rdtype == torch.float32:
            return None
        return numpy_dtype(rdtype)
    if rdtype == torch.bool or x.dtype.is_floating_point:
        return numpy_dtype(rdtype)
    return None  # integer -> integer: the wrapped sum is the same either way


def _sum_like_spec(op: str, x: torch.Tensor, rdtype: torch.dtype) -> _Spec:
    cd = FP32 if rdtype.is_floating_point else I64
    return _Spec(op, cd, elem=_elem_for(x, rdtype))


def _integral_default(x: torch.Tensor, dtype, out) -> torch.dtype:
    if dtype is not None:
        return dtype
    if out is not None:
        return out.dtype
    return x.dtype if x.dtype.is_floating_point else torch.int64


def _sum_prod(name: str, op: str, a: dict, dims: tuple[int, ...], out: torch.Tensor | None,
              queue: bool = False) -> torch.Tensor:
    x, dtype, keepdim = a["self"], a.get("dtype"), bool(a.get("keepdim", False))
    rdtype = _integral_default(x, dtype, out)
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, rdtype, x)
    else:
        check_out(out, shape, rdtype, [x], exact_dtype=dtype is not None)
    _reduce(name, x, out, dims, _sum_like_spec(op, x, out.dtype), queue=queue)
    return out


@_kernel("aten::sum.IntList_out", serves=("aten::sum.dim_IntList", "aten::sum", "aten::sum.out"), submits=True)
def _sum_out(a: dict) -> torch.Tensor:
    return _sum_prod("sum", "add", a, _dims(a["self"], a["dim"]), a["out"], queue=True)


@_kernel("aten::prod.int_out", serves=("aten::prod.dim_int",))
def _prod_out(a: dict) -> torch.Tensor:
    return _sum_prod("prod", "multiply", a, _dims(a["self"], a["dim"]), a["out"])


@_kernel("aten::prod")
def _prod_full(a: dict) -> torch.Tensor:
    return _sum_prod("prod", "multiply", a, _dims(a["self"], None), None)


@_kernel("aten::prod.out")
def _prod_full_out(a: dict) -> torch.Tensor:
    return _sum_prod("prod", "multiply", a, _dims(a["self"], None), a["out"])


def _mean_dtype(x: torch.Tensor, dtype) -> torch.dtype:
    if dtype is not None:
        if not dtype.is_floating_point:
            raise RuntimeError(f"mean(): could not infer output dtype. Optional dtype must be either a floating "
                               f"point or complex dtype. Got: {SCALAR_TYPE_NAMES[dtype]}")
        return dtype
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {SCALAR_TYPE_NAMES[x.dtype]}")
    return x.dtype


def _mean(a: dict, dims: tuple[int, ...], out: torch.Tensor | None) -> torch.Tensor:
    x, dtype, keepdim = a["self"], a.get("dtype"), bool(a.get("keepdim", False))
    rdtype = _mean_dtype(x, dtype)
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, rdtype, x)
    else:
        check_out(out, shape, rdtype, [x], exact_dtype=dtype is not None)
    n = _count(x, dims)
    elem = None if x.dtype in _FLOATS else FP32
    _reduce("mean", x, out, dims, _Spec("add", FP32, elem=elem, post=_post_divide(n), empty=np.nan), queue=True)
    return out


@_kernel("aten::mean.out", serves=("aten::mean.dim", "aten::mean"), submits=True)
def _mean_out(a: dict) -> torch.Tensor:
    return _mean(a, _dims(a["self"], a["dim"]), a["out"])


@_kernel("aten::mean.dtype_out", submits=True)
def _mean_dtype_out(a: dict) -> torch.Tensor:
    return _mean(a, _dims(a["self"], None), a["out"])


def _check_nonempty(name: str, x: torch.Tensor, dims: Sequence[int], explicit: bool,
                    full_error: type = RuntimeError) -> None:
    """CPU's zero_numel_check_dims: reductions without an identity refuse empty reduced dims."""
    if not explicit:
        if x.numel() == 0:
            raise full_error(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify "
                             f"the reduction dim with the 'dim' argument.")
        return
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _value_cd(dtype: torch.dtype) -> np.dtype:
    return FP32 if dtype.is_floating_point else numpy_dtype(dtype)


def _amax_amin(name: str, op: str, a: dict) -> torch.Tensor:
    x, keepdim, out = a["self"], bool(a.get("keepdim", False)), a.get("out")
    dim = a.get("dim")
    dims = _dims(x, dim)
    _check_nonempty(name, x, dims, explicit=bool(dim) and x.dim() > 0)
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, x.dtype, x)
    else:
        if out.dtype != x.dtype:
            raise RuntimeError(f"Expected the dtype for input and out to match, but got "
                               f"{SCALAR_TYPE_NAMES[x.dtype]} for input's dtype and {SCALAR_TYPE_NAMES[out.dtype]} "
                               f"for out's dtype.")
        check_out(out, shape, x.dtype, [x])
    _reduce(name, x, out, dims, _Spec(op, _value_cd(x.dtype)), queue=True)
    return out


@_kernel("aten::amax.out", serves=("aten::amax",), submits=True)
def _amax_out(a: dict) -> torch.Tensor:
    return _amax_amin("amax", "maximum", a)


@_kernel("aten::amin.out", serves=("aten::amin",), submits=True)
def _amin_out(a: dict) -> torch.Tensor:
    return _amax_amin("amin", "minimum", a)


def _max_min_full(name: str, op: str, a: dict) -> torch.Tensor:
    x, out = a["self"], a.get("out")
    if x.numel() == 0:
        raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
                           f"reduction dim with the 'dim' argument.")
    if out is None:
        out = new_output((), x.dtype, x)
    else:
        check_out(out, (), x.dtype, [x])
    _reduce(name, x, out, _dims(x, None), _Spec(op, _value_cd(x.dtype)))
    return out


@_kernel("aten::max")
def _max_full(a: dict) -> torch.Tensor:
    return _max_min_full("max", "maximum", a)


@_kernel("aten::max.unary_out")
def _max_full_out(a: dict) -> torch.Tensor:
    return _max_min_full("max", "maximum", a)


@_kernel("aten::min")
def _min_full(a: dict) -> torch.Tensor:
    return _max_min_full("min", "minimum", a)


@_kernel("aten::min.unary_out")
def _min_full_out(a: dict) -> torch.Tensor:
    return _max_min_full("min", "minimum", a)


def _any_all(name: str, op: str, a: dict, dims: tuple[int, ...]) -> torch.Tensor:
    x, keepdim, out = a["self"], bool(a.get("keepdim", False)), a.get("out")
    rdtype = torch.uint8 if x.dtype == torch.uint8 else torch.bool
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, rdtype, x)
    else:
        if out.dtype not in (torch.bool, torch.uint8):
            raise RuntimeError(f"{name} only supports bool tensor for result, got: {SCALAR_TYPE_NAMES[out.dtype]}")
        check_out(out, shape, out.dtype, [x])
    # CPU converts the input to the result dtype first: a float input into a uint8 result truncates
    elem = numpy_dtype(torch.uint8) if out.dtype == torch.uint8 and x.dtype != torch.uint8 else None
    _reduce(name, x, out, dims, _Spec(op, BOOL, elem=elem, pre="ne0"))
    return out


for _name, _op in (("any", "logical_or"), ("all", "logical_and")):
    def _make(name: str, op: str):
        def full(a: dict) -> torch.Tensor:
            return _any_all(name, op, a, _dims(a["self"], None))

        def one(a: dict) -> torch.Tensor:
            return _any_all(name, op, a, _dims(a["self"], a["dim"]))

        def many(a: dict) -> torch.Tensor:
            return _any_all(name, op, a, _dims(a["self"], a.get("dim"), empty_is_all=False))

        _kernel(f"aten::{name}", f"aten::{name}.all_out")(full)
        _kernel(f"aten::{name}.out", serves=(f"aten::{name}.dim",))(one)
        _kernel(f"aten::{name}.dims_out", f"aten::{name}.dims")(many)

    _make(_name, _op)


def _norm_dtype(x: torch.Tensor, dtype) -> torch.dtype:
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{SCALAR_TYPE_NAMES[x.dtype]}")
    if dtype is None:
        return x.dtype
    if not dtype.is_floating_point or torch.promote_types(x.dtype, dtype) != dtype:
        raise RuntimeError(f"linalg.vector_norm: the dtype of the input ({SCALAR_TYPE_NAMES[x.dtype]}) should be "
                           f"convertible without narrowing to the specified dtype ({SCALAR_TYPE_NAMES[dtype]})")
    return dtype


def _norm_spec(ord_: float) -> _Spec:
    if ord_ == 2:
        return _Spec("add", FP32, pre="square", post=_post_activation("sqrt"))
    if ord_ == 1:
        return _Spec("add", FP32, pre="abs")
    if ord_ == math.inf:
        return _Spec("maximum", FP32, pre="abs")
    if ord_ == -math.inf:
        return _Spec("minimum", FP32, pre="abs")
    if ord_ == 0:
        return _Spec("add", FP32, pre="nonzero")
    return _Spec("add", FP32, pre=("pow", ord_), post=_post_power(1.0 / ord_))


@_kernel("aten::linalg_vector_norm.out", serves=("aten::linalg_vector_norm",))
def _vector_norm_out(a: dict) -> torch.Tensor:
    x, dim, keepdim, dtype, out = a["self"], a.get("dim"), bool(a.get("keepdim", False)), a.get("dtype"), a["out"]
    ord_ = float(scalar_of(a.get("ord", 2)))
    rdtype = _norm_dtype(x, dtype)
    dims = _dims(x, dim)
    if ord_ < 0 or ord_ == math.inf:
        if x.numel() == 0 and (not dim or x.dim() == 0):
            raise RuntimeError(f"linalg.vector_norm cannot compute the {a.get('ord')} norm on an empty tensor "
                               f"because the operation does not have an identity")
        for d in dims:
            if x.shape[d] == 0:
                raise RuntimeError(f"linalg.vector_norm cannot compute the {a.get('ord')} norm on the dimension {d}"
                                   f"because this dimension is empty and the operation does not have an identity")
    check_out(out, _out_shape(x, dims, keepdim), rdtype, [x], exact_dtype=True)
    _reduce("linalg_vector_norm", x, out, dims, _norm_spec(ord_))
    return out


# --- arg reductions: argmax, argmin, max.dim, min.dim, aminmax ------------------------------

def _better(nc, v: Tile, best: Tile, op: str) -> Tile:
    """Mask of partitions where the candidate v beats best: strictly greater (less), or NaN over a number."""
    shape = v.shape
    mask = nc.sbuf_tile(shape, BOOL)
    nc.vector.tensor_tensor(mask, v, best, "greater" if op == "maximum" else "less")
    if is_float(v.dtype):
        nan_v = nc.sbuf_tile(shape, BOOL)
        num_best = nc.sbuf_tile(shape, BOOL)
        nc.vector.tensor_unary(nan_v, v, "isnan")
        nc.vector.tensor_unary(num_best, best, "isnan")
        nc.vector.tensor_unary(num_best, num_best, "logical_not")
        nc.vector.tensor_tensor(nan_v, nan_v, num_best, "logical_and")
        nc.vector.tensor_tensor(mask, mask, nan_v, "logical_or")
    return mask


def _take_better(nc, bv: Tile, bi: Tile, v: Tile, i: Tile, op: str) -> None:
    mark = nc.mark()
    mask = _better(nc, v, bv, op)
    nc.vector.select(bv, mask, v, bv)
    nc.vector.select(bi, mask, i, bi)
    nc.release_to(mark)


def _arg_rows(nc, g: _Grid, op: str, vout: np.ndarray | None, iout: np.ndarray | None) -> None:
    X = g.kr[0]
    cd = np.dtype(FP32) if is_float(X.dtype) else X.dtype
    chunks = list(_boxes(g.rshape, CHUNK))
    blocks = list(_boxes(g.kshape, P))
    loads = [((p, f), X.dtype, _box_load(nc, _at(X, rsl + csl))) for _, p, rsl in blocks for _, f, csl in chunks]
    tiles = _stream(nc, loads)
    for _, p, rsl in blocks:
        bv, bi = _row_scalar(nc, p, cd), _row_scalar(nc, p, I64)
        for j, (c0, _, _) in enumerate(chunks):
            t = next(tiles)
            if j == 0:
                nc.vector.arg_reduce(bv, bi, t, op)
                continue
            mark = nc.mark()
            v, i = _row_scalar(nc, p, cd), _row_scalar(nc, p, I64)
            nc.vector.arg_reduce(v, i, t, op)
            nc.vector.tensor_scalar(i, i, "add", c0)
            _take_better(nc, bv, bi, v, i, op)
            nc.release_to(mark)
        _store_arg(nc, bv, bi, _at(vout, rsl) if vout is not None else None,
                   _at(iout, rsl) if iout is not None else None)
        nc.release(bi)
        nc.release(bv)
    for _ in tiles:
        pass


def _store_arg(nc, v: Tile, i: Tile, vdst: np.ndarray | None, idst: np.ndarray | None) -> None:
    if vdst is not None:
        res = nc.sbuf_tile(v.shape, vdst.dtype)
        nc.vector.tensor_copy(res, v)
        nc.dma.store(vdst, res)
        nc.release(res)
    if idst is not None:
        nc.dma.store(idst, i)


def _arg_flat(nc, g: _Grid, op: str, vout: np.ndarray | None, iout: np.ndarray | None) -> None:
    X = g.kr[0]
    cd = np.dtype(FP32) if is_float(X.dtype) else X.dtype
    for r in np.ndindex(*g.kshape):
        sl = tuple(slice(i, i + 1) for i in r)
        xr = _at(X, sl)
        bv = _memset(nc, (P, 1), cd, _identity(op, cd))
        bi = _memset(nc, (P, 1), I64, np.iinfo(np.int64).max)
        pieces = list(_flat_pieces(xr.size))
        source = _stream(nc, [((p, f), xr.dtype, _flat_load(nc, xr, a, b)) for a, b, p, f in pieces])
        for j, ((a, _, p, f), t) in enumerate(zip(pieces, source)):
            mark = nc.mark()
            v, i, base = _row_scalar(nc, p, cd), _row_scalar(nc, p, I64), _row_scalar(nc, p, I64)
            nc.vector.arg_reduce(v, i, t, op)
            nc.gpsimd.iota(base, base=a, partition_step=f, free_step=0)
            nc.vector.tensor_tensor(i, i, base, "add")
            if j == 0:  # the first piece covers every partition any later piece touches
                nc.vector.tensor_copy(bv[:p], v)
                nc.vector.tensor_copy(bi[:p], i)
            else:
                _take_better(nc, bv[:p], bi[:p], v, i, op)
            nc.release_to(mark)
        for _ in source:
            pass
        v1, i1 = _arg_across_partitions(nc, bv, bi, op)
        _store_arg(nc, v1, i1, _at(vout, sl) if vout is not None else None, _at(iout, sl) if iout is not None else None)
        for t in (i1, v1, bi, bv):
            nc.release(t)


def _arg_across_partitions(nc, bv: Tile, bi: Tile, op: str) -> tuple[Tile, Tile]:
    """The best value over partitions and the smallest index where it (or, if any, NaN) occurs."""
    v1 = nc.sbuf_tile((1, 1), bv.dtype)
    i1 = nc.sbuf_tile((1, 1), I64)
    mark = nc.mark()
    nc.gpsimd.partition_reduce(v1, bv, op)
    everywhere = nc.sbuf_tile(bv.shape, bv.dtype)
    nc.gpsimd.partition_broadcast(everywhere, v1)
    hit = nc.sbuf_tile(bv.shape, BOOL)
    nc.vector.tensor_tensor(hit, bv, everywhere, "equal")
    if is_float(bv.dtype):
        both_nan = nc.sbuf_tile(bv.shape, BOOL)
        nan_best = nc.sbuf_tile(bv.shape, BOOL)
        nc.vector.tensor_unary(both_nan, bv, "isnan")
        nc.vector.tensor_unary(nan_best, everywhere, "isnan")
        nc.vector.tensor_tensor(both_nan, both_nan, nan_best, "logical_and")
        nc.vector.tensor_tensor(hit, hit, both_nan, "logical_or")
    never = _memset(nc, bv.shape, I64, np.iinfo(np.int64).max)
    candidates = nc.sbuf_tile(bv.shape, I64)
    nc.vector.select(candidates, hit, bi, never)
    nc.gpsimd.partition_reduce(i1, candidates, "minimum")
    nc.release_to(mark)
    return v1, i1


def _arg_reduce(name: str, x: torch.Tensor, dim: int | None, op: str, values: torch.Tensor | None,
                indices: torch.Tensor | None) -> None:
    """values/indices (either may be None) of the max/min of x along dim (None: the flattened tensor)."""
    like = values if values is not None else indices
    if like.numel() == 0:
        return
    nd = x.dim()
    if dim is None or nd == 0:
        dims = tuple(range(nd))
    else:
        dims = (dim,)
    kdims = [d for d in range(nd) if d not in dims]
    xv = hbm(x)
    views = [_kept_view(t, dims, nd) if t is not None else None for t in (values, indices)]
    if dim is None and nd:
        views = [v.reshape(()) if v is not None else None for v in views]  # keepdim's [1, 1, ...]
    g = _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in dims], kr=[xv.transpose(kdims + list(dims))],
              k=[v for v in views if v is not None])
    outs = iter(g.k)
    vout = next(outs) if values is not None else None
    iout = next(outs) if indices is not None else None
    with launch(name, like.device.index) as nc:
        if _use_flat(g):
            _arg_flat(nc, g, op, vout, iout)
        else:
            _arg_rows(nc, g, op, vout, iout)


def _argmax_argmin(name: str, op: str, a: dict) -> torch.Tensor:
    x, dim, keepdim, out = a["self"], a.get("dim"), bool(a.get("keepdim", False)), a.get("out")
    if x.dtype == torch.bool:
        raise RuntimeError(f"{name}(): does not support bool input")
    if dim is None:
        if x.numel() == 0:
            raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
        shape = (1,) * x.dim() if keepdim else ()
    else:
        dim = _wrap(dim, x.dim())
        if x.dim() and x.shape[dim] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
        shape = _out_shape(x, (dim,) if x.dim() else (), keepdim)
    if out is None:
        out = new_output(shape, torch.int64, x)
    else:
        check_out(out, shape, torch.int64, [x], exact_dtype=True)
    _arg_reduce(name, x, dim, op, None, out)
    return out


@_kernel("aten::argmax.out", serves=("aten::argmax",))
def _argmax_out(a: dict) -> torch.Tensor:
    return _argmax_argmin("argmax", "maximum", a)


@_kernel("aten::argmin.out", serves=("aten::argmin",))
def _argmin_out(a: dict) -> torch.Tensor:
    return _argmax_argmin("argmin", "minimum", a)


def _max_min_dim(name: str, op: str, a: dict, value_name: str, index_name: str):
    x, keepdim = a["self"], bool(a.get("keepdim", False))
    dim = _wrap(a["dim"], x.dim())
    if x.dim() and x.shape[dim] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")
    dims = (dim,) if x.dim() else ()
    shape = _out_shape(x, dims, keepdim)
    values, indices = a.get(value_name), a.get(index_name)
    if values is None:
        values, indices = new_output(shape, x.dtype, x), new_output(shape, torch.int64, x)
    else:
        check_out(values, shape, x.dtype, [x], exact_dtype=True)
        check_out(indices, shape, torch.int64, [x], exact_dtype=True)
    _arg_reduce(name, x, dim if x.dim() else None, op, values, indices)
    return values, indices


@_kernel("aten::max.dim_max", serves=("aten::max.dim",))
def _max_dim_out(a: dict):
    return _max_min_dim("max", "maximum", a, "max", "max_values")


@_kernel("aten::min.dim_min", serves=("aten::min.dim",))
def _min_dim_out(a: dict):
    return _max_min_dim("min", "minimum", a, "min", "min_indices")


def _aminmax(a: dict):
    x, dim, keepdim = a["self"], a.get("dim"), bool(a.get("keepdim", False))
    if dim is None:
        if x.numel() == 0:
            raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the operation has no "
                               "identity.")
        dims = tuple(range(x.dim()))
        shape = (1,) * x.dim() if keepdim else ()
    else:
        d = _wrap(dim, x.dim())
        if x.dim() and x.shape[d] == 0:
            raise IndexError(f"aminmax(): Expected reduction dim {d} to have non-zero size.")
        dims = (d,) if x.dim() else ()
        shape = _out_shape(x, dims, keepdim)
    lo, hi = a.get("min"), a.get("max")
    if lo is None:
        lo, hi = new_output(shape, x.dtype, x), new_output(shape, x.dtype, x)
    else:
        check_out(lo, shape, x.dtype, [x], exact_dtype=True)
        check_out(hi, shape, x.dtype, [x], exact_dtype=True)
    if lo.numel():
        lo_k, hi_k = (lo.reshape(()) if dim is None else lo), (hi.reshape(()) if dim is None else hi)
        with launch("aminmax", x.device.index) as nc:
            _reduce_in(nc, x, lo_k, dims, _Spec("minimum", _value_cd(x.dtype)))
            _reduce_in(nc, x, hi_k, dims, _Spec("maximum", _value_cd(x.dtype)))
    return lo, hi


_kernel("aten::aminmax.out", serves=("aten::aminmax",))(_aminmax)


# --- two-pass row reductions: var, std, var_mean, std_mean, logsumexp ---------------------------

def _rows_of(x: torch.Tensor, dims: tuple[int, ...], outs: Sequence[torch.Tensor]) -> _Grid:
    nd = x.dim()
    kdims = [d for d in range(nd) if d not in dims]
    rord = _order_by_stride(x, dims)
    return _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in rord], kr=[hbm(x).transpose(kdims + rord)],
                 k=[_kept_view(o, dims, nd) for o in outs])


def _two_pass(nc, g: _Grid, first: _Spec, between: Callable, func: str, emit: Callable,
              centre: int | None = None) -> None:
    """Per output: s = between(first reduction) ([p, 1] fp32, the shift), then the sum of func(x - s)
    fused on ScalarE; emit(nc, shift, total, out views) writes the results. ``centre=n`` (variance:
    s a mean of n elements, func "square"): the second pass also sums x - s and compensates both
    (``_centre``) before emit."""
    X = g.kr[0]
    if _use_flat(g):
        for r in np.ndindex(*g.kshape):
            sl = tuple(slice(i, i + 1) for i in r)
            xr = _at(X, sl)
            pieces = list(_flat_pieces(xr.size))
            keep = xr.size <= P * RESIDENT_COLS
            tiles = None
            if keep:
                tiles = []
                for a, b, p, f in pieces:
                    t = nc.sbuf_tile((p, f), xr.dtype)
                    nc.dma.load_flat(t, xr, a, b)
                    tiles.append(t)
            acc = _memset(nc, (P, 1), first.cd, first.identity)
            _flat_partials(nc, xr, acc, first.partial, first.op, first.cd, tiles)
            total = nc.sbuf_tile((1, 1), first.cd)
            nc.gpsimd.partition_reduce(total, acc, first.op, dtype=first.cd)
            shift = between(nc, total)
            neg = nc.sbuf_tile((1, 1), FP32)
            nc.vector.tensor_scalar(neg, shift, "multiply", -1.0, dtype=FP32)
            bias = nc.sbuf_tile((P, 1), FP32)
            nc.gpsimd.partition_broadcast(bias, neg)
            acc2 = _memset(nc, (P, 1), FP32, 0.0)

            def second(nc_, t, dst, fn=func):
                scratch = nc_.sbuf_tile(t.shape, FP32)
                nc_.scalar.activation(scratch, t, fn, bias=bias[:t.partitions], accumulate=dst)
                nc_.release(scratch)

            _flat_partials(nc, xr, acc2, second, "add", FP32, tiles)
            total2 = nc.sbuf_tile((1, 1), FP32)
            nc.gpsimd.partition_reduce(total2, acc2, "add", dtype=FP32)
            if centre is not None:
                acc1 = _memset(nc, (P, 1), FP32, 0.0)
                _flat_partials(nc, xr, acc1, lambda nc_, t, dst: second(nc_, t, dst, "identity"), "add", FP32,
                               tiles)
                total1 = nc.sbuf_tile((1, 1), FP32)
                nc.gpsimd.partition_reduce(total1, acc1, "add", dtype=FP32)
                _centre(nc, shift, total2, total1, centre)
                nc.release(total1)
                nc.release(acc1)
            emit(nc, shift, total2, [_at(o, sl) for o in g.k])
            for t in (total2, acc2, bias, neg, shift, total, acc):
                nc.release(t)
            for t in tiles or ():
                nc.release(t)
        return
    for blk in _blocks(nc, g, [X]):
        p = blk.p
        acc = _row_scalar(nc, p, first.cd)
        for j, (_, (t,)) in enumerate(blk.each(0)):
            if j == 0:
                first.partial(nc, t, acc)
            else:
                part = _row_scalar(nc, p, first.cd)
                first.partial(nc, t, part)
                _combine(nc, acc, part, first.op, first.cd)
                nc.release(part)
        shift = between(nc, acc)
        neg = _row_scalar(nc, p)
        nc.vector.tensor_scalar(neg, shift, "multiply", -1.0, dtype=FP32)
        acc2 = _row_scalar(nc, p)
        acc1 = _row_scalar(nc, p) if centre is not None else None
        for j, (_, (t,)) in enumerate(blk.each(0)):
            scratch = nc.sbuf_tile(t.shape, FP32)
            for dst, fn in ((acc2, func), (acc1, "identity")):
                if dst is None:
                    continue
                if j == 0:
                    nc.scalar.activation(scratch, t, fn, bias=neg, accumulate=dst)
                else:
                    part = _row_scalar(nc, p)
                    nc.scalar.activation(scratch, t, fn, bias=neg, accumulate=part)
                    _combine(nc, dst, part, "add", FP32)
                    nc.release(part)
            nc.release(scratch)
        if acc1 is not None:
            _centre(nc, shift, acc2, acc1, centre)
            nc.release(acc1)
        emit(nc, shift, acc2, [_at(o, blk.rsl) for o in g.k])
        for t in (acc2, neg, shift, acc):
            nc.release(t)


def _var_kernel(name: str, x: torch.Tensor, dims: tuple[int, ...], correction: float, take_sqrt: bool,
                var_out: torch.Tensor, mean_out: torch.Tensor | None) -> None:
    if var_out.numel() == 0:
        return
    n = _count(x, dims)
    divisor = max(0.0, n - correction)
    if divisor <= 0:
        warnings.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the "
                      f"reduction factor (input numel divided by output numel).", UserWarning, stacklevel=4)
    outs = [var_out] + ([mean_out] if mean_out is not None else [])
    g = _rows_of(x, dims, outs)

    def between(nc, total):
        mean = nc.sbuf_tile(total.shape, FP32)
        nc.vector.tensor_scalar(mean, total, "divide", float(n), dtype=FP32)
        return mean

    def emit(nc, mean, m2, views):
        mark = nc.mark()
        res = nc.sbuf_tile(m2.shape, views[0].dtype)
        if take_sqrt:
            v = nc.sbuf_tile(m2.shape, FP32)
            nc.vector.tensor_scalar(v, m2, "divide", divisor, dtype=FP32)
            nc.scalar.activation(res, v, "sqrt")
        else:
            nc.vector.tensor_scalar(res, m2, "divide", divisor, dtype=FP32)
        nc.dma.store(views[0], res)
        if len(views) > 1:
            m = nc.sbuf_tile(mean.shape, views[1].dtype)
            nc.vector.tensor_copy(m, mean)
            nc.dma.store(views[1], m)
        nc.release_to(mark)

    with launch(name, var_out.device.index) as nc:
        if n == 0:
            for v in [_kept_view(o, dims, x.dim()) for o in outs]:
                _fill(nc, v, np.nan, FP32)
            return
        if x.dtype in (torch.bfloat16, torch.float16):
            _var_rows64(nc, g, n, divisor, take_sqrt)
        else:
            _two_pass(nc, g, _Spec("add", FP32), between, "square", emit, centre=n)


def _var_rows64(nc, g: _Grid, n: int, divisor: float, take_sqrt: bool) -> None:
    """Variance (and mean) of bfloat16/float16 rows as CPU computes them: its std/var kernel for reduced floats
    runs Welford in double (WelfordOps<scalar_t, double>) and converts the double result to float, then to the
    dtype, so rows whose squares overflow fp32 still give a finite std. No fixed-function engine computes in
    double: GpSimd programs do (the mean, then the centred sum of squares, per block of rows)."""
    for blk in _blocks(nc, g, [g.kr[0]]):
        p = blk.p
        mark = nc.mark()
        total = _row_sum64(nc, blk, lambda x: x.astype(np.float64), "var_sum64")
        # Welford's running mean turns NaN at the first element after an infinity (x - inf, or inf - inf):
        # only an infinity in a row's last element leaves the mean infinite; the sum / n mean elsewhere
        odd = _row_sum64(nc, blk, lambda x: (~np.isfinite(x)).astype(np.float64), "var_nonfinite64")
        last = nc.sbuf_tile((p, 1), F64)
        *_, (_, (tail,)) = blk.each(0)
        nc.gpsimd.run("var_last64", lambda o, t: o.__setitem__(..., np.isinf(t[:, -1:])), (last,), (tail,),
                      elements=p)
        mean = nc.sbuf_tile((p, 1), F64)

        def welford_mean(o, t, bad, inf_last):
            with np.errstate(all="ignore"):
                o[...] = np.where((bad == 0) | ((bad == 1) & (inf_last == 1)), t / n, np.nan)

        nc.gpsimd.run("var_mean64", welford_mean, (mean,), (total, odd, last), elements=p)
        m2 = _row_sum64(nc, blk, lambda x, m: np.square(x.astype(np.float64) - m), "var_m2_64", about=mean)
        res32, mean32 = nc.sbuf_tile((p, 1), FP32), nc.sbuf_tile((p, 1), FP32)

        def finish(o_res, o_mean, v, m):
            with np.errstate(all="ignore"):
                q = v / np.float64(divisor)  # divisor 0: inf, or NaN for 0 / 0, as CPU's double division
                o_res[...] = np.sqrt(q) if take_sqrt else q
            o_mean[...] = m

        nc.gpsimd.run("var_finish64", finish, (res32, mean32), (m2, mean), elements=p, factor=2.0)
        for view, t in zip([_at(o, blk.rsl) for o in g.k], (res32, mean32)):
            out = nc.sbuf_tile((p, 1), view.dtype)
            nc.vector.tensor_copy(out, t)
            nc.dma.store(view, out)
        nc.release_to(mark)


def _var_args(a: dict):
    x = a["self"]
    if x.dtype not in _FLOATS and x.dtype != torch.float64:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = _dims(x, a.get("dim"))
    c = a.get("correction")
    correction = 1.0 if c is None else float(scalar_of(c))
    return x, dims, correction, bool(a.get("keepdim", False))


def _var_std(name: str, take_sqrt: bool, a: dict, out: torch.Tensor | None) -> torch.Tensor:
    x, dims, correction, keepdim = _var_args(a)
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, x.dtype, x)
    else:
        check_out(out, shape, x.dtype, [x])
    _var_kernel(name, x, dims, correction, take_sqrt, out, None)
    return out


@_kernel("aten::var.correction")
def _var(a: dict) -> torch.Tensor:
    return _var_std("var", False, a, None)


@_kernel("aten::var.correction_out")
def _var_out(a: dict) -> torch.Tensor:
    return _var_std("var", False, a, a["out"])


@_kernel("aten::std.correction")
def _std(a: dict) -> torch.Tensor:
    return _var_std("std", True, a, None)


@_kernel("aten::std.correction_out")
def _std_out(a: dict) -> torch.Tensor:
    return _var_std("std", True, a, a["out"])


def _var_mean(name: str, take_sqrt: bool):
    def kernel(a: dict):
        x, dims, correction, keepdim = _var_args(a)
        shape = _out_shape(x, dims, keepdim)
        v, m = new_output(shape, x.dtype, x), new_output(shape, x.dtype, x)
        _var_kernel(name, x, dims, correction, take_sqrt, v, m)
        return v, m

    return kernel


_kernel("aten::var_mean.correction")(_var_mean("var_mean", False))
_kernel("aten::std_mean.correction")(_var_mean("std_mean", True))
TABLE.serves("aten::var_mean.correction_out", "aten::var_mean.correction")
TABLE.serves("aten::std_mean.correction_out", "aten::std_mean.correction")


def _logsumexp(a: dict, out: torch.Tensor | None) -> torch.Tensor:
    x, keepdim = a["self"], bool(a.get("keepdim", False))
    dim = a["dim"]
    if x.dim() and not list(dim):
        raise RuntimeError(f"output with shape [] doesn't match the broadcast shape {[1] * x.dim()}")
    dims = _dims(x, dim)
    rdtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, rdtype, x)
    else:
        if not out.dtype.is_floating_point:
            raise RuntimeError(f"logsumexp(): Expected floating point type for result tensor, but got: "
                               f"{SCALAR_TYPE_NAMES[out.dtype]}")
        check_out(out, shape, out.dtype, [x])
    if out.numel() == 0:
        return out
    g = _rows_of(x, dims, [out])

    def between(nc, m):
        # CPU: the shift is the max, or 0 where the max is infinite (all -inf rows give -inf, +inf gives inf)
        shift = nc.sbuf_tile(m.shape, FP32)
        mark = nc.mark()
        infinite = nc.sbuf_tile(m.shape, BOOL)
        nc.vector.tensor_unary(infinite, m, "isinf")
        zero = _memset(nc, m.shape, FP32, 0.0)
        nc.vector.select(shift, infinite, zero, m)
        nc.release_to(mark)
        return shift

    def emit(nc, shift, total, views):
        mark = nc.mark()
        log = nc.sbuf_tile(total.shape, FP32)
        nc.scalar.activation(log, total, "log")
        res = nc.sbuf_tile(total.shape, views[0].dtype)
        nc.vector.tensor_tensor(res, log, shift, "add", dtype=FP32)
        nc.dma.store(views[0], res)
        nc.release_to(mark)

    with launch("logsumexp", out.device.index) as nc:
        if _count(x, dims) == 0:
            _fill(nc, _kept_view(out, dims, x.dim()), -np.inf, FP32)
        else:
            _two_pass(nc, g, _Spec("maximum", FP32), between, "exp", emit)
    return out


@_kernel("aten::logsumexp")
def _logsumexp_functional(a: dict) -> torch.Tensor:
    return _logsumexp(a, None)


@_kernel("aten::logsumexp.out")
def _logsumexp_out(a: dict) -> torch.Tensor:
    return _logsumexp(a, a["out"])


# --- scans: cumsum, cumprod ---------------------------------------------------------------------

def _scan(name: str, op: str, a: dict) -> torch.Tensor:
    x, dtype, out = a["self"], a.get("dtype"), a["out"]
    dim = _wrap(a["dim"], x.dim())
    rdtype = _integral_default(x, dtype, out)
    check_out(out, tuple(x.shape), rdtype, [x], exact_dtype=dtype is not None)
    if out.numel() == 0:
        return out
    rd = out.dtype
    cd = FP32 if rd.is_floating_point else I64
    elem = _elem_for(x, rd)
    nd = x.dim()
    kdims = [d for d in range(nd) if d != dim]
    rdims = [dim] if nd else []
    g = _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in rdims],
              kr=[hbm(x).transpose(kdims + rdims), hbm(out).transpose(kdims + rdims)])
    X, O = g.kr
    chunks = list(_boxes(g.rshape, CHUNK))
    # CPU's cumsum/cumprod carry the running value in at::acc_type<scalar_t, /*is_cuda=*/false>: double for a
    # float32 result (float for bfloat16/float16, int64 for integers), rounding each prefix once into the
    # output. An fp32 scan drifts from that by tens of ULP over a few thousand elements. No fixed-function
    # engine computes in double, so a real NeuronCore kernel would either scan in fp32 (and differ from CPU)
    # or carry a compensated (double-fp32) running value on GpSimd; the simulator runs the float32 scan as a
    # GpSimd program over double (``_scan64``), so it matches CPU's acc_type, and charges it as emulated
    # double arithmetic (_SCAN64_STEPS element-steps per element).
    wide = rd == torch.float32
    with launch(name, out.device.index) as nc:
        for blk in _blocks(nc, g, [X]):
            if wide:
                carry = nc.sbuf_tile((blk.p, 1), F64)  # the double running value, read/written by GpSimd only
                for j, (ch, (t,)) in enumerate(blk.each(0)):
                    mark = nc.mark()
                    src = t
                    if elem is not None:
                        src = nc.sbuf_tile(t.shape, elem)
                        nc.vector.tensor_copy(src, t)
                    res = nc.sbuf_tile(t.shape, O.dtype)
                    _scan64(nc, res, carry, src, op, first=not j)
                    blk.store(O, ch, res)
                    nc.release_to(mark)
                nc.release(carry)
                continue
            carry = _row_scalar(nc, blk.p, cd)  # the running total at the end of the previous chunk
            for j, (ch, (t,)) in enumerate(blk.each(0)):
                mark = nc.mark()
                src = t
                if elem is not None:
                    src = nc.sbuf_tile(t.shape, elem)
                    nc.vector.tensor_copy(src, t)
                run = nc.sbuf_tile(t.shape, cd)
                nc.vector.tensor_scan(run, src, op, dtype=cd)
                res = run if O.dtype == cd else nc.sbuf_tile(t.shape, O.dtype)
                if cd == FP32:
                    # carry in and round to the output on ScalarE (VectorE is busy with the scans)
                    if j or res is not run:
                        if op == "add":
                            nc.scalar.activation(res, run, "identity", bias=carry if j else 0.0)
                        else:
                            nc.scalar.activation(res, run, "identity", scale=carry if j else 1.0)
                    if j + 1 < len(chunks):  # the running total the next chunk starts from, in fp32
                        if res is run or not j:
                            nc.vector.tensor_copy(carry, (res if res is run else run)[:, t.free - 1:t.free])
                        else:
                            nc.vector.tensor_tensor(carry, run[:, t.free - 1:t.free], carry, op, dtype=cd)
                else:  # integers: exact int64 arithmetic on VectorE
                    if j:
                        nc.vector.tensor_tensor(run, run, carry, op, dtype=cd)
                    if res is not run:
                        nc.vector.tensor_copy(res, run)
                    if j + 1 < len(chunks):
                        nc.vector.tensor_copy(carry, run[:, t.free - 1:t.free])
                blk.store(O, ch, res)
                nc.release_to(mark)
            nc.release(carry)
    return out


_SCAN64_STEPS = 4  # GpSimd element-steps per element of a double scan: widen, emulated double op, round


def _scan64(nc, res: Tile, carry: Tile, src: Tile, op: str, first: bool) -> None:
    """One chunk of a float32 cumsum/cumprod on GpSimd: the inclusive scan of ``src`` in double, starting from
    the double running value ``carry`` (unless ``first``), each prefix rounded once into ``res``; ``carry``
    becomes the chunk's last prefix (see _scan: CPU's acc_type for float is double)."""
    scan = np.cumsum if op == "add" else np.cumprod

    def program(o, c_out, x, *c_in):
        # CPU's loop starts from the identity (0.0, so cumsum(-0.0) is +0.0) and continues the sequential
        # double scan from the previous chunk's last prefix
        start = c_in[0] if c_in else np.full((x.shape[0], 1), 0.0 if op == "add" else 1.0)
        with np.errstate(all="ignore"):
            run = scan(np.concatenate([start, x.astype(np.float64)], axis=1), axis=1)[:, 1:]
        o[...] = run
        c_out[...] = run[:, -1:]

    ins = (src,) if first else (src, carry)
    nc.gpsimd.run(f"scan64_{op}", program, (res, carry), ins, elements=src.data.size, factor=_SCAN64_STEPS)


@_kernel("aten::cumsum.out", serves=("aten::cumsum", "aten::cumsum_"))
def _cumsum_out(a: dict) -> torch.Tensor:
    return _scan("cumsum", "add", a)


@_kernel("aten::cumprod.out", serves=("aten::cumprod", "aten::cumprod_"))
def _cumprod_out(a: dict) -> torch.Tensor:
    return _scan("cumprod", "multiply", a)


# --- softmax, log_softmax and their gradients ----------------------------------------------------

def _along(x: torch.Tensor, dim: int, arrays: Sequence[torch.Tensor]) -> _Grid:
    """A grid with every other dimension kept (rows) and ``dim`` along the free axis, over same-shape tensors."""
    nd = x.dim()
    kdims = [d for d in range(nd) if d != dim]
    order = kdims + ([dim] if nd else [])
    return _Grid([x.shape[d] for d in kdims], [x.shape[dim]] if nd else [],
                 kr=[hbm(t).transpose(order) for t in arrays])


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


def _softmax_rows(name: str, x: torch.Tensor, out: torch.Tensor, dim: int, log: bool, safe: bool = False,
                  source: Source | None = None, queue: bool = False) -> None:
    """``queue``: the caller launches nothing else, so adaptive eager may queue this launch and feed
    its input from the launches producing it (see RowKernel)."""
    if out.numel() == 0:
        return
    if queue and HOOKS.submit is not None:
        kernel = RowKernel(name, x, (out,), dim if dim == x.dim() - 1 else None, (dim, log, safe), _softmax_launch)
        HOOKS.submit(f"aten::_{name}", _QueuedRowKernel(kernel), out, {"self": x})
        return
    elem = numpy_dtype(out.dtype) if out.dtype != x.dtype and not (x.dtype in _FLOATS and
                                                                   out.dtype == torch.float32) else None
    g = _along(x, dim, [x, out])
    X, O = g.kr
    with launch(name, out.device.index) as nc:
        for blk in _blocks(nc, g, [X], extra=0 if log else 4, source=source):
            p = blk.p

            def cast(t: Tile) -> Tile:
                if elem is None:
                    return t
                c = nc.sbuf_tile(t.shape, elem)
                nc.vector.tensor_copy(c, t)
                return c

            if blk.resident:
                m = _row_reduce(nc, blk, 0, "maximum", cast if elem is not None else None)
                total = None
            else:  # rows too long for SBUF: running max and rescaled running sum in one pass
                m, total = _online_max_sum(nc, blk, cast)
            masked = None
            if safe:  # rows of only -inf give 0 instead of nan
                masked = _row_scalar(nc, p, BOOL)
                nc.vector.tensor_scalar(masked, m, "equal", -np.inf, dtype=FP32)
                zero = _memset(nc, (p, 1), FP32, 0.0)
                nc.vector.select(m, masked, zero, m)
                nc.release(zero)
            neg = _row_scalar(nc, p)
            nc.vector.tensor_scalar(neg, m, "multiply", -1.0, dtype=FP32)
            exps: list[Tile] = []
            if total is None:
                total = _row_scalar(nc, p)
                for j, (_, (t,)) in enumerate(blk.each(0)):
                    mark = nc.mark()
                    src = cast(t)
                    e = nc.sbuf_tile(t.shape, FP32)
                    part = total if j == 0 else _row_scalar(nc, p)
                    nc.scalar.activation(e, src, "exp", bias=neg, accumulate=part)
                    if j:
                        _combine(nc, total, part, "add", FP32)
                    if not log:  # keep exp(x - max) for the output pass
                        if j:
                            nc.release(part)
                        if src is not t:
                            nc.release(src)
                        exps.append(e)
                    else:
                        nc.release_to(mark)
            scale = _row_scalar(nc, p)
            if log:
                nc.scalar.activation(scale, total, "log")
            else:
                nc.vector.tensor_unary(scale, total, "reciprocal", dtype=FP32)
                if masked is not None:
                    zero = _memset(nc, (p, 1), FP32, 0.0)
                    nc.vector.select(scale, masked, zero, scale)
                    nc.release(zero)
            for j, (ch, (t,)) in enumerate(blk.each(0)):
                mark = nc.mark()
                res = nc.sbuf_tile(t.shape, O.dtype)
                if log:  # (x - max) - log(sum), rounded once per step as CPU
                    shifted = nc.sbuf_tile(t.shape, FP32)
                    nc.scalar.activation(shifted, cast(t), "identity", bias=neg)
                    nc.vector.tensor_tensor(res, shifted, scale, "subtract", dtype=FP32)
                else:
                    if exps:
                        e = exps[j]
                    else:
                        e = nc.sbuf_tile(t.shape, FP32)
                        nc.scalar.activation(e, cast(t), "exp", bias=neg)
                    # exp(x - max) * (1 / sum) on whichever engine frees up first
                    if nc.timeline.free["scalar"] <= nc.timeline.free["vector"]:
                        nc.scalar.activation(res, e, "identity", scale=scale)
                    else:
                        nc.vector.tensor_tensor(res, e, scale, "multiply", dtype=FP32)
                blk.store(O, ch, res)
                nc.release_to(mark)
            for e in exps:
                nc.release(e)
            for t in (scale, total, neg) + ((masked,) if masked is not None else ()) + (m,):
                nc.release(t)


def _softmax_launch(k: "RowKernel", source: Source | None) -> None:
    dim, log, safe = k.params
    _softmax_rows("log_softmax" if log else "softmax", k.x, k.outs[0], dim, log, safe, source)


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


def _online_max_sum(nc, blk: _Block, cast: Callable) -> tuple[Tile, Tile]:
    """One streaming pass: the row max m and sum(exp(x - m)), the running sum rescaled by
    exp(m_old - m_new) whenever the max grows. Chunks of only -inf contribute 0 (not nan)."""
    p = blk.p
    m = _memset(nc, (p, 1), FP32, -np.inf)
    total = _memset(nc, (p, 1), FP32, 0.0)
    for _, (t,) in blk.each(0):
        mark = nc.mark()
        src = cast(t)
        cm, nm = _row_scalar(nc, p), _row_scalar(nc, p)
        nc.vector.tensor_reduce(cm, src, "maximum", dtype=FP32)
        nc.vector.tensor_tensor(nm, m, cm, "maximum", dtype=FP32)
        none_yet = _row_scalar(nc, p, BOOL)
        nc.vector.tensor_scalar(none_yet, m, "equal", -np.inf, dtype=FP32)
        zero = _memset(nc, (p, 1), FP32, 0.0)
        factor = _row_scalar(nc, p)  # exp(m_old - m_new), 0 while nothing finite has been seen
        nc.vector.tensor_tensor(factor, m, nm, "subtract", dtype=FP32)
        nc.scalar.activation(factor, factor, "exp")
        nc.vector.select(factor, none_yet, zero, factor)
        nc.vector.tensor_tensor(total, total, factor, "multiply", dtype=FP32)
        bias = _row_scalar(nc, p)  # -m_new, or 0 while the max is -inf
        nc.vector.tensor_scalar(none_yet, nm, "equal", -np.inf, dtype=FP32)
        nc.vector.select(bias, none_yet, zero, nm)
        nc.vector.tensor_scalar(bias, bias, "multiply", -1.0, dtype=FP32)
        e = nc.sbuf_tile(t.shape, FP32)
        part = _row_scalar(nc, p)
        nc.scalar.activation(e, src, "exp", bias=bias, accumulate=part)
        nc.vector.tensor_tensor(total, total, part, "add", dtype=FP32)
        nc.vector.tensor_copy(m, nm)
        nc.release_to(mark)
    return m, total


def _softmax_common(name: str, log: bool, a: dict) -> torch.Tensor:
    x, out = a["self"], a["out"]
    dim = _wrap(a["dim"], x.dim())
    if a.get("half_to_float"):
        raise RuntimeError(f"{'log_' if log else ''}softmax with half to float conversion is not supported on CPU")
    if x.dtype not in _FLOATS:
        raise _refuse("log_softmax_lastdim_kernel_impl" if log else "softmax_kernel_impl", x.dtype)
    check_out(out, tuple(x.shape), x.dtype, [x], exact_dtype=True)
    _softmax_rows(name, x, out, dim, log, queue=True)
    return out


@_kernel("aten::_softmax.out", serves=("aten::_softmax",), submits=True)
def _softmax_out(a: dict) -> torch.Tensor:
    return _softmax_common("softmax", False, a)


@_kernel("aten::_log_softmax.out", serves=("aten::_log_softmax",), submits=True)
def _log_softmax_out(a: dict) -> torch.Tensor:
    return _softmax_common("log_softmax", True, a)


@_kernel("aten::_safe_softmax")
def _safe_softmax(a: dict) -> torch.Tensor:
    x, dtype = a["self"], a.get("dtype")
    dim = _wrap(a["dim"], x.dim())
    rdtype = dtype if dtype is not None else x.dtype
    if rdtype not in _FLOATS:
        raise _refuse("softmax_kernel_impl", rdtype)
    out = new_output(tuple(x.shape), rdtype, x)
    _softmax_rows("safe_softmax", x, out, dim, log=False, safe=True)
    return out


def _softmax_backward(name: str, log: bool, a: dict, out_name: str) -> torch.Tensor:
    grad, y, out = a["grad_output"], a["output"], a[out_name]
    dim = _wrap(a["dim"], grad.dim())
    input_dtype = a["input_dtype"]
    if grad.dtype != y.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[y.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[grad.dtype]}")
    if grad.dtype != input_dtype and not (grad.dtype == torch.float16 and input_dtype == torch.float32):
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[grad.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[input_dtype]}")
    if tuple(grad.shape) != tuple(y.shape):
        raise RuntimeError(f"The size of tensor a ({grad.shape}) must match the size of tensor b ({y.shape})")
    if grad.dtype not in _FLOATS:
        raise _refuse(name, grad.dtype)
    check_out(out, tuple(grad.shape), grad.dtype, [grad, y], exact_dtype=True)
    if out.numel() == 0:
        return out
    g = _along(grad, dim, [grad, y, out])
    G, Y, O = g.kr
    with launch(name, out.device.index) as nc:
        for blk in _blocks(nc, g, [G, Y]):
            p = blk.p
            total = _row_scalar(nc, p)  # softmax: sum(g * y); log_softmax: sum(g)
            for j, (_, (tg, ty)) in enumerate(blk.each(0, 1)):
                mark = nc.mark()
                part = total if j == 0 else _row_scalar(nc, p)
                if log:
                    nc.vector.tensor_reduce(part, tg, "add", dtype=FP32)
                else:
                    prod = nc.sbuf_tile(tg.shape, FP32)
                    nc.vector.tensor_tensor(prod, tg, ty, "multiply", dtype=FP32)
                    nc.vector.tensor_reduce(part, prod, "add", dtype=FP32)
                if j:
                    _combine(nc, total, part, "add", FP32)
                nc.release_to(mark)
            for ch, (tg, ty) in blk.each(0, 1):
                mark = nc.mark()
                res = nc.sbuf_tile(tg.shape, O.dtype)
                tmp = nc.sbuf_tile(tg.shape, FP32)
                if log:  # g - exp(y) * sum(g)
                    nc.scalar.activation(tmp, ty, "exp")
                    nc.vector.tensor_tensor(tmp, tmp, total, "multiply", dtype=FP32)
                    nc.vector.tensor_tensor(res, tg, tmp, "subtract", dtype=FP32)
                else:  # y * (g - sum(g * y))
                    nc.vector.tensor_tensor(tmp, tg, total, "subtract", dtype=FP32)
                    nc.vector.tensor_tensor(res, ty, tmp, "multiply", dtype=FP32)
                blk.store(O, ch, res)
                nc.release_to(mark)
            nc.release(total)
    return out


@_kernel("aten::_softmax_backward_data.out", serves=("aten::_softmax_backward_data",))
def _softmax_backward_out(a: dict) -> torch.Tensor:
    return _softmax_backward("softmax_backward", False, a, "grad_input")


@_kernel("aten::_log_softmax_backward_data.out", serves=("aten::_log_softmax_backward_data",))
def _log_softmax_backward_out(a: dict) -> torch.Tensor:
    return _softmax_backward("log_softmax_backward", True, a, "out")


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


class _ColVec:
    """An HBM vector over a grid's R (layer-norm weights): [128, f] fp32 tiles per column chunk, on
    every partition; kept for the whole launch when the rows are resident."""

    def __init__(self, nc, view: np.ndarray, chunks: list, keep: bool):
        self.nc, self.view, self.chunks, self.keep = nc, view, chunks, keep
        self.cache = [self._load(j) for j in range(len(chunks))] if keep else None

    def _load(self, j: int) -> Tile:
        _, f, csl = self.chunks[j]
        return _broadcast_row(self.nc, _at(self.view, csl), f, FP32)

    def get(self, j: int) -> Tile:
        return self.cache[j] if self.cache is not None else self._load(j)

    def done(self, t: Tile) -> None:
        if not self.keep:
            self.nc.release(t)


def _moments(nc, blk: _Block, n: int, which: int = 0) -> tuple[Tile, Tile]:
    """Row means of x and sums of (x - mean)^2 over a block of rows of n elements ([p, 1] fp32 each).

    Two passes, the second fused on ScalarE and compensated (``_centre``): the first mean, sum / n,
    carries the sum's rounding (1.7 summed 1000 times and divided is 1.7000003), which a constant
    row turns into a non-zero variance and an output of ~1e-4 instead of exactly the bias once
    rstd = 1/sqrt(eps) amplifies it; CPU's moments are exact there."""
    p = blk.p
    total = _row_reduce(nc, blk, which, "add")
    mean = _row_scalar(nc, p)
    nc.vector.tensor_scalar(mean, total, "divide", float(n), dtype=FP32)
    nc.release(total)
    neg = _row_scalar(nc, p)
    nc.vector.tensor_scalar(neg, mean, "multiply", -1.0, dtype=FP32)
    m2, s1 = _row_scalar(nc, p), _row_scalar(nc, p)
    for j, (_, (t,)) in enumerate(blk.each(which)):
        scratch = nc.sbuf_tile(t.shape, FP32)
        for acc, func in ((m2, "square"), (s1, "identity")):
            part = acc if j == 0 else _row_scalar(nc, p)
            nc.scalar.activation(scratch, t, func, bias=neg, accumulate=part)
            if j:
                _combine(nc, acc, part, "add", FP32)
                nc.release(part)
        nc.release(scratch)
    _centre(nc, mean, m2, s1, n)
    nc.release(s1)
    nc.release(neg)
    return mean, m2


def _centre(nc, mean: Tile, m2: Tile, s1: Tile, n: int) -> None:
    """Compensate moments taken about a first mean m: with s1 = sum(x - m) and m2 = sum((x - m)^2)
    (fp32, [p, 1]), the mean is m + s1/n and the centred sum of squares m2 - s1 * (s1/n), clamped
    at 0 as CPU clamps the variance.

    Applied only to rows with m2 <= m^2 / 4: then every |x - m| <= sqrt(m2) <= |m| / 2, so each
    x - m is exact (Sterbenz) and s1 measures the first mean's rounding exactly. That covers constant
    rows (made exact) and rows far from zero relative to their spread (50 +- 1e-3: made nearly
    correctly rounded). Elsewhere x - m rounds as much as the first sum did, the correction would
    be noise, and the moments stay as computed; so do rows with inf/NaN or overflowing squares."""
    mark = nc.mark()
    d = nc.sbuf_tile(s1.shape, FP32)
    corr = nc.sbuf_tile(s1.shape, FP32)
    ok = nc.sbuf_tile(s1.shape, BOOL)
    finite = nc.sbuf_tile(s1.shape, BOOL)
    fixed = nc.sbuf_tile(s1.shape, FP32)
    nc.vector.tensor_tensor(fixed, mean, mean, "multiply", dtype=FP32)
    nc.vector.tensor_scalar(fixed, fixed, "multiply", 0.25, dtype=FP32)
    nc.vector.tensor_tensor(ok, m2, fixed, "less_equal", dtype=FP32)
    nc.vector.tensor_scalar(d, s1, "divide", float(max(n, 1)), dtype=FP32)
    nc.vector.tensor_tensor(corr, d, s1, "multiply", dtype=FP32)
    nc.vector.tensor_unary(finite, corr, "isfinite", dtype=FP32)
    nc.vector.tensor_tensor(ok, ok, finite, "logical_and")
    nc.vector.tensor_tensor(fixed, mean, d, "add", dtype=FP32)
    nc.vector.select(mean, ok, fixed, mean)
    nc.vector.tensor_tensor(fixed, m2, corr, "subtract", dtype=FP32)
    nc.vector.tensor_scalar(fixed, fixed, "maximum", 0.0, dtype=FP32)
    nc.vector.select(m2, ok, fixed, m2)
    nc.release_to(mark)


def _rstd(nc, m2: Tile, n: int, eps: float) -> Tile:
    """1 / sqrt(m2 / n + eps) ([p, 1] fp32)."""
    var = _row_scalar(nc, m2.partitions)
    nc.vector.tensor_scalar(var, m2, "divide", float(max(n, 1)), dtype=FP32)
    rstd = _row_scalar(nc, m2.partitions)
    nc.scalar.activation(rstd, var, "rsqrt", bias=float(eps))
    nc.release(var)
    return rstd


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


# --- layer norm --------------------------------------------------------------------------------------

def _ln_check(x: torch.Tensor, normalized: Sequence[int], w, b) -> int:
    normalized = [int(s) for s in normalized]
    if not normalized:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")
    for name, p in (("weight", w), ("bias", b)):
        if p is not None and list(p.shape) != normalized:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{list(p.shape)} and normalized_shape = {normalized}")
    axis = x.dim() - len(normalized)
    if axis < 0 or list(x.shape[axis:]) != normalized:
        raise RuntimeError(f"Given normalized_shape={normalized}, expected input with shape [*, "
                           f"{', '.join(map(str, normalized))}], but got input of size{list(x.shape)}")
    return axis


@_kernel("aten::native_layer_norm", submits=True)
def _layer_norm(a: dict):
    x, w, b, eps = a["input"], a.get("weight"), a.get("bias"), float(a["eps"])
    axis = _ln_check(x, a["normalized_shape"], w, b)
    if x.dtype not in _FLOATS:
        raise _refuse("LayerNormKernelImpl", x.dtype)
    _check_mixed(x, w, b)
    sdtype = _stats_dtype(x, w, b)
    stat_shape = tuple(x.shape[:axis]) + (1,) * (x.dim() - axis)
    out = new_output(tuple(x.shape), x.dtype, x)
    mean, rstd = new_output(stat_shape, sdtype, x), new_output(stat_shape, sdtype, x)
    if out.numel() == 0 and mean.numel() == 0:
        return out, mean, rstd
    kernel = RowKernel("layer_norm", x, (out, mean, rstd), axis, (eps,), _layer_norm_launch, (w, b))
    if HOOKS.submit is not None:  # adaptive eager: queued, its input computable from its producers
        HOOKS.submit("aten::native_layer_norm", _QueuedRowKernel(kernel), out, {"input": x, "weight": w, "bias": b})
    else:
        kernel.run()
    return out, mean, rstd


def _layer_norm_launch(k: RowKernel, source: Source | None = None) -> None:
    x, (out, mean, rstd), axis, (eps,), (w, b) = k.x, k.outs, k.axis, k.params, k.inputs
    kdims, rdims = list(range(axis)), list(range(axis, x.dim()))
    g = _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in rdims],
              kr=[hbm(x).transpose(kdims + rdims), hbm(out).transpose(kdims + rdims)],
              k=[_kept_view(mean, rdims, x.dim()), _kept_view(rstd, rdims, x.dim())],
              r=[hbm(t) for t in (w, b) if t is not None])
    X, O = g.kr
    n = g.cols
    # CPU's layer norm computes y = (x * rstd + (-mean * rstd)) * gamma + beta (gamma 1, beta 0 when absent)
    # with multiply-adds that round once where this process's kernels fuse (vec::fmadd; the scalar loop
    # for a missing gamma/beta is contracted too): a product that underflows to -0.0 plus beta = 0.0 is
    # +0.0 unfused but -0.0 fused. On those hosts (and with a missing gamma/beta) the affine step takes
    # GpSimd's fma32 (the normalised value stays on ScalarE, exact for constant rows); elsewhere
    # ScalarE/VectorE round each step as CPU's DEFAULT kernels do.
    fused = cpu_host.fused_multiply_add() or w is None or b is None
    with launch("layer_norm", x.device.index) as nc:
        if n == 0:  # nothing to normalise: CPU gives mean 0 and rstd nan (0 / 0 variance)
            _fill(nc, g.k[0], 0.0, FP32)
            _fill(nc, g.k[1], np.nan, FP32)
            return
        chunks = list(_boxes(g.rshape, CHUNK))
        keep = g.cols <= PARAM_COLS
        params = iter(g.r)
        wv = _ColVec(nc, next(params), chunks, keep) if w is not None else None
        bv = _ColVec(nc, next(params), chunks, keep) if b is not None else None
        for blk in _blocks(nc, g, [X], source=source):
            m, m2 = _moments(nc, blk, n)
            r = _rstd(nc, m2, n, eps)
            _store_scalars(nc, _at(g.k[0], blk.rsl), m)
            _store_scalars(nc, _at(g.k[1], blk.rsl), r)
            shift = _row_scalar(nc, blk.p)  # -mean * rstd
            nc.vector.tensor_tensor(shift, m, r, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(shift, shift, "multiply", -1.0, dtype=FP32)
            for j, (ch, (t,)) in enumerate(blk.each(0)):
                mark = nc.mark()
                res = nc.sbuf_tile(t.shape, O.dtype)
                if fused:
                    _ln_affine_fma(nc, res, t, r, shift, [(vec, vec.get(j)) for vec in (wv, bv) if vec is not None],
                                   wv is not None, bv is not None, blk.p)
                    blk.store(O, ch, res)
                    nc.release_to(mark)
                    continue
                steps = [(vec, op) for vec, op in ((wv, "multiply"), (bv, "add")) if vec is not None]
                y = nc.sbuf_tile(t.shape, FP32) if steps else res
                nc.scalar.activation(y, t, "identity", scale=r, bias=shift)  # (x - mean) * rstd
                for k, (vec, op) in enumerate(steps):
                    col = vec.get(j)
                    nc.vector.tensor_tensor(res if k == len(steps) - 1 else y, y, col[:blk.p], op, dtype=FP32)
                    vec.done(col)
                blk.store(O, ch, res)
                nc.release_to(mark)
            for t in (shift, r, m2, m):
                nc.release(t)


def _ln_affine_fma(nc, res: Tile, t: Tile, r: Tile, shift: Tile, cols: list, has_w: bool, has_b: bool,
                   p: int) -> None:
    """res = fma(x * rstd - mean * rstd, gamma, beta): the normalised value on ScalarE (exact for constant rows,
    see _moments), the affine step rounded once on GpSimd as CPU's (see _layer_norm_launch); ``cols`` are the
    (vector, chunk tile) of gamma and beta present."""

    y = nc.sbuf_tile(t.shape, FP32)
    nc.scalar.activation(y, t, "identity", scale=r, bias=shift)  # (x - mean) * rstd, as the engine path

    def program(o, x, *wb):
        gamma = wb[0] if has_w else np.float32(1.0)
        beta = wb[-1] if has_b else np.float32(0.0)
        o[...] = fma32(x, gamma, beta)

    nc.gpsimd.run("ln_fma", program, (res,), (y,) + tuple(col[:p] for _, col in cols),
                  elements=t.data.size, factor=_FMA_STEPS)
    for vec, col in cols:
        vec.done(col)


TABLE.serves("aten::native_layer_norm.out", "aten::native_layer_norm")


@_kernel("aten::native_layer_norm_backward")
def _layer_norm_backward(a: dict):
    dy, x, mean, rstd = a["grad_out"], a["input"], a["mean"], a["rstd"]
    w, b, mask = a.get("weight"), a.get("bias"), list(a["output_mask"])
    axis = _ln_check(x, a["normalized_shape"], w, b)
    if x.dtype not in _FLOATS:
        raise _refuse("LayerNormBackwardKernelImpl", x.dtype)
    if (mask[1] and w is None) or (mask[2] and b is None):
        raise RuntimeError("tensor does not have a device")
    dx = new_output(tuple(x.shape), x.dtype, x) if mask[0] else None
    dw = new_output(tuple(w.shape), w.dtype, x) if mask[1] else None
    db = new_output(tuple(b.shape), b.dtype, x) if mask[2] else None
    kdims, rdims = list(range(axis)), list(range(axis, x.dim()))
    order = kdims + rdims
    kr = [hbm(dy).transpose(order), hbm(x).transpose(order)] + ([hbm(dx).transpose(order)] if dx is not None else [])
    r = [hbm(t) for t in (w, dw, db) if t is not None]
    g = _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in rdims], kr=kr,
              k=[_kept_view(mean, rdims, x.dim()), _kept_view(rstd, rdims, x.dim())], r=r)
    DY, X = g.kr[0], g.kr[1]
    DX = g.kr[2] if dx is not None else None
    params = iter(g.r)
    W = next(params) if w is not None else None
    DW = next(params) if dw is not None else None
    DB = next(params) if db is not None else None
    n = g.cols
    with launch("layer_norm_backward", x.device.index) as nc:
        if g.rows == 0 or n == 0:
            for view in (DW, DB):
                if view is not None:
                    _fill(nc, view, 0.0, FP32)
            return dx, dw, db
        chunks = list(_boxes(g.rshape, CHUNK))
        wv = _ColVec(nc, W, chunks, n <= PARAM_COLS) if W is not None else None
        # parameter gradients accumulate next to the row pass when their [1, n] accumulators are small
        fused = n <= RESIDENT_COLS and (DW is not None or DB is not None)
        ones = _ones(nc)
        acc_w = _memset(nc, (1, n), FP32, 0.0) if fused and DW is not None else None
        acc_b = _memset(nc, (1, n), FP32, 0.0) if fused and DB is not None else None
        for blk in _blocks(nc, g, [DY, X]):
            p = blk.p
            m = _load_scalars(nc, _at(g.k[0], blk.rsl), p)
            rs = _load_scalars(nc, _at(g.k[1], blk.rsl), p)
            ds, dsum = _row_scalar(nc, p), _row_scalar(nc, p)  # sum(dy w x), sum(dy w)
            nm = _row_scalar(nc, p)  # -mean * rstd: (x - mean) * rstd is one ScalarE instruction
            nc.vector.tensor_tensor(nm, m, rs, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(nm, nm, "multiply", -1.0, dtype=FP32)
            for j, (ch, (tdy, tx)) in enumerate(blk.each(0, 1)):
                mark = nc.mark()
                dyw = _times_col(nc, tdy, wv, j)
                prod = nc.sbuf_tile(tdy.shape, FP32)
                nc.vector.tensor_tensor(prod, dyw, tx, "multiply", dtype=FP32)
                if j == 0:
                    nc.vector.tensor_reduce(ds, prod, "add", dtype=FP32)
                    nc.vector.tensor_reduce(dsum, dyw, "add", dtype=FP32)
                else:
                    part = _row_scalar(nc, p)
                    nc.vector.tensor_reduce(part, prod, "add", dtype=FP32)
                    _combine(nc, ds, part, "add", FP32)
                    nc.vector.tensor_reduce(part, dyw, "add", dtype=FP32)
                    _combine(nc, dsum, part, "add", FP32)
                if acc_w is not None:  # dy * (x - mean) * rstd
                    xhat = nc.sbuf_tile(tdy.shape, FP32)
                    nc.scalar.activation(xhat, tx, "identity", scale=rs, bias=nm)
                    nc.vector.tensor_tensor(xhat, xhat, tdy, "multiply", dtype=FP32)
                    _colsum_into(nc, acc_w, ch[0], xhat, ones)
                if acc_b is not None:
                    _colsum_into(nc, acc_b, ch[0], tdy, ones)
                nc.release_to(mark)
            if DX is not None:
                # b = (dsum * mean - ds) * rstd^3 / n ; c = -b * mean - dsum * rstd / n ; dx = rstd dy w + b x + c
                mark = nc.mark()
                cb, cc, t1 = _row_scalar(nc, p), _row_scalar(nc, p), _row_scalar(nc, p)
                nc.vector.tensor_tensor(cb, dsum, m, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(cb, cb, ds, "subtract", dtype=FP32)
                nc.vector.tensor_tensor(t1, rs, rs, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(t1, t1, rs, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(cb, cb, t1, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(cb, cb, "divide", float(n), dtype=FP32)
                nc.vector.tensor_tensor(cc, cb, m, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(t1, dsum, rs, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(t1, t1, "divide", float(n), dtype=FP32)
                nc.vector.tensor_tensor(cc, cc, t1, "add", dtype=FP32)
                nc.vector.tensor_scalar(cc, cc, "multiply", -1.0, dtype=FP32)
                for j, (ch, (tdy, tx)) in enumerate(blk.each(0, 1)):
                    inner = nc.mark()
                    dyw = _times_col(nc, tdy, wv, j)
                    lin = nc.sbuf_tile(tdy.shape, FP32)
                    nc.scalar.activation(lin, tx, "identity", scale=cb, bias=cc)
                    scaled = nc.sbuf_tile(tdy.shape, FP32)
                    nc.scalar.activation(scaled, dyw, "identity", scale=rs)
                    res = nc.sbuf_tile(tdy.shape, DX.dtype)
                    nc.vector.tensor_tensor(res, scaled, lin, "add", dtype=FP32)
                    blk.store(DX, ch, res)
                    nc.release_to(inner)
                nc.release_to(mark)
            for t in (nm, dsum, ds, rs, m):
                nc.release(t)
        if fused:
            for acc, view in ((acc_w, DW), (acc_b, DB)):
                if acc is not None:
                    _store_row(nc, view, acc)
        elif DW is not None or DB is not None:
            _column_sums(nc, g, DY, X, DW, DB, ones)
    return dx, dw, db


def _times_col(nc, t: Tile, vec: _ColVec | None, j: int) -> Tile:
    """t * w (per column) in fp32, or t itself without weights."""
    if vec is None:
        return t
    col = vec.get(j)
    out = nc.sbuf_tile(t.shape, FP32)
    nc.vector.tensor_tensor(out, t, col[:t.partitions], "multiply", dtype=FP32)
    vec.done(col)
    return out


def _store_row(nc, view: np.ndarray, acc: Tile) -> None:
    """A [1, n] fp32 accumulator into an HBM vector over R (cast to its dtype)."""
    res = nc.sbuf_tile(acc.shape, view.dtype)
    nc.vector.tensor_copy(res, acc)
    nc.dma.store(view, res)
    nc.release(res)


def _column_sums(nc, g: _Grid, DY: np.ndarray, X: np.ndarray, DW, DB, ones: Tile) -> None:
    """dw = sum over rows of dy * (x - mean) * rstd, db = sum of dy, column chunk by column chunk (for rows
    too long to keep the parameter accumulators next to the row pass)."""
    blocks = list(_boxes(g.kshape, P))
    for _, f, csl in _boxes(g.rshape, PE_CHUNK):
        banks = {k: nc.psum_tile((1, f), FP32) for k, v in (("w", DW), ("b", DB)) if v is not None}
        for j, (_, p, rsl) in enumerate(blocks):
            mark = nc.mark()
            tdy = nc.sbuf_tile((p, f), DY.dtype)
            nc.dma.load(tdy, _at(DY, rsl + csl))
            if "w" in banks:
                tx = nc.sbuf_tile((p, f), X.dtype)
                nc.dma.load(tx, _at(X, rsl + csl))
                m = _load_scalars(nc, _at(g.k[0], rsl), p)
                rs = _load_scalars(nc, _at(g.k[1], rsl), p)
                nc.vector.tensor_tensor(m, m, rs, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(m, m, "multiply", -1.0, dtype=FP32)  # -mean * rstd
                xhat = nc.sbuf_tile((p, f), FP32)
                nc.scalar.activation(xhat, tx, "identity", scale=rs, bias=m)
                nc.vector.tensor_tensor(xhat, xhat, tdy, "multiply", dtype=FP32)
                nc.tensor.matmul(banks["w"], ones[:p], xhat, accumulate=j > 0)
            if "b" in banks:
                nc.tensor.matmul(banks["b"], ones[:p], tdy, accumulate=j > 0)
            nc.release_to(mark)
        for k, view in (("w", DW), ("b", DB)):
            if k in banks:
                _store_row(nc, _at(view, csl), banks[k])
                nc.release(banks[k])


# --- group norm --------------------------------------------------------------------------------------

def _grouped(t: torch.Tensor, groups: int) -> np.ndarray:
    """(N, C, *spatial) -> HBM view (N, G, C/G, *spatial)."""
    v = hbm(t)
    n, c = t.shape[0], t.shape[1]
    d = c // groups
    s = v.strides
    return as_strided(v, (n, groups, d) + v.shape[2:], (s[0], d * s[1], s[1]) + s[2:])


def _per_channel(stat: np.ndarray, d: int) -> np.ndarray:
    """(N, G) per-group values seen as (N, G, D): every channel of a group reads its group's value."""
    return as_strided(stat, stat.shape + (d,), stat.strides + (0,))


def _channel_param(param: np.ndarray, n: int, groups: int) -> np.ndarray:
    """A (C,) parameter seen as (N, G, D)."""
    d = param.shape[0] // groups
    s = param.strides[0]
    return as_strided(param, (n, groups, d), (0, d * s, s))


def _gn_check(x: torch.Tensor, w, b, n: int, c: int, hw: int, groups: int) -> None:
    if groups <= 0 or c % groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(x.shape)} and num_groups={groups}")
    for name, p in (("weight", w), ("bias", b)):
        if p is not None and (p.dim() != 1 or p.numel() != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(p.shape)} and input of shape {list(x.shape)}")
    if x.numel() != n * c * hw or x.dim() < 2 or x.shape[0] != n or x.shape[1] != c:
        raise RuntimeError(f"Expected input to have {n * c * hw} elements of shape [N={n}, C={c}, *] with HxW={hw}, "
                           f"but got input of shape {list(x.shape)}")


def _scratch(shape, like: torch.Tensor) -> torch.Tensor:
    """An fp32 device buffer for intermediates a kernel writes and reads back (HBM scratch)."""
    return torch.empty(tuple(shape), dtype=torch.float32, device=like.device)


@_kernel("aten::native_group_norm")
def _group_norm(a: dict):
    x, w, b, eps = a["input"], a.get("weight"), a.get("bias"), float(a["eps"])
    n, c, hw, groups = int(a["N"]), int(a["C"]), int(a["HxW"]), int(a["group"])
    _gn_check(x, w, b, n, c, hw, groups)
    if x.dtype not in _FLOATS:
        raise _refuse("GroupNormKernelImpl", x.dtype)
    _check_mixed(x, w, b)
    sdtype = _stats_dtype(x, w, b)
    out = new_output(tuple(x.shape), x.dtype, x)
    mean, rstd = new_output((n, groups), sdtype, x), new_output((n, groups), sdtype, x)
    if mean.numel() == 0:
        return out, mean, rstd
    d = c // groups
    count = d * hw
    spatial = list(x.shape[2:])
    xg, og = _grouped(x, groups), _grouped(out, groups)
    # fp32 copies of the statistics for the normalisation pass (the outputs may be bf16/fp16)
    fmean = mean if sdtype == torch.float32 else _scratch((n, groups), x)
    frstd = rstd if sdtype == torch.float32 else _scratch((n, groups), x)
    with launch("group_norm", x.device.index) as nc:
        if count == 0:
            _fill(nc, hbm(mean), 0.0, FP32)
            _fill(nc, hbm(rstd), np.nan, FP32)
            return out, mean, rstd
        stats = _Grid([n, groups], [d] + spatial, kr=[xg],
                      k=[hbm(mean), hbm(rstd)] + ([hbm(fmean), hbm(frstd)] if fmean is not mean else []))
        for blk in _blocks(nc, stats, stats.kr):
            m, m2 = _moments(nc, blk, count)
            r = _rstd(nc, m2, count, eps)
            for view, t in zip(stats.k, (m, r, m, r)):
                _store_scalars(nc, _at(view, blk.rsl), t)
            for t in (r, m2, m):
                nc.release(t)
        params = [_channel_param(hbm(p), n, groups) for p in (w, b) if p is not None]
        norm = _Grid([n, groups, d], spatial, kr=[xg, og],
                     k=[_per_channel(hbm(fmean), d), _per_channel(hbm(frstd), d)] + params)
        X, O = norm.kr
        for blk in _blocks(nc, norm, [X]):
            p = blk.p
            mark = nc.mark()
            m = _load_scalars(nc, _at(norm.k[0], blk.rsl), p)
            scale = _load_scalars(nc, _at(norm.k[1], blk.rsl), p)
            ks = iter(norm.k[2:])
            if w is not None:
                wt = _load_scalars(nc, _at(next(ks), blk.rsl), p)
                nc.vector.tensor_tensor(scale, scale, wt, "multiply", dtype=FP32)
            shift = _row_scalar(nc, p)  # b - mean * scale
            nc.vector.tensor_tensor(shift, m, scale, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(shift, shift, "multiply", -1.0, dtype=FP32)
            if b is not None:
                bt = _load_scalars(nc, _at(next(ks), blk.rsl), p)
                nc.vector.tensor_tensor(shift, shift, bt, "add", dtype=FP32)
            for ch, (t,) in blk.each(0):
                res = nc.sbuf_tile(t.shape, O.dtype)
                nc.scalar.activation(res, t, "identity", scale=scale, bias=shift)
                blk.store(O, ch, res)
                nc.release(res)
            nc.release_to(mark)
    return out, mean, rstd


TABLE.serves("aten::native_group_norm.out", "aten::native_group_norm")


# torch 2.14's native_group_norm_backward returns weight and bias gradients (in the input's dtype) when
# asked for them without a weight; 2.13 raised "tensor does not have a device". Found by the compat run.
_GROUP_NORM_GRADS_WITHOUT_WEIGHT = torch_at_least(2, 14)


@_kernel("aten::native_group_norm_backward")
def _group_norm_backward(a: dict):
    dy, x, mean, rstd, w = a["grad_out"], a["input"], a["mean"], a["rstd"], a.get("weight")
    n, c, hw, groups = int(a["N"]), int(a["C"]), int(a["HxW"]), int(a["group"])
    mask = list(a["output_mask"])
    _gn_check(x, w, None, n, c, hw, groups)
    if x.dtype not in _FLOATS:
        raise _refuse("GroupNormBackwardKernelImpl", x.dtype)
    if (mask[1] or mask[2]) and w is None and not _GROUP_NORM_GRADS_WITHOUT_WEIGHT:
        raise RuntimeError("tensor does not have a device")
    param_dtype = w.dtype if w is not None else x.dtype
    dx = new_output(tuple(x.shape), x.dtype, x) if mask[0] else None
    dw = new_output((c,), param_dtype, x) if mask[1] else None
    db = new_output((c,), param_dtype, x) if mask[2] else None
    d = c // groups
    spatial = list(x.shape[2:])
    with launch("group_norm_backward", x.device.index) as nc:
        if n == 0 or c == 0:
            for t in (dw, db):
                if t is not None:
                    _fill(nc, hbm(t), 0.0, FP32)
            return dx, dw, db
        # pass A: ds = sum(dy * x), db = sum(dy) per (n, c)
        ds_buf, db_buf = _scratch((n, c), x), _scratch((n, c), x)
        rows = _Grid([n, groups, d], spatial, kr=[_grouped(dy, groups), _grouped(x, groups)] +
                     ([_grouped(dx, groups)] if dx is not None else []),
                     k=[hbm(ds_buf).reshape(n, groups, d), hbm(db_buf).reshape(n, groups, d)])
        DY, X = rows.kr[0], rows.kr[1]
        for blk in _blocks(nc, rows, [DY, X]):
            p = blk.p
            s1, s2 = _row_scalar(nc, p), _row_scalar(nc, p)
            if hw == 0:
                nc.vector.memset(s1, 0.0)
                nc.vector.memset(s2, 0.0)
            for j, (_, (tdy, tx)) in enumerate(blk.each(0, 1)):
                mark = nc.mark()
                prod = nc.sbuf_tile(tdy.shape, FP32)
                nc.vector.tensor_tensor(prod, tdy, tx, "multiply", dtype=FP32)
                a1 = s1 if j == 0 else _row_scalar(nc, p)
                a2 = s2 if j == 0 else _row_scalar(nc, p)
                nc.vector.tensor_reduce(a1, prod, "add", dtype=FP32)
                nc.vector.tensor_reduce(a2, tdy, "add", dtype=FP32)
                if j:
                    _combine(nc, s1, a1, "add", FP32)
                    _combine(nc, s2, a2, "add", FP32)
                nc.release_to(mark)
            nc.dma.store(_at(rows.k[0], blk.rsl), s1)
            nc.dma.store(_at(rows.k[1], blk.rsl), s2)
            nc.release(s2)
            nc.release(s1)
        # per (n, g): the coefficients of dx = c1 * dy + c2 * x + c3, and the parameter gradients
        coef = [_scratch((n, c), x) for _ in range(3)]
        s = 1.0 / (d * hw) if d * hw else 0.0
        ones = _ones(nc)
        acc_w = _memset(nc, (1, c), FP32, 0.0) if dw is not None else None
        acc_b = _memset(nc, (1, c), FP32, 0.0) if db is not None else None
        gamma = _broadcast_row(nc, hbm(w), c, FP32) if w is not None else None
        mv, rv = hbm(mean), hbm(rstd)
        for n0 in range(0, n, P):
            n1 = min(n, n0 + P)
            pn = n1 - n0
            mark = nc.mark()
            tds, tdb = nc.sbuf_tile((pn, c), FP32), nc.sbuf_tile((pn, c), FP32)
            nc.dma.load(tds, hbm(ds_buf)[n0:n1])
            nc.dma.load(tdb, hbm(db_buf)[n0:n1])
            tm = _load_block(nc, mv[n0:n1], (pn, groups))
            tr = _load_block(nc, rv[n0:n1], (pn, groups))
            c1, c2, c3 = (nc.sbuf_tile((pn, c), FP32) for _ in range(3))
            pw = nc.sbuf_tile((pn, c), FP32) if acc_w is not None else None
            for gi in range(groups):
                cols = slice(gi * d, (gi + 1) * d)
                inner = nc.mark()
                mg, rg = tm[:, gi:gi + 1], tr[:, gi:gi + 1]
                sw, sb = _row_scalar(nc, pn), _row_scalar(nc, pn)
                if gamma is not None:
                    tmp = nc.sbuf_tile((pn, d), FP32)
                    nc.vector.tensor_tensor(tmp, tds[:, cols], gamma[:pn, cols], "multiply", dtype=FP32)
                    nc.vector.tensor_reduce(sw, tmp, "add", dtype=FP32)
                    nc.vector.tensor_tensor(tmp, tdb[:, cols], gamma[:pn, cols], "multiply", dtype=FP32)
                    nc.vector.tensor_reduce(sb, tmp, "add", dtype=FP32)
                    nc.vector.tensor_tensor(c1[:, cols], gamma[:pn, cols], rg, "multiply", dtype=FP32)
                else:
                    nc.vector.tensor_reduce(sw, tds[:, cols], "add", dtype=FP32)
                    nc.vector.tensor_reduce(sb, tdb[:, cols], "add", dtype=FP32)
                    zero = _memset(nc, (pn, d), FP32, 0.0)
                    nc.vector.tensor_tensor(c1[:, cols], zero, rg, "add", dtype=FP32)
                # c2 = (db * mean - ds) * rstd^3 * s ; c3 = -c2 * mean - db * rstd * s
                k2, k3, r3 = _row_scalar(nc, pn), _row_scalar(nc, pn), _row_scalar(nc, pn)
                nc.vector.tensor_tensor(k2, sb, mg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(k2, k2, sw, "subtract", dtype=FP32)
                nc.vector.tensor_tensor(r3, rg, rg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(r3, r3, rg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(k2, k2, r3, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(k2, k2, "multiply", s, dtype=FP32)
                nc.vector.tensor_tensor(k3, k2, mg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(r3, sb, rg, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(r3, r3, "multiply", s, dtype=FP32)
                nc.vector.tensor_tensor(k3, k3, r3, "add", dtype=FP32)
                nc.vector.tensor_scalar(k3, k3, "multiply", -1.0, dtype=FP32)
                zero = _memset(nc, (pn, d), FP32, 0.0)
                nc.vector.tensor_tensor(c2[:, cols], zero, k2, "add", dtype=FP32)
                nc.vector.tensor_tensor(c3[:, cols], zero, k3, "add", dtype=FP32)
                if pw is not None:  # (ds - db * mean) * rstd
                    nc.vector.tensor_tensor(pw[:, cols], tdb[:, cols], mg, "multiply", dtype=FP32)
                    nc.vector.tensor_tensor(pw[:, cols], tds[:, cols], pw[:, cols], "subtract", dtype=FP32)
                    nc.vector.tensor_tensor(pw[:, cols], pw[:, cols], rg, "multiply", dtype=FP32)
                nc.release_to(inner)
            for buf, t in zip(coef, (c1, c2, c3)):
                nc.dma.store(hbm(buf)[n0:n1], t)
            if acc_w is not None:
                _colsum_into(nc, acc_w, 0, pw, ones)
            if acc_b is not None:
                _colsum_into(nc, acc_b, 0, tdb, ones)
            nc.release_to(mark)
        for acc, t in ((acc_w, dw), (acc_b, db)):
            if acc is not None:
                _store_row(nc, hbm(t), acc)
        # pass B: dx = c1 * dy + c2 * x + c3
        if dx is not None:
            cv = [hbm(t).reshape(n, groups, d) for t in coef]
            DX = rows.kr[2]
            g2 = _Grid([n, groups, d], spatial, kr=[_grouped(dy, groups), _grouped(x, groups), _grouped(dx, groups)],
                       k=cv)
            DY, X, DX = g2.kr
            for blk in _blocks(nc, g2, [DY, X]):
                p = blk.p
                mark = nc.mark()
                k1, k2, k3 = (_load_scalars(nc, _at(v, blk.rsl), p) for v in g2.k)
                for ch, (tdy, tx) in blk.each(0, 1):
                    inner = nc.mark()
                    lin = nc.sbuf_tile(tdy.shape, FP32)
                    nc.scalar.activation(lin, tx, "identity", scale=k2, bias=k3)
                    sc = nc.sbuf_tile(tdy.shape, FP32)
                    nc.vector.tensor_tensor(sc, tdy, k1, "multiply", dtype=FP32)
                    res = nc.sbuf_tile(tdy.shape, DX.dtype)
                    nc.vector.tensor_tensor(res, sc, lin, "add", dtype=FP32)
                    blk.store(DX, ch, res)
                    nc.release_to(inner)
                nc.release_to(mark)
    return dx, dw, db


def _load_block(nc, view: np.ndarray, shape) -> Tile:
    """A 2-D HBM block as an fp32 tile (cast on VectorE when stored narrower)."""
    t = nc.sbuf_tile(shape, view.dtype)
    nc.dma.load(t, view)
    if t.dtype == FP32:
        return t
    c = nc.sbuf_tile(shape, FP32)
    nc.vector.tensor_copy(c, t)
    return c


# --- batch norm --------------------------------------------------------------------------------------

def _channels_first(t: torch.Tensor) -> np.ndarray:
    """(N, C, *spatial) -> HBM view (C, N, *spatial)."""
    return hbm(t).transpose([1, 0] + list(range(2, t.dim())))


def _bn_check(x: torch.Tensor, params: Sequence[torch.Tensor | None]) -> int:
    if x.numel() == 0:
        raise RuntimeError(f"input tensor must have at least one element, but got input_sizes = {list(x.shape)}")
    c = x.shape[_wrap(1, x.dim())] if x.dim() >= 2 else x.size(1)
    if x.dtype not in _FLOATS:
        raise _refuse("batch_norm", x.dtype)
    for p in params:
        if p is not None and p.numel() != c:
            raise RuntimeError(f"running_mean should contain {c} elements not {p.numel()}")
    return c


_FMA_STEPS = 4  # GpSimd element-steps per emulated fma (as elementwise._FMA_STEPS)
_STATS64_STEPS = 3  # GpSimd element-steps per element of a double-accumulated statistic


def _bn_layout(x: torch.Tensor) -> str:
    """Which of CPU's batch-norm statistics paths ``x`` takes (batch_norm_cpu_update_stats_template)."""
    if x.is_contiguous():  # an image size of 1 (N, C) is "also channels last" to CPU's collect_stats
        return "contiguous" if x.numel() // max(x.shape[0] * x.shape[1], 1) != 1 else "channels_last"
    if (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)) or (
            x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d)):
        return "channels_last"
    return "strided"


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


def _bn_stats(nc, blk: _Block, n: int, eps: float, layout: str) -> tuple[Tile, Tile, Tile]:
    """Training statistics of a block of channels as CPU computes them for float32 (acc_type double):
    (mean, sum of squared deviations, invstd), [p, 1] fp32 each.

    CPU's contiguous path (batch_norm_cpu_collect_stats_contiguous_impl) sums x in double, rounds the mean
    to float, adds (x - mean)^2 computed in float into a double and stores that sum as float (so a squared
    deviation above ~1.8e19 makes it inf and invstd 0); its strided path takes at::mean (a float sum) and
    adds (x - mean)^2 in double, keeping var_sum / n in double for invstd (so |x| near 1e30 still gives a
    finite invstd). No fixed-function engine computes in double; the simulator runs these sums as GpSimd
    programs in double (a real kernel would carry compensated fp32 pairs there) to match CPU's acc_type.
    The channels-last path, and bfloat16/float16 inputs (acc_type float), accumulate in float as the
    engines do (_moments)."""
    p = blk.p
    if layout == "channels_last" or blk.arrays[0].dtype != FP32:
        mean, m2 = _moments(nc, blk, n)
        return mean, m2, _rstd(nc, m2, n, eps)
    mean, m2, inv = _row_scalar(nc, p), _row_scalar(nc, p), _row_scalar(nc, p)
    if layout == "contiguous":
        total = _row_sum64(nc, blk, lambda x: x.astype(np.float64), "bn_sum64")

        def to_mean(o, t):
            o[...] = t / max(n, 1)

        nc.gpsimd.run("bn_mean", to_mean, (mean,), (total,), elements=p)
        nc.release(total)

        def squares(x, mf):  # (x - mean) * (x - mean) in float, as CPU's scalar_t arithmetic
            d = x.astype(FP32) - mf
            return (d * d).astype(np.float64)

        vsum = _row_sum64(nc, blk, squares, "bn_var64", about=mean)

        def finish(o_m2, o_inv, v):
            v32 = v.astype(FP32)  # CPU stores the double sum in a float tensor
            o_m2[...] = v32
            o_inv[...] = 1.0 / np.sqrt(v32.astype(np.float64) / max(n, 1) + eps)
    else:
        total = _row_reduce(nc, blk, 0, "add")
        nc.vector.tensor_scalar(mean, total, "divide", float(max(n, 1)), dtype=FP32)
        nc.release(total)

        def squares(x, mf):  # in double: CPU's accscalar_t mean
            d = x.astype(np.float64) - mf.astype(np.float64)
            return d * d

        vsum = _row_sum64(nc, blk, squares, "bn_var64", about=mean)

        def finish(o_m2, o_inv, v):
            o_m2[...] = v
            o_inv[...] = 1.0 / np.sqrt(v / max(n, 1) + eps)

    with np.errstate(all="ignore"):
        nc.gpsimd.run("bn_invstd", finish, (m2, inv), (vsum,), elements=p, factor=4.0)
    nc.release(vsum)
    return mean, m2, inv


def _batch_norm(x, w, b, rm, rv, training: bool, momentum: float, eps: float, outs=None):
    c = _bn_check(x, (w, b, rm, rv))
    _check_mixed(x, w, b, rm, rv)
    if not training and (rm is None or rv is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    sdtype = _stats_dtype(x, w, b, rm, rv)
    stat_shape = (c,) if training else (0,)
    if outs is None:
        out = new_output(tuple(x.shape), x.dtype, x)
        save_mean, save_invstd = new_output(stat_shape, sdtype, x), new_output(stat_shape, sdtype, x)
    else:
        out, save_mean, save_invstd = outs
        check_out(out, tuple(x.shape), x.dtype, [x])
        check_out(save_mean, stat_shape, sdtype, [x])
        check_out(save_invstd, stat_shape, sdtype, [x])
    count = x.numel() // c
    spatial = list(x.shape[2:])
    ks = {}
    for name, t in (("mean", save_mean if training else None), ("invstd", save_invstd if training else None),
                    ("rm", rm), ("rv", rv), ("w", w), ("b", b)):
        if t is not None:
            ks[name] = len(ks), hbm(t)
    g = _Grid([c], [x.shape[0]] + spatial, kr=[_channels_first(x), _channels_first(out)], k=[v for _, v in ks.values()])
    X, O = g.kr

    def view(name, blk):
        return _at(g.k[ks[name][0]], blk.rsl)

    layout = _bn_layout(x)
    # CPU's contiguous and channels-last float32 kernels apply out = x * alpha + beta with vec::fmadd, one
    # rounding where this process's ATen kernels fuse (so x * alpha beyond float's range still gives beta's
    # infinity, not inf - inf = NaN); ScalarE rounds the product first, so those layouts take GpSimd's fma.
    fused = x.dtype == torch.float32 and layout != "strided" and cpu_host.fused_multiply_add()
    # CPU's strided path (batch_norm_cpu_transform_input_template) applies ((x - mean) * invstd) * w + b
    # elementwise in float, each step rounded (so x * invstd * w beyond float's range where (x - mean) * invstd
    # is not keeps CPU's finite value, and no alpha/beta fold makes an inf - inf NaN)
    stepwise = x.dtype == torch.float32 and layout == "strided"
    with launch("batch_norm", x.device.index) as nc:
        for blk in _blocks(nc, g, [X]):
            p = blk.p
            mark = nc.mark()
            if training:
                m, m2, inv = _bn_stats(nc, blk, count, eps, layout)
                _store_scalars(nc, view("mean", blk), m)
                _store_scalars(nc, view("invstd", blk), inv)
                if rm is not None:  # running = momentum * batch + (1 - momentum) * running (unbiased var)
                    for name, batch in (("rm", m), ("rv", m2)):
                        if name not in ks:
                            continue
                        stat = batch
                        if name == "rv":
                            stat = _row_scalar(nc, p)
                            nc.vector.tensor_scalar(stat, m2, "divide", float(count - 1), dtype=FP32)
                        old = _load_scalars(nc, view(name, blk), p)
                        new = _row_scalar(nc, p)
                        nc.vector.tensor_scalar(new, stat, "multiply", float(momentum), dtype=FP32)
                        nc.vector.tensor_scalar(old, old, "multiply", 1.0 - float(momentum), dtype=FP32)
                        nc.vector.tensor_tensor(new, new, old, "add", dtype=FP32)
                        _store_scalars(nc, view(name, blk), new)
            else:
                m = _load_scalars(nc, view("rm", blk), p)
                var = _load_scalars(nc, view("rv", blk), p)
                inv = _row_scalar(nc, p)
                if stepwise:  # tensor ops in float: 1 / sqrt(running_var + eps), each step rounded
                    nc.vector.tensor_scalar(inv, var, "add", float(eps), dtype=FP32)
                    nc.scalar.activation(inv, inv, "sqrt")
                    nc.scalar.activation(inv, inv, "reciprocal")
                else:
                    nc.scalar.activation(inv, var, "rsqrt", bias=float(eps))
            if stepwise:
                _bn_stepwise(nc, blk, O, m, inv, view("w", blk) if "w" in ks else None,
                             view("b", blk) if "b" in ks else None)
                nc.release_to(mark)
                continue
            scale = _row_scalar(nc, p)
            if "w" in ks:
                wt = _load_scalars(nc, view("w", blk), p)
                nc.vector.tensor_tensor(scale, inv, wt, "multiply", dtype=FP32)
            else:
                nc.vector.tensor_copy(scale, inv)
            shift = _row_scalar(nc, p)  # b - mean * scale
            nc.vector.tensor_tensor(shift, m, scale, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(shift, shift, "multiply", -1.0, dtype=FP32)
            if "b" in ks:
                bt = _load_scalars(nc, view("b", blk), p)
                nc.vector.tensor_tensor(shift, shift, bt, "add", dtype=FP32)
            for ch, (t,) in blk.each(0):
                res = nc.sbuf_tile(t.shape, O.dtype)
                if fused:
                    _fma_rows(nc, res, t, scale, shift)
                else:
                    nc.scalar.activation(res, t, "identity", scale=scale, bias=shift)
                blk.store(O, ch, res)
                nc.release(res)
            nc.release_to(mark)
    return out, save_mean, save_invstd


def _bn_stepwise(nc, blk: _Block, O, m: Tile, inv: Tile, wview, bview) -> None:
    """out = ((x - mean) * invstd) * w + b, each step rounded to fp32 (CPU's strided path; an absent weight
    is 1 and an absent bias 0, added as CPU adds its zeros: -0.0 becomes +0.0)."""
    p = blk.p
    nm = _row_scalar(nc, p)
    nc.vector.tensor_scalar(nm, m, "multiply", -1.0, dtype=FP32)
    wt = _load_scalars(nc, wview, p) if wview is not None else None
    bt = _load_scalars(nc, bview, p) if bview is not None else None
    for ch, (t,) in blk.each(0):
        step = nc.sbuf_tile(t.shape, FP32)
        nc.scalar.activation(step, t, "identity", bias=nm)
        nc.scalar.activation(step, step, "identity", scale=inv)
        if wt is not None:
            nc.scalar.activation(step, step, "identity", scale=wt)
        res = nc.sbuf_tile(t.shape, O.dtype)
        if bt is not None:
            nc.vector.tensor_tensor(res, step, bt, "add", dtype=FP32)
        else:
            nc.vector.tensor_scalar(res, step, "add", 0.0, dtype=FP32)
        blk.store(O, ch, res)
        nc.release(res)
        nc.release(step)


def _fma_rows(nc, out: Tile, t: Tile, scale: Tile, shift: Tile) -> None:
    """out = t * scale + shift ([p, 1] per-row scale and shift) rounded once, on GpSimd (see _batch_norm)."""

    def program(o, x, a, c):
        o[...] = fma32(x, np.broadcast_to(a, x.shape), np.broadcast_to(c, x.shape))

    nc.gpsimd.run("bn_fma", program, (out,), (t, scale, shift), elements=t.data.size, factor=_FMA_STEPS)


def _bn_args(a: dict, with_stats: bool = True):
    return (a["input"], a.get("weight"), a.get("bias"), a.get("running_mean") if with_stats else None,
            a.get("running_var") if with_stats else None)


@_kernel("aten::native_batch_norm")
def _native_batch_norm(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]))


@_kernel("aten::native_batch_norm.out")
def _native_batch_norm_out(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]),
                       outs=(a["out"], a["save_mean"], a["save_invstd"]))


@_kernel("aten::_native_batch_norm_legit", serves=("aten::_native_batch_norm_legit_no_training",))
def _batch_norm_legit(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]))


@_kernel("aten::_native_batch_norm_legit.out")
def _batch_norm_legit_out(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]),
                       outs=(a["out"], a["save_mean"], a["save_invstd"]))


@_kernel("aten::_native_batch_norm_legit.no_stats")
def _batch_norm_legit_no_stats(a: dict):
    return _batch_norm(*_bn_args(a, False), bool(a["training"]), float(a["momentum"]), float(a["eps"]))


@_kernel("aten::_native_batch_norm_legit.no_stats_out")
def _batch_norm_legit_no_stats_out(a: dict):
    return _batch_norm(*_bn_args(a, False), bool(a["training"]), float(a["momentum"]), float(a["eps"]),
                       outs=(a["out"], a["save_mean"], a["save_invstd"]))


@_kernel("aten::native_batch_norm_backward")
def _batch_norm_backward(a: dict):
    dy, x, w = a["grad_out"], a["input"], a.get("weight")
    rm, rv, sm, si = a.get("running_mean"), a.get("running_var"), a.get("save_mean"), a.get("save_invstd")
    train, eps, mask = bool(a["train"]), float(a["eps"]), list(a["output_mask"])
    c = _bn_check(x, (w, sm, si) if train else (w, rm, rv))
    if train and (sm is None or si is None):
        raise RuntimeError("save_mean and save_invstd must be defined in training mode")
    if not train and (rm is None or rv is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    pdtype = w.dtype if w is not None else _stats_dtype(x, *((sm, si) if train else (rm, rv)))
    dx = new_output(tuple(x.shape), x.dtype, x) if mask[0] else None
    dw = new_output((c,), pdtype, x) if mask[1] else None
    db = new_output((c,), pdtype, x) if mask[2] else None
    count = x.numel() // c
    spatial = list(x.shape[2:])
    ks = {}
    for name, t in (("mean", sm if train else rm), ("stat", si if train else rv), ("w", w), ("dw", dw), ("db", db)):
        if t is not None:
            ks[name] = len(ks), hbm(t)
    kr = [_channels_first(dy), _channels_first(x)] + ([_channels_first(dx)] if dx is not None else [])
    g = _Grid([c], [x.shape[0]] + spatial, kr=kr, k=[v for _, v in ks.values()])
    DY, X = g.kr[0], g.kr[1]

    def view(name, blk):
        return _at(g.k[ks[name][0]], blk.rsl)

    with launch("batch_norm_backward", x.device.index) as nc:
        for blk in _blocks(nc, g, [DY, X]):
            p = blk.p
            mark = nc.mark()
            m = _load_scalars(nc, view("mean", blk), p)
            inv = _load_scalars(nc, view("stat", blk), p)
            if not train:  # CPU: invstd = 1 / std::sqrt(running_var + eps) in double (eps is a double), then float
                var, inv = inv, _row_scalar(nc, p)

                def invstd64(o_inv, v):
                    o_inv[...] = 1.0 / np.sqrt(v.astype(np.float64) + eps)

                with np.errstate(all="ignore"):
                    nc.gpsimd.run("bn_eval_invstd", invstd64, (inv,), (var,), elements=p, factor=4.0)
            nm = _row_scalar(nc, p)
            nc.vector.tensor_scalar(nm, m, "multiply", -1.0, dtype=FP32)
            gsum, dotp = _row_scalar(nc, p), _row_scalar(nc, p)  # sum(dy), sum((x - mean) * dy)
            for j, (_, (tdy, tx)) in enumerate(blk.each(0, 1)):
                inner = nc.mark()
                cen = nc.sbuf_tile(tdy.shape, FP32)
                nc.scalar.activation(cen, tx, "identity", bias=nm)
                nc.vector.tensor_tensor(cen, cen, tdy, "multiply", dtype=FP32)
                a1 = gsum if j == 0 else _row_scalar(nc, p)
                a2 = dotp if j == 0 else _row_scalar(nc, p)
                nc.vector.tensor_reduce(a1, tdy, "add", dtype=FP32)
                nc.vector.tensor_reduce(a2, cen, "add", dtype=FP32)
                if j:
                    _combine(nc, gsum, a1, "add", FP32)
                    _combine(nc, dotp, a2, "add", FP32)
                nc.release_to(inner)
            if "dw" in ks:
                t = _row_scalar(nc, p)
                nc.vector.tensor_tensor(t, dotp, inv, "multiply", dtype=FP32)
                _store_scalars(nc, view("dw", blk), t)
            if "db" in ks:
                _store_scalars(nc, view("db", blk), gsum)
            if dx is not None:
                iw = _row_scalar(nc, p)  # invstd * w
                if "w" in ks:
                    wt = _load_scalars(nc, view("w", blk), p)
                    nc.vector.tensor_tensor(iw, inv, wt, "multiply", dtype=FP32)
                else:
                    nc.vector.tensor_copy(iw, inv)
                DX = g.kr[2]
                if train:  # dx = (dy - gsum / n - (x - mean) * dotp * invstd^2 / n) * invstd * w
                    k = _row_scalar(nc, p)
                    nc.vector.tensor_tensor(k, dotp, inv, "multiply", dtype=FP32)
                    nc.vector.tensor_tensor(k, k, inv, "multiply", dtype=FP32)
                    nc.vector.tensor_scalar(k, k, "divide", float(count), dtype=FP32)
                    km = _row_scalar(nc, p)
                    nc.vector.tensor_tensor(km, nm, k, "multiply", dtype=FP32)  # -mean * k
                    gm = _row_scalar(nc, p)
                    nc.vector.tensor_scalar(gm, gsum, "divide", float(count), dtype=FP32)
                    ngm = _row_scalar(nc, p)  # -grad_mean * invstd * w
                    nc.vector.tensor_tensor(ngm, gm, iw, "multiply", dtype=FP32)
                    nc.vector.tensor_scalar(ngm, ngm, "multiply", -1.0, dtype=FP32)
                for ch, (tdy, tx) in blk.each(0, 1):
                    inner = nc.mark()
                    res = nc.sbuf_tile(tdy.shape, DX.dtype)
                    if train:
                        proj = nc.sbuf_tile(tdy.shape, FP32)
                        nc.scalar.activation(proj, tx, "identity", scale=k, bias=km)
                        diff = nc.sbuf_tile(tdy.shape, FP32)
                        nc.vector.tensor_tensor(diff, tdy, proj, "subtract", dtype=FP32)
                        nc.scalar.activation(res, diff, "identity", scale=iw, bias=ngm)
                    elif "w" in ks:  # CPU's eval kernel: (dy * invstd) * w, each product rounded to fp32
                        scaled = nc.sbuf_tile(tdy.shape, FP32)
                        nc.scalar.activation(scaled, tdy, "identity", scale=inv)
                        nc.scalar.activation(res, scaled, "identity", scale=wt)
                    else:
                        nc.scalar.activation(res, tdy, "identity", scale=inv)
                    blk.store(DX, ch, res)
                    nc.release_to(inner)
            nc.release_to(mark)
    return dx, dw, db


# --- losses: mse_loss, nll_loss, nll_loss2d ----------------------------------------------------------

_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(r) -> str:
    r = int(r)
    if r not in _REDUCTIONS:
        raise ValueError(f"{r} is not a valid value for reduction")
    return _REDUCTIONS[r]


def _mse_meta(x: torch.Tensor, y: torch.Tensor) -> tuple[tuple[int, ...], torch.dtype]:
    shape = tuple(torch.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    dtype = torch.promote_types(x.dtype, y.dtype)
    if dtype not in _FLOATS:
        raise _refuse("mse_cpu", dtype)
    return shape, dtype


@_kernel("aten::mse_loss.out", serves=("aten::mse_loss",))
def _mse_loss_out(a: dict) -> torch.Tensor:
    x, y, out = a["self"], a["target"], a["out"]
    red = _reduction(a.get("reduction", 1))
    shape, dtype = _mse_meta(x, y)
    check_out(out, shape if red == "none" else (), dtype, [x, y])
    if red == "none":
        def emit(nc, o, tx, ty):
            d = nc.sbuf_tile(o.shape, FP32)
            nc.vector.tensor_tensor(d, tx, ty, "subtract", dtype=FP32)
            nc.vector.tensor_tensor(o, d, d, "multiply", dtype=FP32)

        from device_impl.kernels.common import elementwise
        elementwise("mse_loss", out, (x, y), emit)
        return out
    xv, yv = np.broadcast_to(hbm(x), shape), np.broadcast_to(hbm(y), shape)
    numel = math.prod(shape)
    with launch("mse_loss", out.device.index) as nc:
        acc = _memset(nc, (P, 1), FP32, 0.0)
        pieces = list(_flat_pieces(numel))
        loads = []
        for s0, s1, p, f in pieces:
            loads += [((p, f), xv.dtype, _flat_load(nc, xv, s0, s1)), ((p, f), yv.dtype, _flat_load(nc, yv, s0, s1))]
        tiles = _stream(nc, loads, depth=4)
        for s0, s1, p, f in pieces:
            tx, ty = next(tiles), next(tiles)
            mark = nc.mark()
            d = nc.sbuf_tile((p, f), FP32)
            nc.vector.tensor_tensor(d, tx, ty, "subtract", dtype=FP32)
            part = _row_scalar(nc, p)
            nc.scalar.activation(d, d, "square", accumulate=part)
            _combine(nc, acc[:p], part, "add", FP32)
            nc.release_to(mark)
        for _ in tiles:
            pass
        total = nc.sbuf_tile((1, 1), FP32)
        nc.gpsimd.partition_reduce(total, acc, "add", dtype=FP32)
        res = nc.sbuf_tile((1, 1), numpy_dtype(out.dtype))
        if red == "mean":
            nc.vector.tensor_scalar(res, total, "divide", float(numel), dtype=FP32)  # 0 / 0 = nan when empty
        else:
            nc.vector.tensor_copy(res, total)
        nc.dma.store(hbm(out), res)
    return out


def _mse_backward(a: dict, out: torch.Tensor | None) -> torch.Tensor:
    g, x, y = a["grad_output"], a["self"], a["target"]
    red = _reduction(a["reduction"])
    shape, dtype = _mse_meta(x, y)
    dtype = torch.promote_types(dtype, g.dtype)
    if out is None:
        out = new_output(tuple(x.shape), dtype, x)
    else:
        check_out(out, tuple(x.shape), dtype, [g, x, y])
    norm = 2.0 / x.numel() if red == "mean" and x.numel() else 2.0

    def emit(nc, o, tg, tx, ty):
        # CPU's mse_backward_cpu_kernel: norm * (x - y) * g in scalar_t, so for float16/bfloat16 the scalar
        # is converted to the dtype and each operation rounds to it (x - y of near-overflow halves is inf)
        d = nc.sbuf_tile(o.shape, o.dtype)
        nc.vector.tensor_tensor(d, tx, ty, "subtract", dtype=FP32)
        nc.vector.tensor_scalar(d, d, "multiply", float(np.dtype(o.dtype).type(norm)), dtype=FP32)
        if isinstance(tg, Tile):
            nc.vector.tensor_tensor(o, d, tg, "multiply", dtype=FP32)
        else:
            nc.vector.tensor_scalar(o, d, "multiply", tg, dtype=FP32)

    from device_impl.kernels.common import elementwise
    elementwise("mse_loss_backward", out, (g, x, y), emit)
    return out


@_kernel("aten::mse_loss_backward")
def _mse_loss_backward(a: dict) -> torch.Tensor:
    return _mse_backward(a, None)


@_kernel("aten::mse_loss_backward.grad_input")
def _mse_loss_backward_out(a: dict) -> torch.Tensor:
    return _mse_backward(a, a["grad_input"])


class _NLL:
    """The shared layout of nll_loss and nll_loss2d: K = sample positions, R = classes."""

    def __init__(self, x: torch.Tensor, target: torch.Tensor, weight, two_d: bool):
        if x.dtype not in _FLOATS:
            raise _refuse("nll_loss_out_frame" if not two_d else "nll_loss2d_forward_out_frame", x.dtype)
        if target.dtype not in (torch.int64, torch.uint8):
            raise RuntimeError(f"expected scalar type Long but found {SCALAR_TYPE_NAMES[target.dtype]}")
        if two_d:
            if x.dim() != 4:
                raise RuntimeError(f"only batches of spatial inputs supported (4D tensors), but got input of "
                                   f"dimension: {x.dim()}")
            if target.dim() != 3:
                raise RuntimeError(f"only batches of spatial targets supported (3D tensors) but got targets of "
                                   f"dimension: {target.dim()}")
            if (x.shape[0], x.shape[2], x.shape[3]) != tuple(target.shape):
                raise RuntimeError(f"size mismatch (got input: {list(x.shape)} , target: {list(target.shape)}")
            self.classes = x.shape[1]
            self.kshape = [x.shape[0], x.shape[2], x.shape[3]]
            xv = hbm(x).transpose(0, 2, 3, 1)
        else:
            if x.dim() not in (1, 2):
                raise RuntimeError("input tensor should be 1D or 2D")
            if target.dim() > 1:
                raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
            no_batch = x.dim() == 1 and target.dim() == 0
            if not no_batch and x.shape[0] != target.shape[0]:
                raise RuntimeError(f"Expected input batch_size ({x.shape[0]}) to match target batch_size "
                                   f"({target.shape[0]}).")
            self.classes = x.shape[-1]
            self.kshape = [] if x.dim() == 1 else [x.shape[0]]
            xv = hbm(x)
        if weight is not None and weight.numel() != self.classes:
            raise RuntimeError(f"weight tensor should be defined either for all {self.classes} classes or no "
                               f"classes but got weight tensor of shape: {list(weight.shape)}")
        self.xv, self.tv = xv, hbm(target).reshape(self.kshape) if target.dim() == 0 else hbm(target)
        self.wv = None
        if weight is not None:
            w = hbm(weight).reshape(-1) if weight.dim() != 1 else hbm(weight)
            self.wv = as_strided(w, (self.classes, 1), (w.strides[0], w.strides[0]))

    def rows(self, nc, ignore_index: int, outs: Sequence[torch.Tensor] = (), kr: Sequence[np.ndarray] = (),
             load: bool = True):
        """Per row block: (block, target [p, 1] int64 clamped to a class, valid mask, weight [p, 1] fp32);
        the block's class chunks of x are loaded only with ``load``."""
        g = _Grid(self.kshape, [self.classes], kr=[self.xv] + list(kr), k=[self.tv] + [hbm(o) for o in outs])
        self.grid = g
        c = self.classes
        for blk in _blocks(nc, g, [g.kr[0]] if load else []):
            p = blk.p
            mark = nc.mark()
            raw = nc.sbuf_tile((p, 1), g.k[0].dtype)
            nc.dma.load(raw, _at(g.k[0], blk.rsl))
            t = _row_scalar(nc, p, I64)
            nc.vector.tensor_copy(t, raw)
            valid = _row_scalar(nc, p, BOOL)
            nc.vector.tensor_scalar(valid, t, "not_equal", int(ignore_index))
            low, high = _row_scalar(nc, p, BOOL), _row_scalar(nc, p, BOOL)
            nc.vector.tensor_scalar(low, t, "less", 0)
            nc.vector.tensor_scalar(high, t, "greater_equal", c)
            nc.vector.tensor_tensor(low, low, high, "logical_or")
            nc.vector.tensor_tensor(low, low, valid, "logical_and")
            flag = nc.sbuf_tile((1, 1), BOOL)
            nc.gpsimd.partition_reduce(flag, low, "logical_or")
            if bool(flag.read().any()):  # CPU checks every target; the kernel raises the same error
                bad = t.read()[low.read()[:, 0].astype(bool), 0]
                raise IndexError(f"Target {int(bad[0])} is out of bounds.")
            zero = _memset(nc, (p, 1), I64, 0)
            safe = _row_scalar(nc, p, I64)
            nc.vector.select(safe, valid, t, zero)
            w = _row_scalar(nc, p)
            if self.wv is not None:
                wr = nc.sbuf_tile((p, 1), self.wv.dtype)
                nc.dma.load_rows(wr, self.wv, safe)
                nc.vector.tensor_copy(w, wr)
            else:
                nc.vector.memset(w, 1.0)
            fz = _memset(nc, (p, 1), FP32, 0.0)
            nc.vector.select(w, valid, w, fz)
            yield blk, safe, valid, w
            nc.release_to(mark)

    def gather_table(self):
        """The input as an indirect-DMA table (see _row_table), or None for layouts it cannot describe."""
        if len(self.kshape) != 1 or self.xv.ndim != 2:
            return None
        s0, s1 = self.xv.strides
        if s1 <= 0 or s0 < 0 or s0 % s1:
            return None
        n, c = self.xv.shape
        step = s0 // s1
        return as_strided(self.xv, ((n - 1) * step + c, 1), (s1, s1)), step

    def class_masks(self, nc, blk, safe: Tile, load: bool = True):
        """(chunk, x tile (None without ``load``), [p, f] mask of the target's class) for each class chunk."""
        for ch, (tx,) in (blk.each(0) if load else ((ch, (None,)) for ch in blk.chunks)):
            c0, f, _ = ch
            idx = nc.sbuf_tile((blk.p, f), I64)
            nc.gpsimd.iota(idx, base=c0, partition_step=0, free_step=1)
            hit = nc.sbuf_tile((blk.p, f), BOOL)
            nc.vector.tensor_tensor(hit, idx, safe, "equal")
            nc.release(idx)
            yield ch, tx, hit
            nc.release(hit)


def _nll_forward(name: str, a: dict, two_d: bool):
    x, target, weight = a["self"], a["target"], a.get("weight")
    red, ignore = _reduction(a["reduction"]), int(a["ignore_index"])
    spec = _NLL(x, target, weight, two_d)
    output, total_weight = a.get("output"), a.get("total_weight")
    oshape = tuple(spec.kshape) if red == "none" else ()
    if output is None:
        output, total_weight = new_output(oshape, x.dtype, x), new_output((), x.dtype, x)
    else:
        check_out(output, oshape, x.dtype, [x])
        check_out(total_weight, (), x.dtype, [x])
    with launch(name, x.device.index) as nc:
        tw = hbm(total_weight)
        acc_l, acc_w = _memset(nc, (P, 1), FP32, 0.0), _memset(nc, (P, 1), FP32, 0.0)
        rows = math.prod(spec.kshape)
        if rows and spec.classes:
            table = spec.gather_table()
            for blk, safe, valid, w in spec.rows(nc, ignore, outs=[output] if red == "none" else [],
                                                 load=table is None):
                p = blk.p
                picked = _row_scalar(nc, p)
                if table is not None:  # indirect DMA: one element per row, x[r, target[r]]
                    table_view, row_step = table
                    mark = nc.mark()
                    idx = _row_scalar(nc, p, I64)
                    r0 = blk.rsl[0].start if blk.rsl and blk.rsl[0].start is not None else 0
                    nc.gpsimd.iota(idx, base=r0 * row_step, partition_step=row_step, free_step=0)
                    nc.vector.tensor_tensor(idx, idx, safe, "add")
                    got = nc.sbuf_tile((p, 1), table_view.dtype)
                    nc.dma.load_rows(got, table_view, idx)
                    nc.vector.tensor_copy(picked, got)
                    nc.release_to(mark)
                for j, (ch, tx, hit) in enumerate(spec.class_masks(nc, blk, safe) if table is None else ()):
                    mark = nc.mark()
                    zero = _memset(nc, tx.shape, FP32, 0.0)
                    sel = nc.sbuf_tile(tx.shape, FP32)
                    nc.vector.select(sel, hit, tx, zero)
                    part = picked if j == 0 else _row_scalar(nc, p)
                    nc.vector.tensor_reduce(part, sel, "add", dtype=FP32)
                    if j:
                        _combine(nc, picked, part, "add", FP32)
                    nc.release_to(mark)
                loss = _row_scalar(nc, p)  # -w * x[target], exactly 0 for ignored targets
                nc.vector.tensor_tensor(loss, w, picked, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(loss, loss, "multiply", -1.0, dtype=FP32)
                fz = _memset(nc, (p, 1), FP32, 0.0)
                nc.vector.select(loss, valid, loss, fz)
                if red == "none":
                    _store_scalars(nc, _at(spec.grid.k[1], blk.rsl), loss)
                else:
                    _combine(nc, acc_l[:p], loss, "add", FP32)
                _combine(nc, acc_w[:p], w, "add", FP32)
        elif red == "none" and rows:  # no classes: nothing is picked
            _fill(nc, hbm(output), 0.0, FP32)
        if red == "none" and spec.kshape:  # CPU leaves total_weight 0 for unreduced batches
            _fill(nc, tw, 0.0, FP32)
            return output, total_weight
        total_l, total_w = nc.sbuf_tile((1, 1), FP32), nc.sbuf_tile((1, 1), FP32)
        nc.gpsimd.partition_reduce(total_l, acc_l, "add", dtype=FP32)
        nc.gpsimd.partition_reduce(total_w, acc_w, "add", dtype=FP32)
        if red == "mean":
            nc.vector.tensor_tensor(total_l, total_l, total_w, "divide", dtype=FP32)
        if red != "none":
            _store_scalars(nc, hbm(output), total_l)
        _store_scalars(nc, tw, total_w)
    return output, total_weight


def _nll_backward(name: str, a: dict, two_d: bool, out: torch.Tensor | None) -> torch.Tensor:
    g, x, target, weight = a["grad_output"], a["self"], a["target"], a.get("weight")
    red, ignore, total_weight = _reduction(a["reduction"]), int(a["ignore_index"]), a["total_weight"]
    spec = _NLL(x, target, weight, two_d)
    if out is None:
        out = new_output(tuple(x.shape), x.dtype, x)
    else:
        check_out(out, tuple(x.shape), x.dtype, [x])
    if red == "none" and tuple(g.shape) != tuple(spec.kshape):
        raise RuntimeError(f"Expected a tensor of dimension {len(spec.kshape)} and tensor.size[0] == "
                           f"{spec.kshape[0] if spec.kshape else 1} but got: dimension {g.dim()} and "
                           f"tensor.size[0] == {g.shape[0] if g.dim() else 1}")
    if red != "none" and g.numel() != 1:
        raise RuntimeError(f"Expected a single element grad_output tensor, but got: {list(g.shape)}")
    ov = hbm(out).transpose(0, 2, 3, 1) if two_d else hbm(out)
    with launch(name, x.device.index) as nc:
        scale = None
        if red != "none":  # -grad (/ total_weight for mean), on every partition
            s = _load_scalars(nc, hbm(g).reshape(1, 1) if g.dim() == 0 else hbm(g).reshape(1, 1), 1)
            if red == "mean":
                tws = _load_scalars(nc, hbm(total_weight).reshape(1, 1), 1)
                nc.vector.tensor_tensor(s, s, tws, "divide", dtype=FP32)
            scale = nc.sbuf_tile((P, 1), FP32)
            nc.gpsimd.partition_broadcast(scale, s)
        if math.prod(spec.kshape) == 0 or spec.classes == 0:
            return out
        outs = [g] if red == "none" else []
        scatter = _row_table(ov, spec)
        if scatter is not None:  # zeros everywhere, then one element per row by indirect DMA
            _fill(nc, ov, 0.0, FP32)
        for blk, safe, valid, w in spec.rows(nc, ignore, outs=outs, kr=[ov], load=False):
            p = blk.p
            val = _row_scalar(nc, p)
            gs = _load_scalars(nc, _at(spec.grid.k[1], blk.rsl), p) if red == "none" else scale[:p]
            nc.vector.tensor_tensor(val, w, gs, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(val, val, "multiply", -1.0, dtype=FP32)
            fz = _memset(nc, (p, 1), FP32, 0.0)
            nc.vector.select(val, valid, val, fz)
            OV = spec.grid.kr[1]
            if scatter is not None:
                table, step = scatter
                mark = nc.mark()
                idx = _row_scalar(nc, p, I64)
                r0 = blk.rsl[0].start if blk.rsl and blk.rsl[0].start is not None else 0
                nc.gpsimd.iota(idx, base=r0 * step, partition_step=step, free_step=0)
                nc.vector.tensor_tensor(idx, idx, safe, "add")
                res = nc.sbuf_tile((p, 1), table.dtype)
                nc.vector.tensor_copy(res, val)
                nc.dma.store_rows(table, idx, res)
                nc.release_to(mark)
                continue
            for ch, _, hit in spec.class_masks(nc, blk, safe, load=False):
                mark = nc.mark()
                zero = _memset(nc, hit.shape, FP32, 0.0)
                full = nc.sbuf_tile(hit.shape, FP32)
                nc.vector.tensor_tensor(full, zero, val, "add", dtype=FP32)
                res = nc.sbuf_tile(hit.shape, OV.dtype)
                nc.vector.select(res, hit, full, zero)
                blk.store(OV, ch, res)
                nc.release_to(mark)
    return out


def _row_table(view: np.ndarray, spec: "_NLL"):
    """(elements, 1) table over a [N, C] HBM view with rows a whole number of class strides apart, and the
    row step (None otherwise): element [r, t] is table row r * step + t."""
    if len(spec.kshape) != 1 or view.ndim != 2:
        return None
    s0, s1 = view.strides
    if s1 <= 0 or s0 < 0 or s0 % s1:
        return None
    n, c = view.shape
    if s0 // s1 < c and n > 1:  # rows overlap (not a valid output layout)
        return None
    step = s0 // s1
    return as_strided(view, ((n - 1) * step + c, 1), (s1, s1)), step


@_kernel("aten::nll_loss_forward.output", serves=("aten::nll_loss_forward",))
def _nll_loss_forward_out(a: dict):
    return _nll_forward("nll_loss", a, two_d=False)


@_kernel("aten::nll_loss_backward.grad_input", serves=("aten::nll_loss_backward",))
def _nll_loss_backward_out(a: dict) -> torch.Tensor:
    return _nll_backward("nll_loss_backward", a, False, a["grad_input"])


@_kernel("aten::nll_loss2d_forward", "aten::nll_loss2d_forward.output")
def _nll_loss2d_forward(a: dict):
    return _nll_forward("nll_loss2d", a, two_d=True)


@_kernel("aten::nll_loss2d_backward")
def _nll_loss2d_backward(a: dict) -> torch.Tensor:
    return _nll_backward("nll_loss2d_backward", a, True, None)


@_kernel("aten::nll_loss2d_backward.grad_input")
def _nll_loss2d_backward_out(a: dict) -> torch.Tensor:
    return _nll_backward("nll_loss2d_backward", a, True, a["grad_input"])


# Generated out= wrappers (CompositeExplicitAutograd) that call the functional kernels above and copy.
for _op, _target in (("aten::native_layer_norm_backward.out", "aten::native_layer_norm_backward"),
                     ("aten::native_group_norm_backward.out", "aten::native_group_norm_backward"),
                     ("aten::native_batch_norm_backward.out", "aten::native_batch_norm_backward"),
                     ("aten::_native_batch_norm_legit_no_training.out", "aten::_native_batch_norm_legit")):
    TABLE.serves(_op, _target)
