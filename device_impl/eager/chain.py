"""A run of elementwise steps executed together, one tile region at a time.

Per region, each external input is DMA-loaded once, every step's ``emit`` runs
on SBUF tiles (a step reading an earlier step's output takes that step's result
tile, already rounded to the output dtype as the eager store would have), and
each output anyone can still observe is stored once. The numerics are therefore
bit-identical to running the steps one by one: the same emits on the same
values in the same dtypes. (Elementwise emits compute each element on its own,
so the shape of the region does not matter.)

``Chain`` is the plan (which slot each operand reads, which loads and stores
happen, when tiles die), independent of the tensors and scalars of one run;
``run_region`` executes it on a region given the resolved views of one run.
Regions are flat (consecutive elements in each output's memory order, as
``common.elementwise`` tiles) or boxes of a ``[batch, rows, cols]`` view (the
tiles of a reduction or of a matmul's output blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np
import torch

from device_impl.eager.capture import Step
from device_impl.eager.fusion import view_of
from device_impl.eager.stats import STATS
from device_impl.engine.isa import flat_in, flat_out
from device_impl.engine.memory import Tile
from device_impl.kernels.common import Pointwise, copy_emit, prepare_elementwise, reshaped_view

SCRATCH_BYTES = 6 * 4  # per element: fp32 scratch tiles an emit may allocate (gelu_backward uses 3 + masks)


@dataclass(frozen=True)
class Chain:
    routes: tuple  # per step, per operand: slot to read, or None for a scalar
    loads: tuple  # per step, per operand: True when that slot is loaded from HBM there
    results: tuple  # per step: the slot its result goes to
    releases: tuple  # per step: slots whose last use is that step
    aliases: tuple  # per step: True when its result *is* its operand's tile (a same-dtype copy: no instruction)
    peak: int  # most tile bytes per element live at once (emit scratch excluded)
    slots: int

    @property
    def bytes_per_element(self) -> int:
        return self.peak + SCRATCH_BYTES


def plan_chain(steps: Sequence[Step], preset: Mapping[tuple, tuple[int, int]] = {},
               keep: frozenset = frozenset()) -> tuple[Chain, dict[tuple, int]]:
    """Slots for ``steps``. ``preset``: View.key -> (slot, itemsize) of tiles the caller provides
    (a matmul's result block); ``keep``: keys whose final tile the caller still needs (a reduction's
    input). Returns the chain and the final slot of every key."""
    slot_of: dict[tuple, int] = {k: s for k, (s, _) in preset.items()}
    itemsize: list[int] = [0] * len(preset)
    for s, size in preset.values():
        itemsize[s] = size
    last_use: list[int] = [-1] * len(preset)
    routes, loads, results, aliases = [], [], [], []
    for j, step in enumerate(steps):
        route, load = [], []
        for o in step.operands:
            if not isinstance(o, torch.Tensor):
                route.append(None)
                load.append(False)
                continue
            key = view_of(o).key
            slot = slot_of.get(key)
            load.append(slot is None)
            if slot is None:
                slot = slot_of[key] = len(itemsize)
                itemsize.append(o.element_size())
                last_use.append(j)
            last_use[slot] = j
            route.append(slot)
        routes.append(tuple(route))
        loads.append(tuple(load))
        if is_identity(step):  # its result holds its operand's bits: the operand's tile serves as it
            slot_of[view_of(step.out).key] = route[0]
            results.append(route[0])
            aliases.append(True)
            continue
        slot = slot_of[view_of(step.out).key] = len(itemsize)
        itemsize.append(step.out.element_size())
        last_use.append(j)
        results.append(slot)
        aliases.append(False)
    for key in keep:
        last_use[slot_of[key]] = len(steps)  # outlives the chain: the caller releases it
    releases = [[] for _ in steps]
    for slot, j in enumerate(last_use):
        if 0 <= j < len(steps):
            releases[j].append(slot)
    live = sum(itemsize[s] for s, _ in preset.values())
    peak = live
    for j in range(len(steps)):
        live += sum(itemsize[s] for s, is_load in zip(routes[j], loads[j]) if is_load)
        live += 0 if aliases[j] else itemsize[results[j]]
        peak = max(peak, live)
        live -= sum(itemsize[s] for s in releases[j])
    chain = Chain(tuple(routes), tuple(loads), tuple(results), tuple(tuple(r) for r in releases), tuple(aliases),
                  peak, len(itemsize))
    return chain, slot_of


def is_identity(step: Step) -> bool:
    """A step whose result is its one tensor operand's values unchanged: a same-dtype device copy
    (``hooks``' ``copy_``, whose emit is ``common.copy_emit``). Inside a chain its operand's tile already holds
    what the copy instruction would write into a new tile (the same dtype, the same elements in the same
    order: the operand's view is broadcast to the output's), so the chain routes that tile and issues no
    instruction; the result is stored from it where it is stored at all."""
    if step.emit is not copy_emit or len(step.operands) != 1:
        return False
    src = step.operands[0]
    return isinstance(src, torch.Tensor) and src.dtype == step.out.dtype


def last_writes(steps: Sequence[Step]) -> tuple[bool, ...]:
    """Per step, whether no later step of ``steps`` writes its output's layout (a layout written twice needs
    only its last value). The layouts and which storages coincide are the program's signature
    (``programs.signature``), so a program computes this once (``Program.last``), not every flush."""
    last_write = {view_of(step.out).key: j for j, step in enumerate(steps)}
    return tuple(last_write[view_of(step.out).key] == j for j, step in enumerate(steps))


def stores(last: Sequence[bool], stored: Sequence[bool]) -> list[bool]:
    """Per step, whether its result goes to HBM: observable (``stored``), and not overwritten later
    in the chain (``last``: ``last_writes``)."""
    result = [keep and final for keep, final in zip(stored, last)]
    STATS.stores_elided += len(result) - sum(result)
    return result


def prepare(steps: Sequence[Step]) -> list[Pointwise]:
    return [prepare_elementwise(s.out, s.operands, s.common_dtype, s.promoted, s.round_scalars) for s in steps]


class Segmented:
    """An operand whose rows do not flatten into one strided dimension (an attention mask broadcast
    over batch and heads): ``view`` has the output's leading dimensions ``lead`` and one column
    dimension, and a box of rows is loaded as one DMA per run of rows within the last of them."""

    def __init__(self, view: np.ndarray, lead: tuple[int, ...]):
        self.view, self.lead = view, lead
        self.dtype = view.dtype

    def load(self, nc, tile, r0: int, r1: int, c0: int, c1: int) -> None:
        last, r = self.lead[-1], r0
        while r < r1:
            q, a = divmod(r, last)
            b = min(last, a + (r1 - r))
            prefix = tuple(int(i) for i in np.unravel_index(q, self.lead[:-1]))
            dst = tile if b - a == r1 - r0 else tile[r - r0:r - r0 + b - a, :]
            nc.dma.load(dst, self.view[prefix + (slice(a, b), slice(c0, c1))])
            r += b - a


def _segmented(v: np.ndarray, shape: tuple[int, int, int]) -> Segmented | None:
    """``v`` (shaped as its step's output) as a Segmented operand of a [1, rows, cols] grid."""
    batch, rows, cols = shape
    if batch != 1:
        return None
    for t in range(v.ndim, -1, -1):  # the trailing dimensions that make up the columns
        if int(np.prod(v.shape[t:])) == cols:
            break
    else:
        return None
    lead = tuple(v.shape[:t])
    view = _reshaped(v, lead + (cols,))
    if view is None or not lead or int(np.prod(lead)) != rows:
        return None
    return Segmented(view, lead)


def as_boxes(prepared: Sequence[Pointwise], shape: tuple[int, int, int]) -> list[tuple[np.ndarray, list]] | None:
    """Each step's output and operand views as ``shape`` ([batch, rows, cols], no copies; an operand
    whose rows do not flatten as a Segmented one), or None if one cannot be viewed so."""
    boxes = []
    for pw in prepared:
        out = _reshaped(pw.out_view, shape)
        views = []
        for v in pw.views:
            view = None if v is None else _reshaped(v, shape)
            if v is not None and view is None:
                view = _segmented(v, shape)
                if view is None:
                    return None
            views.append(view)
        if out is None:
            return None
        boxes.append((out, views))
    return boxes


_reshaped = reshaped_view


class Reuse(NamedTuple):
    """How a replayed launch spares host arrays (``in_place``), per step: ``over``, the operand whose tile the
    result is written over, or None; ``direct``, per operand, whether it is read straight from its HBM view
    instead of a loaded copy."""

    over: tuple
    direct: tuple


def in_place(chain: Chain, prepared: Sequence[Pointwise], single: Sequence[bool]) -> Reuse:
    """Which steps of a replayed launch write their result over a tile that dies there, and which operands
    they read from HBM without a copy: the host-side form of a liveness pass, so a chain's intermediates reuse
    the arrays of values that just died instead of each taking a fresh one (a fresh array per step streamed 25
    1 MB tiles through the cache where one suffices), and an input read once is not copied first.

    A step qualifies when its emit issued exactly one VectorE or ScalarE instruction (``single``, from the
    launch's instruction-level run: ``run_region``'s ``single``), and is not a same-dtype copy (``aliases``:
    it issues nothing; its result *is* its operand's tile). Such an instruction writes its ``out`` tile only,
    and reads its operands as if copied before it writes: a numpy ufunc with ``out=`` reads each element before
    it writes it where the output is an input, and copies an input that overlaps it any other way; every other
    form computes the whole result before storing it (``isa.VectorE``, ``isa.ScalarE``: ``_silu_into`` copies
    its input itself). An emit of several instructions could write the result before reading the operand
    again (``rsqrt``'s scalar lambda, ``sign``), so it gets tiles of its own.

    Of such a step, an operand whose slot dies there (``releases``: no later step and no store reads it; a
    slot the caller keeps is never released):
    * loaded there from a C-contiguous view is read from that view (``direct``): the tile would hold the same
      elements (``flat_in``'s copy), read by this instruction alone; the view is made read-only, so no
      instruction can write the user's memory through it;
    * otherwise, of the result's dtype and reaching the emit as its tile (not converted first: the emit reads
      the converted copy, a scratch tile), it may take the result (``over``; the first such operand). Every
      chain tile is [p, f]: the shapes agree.

    Only the replayed launch (``run_region``'s ``moves``) uses this: its tiles are plain arrays whose reuse
    the recorded figures do not see, while an instruction-level launch models each SBUF tile it allocates
    (placement, dependencies, peak) and each DMA transfer, so it runs as it did."""
    dtypes: list = [None] * chain.slots
    over, direct = [], []
    for j, route in enumerate(chain.routes):
        pw = prepared[j]
        loads = chain.loads[j]
        for i, slot in enumerate(route):
            if slot is not None and loads[i]:
                dtypes[slot] = pw.views[i].dtype
        pick, reads = None, [False] * len(route)
        if single[j] and not chain.aliases[j]:
            dying = chain.releases[j]
            out_dtype = pw.out_view.dtype
            for i, slot in enumerate(route):
                if slot is None or slot not in dying:
                    continue
                if loads[i] and pw.views[i].flags.c_contiguous:
                    reads[i] = True
                elif pick is None and not pw.convert[i] and dtypes[slot] == out_dtype:
                    pick = i
            # an operand read from HBM at one position is that slot at every position it takes in this step
            taken = {route[i] for i, read in enumerate(reads) if read}
            reads = [slot in taken for slot in route]
            if pick is not None and reads[pick]:
                pick = None
        if not chain.aliases[j]:
            dtypes[chain.results[j]] = pw.out_view.dtype
        over.append(pick)
        direct.append(tuple(reads))
    return Reuse(tuple(over), tuple(direct))


def _borrowed(view: np.ndarray, start: int, stop: int, p: int, f: int, writeable: bool = False) -> Tile:
    """Elements [start, stop) of the C-contiguous ``view`` as a [p, f] tile over the same memory: read-only, what
    ``flat_in`` would copy into a loaded tile (``in_place``'s ``direct``); ``writeable``, the elements ``flat_out``
    would store a result tile into (``run_region``'s stored-in-place results)."""
    data = view.reshape(-1)[start:stop].reshape(p, f)
    if not writeable:
        data.flags.writeable = False
    tile = Tile(data, "sbuf", "hbm")
    tile.initialized = True
    return tile


class Diverged(Exception):
    """A replayed step given ``in_place``'s choices issued other than one instruction: its
    emit's instructions depend on the data, so the replay is abandoned (it reports nothing) and the launch
    runs again at the instruction level, as when the replay's tally differs."""


class StepError(Exception):
    """Carries which step of a group raised (its original exception is ``__cause__``)."""

    def __init__(self, step: Any):
        super().__init__(step.op)
        self.step = step


def _emit(nc, step: Step, result: Tile, tiles: list) -> None:
    """One step's emit over its tiles, its scratch tiles released after; an error is the step's (``StepError``)."""
    mark = nc.mark()
    try:
        step.emit(nc, result, *tiles)
    except Exception as error:
        raise StepError(step) from error
    nc.release_to(mark)


def run_region(nc, chain: Chain, steps: Sequence[Step], prepared: Sequence[Pointwise], store: Sequence[bool],
               slots: list, p: int, f: int, flat: tuple[int, int] | None = None, box: tuple | None = None,
               boxes: Sequence[tuple[np.ndarray, list]] | None = None, moves: bool = False,
               into: tuple[int, Any] | None = None, reuse: Reuse | None = None,
               single: list[bool] | None = None) -> None:
    """Run every step on one region: ``flat=(start, stop)`` of each output's flat elements, or
    ``box=(batch, r0, r1, c0, c1)`` of the views in ``boxes``. ``slots`` holds the live tiles by
    slot (provided ones filled in by the caller) and is updated in place. ``moves`` (flat regions of a
    replayed launch, programs.py): the loads and stores move their bytes without being issued as DMA
    instructions (``flat_in``/``flat_out``, what ``DMA.load_flat``/``store_flat`` move), as a replayed
    eager launch does; the recording's figures account for them. ``into=(slot, tile)``: the step whose result
    goes to ``slot`` writes it into the caller's ``tile`` (a row kernel's input tile, of that step's dtype)
    instead of a tile of its own that the caller would copy; the chain must keep that slot (``plan_chain``'s
    ``keep``), so it is never released here. ``reuse`` (replayed launches only: ``in_place``): per step, the
    operand whose tile the result is written over and the operands read from their HBM views; such a step must
    issue one instruction (else ``Diverged``). ``single`` (an instruction-level run): per step, set False
    unless every region's emit issued exactly one VectorE or ScalarE instruction (``in_place``'s condition).

    A step given ``reuse``'s choices whose result is stored and read by nothing else (its slot dies there)
    writes it straight into its output's C-contiguous HBM view, the elements its store would copy it to: its one
    instruction's result is those bytes, so the store is the instruction itself (no tile, no copy), at the point
    where the store would have run."""
    into_slot, into_tile = into if into is not None else (-1, None)
    if box is not None:
        b, r0, r1, c0, c1 = box
    aliases = chain.aliases
    over, direct = reuse if reuse is not None else (None, None)
    for j, step in enumerate(steps):
        pw = prepared[j]
        tiles: list[Any] = []
        scratch = []
        for i, slot in enumerate(chain.routes[j]):
            if slot is None:
                tiles.append(pw.scalars[i])
                continue
            if chain.loads[j][i]:
                if direct is not None and direct[j][i]:  # read from HBM: a tile over the view (in_place)
                    slots[slot] = _borrowed(pw.views[i], flat[0], flat[1], p, f)
                else:
                    tile = slots[slot] = nc.sbuf_tile((p, f), pw.views[i].dtype)
                    if moves:
                        flat_in(tile.data, pw.views[i], flat[0], flat[1])
                        tile.initialized = True
                    elif flat is not None:
                        nc.dma.load_flat(tile, pw.views[i], flat[0], flat[1])
                    elif isinstance(boxes[j][1][i], Segmented):
                        boxes[j][1][i].load(nc, tile, r0, r1, c0, c1)
                    else:
                        nc.dma.load(tile, boxes[j][1][i][b, r0:r1, c0:c1])
            tile = slots[slot]
            if pw.convert[i]:
                converted = nc.sbuf_tile((p, f), pw.target)
                nc.vector.tensor_copy(converted, tile)
                scratch.append(converted)
                tile = converted
            tiles.append(tile)
        stored = False  # the result was written into its HBM view by the instruction itself
        if aliases[j]:  # a same-dtype copy: its result is the operand's tile (is_identity)
            result = tiles[0]
        elif over is not None and (over[j] is not None or any(direct[j])):  # in_place's choices
            slot = chain.results[j]
            if store[j] and slot in chain.releases[j] and pw.out_view.flags.c_contiguous:
                # stored, read by nothing else: the instruction writes the store's bytes itself (the slot stays
                # empty; an operand that dies here is released as it would be)
                result = _borrowed(pw.out_view, flat[0], flat[1], p, f, writeable=True)
                stored = True
            elif over[j] is not None:  # the result over a dying operand's tile
                result = slots[slot] = tiles[over[j]]
                slots[chain.routes[j][over[j]]] = None  # the tile now belongs to the result's slot
            else:
                result = slots[slot] = nc.sbuf_tile((p, f), pw.out_view.dtype)
            for i, read in enumerate(direct[j]):
                if read:
                    slots[chain.routes[j][i]] = None  # a view of HBM: nothing to release
            timeline = nc.timeline
            issued = timeline.instructions
            _emit(nc, step, result, tiles)
            if timeline.instructions != issued + 1:
                raise Diverged(step.op)
        else:
            slot = chain.results[j]
            result = slots[slot] = into_tile if slot == into_slot else nc.sbuf_tile((p, f), pw.out_view.dtype)
            if single is not None:
                timeline = nc.timeline
                issued, busy = timeline.instructions, timeline.busy
                computing = busy["vector"] + busy["scalar"]
            _emit(nc, step, result, tiles)
            if single is not None and (timeline.instructions != issued + 1
                                       or busy["vector"] + busy["scalar"] == computing):
                single[j] = False
        if store[j] and not stored:
            if moves:
                flat_out(pw.out_view, flat[0], flat[1], result.read())
            elif flat is not None:
                nc.dma.store_flat(pw.out_view, flat[0], flat[1], result)
            else:
                nc.dma.store(boxes[j][0][b, r0:r1, c0:c1], result)
        for tile in scratch:
            nc.release(tile)
        for slot in chain.releases[j]:
            tile = slots[slot]
            if tile is not None:  # None: written over by this step's result (``over``), released with it
                nc.release(tile)
                slots[slot] = None
