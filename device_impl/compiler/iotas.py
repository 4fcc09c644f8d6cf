"""Iotas made inside the fused group that reads them, per tile, as the eager kernels make their index tiles.

An ``iota`` op was a step of its own: GpSimd wrote the index (or, through the divisions and remainders of
``steps._iota``, a coordinate of a larger shape) into the arena, and every group reading it loaded it back
through its view (a broadcast of a row or column index: eye, tril/triu's masks; arange's and linspace's
index). Issue 21 (compiled linspace 1.54x, arange 1.19x, eye 1.18x, triu 1.16x the eager kernel): the eager
kernels write the index tile they read with one GpSimd ``iota`` (``kernels/random/factories.py``,
``kernels/shape/tril_triu.py``), no store, no load, no step between.

``generate`` (a build pass, after the groups' tile plans) finds, in each flat group, the loads whose value is
an iota seen through layout ops and writes them per tile instead: one GpSimd ``iota`` where the tile's values
are an affine function of its position (``base + p * partition_step + f * free_step``), else, in a small
group, a GpSimd program computing them from each element's flat index. The group walks its flat tiles, or
one tile row per row of its last dimension (``tiles["width"]``: a [37, 37] eye's row and column index are
affine there, not in flat tiles of 11 elements) where that walk's instructions cost no more. The load leaves
the group (``step["generated"]`` holds the iota and its view chain, so ``groups.GroupRunner`` needs nothing
else); an iota no step then reads is not made (``schedule.finish``). Same bits: the iota's integers, written
in the load's dtype by the same conversion (kept only where that dtype holds every value exactly).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from device_impl.compiler.memory import GROUP_SBUF_BYTES
from device_impl.compiler.ir import numpy_dtype
from device_impl.compiler.program import apply_view
from device_impl.engine.constants import PLATFORM
from device_impl.kernels.common import P, flat_tiles

# a larger iota's values (int64 at compile time, per reading group) cost more host memory than its step saves
GENERATE_LIMIT = 1 << 22
# up to here a value whose tiles are not affine is generated too, by a GpSimd program (``PROGRAM_FACTOR``
# element-steps an element: the flat index, its quotient and remainder); beyond, its DMA load is cheaper
PROGRAM_LIMIT = 1 << 14
PROGRAM_FACTOR = 3.0


# ops whose result over generated integers is an integer too: folded into the generated value where that result
# is exact in the op's dtype (``_fold``), so the op issues nothing (arange's ``iota * step + start`` of integers,
# triu's column - row, linspace's converts)
_INTEGER_OPS: dict[str, Any] = {
    "convert": lambda x: x,
    "negate": lambda x: -x,
    "add": lambda x, y: x + y,
    "subtract": lambda x, y: x - y,
    "multiply": lambda x, y: x * y,
}
_EXACT_LIMIT = 1 << 53  # int64 arithmetic of the folded values stays far from wrapping below this


def values(entry: dict[str, Any], known: dict[int, np.ndarray] | None = None) -> np.ndarray:
    """The int64 values of a generated value, flat in row-major order of its shape: an iota seen through layout
    ops, or (``entry["op"]``) an integer op of generated values (``known``, by slot) and integer immediates."""
    if "op" in entry:
        args = [known[x] if kind == "slot" else np.int64(x) for kind, x in entry["args"]]
        return np.asarray(_INTEGER_OPS[entry["op"]](*args), dtype=np.int64)
    shape = tuple(entry["shape"])
    d = entry["dimension"]
    index = np.arange(shape[d], dtype=np.int64).reshape([-1 if i == d else 1 for i in range(len(shape))])
    x = np.broadcast_to(index, shape)
    for view, view_shape in entry["chain"]:
        x = apply_view(x, view, tuple(view_shape))
    return np.ascontiguousarray(x).reshape(-1)


def affine(flat: np.ndarray, start: int, stop: int, p: int, f: int) -> tuple[int, int, int] | None:
    """(base, partition_step, free_step) with ``flat[start:stop]`` as a [p, f] tile equal to
    base + p * partition_step + f * free_step, or None where no such triple gives it."""
    tile = flat[start:stop].reshape(p, f)
    base = int(tile[0, 0])
    free_step = int(tile[0, 1] - tile[0, 0]) if f > 1 else 0
    partition_step = int(tile[1, 0] - tile[0, 0]) if p > 1 else 0
    expected = base + np.arange(p, dtype=np.int64)[:, None] * partition_step \
        + np.arange(f, dtype=np.int64)[None, :] * free_step
    return (base, partition_step, free_step) if np.array_equal(tile, expected) else None


def row_ranges(numel: int, width: int):
    """Flat ranges of whole rows of ``width`` elements, up to 128 rows a tile: (start, stop, p, f)."""
    rows = numel // width
    for r0 in range(0, rows, P):
        r1 = min(rows, r0 + P)
        yield r0 * width, r1 * width, r1 - r0, width


def ranges(step: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    """The flat tiles a flat group walks: whole rows of ``tiles["width"]`` where the plan set it."""
    numel = int(np.prod(step["shape"], dtype=np.int64))
    width = step["tiles"].get("width")
    if width:
        return list(row_ranges(numel, width))
    free = step["tiles"].get("free", 1)
    walk = list(flat_tiles(numel, free))
    if len(walk) == 2 and walk[1][2] == 1 and not step.get("rotations") and "ops" in step:
        whole = exact_tile(step, numel, free, walk[0])
        if whole is not None:
            return [whole]
    return walk


def exact_tile(step: dict[str, Any], numel: int, free: int, block: tuple[int, int, int, int]
               ) -> tuple[int, int, int, int] | None:
    """One [p, f] tile of all ``numel`` elements (p * f == numel, p <= P, f <= ``free``) in place of
    ``flat_tiles``' ``block`` and its one-row tail, where the group's ops take less time so: each op pays the
    fixed issue cost once instead of twice (a [513] lerp's 23 ops over [102, 5] and [1, 3] tiles: 2.1 us of
    VectorE, where one [57, 9] tile pays each op's issue once), but a wider f is paid by every op, and the tail's
    instructions ran while the block's results were being stored (a lone multiply of [5, 2, 2, 513] float32 ran
    1.805 -> 1.819 us in one tile). So the tile is taken where the cycles it saves exceed both: the tail's
    issue and width, less the extra columns, over the group's ops other than converts (which ride on a
    neighbour's instruction: bf16 div.Scalar's convert, divide and convert are one), beyond the block's store
    time. The smallest such f, None where there is none."""
    _, _, p0, f0 = block
    tail = numel - p0 * f0
    ops = sum(op["op"] != "convert" for op in step["ops"])  # a convert mostly rides on its neighbour's instruction
    store_bytes = sum(p0 * f0 * np.dtype(numpy_dtype(step["slots"][slot][2])).itemsize
                      for slot, _ in step.get("stores", ()))
    store_cycles = store_bytes / PLATFORM.dma_bytes_per_second * PLATFORM.vector_hz
    overhead = PLATFORM.instruction_overhead_cycles
    limit = min(free, f0 + overhead + tail - 1)
    for f in range(f0, limit + 1):
        if numel % f == 0 and numel // f <= P:
            return (0, numel, numel // f, f) if ops * (overhead + tail - (f - f0)) > store_cycles else None
    return None


def _issue_cycles(walk: list[tuple[int, int, int, int]]) -> int:
    """One elementwise instruction's cycles over ``walk`` (VectorE: the fixed issue cost plus the free size)."""
    return sum(PLATFORM.instruction_overhead_cycles + f for _, _, _, f in walk)


