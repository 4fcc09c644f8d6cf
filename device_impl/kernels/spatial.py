"""Spatial kernels: convolution (TensorE implicit im2col), pooling, upsampling, grid sampling, im2col/col2im,
pairwise distances and real FFTs (DFT matmuls on TensorE).

Conventions shared by every kernel here:

* HBM views are normalised to 3 spatial dimensions (1d and 2d problems get leading singleton
  spatial axes), so one implementation serves 1d/2d/3d.
* Padding (zeros for convolution/avg pooling, -inf for max pooling) and the zero insertion of
  transposed convolution are materialised in an HBM scratch buffer (DMA fills of its border from
  a memset tile plus one HBM->HBM copy of the interior), so every window or patch afterwards is
  a plain strided DMA access pattern.
* Access patterns (slices, strides) are computed on the host from shapes, as a compiler computes
  DMA descriptors; every value that depends on tensor data, and every coordinate, weight and index
  used in arithmetic, is computed by engine instructions (GpSimd iota, VectorE/ScalarE).

numpy references: torch's CPU kernels (ATen/native/cpu/*), mirrored formula by formula where the
rounding matters (interpolation weights, grid unnormalisation, pooling divisors).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import ml_dtypes
import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, check_out, flat_tiles, hbm
from device_impl.kernels.matmul import _matmul_into, psum_to_sbuf

P = 128
N_MAX = 512  # moving free size (one PSUM bank of fp32)
I64 = np.dtype(np.int64)
_NP_FLOATS = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))
BOOL = np.dtype(np.bool_)
FREE = 2048  # elements per partition in flat elementwise tiles
CACHE_BYTES = 64 * 1024  # per partition budget for operand tiles kept resident in SBUF

_CNAME = {torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
          torch.float64: "double", torch.int64: "long int"}


# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------

def _meta(t):
    """A meta stand-in with t's metadata (for running PyTorch's own shape checks, which compute nothing)."""
    if not isinstance(t, torch.Tensor):
        return t
    return torch.empty_strided(tuple(t.shape), t.stride(), dtype=t.dtype, device="meta")


def _empty_like_meta(m: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(m.shape), m.stride(), dtype=m.dtype, device=like.device)


def _split(view: np.ndarray, axis: int, sizes: Sequence[int]) -> np.ndarray:
    """Split one axis of a strided view into several (always a view: strides multiply out)."""
    shape = list(view.shape)
    strides = list(view.strides)
    n = shape[axis]
    inner = 1
    new_strides = []
    for s in reversed(sizes):
        new_strides.append(strides[axis] * inner)
        inner *= s
    assert inner == n, (sizes, n)
    shape[axis:axis + 1] = list(sizes)
    strides[axis:axis + 1] = list(reversed(new_strides))
    return np.lib.stride_tricks.as_strided(view, shape, strides, writeable=view.flags.writeable)


def _to5d(view: np.ndarray, nsp: int) -> np.ndarray:
    """[N, C, *spatial(nsp)] -> [N, C, D, H, W] with leading singleton spatial axes."""
    for _ in range(3 - nsp):
        view = np.expand_dims(view, 2)
    return view


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Consts:
    """Memset tiles of given shape/value, allocated once per launch phase."""

    def __init__(self, nc):
        self.nc = nc
        self.tiles: dict[tuple, Any] = {}

    def get(self, shape, dtype, value):
        key = (tuple(shape), np.dtype(dtype).str, float(value) if not isinstance(value, bool) else value)
        t = self.tiles.get(key)
        if t is None:
            t = self.nc.sbuf_tile(shape, dtype)
            self.nc.vector.memset(t, value)
            self.tiles[key] = t
        return t


def _fill(nc, view: np.ndarray, value, consts: _Consts | None = None) -> None:
    """Fill an HBM view (any strides) with a constant: DMA stores of a memset tile."""
    if view.size == 0:
        return
    consts = consts or _Consts(nc)
    for start, stop, p, f in flat_tiles(view.size, FREE):
        nc.dma.store_flat(view, start, stop, consts.get((p, f), view.dtype, value))


class _Scratch:
    """HBM scratch buffers of one launch (device tensors kept alive until the launch ends)."""

    def __init__(self, device):
        self.device = device
        self.keep: list[torch.Tensor] = []

    def new(self, shape, dtype: np.dtype | torch.dtype) -> np.ndarray:
        if isinstance(dtype, np.dtype):
            from device_impl.engine.dtypes import NUMPY_TO_TORCH
            dtype = NUMPY_TO_TORCH[dtype]
        t = torch.empty(tuple(int(s) for s in shape), dtype=dtype, device=self.device)
        self.keep.append(t)
        return hbm(t)


def _pad(nc, scratch: _Scratch, view: np.ndarray, lo: Sequence[int], hi: Sequence[int], value,
         step: Sequence[int] | None = None, consts: _Consts | None = None) -> np.ndarray:
    """View of ``view`` padded on its trailing len(lo) axes by lo/hi elements of ``value``.

    With ``step``, input elements are placed ``step`` apart (zero insertion of transposed convolution).
    Negative lo/hi crop. Returns ``view`` itself when nothing changes.
    """
    nsp = len(lo)
    step = list(step) if step is not None else [1] * nsp
    if all(a == 0 for a in lo) and all(b == 0 for b in hi) and all(s == 1 for s in step):
        return view
    lead = view.shape[:view.ndim - nsp]
    sizes = view.shape[view.ndim - nsp:]
    out_sizes = [(n - 1) * s + 1 + a + b if n > 0 else max(0, a + b) for n, s, a, b in zip(sizes, step, lo, hi)]
    out_sizes = [max(0, o) for o in out_sizes]
    buf = scratch.new(tuple(lead) + tuple(out_sizes), view.dtype)
    if buf.size == 0:
        return buf
    consts = consts or _Consts(nc)
    # source range kept and destination placement per axis
    src_idx, dst_idx = [], []
    for n, s, a, o in zip(sizes, step, lo, out_sizes):
        i0 = _ceil_div(-a, s) if a < 0 else 0
        i1 = min(n, _ceil_div(o - a, s)) if n > 0 else 0
        i1 = max(i1, i0)
        src_idx.append(slice(i0, i1))
        j0 = a + i0 * s
        dst_idx.append(slice(j0, j0 + (i1 - i0 - 1) * s + 1 if i1 > i0 else j0, s))
    lead_sl = (slice(None),) * len(lead)
    if any(s > 1 for s in step):
        _fill(nc, buf, value, consts)
    else:
        for axis in range(nsp):  # border slabs
            d = dst_idx[axis]
            for sl in (slice(0, d.start), slice(d.stop, out_sizes[axis])):
                if sl.stop > sl.start:
                    idx = [slice(None)] * nsp
                    idx[axis] = sl
                    _fill(nc, buf[lead_sl + tuple(idx)], value, consts)
    src = view[lead_sl + tuple(src_idx)]
    if src.size:
        nc.dma.hbm_copy(buf[lead_sl + tuple(dst_idx)], src)
    return buf


# Shared with the compiler (device_impl.compiler.steps runs stablehlo.convolution and reduce_window with
# them): HBM scratch of one launch, padding (with zero insertion) into scratch, the convolution tile loops.
Scratch = _Scratch
pad_view = _pad


def _boxes(dims: Sequence[int], limit: int):
    """Tile an index space of shape ``dims`` into boxes (products of ranges) of at most ``limit`` points.

    Yields tuples of (start, stop) per dim; inner dims are covered whole when they fit.
    """
    dims = list(dims)
    if any(d == 0 for d in dims):
        return
    nd = len(dims)
    inner = 1
    split = nd - 1
    # find the outermost axis where the box can no longer cover the inner block whole
    for axis in range(nd - 1, -1, -1):
        if inner * dims[axis] > limit:
            split = axis
            break
        inner *= dims[axis]
    else:
        yield tuple((0, d) for d in dims)
        return
    chunk = max(1, limit // inner)  # count along the split axis per box
    outer = dims[:split]
    for idx in np.ndindex(*outer) if outer else [()]:
        for a in range(0, dims[split], chunk):
            b = min(dims[split], a + chunk)
            yield tuple((i, i + 1) for i in idx) + ((a, b),) + tuple((0, d) for d in dims[split + 1:])


def _box_size(box) -> int:
    n = 1
    for a, b in box:
        n *= b - a
    return n


def _window(view: np.ndarray, axis0: int, offsets: Sequence[int], starts: Sequence[int], counts: Sequence[int],
            strides: Sequence[int]) -> np.ndarray:
    """Strided window: along axes axis0.. take counts[i] elements from offsets[i] + starts[i]*strides[i], step strides[i]."""
    idx = [slice(None)] * view.ndim
    for i, (o, a, c, s) in enumerate(zip(offsets, starts, counts, strides)):
        first = o + a * s
        idx[axis0 + i] = slice(first, first + (c - 1) * s + 1, s) if c > 0 else slice(first, first)
    return view[tuple(idx)]


def _expand(value, n: int, name: str) -> list[int]:
    value = [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} values to match the "
                           f"convolution dimensions, but got {name}={value}")
    return value


def _order(view: np.ndarray) -> list[int]:
    """Axes from outermost to innermost in memory (ties keep logical order)."""
    return sorted(range(view.ndim), key=lambda d: (-abs(view.strides[d]) if view.shape[d] != 1 else 0, d))


def _memory_format(t: torch.Tensor):
    from device_impl.kernels.shape import suggest_memory_format
    return suggest_memory_format(t)


# --------------------------------------------------------------------------------------------
# convolution
# --------------------------------------------------------------------------------------------

def _conv_forward_core(nc, outg: np.ndarray, xg: np.ndarray, wg: np.ndarray, bg: np.ndarray | None,
                       stride: Sequence[int], taps: Sequence[tuple]) -> None:
    """outg[N, G, Co, o] = sum_{ci, taps} wg[G, Co, Ci, tap] * xg[N, G, Ci, o*s + offset(tap)] (+ bg[G, Co]).

    ``taps`` lists (kernel index (a, b, c), input offset (d, h, w)); ``xg`` is already padded.
    Implicit im2col: the contraction (tap, input channel) lies on partitions; each patch row is one
    strided DMA of the padded input; weights are the stationary operand (kept resident), patches
    stream through TensorE into PSUM, ScalarE adds the bias on the way out.
    """
    n_batch, groups, cog, od, oh, ow = outg.shape
    cg = wg.shape[2]
    if outg.size == 0:
        return
    wp = xg.shape[-1]
    if stride[1] == 1 and stride[2] == 1 and cg >= ROWS_MIN_CHANNELS and wp <= N_MAX and 2 * ow >= wp:
        _conv_forward_rows(nc, outg, xg, wg, bg, stride[0], taps)
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
                result = nc.sbuf_tile((co1 - co0, npos), out_dtype)
                if bg is not None:
                    nc.scalar.activation(result, acc, "identity", bias=biases[co0])
                else:
                    psum_to_sbuf(nc, result, acc)
                (n0, n1), (d0, d1), (h0, h1), (w0, w1) = box
                dst = outg[n0:n1, g, co0:co1, d0:d1, h0:h1, w0:w1]
                nc.dma.store(dst.transpose(1, 0, 2, 3, 4), result)
                nc.release_to(mark_c)
            nc.release_to(mark_b)
        nc.release_to(mark_g)


ROWS_MIN_CHANNELS = 32  # below this, packing (tap, channel) rows into one contraction tile keeps TensorE busier


def _conv_forward_rows(nc, outg, xg, wg, bg, sd, taps) -> None:
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
                        result = nc.sbuf_tile((co1 - co0, nh * wp), outg.dtype)
                        if bg is not None:
                            nc.scalar.activation(result, acc, "identity", bias=biases[co0])
                        else:
                            psum_to_sbuf(nc, result, acc)
                        for r in range(nh):  # one store per row drops the columns past the row's end
                            nc.dma.store(outg[n, g, co0:co1, d, r0 + r, :], result[:, r * wp:r * wp + ow])
                        nc.release_to(mark_c)
                    nc.release_to(mark_b)
        nc.release_to(mark_g)


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


def _conv_unpadded(nc, outg, xg, wg, bg, strides, taps, lo, n_in, constant) -> None:
    """``_conv_forward_core`` where padding contributes nothing: no product with a padded zero is formed (an
    infinite or NaN weight times padding is not NaN), as CPU's oneDNN kernels and its col2im-based paths
    (transposed convolution, the input gradient) compute. The output splits into regions by which taps reach
    real input; each region runs with those taps only (``constant`` fills a region no tap reaches)."""
    runs = _valid_runs(outg.shape[3:], n_in, lo, strides, taps)
    if all(len(r) == 1 and len(r[0][2]) == len({off[i] for _, off in taps}) for i, r in enumerate(runs)):
        _conv_forward_core(nc, outg, xg, wg, bg, strides, taps)  # no tap reads padding
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
                _conv_forward_core(nc, view, shifted, wg, bg, strides, sub)


def _conv_run(nc, scratch, out_v, x_v, w_v, b_v, nsp, stride, padding, dilation, transposed, output_padding,
              groups, skip_padding: bool = False) -> None:
    """out = convolution(x, w, b) on 5-d normalised numpy views (any of the four PyTorch conv forms).

    ``skip_padding`` (a direct convolution): padding contributes no products, as CPU's oneDNN kernels compute
    (its native kernels, im2col-based, multiply the padded zeros: an infinite weight there gives NaN); the
    caller asks ``cpu_host`` which backend CPU takes. A transposed convolution never multiplies the zeros its
    phases pad with (CPU's col2im and oneDNN's deconvolution form no such products)."""
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

    def constant(view):  # outputs no tap reaches: the bias (or zero)
        if bg is None:
            _fill(nc, view, 0)
            return
        for g in range(groups):
            for co in range(view.shape[2]):
                nc.dma.hbm_copy(view[:, g, co], bg[g, co:co + 1].reshape(1, 1, 1, 1))

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
    # Transposed convolution by output phase (sub-pixel decomposition): outputs o = r + s*j of phase r
    # receive the taps k with (r + p - k*d) divisible by s, from inputs j + (r + p - k*d) / s. Each phase
    # is a stride-1 convolution over the (padded) input, so no zeros are inserted or multiplied.
    wg = _split(w5, 0, (groups, cin // groups)).transpose(0, 2, 1, 3, 4, 5)  # [G, Cog, Cg_in, K...]
    out_sp = out5.shape[2:]
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
                    _conv_unpadded(nc, view, xg, wg, bg, [1, 1, 1], taps, lo, x5.shape[2:], constant)


conv_run = _conv_run


def _conv_output(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    nsp, stride, padding, dilation, output_padding, groups = _conv_params(x, w, stride, padding, dilation,
                                                                          transposed, output_padding, groups)
    _conv_check(x, w, bias, nsp, stride, padding, dilation, transposed, output_padding, groups)
    shape = _conv_out_shape(x, w, nsp, stride, padding, dilation, transposed, output_padding, groups)
    return (nsp, stride, padding, dilation, output_padding, groups), shape


def _conv_compute(out, x, w, bias, params, transposed, backend=None):
    nsp, stride, padding, dilation, output_padding, groups = params
    if out.numel() == 0:
        return out
    if backend is None:
        _, backend = _conv_memory_format(x, w, bias, params, transposed)
    with launch("convolution", out.device.index) as nc:
        scratch = _Scratch(out.device)
        _conv_run(nc, scratch, hbm(out), hbm(x), hbm(w), hbm(bias) if bias is not None else None, nsp, stride,
                  padding, dilation, transposed, output_padding, groups,
                  # A direct forward multiplies padded zeros as CPU's native kernels do, also for oneDNN: its AVX-512
                  # kernels do for some shapes (a 1-wide conv1d, padding 1), not for others, and AVX2 ones never
                  # (host-dependent; conv1d-bfloat16-special-expanded-7). Left as on main; see the report.
                  skip_padding=False)
    return out


@TABLE.native("aten::convolution", dtypes=FLOAT_DTYPES)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    params, shape = _conv_output(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    fmt, backend = _conv_memory_format(input, weight, bias, params, transposed)
    out = torch.empty(shape, dtype=input.dtype, device=input.device, memory_format=fmt)
    return _conv_compute(out, input, weight, bias, params, transposed, backend)


@TABLE.native("aten::convolution.out", dtypes=FLOAT_DTYPES)
def convolution_out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *, out):
    params, shape = _conv_output(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    check_out(out, shape, input.dtype, (input, weight, bias))
    return _conv_compute(out, input, weight, bias, params, transposed)


def _conv_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                   groups, output_mask, outs=None):
    nsp, stride, padding, dilation, output_padding, groups = _conv_params(input, weight, stride, padding, dilation,
                                                                          transposed, output_padding, groups)
    _conv_check(input, weight, None, nsp, stride, padding, dilation, transposed, output_padding, groups)
    if grad_output.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[input.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[grad_output.dtype]}")
    shape = _conv_out_shape(input, weight, nsp, stride, padding, dilation, transposed, output_padding, groups)
    if tuple(grad_output.shape) != tuple(shape):
        raise RuntimeError(f"Expected grad_output to have shape {list(shape)}, but got {list(grad_output.shape)}")
    params = (nsp, stride, padding, dilation, output_padding, groups)
    fmt, backend = _conv_memory_format(input, weight, None, params, transposed, backward=True,
                                       bias_sizes=bias_sizes)
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
        if grad_output.numel() == 0:  # an empty output (see _cpu_returns_empty_transposed): zero gradients
            for g in (gi, gw, gb):
                if g is not None:
                    _fill(nc, hbm(g), 0)
            return gi, gw, gb
        s3 = [1] * (3 - nsp) + list(stride)
        p3 = [0] * (3 - nsp) + list(padding)
        d3 = [1] * (3 - nsp) + list(dilation)
        if gi is not None and gi.numel():
            if not transposed:
                # grad_input = conv_transpose(grad_output, weight); output_padding recovers the input size
                opad = [input.shape[2 + i] - ((shape[2 + i] - 1) * stride[i] - 2 * padding[i]
                                             + dilation[i] * (weight.shape[2 + i] - 1) + 1) for i in range(nsp)]
                _conv_run(nc, scratch, hbm(gi), go_v, w_v, None, nsp, stride, padding, dilation, True, opad, groups)
            else:
                # CPU's native transposed backward multiplies grad_output's padded zeros (im2col); oneDNN does not
                _conv_run(nc, scratch, hbm(gi), go_v, w_v, None, nsp, stride, padding, dilation, False,
                          [0] * nsp, groups, skip_padding=cpu_host.is_onednn(backend))
        if gw is not None and gw.numel():
            gw5 = _to5d(hbm(gw), nsp)
            if not transposed:
                xp = _pad(nc, scratch, _to5d(x_v, nsp), p3, p3, 0)
                left, right = _to5d(go_v, nsp), xp
                cl, cr = weight.shape[0] // groups, weight.shape[1]
            else:
                gop = _pad(nc, scratch, _to5d(go_v, nsp), p3, p3, 0)
                left, right = _to5d(x_v, nsp), gop
                cl, cr = weight.shape[0] // groups, weight.shape[1]
            # positions are the contraction: give both operands channel-contiguous rows first
            left, right = _channels_last(nc, scratch, left), _channels_last(nc, scratch, right)
            gwg = _split(gw5, 0, (groups, cl))
            lg = _split(left, 1, (groups, left.shape[1] // groups))
            rg = _split(right, 1, (groups, right.shape[1] // groups))
            if cr and lg.shape[0] * lg.shape[3] * lg.shape[4] * lg.shape[5] == 0:
                _fill(nc, gw5, 0)
            else:
                _conv_weight_grad_core(nc, gwg, lg, rg, s3, d3)
        if gb is not None and gb.numel():
            _channel_sum(nc, hbm(gb), go_v)
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


# --------------------------------------------------------------------------------------------
# flat elementwise passes over strided windows (pooling, im2col/col2im)
# --------------------------------------------------------------------------------------------

class _Flat:
    """Flat [p, f] tiles over views that share a logical shape, in the memory order of ``like``.

    ``coords(nc, t0, axis)`` gives an int64 tile of each element's coordinate along ``axis`` (of
    the logical shape), computed on GpSimd (iota) and VectorE from the flat position.
    """

    def __init__(self, like: np.ndarray):
        self.shape = like.shape
        self.perm = _order(like)
        pshape = [like.shape[a] for a in self.perm]
        self.inner = {}
        acc = 1
        for pos in range(len(pshape) - 1, -1, -1):
            self.inner[self.perm[pos]] = (acc, pshape[pos], pos == 0)
            acc *= pshape[pos]
        self.numel = acc

    def view(self, v: np.ndarray) -> np.ndarray:
        return v.transpose(self.perm)

    def tiles(self):
        return flat_tiles(self.numel, FREE)

    def flat_index(self, nc, start, p, f):
        t = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.iota(t, base=start, partition_step=f, free_step=1)
        return t

    def coord(self, nc, flat, axis):
        inner, n, outermost = self.inner[axis]
        t = nc.sbuf_tile(flat.shape, I64)
        if n == 1:
            nc.vector.memset(t, 0)
            return t
        if inner == 1:
            nc.vector.tensor_scalar(t, flat, "remainder", n)
            return t
        nc.vector.tensor_scalar(t, flat, "floor_divide", inner)
        if not outermost:
            nc.vector.tensor_scalar(t, t, "remainder", n)
        return t


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


def _copy_cast(nc, dst: np.ndarray, src: np.ndarray) -> None:
    """dst = src (same logical shape, any strides), converting dtype on VectorE."""
    flat = _Flat(dst)
    dv, sv = flat.view(dst), flat.view(src)
    for start, stop, p, f in flat.tiles():
        mark = nc.mark()
        t = nc.sbuf_tile((p, f), src.dtype)
        nc.dma.load_flat(t, sv, start, stop)
        if src.dtype != dst.dtype:
            o = nc.sbuf_tile((p, f), dst.dtype)
            nc.vector.tensor_copy(o, t)
            t = o
        nc.dma.store_flat(dv, start, stop, t)
        nc.release_to(mark)


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
    const_div = None
    if mode == "avg":
        if divisor is not None:
            const_div = divisor
        elif all(a == 0 for a in lo) and all(b == 0 for b in hi):
            const_div = k3[0] * k3[1] * k3[2]
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
        const_div = None
        if mode == "avg":
            if divisor is not None:
                const_div = divisor
            elif all(a == 0 for a in lo) and all(b == 0 for b in hi):
                const_div = k3[0] * k3[1] * k3[2]
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


def _batched5(view: np.ndarray, nsp: int) -> np.ndarray:
    """[(N,) C, *spatial] -> [N, C, D, H, W]."""
    if view.ndim == nsp + 1:
        view = view[None]
    return _to5d(view, nsp)


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
        check_out(out, tuple(m.shape), x.dtype, (x,))
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


# --------------------------------------------------------------------------------------------
# adaptive pooling: separable window stages on VectorE over SBUF-resident planes
# --------------------------------------------------------------------------------------------
#
# A plane tile holds [planes <= 128, A*B*C] (C innermost). A stage reduces the innermost axis:
# ``in[:, c::C]`` (one strided free-dim access) for every c of output o's window, and writes the
# result as the contiguous block ``out[:, o*L:(o+1)*L]`` (L = A*B), which rotates the layout to
# (OC, A, B). Three stages (two in 2-d) bring the layout back to (OA, OB, OC).

def _adaptive_start(o: int, osize: int, isize: int) -> int:
    return (o // osize) * isize + ((o % osize) * isize) // osize


def _adaptive_end(o: int, osize: int, isize: int) -> int:
    return 1 + ((o + 1) * isize - 1) // osize


def _adaptive_windows(isize: int, osize: int, offset: int = 0):
    return [(_adaptive_start(o, osize, isize) - offset, _adaptive_end(o, osize, isize) - offset) for o in range(osize)]


def _stage_max(nc, src, src_idx, n_in, windows, np_, L, index_step, index_base=0):
    """Max over the innermost axis with CPU's rule (first maximum, last NaN); indices combine as
    prev_index + (i + index_base) * index_step."""
    out = nc.sbuf_tile((np_, len(windows) * L), FP32)
    idx = nc.sbuf_tile((np_, len(windows) * L), I64)
    gt = nc.sbuf_tile((np_, L), BOOL)
    nan = nc.sbuf_tile((np_, L), BOOL)
    cand = nc.sbuf_tile((np_, L), I64)

    def col(t, i):
        return t[:, i::n_in] if n_in > 1 else t[:, 0:L]

    for o, (s, e) in enumerate(windows):
        blk = out[:, o * L:(o + 1) * L]
        iblk = idx[:, o * L:(o + 1) * L]
        nc.vector.memset(blk, -np.inf)
        for i in range(s, e):
            if src_idx is None:
                nc.vector.memset(cand, (i + index_base) * index_step)
            else:
                nc.vector.tensor_scalar(cand, col(src_idx, i), "add", (i + index_base) * index_step)
            if i == s:
                nc.vector.tensor_copy(iblk, cand)
            v = col(src, i)
            nc.vector.tensor_tensor(gt, v, blk, "greater", dtype=FP32)
            nc.vector.tensor_unary(nan, v, "isnan", dtype=FP32)
            nc.vector.tensor_tensor(gt, gt, nan, "logical_or")
            nc.vector.select(blk, gt, v, blk)
            nc.vector.select(iblk, gt, cand, iblk)
    return out, idx


def _adaptive_blocks(isize: int, osize: int, inner: int, budget: int = 6144):
    """Output ranges along the outermost axis whose input rows (times ``inner``) fit the budget."""
    blocks = []
    o0 = 0
    while o0 < osize:
        o1 = o0 + 1
        while o1 < osize and (_adaptive_end(o1, osize, isize) - _adaptive_start(o0, osize, isize)) * inner <= budget:
            o1 += 1
        blocks.append((o0, o1))
        o0 = o1
    return blocks


def _adaptive_forward(nc, out5, idx5, x5, mode):
    """Adaptive avg/max pooling of [N, C, D, H, W] views (idx5: flat per-plane argmax for max)."""
    n_batch, channels = x5.shape[:2]
    ins = list(x5.shape[2:])
    outs = list(out5.shape[2:])
    # axes taking part (a 2-d problem has D == OD == 1: skip that stage)
    axes = [0, 1, 2] if not (ins[0] == 1 and outs[0] == 1) else [1, 2]
    lead = axes[0]
    inner_in = 1
    for a in axes[1:]:
        inner_in *= ins[a]
    plane_strides = [ins[1] * ins[2], ins[2], 1]
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        for o0, o1 in _adaptive_blocks(ins[lead], outs[lead], inner_in):
            mark = nc.mark()
            i0 = _adaptive_start(o0, outs[lead], ins[lead])
            i1 = _adaptive_end(o1 - 1, outs[lead], ins[lead])
            sl = [slice(None)] * 3
            sl[lead] = slice(i0, i1)
            src_view = x5[n0:n1, c0:c1][(slice(None), slice(None)) + tuple(sl)]
            blk_in = list(ins)
            blk_in[lead] = i1 - i0
            blk_out = list(outs)
            blk_out[lead] = o1 - o0
            t = nc.sbuf_tile((np_, blk_in[0] * blk_in[1] * blk_in[2]), x5.dtype)
            nc.dma.load(t, src_view)
            cur, cur_idx = t, None
            dims = [blk_in[a] for a in axes]  # current layout, outermost first
            for a in reversed(axes):  # innermost axis first
                n_in = dims[-1]
                L = 1
                for d in dims[:-1]:
                    L *= d
                offset = i0 if a == lead else 0
                wins = _adaptive_windows(ins[a], outs[a], offset)
                if a == lead:
                    wins = wins[o0:o1]
                cur, cur_idx = _stage_max(nc, cur, cur_idx, n_in, wins, np_, L, plane_strides[a], offset)
                dims = [len(wins)] + dims[:-1]
            osl = [slice(None)] * 3
            osl[lead] = slice(o0, o1)
            dst = out5[n0:n1, c0:c1][(slice(None), slice(None)) + tuple(osl)]
            res = nc.sbuf_tile(cur.shape, out5.dtype)
            nc.vector.tensor_copy(res, cur)
            nc.dma.store(dst, res)
            if idx5 is not None:
                nc.dma.store(idx5[n0:n1, c0:c1][(slice(None), slice(None)) + tuple(osl)], cur_idx)
            nc.release_to(mark)


# Average pooling is not separable under CPU's rounding: ATen sums each window in one pass, (d, h, w)
# row-major from +0.0, then divides by each window length in turn. 2-d (and 1-d, which ATen runs as 2-d):
# AdaptiveAvgPoolKernel.cpp, cpu_adaptive_avg_pool2d, sums in opmath (float32) and rounds once after
# ``sum / kh / kw`` (the channels-last kernel divides by ``kh * kw`` on its vectorized channel blocks, by kh
# then kw on the remainder). 3-d: AdaptiveAveragePooling3d.cpp, adaptive_avg_pool3d_out_frame, sums in
# scalar_t (a bf16/fp16 sum rounds at every add) and divides in scalar_t by kT, kH, kW, rounding each time.
# The backward kernels (both files) form ``grad_delta = grad_output / k...`` in scalar_t and add it into a
# zeroed grad_input in scalar_t, visiting outputs row-major. These windows have irregular starts, so the
# passes run on GpSimd as numpy programs with exactly those roundings.

def _adaptive_axis(isize: int, osize: int):
    """(start, length) per output along one axis."""
    st = np.array([_adaptive_start(o, osize, isize) for o in range(osize)], dtype=np.int64)
    en = np.array([_adaptive_end(o, osize, isize) for o in range(osize)], dtype=np.int64)
    return st, en - st


def _avg_vector_lanes(dtype: np.dtype, channels: int) -> int:
    """Channels CPU's channels-last 2-d kernels cover with whole Vectorized<T> blocks (32 bytes for every
    capability in torch 2.13, see cpu_host.vector_block); the remainder runs scalar."""
    lanes = cpu_host.vector_block(torch.float32 if dtype == np.float32 else torch.bfloat16) // 2
    return channels - channels % lanes


def _narrow(dtype):
    """Round a float32 array to ``dtype`` (storage arithmetic of c10's BFloat16/Half: float op, then round)."""
    def r(a):
        return np.asarray(a, np.float32).astype(dtype).astype(np.float32)
    return r


def _adaptive_avg_program(nsp, ins, outs, lead_rng, dtype, single_div):
    """numpy program (out[p, od*oh*ow block], x[p, id block]) of CPU's adaptive average forward.
    ``lead_rng``: (o0, o1, i0) the block of lead-axis outputs and its first input row; ``single_div``: [p]
    bool, lanes dividing once by the window size (channels-last vector blocks)."""
    o0, o1, i0 = lead_rng
    axes = [_adaptive_axis(ins[a], outs[a]) for a in range(3)]
    st0, ln0 = axes[0]
    axes[0] = (st0[o0:o1] - i0, ln0[o0:o1])
    rnd = _narrow(dtype) if nsp == 3 else (lambda a: a)

    def program(o, x):
        p = x.shape[0]
        xv = x.reshape(p, -1, ins[1], ins[2]).astype(np.float32)
        (sd, kd), (sh, kh), (sw, kw) = axes
        s = np.zeros((p, len(sd), len(sh), len(sw)), np.float32)
        with np.errstate(all="ignore"):
            for a in range(int(kd.max())):
                for b in range(int(kh.max())):
                    for c in range(int(kw.max())):
                        valid = (a < kd)[:, None, None] & (b < kh)[None, :, None] & (c < kw)[None, None, :]
                        v = xv[:, np.minimum(sd + a, xv.shape[1] - 1)][:, :, np.minimum(sh + b, ins[1] - 1)][
                            :, :, :, np.minimum(sw + c, ins[2] - 1)]
                        s = np.where(valid[None], rnd(s + v), s)
            k3 = [k.astype(np.float32) for k in (kd, kh, kw)]
            seq = s
            for ax, k in enumerate(k3):
                shape = [1, 1, 1, 1]
                shape[ax + 1] = -1
                seq = rnd(seq / k.reshape(shape))
            if single_div is not None and single_div.any():
                whole = s / (k3[0][:, None, None] * k3[1][None, :, None] * k3[2][None, None, :])[None]
                seq = np.where(single_div[:, None, None, None], whole, seq)
        o[...] = seq.reshape(p, -1).astype(o.dtype)
    return program


def _adaptive_avg_forward(nc, out5, x5, nsp, channels_last):
    n_batch, channels = x5.shape[:2]
    ins = list(x5.shape[2:])
    outs = list(out5.shape[2:])
    inner_in = ins[1] * ins[2]
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        single = None
        if channels_last:
            cidx = np.tile(np.arange(c0, c1), n1 - n0)
            single = cidx < _avg_vector_lanes(x5.dtype, channels)
        for o0, o1 in _adaptive_blocks(ins[0], outs[0], inner_in):
            mark = nc.mark()
            i0 = _adaptive_start(o0, outs[0], ins[0])
            i1 = _adaptive_end(o1 - 1, outs[0], ins[0])
            t = nc.sbuf_tile((np_, (i1 - i0) * inner_in), x5.dtype)
            nc.dma.load(t, x5[n0:n1, c0:c1, i0:i1])
            res = nc.sbuf_tile((np_, (o1 - o0) * outs[1] * outs[2]), out5.dtype)
            window = int(np.prod([int(_adaptive_axis(ins[a], outs[a])[1].max()) for a in range(3)]))
            nc.gpsimd.run("adaptive_avg", _adaptive_avg_program(nsp, ins, outs, (o0, o1, i0), x5.dtype, single),
                          (res,), (t,), elements=res.data.size * window, factor=2.0)
            nc.dma.store(out5[n0:n1, c0:c1, o0:o1], res)
            nc.release_to(mark)


def _adaptive_avg_backward_program(nsp, ins, outs, rng, dtype, single_div):
    """numpy program (gi[p, i block], go[p, o block]) of CPU's adaptive average backward: grad_input rows
    [i0, i1) of the lead axis, fed by lead-axis outputs [o0, o1)."""
    i0, i1, o0, o1 = rng
    rnd = _narrow(dtype)
    axes = [_adaptive_axis(ins[a], outs[a]) for a in range(3)]

    def cover(st, ln, lo, hi):
        """Per input index in [lo, hi): first covering output and how many cover it (outputs increase)."""
        idx = np.arange(lo, hi)
        hit = (st[None, :] <= idx[:, None]) & (idx[:, None] < (st + ln)[None, :])
        first = hit.argmax(axis=1)
        return first, hit.sum(axis=1)

    covers = [cover(*axes[0], i0, i1)] + [cover(*axes[a], 0, ins[a]) for a in (1, 2)]
    covers[0] = (covers[0][0] - o0, covers[0][1])

    def program(gi, go):
        p = go.shape[0]
        g = go.reshape(p, o1 - o0, outs[1], outs[2]).astype(np.float32)
        (_, kd), (_, kh), (_, kw) = axes
        k3 = [kd[o0:o1].astype(np.float32), kh.astype(np.float32), kw.astype(np.float32)]
        with np.errstate(all="ignore"):
            delta = g
            for ax, k in enumerate(k3):
                shape = [1, 1, 1, 1]
                shape[ax + 1] = -1
                delta = rnd(delta / k.reshape(shape))
            if single_div is not None and single_div.any():
                whole = rnd(g / (k3[0][:, None, None] * k3[1][None, :, None] * k3[2][None, None, :])[None])
                delta = np.where(single_div[:, None, None, None], whole, delta)
            acc = np.zeros((p, i1 - i0, ins[1], ins[2]), np.float32)
            (fd, cd), (fh, ch), (fw, cw) = covers
            for a in range(int(cd.max())):
                for b in range(int(ch.max())):
                    for c in range(int(cw.max())):
                        valid = (a < cd)[:, None, None] & (b < ch)[None, :, None] & (c < cw)[None, None, :]
                        v = delta[:, np.minimum(fd + a, o1 - o0 - 1)][:, :, np.minimum(fh + b, outs[1] - 1)][
                            :, :, :, np.minimum(fw + c, outs[2] - 1)]
                        acc = np.where(valid[None], rnd(acc + v), acc)
        gi[...] = acc.reshape(p, -1).astype(gi.dtype)
    return program


def _adaptive_avg_backward(nc, gi5, go5, nsp, channels_last):
    """CPU's order: grad_delta per output, added into zeroed grad_input rows output by output."""
    n_batch, channels = gi5.shape[:2]
    ins = list(gi5.shape[2:])
    outs = list(go5.shape[2:])
    inner = max(ins[1] * ins[2], outs[1] * outs[2])
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        single = None
        if channels_last:
            cidx = np.tile(np.arange(c0, c1), n1 - n0)
            single = cidx < _avg_vector_lanes(gi5.dtype, channels)
        step = max(1, 6144 // inner)
        for i0 in range(0, ins[0], step):  # blocks of grad_input rows: no two blocks write the same row
            i1 = min(ins[0], i0 + step)
            o0 = min(o for o in range(outs[0]) if _adaptive_end(o, outs[0], ins[0]) > i0)
            o1 = max(o for o in range(outs[0]) if _adaptive_start(o, outs[0], ins[0]) < i1) + 1
            mark = nc.mark()
            g = nc.sbuf_tile((np_, (o1 - o0) * outs[1] * outs[2]), go5.dtype)
            nc.dma.load(g, go5[n0:n1, c0:c1, o0:o1])
            res = nc.sbuf_tile((np_, (i1 - i0) * ins[1] * ins[2]), gi5.dtype)
            nc.gpsimd.run("adaptive_avg_backward",
                          _adaptive_avg_backward_program(nsp, ins, outs, (i0, i1, o0, o1), gi5.dtype, single),
                          (res,), (g,), elements=res.data.size * 4, factor=2.0)
            nc.dma.store(gi5[n0:n1, c0:c1, i0:i1], res)
            nc.release_to(mark)


def _adaptive_max_backward(nc, gi5, go5, idx5):
    """grad_input[plane, indices] += grad_output: a scatter-add per plane on GpSimd (irregular)."""
    n_batch, channels = gi5.shape[:2]
    plane = gi5.shape[2] * gi5.shape[3] * gi5.shape[4]
    oplane = go5.shape[2] * go5.shape[3] * go5.shape[4]
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        chunk = 8192
        mark = nc.mark()
        g = nc.sbuf_tile((np_, oplane), go5.dtype)
        nc.dma.load(g, go5[n0:n1, c0:c1])
        idx = nc.sbuf_tile((np_, oplane), I64)
        nc.dma.load(idx, idx5[n0:n1, c0:c1])
        gi_flat = gi5[n0:n1, c0:c1]
        flat_dst = gi_flat.view()
        try:
            flat_dst.shape = (np_, plane)
        except AttributeError:  # planes are not rows of one stride (channels_last): one chunk per plane
            flat_dst, chunk = None, plane
        for r0 in range(0, plane, chunk):
            r1 = min(plane, r0 + chunk)
            m = nc.mark()
            acc = nc.sbuf_tile((np_, r1 - r0), FP32)

            def scatter(acc_a, g_a, idx_a, r0=r0, r1=r1):
                acc_a[...] = 0
                rows = np.broadcast_to(np.arange(acc_a.shape[0])[:, None], idx_a.shape)
                hit = (idx_a >= r0) & (idx_a < r1)
                np.add.at(acc_a, (rows[hit], idx_a[hit] - r0), g_a[hit].astype(np.float32))

            nc.gpsimd.run("scatter_add", scatter, (acc,), (g, idx), elements=np_ * (oplane + r1 - r0))
            res = nc.sbuf_tile((np_, r1 - r0), gi5.dtype)
            nc.vector.tensor_copy(res, acc)
            if r0 == 0 and r1 == plane:
                nc.dma.store(gi_flat, res)
            else:
                nc.dma.store(flat_dst[:, r0:r1], res)
            nc.release_to(m)
        nc.release_to(mark)


def _adaptive_avg_check(nsp, x, output_size):
    name = f"adaptive_avg_pool{nsp}d"
    if len(output_size) != nsp:
        raise RuntimeError(f"{name}: output_size must be {nsp}")
    if x.dim() not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"{name}(): Expected {nsp + 1}D or {nsp + 2}D tensor, but got {list(x.shape)}")
    for i in range(1, x.dim()):
        if x.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(x.shape)} with dimension {i} being empty")
    if any(int(o) < 0 for o in output_size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(output_size)}")
    if x.dtype not in FLOAT_DTYPES:
        raise NotImplementedError(f'"{name}{"_cpu" if nsp == 3 else ""}" not implemented for '
                                  f"'{SCALAR_TYPE_NAMES[x.dtype]}'")


