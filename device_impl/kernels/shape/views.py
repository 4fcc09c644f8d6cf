"""Views and copies of views: unfold, unfold_backward, narrow_copy, view_as_real, view_as_complex; and
the view ops and copies PyTorch composes over as_strided and copy_.

View ops (permute, expand, select, slice, ...) are PyTorch composites over ``as_strided`` (a C++
metadata kernel); ``unfold`` is implemented here as one, and view_as_real / view_as_complex reinterpret
the storage (metadata only). They are recorded in the lowering table as served by what they reach.

Tiling: narrow_copy is one DMA over the narrowed view (``moves._move``). unfold_backward zeroes the
input-sized result (a memset tile stored over it) and adds each window offset's gradient slice into it (copies it,
where the windows do not overlap) on VectorE (``moves._accumulate``: flat tiles ``[p <= 128, f <= FREE_MAX]``), in an fp32 scratch for bf16 and
fp16, which a last VectorE cast stores.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels.common import SCALAR_TYPE_NAMES, hbm, launch
from device_impl.kernels.shape.moves import (
    _FLOATS,
    _accumulate,
    _const_tile,
    _fill,
    _move,
    _resize_out,
    _serve,
    _wrap,
)


# --- unfold, narrow_copy --------------------------------------------------------------

@TABLE.native("aten::unfold", dtypes=None, serves=("aten::unfold_copy",))
def unfold(self, dimension, size, step):
    ndim = self.dim()
    d = _wrap(dimension, ndim)
    max_size = self.shape[d] if ndim else 1
    if size > max_size:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {max_size} but size is {size}")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if ndim == 0:
        return self.as_strided((size,), (1,), self.storage_offset())
    sizes, strides = list(self.shape), list(self.stride())
    sizes.append(size)
    strides.append(strides[d])
    sizes[d] = (self.shape[d] - size) // step + 1
    strides[d] = step * self.stride(d)
    return self.as_strided(sizes, strides, self.storage_offset())


@TABLE.native("aten::unfold_backward", dtypes=COMPUTE_DTYPES)
def unfold_backward(grad_in, input_sizes, dim, size, step):
    input_sizes = [int(s) for s in input_sizes]
    d = _wrap(dim, len(input_sizes))
    out = torch.empty(input_sizes, dtype=grad_in.dtype, device=grad_in.device)
    if out.numel() == 0:
        return out
    acc_dtype = torch.float32 if grad_in.dtype in _FLOATS else grad_in.dtype
    scratch = None if acc_dtype == grad_in.dtype else torch.empty(input_sizes, dtype=acc_dtype, device=out.device)
    with launch("unfold_backward", out.device.index) as nc:
        unfold_backward_program(nc, hbm(grad_in), hbm(out), None if scratch is None else hbm(scratch), d, size, step)
    return out


def unfold_backward_program(nc, g: np.ndarray, out: np.ndarray, scratch: np.ndarray | None, d: int, size: int,
                            step: int) -> None:
    """unfold_backward's tile program on HBM arrays (``out`` the input-sized result; ``scratch`` an fp32 array of
    its shape for a bfloat16/float16 result, else None): the eager kernel, and the compiler's ``unfold_backward``
    step (compiler/opaque.py)."""
    input_sizes = list(out.shape)
    windows = (input_sizes[d] - size) // step + 1 if input_sizes else 1
    if not input_sizes:  # 0-dim input: grad_in is [size] over the one element
        g = g.reshape(-1)
    acc = out if scratch is None else scratch
    const = _const_tile(nc, acc.dtype, 0, [acc])
    _fill(nc, acc, const)
    # Windows that do not overlap (step >= size) give each input element at most one gradient, which CPU
    # copies (a -0.0 stays -0.0); overlapping ones are summed from +0.0, as CPU sums them.
    put = _accumulate if step < size else _move
    if input_sizes:
        lead = (slice(None),) * d
        for t in range(size):
            hit = slice(t, t + (windows - 1) * step + 1, step)
            put(nc, acc[lead + (hit,)], g[..., t])
    else:
        for t in range(size):
            put(nc, acc, g[t])
    if scratch is not None:
        _move(nc, out, acc)


def _narrow_meta(self, dim, start, length):
    if self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if dim >= self.dim():
        raise RuntimeError("Expected dim < static_cast<int64_t>(self_sizes.size()) to be true, but got false.  "
                           "(Could this error message be improved?  If so, please report an enhancement request "
                           "to PyTorch.)")
    d = _wrap(dim, self.dim())
    size = self.shape[d]
    if start < -size or start > size:
        raise IndexError(f"start out of range (expected to be in range of [{-size}, {size}], but got {start})")
    if start < 0:
        start += size
    if length < 0 or start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({size}).")
    shape = list(self.shape)
    shape[d] = length
    return d, start, shape


def _narrow_copy_into(out, self, d, start, length):
    if out.numel() == 0:
        return
    src = hbm(self)[(slice(None),) * d + (slice(start, start + length),)]
    with launch("narrow_copy", out.device.index) as nc:
        _move(nc, hbm(out), src)


@TABLE.native("aten::narrow_copy.out", dtypes=None)
def narrow_copy_out(self, dim, start, length, *, out):
    if self.dim() == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if self.dtype != out.dtype:
        raise RuntimeError("Expected self.dtype() == output.dtype() to be true, but got false.  (Could this error "
                           "message be improved?  If so, please report an enhancement request to PyTorch.)")
    d, start, shape = _narrow_meta(self, dim, start, length)
    _resize_out(out, shape)
    _narrow_copy_into(out, self, d, start, length)
    return out


@TABLE.native("aten::narrow_copy", dtypes=None)
def narrow_copy(self, dim, start, length):
    d, start, shape = _narrow_meta(self, dim, start, length)
    out = torch.empty(shape, dtype=self.dtype, device=self.device)
    _narrow_copy_into(out, self, d, start, length)
    return out


# --- complex <-> real views ------------------------------------------------------------

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64, torch.complex32: torch.float16}
_COMPLEX_OF = {v: k for k, v in _REAL_OF.items()}


def _reinterpret(t: torch.Tensor, dtype: torch.dtype, size, stride, offset: int) -> torch.Tensor:
    """A tensor of another dtype over ``t``'s storage (metadata only: set_ is a C++ kernel)."""
    return torch.empty(0, dtype=dtype, device=t.device).set_(t.untyped_storage(), offset, size, stride)


