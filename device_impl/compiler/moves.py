"""Decompositions that say a data-movement op as the moves it is, for AOTAutograd (``numerics.DECOMPOSITIONS``).

PyTorch's decompositions of reflection and replication padding (``torch._decomp``
``_reflection_or_replication_pad``) index the input with computed index tensors: torch-mlir imports
them as iotas, index arithmetic, index tensors broadcast to the output's full shape (a concatenation
of one [*out, 1] tensor per dim) and a gather per padded dim, so the compiled program built and read
an index tensor several times the data's size before moving a byte (a 3-d reflection pad: 19.6 us
against the eager kernel's 1.2 us). Each padded dim is instead one concatenation of the input and
its edge slices (reversed for reflection, broadcast for replication), which the compiler runs as
strided DMA copies of views: the same elements moved, so the same bits.

A call these do not cover (negative padding, a reflection pad as long as the dim, an empty dim)
returns NotImplemented, so PyTorch's decomposition runs as before; the argument checks themselves
happened already in the fake-tensor pass that traced the graph (the ops' meta functions).
"""

from __future__ import annotations

from typing import Sequence

import torch

aten = torch.ops.aten


def _padded(x: torch.Tensor, padding: Sequence[int], dims: int, reflect: bool) -> torch.Tensor:
    """x padded along its last ``dims`` dims by ``padding`` (last dim first, as F.pad), one cat per padded dim;
    NotImplemented where PyTorch's decomposition should run instead."""
    if len(padding) != 2 * dims or x.dim() < dims:
        return NotImplemented
    pads = [(int(padding[2 * i]), int(padding[2 * i + 1])) for i in range(dims)]
    for i, (left, right) in enumerate(pads):
        n = x.shape[x.dim() - 1 - i]
        if left < 0 or right < 0 or n == 0 or (reflect and max(left, right) >= n):
            return NotImplemented
    out = x
    for i, (left, right) in enumerate(pads):
        if left == 0 and right == 0:
            continue
        d = x.dim() - 1 - i
        n = out.shape[d]
        pieces = []
        if reflect:  # out[-k] = x[k]: the k elements after the first, reversed; likewise before the last
            if left:
                pieces.append(out.narrow(d, 1, left).flip(d))
            pieces.append(out)
            if right:
                pieces.append(out.narrow(d, n - 1 - right, right).flip(d))
        else:  # the edge element repeated
            sizes = list(out.shape)
            if left:
                sizes[d] = left
                pieces.append(out.narrow(d, 0, 1).expand(sizes))
            pieces.append(out)
            if right:
                sizes[d] = right
                pieces.append(out.narrow(d, n - 1, 1).expand(sizes))
        out = torch.cat(pieces, d)
    return out


def _pad_of(dims: int, reflect: bool):
    def decomposition(x: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
        return _padded(x, padding, dims, reflect)
    return decomposition


DECOMPOSITIONS = {
    aten.reflection_pad1d.default: _pad_of(1, True),
    aten.reflection_pad2d.default: _pad_of(2, True),
    aten.reflection_pad3d.default: _pad_of(3, True),
    aten.replication_pad1d.default: _pad_of(1, False),
    aten.replication_pad2d.default: _pad_of(2, False),
    aten.replication_pad3d.default: _pad_of(3, False),
}