def _register_adaptive_avg(nsp: int) -> None:
    name = f"_adaptive_avg_pool{nsp}d"

    @TABLE.native(f"aten::{name}", dtypes=COMPUTE_DTYPES)
    def forward(x, output_size):
        output_size = [int(o) for o in output_size]
        _adaptive_avg_check(nsp, x, output_size)
        shape = tuple(x.shape[:x.dim() - nsp]) + tuple(output_size)
        fmt = torch.channels_last if nsp == 2 and x.dim() == 4 and _memory_format(x) == torch.channels_last \
            else torch.contiguous_format
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=fmt)
        if out.numel():
            with launch(name, x.device.index) as nc:
                _adaptive_avg_forward(nc, _batched5(hbm(out), nsp), _batched5(hbm(x), nsp), nsp,
                                      nsp == 2 and x.dim() == 4 and _memory_format(x) == torch.channels_last)
        return out

    TABLE.serves(f"aten::{name}.out", f"aten::{name}")

    @TABLE.native(f"aten::{name}_backward", dtypes=COMPUTE_DTYPES)
    def backward(grad_output, x):
        _adaptive_avg_check(nsp, x, list(grad_output.shape[grad_output.dim() - nsp:]))
        if grad_output.dim() != x.dim():
            raise RuntimeError(f"adaptive_avg_pool{nsp}d_backward(): Expected dimensions {x.dim()} for "
                               f"`grad_output` but got dimensions {grad_output.dim()}")
        if grad_output.dtype != x.dtype:
            raise RuntimeError(f"expected dtype {x.dtype} for `grad_output` but got dtype {grad_output.dtype}")
        fmt = torch.channels_last if nsp == 2 and x.dim() == 4 and _memory_format(x) == torch.channels_last \
            else torch.contiguous_format
        gi = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device, memory_format=fmt)
        if gi.numel():
            with launch(f"{name}_backward", x.device.index) as nc:
                _adaptive_avg_backward(nc, _batched5(hbm(gi), nsp), _batched5(hbm(grad_output), nsp), nsp,
                                       nsp == 2 and grad_output.dim() == 4
                                       and _memory_format(grad_output) == torch.channels_last)
        return gi

    TABLE.serves(f"aten::{name}_backward.out", f"aten::{name}_backward")


