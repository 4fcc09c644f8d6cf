"""linalg_cross (torch.linalg.cross, torch.cross with a dim) as a GpSimd program over [rows, 3] tiles.

CPU's ``cross_kernel`` (CrossKernel.cpp) is a scalar loop in the dtype: ``r0 = a1 * b2 - a2 * b1`` and its
rotations. Compiled for AVX2/AVX-512 the compiler contracts that into one fused multiply-add,
``fma(a1, b2, -(a2 * b1))``; the DEFAULT kernels round the product first (``common.fma32`` asks
``cpu_host.fused_multiply_add``). bfloat16/float16 operators round every product and the difference to the dtype
(c10's operators return the dtype), so nothing is fused there. No fixed-function engine fuses a multiply-add, so
the arithmetic is a GpSimd program; operands are broadcast to the result's shape, the crossed dim last.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.engine import launch
from device_impl.engine.dtypes import FP32, numpy_dtype
from device_impl.kernels.common import FLOAT_DTYPES, fma32, hbm, promote
from device_impl.kernels.reduction.tiles import P, _at, _boxes, _Grid, _wrap
from device_impl.kernels.registry import register_family

_STEPS = 3  # GpSimd element-steps per output element: two products and a difference


def _cross_meta(a: dict) -> tuple:
    x, y = a["self"], a["other"]
    if x.dim() != y.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    dim = _wrap(a.get("dim", -1), x.dim())
    if x.shape[dim] != 3 or y.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {a.get('dim', -1)} must have length 3. Got "
                           f"{x.shape[dim]} and {y.shape[dim]}")
    shape = torch.broadcast_shapes(tuple(x.shape), tuple(y.shape))
    return tuple(shape), promote(x, y), (x, y)


def _program(dtype: np.dtype):
    narrow = dtype != FP32

    def program(o, a, b):
        x, y = a.astype(FP32), b.astype(FP32)
        with np.errstate(all="ignore"):
            for i, (j, k) in enumerate(((1, 2), (2, 0), (0, 1))):
                if narrow:  # each product and the difference rounded to the dtype, as c10's operators
                    p = (x[:, j] * y[:, k]).astype(dtype).astype(FP32)
                    q = (x[:, k] * y[:, j]).astype(dtype).astype(FP32)
                    o[:, i] = (p - q).astype(dtype)
                else:
                    o[:, i] = fma32(x[:, j], y[:, k], -(x[:, k] * y[:, j]))

    return program


def _cross_compute(out: torch.Tensor, a: dict) -> None:
    x, y = a["self"], a["other"]
    nd = out.dim()
    dim = _wrap(a.get("dim", -1), nd)
    shape = tuple(out.shape)
    cd = numpy_dtype(out.dtype)
    perm = [d for d in range(nd) if d != dim] + [dim]
    views = [np.broadcast_to(hbm(t), shape).transpose(perm) for t in (x, y)] + [hbm(out).transpose(perm)]
    g = _Grid(list(views[0].shape[:-1]), [3], kr=views)
    X, Y, O = g.kr
    with launch("linalg_cross", out.device.index) as nc:
        for _, p, rsl in _boxes(g.kshape, P):
            mark = nc.mark()
            tiles = []
            for src in (X, Y):
                t = nc.sbuf_tile((p, 3), src.dtype)
                nc.dma.load(t, _at(src, rsl))
                if src.dtype != cd:
                    c = nc.sbuf_tile((p, 3), cd)
                    nc.vector.tensor_copy(c, t)
                    t = c
                tiles.append(t)
            res = nc.sbuf_tile((p, 3), cd)
            nc.gpsimd.run("cross", _program(cd), (res,), tuple(tiles), elements=3 * p, factor=_STEPS)
            if O.dtype != cd:
                cast = nc.sbuf_tile((p, 3), O.dtype)
                nc.vector.tensor_copy(cast, res)
                res = cast
            nc.dma.store(_at(O, rsl), res)
            nc.release_to(mark)


register_family("linalg_cross", _cross_compute, _cross_meta, dtypes=FLOAT_DTYPES)
