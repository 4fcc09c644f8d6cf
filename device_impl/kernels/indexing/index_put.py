"""Advanced indexing and the index_* ops: index_select, index.Tensor, index_put / index_put_ /
_index_put_impl_, index_add, index_copy, index_fill_.

Tiling: the output (index_select, index.Tensor) or destination (index_put, index_add,
index_copy, index_fill_) is a set of rows of ``C`` contiguous-stride elements; ``_Plan``
splits advanced indexing into the lead dimensions (indexed and broadcast) and the trailing
run each row moves, and the row tiles of ``rows._move`` carry them by indirect DMA. Boolean
indices are first compacted to positions (``masked._nonzero_into``). Accumulation:
index_put(accumulate=True) rounds to the destination dtype after each step, index_add on
a float32 copy for bf16/fp16 (``views._Fp32Stage``), as CPU's serial loops.
"""

from __future__ import annotations

import functools

import warnings
from typing import Any, Callable, Sequence

import numpy as np
import torch

from device_impl.engine import launch
from device_impl.engine.dtypes import FP32, is_float
from device_impl.kernels import cpu_host, overlap
from device_impl.kernels.common import (
    SCALAR_TYPE_NAMES,
    check_out,
    check_scalar_fits,
    hbm,
    resize_output,
    scalar_of,
)
from device_impl.kernels.registry import register_family
from device_impl.kernels.indexing.masked import _nonzero_into
from device_impl.kernels.indexing.rows import (
    _Const,
    _Index,
    _Rows,
    _as_dtype,
    _bounds_error,
    _check_devices,
    _check_range,
    _index_range_error,
    _move,
    _native,
    _self_meta,
)
from device_impl.kernels.indexing.views import (
    _Fp32Stage,
    _copy_into,
    _embed,
    _empty,
    _estrides,
    _merge_suffix,
    _prod,
    _view,
    _wrap_dim,
)

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