def _register_adaptive_max(nsp: int) -> None:
    name = f"adaptive_max_pool{nsp}d"
    functional = getattr(torch.ops.aten, name).default
    backward_functional = getattr(torch.ops.aten, f"{name}_backward").default

    @TABLE.native(f"aten::{name}.out", dtypes=COMPUTE_DTYPES)
    def forward_out(x, output_size, *, out, indices):
        m_out, m_idx = functional(_meta(x), output_size)
        if x.dtype not in FLOAT_DTYPES:
            raise NotImplementedError(f'"{name}" not implemented for \'{SCALAR_TYPE_NAMES[x.dtype]}\'')
        check_out(out, tuple(m_out.shape), x.dtype, (x,))
        check_out(indices, tuple(m_idx.shape), torch.int64, (x,), exact_dtype=True)
        if out.numel():
            with launch(name, x.device.index) as nc:
                _adaptive_forward(nc, _batched5(hbm(out), nsp), _batched5(hbm(indices), nsp),
                                  _batched5(hbm(x), nsp), "max")
        return out, indices

    TABLE.serves(f"aten::{name}", f"aten::{name}.out")

    @TABLE.native(f"aten::{name}_backward.grad_input", dtypes=FLOAT_DTYPES | {torch.int64})
    def backward_out(grad_output, x, indices, *, grad_input):
        m = backward_functional(_meta(grad_output), _meta(x), _meta(indices))
        check_out(grad_input, tuple(m.shape), x.dtype, (grad_output, x, indices))
        if grad_input.numel():
            with launch(f"{name}_backward", x.device.index) as nc:
                _adaptive_max_backward(nc, _batched5(hbm(grad_input), nsp), _batched5(hbm(grad_output), nsp),
                                       _batched5(hbm(indices), nsp))
        return grad_input

    TABLE.serves(f"aten::{name}_backward", f"aten::{name}_backward.grad_input")


