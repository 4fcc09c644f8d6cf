"""Fused scaled-dot-product attention: ``_scaled_dot_product_fused_attention_overrideable`` and its backward.

PyTorch's scaled_dot_product_attention asks the device which backend to use (csrc/attention.cpp
answers OVERRIDEABLE for what these kernels serve) and calls the overrideable op, a PrivateUse1
backend's own fused attention. Both kernels are flash-style (FlashAttention-2's schedule): the
scores of a block of queries against a block of keys live in PSUM/SBUF only, never in HBM.

Forward, per (batch, head, block of <= 128 queries):

* Q^T chunks (head dim on partitions) are made once by TensorE transposes; each block of <= 128
  keys is loaded, transposed, and ``S = Q K^T`` accumulates over head-dim chunks in one PSUM bank;
  a key block's K^T chunks and V tiles are made once per (batch, key/value head) and read by every
  query block of the query heads sharing that head (``_KeyValues``, within an SBUF budget);
* ScalarE evacuates S * scale; the float mask is added (VectorE), a bool mask selects -inf (VectorE),
  ``is_causal`` (top-left aligned, as PyTorch's ``tril``; key blocks wholly above the diagonal are
  skipped) is GpSimd's ``affine_select`` of -inf where key > query (no mask tile);
* the online softmax: a running row max m and row sum l; ``P = exp(S - m_new)`` on ScalarE with
  the row sum accumulated in the same pass; the output accumulator and l are rescaled by
  ``exp(m_old - m_new)``; dropout keeps ``P`` where a counter-based uniform (the core's generator,
  GpSimd's Philox) is below 1 - p and scales by 1 / (1 - p); ``P V`` accumulates on TensorE (P in
  the inputs' dtype, as flash kernels feed the matmul);
* O = acc / l and logsumexp = m + log(l) (fp32) are stored. A row whose keys are all masked has
  l = 0 and gives 0 (PyTorch's math path uses _safe_softmax: 0 there too);
* ``PIPELINE`` query blocks are in flight at once, their stages interleaved, so TensorE, VectorE and
  ScalarE (each in order) work on different blocks instead of waiting on one block's chain. The stages
  are cut where a block's next instruction on an engine waits on another engine: Q^T's transposes; the
  first key block's shared K^T transposes (after every block's Q^T); scores; softmax; P^T's transpose;
  P V. A stage holding both P^T's transpose and the P V product that reads it made TensorE wait on each
  block's evacuation in turn (the compiled decoder block's attention: 12.9 -> 10.9 us); PSUM tiles are freed
  as soon as they are evacuated, so the blocks in flight hold only what they still read.

Backward, per (batch, key/value head, block of keys), over the query heads sharing it (GQA) and
their query blocks: P is recomputed from logsumexp, ``dV += P_d^T dO``, ``dP = dO V^T`` (then the
dropout mask again), ``dS = P (dP - D)`` with ``D = rowsum(dO * O)`` (computed first), ``dK +=
scale dS^T Q`` in SBUF and ``dQ += scale dS K`` accumulated in an fp32 HBM buffer (flash-2's atomic
adds, done as load-add-store), cast to the query's dtype at the end. A bias that needs a gradient
gets dS, summed to its shape.

A compiled program's attention step runs this tile program when its schedule is recorded, and
``forward_wide`` (the same arithmetic over every head at once) on the static replay's fast path.

numpy reference: ``softmax(q @ k^T * scale + mask) @ v`` in fp32 (tests/test_sdpa.py compares with
CPU's SDPA). The dropout mask is this device's own stream: ``return_debug_mask=True`` returns it
(1 kept, 0 dropped) so a reference can use the same mask.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import numpy as np
import torch

from device_impl.dispatch.table import TABLE, resolve
from device_impl.engine import launch
from device_impl.engine.core import release_live_to
from device_impl.engine.dtypes import FLOAT_DTYPES, FP32
from device_impl.kernels import cpu_host
from device_impl.kernels.common import hbm, scalar_of
from device_impl.kernels.contiguous import fp32_contiguous
from device_impl.kernels.matmul import psum_to_sbuf
from device_impl.kernels.registry import Binder
from device_impl.runtime.random import reserve

Q_TILE = 128  # queries per block: the partitions of S
K_TILE = 128  # keys per block: transposed on TensorE (<= 128) and the contraction of P V
E_TILE = 128  # head-dim chunk: the contraction of Q K^T
N_TILE = 512  # output columns per PSUM bank (fp32)
PIPELINE = 8  # query blocks in flight in the forward (forward_program): a decoder's 2 x 4 heads of 128 queries all at
# once (with 2 the engines idled between two blocks' chains: 13.3 -> 12.6 us of the compiled decoder block's attention)
FLT_MAX = float(np.finfo(np.float32).max)
BOOL = np.dtype(np.bool_)

FORWARD = "aten::_scaled_dot_product_fused_attention_overrideable"
BACKWARD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"


class _Problem:
    """Shapes, 4-D HBM views and options of one attention call.

    Built from HBM arrays (not tensors) so the eager kernels and the compiler's attention step
    (compiler/steps.py) describe a call the same way and run the same tile programs
    (``forward_program``, ``backward_program``); ``_problem`` checks torch arguments first."""

    def __init__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, dropout_p: float,
                 is_causal: bool, scale: float | None, three_d: bool = False):
        self.three_d = three_d
        self.q, self.k, self.v = (self._four(a) for a in (q, k, v))
        self.B, self.Hq, self.L, self.E = self.q.shape
        _, self.Hk, self.S, _ = self.k.shape
        self.Ev = self.v.shape[-1]
        if self.k.shape[0] != self.B or self.v.shape[:3] != self.k.shape[:3] or self.k.shape[-1] != self.E:
            raise RuntimeError(f"neuron fused attention: incompatible shapes query {tuple(q.shape)}, key "
                               f"{tuple(k.shape)}, value {tuple(v.shape)}")
        if self.Hk == 0 or self.Hq % self.Hk:
            raise RuntimeError(f"number of heads in key/value ({self.Hk}) must divide the number of heads in query "
                               f"({self.Hq}); pass enable_gqa=True to scaled_dot_product_attention for grouped "
                               "query attention")
        self.group = self.Hq // self.Hk
        self.dtype = q.dtype
        self.scale = 1.0 / math.sqrt(self.E) if scale is None else float(scale)
        self.causal = bool(is_causal)
        self.dropout = float(dropout_p)
        if not 0.0 <= self.dropout <= 1.0:
            raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {self.dropout}")
        self.mask = None
        self.mask_kind = None
        if mask is not None:
            try:
                self.mask = np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape),
                                            (self.B, self.Hq, self.L, self.S))
            except ValueError:
                raise RuntimeError(f"attn_mask of shape {tuple(mask.shape)} cannot be broadcast to the attention "
                                   f"weights' shape {(self.B, self.Hq, self.L, self.S)}") from None
            self.mask_kind = "bool" if mask.dtype == BOOL else "float"
        self.n_q = -(-self.L // Q_TILE)
        self.n_k = -(-self.S // K_TILE)
        # CPU's flash forward (where CPU runs it for this call: ``_forward`` sets these): its row max skips a NaN
        # among the sequence's last ``flash_tail`` keys (its scalar tail), and a row whose max stays -inf (never
        # started) has probabilities 0, output 0 * V and logsumexp 0 (``flash_lse``); see ``_row_max``
        self.flash_tail = 0
        self.flash_lse = False

    def _four(self, a: np.ndarray) -> np.ndarray:
        return a[None] if self.three_d else a

    def batches(self, b0: int, b1: int) -> "_Problem":
        """The same call restricted to batches [b0, b1) (views, nothing copied): batches share nothing, so a
        wide forward over a part computes that part's values as over the whole (compiler/workers.py)."""
        part = copy.copy(self)
        part.q, part.k, part.v = self.q[b0:b1], self.k[b0:b1], self.v[b0:b1]
        part.mask = None if self.mask is None else self.mask[b0:b1]
        part.B = b1 - b0
        return part

    def heads(self):
        for b in range(self.B):
            for h in range(self.Hq):
                yield b, h, h // self.group

    def key_blocks(self, l0: int, l1: int):
        """(index, s0, s1) of the key blocks a query block [l0, l1) attends to (causal: none above the diagonal)."""
        for j in range(self.n_k):
            s0 = j * K_TILE
            if self.causal and s0 > l1 - 1:
                return
            yield j, s0, min(s0 + K_TILE, self.S)

    def counter(self, b: int, h: int, i: int, j: int) -> int:
        """Offset (in draws) of block (b, h, i, j)'s dropout uniforms: forward and backward draw the same."""
        return (((b * self.Hq + h) * self.n_q + i) * self.n_k + j) * Q_TILE * K_TILE

    @property
    def draws(self) -> int:
        return self.B * self.Hq * self.n_q * self.n_k * Q_TILE * K_TILE


