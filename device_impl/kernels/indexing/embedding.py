"""Embeddings: embedding, embedding_dense_backward, _embedding_bag (and _forward_only).

Tiling: forward gathers weight rows by index as index_select (rows on partitions, the
embedding dimension along the free axis, indirect DMA). Backward and bags accumulate
rows in index order on GpSimd's cores (``rows._move`` with an accumulating mode), rounding
to the weight's dtype after each step as CPU; bags number their rows with a scan of the
offsets (``rows._scan_into``), divide by counts for mean, and keep the arg-max per bag
for max (``_bag_max``).
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.engine import launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import hbm
from device_impl.kernels.spatial.tiles import Scratch
from device_impl.kernels.indexing.rows import (
    BOOL,
    I64,
    P,
    _Const,
    _FLOATS,
    _Index,
    _Rows,
    _check_range,
    _index_range,
    _index_range_error,
    _move,
    _native,
    _row_tiles,
    _scan_into,
)
from device_impl.kernels.indexing.views import (
    _copy_into,
    _empty,
    _estrides,
    _fill,
    _merge_suffix,
    _prod,
    _reshaped,
    _table,
)

def _check_embedding_indices(indices: torch.Tensor, fn: str) -> None:
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.type().replace('neuron', 'torch')} instead (while checking "
                           f"arguments for {fn})")


@_native("aten::embedding")
def _embedding(a: dict) -> torch.Tensor:
    weight, indices = a["weight"], a["indices"]
    if weight.dim() != 2:
        raise RuntimeError("'weight' must be 2-D")
    _check_embedding_indices(indices, "embedding")
    out = _empty(tuple(indices.shape) + (weight.shape[1],), weight.dtype, weight)
    with launch("embedding", weight.device.index) as nc:
        iv = hbm(indices)
        _check_range(nc, iv, weight.shape[0], False, _index_range_error)
        if out.numel() == 0:
            return out
        wv, ov = hbm(weight), hbm(out)
        lead = tuple(indices.shape)
        _, c, (s_w, s_o) = _merge_suffix((weight.shape[1],), [(_estrides(wv)[1],), (_estrides(ov)[-1],)], 1)
        term = _Index(iv, _estrides(wv)[0], weight.shape[0], False)
        src = _Rows(wv, lead, (0,) * len(lead), c, s_w, (term,))
        dst = _Rows.of(ov, len(lead), c, s_o)
        _move(nc, dst, src, _prod(lead), lead)
    return out


# --- embedding backward and embedding_bag ----------------------------------------------

def _zeros_scratch(nc, shape, dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    t = _empty(shape, dtype, like)
    _fill(nc, hbm(t), 0)
    return t


@_native("aten::embedding_dense_backward")
def _embedding_dense_backward(a: dict) -> torch.Tensor:
    grad, indices = a["grad_output"], a["indices"]
    num_weights, padding_idx, scale = int(a["num_weights"]), int(a["padding_idx"]), bool(a["scale_grad_by_freq"])
    _check_embedding_indices(indices, "embedding_backward")
    d = grad.shape[-1] if grad.dim() else 1
    out = _empty((num_weights, d), grad.dtype, grad)
    with launch("embedding_dense_backward", grad.device.index) as nc:
        dense_backward_program(nc, Scratch(grad.device), hbm(grad), hbm(indices), hbm(out), padding_idx,
                               scale)
    return out


def dense_backward_program(nc, scratch, grad: np.ndarray, indices: np.ndarray, out: np.ndarray, padding_idx: int,
                           scale: bool) -> None:
    """embedding_dense_backward of HBM views ``grad`` and ``indices`` into ``out`` ([num_weights, d]), inside a
    launch; ``scratch.new(shape, dtype)`` gives the launch's HBM scratch arrays. The eager kernel and the
    compiler's ``embedding_dense_backward`` step (compiler/opaque_indexing.py) both run it. Its instructions depend
    on the indices' values (out-of-range ones are redirected to a dummy row)."""
    num_weights, d = out.shape
    n = indices.size
    iv = indices.reshape(-1) if indices.ndim else indices.reshape(1)
    # CPU checks no index here (the forward did): it adds row i into row indices[i] only where that is in
    # [0, num_weights) and skips the others. Where some index is out of range, every one is redirected to a
    # dummy row past the last, which is dropped.
    lo, hi = _index_range(nc, iv) if n else (0, 0)
    rows = num_weights + 1 if lo < 0 or hi >= num_weights else num_weights
    av = out if rows == num_weights else scratch.new((rows, d), out.dtype)
    _fill(nc, av, 0)
    gv = _reshaped(grad, (n, d))
    if gv is None:
        gv = scratch.new((n, d), grad.dtype)
        _copy_into(nc, gv.reshape(grad.shape), grad)
    if n and d:
        flat_idx = _reshaped(iv, (n,))
        if flat_idx is None or rows != num_weights:
            flat_idx = scratch.new((n,), indices.dtype if rows == num_weights else np.dtype(np.int64))
            if rows == num_weights:
                _copy_into(nc, flat_idx.reshape(indices.shape), indices)
            else:
                _redirect_out_of_range(nc, flat_idx, iv, num_weights)
        factors = None
        if scale:
            cv = scratch.new((rows, 1), np.dtype(np.int64))
            _fill(nc, cv, 0)
            cdst = _Rows(cv, (n,), (0,), 1, 1, (_Index(flat_idx, _estrides(cv)[0], rows, False),))
            _move(nc, cdst, _Const(nc, 1, I64), n, (n,), "add")

            def factors(nc_, co):  # 1 / count of each row's index: the alpha of CPU's add_(grad, alpha),
                cnt = cdst.load(nc_, co, 0, 1)  # which is rounded to the grad dtype
                inv = nc_.sbuf_tile(cnt.shape, av.dtype)
                nc_.vector.tensor_scalar(inv, cnt, "divide", 1.0, reverse=True, dtype=FP32)
                return inv
        _, c, (s_a, s_g) = _merge_suffix((d,), [(_estrides(av)[1],), (_estrides(gv)[1],)], 1)
        dst = _Rows(av, (n,), (0,), c, s_a, (_Index(flat_idx, _estrides(av)[0], rows, False),))
        src = _Rows.of(gv, 1, c, s_g)
        _move(nc, dst, src, n, (n,), "add", scale=factors)
    if av is not out:
        _copy_into(nc, out, av[:num_weights])
    if 0 <= padding_idx < num_weights:
        _fill(nc, out[padding_idx:padding_idx + 1], 0)


