"""Batch norm: native_batch_norm, _native_batch_norm_legit (all overloads),
_native_batch_norm_legit_no_training, native_batch_norm_backward.

Tiling: channels on partitions (``_channels_first``: the input viewed as (C, N, *spatial)), a
channel's N * spatial elements along the free axis. Training statistics follow CPU's path for
the input's layout (``_bn_layout``, ``_bn_stats``): float32 sums in double on GpSimd where CPU
accumulates in double, fp32 sums on VectorE / ScalarE otherwise (``moments._moments``); running
statistics update on VectorE. The output is one ScalarE activation per tile (x * scale + shift),
or GpSimd's fma rounded once where CPU's contiguous / channels-last float32 kernels fuse it
(``tiles._affine_rows``). bfloat16/float16 inputs (``_bn_reduced_block``): the engines' fp32 moments, then
CPU's per-channel roundings (statistics in the parameter dtype, running statistics, alpha/beta) in
one GpSimd program over the [p, 1] scalars (``_bn_reduced_params``), the output fused as CPU's or
stepwise for strided inputs. Backward: one pass for sum(dy) and sum((x - mean) * dy) per channel,
one for dx.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import check_out, fma32, hbm, new_output
from device_impl.kernels.reduction.tiles import (
    F64, _Block, _FLOATS, _FMA_STEPS, _Grid, _at, _blocks, _check_mixed, _combine, _kernel, _load_scalars, _refuse,
    _row_reduce, _row_scalar, _row_sum64, _stats_dtype, _store_affine, _store_scalars, _wrap,
)
from device_impl.kernels.reduction.moments import _moments, _rstd


def _channels_first(t: torch.Tensor) -> np.ndarray:
    """(N, C, *spatial) -> HBM view (C, N, *spatial)."""
    return hbm(t).transpose([1, 0] + list(range(2, t.dim())))


def _bn_check(x: torch.Tensor, params: Sequence[torch.Tensor | None]) -> int:
    if x.numel() == 0:
        raise RuntimeError(f"input tensor must have at least one element, but got input_sizes = {list(x.shape)}")
    c = x.shape[_wrap(1, x.dim())] if x.dim() >= 2 else x.size(1)
    if x.dtype not in _FLOATS:
        raise _refuse("batch_norm", x.dtype)
    for p in params:
        if p is not None and p.numel() != c:
            raise RuntimeError(f"running_mean should contain {c} elements not {p.numel()}")
    return c




def _bn_layout(x: torch.Tensor) -> str:
    """Which of CPU's batch-norm statistics paths ``x`` takes (batch_norm_cpu_update_stats_template)."""
    if x.is_contiguous():  # an image size of 1 (N, C) is "also channels last" to CPU's collect_stats
        return "contiguous" if x.numel() // max(x.shape[0] * x.shape[1], 1) != 1 else "channels_last"
    if (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)) or (
            x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d)):
        return "channels_last"
    return "strided"


def _bn_stats(nc, blk: _Block, n: int, eps: float, layout: str, channels: int) -> tuple[Tile, Tile, Tile]:
    """Training statistics of a block of channels as CPU computes them for float32 (acc_type double):
    (mean, sum of squared deviations, invstd), [p, 1] fp32 each.

    CPU's contiguous path (batch_norm_cpu_collect_stats_contiguous_impl) sums x in double, rounds the mean
    to float, adds (x - mean)^2 computed in float into a double and stores that sum as float (so a squared
    deviation above ~1.8e19 makes it inf and invstd 0); its strided path takes at::mean (a float sum) and
    adds (x - mean)^2 in double, keeping var_sum / n in double for invstd (so |x| near 1e30 still gives a
    finite invstd). No fixed-function engine computes in double; the simulator runs these sums as GpSimd
    programs in double (a real kernel would carry compensated fp32 pairs there) to match CPU's acc_type.
    The channels-last path, and bfloat16/float16 inputs (acc_type float), accumulate in float as the
    engines do (_moments)."""
    p = blk.p
    if layout == "channels_last" and blk.arrays[0].dtype == FP32:
        return _bn_stats_channels_last(nc, blk, n, eps, channels)
    if layout == "channels_last" or blk.arrays[0].dtype != FP32:
        mean, m2 = _moments(nc, blk, n)
        return mean, m2, _rstd(nc, m2, n, eps)
    mean, m2, inv = _row_scalar(nc, p), _row_scalar(nc, p), _row_scalar(nc, p)
    if layout == "contiguous":
        total = _row_sum64(nc, blk, lambda x: x.astype(np.float64), "bn_sum64")

        def to_mean(o, t):
            o[...] = t / max(n, 1)

        nc.gpsimd.run("bn_mean", to_mean, (mean,), (total,), elements=p)
        nc.release(total)

        def squares(x, mf):  # (x - mean) * (x - mean) in float, as CPU's scalar_t arithmetic
            d = x.astype(FP32) - mf
            return (d * d).astype(np.float64)

        vsum = _row_sum64(nc, blk, squares, "bn_var64", about=mean)

        def finish(o_m2, o_inv, v):
            v32 = v.astype(FP32)  # CPU stores the double sum in a float tensor
            o_m2[...] = v32
            o_inv[...] = 1.0 / np.sqrt(v32.astype(np.float64) / max(n, 1) + eps)
    else:
        total = _row_reduce(nc, blk, 0, "add")
        nc.vector.tensor_scalar(mean, total, "divide", float(max(n, 1)), dtype=FP32)
        nc.release(total)

        def squares(x, mf):  # in double: CPU's accscalar_t mean
            d = x.astype(np.float64) - mf.astype(np.float64)
            return d * d

        vsum = _row_sum64(nc, blk, squares, "bn_var64", about=mean)

        def finish(o_m2, o_inv, v):
            o_m2[...] = v
            o_inv[...] = 1.0 / np.sqrt(v / max(n, 1) + eps)

    with np.errstate(all="ignore"):
        nc.gpsimd.run("bn_invstd", finish, (m2, inv), (vsum,), elements=p, factor=4.0)
    nc.release(vsum)
    return mean, m2, inv


