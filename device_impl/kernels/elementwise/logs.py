"""Transcendentals of NN losses and normalisations: logaddexp, logaddexp2, xlogy, hypot, logit.

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``); both operands (broadcast,
or a host scalar as an immediate) stream through the same tiles. exp/exp2/log1p/log on ScalarE (the exp is the
float32 exp CPU's vector loop calls on this host, ``cpu_host.vector_exp``), hypot on VectorE's ALU, the rest on
VectorE in fp32, rounded once on store for bfloat16/float16 (CPU's reduced-float kernels convert to float).

CPU's formulas (ATen's BinaryOpsKernel.cpp):

* logaddexp: ``a == b and |a| == inf ? a : max(a, b) + log1p(exp(-|a - b|))``
* logaddexp2: the same with ``exp2`` and ``log1p(...) * (1 / ln 2)``, the multiply-add rounded once where CPU's
  kernels fuse it (``cpu_host.fused_multiply_add``)
* xlogy: ``isnan(y) ? NaN : x == 0 ? 0 : x * log(y)`` (integers and bools promoted to float; for bfloat16/float16
  log(y) rounded to the dtype before the product, as c10's log of those types returns the dtype)
* hypot: ``hypot(a, b)``
* logit: ``log(x / (1 - x))``, x first clamped to ``[eps, 1 - eps]`` (NaN kept) when eps >= 0, eps read in the
  dtype and ``1 - eps`` rounded to it (integers and bools promoted to float); for bfloat16/float16 every step
  (``1 - x``, the quotient, the log) rounded to the dtype, as CPU's kernel gives in torch 2.13 (measured: log of a
  quotient computed in float would differ by up to 2 ULP of bfloat16)

CPU's log1p, log and hypot are SLEEF's in its vector loops and libm's in its scalar ones, ScalarE's and VectorE's
an ULP or so from either: the dtype tolerances hold that (harness/specs.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from device_impl.engine import Tile
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import broadcast_shape, elementwise, numpy_dtype, promote, result_type
from device_impl.kernels.elementwise.loop import BOOL, _FLOATS, _fma, _refuse, binary
from device_impl.kernels.registry import promotes_to_result, register_family


def _tile(nc, like: Tile, value: Any) -> Tile:
    if isinstance(value, Tile):
        return value
    tile = nc.sbuf_tile(like.shape, FP32)
    nc.vector.memset(tile, value)
    return tile


def _meta(first: str, second: str, int_to_float: bool = False):
    def meta(a: dict) -> tuple:
        x, y = a[first], a[second]
        dtype = promote(x, y, int_to_float=True) if int_to_float else result_type(x, y)
        return broadcast_shape(x, y), dtype, (x, y)

    return meta


def _logaddexp(packet: str, base2: bool):
    def compute(out: torch.Tensor, a: dict) -> None:
        x, y = a["self"], a["other"]
        common = result_type(x, y)
        if common not in _FLOATS:
            raise _refuse(f"{packet}_cpu", common)
        exp = "exp2" if base2 else f"exp_{cpu_host.vector_exp()}"
        inv_ln2 = float(np.float32(1 / math.log(2)))
        fused = cpu_host.fused_multiply_add()

        def emit(nc, o, p, q):
            p, q = _tile(nc, o, p), _tile(nc, o, q)
            m = nc.sbuf_tile(o.shape, FP32)
            d = nc.sbuf_tile(o.shape, FP32)
            same_inf = nc.sbuf_tile(o.shape, BOOL)
            other = nc.sbuf_tile(o.shape, BOOL)
            nc.vector.tensor_tensor(m, p, q, "maximum", dtype=FP32)
            nc.vector.tensor_tensor(d, p, q, "subtract", dtype=FP32)
            nc.scalar.activation(d, d, "abs")
            nc.scalar.activation(d, d, exp, scale=-1.0)
            nc.scalar.activation(d, d, "log1p")
            if base2 and fused:  # m + d * (1 / ln 2) rounded once, as CPU's AVX2/AVX-512 kernels
                _fma(nc, d, d, _tile(nc, o, inv_ln2), m)
            else:
                if base2:
                    nc.vector.tensor_scalar(d, d, "multiply", inv_ln2, dtype=FP32)
                nc.vector.tensor_tensor(d, m, d, "add", dtype=FP32)
            nc.vector.tensor_tensor(same_inf, p, q, "equal", dtype=FP32)
            nc.vector.tensor_unary(other, p, "isinf", dtype=FP32)
            nc.vector.tensor_tensor(same_inf, same_inf, other, "logical_and")
            nc.vector.select(o, same_inf, p, d)

        elementwise(packet, out, (x, y), emit, common_dtype=common)

    return compute


register_family("logaddexp", _logaddexp("logaddexp", False), _meta("self", "other"), promotes=promotes_to_result(_meta("self", "other")))
register_family("logaddexp2", _logaddexp("logaddexp2", True), _meta("self", "other"), promotes=promotes_to_result(_meta("self", "other")))


def _xlogy_compute(out: torch.Tensor, a: dict) -> None:
    x, y = a["self"], a["other"]
    common = promote(x, y, int_to_float=True)
    # c10's std::log of a BFloat16/Half returns the dtype: CPU's scalar kernel rounds log(y) to it before the product
    narrow = numpy_dtype(common) if common in (torch.bfloat16, torch.float16) else FP32

    def emit(nc, o, p, q):
        q = _tile(nc, o, q)
        r = nc.sbuf_tile(o.shape, FP32)
        log = nc.sbuf_tile(o.shape, narrow)
        zero = nc.sbuf_tile(o.shape, FP32)
        mask = nc.sbuf_tile(o.shape, BOOL)
        nc.scalar.activation(log, q, "log")
        binary(nc, r, p, log, "multiply", FP32)
        nc.vector.memset(zero, 0.0)
        if isinstance(p, Tile):
            nc.vector.tensor_scalar(mask, p, "equal", 0, dtype=FP32)
            nc.vector.select(r, mask, zero, r)
        elif p == 0:
            nc.vector.tensor_copy(r, zero)
        nc.vector.tensor_unary(mask, q, "isnan", dtype=FP32)
        nc.vector.select(o, mask, q, r)

    elementwise("xlogy", out, (x, y), emit, common_dtype=common)


register_family("xlogy", _xlogy_compute, _meta("self", "other", int_to_float=True), promotes=promotes_to_result(_meta("self", "other", int_to_float=True)))


def _hypot_compute(out: torch.Tensor, a: dict) -> None:
    x, y = a["self"], a["other"]
    common = result_type(x, y)
    if common not in _FLOATS:
        raise _refuse("hypot_cpu", common)
    elementwise("hypot", out, (x, y), lambda nc, o, p, q: binary(nc, o, p, q, "hypot", FP32), common_dtype=common)


register_family("hypot", _hypot_compute, _meta("self", "other"), promotes=promotes_to_result(_meta("self", "other")))


def _logit_compute(out: torch.Tensor, a: dict) -> None:
    x, eps = a["self"], a.get("eps")
    common = promote(x, int_to_float=True)
    narrow = numpy_dtype(common)
    eps_v = -1.0 if eps is None else float(np.float32(eps).astype(narrow))  # eps.to<scalar_t>()
    bounds = None
    if eps_v >= 0:
        bounds = (eps_v, float(np.float32(np.float32(1) - np.float32(eps_v)).astype(narrow)))  # scalar_t(1) - eps

    step = narrow if common in (torch.bfloat16, torch.float16) else FP32  # each step rounded to the dtype there

    def emit(nc, o, t):
        v = nc.sbuf_tile(o.shape, step)
        d = nc.sbuf_tile(o.shape, step)
        nc.vector.tensor_copy(v, t)
        if bounds is not None:
            nc.vector.tensor_scalar(v, v, "maximum", bounds[0], dtype=FP32)  # NaN-propagating, as vec::clamp
            nc.vector.tensor_scalar(v, v, "minimum", bounds[1], dtype=FP32)
        nc.vector.tensor_scalar(d, v, "subtract", 1.0, reverse=True, dtype=FP32)
        nc.vector.tensor_tensor(d, v, d, "divide", dtype=FP32)
        nc.scalar.activation(o, d, "log")

    elementwise("logit", out, (x,), emit, common_dtype=common)


def _logit_meta(a: dict) -> tuple:
    x = a["self"]
    return tuple(x.shape), promote(x, int_to_float=True), (x,)


register_family("logit", _logit_compute, _logit_meta)