def _redirect_out_of_range(nc, dst: np.ndarray, idx: np.ndarray, size: int) -> None:
    """dst = idx where it is in [0, size), else ``size`` (a dummy row the caller drops); dst int64, flat."""
    for r0, p, f in _row_tiles(idx.size, 2048):
        mark = nc.mark()
        i = nc.sbuf_tile((p, f), idx.dtype)
        nc.dma.load(i, idx[r0:r0 + p * f])
        wide = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_copy(wide, i)
        low = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_scalar(low, wide, "less", 0, dtype=I64)
        drop = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_scalar(drop, wide, "greater_equal", size, dtype=I64)
        nc.vector.tensor_tensor(drop, drop, low, "maximum", dtype=I64)
        # dst = idx + drop * (size - idx)
        diff = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_scalar(diff, wide, "subtract", size, reverse=True, dtype=I64)
        nc.vector.tensor_tensor(diff, diff, drop, "multiply", dtype=I64)
        res = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_tensor(res, wide, diff, "add", dtype=I64)
        nc.dma.store(dst[r0:r0 + p * f], res)
        nc.release_to(mark)


def _check_bag_args(weight, indices, offsets, mode, psw, ilo):
    if weight.dtype not in _FLOATS:
        raise RuntimeError(f"Expected tensor for argument #1 'weight' to have one of the following scalar types: "
                           f"Half, BFloat16, Float, Double; but got {weight.type().replace('neuron', 'torch')} "
                           f"instead (while checking arguments for embedding_bag)")
    for t, name in ((indices, "indices"), (offsets, "offsets")):
        if t.dtype not in (torch.int64, torch.int32):
            raise RuntimeError(f"Expected tensor for argument #{2 if name == 'indices' else 3} '{name}' to have one "
                               f"of the following scalar types: Long, Int; but got "
                               f"{t.type().replace('neuron', 'torch')} instead (while checking arguments for "
                               f"embedding_bag)")
    if indices.dim() != 1 or offsets.dim() != 1:
        raise RuntimeError("input has to be 1D or 2D Tensor, offsets has to be a 1D Tensor")
    if weight.dim() != 2:
        raise RuntimeError("weight has to be a 2D Tensor")
    if mode not in (0, 1, 2):
        raise RuntimeError(f"mode has to be one of sum, mean or max")
    if psw is not None:
        if mode != 0:
            raise RuntimeError("embedding_bag: per_sample_weights only supported with mode='sum'")
        if psw.dtype != weight.dtype:
            raise RuntimeError(f"Expected per_sample_weights dtype {weight.dtype} but got {psw.dtype}")
        if psw.dim() != 1 or psw.numel() != indices.numel():
            raise RuntimeError("expected per_sample_weights to be 1D tensor with the same number of elements as input")
    if ilo and offsets.numel() < 1:
        raise RuntimeError("include_last_offset: number of offset should be at least 1")