def _bn_stats_channels_last(nc, blk: _Block, n: int, eps: float, channels: int) -> tuple[Tile, Tile, Tile]:
    """Training statistics of a block of channels of a channels-last float32 input (or an (N, C) / image size 1
    one) as CPU's batch_norm_cpu_collect_stats_channels_last_impl computes them over the n = N * HxW positions,
    by one of three methods (``threads`` = at::get_num_threads()):

    * n > threads: ``parallel_for`` over the positions (``cpu_host.parallel_ranges``) gives each thread a run,
      summed in float into that thread's row of a zeroed buffer, the rows then summed in double:
      mean = float(sum / n); the same for (x - mean) * (x - mean), var_sum = float(double sum);
    * else, one thread, or C <= 16 or C > 2048: one float sum per channel over all positions, mean = sum / n in
      float, var_sum the float sum of the squares;
    * else: per channel, sums in double (mean = float(sum / n), var_sum = float(sum of float squares)).

    invstd = 1 / sqrt(var_sum / n + eps) in double. So a channel whose float sum would overflow stays finite where
    each thread's run does not (a [3, 2] input of values near 3e38: CPU's save_mean finite, the engines' one float
    sum inf and every output NaN; op suite ci profile, _native_batch_norm_legit near_overflow), and overflows
    where CPU's one float sum does. Partials live in a [p, threads] tile across the streamed chunks, on GpSimd."""
    p = blk.p
    threads, ranges = cpu_host.parallel_ranges(n)
    if n > threads:
        acc_dtype = FP32
    elif threads == 1 or channels <= 16 or channels > 2048:
        ranges, acc_dtype = [(0, n)], FP32
    else:
        ranges, acc_dtype = [(0, n)], np.float64
    mean, m2, inv = _row_scalar(nc, p), _row_scalar(nc, p), _row_scalar(nc, p)

    def partials(term, about):
        acc = nc.sbuf_tile((p, len(ranges)), F64 if acc_dtype == np.float64 else FP32)
        nc.vector.memset(acc, 0.0)
        start = 0
        for _, (t,) in blk.each(0):
            a, f = start, t.shape[1]
            start += f

            def program(o, x, *rest, a=a, f=f):
                with np.errstate(all="ignore"):
                    v = term(x.astype(FP32, copy=False), *rest)
                    for k, (lo, hi) in enumerate(ranges):
                        lo, hi = max(lo, a), min(hi, a + f)
                        if lo < hi:  # buffer += x, one position after another
                            run = np.concatenate([o[:, k:k + 1], v[:, lo - a:hi - a].astype(acc_dtype)], axis=1)
                            o[:, k] = np.cumsum(run, axis=1, dtype=acc_dtype)[:, -1]

            nc.gpsimd.run("bn_stats_cl", program, (acc,), (t,) + about, elements=t.data.size, factor=2.0)
        return acc

    def total(s_):  # the threads' rows (zeros beyond the tasks) summed in double, from 0
        out = np.zeros((p,), np.float64)
        for k in range(s_.shape[1]):
            out = out + s_[:, k].astype(np.float64)
        return out

    sums = partials(lambda x: x, ())

    def to_mean(o, s_):
        with np.errstate(all="ignore"):
            if acc_dtype == FP32 and len(ranges) == 1:  # one float sum, divided in float
                o[...] = (s_[:, 0] / np.float32(n)).reshape(o.shape)
            else:
                o[...] = (total(s_) / n).astype(FP32).reshape(o.shape)

    nc.gpsimd.run("bn_mean_cl", to_mean, (mean,), (sums,), elements=p * len(ranges))
    nc.release(sums)
    squares = partials(lambda x, m: (x - m) * (x - m), (mean,))

    def finish(o_m2, o_inv, s_):
        with np.errstate(all="ignore"):
            vs = (s_[:, 0] if acc_dtype == FP32 and len(ranges) == 1 else total(s_).astype(FP32)).reshape(o_m2.shape)
            o_m2[...] = vs
            var = vs.astype(np.float64) / max(n, 1)
            o_inv[...] = np.where((var == 0) & (eps == 0), 0.0, 1.0 / np.sqrt(var + eps))

    nc.gpsimd.run("bn_invstd_cl", finish, (m2, inv), (squares,), elements=p * len(ranges), factor=4.0)
    nc.release(squares)
    return mean, m2, inv


