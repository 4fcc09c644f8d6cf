"""Fusing queued elementwise steps into one tile program.

A *group* is a run of consecutive steps over outputs of one shape and memory
order, so flat element ``i`` is the same logical element in every step. Its
program walks the flat tiles once: per tile, each external input is DMA-loaded
once, every step's ``emit`` runs on SBUF tiles (a step reading an earlier
step's output takes that step's result tile, already rounded to the output
dtype as the eager store would have), and each output that anyone can still
observe is stored once. The numerics are therefore bit-identical to running
the steps one by one: the same emits on the same values in the same dtypes.

Hazards decide where a group ends: a step joins only if every tensor it reads
either is exactly (same storage, offset, sizes, strides, dtype) a tensor the
group wrote, or overlaps nothing the group wrote; and its output overlaps
nothing the group touched except exactly. Exact reuse is safe because every
step of a group reads and writes the same elements in the same tile.

Programs are cached by the group's signature: op names, output and operand
shapes, strides, dtypes, promotion arguments, which storages coincide, and
which outputs are stored. The emits themselves (closures over each call's
scalars) are bound per run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from device_impl.engine import launch
from device_impl.engine.constants import PLATFORM
from device_impl.eager.capture import Step
from device_impl.eager.stats import STATS
from device_impl.kernels.common import Pointwise, flat_tiles, memory_order, prepare_elementwise

MAX_GROUP = 64  # steps per program: bounds the signature and the per-tile Python loop
_SCRATCH_BYTES = 6 * 4  # per element: fp32 scratch tiles an emit may allocate (gelu_backward uses 3 + masks)


@dataclass(frozen=True)
class View:
    """Where a tensor's elements are, for hazard checks: storage, byte span and exact layout."""

    storage: int
    lo: int
    hi: int
    layout: tuple

    @classmethod
    def of(cls, t: torch.Tensor) -> "View":
        size = t.element_size()
        lo = t.storage_offset() * size
        hi = lo + size + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) * size
        return cls(t.untyped_storage().data_ptr(), lo, hi,
                   (t.storage_offset(), tuple(t.shape), t.stride(), t.dtype))

    def overlaps(self, other: "View") -> bool:
        return self.storage == other.storage and self.lo < other.hi and other.lo < self.hi


def _conflicts(view: View, others: Sequence[View]) -> bool:
    return any(view.overlaps(o) and view != o for o in others)


def partition(steps: Sequence[Step]) -> list[list[Step]]:
    """Split the queue into groups of consecutive steps that can share one tile loop."""
    groups: list[list[Step]] = []
    current: list[Step] = []
    key: tuple | None = None
    written: list[View] = []
    touched: list[View] = []
    for step in steps:
        out = step.out
        step_key = (out.device.index, tuple(out.shape), tuple(memory_order(out)) if out.dim() > 1 else (),
                    step.free_max)
        reads = [View.of(o) for o in step.operands if isinstance(o, torch.Tensor)]
        write = View.of(out)
        # A step that partially overlaps its own output depends on eager's tiling: it runs alone, as in eager.
        alone = _conflicts(write, reads)
        joins = (current and step_key == key and len(current) < MAX_GROUP and not alone
                 and not any(_conflicts(r, written) for r in reads) and not _conflicts(write, touched))
        if not joins:
            if current:
                groups.append(current)
            current, key, written, touched = [], step_key, [], []
        current.append(step)
        written.append(write)
        touched.extend(reads)
        touched.append(write)
        if alone:
            key = None  # nothing joins it either
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True)
class Program:
    """A group's tile loop, independent of the tensors and scalars of one run."""

    name: str
    free_max: int
    routes: tuple  # per step, per operand: slot to read, or None for a scalar
    loads: tuple  # per step, per operand: True when that slot is loaded from HBM there
    results: tuple  # per step: the slot its result goes to
    stores: tuple  # per step: store the result to HBM
    releases: tuple  # per step: slots whose last use is that step


def signature(group: Sequence[Step], stored: Sequence[bool]) -> tuple:
    storages: dict[int, int] = {}

    def describe(t: torch.Tensor) -> tuple:
        view = View.of(t)
        return (storages.setdefault(view.storage, len(storages)),) + view.layout

    parts = []
    for step, store in zip(group, stored):
        operands = tuple(describe(o) if isinstance(o, torch.Tensor) else type(o) for o in step.operands)
        parts.append((step.name, describe(step.out), operands, step.common_dtype, step.promoted,
                      step.round_scalars, store))
    return (group[0].free_max, tuple(parts))


