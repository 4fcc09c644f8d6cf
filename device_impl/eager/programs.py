"""Tile programs for groups of queued steps (fusion.py), cached by signature, and running them.

* elementwise: one pass over flat tiles of the outputs (chain.py per tile).
* reduce: per block of 128 rows and column chunk, the producing chain runs on
  that box and the reduction folds the resulting tile with the calls its own
  kernel makes (``reduction.row_accumulate``/``row_finish``, same chunking), so
  it computes exactly what the kernel computes after reading the tile from HBM.
* reduce with a row kernel (softmax, log_softmax, layer_norm) at its end: the kernel's own
  launch, whose input tiles (``reduction.Source``) the producing chain computes
  on the kernel's boxes instead of a DMA load from HBM.
* matmul: the matmul's own schedule (``MatmulPlan.run``) with an epilogue that
  receives each evacuated output block in the output dtype (what eager stores)
  and runs the chain of elementwise steps on it.

A program is the part that does not depend on one run's tensors and scalars:
the chain's slots and whether the fused form fits SBUF and lines up with the
rows. It is cached by the group's signature: kinds, op names, the layouts of
every tensor, which storages coincide, dtypes and promotion arguments. The emits
(closures over each call's scalars) and the reduction's spec are bound per run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch

from device_impl.bounded import BoundedDict
from device_impl.eager import chain as chains
from device_impl.eager import fusion
from device_impl.eager.capture import EAGER_RUNNERS, MatmulStep, ReduceStep, RowKernelStep, Step, row_shape
from device_impl.eager.fusion import Group, split, view_of
from device_impl.eager.stats import STATS
from device_impl.engine import core as _core
from device_impl.engine import launch
from device_impl.engine.core import _recording  # open record_trace() blocks: no replay while any is
from device_impl.compiler import workers
from device_impl.engine.replay import ScriptEnded, measured, replayed
from device_impl.engine.replay import merge as replay_merge
from device_impl.engine.replay import share_core as replay_share_core
from device_impl.engine.constants import PLATFORM
from device_impl.kernels import matmul as mm
from device_impl.kernels import reduction as red
from device_impl.kernels import replay as kernel_replay
from device_impl.kernels.common import flat_tiles

SBUF_BUDGET = int(PLATFORM.sbuf_bytes_per_partition * 0.9)  # per partition, for one program's tiles
REDUCE_SCRATCH = 2 * 4  # per element: a reduction's transform (a cast and a square, fp32)
EPILOGUE_BUDGET = 24 * 1024  # per partition: what a matmul's schedule leaves free for its epilogue
ROW_KERNEL_RESERVE = 24 * 1024  # per partition: a softmax's streamed chunks, row statistics and exp tiles


@dataclass(frozen=True)
class Program:
    name: str
    kind: str
    chain: chains.Chain | None
    fits: bool  # the fused form fits SBUF and every view lines up (else: split)
    free_max: int = 0  # elementwise: elements per partition per tile
    x_slot: int = 0  # reduce: the chain slot holding the reduction's input (matmul: the product is slot 0)
    last: tuple = ()  # per chain step: no later chain step writes its output's layout (chains.last_writes)


def _name(kind: str, steps: Sequence[Any]) -> str:
    names = [s.name if isinstance(s, Step) else s.plan.name for s in steps]
    shown = "+".join(names[:4]) + (f"+{len(names) - 4} more" if len(names) > 4 else "")
    return f"fused[{shown}]" if kind == "elementwise" else f"fused_{kind}[{shown}]"


def signature(group: Group) -> tuple:
    storages: dict[int, int] = {}

    def describe(t: torch.Tensor) -> tuple:
        ptr = view_of(t).storage
        return (storages.setdefault(ptr, len(storages)), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)

    return (group.kind, tuple(_step_parts(step, describe, False) for step in group.steps))


def _step_parts(step: Any, describe: Callable[[torch.Tensor], tuple], flush: bool) -> tuple:
    """One step as plain data for a cache key: a program's (``signature``) or a whole flush's
    (``flush_signature``, which also names each step's op and a matmul's operands: it decides the grouping)."""
    if isinstance(step, Step):
        operands = tuple(describe(o) if isinstance(o, torch.Tensor) else type(o) for o in step.operands)
        return ((step.op,) if flush else ()) + (step.name, describe(step.out), operands, step.common_dtype,
                                                  step.promoted, step.round_scalars, step.free_max)
    p = step.plan
    if isinstance(step, ReduceStep):
        return ("reduce", p.name, describe(p.x), describe(p.out), p.rows, p.cols)
    if isinstance(step, RowKernelStep):
        return ("row", p.name, describe(p.x), tuple(describe(o) for o in p.outs), p.axis, p.params,
                tuple(None if t is None else describe(t) for t in p.inputs))
    if not flush:
        return ("matmul", p.name, describe(step.out))
    return ("matmul", p.name, describe(p.out), describe(p.a), describe(p.b),
            None if p.bias is None else describe(p.bias), p.batched)


def _plan(group: Group, prepared: Sequence[Any]) -> Program:
    kind, steps = group.kind, group.steps
    if kind == "elementwise":
        chain, _ = chains.plan_chain(steps)
        free_max = max(1, min(steps[0].free_max, SBUF_BUDGET // chain.bytes_per_element))
        return Program(_name(kind, steps), kind, chain, True, free_max, last=chains.last_writes(steps))
    if kind == "reduce":
        consumer = steps[-1]
        rows, cols = row_shape(consumer)
        x_key = view_of(consumer.plan.x).key
        chain, slot_of = chains.plan_chain(steps[:-1], keep=frozenset({x_key}))
        f = min(cols, red.CHUNK)
        if isinstance(consumer, ReduceStep):
            budget, per_element = SBUF_BUDGET, chain.bytes_per_element + REDUCE_SCRATCH
        else:  # the row kernel keeps up to two row blocks, a row of fp32 scratch and its weights resident
            itemsize = consumer.plan.x.element_size()
            weights = sum(t is not None for t in consumer.plan.inputs) * 4 * cols if cols <= red.PARAM_COLS else 0
            budget = (SBUF_BUDGET - min(red.RESIDENT_BYTES, cols * (2 * itemsize + 4)) - weights
                      - ROW_KERNEL_RESERVE)
            per_element = chain.bytes_per_element + 4  # the copy of the tile into the kernel's buffer
        fits = chains.as_boxes(prepared, (1, rows, cols)) is not None and per_element * f <= budget
        return Program(_name(kind, steps), kind, chain, fits, x_slot=slot_of[x_key],
                       last=chains.last_writes(steps[:-1]))
    product: MatmulStep = steps[0]
    out = product.out
    preset = {view_of(out).key: (0, out.element_size())}
    chain, _ = chains.plan_chain(steps[1:], preset=preset)
    fits = (chains.as_boxes(prepared, _product_shape(product)) is not None
            and chain.bytes_per_element * mm.EVACUATION_CHUNK <= EPILOGUE_BUDGET)
    return Program(_name(kind, steps), kind, chain, fits, last=chains.last_writes(steps[1:]))


def _product_shape(step: MatmulStep) -> tuple[int, int, int]:
    shape = tuple(step.out.shape)
    return shape if step.plan.batched else (1,) + shape


CACHE_LIMIT = 4096  # programs kept; the oldest is dropped first (a workload of ever-new shapes stays bounded)
_CACHE: BoundedDict = BoundedDict(CACHE_LIMIT)


def program_for(group: Group, prepared: Sequence[Any]) -> Program:
    key = signature(group)
    program = _CACHE.get(key)
    if program is None:
        program = _CACHE[key] = _plan(group, prepared)
        STATS.programs_cached += 1
    else:
        STATS.cache_hits += 1
    return program


def clear_cache() -> None:
    _CACHE.clear()
    _LAUNCHES.clear()
    _FLUSHES.clear()
    _FIGURES.clear()
    _REFUSED.clear()
    _LAYOUTS.clear()


@dataclass
class Ready:
    """A group about to run: its program (None for a single launch) and its resolved views."""

    group: Group
    program: Program | None
    prepared: list
    # per step: whether another group of its flush touches its output's storage (it must be stored then);
    # set by plan_flush, from its cache for a recurring flush (the storages' coincidences are in its key)
    shared: tuple | None = None
    # a fused elementwise group's layout token (``_layout_token``), set by plan_flush: its flush plan fixes every
    # view the group's steps resolve to, so the launch's replay key names them by it instead of listing them
    layout: Any = None
    # how many groups from this one run in its launch (``shared_lhs_end``), set by plan_flush, which finds it
    # once per flush plan: which products read one A, and whether a group between writes it, follow from the
    # layouts and coinciding storages its key holds; 0: not known here (``run_end`` asks ``shared_lhs_end``)
    run: int = 0


def finalize(groups: Sequence[Group]) -> list[Ready]:
    """Programs for the groups, splitting any whose fused form cannot be built into plain launches."""
    ready: list[Ready] = []
    for group in groups:
        if len(group.steps) == 1:
            ready.append(Ready(group, None, []))
            continue
        if all(isinstance(s, Step) and (s.op, s.name) in EAGER_RUNNERS for s in group.steps):
            # Only steps eager runs without a launch (device copies): one fused launch would cost the host
            # more than their eager kernels, so each runs as in eager mode.
            ready.extend(Ready(Group(group.kind, [s], group.key), None, []) for s in group.steps)
            continue
        ew = [s for s in group.steps if isinstance(s, Step)]
        prepared = chains.prepare(ew)
        program = program_for(group, prepared)
        if program.fits:
            ready.append(Ready(group, program, prepared))
            continue
        STATS.splits += 1
        for part in split(group):
            ready.extend(finalize([part]))
    return ready


def run(item: Ready, stored: Sequence[bool]) -> None:
    """Execute one finalized group (``stored``: per step, whether its output must reach HBM)."""
    group, program = item.group, item.program
    if program is None:
        step = group.steps[0]
        if isinstance(step, MatmulStep):
            plan = step.plan
            _run_recorded(plan.name, plan.out.device.index, _product_key(plan), [step],
                          lambda nc: _run_product(nc, step))
            return
        if isinstance(step, RowKernelStep):
            _run_row_kernel(None, [step], [], ())
            return
        try:
            step.run()
        except Exception as error:
            raise chains.StepError(step) from error
        return
    STATS.fused_groups += 1
    STATS.fused_ops += len(group.steps)
    if program.kind == "elementwise":
        _run_elementwise(program, group.steps, item.prepared, chains.stores(program.last, stored), item.layout)
    elif program.kind == "reduce":
        STATS.reductions_fused += 1
        run_consumer = _run_reduce if isinstance(group.steps[-1], ReduceStep) else _run_row_kernel
        run_consumer(program, group.steps, item.prepared, chains.stores(program.last, stored[:-1]))
    else:
        STATS.epilogue_ops += len(group.steps) - 1
        STATS.stores_elided += not stored[0]
        _run_matmul(program, group.steps, item.prepared, stored[0], chains.stores(program.last, stored[1:]))


def _run_elementwise(program: Program, steps: Sequence[Step], prepared, store, layout: Any = None) -> None:
    numel = steps[0].out.numel()
    device = steps[0].out.device.index
    tiles = tuple(flat_tiles(numel, program.free_max))
    key = _replay_key(program, steps, prepared, store, layout) if kernel_replay._enabled[0] and not _recording \
        else None
    if key is not None:
        recorded = _FIGURES.get(key)
        if recorded is not None and _replay_elementwise(key, recorded, program, steps, prepared, store, device,
                                                        tiles):
            return
        if key in _REFUSED:
            key = None
    slots: list[Any] = [None] * program.chain.slots
    single = [True] * len(steps) if key is not None else None  # which steps issue one instruction (in_place)
    with launch(program.name, device) as nc:
        for start, stop, p, f in tiles:
            mark = nc.mark()
            chains.run_region(nc, program.chain, steps, prepared, store, slots, p, f, flat=(start, stop),
                              single=single)
            nc.release_to(mark)
    if key is not None and key not in _REFUSED:
        # the loads and stores run_region issued: a replay moves those bytes without issuing them
        chain = program.chain
        transfers = len(tiles) * (sum(sum(loads) for loads in chain.loads) + sum(store))
        _FIGURES[key] = (measured(nc, transfers), chains.in_place(chain, prepared, single))


# --- replayed fused launches -------------------------------------------------------------------------
# A fused elementwise program issues the same instructions on the same tiles whenever its steps' emits
# (code and the values their closures select instructions with), the scalars, every view's dtype, shape
# and strides and the stored outputs are the same (the eager replay's argument, kernels/replay.py, for a
# chain of launches): the first run is instruction-level and its figures are kept; later runs go through
# the same tile loop on engine.replay's core, with the recorded figures reported, and the tally checked.
# A replay also writes each step that issued one instruction over a tile that dies there, and reads an input
# that dies there from its HBM view instead of a copy (chain.in_place, kept with the figures), and writes such a
# step's result that only its store reads straight into its output's HBM view (chain.run_region): the same
# arithmetic on the same values, fewer host arrays and copies.

FIGURES_LIMIT = 4096  # the kept recordings and refusals of every replay below, each store bounded alike
_FIGURES: BoundedDict = BoundedDict(FIGURES_LIMIT)
_REFUSED: BoundedDict = BoundedDict(FIGURES_LIMIT)


def _replay_key(program: Program, steps: Sequence[Step], prepared, store, layout: Any = None) -> tuple | None:
    """What decides a fused elementwise launch's instructions (see above), or None without a safe key (the caller
    asks ``_REFUSED`` only when no recording is kept: one hash of the key where it replays). With ``layout``
    (``Ready.layout``: ``_layout_token`` of the program and its views) the key holds that token, the stores,
    each step's emit and its scalars: the same decision, without listing and hashing every view per flush."""
    if layout is None:
        parts: list[Any] = [program, tuple(store)]
        try:
            _chain_parts(steps, prepared, parts)
        except kernel_replay._NoKey:
            return None
        return tuple(parts)
    parts = [layout, tuple(store)]
    emit_key, value_key = kernel_replay.emit_key, kernel_replay._value_key
    try:
        for step, pw in zip(steps, prepared):
            parts.append(emit_key(step.emit))
            parts.extend([value_key(s, 0) for s in pw.scalars if s is not None])
    except kernel_replay._NoKey:
        return None
    return tuple(parts)