def _batch_norm(x, w, b, rm, rv, training: bool, momentum: float, eps: float, outs=None):
    c = _bn_check(x, (w, b, rm, rv))
    _check_mixed(x, w, b, rm, rv)
    if not training and (rm is None or rv is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    sdtype = _stats_dtype(x, w, b, rm, rv)
    stat_shape = (c,) if training else (0,)
    if outs is None:
        out = new_output(tuple(x.shape), x.dtype, x)
        save_mean, save_invstd = new_output(stat_shape, sdtype, x), new_output(stat_shape, sdtype, x)
    else:
        out, save_mean, save_invstd = outs
        check_out(out, tuple(x.shape), x.dtype, [x], exact_dtype=True)  # CPU: "expected scalar type ..."
        if training:  # in evaluation CPU's out= kernel leaves save_mean/save_invstd as they were given
            check_out(save_mean, stat_shape, sdtype, [x], exact_dtype=True)
            check_out(save_invstd, stat_shape, sdtype, [x], exact_dtype=True)
    arrays = {"mean": hbm(save_mean) if training else None, "invstd": hbm(save_invstd) if training else None,
              "rm": None if rm is None else hbm(rm), "rv": None if rv is None else hbm(rv),
              "w": None if w is None else hbm(w), "b": None if b is None else hbm(b)}
    layout = _bn_layout(x)
    # CPU's batch_norm_cpu_transform_input_template takes its fused kernels only where the input's layout allows and
    # weight, bias and the running statistics are contiguous; else its generic, stepwise loop (a strided bias in
    # eval mode: the fused x * alpha + beta made inf - inf NaN where CPU's steps stay infinite; op suite ci profile,
    # _native_batch_norm_legit / _no_training / running_stats output[0])
    generic = any(t is not None and not t.is_contiguous() for t in (w, b, rm, rv))
    with launch("batch_norm", x.device.index) as nc:
        forward_program(nc, hbm(x), hbm(out), arrays, training, float(momentum), float(eps), layout,
                        sdtype == torch.float32, cpu_host.fused_multiply_add(), generic_transform=generic)
    return out, save_mean, save_invstd


# where a training step's new running statistics go: the functional op's own results where given
_STORED = {"rm": "rm_out", "rv": "rv_out"}


def _stored(name: str, ks: dict) -> str:
    return _STORED[name] if _STORED[name] in ks else name


def forward_program(nc, x: np.ndarray, out: np.ndarray, arrays: dict, training: bool, momentum: float, eps: float,
                    layout: str, mixed: bool, fused_host: bool, generic_transform: bool = False) -> None:
    """The batch norm's tile program on HBM arrays, inside a launch: ``x``/``out`` (N, C, *spatial);
    ``arrays``: the [C] arrays by name ("mean"/"invstd": the saved statistics, training only; "rm"/"rv": the
    running statistics read; "rm_out"/"rv_out": where the updated ones go, the running arrays themselves when
    absent (the in-place op); "w", "b"), None or missing where absent. ``layout``: CPU's statistics path for the
    input's layout (``_bn_layout``), ``mixed``: a reduced-precision input with float32 statistics,
    ``fused_host``: whether CPU's kernels fuse the affine multiply-add (``cpu_host.fused_multiply_add``). The
    eager kernel and the compiler's ``batch_norm`` step (compiler/opaque_cnn.py) both run it."""
    c = x.shape[1]
    count = x.size // c
    spatial = list(x.shape[2:])
    ks = {}
    for name in ("mean", "invstd", "rm", "rv", "w", "b", "rm_out", "rv_out"):
        if arrays.get(name) is not None:
            ks[name] = len(ks), arrays[name]
    cf = [1, 0] + list(range(2, x.ndim))
    g = _Grid([c], [x.shape[0]] + spatial, kr=[x.transpose(cf), out.transpose(cf)], k=[v for _, v in ks.values()])
    X, O = g.kr

    def view(name, blk):
        return _at(g.k[ks[name][0]], blk.rsl)

    if x.dtype != FP32:
        for blk in _blocks(nc, g, [X]):
            mark = nc.mark()
            _bn_reduced_block(nc, blk, O, ks, view, training, count, momentum, eps, layout, mixed, fused_host)
            nc.release_to(mark)
        return
    # CPU's contiguous and channels-last float32 kernels apply out = x * alpha + beta with vec::fmadd, one
    # rounding where this process's ATen kernels fuse (so x * alpha beyond float's range still gives beta's
    # infinity, not inf - inf = NaN); ScalarE rounds the product first, so those layouts take GpSimd's fma.
    fused = layout != "strided" and not generic_transform and fused_host
    # CPU's strided path (batch_norm_cpu_transform_input_template) applies ((x - mean) * invstd) * w + b
    # elementwise in float, each step rounded (so x * invstd * w beyond float's range where (x - mean) * invstd
    # is not keeps CPU's finite value, and no alpha/beta fold makes an inf - inf NaN)
    stepwise = layout == "strided" or generic_transform  # (``generic_transform``: a non-contiguous parameter)
    for blk in _blocks(nc, g, [X]):
        p = blk.p
        mark = nc.mark()
        if training:
            m, m2, inv = _bn_stats(nc, blk, count, eps, layout, c)
            _store_scalars(nc, view("mean", blk), m)
            _store_scalars(nc, view("invstd", blk), inv)
            if "rm" in ks:  # running = momentum * batch + (1 - momentum) * running (unbiased var)
                for name, batch in (("rm", m), ("rv", m2)):
                    if name not in ks:
                        continue
                    stat = batch
                    if name == "rv":
                        stat = _row_scalar(nc, p)
                        nc.vector.tensor_scalar(stat, m2, "divide", float(count - 1), dtype=FP32)
                    old = _load_scalars(nc, view(name, blk), p)
                    new = _row_scalar(nc, p)
                    nc.vector.tensor_scalar(new, stat, "multiply", float(momentum), dtype=FP32)
                    nc.vector.tensor_scalar(old, old, "multiply", 1.0 - float(momentum), dtype=FP32)
                    nc.vector.tensor_tensor(new, new, old, "add", dtype=FP32)
                    _store_scalars(nc, view(_stored(name, ks), blk), new)
        else:
            m = _load_scalars(nc, view("rm", blk), p)
            var = _load_scalars(nc, view("rv", blk), p)
            inv = _row_scalar(nc, p)
            if stepwise:  # tensor ops in float: 1 / sqrt(running_var + eps), each step rounded
                nc.vector.tensor_scalar(inv, var, "add", float(eps), dtype=FP32)
                nc.scalar.activation(inv, inv, "sqrt")
                nc.scalar.activation(inv, inv, "reciprocal")
            else:
                nc.scalar.activation(inv, var, "rsqrt", bias=float(eps))
        if stepwise:
            _bn_stepwise(nc, blk, O, m, inv, view("w", blk) if "w" in ks else None,
                         view("b", blk) if "b" in ks else None)
            nc.release_to(mark)
            continue
        scale = _row_scalar(nc, p)
        if "w" in ks:
            wt = _load_scalars(nc, view("w", blk), p)
            nc.vector.tensor_tensor(scale, inv, wt, "multiply", dtype=FP32)
        else:
            nc.vector.tensor_copy(scale, inv)
        shift = _row_scalar(nc, p)  # b - mean * scale
        if fused:  # CPU's collect_linear_and_constant_terms: b - mean * alpha, contracted to one rounding too
            bt = _load_scalars(nc, view("b", blk), p) if "b" in ks else _row_scalar(nc, p)
            if "b" not in ks:
                nc.vector.memset(bt, 0.0)

            def beta(o, m_, s_, b_):
                o[...] = fma32(-m_, s_, b_)

            nc.gpsimd.run("bn_beta", beta, (shift,), (m, scale, bt), elements=p, factor=_FMA_STEPS)
        else:
            nc.vector.tensor_tensor(shift, m, scale, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(shift, shift, "multiply", -1.0, dtype=FP32)
            if "b" in ks:
                bt = _load_scalars(nc, view("b", blk), p)
                nc.vector.tensor_tensor(shift, shift, bt, "add", dtype=FP32)
        _store_affine(nc, blk, O, O.dtype, scale, shift, fused, "bn_fma")
        nc.release_to(mark)


def _bn_stepwise(nc, blk: _Block, O, m: Tile, inv: Tile, wview, bview, step_dtype=FP32) -> None:
    """out = ((x - mean) * invstd) * w + b, each step rounded to ``step_dtype`` (CPU's strided path computes in
    its param_t: fp32 for float32 and for a bf16/fp16 input with fp32 parameters, the input's dtype otherwise; an
    absent weight is 1 and an absent bias 0, added as CPU adds its zeros: -0.0 becomes +0.0)."""
    p = blk.p
    nm = _row_scalar(nc, p)
    nc.vector.tensor_scalar(nm, m, "multiply", -1.0, dtype=FP32)
    wt = _load_scalars(nc, wview, p) if wview is not None else None
    bt = _load_scalars(nc, bview, p) if bview is not None else None
    for ch, (t,) in blk.each(0):
        step = nc.sbuf_tile(t.shape, step_dtype)
        nc.scalar.activation(step, t, "identity", bias=nm)
        nc.scalar.activation(step, step, "identity", scale=inv)
        if wt is not None:
            nc.scalar.activation(step, step, "identity", scale=wt)
        res = nc.sbuf_tile(t.shape, O.dtype)
        if bt is not None:
            nc.vector.tensor_tensor(res, step, bt, "add", dtype=FP32)
        else:
            nc.vector.tensor_scalar(res, step, "add", 0.0, dtype=FP32)
        blk.store(O, ch, res)
        nc.release(res)
        nc.release(step)


def _bn_reduced_block(nc, blk: _Block, O, ks: dict, view, training: bool, count: int, momentum: float,
                      eps: float, layout: str, mixed: bool, fused_host: bool) -> None:
    """One block of channels of a bfloat16/float16 input (``mixed``: fp32 weight, bias and statistics).

    The moments come from the engines (``_moments``: fp32 mean and sum of squared deviations); CPU's
    per-channel arithmetic on them (``_bn_reduced_params``: its roundings to the parameter dtype, running
    statistics, eval-mode invstd, alpha and beta) runs as one GpSimd program over the [p, 1] scalars. The
    output is x * alpha + beta rounded once to fp32 where CPU's contiguous / channels-last kernels fuse it
    (``tiles._affine_rows``), then to the input's dtype; CPU's strided path is stepwise (``_bn_stepwise``)."""
    p = blk.p
    names = [k for k in ("rm", "rv", "w", "b") if k in ks]
    loaded = {k: _load_scalars(nc, view(k, blk), p) for k in names}
    ins = ()
    if training:
        m, m2 = _moments(nc, blk, count)
        ins = (m, m2)
    ins = ins + tuple(loaded[k] for k in names)
    outs = tuple(_row_scalar(nc, p) for _ in range(8))  # save_mean, save_invstd, rm, rv, mean, invstd, alpha, beta
    dt = O.dtype

    def program(*arrays):
        res, given = arrays[:8], dict(zip((("mean", "m2") if training else ()) + tuple(names), arrays[8:]))
        with np.errstate(all="ignore"):
            vals = _bn_reduced_params(dt, mixed, layout, training, count, momentum, eps, given)
        for o, key in zip(res, ("save_mean", "save_invstd", "rm", "rv", "mean", "invstd", "alpha", "beta")):
            if key in vals:
                o[...] = vals[key]

    nc.gpsimd.run("bn_params", program, outs, ins, elements=p, factor=24.0)
    smean, sinv, rm_new, rv_new, mo, io, alpha, beta = outs
    if training:
        _store_scalars(nc, view("mean", blk), smean)
        _store_scalars(nc, view("invstd", blk), sinv)
        for name, t in (("rm", rm_new), ("rv", rv_new)):
            if name in ks:
                _store_scalars(nc, view(_stored(name, ks), blk), t)
    if layout == "strided":
        _bn_stepwise(nc, blk, O, mo, io, view("w", blk) if "w" in ks else None,
                     view("b", blk) if "b" in ks else None, step_dtype=FP32 if mixed else dt)
        return
    _store_affine(nc, blk, O, dt, alpha, beta, fused_host, "bn_fma")


def _bn_reduced_params(dt: np.dtype, mixed: bool, layout: str, training: bool, n: int, momentum: float, eps: float,
                       given: dict) -> dict:
    """CPU's per-channel batch-norm arithmetic for a bfloat16/float16 input ([p, 1] numpy arrays in, fp32 out).

    ``P`` rounds to CPU's param_t (the input's dtype; fp32 when ``mixed``) and ``R`` to scalar_t. Training,
    contiguous and channels-last (batch_norm_cpu_update_stats_template's contiguous branch and the
    collect_stats kernels): save_mean = P(mean); var_sum = P(m2), about the float mean where the input is
    contiguous with an image size > 1 and about save_mean for channels last; c10's Half/BFloat16 ``a / int64``
    rounds both operands, so var = R(var_sum / R(n)) (fp32 when mixed) and unbiased = R(var_sum / R(n - 1));
    invstd = P(float(1 / sqrt(double(var) + eps))); momentum_ = P(momentum), running = P(P(momentum_ * batch) +
    P(P(1 - momentum_) * running)), the var's first product in float. Strided (Normalization.cpp's loop):
    save_mean = at::mean in P, var_sum a float sum about it, var = float(var_sum / n), running = P(float(
    momentum * batch + (1 - momentum) * running)) in double. Eval: invstd = 1 / sqrt(running_var + float(eps))
    in float (contiguous / channels last) or as P-dtype tensor ops, each step rounded (strided).
    Output parameters (batch_norm_cpu_collect_linear_and_constant_terms): alpha = float(invstd * w),
    beta = float(b - float(mean * alpha)) from the P-rounded statistics (measured: no fused multiply-add
    there, while x * alpha + beta is fused on AVX2/AVX-512)."""
    f32, f64 = np.float32, np.float64

    def R(a):
        return np.asarray(a, f64).astype(f32).astype(dt).astype(f32)

    def P(a):
        return np.asarray(a, f64).astype(f32) if mixed else R(a)

    out = {}
    rm, rv = given.get("rm"), given.get("rv")
    # float16 statistics with float16 parameters follow the strided formulas on every layout (measured against
    # torch 2.13: var_sum kept in float, running statistics formed in double; bfloat16 and mixed inputs take the
    # contiguous kernels' roundings)
    loop_stats = layout == "strided" or (dt == np.float16 and not mixed)
    if training:
        mean = np.asarray(given["mean"], f32)
        save_mean = P(mean)
        m2 = np.asarray(given["m2"], f32)
        if layout != "contiguous":  # the sum of squares about the stored mean: m2 + n (mean - save_mean)^2
            shift = mean.astype(f64) - save_mean.astype(f64)
            m2 = np.where(shift != 0, (m2.astype(f64) + n * shift * shift).astype(f32), m2)
        if loop_stats:
            var = m2 / f32(n)
            unbiased = m2 / f32(n - 1)
        else:
            vs = P(m2)
            var, unbiased = (vs / f32(n), vs / f32(n - 1)) if mixed else (R(vs / R(n)), R(vs / R(n - 1)))
        var = np.asarray(var, f32)
        inv = np.where((var != 0) | (eps != 0), (1.0 / np.sqrt(var.astype(f64) + eps)), 0.0)
        inv = P(inv)
        out.update(save_mean=save_mean, save_invstd=inv, mean=save_mean, invstd=inv)
        if loop_stats:
            if rm is not None:
                batch = save_mean if layout == "strided" else mean  # float16 contiguous: the float mean
                out["rm"] = P(momentum * batch.astype(f64) + (1 - momentum) * rm.astype(f64))
            if rv is not None:
                unb = np.asarray(unbiased, f32).astype(f64)
                out["rv"] = P(momentum * unb + (1 - momentum) * rv.astype(f64))
        else:
            mom = P(momentum)
            om = P(f32(1) - mom)
            if rm is not None:
                out["rm"] = P(P(mom * save_mean) + P(om * rm))
            if rv is not None:
                out["rv"] = P(f32(mom * np.asarray(unbiased, f32)) + P(om * rv))
    else:
        out["mean"] = np.asarray(rm, f32)
        v = np.asarray(rv, f32)
        if layout == "strided":
            out["invstd"] = P(f32(1) / P(np.sqrt(P(v + f32(eps)))))
        else:
            out["invstd"] = f32(1) / np.sqrt(v + f32(eps))
    if layout != "strided":
        w = given.get("w", np.ones_like(out["mean"], dtype=f32))
        b = given.get("b", np.zeros_like(out["mean"], dtype=f32))
        alpha = np.asarray(out["invstd"], f32) * np.asarray(w, f32)
        out["alpha"] = alpha
        out["beta"] = np.asarray(b, f32) - np.asarray(out["mean"], f32) * alpha
    return out


def _bn_args(a: dict, with_stats: bool = True):
    return (a["input"], a.get("weight"), a.get("bias"), a.get("running_mean") if with_stats else None,
            a.get("running_var") if with_stats else None)


@_kernel("aten::native_batch_norm")
def _native_batch_norm(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]))