for _nsp in (2, 3):
    _register_adaptive_avg(_nsp)
    _register_adaptive_max(_nsp)


# --------------------------------------------------------------------------------------------
# upsampling: separable per-axis stages with indirect-DMA row gathers
# --------------------------------------------------------------------------------------------
#
# A stage resamples one spatial axis a of a [N, C, D, H, W] buffer viewed as a row table
# [(dims up to a), (dims after a)]: output row r = (outer, o) reads the input rows (outer, i_j(o))
# of its taps (1 nearest, 2 linear, 4 cubic) by indirect DMA (row numbers computed on VectorE
# from an iota, with CPU's float32 source-index formulas) and blends them with per-partition
# weights in CPU's order (t0*w0 + t1*w1 + ...). The backward stage is the adjoint: weighted rows
# are scattered with DMA accumulate into an fp32 table.

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


def _resample_stage(nc, dst2d, src2d, ax: _Axis) -> None:
    rows, cols = dst2d.shape
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        mark = nc.mark()
        taps = _row_plan(nc, r0, p, ax)
        for c0 in range(0, cols, FREE):
            c1 = min(cols, c0 + FREE)
            m = nc.mark()
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
            res = acc
            if acc.dtype != dst2d.dtype:
                res = nc.sbuf_tile((p, c1 - c0), dst2d.dtype)
                nc.vector.tensor_copy(res, acc)
            nc.dma.store(dst2d[r0:r0 + p, c0:c1], res)
            nc.release_to(m)
        nc.release_to(mark)


