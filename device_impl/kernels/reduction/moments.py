"""Row reductions: var, std, var_mean, std_mean (CPU's double Welford, ``_var_rows64``), logsumexp;
and the row moments the normalisation layers share.

``_two_pass`` (logsumexp) tiles as ``sums`` does (rows: K on partitions, R along the free axis, row
blocks resident in SBUF between the passes when they fit; flat: few long outputs as ``[128, F]``
pieces, kept in SBUF when they fit). A first one-pass reduction (the max) gives a per-row shift;
the second pass sums func(x - shift) fused on ScalarE (``activation(..., bias=-shift,
accumulate=)``): logsumexp subtracts the row maximum (0 where it is infinite) and adds it back
after the log.

``_moments`` and ``_rstd``: the per-row mean and centred sum of squares of a row block (the same
compensated two passes) and 1 / sqrt(var + eps), for layer_norm, group_norm and batch_norm.
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Sequence

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import Tile, launch
from device_impl.engine import expf
from device_impl.kernels import cpu_host
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import SCALAR_TYPE_NAMES, check_out, hbm, new_output, scalar_of
from device_impl.kernels.reduction.tiles import (
    BOOL, F64, P, RESIDENT_COLS, _Block, _FLOATS, _Grid, _STATS64_STEPS, _at, _blocks, _combine, _count, _dims,
    _fill, _flat_pieces, _kept_view, _kernel, _memset, _order_by_stride, _out_shape, _row_reduce, _row_scalar,
    _row_sum64,
)
from device_impl.kernels.reduction.sums import _Spec, _flat_partials, _use_flat


# --- row reductions: var, std, var_mean, std_mean (double Welford), logsumexp (two passes) -----------

def _rows_of(x: torch.Tensor, dims: tuple[int, ...], outs: Sequence[torch.Tensor]) -> _Grid:
    return _rows_of_views(hbm(x), dims, [hbm(o) for o in outs])


def _rows_of_views(xv: np.ndarray, dims: tuple[int, ...], outs: Sequence[np.ndarray]) -> _Grid:
    """The [kept, reduced] grid of HBM view ``xv`` (reduced dims ordered by stride, largest first, as
    ``_order_by_stride``) and its outputs' views (keepdim's 1s indexed away)."""
    nd = xv.ndim
    kdims = [d for d in range(nd) if d not in dims]
    rord = sorted(dims, key=lambda d: -xv.strides[d])
    return _Grid([xv.shape[d] for d in kdims], [xv.shape[d] for d in rord], kr=[xv.transpose(kdims + rord)],
                 k=[_kept_view(o, dims, nd) for o in outs])


def _two_pass(nc, g: _Grid, first: _Spec, between: Callable, func: str, emit: Callable) -> None:
    """Per output: s = between(first reduction) ([p, 1] fp32, the shift), then the sum of func(x - s)
    fused on ScalarE; emit(nc, shift, total, out views) writes the results (logsumexp: the row maximum,
    then the sum of exp(x - max))."""
    X = g.kr[0]
    if _use_flat(g):
        for r in np.ndindex(*g.kshape):
            sl = tuple(slice(i, i + 1) for i in r)
            xr = _at(X, sl)
            pieces = list(_flat_pieces(xr.size))
            keep = xr.size <= P * RESIDENT_COLS
            tiles = None
            if keep:
                tiles = []
                for a, b, p, f in pieces:
                    t = nc.sbuf_tile((p, f), xr.dtype)
                    nc.dma.load_flat(t, xr, a, b)
                    tiles.append(t)
            acc = _memset(nc, (P, 1), first.cd, first.identity)
            _flat_partials(nc, xr, acc, first.partial, first.op, first.cd, tiles)
            total = nc.sbuf_tile((1, 1), first.cd)
            nc.gpsimd.partition_reduce(total, acc, first.op, dtype=first.cd)
            shift = between(nc, total)
            neg = nc.sbuf_tile((1, 1), FP32)
            nc.vector.tensor_scalar(neg, shift, "multiply", -1.0, dtype=FP32)
            bias = nc.sbuf_tile((P, 1), FP32)
            nc.gpsimd.partition_broadcast(bias, neg)
            acc2 = _memset(nc, (P, 1), FP32, 0.0)

            def second(nc_, t, dst, fn=func):
                scratch = nc_.sbuf_tile(t.shape, FP32)
                nc_.scalar.activation(scratch, t, fn, bias=bias[:t.partitions], accumulate=dst)
                nc_.release(scratch)

            _flat_partials(nc, xr, acc2, second, "add", FP32, tiles)
            total2 = nc.sbuf_tile((1, 1), FP32)
            nc.gpsimd.partition_reduce(total2, acc2, "add", dtype=FP32)
            emit(nc, shift, total2, [_at(o, sl) for o in g.k])
            for t in (total2, acc2, bias, neg, shift, total, acc):
                nc.release(t)
            for t in tiles or ():
                nc.release(t)
        return
    for blk in _blocks(nc, g, [X]):
        p = blk.p
        acc = _row_scalar(nc, p, first.cd)
        for j, (_, (t,)) in enumerate(blk.each(0)):
            if j == 0:
                first.partial(nc, t, acc)
            else:
                part = _row_scalar(nc, p, first.cd)
                first.partial(nc, t, part)
                _combine(nc, acc, part, first.op, first.cd)
                nc.release(part)
        shift = between(nc, acc)
        neg = _row_scalar(nc, p)
        nc.vector.tensor_scalar(neg, shift, "multiply", -1.0, dtype=FP32)
        acc2 = _row_scalar(nc, p)
        for j, (_, (t,)) in enumerate(blk.each(0)):
            scratch = nc.sbuf_tile(t.shape, FP32)
            if j == 0:
                nc.scalar.activation(scratch, t, func, bias=neg, accumulate=acc2)
            else:
                part = _row_scalar(nc, p)
                nc.scalar.activation(scratch, t, func, bias=neg, accumulate=part)
                _combine(nc, acc2, part, "add", FP32)
                nc.release(part)
            nc.release(scratch)
        emit(nc, shift, acc2, [_at(o, blk.rsl) for o in g.k])
        for t in (acc2, neg, shift, acc):
            nc.release(t)


def _var_kernel(name: str, x: torch.Tensor, dims: tuple[int, ...], correction: float, take_sqrt: bool,
                var_out: torch.Tensor, mean_out: torch.Tensor | None) -> None:
    if var_out.numel() == 0:
        return
    n = _count(x, dims)
    divisor = max(0.0, n - correction)
    if divisor <= 0:
        warnings.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the "
                      f"reduction factor (input numel divided by output numel).", UserWarning, stacklevel=4)
    with launch(name, var_out.device.index) as nc:
        if _all_reduce_path(x, var_out, mean_out):
            var_all_program(nc, hbm(x), divisor, take_sqrt, hbm(var_out), vector=x.is_contiguous())
            return
        var_program(nc, hbm(x), dims, divisor, take_sqrt, hbm(var_out),
                    hbm(mean_out) if mean_out is not None else None)


def _all_reduce_path(x: torch.Tensor, out: torch.Tensor, mean_out: torch.Tensor | None) -> bool:
    """Whether CPU's var/std takes std_var_all_cpu (ReduceOps.cpp: a float32/float64 var or std, not var_mean, whose
    reduction covers every dimension): the mean is ``self.mean()``, a float32 sum divided in float, then the squares
    about it are summed in double. Followed here for contiguous float32 inputs of up to GRAIN_SIZE elements, whose
    float sum is at::sum's serial cascade (``_cpu_float_sum``), and for strided ones of one dimension of size > 1
    (TensorIterator drops the size-1 dims: a [1, 127] slice with step 2 sums as a strided vector); elsewhere the
    double Welford below."""
    return (mean_out is None and x.dtype == torch.float32 and out.dtype == torch.float32 and out.numel() == 1
            and 0 < x.numel() <= cpu_host.GRAIN_SIZE and (x.is_contiguous() or sum(d != 1 for d in x.shape) <= 1))


def _ceil_log2(v: int) -> int:
    return 1 if v <= 2 else int(v - 1).bit_length()  # c10 utils::CeilLog2


def _multi_row_sum(load: Callable[[int, int], np.ndarray], size: int, zero: np.ndarray) -> list[np.ndarray]:
    """ATen's SumKernel multi_row_sum: four interleaved accumulators (ILP) over ``size`` steps, cascaded in four
    levels of 2^level_power steps, in float."""
    levels = 4
    power = max(4, _ceil_log2(size) // levels)
    step, mask = 1 << power, (1 << power) - 1
    acc = [[zero.copy() for _ in range(4)] for _ in range(levels)]
    i = 0
    while i + step <= size:
        for _ in range(step):
            for k in range(4):
                acc[0][k] = acc[0][k] + load(i, k)
            i += 1
        for j in range(1, levels):
            for k in range(4):
                acc[j][k] = acc[j][k] + acc[j - 1][k]
                acc[j - 1][k] = zero.copy()
            if i & (mask << (j * power)):
                break
    for i in range(i, size):
        for k in range(4):
            acc[0][k] = acc[0][k] + load(i, k)
    for j in range(1, levels):
        for k in range(4):
            acc[0][k] = acc[0][k] + acc[j][k]
    return acc[0]


def _row_sum(load: Callable[[int], np.ndarray], size: int, zero: np.ndarray) -> np.ndarray:
    """SumKernel's row_sum: multi_row_sum over size // 4 groups of four, the rest added to the first accumulator,
    then the four accumulators in order."""
    part = _multi_row_sum(lambda i, k: load(i * 4 + k), size // 4, zero)
    for i in range(size // 4 * 4, size):
        part[0] = part[0] + load(i)
    for k in range(1, 4):
        part[0] = part[0] + part[k]
    return part[0]


def _cpu_float_sum(x: np.ndarray, lanes: int, vector: bool = True) -> np.float32:
    """at::sum of a contiguous float32 vector as CPU's serial cascade_sum forms it: Vectorized<float> lanes summed by
    row_sum (vectorized_inner_sum) for n >= lanes, then the scalar tail in order, then the lanes; below one vector
    the scalars by row_sum (scalar_inner_sum; also every length of a strided vector, ``vector`` False). Bit-identical
    to CPU's sum of 1 to 32768 elements, under the AVX2 and DEFAULT kernels (their overflow to inf, or inf - inf NaN,
    included)."""
    x = np.asarray(x, FP32).ravel()
    n = x.size
    with np.errstate(all="ignore"):
        if n < lanes or not vector:
            return np.float32(_row_sum(lambda i: x[i], n, np.zeros((), FP32)))
        vecs = x[:n // lanes * lanes].reshape(-1, lanes)
        acc = _row_sum(lambda i: vecs[i], vecs.shape[0], np.zeros(lanes, FP32))
        total = np.float32(0)
        for v in x[vecs.size:]:
            total = np.float32(total + v)
        for v in acc:
            total = np.float32(total + v)
    return total


def var_all_program(nc, x: np.ndarray, divisor: float, take_sqrt: bool, out: np.ndarray, vector: bool = True) -> None:
    """CPU's std_var_all_cpu for a contiguous float32 ``x`` (``_all_reduce_path``), one GpSimd program over its
    flat tiles: mean = float(at::sum(x) / n) (``_cpu_float_sum``: NaN or inf where CPU's float sum overflows, where
    a double Welford stays finite: op suite ci profile, std of 127 values near +-3e38), the squares (x - mean)^2
    summed in double, divided by ``divisor`` in double, the root taken in double, rounded once to float."""
    n = x.size
    lanes = cpu_host.rowwise_moments_lanes()
    tiles = []
    for a, b, p, f in _flat_pieces(n):
        t = nc.sbuf_tile((p, f), x.dtype)
        nc.dma.load_flat(t, x, a, b)
        tiles.append(t)
    res = nc.sbuf_tile((1, 1), FP32)

    def program(o, *parts):
        flat = np.concatenate([t.ravel() for t in parts]).astype(FP32, copy=False)
        with np.errstate(all="ignore"):
            mean = np.float64(np.float32(_cpu_float_sum(flat, lanes, vector) / np.float32(n)))
            v = np.square(flat.astype(np.float64) - mean).sum() / np.float64(divisor)
            o[...] = np.sqrt(v) if take_sqrt else v

    nc.gpsimd.run("var_all", program, (res,), tuple(tiles), elements=2 * n, factor=_STATS64_STEPS)
    nc.dma.store(out.reshape(1, 1), res)
    for t in tiles:
        nc.release(t)
    nc.release(res)


def var_program(nc, x: np.ndarray, dims: tuple[int, ...], divisor: float, take_sqrt: bool, var_out: np.ndarray,
                mean_out: np.ndarray | None) -> None:
    """var/std (and the mean beside them) of HBM view ``x`` over ``dims`` into the outputs' views (keepdim's or
    not): every dtype as CPU's double Welford (``_var_rows64``; WelfordOps<scalar_t, double> for float32 too: the
    float32 two-pass form this replaced overflowed where CPU stays finite, std_mean of [3e38, 3e38, -3e38, 2e38] inf
    against 2.87e38, and differed from CPU's bits in 23 of 34 ordinary results). The eager kernels and the
    compiler's ``moments`` step (compiler/opaque_moments.py) both run it."""
    n = math.prod(x.shape[d] for d in dims)
    outs = [var_out] + ([mean_out] if mean_out is not None else [])
    g = _rows_of_views(x, dims, outs)

    if n == 0:
        for v in g.k:
            _fill(nc, v, np.nan, FP32)
        return
    _var_rows64(nc, g, n, divisor, take_sqrt)


