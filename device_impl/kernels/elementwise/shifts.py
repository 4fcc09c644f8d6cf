"""Bit shifts: bitwise_left_shift, bitwise_right_shift and the operators ``<<``/``>>`` (``__lshift__``,
``__rshift__``, in place ``__ilshift__``, ``__irshift__``).

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``); both operands
(broadcast, or a host scalar as a memset tile) stream through the same tiles in the promoted integer dtype.
Everything is VectorE and exact: two comparisons and an ``and`` say where the count is in range, a select
puts an in-range count in the shift, one ALU shift, and a select writes what CPU writes elsewhere.

CPU's lshift/rshift kernels (BinaryOpsKernel.cpp, the same on the vector and scalar lambdas) give a count
that is negative or at least the dtype's bit width a defined result instead of C's undefined behaviour: a
left shift gives 0, a right shift of a signed dtype ``a >> (bits - 1)`` (the sign filled in: 0 or -1), of
uint8 0. The count is read in the promoted dtype (a uint8 count 255 is out of range, not -1). Floating and
bool dtypes are CPU's NotImplementedError ("lshift_cpu" / "rshift_cpu"), a bool tensor shifted by a Python
int promotes to int64 as on CPU.
"""

from __future__ import annotations

import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels.common import broadcast_shape, elementwise, numpy_dtype, result_type
from device_impl.kernels.elementwise.loop import BOOL, _refuse, _tiles
from device_impl.kernels.registry import Binder, _inplace_kernel, _sourced, promotes_to_result, register_family


def _meta(a: dict) -> tuple:
    x, y = a["self"], a["other"]
    return broadcast_shape(x, y), result_type(x, y), (x, y)


def _shift(left: bool):
    """The compute of a left (``left``) or right shift: ``out = self << other`` / ``self >> other``."""
    kernel = "lshift_cpu" if left else "rshift_cpu"
    op = "left_shift" if left else "right_shift"

    def compute(out: torch.Tensor, a: dict) -> None:
        x, y = a["self"], a["other"]
        common = result_type(x, y)
        if common.is_floating_point or common.is_complex or common == torch.bool:
            raise _refuse(kernel, common)
        cd = numpy_dtype(common)
        bits = cd.itemsize * 8
        sign_fill = not left and cd.kind == "i"  # out of range: a >> (bits - 1)

        def emit(nc, o, tx, ty):
            tx, ty = _tiles(nc, o, cd, tx, ty)
            valid = nc.sbuf_tile(o.shape, BOOL)
            below = nc.sbuf_tile(o.shape, BOOL)
            nc.vector.tensor_scalar(valid, ty, "greater_equal", 0, dtype=cd)
            nc.vector.tensor_scalar(below, ty, "less", bits, dtype=cd)
            nc.vector.tensor_tensor(valid, valid, below, "logical_and")
            fill = nc.sbuf_tile(o.shape, cd)
            nc.vector.memset(fill, bits - 1 if sign_fill else 0)
            count = nc.sbuf_tile(o.shape, cd)
            nc.vector.select(count, valid, ty, fill)
            if sign_fill:
                nc.vector.tensor_tensor(o, tx, count, op, dtype=cd)
                return
            shifted = nc.sbuf_tile(o.shape, cd)
            nc.vector.tensor_tensor(shifted, tx, count, op, dtype=cd)
            nc.vector.select(o, valid, shifted, fill)  # fill holds 0 here

        elementwise(op, out, (x, y), emit, common_dtype=common)

    return compute


def _register(packet: str, operator: str, left: bool) -> None:
    compute = _shift(left)
    register_family(packet, compute, _meta, promotes=promotes_to_result(_meta))
    register_family(operator, compute, _meta, promotes=promotes_to_result(_meta))  # __lshift__.Tensor/.Scalar; their out= reach those
    inplace = operator.replace("__", "__i", 1)  # __ilshift__: not ``__lshift___``, so named here
    for ov in getattr(torch.ops.aten, inplace).overloads():
        op = f"aten::{inplace}.{ov}"
        binder = Binder.of(getattr(getattr(torch.ops.aten, inplace), ov))
        TABLE.native(op, dtypes=COMPUTE_DTYPES)(_sourced(_inplace_kernel(op, binder, compute, _meta), compute))


_register("bitwise_left_shift", "__lshift__", left=True)
_register("bitwise_right_shift", "__rshift__", left=False)