def _problem(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, bias: torch.Tensor | None,
             dropout_p: float, is_causal: bool, scale: float | None) -> _Problem:
    """PyTorch's argument checks of the fused op (ranks, dtypes, mask dtype), then the call as arrays."""
    if query.dim() not in (3, 4) or key.dim() != query.dim() or value.dim() != query.dim():
        raise RuntimeError(f"neuron fused attention expects 3-D or 4-D query, key and value of one rank; got "
                           f"{query.dim()}-D, {key.dim()}-D, {value.dim()}-D. Call "
                           "torch.nn.functional.scaled_dot_product_attention, which reshapes other ranks.")
    if not (query.dtype == key.dtype == value.dtype):
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{query.dtype} key.dtype: {key.dtype} and value.dtype: {value.dtype} instead.")
    if query.dtype not in FLOAT_DTYPES:
        raise NotImplementedError(f"neuron fused attention computes on float32, bfloat16 and float16, not "
                                  f"{query.dtype}; call torch.nn.functional.scaled_dot_product_attention, "
                                  "which takes the math path for other dtypes.")
    if bias is not None and bias.dtype != torch.bool and bias.dtype != query.dtype:
        raise RuntimeError(f"Expected attn_mask dtype to be bool or {query.dtype} and to match query dtype, "
                           f"but got attn_mask.dtype: {bias.dtype}")
    return _Problem(hbm(query), hbm(key), hbm(value), None if bias is None else hbm(bias), dropout_p, is_causal,
                    scale, three_d=query.dim() == 3)


# --- building blocks -----------------------------------------------------------------------------


def _load(nc, src: np.ndarray, dtype=None):
    tile = nc.sbuf_tile(src.shape, src.dtype if dtype is None else dtype)
    nc.dma.load(tile, src)
    return tile


def _transposed(nc, tile, dtype, evacuate: str = "vector") -> list:
    """[P, F] in SBUF -> chunks [f <= 128, P] in SBUF (TensorE transposes through PSUM), one per 128 columns.
    ``evacuate``: the engine that copies PSUM to SBUF (ScalarE's identity activation with scale 1 and no
    bias rounds as VectorE's copy does: the same bits), so a kernel can balance VectorE and ScalarE."""
    chunks = []
    for c0 in range(0, tile.free, E_TILE):
        c1 = min(c0 + E_TILE, tile.free)
        acc = nc.psum_tile((c1 - c0, tile.partitions), FP32)
        nc.tensor.transpose(acc, tile[:, c0:c1])
        out = nc.sbuf_tile((c1 - c0, tile.partitions), dtype)
        if evacuate == "either":
            _evacuate(nc, out, acc)
        elif evacuate == "scalar":
            nc.scalar.activation(out, acc, "identity")
        else:
            nc.vector.tensor_copy(out, acc)
        nc.release(acc)  # evacuated: its PSUM bytes serve the next transpose or product (blocks in flight hold
        # only what they still read)
        chunks.append(out)
    return chunks


def _evacuate(nc, out, acc, scale: float = 1.0) -> None:
    """out = scale * acc out of PSUM on whichever of ScalarE and VectorE would finish it first, as a compiler's
    scheduler places an evacuation (``matmul.psum_to_sbuf``, the products' own): the same bits either way (an
    fp32 multiply by the fp32 scale, rounded once to out's dtype; ScalarE's identity activation computes
    exactly that)."""
    psum_to_sbuf(nc, out, acc, scale)


def _per_row(nc, out, a, op: str, scalar, op1: str | None = None, scalar1=None) -> None:
    """tensor_scalar over a [P, 1] per-row value (the softmax's -max, the safe row sum) on whichever of VectorE and
    GpSimd would finish it first (NKI's tensor_scalar may be issued to either; the same arithmetic, the same
    bits), each engine's cost rule from when ``a`` is ready and the engine is next free: VectorE carries the
    softmax's full-tile passes, GpSimd only the causal blocks' ``affine_select``."""
    p, free_at = nc.vector.platform, nc.timeline.free
    ready = a.root.ready
    vector = max(ready, free_at["vector"]) + (p.instruction_overhead_cycles + a.free) / p.vector_hz * 1e9
    gpsimd = max(ready, free_at["gpsimd"]) + (p.instruction_overhead_cycles + math.ceil(
        2 * a.data.size / p.gpsimd_elements_per_cycle)) / p.gpsimd_hz * 1e9
    engine = nc.gpsimd if nc.choose(lambda: gpsimd < vector) else nc.vector
    engine.tensor_scalar(out, a, op, scalar, op1=op1, scalar1=scalar1)