def _welford_finite_mean(bad: np.ndarray, inf_last: np.ndarray) -> np.ndarray:
    """Rows whose Welford running mean is not NaN, from their count of non-finite elements and whether the last one
    is infinite: none, or one infinity that is the last element (x - inf or inf - inf after it turns the mean NaN)."""
    return (bad == 0) | ((bad == 1) & (inf_last == 1))


def _var_rows64(nc, g: _Grid, n: int, divisor: float, take_sqrt: bool) -> None:
    """Variance (and mean) of bfloat16/float16 rows as CPU computes them: its std/var kernel for reduced floats
    runs Welford in double (WelfordOps<scalar_t, double>) and converts the double result to float, then to the
    dtype, so rows whose squares overflow fp32 still give a finite std. No fixed-function engine computes in
    double: GpSimd programs do (the mean, then the centred sum of squares, per block of rows)."""
    for blk in _blocks(nc, g, [g.kr[0]]):
        p = blk.p
        mark = nc.mark()
        # one pass: the double sum, the count of non-finite elements and whether the row's last element is
        # infinite. Welford's running mean turns NaN at the first element after an infinity (x - inf, or
        # inf - inf): only an infinity in the last element leaves the mean infinite, else it is sum / n.
        stats = nc.sbuf_tile((p, 3), F64)
        for j, (_, (t,)) in enumerate(blk.each(0)):
            def program(o, x, *earlier, first=j == 0):
                with np.errstate(all="ignore"):
                    x64 = x.astype(np.float64)
                    o[:, 0:1] = x64.sum(axis=1, keepdims=True) + (0.0 if first else earlier[0][:, 0:1])
                    o[:, 1:2] = (~np.isfinite(x64)).sum(axis=1, keepdims=True) + (0.0 if first else earlier[0][:, 1:2])
                    o[:, 2:3] = np.isinf(x64[:, -1:])

            nc.gpsimd.run("var_stats64", program, (stats,), (t,) + (() if j == 0 else (stats,)),
                          elements=t.data.size, factor=_STATS64_STEPS)
        mean = nc.sbuf_tile((p, 1), F64)

        def welford_mean(o, st):
            with np.errstate(all="ignore"):
                o[...] = np.where(_welford_finite_mean(st[:, 1:2], st[:, 2:3]), st[:, 0:1] / n, np.nan)

        nc.gpsimd.run("var_mean64", welford_mean, (mean,), (stats,), elements=p)
        m2 = _row_sum64(nc, blk, lambda x, m: np.square(x.astype(np.float64) - m), "var_m2_64", about=mean)
        res32, mean32 = nc.sbuf_tile((p, 1), FP32), nc.sbuf_tile((p, 1), FP32)

        def finish(o_res, o_mean, v, m):
            with np.errstate(all="ignore"):
                q = v / np.float64(divisor)  # divisor 0: inf, or NaN for 0 / 0, as CPU's double division
                o_res[...] = np.sqrt(q) if take_sqrt else q
            o_mean[...] = m

        nc.gpsimd.run("var_finish64", finish, (res32, mean32), (m2, mean), elements=p, factor=2.0)
        for view, t in zip([_at(o, blk.rsl) for o in g.k], (res32, mean32)):
            out = nc.sbuf_tile((p, 1), view.dtype)
            nc.vector.tensor_copy(out, t)
            nc.dma.store(view, out)
        nc.release_to(mark)


