"""Adaptive pooling: _adaptive_avg_pool{2,3}d (+ backward), adaptive_max_pool{2,3}d (+ backward); PyTorch
runs 1-d adaptive pooling as 2-d.

Tiling: planes (batch x channel, <= 128) on partitions, each plane's [A*B*C] positions (C innermost) along the
free axis. Max pooling cuts every spatial axis into blocks of outputs (``_adaptive_boxes``) so that a box's
input and every stage's output fit the budget (a long 2 x 2 x 1024 plane is cut along C too); average pooling
cuts the outermost axis (``_adaptive_blocks``). The max backward streams the output plane in chunks.

Max: separable window stages on VectorE. A stage reduces the innermost axis: ``in[:, c::C]`` (one strided
free-dim access) for every c of output o's window, and writes the result as the contiguous block
``out[:, o*L:(o+1)*L]`` (L = A*B), which rotates the layout to (OC, A, B). Three stages (two in 2-d) bring
the layout back to (OA, OB, OC). Indices combine across the stages (first maximum, last NaN, as CPU).
Backward: a scatter-add per plane on GpSimd.

Average: not separable under CPU's rounding (see the note above ``_adaptive_axis``); forward and backward run
on GpSimd as numpy programs with CPU's roundings.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import FLOAT_DTYPES, SCALAR_TYPE_NAMES, check_out, hbm
from device_impl.kernels.spatial.tiles import BOOL, I64, P, _batched5, _boxes, _meta


def _memory_format(t: torch.Tensor):
    from device_impl.kernels.shape import suggest_memory_format
    return suggest_memory_format(t)


def _adaptive_start(o: int, osize: int, isize: int) -> int:
    return (o // osize) * isize + ((o % osize) * isize) // osize


def _adaptive_end(o: int, osize: int, isize: int) -> int:
    return 1 + ((o + 1) * isize - 1) // osize


def _adaptive_windows(isize: int, osize: int, offset: int = 0):
    return [(_adaptive_start(o, osize, isize) - offset, _adaptive_end(o, osize, isize) - offset) for o in range(osize)]


def _stage_max(nc, src, src_idx, n_in, windows, np_, L, index_step, index_base=0):
    """Max over the innermost axis with CPU's rule (first maximum, last NaN); indices combine as
    prev_index + (i + index_base) * index_step."""
    out = nc.sbuf_tile((np_, len(windows) * L), FP32)
    idx = nc.sbuf_tile((np_, len(windows) * L), I64)
    gt = nc.sbuf_tile((np_, L), BOOL)
    nan = nc.sbuf_tile((np_, L), BOOL)
    cand = nc.sbuf_tile((np_, L), I64)

    def col(t, i):
        return t[:, i::n_in] if n_in > 1 else t[:, 0:L]

    for o, (s, e) in enumerate(windows):
        blk = out[:, o * L:(o + 1) * L]
        iblk = idx[:, o * L:(o + 1) * L]
        nc.vector.memset(blk, -np.inf)
        for i in range(s, e):
            if src_idx is None:
                nc.vector.memset(cand, (i + index_base) * index_step)
            else:
                nc.vector.tensor_scalar(cand, col(src_idx, i), "add", (i + index_base) * index_step)
            if i == s:
                nc.vector.tensor_copy(iblk, cand)
            v = col(src, i)
            nc.vector.tensor_tensor(gt, v, blk, "greater", dtype=FP32)
            nc.vector.tensor_unary(nan, v, "isnan", dtype=FP32)
            nc.vector.tensor_tensor(gt, gt, nan, "logical_or")
            nc.vector.select(blk, gt, v, blk)
            nc.vector.select(iblk, gt, cand, iblk)
    for scratch in (cand, nan, gt):
        nc.release(scratch)
    return out, idx


def _adaptive_blocks(isize: int, osize: int, inner: int, budget: int = 6144):
    """Output ranges along the outermost axis whose input rows (times ``inner``) fit the budget."""
    blocks = []
    o0 = 0
    while o0 < osize:
        o1 = o0 + 1
        while o1 < osize and (_adaptive_end(o1, osize, isize) - _adaptive_start(o0, osize, isize)) * inner <= budget:
            o1 += 1
        blocks.append((o0, o1))
        o0 = o1
    return blocks


MAX_BOX = 4096  # elements per partition of a max-pooling box's input and of each stage's output


def _adaptive_boxes(ins, outs, axes, budget: int = MAX_BOX):
    """Per axis of ``axes`` (outermost first), output ranges whose boxes fit ``budget`` elements per partition:
    the product over the axes of each range's extent, the larger of its input rows and its outputs (a stage's
    tiles hold the outputs of its axis times the inputs of the others). The outer axes are first given their
    least extent (one output: its longest window) and each axis, innermost first, grows its ranges into what is
    left; where even the least extents exceed the budget (windows longer than it), one output per range."""

    def extent(a: int, o0: int, o1: int) -> int:
        return max(_adaptive_end(o1 - 1, outs[a], ins[a]) - _adaptive_start(o0, outs[a], ins[a]), o1 - o0)

    least = {a: max(extent(a, o, o + 1) for o in range(outs[a])) for a in axes}
    plan: dict[int, list[tuple[int, int]]] = {}
    inner = 1
    for i in range(len(axes) - 1, -1, -1):
        a = axes[i]
        limit = max(1, budget // int(np.prod([least[b] for b in axes[:i]], dtype=np.int64)))
        blocks, o0 = [], 0
        while o0 < outs[a]:
            o1 = o0 + 1
            while o1 < outs[a] and extent(a, o0, o1 + 1) * inner <= limit:
                o1 += 1
            blocks.append((o0, o1))
            o0 = o1
        plan[a] = blocks
        inner *= max(extent(a, o0, o1) for o0, o1 in blocks)
    return plan


def _adaptive_forward(nc, out5, idx5, x5, mode):
    """Adaptive max pooling of [N, C, D, H, W] views (idx5: flat per-plane argmax)."""
    n_batch, channels = x5.shape[:2]
    ins = list(x5.shape[2:])
    outs = list(out5.shape[2:])
    # axes taking part (a 2-d problem has D == OD == 1: skip that stage)
    axes = [0, 1, 2] if not (ins[0] == 1 and outs[0] == 1) else [1, 2]
    plane_strides = [ins[1] * ins[2], ins[2], 1]
    plan = _adaptive_boxes(ins, outs, axes)
    ranges = [plan.get(a, [(0, 1)]) for a in range(3)]
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        for orng in itertools.product(*ranges):
            mark = nc.mark()
            starts = [_adaptive_start(o0, outs[a], ins[a]) for a, (o0, _) in enumerate(orng)]
            ends = [_adaptive_end(o1 - 1, outs[a], ins[a]) for a, (_, o1) in enumerate(orng)]
            isl = tuple(slice(i0, i1) for i0, i1 in zip(starts, ends))
            osl = tuple(slice(o0, o1) for o0, o1 in orng)
            blk_in = [i1 - i0 for i0, i1 in zip(starts, ends)]
            t = nc.sbuf_tile((np_, blk_in[0] * blk_in[1] * blk_in[2]), x5.dtype)
            nc.dma.load(t, x5[n0:n1, c0:c1][(slice(None), slice(None)) + isl])
            cur, cur_idx = t, None
            dims = [blk_in[a] for a in axes]  # current layout, outermost first
            for a in reversed(axes):  # innermost axis first
                n_in = dims[-1]
                L = 1
                for d in dims[:-1]:
                    L *= d
                o0, o1 = orng[a]
                wins = _adaptive_windows(ins[a], outs[a], starts[a])[o0:o1]
                nxt, nxt_idx = _stage_max(nc, cur, cur_idx, n_in, wins, np_, L, plane_strides[a], starts[a])
                for done in (cur, cur_idx):  # a stage's input is dead once the next layout is formed
                    if done is not None:
                        nc.release(done)
                cur, cur_idx = nxt, nxt_idx
                dims = [len(wins)] + dims[:-1]
            dst = out5[n0:n1, c0:c1][(slice(None), slice(None)) + osl]
            res = nc.sbuf_tile(cur.shape, out5.dtype)
            nc.vector.tensor_copy(res, cur)
            nc.dma.store(dst, res)
            if idx5 is not None:
                nc.dma.store(idx5[n0:n1, c0:c1][(slice(None), slice(None)) + osl], cur_idx)
            nc.release_to(mark)


# Average pooling is not separable under CPU's rounding: ATen sums each window in one pass, (d, h, w)
# row-major from +0.0, then divides by each window length in turn. 2-d (and 1-d, which ATen runs as 2-d):
# AdaptiveAvgPoolKernel.cpp, cpu_adaptive_avg_pool2d, sums in opmath (float32) and rounds once after
# ``sum / kh / kw`` (the channels-last kernel divides by ``kh * kw`` on its vectorized channel blocks, by kh
# then kw on the remainder). 3-d: AdaptiveAveragePooling3d.cpp, adaptive_avg_pool3d_out_frame, sums in
# scalar_t (a bf16/fp16 sum rounds at every add) and divides in scalar_t by kT, kH, kW, rounding each time.
# The backward kernels (both files) form ``grad_delta = grad_output / k...`` in scalar_t and add it into a
# zeroed grad_input in scalar_t, visiting outputs row-major. These windows have irregular starts, so the
# passes run on GpSimd as numpy programs with exactly those roundings.

def _adaptive_axis(isize: int, osize: int):
    """(start, length) per output along one axis."""
    st = np.array([_adaptive_start(o, osize, isize) for o in range(osize)], dtype=np.int64)
    en = np.array([_adaptive_end(o, osize, isize) for o in range(osize)], dtype=np.int64)
    return st, en - st


def _avg_vector_lanes(dtype: np.dtype, channels: int) -> int:
    """Channels CPU's channels-last 2-d kernels cover with whole Vectorized<T> blocks (32 bytes for every
    capability in torch 2.13, see cpu_host.vector_block); the remainder runs scalar."""
    lanes = cpu_host.vector_block(torch.float32 if dtype == np.float32 else torch.bfloat16) // 2
    return channels - channels % lanes


def _narrow(dtype):
    """Round a float32 array to ``dtype`` (storage arithmetic of c10's BFloat16/Half: float op, then round)."""
    def r(a):
        return np.asarray(a, np.float32).astype(dtype).astype(np.float32)
    return r


def _adaptive_avg_program(nsp, ins, outs, lead_rng, dtype, single_div):
    """numpy program (out[p, od*oh*ow block], x[p, id block]) of CPU's adaptive average forward.
    ``lead_rng``: (o0, o1, i0) the block of lead-axis outputs and its first input row; ``single_div``: [p]
    bool, lanes dividing once by the window size (channels-last vector blocks)."""
    o0, o1, i0 = lead_rng
    axes = [_adaptive_axis(ins[a], outs[a]) for a in range(3)]
    st0, ln0 = axes[0]
    axes[0] = (st0[o0:o1] - i0, ln0[o0:o1])
    rnd = _narrow(dtype) if nsp == 3 else (lambda a: a)

    def program(o, x):
        p = x.shape[0]
        xv = x.reshape(p, -1, ins[1], ins[2]).astype(np.float32)
        (sd, kd), (sh, kh), (sw, kw) = axes
        s = np.zeros((p, len(sd), len(sh), len(sw)), np.float32)
        with np.errstate(all="ignore"):
            for a in range(int(kd.max())):
                for b in range(int(kh.max())):
                    for c in range(int(kw.max())):
                        valid = (a < kd)[:, None, None] & (b < kh)[None, :, None] & (c < kw)[None, None, :]
                        v = xv[:, np.minimum(sd + a, xv.shape[1] - 1)][:, :, np.minimum(sh + b, ins[1] - 1)][
                            :, :, :, np.minimum(sw + c, ins[2] - 1)]
                        s = np.where(valid[None], rnd(s + v), s)
            k3 = [k.astype(np.float32) for k in (kd, kh, kw)]
            seq = s
            for ax, k in enumerate(k3):
                shape = [1, 1, 1, 1]
                shape[ax + 1] = -1
                seq = rnd(seq / k.reshape(shape))
            if single_div is not None and single_div.any():
                whole = s / (k3[0][:, None, None] * k3[1][None, :, None] * k3[2][None, None, :])[None]
                seq = np.where(single_div[:, None, None, None], whole, seq)
        o[...] = seq.reshape(p, -1).astype(o.dtype)
    return program


def _adaptive_avg_forward(nc, out5, x5, nsp, channels_last):
    n_batch, channels = x5.shape[:2]
    ins = list(x5.shape[2:])
    outs = list(out5.shape[2:])
    inner_in = ins[1] * ins[2]
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        single = None
        if channels_last:
            cidx = np.tile(np.arange(c0, c1), n1 - n0)
            single = cidx < _avg_vector_lanes(x5.dtype, channels)
        for o0, o1 in _adaptive_blocks(ins[0], outs[0], inner_in):
            mark = nc.mark()
            i0 = _adaptive_start(o0, outs[0], ins[0])
            i1 = _adaptive_end(o1 - 1, outs[0], ins[0])
            t = nc.sbuf_tile((np_, (i1 - i0) * inner_in), x5.dtype)
            nc.dma.load(t, x5[n0:n1, c0:c1, i0:i1])
            res = nc.sbuf_tile((np_, (o1 - o0) * outs[1] * outs[2]), out5.dtype)
            window = int(np.prod([int(_adaptive_axis(ins[a], outs[a])[1].max()) for a in range(3)]))
            nc.gpsimd.run("adaptive_avg", _adaptive_avg_program(nsp, ins, outs, (o0, o1, i0), x5.dtype, single),
                          (res,), (t,), elements=res.data.size * window, factor=2.0)
            nc.dma.store(out5[n0:n1, c0:c1, o0:o1], res)
            nc.release_to(mark)


def _adaptive_avg_backward_program(nsp, ins, outs, rng, dtype, single_div):
    """numpy program (gi[p, i block], go[p, o block]) of CPU's adaptive average backward: grad_input rows
    [i0, i1) of the lead axis, fed by lead-axis outputs [o0, o1)."""
    i0, i1, o0, o1 = rng
    rnd = _narrow(dtype)
    axes = [_adaptive_axis(ins[a], outs[a]) for a in range(3)]

    def cover(st, ln, lo, hi):
        """Per input index in [lo, hi): first covering output and how many cover it (outputs increase)."""
        idx = np.arange(lo, hi)
        hit = (st[None, :] <= idx[:, None]) & (idx[:, None] < (st + ln)[None, :])
        first = hit.argmax(axis=1)
        return first, hit.sum(axis=1)

    covers = [cover(*axes[0], i0, i1)] + [cover(*axes[a], 0, ins[a]) for a in (1, 2)]
    covers[0] = (covers[0][0] - o0, covers[0][1])

    def program(gi, go):
        p = go.shape[0]
        g = go.reshape(p, o1 - o0, outs[1], outs[2]).astype(np.float32)
        (_, kd), (_, kh), (_, kw) = axes
        k3 = [kd[o0:o1].astype(np.float32), kh.astype(np.float32), kw.astype(np.float32)]
        with np.errstate(all="ignore"):
            delta = g
            for ax, k in enumerate(k3):
                shape = [1, 1, 1, 1]
                shape[ax + 1] = -1
                delta = rnd(delta / k.reshape(shape))
            if single_div is not None and single_div.any():
                whole = rnd(g / (k3[0][:, None, None] * k3[1][None, :, None] * k3[2][None, None, :])[None])
                delta = np.where(single_div[:, None, None, None], whole, delta)
            acc = np.zeros((p, i1 - i0, ins[1], ins[2]), np.float32)
            (fd, cd), (fh, ch), (fw, cw) = covers
            for a in range(int(cd.max())):
                for b in range(int(ch.max())):
                    for c in range(int(cw.max())):
                        valid = (a < cd)[:, None, None] & (b < ch)[None, :, None] & (c < cw)[None, None, :]
                        v = delta[:, np.minimum(fd + a, o1 - o0 - 1)][:, :, np.minimum(fh + b, outs[1] - 1)][
                            :, :, :, np.minimum(fw + c, outs[2] - 1)]
                        acc = np.where(valid[None], rnd(acc + v), acc)
        gi[...] = acc.reshape(p, -1).astype(gi.dtype)
    return program


def _adaptive_avg_backward(nc, gi5, go5, nsp, channels_last):
    """CPU's order: grad_delta per output, added into zeroed grad_input rows output by output."""
    n_batch, channels = gi5.shape[:2]
    ins = list(gi5.shape[2:])
    outs = list(go5.shape[2:])
    inner = max(ins[1] * ins[2], outs[1] * outs[2])
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        single = None
        if channels_last:
            cidx = np.tile(np.arange(c0, c1), n1 - n0)
            single = cidx < _avg_vector_lanes(gi5.dtype, channels)
        step = max(1, 6144 // inner)
        for i0 in range(0, ins[0], step):  # blocks of grad_input rows: no two blocks write the same row
            i1 = min(ins[0], i0 + step)
            o0 = min(o for o in range(outs[0]) if _adaptive_end(o, outs[0], ins[0]) > i0)
            o1 = max(o for o in range(outs[0]) if _adaptive_start(o, outs[0], ins[0]) < i1) + 1
            mark = nc.mark()
            g = nc.sbuf_tile((np_, (o1 - o0) * outs[1] * outs[2]), go5.dtype)
            nc.dma.load(g, go5[n0:n1, c0:c1, o0:o1])
            res = nc.sbuf_tile((np_, (i1 - i0) * ins[1] * ins[2]), gi5.dtype)
            nc.gpsimd.run("adaptive_avg_backward",
                          _adaptive_avg_backward_program(nsp, ins, outs, (i0, i1, o0, o1), gi5.dtype, single),
                          (res,), (g,), elements=res.data.size * 4, factor=2.0)
            nc.dma.store(gi5[n0:n1, c0:c1, i0:i1], res)
            nc.release_to(mark)


def _adaptive_max_backward(nc, gi5, go5, idx5):
    """grad_input[plane, indices] += grad_output: a scatter-add per plane on GpSimd (irregular). The input plane
    is accumulated in chunks; for each, the output plane streams through in boxes of MAX_BOX positions, in
    row-major order (so each position sums its gradients in CPU's order)."""
    n_batch, channels = gi5.shape[:2]
    plane = gi5.shape[2] * gi5.shape[3] * gi5.shape[4]
    oboxes = list(_boxes(go5.shape[2:], MAX_BOX))
    for box in _boxes((n_batch, channels), P):
        (n0, n1), (c0, c1) = box
        np_ = (n1 - n0) * (c1 - c0)
        chunk = 8192
        gi_flat = gi5[n0:n1, c0:c1]
        flat_dst = gi_flat.view()
        try:
            flat_dst.shape = (np_, plane)
        except AttributeError:  # planes are not rows of one stride (channels_last): one chunk per plane
            flat_dst, chunk = None, plane
        for r0 in range(0, plane, chunk):
            r1 = min(plane, r0 + chunk)
            m = nc.mark()
            acc = nc.sbuf_tile((np_, r1 - r0), FP32)
            for k, obox in enumerate(oboxes):
                mo = nc.mark()
                osl = (slice(n0, n1), slice(c0, c1)) + tuple(slice(a, b) for a, b in obox)
                count = int(np.prod([b - a for a, b in obox]))
                g = nc.sbuf_tile((np_, count), go5.dtype)
                nc.dma.load(g, go5[osl])
                idx = nc.sbuf_tile((np_, count), I64)
                nc.dma.load(idx, idx5[osl])

                def scatter(acc_a, g_a, idx_a, *prev, r0=r0, r1=r1):
                    acc_a[...] = prev[0] if prev else 0
                    rows = np.broadcast_to(np.arange(acc_a.shape[0])[:, None], idx_a.shape)
                    hit = (idx_a >= r0) & (idx_a < r1)
                    np.add.at(acc_a, (rows[hit], idx_a[hit] - r0), g_a[hit].astype(np.float32))

                nc.gpsimd.run("scatter_add", scatter, (acc,), (g, idx) + ((acc,) if k else ()),
                              elements=np_ * (count + r1 - r0))
                nc.release_to(mo)
            res = nc.sbuf_tile((np_, r1 - r0), gi5.dtype)
            nc.vector.tensor_copy(res, acc)
            if r0 == 0 and r1 == plane:
                nc.dma.store(gi_flat, res)
            else:
                nc.dma.store(flat_dst[:, r0:r1], res)
            nc.release_to(m)


def _adaptive_avg_check(nsp, x, output_size):
    name = f"adaptive_avg_pool{nsp}d"
    if len(output_size) != nsp:
        raise RuntimeError(f"{name}: output_size must be {nsp}")
    if x.dim() not in (nsp + 1, nsp + 2):
        raise RuntimeError(f"{name}(): Expected {nsp + 1}D or {nsp + 2}D tensor, but got {list(x.shape)}")
    for i in range(1, x.dim()):
        if x.shape[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(x.shape)} with dimension {i} being empty")
    if any(int(o) < 0 for o in output_size):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(output_size)}")
    if x.dtype not in FLOAT_DTYPES:
        raise NotImplementedError(f'"{name}{"_cpu" if nsp == 3 else ""}" not implemented for '
                                  f"'{SCALAR_TYPE_NAMES[x.dtype]}'")


def _register_adaptive_avg(nsp: int) -> None:
    name = f"_adaptive_avg_pool{nsp}d"

    @TABLE.native(f"aten::{name}", dtypes=COMPUTE_DTYPES)
    def forward(x, output_size):
        output_size = [int(o) for o in output_size]
        _adaptive_avg_check(nsp, x, output_size)
        shape = tuple(x.shape[:x.dim() - nsp]) + tuple(output_size)
        fmt = torch.channels_last if nsp == 2 and x.dim() == 4 and _memory_format(x) == torch.channels_last \
            else torch.contiguous_format
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=fmt)
        if out.numel():
            with launch(name, x.device.index) as nc:
                _adaptive_avg_forward(nc, _batched5(hbm(out), nsp), _batched5(hbm(x), nsp), nsp,
                                      nsp == 2 and x.dim() == 4 and _memory_format(x) == torch.channels_last)
        return out

    TABLE.serves(f"aten::{name}.out", f"aten::{name}")

    @TABLE.native(f"aten::{name}_backward", dtypes=COMPUTE_DTYPES)
    def backward(grad_output, x):
        _adaptive_avg_check(nsp, x, list(grad_output.shape[grad_output.dim() - nsp:]))
        if grad_output.dim() != x.dim():
            raise RuntimeError(f"adaptive_avg_pool{nsp}d_backward(): Expected dimensions {x.dim()} for "
                               f"`grad_output` but got dimensions {grad_output.dim()}")
        if grad_output.dtype != x.dtype:
            raise RuntimeError(f"expected dtype {x.dtype} for `grad_output` but got dtype {grad_output.dtype}")
        if tuple(grad_output.shape[:-nsp]) != tuple(x.shape[:-nsp]):  # CPU reads past grad_output (no check)
            raise RuntimeError(f"adaptive_avg_pool{nsp}d_backward(): `grad_output` of shape {list(grad_output.shape)}"
                               f" has other batch/channel sizes than the input {list(x.shape)}; pass the gradient "
                               f"of this input's forward output")
        fmt = torch.channels_last if nsp == 2 and x.dim() == 4 and _memory_format(x) == torch.channels_last \
            else torch.contiguous_format
        gi = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device, memory_format=fmt)
        if gi.numel():
            with launch(f"{name}_backward", x.device.index) as nc:
                _adaptive_avg_backward(nc, _batched5(hbm(gi), nsp), _batched5(hbm(grad_output), nsp), nsp,
                                       nsp == 2 and grad_output.dim() == 4
                                       and _memory_format(grad_output) == torch.channels_last)
        return gi

    TABLE.serves(f"aten::{name}_backward.out", f"aten::{name}_backward")