def _scores(nc, pb: _Problem, qT: list, kT: list, b: int, h: int, l0: int, l1: int, s0: int, s1: int, consts,
            on_scalar: bool = False):
    """S = (Q K^T) * scale (+ mask, causal) for one block, fp32 in SBUF. ``on_scalar``: evacuated by ScalarE (its
    identity activation with the scale: the bits VectorE's multiply gives), else by whichever finishes first."""
    lq, sk = l1 - l0, s1 - s0
    acc = nc.psum_tile((lq, sk), FP32)
    for c, (qc, kc) in enumerate(zip(qT, kT)):
        nc.tensor.matmul(acc, qc, kc, accumulate=c > 0)
    s = nc.sbuf_tile((lq, sk), FP32)
    if on_scalar:
        nc.scalar.activation(s, acc, "identity", scale=float(pb.scale))
    else:
        _evacuate(nc, s, acc, pb.scale)
    nc.release(acc)
    if pb.mask_kind == "float":
        m = _load(nc, pb.mask[b, h, l0:l1, s0:s1])
        nc.vector.tensor_tensor(s, s, m, "add", dtype=FP32)
    elif pb.mask_kind == "bool":
        m = _load(nc, pb.mask[b, h, l0:l1, s0:s1])
        nc.vector.select(s, m, s, consts["neg_inf"][:lq, :sk])
    if pb.causal and s1 - 1 > l0:  # the block crosses the diagonal: keep key j <= query i, i.e.
        # (l0 + p) - (s0 + f) >= 0, an affine function of the position: GpSimd applies it (no mask tile, no VectorE
        # pass; VectorE carries the online softmax)
        nc.gpsimd.affine_select(s, s, -np.inf, base=l0 - s0, partition_step=1, free_step=-1)
    return s


def _row_max(nc, pb: _Problem, out, s, s1: int) -> int:
    """out [lq, 1] = the row max of score block ``s`` (keys up to ``s1``); returns how many of its last keys are
    CPU's flash tail (``pb.flash_tail`` in the sequence's last block, else 0).

    VectorE's max keeps a NaN. CPU's flash forward takes its vector part's max so, but its scalar tail's with
    ``std::max``, which skips a NaN: so the tail's max is taken of ``fmax(tail, -inf)`` (NaN -> -inf) and joined
    with the rest's by a max that keeps the rest's NaN. A NaN tail score of a started row still gives NaN
    probabilities (exp(NaN - m)), as CPU's."""
    t = pb.flash_tail if s1 == pb.S else 0
    if not t:
        nc.vector.tensor_reduce(out, s, "maximum")
        return 0
    lq, sk = s.partitions, s.free
    tail = nc.sbuf_tile((lq, t), FP32)
    nc.vector.tensor_scalar(tail, s[:, sk - t:], "fmax", -np.inf)
    if sk == t:
        nc.vector.tensor_reduce(out, tail, "maximum")
        return t
    tail_max = nc.sbuf_tile((lq, 1), FP32)
    nc.vector.tensor_reduce(tail_max, tail, "maximum")
    nc.vector.tensor_reduce(out, s[:, :sk - t], "maximum")
    nc.vector.tensor_tensor(out, out, tail_max, "maximum")
    return t


def _started(nc, m) -> Any:
    """[lq, 1] 1.0 where the row max ``m`` is not -inf (CPU's flash started the row; NaN counts as started, as
    CPU's ``max == -inf`` test reads it), else 0.0."""
    started = nc.sbuf_tile((m.partitions, 1), FP32)
    nc.vector.tensor_scalar(started, m, "not_equal", -np.inf, dtype=FP32)
    return started


def _dropout_keep(nc, pb: _Problem, seed: int, offset: int, lq: int, sk: int, b: int, h: int, i: int, j: int):
    """1.0 where the block's element is kept, 0.0 where dropped (fp32 [lq, sk])."""
    u = nc.sbuf_tile((Q_TILE, K_TILE), FP32)
    nc.gpsimd.random(u, seed, offset + pb.counter(b, h, i, j), "uniform")
    keep = nc.sbuf_tile((lq, sk), FP32)
    nc.vector.tensor_scalar(keep, u[:lq, :sk], "less", 1.0 - pb.dropout, dtype=FP32)
    return keep


def _constants(nc, pb: _Problem) -> dict:
    """Tiles every block reads, made once per launch: -inf (a bool mask selects it; only then is it made); 0.0
    (CPU's flash rule selects it for rows never started: ``_started``)."""
    consts = {}
    if pb.flash_tail or pb.flash_lse:
        zero = nc.sbuf_tile((Q_TILE, max(pb.flash_tail, 1)), FP32, "zero")
        nc.vector.memset(zero, 0.0)
        consts["zero"] = zero
    if pb.mask_kind == "bool":
        neg_inf = nc.sbuf_tile((Q_TILE, K_TILE), FP32, "neg_inf")
        nc.vector.memset(neg_inf, -np.inf)
        consts["neg_inf"] = neg_inf
    return consts


def _empty_like_layout(t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``shape`` whose dimensions are ordered in memory as ``t``'s (alloc_with_matching_layout)."""
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))
    raw = torch.empty([shape[d] for d in order], dtype=dtype, device=t.device)
    return raw.permute([order.index(d) for d in range(t.dim())])


def _cpu_laid(shape: tuple[int, ...], strides: tuple[int, ...] | None, dtype: torch.dtype,
              like: torch.Tensor) -> torch.Tensor | None:
    """A tensor of ``shape`` with CPU's dense ``strides`` (``cpu_host.sdpa_layouts``), or None where it gave none
    (the caller keeps its own layout)."""
    if strides is None or len(strides) != len(shape):
        return None
    return torch.empty_strided(shape, strides, dtype=dtype, device=like.device)


def _host_long(value: int) -> torch.Tensor:
    """A 0-d int64 CPU tensor holding ``value`` (philox seed/offset, as CUDA's flash kernels return them)."""
    t = torch.empty((), dtype=torch.int64)
    hbm(t)[()] = value
    return t


# --- forward ---------------------------------------------------------------------------------------


class Handoff:
    """O's blocks left in SBUF for a product that reads O as its A = O.transpose(1, 2).reshape(B * L, H * Ev)
    (the compiler's o projection: ``compiler/build.py`` ``attention_handoffs``): each query block's heads write
    their outputs side by side into tiles of ``width`` columns (one tile per product K tile, or per head where a
    head spans several), allocated in ``pinned``, a scope the caller keeps and the product frees; ``pieces`` then
    holds them keyed as ``matmul_into``'s ``lhs_pieces`` ((k0, k1, m0, m1) -> [(0, rows, tile)]), so the product
    transposes them as they land instead of loading O back after its stores."""

    def __init__(self, pb: "_Problem") -> None:
        self.width = max(pb.Ev, E_TILE)  # columns of one tile: E_TILE % Ev == 0 or Ev % E_TILE == 0 (checked by build)
        self.per_tile = self.width // pb.Ev
        self.pinned: list = []
        self.pieces: dict[tuple[int, int, int, int], list] = {}
        self.tiles: dict[tuple[int, int, int], Any] = {}
        self.L, self.columns = pb.L, pb.Hq * pb.Ev

    def out_tile(self, nc, pb: "_Problem", b: int, h: int, l0: int, l1: int):
        """The [l1 - l0, Ev] SBUF tile head h's output of query rows [l0, l1) of batch b is computed into."""
        g = h // self.per_tile
        key = (b, l0, g)
        tile = self.tiles.get(key)
        if tile is None:
            c0 = g * self.width
            c1 = min(self.columns, c0 + self.width)
            with nc.stream(self.pinned):
                tile = self.tiles[key] = nc.sbuf_tile((l1 - l0, c1 - c0), pb.dtype)
            m0 = b * self.L + l0
            for k0 in range(c0, c1, E_TILE):
                k1 = min(c1, k0 + E_TILE)
                self.pieces[(k0, k1, m0, m0 + l1 - l0)] = [(0, l1 - l0, tile[:, k0 - c0:k1 - c0])]
        off = (h % self.per_tile) * pb.Ev
        return tile[:, off:off + pb.Ev]


