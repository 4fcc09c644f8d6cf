"""Ops of three operands: where, masked_fill (selection) and addcmul, addcdiv, lerp (ternary arithmetic).

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``, consecutive
elements along the free axis), each of the three operands broadcast to the output and DMA'd into a tile
of the same shape (host scalars memset into one: ``loop._as_tile``). where and masked_fill are one
VectorE ``select`` per tile. CPU computes the arithmetic ones in opmath (fp32 for every float dtype, the
dtype itself for integers) and its vectorized float loops use fused multiply-adds: addcmul is
fma(value * t1, t2, self) and lerp fma(coeff, end - start, base) with one rounding. No fixed-function
engine rounds a multiply-add once, so that step runs on GpSimd (``loop._fma``, common.fma32); everything
else is VectorE. lerp computes CPU's vector formula on the elements its vector loop covers and its scalar
formula elsewhere (``loop._vector_split``).

numpy reference of each op: the ALU table of engine/isa.py and common.fma32.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_impl.engine import Tile
from device_impl.engine.dtypes import FP32
from device_impl.kernels import cpu_host, scalars
from device_impl.kernels.common import (
    SCALAR_TYPE_NAMES,
    TYPE_META_NAMES,
    broadcast_shape,
    cast_scalar,
    check_scalar_fits,
    elementwise,
    is_device_tensor,
    numpy_compute,
    result_type,
    scalar_of,
)
from device_impl.kernels.elementwise.loop import BOOL, _as_tile, _fma, _refuse, _tiles, _vector_split
from device_impl.kernels.registry import register_family


# --- selection -------------------------------------------------------------------

def _where_meta(a: dict) -> tuple:
    c, x, y = a["condition"], a["self"], a["other"]
    if c.dtype not in (torch.bool, torch.uint8):
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{SCALAR_TYPE_NAMES[c.dtype]}")
    return broadcast_shape(c, x, y), result_type(x, y), (c, x, y)


def _where_compute(out: torch.Tensor, a: dict) -> None:
    c, x, y = a["condition"], a["self"], a["other"]
    cd = numpy_compute(result_type(x, y))

    def emit(nc, o, tc, tx, ty):
        tx = _as_tile(nc, tx, tc, cd)
        ty = _as_tile(nc, ty, tc, cd)
        nc.vector.select(o, tc, tx, ty)

    elementwise("where", out, (c, x, y), emit, common_dtype=result_type(x, y), promoted=(1, 2))


register_family("where", _where_compute, _where_meta, overloads=("self", "self_out"))


def _masked_fill_meta(a: dict) -> tuple:
    x, mask, value = a["self"], a["mask"], a["value"]
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype "
                           f"{str(mask.dtype).replace('torch.', '')}")
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.dim()} dimension(s).")
    # The mask broadcasts against self; in place, a mask that would grow self is refused (as CPU).
    return broadcast_shape(x, mask), x.dtype, (x, mask)


def _masked_fill_compute(out: torch.Tensor, a: dict) -> None:
    x, mask, value = a["self"], a["mask"], a["value"]
    if not is_device_tensor(value):
        check_scalar_fits(scalar_of(value), x.dtype)
    cd = numpy_compute(x.dtype)
    operands = (x, mask, value)

    def emit(nc, o, tx, tm, tv):
        tv = _as_tile(nc, tv, tx, cd)
        nc.vector.select(o, tm, tv, tx)

    elementwise("masked_fill", out, operands, emit, common_dtype=x.dtype, promoted=(2,))


register_family("masked_fill", _masked_fill_compute, _masked_fill_meta)


# --- ternary arithmetic: addcmul, addcdiv, lerp ----------------------------------

def _opmath_scalar(name: str, value: Any, common: torch.dtype):
    """CPU's ``value.to<opmath_t>()`` (``scalars.checked_convert``): float32 for float16/bfloat16/float32;
    for integers the value truncated (2.7 -> 2) and wrapped into the dtype. Out-of-range values raise as c10 does."""
    opmath = scalars.opmath_dtype(common)
    v = scalars.checked_convert(value, opmath)
    return float(np.float32(v)) if opmath == torch.float32 else cast_scalar(v, common)


def _meta_ternary(*names: str):
    def meta(a: dict) -> tuple:
        operands = tuple(a[n] for n in names)
        return broadcast_shape(*operands), result_type(*operands), operands

    return meta


def _addcmul_compute(out: torch.Tensor, a: dict) -> None:
    x, t1, t2 = a["self"], a["tensor1"], a["tensor2"]
    common = result_type(x, t1, t2)
    if common == torch.bool:
        raise _refuse("addcmul_cpu_out", common)
    value = _opmath_scalar("addcmul", a.get("value", 1), common)
    floating = common.is_floating_point
    cd = FP32 if floating else numpy_compute(common)

    def emit(nc, o, tx, ta, tb):
        tx, ta, tb = _tiles(nc, o, cd, tx, ta, tb)
        scaled = nc.sbuf_tile(o.shape, cd)
        nc.vector.tensor_scalar(scaled, ta, "multiply", value, dtype=cd)
        if floating:
            _fma(nc, o, scaled, tb, tx)
        else:  # exact with wrap: the order of integer products and sums does not matter
            nc.vector.tensor_tensor(scaled, scaled, tb, "multiply", dtype=cd)
            nc.vector.tensor_tensor(o, scaled, tx, "add", dtype=cd)

    elementwise("addcmul", out, (x, t1, t2), emit, common_dtype=common)


_ADDCDIV_INTEGER = ("Integer division with addcdiv is no longer supported, and in a future  release addcdiv will "
                    "perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
                    "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer "
                    "inputs and as (input + value * tensor1 / tensor2) for float inputs. The future addcdiv behavior "
                    "is just the latter implementation: (input + value * tensor1 / tensor2), for all dtypes.")


def _integral(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex)
    return isinstance(x, (bool, int))


def _addcdiv_meta(a: dict) -> tuple:
    if _integral(a["tensor1"]) and _integral(a["tensor2"]):
        raise RuntimeError(_ADDCDIV_INTEGER)
    # Unlike addcmul's, addcdiv's TensorIterator takes no CPU scalars (the functional and in-place
    # variants raise in PyTorch's own meta function before reaching us): out= raises the same.
    operands = (a["self"], a["tensor1"], a["tensor2"])
    host = next((t for t in operands if not is_device_tensor(t)), None)
    if host is not None:
        device = next(t.device for t in operands if is_device_tensor(t))
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{device} and {host.device}!")
    return _meta_ternary("self", "tensor1", "tensor2")(a)


def _addcdiv_compute(out: torch.Tensor, a: dict) -> None:
    x, t1, t2 = a["self"], a["tensor1"], a["tensor2"]
    common = result_type(x, t1, t2)
    value = _opmath_scalar("addcdiv", a.get("value", 1), common)

    def emit(nc, o, tx, ta, tb):  # self + (value * t1) / t2, each step rounded to fp32 (no fma on CPU here)
        tx, ta, tb = _tiles(nc, o, FP32, tx, ta, tb)
        q = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_scalar(q, ta, "multiply", value, dtype=FP32)
        nc.vector.tensor_tensor(q, q, tb, "divide", dtype=FP32)
        nc.vector.tensor_tensor(o, tx, q, "add", dtype=FP32)

    elementwise("addcdiv", out, (x, t1, t2), emit, common_dtype=common)


register_family("addcmul", _addcmul_compute, _meta_ternary("self", "tensor1", "tensor2"))
register_family("addcdiv", _addcdiv_compute, _addcdiv_meta)


def _lerp_checks(a: dict) -> None:
    x, end, weight = a["self"], a["end"], a["weight"]
    if end.dtype != x.dtype:
        raise RuntimeError(f"expected dtype {TYPE_META_NAMES[x.dtype]} for `end` but got dtype "
                           f"{TYPE_META_NAMES[end.dtype]}")
    # a 0-dim weight of another dtype is converted (TensorIterator promotion); others must match
    if isinstance(weight, torch.Tensor) and weight.dim() != 0 and weight.dtype != x.dtype:
        raise RuntimeError(f"expected dtype {TYPE_META_NAMES[x.dtype]} for `weight` but got dtype "
                           f"{TYPE_META_NAMES[weight.dtype]}")


def _lerp_meta(a: dict) -> tuple:
    _lerp_checks(a)
    x, end, weight = a["self"], a["end"], a["weight"]
    if isinstance(weight, torch.Tensor):
        return broadcast_shape(x, end, weight), result_type(x, end, weight), (x, end, weight)
    return broadcast_shape(x, end), result_type(x, end), (x, end)


def _lerp_emit(nc, o: Tile, start: Any, end: Any, weight: Any) -> None:
    """CPU's lerp_vec: |w| < 0.5 ? fma(w, end - start, start) : fma(w - 1, end - start, end)."""
    start, end = _tiles(nc, o, FP32, start, end)
    diff = nc.sbuf_tile(o.shape, FP32)
    nc.vector.tensor_tensor(diff, end, start, "subtract", dtype=FP32)
    if isinstance(weight, Tile):
        small = nc.sbuf_tile(o.shape, BOOL)
        coeff = nc.sbuf_tile(o.shape, FP32)
        base = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_unary(coeff, weight, "abs", dtype=FP32)
        nc.vector.tensor_scalar(small, coeff, "less", 0.5, dtype=FP32)
        nc.vector.tensor_scalar(coeff, weight, "subtract", 1.0, dtype=FP32)
        nc.vector.select(coeff, small, weight, coeff)
        nc.vector.select(base, small, start, end)
    else:  # one weight for every element: the branch is known (NaN takes the second, as on CPU)
        w = np.float32(weight)
        small_weight = bool(abs(w) < 0.5)
        coeff = _as_tile(nc, w if small_weight else w - np.float32(1), o, FP32)
        base = start if small_weight else end
    _fma(nc, o, coeff, diff, base)


