"""Pairwise distances: _cdist_forward, _euclidean_dist, _pdist_forward.

Tiling (``_dist_blocks``): the feature axis on partitions (128 per tile), (i, j) pairs on the free axis (<=
``N_MAX``); |x1 - x2|^p on VectorE, reduced over the partitions by a ones-vector matmul on TensorE accumulating
in PSUM (sums), or on GpSimd (max, p = inf). The matmul path of p = 2 (``_euclidean_into``, CPU's
_euclidean_dist: [-2*x1, |x1|^2, 1] @ [x2, 1, |x2|^2]^T) builds the augmented rows in scratch (rows on
partitions), multiplies them in one TensorE matmul, then clamps and takes square roots on flat tiles.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, hbm
from device_impl.kernels.matmul import _matmul_into
from device_impl.kernels.spatial.tiles import N_MAX, P, _Flat, _Scratch, _fill


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
    r1, r2 = x1.shape[-2], x2.shape[-2]
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
        cdist_program(nc, _Scratch(x1.device), hbm(x1), hbm(x2), hbm(out), float(p), use_mm)
    return out


def cdist_program(nc, scratch, x1v: np.ndarray, x2v: np.ndarray, out_v: np.ndarray, p: float, use_mm: bool) -> None:
    """_cdist_forward's tile program on HBM arrays, inside a launch (``use_mm``: CPU's matrix-product path for
    p = 2). The eager kernel and the compiler's ``cdist`` step (compiler/opaque_cnn.py) both run it."""
    if x1v.shape[-1] == 0:
        _fill(nc, out_v, 0.0)
        return
    for a, b, o in _batch_views(x1v, x2v, out_v):
        if use_mm:
            _euclidean_into(nc, scratch, o, a, b)
        else:
            def store(i0, i1, j0, j1, tile, o=o):
                nc.dma.store(o[i0:i1, j0:j1], tile)

            _dist_blocks(nc, o, a, b, p, store)


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
    if not input.is_contiguous():  # CPU's first check (F.pdist makes its input contiguous before calling it)
        raise RuntimeError("_pdist_forward requires contiguous input")
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
    with launch("pdist", input.device.index) as nc:
        pdist_program(nc, hbm(input), hbm(out), float(p))
    return out


def pdist_program(nc, x: np.ndarray, o: np.ndarray, p: float) -> None:
    """_pdist_forward's tile program on HBM arrays, inside a launch: ``x`` (N, M), ``o`` (N * (N - 1) / 2,). The
    eager kernel and the compiler's ``pdist`` step (compiler/opaque_cnn.py) both run it."""
    n, m = x.shape
    if m == 0:
        _fill(nc, o, 0.0)
        return

    def store(i0, i1, j0, j1, tile):
        nj = j1 - j0
        for i in range(i0, i1):
            lo = max(j0, i + 1)
            if lo >= j1:
                continue
            base = i * n - i * (i + 1) // 2 - i - 1  # offset of pair (i, j) is base + j
            col = (i - i0) * nj + (lo - j0)
            nc.dma.store(o[base + lo:base + j1].reshape(1, j1 - lo), tile[:, col:col + j1 - lo])

    _dist_blocks(nc, o, x, x, p, store)


TABLE.serves("aten::_pdist_forward.out", "aten::_pdist_forward")