def _resample_stage_backward(nc, acc2d, g2d, ax: _Axis) -> None:
    """acc2d[(outer, i)] += sum over taps (o -> i) of weight * g2d[(outer, o)] (DMA accumulate)."""
    rows, cols = g2d.shape
    for r0 in range(0, rows, P):
        p = min(P, rows - r0)
        mark = nc.mark()
        taps = _row_plan(nc, r0, p, ax)
        for c0 in range(0, cols, FREE):
            c1 = min(cols, c0 + FREE)
            m = nc.mark()
            g = nc.sbuf_tile((p, c1 - c0), g2d.dtype)
            nc.dma.load(g, g2d[r0:r0 + p, c0:c1])
            for row, wt in taps:
                t = nc.sbuf_tile((p, c1 - c0), FP32)
                if wt is None:
                    nc.vector.tensor_copy(t, g)
                else:
                    nc.vector.tensor_tensor(t, g, wt, "multiply", dtype=FP32)
                nc.dma.store_rows(acc2d[:, c0:c1], row, t, accumulate=True)
            nc.release_to(m)
        nc.release_to(mark)


def _resample(nc, scratch, out5, x5, axes: dict) -> None:
    """out5 = separable resampling of x5 along the spatial axes in ``axes`` ({axis: _Axis}), innermost first."""
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


