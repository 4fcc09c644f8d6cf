"""im2col / col2im (F.unfold / F.fold) and their .out overloads.

im2col: the input is padded in HBM scratch, then one HBM->HBM strided DMA per kernel offset copies that
offset's window into its rows of the columns (no SBUF). col2im: per kernel offset, flat ``[p, f]`` tiles
(``tiles._Flat``) of a read-modify-write of the strided window of an fp32 padded HBM accumulator (VectorE
add); the interior is then cast into the output.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, check_out, hbm
from device_impl.kernels.spatial.tiles import _Flat, _Scratch, _copy_cast, _fill, _meta, _pad, _split, _window


_IM2COL_DTYPES = FLOAT_DTYPES | {torch.bool}


def _im2col_common(name, x, kernel_size, dilation, padding, stride):
    pad = [int(v) for v in padding]
    if any(v < 0 for v in pad):
        raise RuntimeError(f"padding should be non-negative, but got pad_height: {pad[0]} pad_width: {pad[-1]}")
    if x.dtype not in _IM2COL_DTYPES:
        raise NotImplementedError(f'"{name}_out_cpu" not implemented for \'{SCALAR_TYPE_NAMES[x.dtype]}\'')


@TABLE.native("aten::im2col", dtypes=COMPUTE_DTYPES)
def im2col(input, kernel_size, dilation, padding, stride):
    _im2col_common("im2col", input, kernel_size, dilation, padding, stride)
    m = torch.ops.aten.im2col.default(_meta(input), kernel_size, dilation, padding, stride)
    out = torch.empty(tuple(m.shape), dtype=input.dtype, device=input.device)
    _im2col_compute(out, input, kernel_size, dilation, padding, stride)
    return out


@TABLE.native("aten::im2col.out", dtypes=COMPUTE_DTYPES)
def im2col_out(input, kernel_size, dilation, padding, stride, *, out):
    _im2col_common("im2col", input, kernel_size, dilation, padding, stride)
    m = torch.ops.aten.im2col.default(_meta(input), kernel_size, dilation, padding, stride)
    check_out(out, tuple(m.shape), input.dtype, (input,))
    _im2col_compute(out, input, kernel_size, dilation, padding, stride)
    return out


def _im2col_compute(out, x, kernel_size, dilation, padding, stride):
    if out.numel() == 0:
        return
    kh, kw = (int(v) for v in kernel_size)
    dh, dw = (int(v) for v in dilation)
    ph, pw = (int(v) for v in padding)
    sh, sw = (int(v) for v in stride)
    with launch("im2col", x.device.index) as nc:
        im2col_program(nc, _Scratch(x.device), hbm(out), hbm(x), (kh, kw), (dh, dw), (ph, pw), (sh, sw))


def im2col_program(nc, scratch, out_v: np.ndarray, x_v: np.ndarray, kernel_size, dilation, padding, stride) -> None:
    """im2col's tile program on HBM views (inside a launch): the input zero-padded in ``scratch`` (an object with
    ``new(shape, dtype)``), then one strided HBM->HBM copy per kernel offset. The eager kernel and the compiler's
    ``im2col`` step (compiler/opaque_pads.py) both run it."""
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    if x_v.ndim == 3:
        x_v, out_v = x_v[None], out_v[None]
    _, c, h, w = x_v.shape
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    cols = _split(_split(out_v, 2, (oh, ow)), 1, (c, kh, kw))  # [N, C, KH, KW, OH, OW]
    xp = _pad(nc, scratch, x_v, [ph, pw], [ph, pw], False if x_v.dtype == np.bool_ else 0)
    for a in range(kh):
        for b in range(kw):
            win = _window(xp, 2, (a * dh, b * dw), (0, 0), (oh, ow), (sh, sw))
            nc.dma.hbm_copy(cols[:, :, a, b], win)


def _col2im_compute(out, cols_t, output_size, kernel_size, dilation, padding, stride):
    if out.numel() == 0:
        return
    h, w = (int(v) for v in output_size)
    kh, kw = (int(v) for v in kernel_size)
    dh, dw = (int(v) for v in dilation)
    ph, pw = (int(v) for v in padding)
    sh, sw = (int(v) for v in stride)
    c_v = hbm(cols_t)
    out_v = hbm(out)
    if cols_t.dim() == 2:
        c_v, out_v = c_v[None], out_v[None]
    n_batch = c_v.shape[0]
    c = c_v.shape[1] // (kh * kw)
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    cols = _split(_split(c_v, 2, (oh, ow)), 1, (c, kh, kw))
    with launch("col2im", out.device.index) as nc:
        scratch = _Scratch(out.device)
        hp = max(h + 2 * ph, (oh - 1) * sh + (kh - 1) * dh + 1)
        wp = max(w + 2 * pw, (ow - 1) * sw + (kw - 1) * dw + 1)
        acc = scratch.new((n_batch, c, hp, wp), FP32)
        _fill(nc, acc, 0.0)
        if cols_t.numel():
            like = cols[:, :, 0, 0]
            flat = _Flat(like)
            for a in range(kh):
                for b in range(kw):
                    src = flat.view(cols[:, :, a, b])
                    win = flat.view(_window(acc, 2, (a * dh, b * dw), (0, 0), (oh, ow), (sh, sw)))
                    for start, stop, p, f in flat.tiles():
                        mark = nc.mark()
                        t = nc.sbuf_tile((p, f), c_v.dtype)
                        nc.dma.load_flat(t, src, start, stop)
                        cur = nc.sbuf_tile((p, f), FP32)
                        nc.dma.load_flat(cur, win, start, stop)
                        nc.vector.tensor_tensor(cur, cur, t, "add", dtype=FP32)
                        nc.dma.store_flat(win, start, stop, cur)
                        nc.release_to(mark)
        _copy_cast(nc, out_v, acc[:, :, ph:ph + h, pw:pw + w])


@TABLE.native("aten::col2im", dtypes=COMPUTE_DTYPES)
def col2im(input, output_size, kernel_size, dilation, padding, stride):
    _im2col_common("col2im", input, kernel_size, dilation, padding, stride)
    m = torch.ops.aten.col2im.default(_meta(input), output_size, kernel_size, dilation, padding, stride)
    out = torch.empty(tuple(m.shape), dtype=input.dtype, device=input.device)
    _col2im_compute(out, input, output_size, kernel_size, dilation, padding, stride)
    return out


@TABLE.native("aten::col2im.out", dtypes=COMPUTE_DTYPES)
def col2im_out(input, output_size, kernel_size, dilation, padding, stride, *, out):
    _im2col_common("col2im", input, kernel_size, dilation, padding, stride)
    m = torch.ops.aten.col2im.default(_meta(input), output_size, kernel_size, dilation, padding, stride)
    check_out(out, tuple(m.shape), input.dtype, (input,))
    _col2im_compute(out, input, output_size, kernel_size, dilation, padding, stride)
    return out
