"""Fused recurrent cells: ``_thnn_fused_lstm_cell``, ``_thnn_fused_gru_cell`` and their backward kernels.

On PrivateUse1 (as on CUDA and XPU) ATen's LSTMCell/GRUCell (aten/src/ATen/native/RNN.cpp) compute the
gate matmuls as ordinary ops (``mm``: ``input @ w_ih.t()`` and ``hx @ w_hh.t()``, without bias) and hand
the two gate tensors, the previous cell/hidden state and the two biases to a fused pointwise cell;
nn.LSTM, nn.GRU, nn.LSTMCell and nn.GRUCell all reach these four overloads (nn.RNN's tanh/relu cells
are ``addmm`` + ``tanh``/``relu`` and never do). The cells have CUDA kernels only (RNN.cu), so there is
no CPU kernel to fall back to; these are the device's own.

Numerics are those of ATen's fused kernels: every element in fp32 (bf16/fp16 widened on read), the
outputs rounded once to the inputs' dtype, gates summed as ``((input_gate + hidden_gate) + b_ih) + b_hh``.

LSTM (chunk order i, f, g, o; gates ``[B, 4H]``, cx ``[B, H]``)::

    i, f, o = sigmoid(.), g = tanh(.);  cy = f * cx + i * g;  hy = o * tanh(cy)
    workspace [B, 4H] = (i, f, g, o) after their nonlinearity   (hy uses the fp32 cy, not the rounded one)

backward (``_thnn_fused_lstm_cell_backward_impl``: grad_gates, grad_cx, grad_bias)::

    t = tanh(cy);  d_o = gh * t;  dc = gh * o * (1 - t^2) + gc
    d_i = dc * g * (1 - i) * i;  d_f = dc * cx * (1 - f) * f;  d_g = dc * i * (1 - g^2);  d_o *= (1 - o) * o
    grad_cx = dc * f;  grad_bias = grad_gates.sum(0) (of the rounded gate gradients)

GRU (chunk order r, z, n; gates ``[B, 3H]``, hx ``[B, H]``)::

    r = sigmoid(ir + hr + b_ir + b_hr);  z = sigmoid(iz + hz + b_iz + b_hz)
    hn' = hn + b_hn;  n = tanh(in + b_in + r * hn');  hy = n + z * (hx - n)
    workspace [B, 5H] = (r, z, n, hx, hn')

backward (``_thnn_fused_gru_cell_backward``: grad_input_gates, grad_hidden_gates, grad_hx, two bias grads)::

    d_z = gh * (hx - n) * (1 - z) * z;  grad_hx = gh * z;  d_in = gh * (1 - z) * (1 - n^2)
    d_hn = d_in * r;  d_r = d_in * hn' * (1 - r) * r
    grad_input_gates = (d_r, d_z, d_in), grad_hidden_gates = (d_r, d_z, d_hn), bias grads their sums over B

Tiles: batch rows on the partitions (blocks of <= 128), hidden columns in blocks of <= 512; the bias rows
are broadcast to every partition by the DMA (a stride-0 source) once per column block; the adds and
products run on VectorE in fp32, sigmoid/tanh on ScalarE. The bias gradients (sums over the batch, i.e.
over partitions) accumulate on TensorE in PSUM across row blocks: a ones column as the stationary operand
against the rounded gate gradients (``ones[K=rows, 1].T @ grad[rows, cols]``), evacuated and rounded once.

float64 (storage-only on the engines) is served by ATen's own composite of the same formulas over device
ops, each of which takes its counted CPU fallback (there is no fused CPU kernel to borrow).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from device_impl.dispatch.table import TABLE, resolve
from device_impl.engine import launch
from device_impl.engine.dtypes import FLOAT_DTYPES, FP32, numpy_dtype
from device_impl.kernels.common import hbm
from device_impl.kernels.cpu_host import on_fresh_thread
from device_impl.kernels.registry import Binder

P = 128  # batch rows per tile (partitions)
H_TILE = 512  # hidden columns per tile: one PSUM bank of fp32 for the bias-gradient sums

LSTM_FORWARD = "aten::_thnn_fused_lstm_cell"
LSTM_BACKWARD = "aten::_thnn_fused_lstm_cell_backward_impl"
GRU_FORWARD = "aten::_thnn_fused_gru_cell"
GRU_BACKWARD = "aten::_thnn_fused_gru_cell_backward"
LSTM_ACTIVATIONS = ("sigmoid", "sigmoid", "tanh", "sigmoid")  # i, f, g, o


# --- argument checks (RNN.cu's checkSizes, as RuntimeError) ---------------------------------------


def _check(cond: bool, op: str, message: str) -> None:
    if not cond:
        raise RuntimeError(f"{op}: {message}")


def _check_cell(op: str, input_gates, hidden_gates, input_bias, hidden_bias, factor: int, prev) -> int:
    """Checks the forward arguments; returns the hidden size."""
    _check(input_gates.dim() == 2, op, f"Expected 2-dimensional tensor, but got {input_gates.dim()}-dimensional "
           "tensor for argument #1 'input_gates'")
    _check(input_gates.shape == hidden_gates.shape, op, f"input_gates {tuple(input_gates.shape)} and hidden_gates "
           f"{tuple(hidden_gates.shape)} must have the same size")
    gates = input_gates.size(1)
    _check(gates % factor == 0, op, f"the gates' size {gates} is not a multiple of {factor}")
    if input_bias is not None or hidden_bias is not None:
        _check(input_bias is not None and hidden_bias is not None, op, "pass both biases or neither")
        _check(input_bias.dim() == 1 and input_bias.numel() == gates, op, f"input_bias must be 1-D with {gates} "
               f"elements, got {tuple(input_bias.shape)}")
        _check(input_bias.shape == hidden_bias.shape, op, f"input_bias {tuple(input_bias.shape)} and hidden_bias "
               f"{tuple(hidden_bias.shape)} must have the same size")
    hidden = gates // factor
    _check(prev.dim() == 2 and tuple(prev.shape) == (input_gates.size(0), hidden), op,
           f"the previous state must be [{input_gates.size(0)}, {hidden}], got {tuple(prev.shape)}")
    tensors = [t for t in (input_gates, hidden_gates, input_bias, hidden_bias, prev) if t is not None]
    _check(all(t.device == input_gates.device for t in tensors), op, "expected all inputs to be same device")
    _check(all(t.dtype == input_gates.dtype for t in tensors), op, "expected all inputs to have the same dtype, "
           f"got {[t.dtype for t in tensors]}")
    return hidden


# --- building blocks ---------------------------------------------------------------------------------


def _load(nc, src: np.ndarray):
    tile = nc.sbuf_tile(src.shape, src.dtype)
    nc.dma.load(tile, src)
    return tile


def _bias_rows(nc, bias: np.ndarray | None, rows: int, factor: int, hidden: int, c0: int, c1: int) -> list:
    """Per gate, the bias columns [c0, c1) broadcast to ``rows`` partitions (a stride-0 DMA source)."""
    if bias is None:
        return [None] * factor
    tiles = []
    for k in range(factor):
        seg = bias[k * hidden + c0:k * hidden + c1]
        tiles.append(_load(nc, np.broadcast_to(seg[None, :], (rows, c1 - c0))))
    return tiles


def _gate_sum(nc, ig, hg, b1, b2, p: int):
    """((input_gate + hidden_gate) + b_ih) + b_hh in fp32, ATen's order."""
    s = nc.sbuf_tile(ig.shape, FP32)
    nc.vector.tensor_tensor(s, ig, hg, "add", dtype=FP32)
    if b1 is not None:
        nc.vector.tensor_tensor(s, s, b1[:p], "add", dtype=FP32)
        nc.vector.tensor_tensor(s, s, b2[:p], "add", dtype=FP32)
    return s


