"""Vector and summed products on TensorE: dot, vdot (real), addmv (and mv, which reaches addmv.out), addbmm.

Each is said as the matrix product it is and run by ``matmul._matmul_into`` (TensorE, fp32 PSUM accumulation
over K tiles, ScalarE's evacuation scaling by alpha, VectorE adding beta * bias), so these ops share mm's
arithmetic and cost model instead of reaching the counted CPU fallback:

* ``dot(a, b)``: a as a [1, K] row times b as a [K, 1] column; ``vdot`` of real tensors is the same product
  (complex tensors are not in the kernels' dtypes and keep the CPU fallback);
* ``addmv(self, mat, vec)``: mat [M, K] times vec as a [K, 1] column, self broadcast to [M] as the bias;
* ``addbmm(self, b1, b2)``: CPU's loop (``addbmm_impl_``): out = beta * self + alpha * b1[0] @ b2[0], then
  out += alpha * b1[i] @ b2[i] for each later batch, rounded to the output dtype after each batch as CPU's
  ``addmm_`` rounds; an empty batch leaves beta * self (zeros where beta is 0).

The sum order inside one product is TensorE's (K tiles of 128 in order, fp32), not CPU's BLAS order: the op
suite's specs judge these against a float64 reference, as mm's. Shape errors are the ones PyTorch's meta
functions raise (CPU's class and message), asked of meta tensors of the same sizes; dtype errors are CPU's own
messages (the meta functions of addbmm accept mixed dtypes that CPU refuses).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_impl.dispatch import TABLE

from device_impl.engine import launch
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, hbm, scalar_of
from device_impl.kernels.matmul import _matmul_into
from device_impl.kernels.registry import register_family


def _meta_shape(op, *tensors: torch.Tensor, **kwargs) -> tuple[int, ...]:
    """The result's shape from PyTorch's meta function, which raises CPU's errors for bad shapes."""
    metas = [torch.empty(tuple(t.shape), dtype=t.dtype, device="meta") for t in tensors]
    return tuple(op(*metas, **kwargs).shape)


def _name(dtype: torch.dtype) -> str:
    return SCALAR_TYPE_NAMES[dtype]


def _dot_meta(args: dict) -> tuple:
    """CPU's dot_check, in its order: dims, dtypes, lengths."""
    a, b = args["self"], args["tensor"] if "tensor" in args else args["other"]  # dot's name, vdot's
    if a.dim() != 1 or b.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.dim()}D and {b.dim()}D tensors")
    if a.dtype != b.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {_name(a.dtype)} and "
                           f"{_name(b.dtype)}")
    if a.numel() != b.numel():
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{a.numel()}] and src [{b.numel()}] to have "
                           f"the same number of elements, but got {a.numel()} and {b.numel()} elements respectively")
    return (), a.dtype, (a, b)


def _dot_compute(out: torch.Tensor, args: dict) -> None:
    a, b = hbm(args["self"]), hbm(args["tensor"] if "tensor" in args else args["other"])
    with launch("dot", out.device.index) as nc:
        _matmul_into(nc, hbm(out).reshape(1, 1), a[None, :], b[:, None])


register_family("dot", _dot_compute, _dot_meta, dtypes=FLOAT_DTYPES)
register_family("vdot", _dot_compute, _dot_meta, dtypes=FLOAT_DTYPES)


def _addmv_meta(args: dict) -> tuple:
    bias, mat, vec = args["self"], args["mat"], args["vec"]
    if mat.dim() != 2 or vec.dim() != 1 or bias.dim() > 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {bias.dim()}, {mat.dim()}, {vec.dim()}")
    if mat.shape[1] != vec.shape[0] or not (bias.numel() == mat.shape[0] or bias.numel() == 1):
        raise RuntimeError(f"size mismatch, got input ({bias.shape[0] if bias.dim() else 1}), mat "
                           f"({mat.shape[0]}x{mat.shape[1]}), vec ({vec.shape[0]})")
    if not bias.dtype == mat.dtype == vec.dtype:
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {_name(bias.dtype)}, "
                           f"{_name(mat.dtype)}, and {_name(vec.dtype)}")
    return (mat.shape[0],), mat.dtype, (bias, mat, vec)


