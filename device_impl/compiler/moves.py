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

import itertools
from typing import Sequence

import torch
import torch._decomp

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


def _reflection_pad_backward_of(dims: int):
    """reflection_pad{1,2,3}d_backward as CPU's kernel sums: grad_input starts at +0 and each grad_output element is
    added to its source in row-major order of grad_output. Along a padded dim the output's left edge, centre
    and right edge come in that order, and each input element receives at most one element of each block of the
    product of those regions (left/centre/right per dim), so adding the blocks (reversed along their edge
    dims, zero-padded to the input's shape) in row-major order of the regions adds each element's terms in
    CPU's order: ((+0 + a) + b) + ..., a missing term a +0 that leaves the sum as it is (the first
    addition's +0 already turned a -0 into +0). Elementwise adds of copies, where PyTorch's decomposition
    builds index tensors for an accumulating scatter."""
    def decomposition(grad_output: torch.Tensor, x: torch.Tensor, padding: Sequence[int]) -> torch.Tensor:
        if len(padding) != 2 * dims or x.dim() < dims or not grad_output.is_floating_point():
            return NotImplemented
        nd = x.dim()
        regions = []  # per padded dim, outermost first: (dim, [(out start, length, in start, reversed)])
        for i in reversed(range(dims)):
            left, right = int(padding[2 * i]), int(padding[2 * i + 1])
            d = nd - 1 - i
            n = x.shape[d]
            if left < 0 or right < 0 or n == 0 or max(left, right) >= n \
                    or grad_output.shape[d] != n + left + right:
                return NotImplemented
            here = [(left, n, 0, False)]
            if left:
                here.insert(0, (0, left, 1, True))  # out k < left is in left - k
            if right:
                here.append((left + n, right, n - 1 - right, True))  # out left + n + k is in n - 2 - k
            regions.append((d, here))
        total = None
        for combo in itertools.product(*(here for _, here in regions)):
            block, flips, pad = grad_output, [], [0] * (2 * nd)
            for (d, _), (start, length, into, rev) in zip(regions, combo):
                block = block.narrow(d, start, length)
                if rev:
                    flips.append(d)
                k = 2 * (nd - 1 - d)
                pad[k], pad[k + 1] = into, x.shape[d] - into - length
            if flips:
                block = block.flip(flips)
            if any(pad):
                block = aten.constant_pad_nd(block, pad, 0)
            total = block + 0.0 if total is None else total + block
        return total
    return decomposition


MAX_WINDOW = 256  # kernel offsets im2col copies one by one (each a strided view); larger: PyTorch's gather


def _im2col(x: torch.Tensor, kernel_size: Sequence[int], dilation: Sequence[int], padding: Sequence[int],
            stride: Sequence[int]) -> torch.Tensor:
    """im2col as its copies: the (zero-padded) input's strided window view for each kernel offset, stacked
    into [N, C, kh * kw, oh, ow] and read as [N, C * kh * kw, L] (CPU's column order: channel, then kernel
    row, then kernel column), instead of PyTorch's index tensors and gather. Pure copies (a padded position
    is CPU's +0): the same bits."""
    if x.dim() not in (3, 4) or len(kernel_size) != 2 or x.numel() == 0:
        return NotImplemented
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel_size, dilation, padding, stride
    if kh * kw > MAX_WINDOW or min(kh, kw, dh, dw, sh, sw) <= 0 or min(ph, pw) < 0:
        return NotImplemented
    batched = x.dim() == 4
    x4 = x if batched else x.unsqueeze(0)
    n, c, h, w = x4.shape
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    if oh <= 0 or ow <= 0:
        return NotImplemented
    xp = aten.constant_pad_nd(x4, [pw, pw, ph, ph], 0) if ph or pw else x4
    blocks = [xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
              for i in range(kh) for j in range(kw)]
    out = torch.stack(blocks, 2).reshape(n, c * kh * kw, oh * ow)
    return out if batched else out.squeeze(0)


def _roll(x: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = ()) -> torch.Tensor:
    """roll as one concatenation per rolled dim of the input's two pieces (its last ``shift`` elements, then the
    rest), strided copies, where PyTorch's decomposition gathers through computed indices. No dims: the
    flattened tensor rolled and viewed back, as CPU."""
    if not dims:
        if len(shifts) != 1:
            return NotImplemented
        out = _roll(x.flatten(), shifts, (0,))
        return NotImplemented if out is NotImplemented else out.view(x.shape)
    if len(shifts) != len(dims) or x.numel() == 0:
        return NotImplemented
    out = x
    for shift, dim in zip(shifts, dims):
        d = dim % x.dim()
        n = x.shape[d]
        k = int(shift) % n
        if k:
            out = torch.cat([out.narrow(d, n - k, k), out.narrow(d, 0, n - k)], d)
    return out.clone() if out is x else out


