"""Convolution forward: convolution, convolution.out, _convolution, convolution_overrideable (1d/2d/3d,
grouped, dilated, transposed).

Tiling (implicit im2col on TensorE, ``_conv_forward_core``): the contraction (kernel tap, input channel) lies
on partitions, packed into tiles of <= 128 rows; the output positions of a box (batch, d, h, w: at most
``N_MAX``, one PSUM bank of fp32) stream along the free axis; output channels (<= 128 per tile) are the PSUM
partitions. Weights are the stationary operand (kept resident when they fit ``CACHE_BYTES``), each patch row
is one strided DMA of the padded input, every tap accumulates into the same PSUM bank, and ScalarE adds the
bias on the way out. Convolutions of stride 1 in H and W with at least ``ROWS_MIN_CHANNELS`` channels per
group (and padded rows that fit a PSUM bank) skip the im2col traffic (``_conv_forward_rows``): a block of
padded input rows is DMA'd once and each tap's moving operand is a contiguous slice of it.

A transposed convolution runs by output phase (sub-pixel decomposition, ``_conv_run``): each phase is a
stride-1 convolution over the padded input, so no zeros are inserted or multiplied. Where padding must
contribute no products (``_conv_unpadded``), the output splits into regions by which taps reach real input.

Checks raise CPU's messages; the output's memory format, and whether CPU answers an empty transposed output
or an error, depend on CPU's backend on this host and are asked of the live CPU (``kernels.cpu_host``).
``conv_run`` is shared with the compiler (stablehlo.convolution).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, check_out, hbm
from device_impl.kernels.matmul import psum_to_sbuf
from device_impl.kernels.spatial.tiles import (
    CACHE_BYTES,
    N_MAX,
    P,
    _Scratch,
    _box_size,
    _boxes,
    _ceil_div,
    _fill,
    _meta,
    _pad,
    _split,
    _to5d,
    _window,
)


_CNAME = {torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
          torch.float64: "double", torch.int64: "long int"}


def _expand(value, n: int, name: str) -> list[int]:
    value = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} values to match the "
                           f"convolution dimensions, but got {name}={value}")
    return value


def _conv_forward_core(nc, outg: np.ndarray, xg: np.ndarray, wg: np.ndarray, bg: np.ndarray | None,
                       stride: Sequence[int], taps: Sequence[tuple], from_zero: bool = False) -> None:
    """outg[N, G, Co, o] = sum_{ci, taps} wg[G, Co, Ci, tap] * xg[N, G, Ci, o*s + offset(tap)] (+ bg[G, Co]).

    ``taps`` lists (kernel index (a, b, c), input offset (d, h, w)); ``xg`` is already padded.
    Implicit im2col: the contraction (tap, input channel) lies on partitions; each patch row is one
    strided DMA of the padded input; weights are the stationary operand (kept resident), patches
    stream through TensorE into PSUM, ScalarE adds the bias on the way out. ``from_zero``: see ``_evict``.
    """
    n_batch, groups, cog, od, oh, ow = outg.shape
    cg = wg.shape[2]
    if outg.size == 0:
        return
    wp = xg.shape[-1]
    if stride[1] == 1 and stride[2] == 1 and cg >= ROWS_MIN_CHANNELS and wp <= N_MAX and 2 * ow >= wp:
        _conv_forward_rows(nc, outg, xg, wg, bg, stride[0], taps, from_zero)
        return
    offsets = {koff: off for koff, off in taps}
    # row groups (kernel offset, ci0, ci1) packed into contraction tiles of <= 128 rows
    ktiles: list[list[tuple]] = []
    current: list[tuple] = []
    rows = 0
    for koff, _ in taps:
        for c0 in range(0, cg, P):
            c1 = min(cg, c0 + P)
            if rows + (c1 - c0) > P:
                ktiles.append(current)
                current, rows = [], 0
            current.append((koff, c0, c1, rows))
            rows += c1 - c0
    if current:
        ktiles.append(current)
    co_tiles = [(a, min(cog, a + P)) for a in range(0, cog, P)]
    out_dtype = outg.dtype
    in_dtype = xg.dtype
    boxes = list(_boxes((n_batch, od, oh, ow), N_MAX))
    max_pos = max(_box_size(b) for b in boxes)
    keep_patches = len(ktiles) * max_pos * in_dtype.itemsize <= CACHE_BYTES
    weight_bytes = groups * len(ktiles) * sum(b - a for a, b in co_tiles) * wg.dtype.itemsize
    keep_weights = weight_bytes <= CACHE_BYTES
    sd, sh, sw = stride

    def k_rows(kt):
        return kt[-1][3] + kt[-1][2] - kt[-1][1]

    def load_weights(g, co0, co1, j):
        kt = ktiles[j]
        t = nc.sbuf_tile((k_rows(kt), co1 - co0), wg.dtype)
        for (a, b, c), c0, c1, r0 in kt:
            nc.dma.load(t[r0:r0 + c1 - c0, :], wg[g, co0:co1, c0:c1, a, b, c].T)
        return t

    def load_patch(g, box, j):
        kt = ktiles[j]
        (n0, n1), (d0, d1), (h0, h1), (w0, w1) = box
        npos = _box_size(box)
        t = nc.sbuf_tile((k_rows(kt), npos), in_dtype)
        for koff, c0, c1, r0 in kt:
            src = _window(xg[n0:n1, g, c0:c1], 2, offsets[koff], (d0, h0, w0),
                          (d1 - d0, h1 - h0, w1 - w0), (sd, sh, sw))
            nc.dma.load(t[r0:r0 + c1 - c0, :], src.transpose(1, 0, 2, 3, 4))
        return t

    for g in range(groups):
        mark_g = nc.mark()
        weights: dict = {}
        biases: dict = {}
        for co0, co1 in co_tiles:
            if bg is not None:
                raw = nc.sbuf_tile((co1 - co0, 1), bg.dtype)
                nc.dma.load(raw, bg[g, co0:co1].reshape(co1 - co0, 1))
                b32 = nc.sbuf_tile((co1 - co0, 1), FP32)
                nc.vector.tensor_copy(b32, raw)
                biases[co0] = b32
            if keep_weights:
                for j in range(len(ktiles)):
                    weights[(co0, j)] = load_weights(g, co0, co1, j)
        for box in boxes:
            mark_b = nc.mark()
            npos = _box_size(box)
            patches = [load_patch(g, box, j) for j in range(len(ktiles))] if keep_patches else None
            for co0, co1 in co_tiles:
                mark_c = nc.mark()
                acc = nc.psum_tile((co1 - co0, npos), FP32)
                for j in range(len(ktiles)):
                    m = nc.mark()
                    wt = weights[(co0, j)] if keep_weights else load_weights(g, co0, co1, j)
                    pt = patches[j] if keep_patches else load_patch(g, box, j)
                    nc.tensor.matmul(acc, wt, pt, accumulate=j > 0)
                    if not (keep_patches and keep_weights):
                        nc.release_to(m)
                result = _evict(nc, acc, out_dtype, biases.get(co0), from_zero)
                (n0, n1), (d0, d1), (h0, h1), (w0, w1) = box
                dst = outg[n0:n1, g, co0:co1, d0:d1, h0:h1, w0:w1]
                nc.dma.store(dst.transpose(1, 0, 2, 3, 4), result)
                nc.release_to(mark_c)
            nc.release_to(mark_b)
        nc.release_to(mark_g)


def _evict(nc, acc, dtype, bias, from_zero: bool):
    """The output tile of PSUM ``acc``: rounded to ``dtype`` (ScalarE adding ``bias``, an fp32 column, where there is
    one). ``from_zero``: CPU forms this result by adding its rounded column sums into a zero-filled tensor
    (``cpu_host.conv_sums_from_zero``: ATen's col2im), so it holds no -0.0; VectorE adds +0.0 to the rounded tile
    (a float16 sum of -1.9e-8 rounds to -0.0, and -0.0 + 0.0 is +0.0; every other value is unchanged)."""
    result = nc.sbuf_tile(acc.shape, dtype)
    if bias is not None:
        nc.scalar.activation(result, acc, "identity", bias=bias)
    else:
        psum_to_sbuf(nc, result, acc)
    if from_zero:
        nc.vector.tensor_scalar(result, result, "add", 0.0)
    return result


ROWS_MIN_CHANNELS = 32  # below this, packing (tap, channel) rows into one contraction tile keeps TensorE busier


def _conv_forward_rows(nc, outg, xg, wg, bg, sd, taps, from_zero: bool = False) -> None:
    """Stride-1 (in H and W) convolution without im2col traffic: a block of padded input rows (all padded
    columns) is DMA'd once per box, and the moving operand of tap (dh, dw) is the contiguous slice of it
    starting at dh*Wp + dw. Output positions therefore run over the padded width; the Wp - OW columns
    past each row's end are computed and never stored. The contraction is
    the input channels of one tap; the taps accumulate in the same PSUM bank. The bank is evacuated in
    one instruction (bias added on ScalarE) and stored row by row without the garbage columns."""
    n_batch, groups, cog, od, oh, ow = outg.shape
    cg = wg.shape[2]
    wp = xg.shape[-1]
    d_offs = sorted({off[0] for _, off in taps})
    h_lo = min(off[1] for _, off in taps)
    h_hi = max(off[1] for _, off in taps)
    rows_per_box = max(1, N_MAX // wp)
    ci_tiles = [(a, min(cg, a + P)) for a in range(0, cg, P)]
    co_tiles = [(a, min(cog, a + P)) for a in range(0, cog, P)]
    weight_bytes = groups * len(taps) * len(ci_tiles) * sum(b - a for a, b in co_tiles) * wg.dtype.itemsize
    keep_weights = weight_bytes <= CACHE_BYTES

    def load_weights(g, co0, co1, tap, c0, c1):
        (a, b, c), _ = tap
        t = nc.sbuf_tile((c1 - c0, co1 - co0), wg.dtype)
        nc.dma.load(t, wg[g, co0:co1, c0:c1, a, b, c].T)
        return t

    for g in range(groups):
        mark_g = nc.mark()
        weights, biases = {}, {}
        for co0, co1 in co_tiles:
            if bg is not None:
                raw = nc.sbuf_tile((co1 - co0, 1), bg.dtype)
                nc.dma.load(raw, bg[g, co0:co1].reshape(co1 - co0, 1))
                b32 = nc.sbuf_tile((co1 - co0, 1), FP32)
                nc.vector.tensor_copy(b32, raw)
                biases[co0] = b32
            if keep_weights:
                for ti, tap in enumerate(taps):
                    for c0, c1 in ci_tiles:
                        weights[(co0, ti, c0)] = load_weights(g, co0, co1, tap, c0, c1)
        for n in range(n_batch):
            for d in range(od):
                for r0 in range(0, oh, rows_per_box):
                    r1 = min(oh, r0 + rows_per_box)
                    nh = r1 - r0
                    span = nh + h_hi - h_lo  # input rows per depth plane
                    plane = span * wp
                    mark_b = nc.mark()
                    blocks = {}
                    for c0, c1 in ci_tiles:  # input rows, +1 row of slack read by the last tap's tail
                        t = nc.sbuf_tile((c1 - c0, len(d_offs) * plane + wp), xg.dtype)
                        for j, dz in enumerate(d_offs):
                            src = xg[n, g, c0:c1, d * sd + dz, r0 + h_lo:r0 + h_lo + span, :]
                            nc.dma.load(t[:, j * plane:(j + 1) * plane], src)
                        blocks[c0] = t
                    for co0, co1 in co_tiles:
                        mark_c = nc.mark()
                        acc = nc.psum_tile((co1 - co0, nh * wp), FP32)
                        steps = [(ti, tap, c0, c1) for ti, tap in enumerate(taps) for c0, c1 in ci_tiles]
                        for k, (ti, tap, c0, c1) in enumerate(steps):
                            m = nc.mark()
                            _, (dz, dy, dx) = tap
                            start = d_offs.index(dz) * plane + (dy - h_lo) * wp + dx
                            wt = weights[(co0, ti, c0)] if keep_weights else load_weights(g, co0, co1, tap, c0, c1)
                            nc.tensor.matmul(acc, wt, blocks[c0][:, start:start + nh * wp], accumulate=k > 0)
                            if not keep_weights:
                                nc.release_to(m)
                        result = _evict(nc, acc, outg.dtype, biases.get(co0), from_zero)
                        for r in range(nh):  # one store per row drops the columns past the row's end
                            nc.dma.store(outg[n, g, co0:co1, d, r0 + r, :], result[:, r * wp:r * wp + ow])
                        nc.release_to(mark_c)
                    nc.release_to(mark_b)
        nc.release_to(mark_g)


def _conv_params(x, w, stride, padding, dilation, transposed, output_padding, groups):
    nsp = w.dim() - 2
    if nsp <= 0:
        raise RuntimeError("weight should have at least three dimensions")
    stride = _expand(stride, nsp, "stride")
    padding = _expand(padding, nsp, "padding")
    dilation = _expand(dilation, nsp, "dilation")
    output_padding = _expand(output_padding, nsp, "output_padding") if transposed else [0] * nsp
    return nsp, stride, padding, dilation, output_padding, int(groups)


def _conv_check(x, w, bias, nsp, stride, padding, dilation, transposed, output_padding, groups):
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if x.dtype != w.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[x.dtype]} but found {SCALAR_TYPE_NAMES[w.dtype]}")
    if bias is not None and bias.dtype != x.dtype:
        raise RuntimeError(f"Input type ({_CNAME.get(x.dtype, x.dtype)}) and bias type "
                           f"({_CNAME.get(bias.dtype, bias.dtype)}) should be the same")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(p < 0 for p in output_padding):
        raise RuntimeError("negative output_padding is not supported")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError(f"dilation should be greater than zero, but got {dilation}")
    ws = list(w.shape)
    if w.dim() != x.dim():
        raise RuntimeError(f"Expected {w.dim()}-dimensional input for {w.dim()}-dimensional weight {ws}, but got "
                           f"{x.dim()}-dimensional input of size {list(x.shape)} instead")
    if ws[0] < groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, but got "
                           f"weight of size {ws} instead")
    if ws[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, but "
                           f"got weight of size [{ws}] instead")
    if not transposed:
        if x.shape[1] != ws[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {ws}, expected input{list(x.shape)} to have "
                               f"{ws[1] * groups} channels, but got {x.shape[1]} channels instead")
        if bias is not None and (bias.dim() != 1 or bias.shape[0] != ws[0]):
            raise RuntimeError(f"Given weight of size {ws}, expected bias to be 1-dimensional with {ws[0]} elements, "
                               f"but got bias of size {list(bias.shape)} instead")
        padded = [x.shape[2 + i] + 2 * padding[i] for i in range(nsp)]
        kernel = [dilation[i] * (ws[2 + i] - 1) + 1 for i in range(nsp)]
        if any(a < b for a, b in zip(padded, kernel)):
            raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, padded))}). Kernel "
                               f"size: ({' x '.join(map(str, kernel))}). Kernel size can't be greater than actual "
                               f"input size")
    else:
        if x.shape[0] and x.shape[1] and any(n == 0 for n in x.shape[2:]):
            raise RuntimeError(f"Only zero batch or zero channel inputs are supported, but got input shape: "
                               f"{list(x.shape)}")
        if x.shape[1] != ws[0]:
            raise RuntimeError(f"Given transposed=1, weight of size {ws}, expected input{list(x.shape)} to have "
                               f"{ws[0]} channels, but got {x.shape[1]} channels instead")
        if bias is not None and (bias.dim() != 1 or bias.shape[0] != ws[1] * groups):
            raise RuntimeError(f"Given transposed=1, weight of size {ws}, expected bias to be 1-dimensional with "
                               f"{ws[1] * groups} elements, but got bias of size {list(bias.shape)} instead")
        if w.numel() == 0:
            raise RuntimeError(f"non-empty {nsp}D or {nsp + 2}D weight tensor expected, but got: {ws}")
        for i in range(nsp):
            if output_padding[i] >= stride[i] and output_padding[i] >= dilation[i]:
                raise RuntimeError("output padding must be smaller than either stride or dilation, but got "
                                   f"output_padding: {output_padding} stride: {stride} dilation: {dilation}")


def _empty_contraction_channels(x, w, stride, padding, dilation, groups) -> int:
    """Output channels of a direct convolution over zero input channels: not the weight's count. CPU's ``Empty``
    backend returns as many channels as the input has (torch 2.13: a [1, 0, 4, 4] input and a [2, 0, 1, 1]
    weight give [1, 0, 4, 4]); the live torch's meta function says which, so the device follows it."""
    meta = torch.ops.aten.convolution(_meta(x), _meta(w), None, list(stride), list(padding), list(dilation), False,
                                      [0] * len(stride), groups)
    return int(meta.shape[1])


def _conv_out_shape(x, w, nsp, stride, padding, dilation, transposed, output_padding, groups):
    spatial = []
    for i in range(nsp):
        k = w.shape[2 + i]
        n = x.shape[2 + i]
        if transposed:
            spatial.append((n - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + output_padding[i] + 1)
        else:
            spatial.append((n + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1)
    cout = w.shape[1] * groups if transposed else w.shape[0]
    if not transposed and x.shape[1] == 0:
        cout = _empty_contraction_channels(x, w, stride, padding, dilation, groups)
    shape = (x.shape[0], cout, *spatial)
    if all(s > 0 for s in spatial):
        return shape
    if transposed and min(spatial) == 0 and _cpu_returns_empty_transposed(x, w, nsp, stride, padding, dilation,
                                                                           output_padding, groups):
        return shape
    # what CPU's slow_conv_transpose / shape checks say (1-d problems are 2-d with a unit height there)
    sizes_in = ([1] if nsp == 1 else []) + list(x.shape[2:])
    sizes_out = ([1] if nsp == 1 and transposed else []) + spatial
    raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, sizes_in))}). Calculated output size "
                       f"per channel: ({' x '.join(map(str, sizes_out))}). Output size is too small")