def _store(nc, dst: np.ndarray, tile, dtype: np.dtype) -> None:
    """Store an fp32 tile into HBM of ``dtype``, rounding once on VectorE where the dtypes differ."""
    if tile.dtype != dtype:
        low = nc.sbuf_tile(tile.shape, dtype)
        nc.vector.tensor_copy(low, tile)
        tile = low
    nc.dma.store(dst, tile)
    return tile


def _rounded(nc, tile, dtype: np.dtype):
    """``tile`` rounded to ``dtype`` (itself when already of it)."""
    if tile.dtype == dtype:
        return tile
    low = nc.sbuf_tile(tile.shape, dtype)
    nc.vector.tensor_copy(low, tile)
    return low


def _one_minus(nc, a):
    out = nc.sbuf_tile(a.shape, FP32)
    nc.vector.tensor_scalar(out, a, "subtract", 1.0, reverse=True, dtype=FP32)
    return out


def _mul(nc, a, b):
    out = nc.sbuf_tile(a.shape, FP32)
    nc.vector.tensor_tensor(out, a, b, "multiply", dtype=FP32)
    return out


def _blocks(rows: int, hidden: int):
    """(c0, c1) hidden-column blocks and (r0, r1) batch-row blocks."""
    cols = [(c0, min(c0 + H_TILE, hidden)) for c0 in range(0, hidden, H_TILE)]
    row_blocks = [(r0, min(r0 + P, rows)) for r0 in range(0, rows, P)]
    return cols, row_blocks


