"""Gathers and scatters along one dimension: gather, scatter (src, value, reduce), scatter_add,
scatter_reduce, take, and the view scatters select_scatter, slice_scatter, diagonal_scatter.

Tiling: one row per element of ``index`` (``C`` = 1 along ``dim``; the other coordinates
from ``rows._Coords``), ``[p, f]`` row tiles moved by indirect DMA. Non-accumulating
scatters let the last row win; scatter_add / scatter_reduce accumulate bf16/fp16 on a
float32 copy and round once (``views._Fp32Stage``), as CPU. take is a gather over the
flattened input. The view scatters copy ``self`` and then ``src`` into the region's view
(``views._copy_into``), no row arithmetic.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from device_impl.engine import launch
from device_impl.engine.dtypes import FP32, is_float
from device_impl.kernels import overlap
from device_impl.kernels.common import (
    SCALAR_TYPE_NAMES,
    check_out,
    check_scalar_fits,
    flat_tiles,
    hbm,
    scalar_of,
)
from device_impl.kernels.registry import register_family
from device_impl.kernels.indexing.rows import (
    BOOL,
    I64,
    _Const,
    _Index,
    _Rows,
    _bounds_error,
    _check_devices,
    _check_range,
    _move,
    _native,
    _self_meta,
)
from device_impl.kernels.indexing.views import (
    _Fp32Stage,
    _copy_into,
    _empty,
    _estrides,
    _fill,
    _reshaped,
    _view,
    _wrap_dim,
)

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
        gather_program(nc, _view(out), _view(self), _view(index), dim)


def gather_program(nc, ov: np.ndarray, sv: np.ndarray, iv: np.ndarray, dim: int) -> None:
    """The tile program of gather on HBM views (inside a launch): the index checked against ``sv``'s size along
    ``dim`` (CPU's RuntimeError), then one row per index element moved by indirect DMA. The eager kernel and the
    compiler's ``gather_whole`` step (compiler/opaque_indexing.py) both run it."""
    _check_range(nc, iv, sv.shape[dim], False, _bounds_error(dim, sv.shape[dim]))
    if ov.size == 0:
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
        out = _clone_preserve_strides_layout(self)
    else:
        # ATen's generated out= wrappers of the view scatters: out must have self's dtype exactly.
        check_out(out, tuple(self.shape), self.dtype, (self, src), exact_dtype=True)
    with launch(name, self.device.index) as nc:
        view_scatter_program(nc, hbm(out), None if overlap.same_view(out, self) else hbm(self), hbm(src), region)
    return out


def _clone_preserve_strides_layout(self: torch.Tensor) -> torch.Tensor:
    """An uninitialised result laid out as ATen's ``clone_preserve_strides(self)`` lays the view scatters' result
    (Note [*_scatter ops preserve strides]): ``self``'s sizes, strides and storage offset in a storage of
    ``self``'s storage's size (a sliced or offset self gives a sliced or offset result); a self with internal
    overlap (a stride-0 dim) is cloned, so contiguous. Only the view's elements are written (the kernel copies
    ``self`` through it); CPU also copies the storage's elements outside the view, which no result reads."""
    if overlap.has_internal_overlap(self):
        return torch.empty(tuple(self.shape), dtype=self.dtype, device=self.device)
    numel = self.untyped_storage().nbytes() // self.element_size()
    base = torch.empty(numel, dtype=self.dtype, device=self.device)
    return base.as_strided(tuple(self.shape), tuple(self.stride()), self.storage_offset())


def view_scatter_program(nc, out: np.ndarray, self: np.ndarray | None, src: np.ndarray,
                         region: Callable[[np.ndarray], np.ndarray]) -> None:
    """The view scatters' tile program on HBM arrays: ``self`` copied into ``out`` (None: ``out`` is self), then
    ``src`` into ``region(out)``. The eager kernels, and the compiler's ``view_scatter`` step (compiler/opaque.py);
    ``VIEW_REGIONS`` names the regions by op."""
    if self is not None:
        _copy_into(nc, out, self)
    _copy_into(nc, region(out), src)


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


# op -> its region (a function of self, then the op's arguments after src): what view_scatter_program writes src into
VIEW_REGIONS: dict[str, Callable] = {
    "slice_scatter": lambda self, dim=0, start=None, end=None, step=1: _slice_region(self, dim, start, end, step or 1),
    "diagonal_scatter": lambda self, offset=0, dim1=0, dim2=1: _diagonal_region(self, offset, dim1, dim2),
}

_native("aten::diagonal_scatter")(lambda a: _diagonal_scatter_fn(a))
_native("aten::diagonal_scatter.out")(lambda a: _diagonal_scatter_fn(a, a["out"]))
