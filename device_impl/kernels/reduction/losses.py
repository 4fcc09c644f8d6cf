"""Losses: mse_loss and its backward, nll_loss and nll_loss2d (forward and backward).

mse_loss: reduction 'none' and the backward are pointwise (``common.elementwise``); 'mean' and
'sum' stream both operands as flat ``[128, F]`` pieces, x - y on VectorE and its square summed on
ScalarE (``activation(..., accumulate=)``), one GpSimd partition reduction at the end.

nll_loss: K = sample positions on partitions, R = classes along the free axis (``_NLL``). The
forward picks x[n, target[n]] by indirect DMA (``load_rows`` on a flat view of the input) and its
backward zero-fills and scatters (``store_rows``); layouts that a flat view cannot describe
compare a class iota against the targets instead. Targets are bounds-checked on the engines and
raise IndexError as CPU does.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from numpy.lib.stride_tricks import as_strided

from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import FP32, numpy_dtype
from device_impl.kernels.common import SCALAR_TYPE_NAMES, check_out, hbm, new_output
from device_impl.kernels.reduction.tiles import (
    BOOL, I64, P, _FLOATS, _Grid, _at, _blocks, _combine, _fill, _flat_load, _flat_pieces, _kernel, _load_scalars,
    _memset, _refuse, _row_scalar, _store_scalars, _stream_groups,
)


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _reduction(r) -> str:
    r = int(r)
    if r not in _REDUCTIONS:
        raise ValueError(f"{r} is not a valid value for reduction")
    return _REDUCTIONS[r]


def _mse_meta(x: torch.Tensor, y: torch.Tensor) -> tuple[tuple[int, ...], torch.dtype]:
    shape = tuple(torch.broadcast_shapes(tuple(x.shape), tuple(y.shape)))
    dtype = torch.promote_types(x.dtype, y.dtype)
    if dtype not in _FLOATS:
        raise _refuse("mse_cpu", dtype)
    return shape, dtype


@_kernel("aten::mse_loss.out", serves=("aten::mse_loss",))
def _mse_loss_out(a: dict) -> torch.Tensor:
    x, y, out = a["self"], a["target"], a["out"]
    red = _reduction(a.get("reduction", 1))
    shape, dtype = _mse_meta(x, y)
    check_out(out, shape if red == "none" else (), dtype, [x, y])
    if red == "none":
        def emit(nc, o, tx, ty):
            d = nc.sbuf_tile(o.shape, FP32)
            nc.vector.tensor_tensor(d, tx, ty, "subtract", dtype=FP32)
            nc.vector.tensor_tensor(o, d, d, "multiply", dtype=FP32)

        from device_impl.kernels.common import elementwise
        elementwise("mse_loss", out, (x, y), emit)
        return out
    xv, yv = np.broadcast_to(hbm(x), shape), np.broadcast_to(hbm(y), shape)
    numel = math.prod(shape)
    with launch("mse_loss", out.device.index) as nc:
        acc = _memset(nc, (P, 1), FP32, 0.0)
        pieces = list(_flat_pieces(numel))
        # x's and y's tiles of a piece stream as one group: streamed one by one, taking y's tile released
        # x's before the subtract read it (the timeline freed that SBUF early; a reused array read garbage)
        groups = [[((p, f), xv.dtype, _flat_load(nc, xv, s0, s1)), ((p, f), yv.dtype, _flat_load(nc, yv, s0, s1))]
                  for s0, s1, p, f in pieces]
        tiles = _stream_groups(nc, groups, depth=2)
        for s0, s1, p, f in pieces:
            tx, ty = next(tiles)
            mark = nc.mark()
            d = nc.sbuf_tile((p, f), FP32)
            nc.vector.tensor_tensor(d, tx, ty, "subtract", dtype=FP32)
            part = _row_scalar(nc, p)
            nc.scalar.activation(d, d, "square", accumulate=part)
            _combine(nc, acc[:p], part, "add", FP32)
            nc.release_to(mark)
        for _ in tiles:
            pass
        total = nc.sbuf_tile((1, 1), FP32)
        nc.gpsimd.partition_reduce(total, acc, "add", dtype=FP32)
        res = nc.sbuf_tile((1, 1), numpy_dtype(out.dtype))
        if red == "mean":
            nc.vector.tensor_scalar(res, total, "divide", float(numel), dtype=FP32)  # 0 / 0 = nan when empty
        else:
            nc.vector.tensor_copy(res, total)
        nc.dma.store(hbm(out), res)
    return out


def _mse_backward(a: dict, out: torch.Tensor | None) -> torch.Tensor:
    g, x, y = a["grad_output"], a["self"], a["target"]
    red = _reduction(a["reduction"])
    shape, dtype = _mse_meta(x, y)
    dtype = torch.promote_types(dtype, g.dtype)
    if out is None:
        out = new_output(tuple(x.shape), dtype, x)
    else:
        check_out(out, tuple(x.shape), dtype, [g, x, y])
    norm = 2.0 / x.numel() if red == "mean" and x.numel() else 2.0

    def emit(nc, o, tg, tx, ty):
        # CPU's mse_backward_cpu_kernel: norm * (x - y) * g in scalar_t, so for float16/bfloat16 the scalar
        # is converted to the dtype and each operation rounds to it (x - y of near-overflow halves is inf)
        d = nc.sbuf_tile(o.shape, o.dtype)
        nc.vector.tensor_tensor(d, tx, ty, "subtract", dtype=FP32)
        nc.vector.tensor_scalar(d, d, "multiply", float(np.dtype(o.dtype).type(norm)), dtype=FP32)
        if isinstance(tg, Tile):
            nc.vector.tensor_tensor(o, d, tg, "multiply", dtype=FP32)
        else:
            nc.vector.tensor_scalar(o, d, "multiply", tg, dtype=FP32)

    from device_impl.kernels.common import elementwise
    elementwise("mse_loss_backward", out, (g, x, y), emit)
    return out


@_kernel("aten::mse_loss_backward")
def _mse_loss_backward(a: dict) -> torch.Tensor:
    return _mse_backward(a, None)


@_kernel("aten::mse_loss_backward.grad_input")
def _mse_loss_backward_out(a: dict) -> torch.Tensor:
    return _mse_backward(a, a["grad_input"])


class _NLL:
    """The shared layout of nll_loss and nll_loss2d: K = sample positions, R = classes."""

    def __init__(self, x: torch.Tensor, target: torch.Tensor, weight, two_d: bool):
        if x.dtype not in _FLOATS:
            raise _refuse("nll_loss_out_frame" if not two_d else "nll_loss2d_forward_out_frame", x.dtype)
        if target.dtype not in (torch.int64, torch.uint8):
            raise RuntimeError(f"expected scalar type Long but found {SCALAR_TYPE_NAMES[target.dtype]}")
        if two_d:
            if x.dim() != 4:
                raise RuntimeError(f"only batches of spatial inputs supported (4D tensors), but got input of "
                                   f"dimension: {x.dim()}")
            if target.dim() != 3:
                raise RuntimeError(f"only batches of spatial targets supported (3D tensors) but got targets of "
                                   f"dimension: {target.dim()}")
            if (x.shape[0], x.shape[2], x.shape[3]) != tuple(target.shape):
                raise RuntimeError(f"size mismatch (got input: {list(x.shape)} , target: {list(target.shape)}")
            self.classes = x.shape[1]
            self.kshape = [x.shape[0], x.shape[2], x.shape[3]]
            xv = hbm(x).transpose(0, 2, 3, 1)
        else:
            if x.dim() not in (1, 2):
                raise RuntimeError("input tensor should be 1D or 2D")
            if target.dim() > 1:
                raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
            no_batch = x.dim() == 1 and target.dim() == 0
            if not no_batch and x.shape[0] != target.shape[0]:
                raise RuntimeError(f"Expected input batch_size ({x.shape[0]}) to match target batch_size "
                                   f"({target.shape[0]}).")
            self.classes = x.shape[-1]
            self.kshape = [] if x.dim() == 1 else [x.shape[0]]
            xv = hbm(x)
        if weight is not None and weight.numel() != self.classes:
            raise RuntimeError(f"weight tensor should be defined either for all {self.classes} classes or no "
                               f"classes but got weight tensor of shape: {list(weight.shape)}")
        self.xv, self.tv = xv, hbm(target).reshape(self.kshape) if target.dim() == 0 else hbm(target)
        self.wv = None
        if weight is not None:
            w = hbm(weight).reshape(-1) if weight.dim() != 1 else hbm(weight)
            self.wv = as_strided(w, (self.classes, 1), (w.strides[0], w.strides[0]))

    def rows(self, nc, ignore_index: int, outs: Sequence[torch.Tensor] = (), kr: Sequence[np.ndarray] = (),
             load: bool = True):
        """Per row block: (block, target [p, 1] int64 clamped to a class, valid mask, weight [p, 1] fp32);
        the block's class chunks of x are loaded only with ``load``."""
        g = _Grid(self.kshape, [self.classes], kr=[self.xv] + list(kr), k=[self.tv] + [hbm(o) for o in outs])
        self.grid = g
        c = self.classes
        for blk in _blocks(nc, g, [g.kr[0]] if load else []):
            p = blk.p
            mark = nc.mark()
            raw = nc.sbuf_tile((p, 1), g.k[0].dtype)
            nc.dma.load(raw, _at(g.k[0], blk.rsl))
            t = _row_scalar(nc, p, I64)
            nc.vector.tensor_copy(t, raw)
            valid = _row_scalar(nc, p, BOOL)
            nc.vector.tensor_scalar(valid, t, "not_equal", int(ignore_index))
            low, high = _row_scalar(nc, p, BOOL), _row_scalar(nc, p, BOOL)
            nc.vector.tensor_scalar(low, t, "less", 0)
            nc.vector.tensor_scalar(high, t, "greater_equal", c)
            nc.vector.tensor_tensor(low, low, high, "logical_or")
            nc.vector.tensor_tensor(low, low, valid, "logical_and")
            flag = nc.sbuf_tile((1, 1), BOOL)
            nc.gpsimd.partition_reduce(flag, low, "logical_or")
            if bool(flag.read().any()):  # CPU checks every target; the kernel raises the same error
                bad = t.read()[low.read()[:, 0].astype(bool), 0]
                raise IndexError(f"Target {int(bad[0])} is out of bounds.")
            zero = _memset(nc, (p, 1), I64, 0)
            safe = _row_scalar(nc, p, I64)
            nc.vector.select(safe, valid, t, zero)
            w = _row_scalar(nc, p)
            if self.wv is not None:
                wr = nc.sbuf_tile((p, 1), self.wv.dtype)
                nc.dma.load_rows(wr, self.wv, safe)
                nc.vector.tensor_copy(w, wr)
            else:
                nc.vector.memset(w, 1.0)
            fz = _memset(nc, (p, 1), FP32, 0.0)
            nc.vector.select(w, valid, w, fz)
            yield blk, safe, valid, w
            nc.release_to(mark)

    def gather_table(self):
        """The input as an indirect-DMA table (see _row_table), or None for layouts it cannot describe."""
        if len(self.kshape) != 1 or self.xv.ndim != 2:
            return None
        s0, s1 = self.xv.strides
        if s1 <= 0 or s0 < 0 or s0 % s1:
            return None
        n, c = self.xv.shape
        step = s0 // s1
        return as_strided(self.xv, ((n - 1) * step + c, 1), (s1, s1)), step

    def class_masks(self, nc, blk, safe: Tile, load: bool = True):
        """(chunk, x tile (None without ``load``), [p, f] mask of the target's class) for each class chunk."""
        for ch, (tx,) in (blk.each(0) if load else ((ch, (None,)) for ch in blk.chunks)):
            c0, f, _ = ch
            idx = nc.sbuf_tile((blk.p, f), I64)
            nc.gpsimd.iota(idx, base=c0, partition_step=0, free_step=1)
            hit = nc.sbuf_tile((blk.p, f), BOOL)
            nc.vector.tensor_tensor(hit, idx, safe, "equal")
            nc.release(idx)
            yield ch, tx, hit
            nc.release(hit)


