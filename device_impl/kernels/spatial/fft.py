"""Real FFTs as DFT matmuls on TensorE: _fft_r2c (rfft, rfftn, fft and ihfft of real input) and _fft_c2r
(irfft, irfftn, hfft).

Complex data lives as (real, imag) pairs of float32 views (the .real/.imag views of complex64 HBM buffers, or
halves of stacked scratch rows). A pass transforms one axis: the data is staged as rows [re | im] (transform
axis last), multiplied by a twiddle matrix built on device (GpSimd iota for k*t mod n, ScalarE sin/cos,
VectorE masks pinning sin/cos to exact 0 at multiples of pi/2), and the result rows [Re | Im] are viewed back
along the axis. The normalisation scale is applied as the alpha of the last pass's matmul (PSUM
evacuation). Outputs take the strides of MKL's _exec_fft, as on CPU.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import SCALAR_TYPE_NAMES, hbm
from device_impl.kernels.matmul import _matmul_into
from device_impl.kernels.spatial.tiles import BOOL, FREE, I64, P, _Scratch, _copy_cast, _fill, _split


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


def _wrap_dims(dims, ndim, op: str):
    """``dims`` wrapped into [0, ndim). An empty list raises CPU's RuntimeError (its kernels read ``dim.back()``);
    one out of range, where CPU's MKL path reads past the shape (undefined), raises PyTorch's IndexError instead of
    an internal one."""
    if not len(dims):
        raise RuntimeError(f"{op}: dim is empty (CPU: ArrayRef: attempted to access back() of empty list); pass at "
                           f"least one dimension to transform")
    wrapped = []
    for d in dims:
        d = int(d)
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, "
                             f"{max(ndim, 1) - 1}], but got {d})")
        wrapped.append(d + ndim if d < 0 else d)
    return wrapped


def _check_signal(op: str, sizes, dims, all_dims) -> None:
    """A transformed dim of length 0: torch.fft rejects it before the kernel with this RuntimeError, and CPU's
    kernel raises a RuntimeError for it too (MKL's "Inconsistent configuration parameters"). An empty batch (a dim
    not transformed of length 0; ``all_dims``: every dim the op transforms): what CPU's FFT library does with it
    (cpu_host.fft_rejects_empty_batch)."""
    for d in dims:
        if sizes[d] == 0:
            raise RuntimeError(f"{op}: Invalid number of data points (0) specified along dim {d}")
    if any(n == 0 for i, n in enumerate(sizes) if i not in all_dims) and cpu_host.fft_rejects_empty_batch():
        raise RuntimeError(f"MKL FFT error: Intel oneMKL DFTI ERROR: Inconsistent configuration parameters ({op}: "
                           f"a batch of no signals, shape {list(sizes)}, which CPU's MKL FFT refuses)")


@TABLE.native("aten::_fft_r2c", dtypes=_FFT_DTYPES)
def fft_r2c(self, dim, normalization, onesided):
    if self.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError(f"MKL FFT doesn't support tensors of type: {SCALAR_TYPE_NAMES[self.dtype]}")
    if not self.dtype.is_floating_point:
        raise RuntimeError("expected a real input tensor")
    dims = _wrap_dims(dim, self.dim(), "_fft_r2c")
    sizes = list(self.shape)
    _check_signal("_fft_r2c", sizes, dims, dims)
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
    dims = _wrap_dims(dim, self.dim(), "_fft_c2r")
    last = dims[-1]
    n = int(last_dim_size)
    if n <= 0:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    sizes = list(self.shape)
    _check_signal("_fft_c2r", sizes, dims[:-1], dims)
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