def _var_args(a: dict):
    x = a["self"]
    if x.dtype not in _FLOATS and x.dtype != torch.float64:
        raise RuntimeError("std and var only support floating point and complex dtypes")
    dims = _dims(x, a.get("dim"))
    c = a.get("correction")
    correction = 1.0 if c is None else float(scalar_of(c))
    return x, dims, correction, bool(a.get("keepdim", False))


def _var_std(name: str, take_sqrt: bool, a: dict, out: torch.Tensor | None) -> torch.Tensor:
    x, dims, correction, keepdim = _var_args(a)
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, x.dtype, x)
    else:
        check_out(out, shape, x.dtype, [x])
        if out.dtype != x.dtype and out.dtype.is_floating_point:
            # ATen's std_var_out reduces in out's dtype (make_reduction casts self to it): a float16 out of a
            # float32 input is the variance of the float16-rounded values, not the float32 variance rounded
            x = x.to(out.dtype)
    _var_kernel(name, x, dims, correction, take_sqrt, out, None)
    return out


@_kernel("aten::var.correction")
def _var(a: dict) -> torch.Tensor:
    return _var_std("var", False, a, None)


@_kernel("aten::var.correction_out")
def _var_out(a: dict) -> torch.Tensor:
    return _var_std("var", False, a, a["out"])


