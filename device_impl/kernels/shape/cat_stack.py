"""cat: one HBM -> HBM copy per input into its slice of the output (a VectorE cast through SBUF where
type promotion changes an input's dtype).

Tiling: a same-dtype input is one DMA over strided views (no SBUF); a promoted one streams flat tiles
``[p <= 128, f <= FREE_MAX]`` through VectorE (``moves._move``). A conversion no engine does (float64,
complex) takes copy_'s own path after the launch. The output's memory format is CPU's
(``_cat_memory_format``: channels_last only when every input is). stack, hstack, vstack, dstack,
column_stack, row_stack, concat and concatenate are PyTorch composites that reach cat.out.
"""

from __future__ import annotations

from functools import reduce
from typing import Sequence

import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels import overlap
from device_impl.kernels.common import SCALAR_TYPE_NAMES, hbm, launch
from device_impl.kernels.shape.moves import _move, _resize_out, _same_device, _serve, _wrap, suggest_memory_format


def _legacy_empty(t: torch.Tensor) -> bool:
    return t.dim() == 1 and t.shape[0] == 0


def _cat_memory_format(tensors: Sequence[torch.Tensor]) -> torch.memory_format:
    """compute_output_memory_format: every input's suggested format, contiguous unless they all agree."""
    fmt = None
    for t in tensors:
        f = suggest_memory_format(t)
        if f == torch.contiguous_format:
            return f
        if fmt is not None and fmt != f:
            return torch.contiguous_format
        fmt = f
    return fmt if fmt is not None else torch.contiguous_format


def _cat_meta(tensors: Sequence[torch.Tensor], dim: int) -> tuple[tuple[int, ...], int]:
    for i, t in enumerate(tensors):
        if t.dim() == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    ref = next((t for t in tensors if not _legacy_empty(t)), None)
    if ref is None:
        return (0,), dim
    d = _wrap(dim, ref.dim())
    total = 0
    for i, t in enumerate(tensors):
        if _legacy_empty(t):
            continue
        if t.dim() != ref.dim():
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.dim()} and {t.dim()}")
        for k in range(ref.dim()):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the list.")
        total += t.shape[d]
    shape = list(ref.shape)
    shape[d] = total
    return tuple(shape), d


@TABLE.native("aten::cat.out", dtypes=None, serves=("aten::cat",))
def cat_out(tensors, dim=0, *, out):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    _same_device(tensors, out)
    shape, d = _cat_meta(tensors, dim)
    dtype = reduce(torch.promote_types, (t.dtype for t in tensors))
    if not torch.can_cast(dtype, out.dtype):
        raise TypeError(f"torch.cat(): input types can't be cast to the desired output type "
                        f"{SCALAR_TYPE_NAMES[out.dtype]}")
    _resize_out(out, shape, _cat_memory_format(tensors))
    overlap.assert_out_apart(out, *tensors)  # after the resize, as CPU's meta function checks them
    if out.numel() == 0:
        return out
    view = hbm(out)
    later = []
    with launch("cat", out.device.index) as nc:
        offset = 0
        for t in tensors:
            if _legacy_empty(t):
                continue
            n = t.shape[d]
            if t.numel():
                if t.dtype == out.dtype or (t.dtype in COMPUTE_DTYPES and out.dtype in COMPUTE_DTYPES):
                    _move(nc, view[(slice(None),) * d + (slice(offset, offset + n),)], hbm(t))
                else:  # a conversion no engine does (float64, complex): copy_'s own path, after this launch
                    later.append((offset, n, t))
            offset += n
    for offset, n, t in later:
        out.narrow(d, offset, n).copy_(t)
    return out


_serve(["aten::stack", "aten::stack.out", "aten::hstack", "aten::hstack.out", "aten::vstack", "aten::vstack.out",
        "aten::dstack", "aten::dstack.out", "aten::column_stack", "aten::column_stack.out", "aten::row_stack",
        "aten::concat", "aten::concat.out", "aten::concatenate", "aten::concatenate.out"], "aten::cat.out")
