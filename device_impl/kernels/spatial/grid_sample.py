"""Grid sampling: grid_sampler_2d, grid_sampler_2d_backward (bilinear and nearest; zeros, border and
reflection padding).

Tiling: output positions on partitions (boxes of <= 128), channels on the free axis (``FREE`` per tile);
corners are gathered by indirect DMA from a channels-last copy of each input image with a trailing zero row,
which out-of-bounds taps read (``_grid_tables``). Source coordinates follow CPU's vectorized ComputeLocation
in the input dtype on VectorE (``_grid_coords``), corner rows and weights too (``_grid_corners``). Backward:
grad_input scattered per corner with DMA accumulate into an fp32 channels-last table; grad_grid from the
corner differences, summed over channels in CPU's order.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, hbm
from device_impl.kernels.spatial.tiles import BOOL, FREE, I64, P, _Scratch, _boxes, _copy_cast, _fill, _split


class _GridAxis:
    """CPU's vectorized ComputeLocation for one axis (size S), in the input dtype."""

    def __init__(self, size, align_corners, padding, dt):
        self.S = size
        self.align = align_corners
        self.padding = padding  # 0 zeros, 1 border, 2 reflection
        rnd = (lambda v: float(np.asarray(v, dtype=np.float32).astype(dt).astype(np.float32)))
        if align_corners:
            self.scaling = rnd(rnd(size - 1) / 2)
            self.low, self.twice_span, self.empty = 0.0, rnd(rnd(size - 1) * 2), size <= 1
        else:
            self.scaling = rnd(rnd(size) / 2)
            self.low, self.twice_span, self.empty = -0.5, rnd(rnd(size) * 2), size <= 0
        self.max_val = rnd(size - 1)


def _grid_coords(nc, g, ax: _GridAxis, dt, p, mult=None):
    """Source coordinate [p, 1] (dtype dt: every op rounds like CPU's Vectorized<dt>) from grid values g.

    With ``mult`` (a [p, 1] tile), also writes d(coordinate)/d(grid) as CPU's apply_get_grad."""
    c = nc.sbuf_tile((p, 1), dt)
    nc.vector.tensor_scalar(c, g, "add", 1.0, dtype=FP32)
    nc.vector.tensor_scalar(c, c, "multiply", ax.scaling, dtype=FP32)
    if not ax.align:
        nc.vector.tensor_scalar(c, c, "subtract", 0.5, dtype=FP32)
    if mult is not None:
        nc.vector.memset(mult, ax.scaling)
    if ax.padding == 0:
        return c
    if ax.padding == 2:
        if ax.empty:
            nc.vector.memset(c, 0.0)
            if mult is not None:
                nc.vector.memset(mult, 0.0)
            return c
        t = nc.sbuf_tile((p, 1), dt)
        if ax.low != 0:
            nc.vector.tensor_scalar(t, c, "subtract", ax.low, dtype=FP32)
        else:
            nc.vector.tensor_copy(t, c)
        neg = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.tensor_scalar(neg, t, "less", 0.0, dtype=FP32)
        nc.vector.tensor_unary(t, t, "abs", dtype=FP32)
        flips = nc.sbuf_tile((p, 1), dt)
        nc.vector.tensor_scalar(flips, t, "divide", ax.twice_span, dtype=FP32)
        nc.vector.tensor_unary(flips, flips, "trunc", dtype=FP32)
        nc.vector.tensor_scalar(flips, flips, "multiply", ax.twice_span, dtype=FP32)
        extra = nc.sbuf_tile((p, 1), dt)
        nc.vector.tensor_tensor(extra, t, flips, "subtract", dtype=FP32)
        refl = nc.sbuf_tile((p, 1), dt)
        nc.vector.tensor_scalar(refl, extra, "subtract", ax.twice_span, reverse=True, dtype=FP32)
        if mult is not None:  # sign: -1 where one more flip (extra > reflected) xor the input was negative
            more = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_tensor(more, extra, refl, "greater", dtype=FP32)
            nc.vector.tensor_tensor(more, more, neg, "logical_xor")
            sign = nc.sbuf_tile((p, 1), dt)
            nc.vector.tensor_scalar(sign, more, "multiply", -2.0, dtype=FP32)
            nc.vector.tensor_scalar(sign, sign, "add", 1.0, dtype=FP32)
            nc.vector.tensor_tensor(mult, mult, sign, "multiply", dtype=FP32)
            # blendv(extra, reflected, more) == minimum(extra, reflected) except for NaN
        nc.vector.tensor_tensor(c, extra, refl, "minimum", dtype=FP32)
        if ax.low != 0:
            nc.vector.tensor_scalar(c, c, "add", ax.low, dtype=FP32)
    # clip: NaN -> 0 (CPU clamps with the operands inverted)
    if mult is not None:
        lo = nc.sbuf_tile((p, 1), dt)
        nc.vector.tensor_scalar(lo, c, "fmax", 0.0, dtype=FP32)
        inb = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.tensor_scalar(inb, lo, "not_equal", 0.0, dtype=FP32)
        nc.vector.tensor_scalar(c, lo, "fmin", ax.max_val, dtype=FP32)
        inb2 = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.tensor_scalar(inb2, c, "not_equal", ax.max_val, dtype=FP32)
        nc.vector.tensor_tensor(inb, inb, inb2, "logical_and")
        nc.vector.tensor_tensor(mult, mult, inb, "multiply", dtype=FP32)
    else:
        nc.vector.tensor_scalar(c, c, "fmax", 0.0, dtype=FP32)
        nc.vector.tensor_scalar(c, c, "fmin", ax.max_val, dtype=FP32)
    return c