@_kernel("aten::std.correction")
def _std(a: dict) -> torch.Tensor:
    return _var_std("std", True, a, None)


@_kernel("aten::std.correction_out")
def _std_out(a: dict) -> torch.Tensor:
    return _var_std("std", True, a, a["out"])


def _var_mean(name: str, take_sqrt: bool):
    def kernel(a: dict):
        x, dims, correction, keepdim = _var_args(a)
        shape = _out_shape(x, dims, keepdim)
        v, m = new_output(shape, x.dtype, x), new_output(shape, x.dtype, x)
        _var_kernel(name, x, dims, correction, take_sqrt, v, m)
        return v, m

    return kernel


_kernel("aten::var_mean.correction")(_var_mean("var_mean", False))
_kernel("aten::std_mean.correction")(_var_mean("std_mean", True))
TABLE.serves("aten::var_mean.correction_out", "aten::var_mean.correction")
TABLE.serves("aten::std_mean.correction_out", "aten::std_mean.correction")


def _logsumexp(a: dict, out: torch.Tensor | None) -> torch.Tensor:
    x, keepdim = a["self"], bool(a.get("keepdim", False))
    dim = a["dim"]
    if x.dim() and not list(dim):
        raise RuntimeError(f"output with shape [] doesn't match the broadcast shape {[1] * x.dim()}")
    dims = _dims(x, dim)
    rdtype = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    shape = _out_shape(x, dims, keepdim)
    if out is None:
        out = new_output(shape, rdtype, x)
    else:
        if not out.dtype.is_floating_point:
            raise RuntimeError(f"logsumexp(): Expected floating point type for result tensor, but got: "
                               f"{SCALAR_TYPE_NAMES[out.dtype]}")
        check_out(out, shape, out.dtype, [x])
    if out.numel() == 0:
        return out
    g = _rows_of(x, dims, [out])

    def between(nc, m):
        # CPU: the shift is the max, or 0 where the max is infinite (all -inf rows give -inf, +inf gives inf)
        shift = nc.sbuf_tile(m.shape, FP32)
        mark = nc.mark()
        infinite = nc.sbuf_tile(m.shape, BOOL)
        nc.vector.tensor_unary(infinite, m, "isinf")
        zero = _memset(nc, m.shape, FP32, 0.0)
        nc.vector.select(shift, infinite, zero, m)
        nc.release_to(mark)
        return shift

    def emit(nc, shift, total, views):
        mark = nc.mark()
        log = nc.sbuf_tile(total.shape, FP32)
        nc.scalar.activation(log, total, "log")
        res = nc.sbuf_tile(total.shape, views[0].dtype)
        nc.vector.tensor_tensor(res, log, shift, "add", dtype=FP32)
        nc.dma.store(views[0], res)
        nc.release_to(mark)

    with launch("logsumexp", out.device.index) as nc:
        if _count(x, dims) == 0:
            _fill(nc, _kept_view(out, dims, x.dim()), -np.inf, FP32)
        else:
            _two_pass(nc, g, _Spec("maximum", FP32), between, "exp", emit)
    return out


