"""kthvalue and mode along a dim: the values and the index CPU's own algorithms pick among ties.

Which of several equal elements (or NaNs, or 0.0 and -0.0) CPU returns is its algorithm's, not a rule of the op,
so each line is walked here by the same algorithm, as a GpSimd program over the line's elements (rows of the
other dims on partitions, each whole line loaded into SBUF in chunks):

* kthvalue (``kthvalue_out_impl_cpu``, Sorting.cpp): ATen's ``quick_select_template`` (SortingUtils.h: median of
  three, Hoare partition) on a copy of the line and its indices, with ``gt_or_nan(x, y) = (isnan(x) &&
  !isnan(y)) || x > y`` (NaN sorts last); the result is the k-1'th slot.
* mode (``mode`` kernel, Sorting.cpp / TensorCompare): (value, index) pairs sorted by ``std::sort`` with
  ``a.first < b.first`` (libstdc++'s introsort, the emulation sort/topk use: ``indexing.sort._stl_sort``), then the last element of the first longest run of equal
  values (runs split where ``a != b``, so each NaN is a run of its own).

Both walks are ports: tests/kernels and the op specs hold them to the live CPU on lines with many ties.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from device_impl.dispatch import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import is_float
from device_impl.kernels import overlap
from device_impl.kernels.common import COMPUTE_DTYPES, SCALAR_TYPE_NAMES, check_out, hbm, resize_output
from device_impl.kernels.elementwise.loop import _refuse
from device_impl.kernels.indexing.sort import _stl_sort
from device_impl.kernels.reduction.tiles import CHUNK, I64, P, _at, _boxes, _Grid, _kept_view, _out_shape, _wrap

LINE_BYTES = 32 * 1024  # per partition: rows of a block longer than this are walked one line at a time
_SELECT_STEPS = 8  # GpSimd element-steps per element: a few compare/swap passes of a selection or a sort


def quick_select(vals: list, idx: list, k: int) -> None:
    """ATen's quick_select_template, swapping values and indices alike, so slot k holds CPU's k'th element."""
    def gt(x, y) -> bool:
        return (x != x and y == y) or x > y

    def swap(i: int, j: int) -> None:
        vals[i], vals[j] = vals[j], vals[i]
        idx[i], idx[j] = idx[j], idx[i]

    lo, hi = 0, len(vals) - 1
    while True:
        if hi <= lo:
            return
        if hi == lo + 1:
            if gt(vals[lo], vals[hi]):
                swap(lo, hi)
            return
        mid = lo + (hi - lo) // 2
        swap(mid, lo + 1)
        if gt(vals[lo + 1], vals[hi]):
            swap(lo + 1, hi)
        if gt(vals[lo], vals[hi]):
            swap(lo, hi)
        if gt(vals[lo + 1], vals[lo]):
            swap(lo + 1, lo)
        i, j, piv = lo + 1, hi, vals[lo]
        while True:
            i += 1
            while gt(piv, vals[i]):
                i += 1
            j -= 1
            while gt(vals[j], piv):
                j -= 1
            if j < i:
                break
            swap(i, j)
        swap(lo, j)
        if j <= k:
            lo = i
        if j >= k:
            hi = j - 1


def _kth_line(line: np.ndarray, k: int) -> tuple[Any, int]:
    vals, idx = list(line), list(range(len(line)))
    quick_select(vals, idx, k - 1)
    return vals[k - 1], idx[k - 1]


def _mode_line(line: np.ndarray) -> tuple[Any, int]:
    pairs = [(v, i) for i, v in enumerate(line)]
    _stl_sort(pairs, 0, len(pairs), lambda p, q: p[0] < q[0])
    best, best_i, best_freq, freq = line.dtype.type(0), 0, 0, 0
    for i, (v, j) in enumerate(pairs):
        freq += 1
        if i == len(pairs) - 1 or v != pairs[i + 1][0]:
            if freq > best_freq:
                best, best_i, best_freq = v, j, freq
            freq = 0
    return best, best_i


