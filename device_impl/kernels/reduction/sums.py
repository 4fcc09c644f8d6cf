"""One-pass reductions: sum, prod, mean, any, all, linalg_vector_norm; the engine they share
with amax/amin/max/min (``extrema``) and with the first pass of var/logsumexp (``moments``).

A ``_Spec`` says what a reduction computes per element (a cast, abs, square, |x|^p, != 0), how
partials combine (the VectorE/GpSimdE op and the accumulation dtype) and how the result is
finished (divide, sqrt, power). ``_reduce`` tiles the ``K x R`` grid (``tiles``) one of three ways:

* ``rows`` (the default): K on partitions (<= 128 rows per tile), R along the free axis in
  chunks of ``CHUNK`` elements; per-partition reductions on VectorE / ScalarE
  (``activation(..., accumulate=)`` fuses the elementwise part with the row sum), partials
  combined across chunks (``row_accumulate``, ``row_finish``).
* ``columns`` (a kept dimension is the innermost in memory, e.g. ``x.sum(0)``): R on
  partitions, K along the free axis, reduced across partitions with a TensorE matmul against a
  ones vector (float sums, fp32 PSUM accumulation) or GpSimdE partition reductions
  (max/min/prod/any/all, integers).
* ``flat`` (few output elements, long reductions, e.g. a full ``x.sum()``): each output's
  elements as flat ``[128, F]`` tiles, per-partition partials, one cross-partition reduction
  at the end.

Numerics follow CPU eager: floats accumulate in fp32 and round once into the output; integer
sums/products accumulate in int64 (wrapping as CPU). Under adaptive eager a rows reduction over
the last dimension of a contiguous input is queued as a ``RowReduction``, which
device_impl.eager runs on the tiles of the launches producing its input.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from device_impl.dispatch.table import HOOKS
from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32, is_float, numpy_dtype
from device_impl.kernels.common import SCALAR_TYPE_NAMES, check_out, hbm, new_output, reshaped_view, scalar_of
from device_impl.kernels.reduction.tiles import (
    BOOL, CHUNK, FLAT_MAX_ROWS, FLAT_MIN_COLS, I64, P, PE_CHUNK, _FLOATS, _Grid, _at, _box_load, _boxes, _combine,
    _count, _dims, _flat_load, _flat_pieces, _identity, _kept_view, _kernel, _memset, _order_by_stride, _out_shape,
    _row_scalar, _stream,
)


# --- the one-pass engine: rows, columns and flat tilings ------------------------------------------

class _Spec:
    """What a one-pass reduction computes per element, how it combines, and how it finishes."""

    def __init__(self, op: str, cd: np.dtype, elem: np.dtype | None = None, pre: Any = None,
                 post: Callable | None = None, empty: Any = None):
        self.op = op  # VectorE/GpSimdE reduce op
        self.cd = np.dtype(cd)  # accumulation dtype
        self.elem = elem  # cast input elements to this dtype first (sum(dtype=...))
        self.pre = pre  # None | 'abs' | 'square' | 'ne0' | ('pow', p) | 'nonzero' | 'nan0' (floats only)
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
        if pre == "nan0":  # nansum: NaN counts as 0 (an all-(-0.0) slice sums to +0.0 from the +0.0 identity, as CPU's)
            nan = nc.sbuf_tile(t.shape, BOOL)
            nc.vector.tensor_unary(nan, t, "isnan")
            zero = nc.sbuf_tile(t.shape, FP32)
            nc.vector.memset(zero, 0.0)
            nc.vector.select(out, nan, zero, t)
            return out
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


def _innermost(x: torch.Tensor) -> int | None:
    best = None
    for d, (n, s) in enumerate(zip(x.shape, x.stride())):
        if n > 1 and (best is None or s < x.stride()[best]):
            best = d
    return best


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


_flat_view = reshaped_view


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


# --- sum, prod, mean ----------------------------------------------------------------------------------

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
              queue: bool = False, exact_out: bool = False) -> torch.Tensor:
    x, dtype, keepdim = a["self"], a.get("dtype"), bool(a.get("keepdim", False))
    rdtype = _integral_default(x, dtype, None if exact_out else out)
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, rdtype, x)
    else:
        check_out(out, shape, rdtype, [x], exact_dtype=exact_out or dtype is not None)
    _reduce(name, x, out, dims, _sum_like_spec(op, x, out.dtype), queue=queue)
    return out


@_kernel("aten::sum.IntList_out", serves=("aten::sum.dim_IntList", "aten::sum", "aten::sum.out"), submits=True)
def _sum_out(a: dict) -> torch.Tensor:
    return _sum_prod("sum", "add", a, _dims(a["self"], a["dim"]), a["out"], queue=True)


def _nansum(a: dict, out: torch.Tensor | None) -> torch.Tensor:
    """nansum: sum with NaN read as 0 (CPU's nansum kernel adds ``isnan(x) ? 0 : x`` from +0.0, so an all-(-0.0)
    or all-NaN slice gives +0.0); an integer or bool input has no NaN and is CPU's plain sum (at::sum_out)."""
    x, dtype, keepdim = a["self"], a.get("dtype"), bool(a.get("keepdim", False))
    dims = _dims(x, a.get("dim"))
    rdtype = _integral_default(x, dtype, out)
    if x.is_floating_point() and dtype is None and not rdtype.is_floating_point:
        # a float input summed into an integer out= with no dtype: CPU's float-only nansum kernel refuses it
        raise NotImplementedError(f'"nansum_cpu" not implemented for \'{SCALAR_TYPE_NAMES[rdtype]}\'')
    if out is None:
        out = new_output(_out_shape(x, dims, keepdim), rdtype, x)
    else:
        check_out(out, _out_shape(x, dims, keepdim), rdtype, [x], exact_dtype=dtype is not None)
    spec = _sum_like_spec("add", x, out.dtype)
    if x.dtype in _FLOATS and out.dtype.is_floating_point:
        spec = _Spec("add", FP32, pre="nan0")
    _reduce("nansum", x, out, dims, spec, queue=True)
    return out


