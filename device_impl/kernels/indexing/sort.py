"""Sorting: sort (values_stable; stable, default and values overloads served), argsort, topk,
and _unique2.

Tiling: rows up to SORT_ROW_MAX elements sort 128 per instruction, one row per partition,
on GpSimd's stable ``sort``; longer rows are sorted by one GpSimd program over the row
spread across the partitions (SORT_SBUF_BYTES per partition). CPU's sort(stable=False)
and topk use libstdc++'s introsort / partial_sort / nth_element, which differ from the
stable order only on ties: rows with ties get CPU's permutation from the emulation below
(``_cpu_order``), run on GpSimd's cores. ``sort_rows`` is shared with the compiler
(``device_impl.compiler.steps`` runs stablehlo.sort with it). _unique2 sorts, marks each
value that differs from its predecessor, numbers groups with a scan and compacts.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
import torch

from device_impl.engine import launch
from device_impl.engine.dtypes import FP32, is_float
from device_impl.kernels.common import check_exact_dtype, hbm, resize_output
from device_impl.kernels.indexing.masked import _nonzero_into
from device_impl.kernels.indexing.rows import (
    BOOL,
    I64,
    P,
    SORT_ROW_MAX,
    SORT_SBUF_BYTES,
    _Const,
    _Index,
    _Rows,
    _move,
    _native,
    _row_tiles,
    _scan_into,
)
from device_impl.kernels.indexing.views import _copy_into, _empty, _fill, _prod, _reshaped, _view, _wrap_dim

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


def stable_order(self: torch.Tensor, dim: int, descending: bool, stable: bool) -> bool:
    """Whether CPU's sort of ``self`` along ``dim`` leaves ties in their order (the compiler's ``sort_whole`` step
    asks it of a traced meta): when asked, along an expanded dim (indices stay arange), and for long 1-D integer
    ascending sorts (fbgemm's radix sort); otherwise ties come out in std::sort's order."""
    radix = (self.dim() == 1 and not descending and not self.dtype.is_floating_point and self.dtype != torch.bool
             and self.numel() >= 32768)
    return stable or radix or self.dim() == 0 or self.stride(dim) == 0


@_native("aten::sort.values_stable", serves=("aten::sort.stable", "aten::sort", "aten::sort.values",
                                              "aten::argsort", "aten::argsort.stable", "aten::msort"))
def _sort_values_stable(a: dict):
    self, values, indices = a["self"], a["values"], a["indices"]
    dim = _wrap_dim(a.get("dim", -1), self.dim())
    descending = bool(a.get("descending", False))
    check_exact_dtype(values, self.dtype)
    check_exact_dtype(indices, torch.int64)
    shape = tuple(self.shape)
    for o in (values, indices):
        if tuple(o.shape) != shape:
            resize_output(o, shape)
    stable = stable_order(self, dim, descending, bool(a.get("stable")))
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
    # CPU's topk meta (TORCH_META_FUNC(topk)) checks both outs; an indices out of another dtype reached the DMA
    check_exact_dtype(values, self.dtype)
    check_exact_dtype(indices, torch.int64)
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
