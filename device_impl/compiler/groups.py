"""Running a fused group on the engines: DMA in once, every op on SBUF tiles, DMA out once.

Flat groups walk their N elements in [P, F] tiles of consecutive elements
(F from the memory plan). Reduce groups walk rows: tiles are [P rows, C
columns] of the iteration space permuted so the reduced dims are the
columns; a reduction writes a [P, 1] tile (VectorE ``tensor_reduce``,
fp32 accumulation for floats), ops on per-row values work on [P, 1] tiles,
and full ops read them as per-partition scalars. When the columns do not
fit SBUF and no full op reads a per-row value, columns are processed in
chunks and the reductions accumulate partial results.

External values are DMA'd through their access patterns (strided,
broadcast, sliced, reversed views): a value broadcast along all reduced dims
is loaded as a [P, 1] column instead of being replicated. Every op's result
tile has the op's StableHLO element type, so narrow floats are rounded to
nearest-even after each op exactly as the eager kernels store them.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable

import numpy as np

from device_impl.compiler import flat_order, iotas, lowering
from device_impl.compiler.ir import Op, TensorType, numpy_dtype
from device_impl.compiler.memory import GROUP_SBUF_BYTES, ROW_TILE_RESERVE
from device_impl.engine.constants import PLATFORM
from device_impl.engine.dtypes import BF16, FP32, compute_dtype, is_float
from device_impl.engine.core import release_live_to, scalar_finishes_first
from device_impl.engine.memory import Tile
from device_impl.kernels.common import P
from device_impl.kernels.reduction.tiles import _flat_pieces, _identity

IDENTITY = {"add": 0, "multiply": 1, "logical_or": False, "logical_and": True}


def _is_identity(alu: str, init: Any, dtype: np.dtype) -> bool:
    if alu in IDENTITY:
        return init == IDENTITY[alu]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return init == (info.min if alu == "maximum" else info.max)
    if dtype == np.bool_:
        return init == (alu == "minimum")
    return init == (float("-inf") if alu == "maximum" else float("inf"))


class _Op:
    __slots__ = ("index", "name", "slot", "args", "op", "in_types", "dtype", "cls", "emit", "alu", "init_combine",
                 "reduce_dtype", "init", "scalar_form", "pre", "merged", "accumulate", "accumulated")

    def fuse_after(self, first: "_Op", full: int, second_first: bool) -> None:
        """Become ``(x <first> s) <self> t`` in one VectorE scalar_tensor_tensor (``_merge_scalar_tensor_tensor``):
        ``first``'s args are x (a full tile, at position ``full``) and s (a per-row value or an immediate); this
        op's other operand is t, ``second_first`` when first's result was this op's first operand."""
        x, scalar = first.args[full], first.args[1 - full]
        t = self.args[1] if second_first else self.args[0]
        attrs = {"op0": first.name, "op1": self.name, "reverse0": full == 1, "reverse1": not second_first,
                 "first": first.op, "first_types": first.in_types, "second": self.op, "second_types": self.in_types}
        self.op = Op("scalar_tensor_tensor", (), (), self.op.results, attrs)
        self.name = "scalar_tensor_tensor"
        self.args = [x, scalar, t]
        self.in_types = [first.in_types[full], first.in_types[1 - full], self.in_types[1 if second_first else 0]]
        self.emit = _emit_scalar_tensor_tensor
        self.scalar_form = None

    def __init__(self, index: int, entry: dict, cls: str):
        self.index = index
        self.name = entry["op"]
        self.slot = entry["slot"]
        self.args = [tuple(a) for a in entry["args"]]
        self.dtype = numpy_dtype(entry["dtype"])
        self.cls = cls
        self.in_types = [TensorType((), d) for d in entry["in_types"]]
        self.op = Op(self.name, (), (), (TensorType((), entry["dtype"]),), entry.get("attrs", {}))
        # instruction selection (``_select``): how ScalarE could run this op, the affine op folded into this
        # activation, whether this op was folded into the next, and the reduction this op's pass sums
        self.scalar_form: str | None = None
        self.pre: _Op | None = None
        self.merged = False
        self.accumulate: _Op | None = None
        self.accumulated = False
        if self.name == "reduce":
            self.alu = entry["attrs"]["alu"]
            self.init = entry["attrs"]["init"]
            self.reduce_dtype = compute_dtype(numpy_dtype(entry["in_types"][0]))
            self.init_combine = not _is_identity(self.alu, self.init, self.dtype)
            self.emit = None
        else:
            self.emit = _GPSIMD_EMITS[self.name] if self.name in _GPSIMD_EMITS else lowering.ELEMENTWISE[self.name]


def _emit_scalar_tensor_tensor(nc, out: Tile, args: list, op: Op, in_types: list) -> None:
    """(x op0 s) op1 t as VectorE's one scalar_tensor_tensor where x and t are tiles of out's shape and s a [P, 1]
    tile or an immediate (an RMS norm's (h * rstd) * weight: ScalarE's or VectorE's pass for h * rstd, then
    VectorE's multiply, made one VectorE pass reading two tiles); else the two ops as they were. The same bits
    either way: the intermediate is rounded to fp32 as the first op's fp32 tile was."""
    x, scalar, t = args
    at = op.attrs
    if (isinstance(x, Tile) and isinstance(t, Tile) and x.shape == t.shape == out.shape
            and (not isinstance(scalar, Tile) or scalar.shape == (x.partitions, 1))):
        nc.vector.scalar_tensor_tensor(out, x, at["op0"], scalar, at["op1"], t, reverse0=at["reverse0"],
                                       reverse1=at["reverse1"], dtype=FP32)
        return
    mid = nc.sbuf_tile(x.shape, FP32)
    lowering.ELEMENTWISE[at["op0"]](nc, mid, [scalar, x] if at["reverse0"] else [x, scalar], at["first"],
                                    at["first_types"])
    lowering.ELEMENTWISE[at["op1"]](nc, out, [t, mid] if at["reverse1"] else [mid, t], at["second"],
                                    at["second_types"])


def _emit_rotate(nc, out: Tile, args: list, op: Op, in_types: list) -> None:
    """A rotate_half (build.rotations) of a tile holding whole rotation units along its free axis: each unit's
    blocks in reverse order, the marked ones negated, as one GpSimd program over the tile (a permutation within
    each partition, which no VectorE pass expresses); GpSimd's cost rule over the elements it reads and writes."""
    n, unit, negated = op.attrs["blocks"], op.attrs["unit"], op.attrs["negated"]

    def program(dst: np.ndarray, src: np.ndarray) -> None:
        _rotate_into(dst, src, n, unit, negated)

    nc.gpsimd.run("rotate_blocks", program, (out,), (args[0],))