def _exact(flat: np.ndarray, dtype: np.dtype) -> bool:
    return bool(np.array_equal(flat.astype(dtype).astype(np.int64), flat))


def _kind(name: str) -> str:
    """A dtype name's kind, ``f`` for the reduced floats too (ml_dtypes' bfloat16 is kind ``V`` to numpy: read
    as is, it kept every bfloat16 op from folding, arange's ``iota + 3`` an add of its own: 1.18 us against the
    eager kernel's 1.17)."""
    return "f" if name in ("bfloat16", "float16") else np.dtype(numpy_dtype(name)).kind


def _fold(op: dict, found: dict[int, tuple[dict, np.ndarray]]) -> tuple[dict, np.ndarray] | None:
    """(entry, values) of ``op``'s result where every operand is generated or an integer immediate and the
    op's result in its dtype is exactly the integer result: the same bits (an integer float op rounds
    nothing below 2^24; a float zero the op would sign, a product of 0 and a negative factor or a negation,
    is never folded)."""
    fn = _INTEGER_OPS.get(op["op"])
    if fn is None or len(op["args"]) != (1 if op["op"] in ("convert", "negate") else 2):
        return None
    if any(kind == "slot" and x not in found for kind, x in op["args"]) \
            or not any(kind == "slot" for kind, _ in op["args"]):
        return None
    if any(kind == "imm" and (isinstance(x, bool) or not float(x).is_integer() or abs(x) >= _EXACT_LIMIT
                              or (isinstance(x, float) and np.signbit(x) and x == 0))
           for kind, x in op["args"]):
        return None
    if any(_kind(t) not in "iuf" for t in op["in_types"] + [op["dtype"]]):
        return None
    args = [["slot", x] if kind == "slot" else ["imm", int(x)] for kind, x in op["args"]]
    entry = {"slot": op["slot"], "op": op["op"], "args": args}
    flat = values(entry, {slot: v for slot, (_, v) in found.items()})
    if flat.size and int(np.abs(flat).max()) >= _EXACT_LIMIT:
        return None
    for (kind, x), t in zip(op["args"], op["in_types"]):  # each operand exact in the type the op reads it as
        if kind == "slot" and not _exact(found[x][1], numpy_dtype(t)):
            return None
    if not _exact(flat, numpy_dtype(op["dtype"])):
        return None
    if _kind(op["dtype"]) == "f" and op["op"] in ("multiply", "negate"):
        operands = [found[x][1] if kind == "slot" else np.int64(x) for kind, x in op["args"]]
        if op["op"] == "negate" and np.any(operands[0] == 0):
            return None
        if op["op"] == "multiply" and np.any((flat == 0) & ((operands[0] < 0) | (operands[1] < 0))):
            return None
    return entry, flat