def _embedding_bag_impl(a: dict, forward_only: bool):
    weight, indices, offsets = a["weight"], a["indices"], a["offsets"]
    mode = int(a.get("mode", 0) or 0)
    psw = a.get("per_sample_weights")
    ilo = bool(a.get("include_last_offset", False))
    padding_idx = a.get("padding_idx", -1)
    padding_idx = -1 if padding_idx is None else int(padding_idx)
    _check_bag_args(weight, indices, offsets, mode, psw, ilo)
    index_dtype = torch.promote_types(indices.dtype, offsets.dtype)
    n, nw, d = indices.numel(), weight.shape[0], weight.shape[1]
    n_off = offsets.numel()
    bags = n_off - 1 if ilo else n_off
    fast = (mode != 2 and weight.stride(1) == 1 and padding_idx < 0
            and (psw is None or psw.stride(0) == 1))  # CPU's index_select fast path: sums run to offsets[b + 1]
    out = torch.empty((bags, d), dtype=weight.dtype, device=weight.device)
    with launch("embedding_bag", weight.device.index) as nc:
        ov_off = hbm(offsets)
        iv = hbm(indices)
        if n_off:
            lo_hi = nc.sbuf_tile((1, 2), ov_off.dtype)
            nc.dma.load(lo_hi[:, 0:1], ov_off[0:1].reshape(1, 1))
            nc.dma.load(lo_hi[:, 1:2], ov_off[n_off - 1:n_off].reshape(1, 1))
            first, last = (int(v) for v in lo_hi.read()[0])
            if first != 0:
                raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
                                   f"from position 0. However, got {first}")
            if last > n:
                raise RuntimeError(f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of "
                                   f"{last}")
        if n:
            lo, hi = _index_range(nc, iv)
            bad = hi if hi >= nw else lo if lo < 0 else None
            if bad is not None:
                pos = 0
                raise RuntimeError(f"Index {pos} of input takes value {bad} which is not in the valid range [0, {nw})")
        # offset2bag: bag of every position (a scan of +1 marks at each bag start)
        o2b = _empty((n,), index_dtype, weight)
        o2b_v = hbm(o2b)
        if n:
            marks = _zeros_scratch(nc, (n + 1, 1), torch.int64, weight)
            mv = hbm(marks)
            if bags > 1:
                starts = ov_off[1:bags]
                dst = _Rows(mv, (bags - 1,), (0,), 1, 1, (_Index(starts, 1, n + 1, False),))
                _move(nc, dst, _Const(nc, 1, I64), bags - 1, (bags - 1,), "add")
            _scan_into(nc, o2b_v, mv.reshape(-1)[:n])
        # which bag each position adds into (bags = a dummy bag that is dropped)
        sum_bag = o2b_v
        keep = []
        if n and (padding_idx >= 0 or (fast and ilo)):
            sb = _empty((n,), torch.int64, weight)
            keep.append(sb)
            sum_bag = hbm(sb)
            _redirect_bags(nc, sum_bag, o2b_v, iv, padding_idx, bags,
                           ov_off[bags:bags + 1] if (fast and ilo) else None)
        count_bag = sum_bag if padding_idx >= 0 else o2b_v  # (padding and the fast path exclude each other)
        counts = _zeros_scratch(nc, (bags + 1, 1), torch.int64, weight)
        cv = hbm(counts)
        if n and mode != 0:
            cdst = _Rows(cv, (n,), (0,), 1, 1, (_Index(count_bag, 1, bags + 1, False),))
            _move(nc, cdst, _Const(nc, 1, I64), n, (n,), "add")
        wv = hbm(weight)
        max_idx = None
        if mode in (0, 1):
            acc = _zeros_scratch(nc, (bags + 1, d), torch.float32, weight)
            av = hbm(acc)
            if n and d:
                src = _Rows(wv, (n,), (0,), d, _estrides(wv)[1], (_Index(iv, _estrides(wv)[0], nw, False),))
                dst = _Rows(av, (n,), (0,), d, 1, (_Index(sum_bag, d, bags + 1, False),))
                transform = None
                if psw is not None:
                    pv = hbm(psw)

                    def transform(nc_, t, co):
                        w = nc_.sbuf_tile((co.p, co.f), pv.dtype)
                        nc_.dma.load(w, pv[co.r0:co.r0 + co.p * co.f])
                        scaled = nc_.sbuf_tile(t.shape, FP32)
                        cc = t.free // co.f
                        for j in range(co.f):
                            nc_.vector.tensor_tensor(scaled[:, j * cc:(j + 1) * cc], t[:, j * cc:(j + 1) * cc],
                                                     w[:, j:j + 1], "multiply", dtype=FP32)
                        return scaled
                _move(nc, dst, src, n, (n,), "add", transform=transform)
            _finish_bags(nc, hbm(out), av[:bags], cv[:bags] if mode == 1 else None)
        else:
            max_idx = _empty((bags, d), index_dtype, weight)
            _bag_max(nc, hbm(out), hbm(max_idx), wv, iv, ov_off, bags, n, padding_idx)
        bag_size = _empty((bags + 1 if (forward_only and ilo and mode == 0) else bags,), index_dtype, weight)
        if mode == 0:
            _fill(nc, hbm(bag_size), 0)
        else:
            _copy_into(nc, hbm(bag_size), cv[:bags, 0])
        if mode == 0:
            max_idx = _empty(tuple(bag_size.shape), index_dtype, weight)
            _fill(nc, hbm(max_idx), 0)
        elif mode == 1:
            max_idx = _empty((bags,), index_dtype, weight)
            _copy_into(nc, hbm(max_idx), cv[:bags, 0])
        if mode == 0 and fast:
            o2b = _empty((0,), index_dtype, weight)
    return out, o2b, bag_size, max_idx