def _resample_backward(nc, scratch, gi5, go5, axes: dict) -> None:
    """Adjoint of _resample: stages in reverse order, each scattering into a zeroed fp32 table."""
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


def _register_upsample(kind: str, nsp: int) -> None:
    name = _UPSAMPLE_NAMES[kind][nsp]
    functional = getattr(torch.ops.aten, name).default
    backward_functional = getattr(torch.ops.aten, f"{name}_backward").default
    aligned = kind in ("linear", "cubic")
    dtypes = FLOAT_DTYPES if aligned else FLOAT_DTYPES | {torch.uint8}

    def run_out(x, *args, out):
        m = functional(_meta(x), *args)
        check_out(out, tuple(m.shape), x.dtype, (x,))
        if aligned:
            output_size, align_corners, *scales = args
        else:
            (output_size, *scales), align_corners = args, False
        if out.numel():
            axes = _axes_for(kind, nsp, x.shape[2:], list(output_size), scales, align_corners, x, False)
            with launch(name, x.device.index) as nc:
                _resample(nc, _Scratch(x.device), _to5d(hbm(out), nsp), _to5d(hbm(x), nsp), axes)
        return out

    TABLE.native(f"aten::{name}.out", dtypes=dtypes)(run_out)
    TABLE.serves(f"aten::{name}", f"aten::{name}.out")

    def run_backward(grad_output, output_size, input_size, *args, grad_input):
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


# --------------------------------------------------------------------------------------------
# grid_sampler_2d: output positions on partitions, channels on the free axis, corners gathered
# by indirect DMA from a channels-last copy of each input image with a trailing zero row
# --------------------------------------------------------------------------------------------

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
    dt = hbm(input).dtype
    gx = _GridAxis(w, align_corners, padding_mode, dt)
    gy = _GridAxis(h, align_corners, padding_mode, dt)
    must = padding_mode != 0
    with launch("grid_sampler_2d", input.device.index) as nc:
        scratch = _Scratch(input.device)
        table = _grid_tables(nc, scratch, hbm(input))
        g_v = hbm(grid)
        out_v = hbm(out)
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
    return out


TABLE.serves("aten::grid_sampler_2d.out", "aten::grid_sampler_2d")


# --------------------------------------------------------------------------------------------
# im2col / col2im: one HBM->HBM strided DMA per kernel offset (im2col); read-modify-write of
# strided windows of an fp32 accumulator (col2im)
# --------------------------------------------------------------------------------------------

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
    x_v = hbm(x)
    out_v = hbm(out)
    if x.dim() == 3:
        x_v, out_v = x_v[None], out_v[None]
    _, c, h, w = x_v.shape
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    cols = _split(_split(out_v, 2, (oh, ow)), 1, (c, kh, kw))  # [N, C, KH, KW, OH, OW]
    with launch("im2col", x.device.index) as nc:
        xp = _pad(nc, _Scratch(x.device), x_v, [ph, pw], [ph, pw], False if x.dtype == torch.bool else 0)
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


# --------------------------------------------------------------------------------------------
# pairwise distances: the feature axis on partitions, (i, j) pairs on the free axis; |x1 - x2|^p
# on VectorE, reduced over partitions by a ones-vector matmul (sums) or GpSimd (max)
# --------------------------------------------------------------------------------------------

def _dist_blocks(nc, out_rows: np.ndarray, a: np.ndarray, b: np.ndarray, p: float, store) -> None:
    """For row blocks of a [R1, M] and b [R2, M]: result [1, ni*nj] tiles handed to ``store(i0, i1, j0, j1, tile)``."""
    r1, m = a.shape
    r2 = b.shape[0]
    nj = min(r2, N_MAX)
    ni = max(1, N_MAX // nj)
    ones = None
    if p != math.inf:
        ones = nc.sbuf_tile((min(m, P), 1), FP32)
        nc.vector.memset(ones, 1.0)
    for i0 in range(0, r1, ni):
        i1 = min(r1, i0 + ni)
        for j0 in range(0, r2, nj):
            j1 = min(r2, j0 + nj)
            mark = nc.mark()
            f = (i1 - i0) * (j1 - j0)
            acc = nc.psum_tile((1, f), FP32) if p != math.inf else None
            best = nc.sbuf_tile((1, f), FP32) if p == math.inf else None
            for k0 in range(0, m, P):
                k1 = min(m, k0 + P)
                mk = k1 - k0
                mm = nc.mark()
                xa = nc.sbuf_tile((mk, f), a.dtype)
                nc.dma.load(xa, np.broadcast_to(a[i0:i1, k0:k1].T[:, :, None], (mk, i1 - i0, j1 - j0)))
                xb = nc.sbuf_tile((mk, f), b.dtype)
                nc.dma.load(xb, np.broadcast_to(b[j0:j1, k0:k1].T[:, None, :], (mk, i1 - i0, j1 - j0)))
                d = nc.sbuf_tile((mk, f), FP32)
                nc.vector.tensor_tensor(d, xa, xb, "subtract", dtype=FP32)
                if p == 0:
                    nc.vector.tensor_scalar(d, d, "not_equal", 0.0, dtype=FP32)
                elif p == 2:
                    nc.vector.tensor_tensor(d, d, d, "multiply", dtype=FP32)
                else:
                    nc.vector.tensor_unary(d, d, "abs", dtype=FP32)
                    if p not in (1, math.inf):
                        nc.vector.tensor_scalar(d, d, "power", float(p), dtype=FP32)
                if p == math.inf:
                    part = nc.sbuf_tile((1, f), FP32)
                    nc.gpsimd.partition_reduce(part, d, "maximum", dtype=FP32)
                    if k0 == 0:
                        nc.vector.tensor_copy(best, part)
                    else:
                        nc.vector.tensor_tensor(best, best, part, "maximum", dtype=FP32)
                else:  # sum over the partitions (features): ones[mk, 1].T @ d[mk, f], accumulated in PSUM
                    nc.tensor.matmul(acc, ones[:mk, :], d, accumulate=k0 > 0)
                nc.release_to(mm)
            res = nc.sbuf_tile((1, f), FP32)
            if p == math.inf:
                nc.vector.tensor_copy(res, best)
            elif p == 2:
                nc.scalar.activation(res, acc, "sqrt")
            elif p in (0, 1):
                nc.vector.tensor_copy(res, acc)
            else:
                nc.vector.tensor_scalar(res, acc, "power", 1.0 / float(p), dtype=FP32)
            store(i0, i1, j0, j1, res)
            nc.release_to(mark)


def _cdist_check(x1, x2, p, compute_mode):
    if x1.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.dim()}D")
    if x2.dim() < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X2 got: {x2.dim()}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    for name, t in (("X1", x1), ("X2", x2)):
        if not t.dtype.is_floating_point:
            raise RuntimeError(f"cdist only supports floating-point dtypes, {name} got: {SCALAR_TYPE_NAMES[t.dtype]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    mode = 0 if compute_mode is None else int(compute_mode)
    if not 0 <= mode <= 2:
        raise RuntimeError(f"possible modes: 0, 1, 2, but was: {mode}")
    return mode


def _euclidean_into(nc, scratch, out2d: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """CPU's _euclidean_dist: [-2*x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T, clamp_min(0), sqrt, each step rounded to the
    input dtype (norms: squares in the dtype, fp32 sums rounded once; one TensorE matmul with fp32 accumulation)."""
    dt = a.dtype
    m = a.shape[1]
    aug_a = scratch.new((a.shape[0], m + 2), dt)
    aug_b = scratch.new((b.shape[0], m + 2), dt)
    for src, dst, first in ((a, aug_a, True), (b, aug_b, False)):
        for r0 in range(0, src.shape[0], P):
            r1 = min(src.shape[0], r0 + P)
            mark = nc.mark()
            t = nc.sbuf_tile((r1 - r0, m), dt)
            nc.dma.load(t, src[r0:r1])
            sq = nc.sbuf_tile((r1 - r0, m), dt)
            nc.vector.tensor_tensor(sq, t, t, "multiply", dtype=FP32)
            norm32 = nc.sbuf_tile((r1 - r0, 1), FP32)
            nc.vector.tensor_reduce(norm32, sq, "add", dtype=FP32)
            norm = nc.sbuf_tile((r1 - r0, 1), dt)
            nc.vector.tensor_copy(norm, norm32)
            one = nc.sbuf_tile((r1 - r0, 1), dt)
            nc.vector.memset(one, 1.0)
            if first:
                scaled = nc.sbuf_tile((r1 - r0, m), dt)
                nc.vector.tensor_scalar(scaled, t, "multiply", -2.0, dtype=FP32)
                nc.dma.store(dst[r0:r1, :m], scaled)
                nc.dma.store(dst[r0:r1, m:m + 1], norm)
                nc.dma.store(dst[r0:r1, m + 1:], one)
            else:
                nc.dma.store(dst[r0:r1, :m], t)
                nc.dma.store(dst[r0:r1, m:m + 1], one)
                nc.dma.store(dst[r0:r1, m + 1:], norm)
            nc.release_to(mark)
    prod = scratch.new(out2d.shape, dt)
    _matmul_into(nc, prod, aug_a, aug_b.T)
    flat = _Flat(out2d)
    pv, ov = flat.view(prod), flat.view(out2d)
    for start, stop, p, f in flat.tiles():
        mark = nc.mark()
        t = nc.sbuf_tile((p, f), dt)
        nc.dma.load_flat(t, pv, start, stop)
        nc.vector.tensor_scalar(t, t, "maximum", 0.0, dtype=FP32)
        r = nc.sbuf_tile((p, f), out2d.dtype)
        nc.scalar.activation(r, t, "sqrt")
        nc.dma.store_flat(ov, start, stop, r)
        nc.release_to(mark)


def _batch_views(x1v, x2v, out_v):
    """Broadcast batch dims: yields (a [R1, M], b [R2, M], out [R1, R2]) numpy views."""
    batch = out_v.shape[:-2]
    a = np.broadcast_to(x1v, batch + x1v.shape[-2:])
    b = np.broadcast_to(x2v, batch + x2v.shape[-2:])
    for idx in np.ndindex(*batch) if batch else [()]:
        yield a[idx], b[idx], out_v[idx]


@TABLE.native("aten::_cdist_forward", dtypes=COMPUTE_DTYPES)
def cdist_forward(x1, x2, p, compute_mode):
    mode = _cdist_check(x1, x2, p, compute_mode)
    batch = torch.broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))
    r1, r2, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    out = torch.empty(tuple(batch) + (r1, r2), dtype=x1.dtype, device=x1.device)
    use_mm = p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25)))
    if out.numel() == 0:
        return out
    if x1.dtype != x2.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[x1.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[x2.dtype]}")
    if not use_mm and x1.dtype != torch.float32:
        raise NotImplementedError(f'"cdist" not implemented for \'{SCALAR_TYPE_NAMES[x1.dtype]}\'')
    with launch("cdist", x1.device.index) as nc:
        scratch = _Scratch(x1.device)
        if m == 0:
            _fill(nc, hbm(out), 0.0)
            return out
        for a, b, o in _batch_views(hbm(x1), hbm(x2), hbm(out)):
            if use_mm:
                _euclidean_into(nc, scratch, o, a, b)
            else:
                def store(i0, i1, j0, j1, tile, o=o):
                    nc.dma.store(o[i0:i1, j0:j1], tile)

                _dist_blocks(nc, o, a, b, float(p), store)
    return out