class _LayoutToken:
    """Stands for one fused elementwise program and the layouts of its views in replay keys (``_layout_token``):
    hashed by identity, held by ``_LAYOUTS``, by the flush plans naming it and by every key holding it."""

    __slots__ = ()


_LAYOUTS: BoundedDict = BoundedDict(FIGURES_LIMIT)  # key -> _LayoutToken


def _layout_token(program: Program, prepared) -> _LayoutToken:
    """One token per program and views' layouts (dtype, shape, strides of the output and of each tensor operand,
    which operands are scalars, conversions): what ``_chain_parts`` lists of them besides emits and scalars. A
    flush plan (``plan_flush``) asks once, when it is made; every flush it plans after uses the token, and
    plans of other flushes that hold the same group get the same one (so the group replays across them)."""
    parts: list[Any] = [program]
    for pw in prepared:
        out = pw.out_view
        parts.append((out.dtype, out.shape, out.strides, pw.target))
        parts.extend([None if v is None else (v.dtype, v.shape, v.strides, c) for v, c in zip(pw.views, pw.convert)])
    key = tuple(parts)
    token = _LAYOUTS.get(key)
    if token is None:
        token = _LayoutToken()
        _LAYOUTS[key] = token
    return token


def _chain_parts(steps: Sequence[Step], prepared, parts: list) -> None:
    """What decides a chain's instructions, step by step, appended to ``parts`` (raise _NoKey if unsafe)."""
    value_key = kernel_replay._value_key
    for step, pw in zip(steps, prepared):
        out = pw.out_view
        parts.append((kernel_replay.emit_key(step.emit), out.dtype, out.shape, out.strides, pw.target))
        for v, s, c in zip(pw.views, pw.scalars, pw.convert):
            parts.append(value_key(s, 0) if v is None else (v.dtype, v.shape, v.strides, c))