def _register_adaptive_max(nsp: int) -> None:
    name = f"adaptive_max_pool{nsp}d"
    functional = getattr(torch.ops.aten, name).default
    backward_functional = getattr(torch.ops.aten, f"{name}_backward").default

    @TABLE.native(f"aten::{name}.out", dtypes=COMPUTE_DTYPES)
    def forward_out(x, output_size, *, out, indices):
        m_out, m_idx = functional(_meta(x), output_size)
        if x.dtype not in FLOAT_DTYPES:
            raise NotImplementedError(f'"{name}" not implemented for \'{SCALAR_TYPE_NAMES[x.dtype]}\'')
        check_out(out, tuple(m_out.shape), x.dtype, (x,))
        check_out(indices, tuple(m_idx.shape), torch.int64, (x,), exact_dtype=True)
        if out.numel():
            with launch(name, x.device.index) as nc:
                _adaptive_forward(nc, _batched5(hbm(out), nsp), _batched5(hbm(indices), nsp),
                                  _batched5(hbm(x), nsp), "max")
        return out, indices

    TABLE.serves(f"aten::{name}", f"aten::{name}.out")

    @TABLE.native(f"aten::{name}_backward.grad_input", dtypes=FLOAT_DTYPES | {torch.int64})
    def backward_out(grad_output, x, indices, *, grad_input):
        m = backward_functional(_meta(grad_output), _meta(x), _meta(indices))
        if tuple(indices.shape) != tuple(grad_output.shape):  # CPU's kernel checks it (its meta function does not)
            raise RuntimeError(f"expected sizes {list(indices.shape)} for `grad_output` but got sizes "
                               f"{list(grad_output.shape)}")
        check_out(grad_input, tuple(m.shape), x.dtype, (grad_output, x, indices))
        if grad_input.numel():
            with launch(f"{name}_backward", x.device.index) as nc:
                _adaptive_max_backward(nc, _batched5(hbm(grad_input), nsp), _batched5(hbm(grad_output), nsp),
                                       _batched5(hbm(indices), nsp))
        return grad_input

    TABLE.serves(f"aten::{name}_backward", f"aten::{name}_backward.grad_input")


for _nsp in (2, 3):
    _register_adaptive_avg(_nsp)
    _register_adaptive_max(_nsp)
