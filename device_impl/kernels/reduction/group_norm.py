"""Group norm: native_group_norm and native_group_norm_backward.

Tiling: the input viewed as (N, G, C/G, *spatial) (``_grouped``, no copy). Statistics: (N, G)
rows on partitions, a group's C/G * HxW elements along the free axis (``moments._moments``,
``_rstd``). Normalisation: (N, G, C/G) rows on partitions, spatial along the free axis, one
ScalarE activation per tile with the row's scale and shift (weight and bias per channel).
Backward: pass A sums dy * x and dy per (n, c) into HBM scratch; then, per block of up to 128
samples, VectorE forms the coefficients of dx = c1 * dy + c2 * x + c3 and TensorE's column sums
the weight and bias gradients; pass B applies the coefficients row by row.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided
from torch._prims_common import suggest_memory_format

from device_impl._compat import torch_at_least
from device_impl.dispatch.table import TABLE
from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import fma32, hbm, new_output
from device_impl.kernels.reduction.tiles import (
    P, _FLOATS, _FMA_STEPS, _Grid, _at, _blocks, _broadcast_row, _check_mixed, _colsum_into, _combine, _fill, _kernel,
    _load_scalars, _memset, _ones, _refuse, _row_scalar, _stats_dtype, _store_affine, _store_row, _store_scalars,
)
from device_impl.kernels.reduction.moments import _moments, _rstd, rowwise_moments


def _grouped(t: torch.Tensor, groups: int) -> np.ndarray:
    """(N, C, *spatial) -> HBM view (N, G, C/G, *spatial)."""
    v = hbm(t)
    n, c = t.shape[0], t.shape[1]
    d = c // groups
    s = v.strides
    return as_strided(v, (n, groups, d) + v.shape[2:], (s[0], d * s[1], s[1]) + s[2:])


def _per_channel(stat: np.ndarray, d: int) -> np.ndarray:
    """(N, G) per-group values seen as (N, G, D): every channel of a group reads its group's value."""
    return as_strided(stat, stat.shape + (d,), stat.strides + (0,))


def _channel_param(param: np.ndarray, n: int, groups: int) -> np.ndarray:
    """A (C,) parameter seen as (N, G, D)."""
    d = param.shape[0] // groups
    s = param.strides[0]
    return as_strided(param, (n, groups, d), (0, d * s, s))


def _gn_check(x: torch.Tensor, w, b, n: int, c: int, hw: int, groups: int) -> None:
    if groups <= 0 or c % groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(x.shape)} and num_groups={groups}")
    for name, p in (("weight", w), ("bias", b)):
        if p is not None and (p.dim() != 1 or p.numel() != c):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {list(p.shape)} and input of shape {list(x.shape)}")
    if x.numel() != n * c * hw or x.dim() < 2 or x.shape[0] != n or x.shape[1] != c:
        raise RuntimeError(f"Expected input to have {n * c * hw} elements of shape [N={n}, C={c}, *] with HxW={hw}, "
                           f"but got input of shape {list(x.shape)}")


def _scratch(shape, like: torch.Tensor) -> torch.Tensor:
    """An fp32 device buffer for intermediates a kernel writes and reads back (HBM scratch)."""
    return torch.empty(tuple(shape), dtype=torch.float32, device=like.device)


def _like_input(x: torch.Tensor) -> torch.Tensor:
    """The output (forward) or grad_input (backward) as CPU allocates it: ``empty_like(X)`` in
    ``X.suggest_memory_format()``, so a channels-last input gives a channels-last result (the device's was
    contiguous: designed group_norm-float16-near_zero-channels_last-512, CPU (48, 1, 16, 4)). The forward refuses
    an X not dense in that format, as CPU; the backward takes any X (a direct call's transposed X gives CPU a
    contiguous grad_input, not X's order), so the format is asked of torch's rule, not taken from X's strides."""
    return torch.empty_like(x, memory_format=suggest_memory_format(x))


# the memory formats besides the default one an input may be dense in (CPU asks X.suggest_memory_format())
_DENSE_FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