def _grid_corners(nc, x, y, gx: _GridAxis, gy: _GridAxis, interpolation, dt, p, must_in_bound):
    """[(row index [p,1] int64 into the (H*W + 1)-row table, weight [p,1] or None)] per tap; out-of-bounds
    taps read the zero row H*W."""
    H, W = gy.S, gx.S
    taps = []

    def row_of(ix, iy, valid):
        r = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_scalar(r, iy, "multiply", W)
        nc.vector.tensor_tensor(r, r, ix, "add")
        if valid is not None:
            zero_row = nc.sbuf_tile((p, 1), I64)
            nc.vector.memset(zero_row, H * W)
            nc.vector.select(r, valid, r, zero_row)
        return r

    def in_range(i, n, lower=True):
        m = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.tensor_scalar(m, i, "less", n)
        if lower:
            m2 = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_scalar(m2, i, "greater", -1)
            nc.vector.tensor_tensor(m, m, m2, "logical_and")
        return m

    if interpolation == 1:  # nearest: round half to even
        rx = nc.sbuf_tile((p, 1), dt)
        nc.vector.tensor_unary(rx, x, "round", dtype=FP32)
        ry = nc.sbuf_tile((p, 1), dt)
        nc.vector.tensor_unary(ry, y, "round", dtype=FP32)
        ix = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_copy(ix, rx)
        iy = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_copy(iy, ry)
        valid = None
        if not must_in_bound:
            valid = in_range(ix, W)
            nc.vector.tensor_tensor(valid, valid, in_range(iy, H), "logical_and")
        return [(row_of(ix, iy, valid), None)]
    xw = nc.sbuf_tile((p, 1), dt)
    nc.vector.tensor_unary(xw, x, "floor", dtype=FP32)
    yn = nc.sbuf_tile((p, 1), dt)
    nc.vector.tensor_unary(yn, y, "floor", dtype=FP32)
    w = nc.sbuf_tile((p, 1), dt)
    nc.vector.tensor_tensor(w, x, xw, "subtract", dtype=FP32)
    e = nc.sbuf_tile((p, 1), dt)
    nc.vector.tensor_scalar(e, w, "subtract", 1.0, reverse=True, dtype=FP32)
    n = nc.sbuf_tile((p, 1), dt)
    nc.vector.tensor_tensor(n, y, yn, "subtract", dtype=FP32)
    s = nc.sbuf_tile((p, 1), dt)
    nc.vector.tensor_scalar(s, n, "subtract", 1.0, reverse=True, dtype=FP32)
    weights = []
    for a, b in ((s, e), (s, w), (n, e), (n, w)):  # nw, ne, sw, se
        t = nc.sbuf_tile((p, 1), dt)
        nc.vector.tensor_tensor(t, a, b, "multiply", dtype=FP32)
        weights.append(t)
    ixw = nc.sbuf_tile((p, 1), I64)
    nc.vector.tensor_copy(ixw, xw)
    iyn = nc.sbuf_tile((p, 1), I64)
    nc.vector.tensor_copy(iyn, yn)
    ixe = nc.sbuf_tile((p, 1), I64)
    nc.vector.tensor_scalar(ixe, ixw, "add", 1)
    iys = nc.sbuf_tile((p, 1), I64)
    nc.vector.tensor_scalar(iys, iyn, "add", 1)
    if must_in_bound:
        wm, nm = None, None
        em, sm = in_range(ixe, W, lower=False), in_range(iys, H, lower=False)
    else:
        wm, nm, em, sm = in_range(ixw, W), in_range(iyn, H), in_range(ixe, W), in_range(iys, H)

    def both(a, b):
        if a is None:
            return b
        if b is None:
            return a
        m = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.tensor_tensor(m, a, b, "logical_and")
        return m

    for (ix, iy, mx, my), wt in zip(((ixw, iyn, wm, nm), (ixe, iyn, em, nm), (ixw, iys, wm, sm), (ixe, iys, em, sm)),
                                    weights):
        taps.append((row_of(ix, iy, both(mx, my)), wt))
    taps.append((None, (w, e, n, s)))  # distances, for the backward
    return taps


