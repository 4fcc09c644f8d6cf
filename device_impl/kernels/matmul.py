"""Matrix multiplication on TensorE: mm, addmm, bmm, baddbmm (and what PyTorch builds on them:
linear, matmul, the math path of scaled_dot_product_attention).

TensorE computes out[M, N] = stationary[K, M].T @ moving[K, N]: both operands
need the contraction dimension K on SBUF partitions. For C = A @ B:

* the stationary tile is a block of A^T. When A is stored K-major (its
  columns contiguous, e.g. ``x.t()``) a DMA loads it directly; when A is
  row-major the block is loaded as is and transposed on TensorE (an identity
  matmul into PSUM, then copied back to SBUF), once per block and reused for
  every N tile;
* the moving tile is a block of B, [K <= 128, N <= 512]; a B whose rows are
  not contiguous (``W.t()`` in a linear layer) is transposed the same way.

Each [128, 512] output block accumulates over K tiles in one PSUM bank in
fp32; ScalarE evacuates it to SBUF (scaling by alpha on the way), VectorE
adds beta * bias for addmm/baddbmm, and DMA stores it. Blocks of B are kept
in SBUF across M tiles when they fit, so each is read from HBM once.

numpy reference: ``(a.astype(f32) @ b.astype(f32)).astype(out)`` with fp32
accumulation; integer matmuls have no TensorE mode and take the counted CPU
fallback.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from device_impl.engine import launch
from device_impl.engine.core import scalar_finishes_first
from device_impl.engine.dtypes import FP32, NUMPY_TO_TORCH
from device_impl.kernels import cpu_host
from device_impl.kernels.common import FLOAT_DTYPES, hbm, promote, scalar_of
from device_impl.kernels.registry import register_family

M_TILE = 128
K_TILE = 128
N_TILE = 512
B_CACHE_BYTES = 64 * 1024  # per partition: keep all B tiles resident below this
RESIDENT_BYTES = 96 * 1024  # per partition: load both operands entirely before computing below this
EVACUATION_CHUNK = 256  # columns per PSUM -> SBUF copy (amortises the engines' fixed cost)
TAIL_CHUNK = 64  # the fewest columns a product's last block is cut to for its epilogue (``_finish_block``)
PIPELINE_BANKS = 6  # blocks whose first K steps run up front (of PSUM's 8 banks; the rest for evacuation)
TRANSPOSE_WINDOW = 8  # operand tiles the resident schedule may transpose ahead of the matmul that uses them


class _Operand:
    """Serves [K, X] tiles of a matrix operand (X = M for A^T, N for B) from HBM.

    ``prefetch`` issues a tile's DMA; ``tile`` returns it ready for TensorE, transposing a
    row-major block on first use, so transposes interleave with the matmuls that need them
    instead of holding TensorE while every load lands.
    """

    def __init__(self, nc, matrix: np.ndarray, transpose: bool, cache: bool):
        # ``matrix`` is viewed so that rows are K: for A pass A.T (shape [K, M]); for B pass B ([K, N]).
        self.nc = nc
        self.matrix = matrix
        self.transpose = transpose
        self.cache: dict[tuple[int, int, int, int], Any] | None = {} if cache else None
        self.raw: dict[tuple[int, int, int, int], list] = {}  # loaded, not yet transposed
        # where cached tiles are allocated when they outlive the call (``matmul_into``'s ``lhs_tiles``): a
        # scope the caller holds, so the next product of the same operand finds them in ``cache``
        self.live: list | None = None
        # pieces another step left in SBUF (``matmul_into``'s ``lhs_pieces``): transposed here, freed by their owner
        self.borrowed: set[int] = set()

    def _cached_tile(self, shape: tuple[int, int], dtype):
        if self.live is None:
            return self.nc.sbuf_tile(shape, dtype)
        with self.nc.stream(self.live):
            return self.nc.sbuf_tile(shape, dtype)

    @staticmethod
    def needs_transpose(matrix_k_rows: np.ndarray) -> bool:
        """Rows of length X along partitions are contiguous only if the X axis has unit stride."""
        return matrix_k_rows.shape[1] > 1 and matrix_k_rows.strides[1] != matrix_k_rows.itemsize

    def prefetch(self, k0: int, k1: int, x0: int, x1: int) -> None:
        key = (k0, k1, x0, x1)
        if (self.cache is not None and key in self.cache) or key in self.raw:
            return
        nc = self.nc
        block = self.matrix[k0:k1, x0:x1]
        if not self.transpose:
            t = self._cached_tile((k1 - k0, x1 - x0), block.dtype) if self.cache is not None else \
                nc.sbuf_tile((k1 - k0, x1 - x0), block.dtype)
            nc.dma.load(t, block)
            if self.cache is not None:
                self.cache[key] = t
            else:
                self.raw[key] = [t]
            return
        # K-contiguous [X, K] pieces of at most 128 columns (rows contiguous in HBM).
        pieces = []
        for c0 in range(0, x1 - x0, 128):
            c1 = min(x1 - x0, c0 + 128)
            rows = nc.sbuf_tile((c1 - c0, k1 - k0), block.dtype)
            nc.dma.load(rows, block[:, c0:c1].T)
            pieces.append((c0, c1, rows))
        self.raw[key] = pieces

    def waiting(self, key: tuple[int, int, int, int]) -> bool:
        """The tile is loaded (or loading) and still needs its TensorE transpose."""
        return self.transpose and key in self.raw

    def loaded_at(self, key: tuple[int, int, int, int]) -> float:
        """When the loads of a tile waiting for its transpose complete (timeline ns)."""
        return max(rows.root.ready for _, _, rows in self.raw[key])

    def ready_at(self, key: tuple[int, int, int, int]) -> float:
        """When a tile TensorE can read (loaded, or transposed and evacuated) is ready (timeline ns)."""
        if self.cache is not None and key in self.cache:
            return self.cache[key].root.ready
        return self.raw[key][0].root.ready

    def tile(self, k0: int, k1: int, x0: int, x1: int):
        key = (k0, k1, x0, x1)
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        self.prefetch(k0, k1, x0, x1)
        if self.cache is not None and key in self.cache:
            return self.cache[key]
        pieces = self.raw.pop(key)
        if not self.transpose:
            return pieces[0]
        nc = self.nc
        t = self._cached_tile((k1 - k0, x1 - x0), self.matrix.dtype) if self.cache is not None else \
            nc.sbuf_tile((k1 - k0, x1 - x0), self.matrix.dtype)
        # The pieces land side by side in one PSUM bank (x1 - x0 <= 512 fp32 columns) and leave it in
        # one evacuation: ScalarE's and VectorE's fixed cost is paid once per tile, not per piece.
        flipped = nc.psum_tile((k1 - k0, x1 - x0), FP32)
        for c0, c1, rows in pieces:
            nc.tensor.transpose(flipped[:, c0:c1], rows)
        psum_to_sbuf(nc, t, flipped)
        nc.release(flipped)
        for _, _, rows in pieces:
            if id(rows) not in self.borrowed:
                nc.release(rows)
        if self.cache is not None:
            self.cache[key] = t
        return t


# epilogue(nc, tile, m0, m1, n0, n1): takes over from the store of out2d[m0:m1, n0:n1] (``tile``, in out's
# dtype, is what would be stored; the PSUM block itself where the epilogue has ``reads_psum`` set true: its ops
# read the product but never store or keep that tile, see ``_finish_block``). Adaptive eager (device_impl.eager) fuses elementwise ops on the
# product into its PSUM evacuation this way instead of an HBM round trip.
Epilogue = Callable[..., None]


def _b_cached(k_tiles: int, n: int, b_itemsize: int) -> bool:
    """Whether all of B's tiles are kept: they use ceil(K / 128) * N elements of each partition."""
    return k_tiles * n * b_itemsize <= B_CACHE_BYTES