@_kernel("aten::native_group_norm")
def _group_norm(a: dict):
    x, w, b, eps = a["input"], a.get("weight"), a.get("bias"), float(a["eps"])
    n, c, hw, groups = int(a["N"]), int(a["C"]), int(a["HxW"]), int(a["group"])
    _gn_check(x, w, b, n, c, hw, groups)
    # CPU's native_group_norm requires X dense in its suggested memory format, after the size checks
    # (F.group_norm passes a contiguous input; a direct call may not)
    if not (x.is_contiguous() or (x.dim() in _DENSE_FORMATS
                                  and x.is_contiguous(memory_format=_DENSE_FORMATS[x.dim()]))):
        raise RuntimeError("Expected X.is_contiguous(memory_format) to be true, but got false. (native_group_norm on "
                           "neuron reads its input densely, as CPU's kernel does: pass x.contiguous())")
    if x.dtype not in _FLOATS:
        raise _refuse("GroupNormKernelImpl", x.dtype)
    _check_mixed(x, w, b)
    sdtype = _stats_dtype(x, w, b)
    out = _like_input(x)
    mean, rstd = new_output((n, groups), sdtype, x), new_output((n, groups), sdtype, x)
    if mean.numel() == 0:
        return out, mean, rstd
    # fp32 copies of the statistics for the normalisation pass (the outputs may be bf16/fp16)
    fmean = None if sdtype == torch.float32 else _scratch((n, groups), x)
    frstd = None if sdtype == torch.float32 else _scratch((n, groups), x)
    with launch("group_norm", x.device.index) as nc:
        forward_program(nc, hbm(x), hbm(out), hbm(mean), hbm(rstd), None if w is None else hbm(w),
                        None if b is None else hbm(b), groups, eps,
                        None if fmean is None else (hbm(fmean), hbm(frstd)),
                        rowwise=suggest_memory_format(x) == torch.contiguous_format)
    return out, mean, rstd


def _grouped_array(v: np.ndarray, groups: int) -> np.ndarray:
    """(N, C, *spatial) array -> view (N, G, C/G, *spatial)."""
    n, c = v.shape[0], v.shape[1]
    d = c // groups
    s = v.strides
    return as_strided(v, (n, groups, d) + v.shape[2:], (s[0], d * s[1], s[1]) + s[2:])


