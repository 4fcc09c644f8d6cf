"""renorm: each slice along ``dim`` whose p-norm exceeds ``maxnorm`` scaled down to it (renorm.out; the
functional and in-place forms are PyTorch's composites, which run the meta checks and call renorm.out).

As ATen's renorm_out (Normalization.cpp) composes it, in three launches:

1. the norm of every slice, ``linalg_vector_norm(self, p, all dims but dim, keepdim)`` in fp32 (bfloat16/float16
   widened exactly, as CPU's ``dtype=float`` accumulation), by the one-pass reduction engine (``sums._reduce``:
   the slices' elements along the free axis, one slice per partition, or the columns/flat tilings);
2. the factor, CPU's ``renorm_scale_factor`` lambda in fp32 on VectorE: ``norm > maxnorm ? maxnorm / (norm + 1e-7)
   : 1`` (maxnorm and 1e-7 read as float32; a norm equal to maxnorm, a zero slice and a NaN norm keep 1),
   rounded to self's dtype where that is bfloat16/float16 (CPU's factor tensor has self's dtype there);
3. ``out = self * factor`` (the factor broadcast along the slice), one VectorE multiply per tile, rounded once.

Checks in the meta function's order: p real and positive, maxnorm real and non-negative, at least two dimensions;
integer and bool inputs, and the inf-norm over an empty dimension (even of an empty result), are linalg_vector_norm's
RuntimeError; an out= tensor must have self's dtype exactly (structured out).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import check_out, elementwise, scalar_of
from device_impl.kernels.elementwise.loop import BOOL
from device_impl.kernels.reduction.sums import _norm_dtype, _norm_spec, _reduce
from device_impl.kernels.reduction.tiles import _kernel, _wrap

_EPS32 = float(np.float32(1e-7))


def _checked(a: dict) -> tuple[float, int, float]:
    """renorm's meta checks (p, maxnorm, dimensions), in its order; (p, the wrapped dim, maxnorm)."""
    x, p, dim, maxnorm = a["self"], a["p"], a["dim"], a["maxnorm"]
    p, maxnorm = scalar_of(p), scalar_of(maxnorm)
    if isinstance(p, complex):
        raise RuntimeError("renorm: p must be real-valued")
    if not float(p) > 0.0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if isinstance(maxnorm, complex):
        raise RuntimeError("renorm: maxnorm must be real-valued")
    if not float(maxnorm) >= 0.0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {float(maxnorm)}")
    if x.dim() <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {x.dim()} dimensions")
    return float(p), _wrap(dim, x.dim()), float(maxnorm)


@_kernel("aten::renorm.out", serves=("aten::renorm", "aten::renorm_"))
def _renorm_out(a: dict) -> torch.Tensor:
    x, out = a["self"], a["out"]
    p, dim, maxnorm = _checked(a)
    _norm_dtype(x, None)  # integers and bool: linalg_vector_norm's error
    dims = tuple(d for d in range(x.dim()) if d != dim)
    if p == math.inf:  # linalg_vector_norm's refusal, before anything is written (an empty out included)
        for d in dims:
            if x.shape[d] == 0:
                raise RuntimeError(f"linalg.vector_norm cannot compute the inf norm on the dimension {d}because this "
                                   f"dimension is empty and the operation does not have an identity")
    check_out(out, tuple(x.shape), x.dtype, [x], exact_dtype=True)  # the structured out's exact dtype
    if out.numel() == 0:
        return out
    kept = tuple(n if d == dim else 1 for d, n in enumerate(x.shape))
    norm = torch.empty(kept, dtype=torch.float32, device=x.device)
    _reduce("renorm_norm", x, norm, dims, _norm_spec(math.inf if p == math.inf else p))
    factor = norm if x.dtype == torch.float32 else torch.empty(kept, dtype=x.dtype, device=x.device)
    limit = float(np.float32(maxnorm))

    def scale(nc, o, t):
        over = nc.sbuf_tile(t.shape, BOOL)
        shrink = nc.sbuf_tile(t.shape, FP32)
        ones = nc.sbuf_tile(t.shape, FP32)
        nc.vector.tensor_scalar(over, t, "greater", limit, dtype=FP32)
        nc.vector.tensor_scalar(shrink, t, "add", _EPS32, dtype=FP32)
        nc.vector.tensor_scalar(shrink, shrink, "divide", limit, reverse=True, dtype=FP32)  # maxnorm / (norm + eps)
        nc.vector.memset(ones, 1.0)
        nc.vector.select(o, over, shrink, ones)

    elementwise("renorm_factor", factor, (norm,), scale)
    elementwise("renorm", out, (x, factor), lambda nc, o, t, f: nc.vector.tensor_tensor(o, t, f, "multiply",
                                                                                         dtype=FP32))
    return out