def forward_program(nc, pb: _Problem, o4: np.ndarray, lse3: np.ndarray | None, seed: int = 0, offset: int = 0,
                    dm4: np.ndarray | None = None, hand: Handoff | None = None, given: dict | None = None) -> None:
    """The forward tile program (module docstring) on core ``nc``: O into ``o4`` [B, H, L, Ev] and logsumexp
    into ``lse3`` [B, H, L] (None: nothing reads it, a compiled inference graph's, and it is not computed);
    ``dm4`` takes the dropout mask when asked. The eager kernel runs it as its own
    launch, a compiled program as one of its steps.

    Query blocks are independent, and each engine runs its instructions in order: block after block,
    every engine would wait on the one block's chain (load, transpose, QK^T, softmax, transpose, PV).
    ``PIPELINE`` blocks are in flight at once, their stages interleaved (``_interleave``): one block's
    products run on TensorE while another's softmax runs on VectorE/ScalarE. The arithmetic per block is
    unchanged (the same instructions, in another order across blocks): the same bits. ``hand``: O's blocks
    are also left in SBUF for a later product (``Handoff``). ``given``: ("q" or "k", b, head, first row, end row) ->
    a tile in SBUF holding those rows of q or k (a compiled program's earlier step computed them there:
    compiler/build.py ``attention_inputs``), read in place of their load."""
    keep_scale = 0.0 if pb.dropout >= 1.0 else 1.0 / (1.0 - pb.dropout)
    consts = _constants(nc, pb)
    given = given or {}
    kv = _KeyValues(nc, pb, given)
    # with several query blocks in flight, every other block's scores are evacuated by ScalarE: VectorE, which
    # carries each block's softmax passes, would otherwise (each evacuation going where it finishes first, by a
    # hair) evacuate every in-flight block's scores before the first block's row max, engines running in order,
    # holding back the exps while ScalarE idles waiting for them (the compiled decoder block: 28.26 -> 28.11 us)
    units = [(b, h, hk, i) for b, h, hk in pb.heads() for i in range(pb.n_q)]
    alternate = min(PIPELINE, len(units)) > 2
    blocks = (_forward_block(nc, pb, consts, kv, b, h, hk, i, o4, lse3, seed, offset, dm4, keep_scale, hand, given,
                             alternate and n % 2 == 1)
              for n, (b, h, hk, i) in enumerate(units))
    _interleave(nc, blocks, PIPELINE)


