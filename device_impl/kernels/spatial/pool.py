"""Max and average pooling: max_pool{2,3}d_with_indices (+ backward), avg_pool{2,3}d (+ backward); PyTorch runs
1-d pooling as 2-d.

Tiling: flat ``[p, f]`` tiles over the output (``tiles._Flat``: <= 128 partitions x ``FREE`` elements, in the
output's memory order). The input is padded in HBM scratch (-inf for max, 0 for avg, and as far as ceil_mode
windows reach, ``_pool_pads``), so each kernel offset is one strided window DMA'd flat into a tile. VectorE
combines the windows: max with CPU's rule (ties keep the first, NaN the last) and the winner's flat per-plane
index, computed from element coordinates (GpSimd ``iota``, VectorE integer arithmetic); avg sums in fp32
(int64 exactly) and divides by CPU's divisor (a constant, or per element the window clipped to the padded
input or to the input, ``_avg_divisor``). Backward: per kernel offset, a read-modify-write of the strided
window of an fp32 padded HBM accumulator (max: where the saved index is that offset's), then the interior is
cast into grad_input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, check_out, hbm
from device_impl.kernels.spatial.tiles import (
    BOOL,
    I64,
    _Flat,
    _Scratch,
    _batched5,
    _copy_cast,
    _empty_like_meta,
    _fill,
    _meta,
    _pad,
    _window,
)


_NP_FLOATS = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _constant_divisor(mode: str, divisor, lo, hi, k3) -> int | None:
    """avg pooling's divisor when it is one number for every window: divisor_override, or the window
    size when there is no padding; None when it varies per window (computed from the clipped windows)."""
    if mode != "avg":
        return None
    if divisor is not None:
        return divisor
    if all(a == 0 for a in lo) and all(b == 0 for b in hi):
        return k3[0] * k3[1] * k3[2]
    return None


def _axpb(nc, out, a_tile, mul, add):
    """out = a * mul + add on int64 tiles (VectorE)."""
    if mul != 1:
        nc.vector.tensor_scalar(out, a_tile, "multiply", mul)
        a_tile = out
    if add != 0 or a_tile is not out:
        nc.vector.tensor_scalar(out, a_tile, "add", add)


def _pool_pads(in3, out3, k3, s3, p3, d3):
    """(lo, hi) padding that makes every window of the output lie inside the buffer."""
    hi = [max(0, (o - 1) * s + (k - 1) * d + 1 - i - p) for i, o, k, s, p, d in zip(in3, out3, k3, s3, p3, d3)]
    return list(p3), hi


def _pool_forward(nc, scratch, out5, idx5, x5, k3, s3, p3, d3, mode, count_include_pad=True, divisor=None):
    """Max (with flat per-plane indices) or average pooling over [N, C, D, H, W] views."""
    if out5.size == 0:
        return
    in3 = x5.shape[2:]
    out3 = out5.shape[2:]
    lo, hi = _pool_pads(in3, out3, k3, s3, p3, d3)
    is_float = np.dtype(x5.dtype) in _NP_FLOATS
    lowest = -np.inf if is_float else np.iinfo(x5.dtype).min
    fill = lowest if mode == "max" else 0
    xp = _pad(nc, scratch, x5, lo, hi, fill)
    acc_dtype = FP32 if is_float else x5.dtype
    offsets = [(a, b, c) for a in range(k3[0]) for b in range(k3[1]) for c in range(k3[2])]
    windows = [_window(xp, 2, (a * d3[0], b * d3[1], c * d3[2]), (0, 0, 0), out3, s3) for a, b, c in offsets]
    flat = _Flat(out5)
    outv = flat.view(out5)
    wins = [flat.view(w) for w in windows]
    idxv = flat.view(idx5) if idx5 is not None else None
    _, H, W = in3
    const_div = _constant_divisor(mode, divisor, lo, hi, k3)
    for start, stop, p, f in flat.tiles():
        mark = nc.mark()
        if mode == "max":
            fi = flat.flat_index(nc, start, p, f)
            starts = []
            for axis, (s, pad, dil) in zip((2, 3, 4), zip(s3, p3, d3)):
                c = flat.coord(nc, fi, axis)
                _axpb(nc, c, c, s, -pad)  # window start (may be negative)
                starts.append(c)
            base = nc.sbuf_tile((p, f), I64)  # flat index of offset (0, 0, 0): (sd*H + sh)*W + sw
            nc.vector.tensor_scalar(base, starts[0], "multiply", H)
            nc.vector.tensor_tensor(base, base, starts[1], "add")
            nc.vector.tensor_scalar(base, base, "multiply", W)
            nc.vector.tensor_tensor(base, base, starts[2], "add")
            # first in-bounds element of each window (CPU's initial argmax): start + ceil(max(-start,0)/d)*d
            first = []
            for c, dil in zip(starts, d3):
                t = nc.sbuf_tile((p, f), I64)
                nc.vector.tensor_scalar(t, c, "multiply", -1)
                nc.vector.tensor_scalar(t, t, "maximum", 0)
                if dil > 1:
                    nc.vector.tensor_scalar(t, t, "add", dil - 1)
                    nc.vector.tensor_scalar(t, t, "floor_divide", dil)
                    nc.vector.tensor_scalar(t, t, "multiply", dil)
                nc.vector.tensor_tensor(t, t, c, "add")
                first.append(t)
            idx = nc.sbuf_tile((p, f), I64)
            nc.vector.tensor_scalar(idx, first[0], "multiply", H)
            nc.vector.tensor_tensor(idx, idx, first[1], "add")
            nc.vector.tensor_scalar(idx, idx, "multiply", W)
            nc.vector.tensor_tensor(idx, idx, first[2], "add")
            best = nc.sbuf_tile((p, f), acc_dtype)
            nc.vector.memset(best, lowest)
            v = nc.sbuf_tile((p, f), x5.dtype)
            gt = nc.sbuf_tile((p, f), BOOL)
            nan = nc.sbuf_tile((p, f), BOOL)
            cand = nc.sbuf_tile((p, f), I64)
            for (a, b, c), win in zip(offsets, wins):
                nc.dma.load_flat(v, win, start, stop)
                # CPU: if (val > maxval || isnan(val)) take it: ties keep the first, NaN the last
                nc.vector.tensor_tensor(gt, v, best, "greater", dtype=acc_dtype)
                if is_float:
                    nc.vector.tensor_unary(nan, v, "isnan", dtype=FP32)
                    nc.vector.tensor_tensor(gt, gt, nan, "logical_or")
                nc.vector.select(best, gt, v, best)
                nc.vector.tensor_scalar(cand, base, "add", (a * d3[0] * H + b * d3[1]) * W + c * d3[2])
                nc.vector.select(idx, gt, cand, idx)
            res = nc.sbuf_tile((p, f), out5.dtype)
            nc.vector.tensor_copy(res, best)
            nc.dma.store_flat(outv, start, stop, res)
            if idxv is not None:
                nc.dma.store_flat(idxv, start, stop, idx)
        else:
            acc = nc.sbuf_tile((p, f), acc_dtype)
            v = nc.sbuf_tile((p, f), x5.dtype)
            nc.vector.memset(acc, 0)  # CPU sums from 0, so an all -0.0 window averages to +0.0
            for win in wins:
                nc.dma.load_flat(v, win, start, stop)
                nc.vector.tensor_tensor(acc, acc, v, "add", dtype=acc_dtype)
            res = nc.sbuf_tile((p, f), out5.dtype)
            op = "divide" if is_float else "trunc_divide"  # int64 pooling divides like C++ integers
            if const_div is not None:
                nc.vector.tensor_scalar(res, acc, op, const_div if not is_float else float(const_div),
                                        dtype=acc_dtype)
            else:
                div = _avg_divisor(nc, flat, start, p, f, in3, k3, s3, p3, count_include_pad)
                nc.vector.tensor_tensor(res, acc, div, op, dtype=acc_dtype)
            nc.dma.store_flat(outv, start, stop, res)
        nc.release_to(mark)


def _avg_divisor(nc, flat, start, p, f, in3, k3, s3, p3, count_include_pad):
    """CPU's avg-pool divide factor per output element (int64 tile): the window clipped to the padded
    input (count_include_pad) or to the input; empty windows divide 0 by 1."""
    fi = flat.flat_index(nc, start, p, f)
    total = None
    for axis, i_n, k, s, pad in zip((2, 3, 4), in3, k3, s3, p3):
        c = flat.coord(nc, fi, axis)
        lo_t = nc.sbuf_tile((p, f), I64)
        _axpb(nc, lo_t, c, s, -pad)
        hi_t = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_scalar(hi_t, lo_t, "add", k)
        nc.vector.tensor_scalar(hi_t, hi_t, "minimum", i_n + pad)
        if not count_include_pad:
            nc.vector.tensor_scalar(lo_t, lo_t, "maximum", 0)
            nc.vector.tensor_scalar(hi_t, hi_t, "minimum", i_n)
        n = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_tensor(n, hi_t, lo_t, "subtract")
        nc.vector.tensor_scalar(n, n, "maximum", 0)
        if total is None:
            total = n
        else:
            nc.vector.tensor_tensor(total, total, n, "multiply")
    nc.vector.tensor_scalar(total, total, "maximum", 1)
    return total


def _pool_backward(nc, scratch, gi5, go5, idx5, k3, s3, p3, d3, mode, count_include_pad=True, divisor=None):
    """grad_input of max (by indices) / avg pooling: per kernel offset, read-modify-write of the
    strided window of an fp32 padded HBM accumulator; the interior is cast into grad_input."""
    in3 = gi5.shape[2:]
    out3 = go5.shape[2:]
    lo, hi = _pool_pads(in3, out3, k3, s3, p3, d3)
    acc_shape = gi5.shape[:2] + tuple(i + a + b for i, a, b in zip(in3, lo, hi))
    acc = scratch.new(acc_shape, FP32)
    _fill(nc, acc, 0.0)
    if go5.size:
        offsets = [(a, b, c) for a in range(k3[0]) for b in range(k3[1]) for c in range(k3[2])]
        flat = _Flat(go5)
        gov = flat.view(go5)
        idxv = flat.view(idx5) if idx5 is not None else None
        wins = [flat.view(_window(acc, 2, (a * d3[0], b * d3[1], c * d3[2]), (0, 0, 0), out3, s3))
                for a, b, c in offsets]
        _, H, W = in3
        const_div = _constant_divisor(mode, divisor, lo, hi, k3)
        for start, stop, p, f in flat.tiles():
            mark = nc.mark()
            g = nc.sbuf_tile((p, f), go5.dtype)
            nc.dma.load_flat(g, gov, start, stop)
            delta = nc.sbuf_tile((p, f), FP32)
            if mode == "avg":
                if const_div is not None:
                    nc.vector.tensor_scalar(delta, g, "divide", float(const_div), dtype=FP32)
                else:
                    div = _avg_divisor(nc, flat, start, p, f, in3, k3, s3, p3, count_include_pad)
                    nc.vector.tensor_tensor(delta, g, div, "divide", dtype=FP32)
            else:
                nc.vector.tensor_copy(delta, g)
                idx = nc.sbuf_tile((p, f), I64)
                nc.dma.load_flat(idx, idxv, start, stop)
                fi = flat.flat_index(nc, start, p, f)
                base = None
                for axis, i_n, s, pad in zip((2, 3, 4), in3, s3, p3):
                    c = flat.coord(nc, fi, axis)
                    _axpb(nc, c, c, s, -pad)
                    if base is None:
                        base = c
                    else:
                        nc.vector.tensor_scalar(base, base, "multiply", i_n)
                        nc.vector.tensor_tensor(base, base, c, "add")
                cand = nc.sbuf_tile((p, f), I64)
                hit = nc.sbuf_tile((p, f), BOOL)
                zero = nc.sbuf_tile((p, f), FP32)
                nc.vector.memset(zero, 0.0)
                contrib = nc.sbuf_tile((p, f), FP32)
            cur = nc.sbuf_tile((p, f), FP32)
            for (a, b, c), win in zip(offsets, wins):
                nc.dma.load_flat(cur, win, start, stop)
                if mode == "avg":
                    nc.vector.tensor_tensor(cur, cur, delta, "add", dtype=FP32)
                else:
                    nc.vector.tensor_scalar(cand, base, "add", (a * d3[0] * H + b * d3[1]) * W + c * d3[2])
                    nc.vector.tensor_tensor(hit, idx, cand, "equal")
                    nc.vector.select(contrib, hit, delta, zero)
                    nc.vector.tensor_tensor(cur, cur, contrib, "add", dtype=FP32)
                nc.dma.store_flat(win, start, stop, cur)
            nc.release_to(mark)
    interior = acc[(slice(None), slice(None)) + tuple(slice(a, a + i) for a, i in zip(lo, in3))]
    _copy_cast(nc, gi5, interior)


def _pool_args(kernel_size, stride, padding, dilation, nsp):
    k = [int(v) for v in kernel_size]
    k = k * nsp if len(k) == 1 else k
    s = [int(v) for v in stride] if stride is not None and len(stride) else list(k)
    s = s * nsp if len(s) == 1 else s
    p = [int(v) for v in padding]
    p = p * nsp if len(p) == 1 else p
    d = [int(v) for v in dilation] if dilation is not None else [1] * nsp
    d = d * nsp if len(d) == 1 else d
    pad = [1] * (3 - nsp)
    return [1] * (3 - nsp) + k, pad + s, [0] * (3 - nsp) + p, pad + d


def _register_max_pool(nsp: int) -> None:
    name = f"max_pool{nsp}d_with_indices"
    functional = getattr(torch.ops.aten, name).default

    def compute(out, indices, x, kernel_size, stride, padding, dilation):
        if out.numel() == 0:
            return
        k3, s3, p3, d3 = _pool_args(kernel_size, stride, padding, dilation, nsp)
        with launch(name, x.device.index) as nc:
            _pool_forward(nc, _Scratch(x.device), _batched5(hbm(out), nsp), _batched5(hbm(indices), nsp),
                          _batched5(hbm(x), nsp), k3, s3, p3, d3, "max")

    def run_out(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, *, out, indices):
        _refuse_bool(f"max_pool{nsp}d", x)
        m_out, m_idx = functional(_meta(x), kernel_size, stride, padding, dilation, ceil_mode)
        check_out(out, tuple(m_out.shape), x.dtype, (x,))
        check_out(indices, tuple(m_idx.shape), torch.int64, (x,), exact_dtype=True)
        compute(out, indices, x, kernel_size, stride, _listify(padding), _listify(dilation))
        return out, indices

    TABLE.native(f"aten::{name}.out", dtypes=COMPUTE_DTYPES)(run_out)
    if nsp == 3:  # no structured composite: the functional overload is ours too
        def run(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
            _refuse_bool(f"max_pool{nsp}d", x)
            m_out, m_idx = functional(_meta(x), kernel_size, stride, padding, dilation, ceil_mode)
            out = _empty_like_meta(m_out, x)
            indices = _empty_like_meta(m_idx, x)
            compute(out, indices, x, kernel_size, stride, _listify(padding), _listify(dilation))
            return out, indices

        TABLE.native(f"aten::{name}", dtypes=COMPUTE_DTYPES)(run)
    else:
        TABLE.serves(f"aten::{name}", f"aten::{name}.out")


def _refuse_bool(kernel, x):
    if x.dtype == torch.bool:
        raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')


def _listify(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _register_max_pool_backward(nsp: int) -> None:
    name = f"max_pool{nsp}d_with_indices_backward"
    functional = getattr(torch.ops.aten, name).default

    def compute(gi, go, x, kernel_size, stride, padding, dilation, indices):
        if gi.numel() == 0:
            return
        k3, s3, p3, d3 = _pool_args(kernel_size, stride, padding, dilation, nsp)
        with launch(name, x.device.index) as nc:
            _pool_backward(nc, _Scratch(x.device), _batched5(hbm(gi), nsp), _batched5(hbm(go), nsp),
                           _batched5(hbm(indices), nsp), k3, s3, p3, d3, "max")

    def run_out(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices, *, grad_input):
        m = functional(_meta(grad_output), _meta(x), kernel_size, stride, padding, dilation, ceil_mode,
                       _meta(indices))
        check_out(grad_input, tuple(m.shape), x.dtype, (grad_output, x, indices))
        compute(grad_input, grad_output, x, kernel_size, stride, _listify(padding), _listify(dilation), indices)
        return grad_input

    TABLE.native(f"aten::{name}.grad_input", dtypes=FLOAT_DTYPES | {torch.int64})(run_out)
    if nsp == 3:
        def run(grad_output, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
            m = functional(_meta(grad_output), _meta(x), kernel_size, stride, padding, dilation, ceil_mode,
                           _meta(indices))
            gi = _empty_like_meta(m, x)
            compute(gi, grad_output, x, kernel_size, stride, _listify(padding), _listify(dilation), indices)
            return gi

        TABLE.native(f"aten::{name}", dtypes=FLOAT_DTYPES | {torch.int64})(run)
    else:
        TABLE.serves(f"aten::{name}", f"aten::{name}.grad_input")


def _register_avg_pool(nsp: int) -> None:
    name = f"avg_pool{nsp}d"
    functional = getattr(torch.ops.aten, name).default

    def run_out(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                divisor_override=None, *, out):
        _avg_pool_dtype_check(nsp, x, "")
        m = functional(_meta(x), kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        check_out(out, tuple(m.shape), x.dtype, (x,), exact_dtype=True)
        if out.numel():
            k3, s3, p3, d3 = _pool_args(kernel_size, stride, _listify(padding), None, nsp)
            with launch(name, x.device.index) as nc:
                _pool_forward(nc, _Scratch(x.device), _batched5(hbm(out), nsp), None, _batched5(hbm(x), nsp),
                              k3, s3, p3, d3, "avg", count_include_pad, divisor_override)
        return out

    TABLE.native(f"aten::{name}.out", dtypes=FLOAT_DTYPES | {torch.int64} | _INTS)(run_out)
    TABLE.serves(f"aten::{name}", f"aten::{name}.out")


_INTS = frozenset({torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool})


def _avg_pool_dtype_check(nsp, x, suffix):
    """CPU computes avg_pool2d on floating types and int64, avg_pool3d on float32/float64 and int64."""
    ok = FLOAT_DTYPES | {torch.int64} if nsp == 2 else {torch.float32, torch.int64}
    if x.dtype not in ok:
        kernel = "avg_pool2d" if nsp == 2 else "avg_pool3d_out_frame"
        if suffix:
            kernel = "avg_pool2d_backward_out_frame" if nsp == 2 else "avg_pool3d_backward_out_frame"
        raise NotImplementedError(f'"{kernel}" not implemented for \'{SCALAR_TYPE_NAMES[x.dtype]}\'')


def _register_avg_pool_backward(nsp: int) -> None:
    name = f"avg_pool{nsp}d_backward"
    functional = getattr(torch.ops.aten, name).default

    def run_out(grad_output, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                *, grad_input):
        _avg_pool_dtype_check(nsp, x, "backward")
        m = functional(_meta(grad_output), _meta(x), kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override)
        check_out(grad_input, tuple(m.shape), x.dtype, (grad_output, x))
        if grad_input.numel():
            k3, s3, p3, d3 = _pool_args(kernel_size, stride, _listify(padding), None, nsp)
            with launch(name, x.device.index) as nc:
                _pool_backward(nc, _Scratch(x.device), _batched5(hbm(grad_input), nsp),
                               _batched5(hbm(grad_output), nsp), None, k3, s3, p3, d3, "avg", count_include_pad,
                               divisor_override)
        return grad_input

    TABLE.native(f"aten::{name}.grad_input", dtypes=FLOAT_DTYPES)(run_out)
    TABLE.serves(f"aten::{name}", f"aten::{name}.grad_input")


for _nsp in (2, 3):
    _register_max_pool(_nsp)
    _register_max_pool_backward(_nsp)
    _register_avg_pool(_nsp)
    _register_avg_pool_backward(_nsp)
