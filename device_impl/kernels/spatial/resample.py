"""Upsampling: upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d, upsample_linear1d,
upsample_bilinear2d, upsample_bicubic2d, upsample_trilinear3d (+ backward).

Separable per-axis stages with indirect-DMA row gathers. A stage resamples one spatial axis a of a
[N, C, D, H, W] buffer viewed as a row table [(dims up to a), (dims after a)]: output rows on partitions (128
per tile), columns along the free axis (``FREE`` per tile). Output row r = (outer, o) reads the input rows
(outer, i_j(o)) of its taps (1 nearest, 2 linear, 4 cubic) by indirect DMA (row numbers computed on VectorE
from a GpSimd iota, with CPU's float32 source-index formulas) and blends them with per-partition weights on
VectorE in CPU's order (t0*w0 + t1*w1 + ...); intermediates of blending stages stay in fp32. The backward
stage is the adjoint: weighted rows are scattered with DMA accumulate into an fp32 table; nearest's and bicubic's
backward instead scatter every (output element, tap) term in CPU's loop order, one add at a time
(``_nearest_backward``, ``_cubic_backward``: two separable stages group an input element's terms otherwise,
which shows in the last place and near overflow). Whether CPU takes
its vectorized or its generic kernel (``_vectorized_cond``) decides the weights' rounding and nearest's
index special cases.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import FLOAT_DTYPES, check_out, hbm
from device_impl.kernels.spatial.tiles import FREE, I64, P, _Scratch, _copy_cast, _fill, _meta, _to5d


class _Axis:
    """How CPU maps output index o to input taps along one axis (kind: nearest, nearest_exact, linear, cubic)."""

    def __init__(self, isize, osize, kind, scale=None, align_corners=False, round_to=None, special=False):
        self.I, self.O, self.kind = int(isize), int(osize), kind
        self.align = bool(align_corners)
        self.round_to = round_to  # numpy dtype the weights are stored in on CPU's generic path
        self.special = special  # nearest: CPU's nearest_idx special cases (O == I, O == 2I)
        f32 = np.float32
        if kind in ("linear", "cubic") and self.align:
            self.scale = f32(self.I - 1) / f32(self.O - 1) if self.O > 1 else f32(0)
        else:
            self.scale = f32(1.0 / scale) if scale is not None and scale > 0 else f32(self.I) / f32(self.O)


def _rows2d(view: np.ndarray, axis: int):
    """[N, C, D, H, W] -> [(dims <= axis), (dims > axis)] as a view, or None when strides do not allow it."""
    rows = 1
    for s in view.shape[:axis + 1]:
        rows *= s
    cols = view.size // rows if rows else 0
    v = view.view()
    try:
        v.shape = (rows, cols)
    except AttributeError:
        return None
    return v


def _round_weight(nc, t, dtype):
    """Round a weight tile through ``dtype`` (CPU stores weights in the input dtype on its generic path)."""
    if dtype is None:
        return
    r = nc.sbuf_tile(t.shape, dtype)
    nc.vector.tensor_copy(r, t)
    nc.vector.tensor_copy(t, r)


def _cubic_weights(nc, t, p):
    """CPU's get_cubic_upsample_coefficients(A = -0.75) for lambda tile t: four [p, 1] fp32 tiles."""
    a = -0.75

    def conv1(x):  # ((A + 2) * x - (A + 3)) * x * x + 1
        r = nc.sbuf_tile((p, 1), FP32)
        nc.vector.tensor_scalar(r, x, "multiply", a + 2, dtype=FP32)
        nc.vector.tensor_scalar(r, r, "subtract", a + 3, dtype=FP32)
        nc.vector.tensor_tensor(r, r, x, "multiply", dtype=FP32)
        nc.vector.tensor_tensor(r, r, x, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(r, r, "add", 1.0, dtype=FP32)
        return r

    def conv2(x):  # ((A * x - 5A) * x + 8A) * x - 4A
        r = nc.sbuf_tile((p, 1), FP32)
        nc.vector.tensor_scalar(r, x, "multiply", a, dtype=FP32)
        nc.vector.tensor_scalar(r, r, "subtract", 5 * a, dtype=FP32)
        nc.vector.tensor_tensor(r, r, x, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(r, r, "add", 8 * a, dtype=FP32)
        nc.vector.tensor_tensor(r, r, x, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(r, r, "subtract", 4 * a, dtype=FP32)
        return r

    x1p = nc.sbuf_tile((p, 1), FP32)
    nc.vector.tensor_scalar(x1p, t, "add", 1.0, dtype=FP32)
    x2 = nc.sbuf_tile((p, 1), FP32)
    nc.vector.tensor_scalar(x2, t, "subtract", 1.0, reverse=True, dtype=FP32)
    x2p = nc.sbuf_tile((p, 1), FP32)
    nc.vector.tensor_scalar(x2p, x2, "add", 1.0, dtype=FP32)
    return [conv2(x1p), conv1(t), conv1(x2), conv2(x2p)]


def _source_taps(nc, o_tile, ax: _Axis, p):
    """[(index [p, 1] int64, weight [p, 1] fp32 or None)] for output indices ``o_tile`` along ``ax``."""
    I, O = ax.I, ax.O
    if ax.kind in ("nearest", "nearest_exact"):
        i0 = nc.sbuf_tile((p, 1), I64)
        if ax.special and ax.kind == "nearest" and O == I:
            nc.vector.tensor_copy(i0, o_tile)
            return [(i0, None)]
        if ax.special and ax.kind == "nearest" and O == 2 * I:
            nc.vector.tensor_scalar(i0, o_tile, "right_shift", 1)
            return [(i0, None)]
        of = nc.sbuf_tile((p, 1), FP32)
        nc.vector.tensor_copy(of, o_tile)
        if ax.kind == "nearest":  # floorf(o * scale)
            nc.vector.tensor_scalar(of, of, "multiply", ax.scale, dtype=FP32)
        elif ax.special:  # nearest_exact_idx: floorf((o + 0.5) * scale)
            nc.vector.tensor_scalar(of, of, "add", 0.5, dtype=FP32)
            nc.vector.tensor_scalar(of, of, "multiply", ax.scale, dtype=FP32)
        else:  # generic exact: floorf(max(scale * (o + 0.5) - 0.5, 0) + 0.5)
            nc.vector.tensor_scalar(of, of, "add", 0.5, dtype=FP32)
            nc.vector.tensor_scalar(of, of, "multiply", ax.scale, dtype=FP32)
            nc.vector.tensor_scalar(of, of, "subtract", 0.5, dtype=FP32)
            nc.vector.tensor_scalar(of, of, "maximum", 0.0, dtype=FP32)
            nc.vector.tensor_scalar(of, of, "add", 0.5, dtype=FP32)
        nc.vector.tensor_unary(of, of, "floor", dtype=FP32)
        nc.vector.tensor_copy(i0, of)
        nc.vector.tensor_scalar(i0, i0, "minimum", I - 1)
        return [(i0, None)]
    if ax.kind == "linear" and O == I:  # CPU: weights (1, 0) on the same element (inf * 0 gives NaN, as on CPU)
        i0 = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_copy(i0, o_tile)
        l0 = nc.sbuf_tile((p, 1), FP32)
        nc.vector.memset(l0, 1.0)
        l1 = nc.sbuf_tile((p, 1), FP32)
        nc.vector.memset(l1, 0.0)
        return [(i0, l0), (i0, l1)]
    real = nc.sbuf_tile((p, 1), FP32)
    nc.vector.tensor_copy(real, o_tile)
    if ax.align:
        nc.vector.tensor_scalar(real, real, "multiply", ax.scale, dtype=FP32)
    else:
        nc.vector.tensor_scalar(real, real, "add", 0.5, dtype=FP32)
        nc.vector.tensor_scalar(real, real, "multiply", ax.scale, dtype=FP32)
        nc.vector.tensor_scalar(real, real, "subtract", 0.5, dtype=FP32)
        if ax.kind == "linear":  # cubic keeps negative source positions
            nc.vector.tensor_scalar(real, real, "maximum", 0.0, dtype=FP32)
    fl = nc.sbuf_tile((p, 1), FP32)
    nc.vector.tensor_unary(fl, real, "floor", dtype=FP32)
    nc.vector.tensor_scalar(fl, fl, "minimum", float(I - 1), dtype=FP32)
    i0 = nc.sbuf_tile((p, 1), I64)
    nc.vector.tensor_copy(i0, fl)
    lam = nc.sbuf_tile((p, 1), FP32)
    nc.vector.tensor_tensor(lam, real, fl, "subtract", dtype=FP32)
    nc.vector.tensor_scalar(lam, lam, "maximum", 0.0, dtype=FP32)
    nc.vector.tensor_scalar(lam, lam, "minimum", 1.0, dtype=FP32)
    if ax.kind == "linear":
        i1 = nc.sbuf_tile((p, 1), I64)
        off = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_scalar(off, i0, "less", I - 1)
        nc.vector.tensor_tensor(i1, i0, off, "add")
        _round_weight(nc, lam, ax.round_to)  # l1 = rnd(l1); l0 = rnd(1 - l1)
        l0 = nc.sbuf_tile((p, 1), FP32)
        nc.vector.tensor_scalar(l0, lam, "subtract", 1.0, reverse=True, dtype=FP32)
        _round_weight(nc, l0, ax.round_to)
        return [(i0, l0), (i1, lam)]
    weights = _cubic_weights(nc, lam, p)
    taps = []
    for j, wt in enumerate(weights):  # index max(min(i0 + j - 1, I - 1), 0)
        ij = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_scalar(ij, i0, "add", j - 1)
        nc.vector.tensor_scalar(ij, ij, "minimum", I - 1)
        nc.vector.tensor_scalar(ij, ij, "maximum", 0)
        _round_weight(nc, wt, ax.round_to)
        taps.append((ij, wt))
    return taps


def _row_plan(nc, r0, p, ax: _Axis):
    """Taps with source row numbers (outer * I + i) for output rows [r0, r0 + p)."""
    r = nc.sbuf_tile((p, 1), I64)
    nc.gpsimd.iota(r, base=r0, partition_step=1, free_step=0)
    outer = nc.sbuf_tile((p, 1), I64)
    nc.vector.tensor_scalar(outer, r, "floor_divide", ax.O)
    o = nc.sbuf_tile((p, 1), I64)
    nc.vector.tensor_scalar(o, r, "remainder", ax.O)
    taps = _source_taps(nc, o, ax, p)
    nc.vector.tensor_scalar(outer, outer, "multiply", ax.I)
    rows = []
    for idx, wt in taps:
        row = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_tensor(row, idx, outer, "add")
        rows.append((row, wt))
    return rows


def _tap_blocks(nc, rows: int, cols: int, ax: _Axis):
    """A 2-d stage's [P, FREE] blocks: yields (r0, p, taps, c0, c1), each row block's taps (``_row_plan``) made
    once for its column blocks; a block's tiles are released after it, the taps after their rows."""
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        mark = nc.mark()
        taps = _row_plan(nc, r0, p, ax)
        for c0 in range(0, cols, FREE):
            m = nc.mark()
            yield r0, p, taps, c0, min(cols, c0 + FREE)
            nc.release_to(m)
        nc.release_to(mark)


def _store_as(nc, dst: np.ndarray, acc: Tile) -> None:
    """Store a block's sum, rounded once to ``dst``'s dtype where it is not the sum's."""
    res = acc
    if acc.dtype != dst.dtype:
        res = nc.sbuf_tile(acc.shape, dst.dtype)
        nc.vector.tensor_copy(res, acc)
    nc.dma.store(dst, res)


def _resample_stage(nc, dst2d, src2d, ax: _Axis) -> None:
    rows, cols = dst2d.shape
    for r0, p, taps, c0, c1 in _tap_blocks(nc, rows, cols, ax):
        acc = None
        for row, wt in taps:
            a = nc.sbuf_tile((p, c1 - c0), src2d.dtype)
            nc.dma.load_rows(a, src2d[:, c0:c1], row)
            if wt is None:
                acc = a
                break
            t = nc.sbuf_tile((p, c1 - c0), FP32)
            nc.vector.tensor_tensor(t, a, wt, "multiply", dtype=FP32)
            if acc is None:
                acc = t
            else:
                nc.vector.tensor_tensor(acc, acc, t, "add", dtype=FP32)
        _store_as(nc, dst2d[r0:r0 + p, c0:c1], acc)


def _resample_stage_backward(nc, acc2d, g2d, ax: _Axis) -> None:
    """acc2d[(outer, i)] += sum over taps (o -> i) of weight * g2d[(outer, o)] (DMA accumulate)."""
    rows, cols = g2d.shape
    for r0, p, taps, c0, c1 in _tap_blocks(nc, rows, cols, ax):
        g = nc.sbuf_tile((p, c1 - c0), g2d.dtype)
        nc.dma.load(g, g2d[r0:r0 + p, c0:c1])
        for row, wt in taps:
            t = nc.sbuf_tile((p, c1 - c0), FP32)
            if wt is None:
                nc.vector.tensor_copy(t, g)
            else:
                nc.vector.tensor_tensor(t, g, wt, "multiply", dtype=FP32)
            nc.dma.store_rows(acc2d[:, c0:c1], row, t, accumulate=True)


def _gather_stage(nc, dst2d, src2d, ax: _Axis, tap: int) -> None:
    """dst2d's rows are src2d's rows of ``ax``'s tap ``tap`` (its indices; no weight): copies, in src2d's dtype."""
    rows, cols = dst2d.shape
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        mark = nc.mark()
        row, _ = _row_plan(nc, r0, p, ax)[tap]
        for c0 in range(0, cols, FREE):
            c1 = min(cols, c0 + FREE)
            m = nc.mark()
            a = nc.sbuf_tile((p, c1 - c0), src2d.dtype)
            nc.dma.load_rows(a, src2d[:, c0:c1], row)
            nc.dma.store(dst2d[r0:r0 + p, c0:c1], a)
            nc.release_to(m)
        nc.release_to(mark)


def _column_weights(nc, scratch, ax: _Axis) -> list[np.ndarray]:
    """``ax``'s tap weights per output index, [O] fp32 arrays in scratch (one per tap), for a stage that reads them
    along its free axis."""
    weights = [scratch.new((ax.O,), FP32) for _ in range(2)]
    for o0 in range(0, ax.O, P):
        p = min(P, ax.O - o0)
        mark = nc.mark()
        o = nc.sbuf_tile((p, 1), I64)
        nc.gpsimd.iota(o, base=o0, partition_step=1, free_step=0)
        for w, (_, wt) in zip(weights, _source_taps(nc, o, ax, p)):
            nc.dma.store(w[o0:o0 + p].reshape(p, 1), wt)
        nc.release_to(mark)
    return weights


def _bilinear_combined(nc, scratch, out5, x5, ax_h: _Axis, ax_w: _Axis) -> None:
    """CPU's vectorized bilinear kernel (``cpu_upsample_linear_channels_last``, which ``_vectorized_cond`` picks):
    each output is one sum of four products, ``x00 * w00 + x01 * w01 + x10 * w10 + x11 * w11`` with ``wab = h_a *
    w_b`` in fp32, not the generic kernel's nested ``(x00 * w0 + x01 * w1) * h0 + ...`` the separable stages
    compute. The two differ in a zero's sign: x00 = -0.0 (h0 = w0 = 1), x01 = -1, x10 = -1.7, x11 = 0.54 (weights 0)
    is -0.0 + -0.0 + -0.0 + 0.0 = +0.0 on CPU, -0.0 nested (the designed float16 signed_zero case). The W taps'
    columns are gathered first (copies, one buffer per tap), then each output row loads its two H taps' rows of both
    and sums the four products in CPU's order."""
    n, c, d = x5.shape[:3]
    gathered = []
    for tap in range(2):
        g = scratch.new((n, c, d, ax_h.I, ax_w.O), x5.dtype)
        src = x5
        if _rows2d(src, 4) is None:
            src = scratch.new(x5.shape, x5.dtype)
            _copy_cast(nc, src, x5)
        _gather_stage(nc, _rows2d(g, 4), _rows2d(src, 4), ax_w, tap)
        gathered.append(_rows2d(g, 3))
    wcols = _column_weights(nc, scratch, ax_w)
    dst = out5 if _rows2d(out5, 3) is not None else scratch.new(out5.shape, out5.dtype)
    dst2d = _rows2d(dst, 3)
    rows, cols = dst2d.shape
    for r0, p, taps, c0, c1 in _tap_blocks(nc, rows, cols, ax_h):
        wb = []
        for w in wcols:
            t = nc.sbuf_tile((p, c1 - c0), FP32)
            nc.dma.load(t, np.broadcast_to(w[c0:c1], (p, c1 - c0)))
            wb.append(t)
        acc = nc.sbuf_tile((p, c1 - c0), FP32)
        first = True
        for row, ha in taps:
            for g, wt in zip(gathered, wb):
                a = nc.sbuf_tile((p, c1 - c0), g.dtype)
                nc.dma.load_rows(a, g[:, c0:c1], row)
                weight = nc.sbuf_tile((p, c1 - c0), FP32)
                nc.vector.tensor_scalar(weight, wt, "multiply", ha, dtype=FP32)  # h_a * w_b
                if first:
                    nc.vector.tensor_tensor(acc, a, weight, "multiply", dtype=FP32)
                    first = False
                else:
                    t = nc.sbuf_tile((p, c1 - c0), FP32)
                    nc.vector.tensor_tensor(t, a, weight, "multiply", dtype=FP32)
                    nc.vector.tensor_tensor(acc, acc, t, "add", dtype=FP32)
        _store_as(nc, dst2d[r0:r0 + p, c0:c1], acc)
    if dst is not out5:
        _copy_cast(nc, out5, dst)


def _resample(nc, scratch, out5, x5, axes: dict, combined: bool = False) -> None:
    """out5 = separable resampling of x5 along the spatial axes in ``axes`` ({axis: _Axis}), innermost first;
    ``combined``: CPU's vectorized bilinear kernel (``_bilinear_combined``)."""
    if combined and sorted(axes) == [3, 4] and all(a.kind == "linear" for a in axes.values()):
        _bilinear_combined(nc, scratch, out5, x5, axes[3], axes[4])
        return
    order = sorted(axes, reverse=True)
    cur = x5
    if order and _rows2d(cur, order[0]) is None:
        tmp = scratch.new(x5.shape, x5.dtype)
        _copy_cast(nc, tmp, x5)
        cur = tmp
    blends = any(a.kind in ("linear", "cubic") for a in axes.values())
    for k, axis in enumerate(order):
        last = k == len(order) - 1
        shape = list(cur.shape)
        shape[axis] = axes[axis].O
        if last and _rows2d(out5, axis) is not None:
            dst = out5
        else:  # intermediates of blending stages stay in fp32 (CPU's opmath)
            dst = scratch.new(shape, FP32 if blends else out5.dtype)
        _resample_stage(nc, _rows2d(dst, axis), _rows2d(cur, axis), axes[axis])
        cur = dst
    if cur is not out5:
        _copy_cast(nc, out5, cur)


def _nearest_targets(nc, r0: int, p: int, axes: dict):
    """[p, 1] int64: the flat input element (outer, i_D, i_H, i_W) each of the output elements [r0, r0 + p) (flat,
    C order over the resampled trailing axes ``axes``) reads, each axis by its nearest rule (``_source_taps``)."""
    r = nc.sbuf_tile((p, 1), I64)
    nc.gpsimd.iota(r, base=r0, partition_step=1, free_step=0)
    target = nc.sbuf_tile((p, 1), I64)
    nc.vector.memset(target, 0)
    stride = 1
    for axis in sorted(axes, reverse=True):  # innermost first
        ax = axes[axis]
        o = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_scalar(o, r, "remainder", ax.O)
        nc.vector.tensor_scalar(r, r, "floor_divide", ax.O)
        ((i, _),) = _source_taps(nc, o, ax, p)
        nc.vector.scalar_tensor_tensor(target, i, "multiply", stride, "add", target)
        stride *= ax.I
    nc.vector.scalar_tensor_tensor(target, r, "multiply", stride, "add", target)  # r is now the outer index
    return target


def _scatter_operands(nc, scratch, gi5, go5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An in-order scatter backward's operands: the output gradient as one row per element (copied where its layout
    gives no such view), a zeroed fp32 accumulator of grad_input's shape (CPU's buffer for bfloat16/float16) and its
    rows, the scatter's table."""
    flat_out = _rows2d(go5, 4)
    if flat_out is None:
        flat_out = scratch.new(go5.shape, go5.dtype)
        _copy_cast(nc, flat_out, go5)
        flat_out = _rows2d(flat_out, 4)
    acc = scratch.new(gi5.shape, FP32)
    _fill(nc, acc, 0.0)
    return flat_out, acc, _rows2d(acc, 4)


def _nearest_backward(nc, scratch, gi5, go5, axes: dict) -> None:
    """Nearest's adjoint as one scatter: every output element's gradient added, in C order, to the input element
    it read (``store_rows(in_order=True)``: one add per element, rounded each time), as CPU's
    ``cpu_upsample_nearest_backward`` (and its channels-last form) adds them, element by element in (od, oh, ow)
    order, into grad_input (an fp32 buffer for bfloat16/float16). Two separable stages (H's sums, then W's) group
    the terms otherwise where both axes gather several (a (2, 512) gradient into (3, 1): 192 ULP)."""
    flat_out, acc, table = _scatter_operands(nc, scratch, gi5, go5)
    for r0 in range(0, flat_out.shape[0], P):
        p = min(P, flat_out.shape[0] - r0)
        mark = nc.mark()
        target = _nearest_targets(nc, r0, p, axes)
        g = nc.sbuf_tile((p, 1), go5.dtype)
        nc.dma.load(g, flat_out[r0:r0 + p])
        t = nc.sbuf_tile((p, 1), FP32)
        nc.vector.tensor_copy(t, g)
        nc.dma.store_rows(table, target, t, accumulate=True, in_order=True)
        nc.release_to(mark)
    _copy_cast(nc, gi5, acc)


def _pick(nc, choice, options: list, dtype):
    """[p, 1] = options[k] where ``choice`` (int64 [p, 1]) is k: sum_k (choice == k) * options[k], exact (a weight
    or index times 1 or 0)."""
    p = choice.partitions
    picked = None
    for k, opt in enumerate(options):
        hit = nc.sbuf_tile((p, 1), dtype)
        nc.vector.tensor_scalar(hit, choice, "equal", k, dtype=dtype)
        if picked is None:
            picked = nc.sbuf_tile((p, 1), dtype)
            nc.vector.tensor_tensor(picked, hit, opt, "multiply", dtype=dtype)
        else:
            term = nc.sbuf_tile((p, 1), dtype)
            nc.vector.tensor_tensor(term, hit, opt, "multiply", dtype=dtype)
            nc.vector.tensor_tensor(picked, picked, term, "add", dtype=dtype)
    return picked


def _cubic_backward(nc, scratch, gi5, go5, axes: dict) -> None:
    """Bicubic's adjoint as CPU's ``upsample_bicubic2d_backward_out_frame`` forms it: per output element in C order,
    its 16 taps, x tap ii outer and y tap jj inner, each ``(g * wy[jj]) * wx[ii]`` added (rounded each time, fp32)
    to the clamped input element, as one in-order scatter whose rows are (element, ii, jj) (8 elements a tile). Two
    separable stages (H's weighted sums, then W's) group the terms otherwise: near overflow other positions end
    +inf, -inf or NaN (designed case upsample_bicubic2d_backward-float32-near_overflow-contiguous-128)."""
    (h_axis, ax_h), (w_axis, ax_w) = sorted(axes.items())
    flat_out, acc, table = _scatter_operands(nc, scratch, gi5, go5)
    rows = flat_out.shape[0] * 16
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        mark = nc.mark()
        r = nc.sbuf_tile((p, 1), I64)
        nc.gpsimd.iota(r, base=r0, partition_step=1, free_step=0)
        parts = {}
        for name, op, k in (("tap", "remainder", 16), ("e", "floor_divide", 16)):
            parts[name] = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(parts[name], r, op, k)
        ii, jj = nc.sbuf_tile((p, 1), I64), nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_scalar(ii, parts["tap"], "floor_divide", 4)
        nc.vector.tensor_scalar(jj, parts["tap"], "remainder", 4)
        ox, oy, outer = (nc.sbuf_tile((p, 1), I64) for _ in range(3))
        nc.vector.tensor_scalar(ox, parts["e"], "remainder", ax_w.O)
        nc.vector.tensor_scalar(outer, parts["e"], "floor_divide", ax_w.O)
        nc.vector.tensor_scalar(oy, outer, "remainder", ax_h.O)
        nc.vector.tensor_scalar(outer, outer, "floor_divide", ax_h.O)
        taps_x, taps_y = _source_taps(nc, ox, ax_w, p), _source_taps(nc, oy, ax_h, p)
        wx = _pick(nc, ii, [w for _, w in taps_x], FP32)
        wy = _pick(nc, jj, [w for _, w in taps_y], FP32)
        ix = _pick(nc, ii, [i for i, _ in taps_x], I64)
        iy = _pick(nc, jj, [i for i, _ in taps_y], I64)
        target = nc.sbuf_tile((p, 1), I64)
        nc.vector.scalar_tensor_tensor(target, outer, "multiply", ax_h.I, "add", iy)
        nc.vector.scalar_tensor_tensor(target, target, "multiply", ax_w.I, "add", ix)
        g = nc.sbuf_tile((p, 1), go5.dtype)
        nc.dma.load_rows(g, flat_out, parts["e"])
        value = nc.sbuf_tile((p, 1), FP32)
        nc.vector.tensor_tensor(value, g, wy, "multiply", dtype=FP32)
        nc.vector.tensor_tensor(value, value, wx, "multiply", dtype=FP32)
        nc.dma.store_rows(table, target, value, accumulate=True, in_order=True)
        nc.release_to(mark)
    _copy_cast(nc, gi5, acc)


def _resample_backward(nc, scratch, gi5, go5, axes: dict) -> None:
    """Adjoint of _resample: stages in reverse order, each scattering into a zeroed fp32 table (nearest and
    bicubic: one scatter in CPU's order, ``_nearest_backward``, ``_cubic_backward``)."""
    if all(ax.kind in ("nearest", "nearest_exact") for ax in axes.values()):
        _nearest_backward(nc, scratch, gi5, go5, axes)
        return
    if len(axes) == 2 and all(ax.kind == "cubic" for ax in axes.values()):
        _cubic_backward(nc, scratch, gi5, go5, axes)
        return
    order = sorted(axes)  # outermost first (reverse of the forward)
    cur = go5
    if order and _rows2d(cur, order[0]) is None:
        tmp = scratch.new(go5.shape, go5.dtype)
        _copy_cast(nc, tmp, go5)
        cur = tmp
    for axis in order:
        shape = list(cur.shape)
        shape[axis] = axes[axis].I
        acc = scratch.new(shape, FP32)
        _fill(nc, acc, 0.0)
        _resample_stage_backward(nc, _rows2d(acc, axis), _rows2d(cur, axis), axes[axis])
        cur = acc
    _copy_cast(nc, gi5, cur)


def _vectorized_cond(x: torch.Tensor, out_spatial, nsp: int) -> bool:
    """CPU's _use_vectorized_kernel_cond_{2d,3d}: the channels-last kernel (float weights, nearest_idx)."""
    if nsp == 2:
        return (x.is_contiguous(memory_format=torch.channels_last) and x.shape[1] > 3) or \
            sum(out_spatial) <= 128
    if nsp == 3:
        return (x.is_contiguous(memory_format=torch.channels_last_3d) and x.shape[1] > 3) or \
            sum(out_spatial) <= 48
    return False


_UPSAMPLE_NAMES = {
    "linear": {1: "upsample_linear1d", 2: "upsample_bilinear2d", 3: "upsample_trilinear3d"},
    "nearest": {1: "upsample_nearest1d", 2: "upsample_nearest2d", 3: "upsample_nearest3d"},
    "nearest_exact": {1: "_upsample_nearest_exact1d", 2: "_upsample_nearest_exact2d", 3: "_upsample_nearest_exact3d"},
    "cubic": {2: "upsample_bicubic2d"},
}


def _axes_for(kind, nsp, in_spatial, out_spatial, scales, align_corners, x, backward):
    """{axis (2..4 of the 5-d view): _Axis} for an nsp-d upsample."""
    np_dtype = hbm(x).dtype
    if kind == "cubic":  # always CPU's generic kernel
        vec = False
    else:
        vec = _vectorized_cond(x, out_spatial, nsp) or (nsp == 2 and torch.get_num_threads() == 1 and
                                                       x.shape[1] == 3)
    axes = {}
    for i in range(nsp):
        axis = 5 - nsp + i
        scale = scales[i] if scales is not None and i < len(scales) else None
        if kind in ("linear", "cubic"):
            round_to = None
            if not backward and np_dtype != FP32 and not vec:
                round_to = np_dtype
            axes[axis] = _Axis(in_spatial[i], out_spatial[i], kind, scale, align_corners, round_to)
        else:
            axes[axis] = _Axis(in_spatial[i], out_spatial[i], kind, scale, special=backward or vec)
    return axes


def _check_sizes(in_spatial: list, out_spatial: list) -> None:
    """CPU's upsample_{1,2,3}d_common_check: every input and output spatial size positive (the Python metas of
    the linear modes do not check it: an output width of 0 divided by zero in the source-index scale)."""
    if all(s > 0 for s in in_spatial) and all(s > 0 for s in out_spatial):
        return
    names = ("D", "H", "W")[3 - len(in_spatial):]
    got = lambda sizes: ", ".join(f"{n}: {v}" for n, v in zip(names, sizes))  # noqa: E731
    joint = " and " if len(in_spatial) == 1 else " "
    raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({got(in_spatial)}){joint}"
                       f"output ({got(out_spatial)})")


def _upsample_meta(functional, x: torch.Tensor, *args) -> torch.Tensor:
    """PyTorch's meta of an upsample (its checks and output shape) on ``x``'s metadata. Its Python meta passes
    an int to torch._check for an empty batch, a TypeError where CPU's kernel accepts an empty batch of non-empty
    (C, *spatial) and returns an empty result (and raises a RuntimeError where (C, *spatial) is empty too): so an
    empty batch runs the meta on a batch-1 stand-in and takes the batch back."""
    _check_sizes(list(x.shape[2:]), list(args[0]))
    if x.dim() == 0 or x.shape[0] != 0 or x.numel() != 0:
        return functional(_meta(x), *args)
    rest = tuple(x.shape[1:])
    if math.prod(rest) == 0:
        raise RuntimeError(f"Non-empty {x.dim()}D data tensor expected but got a tensor with sizes {list(x.shape)}")
    m = functional(torch.empty((1,) + rest, dtype=x.dtype, device="meta"), *args)
    return torch.empty((0,) + tuple(m.shape[1:]), dtype=m.dtype, device="meta")


def _register_upsample(kind: str, nsp: int) -> None:
    name = _UPSAMPLE_NAMES[kind][nsp]
    functional = getattr(torch.ops.aten, name).default
    backward_functional = getattr(torch.ops.aten, f"{name}_backward").default
    aligned = kind in ("linear", "cubic")
    dtypes = FLOAT_DTYPES if aligned else FLOAT_DTYPES | {torch.uint8}

    def run_out(x, *args, out):
        m = _upsample_meta(functional, x, *args)
        check_out(out, tuple(m.shape), x.dtype, (x,))
        if aligned:
            output_size, align_corners, *scales = args
        else:
            (output_size, *scales), align_corners = args, False
        if out.numel():
            axes = _axes_for(kind, nsp, x.shape[2:], list(output_size), scales, align_corners, x, False)
            with launch(name, x.device.index) as nc:
                _resample(nc, _Scratch(x.device), _to5d(hbm(out), nsp), _to5d(hbm(x), nsp), axes,
                          combined=kind == "linear" and _vectorized_cond(x, list(output_size), nsp))
        return out

    TABLE.native(f"aten::{name}.out", dtypes=dtypes)(run_out)
    TABLE.serves(f"aten::{name}", f"aten::{name}.out")

    def run_backward(grad_output, output_size, input_size, *args, grad_input):
        _check_sizes(list(input_size)[2:], list(output_size))
        m = backward_functional(_meta(grad_output), output_size, input_size, *args)
        check_out(grad_input, tuple(m.shape), grad_output.dtype, (grad_output,))
        if aligned:
            align_corners, *scales = args
        else:
            align_corners, scales = False, list(args)
        if grad_input.numel():
            like = torch.empty_strided(tuple(input_size), m.stride(), dtype=grad_output.dtype, device="meta")
            axes = _axes_for(kind, nsp, list(input_size)[2:], list(output_size), scales, align_corners, like, True)
            with launch(f"{name}_backward", grad_output.device.index) as nc:
                _resample_backward(nc, _Scratch(grad_output.device), _to5d(hbm(grad_input), nsp),
                                   _to5d(hbm(grad_output), nsp), axes)
        return grad_input

    TABLE.native(f"aten::{name}_backward.grad_input", dtypes=FLOAT_DTYPES)(run_backward)
    TABLE.serves(f"aten::{name}_backward", f"aten::{name}_backward.grad_input")


for _kind, _dims in _UPSAMPLE_NAMES.items():
    for _nsp in _dims:
        _register_upsample(_kind, _nsp)