def _rotate_into(dst: np.ndarray, src: np.ndarray, n: int, unit: int, negated: list) -> None:
    """dst = rotate_half(src) along the free axis (whole units of ``unit`` columns, ``n`` blocks each)."""
    p, f = src.shape
    a = src.reshape(p, f // unit, n, unit // n)
    b = dst.reshape(p, f // unit, n, unit // n)
    for k in range(n):
        if negated[k]:
            np.negative(a[:, :, n - 1 - k], out=b[:, :, k])
        else:
            b[:, :, k] = a[:, :, n - 1 - k]


def _emit_rotate_multiply(nc, out: Tile, args: list, op: Op, in_types: list) -> None:
    """rotate_half(x) * y for an fp32 rotate whose one reader is an fp32 multiply by a full tile (rotary's
    rotate_half(q) * sin, ``GroupRunner``'s ``rotated`` ops): one GpSimd program that permutes each partition's
    elements and multiplies, instead of the permutation on GpSimd and the multiply on VectorE, which carries the
    rest of the rotary (q * cos, the sum), where that finishes no later than the two instructions would, both
    judged by the engines' cost rules from when the operands are ready and each engine is next free (as
    ``scalar_finishes_first`` places an op between VectorE and ScalarE). The same bits either way: the permutation
    and negation are exact, and the product is the fp32 multiply VectorE's tensor_tensor computes. GpSimd's cost
    rule over the elements it reads (both tiles) and writes."""
    n, unit, negated = op.attrs["blocks"], op.attrs["unit"], op.attrs["negated"]
    x, y = args
    if not (isinstance(y, Tile) and y.shape == x.shape == out.shape) or not _gpsimd_multiplies_first(nc, x, y):
        rot = nc.sbuf_tile(x.shape, x.dtype)
        _emit_rotate(nc, rot, [x], op, in_types[:1])
        nc.vector.tensor_tensor(out, rot, y, "multiply", dtype=FP32)
        return

    def program(dst: np.ndarray, src: np.ndarray, factor: np.ndarray) -> None:
        _rotate_into(dst, src, n, unit, negated)
        np.multiply(dst, factor, out=dst)

    nc.gpsimd.run("rotate_multiply", program, (out,), (x, y))


def _gpsimd_multiplies_first(nc, x: Tile, y: Tile) -> bool:
    """Would one GpSimd program computing rotate_half(x) * y end no later than the rotation on GpSimd followed by
    the multiply on VectorE? Each engine's cost rule (isa: GpSimd's elements read and written, VectorE's columns
    per tile read), from when x and y are ready and each engine is next free."""
    p, free_at = nc.vector.platform, nc.timeline.free
    gpsimd_ns = 1e9 / p.gpsimd_hz

    def gpsimd(elements: int) -> float:
        return (p.instruction_overhead_cycles + math.ceil(elements / p.gpsimd_elements_per_cycle)) * gpsimd_ns

    size = x.data.size
    start = max(x.root.ready, free_at["gpsimd"])
    fused = max(start, y.root.ready) + gpsimd(3 * size)
    rotated = start + gpsimd(2 * size)
    multiplied = max(rotated, y.root.ready, free_at["vector"]) + \
        (p.instruction_overhead_cycles + 2 * x.free) / p.vector_hz * 1e9
    return fused <= multiplied


# ops GpSimd runs as programs of its own (build.rotations' rotate_half, and that rotate fused with its multiply)
_GPSIMD_EMITS = {"rotate": _emit_rotate, "rotate_multiply": _emit_rotate_multiply}


_NARROW = frozenset({BF16, np.dtype(np.float16)})
MAX_IN_FLIGHT = 3  # row blocks a whole-row group keeps in flight (when SBUF holds them)
SBUF_MARGIN = 2048  # bytes per partition kept free when deciding how many blocks fit
# The forms of ``f(scale * x + bias)`` (ScalarE's activation, computed in fp32 with one rounding per step)
# that give an op's exact result: add/subtract/multiply of a full tile by a per-row value or an immediate
# (x - r is x + (-r), r - x is -x + r, both exact in IEEE arithmetic), and x * x (``square``).
AFFINE = frozenset({"add", "subtract", "multiply"})


def _select(ops: list[_Op], loads: set[int], stores: set[int], slot_dtype: list[np.dtype],
            slot_cls: list[str] | None = None) -> list[_Op]:
    """Instruction selection over a group's ops, each rewrite keeping every result bit-identical.

    The planner lists StableHLO ops one to one; the eager kernels do better in four ways, and so
    does this:

    * a widening convert (bf16/fp16 -> fp32) is dropped: its readers compute in fp32 from the narrow
      tile (widening is exact, and every emitter reads its operands in fp32);
    * an fp32 op whose only reader is a narrowing convert writes the narrow tile itself: the engines
      compute in fp32 and round once on store, which is what the convert did;
    * add/subtract/multiply by a per-row value or an immediate, and x * x, may run on ScalarE as an
      activation (``scalar_form``), so VectorE and ScalarE share a group's work (the engine is chosen
      when the op is issued: whichever finishes it first);
    * such an op with an fp32 result read only by an activation is folded into that activation's
      scale/bias (the eager softmax's exp(x - max)), and a row sum of an fp32 ScalarE result is the
      activation's ``accumulate`` output (its sum in the same pass, as the eager kernels take it).
    """
    alias: dict[int, int] = {}
    kept: list[_Op] = []
    for op in ops:
        op.args = [("slot", alias.get(x, x)) if kind == "slot" else (kind, x) for kind, x in op.args]
        src = op.args[0]
        if (op.name == "convert" and op.dtype == FP32 and src[0] == "slot" and slot_dtype[src[1]] in _NARROW
                and op.slot not in stores):
            alias[op.slot] = src[1]
            continue
        kept.append(op)
    ops = kept
    readers: dict[int, list[_Op]] = {}
    for op in ops:
        for kind, x in op.args:
            if kind == "slot":
                readers.setdefault(x, []).append(op)
    producer = {op.slot: op for op in ops}
    kept = []
    for op in ops:
        src = op.args[0]
        if op.name == "convert" and op.dtype in _NARROW and src[0] == "slot":
            p = producer.get(src[1])
            if (p is not None and p.name in lowering.ROUNDS_ONCE and p.dtype == FP32 and src[1] not in stores
                    and src[1] not in loads and readers.get(src[1]) == [op]):
                p.slot, p.dtype = op.slot, op.dtype
                producer[op.slot] = p
                continue
        kept.append(op)
    ops = kept
    for op in ops:
        if op.name in AFFINE and is_float(op.dtype) and all(is_float(t.np_dtype) for t in op.in_types):
            slots = [x for kind, x in op.args if kind == "slot"]
            if op.name == "multiply" and len(slots) == 2 and slots[0] == slots[1]:
                op.scalar_form = "square"
            else:
                op.scalar_form = "affine"
        elif (op.name == "power" and op.dtype == FP32 and all(t.np_dtype == FP32 for t in op.in_types)
              and op.args[0][0] == "slot" and op.args[1][0] == "imm" and float(op.args[1][1]) == 2.0):
            # x ** 2 (an RMS norm's mean of squares): x * x, exactly (x * x in fp32 is correctly rounded, and
            # so is the power: the square of a float32 is exact in the float64 pow computes in), so it may
            # run on ScalarE as ``square`` and its row sum come from the same pass (``accumulate``)
            op.scalar_form = "square"
        if op.name == "divide" and is_float(op.dtype) and [k for k, _ in op.args] == ["slot", "slot"]:
            total = producer.get(op.args[1][1])
            if total is not None and total.name == "reduce" and total.alu == "add" and total.args == op.args[:1]:
                op.scalar_form = "normalize"  # x / sum(x): softmax's last step, as the eager kernel computes it
    readers = {}
    for op in ops:
        for kind, x in op.args:
            if kind == "slot":
                readers.setdefault(x, []).append(op)
    for i, op in enumerate(ops):
        if op.scalar_form == "affine" and op.dtype == FP32 and op.slot not in stores:
            users = readers.get(op.slot, [])
            if len(users) == 1 and users[0].name in lowering.ACTIVATION_OPS and users[0].pre is None:
                users[0].pre, op.merged = op, True
        if op.name == "reduce" and op.alu == "add" and not op.init_combine and op.dtype == FP32 \
                and op.reduce_dtype == FP32 and op.args[0][0] == "slot":
            p = producer.get(op.args[0][1])
            if p is not None and p.dtype == FP32 and p.accumulate is None and not p.merged \
                    and (p.scalar_form is not None or p.name in lowering.ACTIVATION_OPS):
                p.accumulate, op.accumulated = op, True
    if slot_cls is not None:
        ops = _merge_scalar_tensor_tensor(ops, stores, slot_cls)
    for i, op in enumerate(ops):
        op.index = i
    return ops


# (x <op0> s) <op1> t as one VectorE scalar_tensor_tensor: op0 an fp32 add/multiply of a full tile by a per-row
# value or an immediate, op1 an fp32 add/multiply/subtract of that result and another full tile (the ALU's names)
_STT_FIRST = frozenset({"add", "multiply"})
_STT_SECOND = frozenset({"add", "multiply", "subtract"})


def _merge_scalar_tensor_tensor(ops: list[_Op], stores: set[int], slot_cls: list[str]) -> list[_Op]:
    """Instruction selection: an fp32 op of a full tile by a per-row value or an immediate (``scalar_form``
    "affine": an RMS norm's h * rstd) whose only reader is an fp32 op of its result and another full tile (that
    result times the norm's weight) becomes the reader's one VectorE scalar_tensor_tensor (NKI's: (x op0 s) op1 t,
    the intermediate rounded to fp32: the same bits), instead of a ScalarE or VectorE pass and a VectorE pass in
    a chain: the norm's tail is one instruction shorter."""
    readers: dict[int, list[_Op]] = {}
    for op in ops:
        for kind, x in op.args + (op.pre.args if op.pre is not None else []):
            if kind == "slot":
                readers.setdefault(x, []).append(op)

    def plain(op: _Op) -> bool:
        return (op.dtype == FP32 and all(t.np_dtype == FP32 for t in op.in_types) and op.pre is None
                and op.accumulate is None and not op.merged and not op.accumulated and len(op.args) == 2)

    def full(arg) -> bool:
        return arg[0] == "slot" and slot_cls[arg[1]] == "full"

    dropped: set[int] = set()
    for first in ops:
        if first.name not in _STT_FIRST or first.scalar_form != "affine" or not plain(first) \
                or first.slot in stores or first.cls != "full":
            continue
        fulls = [i for i, arg in enumerate(first.args) if full(arg)]
        if len(fulls) != 1:
            continue
        other = first.args[1 - fulls[0]]
        if other[0] == "slot" and slot_cls[other[1]] != "row":
            continue
        users = readers.get(first.slot, [])
        if len(users) != 1 or users[0].name not in _STT_SECOND or not plain(users[0]) or users[0].cls != "full":
            continue
        second = users[0]
        a, b = second.args
        if a == ("slot", first.slot) and full(b) and b[1] != first.slot:
            second_first = True
        elif b == ("slot", first.slot) and full(a) and a[1] != first.slot:
            second_first = False
        else:
            continue
        second.fuse_after(first, fulls[0], second_first)
        dropped.add(id(first))
    return [op for op in ops if id(op) not in dropped]


def _fuse_rotate_multiply(entries: list[dict], stores: set[int]) -> list[dict]:
    """The op entries with each fp32 rotate whose only reader is an fp32 multiply by another slot (rotary's
    rotate_half(q) * sin) made one ``rotate_multiply`` entry in that multiply's place (``_emit_rotate_multiply``),
    so GpSimd takes the multiply off VectorE; a rotate that is stored or read elsewhere stays as it is."""
    readers: dict[int, list[int]] = {}
    for i, e in enumerate(entries):
        for kind, x in e["args"]:
            if kind == "slot":
                readers.setdefault(x, []).append(i)
    fused: dict[int, dict] = {}
    dropped: set[int] = set()
    for i, e in enumerate(entries):
        if e["op"] != "rotate" or e["dtype"] != "float32" or e["slot"] in stores:
            continue
        users = readers.get(e["slot"], [])
        if len(users) != 1:
            continue
        m = entries[users[0]]
        if (m["op"] != "multiply" or m["dtype"] != "float32" or any(t != "float32" for t in m["in_types"])
                or [k for k, _ in m["args"]] != ["slot", "slot"] or m["args"][0][1] == m["args"][1][1]):
            continue
        other = m["args"][1] if m["args"][0][1] == e["slot"] else m["args"][0]
        fused[users[0]] = dict(m, op="rotate_multiply", args=[list(e["args"][0]), list(other)], attrs=e["attrs"])
        dropped.add(i)
    return [fused.get(i, e) for i, e in enumerate(entries) if i not in dropped]


class Access2D:
    """A strided HBM view of shape (A..., B...) read or written as a [rows, cols] matrix.

    Rows are A's elements in row-major order, columns B's. ``pieces`` cuts a
    rectangle into sub-rectangles that are plain strided 2-D numpy views
    (one DMA access pattern each): usually one; more when A or B do not
    merge into a single stride (a reduction over a middle dimension)."""

    def __init__(self, x: np.ndarray, na: int):
        self.x = x
        a, b = x.shape[:na], x.shape[na:]
        self.na, self.a, self.b = na, a, b
        self.ka = _merge_suffix(x, 0, na)
        self.kb = _merge_suffix(x, na, x.ndim)
        self.inner_a = math.prod(a[na - self.ka:])
        self.inner_b = math.prod(b[len(b) - self.kb:])

    def pieces(self, r0: int, r1: int, c0: int, c1: int):
        x, na, ka, kb = self.x, self.na, self.ka, self.kb
        outer_a, outer_b = self.a[:na - ka], self.b[:len(self.b) - kb]
        for ra, la, ha in _split(r0, r1, self.inner_a):
            ia = np.unravel_index(ra, outer_a) if outer_a else ()
            for rb, lb, hb in _split(c0, c1, self.inner_b):
                ib = np.unravel_index(rb, outer_b) if outer_b else ()
                index = tuple(int(i) for i in ia) + (slice(None),) * ka + tuple(int(i) for i in ib) \
                    + (slice(None),) * kb
                sub = np.reshape(x[index], (self.inner_a, self.inner_b), copy=False)
                yield (ra * self.inner_a + la - r0, ra * self.inner_a + ha - r0,
                       rb * self.inner_b + lb - c0, rb * self.inner_b + hb - c0, sub[la:ha, lb:hb])


def _split(lo: int, hi: int, inner: int):
    """Cut [lo, hi) at multiples of ``inner``: (outer index, start, stop) within each block."""
    while lo < hi:
        outer, start = divmod(lo, inner)
        stop = min(inner, start + hi - lo)
        yield outer, start, stop
        lo += stop - start


def _merge_suffix(x: np.ndarray, lo: int, hi: int) -> int:
    """How many trailing axes of the axis range [lo, hi) of ``x`` merge into one strided axis."""
    shape, strides = x.shape[lo:hi], x.strides[lo:hi]
    n = len(shape)
    if n == 0:
        return 0
    k, stride, count = 1, strides[-1], shape[-1]
    for j in range(n - 2, -1, -1):
        if shape[j] == 1:
            k += 1
        elif count == 1:
            k, stride, count = k + 1, strides[j], shape[j]
        elif strides[j] == stride * count:
            k, count = k + 1, count * shape[j]
        else:
            break
    return k


def _scalar_first(nc, free: int, vector_reads: int, reads: list) -> bool:
    """Would ScalarE finish an op over ``free`` columns no later than VectorE (reading ``vector_reads`` tiles)?
    (Both engines' cost rules, from when the operands ``reads`` are ready and each engine is next free:
    the eager kernels balance the same way.)"""
    ready = max((t.root.ready for t in reads if isinstance(t, Tile)), default=0.0)
    return scalar_finishes_first(nc, free, ready, vector_reads)


def _period(view: np.ndarray) -> int:
    """The period of ``view``'s row-major elements: the size of the block after its leading broadcast dims
    (stride 0 or size 1), which every index of the outer dims repeats (rotary's cos/sin [S, D] read as
    [B, H, S, D]): element i is element i % period. The element count where no leading dim broadcasts."""
    k = 0
    while k < view.ndim and (view.strides[k] == 0 or view.shape[k] == 1):
        k += 1
    return int(np.prod(view.shape[k:], dtype=np.int64))


# per partition: the most a flat group keeps of its repeated loads across tiles (``_repeated_loads``), a quarter
# of one iteration's budget, so the kept tiles and an iteration's own fit SBUF together
KEPT_LOAD_BYTES = GROUP_SBUF_BYTES // 4


def _repeated_loads(loads: dict, ranges: list, written: set[int]) -> dict[int, tuple[int, frozenset]]:
    """slot -> (period, keys) of the flat group's loads that hold the same elements in two or more of ``ranges``
    (tiles whose starts agree modulo the load's period and that have the same shape: ``keys`` lists those
    tiles' (start % period, size, p, f)): such a tile is loaded once and kept for the later tiles, instead of a
    DMA of the same bytes per tile (the decoder's rotary: cos and sin, broadcast over batch and heads, were
    read again for every [128, 256] tile of q). A slot an op also writes holds other values later in the tile
    (slots are registers), so it is never kept. The kept tiles stay in SBUF for the whole group, so a slot is
    kept only while all of them fit ``KEPT_LOAD_BYTES`` per partition (a bias over a long row, broadcast over
    a few rows, repeats once per row but would need the whole row in SBUF): the others load per tile."""
    out: dict[int, tuple[int, frozenset]] = {}
    budget = KEPT_LOAD_BYTES
    for slot, view in loads.items():
        if slot in written:
            continue
        period = _period(view)
        if period >= view.size:
            continue
        counts = Counter((start % period, stop - start, p, f) for start, stop, p, f in ranges)
        repeated = frozenset(key for key, n in counts.items() if n > 1)
        held = sum(f for _, _, _, f in repeated) * view.dtype.itemsize
        if repeated and held <= budget:
            out[slot] = (period, repeated)
            budget -= held
    return out


# per partition: rows an epilogue may hoist (the matmul's operand tiles share SBUF with it; a layer norm's
# weight row of 4096 fp32 columns is 16 KiB)
EPILOGUE_HOIST_BYTES = 16 * 1024


def _interleave(blocks: list) -> None:
    """Run row blocks' op generators (``GroupRunner._steps``, which yield (start, duration) estimates before each
    op) to the end, the oldest block's op first unless a newer block's next op would finish before it could start
    (``GroupRunner._pipelined``'s rule, for blocks all in flight at once)."""
    running = []
    for gen in blocks:
        estimate = next(gen, None)
        if estimate is not None:
            running.append([gen, estimate])
    while running:
        _advance_one(running)


def _advance_one(running: list[list]) -> None:
    """Run one op of the in-flight row blocks ``running`` ([generator, (start, duration) of its next op], oldest
    block first): the oldest block's, unless a newer block's op would finish before it could start; a block
    whose generator ends leaves ``running``."""
    entry = running[0]
    for other in running[1:]:
        if sum(other[1]) <= entry[1][0]:
            entry = other
    estimate = next(entry[0], None)
    if estimate is None:
        running.remove(entry)
    else:
        entry[1] = estimate


def handed_pieces(blocks: list[tuple]) -> dict:
    """Result blocks (tile, rows [r0, r1), columns [c0, c1)) of a value a later product reads as its A ([M, K], K
    the columns; compiler/build.py ``handoffs``) as that product's row-major pieces of A^T awaiting their
    transposes: per stationary tile key (k0, k1, m0, m1), 128 columns each, as ``matmul_into``'s ``lhs_pieces``
    takes them."""
    from device_impl.kernels.matmul import K_TILE

    pieces = {}
    for tile, r0, r1, c0, c1 in blocks:
        for k0 in range(c0, c1, K_TILE):
            k1 = min(c1, k0 + K_TILE)
            pieces[(k0, k1, r0, r1)] = [(0, r1 - r0, tile[:, k0 - c0:k1 - c0])]
    return pieces


class _Tapped:
    """A result's access pattern whose stored blocks are also handed to ``tap`` (``GroupRunner.epilogue``)."""

    __slots__ = ("access", "tap", "live", "store")

    def __init__(self, access: "Access2D", tap: Callable, live: list, store: bool = True) -> None:
        # ``live``: the scope the result's tiles are allocated in, so they outlive the block (the caller frees);
        # ``store``: False where no instruction reads the stored bytes (build.handoffs: only the tap's taker)
        self.access, self.tap, self.live, self.store = access, tap, live, store

    def pieces(self, r0: int, r1: int, c0: int, c1: int):
        return self.access.pieces(r0, r1, c0, c1)


def _fold_pieces(cols: int, chunk: int, parts: int = P) -> list[tuple[int, int, int, int]]:
    """The [p, f] pieces of consecutive columns a folded reduction (``GroupRunner._folded``) runs a row on, p at
    most ``parts``: one piece of p * f = cols where such an f exists up to twice the fewest columns a partition
    can take (every op is then one instruction, not one per piece: the flat tiling's [p, f] + [1, rest] issues
    each op twice), else the eager flat tiling's pieces (``_flat_pieces``)."""
    least = math.ceil(cols / parts)
    for f in range(least, min(2 * least, chunk) + 1):
        if cols % f == 0:
            return [(0, cols, cols // f, f)]
    return list(_flat_pieces(cols, min(chunk, least)))


class _Segments:
    """A [rows * q, f] tile's access pattern for a folded reduction of several rows: row i's piece, a [q, f] view
    of its consecutive columns, on partitions [i * q, (i + 1) * q) (one DMA per row)."""

    def __init__(self, views: list[np.ndarray]) -> None:
        self.views = views

    def pieces(self, r0: int, r1: int, c0: int, c1: int):
        q = self.views[0].shape[0]
        for i, view in enumerate(self.views):
            yield i * q, (i + 1) * q, 0, c1 - c0, view


class GroupRunner:
    def __init__(self, step: dict):
        self.step = step
        self.shape = tuple(step["shape"])
        self.reduce_dims = step["reduce_dims"]
        slots = step["slots"]
        self.slot_dtype = [numpy_dtype(d) for _, _, d in slots]
        self.slot_cls = [c for _, c, _ in slots]
        self.loads = {slot: vid for slot, vid in step["loads"]}
        # loads of iotas written per tile by GpSimd instead (compiler/iotas.py): slot -> the values, flat
        self.generated: dict[int, np.ndarray] = {}
        for entry in step.get("generated", ()):
            self.generated[entry["slot"]] = iotas.values(entry, self.generated)
        self.stores = {slot: vid for slot, vid in step["stores"]}
        ops = [_Op(i, e, slots[e["slot"]][1]) for i, e in enumerate(step["ops"])]
        self.ops = _select(ops, set(self.loads), set(self.stores), self.slot_dtype, self.slot_cls)
        self.generated_stores = [slot for slot in self.generated if slot in self.stores]
        self.rows, self.cols = step["rows"], step["cols"]
        tiles = step["tiles"]
        self.free = tiles.get("free", 1)
        self.chunk = tiles.get("chunk", self.cols)
        self.hoist_bytes = GROUP_SBUF_BYTES - tiles.get("sbuf_bytes", GROUP_SBUF_BYTES)
        self.block_bytes = tiles.get("sbuf_bytes", GROUP_SBUF_BYTES)  # one row block's planned peak
        self.loads_at, self.release_at = self._schedule_of(self.ops)
        self.numel = int(np.prod(self.shape, dtype=np.int64))
        # the same ops with each rotate_half one GpSimd permutation of its source's tile (build.rotations), for the
        # calls whose tiles all hold whole rotation units (``_flat``); None where the group has none
        self.rotated: tuple | None = None
        self._walks: dict[tuple, tuple[int, ...] | None] = {}  # the views' layouts -> flat_order's walk
        rotations = step.get("rotations") or []
        if rotations and self.reduce_dims is None:
            negates = {r["drop"][2] for r in rotations}
            entries = []
            for e in step["ops"]:
                spin = next((r for r in rotations if r["slot"] == e["slot"] and e["op"] == "select"), None)
                if e["op"] == "negate" and e["slot"] in negates:
                    continue
                if spin is not None:
                    e = dict(e, op="rotate", args=[["slot", spin["source"]]], in_types=[e["dtype"]],
                             attrs={"blocks": spin["blocks"], "unit": spin["unit"], "negated": spin["negated"]})
                entries.append(e)
            entries = _fuse_rotate_multiply(entries, set(self.stores))
            ops = _select([_Op(i, e, slots[e["slot"]][1]) for i, e in enumerate(entries)], set(self.loads),
                          set(self.stores), self.slot_dtype, self.slot_cls)
            self.rotated = (ops, *self._schedule_of(ops), math.lcm(*(r["unit"] for r in rotations)))

    def _schedule_of(self, ops: list[_Op]) -> tuple[dict, dict]:
        """(loads_at, release_at) of an op list: the loads each op uses first, the slots freed after each op."""
        last: dict[int, int] = {}
        first: dict[int, int] = {}
        for op in ops:
            for kind, x in op.args + (op.pre.args if op.pre is not None else []):
                if kind == "slot":
                    last[x] = op.index
                    if x in self.loads or x in self.generated:
                        first.setdefault(x, op.index)
        loads_at: dict[int, list[int]] = {}
        for slot, i in first.items():
            loads_at.setdefault(i, []).append(slot)
        release_at: dict[int, list[int]] = {}
        for op in ops:
            release_at.setdefault(last.get(op.slot, op.index), []).append(op.slot)
        for slot in first:
            release_at.setdefault(last[slot], []).append(slot)
        return loads_at, release_at

    def __call__(self, nc, env) -> None:
        if self.numel == 0:
            return
        loads = {slot: env.access(vid) for slot, vid in self.loads.items()}
        stores = {slot: env.access(vid) for slot, vid in self.stores.items()}
        if self.reduce_dims is None:
            perm = self._walk(loads, stores)
            if perm is not None:  # every view walked in another order of the dims (elementwise: the same values)
                loads = {slot: view.transpose(perm) for slot, view in loads.items()}
                stores = {slot: array.transpose(perm) for slot, array in stores.items()}
            self._flat(nc, loads, stores)
            return
        handoff = self.step.get("handoff")  # a later product's A made from this group's result (build.handoffs)
        if handoff is None:
            self._rows(nc, loads, stores)
            return
        pinned: list = []  # the result's tiles, kept until that product has transposed them
        blocks: list[tuple] = []
        self._rows(nc, loads, stores, taps={handoff["slot"]: (lambda nc_, t, *box: blocks.append((t, *box)), pinned,
                                                             handoff.get("store", True))})
        env.shared[("raw", handoff["lhs"], tuple(handoff["layout"]))] = (handed_pieces(blocks), pinned)

    def _walk(self, loads: dict, stores: dict) -> tuple[int, ...] | None:
        """The order of the dims a flat group walks its views in (``flat_order``: the fewest DMA runs), None for
        the logical one; not for a group whose tiles follow the logical order (generated iotas, rotations)."""
        if self.generated or self.rotated is not None or self.step.get("order") is not None:
            return None
        views = [*loads.values(), *stores.values()]
        key = tuple((v.shape, v.strides) for v in views)
        if key not in self._walks:
            self._walks[key] = flat_order.order(views, self.shape)
        return self._walks[key]

    def run_wide(self, nc, env) -> None:
        """The same ops on one tile per group (compiler.replay's wide core, which has no tile limits):
        flat groups as a single [1, N] tile, reduce groups with every row at once but the same column
        chunks, so each element sees the same instructions and rounding points as in ``__call__``."""
        if self.numel == 0:
            return
        loads = {slot: env.access(vid) for slot, vid in self.loads.items()}
        stores = {slot: env.access(vid) for slot, vid in self.stores.items()}
        if self.reduce_dims is None:
            self._flat(nc, loads, stores, [(0, self.numel, 1, self.numel)])
        else:
            self._rows(nc, loads, stores, max(self.rows, 1))

    # -- flat groups --------------------------------------------------------------------------
    def _flat(self, nc, loads: dict, stores: dict, ranges=None) -> None:
        ranges = list(ranges or iotas.ranges(self.step))
        ops, loads_at, release_at = self.ops, self.loads_at, self.release_at
        if self.rotated is not None:
            unit = self.rotated[3]
            if all(start % unit == 0 and f % unit == 0 and (stop - start) % unit == 0 for start, stop, _, f in ranges):
                ops, loads_at, release_at = self.rotated[:3]
        repeats = _repeated_loads(loads, ranges, {op.slot for op in ops})
        kept: list = []  # the scope of the tiles ``repeats`` keeps across tiles, freed after the last
        held: dict[tuple, Tile] = {}
        kept_ids: set[int] = set()  # the held tiles (never released with an iteration's)
        for start, stop, p, f in ranges:
            mark = nc.mark()
            tiles: dict[int, Any] = {}
            pending: dict = {}
            for slot in self.generated_stores:  # no op computes it: written as generated (arange's whole result)
                tiles[slot] = self._generate(nc, slot, start, stop, p, f)
                nc.dma.store_flat(stores[slot], start, stop, tiles[slot])
            for op in ops:
                for slot in loads_at.get(op.index, ()):
                    if slot in tiles:
                        continue
                    if slot in self.generated:
                        tiles[slot] = self._generate(nc, slot, start, stop, p, f)
                        continue
                    view = loads[slot]
                    repeat = repeats.get(slot)
                    key = None if repeat is None else (start % repeat[0], stop - start, p, f)
                    if key is not None and key in repeat[1]:
                        t = held.get((slot, key))
                        if t is None:
                            with nc.stream(kept):
                                t = held[slot, key] = nc.sbuf_tile((p, f), view.dtype)
                                nc.dma.load_flat(t, view, start, stop)
                            kept_ids.add(id(t))
                        tiles[slot] = t
                        continue
                    t = nc.sbuf_tile((p, f), view.dtype)
                    nc.dma.load_flat(t, view, start, stop)
                    tiles[slot] = t
                out = self._compute(nc, op, tiles, pending, None, (p, f))
                if out is None:
                    continue  # folded into its reader
                tiles[op.slot] = out
                if op.slot in stores:
                    nc.dma.store_flat(stores[op.slot], start, stop, out)
                for slot in release_at.get(op.index, ()):
                    if slot in tiles:
                        t = tiles.pop(slot)
                        if id(t) not in kept_ids:
                            nc.release(t)
            nc.release_to(mark)
        release_live_to(kept, 0)

    def _generate(self, nc, slot: int, start: int, stop: int, p: int, f: int) -> Tile:
        """The [p, f] tile of a generated iota load (``iotas``): one GpSimd iota where its values are affine
        in the tile position (every tile the plan walks: ``iotas.generate`` checked), else (the wide core's
        one [1, N] tile, or a small group's tiles) a GpSimd program computing the same integers from the
        element's flat index (``iotas.PROGRAM_FACTOR`` element-steps an element)."""
        flat = self.generated[slot]
        t = nc.sbuf_tile((p, f), self.slot_dtype[slot])
        steps = iotas.affine(flat, start, stop, p, f)
        if steps is not None:
            base, partition_step, free_step = steps
            nc.gpsimd.iota(t, base=base, partition_step=partition_step, free_step=free_step)
            return t

        def program(out: np.ndarray) -> None:
            out[...] = flat[start:stop].reshape(p, f)

        nc.gpsimd.run("iota", program, (t,), (), elements=p * f, factor=iotas.PROGRAM_FACTOR)
        return t

    # -- reduce groups ------------------------------------------------------------------------
    def _rows(self, nc, loads: dict, stores: dict, block: int = P, taps: dict | None = None) -> None:
        """``block``: rows per block (P; all of them on compiler.replay's wide core); ``taps`` as ``epilogue``'s."""
        access, out_access, keep = self._row_access(loads, stores)
        for slot, (tap, live, *store) in (taps or {}).items():
            out_access[slot] = _Tapped(out_access[slot], tap, live, *store)
        folded = None if taps else self._fold_views(loads, stores, access)
        if folded is not None:
            self._folded(nc, *folded, access, out_access)
            return
        phased = self.chunk < self.cols
        group_mark = nc.mark()
        shared = {} if phased else self._hoist(nc, loads, access, keep, block)
        if phased:
            self._phased(nc, access, out_access, block)
        else:
            self._pipelined(nc, access, out_access, shared, block)
        nc.release_to(group_mark)

    def epilogue(self, env, rows: int, cols: int, product_slot: int, nc=None, block: int = P,
                 taps: dict[int, tuple[Callable, list]] | None = None, kept: dict[int, dict] | None = None,
                 in_flight: int = 1):
        """This group as a matmul epilogue (compiler/build.py ``attach_epilogues``): a function
        ``(nc, tile, r0, r1, c0, c1)`` that takes over the store of rows [r0, r1) and columns [c0, c1)
        of the [rows, cols] product (``tile``, the product's slot) and runs the group's ops on that
        block, loading its other inputs' blocks and storing its results' blocks. Row groups get whole
        rows (c0 = 0, c1 = cols); flat groups any block of the product's row-major order.

        Given ``nc`` (the matmul step's core, in the scope the step's blocks run in), a row group's
        loads that are the same in every row (the weight of a layer norm fused after a projection) are
        read once for the whole product and copied to the partitions of a ``block``-row tile on GpSimdE
        (``_hoist``), instead of a [P, C] broadcast DMA for every product block.

        ``taps``: slot -> (``tap(nc, tile, r0, r1, c0, c1)``, ``live``[, ``store``]): each block of that result is computed
        into a tile allocated in ``live`` (a scope the caller keeps and frees) and handed to ``tap`` as it is
        stored (compiler/build.py ``handoffs``: a later product's A^T made from it on chip, once TensorE has
        issued the product's matmuls); ``store`` False: handed over only, no DMA store (no instruction reads it).

        ``kept``: slot -> {(r0, r1, c0, c1): tile}: that load's blocks already in SBUF, in this product's block
        layout (an earlier product's evacuated blocks, compiler/build.py ``keep_products``), read in place instead
        of loaded; their owner frees them.

        ``in_flight`` > 1 (a row group): the blocks of product tiles the matmul hands over (``holds``: it appends
        each PSUM tile before its blocks reach ``run``, and leaves it to this epilogue to free) are run
        ``in_flight`` at a time, their ops interleaved as ``_pipelined`` interleaves a row group's blocks: the
        engines run in order, and block i + 1's first ops, ready when its product is, went in behind block i's
        chain of row statistics (the decoder's o projection's norm). ``run.flush(nc)`` runs the blocks still
        pending (the caller's, after the product)."""
        order = self.step.get("order")  # the group reads the product through a transpose (build._product_order)
        dropped = set(order["drop"]) if order is not None else set()
        loads = {slot: env.access(vid) for slot, vid in self.loads.items()
                 if slot != product_slot and slot not in dropped}
        stores = {slot: env.access(vid) for slot, vid in self.stores.items()}
        shared: dict[int, Tile] = {}
        plan = None  # (ops, loads_at, release_at) other than the group's own: its rotated ops
        if order is not None:
            # every load and store read in the product's order: the group's dims put back in the reshaped
            # product's order, its leading ``rows_dims`` the product's rows; the rotate_halfs as GpSimd
            # permutations of the product's block (the reversed views of the product are not in HBM)
            inverse = [int(d) for d in np.argsort(order["perm"])]
            na = order["rows_dims"]
            access = {slot: (Access2D(view.transpose(inverse), na), False) for slot, view in loads.items()}
            out_access = {slot: Access2D(np.reshape(array, self.shape).transpose(inverse), na)
                          for slot, array in stores.items()}
            if self.rotated is None:
                raise RuntimeError("a transposed epilogue without its rotations (a compiler bug: build._product_order)")
            plan = self.rotated[:3]
        elif self.reduce_dims is None:
            access = {slot: (Access2D(np.reshape(view, (rows, cols)), 1), False) for slot, view in loads.items()}
            out_access = {slot: Access2D(np.reshape(array, (rows, cols), copy=False), 1)
                          for slot, array in stores.items()}
        else:
            access, out_access, keep = self._row_access(loads, stores)
            if nc is not None:
                shared = self._hoist(nc, loads, access, keep, block, min(self.hoist_bytes, EPILOGUE_HOIST_BYTES))
        for slot, (tap, live, *store) in (taps or {}).items():
            out_access[slot] = _Tapped(out_access[slot], tap, live, *store)

        held: list = []  # product tiles the matmul left to this epilogue (``in_flight``)
        pending: list[tuple] = []  # their blocks, not yet run

        def tiles_of(tile, r0: int, r1: int, c0: int, c1: int) -> dict:
            tiles = {product_slot: tile}
            for slot, boxes in (kept or {}).items():
                box = boxes.get((r0, r1, c0, c1))
                if box is None:  # part of a kept block (matmul._finish_block's last block, cut in halves)
                    (b0, b1, d0, d1), box = next((key, t) for key, t in boxes.items()
                                                 if key[0] <= r0 and r1 <= key[1] and key[2] <= c0 and c1 <= key[3])
                    box = box[r0 - b0:r1 - b0, c0 - d0:c1 - d0]
                tiles[slot] = box
            for slot, t in shared.items():
                if r1 - r0 <= t.partitions:
                    tiles[slot] = t if r1 - r0 == t.partitions else t[0:r1 - r0, :]
            return tiles

        repeated = self._repeated_block_loads(plan, loads, stores) if nc is not None and order is not None else {}
        kept_live: list = []  # the scope of the tiles ``repeated`` keeps across blocks, freed by ``flush``
        kept_tiles: dict[tuple, Tile] = {}

        def flush(nc) -> None:
            blocks = [self._steps(nc, self.ops, r0, r1, c0, c1, access, out_access, tiles_of(tile, r0, r1, c0, c1),
                                  None) for tile, r0, r1, c0, c1 in pending]
            pending.clear()
            _interleave(blocks)
            for t in held:
                nc.release(t)
            held.clear()
            if kept_live:
                with nc.stream(kept_live):
                    nc.release_to(0)
                kept_tiles.clear()

        def run(nc, tile, r0: int, r1: int, c0: int, c1: int) -> None:
            if any(tile.root is t for t in held):
                pending.append((tile, r0, r1, c0, c1))
                if len(pending) >= in_flight:
                    flush(nc)
                return
            tiles = tiles_of(tile, r0, r1, c0, c1)
            if plan is not None:
                unit = self.rotated[3]
                if c0 % unit or (c1 - c0) % unit:
                    raise RuntimeError(f"a transposed epilogue's block [{c0}, {c1}) cuts its rotation unit {unit} "
                                       "(a compiler bug: build._product_order)")
            for slot in repeated:  # a load whose block reads the same bytes as an earlier block's: that tile
                key = (slot, tuple((a0, a1, b0, b1, v.__array_interface__["data"][0], v.shape, v.strides)
                                   for a0, a1, b0, b1, v in access[slot][0].pieces(r0, r1, c0, c1)))
                t = kept_tiles.get(key)
                if t is None:
                    with nc.stream(kept_live):
                        t = kept_tiles[key] = self._load(nc, slot, access, r0, r1, c0, c1)
                tiles[slot] = t
            with nc.scope():
                self._pass(nc, self.ops if plan is None else plan[0], r0, r1, c0, c1, access, out_access, tiles,
                           None, plan)

        # the product is read by the ops, never stored from this tile: it may stay in PSUM (matmul._finish_block);
        # not by rotated ops (GpSimd's permutation reads SBUF)
        run.reads_psum = product_slot not in stores and product_slot not in (taps or {}) and plan is None
        # any block of the product will do (matmul._finish_block cuts its last one): an elementwise group that
        # hands no block to anyone (a kept block it reads is read in parts)
        run.splittable = self.reduce_dims is None and not taps and plan is None
        if in_flight > 1 and self.reduce_dims is not None and run.reads_psum:
            run.holds = held
        run.flush = flush
        return run

    def _row_access(self, loads: dict, stores: dict) -> tuple[dict, dict, list[int]]:
        """Access patterns of a row group's loads and stores as [rows, cols] matrices (a load constant
        along the columns as a [rows, 1] column), and the kept dims."""
        dims = self.reduce_dims
        keep = [d for d in range(len(self.shape)) if d not in dims]
        perm = keep + list(dims)
        na = len(keep)
        access: dict[int, tuple[Access2D, bool]] = {}
        for slot, view in loads.items():
            if all(view.strides[d] == 0 or view.shape[d] == 1 for d in dims):  # constant along the columns
                column = view[tuple(0 if d in dims else slice(None) for d in range(view.ndim))]
                access[slot] = (Access2D(column[..., None], na), True)
            else:
                access[slot] = (Access2D(view.transpose(perm), na), False)
        out_access: dict[int, Access2D] = {}
        for slot, array in stores.items():
            if self.slot_cls[slot] == "row":
                out_access[slot] = Access2D(np.reshape(array, (self.rows, 1), copy=False), 1)
            else:
                out_access[slot] = Access2D(array.transpose(perm), na)
        return access, out_access, keep

    def _fold_views(self, loads: dict, stores: dict, access: dict) -> tuple | None:
        """A full reduction's group (one row of ``cols`` columns) laid out on the partitions, as the eager
        kernel's flat tiling does (``kernels.reduction.sums._reduce_flat``): (views, outs, phases) with each load
        the full ops read and each full result stored as one strided run of ``cols`` elements (slot -> 1-D view),
        so a piece of it is a [p, f] tile of consecutive elements, and the group cut into phases
        (``_fold_phases``): a full op that reads a per-row value (std's x - mean) runs in the phase after the
        one that computes it. None where the row stays one partition: more than one row, registers reused (a
        slot written twice, or loaded and written), a view whose columns are not one strided run, or too few
        columns for the fold to pay (each op's instruction overhead is paid once per piece, plus the
        per-partition combine and the cross-partition finish of each phase)."""
        if self.reduce_dims is None or not 1 <= self.rows <= P // 2 or not any(op.name == "reduce" for op in self.ops):
            return None
        written = [op.slot for op in self.ops]
        if len(set(written)) != len(written) or set(written) & set(loads):
            return None
        phases = self._fold_phases({slot for slot in loads if access[slot][1]})
        if phases is None:
            return None
        vector = PLATFORM.instruction_overhead_cycles
        pieces = _fold_pieces(self.cols, self.chunk, P // self.rows)
        if self.rows > 1 and (len(pieces) != 1 or self.rows * pieces[0][2] > P):
            return None  # several rows: each row's columns as one [q, f] piece on its own q partitions
        full = [op for op in self.ops if op.cls == "full" or op.name == "reduce"]
        before = len(full) * (vector + self.cols)
        after = sum(len(run) * sum(vector + f for _, _, _, f in pieces)
                    + (2 + (2 + len(wide)) * self.rows) * vector + P for run, _, wide, _ in phases)
        if after >= before:
            return None
        perm = list(self.reduce_dims)
        perm = [d for d in range(len(self.shape)) if d not in perm] + perm
        read = {x for run, _, _, _ in phases for op in run for kind, x in self._deps(op) if kind == "slot"}
        views: dict[int, np.ndarray] = {}
        outs: dict[int, np.ndarray] = {}
        for table, slots, source in ((views, [s for s in read if s in loads and not access[s][1]], loads),
                                     (outs, [s for s in stores if self.slot_cls[s] == "full"], stores)):
            for slot in slots:
                try:
                    table[slot] = np.reshape(source[slot].transpose(perm), (self.rows, self.cols), copy=False)
                except ValueError:
                    return None  # the columns are not one strided run
        return views, outs, phases

    @staticmethod
    def _deps(op: _Op) -> list:
        return op.args + (op.pre.args if op.pre is not None else [])

    def _fold_phases(self, columns: set[int]) -> list | None:
        """The folded group's phases, in order: (full ops and reductions run over the pieces, the reductions among
        them, the per-row values they read (broadcast to the partitions), the per-row ops run after the
        phase's cross-partition finish). A reduction runs in the phase after the latest per-row value its
        full operand tree reads; the full ops of that tree run again in each phase that needs them (pure
        elementwise ops, so the same bits), a stored full result in the first phase it can. None where a
        per-row op reads a full value."""
        by_slot = {op.slot: op for op in self.ops}
        avail: dict[int, int] = dict.fromkeys(columns, -1)  # per-row value -> the phase whose finish computes it

        def is_row(slot: int) -> bool:
            return slot in avail or (slot in by_slot and by_slot[slot].cls == "row")

        def tree(op: _Op) -> list[_Op]:
            seen: dict[int, _Op] = {}
            stack = [op]
            while stack:
                for kind, x in self._deps(stack.pop()):
                    if kind == "slot" and x in by_slot and not is_row(x) and x not in seen:
                        seen[x] = by_slot[x]
                        stack.append(by_slot[x])
            return sorted(seen.values(), key=lambda o: o.index)

        roots: dict[int, list[_Op]] = {}
        rows: dict[int, list[_Op]] = {}
        for op in self.ops:
            if op.name == "reduce" or (op.cls == "full" and op.slot in self.stores):
                ops = tree(op) + [op]
                needs = [avail[x] for o in ops for kind, x in self._deps(o) if kind == "slot" and is_row(x)]
                if any(kind == "slot" and is_row(x) and x not in avail for o in ops for kind, x in self._deps(o)):
                    return None  # reads a per-row value not computed yet (never, in program order)
                phase = max(needs, default=-1) + 1
                roots.setdefault(phase, []).append(op)
                if op.name == "reduce":
                    avail[op.slot] = phase
            elif op.cls == "row":
                needs = []
                for kind, x in self._deps(op):
                    if kind == "slot":
                        if x not in avail:
                            return None
                        needs.append(avail[x])
                avail[op.slot] = max(max(needs, default=0), 0)
                rows.setdefault(avail[op.slot], []).append(op)
        phases = []
        for k in range(max([*roots, *rows], default=-1) + 1):
            run: dict[int, _Op] = {}
            for root in roots.get(k, []):
                for o in tree(root) + [root]:
                    run[o.index] = o
            ops = [run[i] for i in sorted(run)]
            wide = sorted({x for o in ops for kind, x in self._deps(o) if kind == "slot" and is_row(x)})
            phases.append((ops, [o for o in ops if o.name == "reduce"], wide, rows.get(k, [])))
        return phases

    def _folded(self, nc, views: dict, outs: dict, phases: list, access: dict, out_access: dict) -> None:
        """A reduction of few rows on the partitions, phase by phase: the full ops and reductions over [p, f]
        pieces of each row's consecutive columns (``_fold_pieces``; one row: the eager flat tiling's
        [128, f] + [1, rest] where no exact piece exists; several rows: one piece each, row i on partitions
        [i * p, (i + 1) * p)), each piece's per-partition partials combined into an accumulator that starts at
        the reduction's identity, one GpSimd reduction across each row's partitions, then the phase's per-row
        ops on [rows, 1] tiles, whose values a later phase reads broadcast to the row's partitions, instead of
        every op over one partition's ``cols`` elements."""
        rows = self.rows
        mark = nc.mark()
        live: list = []  # the per-row values' [rows, 1] tiles, kept across phases
        values: dict[int, Tile] = {}
        for slot, (_, column) in access.items():
            if column:
                values[slot] = self._load(nc, slot, access, 0, rows, 0, 1)
        keep = {op.slot: _Tapped(out_access.get(op.slot), lambda *args: None, live, op.slot in out_access)
                for _, _, _, row_ops in phases for op in row_ops}
        row_out = {**out_access, **keep}
        stored = {op.slot for run, _, _, _ in phases for op in run if op.slot in outs}
        done: set[int] = set()
        pieces = _fold_pieces(self.cols, self.chunk, P // rows)
        span = P if rows == 1 else rows * pieces[0][2]  # the accumulators' partitions

        def pattern(v: np.ndarray, start: int, stop: int, p: int, f: int):
            if rows == 1:
                return Access2D(np.reshape(v[0, start:stop], (p, f)), 1)
            return _Segments([np.reshape(v[i, start:stop], (p, f)) for i in range(rows)])

        # a load that several phases read stays in SBUF for the later ones while its pieces fit KEPT_LOAD_BYTES
        # per partition (std reads x in three phases), instead of a reload per phase
        uses = Counter(x for run, _, _, _ in phases for x in {x for op in run for kind, x in self._deps(op)
                                                               if kind == "slot" and x in views})
        per_slot = {slot: sum(f for _, _, _, f in pieces) * views[slot].dtype.itemsize for slot in views}
        kept_slots, budget = set(), KEPT_LOAD_BYTES
        for slot in sorted(views):
            if uses[slot] > 1 and per_slot[slot] <= budget:
                kept_slots.add(slot)
                budget -= per_slot[slot]
        held: dict[tuple[int, int], Tile] = {}
        for run, reduces, wide, row_ops in phases:
            scope = nc.mark()
            accs = {}
            for op in reduces:
                accs[op.slot] = nc.sbuf_tile((span, 1), op.reduce_dtype)
                nc.vector.memset(accs[op.slot], _identity(op.alu, op.reduce_dtype))
            spread = {}
            for slot in wide:
                spread[slot] = nc.sbuf_tile((span, 1), values[slot].dtype)
                if rows == 1:
                    nc.gpsimd.partition_broadcast(spread[slot], values[slot])
                else:
                    q = span // rows
                    for i in range(rows):
                        nc.gpsimd.partition_broadcast(spread[slot][i * q:(i + 1) * q, :], values[slot][i:i + 1, :])
            mine = {op.slot for op in run if op.slot in stored and op.slot not in done}
            done |= mine
            for start, stop, p, f in pieces if run else ():
                inner = nc.mark()
                n = rows * p
                piece = {slot: (pattern(v, start, stop, p, f), False) for slot, v in views.items()}
                piece_out = {slot: pattern(outs[slot], start, stop, p, f) for slot in mine}
                tiles = {op.slot: nc.sbuf_tile((n, 1), op.reduce_dtype) for op in reduces}
                for slot in kept_slots & {x for op in run for kind, x in self._deps(op) if kind == "slot"}:
                    if (slot, start) not in held:
                        with nc.stream(live):
                            held[slot, start] = self._load(nc, slot, piece, 0, n, 0, f)
                    tiles[slot] = held[slot, start]
                for slot, t in spread.items():
                    tiles[slot] = t if n == span else t[0:n, :]
                self._pass(nc, run, 0, n, 0, f, piece, piece_out, tiles, True)
                for op in reduces:
                    acc = accs[op.slot] if n == span else accs[op.slot][0:n, :]
                    nc.vector.tensor_tensor(acc, acc, tiles[op.slot], op.alu, dtype=op.reduce_dtype)
                nc.release_to(inner)
            for op in reduces:
                total = nc.sbuf_tile((rows, 1), op.reduce_dtype)
                if rows == 1:
                    nc.gpsimd.partition_reduce(total, accs[op.slot], op.alu, dtype=op.reduce_dtype)
                else:
                    q = span // rows
                    for i in range(rows):
                        nc.gpsimd.partition_reduce(total[i:i + 1, :], accs[op.slot][i * q:(i + 1) * q, :], op.alu,
                                                   dtype=op.reduce_dtype)
                with nc.stream(live):
                    values[op.slot] = self._finish_reduce(nc, total, op, out_access, 0, rows)
            if row_ops:
                self._pass(nc, row_ops, 0, rows, 0, 1, access, row_out, values, None)
            nc.release_to(scope)
        release_live_to(live, 0)
        nc.release_to(mark)

    def _phased(self, nc, access: dict, out_access: dict, block: int = P) -> None:
        """Rows longer than SBUF holds: full ops and reductions over column chunks (reductions accumulate),
        then the per-row ops."""
        for r0 in range(0, self.rows, block):
            r1 = min(self.rows, r0 + block)
            mark = nc.mark()
            accs = {op.slot: nc.sbuf_tile((r1 - r0, 1), op.reduce_dtype) for op in self.ops if op.name == "reduce"}
            for c0 in range(0, self.cols, self.chunk):
                c1 = min(self.cols, c0 + self.chunk)
                inner = nc.mark()
                self._pass(nc, [op for op in self.ops if op.cls == "full" or op.name == "reduce"], r0, r1, c0,
                           c1, access, out_access, accs, c0 == 0)
                nc.release_to(inner)
            tiles = {slot: self._finish_reduce(nc, acc, self._op_of(slot), out_access, r0, r1)
                     for slot, acc in accs.items()}
            self._pass(nc, [op for op in self.ops if op.cls == "row" and op.name != "reduce"], r0, r1, 0, 1,
                       access, out_access, tiles, None)
            nc.release_to(mark)

    def _pipelined(self, nc, access: dict, out_access: dict, shared: dict, block: int = P) -> None:
        """Whole-row blocks, up to ``in_flight`` at once: each block's ops are issued in order, and a
        newer block's next op goes in ahead of the older ones' when it would finish before theirs could
        start (operands ready, engine free), so later blocks' loads and reductions fill the engines
        while earlier blocks' last ops wait for their inputs, without delaying them."""
        blocks = [(r0, min(self.rows, r0 + block)) for r0 in range(0, self.rows, block)]
        if len(blocks) == 1:  # nothing to interleave (the replay's wide core: every row at once): the same order
            (r0, r1), = blocks
            tiles = {slot: t if r1 - r0 == t.partitions else t[0:r1 - r0, :] for slot, t in shared.items()}
            self._pass(nc, self.ops, r0, r1, 0, self.cols, access, out_access, tiles, None)
            return
        # as many blocks as the partition holds beside the hoisted rows, each at its planned peak plus
        # room for the [P, 1] tiles instruction selection adds; two at least (the plan halves SBUF for them)
        hoisted = sum(t.free * t.dtype.itemsize for t in shared.values())
        room = PLATFORM.sbuf_bytes_per_partition - hoisted - SBUF_MARGIN
        in_flight = int(min(MAX_IN_FLIGHT, max(2, room // (self.block_bytes + ROW_TILE_RESERVE))))
        running: list[list] = []  # [generator, (start, duration) of its next op], oldest block first
        while blocks or running:
            while blocks and len(running) < in_flight:
                r0, r1 = blocks.pop(0)
                tiles = {slot: t if r1 - r0 == t.partitions else t[0:r1 - r0, :] for slot, t in shared.items()}
                gen = self._steps(nc, self.ops, r0, r1, 0, self.cols, access, out_access, tiles, None)
                estimate = next(gen, None)
                if estimate is not None:
                    running.append([gen, estimate])
            _advance_one(running)

    def _hoist(self, nc, loads: dict, access: dict, keep: list[int], block: int = P,
               budget: int | None = None) -> dict:
        """Loads of values that are the same in every row (a layer norm's weight and bias: broadcast
        along the kept dims), read from HBM once for the whole group as one [1, C] row and copied to
        every partition on GpSimdE, as the eager layer norm does, instead of a [P, C] broadcast DMA
        per row block. Only while the whole rows and these tiles fit the group's SBUF budget."""
        budget = self.hoist_bytes if budget is None else budget
        shared: dict[int, Tile] = {}
        if not keep or self.rows <= 1:
            # a full reduction has one row and no kept dims: "constant along the kept dims" holds of every
            # load vacuously, and hoisting (one row, nothing to share) read the compiled LSTM's gate
            # slices wrongly (their [1, C] rows span two strided pieces)
            return shared
        # Slots are registers the planner reuses: a slot that an op also writes, or that is loaded twice,
        # holds other values at other points of the block, and a hoisted tile would stand in for them all
        # (the compiled LSTM read a gate's result where a weight row was due).
        written = {op.slot for op in self.ops}
        loaded = [slot for slots in self.loads_at.values() for slot in slots]
        for slot, view in loads.items():
            acc2d, column = access[slot]
            if column or not all(view.strides[d] == 0 or view.shape[d] == 1 for d in keep):
                continue
            if slot in written or loaded.count(slot) != 1:
                continue
            size = self.cols * self.slot_dtype[slot].itemsize
            if size > budget:
                continue
            pieces = list(acc2d.pieces(0, 1, 0, self.cols))
            if len(pieces) != 1:
                continue  # a row that is several strided pieces loads per block, as before (see above)
            budget -= size
            row = nc.sbuf_tile((1, self.cols), self.slot_dtype[slot])
            nc.dma.load(row, pieces[0][4])
            full = nc.sbuf_tile((min(block, self.rows), self.cols), self.slot_dtype[slot])
            nc.gpsimd.partition_broadcast(full, row)
            shared[slot] = full
        return shared

    def _op_of(self, slot: int) -> _Op:
        return next(op for op in self.ops if op.slot == slot)

    def _load(self, nc, slot: int, access: dict, r0: int, r1: int, c0: int, c1: int):
        acc2d, column = access[slot]
        dtype = self.slot_dtype[slot]
        p = r1 - r0
        if column:
            t = nc.sbuf_tile((p, 1), dtype)
            for a0, a1, _, _, view in acc2d.pieces(r0, r1, 0, 1):
                nc.dma.load(t[a0:a1, 0:1] if (a0, a1) != (0, p) else t, view)
            return t
        t = nc.sbuf_tile((p, c1 - c0), dtype)
        for a0, a1, b0, b1, view in acc2d.pieces(r0, r1, c0, c1):
            nc.dma.load(t if (a0, a1, b0, b1) == (0, p, 0, c1 - c0) else t[a0:a1, b0:b1], view)
        return t

    def _store(self, nc, tile, slot: int, out_access: dict, r0: int, r1: int, c0: int, c1: int) -> None:
        p, c = tile.shape
        if getattr(out_access[slot], "store", True):
            for a0, a1, b0, b1, view in out_access[slot].pieces(r0, r1, c0, c1):
                nc.dma.store(view, tile if (a0, a1, b0, b1) == (0, p, 0, c) else tile[a0:a1, b0:b1])
        tap = getattr(out_access[slot], "tap", None)
        if tap is not None:
            tap(nc, tile, r0, r1, c0, c1)

    def _pass(self, nc, ops: list[_Op], r0: int, r1: int, c0: int, c1: int, access: dict, out_access: dict,
              tiles: dict, first_chunk: bool | None, plan: tuple | None = None) -> None:
        """One tile iteration over ``ops``. ``first_chunk`` is None for a whole-row pass; else reductions
        accumulate partial results into ``tiles`` (fp32 [P, 1] accumulators). ``plan``: (ops, loads_at,
        release_at) of another form of the group's ops (its rotated ops), whose loads and releases ``ops`` has."""
        for _ in self._steps(nc, ops, r0, r1, c0, c1, access, out_access, tiles, first_chunk, estimates=False,
                             plan=plan):
            pass

    def _repeated_block_loads(self, plan: tuple | None, loads: dict, stores: dict) -> list[int]:
        """An epilogue's loads that every block may take from one tile per distinct source block (rotary's cos
        and sin, broadcast over batch and heads: the same [S, D] rows for each batch's block of the product):
        slots no op writes and that are loaded once per block (slots are registers: see ``_hoist``), of an
        array no store of the group overlaps (nothing rewrites their bytes while the product runs)."""
        ops, loads_at = (self.ops, self.loads_at) if plan is None else plan[:2]
        written = {op.slot for op in ops}
        loaded = [slot for slots in loads_at.values() for slot in slots]
        return [slot for slot, view in loads.items()
                if slot not in written and loaded.count(slot) == 1 and _period(view) < view.size
                and not any(np.shares_memory(view, array) for array in stores.values())]

    def _steps(self, nc, ops: list[_Op], r0: int, r1: int, c0: int, c1: int, access: dict, out_access: dict,
               tiles: dict, first_chunk: bool | None, estimates: bool = True, plan: tuple | None = None):
        """``_pass`` as a generator: before issuing each op (after its loads) it yields when the op's
        operands will be ready, so the caller can interleave two row blocks' instructions (software
        pipelining: the engines run in order, so block i+1's reductions must be issued while block i's
        last ops wait, not behind them; ``estimates`` False: it yields None, for a caller that does not
        interleave). Every tile it allocates is released by the end, so interleaved blocks need no shared
        scope."""
        p, c = r1 - r0, c1 - c0
        loads_at, release_at = (self.loads_at, self.release_at) if plan is None else plan[1:3]
        local: dict[int, Any] = dict(tiles)
        pending: dict = {}
        summed: set[int] = set()  # reductions an activation's ``accumulate`` already produced
        for op in ops:
            for slot in loads_at.get(op.index, ()):
                if slot not in local:
                    local[slot] = self._load(nc, slot, access, r0, r1, c0, c1)
            for kind, slot in self._deps(op):  # a later phase of ``_folded`` reads a load again (never written)
                if kind == "slot" and slot not in local and slot in access:
                    local[slot] = self._load(nc, slot, access, r0, r1, c0, c1)
            yield self._estimate(nc, op, local, c) if estimates else None
            if op.name == "reduce" and op.slot in summed:
                if op.slot in out_access:
                    self._store(nc, local[op.slot], op.slot, out_access, r0, r1, 0, 1)
            elif op.name == "reduce":
                kind, operand = op.args[0]
                if kind == "slot":
                    src = local[operand]
                    wide = src.free < c
                    if wide:  # a value constant along the columns: widen before reducing
                        src = lowering.widen(nc, src, (p, c))
                else:  # a reduction of a splat constant (the count of a mean over a constant mask): memset
                    src, wide = lowering.immediate_tile(nc, operand, (p, c), op.reduce_dtype), True
                if first_chunk is None:
                    out = nc.sbuf_tile((p, 1), op.dtype)
                    if op.init_combine:
                        part = nc.sbuf_tile((p, 1), op.reduce_dtype)
                        nc.vector.tensor_reduce(part, src, op.alu, dtype=op.reduce_dtype)
                        nc.vector.tensor_scalar(out, part, op.alu, op.init, dtype=op.reduce_dtype)
                        nc.release(part)
                    else:
                        nc.vector.tensor_reduce(out, src, op.alu, dtype=op.reduce_dtype)
                    local[op.slot] = out
                    if op.slot in out_access:
                        self._store(nc, out, op.slot, out_access, r0, r1, 0, 1)
                else:
                    if first_chunk:
                        nc.vector.tensor_reduce(tiles[op.slot], src, op.alu, dtype=op.reduce_dtype)
                    else:
                        part = nc.sbuf_tile((p, 1), op.reduce_dtype)
                        nc.vector.tensor_reduce(part, src, op.alu, dtype=op.reduce_dtype)
                        nc.vector.tensor_tensor(tiles[op.slot], tiles[op.slot], part, op.alu, dtype=op.reduce_dtype)
                        nc.release(part)
                if wide:
                    nc.release(src)
            else:
                shape = (p, c) if op.cls == "full" else (p, 1)
                pin = getattr(out_access.get(op.slot), "live", None)
                if pin is None:
                    out = self._compute(nc, op, local, pending, summed if first_chunk is None else None, shape)
                else:  # a tapped result (``epilogue``): its tile outlives the block, freed by the caller
                    with nc.stream(pin):
                        out = self._compute(nc, op, local, pending, summed if first_chunk is None else None, shape)
                    if out is not None:
                        tiles[op.slot] = out
                if out is not None:
                    local[op.slot] = out
                    if op.slot in out_access:
                        if op.cls == "full":
                            self._store(nc, out, op.slot, out_access, r0, r1, c0, c1)
                        else:
                            self._store(nc, out, op.slot, out_access, r0, r1, 0, 1)
            for slot in release_at.get(op.index, ()):
                if slot not in tiles and slot in local:
                    nc.release(local.pop(slot))
        for slot, t in local.items():
            if slot not in tiles:
                nc.release(t)
        for t in pending.values():
            if isinstance(t, Tile):
                nc.release(t)

    @staticmethod
    def _estimate(nc, op: _Op, local: dict, cols: int) -> tuple[float, float]:
        """(When ``op`` could start: its operands ready and its engine free; about how long it takes)."""
        ready = max((local[x].root.ready for kind, x in op.args + (op.pre.args if op.pre else [])
                     if kind == "slot" and x in local), default=0.0)
        free = nc.timeline.free
        if op.name == "reduce" or (op.scalar_form is None and op.name not in lowering.ACTIVATION_OPS):
            engine_free = free["vector"]
        elif op.scalar_form is None or op.pre is not None:
            engine_free = free["scalar"]
        else:
            engine_free = min(free["vector"], free["scalar"])
        p = nc.vector.platform
        width = cols if op.cls == "full" or op.name == "reduce" else 1
        return max(ready, engine_free), (p.instruction_overhead_cycles + width) / p.vector_hz * 1e9

    def _compute(self, nc, op: _Op, local: dict, pending: dict, summed: set[int] | None, shape: tuple[int, int]):
        """Issue one elementwise op (``_select`` says how); its result tile, or None when it was folded
        into its reader (``pending`` then holds its activation operands for that reader).

        ``summed``: the reductions this pass may take from an activation's ``accumulate`` output (None
        when reductions accumulate over column chunks instead)."""
        if op.pre is not None and op.pre.slot in pending:
            x, scale, bias = pending.pop(op.pre.slot)
            out = nc.sbuf_tile(shape, op.dtype)
            nc.scalar.activation(out, x, lowering.activation_function(op.name), scale=scale, bias=bias,
                                 accumulate=self._accumulator(nc, op, local, summed, shape))
            return out
        args = [local[x] if kind == "slot" else x for kind, x in op.args]
        if op.scalar_form is not None:
            form = self._scalar_operands(nc, op, args, shape, pending)
            if form is not None:
                if op.merged:
                    pending[op.slot] = form
                    return None
                acc = self._accumulator(nc, op, local, summed, shape)
                tiles_read = 2 if op.scalar_form == "square" or isinstance(args[0], Tile) == isinstance(args[1], Tile) \
                    else 1
                if acc is not None or _scalar_first(nc, shape[1], tiles_read, [form[0], form[1], form[2]]):
                    out = nc.sbuf_tile(shape, op.dtype)
                    nc.scalar.activation(out, form[0], "square" if op.scalar_form == "square" else "identity",
                                         scale=form[1], bias=form[2], accumulate=acc)
                    return out
                if op.scalar_form == "normalize":
                    out = nc.sbuf_tile(shape, op.dtype)
                    nc.vector.tensor_tensor(out, form[0], form[1], "multiply", dtype=FP32)
                    return out
        out = nc.sbuf_tile(shape, op.dtype)
        acc = self._accumulator(nc, op, local, summed, shape) if op.name in lowering.ACTIVATION_OPS else None
        if acc is not None:
            nc.scalar.activation(out, args[0], lowering.activation_function(op.name), accumulate=acc)
            return out
        inner = nc.mark()
        op.emit(nc, out, args, op.op, op.in_types)
        nc.release_to(inner)
        return out

    @staticmethod
    def _accumulator(nc, op: _Op, local: dict, summed: set[int] | None, shape: tuple[int, int]):
        """The [P, 1] fp32 tile where the activation issuing ``op`` writes the row sum ``op.accumulate`` wants."""
        if op.accumulate is None or summed is None:
            return None
        acc = nc.sbuf_tile((shape[0], 1), FP32)
        local[op.accumulate.slot] = acc
        summed.add(op.accumulate.slot)
        return acc

    @staticmethod
    def _scalar_operands(nc, op: _Op, args: list, shape: tuple[int, int], pending: dict):
        """(x, scale, bias) with activation(x, scale, bias) == op(args) bit for bit, or None when this
        op's operands have no such form (two full tiles, or a zero bias the activation would skip)."""
        if op.scalar_form == "square":
            return (args[0], 1.0, 0.0) if args[0].shape == shape else None
        if op.scalar_form == "normalize":
            key = ("reciprocal", op.args[1][1])
            if key not in pending:
                pending[key] = nc.sbuf_tile(args[1].shape, FP32)
                nc.vector.tensor_unary(pending[key], args[1], "reciprocal", dtype=FP32)
            return args[0], pending[key], 0.0
        (a, b), (_, slot_a), (_, slot_b) = args, *op.args

        def per_row(t) -> bool:
            return not isinstance(t, Tile) or t.shape == (shape[0], 1)

        if isinstance(a, Tile) and a.shape == shape and per_row(b):
            x, other, other_slot, x_first = a, b, slot_b, True
        elif isinstance(b, Tile) and b.shape == shape and per_row(a):
            x, other, other_slot, x_first = b, a, slot_a, False
        else:
            return None
        if op.name == "multiply":
            return x, other, 0.0
        scale = 1.0
        if op.name == "add" or not x_first:
            bias = other
            if op.name == "subtract":  # other - x
                scale = -1.0
        elif isinstance(other, Tile):  # x - other: x + (-other)
            key = ("neg", other_slot)
            if key not in pending:
                neg = nc.sbuf_tile(other.shape, FP32)
                nc.vector.tensor_scalar(neg, other, "multiply", -1.0, dtype=FP32)
                pending[key] = neg
            bias = pending[key]
        else:
            bias = -np.float32(other)
        if not isinstance(bias, Tile) and np.float32(bias) == 0 and not np.signbit(np.float32(bias)):
            return None  # x + 0.0 turns -0.0 into +0.0; the activation skips a zero bias
        return x, scale, bias

    def _finish_reduce(self, nc, acc, op: _Op, out_access: dict, r0: int, r1: int):
        out = nc.sbuf_tile((acc.partitions, 1), op.dtype)
        if op.init_combine:
            nc.vector.tensor_scalar(out, acc, op.alu, op.init, dtype=op.reduce_dtype)
        else:
            nc.vector.tensor_copy(out, acc)
        if op.slot in out_access:
            self._store(nc, out, op.slot, out_access, r0, r1, 0, 1)
        return out