@TABLE.native("aten::view_as_real", dtypes=None)
def view_as_real(self):
    if not self.is_complex():
        raise RuntimeError("view_as_real is only supported for complex tensors")
    if self.is_conj():
        raise RuntimeError("view_as_real doesn't work on unresolved conjugated tensors.  To resolve the conjugate "
                           "tensor so you can view it as real, use self.resolve_conj(); however, be warned that the "
                           "resulting tensor will NOT alias the original.")
    return _reinterpret(self, _REAL_OF[self.dtype], list(self.shape) + [2], [2 * s for s in self.stride()] + [1],
                        2 * self.storage_offset())


@TABLE.native("aten::view_as_complex", dtypes=None)
def view_as_complex(self):
    if self.dtype not in _COMPLEX_OF:
        raise RuntimeError(f"view_as_complex is only supported for half, float and double tensors, but got a tensor "
                           f"of scalar type: {SCALAR_TYPE_NAMES.get(self.dtype, self.dtype)}")
    if self.dim() == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if self.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    if self.stride(-1) != 1:
        raise RuntimeError("Tensor must have a last dimension with stride 1")
    if any(s % 2 for s in self.stride()[:-1]):
        raise RuntimeError("Tensor must have a stride divisible by 2 for all but last dimension")
    if self.storage_offset() % 2:
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")
    return _reinterpret(self, _COMPLEX_OF[self.dtype], list(self.shape[:-1]), [s // 2 for s in self.stride()[:-1]],
                        self.storage_offset() // 2)


# View ops: composites over as_strided (alias/detach build the alias directly: metadata only).
_serve(["aten::permute", "aten::expand", "aten::diagonal", "aten::select.int", "aten::slice.Tensor",
        "aten::squeeze", "aten::squeeze.dim", "aten::squeeze.dims", "aten::unsqueeze", "aten::split_with_sizes",
        "aten::split.Tensor", "aten::split.sizes", "aten::chunk", "aten::unbind.int", "aten::narrow",
        "aten::narrow.Tensor", "aten::t", "aten::transpose.int", "aten::alias", "aten::detach", "aten::unsafe_split.Tensor",
        "aten::unsafe_split_with_sizes", "aten::unsqueeze_", "aten::squeeze_", "aten::squeeze_.dim",
        "aten::squeeze_.dims", "aten::transpose_", "aten::t_", "aten::as_strided_", "aten::movedim.int",
        "aten::movedim.intlist", "aten::swapaxes", "aten::swapdims", "aten::expand_as", "aten::tensor_split.sections",
        "aten::tensor_split.indices", "aten::hsplit.int", "aten::vsplit.int", "aten::dsplit.int",
        "aten::unflatten.int", "aten::view_as", "aten::numpy_T", "aten::mT",
        "aten::broadcast_to"], "aten::as_strided")
_serve(["aten::_unsafe_view", "aten::view.dtype"], "aten::view")
# Copies: composites over empty/empty_like + copy_.
_serve(["aten::clone", "aten::contiguous", "aten::expand_copy", "aten::permute_copy", "aten::split_with_sizes_copy",
        "aten::split_copy.Tensor", "aten::unbind_copy.int", "aten::slice_copy.Tensor", "aten::select_copy.int",
        "aten::detach_copy", "aten::alias_copy", "aten::view_copy", "aten::view_copy.dtype", "aten::diagonal_copy",
        "aten::transpose_copy.int", "aten::t_copy", "aten::squeeze_copy", "aten::squeeze_copy.dim",
        "aten::squeeze_copy.dims", "aten::unsqueeze_copy", "aten::as_strided_copy", "aten::_reshape_copy",
        "aten::expand_copy.out", "aten::permute_copy.out", "aten::split_with_sizes_copy.out",
        "aten::split_copy.Tensor_out", "aten::unbind_copy.int_out", "aten::slice_copy.Tensor_out",
        "aten::select_copy.int_out", "aten::detach_copy.out", "aten::alias_copy.out", "aten::view_copy.out",
        "aten::diagonal_copy.out", "aten::transpose_copy.int_out", "aten::t_copy.out", "aten::squeeze_copy.out",
        "aten::unsqueeze_copy.out", "aten::as_strided_copy.out", "aten::slice_scatter", "aten::select_scatter",
        "aten::diagonal_scatter", "aten::as_strided_scatter"], "aten::copy_")
_serve(["aten::unfold_copy.out"], "aten::unfold")


_serve(["aten::fill_diagonal_"], "aten::fill_.Scalar")
