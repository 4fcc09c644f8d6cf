"""The elementwise family's shared pieces: dtype refusals, one ALU step over tiles or scalars, operand
tiles, the GpSimd fma, and which elements CPU's vectorized loop computes.

Tiling (``common.elementwise``, which every op of the family runs): flat tiles ``[p <= 128, f <= FREE_MAX]``
of the output in its memory order, consecutive elements along a partition's free axis; operands DMA'd in
tile by tile, the op's ``emit`` computing on VectorE (ALU) or ScalarE (transcendentals), DMA out.
``_fma`` is the one step no fixed-function engine does: a multiply-add rounded once, on GpSimd's cores.
``_vector_split`` splits one op's launch into the elements CPU's vector lambda computes and those its
scalar lambda computes, each then an ``elementwise`` launch of its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from device_impl.engine import Tile
from device_impl.kernels.common import SCALAR_TYPE_NAMES, fma32, numpy_compute, numpy_dtype

BOOL = np.dtype(np.bool_)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _refuse(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    """The error CPU kernels raise for a dtype they have no implementation for."""
    return NotImplementedError(f'"{kernel}" not implemented for \'{SCALAR_TYPE_NAMES[dtype]}\'')


def _narrow(dtype: torch.dtype) -> np.dtype:
    """Compute dtype of CPU's rounding divisions: bf16/fp16 round every intermediate step to the
    dtype there (Vectorized<BFloat16> arithmetic), unlike the single-rounding opmath of other ops."""
    return numpy_dtype(dtype) if dtype in (torch.bfloat16, torch.float16) else numpy_compute(dtype)


def binary(nc, out: Tile, x: Any, y: Any, op: str, cd: np.dtype) -> None:
    """out = x <op> y where either side may be a tile or an immediate scalar."""
    if isinstance(x, Tile) and isinstance(y, Tile):
        nc.vector.tensor_tensor(out, x, y, op, dtype=cd)
    elif isinstance(x, Tile):
        nc.vector.tensor_scalar(out, x, op, y, dtype=cd)
    else:
        nc.vector.tensor_scalar(out, y, op, x, reverse=True, dtype=cd)


def _as_tile(nc, value: Any, like: Tile, dtype: np.dtype) -> Tile:
    if isinstance(value, Tile):
        return value
    tile = nc.sbuf_tile(like.shape, dtype)
    nc.vector.memset(tile, value)
    return tile


_FMA_STEPS = 4  # GpSimd element-steps per emulated fma: widen, exact product, two-sum, round to odd


def _fma(nc, out: Tile, a: Tile, b: Tile, c: Tile) -> None:
    """out = a * b + c rounded once to fp32 (then to out's dtype on store), on GpSimd."""

    def program(o, x, y, z):
        o[...] = fma32(x, y, z)

    nc.gpsimd.run("fma", program, (out,), (a, b, c), elements=out.data.size, factor=_FMA_STEPS)


def _tiles(nc, like: Tile, dtype: np.dtype, *values: Any) -> list[Tile]:
    """Operands as tiles (host scalars, already in the op's dtype, are broadcast by a memset)."""
    return [_as_tile(nc, v, like, dtype) for v in values]


# --- which elements CPU's vectorized loop computes ---------------------------------
# cpu_kernel_vec (ATen's native/cpu/Loops.h) runs each inner run of TensorIterator's loop with the vector
# lambda in blocks of 2 * Vec::size() elements and the remainder with the scalar lambda (basic_loop); a run
# whose operands are not all contiguous (one input may be broadcast, stride 0) is scalar throughout. Some
# kernels' two lambdas round differently (lerp's zero signs, add's alpha * other in bf16/fp16), so the device
# computes the two regions with the matching formula. Serial loops only: above GRAIN_SIZE with several
# threads at::parallel_for splits runs at chunk boundaries, which is not modelled.

def _ti_loop(out: torch.Tensor, inputs) -> tuple[list[int], list[list[int]]]:
    """TensorIterator's coalesced iteration shape (innermost first) and each operand's strides in elements
    (out first): reorder_dimensions' insertion sort by strides, then coalesce_dimensions."""
    shape = list(out.shape)
    nd = len(shape)
    ops = [list(out.stride())]
    for t in inputs:
        st = [0] * nd
        off = nd - t.dim()
        for i in range(t.dim()):
            st[off + i] = 0 if (t.shape[i] == 1 and shape[off + i] != 1) else t.stride(i)
        ops.append(st)
    perm = list(range(nd - 1, -1, -1))

    def should_swap(d0: int, d1: int) -> int:
        for st in ops:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    for i in range(1, nd):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            c = should_swap(perm[dim0], perm[dim1])
            if c > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif c < 0:
                break
    shp = [shape[d] for d in perm]
    sts = [[st[d] for d in perm] for st in ops]
    if not shp:
        return [1], [[1] for _ in sts]
    prev = 0
    for d in range(1, len(shp)):
        if shp[prev] == 1 or shp[d] == 1 or all(shp[prev] * st[prev] == st[d] for st in sts):
            if shp[prev] == 1:
                for st in sts:
                    st[prev] = st[d]
            shp[prev] *= shp[d]
        else:
            prev += 1
            if prev != d:
                for st in sts:
                    st[prev] = st[d]
                shp[prev] = shp[d]
    return shp[:prev + 1], [st[:prev + 1] for st in sts]


def _vector_split(out: torch.Tensor, tensors, block: int, scalar_operands: int = 0):
    """Split an elementwise launch over ``out`` and its tensor operands as CPU's cpu_kernel_vec does:
    ``(vector_part, scalar_part)``, each None or a tuple of views (out first, then the operands) of the
    elements that loop computes with its vector and with its scalar lambda."""
    shp, sts = _ti_loop(out, tensors)
    n0 = shp[0]
    inner = [st[0] for st in sts]
    inner += [0] * scalar_operands  # host scalars are 0-d operands of the iterator: stride 0
    contiguous = inner[0] == 1 and (all(s == 1 for s in inner[1:])
                                    or any(inner[k] == 0 and all(s == 1 for j, s in enumerate(inner[1:], 1)
                                                                 if j != k) for k in range(1, len(inner))))
    split = block * (n0 // block) if contiguous and n0 > 1 else 0
    tensors_all = [out, *tensors]

    def views(lo: int, hi: int):
        if hi <= lo:
            return None
        size = tuple(reversed(shp[1:])) + (hi - lo,)
        result = []
        for t, st in zip(tensors_all, sts):
            if t.dim() == 0:  # a 0-d operand (a host scalar may be one) broadcasts as it is: no view of it
                result.append(t)
                continue
            stride = tuple(reversed(st[1:])) + (st[0],)
            result.append(t.as_strided(size, stride, t.storage_offset() + lo * st[0]))
        return tuple(result)

    return views(0, split), views(split, n0)
