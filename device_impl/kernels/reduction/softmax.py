"""Softmax, log_softmax, _safe_softmax and their gradients.

Tiling: every dimension but ``dim`` on partitions (``_along``: <= 128 rows per block), ``dim``
along the free axis in CHUNK chunks. Row blocks that fit SBUF stay resident (``tiles._blocks``):
the row max on VectorE, exp(x - max) and its row sum fused on ScalarE (kept for the output
pass), then the output scaled by 1 / sum on whichever of ScalarE / VectorE frees up first
(log_softmax: (x - max) - log(sum)). Longer rows stream twice: a running max and a rescaled
running sum in one pass (``_online_max_sum``), then the output pass. _safe_softmax gives 0 for
rows of only -inf. The gradients take one pass for the row sum (softmax: sum(g * y);
log_softmax: sum(g)) and one for the result. Their multiply-adds round as CPU's (``common.fma32``, the
host's rule): softmax along a dim that is not the last sums g * y one column after another as ATen's
``_vec_softmax_backward`` does, ``sum = fma(g, y, sum)`` (so a product beyond float's range cannot make an
inf - inf NaN there); log_softmax forms ``g - exp(y) * sum`` as one fused step (its zero signs are the
exact result's: -0.0 where it is a negative below half the smallest denormal), with the exp CPU's loop calls
on this host (``engine.expf``, ScalarE's ``exp_sleef_u10``/``exp_libm``: SLEEF's expf_u10 in the AVX2/AVX-512
vector loops, libm's expf under DEFAULT and in a loop's scalar tail; ``cpu_host.vector_exp``/``scalar_exp``
ask the running torch), since an exp one ULP off makes CPU's exact zero a tiny difference. The sums and
multiply-adds run on GpSimd.

Under adaptive eager softmax and log_softmax are queued as a ``tiles.RowKernel``, whose input
tiles device_impl.eager may compute from the launches producing them.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from device_impl.dispatch.table import HOOKS
from device_impl.engine import Tile, expf, launch
from device_impl.engine.dtypes import FP32, numpy_dtype
from device_impl.kernels import cpu_host
from device_impl.kernels.common import SCALAR_TYPE_NAMES, check_out, fma32, hbm, new_output
from device_impl.kernels.reduction.tiles import (
    BOOL, RowKernel, Source, _Block, _FLOATS, _FMA_STEPS, _Grid, _QueuedRowKernel, _blocks, _combine, _kernel,
    _memset, _refuse, _row_reduce, _row_scalar, _wrap,
)


def _along(x: torch.Tensor, dim: int, arrays: Sequence[torch.Tensor]) -> _Grid:
    """A grid with every other dimension kept (rows) and ``dim`` along the free axis, over same-shape tensors."""
    nd = x.dim()
    kdims = [d for d in range(nd) if d != dim]
    order = kdims + ([dim] if nd else [])
    return _Grid([x.shape[d] for d in kdims], [x.shape[dim]] if nd else [],
                 kr=[hbm(t).transpose(order) for t in arrays])


def _softmax_rows(name: str, x: torch.Tensor, out: torch.Tensor, dim: int, log: bool, safe: bool = False,
                  source: Source | None = None, queue: bool = False) -> None:
    """``queue``: the caller launches nothing else, so adaptive eager may queue this launch and feed
    its input from the launches producing it (see RowKernel)."""
    if out.numel() == 0:
        return
    if queue and HOOKS.submit is not None:
        kernel = RowKernel(name, x, (out,), dim if dim == x.dim() - 1 else None, (dim, log, safe), _softmax_launch)
        HOOKS.submit(f"aten::_{name}", _QueuedRowKernel(kernel), out, {"self": x})
        return
    elem = numpy_dtype(out.dtype) if out.dtype != x.dtype and not (x.dtype in _FLOATS and
                                                                   out.dtype == torch.float32) else None
    g = _along(x, dim, [x, out])
    X, O = g.kr
    # log_softmax of bfloat16/float16 along the last dim: ATen's _vec_log_softmax_lastdim holds the row's
    # sum of exps and its log in scalar_t buffers, so both are rounded to x's dtype (x = max gives exactly
    # 0 where the float64 result is -0.0038); other dims accumulate in float (_vec_logsoftmax).
    narrow_lastdim = numpy_dtype(x.dtype) if (log and x.dtype in (torch.bfloat16, torch.float16)
                                              and out.dtype == x.dtype and dim == x.dim() - 1) else None
    with launch(name, out.device.index) as nc:
        for blk in _blocks(nc, g, [X], extra=0 if log else 4, source=source):
            p = blk.p

            def cast(t: Tile) -> Tile:
                if elem is None:
                    return t
                c = nc.sbuf_tile(t.shape, elem)
                nc.vector.tensor_copy(c, t)
                return c

            if blk.resident:
                m = _row_reduce(nc, blk, 0, "maximum", cast if elem is not None else None)
                total = None
            else:  # rows too long for SBUF: running max and rescaled running sum in one pass
                m, total = _online_max_sum(nc, blk, cast)
            masked = None
            if safe:  # rows of only -inf give 0 instead of nan
                masked = _row_scalar(nc, p, BOOL)
                nc.vector.tensor_scalar(masked, m, "equal", -np.inf, dtype=FP32)
                zero = _memset(nc, (p, 1), FP32, 0.0)
                nc.vector.select(m, masked, zero, m)
                nc.release(zero)
            neg = _row_scalar(nc, p)
            nc.vector.tensor_scalar(neg, m, "multiply", -1.0, dtype=FP32)
            exps: list[Tile] = []
            if total is None:
                total = _row_scalar(nc, p)
                for j, (_, (t,)) in enumerate(blk.each(0)):
                    mark = nc.mark()
                    src = cast(t)
                    e = nc.sbuf_tile(t.shape, FP32)
                    part = total if j == 0 else _row_scalar(nc, p)
                    nc.scalar.activation(e, src, "exp", bias=neg, accumulate=part)
                    if j:
                        _combine(nc, total, part, "add", FP32)
                    if not log:  # keep exp(x - max) for the output pass
                        if j:
                            nc.release(part)
                        if src is not t:
                            nc.release(src)
                        exps.append(e)
                    else:
                        nc.release_to(mark)
            scale = _row_scalar(nc, p)
            if log:
                if narrow_lastdim:  # CPU's reduced-float lastdim kernel keeps sum and log(sum) in x's dtype
                    _round_in_place(nc, total, narrow_lastdim)
                nc.scalar.activation(scale, total, "log")
                if narrow_lastdim:
                    _round_in_place(nc, scale, narrow_lastdim)
            else:
                nc.vector.tensor_unary(scale, total, "reciprocal", dtype=FP32)
                if masked is not None:
                    zero = _memset(nc, (p, 1), FP32, 0.0)
                    nc.vector.select(scale, masked, zero, scale)
                    nc.release(zero)
            for j, (ch, (t,)) in enumerate(blk.each(0)):
                mark = nc.mark()
                res = nc.sbuf_tile(t.shape, O.dtype)
                if log:  # (x - max) - log(sum), rounded once per step as CPU
                    shifted = nc.sbuf_tile(t.shape, FP32)
                    nc.scalar.activation(shifted, cast(t), "identity", bias=neg)
                    nc.vector.tensor_tensor(res, shifted, scale, "subtract", dtype=FP32)
                else:
                    if exps:
                        e = exps[j]
                    else:
                        e = nc.sbuf_tile(t.shape, FP32)
                        nc.scalar.activation(e, cast(t), "exp", bias=neg)
                    # exp(x - max) * (1 / sum) on whichever engine frees up first
                    if nc.choose(lambda: nc.timeline.free["scalar"] <= nc.timeline.free["vector"]):
                        nc.scalar.activation(res, e, "identity", scale=scale)
                    else:
                        nc.vector.tensor_tensor(res, e, scale, "multiply", dtype=FP32)
                blk.store(O, ch, res)
                nc.release_to(mark)
            for e in exps:
                nc.release(e)
            for t in (scale, total, neg) + ((masked,) if masked is not None else ()) + (m,):
                nc.release(t)


def _round_in_place(nc, t: Tile, dtype) -> None:
    """Round an fp32 tile to ``dtype`` and back (a store to and load from a buffer of that dtype)."""
    narrow = nc.sbuf_tile(t.shape, dtype)
    nc.vector.tensor_copy(narrow, t)
    nc.vector.tensor_copy(t, narrow)
    nc.release(narrow)


def _softmax_launch(k: "RowKernel", source: Source | None) -> None:
    dim, log, safe = k.params
    _softmax_rows("log_softmax" if log else "softmax", k.x, k.outs[0], dim, log, safe, source)


def _online_max_sum(nc, blk: _Block, cast: Callable) -> tuple[Tile, Tile]:
    """One streaming pass: the row max m and sum(exp(x - m)), the running sum rescaled by
    exp(m_old - m_new) whenever the max grows. Chunks of only -inf contribute 0 (not nan)."""
    p = blk.p
    m = _memset(nc, (p, 1), FP32, -np.inf)
    total = _memset(nc, (p, 1), FP32, 0.0)
    for _, (t,) in blk.each(0):
        mark = nc.mark()
        src = cast(t)
        cm, nm = _row_scalar(nc, p), _row_scalar(nc, p)
        nc.vector.tensor_reduce(cm, src, "maximum", dtype=FP32)
        nc.vector.tensor_tensor(nm, m, cm, "maximum", dtype=FP32)
        none_yet = _row_scalar(nc, p, BOOL)
        nc.vector.tensor_scalar(none_yet, m, "equal", -np.inf, dtype=FP32)
        zero = _memset(nc, (p, 1), FP32, 0.0)
        factor = _row_scalar(nc, p)  # exp(m_old - m_new), 0 while nothing finite has been seen
        nc.vector.tensor_tensor(factor, m, nm, "subtract", dtype=FP32)
        nc.scalar.activation(factor, factor, "exp")
        nc.vector.select(factor, none_yet, zero, factor)
        nc.vector.tensor_tensor(total, total, factor, "multiply", dtype=FP32)
        bias = _row_scalar(nc, p)  # -m_new, or 0 while the max is -inf
        nc.vector.tensor_scalar(none_yet, nm, "equal", -np.inf, dtype=FP32)
        nc.vector.select(bias, none_yet, zero, nm)
        nc.vector.tensor_scalar(bias, bias, "multiply", -1.0, dtype=FP32)
        e = nc.sbuf_tile(t.shape, FP32)
        part = _row_scalar(nc, p)
        nc.scalar.activation(e, src, "exp", bias=bias, accumulate=part)
        nc.vector.tensor_tensor(total, total, part, "add", dtype=FP32)
        nc.vector.tensor_copy(m, nm)
        nc.release_to(mark)
    return m, total


def _softmax_common(name: str, log: bool, a: dict) -> torch.Tensor:
    x, out = a["self"], a["out"]
    dim = _wrap(a["dim"], x.dim())
    if a.get("half_to_float"):
        raise RuntimeError(f"{'log_' if log else ''}softmax with half to float conversion is not supported on CPU")
    if x.dtype not in _FLOATS:
        raise _refuse("log_softmax_lastdim_kernel_impl" if log else "softmax_kernel_impl", x.dtype)
    check_out(out, tuple(x.shape), x.dtype, [x], exact_dtype=True)
    _softmax_rows(name, x, out, dim, log, queue=True)
    return out


@_kernel("aten::_softmax.out", serves=("aten::_softmax",), submits=True)
def _softmax_out(a: dict) -> torch.Tensor:
    return _softmax_common("softmax", False, a)


@_kernel("aten::_log_softmax.out", serves=("aten::_log_softmax",), submits=True)
def _log_softmax_out(a: dict) -> torch.Tensor:
    return _softmax_common("log_softmax", True, a)


@_kernel("aten::_safe_softmax")
def _safe_softmax(a: dict) -> torch.Tensor:
    x, dtype = a["self"], a.get("dtype")
    dim = _wrap(a["dim"], x.dim())
    rdtype = dtype if dtype is not None else x.dtype
    if rdtype not in _FLOATS:
        raise _refuse("softmax_kernel_impl", rdtype)
    out = new_output(tuple(x.shape), rdtype, x)
    _softmax_rows("safe_softmax", x, out, dim, log=False, safe=True)
    return out


def _softmax_backward(name: str, log: bool, a: dict, out_name: str) -> torch.Tensor:
    grad, y, out = a["grad_output"], a["output"], a[out_name]
    dim = _wrap(a["dim"], grad.dim())
    input_dtype = a["input_dtype"]
    if grad.dtype != y.dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[y.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[grad.dtype]}")
    if grad.dtype != input_dtype and not (grad.dtype == torch.float16 and input_dtype == torch.float32):
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[grad.dtype]} but found "
                           f"{SCALAR_TYPE_NAMES[input_dtype]}")
    if tuple(grad.shape) != tuple(y.shape):
        raise RuntimeError(f"The size of tensor a ({grad.shape}) must match the size of tensor b ({y.shape})")
    if grad.dtype not in _FLOATS:
        raise _refuse(name, grad.dtype)
    check_out(out, tuple(grad.shape), grad.dtype, [grad, y], exact_dtype=True)
    if out.numel() == 0:
        return out
    with launch(name, out.device.index) as nc:
        backward_program(nc, hbm(grad), hbm(y), hbm(out), dim, log, cpu_host.fused_multiply_add())
    return out


def backward_program(nc, grad: np.ndarray, y: np.ndarray, out: np.ndarray, dim: int, log: bool,
                     fused: bool) -> None:
    """softmax's (``log``: log_softmax's) backward tile program on HBM arrays of one shape, inside a launch: the
    eager kernels and the compiler's ``softmax_backward`` step (compiler/opaque.py cuts _softmax_backward_data
    and _log_softmax_backward_data whole) both run it, so the compiled gradient keeps CPU's fused multiply-adds
    (which StableHLO cannot say) and is the eager kernel's, bit for bit and instruction for instruction. ``fused``:
    whether CPU's vectorized loops fuse those multiply-adds (``cpu_host.fused_multiply_add``; not under the
    DEFAULT kernels, where each product is rounded first)."""
    nd = grad.ndim
    kdims = [d for d in range(nd) if d != dim]
    order = kdims + ([dim] if nd else [])
    g = _Grid([grad.shape[d] for d in kdims], [grad.shape[dim]] if nd else [],
              kr=[a.transpose(order) for a in (grad, y, out)])
    G, Y, O = g.kr
    # ATen's softmax_backward_cpu_out: the last dim (a 0-dim tensor is viewed as [1]) takes the lastdim kernel,
    # whose sum of g * y is a vector reduction; any other dim _vec_softmax_backward's column-by-column fma chain
    chained = not log and dim != max(nd, 1) - 1
    for blk in _blocks(nc, g, [G, Y]):
        p = blk.p
        total = _row_scalar(nc, p)  # softmax: sum(g * y); log_softmax: sum(g)
        for j, (_, (tg, ty)) in enumerate(blk.each(0, 1)):
            mark = nc.mark()
            if chained:
                _fma_chain(nc, total, tg, ty, first=j == 0, fused=fused)
                nc.release_to(mark)
                continue
            part = total if j == 0 else _row_scalar(nc, p)
            if log:
                nc.vector.tensor_reduce(part, tg, "add", dtype=FP32)
            else:
                prod = nc.sbuf_tile(tg.shape, FP32)
                nc.vector.tensor_tensor(prod, tg, ty, "multiply", dtype=FP32)
                nc.vector.tensor_reduce(part, prod, "add", dtype=FP32)
            if j:
                _combine(nc, total, part, "add", FP32)
            nc.release_to(mark)
        tail = _scalar_tail(blk.row0, blk.p, grad.shape, dim, grad.dtype) if log else None
        for ch, (tg, ty) in blk.each(0, 1):
            mark = nc.mark()
            res = nc.sbuf_tile(tg.shape, O.dtype)
            if log:  # g - exp(y) * sum with CPU's exp and CPU's multiply-add
                _log_softmax_gradient(nc, res, ty, total, tg, tail, fused)
            else:  # y * (g - sum(g * y))
                tmp = nc.sbuf_tile(tg.shape, FP32)
                nc.vector.tensor_tensor(tmp, tg, total, "subtract", dtype=FP32)
                nc.vector.tensor_tensor(res, ty, tmp, "multiply", dtype=FP32)
            blk.store(O, ch, res)
            nc.release_to(mark)
        nc.release(total)


def _scalar_tail(row0: int, p: int, shape: Sequence[int], dim: int, dtype: np.dtype) -> np.ndarray | None:
    """Which of the rows ``row0 .. row0 + p`` (every dim but ``dim``, row-major) CPU's log_softmax backward
    computes in its scalar tail, with libm's exp rather than its vector loop's: along a dim that is not the
    last, ``_vec_log_softmax_backward`` runs the inner dimensions (those after ``dim``) in chunks of a multiple
    of ``Vectorized<scalar_t>::size()`` (cpu_host.softmax_backward_vector), so the last ``inner % size``
    positions of each inner run are the tail. None where no row is (or the two exps agree on this host);
    along the last dim vec::map2 runs every element through the vector lambda."""
    nd = len(shape)
    if nd < 2 or dim == nd - 1:
        return None
    size = cpu_host.softmax_backward_vector(_TORCH_FLOATS[np.dtype(dtype)])
    inner = int(np.prod(shape[dim + 1:]))
    if size is None or inner % size == 0:
        return None
    rows = (np.arange(row0, row0 + p) % inner) >= inner - inner % size
    return rows[:, None] if rows.any() else None


def _log_softmax_gradient(nc, out: Tile, ty: Tile, total: Tile, tg: Tile, tail: np.ndarray | None,
                          fused: bool) -> None:
    """out = g - exp(y) * total ([p, 1] per-row total) as CPU's loop computes it. exp is the function that loop
    calls on this host (cpu_host.vector_exp: ScalarE's ``exp_sleef_u10`` or ``exp_libm``; ScalarE's plain exp,
    numpy's float32 loop, is neither, and an exp one ULP off turns CPU's exact zero into a tiny difference, a
    -0.0 in float16); the ``tail`` rows, which CPU runs in its scalar loop, take cpu_host.scalar_exp instead, on
    GpSimd. The multiply-add rounds once where CPU's kernels fuse (``fused``), else the product first."""
    e = nc.sbuf_tile(ty.shape, FP32)
    nc.scalar.activation(e, ty, "exp_" + cpu_host.vector_exp())
    if tail is not None and cpu_host.scalar_exp() != cpu_host.vector_exp():
        scalar = expf.EXPF[cpu_host.scalar_exp()]

        def program(o, y_, e_):
            o[...] = np.where(tail, scalar(y_.astype(np.float32)), e_)

        nc.gpsimd.run("log_softmax_backward_tail_exp", program, (e,), (ty, e),
                      elements=int(np.count_nonzero(tail)) * ty.shape[1], factor=_EXPF_STEPS)
    if fused:  # g - exp(y) * sum, one fused rounding as CPU's vectorized loop
        _fnma_rows(nc, out, e, total, tg)
    else:  # the DEFAULT kernels: the product rounded, then the difference
        nc.vector.tensor_tensor(e, e, total, "multiply", dtype=FP32)
        nc.vector.tensor_tensor(out, tg, e, "subtract", dtype=FP32)


