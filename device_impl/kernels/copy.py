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

import torch

from device_impl._core import C
from device_impl.dispatch import counters
from device_impl.dispatch.strict import is_strict, refuse
from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels.common import (SCALAR_TYPE_NAMES, broadcast_shape, cast_scalar, check_scalar_fits, elementwise,
                                        scalar_of)
from device_impl.kernels.registry import register_family



def device_cast(dst: torch.Tensor, src: torch.Tensor) -> None:
    """dst <- src converted to dst's dtype; both on the same neuron core (src broadcast to dst)."""
    plain = not (src.is_conj() or src.is_neg() or dst.is_conj() or dst.is_neg())
    if plain and src.dtype in COMPUTE_DTYPES and dst.dtype in COMPUTE_DTYPES:
        # PyTorch's RuntimeError for a src that does not broadcast to dst (numpy's broadcast_to would raise
        # ValueError inside the launch)
        shape = broadcast_shape(dst, src)
        if shape != tuple(dst.shape):
            raise RuntimeError(f"output with shape {list(dst.shape)} doesn't match the broadcast shape {list(shape)}")
        counters.record("aten::copy_", counters.NATIVE_SLOT)
        elementwise("cast", dst, (src,), lambda nc, o, t: nc.vector.tensor_copy(o, t))
        return
    if is_strict():
        raise refuse("aten::copy_")
    counters.record("aten::copy_", counters.FALLBACK_SLOT)
    counters.warn_fallback_once("aten::copy_")
    C.host_view(dst).copy_(C.host_view(src))


C.set_cast_hook(device_cast)


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
    check_scalar_fits(number, out.dtype)
    number = cast_scalar(number, out.dtype)  # e.g. -1 into uint8 is 255, as the C++ conversion wraps
    elementwise("fill", out, (), lambda nc, o: nc.vector.memset(o, number))


register_family("fill", _fill_compute, _fill_meta)


def _zero_compute(out: torch.Tensor, a: dict) -> None:
    elementwise("zero", out, (), lambda nc, o: nc.vector.memset(o, 0))


register_family("zero", _zero_compute, lambda a: (tuple(a["self"].shape), a["self"].dtype, (a["self"],)))

__all__ = ["device_cast", "SCALAR_TYPE_NAMES"]

# PyTorch's composite kernels of these allocate on the device and call copy_ (csrc + device_cast).
for _op in ("aten::copy", "aten::_to_copy", "aten::clone", "aten::contiguous"):
    TABLE.serves(_op, "aten::copy_")