@_kernel("aten::logsumexp")
def _logsumexp_functional(a: dict) -> torch.Tensor:
    return _logsumexp(a, None)


@_kernel("aten::logsumexp.out")
def _logsumexp_out(a: dict) -> torch.Tensor:
    return _logsumexp(a, a["out"])


# --- row moments of a block: the normalisation layers' statistics ---------------------------------

def _moments(nc, blk: _Block, n: int, which: int = 0) -> tuple[Tile, Tile]:
    """Row means of x and sums of (x - mean)^2 over a block of rows of n elements ([p, 1] fp32 each).

    Two passes, the second fused on ScalarE and compensated (``_centre``): the first mean, sum / n,
    carries the sum's rounding (1.7 summed 1000 times and divided is 1.7000003), which a constant
    row turns into a non-zero variance and an output of ~1e-4 instead of exactly the bias once
    rstd = 1/sqrt(eps) amplifies it; CPU's moments are exact there."""
    p = blk.p
    total = _row_reduce(nc, blk, which, "add")
    mean = _row_scalar(nc, p)
    nc.vector.tensor_scalar(mean, total, "divide", float(n), dtype=FP32)
    nc.release(total)
    neg = _row_scalar(nc, p)
    nc.vector.tensor_scalar(neg, mean, "multiply", -1.0, dtype=FP32)
    m2, s1 = _row_scalar(nc, p), _row_scalar(nc, p)
    for j, (_, (t,)) in enumerate(blk.each(which)):
        scratch = nc.sbuf_tile(t.shape, FP32)
        for acc, func in ((m2, "square"), (s1, "identity")):
            part = acc if j == 0 else _row_scalar(nc, p)
            nc.scalar.activation(scratch, t, func, bias=neg, accumulate=part)
            if j:
                _combine(nc, acc, part, "add", FP32)
                nc.release(part)
        nc.release(scratch)
    _centre(nc, mean, m2, s1, n)
    nc.release(s1)
    nc.release(neg)
    return mean, m2


