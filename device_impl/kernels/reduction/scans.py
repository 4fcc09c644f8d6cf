"""Scans: cumsum and cumprod (functional, out= and in-place).

Tiling: every other dimension on partitions (<= 128 rows per block), the scanned dimension along
the free axis in chunks of ``CHUNK`` elements. Each chunk is scanned on VectorE
(``tensor_scan``) and the previous chunk's running value carried in: on ScalarE for fp32
accumulation (bfloat16/float16 results), exactly in int64 on VectorE for integers. A float32
result is scanned in double on GpSimd (``scan64``), as CPU's acc_type (see ``_scan``).
"""

from __future__ import annotations


import numpy as np
import torch

from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import check_out, hbm
from device_impl.kernels.reduction.tiles import CHUNK, F64, I64, _Grid, _blocks, _boxes, _kernel, _row_scalar, _wrap
from device_impl.kernels.reduction.sums import _elem_for, _integral_default


def _scan(name: str, op: str, a: dict) -> torch.Tensor:
    x, dtype, out = a["self"], a.get("dtype"), a["out"]
    dim = _wrap(a["dim"], x.dim())
    rdtype = _integral_default(x, dtype, out)
    check_out(out, tuple(x.shape), rdtype, [x], exact_dtype=dtype is not None)
    if out.numel() == 0:
        return out
    with launch(name, out.device.index) as nc:
        scan_program(nc, hbm(x), hbm(out), dim, op, out.dtype, _elem_for(x, out.dtype))
    return out


def scan_program(nc, xv: np.ndarray, ov: np.ndarray, dim: int, op: str, rd: torch.dtype, elem) -> None:
    """The scan kernel's tile program on HBM arrays (``ov`` the result, of torch dtype ``rd``; ``elem``: the dtype
    each loaded tile is converted to first, ``sums._elem_for``): the eager cumsum/cumprod, and the compiler's
    ``cumprod`` step (compiler/opaque.py)."""
    cd = FP32 if rd.is_floating_point else I64
    nd = xv.ndim
    kdims = [d for d in range(nd) if d != dim]
    rdims = [dim] if nd else []
    g = _Grid([xv.shape[d] for d in kdims], [xv.shape[d] for d in rdims],
              kr=[xv.transpose(kdims + rdims), ov.transpose(kdims + rdims)])
    X, O = g.kr
    chunks = list(_boxes(g.rshape, CHUNK))
    # CPU's cumsum/cumprod carry the running value in at::acc_type<scalar_t, /*is_cuda=*/false>: double for a
    # float32 result (float for bfloat16/float16, int64 for integers), rounding each prefix once into the
    # output. An fp32 scan drifts from that by tens of ULP over a few thousand elements. No fixed-function
    # engine computes in double, so a real NeuronCore kernel would either scan in fp32 (and differ from CPU)
    # or carry a compensated (double-fp32) running value on GpSimd; the simulator runs the float32 scan as a
    # GpSimd program over double (``scan64``), so it matches CPU's acc_type, and charges it as emulated
    # double arithmetic (_SCAN64_STEPS element-steps per element).
    wide = rd == torch.float32
    for blk in _blocks(nc, g, [X]):
        if wide:
            carry = nc.sbuf_tile((blk.p, 1), F64)  # the double running value, read/written by GpSimd only
            for j, (ch, (t,)) in enumerate(blk.each(0)):
                mark = nc.mark()
                src = t
                if elem is not None:
                    src = nc.sbuf_tile(t.shape, elem)
                    nc.vector.tensor_copy(src, t)
                res = nc.sbuf_tile(t.shape, O.dtype)
                scan64(nc, res, carry, src, op, first=not j)
                blk.store(O, ch, res)
                nc.release_to(mark)
            nc.release(carry)
            continue
        carry = _row_scalar(nc, blk.p, cd)  # the running total at the end of the previous chunk
        for j, (ch, (t,)) in enumerate(blk.each(0)):
            mark = nc.mark()
            src = t
            if elem is not None:
                src = nc.sbuf_tile(t.shape, elem)
                nc.vector.tensor_copy(src, t)
            run = nc.sbuf_tile(t.shape, cd)
            nc.vector.tensor_scan(run, src, op, dtype=cd)
            res = run if O.dtype == cd else nc.sbuf_tile(t.shape, O.dtype)
            if cd == FP32:
                # carry in and round to the output on ScalarE (VectorE is busy with the scans)
                if j or res is not run:
                    if op == "add":
                        nc.scalar.activation(res, run, "identity", bias=carry if j else 0.0)
                    else:
                        nc.scalar.activation(res, run, "identity", scale=carry if j else 1.0)
                if j + 1 < len(chunks):  # the running total the next chunk starts from, in fp32
                    if res is run or not j:
                        nc.vector.tensor_copy(carry, (res if res is run else run)[:, t.free - 1:t.free])
                    else:
                        nc.vector.tensor_tensor(carry, run[:, t.free - 1:t.free], carry, op, dtype=cd)
            else:  # integers: exact int64 arithmetic on VectorE
                if j:
                    nc.vector.tensor_tensor(run, run, carry, op, dtype=cd)
                if res is not run:
                    nc.vector.tensor_copy(res, run)
                if j + 1 < len(chunks):
                    nc.vector.tensor_copy(carry, run[:, t.free - 1:t.free])
            blk.store(O, ch, res)
            nc.release_to(mark)
        nc.release(carry)


_SCAN64_STEPS = 4  # GpSimd element-steps per element of a double scan: widen, emulated double op, round


def scan64(nc, res: Tile, carry: Tile, src: Tile, op: str, first: bool) -> None:
    """One chunk of a float32 cumsum/cumprod on GpSimd: the inclusive scan of ``src`` in double, starting from
    the double running value ``carry`` (unless ``first``), each prefix rounded once into ``res``; ``carry``
    becomes the chunk's last prefix (see _scan: CPU's acc_type for float is double)."""
    scan = np.cumsum if op == "add" else np.cumprod

    def program(o, c_out, x, *c_in):
        # CPU's loop starts from the identity (0.0, so cumsum(-0.0) is +0.0) and continues the sequential
        # double scan from the previous chunk's last prefix
        start = c_in[0] if c_in else np.full((x.shape[0], 1), 0.0 if op == "add" else 1.0)
        with np.errstate(all="ignore"):
            run = scan(np.concatenate([start, x.astype(np.float64)], axis=1), axis=1)[:, 1:]
        o[...] = run
        c_out[...] = run[:, -1:]

    ins = (src,) if first else (src, carry)
    nc.gpsimd.run(f"scan64_{op}", program, (res, carry), ins, elements=src.data.size, factor=_SCAN64_STEPS)


@_kernel("aten::cumsum.out", serves=("aten::cumsum", "aten::cumsum_"))
def _cumsum_out(a: dict) -> torch.Tensor:
    return _scan("cumsum", "add", a)


@_kernel("aten::cumprod.out", serves=("aten::cumprod", "aten::cumprod_"))
def _cumprod_out(a: dict) -> torch.Tensor:
    return _scan("cumprod", "multiply", a)
