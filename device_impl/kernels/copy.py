"""Conversions and fills: the arithmetic half of copy_, and fill_/zero_.

The C++ copy_ (csrc/aten_ops.cpp) moves bytes; whenever a copy also
converts (dtype cast, conjugate or negative view) it calls ``device_cast``
here with two tensors on one core. Casts between compute dtypes run on
VectorE (round to nearest-even into narrower floats, truncation toward
zero into integers). Conversions involving float64/complex, or resolving
conjugate/negative views, have no engine path and take the counted CPU
fallback on host aliases of the device memory.
"""

from __future__ import annotations

import math

import torch

from device_impl._core import C
from device_impl.dispatch import counters
from device_impl.dispatch.strict import is_strict, refuse
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels.common import SCALAR_TYPE_NAMES, elementwise, scalar_of
from device_impl.kernels.registry import register_family

_CTYPE = {torch.int8: "int8_t", torch.uint8: "uint8_t", torch.int16: "int16_t", torch.int32: "int", torch.int64:
          "int64_t", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16", torch.float32: "float"}
_FLOAT_MAX = {torch.float16: 65504.0, torch.bfloat16: 3.3895313892515355e38, torch.float32: 3.4028234663852886e38}


def device_cast(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- src converted to dst's dtype; both on the same neuron core (src broadcast to dst)."""
    plain = not (src.is_conj() or src.is_neg() or dst.is_conj() or dst.is_neg())
    if plain and src.dtype in COMPUTE_DTYPES and dst.dtype in COMPUTE_DTYPES:
        counters.record("aten::copy_", counters.NATIVE_SLOT)
        elementwise("cast", dst, (src,), lambda nc, o, t: nc.vector.tensor_copy(o, t))
        return
    if is_strict():
        raise refuse("aten::copy_")
    counters.record("aten::copy_", counters.FALLBACK_SLOT)
    counters.warn_fallback_once("aten::copy_")
    C.host_view(dst).copy_(C.host_view(src))


C.set_cast_hook(device_cast)


def _check_fill_value(value, dtype: torch.dtype) -> None:
    if isinstance(value, bool) or dtype == torch.bool or isinstance(value, complex):
        return
    if dtype.is_floating_point and dtype in _FLOAT_MAX:
        if math.isfinite(value) and abs(value) > _FLOAT_MAX[dtype] * (1 + 2**-8):
            raise RuntimeError(f"value cannot be converted to type {_CTYPE[dtype]} without overflow")
    elif not dtype.is_floating_point and not dtype.is_complex:
        info = torch.iinfo(dtype)
        if isinstance(value, float) and not math.isfinite(value):
            raise RuntimeError(f"value cannot be converted to type {_CTYPE[dtype]} without overflow")
        if not info.min <= value <= info.max:
            raise RuntimeError(f"value cannot be converted to type {_CTYPE[dtype]} without overflow")


def _fill_meta(a: dict) -> tuple:
    self, value = a["self"], a["value"]
    if isinstance(value, torch.Tensor) and value.dim() != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.dim()} "
                           f"dimensions.")
    return tuple(self.shape), self.dtype, (self,)


def _fill_compute(out: torch.Tensor, a: dict) -> None:
    value = a["value"]
    if isinstance(value, torch.Tensor) and value.device.type == "neuron":
        elementwise("fill", out, (value,), lambda nc, o, t: nc.vector.tensor_copy(o, t))
        return
    number = scalar_of(value)
    _check_fill_value(number, out.dtype)
    elementwise("fill", out, (), lambda nc, o: nc.vector.memset(o, number))


register_family("fill", _fill_compute, _fill_meta)


def _zero_compute(out: torch.Tensor, a: dict) -> None:
    elementwise("zero", out, (), lambda nc, o: nc.vector.memset(o, 0))


register_family("zero", _zero_compute, lambda a: (tuple(a["self"].shape), a["self"].dtype, (a["self"],)))

__all__ = ["device_cast", "SCALAR_TYPE_NAMES"]