def _centre(nc, mean: Tile, m2: Tile, s1: Tile, n: int) -> None:
    """Compensate moments taken about a first mean m: with s1 = sum(x - m) and m2 = sum((x - m)^2)
    (fp32, [p, 1]), the mean is m + s1/n and the centred sum of squares m2 - s1 * (s1/n), clamped
    at 0 as CPU clamps the variance.

    Applied only to rows with m2 <= m^2 / 4: then every |x - m| <= sqrt(m2) <= |m| / 2, so each
    x - m is exact (Sterbenz) and s1 measures the first mean's rounding exactly. That covers constant
    rows (made exact) and rows far from zero relative to their spread (50 +- 1e-3: made nearly
    correctly rounded). Elsewhere x - m rounds as much as the first sum did, the correction would
    be noise, and the moments stay as computed; so do rows with inf/NaN or overflowing squares."""
    mark = nc.mark()
    d = nc.sbuf_tile(s1.shape, FP32)
    corr = nc.sbuf_tile(s1.shape, FP32)
    ok = nc.sbuf_tile(s1.shape, BOOL)
    finite = nc.sbuf_tile(s1.shape, BOOL)
    fixed = nc.sbuf_tile(s1.shape, FP32)
    nc.vector.tensor_tensor(fixed, mean, mean, "multiply", dtype=FP32)
    nc.vector.tensor_scalar(fixed, fixed, "multiply", 0.25, dtype=FP32)
    nc.vector.tensor_tensor(ok, m2, fixed, "less_equal", dtype=FP32)
    nc.vector.tensor_scalar(d, s1, "divide", float(max(n, 1)), dtype=FP32)
    nc.vector.tensor_tensor(corr, d, s1, "multiply", dtype=FP32)
    nc.vector.tensor_unary(finite, corr, "isfinite", dtype=FP32)
    nc.vector.tensor_tensor(ok, ok, finite, "logical_and")
    nc.vector.tensor_tensor(fixed, mean, d, "add", dtype=FP32)
    nc.vector.select(mean, ok, fixed, mean)
    nc.vector.tensor_tensor(fixed, m2, corr, "subtract", dtype=FP32)
    nc.vector.tensor_scalar(fixed, fixed, "maximum", 0.0, dtype=FP32)
    nc.vector.select(m2, ok, fixed, m2)
    nc.release_to(mark)


def _rstd(nc, m2: Tile, n: int, eps: float) -> Tile:
    """1 / sqrt(m2 / n + eps) ([p, 1] fp32)."""
    var = _row_scalar(nc, m2.partitions)
    nc.vector.tensor_scalar(var, m2, "divide", float(max(n, 1)), dtype=FP32)
    rstd = _row_scalar(nc, m2.partitions)
    nc.scalar.activation(rstd, var, "rsqrt", bias=float(eps))
    nc.release(var)
    return rstd


# --- CPU's RowwiseMoments: Welford over vector lanes with a cascade of chunk merges -------------------------------

_WELFORD_CHUNK = 16  # moments_utils.h kChunkSize: vectors per Welford chunk before a cascade merge
_WELFORD_STEPS = 6.0  # GpSimd element-steps per element of the emulated Welford update (two fmas, two subtracts)