def _lerp_scalar_emit(nc, o: Tile, start: Any, end: Any, weight: Any) -> None:
    """CPU's scalar lerp (ATen's Lerp.h), which its loop runs on non-contiguous runs and vector tails:
    |w| < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w), the multiply-adds fused where the
    host's kernels fuse (common.fma32). Differs from lerp_vec in zero signs (end = -0.0, w = 1)."""
    start, end = _tiles(nc, o, FP32, start, end)
    diff = nc.sbuf_tile(o.shape, FP32)
    nc.vector.tensor_tensor(diff, end, start, "subtract", dtype=FP32)
    neg = nc.sbuf_tile(o.shape, FP32)
    nc.vector.tensor_unary(neg, diff, "negative", dtype=FP32)
    if isinstance(weight, Tile):
        small = nc.sbuf_tile(o.shape, BOOL)
        absw = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_unary(absw, weight, "abs", dtype=FP32)
        nc.vector.tensor_scalar(small, absw, "less", 0.5, dtype=FP32)
        rest = nc.sbuf_tile(o.shape, FP32)
        nc.vector.tensor_scalar(rest, weight, "subtract", 1.0, reverse=True, dtype=FP32)
        near = nc.sbuf_tile(o.shape, FP32)
        far = nc.sbuf_tile(o.shape, FP32)
        _fma(nc, near, weight, diff, start)
        _fma(nc, far, neg, rest, end)
        nc.vector.select(o, small, near, far)
        return
    w = np.float32(weight)
    if abs(w) < 0.5:
        _fma(nc, o, _as_tile(nc, w, o, FP32), diff, start)
    else:
        _fma(nc, o, neg, _as_tile(nc, np.float32(1) - w, o, FP32), end)


def _lerp_compute(out: torch.Tensor, a: dict) -> None:
    x, end, weight = a["self"], a["end"], a["weight"]
    tensor_weight = isinstance(weight, torch.Tensor)
    common = result_type(x, end, weight) if tensor_weight else result_type(x, end)
    if not common.is_floating_point:
        raise _refuse("lerp_kernel_tensor" if tensor_weight else "lerp_kernel_scalar", common)
    tensors = (x, end, weight) if tensor_weight else (x, end)
    w = None if tensor_weight else _opmath_scalar("lerp", weight, common)
    if out.numel() == 0:
        return
    # CPU's vector lambda (lerp_vec) on full vector blocks of contiguous runs, its scalar lambda elsewhere
    for part, emit in zip(_vector_split(out, tensors, cpu_host.vector_block(common)),
                          (_lerp_emit, _lerp_scalar_emit)):
        if part is None:
            continue
        o, *ins = part
        if tensor_weight:
            elementwise("lerp", o, tuple(ins), emit, common_dtype=common)
        else:
            elementwise("lerp", o, tuple(ins), lambda nc, t, ts, te, emit=emit: emit(nc, t, ts, te, w),
                        common_dtype=common)


register_family("lerp", _lerp_compute, _lerp_meta)