def _cpu_returns_empty_transposed(x, w, nsp, stride, padding, dilation, output_padding, groups) -> bool:
    """Whether CPU answers a transposed convolution whose output has a zero-size (none negative) spatial
    dimension (padding that consumes the whole output) with an empty tensor rather than an error.

    CPU decides by backend (ATen/native/Convolution.cpp): an empty batch takes the "Empty" backend and
    oneDNN accepts the empty output; the slow_conv_transpose2d/3d fallback raises "Output size is too
    small". Which backend runs depends on the host and on torch.backends.mkldnn, so the live CPU is asked
    (cpu_host.conv_backend). Negative sizes raise everywhere.
    """
    if x.shape[0] == 0:
        return True
    return cpu_host.is_onednn(cpu_host.conv_backend(x, w, None, stride, padding, dilation, True, output_padding,
                                                    groups))


def _conv_memory_format(x, w, bias, params, transposed, backward: bool = False, bias_sizes=None):
    """The memory format CPU's convolution backend gives its output (or input/weight gradients) on this
    host: channels_last for a channels-last input or weight on most 2-d paths, channels_last_3d in 3-d only
    on oneDNN (on hosts where oneDNN takes the dtype), else contiguous. Asked of the live CPU."""
    nsp, stride, padding, dilation, output_padding, groups = params
    backend = cpu_host.conv_backend(x, w, bias, stride, padding, dilation, transposed, output_padding, groups,
                                    backward=backward, bias_sizes=bias_sizes)
    return cpu_host.conv_memory_format(x, w, backend), backend


