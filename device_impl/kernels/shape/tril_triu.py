"""tril, triu.

Tiling: rows on partitions (several small matrices per tile: partition q holds row q % R of matrix
q // R when R <= 128, else blocks of 128 rows), columns on the free axis in blocks of FREE_MAX. The
mask j - i <= k (tril) or >= k (triu) is built from GpSimd iotas and compared on VectorE, then a VectorE
select keeps the element or a zero. Blocks entirely kept or entirely zero skip the engines (a DMA copy,
none in place, or a store of zeros).
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels import overlap
from device_impl.kernels.common import FREE_MAX, P, hbm, launch
from device_impl.kernels.shape.moves import _exact_dtype, _resize_out


def _lead_merged(view: np.ndarray, lead: int) -> np.ndarray | None:
    """``view`` [*lead, R, C] as [B, R, C] without copying, or None when the lead dims do not merge."""
    dims = [(n, s) for n, s in zip(view.shape[:lead], view.strides[:lead]) if n != 1]
    b = 1
    for i, (n, s) in enumerate(dims):
        if i and dims[i - 1][1] != s * n:
            return None
        b *= n
    stride = dims[-1][1] if dims else 0
    return np.lib.stride_tricks.as_strided(view, (b,) + view.shape[lead:], (stride,) + view.strides[lead:])


def _tri(x: torch.Tensor, out: torch.Tensor, k: int, lower: bool, name: str) -> None:
    if out.numel() == 0:
        return
    rows, cols = x.shape[-2], x.shape[-1]
    k = max(min(k, cols), -rows)  # beyond these every element is kept or every one zeroed
    inplace = overlap.same_view(out, x)
    xv, ov = hbm(x), hbm(out)
    lead = x.dim() - 2
    xb, ob = _lead_merged(xv, lead), _lead_merged(ov, lead)
    if xb is not None and ob is not None:
        stacks = [(xb, ob)]
    else:
        stacks = [(xv[idx][None], ov[idx][None]) for idx in np.ndindex(*x.shape[:-2])]
    packed = rows <= P
    group = P // rows if packed else 1
    row_blocks = [(0, rows)] if packed else [(r0, min(rows, r0 + P)) for r0 in range(0, rows, P)]
    dtype = xv.dtype
    with launch(name, out.device.index) as nc:
        fmax = min(cols, FREE_MAX)
        zero = nc.sbuf_tile((min(P, group * rows) if packed else P, fmax), dtype)
        nc.vector.memset(zero, 0)
        for r0, r1 in row_blocks:
            for c0 in range(0, cols, fmax):
                c1 = min(cols, c0 + fmax)
                f = c1 - c0
                lo, hi = c0 - (r1 - 1), (c1 - 1) - r0  # extremes of j - i over the block
                full = hi <= k if lower else lo >= k
                empty = lo > k if lower else hi < k
                mark = nc.mark()
                mask = None
                if not full and not empty:
                    p = group * rows if packed else r1 - r0
                    diff = nc.sbuf_tile((p, f), np.int32)
                    if packed:  # partition q holds row q % rows of matrix q // rows
                        row = nc.sbuf_tile((p, 1), np.int32)
                        nc.gpsimd.iota(row, base=0, partition_step=1, free_step=0)
                        nc.vector.tensor_scalar(row, row, "remainder", rows)
                        nc.gpsimd.iota(diff, base=c0, partition_step=0, free_step=1)
                        nc.vector.tensor_tensor(diff, diff, row, "subtract")
                    else:
                        nc.gpsimd.iota(diff, base=c0 - r0, partition_step=-1, free_step=1)
                    mask = nc.sbuf_tile((p, f), np.bool_)
                    nc.vector.tensor_scalar(mask, diff, "less_equal" if lower else "greater_equal", k)
                for xs, os_ in stacks:
                    for b0 in range(0, xs.shape[0], group):
                        b1 = min(xs.shape[0], b0 + group)
                        src = xs[b0:b1, r0:r1, c0:c1]
                        dst = os_[b0:b1, r0:r1, c0:c1]
                        n = (b1 - b0) * (r1 - r0)
                        if full:
                            if not inplace:
                                nc.dma.hbm_copy(dst, src)
                            continue
                        if empty:
                            nc.dma.store(dst, zero[:n, :f])
                            continue
                        inner = nc.mark()
                        t = nc.sbuf_tile((n, f), dtype)
                        nc.dma.load(t, src)
                        o = nc.sbuf_tile((n, f), dtype)
                        nc.vector.select(o, mask[:n], t, zero[:n, :f])
                        nc.dma.store(dst, o)
                        nc.release_to(inner)
                nc.release_to(mark)


def _register_tri(name: str, lower: bool) -> None:
    def kernel(self, diagonal=0, *, out):
        if self.dim() < 2:
            raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
        _exact_dtype(out, self.dtype)
        _resize_out(out, self.shape)
        _tri(self, out, int(diagonal), lower, name)
        return out

    kernel.__name__ = f"{name}_out"
    TABLE.native(f"aten::{name}.out", dtypes=COMPUTE_DTYPES, serves=(f"aten::{name}", f"aten::{name}_"))(kernel)


_register_tri("tril", True)
_register_tri("triu", False)
