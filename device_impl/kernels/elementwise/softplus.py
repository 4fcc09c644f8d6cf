"""The softplus family of activations and their gradients: softplus, softplus_backward, log_sigmoid_forward
(output and buffer), log_sigmoid_backward, mish.

Tiling: ``common.elementwise``'s flat tiles of the output (``[p <= 128, f <= FREE_MAX]``); a backward op's operands
stream through the same tiles. The exp runs on ScalarE as the float32 exp CPU's vector loop calls on this host
(``cpu_host.vector_exp``: SLEEF's expf_u10 under AVX2/AVX-512, libm's under DEFAULT), log1p on ScalarE's log1p;
products, quotients, comparisons and the ``select`` between branches on VectorE in fp32. bfloat16/float16 are
computed in float32 and rounded once on store, as CPU's reduced-float kernels convert to float.

CPU's formulas (ATen's native/cpu/Activation.cpp), each product and quotient rounded in float32:

* softplus: ``x * beta > threshold ? x : log1p(exp(x * beta)) / beta``
* softplus_backward: ``z = exp(x * beta)``; ``x * beta > threshold ? g : g * z / (z + 1)``
* log_sigmoid_forward: ``buffer = exp(-|x|)``, ``output = min(x, 0) - log1p(buffer)`` (NaN-propagating min); the
  whole tensor runs its vector loop (a tail is a partial vector), on a contiguous copy of the input
* log_sigmoid_backward: ``(max_deriv - sign * (buffer / (1 + buffer))) * g`` with ``max_deriv, sign = 1, 1``
  where ``x < 0``, else ``0, -1``
* mish: ``x * tanh(log1p(exp(x)))`` (ScalarE's tanh)

CPU's scalar lambdas call libm's exp and log1p, its vector lambdas SLEEF's: their last places differ from each
other and from ScalarE's log1p by an ULP or so, which the dtype tolerances hold (harness/specs.py says so).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import (SCALAR_TYPE_NAMES, broadcast_shape, check_out, elementwise, new_output,
                                        result_type)
from device_impl.kernels.elementwise.loop import BOOL, _FLOATS, _refuse
from device_impl.kernels.registry import Binder, register_family


def _float_only(kernel: str, *tensors: Any) -> None:
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.dtype not in _FLOATS:
            raise _refuse(kernel, t.dtype)


def _exp() -> str:
    """ScalarE's name for the float32 exp CPU's vector loops call on this host."""
    return f"exp_{cpu_host.vector_exp()}"


def _f32(value: Any) -> float:
    """A Scalar argument as the kernel reads it: ``to<float>()`` (float32 for every float dtype it runs)."""
    return float(np.float32(float(value)))


def _meta_same(a: dict) -> tuple:
    x = a["self"]
    return tuple(x.shape), x.dtype, (x,)


def _softplus_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    _float_only("softplus_cpu", x)
    beta, threshold, exp = _f32(a.get("beta", 1)), _f32(a.get("threshold", 20)), _exp()

    def emit(nc, o, t):
        scaled = nc.sbuf_tile(t.shape, FP32)
        soft = nc.sbuf_tile(t.shape, FP32)
        linear = nc.sbuf_tile(t.shape, BOOL)
        nc.vector.tensor_scalar(scaled, t, "multiply", beta, dtype=FP32)
        nc.scalar.activation(soft, scaled, exp)
        nc.scalar.activation(soft, soft, "log1p")
        nc.vector.tensor_scalar(soft, soft, "divide", beta, dtype=FP32)
        nc.vector.tensor_scalar(linear, scaled, "greater", threshold, dtype=FP32)
        nc.vector.select(o, linear, t, soft)

    elementwise("softplus", out, (x,), emit)


register_family("softplus", _softplus_compute, _meta_same)


def _meta_grad(a: dict) -> tuple:
    g, x = a["grad_output"], a["self"]
    return broadcast_shape(g, x), result_type(g, x), (g, x)


def _softplus_backward_compute(out: torch.Tensor, a: dict) -> None:
    g, x = a["grad_output"], a["self"]
    _float_only("softplus_backward_cpu", g, x)
    beta, threshold, exp = _f32(a["beta"]), _f32(a["threshold"]), _exp()

    def emit(nc, o, grad, t):
        scaled = nc.sbuf_tile(t.shape, FP32)
        z = nc.sbuf_tile(t.shape, FP32)
        linear = nc.sbuf_tile(t.shape, BOOL)
        nc.vector.tensor_scalar(scaled, t, "multiply", beta, dtype=FP32)
        nc.vector.tensor_scalar(linear, scaled, "greater", threshold, dtype=FP32)
        nc.scalar.activation(z, scaled, exp)
        nc.vector.tensor_tensor(scaled, grad, z, "multiply", dtype=FP32)  # g * z
        nc.vector.tensor_scalar(z, z, "add", 1.0, dtype=FP32)  # z + 1
        nc.vector.tensor_tensor(z, scaled, z, "divide", dtype=FP32)
        nc.vector.select(o, linear, grad, z)

    elementwise("softplus_backward", out, (g, x), emit, common_dtype=result_type(g, x))


register_family("softplus_backward", _softplus_backward_compute, _meta_grad)


# --- log_sigmoid ----------------------------------------------------------------------------------------------

def _log_sigmoid_buffer(exp: str):
    def emit(nc, o, t):  # exp(-|x|)
        e = nc.sbuf_tile(t.shape, FP32)
        nc.scalar.activation(e, t, "abs")
        nc.scalar.activation(o, e, exp, scale=-1.0)

    return emit


def _log_sigmoid_output(exp: str):
    def emit(nc, o, t):  # min(x, 0) - log1p(exp(-|x|)), the buffer recomputed in fp32 (CPU subtracts before rounding)
        e = nc.sbuf_tile(t.shape, FP32)
        low = nc.sbuf_tile(t.shape, FP32)
        nc.scalar.activation(e, t, "abs")
        nc.scalar.activation(e, e, exp, scale=-1.0)
        nc.scalar.activation(e, e, "log1p")
        nc.vector.tensor_scalar(low, t, "minimum", 0.0, dtype=FP32)  # NaN-propagating, as vec::minimum
        nc.vector.tensor_tensor(o, low, e, "subtract", dtype=FP32)

    return emit


def _check_dtype(t: torch.Tensor, dtype: torch.dtype) -> None:
    """The check of ``data_ptr<scalar_t>()`` on an out tensor of another dtype."""
    if t.dtype != dtype:
        raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[dtype]} but found {SCALAR_TYPE_NAMES[t.dtype]}")


def _log_sigmoid_forward(a: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """ATen's log_sigmoid_forward_out_cpu: output resized as the input (a functional call's is contiguous), the
    buffer resized contiguous; both must have the input's dtype (checked as the kernel reads them)."""
    x, output, buffer = a["self"], a.get("output"), a.get("buffer")
    shape = tuple(x.shape)
    if output is None:
        output, buffer = new_output(shape, x.dtype, x), new_output(shape, x.dtype, x)
    else:
        check_out(output, shape, output.dtype, (x,))
        check_out(buffer, shape, buffer.dtype, (x,))
        if not buffer.is_contiguous():
            raise RuntimeError("Contiguous buffer required for log_sigmoid with out parameter")
    _float_only("log_sigmoid_cpu", x)
    _check_dtype(output, x.dtype)
    _check_dtype(buffer, x.dtype)
    exp = _exp()
    elementwise("log_sigmoid_buffer", buffer, (x,), _log_sigmoid_buffer(exp))
    elementwise("log_sigmoid_forward", output, (x,), _log_sigmoid_output(exp))
    return output, buffer