def forward_program(nc, x: np.ndarray, out: np.ndarray, mean: np.ndarray, rstd: np.ndarray, w: np.ndarray | None,
                    b: np.ndarray | None, groups: int, eps: float,
                    fp32_stats: tuple[np.ndarray, np.ndarray] | None, rowwise: bool | None = None) -> None:
    """The group norm's tile program on HBM arrays, inside a launch: ``x``/``out`` (N, C, *spatial), ``mean``/
    ``rstd`` (N, G), ``w``/``b`` (C,) or None; ``fp32_stats``: (N, G) float32 scratch for the normalisation pass
    where the statistics are stored in bfloat16/float16, else None; ``rowwise``: whether CPU takes its contiguous
    kernel (``X.suggest_memory_format()`` contiguous; default: ``x`` is C-contiguous). The eager kernel and the
    compiler's ``group_norm`` step (compiler/opaque_cnn.py) both run it.

    A float32 input on CPU's contiguous kernel gets CPU's arithmetic (``_rowwise_forward``): the statistics of
    ``moments.RowwiseMoments`` (Welford in float32 lanes: NaN where CPU's merges overflow), rstd in double, and
    the affine step's multiply-adds as CPU's scalar loop rounds them. Other dtypes and channels-last inputs (CPU's
    ColumnwiseMoments / E[x^2] - E[x]^2) take the engines' compensated two passes."""
    if rowwise is None:
        rowwise = bool(x.flags.c_contiguous)
    if rowwise and x.dtype == FP32 and fp32_stats is None and x.size:
        _rowwise_forward(nc, x, out, mean, rstd, w, b, groups, eps)
        return
    n, c = x.shape[0], x.shape[1]
    d = c // groups
    spatial = list(x.shape[2:])
    count = d * math.prod(spatial)
    xg, og = _grouped_array(x, groups), _grouped_array(out, groups)
    fmean, frstd = fp32_stats if fp32_stats is not None else (mean, rstd)
    if count == 0:
        _fill(nc, mean, 0.0, FP32)
        _fill(nc, rstd, np.nan, FP32)
        return
    stats = _Grid([n, groups], [d] + spatial, kr=[xg],
                  k=[mean, rstd] + ([fmean, frstd] if fp32_stats is not None else []))
    for blk in _blocks(nc, stats, stats.kr):
        m, m2 = _moments(nc, blk, count)
        r = _rstd(nc, m2, count, eps)
        for view, t in zip(stats.k, (m, r, m, r)):
            _store_scalars(nc, _at(view, blk.rsl), t)
        for t in (r, m2, m):
            nc.release(t)
    params = [_channel_param(p, n, groups) for p in (w, b) if p is not None]
    norm = _Grid([n, groups, d], spatial, kr=[xg, og],
                 k=[_per_channel(fmean, d), _per_channel(frstd, d)] + params)
    X, O = norm.kr
    for blk in _blocks(nc, norm, [X]):
        p = blk.p
        mark = nc.mark()
        m = _load_scalars(nc, _at(norm.k[0], blk.rsl), p)
        scale = _load_scalars(nc, _at(norm.k[1], blk.rsl), p)
        ks = iter(norm.k[2:])
        if w is not None:
            wt = _load_scalars(nc, _at(next(ks), blk.rsl), p)
            nc.vector.tensor_tensor(scale, scale, wt, "multiply", dtype=FP32)
        shift = _row_scalar(nc, p)  # b - mean * scale
        nc.vector.tensor_tensor(shift, m, scale, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(shift, shift, "multiply", -1.0, dtype=FP32)
        if b is not None:
            bt = _load_scalars(nc, _at(next(ks), blk.rsl), p)
            nc.vector.tensor_tensor(shift, shift, bt, "add", dtype=FP32)
        _store_affine(nc, blk, O, O.dtype, scale, shift, False, "gn_fma")  # ScalarE's scale-and-bias
        nc.release_to(mark)


def _rowwise_forward(nc, x: np.ndarray, out: np.ndarray, mean: np.ndarray, rstd: np.ndarray, w: np.ndarray | None,
                     b: np.ndarray | None, groups: int, eps: float) -> None:
    """CPU's GroupNormKernelImplInternal for a contiguous float32 input: per (n, g) row of D * HxW elements,
    ``RowwiseMoments`` (``moments.rowwise_moments``), rstd = float(1 / sqrt(double(max(var, 0)) + eps)); then
    y = (x - mean) * rstd without weight and bias, else scale = rstd * w, bias = -scale * mean + b and
    y = scale * x + b's sum, the two multiply-adds rounded once where CPU's kernels contract them
    (``cpu_host.fused_multiply_add``: GpSimd's fma), else each step rounded (ScalarE's scale-and-bias)."""
    n, c = x.shape[0], x.shape[1]
    d = c // groups
    spatial = list(x.shape[2:])
    count = d * math.prod(spatial)
    fused = cpu_host.fused_multiply_add()
    lanes = cpu_host.rowwise_moments_lanes()
    xg, og = _grouped_array(x, groups), _grouped_array(out, groups)
    stats = _Grid([n, groups], [d] + spatial, kr=[xg], k=[mean, rstd])
    if len(stats.rshape) > 1:  # a group is one run of memory in a contiguous input
        raise AssertionError(f"group_norm: a contiguous input's group is not one run: {stats.rshape}")
    for blk in _blocks(nc, stats, stats.kr):
        m, var = rowwise_moments(nc, blk, count, lanes, fused)
        r = _row_scalar(nc, blk.p)

        def to_rstd(o, v):
            with np.errstate(all="ignore"):
                o[...] = 1.0 / np.sqrt(np.maximum(v, np.float32(0)).astype(np.float64) + eps)

        nc.gpsimd.run("gn_rstd", to_rstd, (r,), (var,), elements=blk.p, factor=4.0)
        _store_scalars(nc, _at(stats.k[0], blk.rsl), m)
        _store_scalars(nc, _at(stats.k[1], blk.rsl), r)
        for t in (r, var, m):
            nc.release(t)
    params = [_channel_param(p, n, groups) for p in (w, b) if p is not None]
    norm = _Grid([n, groups, d], spatial, kr=[xg, og], k=[_per_channel(mean, d), _per_channel(rstd, d)] + params)
    X, O = norm.kr
    for blk in _blocks(nc, norm, [X]):
        p = blk.p
        mark = nc.mark()
        m = _load_scalars(nc, _at(norm.k[0], blk.rsl), p)
        r = _load_scalars(nc, _at(norm.k[1], blk.rsl), p)
        if w is None and b is None:  # (x - mean) * rstd, each step rounded
            nm = _row_scalar(nc, p)
            nc.vector.tensor_scalar(nm, m, "multiply", -1.0, dtype=FP32)
            for ch, (t,) in blk.each(0):
                res = nc.sbuf_tile(t.shape, O.dtype)
                nc.scalar.activation(res, t, "identity", bias=nm)
                nc.scalar.activation(res, res, "identity", scale=r)
                blk.store(O, ch, res)
                nc.release(res)
            nc.release_to(mark)
            continue
        ks = iter(norm.k[2:])
        scale = _row_scalar(nc, p)  # rstd * w
        if w is not None:
            wt = _load_scalars(nc, _at(next(ks), blk.rsl), p)
            nc.vector.tensor_tensor(scale, r, wt, "multiply", dtype=FP32)
        else:
            nc.vector.tensor_copy(scale, r)
        bt = _load_scalars(nc, _at(next(ks), blk.rsl), p) if b is not None else _memset(nc, (p, 1), FP32, 0.0)
        shift = _row_scalar(nc, p)  # -scale * mean + b

        def affine_shift(o, s_, m_, b_):
            o[...] = fma32(-s_, m_, b_)

        nc.gpsimd.run("gn_shift", affine_shift, (shift,), (scale, m, bt), elements=p, factor=_FMA_STEPS)
        _store_affine(nc, blk, O, O.dtype, scale, shift, fused, "gn_fma")
        nc.release_to(mark)


TABLE.serves("aten::native_group_norm.out", "aten::native_group_norm")


# torch 2.14's native_group_norm_backward returns weight and bias gradients (in the input's dtype) when
# asked for them without a weight; 2.13 raised "tensor does not have a device". Found by the compat run.
_GROUP_NORM_GRADS_WITHOUT_WEIGHT = torch_at_least(2, 14)


@_kernel("aten::native_group_norm_backward")
def _group_norm_backward(a: dict):
    dy, x, mean, rstd, w = a["grad_out"], a["input"], a["mean"], a["rstd"], a.get("weight")
    n, c, hw, groups = int(a["N"]), int(a["C"]), int(a["HxW"]), int(a["group"])
    mask = list(a["output_mask"])
    _gn_check(x, w, None, n, c, hw, groups)
    if x.dtype not in _FLOATS:
        raise _refuse("GroupNormBackwardKernelImpl", x.dtype)
    if (mask[1] or mask[2]) and w is None and not _GROUP_NORM_GRADS_WITHOUT_WEIGHT:
        raise RuntimeError("tensor does not have a device")
    param_dtype = w.dtype if w is not None else x.dtype
    dx = _like_input(x) if mask[0] else None
    dw = new_output((c,), param_dtype, x) if mask[1] else None
    db = new_output((c,), param_dtype, x) if mask[2] else None
    d = c // groups
    spatial = list(x.shape[2:])
    with launch("group_norm_backward", x.device.index) as nc:
        if n == 0 or c == 0:
            for t in (dw, db):
                if t is not None:
                    _fill(nc, hbm(t), 0.0, FP32)
            return dx, dw, db
        # pass A: ds = sum(dy * x), db = sum(dy) per (n, c)
        ds_buf, db_buf = _scratch((n, c), x), _scratch((n, c), x)
        rows = _Grid([n, groups, d], spatial, kr=[_grouped(dy, groups), _grouped(x, groups)] +
                     ([_grouped(dx, groups)] if dx is not None else []),
                     k=[hbm(ds_buf).reshape(n, groups, d), hbm(db_buf).reshape(n, groups, d)])
        DY, X = rows.kr[0], rows.kr[1]
        for blk in _blocks(nc, rows, [DY, X]):
            p = blk.p
            s1, s2 = _row_scalar(nc, p), _row_scalar(nc, p)
            if hw == 0:
                nc.vector.memset(s1, 0.0)
                nc.vector.memset(s2, 0.0)
            for j, (_, (tdy, tx)) in enumerate(blk.each(0, 1)):
                mark = nc.mark()
                prod = nc.sbuf_tile(tdy.shape, FP32)
                nc.vector.tensor_tensor(prod, tdy, tx, "multiply", dtype=FP32)
                a1 = s1 if j == 0 else _row_scalar(nc, p)
                a2 = s2 if j == 0 else _row_scalar(nc, p)
                nc.vector.tensor_reduce(a1, prod, "add", dtype=FP32)
                nc.vector.tensor_reduce(a2, tdy, "add", dtype=FP32)
                if j:
                    _combine(nc, s1, a1, "add", FP32)
                    _combine(nc, s2, a2, "add", FP32)
                nc.release_to(mark)
            nc.dma.store(_at(rows.k[0], blk.rsl), s1)
            nc.dma.store(_at(rows.k[1], blk.rsl), s2)
            nc.release(s2)
            nc.release(s1)
        # per (n, g): the coefficients of dx = c1 * dy + c2 * x + c3, and the parameter gradients
        coef = [_scratch((n, c), x) for _ in range(3)]
        s = 1.0 / (d * hw) if d * hw else 0.0
        ones = _ones(nc)
        acc_w = _memset(nc, (1, c), FP32, 0.0) if dw is not None else None
        acc_b = _memset(nc, (1, c), FP32, 0.0) if db is not None else None
        gamma = _broadcast_row(nc, hbm(w), c, FP32) if w is not None else None
        mv, rv = hbm(mean), hbm(rstd)
        for n0 in range(0, n, P):
            n1 = min(n, n0 + P)
            pn = n1 - n0
            mark = nc.mark()
            tds, tdb = nc.sbuf_tile((pn, c), FP32), nc.sbuf_tile((pn, c), FP32)
            nc.dma.load(tds, hbm(ds_buf)[n0:n1])
            nc.dma.load(tdb, hbm(db_buf)[n0:n1])
            tm = _load_block(nc, mv[n0:n1], (pn, groups))
            tr = _load_block(nc, rv[n0:n1], (pn, groups))
            c1, c2, c3 = (nc.sbuf_tile((pn, c), FP32) for _ in range(3))
            pw = nc.sbuf_tile((pn, c), FP32) if acc_w is not None else None
            for gi in range(groups):
                cols = slice(gi * d, (gi + 1) * d)
                inner = nc.mark()
                mg, rg = tm[:, gi:gi + 1], tr[:, gi:gi + 1]
                sw, sb = _row_scalar(nc, pn), _row_scalar(nc, pn)
                if gamma is not None:
                    tmp = nc.sbuf_tile((pn, d), FP32)
                    nc.vector.tensor_tensor(tmp, tds[:, cols], gamma[:pn, cols], "multiply", dtype=FP32)
                    nc.vector.tensor_reduce(sw, tmp, "add", dtype=FP32)
                    nc.vector.tensor_tensor(tmp, tdb[:, cols], gamma[:pn, cols], "multiply", dtype=FP32)
                    nc.vector.tensor_reduce(sb, tmp, "add", dtype=FP32)
                    nc.vector.tensor_tensor(c1[:, cols], gamma[:pn, cols], rg, "multiply", dtype=FP32)
                else:
                    nc.vector.tensor_reduce(sw, tds[:, cols], "add", dtype=FP32)
                    nc.vector.tensor_reduce(sb, tdb[:, cols], "add", dtype=FP32)
                    zero = _memset(nc, (pn, d), FP32, 0.0)
                    nc.vector.tensor_tensor(c1[:, cols], zero, rg, "add", dtype=FP32)
                # c2 = (db * mean - ds) * rstd^3 * s ; c3 = -c2 * mean - db * rstd * s
                k2, k3, r3 = _row_scalar(nc, pn), _row_scalar(nc, pn), _row_scalar(nc, pn)
                nc.vector.tensor_tensor(k2, sb, mg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(k2, k2, sw, "subtract", dtype=FP32)
                nc.vector.tensor_tensor(r3, rg, rg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(r3, r3, rg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(k2, k2, r3, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(k2, k2, "multiply", s, dtype=FP32)
                nc.vector.tensor_tensor(k3, k2, mg, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(r3, sb, rg, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(r3, r3, "multiply", s, dtype=FP32)
                nc.vector.tensor_tensor(k3, k3, r3, "add", dtype=FP32)
                nc.vector.tensor_scalar(k3, k3, "multiply", -1.0, dtype=FP32)
                zero = _memset(nc, (pn, d), FP32, 0.0)
                nc.vector.tensor_tensor(c2[:, cols], zero, k2, "add", dtype=FP32)
                nc.vector.tensor_tensor(c3[:, cols], zero, k3, "add", dtype=FP32)
                if pw is not None:  # (ds - db * mean) * rstd
                    nc.vector.tensor_tensor(pw[:, cols], tdb[:, cols], mg, "multiply", dtype=FP32)
                    nc.vector.tensor_tensor(pw[:, cols], tds[:, cols], pw[:, cols], "subtract", dtype=FP32)
                    nc.vector.tensor_tensor(pw[:, cols], pw[:, cols], rg, "multiply", dtype=FP32)
                nc.release_to(inner)
            for buf, t in zip(coef, (c1, c2, c3)):
                nc.dma.store(hbm(buf)[n0:n1], t)
            if acc_w is not None:
                _colsum_into(nc, acc_w, 0, pw, ones)
            if acc_b is not None:
                _colsum_into(nc, acc_b, 0, tdb, ones)
            nc.release_to(mark)
        for acc, t in ((acc_w, dw), (acc_b, db)):
            if acc is not None:
                _store_row(nc, hbm(t), acc)
        # pass B: dx = c1 * dy + c2 * x + c3
        if dx is not None:
            cv = [hbm(t).reshape(n, groups, d) for t in coef]
            DX = rows.kr[2]
            g2 = _Grid([n, groups, d], spatial, kr=[_grouped(dy, groups), _grouped(x, groups), _grouped(dx, groups)],
                       k=cv)
            DY, X, DX = g2.kr
            for blk in _blocks(nc, g2, [DY, X]):
                p = blk.p
                mark = nc.mark()
                k1, k2, k3 = (_load_scalars(nc, _at(v, blk.rsl), p) for v in g2.k)
                for ch, (tdy, tx) in blk.each(0, 1):
                    inner = nc.mark()
                    lin = nc.sbuf_tile(tdy.shape, FP32)
                    nc.scalar.activation(lin, tx, "identity", scale=k2, bias=k3)
                    sc = nc.sbuf_tile(tdy.shape, FP32)
                    nc.vector.tensor_tensor(sc, tdy, k1, "multiply", dtype=FP32)
                    res = nc.sbuf_tile(tdy.shape, DX.dtype)
                    nc.vector.tensor_tensor(res, sc, lin, "add", dtype=FP32)
                    blk.store(DX, ch, res)
                    nc.release_to(inner)
                nc.release_to(mark)
    return dx, dw, db


def _load_block(nc, view: np.ndarray, shape) -> Tile:
    """A 2-D HBM block as an fp32 tile (cast on VectorE when stored narrower)."""
    t = nc.sbuf_tile(shape, view.dtype)
    nc.dma.load(t, view)
    if t.dtype == FP32:
        return t
    c = nc.sbuf_tile(shape, FP32)
    nc.vector.tensor_copy(c, t)
    return c


# The generated out= wrapper (CompositeExplicitAutograd) calls the functional kernel above and copies.
TABLE.serves("aten::native_group_norm_backward.out", "aten::native_group_norm_backward")