def _valid_runs(out_sp, n_in, lo, strides, taps) -> list[list[tuple[int, int, frozenset]]]:
    """Per spatial dim, the output positions in runs (o0, o1, offsets) that share the set of tap offsets
    reading real input: position o reads padded index o*s + offset, real where lo <= it < lo + n_in."""
    per_dim = []
    for i in range(3):
        offs = sorted({off[i] for _, off in taps})
        runs: list[list] = []
        for o in range(out_sp[i]):
            valid = frozenset(f for f in offs if lo[i] <= o * strides[i] + f < lo[i] + n_in[i])
            if runs and runs[-1][2] == valid:
                runs[-1][1] = o + 1
            else:
                runs.append([o, o + 1, valid])
        per_dim.append([tuple(r) for r in runs])
    return per_dim


def _conv_unpadded(nc, outg, xg, wg, bg, strides, taps, lo, n_in, constant, from_zero: bool = False) -> None:
    """``_conv_forward_core`` where padding contributes nothing: no product with a padded zero is formed (an
    infinite or NaN weight times padding is not NaN), as CPU's oneDNN kernels and its col2im-based paths
    (transposed convolution, the input gradient) compute. The output splits into regions by which taps reach
    real input; each region runs with those taps only (``constant`` fills a region no tap reaches). ``from_zero``:
    see ``_evict``."""
    runs = _valid_runs(outg.shape[3:], n_in, lo, strides, taps)
    if all(len(r) == 1 and len(r[0][2]) == len({off[i] for _, off in taps}) for i, r in enumerate(runs)):
        _conv_forward_core(nc, outg, xg, wg, bg, strides, taps, from_zero)  # no tap reads padding
        return
    for d0, d1, vd in runs[0]:
        for h0, h1, vh in runs[1]:
            for w0, w1, vw in runs[2]:
                view = outg[:, :, :, d0:d1, h0:h1, w0:w1]
                sub = [t for t in taps if t[1][0] in vd and t[1][1] in vh and t[1][2] in vw]
                if not sub:
                    constant(view)
                    continue
                shifted = xg[:, :, :, d0 * strides[0]:, h0 * strides[1]:, w0 * strides[2]:]
                _conv_forward_core(nc, view, shifted, wg, bg, strides, sub, from_zero)