def _replay_elementwise(key: tuple, recorded: tuple, program: Program, steps: Sequence[Step], prepared, store,
                        device: int, tiles) -> bool:
    """Run a recorded fused launch from its recording (its figures and ``chains.in_place``'s choices); False
    (nothing reported) when its instructions were not the recorded ones and it can be run again at the
    instruction level (it wrote nothing it reads)."""
    figures, reuse = recorded
    chain = program.chain
    slots: list[Any] = [None] * chain.slots
    try:
        with replayed(program.name, device, figures) as nc:  # an exception out of the block reports nothing
            threads = _region_threads(tiles, len(steps))
            if threads > 1 and not _regions_independent(chain, prepared, store):
                threads = 1
            if threads > 1:
                _replay_shared(nc, threads, chain, steps, prepared, store, reuse, tiles)
            else:
                for start, stop, p, f in tiles:
                    mark = nc.mark()
                    chains.run_region(nc, chain, steps, prepared, store, slots, p, f, flat=(start, stop),
                                      moves=True, reuse=reuse)
                    nc.release_to(mark)
            if not nc.matches(figures):
                raise _Rerun
    except (_Rerun, chains.Diverged):
        pass
    else:
        STATS.programs_replayed += 1
        return True
    _FIGURES.pop(key, None)
    _REFUSED[key] = None
    # What the replay wrote (its stored outputs) against what a rerun reads from HBM (the loaded operands; an
    # earlier step's result is read from its tile, which the rerun computes again before it is read)
    written = [pw.out_view for pw, kept in zip(prepared, store) if kept]
    loaded = [pw.views[i] for pw, loads in zip(prepared, chain.loads) for i, load in enumerate(loads) if load]
    if any(np.may_share_memory(o, v) for o in written for v in loaded):
        raise RuntimeError(
            f"neuron: the fused launch {program.name} issued other instructions than its recording (they "
            f"depend on the data), and it wrote a tensor it reads, so it cannot be rerun; set "
            f"NEURON_STATIC_REPLAY=0 to run every launch instruction by instruction, and report this")
    return False