def _redirect_bags(nc, dst: np.ndarray, bag: np.ndarray, idx: np.ndarray, padding_idx: int, dummy: int,
                   last_offset: np.ndarray | None) -> None:
    """dst = bag, or the dummy bag for padding entries (and positions past the last offset)."""
    n = bag.size
    last = None
    if last_offset is not None:
        one = nc.sbuf_tile((1, 1), last_offset.dtype)
        nc.dma.load(one, last_offset.reshape(1, 1))
        last = nc.sbuf_tile((P, 1), I64)
        wide = nc.sbuf_tile((1, 1), I64)
        nc.vector.tensor_copy(wide, one)
        nc.gpsimd.partition_broadcast(last, wide)
    for r0, p, f in _row_tiles(n, 2048):
        mark = nc.mark()
        b = nc.sbuf_tile((p, f), bag.dtype)
        nc.dma.load(b, bag[r0:r0 + p * f])
        drop = nc.sbuf_tile((p, f), I64)
        nc.vector.memset(drop, 0)
        if padding_idx >= 0:
            i = nc.sbuf_tile((p, f), idx.dtype)
            nc.dma.load(i, idx[r0:r0 + p * f])
            nc.vector.tensor_scalar(drop, i, "equal", padding_idx, dtype=I64)
        if last is not None:
            pos = nc.sbuf_tile((p, f), I64)
            nc.gpsimd.iota(pos, base=r0, partition_step=f, free_step=1)
            past = nc.sbuf_tile((p, f), I64)
            nc.vector.tensor_tensor(past, pos, last[:p, :], "greater_equal", dtype=I64)
            nc.vector.tensor_tensor(drop, drop, past, "maximum", dtype=I64)
        # dst = bag + drop * (dummy - bag)
        diff = nc.sbuf_tile((p, f), I64)
        nc.vector.tensor_scalar(diff, b, "subtract", dummy, reverse=True, dtype=I64)
        nc.vector.tensor_tensor(diff, diff, drop, "multiply", dtype=I64)
        res = nc.sbuf_tile((p, f), dst.dtype)
        nc.vector.tensor_tensor(res, b, diff, "add", dtype=I64)
        nc.dma.store(dst[r0:r0 + p * f], res)
        nc.release_to(mark)