def _result_strides(plan: "_Plan", self: torch.Tensor) -> tuple[int, ...]:
    """The strides of CPU's ``index`` result: its TensorIterator's output laid out from its inputs, which are self
    restrided to the result's shape (``restride_src``: stride 0 in the indexed dims' place, self's own strides in
    the others) and each index broadcast to it (``reshape_indexer``: stride 0 in self's dims); so an index of a
    transposed or overlapping self is laid out as self, not contiguous. Asked of torch's rule
    (``compute_elementwise_output_strides``) on meta proxies."""
    shape = plan.shape
    if len(shape) < 2:
        return tuple(torch.empty(shape, device="meta").stride())
    src = tuple(self.stride(x) if kind == "s" else 0 for kind, x in plan.layout)
    layouts = [src]
    for v in plan.views:
        vb = np.broadcast_to(v, plan.bshape)
        layouts.append(tuple(vb.strides[x] // vb.itemsize if kind == "b" else 0 for kind, x in plan.layout))
    return _output_strides(shape, tuple(layouts))


@functools.lru_cache(maxsize=1024)
def _output_strides(shape: tuple[int, ...], layouts: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """TensorIterator's output strides for operands of ``shape`` with these strides (cached: the meta proxies cost
    about 0.15 ms a call)."""
    from torch._prims_common import compute_elementwise_output_strides

    return tuple(compute_elementwise_output_strides(*(torch.empty_strided(shape, s, device="meta")
                                                      for s in layouts)))


def _index_into(nc, out: torch.Tensor | None, self: torch.Tensor, indices) -> torch.Tensor:
    keep: list = []
    plan = _Plan(nc, self, indices, keep)
    plan.validate(nc)
    if out is None:
        out = torch.empty_strided(plan.shape, _result_strides(plan, self), dtype=self.dtype, device=self.device)
    elif tuple(out.shape) != plan.shape:  # a resized out= takes the iterator's strides too (set_output_raw_strided)
        resize_output(out, plan.shape)
        out.as_strided_(plan.shape, _result_strides(plan, self))
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
    """out = self with source slices assigned / added at index along dim (``index_scatter_program`` in a launch
    of its own, on the tensors' HBM views)."""
    if out.dtype != self.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {self.dtype}, but got {out.dtype} instead")
    temps: list[torch.Tensor] = []  # the float32 stage's device tensor, alive until the launch ends

    def fp32_temp(shape: tuple[int, ...]) -> np.ndarray:
        temps.append(torch.empty(shape, dtype=torch.float32, device=out.device))
        return hbm(temps[-1])

    with launch(name, out.device.index) as nc:
        srcv = _view(source) if isinstance(source, torch.Tensor) else None
        index_scatter_program(nc, _view(out), None if overlap.same_view(out, self) else _view(self), _view(index),
                              srcv, dim, mode, error, value=source if srcv is None else None, negative=negative,
                              alpha=alpha, once=once, fused=fused, fp32_temp=fp32_temp)


def index_scatter_program(nc, ov: np.ndarray, selfv: np.ndarray | None, index: np.ndarray,
                          srcv: np.ndarray | None, dim: int, mode: str, error: Callable[[int], Exception], *,
                          value: Any = None, negative: bool = False, alpha=1,
                          once: bool = False, fused: bool = False,
                          fp32_temp: Callable[[tuple[int, ...]], np.ndarray] | None = None) -> None:
    """The tile program of index_add/index_copy/index_fill on HBM views: ``ov`` <- ``selfv`` (None: ov is self
    already), then the slices of ``srcv`` (or, where it is None, ``value``: a number or a one-element HBM view)
    assigned / added at ``index`` along dim.
    The eager kernels and the compiler's ``index_add`` step (compiler/opaque.py) both run it.

    For "add": ``once`` accumulates bf16/fp16 in fp32 (on ``fp32_temp(shape)``, a float32 HBM array) and rounds
    at the end; otherwise every add rounds, adding ``alpha * source`` exactly (``fused``) or ``source * alpha``
    rounded to the dtype."""
    iv = index.reshape(-1)
    if selfv is not None:
        _copy_into(nc, ov, selfv)
    size = ov.shape[dim]
    _check_range(nc, iv, size, negative, error)
    if iv.size == 0 or ov.size == 0:
        return
    stage = _Fp32Stage(nc, ov, fp32_temp, enabled=mode == "add" and once)
    work = stage.view
    shape, lead, c, inner, strides, axes = _index_dim_access(work, dim, iv, srcv)
    if _prod(shape) == 0:
        return
    term = _Index(_embed(iv, lead, axes), _estrides(work)[dim], size, negative)
    dst = _Rows(work, lead, strides, c, inner[0], (term,))
    src = _Rows.of(srcv, len(lead), c, inner[1]) if srcv is not None else _Const(nc, value, ov.dtype)
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


def index_add_paths(ndim: int, dim: int, alpha, index_dtype: torch.dtype) -> tuple[bool, bool]:
    """(once, fused) of CPU's index_add for a self of ``ndim`` dims: for dim 0 or the last, alpha 1 and int64
    indices index_add_ is scatter_add_ (``once``: fp32 accumulation for bf16/fp16, RuntimeError out of range);
    otherwise a loop of add_(slice, alpha) (``fused`` where the host's kernels fuse a multiply-add and self has
    more than one dim: one rounding per add; else source * alpha rounded first), IndexError. The eager kernel
    and the compiler's ``index_add`` step (asked when the graph is cut) both take these."""
    once = ndim > 1 and dim in (0, ndim - 1) and alpha == 1 and index_dtype == torch.int64
    return once, ndim > 1 and cpu_host.fused_multiply_add()


def index_add_error(once: bool, dim: int, size: int) -> Callable[[int], Exception]:
    """The exception CPU's index_add raises for an out-of-range index on the path ``index_add_paths`` names."""
    return _bounds_error(dim, size) if once else _index_range_error


def _index_add_compute(out: torch.Tensor, a: dict) -> None:
    _check_devices("aten::index_add", dict(a, out=out))
    self, index, source = a["self"], a["index"], a["source"]
    dim = _index_add_checks(self, a["dim"], index, source)
    alpha = scalar_of(a.get("alpha", 1))
    if not (self.dtype.is_floating_point or self.dtype.is_complex):
        alpha = int(alpha) if self.dtype != torch.bool else bool(alpha)
    size = self.shape[dim] if self.dim() else 1
    once, fused = index_add_paths(self.dim(), dim, alpha, index.dtype)
    _index_scatter_run(out, self, dim, index, source, "add", "index_add", index_add_error(once, dim, size),
                       alpha=alpha, once=once, fused=fused)


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