@_kernel("aten::native_batch_norm.out")
def _native_batch_norm_out(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]),
                       outs=(a["out"], a["save_mean"], a["save_invstd"]))


@_kernel("aten::_native_batch_norm_legit", serves=("aten::_native_batch_norm_legit_no_training",))
def _batch_norm_legit(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]))


@_kernel("aten::_native_batch_norm_legit.out")
def _batch_norm_legit_out(a: dict):
    return _batch_norm(*_bn_args(a), bool(a["training"]), float(a["momentum"]), float(a["eps"]),
                       outs=(a["out"], a["save_mean"], a["save_invstd"]))


@_kernel("aten::_native_batch_norm_legit.no_stats")
def _batch_norm_legit_no_stats(a: dict):
    return _batch_norm(*_bn_args(a, False), bool(a["training"]), float(a["momentum"]), float(a["eps"]))


@_kernel("aten::_native_batch_norm_legit.no_stats_out")
def _batch_norm_legit_no_stats_out(a: dict):
    return _batch_norm(*_bn_args(a, False), bool(a["training"]), float(a["momentum"]), float(a["eps"]),
                       outs=(a["out"], a["save_mean"], a["save_invstd"]))


@_kernel("aten::native_batch_norm_backward")
def _batch_norm_backward(a: dict):
    dy, x, w = a["grad_out"], a["input"], a.get("weight")
    rm, rv, sm, si = a.get("running_mean"), a.get("running_var"), a.get("save_mean"), a.get("save_invstd")
    train, eps, mask = bool(a["train"]), float(a["eps"]), list(a["output_mask"])
    c = _bn_check(x, (w, sm, si) if train else (w, rm, rv))
    if train and (sm is None or si is None):
        raise RuntimeError("save_mean and save_invstd must be defined in training mode")
    if not train and (rm is None or rv is None):
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    pdtype = w.dtype if w is not None else _stats_dtype(x, *((sm, si) if train else (rm, rv)))
    dx = new_output(tuple(x.shape), x.dtype, x) if mask[0] else None
    dw = new_output((c,), pdtype, x) if mask[1] else None
    db = new_output((c,), pdtype, x) if mask[2] else None
    arrays = {name: None if t is None else hbm(t) for name, t in
              (("mean", sm if train else rm), ("stat", si if train else rv), ("w", w), ("dw", dw), ("db", db))}
    with launch("batch_norm_backward", x.device.index) as nc:
        backward_program(nc, hbm(dy), hbm(x), None if dx is None else hbm(dx), arrays, train, eps)
    return dx, dw, db


