"""Convolution backward: convolution_backward, convolution_backward.out, convolution_backward_overrideable.

grad_input is a convolution again (``conv._conv_run``): the transposed convolution of grad_output with the
weight (output_padding recovers the input size), or a direct one for a transposed forward.

grad_weight (``_conv_weight_grad_core``): ``gw[G, CL, CR, K] = sum_{n, o} left[N, G, CL, o] * right[N, G, CR,
o*s + k*d]`` on TensorE with the contraction (batch, output position) on partitions: both operands first get
channel-contiguous rows (``_channels_last``: [128 channels x 128 positions] TensorE transposes), then are
DMA'd with the positions outermost; (input channel, tap) columns stream along the free axis (<= ``N_MAX``)
and every position tile accumulates into the same PSUM bank. Where CPU's backward-weights kernel forms no
product with the padding (``cpu_host.conv_backward_skips_padding``, asked per problem: oneDNN's choice), each tap
contracts over the positions from which it reaches real elements alone (``_weight_grad_unpadded``), so a non-finite
grad_output beside the padding is not NaN there: the interior every tap reads as one product of all taps, as above,
the border cells over their taps (``_weight_grad_by_cells``), or, where the border is most of the positions, each
tap group over its whole reach (``_weight_grad_by_taps``), whichever streams fewer product columns.

grad_bias (``_channel_sum``): channels on partitions, (batch, positions) boxes along the free axis, reduced and
accumulated in fp32 on VectorE.

Which gradients CPU returns (its oneDNN backward returns grad_weight with grad_bias) and their memory format
depend on CPU's backend on this host and are asked of the live CPU (``kernels.cpu_host``).
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, check_out, hbm
from device_impl.kernels.matmul import psum_to_sbuf
from device_impl.kernels.spatial.conv import _conv_check, _conv_memory_format, _conv_out_shape, _conv_params, _conv_run
from device_impl.kernels.spatial.tiles import (
    FREE,
    N_MAX,
    P,
    _Scratch,
    _box_size,
    _boxes,
    _fill,
    _pad,
    _split,
    _to5d,
    _window,
)


def _channels_last(nc, scratch, v5: np.ndarray) -> np.ndarray:
    """A channels-last copy of [N, C, D, H, W] (returned as the same logical view), transposed on TensorE
    in [128 channels x 128 positions] blocks, so later DMAs with positions on partitions read contiguous
    channel runs instead of one descriptor per element. Returns ``v5`` when it already is, or when its
    spatial axes do not form one stride."""
    n_batch, c = v5.shape[:2]
    if c <= 1 or v5.strides[1] == v5.itemsize or v5.size == 0:
        return v5
    planes = v5.view()
    try:
        planes.shape = (n_batch, c, -1)
    except AttributeError:
        return v5
    npos = planes.shape[2]
    buf = scratch.new((n_batch,) + v5.shape[2:] + (c,), v5.dtype)
    rows = buf.view()
    rows.shape = (n_batch, npos, c)
    for n in range(n_batch):
        for c0 in range(0, c, P):
            c1 = min(c, c0 + P)
            for p0 in range(0, npos, N_MAX):
                p1 = min(npos, p0 + N_MAX)
                mark = nc.mark()
                t = nc.sbuf_tile((c1 - c0, p1 - p0), v5.dtype)
                nc.dma.load(t, planes[n, c0:c1, p0:p1])
                for q0 in range(p0, p1, P):
                    q1 = min(p1, q0 + P)
                    m = nc.mark()
                    flipped = nc.psum_tile((q1 - q0, c1 - c0), FP32)
                    nc.tensor.transpose(flipped, t[:, q0 - p0:q1 - p0])
                    back = nc.sbuf_tile((q1 - q0, c1 - c0), v5.dtype)
                    psum_to_sbuf(nc, back, flipped)
                    nc.dma.store(rows[n, q0:q1, c0:c1], back)
                    nc.release_to(m)
                nc.release_to(mark)
    return np.moveaxis(buf, -1, 1)


def _conv_weight_grad_core(nc, gw: np.ndarray, left: np.ndarray, right: np.ndarray, stride, dilation) -> None:
    """gw[G, CL, CR, KD, KH, KW] = sum_{n, o} left[N, G, CL, o] * right[N, G, CR, o*s + k*d].

    The contraction (batch, output position) lies on partitions: both operands are DMA'd with the
    positions outermost; every position tile accumulates into the same PSUM bank.
    """
    groups, cl, cr, kd, kh, kw = gw.shape
    n_batch = left.shape[0]
    od, oh, ow = left.shape[3:]
    if gw.size == 0:
        return
    kk = kd * kh * kw
    sd, sh, sw = stride
    dd, dh, dw = dilation
    # column chunks: (cr0, cr1, kd0, kd1) with columns ordered (cr, kd, kh, kw)
    chunks = []
    if kk <= N_MAX:
        per = max(1, N_MAX // kk)
        for c0 in range(0, cr, per):
            chunks.append((c0, min(cr, c0 + per), 0, kd))
    else:
        if kh * kw > N_MAX:
            raise NotImplementedError("convolution_backward: kernel planes larger than 512 taps are not supported")
        per = N_MAX // (kh * kw)
        for c0 in range(cr):
            for k0 in range(0, kd, per):
                chunks.append((c0, c0 + 1, k0, min(kd, k0 + per)))
    boxes = list(_boxes((n_batch, od, oh, ow), P))
    cl_tiles = [(a, min(cl, a + P)) for a in range(0, cl, P)]
    for g in range(groups):
        for l0, l1 in cl_tiles:
            for c0, c1, k0, k1 in chunks:
                mark = nc.mark()
                inner = (k1 - k0) * kh * kw
                ncols = (c1 - c0) * inner
                acc = nc.psum_tile((l1 - l0, ncols), FP32)
                if not boxes:
                    zero = nc.sbuf_tile((l1 - l0, ncols), gw.dtype)
                    nc.vector.memset(zero, 0)
                    nc.dma.store(gw[g, l0:l1, c0:c1, k0:k1], zero)
                    nc.release_to(mark)
                    continue
                for i, box in enumerate(boxes):
                    m = nc.mark()
                    (n0, n1), (d0, d1), (h0, h1), (w0, w1) = box
                    npos = _box_size(box)
                    lt = nc.sbuf_tile((npos, l1 - l0), left.dtype)
                    src = left[n0:n1, g, l0:l1, d0:d1, h0:h1, w0:w1]
                    nc.dma.load(lt, src.transpose(0, 2, 3, 4, 1))
                    rt = nc.sbuf_tile((npos, ncols), right.dtype)
                    for a in range(k0, k1):
                        for b in range(kh):
                            for c in range(kw):
                                col = ((a - k0) * kh + b) * kw + c
                                dst = rt[:, col:col + (c1 - c0 - 1) * inner + 1:inner]
                                win = _window(right[n0:n1, g, c0:c1], 2, (a * dd, b * dh, c * dw), (d0, h0, w0),
                                              (d1 - d0, h1 - h0, w1 - w0), (sd, sh, sw))
                                nc.dma.load(dst, win.transpose(0, 2, 3, 4, 1))
                    nc.tensor.matmul(acc, lt, rt, accumulate=i > 0)
                    nc.release_to(m)
                result = nc.sbuf_tile((l1 - l0, ncols), gw.dtype)
                psum_to_sbuf(nc, result, acc)
                nc.dma.store(gw[g, l0:l1, c0:c1, k0:k1], result)
                nc.release_to(mark)


def _tap_runs(n_taps: int, n_pos: int, n_real: int, lo: int, stride: int, dilation: int) -> list[tuple[int, int, int, int]]:
    """One axis of a weight gradient without padding products: [(k0, k1, o0, o1)], taps ``k0 <= k < k1`` each
    reaching a real element of the padded operand (``lo`` zeros before ``n_real`` real ones) from exactly the
    positions ``o0 <= o < o1`` (of ``n_pos``): ``o * stride + k * dilation - lo`` in ``[0, n_real)``. The two bounds
    fall as ``k`` grows, so taps of one range are consecutive."""
    runs: list[tuple[int, int, int, int]] = []
    for k in range(n_taps):
        o0 = max(0, -((k * dilation - lo) // stride))  # ceil((lo - k * dilation) / stride)
        o1 = max(o0, min(n_pos, (lo + n_real - 1 - k * dilation) // stride + 1))
        if runs and runs[-1][2:] == (o0, o1):
            runs[-1] = (runs[-1][0], k + 1, o0, o1)
        else:
            runs.append((k, k + 1, o0, o1))
    return runs


def _product_columns(chunk_columns: list[int], n_boxes: int) -> int:
    """TensorE's cost of a plan in streamed columns: every box of positions runs one product per run of columns, each
    streaming at least 64 (``TensorE.matmul``: ``max(n, 64)`` cycles)."""
    return n_boxes * sum(max(n, 64) for n in chunk_columns)


def _weight_grad_unpadded(nc, gw: np.ndarray, left: np.ndarray, right: np.ndarray, stride, dilation, lo,
                          n_real) -> None:
    """``_conv_weight_grad_core`` forming no product with the padded operand's zeros (``right``: ``lo`` zeros before
    its ``n_real`` real elements per spatial axis), as CPU's oneDNN backward-weights kernels do where
    ``cpu_host.conv_backward_skips_padding`` says so: an infinite or NaN grad_output (or transposed input) beside the
    padding is then not NaN.

    Two plans, the one with fewer streamed product columns (``_product_columns``) runs: cells of positions
    (``_weight_grad_by_cells``: the interior as one product of every tap, as the padded kernel, the border cells by
    their taps), or groups of taps (``_weight_grad_by_taps``: each contracted over every position it reaches from),
    which wins where the border is most of the positions (a small output, a wide kernel, stride 2)."""
    runs = [_tap_runs(gw.shape[3 + i], left.shape[3 + i], n_real[i], lo[i], stride[i], dilation[i]) for i in range(3)]
    if all(len(r) == 1 and r[0][2:] == (0, left.shape[3 + i]) for i, r in enumerate(runs)):
        _conv_weight_grad_core(nc, gw, left, right, stride, dilation)  # no tap reaches padding
        return
    cells = _cells(runs, left.shape[3:])
    if _cells_cost(cells, gw.shape, left.shape[0]) <= _taps_cost(runs, gw.shape, left.shape[0]):
        _weight_grad_by_cells(nc, gw, left, right, stride, dilation, cells)
    else:
        _weight_grad_by_taps(nc, gw, left, right, stride, dilation, runs)


def _weight_grad_by_taps(nc, gw, left, right, stride, dilation, runs) -> None:
    """The weight gradient by groups of taps (``_tap_runs`` per axis): each group's products contract over exactly
    the positions from which its taps reach real elements."""
    sd, sh, sw = stride
    dd, dh, dw = dilation
    for a0, a1, od0, od1 in runs[0]:
        for b0, b1, oh0, oh1 in runs[1]:
            for c0, c1, ow0, ow1 in runs[2]:
                _conv_weight_grad_core(nc, gw[:, :, :, a0:a1, b0:b1, c0:c1],
                                       left[:, :, :, od0:od1, oh0:oh1, ow0:ow1],
                                       right[:, :, :, od0 * sd + a0 * dd:, oh0 * sh + b0 * dh:, ow0 * sw + c0 * dw:],
                                       stride, dilation)


def _core_chunks(cr: int, kd: int, kh: int, kw: int) -> list[tuple[int, int, int, int]]:
    """``_conv_weight_grad_core``'s column chunks (<= N_MAX columns): input channels c0:c1 by depth taps k0:k1."""
    if kd * kh * kw <= N_MAX:
        per = max(1, N_MAX // (kd * kh * kw))
        return [(c0, min(cr, c0 + per), 0, kd) for c0 in range(0, cr, per)]
    if kh * kw > N_MAX:
        raise NotImplementedError("convolution_backward: kernel planes larger than 512 taps are not supported")
    per = N_MAX // (kh * kw)
    return [(c0, c0 + 1, k0, min(kd, k0 + per)) for c0 in range(cr) for k0 in range(0, kd, per)]


def _taps_cost(runs, gw_shape, n_batch: int) -> int:
    """``_weight_grad_by_taps``' streamed product columns, per group and 128 channels of grad_output."""
    cr = gw_shape[2]
    total = 0
    for a0, a1, od0, od1 in runs[0]:
        for b0, b1, oh0, oh1 in runs[1]:
            for c0, c1, ow0, ow1 in runs[2]:
                n_boxes = sum(1 for _ in _boxes((n_batch, od1 - od0, oh1 - oh0, ow1 - ow0), P))
                chunks = _core_chunks(cr, a1 - a0, b1 - b0, c1 - c0)
                total += _product_columns([(e - s) * (k1 - k0) * (b1 - b0) * (c1 - c0)
                                           for s, e, k0, k1 in chunks], n_boxes)
    return total


def _segments(runs: list[tuple[int, int, int, int]], n_pos: int) -> list[tuple[int, int, list[int]]]:
    """One axis's positions cut wherever a tap's reach (``_tap_runs``) starts or stops: [(o0, o1, taps)], the taps
    that reach a real element from every position ``o0 <= o < o1`` (the others reach one from none of them)."""
    cuts = sorted({0, n_pos} | {o for _, _, o0, o1 in runs for o in (o0, o1)})
    return [(o0, o1, [k for k0, k1, r0, r1 in runs if r0 <= o0 and o1 <= r1 for k in range(k0, k1)])
            for o0, o1 in zip(cuts, cuts[1:]) if o0 < o1]


def _cells(runs, n_pos) -> list[tuple[tuple, list[tuple[int, int, int]]]]:
    """The output positions cut into cells, [((d, h, w) ranges, the taps (a, b, c) that reach real elements from
    all of them)], those with the most taps first, so that their products start the most columns' accumulation."""
    cells = []
    for dz0, dz1, ta in _segments(runs[0], n_pos[0]):
        for hz0, hz1, tb in _segments(runs[1], n_pos[1]):
            for wz0, wz1, tc in _segments(runs[2], n_pos[2]):
                taps = [(a, b, c) for a in ta for b in tb for c in tc]
                if taps:
                    cells.append((((dz0, dz1), (hz0, hz1), (wz0, wz1)), taps))
    cells.sort(key=lambda cell: -len(cell[1]))
    return cells


def _column_runs(taps: list[int], width: int) -> list[tuple[int, int]]:
    """The tap-major columns (tap, ``width`` input channels) of ``taps`` (ascending) as [start, stop) runs."""
    runs: list[tuple[int, int]] = []
    for t in taps:
        if runs and runs[-1][1] == t * width:
            runs[-1] = (runs[-1][0], (t + 1) * width)
        else:
            runs.append((t * width, (t + 1) * width))
    return runs


def _local_taps(taps, k0: int, k1: int, kh: int, kw: int) -> list[int]:
    """A cell's taps within depth taps k0:k1, as tap-major indices of that chunk."""
    return [((a - k0) * kh + b) * kw + c for a, b, c in taps if k0 <= a < k1]


def _cells_cost(cells, gw_shape, n_batch: int) -> int:
    """``_weight_grad_by_cells``' streamed product columns, per group and 128 channels of grad_output."""
    cr, kd, kh, kw = gw_shape[2:6]
    total = 0
    for c0, c1, k0, k1 in _core_chunks(cr, kd, kh, kw):
        for (dz, hz, wz), taps in cells:
            local = _local_taps(taps, k0, k1, kh, kw)
            if local:
                n_boxes = sum(1 for _ in _boxes((n_batch, dz[1] - dz[0], hz[1] - hz[0], wz[1] - wz[0]), P))
                total += _product_columns([e - s for s, e in _column_runs(local, c1 - c0)], n_boxes)
    return total


def _by_start(started: np.ndarray, s: int, e: int) -> list[tuple[int, int, bool]]:
    """Columns ``s:e`` as runs [(start, stop, whether their accumulation started)]."""
    part = started[s:e]
    if part.all() or not part.any():
        return [(s, e, bool(part[0]))]
    edges = [0] + [i for i in range(1, e - s) if part[i] != part[i - 1]] + [e - s]
    return [(s + i, s + j, bool(part[i])) for i, j in zip(edges, edges[1:])]


def _weight_grad_by_cells(nc, gw, left, right, stride, dilation, cells) -> None:
    """The weight gradient by cells of positions (``_cells``: the interior every tap reads, the border rows and
    columns); each cell contracts, into the one PSUM tile of its columns, over the taps that reach real elements from
    all its positions: the interior is one product of every tap, as in the padded kernel, a border cell one product
    per run of its taps' columns. Columns are tap-major here, so a cell's taps are a few contiguous runs; the store
    puts them back in the weight's (input channel, tap) order. A tap no position reaches is zero. (Contracting each
    tap group over its whole reach instead, ``_weight_grad_by_taps``, loads every grad_output box once per group and
    runs one narrow product per group: 2.4x the padded kernel's device time for a 3x3 kernel on 32x32.)"""
    groups, cl, cr, kd, kh, kw = gw.shape
    n_batch = left.shape[0]
    sd, sh, sw = stride
    dd, dh, dw = dilation
    for g in range(groups):
        for l0 in range(0, cl, P):
            l1 = min(cl, l0 + P)
            for c0, c1, k0, k1 in _core_chunks(cr, kd, kh, kw):
                mark = nc.mark()
                width = c1 - c0
                ncols = (k1 - k0) * kh * kw * width
                acc = nc.psum_tile((l1 - l0, ncols), FP32)
                started = np.zeros(ncols, dtype=bool)
                for (dz, hz, wz), taps in cells:
                    local = _local_taps(taps, k0, k1, kh, kw)
                    if not local:
                        continue
                    columns = _column_runs(local, width)
                    extent = (n_batch, dz[1] - dz[0], hz[1] - hz[0], wz[1] - wz[0])
                    for box in _boxes(extent, P):
                        m = nc.mark()
                        (n0, n1), (d0, d1), (h0, h1), (w0, w1) = box
                        d0, d1, h0, h1, w0, w1 = d0 + dz[0], d1 + dz[0], h0 + hz[0], h1 + hz[0], w0 + wz[0], w1 + wz[0]
                        npos = _box_size(box)
                        lt = nc.sbuf_tile((npos, l1 - l0), left.dtype)
                        nc.dma.load(lt, left[n0:n1, g, l0:l1, d0:d1, h0:h1, w0:w1].transpose(0, 2, 3, 4, 1))
                        rt = nc.sbuf_tile((npos, ncols), right.dtype)
                        for t in local:
                            a, rest = divmod(t, kh * kw)
                            b, c = divmod(rest, kw)
                            win = _window(right[n0:n1, g, c0:c1], 2, ((a + k0) * dd, b * dh, c * dw), (d0, h0, w0),
                                          (d1 - d0, h1 - h0, w1 - w0), (sd, sh, sw))
                            nc.dma.load(rt[:, t * width:(t + 1) * width], win.transpose(0, 2, 3, 4, 1))
                        for s, e in columns:
                            for s2, e2, accumulate in _by_start(started, s, e):
                                nc.tensor.matmul(acc[:, s2:e2], lt, rt[:, s2:e2], accumulate=accumulate)
                            started[s:e] = True
                        nc.release_to(m)
                for s, e, accumulate in _by_start(started, 0, ncols):
                    if not accumulate:
                        nc.vector.memset(acc[:, s:e], 0)  # taps that reach a real element from no position
                result = nc.sbuf_tile((l1 - l0, ncols), gw.dtype)
                psum_to_sbuf(nc, result, acc)
                # tap-major columns back into the weight's (input channel, tap) order
                nc.dma.store(np.moveaxis(gw[g, l0:l1, c0:c1, k0:k1], 1, -1), result)
                nc.release_to(mark)


def _channel_sum(nc, out_v: np.ndarray, g: np.ndarray) -> None:
    """out_v[C] = sum over (N, spatial) of g[N, C, ...] (fp32 accumulation on VectorE)."""
    n_batch, c = g.shape[:2]
    g5 = _to5d(g, g.ndim - 2)
    spatial = g5.shape[2:]
    for c0 in range(0, c, P):
        c1 = min(c, c0 + P)
        mark = nc.mark()
        total = nc.sbuf_tile((c1 - c0, 1), FP32)
        nc.vector.memset(total, 0.0)
        part = nc.sbuf_tile((c1 - c0, 1), FP32)
        for n in range(n_batch):
            for box in _boxes(spatial, FREE):
                m = nc.mark()
                (d0, d1), (h0, h1), (w0, w1) = box
                t = nc.sbuf_tile((c1 - c0, _box_size(box)), g.dtype)
                nc.dma.load(t, g5[n, c0:c1, d0:d1, h0:h1, w0:w1])
                nc.vector.tensor_reduce(part, t, "add", dtype=FP32)
                nc.vector.tensor_tensor(total, total, part, "add", dtype=FP32)
                nc.release_to(m)
        result = nc.sbuf_tile((c1 - c0, 1), out_v.dtype)
        nc.vector.tensor_copy(result, total)
        nc.dma.store(out_v[c0:c1].reshape(c1 - c0, 1), result)
        nc.release_to(mark)


def backward_program(nc, scratch, go_v: np.ndarray, x_v: np.ndarray, w_v: np.ndarray, gi_v: np.ndarray | None,
                     gw_v: np.ndarray | None, gb_v: np.ndarray | None, nsp: int, stride, padding, dilation,
                     transposed: bool, groups: int, skips: tuple[bool, bool], from_zero: bool = False) -> None:
    """The gradients of a convolution with elements (grad_output ``go_v``, input ``x_v``, weight ``w_v``: HBM views)
    into the views asked for (None: not asked): the eager kernel's launch body, which the compiler's
    ``convolution_backward`` step runs too (``compiler/opaque_conv.py``). ``skips``: whether CPU's backward-data and
    backward-weights kernels skip the padding for this problem (``cpu_host.conv_backward_skips_padding``);
    ``from_zero``: whether CPU adds a direct convolution's grad_input into zeros, so it holds no -0.0
    (``cpu_host.conv_sums_from_zero``, ``conv._evict``)."""
    gi_skips, gw_skips = skips
    s3 = [1] * (3 - nsp) + list(stride)
    p3 = [0] * (3 - nsp) + list(padding)
    d3 = [1] * (3 - nsp) + list(dilation)
    if gi_v is not None and gi_v.size:
        if not transposed:
            # grad_input = conv_transpose(grad_output, weight); output_padding recovers the input size
            opad = [x_v.shape[2 + i] - ((go_v.shape[2 + i] - 1) * stride[i] - 2 * padding[i]
                                        + dilation[i] * (w_v.shape[2 + i] - 1) + 1) for i in range(nsp)]
            _conv_run(nc, scratch, gi_v, go_v, w_v, None, nsp, stride, padding, dilation, True, opad, groups,
                      from_zero=from_zero)
        else:
            # CPU's native transposed backward multiplies grad_output's padded zeros (im2col); oneDNN's kernels
            # mostly do not (a 1-wide kernel's does unless channels-last): asked of CPU
            _conv_run(nc, scratch, gi_v, go_v, w_v, None, nsp, stride, padding, dilation, False, [0] * nsp, groups,
                      skip_padding=gi_skips)
    if gw_v is not None and gw_v.size:
        gw5 = _to5d(gw_v, nsp)
        if not transposed:
            padded = _to5d(x_v, nsp)
            left, right = _to5d(go_v, nsp), _pad(nc, scratch, padded, p3, p3, 0)
        else:
            padded = _to5d(go_v, nsp)
            left, right = _to5d(x_v, nsp), _pad(nc, scratch, padded, p3, p3, 0)
        cl, cr = w_v.shape[0] // groups, w_v.shape[1]
        # positions are the contraction: give both operands channel-contiguous rows first
        left, right = _channels_last(nc, scratch, left), _channels_last(nc, scratch, right)
        gwg = _split(gw5, 0, (groups, cl))
        lg = _split(left, 1, (groups, left.shape[1] // groups))
        rg = _split(right, 1, (groups, right.shape[1] // groups))
        if cr and lg.shape[0] * lg.shape[3] * lg.shape[4] * lg.shape[5] == 0:
            _fill(nc, gw5, 0)
        elif gw_skips:
            _weight_grad_unpadded(nc, gwg, lg, rg, s3, d3, p3, padded.shape[2:])
        else:
            _conv_weight_grad_core(nc, gwg, lg, rg, s3, d3)
    if gb_v is not None and gb_v.size:
        _channel_sum(nc, gb_v, go_v)


def _conv_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                   groups, output_mask, outs=None):
    nsp, stride, padding, dilation, output_padding, groups = _conv_params(input, weight, stride, padding, dilation,
                                                                          transposed, output_padding, groups)
    _conv_check(input, weight, None, nsp, stride, padding, dilation, transposed, output_padding, groups)
    if grad_output.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[input.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[grad_output.dtype]}")
    shape = _conv_out_shape(input, weight, nsp, stride, padding, dilation, transposed, output_padding, groups)
    params = (nsp, stride, padding, dilation, output_padding, groups)
    fmt, backend = _conv_memory_format(input, weight, None, params, transposed, backward=True,
                                       bias_sizes=bias_sizes)
    # CPU's Empty backend (an input with no element: no batch, or no input channels) checks no grad_output shape and
    # returns zero gradients, grad_bias too (an input of [1, 0, 4, 4] with a [1, 3, 2, 2] grad_output: zeros)
    empty = int(backend) == int(torch._C._ConvBackend.Empty)
    if tuple(grad_output.shape) != tuple(shape) and not empty:
        raise RuntimeError(f"Expected grad_output to have shape {list(shape)}, but got {list(grad_output.shape)}")
    dev = input.device
    output_mask = list(output_mask)
    if output_mask[2] and cpu_host.is_onednn(backend):
        output_mask[1] = True  # CPU's oneDNN backward returns grad_weight along with grad_bias
    if outs is None:
        gi = torch.empty(tuple(input.shape), dtype=input.dtype, device=dev, memory_format=fmt) if output_mask[0] else None
        gw = torch.empty(tuple(weight.shape), dtype=weight.dtype, device=dev, memory_format=fmt) \
            if output_mask[1] else None
        gb = None
        if output_mask[2]:
            cout = weight.shape[1] * groups if transposed else weight.shape[0]
            gb = torch.empty((cout,), dtype=input.dtype, device=dev)
    else:
        gi, gw, gb = outs
        if output_mask[0]:
            check_out(gi, tuple(input.shape), input.dtype, (grad_output, input, weight))
        if output_mask[1]:
            check_out(gw, tuple(weight.shape), weight.dtype, (grad_output, input, weight))
        if output_mask[2]:
            cout = weight.shape[1] * groups if transposed else weight.shape[0]
            check_out(gb, (cout,), input.dtype, (grad_output, input, weight))
    with launch("convolution_backward", dev.index) as nc:
        scratch = _Scratch(dev)
        go_v, x_v, w_v = hbm(grad_output), hbm(input), hbm(weight)
        if grad_output.numel() == 0 or empty:  # an empty output (_cpu_returns_empty_transposed) or input: zeros
            for g in (gi, gw, gb):
                if g is not None:
                    _fill(nc, hbm(g), 0)
            return gi, gw, gb
        # whether CPU's backward kernels for this problem form products with the padding (oneDNN's choice per problem)
        skips = cpu_host.conv_backward_skips_padding(grad_output, input, weight, stride, padding, dilation, transposed,
                                                     output_padding, groups, output_mask[:2])
        backward_program(nc, scratch, go_v, x_v, w_v, *(hbm(g) if g is not None else None for g in (gi, gw, gb)),
                         nsp, stride, padding, dilation, transposed, groups, skips,
                         from_zero=not transposed and cpu_host.conv_sums_from_zero(backend))
    return gi, gw, gb


@TABLE.native("aten::convolution_backward", dtypes=FLOAT_DTYPES)
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    return _conv_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                          output_padding, groups, output_mask)


@TABLE.native("aten::convolution_backward.out", dtypes=FLOAT_DTYPES)
def convolution_backward_out(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                             output_padding, groups, output_mask, *, out0, out1, out2):
    _conv_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                   groups, output_mask, outs=(out0, out1, out2))
    return out0, out1, out2


@TABLE.native("aten::convolution_backward_overrideable", dtypes=FLOAT_DTYPES)
def convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask):
    return _conv_backward(grad_output, input, weight, None, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask)
