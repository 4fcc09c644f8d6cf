"""Layer norm: native_layer_norm and native_layer_norm_backward.

Tiling: the leading (not normalised) dimensions on partitions (<= 128 rows per block), the
normalised ones along the free axis in CHUNK chunks; weight and bias are broadcast to every
partition once per launch when short enough (``_ColVec``, ``PARAM_COLS``). Per block: the
moments (``moments.rowwise_moments``: CPU's RowwiseMoments Welford, float32 lanes, on GpSimd), rstd on
ScalarE, (x - mean) * rstd on ScalarE and the affine step on VectorE, or rounded once on GpSimd
where CPU's kernel fuses the multiply-add (``_ln_affine_fma``). The backward makes one row pass
for the row sums and a second for dx; the weight and bias gradients are TensorE column sums
against a ones vector, accumulated next to the row pass when their [1, n] accumulators fit
(``RESIDENT_COLS``), else in column passes of their own (``_column_sums``).

Under adaptive eager the forward is queued as a ``tiles.RowKernel``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from device_impl.dispatch.table import HOOKS, TABLE
from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import fma32, hbm, new_output
from device_impl.kernels.reduction.tiles import (
    CHUNK, P, PARAM_COLS, PE_CHUNK, RESIDENT_COLS, RowKernel, Source, _FLOATS, _FMA_STEPS, _Grid, _QueuedRowKernel,
    _affine_rows, _at, _blocks, _boxes, _broadcast_row, _check_mixed, _colsum_into, _combine, _fill, _kept_view, _kernel,
    _load_scalars, _memset, _ones, _refuse, _row_scalar, _stats_dtype, _store_row, _store_scalars,
)
from device_impl.kernels.reduction.moments import rowwise_moments


class _ColVec:
    """An HBM vector over a grid's R (layer-norm weights): [128, f] fp32 tiles per column chunk, on
    every partition; kept for the whole launch when the rows are resident."""

    def __init__(self, nc, view: np.ndarray, chunks: list, keep: bool):
        self.nc, self.view, self.chunks, self.keep = nc, view, chunks, keep
        self.cache = [self._load(j) for j in range(len(chunks))] if keep else None

    def _load(self, j: int) -> Tile:
        _, f, csl = self.chunks[j]
        return _broadcast_row(self.nc, _at(self.view, csl), f, FP32)

    def get(self, j: int) -> Tile:
        return self.cache[j] if self.cache is not None else self._load(j)

    def done(self, t: Tile) -> None:
        if not self.keep:
            self.nc.release(t)


def _ln_check(x: torch.Tensor, normalized: Sequence[int], w, b) -> int:
    normalized = [int(s) for s in normalized]
    if not normalized:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")
    for name, p in (("weight", w), ("bias", b)):
        if p is not None and list(p.shape) != normalized:
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{list(p.shape)} and normalized_shape = {normalized}")
    axis = x.dim() - len(normalized)
    if axis < 0 or list(x.shape[axis:]) != normalized:
        raise RuntimeError(f"Given normalized_shape={normalized}, expected input with shape [*, "
                           f"{', '.join(map(str, normalized))}], but got input of size{list(x.shape)}")
    return axis


@_kernel("aten::native_layer_norm", submits=True)
def _layer_norm(a: dict):
    x, w, b, eps = a["input"], a.get("weight"), a.get("bias"), float(a["eps"])
    axis = _ln_check(x, a["normalized_shape"], w, b)
    if x.dtype not in _FLOATS:
        raise _refuse("LayerNormKernelImpl", x.dtype)
    _check_mixed(x, w, b)
    sdtype = _stats_dtype(x, w, b)
    stat_shape = tuple(x.shape[:axis]) + (1,) * (x.dim() - axis)
    out = new_output(tuple(x.shape), x.dtype, x)
    mean, rstd = new_output(stat_shape, sdtype, x), new_output(stat_shape, sdtype, x)
    if out.numel() == 0 and mean.numel() == 0:
        return out, mean, rstd
    kernel = RowKernel("layer_norm", x, (out, mean, rstd), axis, (eps,), _layer_norm_launch, (w, b))
    if HOOKS.submit is not None:  # adaptive eager: queued, its input computable from its producers
        HOOKS.submit("aten::native_layer_norm", _QueuedRowKernel(kernel), out, {"input": x, "weight": w, "bias": b})
    else:
        kernel.run()
    return out, mean, rstd


def _layer_norm_launch(k: RowKernel, source: Source | None = None) -> None:
    x, (out, mean, rstd), axis, (eps,), (w, b) = k.x, k.outs, k.axis, k.params, k.inputs
    # CPU's layer norm computes y = (x * rstd + (-mean * rstd)) * gamma + beta (gamma 1, beta 0 when absent)
    # with multiply-adds that round once where this process's kernels fuse (vec::fmadd; the scalar loop
    # for a missing gamma/beta is contracted too): a product that underflows to -0.0 plus beta = 0.0 is
    # +0.0 unfused but -0.0 fused. On those hosts (and with a missing gamma/beta) the affine step takes
    # GpSimd's fma32 (the normalised value stays on ScalarE, exact for constant rows); elsewhere
    # ScalarE/VectorE round each step as CPU's DEFAULT kernels do.
    fused = cpu_host.fused_multiply_add() or w is None or b is None
    with launch("layer_norm", x.device.index) as nc:
        forward_program(nc, hbm(x), hbm(out), hbm(mean), hbm(rstd), None if w is None else hbm(w),
                        None if b is None else hbm(b), axis, eps, fused, source)


def forward_program(nc, x: np.ndarray, out: np.ndarray, mean: np.ndarray, rstd: np.ndarray, w: np.ndarray | None,
                    b: np.ndarray | None, axis: int, eps: float, fused: bool, source: Source | None = None) -> None:
    """The layer norm's tile program on HBM arrays, inside a launch: ``x``/``out`` of x's shape, ``mean``/``rstd``
    of x's leading ``axis`` dimensions followed by ones (CPU's stat shape), ``w``/``b`` of the normalised shape or
    None; ``fused``: the affine step as one multiply-add (see _layer_norm_launch). The eager kernel and the
    compiler's ``layer_norm`` step (compiler/opaque.py cuts native_layer_norm whole) both run it, so a compiled
    layer norm is the eager one, bit for bit and instruction for instruction."""
    ndim = x.ndim
    kdims, rdims = list(range(axis)), list(range(axis, ndim))

    g = _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in rdims],
              kr=[x.transpose(kdims + rdims), out.transpose(kdims + rdims)],
              k=[_kept_view(mean, rdims, ndim), _kept_view(rstd, rdims, ndim)], r=[t for t in (w, b) if t is not None])
    X, O = g.kr
    n = g.cols
    if n == 0:  # nothing to normalise: CPU gives mean 0 and rstd nan (0 / 0 variance)
        _fill(nc, g.k[0], 0.0, FP32)
        _fill(nc, g.k[1], np.nan, FP32)
        return
    chunks = list(_boxes(g.rshape, CHUNK))
    keep = g.cols <= PARAM_COLS
    params = iter(g.r)
    wv = _ColVec(nc, next(params), chunks, keep) if w is not None else None
    bv = _ColVec(nc, next(params), chunks, keep) if b is not None else None
    welford = X.dtype == FP32
    lanes = cpu_host.rowwise_moments_lanes()
    for blk in _blocks(nc, g, [X], source=source):
        # CPU's kernels (float32 and the reduced floats' mixed-type one): RowwiseMoments in float (a bfloat16/float16
        # vector as two float vectors), then rstd = 1 / sqrt(var + eps) in float
        m, m2 = rowwise_moments(nc, blk, n, lanes, cpu_host.fused_multiply_add(), halves=1 if welford else 2)
        r = _row_scalar(nc, blk.p)

        def to_rstd(o, v):
            with np.errstate(all="ignore"):
                o[...] = np.float32(1) / np.sqrt(v + np.float32(eps))

        nc.gpsimd.run("ln_rstd", to_rstd, (r,), (m2,), elements=blk.p, factor=2.0)
        _store_scalars(nc, _at(g.k[0], blk.rsl), m)
        _store_scalars(nc, _at(g.k[1], blk.rsl), r)
        shift = neg_mean = None
        if welford:  # CPU's float32 kernel: (x + (-mean)) * rstd, each step rounded
            neg_mean = _row_scalar(nc, blk.p)
            nc.vector.tensor_scalar(neg_mean, m, "multiply", -1.0, dtype=FP32)
        else:  # the reduced floats' mixed kernel: x * rstd + (-mean * rstd)
            shift = _row_scalar(nc, blk.p)
            nc.vector.tensor_tensor(shift, m, r, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(shift, shift, "multiply", -1.0, dtype=FP32)
        for j, (ch, (t,)) in enumerate(blk.each(0)):
            mark = nc.mark()
            res = nc.sbuf_tile(t.shape, O.dtype)
            if fused:
                _ln_affine_fma(nc, res, t, r, shift, [(vec, vec.get(j)) for vec in (wv, bv) if vec is not None],
                               wv is not None, bv is not None, blk.p, neg_mean)
                blk.store(O, ch, res)
                nc.release_to(mark)
                continue
            steps = [(vec, op) for vec, op in ((wv, "multiply"), (bv, "add")) if vec is not None]
            y = nc.sbuf_tile(t.shape, FP32) if steps else res
            _normalised(nc, y, t, r, shift, neg_mean)
            for k, (vec, op) in enumerate(steps):
                col = vec.get(j)
                nc.vector.tensor_tensor(res if k == len(steps) - 1 else y, y, col[:blk.p], op, dtype=FP32)
                vec.done(col)
            blk.store(O, ch, res)
            nc.release_to(mark)
        for t in (neg_mean, shift, r, m2, m):
            if t is not None:
                nc.release(t)


def _normalised(nc, y: Tile, t: Tile, r: Tile, shift: Tile | None, neg_mean: Tile | None) -> None:
    """y = (x - mean) * rstd: ``x * rstd + (-mean * rstd)`` in one ScalarE instruction (exact for constant rows, see
    _moments), or, given ``neg_mean``, as CPU's float32 kernel forms it, ``(x + (-mean)) * rstd`` with each step
    rounded (a constant row near float's maximum then gives 0, where -mean * rstd overflows and the one-instruction
    form gives inf - inf)."""
    if neg_mean is None:
        nc.scalar.activation(y, t, "identity", scale=r, bias=shift)
        return
    nc.scalar.activation(y, t, "identity", bias=neg_mean)
    nc.scalar.activation(y, y, "identity", scale=r)


def _ln_affine_fma(nc, res: Tile, t: Tile, r: Tile, shift: Tile | None, cols: list, has_w: bool, has_b: bool,
                   p: int, neg_mean: Tile | None = None) -> None:
    """res = fma(x * rstd - mean * rstd, gamma, beta): the normalised value on ScalarE (exact for constant rows,
    see _moments), the affine step rounded once on GpSimd as CPU's (see _layer_norm_launch); ``cols`` are the
    (vector, chunk tile) of gamma and beta present."""

    y = nc.sbuf_tile(t.shape, FP32)
    _normalised(nc, y, t, r, shift, neg_mean)  # (x - mean) * rstd, as the engine path

    def program(o, x, *wb):
        gamma = wb[0] if has_w else np.float32(1.0)
        beta = wb[-1] if has_b else np.float32(0.0)
        o[...] = fma32(x, gamma, beta)

    nc.gpsimd.run("ln_fma", program, (res,), (y,) + tuple(col[:p] for _, col in cols),
                  elements=t.data.size, factor=_FMA_STEPS)
    for vec, col in cols:
        vec.done(col)


TABLE.serves("aten::native_layer_norm.out", "aten::native_layer_norm")


@_kernel("aten::native_layer_norm_backward")
def _layer_norm_backward(a: dict):
    dy, x, mean, rstd = a["grad_out"], a["input"], a["mean"], a["rstd"]
    w, b, mask = a.get("weight"), a.get("bias"), list(a["output_mask"])
    axis = _ln_check(x, a["normalized_shape"], w, b)
    if x.dtype not in _FLOATS:
        raise _refuse("LayerNormBackwardKernelImpl", x.dtype)
    if (mask[1] and w is None) or (mask[2] and b is None):
        raise RuntimeError("tensor does not have a device")
    dx = new_output(tuple(x.shape), x.dtype, x) if mask[0] else None
    dw = new_output(tuple(w.shape), w.dtype, x) if mask[1] else None
    db = new_output(tuple(b.shape), b.dtype, x) if mask[2] else None
    with launch("layer_norm_backward", x.device.index) as nc:
        backward_program(nc, hbm(dy), hbm(x), hbm(mean), hbm(rstd), None if w is None else hbm(w),
                         None if dx is None else hbm(dx), None if dw is None else hbm(dw),
                         None if db is None else hbm(db), axis)
    return dx, dw, db


def backward_program(nc, dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, w: np.ndarray | None,
                     dx: np.ndarray | None, dw: np.ndarray | None, db: np.ndarray | None, axis: int) -> None:
    """native_layer_norm_backward's tile program on HBM arrays, inside a launch: ``dy``/``x`` (and ``dx``, None
    where not asked for) of x's shape, ``mean``/``rstd`` in CPU's stat shape (x's leading ``axis`` dimensions, then
    ones), ``w``/``dw``/``db`` of the normalised shape or None. The eager kernel and the compiler's
    ``layer_norm_backward`` step (compiler/opaque.py cuts native_layer_norm_backward whole) both run it, so a
    compiled layer norm's gradients are the eager ones, bit for bit and instruction for instruction."""
    ndim = x.ndim
    kdims, rdims = list(range(axis)), list(range(axis, ndim))
    order = kdims + rdims
    kr = [dy.transpose(order), x.transpose(order)] + ([dx.transpose(order)] if dx is not None else [])
    r = [t for t in (w, dw, db) if t is not None]
    g = _Grid([x.shape[d] for d in kdims], [x.shape[d] for d in rdims], kr=kr,
              k=[_kept_view(mean, rdims, ndim), _kept_view(rstd, rdims, ndim)], r=r)
    DY, X = g.kr[0], g.kr[1]
    DX = g.kr[2] if dx is not None else None
    params = iter(g.r)
    W = next(params) if w is not None else None
    DW = next(params) if dw is not None else None
    DB = next(params) if db is not None else None
    n = g.cols
    if g.rows == 0 or n == 0:
        for view in (DW, DB):
            if view is not None:
                _fill(nc, view, 0.0, FP32)
        return
    chunks = list(_boxes(g.rshape, CHUNK))
    wv = _ColVec(nc, W, chunks, n <= PARAM_COLS) if W is not None else None
    # parameter gradients accumulate next to the row pass when their [1, n] accumulators are small
    fused = n <= RESIDENT_COLS and (DW is not None or DB is not None)
    ones = _ones(nc)
    acc_w = _memset(nc, (1, n), FP32, 0.0) if fused and DW is not None else None
    acc_b = _memset(nc, (1, n), FP32, 0.0) if fused and DB is not None else None
    for blk in _blocks(nc, g, [DY, X]):
        p = blk.p
        m = _load_scalars(nc, _at(g.k[0], blk.rsl), p)
        rs = _load_scalars(nc, _at(g.k[1], blk.rsl), p)
        ds, dsum = _row_scalar(nc, p), _row_scalar(nc, p)  # sum(dy w x), sum(dy w)
        nm = _row_scalar(nc, p)  # -mean * rstd: (x - mean) * rstd is one ScalarE instruction
        nc.vector.tensor_tensor(nm, m, rs, "multiply", dtype=FP32)
        nc.vector.tensor_scalar(nm, nm, "multiply", -1.0, dtype=FP32)
        for j, (ch, (tdy, tx)) in enumerate(blk.each(0, 1)):
            mark = nc.mark()
            dyw = _times_col(nc, tdy, wv, j)
            prod = nc.sbuf_tile(tdy.shape, FP32)
            nc.vector.tensor_tensor(prod, dyw, tx, "multiply", dtype=FP32)
            if j == 0:
                nc.vector.tensor_reduce(ds, prod, "add", dtype=FP32)
                nc.vector.tensor_reduce(dsum, dyw, "add", dtype=FP32)
            else:
                part = _row_scalar(nc, p)
                nc.vector.tensor_reduce(part, prod, "add", dtype=FP32)
                _combine(nc, ds, part, "add", FP32)
                nc.vector.tensor_reduce(part, dyw, "add", dtype=FP32)
                _combine(nc, dsum, part, "add", FP32)
            if acc_w is not None:  # dy * (x - mean) * rstd
                xhat = nc.sbuf_tile(tdy.shape, FP32)
                _xhat(nc, xhat, tx, rs, nm)
                nc.vector.tensor_tensor(xhat, xhat, tdy, "multiply", dtype=FP32)
                _colsum_into(nc, acc_w, ch[0], xhat, ones)
            if acc_b is not None:
                _colsum_into(nc, acc_b, ch[0], tdy, ones)
            nc.release_to(mark)
        if DX is not None:
            # b = (dsum * mean - ds) * rstd^3 / n ; c = -b * mean - dsum * rstd / n ; dx = rstd dy w + b x + c
            mark = nc.mark()
            cb, cc, t1 = _row_scalar(nc, p), _row_scalar(nc, p), _row_scalar(nc, p)
            nc.vector.tensor_tensor(cb, dsum, m, "multiply", dtype=FP32)
            nc.vector.tensor_tensor(cb, cb, ds, "subtract", dtype=FP32)
            nc.vector.tensor_tensor(t1, rs, rs, "multiply", dtype=FP32)
            nc.vector.tensor_tensor(t1, t1, rs, "multiply", dtype=FP32)
            nc.vector.tensor_tensor(cb, cb, t1, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(cb, cb, "divide", float(n), dtype=FP32)
            nc.vector.tensor_tensor(cc, cb, m, "multiply", dtype=FP32)
            nc.vector.tensor_tensor(t1, dsum, rs, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(t1, t1, "divide", float(n), dtype=FP32)
            nc.vector.tensor_tensor(cc, cc, t1, "add", dtype=FP32)
            nc.vector.tensor_scalar(cc, cc, "multiply", -1.0, dtype=FP32)
            for j, (ch, (tdy, tx)) in enumerate(blk.each(0, 1)):
                inner = nc.mark()
                dyw = _times_col(nc, tdy, wv, j)
                lin = nc.sbuf_tile(tdy.shape, FP32)
                nc.scalar.activation(lin, tx, "identity", scale=cb, bias=cc)
                scaled = nc.sbuf_tile(tdy.shape, FP32)
                nc.scalar.activation(scaled, dyw, "identity", scale=rs)
                res = nc.sbuf_tile(tdy.shape, DX.dtype)
                nc.vector.tensor_tensor(res, scaled, lin, "add", dtype=FP32)
                blk.store(DX, ch, res)
                nc.release_to(inner)
            nc.release_to(mark)
        for t in (nm, dsum, ds, rs, m):
            nc.release(t)
    if fused:
        for acc, view in ((acc_w, DW), (acc_b, DB)):
            if acc is not None:
                _store_row(nc, view, acc)
    elif DW is not None or DB is not None:
        _column_sums(nc, g, DY, X, DW, DB, ones)


def _xhat(nc, out: Tile, x: Tile, rstd: Tile, shift: Tile) -> None:
    """The weight gradient's x_hat as CPU's backward forms it: ``a * x + b`` with a = rstd and b = -rstd * mean
    (layer_norm_backward_frame's dgamma map3), one rounding where CPU's kernels fuse (GpSimd's fma: a row near
    float's maximum then gives inf * x - inf = -inf, dgamma = dy * -inf, as CPU), else ScalarE's scale-and-bias
    (the product rounded first, as the DEFAULT kernels)."""
    _affine_rows(nc, out, x, rstd, shift, cpu_host.fused_multiply_add(), "ln_xhat_fma")


def _times_col(nc, t: Tile, vec: _ColVec | None, j: int) -> Tile:
    """t * w (per column) in fp32, or t itself without weights."""
    if vec is None:
        return t
    col = vec.get(j)
    out = nc.sbuf_tile(t.shape, FP32)
    nc.vector.tensor_tensor(out, t, col[:t.partitions], "multiply", dtype=FP32)
    vec.done(col)
    return out


def _column_sums(nc, g: _Grid, DY: np.ndarray, X: np.ndarray, DW, DB, ones: Tile) -> None:
    """dw = sum over rows of dy * (x - mean) * rstd, db = sum of dy, column chunk by column chunk (for rows
    too long to keep the parameter accumulators next to the row pass)."""
    blocks = list(_boxes(g.kshape, P))
    for _, f, csl in _boxes(g.rshape, PE_CHUNK):
        banks = {k: nc.psum_tile((1, f), FP32) for k, v in (("w", DW), ("b", DB)) if v is not None}
        for j, (_, p, rsl) in enumerate(blocks):
            mark = nc.mark()
            tdy = nc.sbuf_tile((p, f), DY.dtype)
            nc.dma.load(tdy, _at(DY, rsl + csl))
            if "w" in banks:
                tx = nc.sbuf_tile((p, f), X.dtype)
                nc.dma.load(tx, _at(X, rsl + csl))
                m = _load_scalars(nc, _at(g.k[0], rsl), p)
                rs = _load_scalars(nc, _at(g.k[1], rsl), p)
                nc.vector.tensor_tensor(m, m, rs, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(m, m, "multiply", -1.0, dtype=FP32)  # -mean * rstd
                xhat = nc.sbuf_tile((p, f), FP32)
                _xhat(nc, xhat, tx, rs, m)
                nc.vector.tensor_tensor(xhat, xhat, tdy, "multiply", dtype=FP32)
                nc.tensor.matmul(banks["w"], ones[:p], xhat, accumulate=j > 0)
            if "b" in banks:
                nc.tensor.matmul(banks["b"], ones[:p], tdy, accumulate=j > 0)
            nc.release_to(mark)
        for k, view in (("w", DW), ("b", DB)):
            if k in banks:
                _store_row(nc, _at(view, csl), banks[k])
                nc.release(banks[k])


# The generated out= wrapper (CompositeExplicitAutograd) calls the functional kernel above and copies.
TABLE.serves("aten::native_layer_norm_backward.out", "aten::native_layer_norm_backward")