def _bn_backward_path(dy: np.ndarray, x: np.ndarray) -> str | None:
    """Which of CPU's batch-norm backward reductions a float32 (dy, x) pair takes (batch_norm_backward_cpu_template):
    both contiguous in one memory format go to the fused kernels, the contiguous one per image for an image size
    above 1 ("contiguous"), the channels-last one otherwise ("channels_last"); anything else the generic loop
    ("strided"). None: not float32 (the engines' sums)."""
    if x.dtype != FP32 or dy.dtype != FP32:
        return None
    return _bn_backward_layout(dy, x)


def _vec_sum(v: np.ndarray, lanes: int, tree: bool) -> np.ndarray:
    """CPU's ``vec::map_reduce_all`` sum of each row of ``v`` ([p, L] fp32, mapped already) in its order: below one
    vector, the L lanes one after another; else lane-wise vector sums, a partial tail vector added into its first
    lanes (Vec::set), then the lanes reduced by halves (the AVX2/AVX-512 vec_reduce_all shuffles, ``tree``) or one
    after another (the DEFAULT kernels)."""
    p, n = v.shape
    if n < lanes:
        acc = v[:, 0].copy()
        for i in range(1, n):
            acc = acc + v[:, i]
        return acc
    acc = v[:, :lanes].copy()
    full = n - n % lanes
    for d in range(lanes, full, lanes):
        acc = acc + v[:, d:d + lanes]
    if n > full:
        acc[:, :n - full] = acc[:, :n - full] + v[:, full:]
    if tree:
        idx = np.arange(lanes)
        h = lanes // 2
        while h:
            acc = acc + acc[:, idx ^ h]
            h //= 2
        return acc[:, 0]
    out = acc[:, 0].copy()
    for i in range(1, lanes):
        out = out + acc[:, i]
    return out