class _KeyValues:
    """The K^T chunks and V tiles of one key block, made once per (batch, key/value head) and read by every query
    block of every query head sharing that head (GQA's group, and the query blocks of a long sequence): the
    loads, TensorE transposes and ScalarE evacuations of K happen once, not once per query block.

    Shared tiles live in a scope of their own per (batch, kv head), freed when the last query block using them
    ends; the query heads of a group and their blocks come one after another (``_Problem.heads``), so at most
    ``PIPELINE`` + 1 such scopes are live. Where a head's keys and values would take more than
    ``SHARED_BYTES`` of a partition, or nothing reads them twice, each block loads its own (``shared`` False)."""

    SHARED_BYTES = 32 * 1024

    def __init__(self, nc, pb: _Problem, given: dict | None = None):
        self.nc, self.pb = nc, pb
        self.given = given or {}  # key rows already in SBUF (``forward_program``'s ``given``)
        itemsize = np.dtype(pb.dtype).itemsize
        per_block = (-(-pb.E // E_TILE) * K_TILE + pb.Ev) * itemsize  # K^T chunks' and V's bytes per partition
        self.users_per_head = pb.group * pb.n_q
        self.shared = self.users_per_head > 1 and pb.n_k * per_block <= self.SHARED_BYTES
        self.heads: dict[tuple[int, int], tuple[list, dict, list]] = {}

    def block(self, b: int, hk: int, j: int, s0: int, s1: int) -> tuple[list, list]:
        """(K^T chunks, V tiles per N_TILE columns) of key block j of head (b, hk)."""
        if not self.shared:
            return self._make(b, hk, s0, s1)
        entry = self.heads.get((b, hk))
        if entry is None:
            entry = self.heads[(b, hk)] = ([], {}, [self.users_per_head])
        live, blocks, _ = entry
        made = blocks.get(j)
        if made is None:
            with self.nc.stream(live):
                made = blocks[j] = self._make(b, hk, s0, s1)
        return made

    def _make(self, b: int, hk: int, s0: int, s1: int) -> tuple[list, list]:
        nc, pb = self.nc, self.pb
        rows = self.given.get(("k", b, hk, s0, s1))
        kT = _transposed(nc, rows if rows is not None else _load(nc, pb.k[b, hk, s0:s1, :]), pb.dtype,
                         evacuate="either")
        vts = [_load(nc, pb.v[b, hk, s0:s1, c0:min(c0 + N_TILE, pb.Ev)]) for c0 in range(0, pb.Ev, N_TILE)]
        return kT, vts

    def done(self, b: int, hk: int) -> None:
        """A query block of head (b, hk) ended: the last one frees the head's shared tiles."""
        entry = self.heads.get((b, hk))
        if entry is None:
            return
        entry[2][0] -= 1
        if entry[2][0] == 0:
            release_live_to(entry[0], 0)
            del self.heads[(b, hk)]


def forward_wide(pb: _Problem, o4: np.ndarray, lse3: np.ndarray | None) -> None:
    """``forward_program``'s arithmetic without dropout, over every (batch, query head) at once: a compiled
    program's attention step on the static replay's fast path (compiler/replay.py), whose device time is the
    one the tile program recorded at compile time.

    Each value goes through the tile program's instructions in its order and with its rounding points, as
    numpy computes them there: TensorE transposes are exact (the inputs' dtype through fp32 PSUM and back);
    ``S`` = fp32 products of the fp32 Q^T and K^T chunks (one BLAS call per head and chunk, on operands laid
    out as the tiles are, the chunks summed in order); the scale, the masks, the online softmax's max, exp and
    row sums per key block (the first block without the rescaling, as there); P rounded to the inputs' dtype,
    transposed, its fp32 product with V per ``N_TILE`` columns; ``O = acc / max(l, 1e-30)``, ``lse = log(l) +
    m``. ``tests/compiler/test_static_replay.py`` compares both paths bit for bit.

    Host time (the arithmetic is the same): the products see heads as [B, Hk, group] so a key/value head's
    K^T and V chunks are made once and broadcast to its ``group`` query heads (np.matmul's stride-0 batch axis:
    each head's BLAS call gets the same 2-D operands as before) instead of copied per query head; the scale
    and the max subtraction run in place on the product's own array, and an fp32 output is divided into
    ``o4`` itself rather than into a temporary copied there."""
    n = pb.B * pb.Hq
    g = pb.group
    heads5 = (pb.B, pb.Hk, g)  # a query head h = hk * group + i: [B, Hq] split as [B, Hk, group]
    scale = np.float32(pb.scale)
    neg_inf = np.float32(-np.inf)
    floor = np.asarray(-FLT_MAX).astype(FP32)
    minus_one = np.asarray(-1.0).astype(FP32)
    zero = np.asarray(0.0).astype(FP32)
    tiny = np.asarray(1e-30).astype(FP32)

    def fp32_rows(a: np.ndarray) -> np.ndarray:  # [..., P, F] as fp32 tiles of that shape read (C order)
        return np.ascontiguousarray(a, dtype=FP32)

    def per_kv_head(a: np.ndarray) -> np.ndarray:  # [B, Hk, P, F] -> [B, Hk, 1, P, F]: broadcast to the group
        return a[:, :, None]

    for i in range(pb.n_q):
        l0, l1 = i * Q_TILE, min((i + 1) * Q_TILE, pb.L)
        lq = l1 - l0
        q = pb.q[:, :, l0:l1, :].reshape(*heads5, lq, pb.E)
        qT = [fp32_rows(q[..., c0:c0 + E_TILE].swapaxes(-1, -2)) for c0 in range(0, pb.E, E_TILE)]
        m = row_sum = acc = None
        for j, s0, s1 in pb.key_blocks(l0, l1):
            sk = s1 - s0
            kb = pb.k[:, :, s0:s1, :]
            scores = None
            for c, qc in enumerate(qT):
                kc = per_kv_head(fp32_rows(kb[..., c * E_TILE:(c + 1) * E_TILE].swapaxes(-1, -2)))
                product = np.matmul(qc.swapaxes(-1, -2), kc).reshape(n, lq, sk)
                if scores is None:
                    scores = product
                else:
                    scores += product
            s = np.multiply(scores, scale, out=scores) if pb.scale != 1.0 else scores
            if pb.mask_kind is not None:
                mk = pb.mask[:, :, l0:l1, s0:s1].reshape(n, lq, sk)
                if pb.mask_kind == "float":
                    np.add(s, mk if mk.dtype == FP32 else mk.astype(FP32), out=s)
                else:
                    s = np.where(mk.astype(bool), s, neg_inf)
            if pb.causal and s1 - 1 > l0:  # affine_select: -inf where (l0 + p) - (s0 + f) < 0
                # one masked copy over every head (a boolean index of [n, lq, sk] was 6x its time)
                np.copyto(s, neg_inf, where=_causal_mask(l0 - s0, lq, sk))
            tail = pb.flash_tail if s1 == pb.S else 0  # CPU's flash tail skips a NaN (``_row_max``)
            if not tail:
                block_max = np.maximum.reduce(s, axis=2, keepdims=True)
            else:
                block_max = np.maximum.reduce(np.fmax(s[..., sk - tail:], neg_inf), axis=2, keepdims=True)
                if sk > tail:
                    np.maximum(np.maximum.reduce(s[..., :sk - tail], axis=2, keepdims=True), block_max,
                               out=block_max)
            m_new = block_max if m is None else np.maximum(m, block_max)
            neg_m = np.multiply(np.maximum(m_new, floor), minus_one)
            p = np.add(s, neg_m, out=s)  # s is read no more
            np.exp(p, out=p)
            block_sum = p.sum(axis=2, keepdims=True, dtype=FP32)
            alpha = None
            if m is None:
                row_sum = block_sum
            else:
                alpha = np.add(m, neg_m)
                np.exp(alpha, out=alpha)
                np.multiply(row_sum, alpha, out=row_sum)
                np.add(row_sum, block_sum, out=row_sum)
            m = m_new
            if tail:  # a row CPU's flash never started (max -inf): probabilities of its tail and its sum 0
                started = m_new != neg_inf
                np.copyto(p[..., sk - tail:], zero, where=~started)
                np.copyto(row_sum, zero, where=~started)
            # P^T copied in slabs (kernels/contiguous.py: [8, 128, 128] 169 -> 71 us; Q^T's and K^T's shorter
            # rows copy faster in one call)
            pT = fp32_contiguous((p if pb.dtype == FP32 else p.astype(pb.dtype)).transpose(0, 2, 1))
            pT5 = pT.reshape(*heads5, sk, lq).swapaxes(-1, -2)  # P per head, as TensorE reads its transpose
            if acc is None:
                acc = np.empty((n, lq, pb.Ev), dtype=FP32)
            vb = pb.v[:, :, s0:s1, :]
            for c0 in range(0, pb.Ev, N_TILE):
                c1 = min(c0 + N_TILE, pb.Ev)
                pv = np.matmul(pT5, per_kv_head(fp32_rows(vb[..., c0:c1]))).reshape(n, lq, c1 - c0)
                part = acc[:, :, c0:c1]
                if alpha is None:
                    np.add(pv, zero, out=part)
                else:
                    np.multiply(part, alpha, out=part)
                    np.add(part, pv, out=part)
        safe = np.maximum(row_sum, tiny)
        target = o4[:, :, l0:l1, :]
        if o4.dtype == FP32:  # the quotient is the output's value: computed where it goes
            np.true_divide(acc.reshape(target.shape), safe.reshape(*target.shape[:3], 1), out=target)
        else:
            target[...] = np.true_divide(acc, safe).reshape(target.shape)  # rounded to the output's dtype, as the tile
        if lse3 is not None:
            log_l = np.log(row_sum)
            np.add(log_l, m, out=log_l)
            if pb.flash_lse:  # CPU's flash: a row never started has logsumexp 0
                np.copyto(log_l, zero, where=m == neg_inf)
            lse3[:, :, l0:l1] = log_l.reshape(pb.B, pb.Hq, lq)


@functools.lru_cache(maxsize=64)
def _causal_mask(offset: int, rows: int, cols: int) -> np.ndarray:
    """affine_select's masked positions of a [rows, cols] score block whose first query lies ``offset`` positions
    after its first key: True where the key comes after the query. Read-only, made once per block geometry
    (``forward_wide`` made it per block: a quarter of its masking time)."""
    mask = offset + np.arange(rows)[:, None] - np.arange(cols)[None, :] < 0
    mask.flags.writeable = False
    return mask


def _interleave(nc, streams, width: int) -> None:
    """Run generator ``streams`` (each yields between its stages) round robin, ``width`` at a time, each in
    its own tile scope (``NeuronCore.stream``)."""
    active: list = []
    pending = iter(streams)
    while True:
        while len(active) < width:
            nxt = next(pending, None)
            if nxt is None:
                break
            active.append((nxt, []))
        if not active:
            return
        for entry in list(active):
            gen, live = entry
            with nc.stream(live):
                try:
                    next(gen)
                except StopIteration:
                    nc.release_to(0)
                    active.remove(entry)


def _forward_block(nc, pb: _Problem, consts: dict, kv: _KeyValues, b: int, h: int, hk: int, i: int, o4, lse3,
                   seed: int, offset: int, dm4, keep_scale: float, hand: Handoff | None = None,
                   given: dict | None = None, scores_on_scalar: bool = False):
    """One query block's forward (a generator: it yields between stages, see forward_program)."""
    l0, l1 = i * Q_TILE, min((i + 1) * Q_TILE, pb.L)
    lq = l1 - l0
    block = nc.mark()
    rows = (given or {}).get(("q", b, h, l0, l1))  # already in SBUF (``forward_program``'s ``given``)
    qT = _transposed(nc, rows if rows is not None else _load(nc, pb.q[b, h, l0:l1, :]), pb.dtype, evacuate="either")
    m = nc.sbuf_tile((lq, 1), FP32)  # running row max, row sum and output: set by the first key block
    row_sum = nc.sbuf_tile((lq, 1), FP32)
    key_blocks = list(pb.key_blocks(l0, l1))
    # one key block (a short sequence, or the first query block of a causal one): its row sums are final after
    # its exp, so O = (0 + P V) / max(l, 1e-30) is one VectorE pass out of PSUM (tensor_scalar's add and
    # divide, the intermediate in fp32: the bits the accumulator and the divide give) with no accumulator
    alone = len(key_blocks) == 1
    acc = None if alone else nc.sbuf_tile((lq, pb.Ev), FP32)
    safe = nc.sbuf_tile((lq, 1), FP32) if alone else None
    out_tile = (lambda: nc.sbuf_tile((lq, pb.Ev), pb.dtype)) if hand is None else \
        (lambda: hand.out_tile(nc, pb, b, h, l0, l1))
    o = out_tile() if alone else None
    yield
    if kv.shared:  # the first key block's K^T in a stage of its own: its transposes and evacuations then run
        # after every block's Q^T ones instead of each on the chain before its first scores product
        kv.block(b, hk, *key_blocks[0])
        yield
    for j, s0, s1 in key_blocks:
        first = j == 0
        sk = s1 - s0
        step = nc.mark()
        kT, vts = kv.block(b, hk, j, s0, s1)
        s = _scores(nc, pb, qT, kT, b, h, l0, l1, s0, s1, consts, scores_on_scalar)
        yield
        # the first block starts from m = -inf, l = 0, acc = 0: m_new = max(-inf, block max) is the
        # block max, alpha = exp(-inf) = 0, so l = block sum and acc = 0 + P V (as below, without
        # the rescaling: the same values, fewer instructions)
        block_max = m if first else nc.sbuf_tile((lq, 1), FP32)
        tail = _row_max(nc, pb, block_max, s, s1)
        m_new = m if first else nc.sbuf_tile((lq, 1), FP32)
        if not first:
            nc.vector.tensor_tensor(m_new, m, block_max, "maximum")
        # -FLT_MAX in place of -inf: rows with no key yet give exp(-inf) = 0, not NaN
        neg_m = nc.sbuf_tile((lq, 1), FP32)
        _per_row(nc, neg_m, m_new, "maximum", -FLT_MAX, op1="multiply", scalar1=-1.0)
        p = nc.sbuf_tile((lq, sk), FP32)
        block_sum = row_sum if first else nc.sbuf_tile((lq, 1), FP32)
        nc.scalar.activation(p, s, "exp", bias=neg_m, accumulate=block_sum)
        alpha = None
        if not first:
            alpha = nc.sbuf_tile((lq, 1), FP32)
            nc.vector.tensor_tensor(alpha, m, neg_m, "add")
            nc.scalar.activation(alpha, alpha, "exp")
            nc.vector.tensor_tensor(row_sum, row_sum, alpha, "multiply")
            nc.vector.tensor_tensor(row_sum, row_sum, block_sum, "add")
            nc.vector.tensor_copy(m, m_new)
        if tail:  # CPU's flash never started a row whose max is -inf here (the sequence's last block): its
            # probabilities are 0, NaN tail scores' included (exp(NaN + FLT_MAX) gave NaN), and its sum 0
            started = _started(nc, m_new)
            nc.vector.select(p[:, sk - tail:], started, p[:, sk - tail:], consts["zero"][:lq, :tail])
            nc.vector.select(row_sum, started, row_sum, consts["zero"][:lq, :1])
        if pb.dropout > 0:
            keep = _dropout_keep(nc, pb, seed, offset, lq, sk, b, h, i, j)
            if dm4 is not None:
                flag = nc.sbuf_tile((lq, sk), pb.dtype)
                nc.vector.tensor_copy(flag, keep)
                nc.dma.store(dm4[b, h, l0:l1, s0:s1], flag)
            nc.vector.tensor_tensor(p, p, keep, "multiply")
            nc.vector.tensor_scalar(p, p, "multiply", keep_scale)
        p_low = p  # P in the inputs' dtype for the matmul (a float32 copy of float32 P is P)
        if pb.dtype != FP32:
            p_low = nc.sbuf_tile((lq, sk), pb.dtype)
            nc.vector.tensor_copy(p_low, p)
        yield
        (pT,) = _transposed(nc, p_low, pb.dtype, evacuate="either")
        if alone:
            # l is 0 (every key masked) or >= 1 (the row max contributes exp(0)): 0/tiny = 0
            _per_row(nc, safe, row_sum, "maximum", 1e-30)
        yield
        for c0, vt in zip(range(0, pb.Ev, N_TILE), vts):
            c1 = min(c0 + N_TILE, pb.Ev)
            pv = nc.psum_tile((lq, c1 - c0), FP32)
            nc.tensor.matmul(pv, pT, vt)
            if alone:
                nc.vector.tensor_scalar(o[:, c0:c1], pv, "add", 0.0, op1="divide", scalar1=safe, dtype=FP32)
                continue
            part = acc[:, c0:c1]
            if first:  # 0 + P V: adding +0.0 keeps the bits the rescaled sum had (a -0.0 becomes +0.0)
                nc.vector.tensor_scalar(part, pv, "add", 0.0)
            else:
                nc.vector.tensor_tensor(part, part, alpha, "multiply")
                nc.vector.tensor_tensor(part, part, pv, "add")
        nc.release_to(step)
        yield
    if not alone:  # l is 0 (every key masked) or >= 1 (the row max contributes exp(0)): 0/tiny = 0
        safe = nc.sbuf_tile((lq, 1), FP32)
        _per_row(nc, safe, row_sum, "maximum", 1e-30)
        o = out_tile()
        nc.vector.tensor_tensor(o, acc, safe, "divide", dtype=FP32)
    nc.dma.store(o4[b, h, l0:l1, :], o)
    if lse3 is not None:
        log_l = nc.sbuf_tile((lq, 1), FP32)
        nc.scalar.activation(log_l, row_sum, "log")
        nc.vector.tensor_tensor(log_l, log_l, m, "add")
        if pb.flash_lse:  # CPU's flash gives a row never started max 0 and sum 1: logsumexp 0, not -inf
            nc.vector.select(log_l, _started(nc, m), log_l, consts["zero"][:lq, :1])
        nc.dma.store(lse3[b, h, l0:l1, None], log_l)
    nc.release_to(block)
    kv.done(b, hk)


def _forward(a: dict) -> tuple:
    query, key, value, bias = a["query"], a["key"], a["value"], a["attn_bias"]
    pb = _problem(query, key, value, bias, a["dropout_p"], a["is_causal"], a["scale"])
    # CPU's flash kernel for these layouts (contiguous inputs): its row max and never-started rows
    pb.flash_lse, pb.flash_tail = cpu_host.sdpa_flash_rules(query, key, value, bias, a["dropout_p"], a["is_causal"],
                                                            a["scale"])
    out_shape = tuple(query.shape[:-1]) + (pb.Ev,)
    # laid out as CPU's sdpa lays its output out for these arguments (its flash kernel's (B, L, H, E) transposed,
    # or its math path's matmul layout: cpu_host.sdpa_layouts), else as the query (CUDA's matching layout)
    cpu_strides, _ = cpu_host.sdpa_layouts(query, key, value, bias, a["dropout_p"], a["is_causal"], a["scale"])
    out = _cpu_laid(out_shape, cpu_strides, query.dtype, query)
    if out is None:
        out = _empty_like_layout(query, out_shape, query.dtype)
    lse = torch.empty((pb.B, pb.Hq, pb.L), dtype=torch.float32, device=query.device)
    debug = pb.dropout > 0 and bool(a["return_debug_mask"])
    debug_mask = (torch.empty((pb.B, pb.Hq, pb.L, pb.S), dtype=query.dtype, device=query.device) if debug
                  else torch.empty(0, dtype=query.dtype, device=query.device))
    seed, offset = reserve(None, query.device.index, pb.draws) if pb.dropout > 0 else (0, 0)
    o4 = pb._four(hbm(out))
    lse3 = hbm(lse)
    dm4 = hbm(debug_mask) if debug else None
    if out.numel() and pb.L:
        with launch("sdpa_flash_fwd", query.device.index) as nc:
            forward_program(nc, pb, o4, lse3, seed, offset, dm4)
    elif out.numel():
        pass  # no queries: nothing to write
    if out.numel() and pb.S == 0:
        raise RuntimeError("neuron fused attention needs at least one key")
    return (out, lse, None, None, pb.L, pb.S, _host_long(seed), _host_long(offset), debug_mask)


# --- backward --------------------------------------------------------------------------------------


def backward_program(nc, pb: _Problem, g4: np.ndarray, o4: np.ndarray, lse3: np.ndarray, d3: np.ndarray,
                     dq32_4: np.ndarray, dq4: np.ndarray, dk4: np.ndarray, dv4: np.ndarray, db4: np.ndarray | None,
                     seed: int = 0, offset: int = 0) -> None:
    """The backward tile program (module docstring) on core ``nc``: dQ, dK, dV into ``dq4``, ``dk4``, ``dv4``
    (``db4``: dS per element, when a bias needs a gradient). ``d3`` [B, H, L] and ``dq32_4`` [B, H, L, E]
    (fp32) are HBM scratch: D = rowsum(dO * O) and the dQ accumulator."""
    keep_scale = 0.0 if pb.dropout >= 1.0 else 1.0 / (1.0 - pb.dropout)
    consts = _constants(nc, pb)
    for b, h, _ in pb.heads():  # D and a zeroed dQ accumulator per query block
        for i in range(pb.n_q):
            l0, l1 = i * Q_TILE, min((i + 1) * Q_TILE, pb.L)
            mark = nc.mark()
            g = _load(nc, g4[b, h, l0:l1, :])
            o = _load(nc, o4[b, h, l0:l1, :])
            prod = nc.sbuf_tile(g.shape, FP32)
            nc.vector.tensor_tensor(prod, g, o, "multiply", dtype=FP32)
            d = nc.sbuf_tile((l1 - l0, 1), FP32)
            nc.vector.tensor_reduce(d, prod, "add")
            nc.dma.store(d3[b, h, l0:l1, None], d)
            zero = nc.sbuf_tile((l1 - l0, pb.E), FP32)
            nc.vector.memset(zero, 0.0)
            nc.dma.store(dq32_4[b, h, l0:l1, :], zero)
            nc.release_to(mark)
    for b in range(pb.B):
        for hk in range(pb.Hk):
            for j in range(pb.n_k):
                _backward_key_block(nc, pb, consts, b, hk, j, seed, offset, keep_scale, g4, lse3, d3,
                                    dq32_4, dk4, dv4, db4)
    for b, h, _ in pb.heads():  # dQ: fp32 accumulator -> the query's dtype
        for i in range(pb.n_q):
            l0, l1 = i * Q_TILE, min((i + 1) * Q_TILE, pb.L)
            mark = nc.mark()
            acc = _load(nc, dq32_4[b, h, l0:l1, :])
            low = nc.sbuf_tile(acc.shape, pb.dtype)
            nc.vector.tensor_copy(low, acc)
            nc.dma.store(dq4[b, h, l0:l1, :], low)
            nc.release_to(mark)


def _check_like_output(query: torch.Tensor, value: torch.Tensor, **tensors: torch.Tensor) -> None:
    """The backward's grad_out and out must have the attention output's shape (query's, with value's head dim).
    CPU's backward reads their sizes without checking: one with fewer dims raises its IndexError (``Dimension out of
    range``), as here; one of another shape it reads out of bounds, where the device raises RuntimeError."""
    want = tuple(query.shape[:-1]) + (value.shape[-1],)
    for name, t in tensors.items():
        if t.dim() < len(want):
            raise IndexError(f"Dimension out of range (expected to be in range of [{-max(t.dim(), 1)}, "
                             f"{max(t.dim(), 1) - 1}], but got {t.dim()}): sdpa's backward needs {name} of the "
                             f"attention output's shape {list(want)}, got {list(t.shape)}")
        if tuple(t.shape) != want:
            raise RuntimeError(f"sdpa's backward needs {name} of the attention output's shape {list(want)}, got "
                               f"{list(t.shape)}")


def _backward(a: dict) -> tuple:
    grad_out, query, key, value = a["grad_out"], a["query"], a["key"], a["value"]
    bias, mask_needed = a["attn_bias"], list(a["grad_input_mask"])
    out, lse = a["out"], a["logsumexp"]
    _check_like_output(query, value, grad_out=grad_out, out=out)
    pb = _problem(query, key, value, bias, a["dropout_p"], a["is_causal"], a["scale"])
    seed, offset = int(scalar_of(a["philox_seed"])), int(scalar_of(a["philox_offset"]))
    # the gradients laid out as CPU's backward of sdpa lays them out for these arguments and this grad_out
    # (cpu_host.sdpa_layouts), else as their inputs
    _, cpu_grads = cpu_host.sdpa_layouts(query, key, value, bias, a["dropout_p"], a["is_causal"], a["scale"],
                                         grad_out)
    dq, dk, dv = (_cpu_laid(tuple(t.shape), None if cpu_grads is None else cpu_grads[i], t.dtype, t)
                  for i, t in enumerate((query, key, value)))
    dq = torch.empty_like(query) if dq is None else dq
    dk = torch.empty_like(key) if dk is None else dk
    dv = torch.empty_like(value) if dv is None else dv
    want_bias = bias is not None and len(mask_needed) > 3 and mask_needed[3] and bias.dtype != torch.bool
    dbias_full = (torch.empty((pb.B, pb.Hq, pb.L, pb.S), dtype=torch.float32, device=query.device) if want_bias
                  else None)
    dq32 = torch.empty((pb.B, pb.Hq, pb.L, pb.E), dtype=torch.float32, device=query.device)
    rows = torch.empty((pb.B, pb.Hq, pb.L), dtype=torch.float32, device=query.device)  # D = rowsum(dO * O)
    g4, o4 = pb._four(hbm(grad_out)), pb._four(hbm(out))
    dq4, dk4, dv4 = pb._four(hbm(dq)), pb._four(hbm(dk)), pb._four(hbm(dv))
    lse3, d3, dq32_4 = hbm(lse), hbm(rows), hbm(dq32)
    db4 = hbm(dbias_full) if dbias_full is not None else None
    if query.numel() and key.numel():
        with launch("sdpa_flash_bwd", query.device.index) as nc:
            backward_program(nc, pb, g4, o4, lse3, d3, dq32_4, dq4, dk4, dv4, db4, seed, offset)
    else:
        dq.zero_()
        dk.zero_()
        dv.zero_()
    grad_bias = None
    if want_bias:
        grad_bias = dbias_full.sum_to_size(bias.shape).to(bias.dtype)
    return dq, dk, dv, grad_bias


def _backward_key_block(nc, pb: _Problem, consts, b: int, hk: int, j: int, seed: int, offset: int,
                        keep_scale: float, g4, lse3, d3, dq32_4, dk4, dv4, db4) -> None:
    s0, s1 = j * K_TILE, min((j + 1) * K_TILE, pb.S)
    sk = s1 - s0
    mark = nc.mark()
    k_rows = _load(nc, pb.k[b, hk, s0:s1, :])
    kT = _transposed(nc, k_rows, pb.dtype)
    v_rows = _load(nc, pb.v[b, hk, s0:s1, :])
    vT = _transposed(nc, v_rows, pb.dtype)
    dk_acc = nc.sbuf_tile((sk, pb.E), FP32)
    nc.vector.memset(dk_acc, 0.0)
    dv_acc = nc.sbuf_tile((sk, pb.Ev), FP32)
    nc.vector.memset(dv_acc, 0.0)
    for h in range(hk * pb.group, (hk + 1) * pb.group):
        for i in range(pb.n_q):
            l0, l1 = i * Q_TILE, min((i + 1) * Q_TILE, pb.L)
            if pb.causal and s0 > l1 - 1:
                continue
            lq = l1 - l0
            step = nc.mark()
            q_rows = _load(nc, pb.q[b, h, l0:l1, :])
            qT = _transposed(nc, q_rows, pb.dtype)
            g_rows = _load(nc, g4[b, h, l0:l1, :])
            gT = _transposed(nc, g_rows, pb.dtype)
            s = _scores(nc, pb, qT, kT, b, h, l0, l1, s0, s1, consts)
            neg_lse = _load(nc, lse3[b, h, l0:l1, None])
            # all-masked rows: P = 0, not NaN
            nc.vector.tensor_scalar(neg_lse, neg_lse, "maximum", -FLT_MAX, op1="multiply", scalar1=-1.0)
            p = nc.sbuf_tile((lq, sk), FP32)
            nc.scalar.activation(p, s, "exp", bias=neg_lse)
            keep = _dropout_keep(nc, pb, seed, offset, lq, sk, b, h, i, j) if pb.dropout > 0 else None
            p_drop = nc.sbuf_tile((lq, sk), pb.dtype)
            if keep is not None:
                scaled = nc.sbuf_tile((lq, sk), FP32)
                nc.vector.tensor_tensor(scaled, p, keep, "multiply")
                nc.vector.tensor_scalar(p_drop, scaled, "multiply", keep_scale, dtype=FP32)
            else:
                nc.vector.tensor_copy(p_drop, p)
            for c0 in range(0, pb.Ev, N_TILE):  # dV += P_d^T dO
                c1 = min(c0 + N_TILE, pb.Ev)
                acc = nc.psum_tile((sk, c1 - c0), FP32)
                nc.tensor.matmul(acc, p_drop, g_rows[:, c0:c1])
                nc.vector.tensor_tensor(dv_acc[:, c0:c1], dv_acc[:, c0:c1], acc, "add")
            dp_acc = nc.psum_tile((lq, sk), FP32)  # dP_d = dO V^T
            for c, (gc, vc) in enumerate(zip(gT, vT)):
                nc.tensor.matmul(dp_acc, gc, vc, accumulate=c > 0)
            ds = nc.sbuf_tile((lq, sk), FP32)
            if keep is not None:
                nc.vector.tensor_tensor(ds, dp_acc, keep, "multiply")
                nc.vector.tensor_scalar(ds, ds, "multiply", keep_scale)
            else:
                nc.vector.tensor_copy(ds, dp_acc)
            d = _load(nc, d3[b, h, l0:l1, None])
            nc.vector.tensor_tensor(ds, ds, d, "subtract")
            nc.vector.tensor_tensor(ds, ds, p, "multiply")  # dS = P (dP - D)
            if db4 is not None:
                nc.dma.store(db4[b, h, l0:l1, s0:s1], ds)
            ds_low = nc.sbuf_tile((lq, sk), pb.dtype)
            nc.vector.tensor_copy(ds_low, ds)
            for c0 in range(0, pb.E, N_TILE):  # dK += dS^T Q
                c1 = min(c0 + N_TILE, pb.E)
                acc = nc.psum_tile((sk, c1 - c0), FP32)
                nc.tensor.matmul(acc, ds_low, q_rows[:, c0:c1])
                nc.vector.tensor_tensor(dk_acc[:, c0:c1], dk_acc[:, c0:c1], acc, "add")
            (dsT,) = _transposed(nc, ds_low, pb.dtype)
            dq_old = _load(nc, dq32_4[b, h, l0:l1, :])
            for c0 in range(0, pb.E, N_TILE):  # dQ += scale dS K
                c1 = min(c0 + N_TILE, pb.E)
                acc = nc.psum_tile((lq, c1 - c0), FP32)
                nc.tensor.matmul(acc, dsT, k_rows[:, c0:c1])
                scaled = nc.sbuf_tile((lq, c1 - c0), FP32)
                nc.scalar.activation(scaled, acc, "identity", scale=pb.scale)
                nc.vector.tensor_tensor(dq_old[:, c0:c1], dq_old[:, c0:c1], scaled, "add")
            nc.dma.store(dq32_4[b, h, l0:l1, :], dq_old)
            nc.release_to(step)
    dk_out = nc.sbuf_tile((sk, pb.E), pb.dtype)
    nc.vector.tensor_scalar(dk_out, dk_acc, "multiply", pb.scale, dtype=FP32)
    nc.dma.store(dk4[b, hk, s0:s1, :], dk_out)
    dv_out = nc.sbuf_tile((sk, pb.Ev), pb.dtype)
    nc.vector.tensor_copy(dv_out, dv_acc)
    nc.dma.store(dv4[b, hk, s0:s1, :], dv_out)
    nc.release_to(mark)


# --- registration ----------------------------------------------------------------------------------


def _bound(fn, op: str):
    binder = Binder.of(resolve(op))

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return fn(binder.bind(args, kwargs))

    kernel.__name__ = fn.__name__
    kernel.__module__ = __name__
    return kernel


# dtypes=None: the arguments include a bool mask and int64 philox tensors; _Problem checks the inputs.
TABLE.native(FORWARD, dtypes=None)(_bound(_forward, FORWARD))
TABLE.native(BACKWARD, dtypes=None)(_bound(_backward, BACKWARD))