def _grid_tables(nc, scratch, x_v):
    """Per image: a [(H*W + 1), C] channels-last table (last row zero) in HBM."""
    n_batch, c, h, w = x_v.shape
    table = scratch.new((n_batch, h * w + 1, c), x_v.dtype)
    _fill(nc, table[:, h * w:, :], 0)
    nc.dma.hbm_copy(_split(table[:, :h * w, :], 1, (h, w)), x_v.transpose(0, 2, 3, 1))
    return table


def _grid_check(x, grid, interpolation):
    if x.dtype != grid.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have same dtype, but input has {x.dtype} "
                           f"and grid has {grid.dtype}")
    # CPU runs the common checks (batch, last dim, empty spatial dims) before the 4-d check
    if x.dim() == 0 or grid.dim() == 0:
        raise RuntimeError(f"grid_sampler(): expected 4D input and grid with same number of dimensions, but got "
                           f"input with sizes {list(x.shape)} and grid with sizes {list(grid.shape)}")
    if x.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sampler(): expected grid and input to have same batch size, but got input with "
                           f"sizes {list(x.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != x.dim() - 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {x.dim() - 2} in last dimension, but got grid "
                           f"with sizes {list(grid.shape)}")
    for i in range(2, x.dim()):
        if x.shape[i] <= 0:
            raise RuntimeError(f"grid_sampler(): expected input to have non-empty spatial dimensions, but input has "
                               f"sizes {list(x.shape)} with dimension {i} being empty")
    if x.dim() != 4:
        raise RuntimeError(f"grid_sampler(): expected 4D input and grid with same number of dimensions, but got "
                           f"input with sizes {list(x.shape)} and grid with sizes {list(grid.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise NotImplementedError(f'"grid_sampler_2d_cpu_kernel_impl" not implemented for '
                                  f"'{SCALAR_TYPE_NAMES[x.dtype]}'")
    if interpolation == 2:
        raise NotImplementedError("grid_sampler_2d: bicubic interpolation is not implemented on neuron")


@TABLE.native("aten::grid_sampler_2d", dtypes=COMPUTE_DTYPES)
def grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners):
    _grid_check(input, grid, interpolation_mode)
    n_batch, c, h, w = input.shape
    oh, ow = grid.shape[1], grid.shape[2]
    out = torch.empty((n_batch, c, oh, ow), dtype=input.dtype, device=input.device)
    if out.numel() == 0:
        return out
    with launch("grid_sampler_2d", input.device.index) as nc:
        forward_program(nc, _Scratch(input.device), hbm(input), hbm(grid), hbm(out), interpolation_mode,
                        padding_mode, align_corners)
    return out