def _nll_forward(name: str, a: dict, two_d: bool):
    x, target, weight = a["self"], a["target"], a.get("weight")
    red, ignore = _reduction(a["reduction"]), int(a["ignore_index"])
    spec = _NLL(x, target, weight, two_d)
    _same_dtype(x, weight)
    output, total_weight = a.get("output"), a.get("total_weight")
    oshape = tuple(spec.kshape) if red == "none" else ()
    if output is None:
        output, total_weight = new_output(oshape, x.dtype, x), new_output((), x.dtype, x)
    else:
        check_out(output, oshape, x.dtype, [x])
        check_out(total_weight, (), x.dtype, [x])
    with launch(name, x.device.index) as nc:
        tw = hbm(total_weight)
        acc_l, acc_w = _memset(nc, (P, 1), FP32, 0.0), _memset(nc, (P, 1), FP32, 0.0)
        rows = math.prod(spec.kshape)
        if rows and spec.classes:
            table = spec.gather_table()
            for blk, safe, valid, w in spec.rows(nc, ignore, outs=[output] if red == "none" else [],
                                                 load=table is None):
                p = blk.p
                picked = _row_scalar(nc, p)
                if table is not None:  # indirect DMA: one element per row, x[r, target[r]]
                    table_view, row_step = table
                    mark = nc.mark()
                    idx = _row_scalar(nc, p, I64)
                    r0 = blk.rsl[0].start if blk.rsl and blk.rsl[0].start is not None else 0
                    nc.gpsimd.iota(idx, base=r0 * row_step, partition_step=row_step, free_step=0)
                    nc.vector.tensor_tensor(idx, idx, safe, "add")
                    got = nc.sbuf_tile((p, 1), table_view.dtype)
                    nc.dma.load_rows(got, table_view, idx)
                    nc.vector.tensor_copy(picked, got)
                    nc.release_to(mark)
                for j, (ch, tx, hit) in enumerate(spec.class_masks(nc, blk, safe) if table is None else ()):
                    mark = nc.mark()
                    # x[target] is picked by a maximum over -inf elsewhere: exact, its zero sign included
                    # (a sum over 0.0 elsewhere turned x[target] = -0.0 into +0.0, so the loss -x[target]
                    # came out -0.0 where CPU's is +0.0); an ignored row picks -inf, masked by ``valid``
                    zero = _memset(nc, tx.shape, FP32, -np.inf)
                    sel = nc.sbuf_tile(tx.shape, FP32)
                    nc.vector.select(sel, hit, tx, zero)
                    part = picked if j == 0 else _row_scalar(nc, p)
                    nc.vector.tensor_reduce(part, sel, "maximum", dtype=FP32)
                    if j:
                        _combine(nc, picked, part, "maximum", FP32)
                    nc.release_to(mark)
                loss = _row_scalar(nc, p)  # -w * x[target], exactly 0 for ignored targets
                nc.vector.tensor_tensor(loss, w, picked, "multiply", dtype=FP32)
                nc.vector.tensor_scalar(loss, loss, "multiply", -1.0, dtype=FP32)
                fz = _memset(nc, (p, 1), FP32, 0.0)
                nc.vector.select(loss, valid, loss, fz)
                if red == "none":
                    _store_scalars(nc, _at(spec.grid.k[1], blk.rsl), loss)
                else:
                    _combine(nc, acc_l[:p], loss, "add", FP32)
                _combine(nc, acc_w[:p], w, "add", FP32)
        elif red == "none" and rows:  # no classes: nothing is picked
            _fill(nc, hbm(output), 0.0, FP32)
        if red == "none" and spec.kshape:  # CPU leaves total_weight 0 for unreduced batches
            _fill(nc, tw, 0.0, FP32)
            return output, total_weight
        total_l, total_w = nc.sbuf_tile((1, 1), FP32), nc.sbuf_tile((1, 1), FP32)
        nc.gpsimd.partition_reduce(total_l, acc_l, "add", dtype=FP32)
        nc.gpsimd.partition_reduce(total_w, acc_w, "add", dtype=FP32)
        if red == "mean":
            nc.vector.tensor_tensor(total_l, total_l, total_w, "divide", dtype=FP32)
        if red != "none":
            _store_scalars(nc, hbm(output), total_l)
        _store_scalars(nc, tw, total_w)
    return output, total_weight


