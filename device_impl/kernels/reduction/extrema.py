"""Extrema: amax, amin, max and min (whole tensor and along a dimension), argmax, argmin, aminmax.

amax, amin, max(), min() and aminmax are one-pass reductions (``sums._reduce``: the rows,
columns or flat tiling) combining with maximum/minimum, in fp32 for floats and in the input's
dtype otherwise; NaN propagates. Reductions without an identity refuse empty reduced
dimensions with CPU's errors (``_check_nonempty``).

Arg reductions (argmax, argmin, max.dim, min.dim) tile as ``rows`` or ``flat``:

* rows: K on partitions, the reduced dimension along the free axis in CHUNK chunks. VectorE's
  ``arg_reduce`` gives each chunk's value and index; the chunk's offset is added and the
  running best replaced only where the candidate is strictly better or NaN over a number
  (``_take_better``), so the first occurrence (and the first NaN) wins.
* flat: an output's elements as flat ``[128, F]`` pieces, each partition's indices offset by a
  GpSimd ``iota``; across partitions, GpSimd reduces the values and then takes the smallest
  index holding the best value or NaN (``_arg_across_partitions``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32, is_float, numpy_dtype
from device_impl.kernels.common import SCALAR_TYPE_NAMES, check_out, hbm, new_output
from device_impl.kernels.reduction.tiles import (
    BOOL, CHUNK, I64, P, _Grid, _at, _box_load, _boxes, _dims, _flat_load, _flat_pieces, _identity, _kept_view,
    _kernel, _memset, _out_shape, _row_scalar, _stream, _wrap,
)
from device_impl.kernels.reduction.sums import _Spec, _reduce, _reduce_in, _use_flat


# --- amax, amin, max, min: one-pass (sums._reduce) ---------------------------------------------------

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
    # CPU's max.unary_out/min.unary_out accept an empty input and write the reduction's identity (-inf/+inf,
    # the integer dtype's min/max, False/True); only the functional form has no result to give.
    if x.numel() == 0 and out is None:
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
    with launch(name, like.device.index) as nc:
        arg_program(nc, xv, dims, op, *views)


def arg_program(nc, xv: np.ndarray, dims: Sequence[int], op: str, vout: np.ndarray | None,
                iout: np.ndarray | None, flat_only: bool = False) -> bool:
    """The best values/indices of HBM view ``xv`` over ``dims`` (``op`` maximum or minimum; indices into the
    reduced dims flattened) into ``vout``/``iout`` (either may be None), views shaped as the kept dims, inside a
    launch: the flat tiling where few rows reduce many columns, else the rows tiling (module docstring). With
    ``flat_only``, issues nothing and returns False where the rows tiling would be taken: the compiler's
    ``argmax``/``argmin`` step runs this for the flat case (its own per-row arg_reduce put a whole-tensor argmax on
    one partition). Returns True when it ran."""
    kdims = [d for d in range(xv.ndim) if d not in dims]
    g = _Grid([xv.shape[d] for d in kdims], [xv.shape[d] for d in dims], kr=[xv.transpose(kdims + list(dims))],
              k=[v for v in (vout, iout) if v is not None])
    outs = iter(g.k)
    vout = next(outs) if vout is not None else None
    iout = next(outs) if iout is not None else None
    if _use_flat(g):
        _arg_flat(nc, g, op, vout, iout)
    elif flat_only:
        return False
    else:
        _arg_rows(nc, g, op, vout, iout)
    return True


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
