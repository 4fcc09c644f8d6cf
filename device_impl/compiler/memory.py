"""Memory planning: SBUF budgets of fused groups and the HBM scratch arena.

SBUF. A fused group's tiles are [P, F]: every value it holds costs
F * itemsize bytes of each partition. ``group_plan`` simulates one tile
iteration of the group in program order (a load is issued just before its
first use, a tile freed after its last use; ops whose emitters widen or
materialise immediates get scratch for three temporaries) and finds the
peak bytes per column; F (flat groups) or the column chunk (reduce groups) is
the largest size whose peak fits ``GROUP_SBUF_BYTES`` of the 192 KiB
partition (the rest absorbs the next iteration's loads: double buffering).
A group whose full values read per-row results must hold whole rows: the
planner admits such an op only while ``fits_row`` holds with every full value
live at once (an upper bound of the simulated peak), so the check here can
only fail on a planner bug, and then it raises rather than overflow.

Scratch arena. Values crossing step boundaries that are not graph outputs live in one
scratch arena per execution; ``arena_plan`` gives each an offset so that
buffers whose lifetimes (producing step .. last reading step) do not overlap
share bytes (first fit, biggest first).

Where the arena lives (``arena_space``): a small arena stays on chip, one SBUF tile
[128, ceil(bytes / 128)] allocated for the launch (issue 21: "activations that fit kept in
SBUF between steps instead of a store and a load through HBM"); the steps still move values
in and out of it with DMA (SBUF-to-SBUF transfers: the same queues and descriptors, no HBM
bytes), so every runner's access patterns stay as they are. The tile is a real allocation
of the launch's SBUF pool, beside every step's own tiles: ``executor.record_schedule`` runs
the program with it at compile time, and a program whose steps then overflow SBUF is
planned again with the arena in HBM. Larger arenas, and programs that are not recorded
(data-dependent steps), use HBM.
"""

from __future__ import annotations

import numpy as np

from device_impl.compiler.ir import numpy_dtype
from device_impl.engine.constants import PLATFORM

GROUP_SBUF_BYTES = PLATFORM.sbuf_bytes_per_partition // 2  # per partition, for one group iteration's tiles
FREE_MAX = 2048  # elements per partition per flat tile, as the eager elementwise kernels
PIPELINED_TILES = 2  # a DMA-bound flat group covers its elements in at least this many tiles ...
PIPELINED_FREE_MIN = 256  # ... of at least this many elements per partition
TEMP_BYTES_PER_COLUMN = 3 * 8  # widen / immediate tiles an emitter may allocate (three, up to 8 B each)
ARENA_ALIGN = 64  # bytes: every scratch buffer starts on a DMA-friendly boundary


class PlanError(RuntimeError):
    """A fused group cannot fit SBUF (a compiler bug: the planner should have split it)."""


ROW_TILE_RESERVE = 512  # bytes per partition kept for the group's [P, 1] per-row tiles


def fits_row(full_bytes_per_column: int, cols: int) -> bool:
    """Whether a whole row of ``cols`` columns fits with every full value live at once."""
    return (full_bytes_per_column + TEMP_BYTES_PER_COLUMN) * cols + ROW_TILE_RESERVE <= GROUP_SBUF_BYTES


def _itemsize(dtype: str) -> int:
    return numpy_dtype(dtype).itemsize


def group_peak(step: dict) -> tuple[int, int]:
    """(peak bytes per column of full tiles, peak bytes of [P, 1] row tiles) over one iteration.

    Order of one iteration, as the executor runs it: before op i, the loads
    first used by op i; then op i's result; a tile is freed after its last use
    (a result nobody reads again is freed once stored)."""
    slots, ops = step["slots"], step["ops"]
    last: dict[int, int] = {}
    first_use: dict[int, int] = {}
    for i, op in enumerate(ops):
        for kind, x in op["args"]:
            if kind == "slot":
                last[x] = i
                if x in step["loaded"]:
                    first_use.setdefault(x, i)
    loads_at: dict[int, list[int]] = {}
    for slot, i in first_use.items():
        loads_at.setdefault(i, []).append(slot)
    alive: dict[int, tuple[str, int]] = {}
    live = {"full": 0, "row": 0}
    peak_full = peak_row = 0
    for i, op in enumerate(ops):
        for slot in loads_at.get(i, ()):
            alive[slot] = ("full", _itemsize(slots[slot][2]))
            live["full"] += alive[slot][1]
        cls, size = slots[op["slot"]][1], _itemsize(op["dtype"])
        if op["op"] == "reduce":
            size = 2 * max(size, 4)  # the result and an fp32 partial
        alive[op["slot"]] = (cls, size)
        live[cls] += size
        peak_full = max(peak_full, live["full"] + TEMP_BYTES_PER_COLUMN)
        peak_row = max(peak_row, live["row"])
        for slot in [s for s in alive if last.get(s, i) <= i]:
            c, n = alive.pop(slot)
            live[c] -= n
    return peak_full, peak_row