def _bn_backward_sums(nc, blk: _Block, m: Tile, gsum: Tile, dotp: Tile, path: str, batch: int,
                      count: int) -> Tile | None:
    """sum(dy) and sum((x - mean) * dy) per channel ([p, 1] fp32) as CPU's float32 backward forms them (``path``,
    ``_bn_backward_path``), the products (x - mean) * dy in float everywhere:

    * "contiguous" (batch_norm_cpu_backward_contiguous_impl): per image, ``vec::reduce_all`` / ``map2_reduce_all``
      (``_vec_sum``, Vectorized<float>'s lanes: ``cpu_host.rowwise_moments_lanes``), the images added in float;
    * "channels_last": ``parallel_for`` over the positions (``cpu_host.parallel_ranges``), each thread's run summed
      in float into its buffer row, the rows added in double and stored as float;
    * "strided" (the generic loop): dotp summed in double (accscalar_t); sum(dy) is at::sum's, the engines' fp32
      sum here.

    So an eval-mode weight gradient of values near float's maximum overflows (or turns NaN) where CPU's does, and
    stays finite where CPU's double sum does (op suite ci profile: batch_norm [2, 1, 5] near_overflow gradient[1],
    _native_batch_norm_legit_no_training transposed [3, 2] gradient[1]). GpSimd programs over the streamed chunks;
    a chunk's leftover part of an image waits in ``pending``. Returns [sum, dotp] in double ([p, 2]) on the contiguous
    and generic paths, whose accscalar_t (double) CPU forms grad_weight = dotp * invstd in (finite where a float dotp
    is not) and, on the contiguous path, grad_mean = sum / n; None on the channels-last path."""
    p = blk.p
    lanes, tree = cpu_host.rowwise_moments_lanes(), cpu_host.cpu_capability() != "DEFAULT"
    image = count // max(batch, 1)
    threads, ranges = cpu_host.parallel_ranges(count)
    state = {"pending": None, "seen": 0}
    acc = nc.sbuf_tile((p, 2 * max(len(ranges), 1)), F64)  # [sum | dotp] partials, per thread where threaded
    nc.vector.memset(acc, 0.0)
    if path == "strided":  # at::sum(grad_out): the engines' fp32 sum
        total = _row_reduce(nc, blk, 0, "add")
        nc.vector.tensor_copy(gsum, total)
        nc.release(total)
    chunks = len(blk.chunks)
    for j, (_, (tdy, tx)) in enumerate(blk.each(0, 1)):
        a = state["seen"]

        def program(o, dy_, x_, m_, a=a, last=j == chunks - 1):
            with np.errstate(all="ignore"):
                d = dy_.astype(FP32, copy=False)
                prod = (x_.astype(FP32, copy=False) - m_) * d
                if path == "strided":
                    o[:, 1] = o[:, 1] + prod.astype(np.float64).sum(axis=1)
                    return
                if path == "channels_last":
                    f = d.shape[1]
                    cen = x_.astype(FP32, copy=False) - m_
                    for k, (lo, hi) in enumerate(ranges):
                        lo, hi = max(lo, a), min(hi, a + f)
                        if lo < hi:
                            run = np.concatenate([o[:, 2 * k:2 * k + 1].astype(FP32), d[:, lo - a:hi - a]], axis=1)
                            o[:, 2 * k] = np.cumsum(run, axis=1, dtype=FP32)[:, -1]
                            # dotp + (x - mean) * dy: one fma per position where the host fuses (a product beyond
                            # float's range then carries its sign into the sum instead of an inf - inf NaN)
                            acc_d = o[:, 2 * k + 1].astype(FP32)
                            for i in range(lo - a, hi - a):
                                acc_d = fma32(cen[:, i], d[:, i], acc_d)
                            o[:, 2 * k + 1] = acc_d
                    return
                both = np.concatenate([d, prod], axis=0)  # [2p, f]: dy and the products, one pass
                if state["pending"] is not None:
                    both = np.concatenate([state["pending"], both], axis=1)
                whole = both.shape[1] - both.shape[1] % image if not last else both.shape[1]
                for i0 in range(0, whole, image):
                    r = _vec_sum(both[:, i0:i0 + image], lanes, tree)
                    o[:, 0] = o[:, 0] + r[:p]  # accscalar_t: each image's float sum added in double
                    o[:, 1] = o[:, 1] + r[p:]
                state["pending"] = both[:, whole:].copy()

        state["seen"] += tdy.shape[1]
        nc.gpsimd.run("bn_backward_sums", program, (acc,), (tdy, tx, m), elements=2 * tdy.data.size, factor=3.0)

    def finish(o_sum, o_dotp, s_):
        with np.errstate(all="ignore"):
            if path == "channels_last":
                tot_s, tot_d = np.zeros(p), np.zeros(p)
                for k in range(len(ranges)):
                    tot_s, tot_d = tot_s + s_[:, 2 * k], tot_d + s_[:, 2 * k + 1]
                vals = (tot_s, tot_d)
            else:
                vals = (s_[:, 0], s_[:, 1])
            if path != "strided":
                o_sum[...] = vals[0].astype(FP32).reshape(o_sum.shape)
            o_dotp[...] = vals[1].astype(FP32).reshape(o_dotp.shape)

    nc.gpsimd.run("bn_backward_totals", finish, (gsum, dotp), (acc,), elements=2 * p)
    if path == "channels_last":
        nc.release(acc)
        return None
    sums64 = nc.sbuf_tile((p, 2), F64)  # [sum, dotp] as CPU keeps them, in double (the generic loop's sum unused)

    def keep(o, s_):
        o[...] = s_[:, 0:2]

    nc.gpsimd.run("bn_sums64", keep, (sums64,), (acc,), elements=2 * p)
    nc.release(acc)
    return sums64


