"""The factories that compute values: arange, linspace, logspace, eye (and what full/zeros reach).

Tiling: flat [p <= 128, f] tiles of the result; GpSimdE writes an index tile (iota) and
the values follow CPU's formulas exactly, including its rounding:

* arange(int)       exact int64 on GpSimd iota;
* arange(float32)   CPU computes in double, and its vector loop rounds the base of
                    each 8-element block to float first; (b)f16 compute in float with
                    fused multiply-adds. Neither fp64 nor fma exists on the fixed-function
                    engines, so these run as GpSimd programs (general-purpose cores);
* linspace          float32: fma in float (GpSimd program); (b)f16: every operation
                    rounded to the dtype (VectorE, exact); integers: fma in double (GpSimd);
* logspace          pow in double on a double exponent (GpSimd program);
* eye               rows on partitions, columns along the free axis: iota + compare on
                    the blocks that hold the diagonal, a zero tile stored elsewhere.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch

from device_impl._compat import torch_at_least
from device_impl.engine import launch
from device_impl.engine.dtypes import FLOAT_DTYPES, FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import FREE_MAX, P, flat_tiles, fma32, fma64, hbm, numpy_dtype, row_tiles, scalar_of
from device_impl.kernels.random.tiles import F64, I64, fmt, native, refuse, serve
from device_impl.kernels.scalars import checked_convert, scalar_fill, wrap_int64


# --- arange ---------------------------------------------------------------------------

_VECTOR_BYTES = 32  # the Vectorized<T> width CPU's arange kernel runs with


def _cpu_chunks(n: int) -> int:
    """Chunk length of CPU's parallel_for over [0, n) at GRAIN_SIZE (its vector loop restarts at each chunk)."""
    _, ranges = cpu_host.parallel_ranges(n, cpu_host.GRAIN_SIZE)
    return ranges[0][1] - ranges[0][0]


