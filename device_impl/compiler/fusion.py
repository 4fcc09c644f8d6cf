"""Fusion: turn the op list into steps (the units the schedule runs).

Greedy and linear, over program order. A *fused group* is an iteration space
(the full shape S of its elementwise values, optionally with reduction dims D)
that evaluates a chain of elementwise ops on SBUF tiles; a reduction whose input
is a full value of the open group joins it (its result is a per-row value, a
[P, 1] tile), and ops on per-row values, or full ops that broadcast them back
along the reduced dims (softmax, RMSNorm), join too while a whole row fits in
SBUF. A group reads each external input once (a DMA access pattern: strided,
broadcast, sliced views are free) and writes only values used outside it.

Layout ops (reshape, transpose, broadcast_in_dim, slice, reverse) never become
steps: they are views that the readers' DMAs apply. Heavy ops (dot_general,
concatenate, gather, iota) are steps of their own and close the open group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from device_impl.compiler import lowering, memory
from device_impl.compiler.errors import UnsupportedOpError
from device_impl.compiler.ir import Graph, Op, TensorType


class _Group:
    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.reduce_dims: list[int] | None = None
        self.slots: dict[int, tuple[int, str]] = {}  # value id -> (slot, "full" | "row")
        self.loads: list[list] = []  # [slot, value id]
        self.ops: list[dict] = []
        self.count = 0
        self.row_consumers = False  # a full op reads a per-row value: the whole row must fit
        self.full_dtypes: list[str] = []

    def slot(self) -> int:
        self.count += 1
        return self.count - 1

    @property
    def rows_cols(self) -> tuple[int, int]:
        d = self.reduce_dims or []
        cols = int(np.prod([self.shape[i] for i in d], dtype=np.int64)) if d else 1
        total = int(np.prod(self.shape, dtype=np.int64))
        return (total // cols if cols else 0), cols


class Planner:
    def __init__(self, graph: Graph):
        self.g = graph
        self.views: dict[int, dict] = {}
        self.steps: list[dict] = []
        self.group: _Group | None = None
        self.producer: dict[int, int] = {}  # value -> step index (or -1 for the open group)
        self.external_uses: set[int] = set(graph.outputs)

    # -- value classification ------------------------------------------------
    def _is_identity(self, vid: int) -> bool:
        v = self.views.get(vid)
        if v is None:
            return False
        src_shape = self.g.types[v["src"]].shape
        out_shape = self.g.types[vid].shape
        if v["op"] == "reshape":
            return src_shape == out_shape
        if v["op"] == "broadcast_in_dim":
            return src_shape == out_shape and v["broadcast_dimensions"] == list(range(len(out_shape)))
        if v["op"] == "transpose":
            return v["permutation"] == list(range(len(out_shape)))
        return False

    def base(self, vid: int) -> int:
        while vid in self.views:
            vid = self.views[vid]["src"]
        return vid

    def classify(self, vid: int, g: _Group | None) -> tuple[str, Any]:
        """('imm', x) | ('full', slot) | ('row', slot) | ('rowb', slot) | ('ext', vid) | ('blocked', None)."""
        if vid in self.g.splats:
            return "imm", self.g.splats[vid]
        if g is None:
            return "ext", vid
        chain: list[int] = []
        cur = vid
        while cur not in g.slots and cur in self.views:
            if not self._is_identity(cur):
                chain.append(cur)
            cur = self.views[cur]["src"]
        if cur not in g.slots:
            return "ext", vid
        slot, cls = g.slots[cur]
        ops = [self.views[c]["op"] for c in chain]
        if not chain:
            return cls, slot
        if cls == "row" and all(o == "reshape" for o in ops):
            return "row", slot
        if cls == "row" and ops and ops[0] == "broadcast_in_dim" and all(o == "reshape" for o in ops[1:]):
            if self._maps_rows(chain[0], g):
                return "rowb", slot
        return "blocked", None

    def _maps_rows(self, bvid: int, g: _Group) -> bool:
        """Does broadcast_in_dim ``bvid`` spread a per-row value along exactly the reduced dims of S?"""
        v = self.views[bvid]
        out = self.g.types[bvid].shape
        if out != g.shape or g.reduce_dims is None:
            return False
        src = self.g.types[v["src"]].shape
        dims = v["broadcast_dimensions"]
        mapped = [d for d, n in zip(dims, src) if n != 1]
        kept = [i for i in range(len(out)) if i not in g.reduce_dims and out[i] != 1]
        return mapped == kept and [n for n in src if n != 1] == [out[i] for i in kept]

    # -- steps ---------------------------------------------------------------
    def close(self) -> None:
        g = self.group
        if g is None:
            return
        index = len(self.steps)
        self.steps.append({"kind": "fused", "group": g})
        for vid in g.slots:
            self.producer[vid] = index
        self.group = None

    def new_group(self, shape: tuple[int, ...]) -> _Group:
        self.close()
        self.group = _Group(shape)
        return self.group

    def operand(self, g: _Group, vid: int) -> list:
        kind, x = self.classify(vid, g)
        if kind == "imm":
            return ["imm", x]
        if kind in ("full", "row", "rowb"):
            if kind == "rowb":
                g.row_consumers = True
            return ["slot", x]
        slot = g.slot()
        g.loads.append([slot, vid])
        self.external_uses.add(vid)
        return ["slot", slot]

    def add_op(self, g: _Group, op: Op, cls: str, extra: dict | None = None) -> None:
        args = [self.operand(g, v) for v in op.operands]
        slot = g.slot()
        g.slots[op.result] = (slot, cls)
        entry = {"op": op.name, "slot": slot, "args": args, "cls": cls, "dtype": op.type.dtype,
                 "in_types": [self.g.types[v].dtype for v in op.operands], "attrs": _plain(op.attrs)}
        entry.update(extra or {})
        g.ops.append(entry)
        if cls == "full":
            g.full_dtypes.append(op.type.dtype)

    def place_elementwise(self, op: Op) -> None:
        g = self.group
        kinds = [self.classify(v, g)[0] for v in op.operands]
        shape = op.type.shape
        if g is not None and "blocked" not in kinds:
            if shape == g.shape and any(k in ("full", "rowb") for k in kinds) and "row" not in kinds:
                if "rowb" in kinds and not memory.fits_row(g, op.type.dtype):
                    pass
                else:
                    self.add_op(g, op, "full")
                    return
            if g.reduce_dims is not None and "row" in kinds and all(k in ("row", "imm") for k in kinds) \
                    and op.type.numel == g.rows_cols[0]:
                self.add_op(g, op, "row")
                return
        g = self.new_group(shape)
        self.add_op(g, op, "full")

    def place_reduce(self, op: Op) -> None:
        alu = lowering.reducer(op)
        init = op.operands[1]
        if alu is None or init not in self.g.splats:
            raise UnsupportedOpError("stablehlo.reduce", "only single-operand reductions with add/max/min/mul/"
                                     "and/or bodies and a constant init lower")
        src = op.operands[0]
        dims = sorted(op.attrs["dimensions"])
        in_type = self.g.types[src]
        if in_type.dtype in ("float64", "complex64", "complex128"):
            raise UnsupportedOpError("stablehlo.reduce", f"{in_type.dtype} is storage-only on the engines")
        g = self.group
        kind = self.classify(src, g)[0] if g is not None else "ext"
        joinable = (g is not None and kind == "full" and g.shape == in_type.shape
                    and (g.reduce_dims is None or g.reduce_dims == dims) and dims)
        if not joinable:
            g = self.new_group(in_type.shape)
        g.reduce_dims = dims
        args = [self.operand(g, src)]
        slot = g.slot()
        g.slots[op.result] = (slot, "row")
        g.ops.append({"op": "reduce", "slot": slot, "args": args, "cls": "row", "dtype": op.type.dtype,
                      "in_types": [in_type.dtype], "attrs": {"alu": alu, "init": self.g.splats[init]}})

    def place_step(self, op: Op) -> None:
        self.close()
        index = len(self.steps)
        for v in op.operands:
            self.external_uses.add(v)
        self.steps.append({"kind": op.name, "operands": list(op.operands), "result": op.result,
                           "attrs": _plain(op.attrs)})
        self.producer[op.result] = index

    def run(self) -> list[dict]:
        for op in self.g.ops:
            in_types = [self.g.types[v] for v in op.operands]
            if op.name in lowering.VIEWS:
                self.views[op.result] = {"op": op.name, "src": op.operands[0], **_plain(op.attrs)}
            elif op.name == "reduce":
                self.place_reduce(op)
            elif op.name in lowering.ELEMENTWISE:
                why = lowering.supported_elementwise(op, in_types)
                if why is not None:
                    raise UnsupportedOpError(f"stablehlo.{op.name}", why)
                if op.name == "convert" and in_types[0] == op.type:
                    self.views[op.result] = {"op": "reshape", "src": op.operands[0]}
                    continue
                self.place_elementwise(op)
            elif op.name in lowering.STEP_OPS:
                if any(t.dtype in ("float64", "complex64", "complex128") for t in (*in_types, op.type)):
                    raise UnsupportedOpError(f"stablehlo.{op.name}", "float64/complex are storage-only")
                self.place_step(op)
            else:
                raise UnsupportedOpError(f"stablehlo.{op.name}")
        self.close()
        return self.steps


def _plain(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if isinstance(v, (int, float, str, bool, list, dict)) and k != "body"}


def plan(graph: Graph) -> tuple[list[dict], dict[int, dict], set[int]]:
    """(steps, views, values read outside the step that produced them)."""
    planner = Planner(graph)
    steps = planner.run()
    used = {planner.base(v) for v in planner.external_uses}
    return steps, planner.views, used