def _register_log_sigmoid_forward() -> None:
    ops = {"aten::log_sigmoid_forward": torch.ops.aten.log_sigmoid_forward.default,
           "aten::log_sigmoid_forward.output": torch.ops.aten.log_sigmoid_forward.output}
    for name, overload in ops.items():
        binder = Binder.of(overload)
        outs = binder.out_names

        def kernel(*args: Any, _binder=binder, _outs=outs, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
            bound = _binder.bind(args, kwargs)
            for n in _outs:
                bound[n] = kwargs.get(n)
            return _log_sigmoid_forward(bound)

        kernel.__module__ = __name__
        TABLE.native(name, dtypes=COMPUTE_DTYPES)(kernel)


_register_log_sigmoid_forward()


def _meta_log_sigmoid_backward(a: dict) -> tuple:
    g, x, buf = a["grad_output"], a["self"], a["buffer"]
    return broadcast_shape(x, buf, g), g.dtype, (x, buf, g)


def _log_sigmoid_backward_compute(out: torch.Tensor, a: dict) -> None:
    g, x, buf = a["grad_output"], a["self"], a["buffer"]
    for t in (x, buf, g):  # TensorIterator's check_all_same_dtype (the config promotes nothing)
        if t.dtype != out.dtype:
            raise RuntimeError(f"Found dtype {SCALAR_TYPE_NAMES[t.dtype]} but expected "
                               f"{SCALAR_TYPE_NAMES[out.dtype]}")
    _float_only("log_sigmoid_backward_cpu", out)

    def emit(nc, o, t, b, grad):
        negative = nc.sbuf_tile(t.shape, BOOL)
        q = nc.sbuf_tile(t.shape, FP32)
        d = nc.sbuf_tile(t.shape, FP32)
        nc.vector.tensor_scalar(negative, t, "less", 0, dtype=FP32)
        nc.vector.tensor_scalar(q, b, "add", 1.0, dtype=FP32)
        nc.vector.tensor_tensor(q, b, q, "divide", dtype=FP32)  # b / (1 + b)
        nc.vector.tensor_scalar(d, q, "subtract", 1.0, reverse=True, dtype=FP32)  # 1 - q (x < 0)
        nc.vector.tensor_scalar(q, q, "add", 0.0, dtype=FP32)  # 0 - (-1 * q) where x >= 0 (or NaN): -0.0 is +0.0
        nc.vector.select(d, negative, d, q)
        nc.vector.tensor_tensor(o, d, grad, "multiply", dtype=FP32)

    elementwise("log_sigmoid_backward", out, (x, buf, g), emit)


register_family("log_sigmoid_backward", _log_sigmoid_backward_compute, _meta_log_sigmoid_backward)


def _mish_compute(out: torch.Tensor, a: dict) -> None:
    x = a["self"]
    _float_only("mish_cpu", x)
    exp = _exp()

    def emit(nc, o, t):
        e = nc.sbuf_tile(t.shape, FP32)
        nc.scalar.activation(e, t, exp)
        nc.scalar.activation(e, e, "log1p")
        nc.scalar.activation(e, e, "tanh")
        nc.vector.tensor_tensor(o, t, e, "multiply", dtype=FP32)

    elementwise("mish", out, (x,), emit)


register_family("mish", _mish_compute, _meta_same)