def plan(group: Sequence[Step], stored: Sequence[bool]) -> Program:
    slot_of: dict[tuple, int] = {}  # exact layout -> slot holding its current value in the tile
    itemsize: list[int] = []
    last_use: list[int] = []
    routes, loads, results = [], [], []
    for j, step in enumerate(group):
        route, load = [], []
        for o in step.operands:
            if not isinstance(o, torch.Tensor):
                route.append(None)
                load.append(False)
                continue
            view = View.of(o)
            key = (view.storage,) + view.layout
            slot = slot_of.get(key)
            load.append(slot is None)
            if slot is None:
                slot = slot_of[key] = len(itemsize)
                itemsize.append(o.element_size())
                last_use.append(j)
            last_use[slot] = j
            route.append(slot)
        view = View.of(step.out)
        slot = slot_of[(view.storage,) + view.layout] = len(itemsize)
        itemsize.append(step.out.element_size())
        last_use.append(j)
        routes.append(tuple(route))
        loads.append(tuple(load))
        results.append(slot)
    # A layout written twice in the group needs only its last value stored.
    last_write = {}
    for j, step in enumerate(group):
        view = View.of(step.out)
        last_write[(view.storage,) + view.layout] = j
    stores = []
    for j, step in enumerate(group):
        view = View.of(step.out)
        keep = stored[j] and last_write[(view.storage,) + view.layout] == j
        if not keep:
            STATS.stores_elided += 1
        stores.append(keep)
    releases = [[] for _ in group]
    for slot, j in enumerate(last_use):
        releases[j].append(slot)
    # Size tiles so the most tiles live at once (plus emit scratch) fit in SBUF.
    live, peak = 0, 0
    for j in range(len(group)):
        live += sum(itemsize[s] for s, is_load in zip(routes[j], loads[j]) if is_load) + itemsize[results[j]]
        peak = max(peak, live)
        live -= sum(itemsize[s] for s in releases[j])
    budget = int(PLATFORM.sbuf_bytes_per_partition * 0.9) // (peak + _SCRATCH_BYTES)
    free_max = max(1, min(group[0].free_max, budget))
    names = [s.name for s in group]
    name = "fused[" + "+".join(names[:4]) + (f"+{len(names) - 4} more" if len(names) > 4 else "") + "]"
    return Program(name, free_max, tuple(routes), tuple(loads), tuple(results), tuple(stores),
                   tuple(tuple(r) for r in releases))


_CACHE: dict[tuple, Program] = {}


def program_for(group: Sequence[Step], stored: Sequence[bool]) -> Program:
    key = signature(group, stored)
    program = _CACHE.get(key)
    if program is None:
        program = _CACHE[key] = plan(group, stored)
        STATS.programs_cached += 1
    else:
        STATS.cache_hits += 1
    return program


def clear_cache() -> None:
    _CACHE.clear()


class StepError(Exception):
    """Carries which step of a group raised (its original exception is ``__cause__``)."""

    def __init__(self, step: Step):
        super().__init__(step.op)
        self.step = step


def run(program: Program, group: Sequence[Step]) -> None:
    """Execute ``program`` over the tensors and emits of ``group`` as one launch."""
    prepared: list[Pointwise] = [prepare_elementwise(s.out, s.operands, s.common_dtype, s.promoted,
                                                     s.round_scalars) for s in group]
    numel = group[0].out.numel()
    slots: list[Any] = [None] * (max(program.results) + 1)
    with launch(program.name, group[0].out.device.index) as nc:
        for start, stop, p, f in flat_tiles(numel, program.free_max):
            mark = nc.mark()
            for j, step in enumerate(group):
                pw = prepared[j]
                tiles: list[Any] = []
                scratch = []
                for i, slot in enumerate(program.routes[j]):
                    if slot is None:
                        tiles.append(pw.scalars[i])
                        continue
                    if program.loads[j][i]:
                        tile = slots[slot] = nc.sbuf_tile((p, f), pw.views[i].dtype)
                        nc.dma.load_flat(tile, pw.views[i], start, stop)
                    tile = slots[slot]
                    if pw.convert[i]:
                        converted = nc.sbuf_tile((p, f), pw.target)
                        nc.vector.tensor_copy(converted, tile)
                        scratch.append(converted)
                        tile = converted
                    tiles.append(tile)
                result = slots[program.results[j]] = nc.sbuf_tile((p, f), pw.out_view.dtype)
                emit_mark = nc.mark()
                try:
                    step.emit(nc, result, *tiles)
                except Exception as error:
                    raise StepError(step) from error
                nc.release_to(emit_mark)
                if program.stores[j]:
                    nc.dma.store_flat(pw.out_view, start, stop, result)
                for tile in scratch:
                    nc.release(tile)
                for slot in program.releases[j]:
                    nc.release(slots[slot])
                    slots[slot] = None
            nc.release_to(mark)