_C10_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.bfloat16: "BFloat16", torch.float16: "Half",
              torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
              torch.bool: "Bool"}  # c10's ScalarType names, as CPU's messages spell them


def _same_dtype(x: torch.Tensor, *others: torch.Tensor | None) -> None:
    """CPU's nll_loss kernels read the weight (and, backward, grad_output and a reduction's total_weight) through
    data_ptr<scalar_t> of the input's dtype: another dtype is its RuntimeError."""
    for t in others:
        if t is not None and t.dtype != x.dtype:
            raise RuntimeError(f"expected scalar type {_C10_NAMES.get(x.dtype, x.dtype)} but found "
                               f"{_C10_NAMES.get(t.dtype, t.dtype)}")


def _nll_backward(name: str, a: dict, two_d: bool, out: torch.Tensor | None) -> torch.Tensor:
    g, x, target, weight = a["grad_output"], a["self"], a["target"], a.get("weight")
    red, ignore, total_weight = _reduction(a["reduction"]), int(a["ignore_index"]), a["total_weight"]
    spec = _NLL(x, target, weight, two_d)
    _same_dtype(x, g, weight, total_weight if red != "none" else None)
    if out is None:
        out = new_output(tuple(x.shape), x.dtype, x)
    else:
        check_out(out, tuple(x.shape), x.dtype, [x])
    if red == "none" and tuple(g.shape) != tuple(spec.kshape):
        raise RuntimeError(f"Expected a tensor of dimension {len(spec.kshape)} and tensor.size[0] == "
                           f"{spec.kshape[0] if spec.kshape else 1} but got: dimension {g.dim()} and "
                           f"tensor.size[0] == {g.shape[0] if g.dim() else 1}")
    if red != "none" and g.numel() != 1:
        raise RuntimeError(f"Expected a single element grad_output tensor, but got: {list(g.shape)}")
    ov = hbm(out).transpose(0, 2, 3, 1) if two_d else hbm(out)
    with launch(name, x.device.index) as nc:
        scale = None
        if red != "none":  # -grad (/ total_weight for mean), on every partition
            s = _load_scalars(nc, hbm(g).reshape(1, 1) if g.dim() == 0 else hbm(g).reshape(1, 1), 1)
            if red == "mean":
                tws = _load_scalars(nc, hbm(total_weight).reshape(1, 1), 1)
                nc.vector.tensor_tensor(s, s, tws, "divide", dtype=FP32)
            scale = nc.sbuf_tile((P, 1), FP32)
            nc.gpsimd.partition_broadcast(scale, s)
        if math.prod(spec.kshape) == 0 or spec.classes == 0:
            return out
        outs = [g] if red == "none" else []
        scatter = _row_table(ov, spec)
        if scatter is not None:  # zeros everywhere, then one element per row by indirect DMA
            _fill(nc, ov, 0.0, FP32)
        for blk, safe, valid, w in spec.rows(nc, ignore, outs=outs, kr=[ov], load=False):
            p = blk.p
            val = _row_scalar(nc, p)
            gs = _load_scalars(nc, _at(spec.grid.k[1], blk.rsl), p) if red == "none" else scale[:p]
            nc.vector.tensor_tensor(val, w, gs, "multiply", dtype=FP32)
            nc.vector.tensor_scalar(val, val, "multiply", -1.0, dtype=FP32)
            fz = _memset(nc, (p, 1), FP32, 0.0)
            nc.vector.select(val, valid, val, fz)
            OV = spec.grid.kr[1]
            if scatter is not None:
                table, step = scatter
                mark = nc.mark()
                idx = _row_scalar(nc, p, I64)
                r0 = blk.rsl[0].start if blk.rsl and blk.rsl[0].start is not None else 0
                nc.gpsimd.iota(idx, base=r0 * step, partition_step=step, free_step=0)
                nc.vector.tensor_tensor(idx, idx, safe, "add")
                res = nc.sbuf_tile((p, 1), table.dtype)
                nc.vector.tensor_copy(res, val)
                nc.dma.store_rows(table, idx, res)
                nc.release_to(mark)
                continue
            for ch, _, hit in spec.class_masks(nc, blk, safe, load=False):
                mark = nc.mark()
                zero = _memset(nc, hit.shape, FP32, 0.0)
                # the row's value across the class columns: 1 * val keeps a -0.0 (0 + val made it +0.0)
                one = _memset(nc, hit.shape, FP32, 1.0)
                full = nc.sbuf_tile(hit.shape, FP32)
                nc.vector.tensor_tensor(full, one, val, "multiply", dtype=FP32)
                res = nc.sbuf_tile(hit.shape, OV.dtype)
                nc.vector.select(res, hit, full, zero)
                blk.store(OV, ch, res)
                nc.release_to(mark)
    return out