def _bn_backward_layout(dy: np.ndarray, x: np.ndarray) -> str:
    """Which of CPU's batch-norm backward kernels (dy, x) of any dtype take (batch_norm_backward_cpu_template): both
    contiguous in one memory format go to the fused kernels, the contiguous one per image for an image size above
    1 ("contiguous"), the channels-last one otherwise ("channels_last"); anything else the generic loop
    ("strided")."""
    image = x.size // max(x.shape[0] * x.shape[1], 1)
    if x.flags.c_contiguous and dy.flags.c_contiguous:
        return "contiguous" if image != 1 else "channels_last"
    cl = [0, 2, 3, 1] if x.ndim == 4 else [0, 2, 3, 4, 1] if x.ndim == 5 else None
    if cl is not None and x.transpose(cl).flags.c_contiguous and dy.transpose(cl).flags.c_contiguous:
        return "channels_last"
    return "strided"


def _bn_train_grad_input(nc, res: Tile, tdy: Tile, tx: Tile, nm: Tile, k: Tile, gm: Tile, inv: Tile,
                         wt: Tile | None, generic: bool) -> None:
    """Training-mode grad_input of one tile into ``res`` in CPU's order on each path, from k = dotp * invstd *
    invstd / n and grad_mean (per row): gi = (x - mean) * k, then (dy - grad_mean - gi) * invstd * w, left to right,
    each step in float, the result rounded once to the output's dtype. In the fused kernels (contiguous, channels
    last; batch_norm_kernel.cpp, built per CPU capability) the compiler contracts (dy - grad_mean) - gi into one
    multiply-add where the host fuses (``fma32``); the generic loop (a strided input, Normalization.cpp, built for
    the baseline ISA) rounds each step, and stores gi into grad_input before its second pass reads it, so for a
    reduced-float input gi is rounded to that dtype first. An earlier form, (dy - gi) * (invstd * w) -
    grad_mean * invstd * w, overflowed to NaN where CPU's stays finite (op suite ci profile: batch_norm [2, 1]
    with a near-overflow weight, gradient[0]: invstd * w overflowed first) and kept a bfloat16 gi in float
    (thousands of ULP where dy - grad_mean cancels)."""
    cen = nc.sbuf_tile(tdy.shape, FP32)
    nc.scalar.activation(cen, tx, "identity", bias=nm)  # x - mean
    diff = nc.sbuf_tile(tdy.shape, FP32)
    if generic:
        gi = cen if res.dtype == FP32 else nc.sbuf_tile(tdy.shape, res.dtype)  # grad_input's dtype
        nc.vector.tensor_scalar(gi, cen, "multiply", k, dtype=FP32)
        nc.vector.scalar_tensor_tensor(diff, tdy, "subtract", gm, "subtract", gi, dtype=FP32)
    else:
        nc.vector.tensor_scalar(diff, tdy, "subtract", gm, dtype=FP32)  # dy - grad_mean

        def contracted(o, c_, k_, t_):  # (dy - grad_mean) - (x - mean) * k, one rounding where the host fuses
            o[...] = fma32(-c_, k_, t_)

        nc.gpsimd.run("bn_dx_fma", contracted, (diff,), (cen, k, diff), elements=tdy.data.size)
    if wt is None:
        nc.vector.tensor_scalar(res, diff, "multiply", inv, dtype=FP32)
    else:
        nc.vector.tensor_scalar(res, diff, "multiply", inv, dtype=FP32, op1="multiply", scalar1=wt)