def _entry(vid: int, views: dict, iotas: dict[int, dict], shapes: dict) -> dict[str, Any] | None:
    chain = []
    cur = vid
    while cur in views:
        chain.append([views[cur], list(shapes[cur])])
        cur = views[cur]["src"]
    if cur not in iotas:
        return None
    chain.reverse()
    return {"vid": vid, "shape": list(shapes[cur]), "dimension": iotas[cur]["attrs"]["iota_dimension"],
            "chain": chain}


def _difference(op: dict, found: dict[int, tuple[dict, np.ndarray]], slot: int) -> tuple | None:
    """A compare of two generated integer values ``a <op> b`` as ``(a - b) <op> 0``: (the difference's entry at
    ``slot``, its values, the rewritten compare). The eager eye kernel's one iota of row - column and one compare
    with 0, where comparing the row and the column index took two iotas and a two-operand compare. The same
    result: every value is an exact integer in the type it is compared as, and their difference is exact."""
    if op["op"] != "compare" or [k for k, _ in op["args"]] != ["slot", "slot"] \
            or any(x not in found for _, x in op["args"]):
        return None
    (_, a), (_, b) = op["args"]
    if any(_kind(t) not in "iuf" or not _exact(found[x][1], numpy_dtype(t))
           for (_, x), t in zip(op["args"], op["in_types"])):
        return None
    entry = {"slot": slot, "op": "subtract", "args": [["slot", a], ["slot", b]]}
    flat = values(entry, {s: v for s, (_, v) in found.items()})
    dtype = "int32" if not flat.size or int(np.abs(flat).max()) < 2 ** 31 else "int64"
    if flat.size and int(np.abs(flat).max()) >= _EXACT_LIMIT:
        return None
    attrs = dict(op["attrs"], compare_type="SIGNED")
    compare = dict(op, args=[["slot", slot], ["imm", 0]], in_types=[dtype, dtype], attrs=attrs)
    return entry, flat, compare


def generate(steps: list[dict], views: dict, shapes: dict, dtypes: dict) -> list[dict]:
    """Mark each flat group's loads of iotas that its tiles generate (see the module docstring)."""
    iotas = {step["results"][0]: step for step in steps if step["kind"] == "iota"}
    if not iotas:
        return steps
    for step in steps:
        if step["kind"] != "fused" or step["reduce_dims"] is not None or step.get("rotations"):
            continue
        numel = int(np.prod(step["shape"], dtype=np.int64))
        if not numel or numel > GENERATE_LIMIT:
            continue
        found = {}
        for slot, vid in step["loads"]:
            entry = _entry(vid, views, iotas, shapes)
            if entry is None:
                continue
            flat = values(entry)
            if flat.size == numel and _exact(flat, np.dtype(dtypes[vid])):
                entry["slot"] = slot
                found[slot] = (entry, flat)
        if not found:
            continue
        rewritten: dict[int, dict] = {}  # op position -> the op comparing a generated difference with 0
        for i, op in enumerate(step["ops"]):
            folded = _fold(op, found)
            if folded is not None:
                found[op["slot"]] = folded
                continue
            compared = _difference(op, found, len(step["slots"]))
            if compared is not None:
                entry, flat, rewritten[i] = compared
                step["slots"].append([None, "full", rewritten[i]["in_types"][0]])
                found[entry["slot"]] = entry, flat
        tiles = dict(step["tiles"])
        choices = [tiles]
        width = int(step["shape"][-1]) if step["shape"] else 0
        budget = (GROUP_SBUF_BYTES - tiles["row_bytes"]) // max(tiles["bytes_per_column"], 1)
        if 1 < width <= budget and numel % width == 0:
            choices.append({**tiles, "width": width, "sbuf_bytes": width * tiles["bytes_per_column"]
                            + tiles["row_bytes"]})
        # the walk whose instructions cost least (each pays the fixed issue cost plus its free size: a [2, 513]
        # tile row per matrix row cost triu's three VectorE ops 3.4 us, its flat [114, 9] tile 0.2 us)
        choice = min(choices, key=lambda c: (_issue_cycles(ranges({**step, "tiles": c})),
                                             "width" not in c))
        walk = ranges({**step, "tiles": choice})
        made = {slot for slot, (_, flat) in found.items()
                if numel <= PROGRAM_LIMIT or all(affine(flat, *r) is not None for r in walk)}
        # a folded op whose operands are not all generated is issued after all
        for slot in sorted(found):
            entry = found[slot][0]
            if "op" in entry and slot in made and any(k == "slot" and x not in made for k, x in entry["args"]):
                made.discard(slot)
        if not made:
            continue
        step["tiles"] = choice
        step["generated"] = [found[slot][0] for slot in sorted(made)]
        step["loads"] = [[slot, vid] for slot, vid in step["loads"] if slot not in made]
        step["ops"] = [rewritten[i] if i in rewritten and rewritten[i]["args"][0][1] in made else op
                       for i, op in enumerate(step["ops"]) if op["slot"] not in made]
    return steps