def _addmv_compute(out: torch.Tensor, args: dict) -> None:
    bias, mat, vec = args["self"], args["mat"], args["vec"]
    beta, alpha = scalar_of(args.get("beta", 1)), scalar_of(args.get("alpha", 1))
    out2d = hbm(out)[:, None]
    bias2d = np.broadcast_to(hbm(bias).reshape(-1), (out.shape[0],))[:, None]
    with launch("addmv", out.device.index) as nc:
        _matmul_into(nc, out2d, hbm(mat), hbm(vec)[:, None], alpha, beta, bias2d)


register_family("addmv", _addmv_compute, _addmv_meta, dtypes=FLOAT_DTYPES)


def _addbmm_meta(args: dict) -> tuple:
    bias, b1, b2 = args["self"], args["batch1"], args["batch2"]
    shape = _meta_shape(torch.ops.aten.addbmm.default, bias, b1, b2)
    if b1.dtype != b2.dtype:
        raise RuntimeError(f"expected scalar type {_name(b1.dtype)} but found {_name(b2.dtype)}")
    if bias.dtype != b1.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {_name(bias.dtype)} and "
                           f"{_name(b1.dtype)}")
    return shape, b1.dtype, (bias, b1, b2)


def _addbmm_compute(out: torch.Tensor, args: dict) -> None:
    bias, b1, b2 = args["self"], args["batch1"], args["batch2"]
    beta, alpha = scalar_of(args.get("beta", 1)), scalar_of(args.get("alpha", 1))
    out_view = hbm(out)
    a_view, b_view = hbm(b1), hbm(b2)
    bias2d = np.broadcast_to(hbm(bias), out_view.shape)
    with launch("addbmm", out.device.index) as nc:
        if a_view.shape[0] == 0:  # no batch: beta * self, CPU's result.mul_(beta) (zeros where beta is 0)
            _matmul_into(nc, out_view, a_view[:, :, :0].reshape(out_view.shape[0], 0),
                         b_view[:, :0, :].reshape(0, out_view.shape[1]), alpha, beta, bias2d)
            return
        for i in range(a_view.shape[0]):
            # CPU's addmm_ per batch: the first takes beta * self, the later ones add to the rounded result
            _matmul_into(nc, out_view, a_view[i], b_view[i], alpha, beta if i == 0 else 1.0,
                         bias2d if i == 0 else out_view)


register_family("addbmm", _addbmm_compute, _addbmm_meta, dtypes=FLOAT_DTYPES, overloads=("out",))


@TABLE.native("aten::addbmm", dtypes=FLOAT_DTYPES)
def _addbmm(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1,
            alpha: Any = 1) -> torch.Tensor:
    """The functional form: addbmm.out into a fresh tensor."""
    shape, dtype, _ = _addbmm_meta({"self": self, "batch1": batch1, "batch2": batch2})
    out = torch.empty(shape, dtype=dtype, device=self.device)
    return torch.ops.aten.addbmm.out(self, batch1, batch2, beta=beta, alpha=alpha, out=out)


@TABLE.native("aten::addbmm_", dtypes=FLOAT_DTYPES)
def _addbmm_(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1,
             alpha: Any = 1) -> torch.Tensor:
    """CPU's addbmm_ is addbmm_out(self, ..., out=self) on self expanded to [M, N]: a broadcast self is resized to
    the result's shape (``addbmm_impl_``'s ``result.resize_as_``), not refused as other in-place ops are."""
    result = _addbmm(self, batch1, batch2, beta=beta, alpha=alpha)
    if self.shape != result.shape:
        self.resize_(result.shape)
    self.copy_(result)
    return self
