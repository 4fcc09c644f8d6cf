"""native_dropout (train and eval) and native_dropout_backward.

Tiling: flat [p <= 128, f] tiles of the input in memory order (``tiles.sample`` in
training, ``tiles.elementwise_outputs`` otherwise). Training: one uniform draw per
element; VectorE writes the mask ``u < 1 - p`` and ``x * mask * (1 / (1 - p))`` (x * mask
first, so NaN * 0 stays NaN, as CPU). Backward: VectorE ``grad * mask`` rounded to their
result type, then ``* scale``.
"""

from __future__ import annotations

import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import cast_error, numpy_dtype, result_type
from device_impl.kernels.registry import _ti_restride
from device_impl.kernels.random.tiles import (
    FLOATS,
    broadcast_shapes,
    check_p,
    elementwise_outputs,
    native,
    sample,
    serve,
    tmp,
)


@native("aten::native_dropout")
def _native_dropout(a: dict) -> tuple[torch.Tensor, torch.Tensor]:
    x, p, train = a["input"], float(a["p"]), a.get("train")
    if x.numel() == 0:
        return x, torch.empty_like(x)
    if train is None or train:
        p1m = 1.0 - p
        check_p(p1m)
        scale = 0.0 if p1m == 0 else 1.0 / p1m
        if x.dtype not in FLOATS:  # input.mul(mask).mul_(scale) on an integral tensor
            raise cast_error(torch.float32, x.dtype)
        mask = torch.empty_like(x, dtype=torch.bool)
        out = torch.empty_like(x)

        def emit(nc, outs, rand, ins):
            o, m = outs
            nc.vector.tensor_scalar(m, rand[0], "less", p1m, dtype=FP32)
            kept = tmp(nc, o)
            nc.vector.tensor_tensor(kept, ins[0], m, "multiply", dtype=FP32)  # x * mask keeps NaN * 0 = NaN
            nc.vector.tensor_scalar(o, kept, "multiply", scale, dtype=FP32)

        sample("dropout", [out, mask], a.get("generator"), ["uniform"], emit, ins=(x,))
        return out, mask
    out = torch.empty_like(x)
    mask = torch.empty_like(x, dtype=torch.bool)

    def emit_eval(nc, outs, rand, ins):
        nc.vector.tensor_copy(outs[0], ins[0])
        nc.vector.memset(outs[1], True)

    elementwise_outputs("dropout_eval", [out, mask], (x,), emit_eval)
    return out, mask


@native("aten::native_dropout_backward")
def _native_dropout_backward(a: dict) -> torch.Tensor:
    grad, mask, scale = a["grad_output"], a["mask"], float(a["scale"])
    shape = broadcast_shapes(grad.shape, mask.shape)
    inner = result_type(grad, mask)  # grad * mask, rounded to its type, then * scale
    dtype = result_type(grad, mask, scale)
    # CPU's ``grad * mask * scale``: the first product's TensorIterator lays the result out (the mask cast to its
    # common dtype first), the scalar product keeps that layout; an expanded grad beside an overlapping mask is
    # not grad's layout (designed native_dropout_backward-bfloat16-special-expanded-7: CPU (5, 1, 10))
    out = torch.empty(shape, dtype=dtype, device=grad.device)
    _ti_restride(out, (grad, mask), inner)
    inner_np = FP32 if inner in FLOATS else numpy_dtype(inner)
    inner_store = numpy_dtype(inner)

    def emit(nc, outs, rand, ins):
        g, m = ins
        kept = tmp(nc, outs[0], inner_store)
        nc.vector.tensor_tensor(kept, g, m, "multiply", dtype=inner_np)
        nc.vector.tensor_scalar(outs[0], kept, "multiply", scale, dtype=FP32)

    elementwise_outputs("dropout_backward", [out], (grad, mask), emit)
    return out


# --- overloads PyTorch's composites route to the kernels above ------------------------------

serve("aten::native_dropout", "aten::dropout", "aten::native_dropout.out")
serve("aten::native_dropout_backward", "aten::native_dropout_backward.out")