def _select(name: str, line_fn: Callable[[np.ndarray], tuple[Any, int]], x: torch.Tensor, dim: int,
            values: torch.Tensor, indices: torch.Tensor) -> None:
    """values/indices (already shaped) = line_fn of each line of x along dim (x has elements and dim does too)."""
    xv = hbm(x)
    nd = xv.ndim
    if nd == 0:
        xv = xv.reshape(1)
        nd, dim = 1, 0
    kdims = [d for d in range(nd) if d != dim]
    ov = _kept_view(values, (dim,), nd) if values.dim() == nd else hbm(values)
    iv = _kept_view(indices, (dim,), nd) if indices.dim() == nd else hbm(indices)
    g = _Grid([xv.shape[d] for d in kdims], [xv.shape[dim]], kr=[xv.transpose(kdims + [dim])],
              k=[ov.reshape(()), iv.reshape(())] if not kdims else [ov, iv])
    X, (V, Ix) = g.kr[0], g.k
    length = g.cols
    chunks = list(_boxes(g.rshape, CHUNK))
    wide = np.float64 if is_float(X.dtype) else None

    def program(vals, inds, line):
        src = line.astype(wide) if wide is not None else line
        for r in range(src.shape[0]):
            v, i = line_fn(src[r])
            vals[r, 0] = v
            inds[r, 0] = i

    with launch(name, values.device.index) as nc:
        if length * X.dtype.itemsize > LINE_BYTES:  # long lines: one at a time, spread over the partitions
            f = -(-length // P)
            full, rest = divmod(length, f)
            for at in np.ndindex(*g.kshape):
                box = tuple(slice(i, i + 1) for i in at)
                src = _at(X, box).reshape(length)
                mark = nc.mark()
                line = nc.sbuf_tile((full + bool(rest), f), X.dtype)
                nc.vector.memset(line, 0)
                nc.dma.load(line[:full], src[:full * f].reshape(full, f))
                if rest:
                    nc.dma.load(line[full:full + 1, :rest], src[full * f:].reshape(1, rest))
                vals = nc.sbuf_tile((1, 1), V.dtype)
                inds = nc.sbuf_tile((1, 1), I64)
                nc.gpsimd.run(f"{name}_select", lambda v, i, t: program(v, i, t.reshape(1, -1)[:, :length]),
                              (vals, inds), (line,), elements=length,
                              factor=_SELECT_STEPS * max(1, math.log2(max(length, 2))))
                nc.dma.store(_at(V, box).reshape(1, 1), vals)
                nc.dma.store(_at(Ix, box).reshape(1, 1), inds)
                nc.release_to(mark)
            return
        for _, p, rsl in _boxes(g.kshape, P):
            mark = nc.mark()
            line = nc.sbuf_tile((p, length), X.dtype)
            for c0, f, csl in chunks:
                nc.dma.load(line[:, c0:c0 + f], _at(X, rsl + csl))
            vals = nc.sbuf_tile((p, 1), V.dtype)
            inds = nc.sbuf_tile((p, 1), I64)
            nc.gpsimd.run(f"{name}_select", program, (vals, inds), (line,), elements=p * length,
                          factor=_SELECT_STEPS * max(1, math.log2(max(length, 2))))
            nc.dma.store(_at(V, rsl), vals)
            nc.dma.store(_at(Ix, rsl), inds)
            nc.release_to(mark)


def _outputs(x: torch.Tensor, dim: int, keepdim: bool, values: torch.Tensor | None, indices: torch.Tensor | None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    shape = _out_shape(x, (dim,) if x.dim() else (), keepdim) if x.dim() else ()
    if values is None:
        values = torch.empty(shape, dtype=x.dtype, device=x.device)
        indices = torch.empty(shape, dtype=torch.int64, device=x.device)
    else:
        check_out(values, shape, x.dtype, [x], exact_dtype=True)
        check_out(indices, shape, torch.int64, [x], exact_dtype=True)
    return values, indices


def _nonempty(x: torch.Tensor, dim: int, name: str) -> None:
    if x.dim() and x.shape[dim] == 0:
        raise IndexError(f"{name}(): Expected reduction dim {dim} to have non-zero size.")


@TABLE.native("aten::kthvalue.values", dtypes=COMPUTE_DTYPES)
def _kthvalue_values(self: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False, *, values: torch.Tensor,
                     indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    dim = _wrap(dim, self.dim())
    _nonempty(self, dim, "kthvalue")
    size = self.shape[dim] if self.dim() else 1
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {dim}")
    if self.dtype == torch.bool:
        raise _refuse("kthvalue_cpu", self.dtype)
    for out in (values, indices):  # CPU's at::assert_no_overlap(self, out): a full overlap too
        overlap.assert_no_overlap(out, self)
    values, indices = _outputs(self, dim, keepdim, values, indices)
    if values.numel():
        _select("kthvalue", lambda line: _kth_line(line, k), self, dim, values, indices)
    return values, indices


@TABLE.native("aten::mode.values", dtypes=COMPUTE_DTYPES)
def _mode_values(self: torch.Tensor, dim: int = -1, keepdim: bool = False, *, values: torch.Tensor,
                 indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU's mode_out: the outs' dtypes checked before the dim, then mode's result copied into them."""
    if values.dtype != self.dtype:
        raise RuntimeError(f"expected scalar type '{SCALAR_TYPE_NAMES[self.dtype]}' but got "
                           f"'{SCALAR_TYPE_NAMES[values.dtype]}' for values output")
    if indices.dtype != torch.int64:
        raise RuntimeError(f"expected scalar type 'Long' but got '{SCALAR_TYPE_NAMES[indices.dtype]}' for indices "
                           f"output")
    result = _mode(self, dim, keepdim)
    for out, res in zip((values, indices), result):
        if out.shape != res.shape:
            resize_output(out, res.shape)
        out.copy_(res)
    return values, indices


@TABLE.native("aten::mode", dtypes=COMPUTE_DTYPES)
def _mode(self: torch.Tensor, dim: int = -1, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    dim = _wrap(dim, self.dim())
    _nonempty(self, dim, "mode")
    values, indices = _outputs(self, dim, keepdim, None, None)
    if values.numel():
        _select("mode", _mode_line, self, dim, values, indices)
    return values, indices