def balanced_free(numel: int, free: int) -> int:
    """The free size of as many [P, free] tiles over ``numel`` elements as ``free`` makes, as even as can be
    (``free`` itself where they are one tile)."""
    p = PLATFORM.partitions
    tiles = -(-numel // (p * free)) if numel else 1
    if tiles <= 1:
        return free  # one block: its width is iotas.ranges' to choose
    return max(1, min(free, -(-numel // (p * tiles))))


def group_plan(step: dict, balance: bool = False) -> dict:
    """Tile sizes of a fused group: ``free`` (flat groups) or ``chunk`` columns (reduce groups).

    ``balance``: a flat group's tiles as even as their count allows (``balanced_free``). The pipelining rule
    below cut round's [3, 5, 5, 513] into a [128, 256] tile, a [22, 256] one and a ragged row, the first tile's
    load and compute exposed before anything overlapped (bf16: 2.085 us against eager's 2.038); two even tiles
    overlap half of each (1.84). Not where a load is a broadcast (``balance`` False): its DMA moves a run per
    element, the group is DMA-bound, and the exposed work is the last tile's compute and store, which an uneven
    split keeps small (heaviside of a 0-d tensor and [3, 5, 5, 513]: 6.69 us uneven, 6.73 even)."""
    per_column, row_bytes = group_peak(step)
    budget = GROUP_SBUF_BYTES - row_bytes
    if step["reduce_dims"] is None:
        free = max(1, min(FREE_MAX, budget // max(per_column, 1)))
        # A group that moves at least one value per two ops is DMA-bound: in at least two tiles, the second
        # tile's loads run under the first's compute and the first's stores under the second's (the decoder's
        # q rotary, 5 ops over 5 loads and a store, loaded, computed and stored one [128, 512] tile in series).
        # A compute-bound chain keeps its widest tiles: a 10-op bf16 chain over [128, 512] ran slower in two,
        # each instruction's fixed cost paid twice for little overlap.
        numel = int(np.prod(step["shape"], dtype=np.int64))
        if 2 * (len(step["loads"]) + len(step["stores"])) >= len(step["ops"]):
            free = min(free, max(PIPELINED_FREE_MIN, -(-numel // (PLATFORM.partitions * PIPELINED_TILES))))
        if balance:
            free = balanced_free(numel, free)
        return {"free": int(free), "bytes_per_column": per_column, "row_bytes": row_bytes,
                "sbuf_bytes": int(free * per_column + row_bytes)}
    cols = step["cols"]
    fit = budget // max(per_column, 1)
    if fit < 1:
        raise PlanError(f"fused group of {len(step['ops'])} ops needs {per_column} B per column; SBUF has "
                        f"{GROUP_SBUF_BYTES} B per partition for it")
    chunk = int(min(cols, fit))
    if chunk < cols and step["row_consumers"]:
        raise PlanError(f"fused group reads per-row values across rows of {cols} columns ({per_column} B per "
                        f"column) but only {fit} columns fit SBUF; the planner must split it")
    return {"chunk": max(chunk, 1), "bytes_per_column": per_column, "row_bytes": row_bytes,
            "sbuf_bytes": int(chunk * per_column + row_bytes)}


def arena_plan(sizes: dict[int, int], lifetimes: dict[int, tuple[int, int]]) -> tuple[dict[int, int], int]:
    """Offsets in the scratch arena for buffers of ``sizes`` bytes alive over ``lifetimes`` (step
    ranges, inclusive); returns (offsets, arena bytes)."""
    placed: list[tuple[int, int, int, int]] = []  # offset, end, first, last
    offsets: dict[int, int] = {}
    for vid in sorted(sizes, key=lambda v: (-sizes[v], v)):
        size = -(-max(sizes[vid], 1) // ARENA_ALIGN) * ARENA_ALIGN
        first, last = lifetimes[vid]
        clashes = sorted((o, e) for o, e, f, l in placed if not (l < first or last < f))
        offset = 0
        for o, e in clashes:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[vid] = offset
        placed.append((offset, offset + size, first, last))
    total = max((e for _, e, _, _ in placed), default=0)
    return offsets, int(total)


# per partition: the most of SBUF a program's scratch arena may take (the steps' own tiles are planned within
# the other 160 KiB: GROUP_SBUF_BYTES for a group's iteration, matmul.RESIDENT_BYTES for resident operands)
ARENA_SBUF_BYTES = 32 * 1024


def arena_space(scratch_bytes: int) -> str:
    """"sbuf" when the scratch arena fits ``ARENA_SBUF_BYTES`` of every partition, else "hbm"."""
    if scratch_bytes <= 0:
        return "hbm"
    per_partition = -(-scratch_bytes // PLATFORM.partitions)
    return "sbuf" if per_partition <= ARENA_SBUF_BYTES else "hbm"


def nbytes(shape, dtype: str) -> int:
    return int(np.prod(shape, dtype=np.int64)) * _itemsize(dtype)
