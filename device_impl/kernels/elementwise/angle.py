"""angle of real tensors on VectorE: CPU's ``angle_impl`` for a real scalar is ``isnan(a) ? a : (a < 0 ? pi : 0)``
with pi in the result dtype (c10::pi<BFloat16> is 3.140625), so -0.0 gives +0.0 and NaN itself; integer and bool
inputs give float32 (0 or pi). Complex tensors are not in the kernel's dtypes and keep the CPU fallback.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import elementwise, numpy_dtype, promote
from device_impl.kernels.elementwise.loop import BOOL
from device_impl.kernels.registry import register_family


def _angle_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    rd = numpy_dtype(promote(x, int_to_float=True))
    pi = np.float64(math.pi).astype(np.float32).astype(rd)  # c10::pi<T>: the float constant, cast to T

    def emit(nc, o, t) -> None:
        negative = nc.sbuf_tile(t.shape, BOOL)
        nc.vector.tensor_scalar(negative, t, "less", 0, dtype=FP32 if t.dtype != np.float64 else t.dtype)
        value = nc.sbuf_tile(t.shape, rd)
        nc.vector.tensor_scalar(value, negative, "multiply", pi, dtype=rd)  # pi or +0.0
        if t.dtype.kind == "f" or t.dtype.kind == "V":
            nan = nc.sbuf_tile(t.shape, BOOL)
            nc.vector.tensor_unary(nan, t, "isnan")
            nc.vector.select(o, nan, t, value)
        else:
            nc.vector.tensor_copy(o, value)

    elementwise("angle", out, (x,), emit)


def _angle_meta(a: dict) -> tuple:
    x = a["self"]
    return tuple(x.shape), promote(x, int_to_float=True), (x,)


register_family("angle", _angle_compute, _angle_meta)