def _finish_bags(nc, out: np.ndarray, acc: np.ndarray, counts: np.ndarray | None) -> None:
    """out = acc (/ max(count, 1) for mean), rounded to out's dtype; one bag per partition. A mean of a
    bfloat16/float16 bag divides the sum as CPU does, after rounding it to out's dtype (its index_select_add writes
    the sum into the output, then ``output /= bag_size``): a float16 bag of 60000s is inf on CPU, not 60000."""
    bags, d = out.shape
    if bags == 0 or d == 0:
        return
    chunk = 4096
    for b0 in range(0, bags, P):
        b1 = min(bags, b0 + P)
        mark = nc.mark()
        div = None
        if counts is not None:
            cnt = nc.sbuf_tile((b1 - b0, 1), I64)
            nc.dma.load(cnt, counts[b0:b1])
            div = nc.sbuf_tile((b1 - b0, 1), FP32)
            nc.vector.tensor_scalar(div, cnt, "maximum", 1, dtype=FP32)
        for c0 in range(0, d, chunk):
            c1 = min(d, c0 + chunk)
            t = nc.sbuf_tile((b1 - b0, c1 - c0), FP32)
            nc.dma.load(t, acc[b0:b1, c0:c1])
            res = nc.sbuf_tile((b1 - b0, c1 - c0), out.dtype)
            if div is not None:
                if out.dtype != np.float32:
                    nc.vector.tensor_copy(res, t)  # the sum, rounded to out's dtype
                    t = res
                nc.vector.tensor_tensor(res, t, div, "divide", dtype=FP32)
            else:
                nc.vector.tensor_copy(res, t)
            nc.dma.store(out[b0:b1, c0:c1], res)
        nc.release_to(mark)