def _fnma_rows(nc, out: Tile, e: Tile, total: Tile, tg: Tile) -> None:
    """out = g - e * total ([p, 1] per-row total) rounded once, on GpSimd (no fixed-function engine fuses)."""

    def program(o, e_, s_, g_):
        o[...] = fma32(-e_, np.broadcast_to(s_, e_.shape), g_)

    nc.gpsimd.run("log_softmax_backward_fma", program, (out,), (e, total, tg), elements=e.data.size,
                  factor=_FMA_STEPS)


# GpSimd element-steps per float32 exp of CPU's libm or SLEEF (about 16 fp32 operations: range reduction,
# polynomial, power-of-two scaling, range selects)
_EXPF_STEPS = 16

_TORCH_FLOATS = {np.dtype(numpy_dtype(t)): t for t in _FLOATS}


def _fma_chain(nc, total: Tile, tg: Tile, ty: Tile, first: bool, fused: bool) -> None:
    """total = fma(g[:, c], y[:, c], total) for each column c in order (from 0 when ``first``), on GpSimd: the
    sum of g * y as _vec_softmax_backward accumulates it, each product exact inside its multiply-add (``fused``;
    else, as CPU's DEFAULT kernels, each product rounded to float32 before it is added)."""

    def program(acc, g_, y_, *prev):
        s = np.zeros((g_.shape[0], 1), np.float32) if first else prev[0].astype(np.float32)
        for c in range(g_.shape[1]):
            if fused:
                s = fma32(g_[:, c:c + 1], y_[:, c:c + 1], s)
            else:
                s = s + g_[:, c:c + 1].astype(np.float32) * y_[:, c:c + 1].astype(np.float32)
        acc[...] = s

    nc.gpsimd.run("softmax_backward_fma", program, (total,), (tg, ty) + (() if first else (total,)),
                  elements=tg.data.size, factor=_FMA_STEPS)


@_kernel("aten::_softmax_backward_data.out", serves=("aten::_softmax_backward_data",))
def _softmax_backward_out(a: dict) -> torch.Tensor:
    return _softmax_backward("softmax_backward", False, a, "grad_input")


@_kernel("aten::_log_softmax_backward_data.out", serves=("aten::_log_softmax_backward_data",))
def _log_softmax_backward_out(a: dict) -> torch.Tensor:
    return _softmax_backward("log_softmax_backward", True, a, "out")