TABLE.serves("aten::_cdist_forward.out", "aten::_cdist_forward")


@TABLE.native("aten::_euclidean_dist", dtypes=FLOAT_DTYPES)
def euclidean_dist(x1, x2):
    batch = torch.broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2]))
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"Sizes of tensors must match except in dimension {x1.dim() - 1}")
    out = torch.empty(tuple(batch) + (x1.shape[-2], x2.shape[-2]), dtype=x1.dtype, device=x1.device)
    if out.numel() == 0:
        return out
    with launch("euclidean_dist", x1.device.index) as nc:
        scratch = _Scratch(x1.device)
        for a, b, o in _batch_views(hbm(x1), hbm(x2), hbm(out)):
            _euclidean_into(nc, scratch, o, a, b)
    return out


TABLE.serves("aten::_euclidean_dist.out", "aten::_euclidean_dist")


@TABLE.native("aten::_pdist_forward", dtypes=COMPUTE_DTYPES)
def pdist_forward(input, p=2.0):
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    if input.dtype != torch.float32:
        raise NotImplementedError(f'"pdist" not implemented for \'{SCALAR_TYPE_NAMES[input.dtype]}\'')
    n, m = input.shape
    out = torch.empty((n * (n - 1) // 2,), dtype=input.dtype, device=input.device)
    if out.numel() == 0:
        return out
    x = hbm(input)
    o = hbm(out)
    with launch("pdist", input.device.index) as nc:
        if m == 0:
            _fill(nc, o, 0.0)
            return out

        def store(i0, i1, j0, j1, tile):
            nj = j1 - j0
            for i in range(i0, i1):
                lo = max(j0, i + 1)
                if lo >= j1:
                    continue
                base = i * n - i * (i + 1) // 2 - i - 1  # offset of pair (i, j) is base + j
                col = (i - i0) * nj + (lo - j0)
                nc.dma.store(o[base + lo:base + j1].reshape(1, j1 - lo), tile[:, col:col + j1 - lo])

        _dist_blocks(nc, o, x, x, float(p), store)
    return out


TABLE.serves("aten::_pdist_forward.out", "aten::_pdist_forward")


# --------------------------------------------------------------------------------------------
# real FFTs as DFT matmuls on TensorE
# --------------------------------------------------------------------------------------------
#
# Complex data lives as (real, imag) pairs of float32 views (the .real/.imag views of complex64 HBM
# buffers, or halves of stacked scratch rows). A pass transforms one axis: the data is staged as
# rows [re | im] (transform axis last), multiplied by a twiddle matrix built on device (GpSimd
# iota for k*t mod n, ScalarE sin/cos, VectorE masks pinning sin/cos to exact 0 at multiples of
# pi/2), and the result rows [Re | Im] are viewed back along the axis. The normalisation scale is
# applied as the alpha of the last pass's matmul (PSUM evacuation).

def _twiddles(nc, scratch, n_in, k_out, kind):
    """HBM matrix for one DFT pass.

    kind 'r2c':  [n, 2K]  x -> [Re | Im] (forward), columns cos | -sin
    kind 'fwd'/'inv': [2n, 2n] complex -> complex, rows [re; im], columns [Re | Im]
    kind 'c2r':  [2K, n]  [re; im] (Hermitian half spectrum) -> real signal of length n
    """
    n = n_in if kind != "c2r" else k_out  # signal length (the angle's period)
    rows = n_in if kind == "r2c" else 2 * n_in
    cols = 2 * k_out if kind != "c2r" else k_out
    w = scratch.new((rows, cols), FP32)
    step = 2 * math.pi / n
    for r0 in range(0, rows, P):
        r1 = min(rows, r0 + P)
        p = r1 - r0
        mark = nc.mark()
        t = nc.sbuf_tile((p, 1), I64)  # row index -> (part, t)
        nc.gpsimd.iota(t, base=r0, partition_step=1, free_step=0)
        part = None
        if kind != "r2c":
            part = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(part, t, "floor_divide", n_in)
            nc.vector.tensor_scalar(t, t, "remainder", n_in)
        for c0 in range(0, cols, FREE):
            c1 = min(cols, c0 + FREE)
            f = c1 - c0
            m = nc.mark()
            k = nc.sbuf_tile((p, f), I64)
            nc.gpsimd.iota(k, base=c0, partition_step=0, free_step=1)
            cpart = None
            if kind != "c2r":
                cpart = nc.sbuf_tile((p, f), I64)
                nc.vector.tensor_scalar(cpart, k, "floor_divide", k_out)
                nc.vector.tensor_scalar(k, k, "remainder", k_out)
            prod = nc.sbuf_tile((p, f), I64)
            nc.vector.tensor_tensor(prod, k, t, "multiply")
            nc.vector.tensor_scalar(prod, prod, "remainder", n)
            angle = nc.sbuf_tile((p, f), FP32)
            nc.vector.tensor_copy(angle, prod)
            cos = nc.sbuf_tile((p, f), FP32)
            nc.scalar.activation(cos, angle, "cos", scale=step)
            sin = nc.sbuf_tile((p, f), FP32)
            nc.scalar.activation(sin, angle, "sin", scale=step)
            # exact zeros: sin at m in {0, n/2}, cos at m in {n/4, 3n/4}
            zero = nc.sbuf_tile((p, f), FP32)
            nc.vector.memset(zero, 0.0)
            mask = nc.sbuf_tile((p, f), BOOL)
            tmp = nc.sbuf_tile((p, f), I64)
            nc.vector.tensor_scalar(tmp, prod, "multiply", 2)
            nc.vector.tensor_scalar(tmp, tmp, "remainder", n)
            nc.vector.tensor_scalar(mask, tmp, "equal", 0)
            nc.vector.select(sin, mask, zero, sin)
            nc.vector.tensor_scalar(tmp, prod, "multiply", 4)
            nc.vector.tensor_scalar(mask, tmp, "equal", n)
            nc.vector.select(cos, mask, zero, cos)
            nc.vector.tensor_scalar(mask, tmp, "equal", 3 * n)
            nc.vector.select(cos, mask, zero, cos)
            res = nc.sbuf_tile((p, f), FP32)
            if kind == "r2c":  # cpart 0: cos, 1: -sin
                neg = nc.sbuf_tile((p, f), FP32)
                nc.vector.tensor_scalar(neg, sin, "multiply", -1.0, dtype=FP32)
                sel = nc.sbuf_tile((p, f), BOOL)
                nc.vector.tensor_scalar(sel, cpart, "equal", 0)
                nc.vector.select(res, sel, cos, neg)
            elif kind in ("fwd", "inv"):
                # forward e^{-i}: Re = re*cos + im*sin, Im = im*cos - re*sin; inverse flips the sin signs
                sgn = 1.0 if kind == "fwd" else -1.0
                same = nc.sbuf_tile((p, f), BOOL)
                nc.vector.tensor_tensor(same, cpart, part, "equal")
                s_re_to_im = nc.sbuf_tile((p, f), FP32)  # row re, col Im: -sgn*sin ; row im, col Re: +sgn*sin
                nc.vector.tensor_scalar(s_re_to_im, sin, "multiply", -sgn, dtype=FP32)
                s_im_to_re = nc.sbuf_tile((p, f), FP32)
                nc.vector.tensor_scalar(s_im_to_re, sin, "multiply", sgn, dtype=FP32)
                row_im = nc.sbuf_tile((p, f), BOOL)
                nc.vector.tensor_scalar(row_im, cpart, "less", 0)  # all False
                nc.vector.tensor_tensor(row_im, row_im, part, "logical_or")
                off = nc.sbuf_tile((p, f), FP32)
                nc.vector.select(off, row_im, s_im_to_re, s_re_to_im)
                nc.vector.select(res, same, cos, off)
            else:  # c2r: rows re_k: w_k cos, rows im_k: -w_k sin; w_0 = 1, w_{n/2} = 1 (n even), else 2
                wk = nc.sbuf_tile((p, 1), FP32)
                nc.vector.memset(wk, 2.0)
                one = nc.sbuf_tile((p, 1), FP32)
                nc.vector.memset(one, 1.0)
                is_edge = nc.sbuf_tile((p, 1), BOOL)
                nc.vector.tensor_scalar(is_edge, t, "equal", 0)
                if n % 2 == 0:
                    e2 = nc.sbuf_tile((p, 1), BOOL)
                    nc.vector.tensor_scalar(e2, t, "equal", n // 2)
                    nc.vector.tensor_tensor(is_edge, is_edge, e2, "logical_or")
                nc.vector.select(wk, is_edge, one, wk)
                neg = nc.sbuf_tile((p, f), FP32)
                nc.vector.tensor_scalar(neg, sin, "multiply", -1.0, dtype=FP32)
                row_im = nc.sbuf_tile((p, 1), BOOL)
                nc.vector.tensor_scalar(row_im, part, "equal", 1)
                nc.vector.select(res, row_im, neg, cos)
                nc.vector.tensor_tensor(res, res, wk, "multiply", dtype=FP32)
            nc.dma.store(w[r0:r1, c0:c1], res)
            nc.release_to(m)
        nc.release_to(mark)
    return w


def _fft_pass(nc, scratch, re, im, axis, k_out, kind, scale=1.0):
    """One DFT pass along ``axis`` of the (re, im) views (im None for real input). Returns (re, im) views
    (im None for c2r) of the result, whose ``axis`` has length k_out (signal length for c2r)."""
    n = re.shape[axis]
    re_l = np.moveaxis(re, axis, -1)
    rest = re_l.shape[:-1]
    rows = 1
    for s in rest:
        rows *= s
    parts = [re] if im is None else [re, im]
    staged = scratch.new((rows, n * len(parts)), FP32)
    for j, v in enumerate(parts):
        dst = _split(staged[:, j * n:(j + 1) * n], 0, rest) if rest else staged[0, j * n:(j + 1) * n]
        _copy_cast(nc, dst, np.moveaxis(v, axis, -1))
    w = _twiddles(nc, scratch, n if kind != "c2r" else n, k_out, kind)
    out_cols = 2 * k_out if kind != "c2r" else k_out
    result = scratch.new((rows, out_cols), FP32)
    _matmul_into(nc, result, staged, w, alpha=scale)

    def back(block):
        v = _split(block, 0, rest) if rest else block[0]
        return np.moveaxis(v, -1, axis)

    if kind == "c2r":
        return back(result), None
    return back(result[:, :k_out]), back(result[:, k_out:])


def _exec_fft_strides(in_strides, sizes, dims):
    """Strides of MKL's _exec_fft output: batch dims (by input stride, outermost first), then ``dims`` in order."""
    ndim = len(sizes)
    batch = sorted((d for d in range(ndim) if d not in dims), key=lambda d: -in_strides[d])
    perm = batch + list(dims)
    strides = [0] * ndim
    acc = 1
    for d in reversed(perm):
        strides[d] = acc
        acc *= sizes[d]
    return strides


def _sort_dims(strides, dims, exclude_last):
    body = list(dims[:-1]) if exclude_last else list(dims)
    body.sort(key=lambda d: -strides[d])
    return body + ([dims[-1]] if exclude_last else [])


def _norm_scale(normalization, n):
    if normalization == 1:
        return 1.0 / math.sqrt(n)
    if normalization == 2:
        return 1.0 / n
    return 1.0


_FFT_DTYPES = frozenset({torch.float32, torch.complex64, torch.float16, torch.bfloat16})


def _wrap_dims(dims, ndim):
    return [int(d) + ndim if int(d) < 0 else int(d) for d in dims]


@TABLE.native("aten::_fft_r2c", dtypes=_FFT_DTYPES)
def fft_r2c(self, dim, normalization, onesided):
    if self.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"MKL FFT doesn't support tensors of type: {SCALAR_TYPE_NAMES[self.dtype]}")
    if not self.dtype.is_floating_point:
        raise RuntimeError("expected a real input tensor")
    dims = _wrap_dims(dim, self.dim())
    sizes = list(self.shape)
    last = dims[-1]
    out_sizes = list(sizes)
    if onesided:
        out_sizes[last] = sizes[last] // 2 + 1
    sorted_dims = _sort_dims(self.stride(), dims, exclude_last=True)
    strides = _exec_fft_strides(self.stride(), out_sizes, sorted_dims)
    out = torch.empty_strided(tuple(out_sizes), tuple(strides), dtype=torch.complex64, device=self.device)
    if out.numel() == 0:
        return out
    total = 1
    for d in dims:
        total *= sizes[d]
    scale = _norm_scale(normalization, total)
    with launch("fft_r2c", self.device.index) as nc:
        scratch = _Scratch(self.device)
        others = [d for d in dims[:-1]]
        re, im = _fft_pass(nc, scratch, hbm(self), None, last, out_sizes[last], "r2c",
                           scale if not others else 1.0)
        # The DC (and, for even n, Nyquist) bins of a real signal have no imaginary part: an FFT
        # never computes one, the DFT matmul does (x * -sin(0)), and inf * 0 would make it NaN.
        im_last = np.moveaxis(im, last, -1)
        for k in {0, sizes[last] // 2} if sizes[last] % 2 == 0 else {0}:
            if k < im_last.shape[-1]:
                _fill(nc, im_last[..., k], 0.0)
        for j, d in enumerate(others):
            re, im = _fft_pass(nc, scratch, re, im, d, sizes[d], "fwd", scale if j == len(others) - 1 else 1.0)
        o = hbm(out)
        _copy_cast(nc, o.real, re)
        _copy_cast(nc, o.imag, im)
    return out


@TABLE.native("aten::_fft_c2r", dtypes=_FFT_DTYPES)
def fft_c2r(self, dim, normalization, last_dim_size):
    if not self.dtype.is_complex:
        raise RuntimeError("expected a complex input tensor")
    dims = _wrap_dims(dim, self.dim())
    last = dims[-1]
    n = int(last_dim_size)
    if n <= 0:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    sizes = list(self.shape)
    # layout of MKL's intermediate c2c result (multi-dim), then of the c2r output
    mid_strides = list(self.stride())
    if len(dims) > 1:
        c2c = _sort_dims(self.stride(), dims[:-1], exclude_last=False)
        mid_strides = _exec_fft_strides(self.stride(), sizes, c2c)
    out_sizes = list(sizes)
    out_sizes[last] = n
    strides = _exec_fft_strides(mid_strides, out_sizes, [last])
    out = torch.empty_strided(tuple(out_sizes), tuple(strides), dtype=torch.float32, device=self.device)
    if out.numel() == 0:
        return out
    total = n
    for d in dims[:-1]:
        total *= sizes[d]
    scale = _norm_scale(normalization, total)
    with launch("fft_c2r", self.device.index) as nc:
        scratch = _Scratch(self.device)
        x = hbm(self)
        re, im = x.real, x.imag
        for d in dims[:-1]:
            re, im = _fft_pass(nc, scratch, re, im, d, sizes[d], "inv")
        k = sizes[last]
        want = n // 2 + 1
        if k != want:  # CPU reads only the first n//2 + 1 bins (missing bins count as zero)
            raise RuntimeError(f"_fft_c2r expects {want} bins along dim {last} for last_dim_size={n}, got {k}")
        res, _ = _fft_pass(nc, scratch, re, im, last, n, "c2r", scale)
        _copy_cast(nc, hbm(out), res)
    return out


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
    dt = hbm(input).dtype
    gx_ax = _GridAxis(w, align_corners, padding_mode, dt)
    gy_ax = _GridAxis(h, align_corners, padding_mode, dt)
    must = padding_mode != 0
    with launch("grid_sampler_2d_backward", input.device.index) as nc:
        scratch = _Scratch(input.device)
        table = _grid_tables(nc, scratch, hbm(input))
        acc = None
        if gi is not None:
            acc = scratch.new((n_batch, h * w + 1, c), FP32)
            _fill(nc, acc, 0.0)
        g_v, go_v, gg_v = hbm(grid), hbm(grad_output), hbm(gg)
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
        if gi is not None and gi.numel():
            gi_v = hbm(gi)
            _copy_cast(nc, gi_v.transpose(0, 2, 3, 1), _split(acc[:, :h * w, :], 1, (h, w)))
    return gi, gg


TABLE.serves("aten::grid_sampler_2d_backward.out", "aten::grid_sampler_2d_backward")


@TABLE.native("aten::_convolution", dtypes=FLOAT_DTYPES)
def _convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, benchmark,
                 deterministic, cudnn_enabled, allow_tf32):
    return convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@TABLE.native("aten::convolution_overrideable", dtypes=FLOAT_DTYPES)
def convolution_overrideable(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


@TABLE.native("aten::convolution_backward_overrideable", dtypes=FLOAT_DTYPES)
def convolution_backward_overrideable(grad_output, input, weight, stride, padding, dilation, transposed,
                                      output_padding, groups, output_mask):
    return _conv_backward(grad_output, input, weight, None, stride, padding, dilation, transposed, output_padding,
                          groups, output_mask)