def _arange_program(dtype: torch.dtype, start: float, step: float, n: int):
    """CPU's arange kernel, element by element: a scalar loop and a vector loop whose block base is rounded
    to the dtype (Vectorized<T>::arange(base, step)), restarted at each parallel_for chunk."""
    target = numpy_dtype(dtype)
    width = _VECTOR_BYTES // target.itemsize
    chunk = _cpu_chunks(n)
    wide = dtype == torch.float32  # accumulate in double; (b)f16 accumulate in float with fma

    def program(out, idx):
        i = idx.reshape(-1)
        b = (i // chunk) * chunk
        m = np.minimum(n, b + chunk) - b
        vector = (i - b) < (m // (2 * width)) * (2 * width)
        i0 = b + ((i - b) // width) * width
        if wide:
            scalar = np.float64(start) + np.float64(step) * i.astype(F64)
            base = (np.float64(start) + np.float64(step) * i0.astype(F64)).astype(FP32).astype(F64)
            block = base + (i - i0).astype(F64) * np.float64(step)
            value = np.where(vector, block, scalar).astype(FP32)
        else:
            s, st = np.float32(start), np.float32(step)
            scalar = fma32(np.full(i.shape, st), i.astype(FP32), s)
            base = fma32(np.full(i.shape, st), i0.astype(FP32), s).astype(target).astype(FP32)
            block = fma32((i - i0).astype(FP32), np.full(i.shape, st), base)
            value = np.where(vector, block, scalar)
        out.reshape(-1)[:] = value.astype(target)

    return program


# torch 2.14 sizes an int64 arange with a floating-point start, end or step in double, as every other
# dtype (arange(0, 5, 1.5) has 4 elements, arange(0, 1, 0.1) is ten zeros); 2.13 sized it from the
# int64-converted bounds (5 elements; step 0 raised ValueError). Found by `python -m harness compat
# --torch 2.13.0 --torch 2.14.1`; tests/kernels/test_random_kernels.py checks either against the CPU.
_INT64_ARANGE_SIZE_IN_DOUBLE = torch_at_least(2, 14)


@native("aten::arange.start_out")
def _arange_out(a: dict) -> torch.Tensor:
    start, end, step, out = a["start"], a["end"], a["step"], a["out"]
    start, end, step = (scalar_of(v) for v in (start, end, step))
    dtype = out.dtype
    if dtype == torch.bool:
        raise refuse("arange_cpu", dtype)
    # Bounds are validated in double, then start/step (and, for int64, end) convert to the accumulate type.
    dstart, dend, dstep = float(start), float(end), float(step)
    if not (dstep > 0 or dstep < 0):
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(dstart) and math.isfinite(dend)):
        raise RuntimeError(f"unsupported range: {fmt(dstart)} -> {fmt(dend)}")
    if not ((dstep > 0 and dend >= dstart) or (dstep < 0 and dend <= dstart)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype.is_floating_point:
        acc = torch.float64 if dtype == torch.float32 else torch.float32
        xstart, xstep = checked_convert(start, acc), checked_convert(step, acc)
    else:
        xstart, xstep = checked_convert(start, torch.int64), checked_convert(step, torch.int64)
    if dtype == torch.int64 and not (_INT64_ARANGE_SIZE_IN_DOUBLE and any(isinstance(v, float)
                                                                             for v in (start, end, step))):
        xend = checked_convert(end, torch.int64)
        if xstep == 0:
            raise ValueError("step must be nonzero")
        sgn = (xstep > 0) - (xstep < 0)
        num = wrap_int64(xend - xstart + xstep - sgn)  # int64 arithmetic, wrapping as the C++ does
        quotient = abs(num) // abs(xstep)
        size_d = float(quotient if (num >= 0) == (xstep > 0) else -quotient)
    else:
        quotient = (dend - dstart) / dstep
        size_d = float(math.ceil(quotient)) if math.isfinite(quotient) else quotient
    if not (size_d >= 0 and size_d <= float(2 ** 63 - 1)):
        raise RuntimeError("invalid size, possible overflow?")
    size = int(size_d)
    if out.numel() != size:
        if out.numel() > 0:
            warnings.warn(f"The number of elements in the out tensor of shape {list(out.shape)} is {out.numel()} which "
                          f"does not match the computed number of elements {size}. Note that this may occur as a "
                          f"result of rounding error. The out tensor will be resized to a tensor of shape ({size},).",
                          UserWarning, stacklevel=3)
        out.resize_((size,))
    if size == 0:
        return out
    view = hbm(out)
    with launch("arange", out.device.index) as nc:
        for s0, s1, p, f in flat_tiles(size):
            mark = nc.mark()
            result = nc.sbuf_tile((p, f), view.dtype)
            if not dtype.is_floating_point:  # exact int64 with wrap, cast (wrapping) into the dtype
                nc.gpsimd.iota(result, base=wrap_int64(xstart + xstep * s0), partition_step=wrap_int64(xstep * f),
                               free_step=xstep)
            else:
                idx = nc.sbuf_tile((p, f), I64)
                nc.gpsimd.iota(idx, base=s0, partition_step=f, free_step=1)
                nc.gpsimd.run("arange", _arange_program(dtype, xstart, xstep, size), (result,), (idx,),
                              elements=p * f, factor=4.0)
            nc.dma.store_flat(view, s0, s1, result)
            nc.release_to(mark)
    return out


# --- linspace / logspace ----------------------------------------------------------------

def _space_out(out: torch.Tensor, steps: int) -> None:
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if out.numel() != steps:
        out.resize_((steps,))


def _fill_value(out: torch.Tensor, value) -> None:
    """fill_(value) of a one-element result with fill_'s conversion rules (``scalars.scalar_fill``:
    a half or bfloat16 overflows to inf; float32 raises)."""
    if out.dtype.is_floating_point:
        with np.errstate(over="ignore"):
            value = np.float32(scalar_fill(value, out.dtype))
    elif out.dtype != torch.bool:
        value = checked_convert(value, out.dtype)
    view = hbm(out)
    with launch("fill", out.device.index) as nc:
        for s0, s1, p, f in flat_tiles(out.numel()):
            mark = nc.mark()
            t = nc.sbuf_tile((p, f), view.dtype)
            nc.vector.memset(t, value)
            nc.dma.store_flat(view, s0, s1, t)
            nc.release_to(mark)


def _index_tiles(nc, lo: int, hi: int):
    """Flat tiles over [lo, hi) with an int64 index tile (GpSimd iota) for each."""
    for s0, s1, p, f in flat_tiles(hi - lo):
        mark = nc.mark()
        idx = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.iota(idx, base=lo + s0, partition_step=f, free_step=1)
        yield lo + s0, lo + s1, idx
        nc.release_to(mark)


def linspace_float32(nc, view: np.ndarray, start, end, steps: int) -> None:
    """A float32 linspace of ``steps`` (at least 2) values from ``start`` to ``end`` (float32 values) into the
    HBM ``view`` (any strides, row-major order): CPU's two halves, ``start + step * i`` below ``steps // 2`` and
    ``end - step * (steps - 1 - i)`` from there, each one fused multiply-add in float32, as a GpSimd program
    per index tile. The eager kernel's program, and the compiled step's (compiler/factories.py)."""
    s, e = np.float32(start), np.float32(end)
    step = np.float32(np.float32(e - s) / np.float32(steps - 1))
    halfway = steps // 2

    def program(res, idx):
        i = idx.reshape(-1)
        first = fma32(np.full(i.shape, step), i.astype(FP32), s)
        second = fma32(np.full(i.shape, -step), (steps - 1 - i).astype(FP32), e)
        res.reshape(-1)[:] = np.where(i < halfway, first, second)

    for s0, s1, idx in _index_tiles(nc, 0, steps):
        res = nc.sbuf_tile(idx.shape, FP32)
        nc.gpsimd.run("linspace", program, (res,), (idx,), elements=idx.data.size, factor=4.0)
        nc.dma.store_flat(view, s0, s1, res)


def linspace_program(nc, view: np.ndarray, dtype: torch.dtype, lo, hi, steps: int) -> None:
    """linspace of ``steps`` (at least 2) values from ``lo`` to ``hi`` (already converted to ``dtype``, as
    ``checked_convert`` does) into the HBM ``view`` of a ``dtype`` tensor, computed as CPU's kernel for that dtype
    computes it: float32 by ``linspace_float32``; float16/bfloat16 in the dtype's own arithmetic (every operation
    rounded to it); integers from a double step, truncated. The eager kernel's program and the compiled step's
    (compiler/factories.py), so both give CPU's bits."""
    halfway = steps // 2
    target = view.dtype
    if dtype == torch.float32:
        linspace_float32(nc, view, lo, hi, steps)
    elif dtype in FLOAT_DTYPES:  # c10::Half / BFloat16 arithmetic: every operation rounds to the dtype
        s = float(np.asarray(np.float32(lo)).astype(target))
        e = float(np.asarray(np.float32(hi)).astype(target))
        diff = float(np.asarray(np.float32(e) - np.float32(s)).astype(target))
        count = float(np.asarray(np.float32(steps - 1)).astype(target))
        step = float(np.asarray(np.float32(diff) / np.float32(count)).astype(target))
        for part, (p0, p1) in enumerate(((0, halfway), (halfway, steps))):
            if p0 == p1:
                continue
            for s0, s1, idx in _index_tiles(nc, p0, p1):
                k = idx
                if part:  # steps - idx - 1
                    k = nc.sbuf_tile(idx.shape, I64)
                    nc.vector.tensor_scalar(k, idx, "subtract", steps - 1, reverse=True, dtype=I64)
                wide = nc.sbuf_tile(idx.shape, FP32)
                nc.vector.tensor_copy(wide, k)  # int64 -> float -> half, as static_cast<Half>(int64_t)
                res = nc.sbuf_tile(idx.shape, target)
                nc.vector.tensor_copy(res, wide)
                nc.vector.tensor_scalar(res, res, "multiply", step, dtype=FP32)
                if part:
                    nc.vector.tensor_scalar(res, res, "subtract", e, reverse=True, dtype=FP32)
                else:
                    nc.vector.tensor_scalar(res, res, "add", s, dtype=FP32)
                nc.dma.store_flat(view, s0, s1, res)
    else:  # integers: step in double, start + step * idx with one rounding, truncated
        s, e = float(lo), float(hi)
        step = (float(hi) - float(lo)) / float(steps - 1)

        def program(res, idx):
            i = idx.reshape(-1).astype(F64)
            first = fma64(np.full(i.shape, step), i, np.full(i.shape, s))
            second = fma64(np.full(i.shape, -step), (steps - 1) - i, np.full(i.shape, e))
            value = np.where(idx.reshape(-1) < halfway, first, second)
            res.reshape(-1)[:] = _double_to_int(value, I64 if target == I64 else np.dtype(np.int32))

        for s0, s1, idx in _index_tiles(nc, 0, steps):
            res = nc.sbuf_tile(idx.shape, I64)
            nc.gpsimd.run("linspace", program, (res,), (idx,), elements=idx.data.size, factor=4.0)
            if target != I64:
                cast = nc.sbuf_tile(idx.shape, target)
                nc.vector.tensor_copy(cast, res)
                res = cast
            nc.dma.store_flat(view, s0, s1, res)


@native("aten::linspace.out")
def _linspace_out(a: dict) -> torch.Tensor:
    start, end, steps, out = scalar_of(a["start"]), scalar_of(a["end"]), int(a["steps"]), a["out"]
    _space_out(out, steps)
    if steps == 0:
        return out
    if steps == 1:
        _fill_value(out, start)
        return out
    dtype = out.dtype
    if dtype == torch.bool:
        raise refuse("linspace_cpu", dtype)
    lo, hi = checked_convert(start, dtype), checked_convert(end, dtype)
    with launch("linspace", out.device.index) as nc:
        linspace_program(nc, hbm(out), dtype, lo, hi, steps)
    return out


@native("aten::logspace.out")
def _logspace_out(a: dict) -> torch.Tensor:
    start, end, steps, base, out = (scalar_of(a["start"]), scalar_of(a["end"]), int(a["steps"]), float(a["base"]),
                                    a["out"])
    _space_out(out, steps)
    if steps == 0:
        return out
    dtype = out.dtype
    if steps == 1:
        _fill_value(out, _pow(base, float(start)))
        return out
    if dtype == torch.bool:
        raise refuse("logspace_cpu", dtype)
    target = numpy_dtype(dtype)
    lo, hi = checked_convert(start, dtype), checked_convert(end, dtype)
    halfway = steps // 2
    if dtype.is_floating_point:
        # CPU: scalar_t start/end; step = double(end - start) / (steps - 1) with end - start in scalar_t
        s = float(np.asarray(np.float32(lo)).astype(target))
        e = float(np.asarray(np.float32(hi)).astype(target))
        diff = float(np.asarray(np.float32(e) - np.float32(s)).astype(target))
        b = base
    else:
        s, e = int(lo), int(hi)
        diff = float(_wrap_int(e - s, dtype))  # scalar_t arithmetic
        b = base
    step = diff / (steps - 1)

    def program(res, idx):
        i = idx.reshape(-1)
        fi = i.astype(F64)
        x = np.where(i < halfway, s + step * fi, e - step * ((steps - 1) - fi))
        with np.errstate(all="ignore"):
            value = np.power(b, x)
        flat = res.reshape(-1)
        if dtype.is_floating_point:
            flat[:] = value.astype(FP32).astype(target)  # double -> float -> dtype
        else:
            flat[:] = _double_to_int(value, target)

    view = hbm(out)
    with launch("logspace", out.device.index) as nc:
        for s0, s1, idx in _index_tiles(nc, 0, steps):
            res = nc.sbuf_tile(idx.shape, target)
            nc.gpsimd.run("logspace", program, (res,), (idx,), elements=idx.data.size, factor=16.0)
            nc.dma.store_flat(view, s0, s1, res)
    return out


def _double_to_int(value: np.ndarray, target: np.dtype) -> np.ndarray:
    """static_cast<T>(double) as x86 computes it: truncation; out of range or NaN gives the minimum of the
    64-bit (int64) or 32-bit conversion (narrower integers keep the low bits of the 32-bit result)."""
    bits = 64 if target == I64 else 32
    lo, hi = -2.0 ** (bits - 1), 2.0 ** (bits - 1)
    inside = np.isfinite(value) & (value >= lo) & (value < hi)
    whole = np.where(inside, np.trunc(np.where(inside, value, 0.0)), lo).astype(np.int64)
    return whole.astype(target)


def _wrap_int(value: int, dtype: torch.dtype) -> int:
    """``value`` computed in C++ int arithmetic for ``dtype`` (small types promote to int)."""
    bits = 64 if dtype == torch.int64 else 32
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan


# --- eye ----------------------------------------------------------------------------------

@native("aten::eye.out", "aten::eye.m_out")
def _eye_out(a: dict) -> torch.Tensor:
    n, out = int(a["n"]), a["out"]
    m = int(a["m"]) if a.get("m") is not None else n
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    if tuple(out.shape) != (n, m):
        out.resize_((n, m))
    if n == 0 or m == 0:
        return out
    view = hbm(out)
    width = min(m, FREE_MAX)
    with launch("eye", out.device.index) as nc:
        zero = nc.sbuf_tile((min(n, P), width), view.dtype)
        nc.vector.memset(zero, 0)
        for r0, r1 in row_tiles(n):
            for c0 in range(0, m, width):
                c1 = min(m, c0 + width)
                rows, cols = r1 - r0, c1 - c0
                if c0 >= r1 or c1 <= r0:  # no diagonal element in this block
                    nc.dma.store(view[r0:r1, c0:c1], zero[:rows, :cols])
                    continue
                mark = nc.mark()
                diff = nc.sbuf_tile((rows, cols), np.dtype(np.int32))
                nc.gpsimd.iota(diff, base=r0 - c0, partition_step=1, free_step=-1)  # row - column
                block = nc.sbuf_tile((rows, cols), view.dtype)
                nc.vector.tensor_scalar(block, diff, "equal", 0, dtype=np.dtype(np.int32))
                nc.dma.store(view[r0:r1, c0:c1], block)
                nc.release_to(mark)
    return out


# --- overloads PyTorch's composites route to the kernels above ------------------------------

serve("aten::arange.start_out", "aten::arange", "aten::arange.start", "aten::arange.start_step", "aten::arange.out")
serve("aten::linspace.out", "aten::linspace", "aten::linspace.Tensor_Tensor", "aten::linspace.Tensor_Scalar",
      "aten::linspace.Scalar_Tensor", "aten::linspace.Tensor_Tensor_out", "aten::linspace.Tensor_Scalar_out",
      "aten::linspace.Scalar_Tensor_out")
serve("aten::logspace.out", "aten::logspace", "aten::logspace.Tensor_Tensor", "aten::logspace.Tensor_Scalar",
      "aten::logspace.Scalar_Tensor", "aten::logspace.Tensor_Tensor_out", "aten::logspace.Tensor_Scalar_out",
      "aten::logspace.Scalar_Tensor_out")
serve("aten::eye.m_out", "aten::eye.m")
serve("aten::eye.out", "aten::eye")
# empty + fill_/zero_ (kernels of the copy family)
serve("aten::fill_.Scalar", "aten::full", "aten::full.out", "aten::full_like", "aten::full_like.out",
      "aten::scalar_tensor", "aten::scalar_tensor.out", "aten::ones", "aten::ones.out", "aten::ones_like",
      "aten::ones_like.out")
serve("aten::zero_", "aten::zeros", "aten::zeros.out", "aten::zeros_like", "aten::zeros_like.out")
