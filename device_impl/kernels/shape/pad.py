"""Padding: constant_pad_nd (pad), reflection_pad{1,2,3}d, replication_pad{1,2,3}d and their backward.

Tiling:

* constant_pad_nd: the interior copied (one DMA over strided views, ``moves._move``), the pad boxes
  stored from a tile memset to the value (``moves._fill``: 2-D pieces ``[p <= 128, f <= FREE_MAX]``);
  negative pads crop the input before the copy;
* reflection/replication pads: one copy per box of the output (<= 3 per padded dim), reflected
  boxes read with negative strides, replicated ones with zero strides; their backward ops fold the
  padded dims back one at a time, accumulating in fp32 on VectorE (``moves._accumulate``, and
  ``_accumulate_sum`` for a replicated edge: rows on partitions, the padded run on the free axis).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels.common import SCALAR_TYPE_NAMES, hbm, launch
from device_impl.kernels.registry import routed_by_composite
from device_impl.kernels.shape.moves import (
    _FLOATS,
    _accumulate,
    _accumulate_sum,
    _const_tile,
    _exact_dtype,
    _fill,
    _fill_value,
    _move,
    _resize_out,
    _serve,
    suggest_memory_format,
)


# --- constant padding --------------------------------------------------------------

@TABLE.native("aten::constant_pad_nd", dtypes=COMPUTE_DTYPES, serves=("aten::constant_pad_nd.out",))
def constant_pad_nd(self, pad, value=0):
    pad = [int(p) for p in pad]
    if len(pad) % 2:
        raise RuntimeError(f"Length of pad must be even but instead it equals {len(pad)}")
    l_inp, l_pad = self.dim(), len(pad) // 2
    l_diff = l_inp - l_pad
    if l_inp < l_pad:
        raise RuntimeError(f"Length of pad should be no more than twice the number of dimensions of the input. "
                           f"Pad length is {len(pad)}while the input has {l_inp}dimensions.")
    c_input = self
    all_non_positive = True
    for i in range(l_diff, l_inp):
        k = 2 * (l_inp - i - 1)
        if pad[k] < 0:
            c_input = c_input.narrow(i, -pad[k], c_input.size(i) + pad[k])
        elif pad[k] != 0:
            all_non_positive = False
        if pad[k + 1] < 0:
            c_input = c_input.narrow(i, 0, c_input.size(i) + pad[k + 1])
        elif pad[k + 1] != 0:
            all_non_positive = False
    if all_non_positive:  # a crop: clone of the narrowed view
        out = torch.empty_like(c_input)
        if out.numel():
            with launch("constant_pad_nd", out.device.index) as nc:
                _move(nc, hbm(out), hbm(c_input))
        return out
    new_shape = list(self.shape[:l_diff])
    for i in range(l_pad):
        k = len(pad) - (i + 1) * 2
        size = self.shape[l_diff + i]
        new = size + pad[k] + pad[k + 1]
        if new < 0:
            raise RuntimeError(f"The input size {size}, plus negative padding {pad[k]} and {pad[k + 1]} resulted in "
                               f"a negative output size, which is invalid. Check dimension {l_diff + i} of your "
                               f"input.")
        new_shape.append(new)
    fill = _fill_value(value, self.dtype)
    out = torch.empty(new_shape, dtype=self.dtype, device=self.device, memory_format=suggest_memory_format(self))
    if out.numel() == 0:
        return out
    dst = hbm(out)
    interior = [slice(None)] * l_inp
    regions = []
    for i in range(l_diff, l_inp):
        k = 2 * (l_inp - i - 1)
        lo, hi = max(pad[k], 0), new_shape[i] - max(pad[k + 1], 0)
        for sl in (slice(0, lo), slice(hi, new_shape[i])):
            if sl.stop > sl.start:
                regions.append(dst[tuple(interior[:i] + [sl] + [slice(None)] * (l_inp - i - 1))])
        interior[i] = slice(lo, hi)
    with launch("constant_pad_nd", out.device.index) as nc:
        const = _const_tile(nc, dst.dtype, fill, regions)
        for region in regions:
            _fill(nc, region, const)
        _move(nc, dst[tuple(interior)], hbm(c_input))
    return out


# --- reflection and replication padding ----------------------------------------------

def _pad_pieces(w: int, pl: int, pr: int, mode: str) -> list[tuple[int, int, Any]]:
    """Boxes of one padded dim: (out start, out stop, input slice | ('edge', index)).

    Output index j reads input index reflect(j - pl) or clamp(j - pl) (negative pads crop)."""
    t0, t1 = -pl, w + pr
    pieces = []
    a, b = t0, min(t1, 0)
    if b > a:
        src = slice(-a, -b, -1) if mode == "reflect" else ("edge", 0)
        pieces.append((a + pl, b + pl, src))
    a, b = max(t0, 0), min(t1, w)
    if b > a:
        pieces.append((a + pl, b + pl, slice(a, b)))
    a, b = max(t0, w), t1
    if b > a:
        if mode == "reflect":
            start = 2 * (w - 1) - a
            stop = start - (b - a)
            src = slice(start, stop if stop >= 0 else None, -1)
        else:
            src = ("edge", w - 1)
        pieces.append((a + pl, b + pl, src))
    return pieces


def _src_index(src) -> slice:
    return src if isinstance(src, slice) else slice(src[1], src[1] + 1)


class _Pad:
    """One of reflection_pad{1,2,3}d / replication_pad{1,2,3}d: argument checks and layouts."""

    def __init__(self, mode: str, n: int):
        self.mode, self.n = mode, n
        self.name = f"{'reflection' if mode == 'reflect' else 'replication'}_pad{n}d"

    def pads(self, padding) -> list[tuple[int, int]]:
        """(left, right) per padded dim, outermost first."""
        padding = [int(p) for p in padding]
        if len(padding) != 2 * self.n:
            suffix = f", but got: {len(padding)}" if self.mode == "reflect" else ""
            raise RuntimeError(f"padding size is expected to be {2 * self.n}{suffix}")
        return [(padding[2 * k], padding[2 * k + 1]) for k in reversed(range(self.n))]

    def check_input(self, x: torch.Tensor) -> None:
        n = self.n
        ok = x.dim() in (n + 1, n + 2) and all(s != 0 for s in x.shape[(1 if x.dim() == n + 2 else 0):])
        if not ok:
            raise RuntimeError(f"Expected {n + 1}D or {n + 2}D (batch mode) tensor with possibly 0 batch size and "
                               f"other non-zero dimensions for input, but got: {list(x.shape)}")

    def out_shape(self, x: torch.Tensor, pads: list[tuple[int, int]]) -> list[int]:
        dims = list(range(x.dim() - self.n, x.dim()))
        if self.mode == "reflect":
            for k, (d, (pl, pr)) in reversed(list(enumerate(zip(dims, pads)))):
                if not (pl < x.shape[d] and pr < x.shape[d]):
                    arg = 4 + 2 * (self.n - 1 - k)
                    raise RuntimeError(f"Argument #{arg}: Padding size should be less than the corresponding input "
                                       f"dimension, but got: padding ({pl}, {pr}) at dimension {d} of input "
                                       f"{list(x.shape)}")
        shape = list(x.shape)
        for d, (pl, pr) in zip(dims, pads):
            shape[d] = x.shape[d] + pl + pr
        # 1-D needs an output column; 2-D/3-D only refuse an output empty in every padded dim (a
        # CPU quirk: one empty dim gives an empty result), then any negative size.
        if all(shape[d] < 1 for d in dims) or (self.n == 1 and shape[dims[0]] < 1):
            names = "DHW"[3 - self.n:]
            given = " ".join(f"{c}: {x.shape[d]}" for c, d in zip(names, dims))
            calc = " ".join(f"{c}: {shape[d]}" for c, d in zip(names, dims))
            raise RuntimeError(f"input ({given}) is too small. Calculated output {calc}")
        if any(shape[d] < 0 for d in dims):
            bad = next(shape[d] for d in dims if shape[d] < 0)
            raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {shape}")
        return shape

    def memory_format(self, x: torch.Tensor):
        return torch.contiguous_format if self.n == 1 else suggest_memory_format(x)

    def resize(self, out: torch.Tensor, shape, x: torch.Tensor, restride: bool = True) -> None:
        """Structured resize; the 2-D and 3-D CPU kernels then restride even a correctly sized out."""
        fmt = self.memory_format(x) if restride else torch.contiguous_format
        _resize_out(out, shape, fmt)
        if self.n > 1 and restride:
            out.resize_(tuple(shape), memory_format=fmt)

    def _restrides_grad(self, g: torch.Tensor) -> bool:
        # CPU's reflection_pad3d_backward returns before its restride (and before zeroing the
        # result) when grad_output is empty; the device zeroes it but keeps CPU's layout.
        return not (self.mode == "reflect" and self.n == 3 and g.numel() == 0)

    def refuse(self, dtype: torch.dtype, backward: bool = False) -> NotImplementedError:
        name = self.name + ("_backward" if backward else "")
        return NotImplementedError(f'"{name}" not implemented for \'{SCALAR_TYPE_NAMES[dtype]}\'')

    # forward
    def meta(self, x: torch.Tensor, padding) -> list[int]:
        pads = self.pads(padding)
        self.check_input(x)
        shape = self.out_shape(x, pads)
        if x.dtype == torch.bool:
            raise self.refuse(x.dtype)
        return shape

    def compute(self, out: torch.Tensor, x: torch.Tensor, padding) -> None:
        if out.numel() == 0:
            return
        with launch(self.name, out.device.index) as nc:
            self.forward_program(nc, hbm(out), hbm(x), self.pads(padding))

    def forward_program(self, nc, out: np.ndarray, x: np.ndarray, pads: list[tuple[int, int]]) -> None:
        """The forward's tile program on HBM arrays, inside a launch: one DMA move per box of the padded dims'
        pieces, each straight from the input. The eager kernel and the compiler's ``pad`` step
        (compiler/opaque_pads.py) both run it, so a compiled pad is one step of these moves, not one
        concatenation per padded dim, each waiting for the last one's stores."""
        dims = list(range(x.ndim - self.n, x.ndim))
        per_dim = [_pad_pieces(x.shape[d], pl, pr, self.mode) for d, (pl, pr) in zip(dims, pads)]
        for combo in itertools.product(*per_dim):
            di = [slice(None)] * x.ndim
            si = [slice(None)] * x.ndim
            for d, (o0, o1, piece) in zip(dims, combo):
                di[d] = slice(o0, o1)
                si[d] = _src_index(piece)
            _move(nc, out[tuple(di)], x[tuple(si)])

    def functional(self, x, padding):
        shape = self.meta(x, padding)
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=self.memory_format(x))
        self.compute(out, x, padding)
        return out

    def out_variant(self, x, padding, *, out):
        shape = self.meta(x, padding)
        _exact_dtype(out, x.dtype)
        self.resize(out, shape, x)
        self.compute(out, x, padding)
        return out

    # backward
    def backward_meta(self, g: torch.Tensor, x: torch.Tensor, padding) -> None:
        pads = self.pads(padding)
        self.check_input(x)
        shape = self.out_shape(x, pads)
        names = {1: ["width"], 2: ["height", "width"], 3: ["depth", "height", "width"]}[self.n]
        if g.dim() != x.dim() or any(g.shape[d] != x.shape[d] for d in range(x.dim() - self.n)):
            raise RuntimeError(f"{self.name}_backward: grad_output of shape {list(g.shape)} does not match the "
                               f"output shape {shape}")
        for name, d in zip(names, range(x.dim() - self.n, x.dim())):
            if g.shape[d] != shape[d]:
                sep = "," if self.mode == "reflect" or self.n > 1 else ""
                label = "grad_output" if (self.mode == "reflect" and self.n == 1) else "gradOutput"
                raise RuntimeError(f"{label} {name} unexpected. Expected: {shape[d]}{sep} Got: {g.shape[d]}")
        if g.dtype != x.dtype:
            if g.dtype in _FLOATS or g.dtype.is_floating_point:
                raise RuntimeError(f"expected scalar type {SCALAR_TYPE_NAMES[x.dtype]} but found "
                                   f"{SCALAR_TYPE_NAMES[g.dtype]}")
        if g.dtype not in _FLOATS:
            raise self.refuse(g.dtype, backward=True)

    def backward_compute(self, gi: torch.Tensor, g: torch.Tensor, x: torch.Tensor, padding) -> None:
        if gi.numel() == 0:
            return
        keep: list[torch.Tensor] = []

        def scratch(shape) -> np.ndarray:
            keep.append(torch.empty(shape, dtype=torch.float32, device=gi.device))
            return hbm(keep[-1])

        with launch(self.name + "_backward", gi.device.index) as nc:
            self.backward_program(nc, hbm(gi), hbm(g), self.pads(padding), scratch)

    def backward_program(self, nc, gi: np.ndarray, g: np.ndarray, pads: list[tuple[int, int]], scratch) -> None:
        """The backward's tile program on HBM arrays, inside a launch: ``gi`` (the input's shape) from ``g`` (the
        output's), one fold per padded dim, innermost first, through float32 buffers ``scratch(shape)`` gives.
        The eager kernel and the compiler's ``pad_backward`` step (compiler/opaque_cnn.py) both run it."""
        dims = list(range(gi.ndim - self.n, gi.ndim))
        cur = g
        for step, (d, (pl, pr)) in enumerate(zip(reversed(dims), reversed(pads))):
            shape = list(cur.shape)
            shape[d] = gi.shape[d]
            last = step == len(dims) - 1
            dst = gi if last and gi.dtype == np.float32 else scratch(shape)
            self._fold(nc, dst, cur, d, gi.shape[d], pl, pr)
            cur = dst
        if gi.dtype != np.float32:
            _move(nc, gi, cur)

    def _fold(self, nc, dst: np.ndarray, src: np.ndarray, d: int, w: int, pl: int, pr: int) -> None:
        """dst (input size along d, fp32) = the adjoint of padding dim d applied to src, as CPU's backward
        computes it: grad_input zeroed, then every output position's gradient added in output order (so
        a -0.0 gradient lands as +0.0, and an edge's terms add left pad, middle, right pad)."""
        lead = (slice(None),) * d
        whole = dst[lead + (slice(0, w),)]
        _fill(nc, whole, _const_tile(nc, dst.dtype, 0, [whole]))
        for o0, o1, s in _pad_pieces(w, pl, pr, self.mode):
            if isinstance(s, slice):
                _accumulate(nc, dst[lead + (s,)], src[lead + (slice(o0, o1),)])
            else:
                _accumulate_sum(nc, dst[lead + (s[1],)], src[lead + (slice(o0, o1),)], d)

    def backward_functional(self, grad_output, self_, padding):
        self.backward_meta(grad_output, self_, padding)
        fmt = self.memory_format(self_) if self._restrides_grad(grad_output) else torch.contiguous_format
        gi = torch.empty(tuple(self_.shape), dtype=grad_output.dtype, device=self_.device, memory_format=fmt)
        self.backward_compute(gi, grad_output, self_, padding)
        return gi

    def backward_out(self, grad_output, self_, padding, *, grad_input):
        self.backward_meta(grad_output, self_, padding)
        _exact_dtype(grad_input, grad_output.dtype)
        self.resize(grad_input, self_.shape, self_, self._restrides_grad(grad_output))
        self.backward_compute(grad_input, grad_output, self_, padding)
        return grad_input


def _register_pad(mode: str, n: int) -> None:
    pad = _Pad(mode, n)
    base = f"aten::{pad.name}"
    TABLE.native(f"{base}.out", dtypes=None)(pad.out_variant)
    if routed_by_composite(base):
        TABLE.serves(base, f"{base}.out")
    else:
        TABLE.native(base, dtypes=None)(pad.functional)
    TABLE.native(f"{base}_backward.grad_input", dtypes=COMPUTE_DTYPES)(pad.backward_out)
    if routed_by_composite(f"{base}_backward"):
        TABLE.serves(f"{base}_backward", f"{base}_backward.grad_input")
    else:
        TABLE.native(f"{base}_backward", dtypes=COMPUTE_DTYPES)(pad.backward_functional)


for _mode in ("reflect", "replicate"):
    for _n in (1, 2, 3):
        _register_pad(_mode, _n)


_serve(["aten::pad"], "aten::constant_pad_nd")