def forward_program(nc, scratch, x_v: np.ndarray, g_v: np.ndarray, out_v: np.ndarray, interpolation_mode: int,
                    padding_mode: int, align_corners: bool) -> None:
    """grid_sampler_2d's tile program on HBM arrays, inside a launch: ``x_v`` (N, C, H, W), ``g_v`` (N, OH, OW, 2),
    ``out_v`` (N, C, OH, OW); ``scratch`` gives HBM buffers (the channels-last tables). The eager kernel and the
    compiler's ``grid_sample`` step (compiler/opaque_cnn.py) both run it."""
    n_batch, c, h, w = x_v.shape
    oh, ow = g_v.shape[1], g_v.shape[2]
    dt = x_v.dtype
    gx = _GridAxis(w, align_corners, padding_mode, dt)
    gy = _GridAxis(h, align_corners, padding_mode, dt)
    must = padding_mode != 0
    table = _grid_tables(nc, scratch, x_v)
    for n in range(n_batch):
        g2 = g_v[n]  # [OH, OW, 2]
        out_rows = out_v[n].transpose(1, 2, 0)  # [OH, OW, C]
        for pos in _boxes((oh, ow), P):
            (h0, h1), (w0, w1) = pos
            p = (h1 - h0) * (w1 - w0)
            mark = nc.mark()
            gt = nc.sbuf_tile((p, 2), dt)
            nc.dma.load(gt, g2[h0:h1, w0:w1, :])
            x = _grid_coords(nc, gt[:, 0:1], gx, dt, p)
            y = _grid_coords(nc, gt[:, 1:2], gy, dt, p)
            taps = _grid_corners(nc, x, y, gx, gy, interpolation_mode, dt, p, must)
            for c0 in range(0, c, FREE):
                c1 = min(c, c0 + FREE)
                m = nc.mark()
                acc = None
                for rows, wt in taps:
                    if rows is None:
                        continue
                    v = nc.sbuf_tile((p, c1 - c0), dt)
                    nc.dma.load_rows(v, table[n][:, c0:c1], rows)
                    if wt is None:
                        acc = v
                        continue
                    t = nc.sbuf_tile((p, c1 - c0), dt)
                    nc.vector.tensor_tensor(t, v, wt, "multiply", dtype=FP32)
                    if acc is None:
                        acc = t
                    else:
                        nc.vector.tensor_tensor(acc, acc, t, "add", dtype=FP32)
                nc.dma.store(out_rows[h0:h1, w0:w1, c0:c1], acc)
                nc.release_to(m)
            nc.release_to(mark)


TABLE.serves("aten::grid_sampler_2d.out", "aten::grid_sampler_2d")


@TABLE.native("aten::grid_sampler_2d_backward", dtypes=COMPUTE_DTYPES)
def grid_sampler_2d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    """CPU's vectorized backward: grad_input scattered per corner with DMA accumulate into an fp32
    channels-last table; grad_grid from the corner differences, summed over channels in CPU's order."""
    _grid_check(input, grid, interpolation_mode)
    n_batch, c, h, w = input.shape
    oh, ow = grid.shape[1], grid.shape[2]
    if grad_output.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[input.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[grad_output.dtype]}")
    if tuple(grad_output.shape) != (n_batch, c, oh, ow):
        raise RuntimeError(f"grid_sampler_2d_backward: expected grad_output of shape {[n_batch, c, oh, ow]}, got "
                           f"{list(grad_output.shape)}")
    gi = torch.zeros_like(input, memory_format=torch.contiguous_format) if output_mask[0] else None
    gg = torch.empty(tuple(grid.shape), dtype=grid.dtype, device=grid.device)
    if gg.numel() == 0 and (gi is None or gi.numel() == 0):
        return gi, gg
    with launch("grid_sampler_2d_backward", input.device.index) as nc:
        backward_program(nc, _Scratch(input.device), hbm(input), hbm(grid), hbm(grad_output),
                         None if gi is None else hbm(gi), hbm(gg), interpolation_mode, padding_mode, align_corners)
    return gi, gg