class _BiasSums:
    """Column sums over the batch of rounded gate gradients, accumulated on TensorE in PSUM."""

    def __init__(self, nc, count: int, cols: int, dtype: np.dtype):
        self.nc = nc
        self.acc = [nc.psum_tile((1, cols), FP32) for _ in range(count)]
        self.ones = nc.sbuf_tile((P, 1), dtype)
        nc.vector.memset(self.ones, 1.0)
        self.started = [False] * count

    def add(self, k: int, grad_low, p: int) -> None:
        self.nc.tensor.matmul(self.acc[k], self.ones[:p], grad_low, accumulate=self.started[k])
        self.started[k] = True

    def store(self, k: int, dsts: list[np.ndarray], dtype: np.dtype) -> None:
        out = self.nc.sbuf_tile(self.acc[k].shape, dtype)
        self.nc.vector.tensor_copy(out, self.acc[k])
        for dst in dsts:
            self.nc.dma.store(dst, out)


def _zero_fill(tensors: list[torch.Tensor]) -> None:
    """Bias gradients of an empty batch: zeros written by the engine."""
    targets = [t for t in tensors if t is not None and t.numel()]
    if not targets:
        return
    with launch("rnn_zero_bias_grad", targets[0].device.index) as nc:
        for t in targets:
            view = hbm(t).reshape(1, -1)
            for c0 in range(0, view.shape[1], H_TILE):
                c1 = min(c0 + H_TILE, view.shape[1])
                z = nc.sbuf_tile((1, c1 - c0), view.dtype)
                nc.vector.memset(z, 0.0)
                nc.dma.store(view[:, c0:c1], z)