def _row_table(view: np.ndarray, spec: "_NLL"):
    """(elements, 1) table over a [N, C] HBM view with rows a whole number of class strides apart, and the
    row step (None otherwise): element [r, t] is table row r * step + t."""
    if len(spec.kshape) != 1 or view.ndim != 2:
        return None
    s0, s1 = view.strides
    if s1 <= 0 or s0 < 0 or s0 % s1:
        return None
    n, c = view.shape
    if s0 // s1 < c and n > 1:  # rows overlap (not a valid output layout)
        return None
    step = s0 // s1
    return as_strided(view, ((n - 1) * step + c, 1), (s1, s1)), step


@_kernel("aten::nll_loss_forward.output", serves=("aten::nll_loss_forward",))
def _nll_loss_forward_out(a: dict):
    return _nll_forward("nll_loss", a, two_d=False)


@_kernel("aten::nll_loss_backward.grad_input", serves=("aten::nll_loss_backward",))
def _nll_loss_backward_out(a: dict) -> torch.Tensor:
    return _nll_backward("nll_loss_backward", a, False, a["grad_input"])


@_kernel("aten::nll_loss2d_forward", "aten::nll_loss2d_forward.output")
def _nll_loss2d_forward(a: dict):
    return _nll_forward("nll_loss2d", a, two_d=True)


@_kernel("aten::nll_loss2d_backward")
def _nll_loss2d_backward(a: dict) -> torch.Tensor:
    return _nll_backward("nll_loss2d_backward", a, True, None)


@_kernel("aten::nll_loss2d_backward.grad_input")
def _nll_loss2d_backward_out(a: dict) -> torch.Tensor:
    return _nll_backward("nll_loss2d_backward", a, True, a["grad_input"])
