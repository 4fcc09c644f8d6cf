"""cummax and cummin: the running extremum and its index along a dim (``_cummax_helper``/``_cummin_helper``, the
kernels CPU's cummax/cummin call after resizing values and indices; a 0-dim or empty input never reaches them).

CPU's ``cummax_cummin_helper`` (ReduceOps.cpp) walks each line once: an element replaces the running value when it
is NaN, or when the running value is not NaN and ``op(element, running)`` holds, with ``op`` greater_equal for
cummax and less_equal for cummin, so on a tie the later index wins (and a later 0.0 replaces -0.0: its sign is
the value's), every NaN moves the index to itself, and nothing replaces a NaN after it. The same walk runs here
as a GpSimd program per chunk of the scanned dim (tiling of ``scans``: the other dims on partitions), the running
value and index carried from chunk to chunk in SBUF.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.dispatch import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import is_float
from device_impl.kernels.common import COMPUTE_DTYPES, hbm
from device_impl.kernels.reduction.tiles import I64, _blocks, _Grid, _wrap

_STEPS = 4  # GpSimd element-steps per element: the NaN tests, the compare, two selects

# the comparison CPU's helper makes (std::greater_equal / std::less_equal)
_TAKES = {"cummax": np.greater_equal, "cummin": np.less_equal}


def _walk(takes, first: bool, c0: int):
    """The GpSimd program of one chunk: CPU's loop over its columns, from the carried value and index."""

    def program(vals, inds, carry_v, carry_i, x, *carried):
        floating = is_float(x.dtype)
        wide = x.astype(np.float64) if floating else x  # exact for every float dtype: CPU compares the values
        if first:
            run, idx = wide[:, 0].copy(), np.zeros(x.shape[0], dtype=np.int64)
        else:
            run, idx = carried[0][:, 0].astype(wide.dtype), carried[1][:, 0].copy()
        for j in range(x.shape[1]):
            cur = wide[:, j]
            with np.errstate(invalid="ignore"):
                take = takes(cur, run)
            if floating:
                take = np.isnan(cur) | (~np.isnan(run) & take)
            run = np.where(take, cur, run)
            idx = np.where(take, c0 + j, idx)
            vals[:, j] = run
            inds[:, j] = idx
        carry_v[:, 0] = run
        carry_i[:, 0] = idx

    return program


def _cum_extremum(name: str, x: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> None:
    if x.numel() == 0:
        return
    dim = _wrap(dim, x.dim())
    xv, vv, iv = hbm(x), hbm(values), hbm(indices)
    nd = xv.ndim
    kdims = [d for d in range(nd) if d != dim]
    rdims = [dim] if nd else []
    perm = kdims + rdims
    g = _Grid([xv.shape[d] for d in kdims], [xv.shape[d] for d in rdims],
              kr=[xv.transpose(perm), vv.transpose(perm), iv.transpose(perm)])
    X, V, Ix = g.kr
    takes = _TAKES[name]
    with launch(name, values.device.index) as nc:
        for blk in _blocks(nc, g, [X]):
            carry_v = nc.sbuf_tile((blk.p, 1), np.dtype(np.float64) if is_float(X.dtype) else X.dtype)
            carry_i = nc.sbuf_tile((blk.p, 1), I64)
            for j, (ch, (t,)) in enumerate(blk.each(0)):
                mark = nc.mark()
                vals = nc.sbuf_tile(t.shape, V.dtype)
                inds = nc.sbuf_tile(t.shape, I64)
                ins = (t,) if not j else (t, carry_v, carry_i)
                nc.gpsimd.run(f"{name}_walk", _walk(takes, not j, ch[0]), (vals, inds, carry_v, carry_i), ins,
                              elements=t.data.size, factor=_STEPS)
                blk.store(V, ch, vals)
                blk.store(Ix, ch, inds)
                nc.release_to(mark)
            nc.release(carry_v)
            nc.release(carry_i)


@TABLE.native("aten::_cummax_helper", dtypes=COMPUTE_DTYPES)
def _cummax_helper(self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> None:
    _cum_extremum("cummax", self, values, indices, dim)


@TABLE.native("aten::_cummin_helper", dtypes=COMPUTE_DTYPES)
def _cummin_helper(self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> None:
    _cum_extremum("cummin", self, values, indices, dim)