def _unreached(nc, scratch, view: np.ndarray, bg: np.ndarray | None, groups: int) -> None:
    """Outputs of ``view`` ([N, G, Cog, D, H, W]) that no tap reaches (an empty contraction, a transposed
    convolution's stride past its kernel): CPU forms them as an empty sum plus the bias, 0 + bias, so a -0.0 bias
    gives +0.0 there (a NaN stays NaN). The bias is added to zero once on VectorE into a scratch copy, which the
    DMA then broadcasts; without a bias they are zero."""
    if bg is None:
        _fill(nc, view, 0)
        return
    summed = scratch.new(bg.shape, bg.dtype)
    mark = nc.mark()
    t = nc.sbuf_tile((1, bg.size), bg.dtype)
    nc.dma.load(t, bg)
    nc.vector.tensor_scalar(t, t, "add", 0.0)
    nc.dma.store(summed, t)
    nc.release_to(mark)
    for g in range(groups):
        for co in range(view.shape[2]):
            nc.dma.hbm_copy(view[:, g, co], summed[g, co:co + 1].reshape(1, 1, 1, 1))


def _conv_run(nc, scratch, out_v, x_v, w_v, b_v, nsp, stride, padding, dilation, transposed, output_padding,
              groups, skip_padding: bool = False, from_zero: bool = False) -> None:
    """out = convolution(x, w, b) on 5-d normalised numpy views (any of the four PyTorch conv forms).

    ``skip_padding`` (a direct convolution): padding contributes no products, as CPU's oneDNN kernels compute
    (its native kernels, im2col-based, multiply the padded zeros: an infinite weight there gives NaN); the
    caller asks ``cpu_host`` which backend CPU takes. A transposed convolution never multiplies the zeros its
    phases pad with (CPU's col2im and oneDNN's deconvolution form no such products). ``from_zero`` (a transposed
    convolution): CPU's result holds no -0.0 (``_evict``)."""
    cin = x_v.shape[1]
    x5 = _to5d(x_v, nsp)
    out5 = _to5d(out_v, nsp)
    w5 = _to5d(w_v, nsp)
    s3 = [1] * (3 - nsp) + list(stride)
    p3 = [0] * (3 - nsp) + list(padding)
    d3 = [1] * (3 - nsp) + list(dilation)
    k3 = list(w5.shape[2:])
    outg = _split(out5, 1, (groups, out5.shape[1] // groups))
    bg = _split(b_v, 0, (groups, b_v.shape[0] // groups)) if b_v is not None else None

    def constant(view):  # outputs no tap reaches: 0 + bias (or zero)
        _unreached(nc, scratch, view, bg, groups)

    if not transposed:
        xp = _pad(nc, scratch, x5, p3, p3, 0)
        wg = _split(w5, 0, (groups, w5.shape[0] // groups))
        if wg.shape[2] == 0:  # empty contraction
            constant(outg)
            return
        taps = [((a, b, c), (a * d3[0], b * d3[1], c * d3[2]))
                for a in range(k3[0]) for b in range(k3[1]) for c in range(k3[2])]
        xg = _split(xp, 1, (groups, cin // groups))
        if skip_padding and any(p3):
            _conv_unpadded(nc, outg, xg, wg, bg, s3, taps, p3, x5.shape[2:], constant)
        else:
            _conv_forward_core(nc, outg, xg, wg, bg, s3, taps)
        return
    wg = _split(w5, 0, (groups, cin // groups)).transpose(0, 2, 1, 3, 4, 5)  # [G, Cog, Cg_in, K...]
    _conv_transposed(nc, scratch, outg, x5, wg, bg, s3, p3, d3, groups, constant, from_zero)


def _conv_transposed(nc, scratch, outg, x5, wg, bg, s3, p3, d3, groups, constant, from_zero: bool = False) -> None:
    """The transposed convolution of ``x5`` ([N, Cin, D, H, W]) with the grouped weight ``wg`` ([G, Cog,
    Cg_in, KD, KH, KW]) and bias ``bg`` ([G, Cog] or None) into ``outg`` ([N, G, Cog, D, H, W]), by output
    phase (sub-pixel decomposition): outputs o = r + s*j of phase r receive the taps k with (r + p - k*d)
    divisible by s, from inputs j + (r + p - k*d) / s. Each phase is a stride-1 convolution over the
    (padded) input, so no zeros are inserted or multiplied, as CPU's col2im and oneDNN's deconvolution form
    no such products. ``from_zero``: CPU's result holds no -0.0 (``_evict``; the outputs no tap reaches are
    ``constant``'s, +0.0 or 0 + bias already)."""
    cin = x5.shape[1]
    k3 = list(wg.shape[3:])
    out_sp = outg.shape[3:]
    phases = []  # per dim: [(r, J, [(k, offset)])]
    lo, hi = [0, 0, 0], [0, 0, 0]
    for i in range(3):
        plist = []
        for r in range(min(s3[i], out_sp[i])):
            count = _ceil_div(out_sp[i] - r, s3[i])
            t = [(k, (r + p3[i] - k * d3[i]) // s3[i]) for k in range(k3[i])
                 if (r + p3[i] - k * d3[i]) % s3[i] == 0]
            for _, off in t:
                lo[i] = max(lo[i], -off)
                hi[i] = max(hi[i], count - 1 + off - (x5.shape[2 + i] - 1))
            plist.append((r, count, t))
        phases.append(plist)
    xg = _split(_pad(nc, scratch, x5, lo, hi, 0), 1, (groups, cin // groups))
    for rd, _, td in phases[0]:
        for rh, _, th in phases[1]:
            for rw, _, tw in phases[2]:
                view = outg[:, :, :, rd::s3[0], rh::s3[1], rw::s3[2]]
                taps = [((a, b, c), (oa + lo[0], ob + lo[1], oc + lo[2]))
                        for a, oa in td for b, ob in th for c, oc in tw]
                if not taps or wg.shape[2] == 0:
                    constant(view)
                else:
                    _conv_unpadded(nc, view, xg, wg, bg, [1, 1, 1], taps, lo, x5.shape[2:], constant, from_zero)


def conv_transposed_run(nc, scratch, out_v: np.ndarray, x_v: np.ndarray, wg_v: np.ndarray, nsp: int,
                        stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                        bias: np.ndarray | None = None) -> None:
    """out = conv_transpose(x, w) (+ bias) on numpy views: ``out_v`` [N, Cout, *spatial], ``x_v`` [N, Cin,
    *spatial], the weight already grouped, ``wg_v`` [G, Cout/G, Cin/G, *kernel] (the compiler's StableHLO
    operand splits into it as a view; PyTorch's [Cin, Cout/G, *kernel] layout does not for G > 1), ``bias``
    [Cout] added on the way out of PSUM as ``_conv_run`` adds it. No product with an inserted or padded zero
    is formed (``_conv_transposed``); outputs no tap reaches are zero (or the bias)."""
    groups = wg_v.shape[0]
    x5 = _to5d(x_v, nsp)
    out5 = _to5d(out_v, nsp)
    wg = wg_v
    for _ in range(3 - nsp):
        wg = np.expand_dims(wg, 3)
    outg = _split(out5, 1, (groups, out5.shape[1] // groups))
    pad = [0] * (3 - nsp)
    bg = _split(bias, 0, (groups, bias.shape[0] // groups)) if bias is not None else None

    def constant(view):  # outputs no tap reaches: 0 + bias (or zero)
        _unreached(nc, scratch, view, bg, groups)

    _conv_transposed(nc, scratch, outg, x5, wg, bg, [1] * (3 - nsp) + list(stride), pad + list(padding),
                     [1] * (3 - nsp) + list(dilation), groups, constant)


# Shared with the compiler (device_impl.compiler.steps runs stablehlo.convolution with them).
conv_run = _conv_run


def _conv_output(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    nsp, stride, padding, dilation, output_padding, groups = _conv_params(x, w, stride, padding, dilation,
                                                                          transposed, output_padding, groups)
    _conv_check(x, w, bias, nsp, stride, padding, dilation, transposed, output_padding, groups)
    shape = _conv_out_shape(x, w, nsp, stride, padding, dilation, transposed, output_padding, groups)
    return (nsp, stride, padding, dilation, output_padding, groups), shape


def skips_padding(x, w, params, transposed: bool) -> bool:
    """Whether a direct convolution forms no product with its zero padding, as CPU's does for these tensors on this
    host (``cpu_host.conv_skips_padding``: its native kernels and some of oneDNN's multiply the padded zeros, so an
    infinite or NaN weight there gives NaN; oneDNN's direct kernels, where it picks one, do not). A transposed
    convolution never multiplies padding (``_conv_transposed``). ``params``: ``_conv_params``' normalised tuple.
    The compiler asks the same question of a program's convolution steps (``compiler.conv_padding``)."""
    nsp, stride, padding, dilation, _, groups = params
    return not transposed and cpu_host.conv_skips_padding(x, w, stride, padding, dilation, groups)


def sums_from_zero(x, w, bias, params, transposed: bool) -> bool:
    """Whether CPU's convolution of these tensors, a transposed one, adds its column sums into zeros on this host
    (``cpu_host.conv_sums_from_zero`` of the backend it picks now): its output then holds no -0.0 (``_evict``). A
    direct convolution's output is its gemm's (the bias its beta term): signs as rounded."""
    if not transposed:
        return False
    _, stride, padding, dilation, output_padding, groups = params
    return cpu_host.conv_sums_from_zero(cpu_host.conv_backend(x, w, bias, stride, padding, dilation, True,
                                                              output_padding, groups))


def _conv_compute(out, x, w, bias, params, transposed):
    nsp, stride, padding, dilation, output_padding, groups = params
    if out.numel() == 0:
        return out
    with launch("convolution", out.device.index) as nc:
        scratch = _Scratch(out.device)
        _conv_run(nc, scratch, hbm(out), hbm(x), hbm(w), hbm(bias) if bias is not None else None, nsp, stride,
                  padding, dilation, transposed, output_padding, groups,
                  skip_padding=skips_padding(x, w, params, transposed),
                  from_zero=sums_from_zero(x, w, bias, params, transposed))
    return out


@TABLE.native("aten::convolution", dtypes=FLOAT_DTYPES)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    params, shape = _conv_output(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    fmt, _ = _conv_memory_format(input, weight, bias, params, transposed)
    out = torch.empty(shape, dtype=input.dtype, device=input.device, memory_format=fmt)
    return _conv_compute(out, input, weight, bias, params, transposed)


@TABLE.native("aten::convolution.out", dtypes=FLOAT_DTYPES)
def convolution_out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *, out):
    params, shape = _conv_output(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    check_out(out, shape, input.dtype, (input, weight, bias))
    return _conv_compute(out, input, weight, bias, params, transposed)


@TABLE.native("aten::_convolution", dtypes=FLOAT_DTYPES)
def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, benchmark,
                 deterministic, cudnn_enabled, allow_tf32):
    return convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@TABLE.native("aten::convolution_overrideable", dtypes=FLOAT_DTYPES)
def convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