# Element-steps (elements x steps) from which a replayed fused launch's regions are shared among host threads:
# handing a share over and waking its thread costs some tens of microseconds; 2^21 element-steps of float32
# arithmetic take a millisecond or more on one core.
SHARE_ELEMENT_STEPS = 1 << 21


def _region_threads(tiles: Sequence[tuple], steps: int) -> int:
    """How many host threads a replayed fused elementwise launch's regions go to (``_replay_shared``): one for a
    launch of one region or too little arithmetic to pay for a hand-over, else ``workers.width(blas=False)``."""
    if len(tiles) < 2:
        return 1
    if (tiles[-1][1] - tiles[0][0]) * steps < SHARE_ELEMENT_STEPS:
        return 1
    return min(len(tiles), workers.width(blas=False))


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.strides == b.strides and a.dtype == b.dtype)


def _regions_independent(chain: chains.Chain, prepared, store) -> bool:
    """Whether a fused launch's regions may run in any order (``_replay_shared``): every stored output C-contiguous
    (no two of its elements share memory, so no two regions write one byte), and every loaded operand that shares
    memory with a stored output the very same view (an in-place step: element i is read and written by the same
    region only). Otherwise a region could read what another region's store writes, which the serial order
    decides."""
    written = [pw.out_view for pw, kept in zip(prepared, store) if kept]
    if not all(out.flags.c_contiguous for out in written):
        return False
    for pw, loads in zip(prepared, chain.loads):
        for view, load in zip(pw.views, loads):
            if load and any(np.may_share_memory(view, out) and not _same_view(view, out) for out in written):
                return False
    return True


def _replay_shared(nc, threads: int, chain: chains.Chain, steps: Sequence[Step], prepared, store, reuse,
                   tiles: Sequence[tuple]) -> None:
    """A replayed fused launch's regions in ``threads`` contiguous shares (``workers.split``), the first on the
    launch's own core ``nc``, the others each on its thread's ``engine.replay.share_core``; their instructions
    then go into ``nc``'s tally in region order (``engine.replay.merge``: the serial tally's sums, so the recorded
    figures are checked as before). What each region computes does not depend on the thread: its loads, its
    steps' emits on its own tiles and its stores, the same numpy calls on the same elements; regions are disjoint
    ranges of every output, and what one reads no other region writes (``_regions_independent``, which the caller
    checks first). numpy releases the GIL in its arithmetic: a 1M-element chain of transcendental functions runs
    on two free cores in about half the wall time (benches/adaptive_ratio.py with NEURON_HOST_THREADS=2); its CPU
    time is not less (on a loaded host the wall is not either)."""
    cores: dict[int, Any] = {}

    def share(first: int, last: int) -> None:
        core = nc if first == 0 else replay_share_core()
        cores[first] = core
        slots: list[Any] = [None] * chain.slots
        try:
            for start, stop, p, f in tiles[first:last]:
                mark = core.mark()
                chains.run_region(core, chain, steps, prepared, store, slots, p, f, flat=(start, stop), moves=True,
                                  reuse=reuse)
                core.release_to(mark)
        finally:
            if core is not nc:
                core.retire()

    workers.split(len(tiles), share, threads)
    replay_merge(nc, [cores[first] for first in sorted(cores) if first != 0])