class RowwiseMoments:
    """CPU's float32 ``RowwiseMoments`` (aten/src/ATen/native/cpu/moments_utils.h), which group norm's
    (contiguous input) and layer norm's statistics come from, over rows of ``n`` elements streamed in order, as
    GpSimd programs: the first ``n // K`` * K elements as K-wide vector lanes (``K`` = Vectorized<float>::size(),
    ``cpu_host.rowwise_moments_lanes``), each chunk of 16 vectors a Welford pass ``m1 = fma(1/(j+1), x - m1, m1)``,
    ``m2 = fma(delta, x - m1, m2)`` merged into a cascade stack (AddMomentsVec: m2 = fma(delta * m0, c * delta,
    m2 + m2_add)), the rest a scalar Welford (``m1 += delta / m0``, ``m2 += delta * (x - m1)``, not contracted),
    then each lane merged into it (AddMoments: ``m1 += c * delta`` and ``m2 += m2_add + delta * delta * c * m0``,
    contracted where the host fuses). ``fused``: whether CPU's vectorized fmadd and the contracted scalar lines
    round once (``cpu_host.fused_multiply_add``).

    This is what makes CPU's statistics NaN or infinite where a two-pass form stays finite: a lane merge multiplies
    delta * delta (inf for a mean beyond ~1.8e19) by c = 0 or m0 = 0 (empty lanes, a row shorter than K or without
    a scalar tail): NaN; measured bit-identical to CPU's mean and rstd over rows of 1 to 4100 elements, under the
    AVX2 and DEFAULT kernels. The count stack (m0) depends on ``n`` only and is kept here; the lanes' m1/m2 stack
    lives in a [p, depth * 2 * K] state tile between chunks; the stream's chunks may be of any length."""

    def __init__(self, nc, p: int, n: int, lanes: int, fused: bool, halves: int = 1):
        # ``halves``: float vectors per input vector (2 for bfloat16/float16: a Vectorized<BFloat16> of 2 * lanes
        # elements converts to two float vectors, each a Welford of its own merged into the stack in turn)
        self.nc, self.p, self.n, self.k, self.fused, self.halves = nc, p, n, lanes, fused, halves
        self.width = lanes * halves  # elements per input vector
        self.vectors = n // self.width
        chunks = -(-self.vectors // _WELFORD_CHUNK)
        self.depth = 1 if chunks <= 2 else (chunks - 1).bit_length()  # utils::CeilLog2
        self.m0 = [0] * self.depth
        self.chunk = 0  # Welford chunks done
        self.seen = 0  # elements consumed by whole Welford chunks
        self.pending = None  # [p, <16 K] elements streamed but not yet consumed
        self.state = nc.sbuf_tile((p, self.depth * 2 * lanes), FP32)
        nc.vector.memset(self.state, 0.0)

    @staticmethod
    def _fma(a, b, c, fused: bool):
        if fused:
            return expf.fma32_fused(np.asarray(a, FP32), np.asarray(b, FP32), np.asarray(c, FP32))
        return (np.asarray(a, FP32) * np.asarray(b, FP32)) + np.asarray(c, FP32)

    def _add_vec(self, st, m0_add: int, m1_add, m2_add, k: int) -> None:
        n = self.m0[k] + m0_add
        c = np.float32(0) if n == 0 else np.float32(m0_add) / np.float32(n)
        m1, m2 = st[:, k, 0], st[:, k, 1]
        delta = m1_add - m1
        m2_tmp = m2 + m2_add
        c_delta = c * delta
        m0_delta = delta * np.float32(self.m0[k])
        st[:, k, 0] = m1 + c_delta
        st[:, k, 1] = self._fma(m0_delta, c_delta, m2_tmp, self.fused)
        self.m0[k] = n

    def feed(self, t: Tile, last: bool) -> tuple[Tile, Tile] | None:
        """Stream the next chunk ``t`` ([p, f], the row's next f elements, any f); on the ``last`` one, the rows'
        mean and variance (m2 / n) as [p, 1] fp32 tiles. Elements past the last whole Welford chunk wait in
        ``pending`` (SBUF-resident, at most 16 * K - 1 per row) for the next chunk."""
        nc = self.nc
        outs = (self.state,) + ((_row_scalar(nc, self.p), _row_scalar(nc, self.p)) if last else ())

        def program(o_state, *rest):
            x = rest[-1].astype(FP32, copy=False)
            if self.pending is not None:
                x = np.concatenate([self.pending, x], axis=1)
            st = o_state.reshape(self.p, self.depth, 2, self.k)
            with np.errstate(all="ignore"):
                used = self._vectors(st, x, last)
                if last:
                    self._finish(st, x[:, self.vectors * self.width - self.seen:], rest[0], rest[1])
                else:
                    self.pending = x[:, used:].copy()
                    self.seen += used

        nc.gpsimd.run("rowwise_moments", program, outs, (t,), elements=t.data.size, factor=_WELFORD_STEPS)
        return outs[1:] if last else None

    def _vectors(self, st, x, last: bool) -> int:
        """Run the Welford chunks ``x`` (starting at element ``seen``) holds whole (or, ``last``, all that are left);
        the number of x's columns used. The chunks' own passes are independent, so they run side by side (one
        numpy step per vector position j over every chunk); their merges into the cascade follow in order."""
        k, w = self.k, self.width
        per = _WELFORD_CHUNK * w
        left = self.vectors - self.chunk * _WELFORD_CHUNK
        full = min(left // _WELFORD_CHUNK, x.shape[1] // per)
        counts = [_WELFORD_CHUNK] * full
        if full * _WELFORD_CHUNK < left and left - full * _WELFORD_CHUNK <= (x.shape[1] - full * per) // w:
            counts.append(left - full * _WELFORD_CHUNK)  # the row's last, partial chunk, once it has streamed
        if not counts:
            return 0
        c_vecs = [np.float32(1) / np.float32(j + 1) for j in range(_WELFORD_CHUNK)]
        width = len(counts) * per
        block = np.zeros((self.p, width), FP32)
        used = full * per + (counts[-1] * w if len(counts) > full else 0)
        block[:, :used] = x[:, :used]
        chunks = block.reshape(self.p, len(counts), _WELFORD_CHUNK, w)
        m1 = np.zeros((self.p, len(counts), w), FP32)
        m2 = np.zeros((self.p, len(counts), w), FP32)
        for j in range(max(counts)):
            live = np.array([j < c for c in counts])[None, :, None]
            xv = chunks[:, :, j, :]
            delta = xv - m1
            n1 = self._fma(c_vecs[j], delta, m1, self.fused)
            n2 = self._fma(delta, xv - n1, m2, self.fused)
            m1 = np.where(live, n1, m1)
            m2 = np.where(live, n2, m2)
        for i, count in enumerate(counts):
            for h in range(self.halves):  # each float vector of the chunk merged in turn (UpdateMomentsVec)
                self._add_vec(st, count, m1[:, i, h * k:(h + 1) * k], m2[:, i, h * k:(h + 1) * k], 0)
            mask = self.chunk + 1
            j = 1
            while j < self.depth and (mask & 1) == 0:
                self._add_vec(st, self.m0[j - 1], st[:, j - 1, 0].copy(), st[:, j - 1, 1].copy(), j)
                self.m0[j - 1] = 0
                st[:, j - 1] = 0
                mask >>= 1
                j += 1
            self.chunk += 1
        return used

    def _finish(self, st, tail, o_mean, o_var) -> None:
        """The cascade's last merges, the scalar Welford over ``tail`` (the row's last n % K elements) and the
        lanes' merges into it."""
        for i in range(1, self.depth):
            self._add_vec(st, self.m0[i], st[:, i, 0].copy(), st[:, i, 1].copy(), 0)
        m0, m1, m2 = 0, np.zeros(self.p, FP32), np.zeros(self.p, FP32)
        for i in range(tail.shape[1]):  # the scalar tail: not contracted (measured)
            xi = tail[:, i]
            delta = xi - m1
            m0 += 1
            m1 = m1 + delta / np.float32(m0)
            m2 = m2 + delta * (xi - m1)
        per_lane = self.vectors * self.halves  # elements each float lane holds (m0_add)
        for lane in range(self.k):  # AddMoments, contracted where the host fuses
            n = m0 + per_lane
            c = np.float32(0) if n == 0 else np.float32(per_lane) / np.float32(n)
            delta = st[:, 0, 0, lane] - m1
            m1 = self._fma(c, delta, m1, self.fused)
            m2 = m2 + self._fma((delta * delta) * c, np.float32(m0), st[:, 0, 1, lane], self.fused)
            m0 = n
        o_mean[...] = m1.reshape(o_mean.shape)
        o_var[...] = (m2 / np.float32(self.n)).reshape(o_var.shape)


def rowwise_moments(nc, blk: _Block, n: int, lanes: int, fused: bool, which: int = 0,
                    halves: int = 1) -> tuple[Tile, Tile]:
    """Mean and variance ([p, 1] fp32) of a block of rows of ``n`` elements as CPU's RowwiseMoments (see the class;
    ``halves`` 2 for a bfloat16/float16 input); the block's columns must be one flat run in memory order."""
    wf = RowwiseMoments(nc, blk.p, n, lanes, fused, halves)
    res = None
    for j, (_, (t,)) in enumerate(blk.each(which)):
        res = wf.feed(t, j == len(blk.chunks) - 1)
    nc.release(wf.state)
    return res