def operands_resident(k_tiles: int, m: int, n: int, a_itemsize: int, b_itemsize: int) -> bool:
    """Whether both operands stay in SBUF for the whole product (every load issued before any compute; cached
    tiles are taken only then: ``lhs_tiles``, ``rhs_tiles``, ``prepare_rhs``; the compiler's
    ``build.prepare_weights`` asks it of a product's shapes)."""
    return _b_cached(k_tiles, n, b_itemsize) and k_tiles * m * a_itemsize + k_tiles * n * b_itemsize <= RESIDENT_BYTES


def _matmul_into(nc, out2d: np.ndarray, a2d: np.ndarray, b2d: np.ndarray, alpha: float = 1.0,
                 beta: float = 0.0, bias2d: np.ndarray | None = None, epilogue: Epilogue | None = None,
                 lhs_tiles: tuple[dict, list] | None = None, rhs_tiles: tuple[dict, list] | None = None,
                 lhs_pieces: dict | None = None) -> None:
    """out2d = alpha * (a2d @ b2d) + beta * bias2d, tile by tile (bias2d already broadcast to out2d's shape).

    ``lhs_tiles``: (cache, scope) the caller keeps across products of the same ``a2d`` (the compiler's
    q/k/v or gate/up projections of one activation): when the operands are resident (loaded up front),
    the stationary tiles of A^T are taken from ``cache`` where an earlier product left them (loaded and
    transposed once), and the ones loaded here are allocated in ``scope``, which the caller frees after
    the last product. ``rhs_tiles``: the same for B's moving tiles, made ahead by ``prepare_rhs`` (a weight's
    loads and transposes run where TensorE is idle, before the product's turn). ``lhs_pieces``: a row-major A's
    blocks already in SBUF (an earlier epilogue's results, the compiler's ``handoffs``), per stationary tile key
    the [(c0, c1, tile)] pieces its load would have made: transposed here among the matmuls as they land, never
    loaded, and left for their owner to free (resident operands only)."""
    m, k = a2d.shape
    n = b2d.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:  # empty contraction: the product is zero
        for m0 in range(0, m, M_TILE):
            m1 = min(m, m0 + M_TILE)
            for n0 in range(0, n, N_TILE):
                n1 = min(n, n0 + N_TILE)
                mark = nc.mark()
                zero = nc.sbuf_tile((m1 - m0, n1 - n0), FP32)
                nc.vector.memset(zero, 0.0)
                _finish_block(nc, out2d[m0:m1, n0:n1], zero, 1.0, beta, bias2d, m0, m1, n0, n1, epilogue)
                nc.release_to(mark)
        return
    signs = cpu_host.rank_one_signs(NUMPY_TO_TORCH[a2d.dtype], m > 1, n > 1) if k == 1 else None
    if signs is not None:
        _rank_one(nc, out2d, a2d, b2d, alpha, beta, bias2d, epilogue,
                  from_zero=signs == "from_zero" and (bias2d is None or beta == 0))
        return
    a_t = a2d.T  # [K, M]
    k_tiles = math.ceil(k / K_TILE)
    k_ranges = [(k0, min(k, k0 + K_TILE)) for k0 in range(0, k, K_TILE)]
    b_cache = _b_cached(k_tiles, n, b2d.itemsize)
    lhs = _Operand(nc, a_t, _Operand.needs_transpose(a_t), cache=True)
    rhs = _Operand(nc, b2d, _Operand.needs_transpose(b2d), cache=b_cache)
    blocks = [(m0, min(m, m0 + M_TILE), n0, min(n, n0 + N_TILE)) for m0 in range(0, m, M_TILE)
              for n0 in range(0, n, N_TILE)]

    def operands(block):
        """Issue (or find cached) every tile a block reads."""
        m0, m1, n0, n1 = block
        return [(lhs.tile(k0, k1, m0, m1), rhs.tile(k0, k1, n0, n1)) for k0, k1 in k_ranges]

    # Software pipeline. When both operands fit in SBUF, every load is issued before any
    # compute, in order of first use: DMA streams the inputs back to back while TensorE
    # follows them, and the stores fill in after. Otherwise the loads of block i+1 are
    # issued before block i is evacuated and stored (double buffering).
    resident = operands_resident(k_tiles, m, n, a2d.itemsize, b2d.itemsize)
    if resident and lhs_tiles is not None:
        lhs.cache, lhs.live = lhs_tiles
    if resident and lhs_pieces and lhs.transpose:
        lhs.raw.update({key: list(pieces) for key, pieces in lhs_pieces.items() if key not in lhs.cache})
        lhs.borrowed = {id(rows) for pieces in lhs_pieces.values() for _, _, rows in pieces}
    if resident and rhs_tiles is not None:
        rhs.cache, rhs.live = rhs_tiles
    if resident:
        # Order of work: the first half of the K steps of the first few blocks (one PSUM bank
        # each), so TensorE has ready work while the rest of B streams in; then each block to
        # completion in turn, so blocks finish (and are stored) while later loads still run.
        # A product with an epilogue runs each block to completion from the start: its first block's
        # epilogue (VectorE/ScalarE: a norm's chain, silu(g) * u) then starts a block's K steps earlier and
        # runs under the later blocks' matmuls, instead of every block finishing in the last K steps with
        # the epilogues queued behind them (the compiled decoder block: 36.99 -> 35.65 us)
        head = range(0 if epilogue is not None else min(len(blocks), PIPELINE_BANKS))
        head_steps = max(1, len(k_ranges) // 2)
        order = [(b, j) for j in range(head_steps) for b in head]
        for b in range(len(blocks)):
            order += [(b, j) for j in range(head_steps if b in head else 0, len(k_ranges))]
        for b, j in order:  # every load, in order of first use
            m0, m1, n0, n1 = blocks[b]
            k0, k1 = k_ranges[j]
            lhs.prefetch(k0, k1, m0, m1)
            rhs.prefetch(k0, k1, n0, n1)
        keys = []
        for b, j in order:
            m0, m1, n0, n1 = blocks[b]
            k0, k1 = k_ranges[j]
            keys.append(((k0, k1, m0, m1), (k0, k1, n0, n1)))
        _run_resident(nc, order, keys, lhs, rhs, blocks, k_ranges, out2d, alpha, beta, bias2d, epilogue)
        return
    panels: dict[int, dict] = {blocks[0][0]: lhs.cache}
    current = operands(blocks[0])
    for i, block in enumerate(blocks):
        m0, m1, n0, n1 = block
        following = blocks[i + 1] if i + 1 < len(blocks) else None
        upcoming = None
        if following is not None:
            if following[0] != m0:
                lhs.cache = {}  # a new M panel; this one stays alive until its blocks are done
                panels[following[0]] = lhs.cache
            upcoming = operands(following)
        acc = nc.psum_tile((m1 - m0, n1 - n0), FP32)
        for j, (stationary, moving) in enumerate(current):
            nc.tensor.matmul(acc, stationary, moving, accumulate=j > 0)
        if not _finish_block(nc, out2d[m0:m1, n0:n1], acc, alpha, beta, bias2d, m0, m1, n0, n1, epilogue, True,
                             last=upcoming is None):
            nc.release(acc)
        if upcoming is None:
            break
        if following[0] != m0:
            for tile in panels.pop(m0).values():
                nc.release(tile)
        if not b_cache:
            keep = {id(mv) for _, mv in upcoming}
            for _, moving in current:
                if id(moving) not in keep:
                    nc.release(moving)
        current = upcoming


def _rank_one(nc, out2d: np.ndarray, a2d: np.ndarray, b2d: np.ndarray, alpha: float, beta: float,
              bias2d: np.ndarray | None, epilogue: Epilogue | None, from_zero: bool) -> None:
    """``_matmul_into`` of a contraction of one (K = 1: an outer product, a batch of one's weight gradient) where
    CPU's BLAS forms each element from the product itself (``cpu_host.rank_one_signs``): 0 * -1 is -0.0 there,
    where TensorE's sum into PSUM starts at +0.0 and gives +0.0 (lstm_cell's float32 weight gradients of a batch
    of one: 11,646 zero signs). Each block's products are formed on VectorE instead, A's column a per-partition
    scalar over B's row broadcast to the block's partitions, in fp32 as TensorE's are (the same values, the
    product's sign); ``from_zero`` (CPU's gemv without ``self``) adds them to +0.0 in the same instruction. alpha,
    beta * bias and the epilogue follow as for any block (``_finish_block``)."""
    m, n = out2d.shape
    for m0 in range(0, m, M_TILE):
        m1 = min(m, m0 + M_TILE)
        mark = nc.mark()
        column = nc.sbuf_tile((m1 - m0, 1), a2d.dtype)
        nc.dma.load(column, a2d[m0:m1])
        for n0 in range(0, n, N_TILE):
            n1 = min(n, n0 + N_TILE)
            block = nc.mark()
            row = nc.sbuf_tile((m1 - m0, n1 - n0), b2d.dtype)
            nc.dma.load(row, np.broadcast_to(b2d[:, n0:n1], (m1 - m0, n1 - n0)))
            products = nc.sbuf_tile((m1 - m0, n1 - n0), FP32)
            nc.vector.tensor_scalar(products, row, "multiply", column, dtype=FP32,
                                    **({"op1": "add", "scalar1": 0.0} if from_zero else {}))
            _finish_block(nc, out2d[m0:m1, n0:n1], products, alpha, beta, bias2d, m0, m1, n0, n1, epilogue)
            nc.release_to(block)
        nc.release_to(mark)


def _run_resident(nc, order, keys, lhs: _Operand, rhs: _Operand, blocks, k_ranges, out2d, alpha, beta, bias2d,
                  epilogue) -> None:
    """TensorE's program for operands loaded up front: the matmuls in ``order``, with the transposes
    of row-major operand tiles placed among them by a list scheduler. TensorE runs its instructions in
    program order, so a transpose placed before a matmul whose operands are ready, but whose own data
    is still in flight, would hold TensorE idle; a transpose placed just before the matmul that needs
    it would hold TensorE for its PSUM evacuation. Each slot therefore goes to whichever instruction
    can start first (the loads' completion times are known once they are issued, as a compiler's
    cost model knows them), the matmul on a tie, looking TRANSPOSE_WINDOW tiles ahead."""
    pending = list(dict.fromkeys(  # (operand, key) awaiting a transpose, in order of first use
        (operand, key) for pair in keys for operand, key in zip((lhs, rhs), pair) if operand.waiting(key)))
    first = 0
    accs: dict[int, Any] = {}
    for n, ((b, j), (lkey, rkey)) in enumerate(zip(order, keys)):
        while True:
            while first < len(pending) and not pending[first][0].waiting(pending[first][1]):
                first += 1
            window = [(op, key) for op, key in pending[first:first + TRANSPOSE_WINDOW] if op.waiting(key)]
            if not window:
                break
            # the timeline's answer goes through nc.choose, so that a replayed launch places them alike
            pick = nc.choose(lambda: _next_transpose(nc, window, lhs, rhs, lkey, rkey))
            if pick < 0:
                break
            operand, key = window[pick]
            operand.tile(*key)
        m0, m1, n0, n1 = blocks[b]
        if j == 0:
            accs[b] = nc.psum_tile((m1 - m0, n1 - n0), FP32)
        nc.tensor.matmul(accs[b], lhs.tile(*lkey), rhs.tile(*rkey), accumulate=j > 0)
        if j == len(k_ranges) - 1:
            if not _finish_block(nc, out2d[m0:m1, n0:n1], accs[b], alpha, beta, bias2d, m0, m1, n0, n1, epilogue,
                                 True, last=n == len(order) - 1):
                nc.release(accs[b])
            del accs[b]


def _next_transpose(nc, window: list, lhs: _Operand, rhs: _Operand, lkey: tuple, rkey: tuple) -> int:
    """Which transpose of ``window`` to place before the next matmul (its index), or -1 for the matmul: the
    one whose loads land first, unless the matmul can start before it could (see ``_run_resident``)."""
    tensor_free = nc.timeline.free["tensor"]
    blocked = lhs.waiting(lkey) or rhs.waiting(rkey)
    matmul_start = None if blocked else max(tensor_free, lhs.ready_at(lkey), rhs.ready_at(rkey))
    best = min(range(len(window)), key=lambda i: window[i][0].loaded_at(window[i][1]))
    operand, key = window[best]
    if matmul_start is not None and max(tensor_free, operand.loaded_at(key)) > matmul_start:
        return -1
    return best


# Shared with the compiler (device_impl.compiler.steps runs stablehlo.dot_general with it): the TensorE
# tiling of one 2-D product into an HBM view, inside a launch the caller owns.
matmul_into = _matmul_into


def prepare_rhs(nc, m: int, a2d_itemsize: int, b2d: np.ndarray, live: list) -> dict | None:
    """B's moving tiles of a product ``matmul_into`` will run later with ``rhs_tiles=(cache, live)``: loaded, and
    (a row-major B, a linear layer's ``W.t()``) transposed on TensorE, now, into SBUF tiles allocated in ``live``
    (a scope the caller frees after the product). The tiles are the ones the product would make itself, keyed
    as it asks for them; None (nothing made) unless B is transposed and the product's operands are resident
    (``matmul_into`` takes cached tiles only then). ``m``: rows of the product's A, for that test."""
    k, n = b2d.shape
    k_tiles = math.ceil(k / K_TILE)
    if m == 0 or n == 0 or k == 0 or not _Operand.needs_transpose(b2d):
        return None
    if not operands_resident(k_tiles, m, n, a2d_itemsize, b2d.itemsize):
        return None
    rhs = _Operand(nc, b2d, True, cache=True)
    rhs.live = live
    keys = [(k0, min(k, k0 + K_TILE), n0, min(n, n0 + N_TILE)) for n0 in range(0, n, N_TILE)
            for k0 in range(0, k, K_TILE)]
    for key in keys:  # every load first (DMA streams them back to back), then the transposes as they land
        rhs.prefetch(*key)
    for key in keys:
        rhs.tile(*key)
    return rhs.cache


needs_transpose = _Operand.needs_transpose  # compiler.layout asks it of a weight's B at build time

LAYOUT_WINDOW = 4  # [K, N] blocks whose loads run ahead of the block being transposed and stored


def layout_into(nc, dst2d: np.ndarray, src2d: np.ndarray) -> None:
    """dst2d[K, N] (contiguous HBM) = src2d[K, N] (a row-major matrix read transposed: a linear layer's
    ``W.t()``) in TensorE's moving-operand layout, each [K <= 128, N <= 512] block loaded as its K-contiguous
    rows, transposed on TensorE into PSUM, evacuated and stored: the device program behind the compiler's
    weight layout (``compiler.layout``), the same loads and transposes a product makes of such a B, once."""
    k, n = src2d.shape
    operand = _Operand(nc, src2d, needs_transpose(src2d), cache=False)
    keys = [(k0, min(k, k0 + K_TILE), n0, min(n, n0 + N_TILE)) for k0 in range(0, k, K_TILE)
            for n0 in range(0, n, N_TILE)]
    for key in keys[:LAYOUT_WINDOW]:
        operand.prefetch(*key)
    for i, key in enumerate(keys):
        if i + LAYOUT_WINDOW < len(keys):
            operand.prefetch(*keys[i + LAYOUT_WINDOW])
        tile = operand.tile(*key)
        k0, k1, n0, n1 = key
        nc.dma.store(dst2d[k0:k1, n0:n1], tile)
        nc.release(tile)


def psum_to_sbuf(nc, dst, src, scale: float = 1.0) -> None:
    """dst = scale * src out of PSUM, on whichever of the two PSUM readers (ScalarE, VectorE) would finish it
    first (each engine's cost rule, from when the PSUM tile is ready and the engine is next free), as a
    compiler's scheduler would balance them. (Whichever engine frees up first was the rule before: ScalarE's
    larger fixed cost then held a chain of transposes' evacuations while VectorE idled, the decoder's down
    projection's A^T among them.)"""
    if nc.choose(lambda: scalar_finishes_first(nc, dst.free, src.root.ready)):
        nc.scalar.activation(dst, src, "identity", scale=float(scale))
    elif scale == 1:
        nc.vector.tensor_copy(dst, src)
    else:
        nc.vector.tensor_scalar(dst, src, "multiply", float(scale), dtype=FP32)


def _finish_block(nc, out_block: np.ndarray, acc, alpha: float, beta: float, bias2d, m0, m1, n0, n1,
                  epilogue: Epilogue | None = None, may_hold: bool = False, last: bool = False) -> bool:
    """PSUM -> SBUF (x alpha), + beta * bias, -> HBM, in 256-column chunks shared between ScalarE
    and VectorE: chunks evacuate in parallel and each is stored as soon as it is ready, which
    shortens the tail after the last matmul.

    True when the epilogue took ``acc`` itself (``holds``: an epilogue that reads the product in PSUM and runs
    later, interleaved with the next blocks' epilogues, frees it; only where the caller's ``acc`` is its own
    allocation, ``may_hold``): the caller must then not release it."""
    mark = nc.mark()
    rows, cols = acc.shape
    with_bias = bias2d is not None and beta != 0
    # an epilogue whose ops only read the product (``reads_psum``) reads an fp32 product in PSUM itself, as
    # VectorE and ScalarE can: the evacuation would copy it exactly (alpha 1, no bias, fp32 to fp32), an
    # instruction on the chain before the epilogue's first op
    direct = (epilogue is not None and getattr(epilogue, "reads_psum", False) and not with_bias and alpha == 1
              and out_block.dtype == FP32)
    # an epilogue that keeps the evacuated blocks (``keeps``: a scope its caller holds and frees; the compiler's
    # ``build.keep_products``) gets each one allocated there, so it outlives this block
    keeps = None if epilogue is None or with_bias else getattr(epilogue, "keeps", None)
    holds = getattr(epilogue, "holds", None) if direct and may_hold else None
    if holds is not None:
        holds.append(acc)  # before the epilogue sees its blocks: it defers only the blocks of tiles it holds
    chunk = EVACUATION_CHUNK
    if last and cols > TAIL_CHUNK and getattr(epilogue, "splittable", False) and not with_bias:
        # the product's last block: nothing else runs under its epilogue and store, so in halves the first
        # half's store overlaps the second half's epilogue (an elementwise group's, whose blocks may be any)
        chunk = max(TAIL_CHUNK, -(-min(cols, EVACUATION_CHUNK) // 2))
    for c0 in range(0, cols, chunk):
        c1 = min(cols, c0 + chunk)
        part = acc[:, c0:c1]
        if direct:
            epilogue(nc, part, m0, m1, n0 + c0, n0 + c1)
            continue
        if keeps is not None:
            with nc.stream(keeps):
                result = nc.sbuf_tile((rows, c1 - c0), out_block.dtype)
        else:
            result = nc.sbuf_tile((rows, c1 - c0), FP32 if with_bias else out_block.dtype)
        psum_to_sbuf(nc, result, part, alpha)
        if with_bias:
            bias = nc.sbuf_tile(result.shape, bias2d.dtype)
            nc.dma.load(bias, bias2d[m0:m1, n0 + c0:n0 + c1])
            if beta != 1:
                scaled = nc.sbuf_tile(result.shape, FP32)
                nc.vector.tensor_scalar(scaled, bias, "multiply", float(beta), dtype=FP32)
                bias = scaled
            final = nc.sbuf_tile(result.shape, out_block.dtype)
            nc.vector.tensor_tensor(final, result, bias, "add", dtype=FP32)
            result = final
        if epilogue is None:
            nc.dma.store(out_block[:, c0:c1], result)
        else:
            epilogue(nc, result, m0, m1, n0 + c0, n0 + c1)
    nc.release_to(mark)
    return holds is not None


def _check_float(name: str, *tensors: torch.Tensor) -> None:
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        a, b = sorted(dtypes, key=str)[:2]
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_cname(a)} != {_cname(b)}")


def _cname(dtype: torch.dtype) -> str:
    from device_impl.kernels.common import SCALAR_TYPE_NAMES

    return {"Float": "float", "Half": "c10::Half", "BFloat16": "c10::BFloat16", "Double": "double",
            "Long": "long int", "Int": "int"}.get(SCALAR_TYPE_NAMES[dtype], SCALAR_TYPE_NAMES[dtype])


def _mm_shapes(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    if a.dim() != 2:
        raise RuntimeError("self must be a matrix")
    if b.dim() != 2:
        raise RuntimeError("mat2 must be a matrix")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    return a.shape[0], a.shape[1], b.shape[1]


def _mm_meta(args: dict) -> tuple:
    a, b = args["self"], args["mat2"]
    m, _, n = _mm_shapes(a, b)
    _check_float("mm", a, b)
    return (m, n), a.dtype, (a, b)


class MatmulPlan(NamedTuple):
    """One mm/addmm/bmm/baddbmm launch, resolved from its arguments: ``run`` executes it inside a
    launch. ``batched``: out, a, b (and bias) have a leading batch dimension. Adaptive eager
    (device_impl.eager) queues plans and runs them with an epilogue of fused elementwise ops."""

    name: str
    out: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    alpha: float = 1.0
    beta: float = 0.0
    bias: torch.Tensor | None = None
    batched: bool = False

    def run(self, nc, epilogue: Callable[..., None] | None = None,
            lhs_tiles: tuple[dict, list] | None = None) -> None:
        """The launch body; ``epilogue(nc, tile, batch, m0, m1, n0, n1)`` replaces each output store.
        ``lhs_tiles``: ``_matmul_into``'s, for a product that is not batched (adaptive eager runs consecutive
        products of one A in one launch, its stationary tiles loaded and transposed once)."""
        out_view, a_view, b_view = hbm(self.out), hbm(self.a), hbm(self.b)
        bias_view = None if self.bias is None else np.broadcast_to(hbm(self.bias), tuple(self.out.shape))
        if not self.batched:
            tail = None if epilogue is None else (lambda nc_, t, *box: epilogue(nc_, t, 0, *box))
            _matmul_into(nc, out_view, a_view, b_view, self.alpha, self.beta, bias_view, tail, lhs_tiles)
            return
        for i in range(self.out.shape[0]):
            tail = None if epilogue is None else (lambda nc_, t, *box, i=i: epilogue(nc_, t, i, *box))
            _matmul_into(nc, out_view[i], a_view[i], b_view[i], self.alpha, self.beta,
                         None if bias_view is None else bias_view[i], tail)


def _planned(plan: Callable[[torch.Tensor, dict], MatmulPlan]):
    """A family compute running ``plan(out, args)`` in one launch; ``compute.plan`` exposes the plan."""

    def compute(out: torch.Tensor, args: dict) -> None:
        p = plan(out, args)
        with launch(p.name, out.device.index) as nc:
            p.run(nc)

    compute.plan = plan
    return compute


def _mm_plan(out: torch.Tensor, args: dict) -> MatmulPlan:
    return MatmulPlan("mm", out, args["self"], args["mat2"])


_mm_compute = _planned(_mm_plan)
register_family("mm", _mm_compute, _mm_meta, dtypes=FLOAT_DTYPES)


def _addmm_meta(args: dict) -> tuple:
    bias, a, b = args["self"], args["mat1"], args["mat2"]
    m, _, n = _mm_shapes(a, b)
    _check_float("addmm", a, b)
    try:
        torch.broadcast_shapes(tuple(bias.shape), (m, n))
    except RuntimeError:
        raise RuntimeError(f"The expanded size of the tensor ({n}) must match the existing size "
                           f"({bias.shape[-1] if bias.dim() else 1}) at non-singleton dimension 1.  Target sizes: "
                           f"[{m}, {n}].  Tensor sizes: {list(bias.shape)}") from None
    return (m, n), promote(bias, a), (bias, a, b)


def _addmm_plan(out: torch.Tensor, args: dict) -> MatmulPlan:
    bias, a, b = args["self"], args["mat1"], args["mat2"]
    beta, alpha = scalar_of(args.get("beta", 1)), scalar_of(args.get("alpha", 1))
    return MatmulPlan("addmm", out, a, b, alpha, beta, bias)


_addmm_compute = _planned(_addmm_plan)
register_family("addmm", _addmm_compute, _addmm_meta, dtypes=FLOAT_DTYPES)


def _bmm_shapes(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int, int]:
    if a.dim() != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if b.dim() != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{a.shape[0]}, "
                           f"{a.shape[2]}] but got: [{b.shape[0]}, {b.shape[1]}].")
    return a.shape[0], a.shape[1], a.shape[2], b.shape[2]


def _bmm_meta(args: dict) -> tuple:
    a, b = args["self"], args["mat2"]
    batch, m, _, n = _bmm_shapes(a, b)
    _check_float("bmm", a, b)
    return (batch, m, n), a.dtype, (a, b)


def _bmm_plan(out: torch.Tensor, args: dict) -> MatmulPlan:
    return MatmulPlan("bmm", out, args["self"], args["mat2"], batched=True)


_bmm_compute = _planned(_bmm_plan)
register_family("bmm", _bmm_compute, _bmm_meta, dtypes=FLOAT_DTYPES)


def _baddbmm_meta(args: dict) -> tuple:
    bias, a, b = args["self"], args["batch1"], args["batch2"]
    batch, m, _, n = _bmm_shapes(a, b)
    _check_float("baddbmm", a, b)
    torch.broadcast_shapes(tuple(bias.shape), (batch, m, n))
    return (batch, m, n), promote(bias, a), (bias, a, b)


def _baddbmm_plan(out: torch.Tensor, args: dict) -> MatmulPlan:
    bias, a, b = args["self"], args["batch1"], args["batch2"]
    beta, alpha = scalar_of(args.get("beta", 1)), scalar_of(args.get("alpha", 1))
    return MatmulPlan("baddbmm", out, a, b, alpha, beta, bias, batched=True)


_baddbmm_compute = _planned(_baddbmm_plan)
register_family("baddbmm", _baddbmm_compute, _baddbmm_meta, dtypes=FLOAT_DTYPES)