def _composite(t: torch.Tensor, op: str) -> bool:
    """True for float64 (served by the composite); raises as ATen's floating-type dispatch for non-floats."""
    if t.dtype in FLOAT_DTYPES:
        return False
    if t.dtype == torch.float64:
        return True
    names = {torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble", torch.int64: "Long",
             torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte", torch.bool: "Bool"}
    raise NotImplementedError(f'"{op}" not implemented for \'{names.get(t.dtype, t.dtype)}\'')


def _empty(shape, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=like.dtype, device=like.device)


# --- CPU's layouts -----------------------------------------------------------------------------------
# CPU has no fused cell: its lstm_cell/gru_cell are ATen's composite (RNN.cpp's LSTMCell/GRUCell), whose pointwise
# steps lay the states and their gradients out by TensorIterator from the gates and the previous state (a
# transposed or overlapping state gives a transposed hy). The fused kernels allocate theirs as those steps do,
# run on meta tensors of the fused kernel's operands' layouts (the gates are the device's linear results, laid
# out as CPU's), so no layout rule is copied here.


def _key(t: torch.Tensor | None) -> tuple | None:
    """A tensor's layout (sizes, strides, dtype): what the layouts below depend on, and their caches' key (the
    meta steps cost about 1.5 ms a cell; a recurrent net calls the cell per time step with one layout)."""
    return None if t is None else (tuple(t.shape), tuple(t.stride()), t.dtype)


def _meta(key: tuple | None, requires_grad: bool = False) -> torch.Tensor | None:
    """A meta proxy of ``key``'s sizes and strides, in float32 whatever the key's dtype: CPU's cell computes in one
    dtype throughout, where TensorIterator casts nothing and its layouts do not depend on the dtype; on meta,
    torch's Python references upcast bfloat16/float16 operands to float32 first, an expanded one becoming dense
    (an expanded grad_cy beside a transposed grad_hy gave a contiguous bfloat16 cx gradient, CPU's is transposed)."""
    if key is None:
        return None
    m = torch.empty_strided(key[0], key[1], dtype=torch.float32, device="meta")
    return m.requires_grad_(True) if requires_grad else m


def _lstm_states(ig, hg, cx):
    """CPU's LSTMCell after its two linears: ``linear_hh(hx).add_(linear_ih(input))``, chunked, activated in
    place, ``cy = (f * cx).add_(i * g)``, ``hy = o * cy.tanh()``."""
    gates = hg.clone().add_(ig) if hg.requires_grad else hg.add_(ig)
    i, f, g, o = gates.unsafe_chunk(4, 1)
    i, f, g, o = i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
    cy = (f * cx).add_(i * g)
    return o * cy.tanh(), cy


@functools.lru_cache(maxsize=256)
def _lstm_layouts(ig_t: tuple, hg_t: tuple, cx_t: tuple) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(hy, cy) strides of CPU's lstm_cell whose gates and cx have these layouts (``_key``)."""
    with torch.no_grad():
        hy, cy = _lstm_states(_meta(ig_t), _meta(hg_t), _meta(cx_t))
    return tuple(hy.stride()), tuple(cy.stride())


@functools.lru_cache(maxsize=256)
def _lstm_grad_cx_layout(ig_shape: tuple, gh_t: tuple | None, gc_t: tuple | None, cx_t: tuple) -> tuple[int, ...]:
    """The strides of the cx gradient CPU's autograd gives lstm_cell for cotangents and cx of these layouts
    (``_key``; either cotangent may be None)."""
    def grad() -> tuple:
        with torch.enable_grad():
            ig = torch.empty(ig_shape, dtype=torch.float32, device="meta").requires_grad_(True)
            hg = torch.empty(ig_shape, dtype=torch.float32, device="meta").requires_grad_(True)
            cx = _meta(cx_t, True)
            hy, cy = _lstm_states(ig, hg, cx)
            pairs = [(o, _meta(g)) for o, g in ((hy, gh_t), (cy, gc_t)) if g is not None]
            got, = torch.autograd.grad([o for o, _ in pairs], (cx,), [g for _, g in pairs])
            return tuple(got.stride())

    return on_fresh_thread(grad)


def _gru_hy(ig, hg, hx):
    """CPU's GRUCell after its linears: the gates chunked, ``r``/``z`` added into the hidden gates' chunks and
    activated in place, ``n = i_n.add(h_n.mul_(r)).tanh_()``, ``hy = (hx - n).mul_(z).add_(n)``."""
    ci, ch = ig.unsafe_chunk(3, 1), hg.unsafe_chunk(3, 1)
    r = ch[0].add_(ci[0]).sigmoid_()
    z = ch[1].add_(ci[1]).sigmoid_()
    n = ci[2].add(ch[2].mul_(r)).tanh_()
    return (hx - n).mul_(z).add_(n)


@functools.lru_cache(maxsize=256)
def _gru_layout(ig_t: tuple, hg_t: tuple, hx_t: tuple) -> tuple[int, ...]:
    """hy's strides of CPU's gru_cell whose gates and hx have these layouts (``_key``)."""
    with torch.no_grad():
        return tuple(_gru_hy(_meta(ig_t), _meta(hg_t), _meta(hx_t)).stride())


@functools.lru_cache(maxsize=256)
def _gru_grad_hx_layout(ig_shape: tuple, gh_t: tuple) -> tuple[int, ...]:
    """The strides of the hx gradient CPU's autograd gives gru_cell's pointwise steps for a cotangent of this
    layout (``_key``): ``(hx - n) * z``'s, ``grad_hy * z``, the fused backward's grad_hx (autograd adds the hidden
    linear's part to it, on either device; hx's own layout has no say), the gates CPU's contiguous linear results."""
    def grad() -> tuple:
        with torch.enable_grad():
            ig, hg = (torch.empty(ig_shape, dtype=torch.float32, device="meta") for _ in range(2))
            hx = torch.empty((ig_shape[0], ig_shape[1] // 3), dtype=torch.float32, device="meta").requires_grad_(True)
            got, = torch.autograd.grad(_gru_hy(ig, hg, hx), (hx,), _meta(gh_t))
            return tuple(got.stride())

    return on_fresh_thread(grad)


def _strided(shape, strides: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(shape), strides, dtype=like.dtype, device=like.device)


# --- LSTM --------------------------------------------------------------------------------------------


def _lstm_forward(a: dict) -> tuple:
    ig_t, hg_t, cx_t = a["input_gates"], a["hidden_gates"], a["cx"]
    b1_t, b2_t = a["input_bias"], a["hidden_bias"]
    H = _check_cell("_thnn_fused_lstm_cell", ig_t, hg_t, b1_t, b2_t, 4, cx_t)
    if _composite(ig_t, "_thnn_fused_lstm_cell"):
        return _lstm_forward_composite(ig_t, hg_t, cx_t, b1_t, b2_t)
    B = ig_t.size(0)
    hy_strides, cy_strides = _lstm_layouts(_key(ig_t), _key(hg_t), _key(cx_t))
    workspace, hy_t, cy_t = _empty((B, 4 * H), ig_t), _strided((B, H), hy_strides, cx_t), _strided((B, H), cy_strides,
                                                                                                  cx_t)
    if B == 0 or H == 0:
        return hy_t, cy_t, workspace
    dtype = numpy_dtype(ig_t.dtype)
    ig, hg, cx = hbm(ig_t), hbm(hg_t), hbm(cx_t)
    b1 = hbm(b1_t) if b1_t is not None else None
    b2 = hbm(b2_t) if b2_t is not None else None
    ws, hy, cy = hbm(workspace), hbm(hy_t), hbm(cy_t)
    cols, row_blocks = _blocks(B, H)
    with launch("lstm_cell_fwd", ig_t.device.index) as nc:
        for c0, c1 in cols:
            chunk = nc.mark()
            rows = min(B, P)
            bias1 = _bias_rows(nc, b1, rows, 4, H, c0, c1)
            bias2 = _bias_rows(nc, b2, rows, 4, H, c0, c1)
            for r0, r1 in row_blocks:
                p = r1 - r0
                block = nc.mark()
                gates = []
                for k, func in enumerate(LSTM_ACTIVATIONS):
                    lo, hi = k * H + c0, k * H + c1
                    s = _gate_sum(nc, _load(nc, ig[r0:r1, lo:hi]), _load(nc, hg[r0:r1, lo:hi]), bias1[k], bias2[k], p)
                    act = nc.sbuf_tile(s.shape, FP32)
                    nc.scalar.activation(act, s, func)
                    _store(nc, ws[r0:r1, lo:hi], act, dtype)
                    gates.append(act)
                i, f, g, o = gates
                c_prev = _load(nc, cx[r0:r1, c0:c1])
                c_new = _mul(nc, f, c_prev)
                nc.vector.tensor_tensor(c_new, c_new, _mul(nc, i, g), "add", dtype=FP32)
                _store(nc, cy[r0:r1, c0:c1], c_new, dtype)
                t = nc.sbuf_tile(c_new.shape, FP32)
                nc.scalar.activation(t, c_new, "tanh")
                _store(nc, hy[r0:r1, c0:c1], _mul(nc, o, t), dtype)
                nc.release_to(block)
            nc.release_to(chunk)
    return hy_t, cy_t, workspace


def _lstm_backward(a: dict) -> tuple:
    gh_t, gc_t, cx_t, cy_t, ws_t, has_bias = (a["grad_hy"], a["grad_cy"], a["cx"], a["cy"], a["workspace"],
                                              bool(a["has_bias"]))
    if gh_t is None and gc_t is None:
        return None, None, None
    op = "_thnn_fused_lstm_cell_backward_impl"
    defined = gh_t if gh_t is not None else gc_t
    _check(defined.dim() == 2, op, f"Expected 2-dimensional tensor, but got {defined.dim()}-dimensional tensor for "
           "the output gradient")
    size = tuple(defined.shape)
    for name, t in (("grad_hy", gh_t), ("grad_cy", gc_t), ("cx", cx_t), ("cy", cy_t)):
        _check(t is None or tuple(t.shape) == size, op, f"{name} must be {list(size)}, got {list(t.shape)}"
               if t is not None else "")
    B, H = size
    _check(ws_t.dim() == 2 and tuple(ws_t.shape) == (B, 4 * H), op, f"workspace must be [{B}, {4 * H}], got "
           f"{list(ws_t.shape)}")
    tensors = [t for t in (gh_t, gc_t, cx_t, cy_t, ws_t) if t is not None]
    _check(all(t.dtype == ws_t.dtype for t in tensors), op, "expected all inputs to have the same dtype")
    if _composite(ws_t, op):
        return _lstm_backward_composite(gh_t, gc_t, cx_t, cy_t, ws_t, has_bias)
    grad_gates = _empty((B, 4 * H), ws_t)
    grad_cx_t = _strided((B, H), _lstm_grad_cx_layout((B, 4 * H), _key(gh_t), _key(gc_t), _key(cx_t)), cx_t)
    grad_bias = _empty((4 * H,), ws_t) if has_bias else None
    if B == 0 or H == 0:
        _zero_fill([grad_bias])
        return grad_gates, grad_cx_t, grad_bias
    dtype = numpy_dtype(ws_t.dtype)
    gh = hbm(gh_t) if gh_t is not None else None
    gc = hbm(gc_t) if gc_t is not None else None
    cx, cy, ws = hbm(cx_t), hbm(cy_t), hbm(ws_t)
    gg, gcx = hbm(grad_gates), hbm(grad_cx_t)
    gb = hbm(grad_bias) if grad_bias is not None else None
    cols, row_blocks = _blocks(B, H)
    with launch("lstm_cell_bwd", ws_t.device.index) as nc:
        for c0, c1 in cols:
            chunk = nc.mark()
            w = c1 - c0
            sums = _BiasSums(nc, 4, w, dtype) if has_bias else None
            for r0, r1 in row_blocks:
                p = r1 - r0
                block = nc.mark()
                i, f, g, o = (_load(nc, ws[r0:r1, k * H + c0:k * H + c1]) for k in range(4))
                c_prev = _load(nc, cx[r0:r1, c0:c1])
                t = nc.sbuf_tile((p, w), FP32)
                nc.scalar.activation(t, _load(nc, cy[r0:r1, c0:c1]), "tanh")
                if gh is not None:
                    go = _load(nc, gh[r0:r1, c0:c1])
                    d_o = _mul(nc, go, t)
                    dc = _mul(nc, go, o)
                    nc.vector.tensor_tensor(dc, dc, _one_minus(nc, _mul(nc, t, t)), "multiply", dtype=FP32)
                else:  # no gradient reaches hy: it counts as zeros
                    d_o = nc.sbuf_tile((p, w), FP32)
                    nc.vector.memset(d_o, 0.0)
                    dc = nc.sbuf_tile((p, w), FP32)
                    nc.vector.memset(dc, 0.0)
                if gc is not None:
                    nc.vector.tensor_tensor(dc, dc, _load(nc, gc[r0:r1, c0:c1]), "add", dtype=FP32)
                else:
                    nc.vector.tensor_scalar(dc, dc, "add", 0.0, dtype=FP32)
                d_i = _mul(nc, dc, g)
                d_f = _mul(nc, dc, c_prev)
                d_g = _mul(nc, dc, i)
                _store(nc, gcx[r0:r1, c0:c1], _mul(nc, dc, f), dtype)
                for d, gate in ((d_i, i), (d_f, f), (d_o, o)):  # d * (1 - s) * s: sigmoid's derivative
                    nc.vector.tensor_tensor(d, d, _one_minus(nc, gate), "multiply", dtype=FP32)
                    nc.vector.tensor_tensor(d, d, gate, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(d_g, d_g, _one_minus(nc, _mul(nc, g, g)), "multiply", dtype=FP32)
                for k, d in enumerate((d_i, d_f, d_g, d_o)):
                    low = _store(nc, gg[r0:r1, k * H + c0:k * H + c1], d, dtype)
                    if sums is not None:
                        sums.add(k, low, p)
                nc.release_to(block)
            if sums is not None:
                for k in range(4):
                    sums.store(k, [gb[None, k * H + c0:k * H + c1]], dtype)
            nc.release_to(chunk)
    return grad_gates, grad_cx_t, grad_bias


# --- GRU ---------------------------------------------------------------------------------------------


def _gru_forward(a: dict) -> tuple:
    ig_t, hg_t, hx_t = a["input_gates"], a["hidden_gates"], a["hx"]
    b1_t, b2_t = a["input_bias"], a["hidden_bias"]
    H = _check_cell("_thnn_fused_gru_cell", ig_t, hg_t, b1_t, b2_t, 3, hx_t)
    if _composite(ig_t, "_thnn_fused_gru_cell"):
        return _gru_forward_composite(ig_t, hg_t, hx_t, b1_t, b2_t)
    B = ig_t.size(0)
    hy_t, workspace = _strided((B, H), _gru_layout(_key(ig_t), _key(hg_t), _key(hx_t)), hx_t), _empty((B, 5 * H), hx_t)
    if B == 0 or H == 0:
        return hy_t, workspace
    dtype = numpy_dtype(ig_t.dtype)
    ig, hg, hx = hbm(ig_t), hbm(hg_t), hbm(hx_t)
    b1 = hbm(b1_t) if b1_t is not None else None
    b2 = hbm(b2_t) if b2_t is not None else None
    ws, hy = hbm(workspace), hbm(hy_t)
    cols, row_blocks = _blocks(B, H)
    with launch("gru_cell_fwd", ig_t.device.index) as nc:
        for c0, c1 in cols:
            chunk = nc.mark()
            rows = min(B, P)
            bias1 = _bias_rows(nc, b1, rows, 3, H, c0, c1)
            bias2 = _bias_rows(nc, b2, rows, 3, H, c0, c1)
            for r0, r1 in row_blocks:
                p = r1 - r0
                block = nc.mark()

                def cols_of(k, c0=c0, c1=c1):
                    return slice(k * H + c0, k * H + c1)

                gates = []
                for k in range(2):  # r, z
                    s = _gate_sum(nc, _load(nc, ig[r0:r1, cols_of(k)]), _load(nc, hg[r0:r1, cols_of(k)]),
                                  bias1[k], bias2[k], p)
                    act = nc.sbuf_tile(s.shape, FP32)
                    nc.scalar.activation(act, s, "sigmoid")
                    _store(nc, ws[r0:r1, cols_of(k)], act, dtype)
                    gates.append(act)
                r, z = gates
                hn = nc.sbuf_tile((p, c1 - c0), FP32)  # hn' = hn + b_hn
                if bias2[2] is not None:
                    nc.vector.tensor_tensor(hn, _load(nc, hg[r0:r1, cols_of(2)]), bias2[2][:p], "add", dtype=FP32)
                else:
                    nc.vector.tensor_copy(hn, _load(nc, hg[r0:r1, cols_of(2)]))
                _store(nc, ws[r0:r1, cols_of(4)], hn, dtype)
                pre = nc.sbuf_tile((p, c1 - c0), FP32)  # in + b_in + r * hn'
                if bias1[2] is not None:
                    nc.vector.tensor_tensor(pre, _load(nc, ig[r0:r1, cols_of(2)]), bias1[2][:p], "add", dtype=FP32)
                else:
                    nc.vector.tensor_copy(pre, _load(nc, ig[r0:r1, cols_of(2)]))
                nc.vector.tensor_tensor(pre, pre, _mul(nc, r, hn), "add", dtype=FP32)
                n = nc.sbuf_tile(pre.shape, FP32)
                nc.scalar.activation(n, pre, "tanh")
                _store(nc, ws[r0:r1, cols_of(2)], n, dtype)
                h_prev = _load(nc, hx[r0:r1, c0:c1])
                nc.dma.store(ws[r0:r1, cols_of(3)], h_prev)  # hx as given
                d = nc.sbuf_tile(n.shape, FP32)
                nc.vector.tensor_tensor(d, h_prev, n, "subtract", dtype=FP32)
                nc.vector.tensor_tensor(d, z, d, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(d, n, d, "add", dtype=FP32)
                _store(nc, hy[r0:r1, c0:c1], d, dtype)
                nc.release_to(block)
            nc.release_to(chunk)
    return hy_t, workspace


def _gru_backward(a: dict) -> tuple:
    gh_t, ws_t, has_bias = a["grad_hy"], a["workspace"], bool(a["has_bias"])
    op = "_thnn_fused_gru_cell_backward"
    _check(gh_t.dim() == 2, op, f"Expected 2-dimensional tensor, but got {gh_t.dim()}-dimensional tensor for "
           "argument #1 'grad_hy'")
    B, H = gh_t.shape
    _check(tuple(ws_t.shape) == (B, 5 * H), op, f"workspace must be [{B}, {5 * H}], got {list(ws_t.shape)}")
    _check(ws_t.dtype == gh_t.dtype, op, "expected grad_hy and workspace to have the same dtype")
    if _composite(ws_t, op):
        return _gru_backward_composite(gh_t, ws_t, has_bias)
    grad_ig, grad_hg = _empty((B, 3 * H), ws_t), _empty((B, 3 * H), ws_t)
    grad_hx_t = _strided((B, H), _gru_grad_hx_layout((B, 3 * H), _key(gh_t)), gh_t)
    grad_ib = _empty((3 * H,), ws_t) if has_bias else None
    grad_hb = _empty((3 * H,), ws_t) if has_bias else None
    if B == 0 or H == 0:
        _zero_fill([grad_ib, grad_hb])
        return grad_ig, grad_hg, grad_hx_t, grad_ib, grad_hb
    dtype = numpy_dtype(ws_t.dtype)
    gh, ws = hbm(gh_t), hbm(ws_t)
    gi, ghg, ghx = hbm(grad_ig), hbm(grad_hg), hbm(grad_hx_t)
    cols, row_blocks = _blocks(B, H)
    with launch("gru_cell_bwd", ws_t.device.index) as nc:
        for c0, c1 in cols:
            chunk = nc.mark()
            w = c1 - c0
            sums = _BiasSums(nc, 4, w, dtype) if has_bias else None  # d_r, d_z, d_in, d_hn
            for r0, r1 in row_blocks:
                p = r1 - r0
                block = nc.mark()
                r, z, n, h_prev, hn = (_load(nc, ws[r0:r1, k * H + c0:k * H + c1]) for k in range(5))
                go = _load(nc, gh[r0:r1, c0:c1])
                one_minus_z = _one_minus(nc, z)
                d_z = nc.sbuf_tile((p, w), FP32)
                nc.vector.tensor_tensor(d_z, h_prev, n, "subtract", dtype=FP32)
                nc.vector.tensor_tensor(d_z, go, d_z, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(d_z, d_z, one_minus_z, "multiply", dtype=FP32)
                nc.vector.tensor_tensor(d_z, d_z, z, "multiply", dtype=FP32)
                _store(nc, ghx[r0:r1, c0:c1], _mul(nc, go, z), dtype)
                d_in = _mul(nc, go, one_minus_z)
                nc.vector.tensor_tensor(d_in, d_in, _one_minus(nc, _mul(nc, n, n)), "multiply", dtype=FP32)
                d_hn = _mul(nc, d_in, r)
                d_r = _mul(nc, d_in, hn)
                nc.vector.tensor_tensor(d_r, d_r, _one_minus(nc, r), "multiply", dtype=FP32)
                nc.vector.tensor_tensor(d_r, d_r, r, "multiply", dtype=FP32)
                outputs = ((d_r, (gi, ghg), 0), (d_z, (gi, ghg), 1), (d_in, (gi,), 2), (d_hn, (ghg,), 2))
                for k, (d, dsts, gate) in enumerate(outputs):
                    low = _rounded(nc, d, dtype)
                    for dst in dsts:
                        nc.dma.store(dst[r0:r1, gate * H + c0:gate * H + c1], low)
                    if sums is not None:
                        sums.add(k, low, p)
                nc.release_to(block)
            if sums is not None:
                ib, hb = hbm(grad_ib)[None], hbm(grad_hb)[None]
                sums.store(0, [ib[:, c0:c1], hb[:, c0:c1]], dtype)
                sums.store(1, [ib[:, H + c0:H + c1], hb[:, H + c0:H + c1]], dtype)
                sums.store(2, [ib[:, 2 * H + c0:2 * H + c1]], dtype)
                sums.store(3, [hb[:, 2 * H + c0:2 * H + c1]], dtype)
            nc.release_to(chunk)
    return grad_ig, grad_hg, grad_hx_t, grad_ib, grad_hb


# --- float64: the same formulas as device ops (each takes its counted CPU fallback) --------------------


def _lstm_forward_composite(ig, hg, cx, b1, b2):
    gates = ig + hg
    if b1 is not None:
        gates = gates + b1 + b2
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    return (o * cy.tanh()).contiguous(), cy.contiguous(), torch.cat([i, f, g, o], 1)


def _lstm_backward_composite(gh, gc, cx, cy, ws, has_bias):
    i, f, g, o = ws.chunk(4, 1)
    t = cy.tanh()
    gh = torch.zeros_like(cx) if gh is None else gh
    gc = torch.zeros_like(cx) if gc is None else gc
    d_o = gh * t
    dc = gh * o * (1 - t * t) + gc
    d_i = dc * g * (1 - i) * i
    d_f = dc * cx * (1 - f) * f
    d_g = dc * i * (1 - g * g)
    d_o = d_o * (1 - o) * o
    grad_gates = torch.cat([d_i, d_f, d_g, d_o], 1)
    return grad_gates, (dc * f).contiguous(), grad_gates.sum(0) if has_bias else None


def _gru_forward_composite(ig, hg, hx, b1, b2):
    ir, iz, i_n = ig.chunk(3, 1)
    hr, hz, h_n = hg.chunk(3, 1)
    if b1 is not None:
        b1r, b1z, b1n = b1.chunk(3)
        b2r, b2z, b2n = b2.chunk(3)
        r, z = (ir + hr + b1r + b2r).sigmoid(), (iz + hz + b1z + b2z).sigmoid()
        hn, pre = h_n + b2n, i_n + b1n
    else:
        r, z, hn, pre = (ir + hr).sigmoid(), (iz + hz).sigmoid(), h_n, i_n
    n = (pre + r * hn).tanh()
    return (n + z * (hx - n)).contiguous(), torch.cat([r, z, n, hx, hn], 1)


def _gru_backward_composite(gh, ws, has_bias):
    r, z, n, hx, hn = ws.chunk(5, 1)
    d_z = gh * (hx - n) * (1 - z) * z
    d_in = gh * (1 - z) * (1 - n * n)
    d_r = d_in * hn * (1 - r) * r
    d_hn = d_in * r
    gi, ghg = torch.cat([d_r, d_z, d_in], 1), torch.cat([d_r, d_z, d_hn], 1)
    return (gi, ghg, (gh * z).contiguous(), gi.sum(0) if has_bias else None, ghg.sum(0) if has_bias else None)


# --- registration ------------------------------------------------------------------------------------


def _bound(fn, op: str):
    binder = Binder.of(resolve(op))

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return fn(binder.bind(args, kwargs))

    kernel.__name__ = fn.__name__
    kernel.__module__ = __name__
    return kernel


# dtypes=None: float64 cells have no CPU kernel to fall back to; the kernels serve it with the composite.
for _op, _fn in ((LSTM_FORWARD, _lstm_forward), (LSTM_BACKWARD, _lstm_backward), (GRU_FORWARD, _gru_forward),
                 (GRU_BACKWARD, _gru_backward)):
    TABLE.native(_op, dtypes=None)(_bound(_fn, _op))