class _Rerun(Exception):
    """A replay's tally differed from its recording (raised inside the launch, so it reports nothing)."""


def _run_reduce(program: Program, steps: Sequence[Any], prepared, store) -> None:
    producers, reduce_step = steps[:-1], steps[-1]
    plan = reduce_step.plan
    spec = plan.spec
    x_slot = program.x_slot
    boxes = chains.as_boxes(prepared, (1, plan.rows, plan.cols))
    out_rows = plan.out_rows()
    chunks = plan.column_chunks()

    def body(nc) -> None:
        slots: list[Any] = [None] * program.chain.slots
        for r0, r1 in plan.row_blocks():
            p = r1 - r0
            acc = nc.sbuf_tile((p, 1), spec.cd)
            for j, (c0, c1) in enumerate(chunks):
                mark = nc.mark()
                chains.run_region(nc, program.chain, producers, prepared, store, slots, p, c1 - c0,
                                  box=(0, r0, r1, c0, c1), boxes=boxes)
                try:
                    red.row_accumulate(nc, spec, acc, slots[x_slot], j)
                except Exception as error:
                    raise chains.StepError(reduce_step) from error
                slots = [None] * program.chain.slots  # everything left is freed at the mark
                nc.release_to(mark)
            res = red.row_finish(nc, spec, acc, out_rows.dtype)
            nc.dma.store(out_rows[r0:r1], res)
            nc.release(res)
            nc.release(acc)

    _run_recorded(program.name, plan.out.device.index, _reduce_key(program, steps, prepared, store), steps, body)


def _reduce_key(program: Program, steps: Sequence[Any], prepared, store) -> tuple | None:
    """What decides a fused reduction's instructions: its spec, layouts and its producers' chain (None: no
    replay now)."""
    if not kernel_replay._enabled[0] or _recording:
        return None
    plan = steps[-1].plan
    spec = plan.spec
    parts: list[Any] = [program, plan.name, _layout(plan.x), _layout(plan.out), plan.rows, plan.cols, tuple(store)]
    try:
        parts.append(tuple(kernel_replay._value_key(getattr(spec, f), 0)
                           for f in ("op", "cd", "elem", "pre", "post", "empty")))
        _chain_parts(steps[:-1], prepared, parts)
    except kernel_replay._NoKey:
        return None
    key = tuple(parts)
    return None if key in _REFUSED else key


def _run_row_kernel(program: Program | None, steps: Sequence[Any], prepared, store) -> None:
    """A row kernel's launch, its input computed by its producers (``program``; None: a lone kernel reading
    its input from HBM)."""
    producers, consumer = steps[:-1], steps[-1]
    if program is None:
        def alone(stand_in) -> None:
            _core.divert(stand_in)
            try:
                consumer.plan.run()
            except Exception as error:
                raise chains.StepError(consumer) from error
            finally:
                _core.divert(None)

        _run_diverted(consumer.plan.name, _row_key(None, steps, [], ()), steps, alone)
        return
    rows, cols = row_shape(consumer)
    boxes = chains.as_boxes(prepared, (1, rows, cols))
    chain = program.chain

    # The producer of the kernel's input computes straight into the kernel's tile when the dtypes agree and
    # it is an instruction's result (a same-dtype copy's result is its operand's tile: copied as before).
    x_slot = program.x_slot
    made = [j for j, slot in enumerate(chain.results) if slot == x_slot and not chain.aliases[j]]
    direct = prepared[made[-1]].out_view.dtype if made else None

    def source(nc, tile, rsl: tuple, csl: tuple) -> None:
        (r0, r1, _), (c0, c1, _) = rsl[0].indices(rows), csl[0].indices(cols)
        mark = nc.mark()
        slots: list[Any] = [None] * chain.slots
        into = (x_slot, tile) if tile.dtype == direct else None
        chains.run_region(nc, chain, producers, prepared, store, slots, r1 - r0, c1 - c0,
                          box=(0, r0, r1, c0, c1), boxes=boxes, into=into)
        if into is None:
            nc.vector.tensor_copy(tile, slots[x_slot])
        nc.release_to(mark)

    def body(stand_in) -> None:
        _core.divert(stand_in)  # the kernel opens its launch itself: recorded or replayed as ours
        try:
            consumer.plan.run(source)
        except chains.StepError:
            raise
        except Exception as error:
            raise chains.StepError(consumer) from error
        finally:
            _core.divert(None)

    key = _row_key(program, steps, prepared, store)
    _run_diverted(program.name, key, steps, body)


def _run_matmul(program: Program, steps: Sequence[Any], prepared, store_product: bool, store) -> None:
    _run_recorded(program.name, steps[0].plan.out.device.index,
                  _group_key(program, steps, prepared, store_product, store), steps,
                  lambda nc: _matmul_body(nc, program, steps, prepared, store_product, store))