def backward_program(nc, dy: np.ndarray, x: np.ndarray, dx: np.ndarray | None, arrays: dict, train: bool,
                     eps: float) -> None:
    """native_batch_norm_backward's tile program on HBM arrays, inside a launch: ``dy``/``x``/``dx`` (N, C,
    *spatial; ``dx`` None where not asked for); ``arrays``: the [C] arrays by name ("mean"/"stat": the saved mean
    and invstd in training, the running mean and var in evaluation; "w"; "dw"/"db": the parameter gradients
    asked for), None or missing where absent. The eager kernel and the compiler's ``batch_norm_backward`` step
    (compiler/opaque_cnn.py) both run it."""
    c = x.shape[1]
    count = x.size // c
    spatial = list(x.shape[2:])
    ks = {}
    for name in ("mean", "stat", "w", "dw", "db"):
        if arrays.get(name) is not None:
            ks[name] = len(ks), arrays[name]
    cf = [1, 0] + list(range(2, x.ndim))
    kr = [dy.transpose(cf), x.transpose(cf)] + ([dx.transpose(cf)] if dx is not None else [])
    g = _Grid([c], [x.shape[0]] + spatial, kr=kr, k=[v for _, v in ks.values()])
    DY, X = g.kr[0], g.kr[1]
    path = _bn_backward_path(dy, x)
    generic = _bn_backward_layout(dy, x) == "strided"  # CPU's generic loop (any dtype): _bn_train_grad_input

    def view(name, blk):
        return _at(g.k[ks[name][0]], blk.rsl)

    for blk in _blocks(nc, g, [DY, X]):
        p = blk.p
        mark = nc.mark()
        m = _load_scalars(nc, view("mean", blk), p)
        inv = _load_scalars(nc, view("stat", blk), p)
        if not train:  # CPU: invstd = 1 / std::sqrt(running_var + eps) in double (eps is a double), then float
            var, inv = inv, _row_scalar(nc, p)

            def invstd64(o_inv, v):
                o_inv[...] = 1.0 / np.sqrt(v.astype(np.float64) + eps)

            with np.errstate(all="ignore"):
                nc.gpsimd.run("bn_eval_invstd", invstd64, (inv,), (var,), elements=p, factor=4.0)
        nm = _row_scalar(nc, p)
        nc.vector.tensor_scalar(nm, m, "multiply", -1.0, dtype=FP32)
        gsum, dotp = _row_scalar(nc, p), _row_scalar(nc, p)  # sum(dy), sum((x - mean) * dy)
        sums64 = None
        if path is not None:
            sums64 = _bn_backward_sums(nc, blk, m, gsum, dotp, path, x.shape[0], count)
        for j, (_, (tdy, tx)) in enumerate(blk.each(0, 1) if path is None else ()):
            inner = nc.mark()
            cen = nc.sbuf_tile(tdy.shape, FP32)
            nc.scalar.activation(cen, tx, "identity", bias=nm)
            nc.vector.tensor_tensor(cen, cen, tdy, "multiply", dtype=FP32)
            a1 = gsum if j == 0 else _row_scalar(nc, p)
            a2 = dotp if j == 0 else _row_scalar(nc, p)
            nc.vector.tensor_reduce(a1, tdy, "add", dtype=FP32)
            nc.vector.tensor_reduce(a2, cen, "add", dtype=FP32)
            if j:
                _combine(nc, gsum, a1, "add", FP32)
                _combine(nc, dotp, a2, "add", FP32)
            nc.release_to(inner)
        if "dw" in ks:
            t = _row_scalar(nc, p)
            if sums64 is not None:  # CPU's double dotp (contiguous, generic loop) * invstd in double, rounded once
                def weight_grad(o, s64, i):
                    with np.errstate(all="ignore"):
                        o[...] = (s64[:, 1:2] * i.astype(np.float64)).astype(FP32)

                nc.gpsimd.run("bn_weight_grad64", weight_grad, (t,), (sums64, inv), elements=p)
            else:
                nc.vector.tensor_tensor(t, dotp, inv, "multiply", dtype=FP32)
            _store_scalars(nc, view("dw", blk), t)
        if "db" in ks:
            _store_scalars(nc, view("db", blk), gsum)
        if dx is not None:
            wt = _load_scalars(nc, view("w", blk), p) if "w" in ks else None
            DX = g.kr[2]
            if train:  # CPU's order on every path (_bn_train_grad_input)
                k = _row_scalar(nc, p)
                nc.vector.tensor_tensor(k, dotp, inv, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(k, k, inv, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(k, k, "divide", float(count), dtype=FP32)
                gm = _row_scalar(nc, p)
                if path == "contiguous":  # scalar_t grad_mean = sum / N: the double sum's quotient, rounded once
                    def grad_mean64(o, s64):
                        o[...] = (s64[:, 0:1] / float(count)).astype(FP32)

                    nc.gpsimd.run("bn_grad_mean64", grad_mean64, (gm,), (sums64,), elements=p)
                else:
                    nc.vector.tensor_scalar(gm, gsum, "divide", float(count), dtype=FP32)
            for ch, (tdy, tx) in blk.each(0, 1):
                inner = nc.mark()
                res = nc.sbuf_tile(tdy.shape, DX.dtype)
                if train:
                    _bn_train_grad_input(nc, res, tdy, tx, nm, k, gm, inv, wt, generic)
                elif "w" in ks:  # CPU's eval kernel: (dy * invstd) * w, each product rounded to fp32
                    scaled = nc.sbuf_tile(tdy.shape, FP32)
                    nc.scalar.activation(scaled, tdy, "identity", scale=inv)
                    nc.scalar.activation(res, scaled, "identity", scale=wt)
                else:
                    nc.scalar.activation(res, tdy, "identity", scale=inv)
                blk.store(DX, ch, res)
                nc.release_to(inner)
        nc.release_to(mark)


# Generated out= wrappers (CompositeExplicitAutograd) that call the functional kernels above and copy.
for _op, _target in (("aten::native_batch_norm_backward.out", "aten::native_batch_norm_backward"),
                     ("aten::_native_batch_norm_legit_no_training.out", "aten::_native_batch_norm_legit")):
    TABLE.serves(_op, _target)