def _bag_max(nc, out: np.ndarray, max_idx: np.ndarray, wv: np.ndarray, iv: np.ndarray, off: np.ndarray,
             bags: int, n: int, padding_idx: int) -> None:
    """Max mode, one bag per partition: walk each bag's positions, keep the first maximum."""
    d = out.shape[1]
    if bags == 0 or d == 0:
        return
    nw = wv.shape[0]
    wtable = _table(wv, 0, d, _estrides(wv)[1])
    itable = _table(iv.reshape(-1), 0, 1, 1) if n else None
    for b0 in range(0, bags, P):
        b1 = min(bags, b0 + P)
        p = b1 - b0
        mark = nc.mark()
        starts = nc.sbuf_tile((p, 1), I64)
        ends = nc.sbuf_tile((p, 1), I64)
        st = nc.sbuf_tile((p, 1), off.dtype)
        nc.dma.load(st, off[b0:b1].reshape(p, 1))
        nc.vector.tensor_copy(starts, st)
        # a bag ends where the next begins; the last bag runs to the end of the input
        nc.vector.memset(ends, n)
        nrows = max(0, min(b1, bags - 1) - b0)
        if nrows:
            en = nc.sbuf_tile((nrows, 1), off.dtype)
            nc.dma.load(en, off[b0 + 1:b0 + 1 + nrows].reshape(nrows, 1))
            nc.vector.tensor_copy(ends[:nrows, :], en)
        length = nc.sbuf_tile((p, 1), I64)
        nc.vector.tensor_tensor(length, ends, starts, "subtract", dtype=I64)
        longest = nc.sbuf_tile((1, 1), I64)
        nc.gpsimd.partition_reduce(longest, length, "maximum")
        steps = max(0, int(longest.read()[0, 0]))
        cur = nc.sbuf_tile((p, d), out.dtype)
        nc.vector.memset(cur, 0)
        arg = nc.sbuf_tile((p, d), I64)
        nc.vector.memset(arg, 0)
        seen = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.memset(seen, False)
        ones = nc.sbuf_tile((p, d), I64)
        nc.vector.memset(ones, 1)
        for s in range(steps):
            inner = nc.mark()
            pos = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(pos, starts, "add", s, dtype=I64)
            valid = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_tensor(valid, pos, ends, "less", dtype=I64)
            nc.vector.tensor_scalar(pos, pos, "minimum", n - 1, dtype=I64)
            word = nc.sbuf_tile((p, 1), iv.dtype)
            nc.dma.load_rows(word, itable, pos)
            if padding_idx >= 0:
                notpad = nc.sbuf_tile((p, 1), BOOL)
                nc.vector.tensor_scalar(notpad, word, "not_equal", padding_idx, dtype=I64)
                nc.vector.tensor_tensor(valid, valid, notpad, "logical_and")
            safe = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(safe, word, "maximum", 0, dtype=I64)
            nc.vector.tensor_scalar(safe, safe, "minimum", nw - 1, dtype=I64)
            woff = nc.sbuf_tile((p, 1), I64)
            nc.vector.tensor_scalar(woff, safe, "multiply", _estrides(wv)[0], dtype=I64)
            row = nc.sbuf_tile((p, d), wv.dtype)
            nc.dma.load_rows(row, wtable, woff)
            better = nc.sbuf_tile((p, d), BOOL)
            nc.vector.tensor_tensor(better, row, cur, "greater", dtype=FP32)
            first = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_unary(first, seen, "logical_not")
            nc.vector.tensor_tensor(better, better, first, "logical_or")
            nc.vector.tensor_tensor(better, better, valid, "logical_and")
            nc.vector.select(cur, better, row, cur)
            words = nc.sbuf_tile((p, d), I64)
            nc.vector.tensor_tensor(words, ones, safe, "multiply", dtype=I64)
            nc.vector.select(arg, better, words, arg)
            nc.vector.tensor_tensor(seen, seen, valid, "logical_or")
            nc.release_to(inner)
        nc.dma.store(out[b0:b1], cur)
        res = nc.sbuf_tile((p, d), max_idx.dtype)
        nc.vector.tensor_copy(res, arg)
        nc.dma.store(max_idx[b0:b1], res)
        nc.release_to(mark)


_native("aten::_embedding_bag")(lambda a: _embedding_bag_impl(a, False))
_native("aten::_embedding_bag_forward_only")(lambda a: _embedding_bag_impl(a, True))