@_kernel("aten::nansum", submits=True)
def _nansum_functional(a: dict) -> torch.Tensor:
    return _nansum(a, None)


@_kernel("aten::nansum.out", submits=True)
def _nansum_out(a: dict) -> torch.Tensor:
    return _nansum(a, a["out"])


@_kernel("aten::prod.int_out", serves=("aten::prod.dim_int",))
def _prod_out(a: dict) -> torch.Tensor:
    return _sum_prod("prod", "multiply", a, _dims(a["self"], a["dim"]), a["out"])


@_kernel("aten::prod")
def _prod_full(a: dict) -> torch.Tensor:
    return _sum_prod("prod", "multiply", a, _dims(a["self"], None), None)


@_kernel("aten::prod.out")
def _prod_full_out(a: dict) -> torch.Tensor:
    # ATen's generated out= wrapper of prod: out must have the result dtype exactly.
    return _sum_prod("prod", "multiply", a, _dims(a["self"], None), a["out"], exact_out=True)


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


# --- any, all, vector norms ---------------------------------------------------------------------------

def _any_all(name: str, op: str, a: dict, dims_of: Callable[[], tuple[int, ...]]) -> torch.Tensor:
    """``dims_of`` wraps the dim argument after the out= dtype check, CPU's order: ``any(x, 4, out=long)``
    on a 3-d ``x`` raises the dtype's RuntimeError, not the dim's IndexError."""
    x, keepdim, out = a["self"], bool(a.get("keepdim", False)), a.get("out")
    rdtype = torch.uint8 if x.dtype == torch.uint8 else torch.bool
    if out is not None and out.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(f"{name} only supports bool tensor for result, got: {SCALAR_TYPE_NAMES[out.dtype]}")
    dims = dims_of()
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, rdtype, x)
    else:
        check_out(out, shape, out.dtype, [x])
    # CPU converts the input to the result dtype first: a float input into a uint8 result truncates
    elem = numpy_dtype(torch.uint8) if out.dtype == torch.uint8 and x.dtype != torch.uint8 else None
    _reduce(name, x, out, dims, _Spec(op, BOOL, elem=elem, pre="ne0"))
    return out


for _name, _op in (("any", "logical_or"), ("all", "logical_and")):
    def _make(name: str, op: str):
        def full(a: dict) -> torch.Tensor:
            return _any_all(name, op, a, lambda: _dims(a["self"], None))

        def one(a: dict) -> torch.Tensor:
            return _any_all(name, op, a, lambda: _dims(a["self"], a["dim"]))

        def many(a: dict) -> torch.Tensor:
            return _any_all(name, op, a, lambda: _dims(a["self"], a.get("dim"), empty_is_all=False))

        _kernel(f"aten::{name}", f"aten::{name}.all_out")(full)
        _kernel(f"aten::{name}.out", serves=(f"aten::{name}.dim",))(one)
        _kernel(f"aten::{name}.dims_out", f"aten::{name}.dims")(many)

    _make(_name, _op)


@_kernel("aten::equal")
def _equal(a: dict) -> bool:
    """torch.equal: the same sizes and every element equal after type promotion, as CPU's ``cpu_equal`` (NaN
    equals nothing, so a tensor holding one is not equal even to itself; -0.0 equals 0.0). The device's own ne
    and any kernels and one flag read back, instead of the counted CPU fallback copying both tensors to the
    host: test suites and the harness's out= checks call it on every case."""
    self, other = a["self"], a["other"]
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    return not bool(torch.ne(self, other).any())


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
