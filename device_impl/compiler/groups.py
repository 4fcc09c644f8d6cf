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

from typing import Any

import numpy as np

from device_impl.compiler import lowering
from device_impl.compiler.ir import Op, TensorType, numpy_dtype
from device_impl.engine.dtypes import FP32, compute_dtype
from device_impl.kernels.common import P, flat_tiles

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
                 "reduce_dtype", "init")

    def __init__(self, index: int, entry: dict, cls: str):
        self.index = index
        self.name = entry["op"]
        self.slot = entry["slot"]
        self.args = [tuple(a) for a in entry["args"]]
        self.dtype = numpy_dtype(entry["dtype"])
        self.cls = cls
        self.in_types = [TensorType((), d) for d in entry["in_types"]]
        self.op = Op(self.name, (), (), (TensorType((), entry["dtype"]),), entry.get("attrs", {}))
        if self.name == "reduce":
            self.alu = entry["attrs"]["alu"]
            self.init = entry["attrs"]["init"]
            self.reduce_dtype = compute_dtype(numpy_dtype(entry["in_types"][0]))
            self.init_combine = not _is_identity(self.alu, self.init, self.dtype)
            self.emit = None
        else:
            self.emit = lowering.ELEMENTWISE[self.name]


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
        self.inner_a = int(np.prod(a[na - self.ka:], dtype=np.int64))
        self.inner_b = int(np.prod(b[len(b) - self.kb:], dtype=np.int64))

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


class GroupRunner:
    def __init__(self, step: dict):
        self.step = step
        self.shape = tuple(step["shape"])
        self.reduce_dims = step["reduce_dims"]
        slots = step["slots"]
        self.slot_dtype = [numpy_dtype(d) for _, _, d in slots]
        self.slot_cls = [c for _, c, _ in slots]
        self.ops = [_Op(i, e, slots[e["slot"]][1]) for i, e in enumerate(step["ops"])]
        self.loads = {slot: vid for slot, vid in step["loads"]}
        self.stores = {slot: vid for slot, vid in step["stores"]}
        self.rows, self.cols = step["rows"], step["cols"]
        tiles = step["tiles"]
        self.free = tiles.get("free", 1)
        self.chunk = tiles.get("chunk", self.cols)
        last: dict[int, int] = {}
        first: dict[int, int] = {}
        for op in self.ops:
            for kind, x in op.args:
                if kind == "slot":
                    last[x] = op.index
                    if x in self.loads:
                        first.setdefault(x, op.index)
        self.loads_at: dict[int, list[int]] = {}
        for slot, i in first.items():
            self.loads_at.setdefault(i, []).append(slot)
        self.release_at: dict[int, list[int]] = {}
        for op in self.ops:
            self.release_at.setdefault(last.get(op.slot, op.index), []).append(op.slot)
        for slot in first:
            self.release_at.setdefault(last[slot], []).append(slot)
        self.numel = int(np.prod(self.shape, dtype=np.int64))

    def __call__(self, nc, env) -> None:
        if self.numel == 0:
            return
        loads = {slot: env.access(vid) for slot, vid in self.loads.items()}
        stores = {slot: env.access(vid) for slot, vid in self.stores.items()}
        if self.reduce_dims is None:
            self._flat(nc, loads, stores)
        else:
            self._rows(nc, loads, stores)

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
        for start, stop, p, f in ranges or flat_tiles(self.numel, self.free):
            mark = nc.mark()
            tiles: dict[int, Any] = {}
            for op in self.ops:
                for slot in self.loads_at.get(op.index, ()):
                    view = loads[slot]
                    t = nc.sbuf_tile((p, f), view.dtype)
                    nc.dma.load_flat(t, view, start, stop)
                    tiles[slot] = t
                out = nc.sbuf_tile((p, f), op.dtype)
                args = [tiles[x] if kind == "slot" else x for kind, x in op.args]
                inner = nc.mark()
                op.emit(nc, out, args, op.op, op.in_types)
                nc.release_to(inner)
                tiles[op.slot] = out
                if op.slot in stores:
                    nc.dma.store_flat(stores[op.slot], start, stop, out)
                for slot in self.release_at.get(op.index, ()):
                    nc.release(tiles.pop(slot))
            nc.release_to(mark)

    # -- reduce groups ------------------------------------------------------------------------
    def _rows(self, nc, loads: dict, stores: dict, block: int = P) -> None:
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
        phased = self.chunk < self.cols
        for r0 in range(0, self.rows, block):
            r1 = min(self.rows, r0 + block)
            mark = nc.mark()
            if not phased:
                self._pass(nc, self.ops, r0, r1, 0, self.cols, access, out_access, {}, None)
            else:
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
        for a0, a1, b0, b1, view in out_access[slot].pieces(r0, r1, c0, c1):
            nc.dma.store(view, tile if (a0, a1, b0, b1) == (0, p, 0, c) else tile[a0:a1, b0:b1])

    def _pass(self, nc, ops: list[_Op], r0: int, r1: int, c0: int, c1: int, access: dict, out_access: dict,
              tiles: dict, first_chunk: bool | None) -> None:
        """One tile iteration over ``ops``. ``first_chunk`` is None for a whole-row pass; else reductions
        accumulate partial results into ``tiles`` (fp32 [P, 1] accumulators)."""
        p, c = r1 - r0, c1 - c0
        local: dict[int, Any] = dict(tiles)
        for op in ops:
            for slot in self.loads_at.get(op.index, ()):
                local[slot] = self._load(nc, slot, access, r0, r1, c0, c1)
            args = [local[x] if kind == "slot" else x for kind, x in op.args]
            if op.name == "reduce":
                src = args[0]
                if src.free < c:  # a value constant along the columns: widen before reducing
                    src = lowering.widen(nc, src, (p, c))
                if first_chunk is None:
                    out = nc.sbuf_tile((p, 1), op.dtype)
                    if op.init_combine:
                        part = nc.sbuf_tile((p, 1), op.reduce_dtype)
                        nc.vector.tensor_reduce(part, src, op.alu, dtype=op.reduce_dtype)
                        nc.vector.tensor_scalar(out, part, op.alu, op.init, dtype=op.reduce_dtype)
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
            else:
                shape = (p, c) if op.cls == "full" else (p, 1)
                out = nc.sbuf_tile(shape, op.dtype)
                inner = nc.mark()
                op.emit(nc, out, args, op.op, op.in_types)
                nc.release_to(inner)
                local[op.slot] = out
                if op.slot in out_access:
                    if op.cls == "full":
                        self._store(nc, out, op.slot, out_access, r0, r1, c0, c1)
                    else:
                        self._store(nc, out, op.slot, out_access, r0, r1, 0, 1)
            for slot in self.release_at.get(op.index, ()):
                if slot not in tiles and slot in local:
                    nc.release(local.pop(slot))

    def _finish_reduce(self, nc, acc, op: _Op, out_access: dict, r0: int, r1: int):
        out = nc.sbuf_tile((acc.partitions, 1), op.dtype)
        if op.init_combine:
            nc.vector.tensor_scalar(out, acc, op.alu, op.init, dtype=op.reduce_dtype)
        else:
            nc.vector.tensor_copy(out, acc)
        if op.slot in out_access:
            self._store(nc, out, op.slot, out_access, r0, r1, 0, 1)
        return out