def backward_program(nc, scratch, x_v: np.ndarray, g_v: np.ndarray, go_v: np.ndarray, gi_v: np.ndarray | None,
                     gg_v: np.ndarray, interpolation_mode: int, padding_mode: int, align_corners: bool) -> None:
    """grid_sampler_2d_backward's tile program on HBM arrays, inside a launch: ``gi_v`` (the input's gradient,
    None where not asked for) and ``gg_v`` (the grid's) from ``go_v``. The eager kernel and the compiler's
    ``grid_sample_backward`` step (compiler/opaque_cnn.py) both run it."""
    n_batch, c, h, w = x_v.shape
    oh, ow = g_v.shape[1], g_v.shape[2]
    dt = x_v.dtype
    gx_ax = _GridAxis(w, align_corners, padding_mode, dt)
    gy_ax = _GridAxis(h, align_corners, padding_mode, dt)
    must = padding_mode != 0
    table = _grid_tables(nc, scratch, x_v)
    acc = None
    if gi_v is not None:
        acc = scratch.new((n_batch, h * w + 1, c), FP32)
        _fill(nc, acc, 0.0)
    for n in range(n_batch):
        go_rows = go_v[n].transpose(1, 2, 0)  # [OH, OW, C]
        for pos in _boxes((oh, ow), P):
            (h0, h1), (w0, w1) = pos
            p = (h1 - h0) * (w1 - w0)
            mark = nc.mark()
            gt = nc.sbuf_tile((p, 2), dt)
            nc.dma.load(gt, g_v[n][h0:h1, w0:w1, :])
            mx = nc.sbuf_tile((p, 1), dt)
            my = nc.sbuf_tile((p, 1), dt)
            x = _grid_coords(nc, gt[:, 0:1], gx_ax, dt, p, mult=mx)
            y = _grid_coords(nc, gt[:, 1:2], gy_ax, dt, p, mult=my)
            taps = _grid_corners(nc, x, y, gx_ax, gy_ax, interpolation_mode, dt, p, must)
            gsum = [nc.sbuf_tile((p, 1), dt), nc.sbuf_tile((p, 1), dt)]
            for t in gsum:
                nc.vector.memset(t, 0.0)
            for c0 in range(0, max(c, 1), FREE):
                c1 = min(c, c0 + FREE)
                if c1 <= c0:
                    break
                m = nc.mark()
                go = nc.sbuf_tile((p, c1 - c0), dt)
                nc.dma.load(go, go_rows[h0:h1, w0:w1, c0:c1])
                corners = [(rows, wt) for rows, wt in taps if rows is not None]
                if acc is not None:
                    for rows, wt in corners:
                        contrib = nc.sbuf_tile((p, c1 - c0), FP32)
                        if wt is None:
                            nc.vector.tensor_copy(contrib, go)
                        else:
                            r = nc.sbuf_tile((p, c1 - c0), dt)  # (weight * gOut) rounded like CPU's store
                            nc.vector.tensor_tensor(r, go, wt, "multiply", dtype=FP32)
                            nc.vector.tensor_copy(contrib, r)
                        nc.dma.store_rows(acc[n][:, c0:c1], rows, contrib, accumulate=True)
                if interpolation_mode == 0:
                    dist_w, dist_e, dist_n, dist_s = taps[-1][1]
                    vals = []
                    for rows, _ in corners:
                        v = nc.sbuf_tile((p, c1 - c0), dt)
                        nc.dma.load_rows(v, table[n][:, c0:c1], rows)
                        vals.append(v)
                    nw, ne, sw, se = vals
                    for k, (a1, a2, b1, b2, wa, wb) in enumerate(((ne, nw, se, sw, dist_s, dist_n),
                                                                  (sw, nw, se, ne, dist_e, dist_w))):
                        d1 = nc.sbuf_tile((p, c1 - c0), dt)
                        nc.vector.tensor_tensor(d1, a1, a2, "subtract", dtype=FP32)
                        nc.vector.tensor_tensor(d1, d1, wa, "multiply", dtype=FP32)
                        d2 = nc.sbuf_tile((p, c1 - c0), dt)
                        nc.vector.tensor_tensor(d2, b1, b2, "subtract", dtype=FP32)
                        nc.vector.tensor_tensor(d2, d2, wb, "multiply", dtype=FP32)
                        nc.vector.tensor_tensor(d1, d1, d2, "add", dtype=FP32)
                        nc.vector.tensor_tensor(d1, d1, go, "multiply", dtype=FP32)
                        if dt == FP32:
                            part = nc.sbuf_tile((p, 1), FP32)
                            nc.vector.tensor_reduce(part, d1, "add", dtype=FP32)
                            nc.vector.tensor_tensor(gsum[k], gsum[k], part, "add", dtype=FP32)
                        else:  # CPU accumulates channel by channel in the input dtype
                            for j in range(c1 - c0):
                                nc.vector.tensor_tensor(gsum[k], gsum[k], d1[:, j:j + 1], "add", dtype=FP32)
                nc.release_to(m)
            res = nc.sbuf_tile((p, 2), dt)
            if interpolation_mode == 0:
                nc.vector.tensor_tensor(res[:, 0:1], gsum[0], mx, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(res[:, 1:2], gsum[1], my, "multiply", dtype=FP32)
            else:
                nc.vector.memset(res, 0.0)
            nc.dma.store(gg_v[n][h0:h1, w0:w1, :], res)
            nc.release_to(mark)
    if gi_v is not None and gi_v.size:
        _copy_cast(nc, gi_v.transpose(0, 2, 3, 1), _split(acc[:, :h * w, :], 1, (h, w)))


TABLE.serves("aten::grid_sampler_2d_backward.out", "aten::grid_sampler_2d_backward")