def _matmul_body(nc, program: Program, steps: Sequence[Any], prepared, store_product: bool, store,
                 lhs_tiles: tuple[dict, list] | None = None) -> None:
    """A matmul group's product with its epilogue, inside a launch the caller owns (``lhs_tiles``: see
    ``run_shared``)."""
    product, epilogue = steps[0], steps[1:]
    plan = product.plan
    boxes = chains.as_boxes(prepared, _product_shape(product))
    out3 = chains._reshaped(mm.hbm(plan.out), _product_shape(product))
    chain = program.chain

    def finish(nc, tile, b: int, m0: int, m1: int, n0: int, n1: int) -> None:
        if store_product:
            nc.dma.store(out3[b, m0:m1, n0:n1], tile)
        slots: list[Any] = [None] * chain.slots
        slots[0] = tile
        mark = nc.mark()
        chains.run_region(nc, chain, epilogue, prepared, store, slots, m1 - m0, n1 - n0,
                          box=(b, m0, m1, n0, n1), boxes=boxes)
        nc.release_to(mark)  # the product's tile, if still live, is _finish_block's to free

    try:
        plan.run(nc, finish, lhs_tiles)
    except chains.StepError:
        raise
    except Exception as error:
        raise chains.StepError(product) from error


# --- products of one operand in one launch ---------------------------------------------------------
# A decoder's q, k and v projections (and the MLP's gate and up) multiply one activation A by three (two)
# weights: consecutive matmul groups of the queue whose products read the same A. Eager runs each in its own
# launch, which loads A's stationary tiles and transposes them on TensorE; adaptive eager runs such a run of
# groups in one launch, in their order, the first product loading and transposing each tile of A^T and the
# later ones taking it from SBUF (``matmul.matmul_into``'s ``lhs_tiles``, as the compiler's ``share_lhs``).
# The tiles are the same bits, so the products are too; an earlier group that writes where A lies ends the
# run (its tiles would be stale).

SHARED_LHS_BYTES = 32 * 1024  # per partition: A^T's tiles kept across the run's products


def _product_of(item: Ready) -> MatmulStep | None:
    """The matmul step of a matmul group (a lone product or one with its epilogue), else None."""
    steps = item.group.steps
    product = steps[0]
    if not isinstance(product, MatmulStep) or (item.program is None) != (len(steps) == 1):
        return None
    return None if product.plan.batched else product


def _lhs_key(product: MatmulStep) -> tuple:
    a = product.plan.a
    return (view_of(a).storage, a.storage_offset(), tuple(a.shape), a.stride(), a.dtype, a.device)


def shared_lhs_end(ready: Sequence[Ready], i: int) -> int:
    """One past the last group of the run starting at ``ready[i]`` whose products read the same A (see above);
    ``i + 1`` when ``ready[i]`` shares with nothing."""
    first = _product_of(ready[i])
    if first is None:
        return i + 1
    a = first.plan.a
    k, m = a.shape[1], a.shape[0]
    if math.ceil(k / mm.K_TILE) * m * a.element_size() > SHARED_LHS_BYTES:
        return i + 1
    key, a_view = _lhs_key(first), view_of(a)
    j = i + 1
    while j < len(ready):
        product = _product_of(ready[j])
        if product is None or _lhs_key(product) != key:
            break
        if any(view_of(step.out).overlaps(a_view) for step in ready[j - 1].group.steps):
            break  # it writes A (a product's out=; epilogues never do: fusion pins A): the tiles went stale
        j += 1
    return j


def run_end(ready: Sequence[Ready], i: int) -> int:
    """``shared_lhs_end(ready, i)``, as its flush plan recorded it (``Ready.run``) where it did."""
    n = ready[i].run
    return i + n if n else shared_lhs_end(ready, i)


def runs_as_eager(ready: Sequence[Ready], i: int) -> bool:
    """Whether ``ready[i]`` runs as eager mode would run its one step: no fused program, no launch shared with
    the next group, not a product or a row kernel (a recurring one replays its recorded launch here, which eager
    does not)."""
    item = ready[i]
    return (item.program is None and len(item.group.steps) == 1
            and not isinstance(item.group.steps[0], (MatmulStep, RowKernelStep)) and run_end(ready, i) == i + 1)


def run_shared(items: Sequence[Ready], stored: Sequence[Sequence[bool]]) -> None:
    """Run matmul groups whose products read one A (``shared_lhs_end``) in one launch, A^T's tiles loaded once."""
    STATS.lhs_shared += len(items) - 1
    products = [item.group.steps[0] for item in items]
    name = "shared_lhs[" + "+".join(p.plan.name for p in products) + "]"
    parts: list[tuple] = []  # per item: (the group's Ready or None for a lone product, steps, product stored, stores)
    for item, item_stored in zip(items, stored):
        steps = item.group.steps
        if item.program is None:
            parts.append((None, steps, True, ()))
            continue
        STATS.fused_groups += 1
        STATS.fused_ops += len(steps)
        STATS.epilogue_ops += len(steps) - 1
        STATS.stores_elided += not item_stored[0]
        parts.append((item, steps, item_stored[0], chains.stores(item.program.last, item_stored[1:])))

    def body(nc) -> None:
        kept: tuple[dict, list] = ({}, [])
        for item, steps, store_product, store in parts:
            with nc.scope():  # the product's own tiles; A^T's are in ``kept``
                if item is None:
                    _run_product(nc, steps[0], kept)
                else:
                    _matmul_body(nc, item.program, steps, item.prepared, store_product, store, kept)
        with nc.stream(kept[1]):
            nc.release_to(0)

    keys = [_product_key(steps[0].plan) if item is None else
            _group_key(item.program, steps, item.prepared, store_product, store)
            for item, steps, store_product, store in parts]
    key = None if any(k is None for k in keys) else ("shared", tuple(keys))
    _run_recorded(name, products[0].plan.out.device.index, key, [s for _, steps, _, _ in parts for s in steps], body)


