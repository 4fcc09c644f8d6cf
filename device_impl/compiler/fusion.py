"""Fusion: turn the op list into steps (the units the schedule runs).

Greedy and linear, over program order. A *fused group* is an iteration space
that evaluates a chain of elementwise ops on SBUF tiles:

* a *flat* group walks the N elements of its values in row-major order, so
  any reshape of a value in the group is free and every op with N elements
  whose operands are in the group (or outside it) can join;
* a *reduce* group has a shape S and reduction dims D: rows are the other
  dims, columns D. A ``stablehlo.reduce`` over D of a value of shape S joins
  (its result is a per-row value, a [P, 1] tile); ops on per-row values
  (``row`` ops) join, and full ops that read a per-row value broadcast back
  along D (softmax, RMSNorm) join while a whole row fits in SBUF.

A group reads each external input once (a DMA access pattern: strided,
broadcast, sliced views cost nothing) and writes only the values used outside
it: one HBM read and one write per value crossing the group boundary.

Layout ops (reshape, transpose, broadcast_in_dim, slice, reverse) never become
steps: they are views that the readers' DMAs apply. Heavy ops (dot_general,
concatenate, gather, sort, ...) are steps of their own and close the open group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from device_impl.compiler import lowering, memory
from device_impl.compiler.errors import UnsupportedOpError
from device_impl.compiler.ir import Graph, Op

STORAGE_ONLY = ("float64", "complex64", "complex128")


class _Group:
    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape
        self.numel = int(np.prod(shape, dtype=np.int64))
        self.reduce_dims: list[int] | None = None
        self.uniform = True  # every full value has shape S (a flat group may mix reshaped shapes)
        self.slots: list[list] = []  # [vid, "full" | "row", dtype name]
        self.slot_of: dict[int, int] = {}
        self.loads: list[list] = []  # [slot, vid]
        self.loaded: set[int] = set()  # slots holding external values (loads)
        self.ops: list[dict] = []
        self.row_consumers = False  # some full op reads a per-row value: the whole row must fit

    def new_slot(self, vid: int, cls: str, dtype: str) -> int:
        self.slots.append([vid, cls, dtype])
        self.slot_of[vid] = len(self.slots) - 1
        return len(self.slots) - 1

    @property
    def rows_cols(self) -> tuple[int, int]:
        d = self.reduce_dims or []
        cols = int(np.prod([self.shape[i] for i in d], dtype=np.int64)) if d else 1
        return (self.numel // cols if cols else 0), cols

    def full_bytes(self) -> int:
        """Bytes per column if every full value were live at once (the conservative plan-time bound)."""
        return sum(np.dtype(_np(d)).itemsize for _, cls, d in self.slots if cls == "full")


def _np(dtype: str):
    from device_impl.compiler.ir import numpy_dtype

    return numpy_dtype(dtype)


class Planner:
    def __init__(self, graph: Graph):
        self.g = graph
        self.views: dict[int, dict] = {}
        self.steps: list[dict] = []
        self.groups: list[_Group] = []
        self.group: _Group | None = None
        self.external_uses: set[int] = set(graph.outputs)
        self.aside: list[_Group] = []  # flat groups of small ops independent of the open group (see place_aside)
        self._producers = graph.producers()

    # -- value classification ------------------------------------------------
    def base(self, vid: int) -> int:
        while vid in self.views:
            vid = self.views[vid]["src"]
        return vid

    def _is_identity(self, vid: int) -> bool:
        v = self.views[vid]
        src_shape = self.g.types[v["src"]].shape
        out_shape = self.g.types[vid].shape
        if v["op"] == "reshape":
            return src_shape == out_shape
        if v["op"] == "broadcast_in_dim":
            return src_shape == out_shape and v["broadcast_dimensions"] == list(range(len(out_shape)))
        if v["op"] == "transpose":
            return v["permutation"] == list(range(len(out_shape)))
        if v["op"] == "slice":
            return src_shape == out_shape
        if v["op"] == "reverse":
            return all(src_shape[d] == 1 for d in v["dimensions"])
        return False

    def classify(self, vid: int, g: _Group | None) -> tuple[str, Any]:
        """('imm', x) | ('full', slot) | ('row', slot) | ('rowb', slot) | ('ext', vid) | ('blocked', None)."""
        base = self.base(vid)
        if base in self.g.splats:
            return "imm", self.g.splats[base]
        if g is None:
            return "ext", vid
        chain: list[int] = []
        cur = vid
        while cur not in g.slot_of and cur in self.views:
            if not self._is_identity(cur):
                chain.append(cur)
            cur = self.views[cur]["src"]
        if cur not in g.slot_of:
            return "ext", vid
        slot = g.slot_of[cur]
        cls = g.slots[slot][1]
        if not chain:
            return cls, slot
        if slot in g.loaded:
            return "ext", vid  # another view of an external value: another access pattern, not a dependence
        ops = [self.views[c]["op"] for c in chain]
        if all(o == "reshape" for o in ops):
            if cls == "row" or g.reduce_dims is None:
                return cls, slot  # row-major order is unchanged
        if cls == "row" and ops[0] == "broadcast_in_dim" and all(o == "reshape" for o in ops[1:]):
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

    # -- groups ----------------------------------------------------------------
    def close(self) -> None:
        for g in self.aside:  # they read nothing the open group computes: they run before it
            self.steps.append({"kind": "fused", "group": g})
            self.groups.append(g)
        self.aside = []
        if self.group is not None:
            self.steps.append({"kind": "fused", "group": self.group})
            self.groups.append(self.group)
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
        slot = g.new_slot(vid, "full", self.g.types[vid].dtype)
        g.loaded.add(slot)
        g.loads.append([slot, vid])
        self.external_uses.add(vid)
        return ["slot", slot]

    def add_op(self, g: _Group, op: Op, cls: str) -> None:
        args = [self.operand(g, v) for v in op.operands]
        slot = g.new_slot(op.result, cls, op.type.dtype)
        g.ops.append({"op": op.name, "slot": slot, "args": args, "dtype": op.type.dtype,
                      "in_types": [self.g.types[v].dtype for v in op.operands], "attrs": _plain(op.attrs)})
        if cls == "full" and op.type.shape != g.shape:
            g.uniform = False

    def place_elementwise(self, op: Op) -> None:
        g = self.group
        if g is not None:
            kinds = [self.classify(v, g)[0] for v in op.operands]
            if "blocked" not in kinds:
                if g.reduce_dims is None:
                    if op.type.numel == g.numel and "row" not in kinds and "rowb" not in kinds:
                        self.add_op(g, op, "full")
                        return
                else:
                    if op.type.shape == g.shape and "row" not in kinds:
                        rows, cols = g.rows_cols
                        if "rowb" not in kinds or memory.fits_row(g.full_bytes() + op.type.np_dtype.itemsize, cols):
                            self.add_op(g, op, "full")
                            return
                    elif "row" in kinds and all(k in ("row", "imm") for k in kinds) \
                            and op.type.numel == g.rows_cols[0]:
                        self.add_op(g, op, "row")
                        return
            if self.place_aside(op, kinds):
                return
        g = self.new_group(op.type.shape)
        self.add_op(g, op, "full")

    def place_aside(self, op: Op, kinds: list[str]) -> bool:
        """Put a small op that reads nothing of the open group into a flat group run before it.

        A layer norm in bf16 converts its weight and bias ([C]) to fp32 between the normalisation and
        the affine step; as a group of its own, each convert closed the open row group, so the
        normalised rows went to HBM and back (bf16 layer_norm 256x512: five groups, 3.7 MB moved
        instead of 0.5). A flat group is cut the same way by its broadcast operands' converts: bf16
        ``addcmul(x0, x1, x2, value=v)`` of [1, 1, 1] x0/x2 widens each to fp32 between the product and
        the sum, and the product went to scratch and back (four steps, 2.62 us against eager's 2.19).
        Such an op (every operand external or an immediate, fewer elements than the group) joins a flat
        group of its size that runs before the open one, which stays open. Beside a flat group, only an op
        of graph inputs, constants and the values of such asides: the open group waits for its asides, so
        one reading what an earlier step computes put that step's wait in front of the whole group
        (interpolate's nearest-exact index math: 2.41 -> 2.46 us)."""
        g = self.group
        if g is None or op.type.numel >= g.numel or any(k not in ("ext", "imm") for k in kinds):
            return False
        if g.reduce_dims is None and not all(self._aside_source(v) for v in op.operands):
            return False
        for side in self.aside:
            if side.numel == op.type.numel and "blocked" not in [self.classify(v, side)[0] for v in op.operands]:
                self.add_op(side, op, "full")
                return True
        side = _Group(op.type.shape)
        self.aside.append(side)
        self.add_op(side, op, "full")
        return True

    def _aside_source(self, vid: int) -> bool:
        """Is ``vid`` a splat, a graph input or constant, or a value an aside group computes (through views)?"""
        base = self.base(vid)
        if base in self.g.splats or base not in self._producers:
            return True
        return any(base in side.slot_of for side in self.aside)

    def place_reduce(self, op: Op) -> None:
        if len(op.operands) == 4:
            return self.place_step(op, kind=_arg_reduce_kind(self.g, op))
        alu = lowering.reducer(op)
        init = op.operands[1] if len(op.operands) == 2 else None
        if alu is None or init not in self.g.splats:
            raise UnsupportedOpError("stablehlo.reduce", "only single-operand reductions with add/max/min/mul/"
                                     "and/or bodies and a constant init, or argmax/argmin pairs, lower")
        src = op.operands[0]
        dims = sorted(op.attrs["dimensions"])
        in_type = self.g.types[src]
        if in_type.dtype in STORAGE_ONLY:
            raise UnsupportedOpError("stablehlo.reduce", f"{in_type.dtype} is storage-only on the engines")
        if not dims:  # reducing nothing: the value itself
            self.views[op.result] = {"op": "reshape", "src": src}
            return
        g = self.group
        kind = self.classify(src, g)[0] if g is not None else "ext"
        joinable = (g is not None and kind in ("full", "ext") and g.uniform and g.shape == in_type.shape
                    and (g.reduce_dims is None or g.reduce_dims == dims))
        if not joinable:
            g = self.new_group(in_type.shape)
        g.reduce_dims = dims
        args = [self.operand(g, src)]
        slot = g.new_slot(op.result, "row", op.type.dtype)
        g.ops.append({"op": "reduce", "slot": slot, "args": args, "dtype": op.type.dtype,
                      "in_types": [in_type.dtype], "attrs": {"alu": alu, "init": self.g.splats[init]}})

    def place_step(self, op: Op, kind: str | None = None) -> None:
        self.close()
        for v in op.operands:
            self.external_uses.add(v)
        self.steps.append({"kind": kind or op.name, "operands": list(op.operands), "results": list(op.results),
                           "attrs": _plain(op.attrs), "body": op.attrs.get("body", [])})

    def _broadcast_scalars(self, op: Op) -> Op:
        """StableHLO's select and clamp accept 0-d predicate/bound operands with a shaped result:
        such an operand becomes an explicit broadcast view, so every elementwise operand has the
        op's shape (as the groups' tiling assumes)."""
        if op.name not in ("select", "clamp") or not op.type.shape:
            return op
        operands = list(op.operands)
        for i, v in enumerate(operands):
            t = self.g.types[v]
            if t.shape == () and op.type.shape != ():
                vid = max(self.g.types) + 1
                self.g.types[vid] = type(t)(op.type.shape, t.dtype)
                self.views[vid] = {"op": "broadcast_in_dim", "src": v, "broadcast_dimensions": []}
                operands[i] = vid
        return Op(op.name, tuple(operands), op.results, op.types, op.attrs)

    def _sort_payload(self, op: Op) -> str | None:
        """Why a sort's operands beyond the keys cannot lower, or None: the sort runner
        (``steps._sort_rows_runner``) writes each row's permutation as the second result, which is the sorted
        payload only where that payload is the index along the sorted dim (torch-mlir's sort, topk and argsort
        all sort (keys, iota)); any other payload would come out as indices, so it is refused (the graph then
        runs eagerly) rather than lowered wrong."""
        if op.name != "sort" or len(op.operands) == 1:
            return None
        if len(op.operands) > 2:
            return "only sorts of (keys[, iota]) lower"
        dim = op.attrs.get("dimension")
        for payload in op.operands[1:]:
            made = self._producers.get(payload)
            if made is None or made.name != "iota" or made.attrs.get("iota_dimension") != dim:
                return "only sorts of (keys, iota along the sorted dim) lower"
        return None

    def run(self) -> list[dict]:
        for op in self.g.ops:
            in_types = [self.g.types[v] for v in op.operands]
            if op.name in lowering.VIEWS:
                self.views[op.result] = {"op": op.name, "src": op.operands[0], **_plain(op.attrs)}
            elif op.name == "reduce":
                self.place_reduce(op)
            elif op.name in lowering.ELEMENTWISE:
                op = self._broadcast_scalars(op)
                in_types = [self.g.types[v] for v in op.operands]
                why = lowering.supported_elementwise(op, in_types)
                if why is not None:
                    raise UnsupportedOpError(f"stablehlo.{op.name}", why)
                if op.name == "convert" and in_types[0] == op.type:
                    self.views[op.result] = {"op": "reshape", "src": op.operands[0]}
                    continue
                self.place_elementwise(op)
            elif op.name in lowering.STEP_OPS:
                why = lowering.supported_step(op, in_types) or self._sort_payload(op)
                if why is not None:
                    raise UnsupportedOpError(f"stablehlo.{op.name}", why)
                self.place_step(op)
            else:
                raise UnsupportedOpError(f"stablehlo.{op.name}")
        self.close()
        return self.steps


def _arg_reduce_kind(graph: Graph, op: Op) -> str:
    """A two-operand reduce of (values, iota) with a compare/select body is argmax or argmin."""
    body = op.attrs.get("body", [])
    names = [b["name"] if isinstance(b, dict) else b for b in body]
    compares = [b for b in body if isinstance(b, dict) and b["name"] == "compare"]
    if not compares or "select" not in names or not all(v in graph.splats for v in op.operands[2:]):
        raise UnsupportedOpError("stablehlo.reduce", "a two-operand reduction that is not argmax/argmin")
    direction = compares[0]["attrs"].get("comparison_direction")
    if direction not in ("GE", "GT", "LE", "LT"):
        raise UnsupportedOpError("stablehlo.reduce", f"arg-reduction comparing {direction}")
    return "argmax" if direction in ("GE", "GT") else "argmin"


def _plain(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if isinstance(v, (int, float, str, bool, list, dict)) and k != "body"}


def plan(graph: Graph) -> tuple[list[dict], dict[int, dict], set[int]]:
    """(steps, views, base values read outside the step that produced them or returned)."""
    planner = Planner(graph)
    steps = planner.run()
    used = {planner.base(v) for v in planner.external_uses}
    return steps, planner.views, used