def _select_scatter(x: torch.Tensor, src: torch.Tensor, dim: int, index: int) -> torch.Tensor:
    """select_scatter as the concatenation of x before the index, src, and x after it: copies, where PyTorch's
    decomposition compares an iota with the index and selects over the whole tensor."""
    if x.dim() == 0 or src.dtype != x.dtype or x.numel() == 0:
        return NotImplemented
    d = dim % x.dim()
    n = x.shape[d]
    i = index + n if index < 0 else index
    if not 0 <= i < n or tuple(src.shape) != tuple(x.shape[:d] + x.shape[d + 1:]):
        return NotImplemented
    pieces = [x.narrow(d, 0, i)] if i else []
    pieces.append(src.unsqueeze(d))
    if i + 1 < n:
        pieces.append(x.narrow(d, i + 1, n - i - 1))
    return torch.cat(pieces, d) if len(pieces) > 1 else pieces[0].clone()


def _col2im(cols: torch.Tensor, output_size: Sequence[int], kernel_size: Sequence[int], dilation: Sequence[int],
            padding: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """col2im (F.fold) as CPU's kernel sums: the image starts at +0 and each column element is added to its pixel,
    kernel offsets in order (CPU's loop over the column rows c * kh * kw + i * kw + j), one offset never
    reaching a pixel twice. So each offset's block, spread to its strided pixel positions (zeros between:
    a +0 that leaves a sum as it is once the first addition made any -0 +0) and placed at its offset in the
    padded image, is added in that order, and the padding cropped: adds of copies, where PyTorch's
    decomposition builds index tensors for an accumulating scatter."""
    if cols.dim() not in (2, 3) or len(kernel_size) != 2 or not cols.is_floating_point() or cols.numel() == 0:
        return NotImplemented
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = output_size, kernel_size, dilation, padding, stride
    if kh * kw > MAX_WINDOW or min(kh, kw, dh, dw, sh, sw) <= 0 or min(ph, pw) < 0:
        return NotImplemented
    batched = cols.dim() == 3
    c3 = cols if batched else cols.unsqueeze(0)
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    n, ckk, length = c3.shape
    if oh <= 0 or ow <= 0 or ckk % (kh * kw) or length != oh * ow:
        return NotImplemented
    c = ckk // (kh * kw)
    blocks = c3.reshape(n, c, kh * kw, oh, ow)
    hp, wp = h + 2 * ph, w + 2 * pw
    total = None
    for i in range(kh):
        for j in range(kw):
            block = blocks[:, :, i * kw + j]
            if sh > 1 or sw > 1:  # a block element every stride pixels: zeros between
                block = aten.constant_pad_nd(block.reshape(n, c, oh, 1, ow, 1), [0, sw - 1, 0, 0, 0, sh - 1], 0)
                block = block.reshape(n, c, oh * sh, ow * sw)
            top, left = i * dh, j * dw
            edges = [left, wp - left - block.shape[3], top, hp - top - block.shape[2]]
            placed = aten.constant_pad_nd(block, edges, 0) if any(edges) else block
            total = placed + 0.0 if total is None else total + placed
    image = total[:, :, ph:ph + h, pw:pw + w]
    return image if batched else image.squeeze(0)


def or_else(first, then):
    """``first``, and where it declines (NotImplemented) ``then``: a call these decompositions do not cover keeps the
    decomposition it had before."""
    def decomposition(*args, **kwargs):
        result = first(*args, **kwargs)
        return then(*args, **kwargs) if result is NotImplemented else result
    return decomposition


def _pytorchs(overload):
    return torch._decomp.decomposition_table[overload]


# the backward of reflection padding goes through numerics (its fallback there adds CPU's +0: numerics._accumulated_of)
REFLECTION_PAD_BACKWARD = {
    aten.reflection_pad1d_backward.default: _reflection_pad_backward_of(1),
    aten.reflection_pad2d_backward.default: _reflection_pad_backward_of(2),
    aten.reflection_pad3d_backward.default: _reflection_pad_backward_of(3),
}

DECOMPOSITIONS = {op: or_else(fn, _pytorchs(op)) for op, fn in {
    aten.im2col.default: _im2col,
    aten.col2im.default: _col2im,
    aten.roll.default: _roll,
    aten.select_scatter.default: _select_scatter,
    aten.reflection_pad1d.default: _pad_of(1, True),
    aten.reflection_pad2d.default: _pad_of(2, True),
    aten.reflection_pad3d.default: _pad_of(3, True),
    aten.replication_pad1d.default: _pad_of(1, False),
    aten.replication_pad2d.default: _pad_of(2, False),
    aten.replication_pad3d.default: _pad_of(3, False),
}.items()}