def _run_product(nc, step: MatmulStep, lhs_tiles: tuple[dict, list] | None = None) -> None:
    try:
        step.plan.run(nc, lhs_tiles=lhs_tiles)
    except Exception as error:
        raise chains.StepError(step) from error


# --- recurring matmul launches: their recorded figures and choices ----------------------------------------
# A matmul's instructions follow from its operands' shapes, strides and dtypes, its scalars and (with an
# epilogue) the chain's key as a fused elementwise launch's (``_replay_key``), except for the scheduling
# choices the kernel makes from the timeline (``nc.choose``: which transpose goes next, which engine
# evacuates PSUM). The first run of such a launch is instruction-level and records its figures and those
# choices; a later one runs on engine.replay's core, which takes the recorded choices in order and tallies
# the instructions, and reports the recorded figures. A tally that differs (or a choice asked past the
# recorded ones) reports nothing and the launch runs again at the instruction level, unless it wrote what it
# reads. Not while tracing (``record_trace``), nor under ``NEURON_STATIC_REPLAY=0``.

_LAUNCHES: BoundedDict = BoundedDict(FIGURES_LIMIT)  # key -> (Figures, the recorded choices)


def _layout(t: torch.Tensor | None) -> tuple | None:
    return None if t is None else (tuple(t.shape), t.stride(), t.dtype)


def _product_key(plan: Any) -> tuple | None:
    """What decides a lone product's instructions (None: no replay now)."""
    if not kernel_replay._enabled[0] or _recording:
        return None
    try:
        alpha, beta = kernel_replay._value_key(plan.alpha, 0), kernel_replay._value_key(plan.beta, 0)
    except kernel_replay._NoKey:
        return None
    key = ("product", plan.name, _layout(plan.out), _layout(plan.a), _layout(plan.b), _layout(plan.bias), alpha,
           beta, plan.batched)
    return None if key in _REFUSED else key


def _group_key(program: Program, steps: Sequence[Any], prepared, store_product: bool, store) -> tuple | None:
    """What decides a matmul group's instructions: its product's and its epilogue chain's (None: no replay)."""
    product = _product_key(steps[0].plan)
    if product is None:
        return None
    parts: list[Any] = [program, product, store_product, tuple(store)]
    try:
        _chain_parts(steps[1:], prepared, parts)
    except kernel_replay._NoKey:
        return None
    key = tuple(parts)
    return None if key in _REFUSED else key


def _run_recorded(name: str, device: int, key: tuple | None, steps: Sequence[Any], body) -> None:
    """``body(nc)`` in a launch: replayed from its recording under ``key`` when there is one, else at the
    instruction level (recorded under ``key``, unless None). See above."""
    if key is not None:
        entry = _LAUNCHES.get(key)
        if entry is not None:
            figures, script = entry
            try:
                with replayed(name, device, figures) as nc:
                    nc.script = script
                    body(nc)
                    if not nc.matches(figures):
                        raise _Rerun
            except (_Rerun, ScriptEnded):
                pass
            except chains.StepError as error:
                if not isinstance(error.__cause__, ScriptEnded):
                    raise
            else:
                STATS.programs_replayed += 1
                return
            _refuse(key, name, steps)
            key = None
    with launch(name, device) as nc:
        if key is not None:
            nc.choices = []
        body(nc)
    if key is not None:
        _LAUNCHES[key] = (measured(nc, 0), tuple(nc.choices))


def _row_key(program: Program, steps: Sequence[Any], prepared, store) -> tuple | None:
    """What decides a row-kernel group's instructions: the kernel (its name, parameters, tensors' layouts)
    and its producers' chain (None: no replay now)."""
    if not kernel_replay._enabled[0] or _recording:
        return None
    plan = steps[-1].plan
    try:
        params = kernel_replay._value_key(plan.params, 0)
    except kernel_replay._NoKey:
        return None
    parts: list[Any] = [program, plan.name, plan.launch, params, plan.axis, _layout(plan.x),
                        tuple(_layout(t) for t in plan.outs), tuple(_layout(t) for t in plan.inputs), tuple(store)]
    try:
        _chain_parts(steps[:-1], prepared, parts)
    except kernel_replay._NoKey:
        return None
    key = tuple(parts)
    return None if key in _REFUSED else key


class _StandIn:
    """The launch a row kernel opens itself (``engine.core.divert``): instruction-level with its choices
    recorded (``figures`` None), or replayed from ``figures`` and ``script``; ``differed`` when a replay's
    tally was not the recording's (it then reported nothing)."""

    def __init__(self, figures=None, script: tuple = ()):
        self.figures, self.script = figures, script
        self.inner: Any = None
        self.core: Any = None
        self.differed = False

    def enter(self, kernel: str, device: int):
        if self.figures is None:
            self.inner = launch(kernel, device)
            self.core = self.inner.__enter__()
            self.core.choices = []
        else:
            self.inner = replayed(kernel, device, self.figures)
            self.core = self.inner.__enter__()
            self.core.script = self.script
        return self.core

    def exit(self, exc_type, exc, tb) -> bool:
        if exc_type is None and self.figures is not None and not self.core.matches(self.figures):
            self.differed = True
            return self.inner.__exit__(_Rerun, _Rerun(), None)  # reports nothing
        return self.inner.__exit__(exc_type, exc, tb)


def _run_diverted(name: str, key: tuple | None, steps: Sequence[Any], body) -> None:
    """``_run_recorded`` for a launch the kernel opens itself: ``body(stand_in)`` diverts it (``_StandIn``)."""
    if key is not None:
        entry = _LAUNCHES.get(key)
        if entry is not None:
            stand_in = _StandIn(*entry)
            try:
                body(stand_in)
            except chains.StepError as error:
                if not isinstance(error.__cause__, ScriptEnded):
                    raise
                stand_in.differed = True
            if not stand_in.differed and stand_in.core is not None:
                STATS.programs_replayed += 1
                return
            _refuse(key, name, steps)
            key = None
    if key is None:
        body(None)
        return
    stand_in = _StandIn()
    body(stand_in)
    if stand_in.core is not None:
        _LAUNCHES[key] = (measured(stand_in.core, 0), tuple(stand_in.core.choices))


def _refuse(key: tuple, name: str, steps: Sequence[Any]) -> None:
    """A replay differed from its recording: never replay ``key`` again; raise if the launch cannot be rerun
    (it wrote a tensor it reads)."""
    _LAUNCHES.pop(key, None)
    _REFUSED[key] = None
    written: list = []
    read: list = []  # what the launch reads from before it (a read of an earlier step's result is recomputed)
    for step in steps:
        keys = {w.key for w in written}
        read.extend(v for v in map(view_of, step.reads()) if v.key not in keys)
        written.append(view_of(step.out))
    if any(w.overlaps(r) for w in written for r in read):
        raise RuntimeError(
            f"neuron: the launch {name} issued other instructions than its recording, and it wrote a tensor it "
            f"reads, so it cannot be rerun; set NEURON_STATIC_REPLAY=0 to run every launch instruction by "
            f"instruction, and report this")


# --- whole flushes ---------------------------------------------------------------------------------
# A model's forward queues the same sequence of steps call after call, and grouping them (fusion.partition)
# and finding their programs (finalize) depends only on what flush_signature describes: each step's kind,
# kernel, static arguments and the layout of every tensor, with storages numbered by first appearance (so
# aliasing is part of it). That plan is cached per signature; a recurring flush then only resolves its
# views (chains.prepare). Counters are replayed as the cached finalize counted them, so stats() reads the
# same whichever way a flush was planned.

FLUSH_CACHE_LIMIT = 1024
_FLUSHES: BoundedDict = BoundedDict(FLUSH_CACHE_LIMIT)  # key -> (template, lookups, splits)


def _mark_shared(ready: Sequence[Ready]) -> None:
    """``Ready.shared`` of each group with a program (a group without one stores its output anyway)."""
    group_of: dict[int, set[int]] = {}
    for g, item in enumerate(ready):
        for step in item.group.steps:
            for t in step.tensors():
                group_of.setdefault(t.untyped_storage()._cdata, set()).add(g)
    for g, item in enumerate(ready):
        if item.program is not None:
            item.shared = tuple(group_of[step.out.untyped_storage()._cdata] != {g} for step in item.group.steps)


def flush_signature(steps: Sequence[Any]) -> tuple:
    """What decides ``finalize(fusion.partition(steps))`` (see above)."""
    storages: dict[int, int] = {}

    def describe(t: torch.Tensor) -> tuple:
        size, offset = t.element_size(), t.storage_offset()
        ptr = t.data_ptr() - offset * size if t.numel() else t.untyped_storage().data_ptr()  # as fusion.View
        return (storages.setdefault(ptr, len(storages)), offset, t.shape, t.stride(), t.dtype, t.device.index)

    parts = tuple(_step_parts(step, describe, True) for step in steps)
    return (frozenset(EAGER_RUNNERS), parts)  # finalize asks EAGER_RUNNERS too


def plan_flush(steps: Sequence[Any]) -> list[Ready]:
    """``finalize(fusion.partition(steps))``, from the flush cache when this sequence was planned before."""
    key = flush_signature(steps)
    cached = _FLUSHES.get(key)
    if cached is not None:
        template, lookups, splits = cached
        STATS.cache_hits += lookups
        STATS.splits += splits
        ready = []
        for kind, indices, group_key, program, shared, layout, run in template:
            group = Group(kind, [steps[i] for i in indices], group_key)
            prepared = chains.prepare([s for s in group.steps if isinstance(s, Step)]) if program else []
            ready.append(Ready(group, program, prepared, shared, layout, run))
        return ready
    before = (STATS.cache_hits, STATS.programs_cached, STATS.splits)
    ready = finalize(fusion.partition(steps))
    _mark_shared(ready)
    index = {id(step): i for i, step in enumerate(steps)}
    for i, item in enumerate(ready):
        if item.program is not None and item.program.kind == "elementwise":
            item.layout = _layout_token(item.program, item.prepared)
        item.run = shared_lhs_end(ready, i) - i
    template = [(item.group.kind, tuple(index[id(s)] for s in item.group.steps), item.group.key, item.program,
                 item.shared, item.layout, item.run) for item in ready]
    lookups = STATS.cache_hits - before[0] + STATS.programs_cached - before[1]
    _FLUSHES[key] = (template, lookups, STATS.splits - before[2])
    return ready
