"""Replayed launches: a launch's recorded figures, its instructions' arithmetic without their bookkeeping.

An instruction-level launch (``core.launch``) places every instruction on the timeline: dependencies,
DMA bandwidth gaps, SBUF accounting. When a caller knows that a launch issues the same instructions on
the same tile shapes as one it has already run (kernels/replay.py: eager elementwise launches of one
signature), the timeline's answer is the same too, so it keeps that launch's ``Figures`` and later runs
``with replayed(kernel, device, figures) as nc:`` instead: ``nc`` is a ``ReplayCore`` whose engines are
the real ones (``isa.py``: the same numpy arithmetic, the same rounding points) but whose timeline only
tallies each engine's busy time and the instruction count, and whose SBUF/PSUM hand out plain tiles
(unwritten ones still read as poison). When the block ends the recorded figures go into the device
clock, ``engine.stats()``, ``last_launch()`` and the profiler's observer, exactly as ``_finish`` would
put the instruction-level ones (``core._close``).

The tally is the check that the instructions were the same: ``ReplayCore.matches(figures)`` compares its
instruction count and per-engine busy time (summed in program order: the same floats) with the recorded
ones, so a kernel whose instructions depend on the data is caught rather than given wrong figures.

A kernel that schedules from the timeline (which transpose a matmul places next, which engine evacuates PSUM:
``NeuronCore.choose``) makes its choices at the instruction level, where the caller records them
(``NeuronCore.choices``); its replay takes them in order (``ReplayCore.script``), since the tally keeps no
timeline, and a replay asking for more than were recorded (``ScriptEnded``), or leaving some, did not issue the
recorded instructions.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np
import torch.autograd.profiler as _torch_profiler

from device_impl.engine import core as _core
from device_impl.engine.constants import PLATFORM, Platform
from device_impl.engine.isa import DMA, GpSimdE, ScalarE, TensorE, VectorE
from device_impl.engine.memory import _DTYPES, REUSE_MIN_BYTES, SPARE_BYTES_MAX, Tile
from device_impl.engine.timeline import ENGINES

_COMPUTE = tuple(e for e in ENGINES if e != "dma")
_ZERO_BUSY = dict.fromkeys(ENGINES, 0.0)


class Figures(NamedTuple):
    """What an instruction-level launch measured (``core._close``'s arguments), plus what its replay
    must tally to be the same launch: compute instructions and their engines' busy time."""

    device_ns: float
    busy: dict[str, float]
    hbm_read: int
    hbm_write: int
    flops: int
    instructions: int
    sbuf_peak: int
    psum_peak: int
    compute_instructions: int  # instructions minus the caller's own DMA transfers (not issued in a replay)
    compute_busy: tuple[float, ...]  # busy ns of each compute engine (``_COMPUTE`` order)


def measured(core: _core.NeuronCore, own_transfers: int) -> Figures:
    """The figures of ``core``'s just-completed instruction-level launch; ``own_transfers``: how many of its
    instructions were DMA transfers the caller issued itself (a replay moves those bytes without them)."""
    timeline = core.timeline
    busy = timeline.busy
    return Figures(timeline.end + core.platform.launch_overhead_ns, dict(busy), timeline.hbm_read,
                   timeline.hbm_write, timeline.flops, timeline.instructions, core.sbuf.peak, core.psum.peak,
                   timeline.instructions - own_transfers, tuple(busy[e] for e in _COMPUTE))


class _Tally:
    """A timeline that only adds up: per-engine busy time and the instruction count (see module docstring)."""

    __slots__ = ("busy", "instructions", "hbm_read", "hbm_write", "flops", "record", "floor", "hbm_floors",
                 "hbm_targets", "events", "end", "onchip")

    def __init__(self) -> None:
        self.record = False
        self.hbm_read = 0
        self.hbm_write = 0
        self.flops = 0
        self.floor = 0.0
        self.hbm_floors = ()
        self.hbm_targets = ()
        self.onchip = ()  # no on-chip HBM ranges: a replayed launch's DMA moves HBM bytes (they are not tallied)
        self.events: list = []
        self.end = 0.0
        self.reset()

    def reset(self) -> None:
        """Only what ``ReplayCore.matches`` reads starts again (HBM bytes and flops are the recording's)."""
        self.busy = dict(_ZERO_BUSY)
        self.instructions = 0

    def schedule(self, engine: str, name: str, cost_ns: float, reads=(), writes=(), latency_ns: float = 0.0) -> float:
        self.busy[engine] += cost_ns
        self.instructions += 1
        return 0.0


class _Pool:
    """SBUF or PSUM without placement or capacity (the recorded launch had them checked): plain tiles,
    fresh ``Tile`` objects (so an unwritten one reads as poison); arrays of 64 KiB and up are reused by
    later tiles of their shape once released, as the instruction-level pool does, to spare page faults."""

    __slots__ = ("space", "spares", "count", "spare_bytes")

    def __init__(self, space: str) -> None:
        self.space = space
        self.spares: dict[tuple, list[np.ndarray]] = {}
        self.count = 0
        self.spare_bytes = 0  # held in ``spares``: at most SPARE_BYTES_MAX, as the instruction-level pool

    def allocate(self, shape: tuple[int, int], dtype) -> Tile:
        dt = _DTYPES.get(dtype)
        if dt is None:
            dt = _DTYPES[dtype] = np.dtype(dtype)
        key = (shape, dt)
        spares = self.spares.get(key)
        if spares:
            data = spares.pop()
            self.spare_bytes -= data.nbytes
        else:
            data = np.empty(shape, dtype=dt)
        self.count += 1
        tile = Tile(data, self.space, self.count)
        tile.key = key
        return tile

    def release(self, tile: Tile) -> None:
        data = tile.data
        nbytes = data.nbytes
        if nbytes >= REUSE_MIN_BYTES and self.spare_bytes + nbytes <= SPARE_BYTES_MAX:
            self.spares.setdefault(tile.key, []).append(data)
            self.spare_bytes += nbytes


class ReplayCore(_core.Scoped):
    """The core a replayed launch runs on: real engines over a ``_Tally`` and plain pools."""

    def __init__(self, platform: Platform = PLATFORM, tally: _Tally | None = None) -> None:
        self.platform = platform
        self.timeline = _Tally() if tally is None else tally
        self.sbuf = _Pool("sbuf")
        self.psum = _Pool("psum")
        self.dma = DMA(platform, self.timeline)
        self.tensor = TensorE(platform, self.timeline)
        self.vector = VectorE(platform, self.timeline)
        self.scalar = ScalarE(platform, self.timeline)
        self.gpsimd = GpSimdE(platform, self.timeline)
        self._live: list[tuple[_Pool, Tile]] = []
        # Every tile of the launch, its own ``root``: that cycle would leave each tile and its array to the
        # garbage collector (a small op's memory churn cost more than its arithmetic); ``retire`` breaks it.
        self.made: list[Tile] = []
        # The recorded launch's ``choose`` values (``NeuronCore.choices``), taken in order (``taken``).
        self.script: Sequence[Any] = ()
        self.taken = 0
        # ``one_tile_direct``'s tiles (result, operands), made at its first launch on this thread's core.
        self.direct: list[Tile] | None = None

    def retire(self) -> None:
        """The launch is over: its tiles let go of themselves (see ``made``)."""
        for tile in self.made:
            tile.root = None
        self.made.clear()

    def reset(self) -> None:
        self.timeline.reset()
        self.tensor.loaded = None
        self.tensor.last_moving = 0
        self._live.clear()

    def sbuf_tile(self, shape, dtype, name: str = "") -> Tile:
        pool = self.sbuf
        tile = pool.allocate(tuple(shape), dtype)
        self._live.append((pool, tile))
        self.made.append(tile)
        return tile

    def psum_tile(self, shape, dtype="float32", name: str = "") -> Tile:
        pool = self.psum
        tile = pool.allocate(tuple(shape), dtype)
        self._live.append((pool, tile))
        self.made.append(tile)
        return tile

    def choose(self, decide) -> Any:
        """The recorded launch's next choice (``NeuronCore.choose``); ``ScriptEnded`` past the last one."""
        taken = self.taken
        if taken >= len(self.script):
            raise ScriptEnded
        self.taken = taken + 1
        return self.script[taken]

    @contextlib.contextmanager
    def stream(self, live: list) -> Iterator[None]:
        """``NeuronCore.stream``: allocations, marks and releases inside work on ``live``."""
        outer = self._live
        self._live = live
        try:
            yield
        finally:
            self._live = outer

    def mark(self) -> int:
        return len(self._live)

    def release_to(self, mark: int) -> None:
        _core.release_live_to(self._live, mark)

    def release(self, tile: Tile) -> None:
        _core.release_live(self._live, tile)

    def matches(self, figures: Figures) -> bool:
        """Whether the instructions issued so far are the recorded launch's (count and busy time per engine;
        every recorded choice taken)."""
        if self.taken != len(self.script):
            return False
        timeline = self.timeline
        busy = timeline.busy
        tensor, vector, scalar, gpsimd = figures.compute_busy  # _COMPUTE's order
        return (timeline.instructions == figures.compute_instructions and busy["vector"] == vector
                and busy["scalar"] == scalar and busy["tensor"] == tensor and busy["gpsimd"] == gpsimd)


class _Log(_Tally):
    """A share's tally (``share_core``): each instruction's engine and cost in program order, for ``merge`` to add
    into the launch's own tally after the shares before it (the serial run's additions, in its order)."""

    __slots__ = ("log",)

    def reset(self) -> None:
        super().reset()
        self.log: list[tuple[str, float]] = []

    def schedule(self, engine: str, name: str, cost_ns: float, reads=(), writes=(), latency_ns: float = 0.0) -> float:
        self.log.append((engine, cost_ns))
        self.instructions += 1
        return 0.0


class _Share(threading.local):
    core: "ReplayCore | None" = None


_share = _Share()


def share_core() -> ReplayCore:
    """This thread's core for a share of a replayed launch another thread holds (its arithmetic split among host
    threads by region: ``eager.programs``), reset: real engines over a ``_Log`` tally and plain pools of its own
    (kept per thread, so its tiles' arrays are reused from launch to launch as the launch's own core's are).
    Its instructions reach the launch's tally through ``merge``; ``ReplayCore.retire`` ends the share."""
    core = _share.core
    if core is None:
        core = _share.core = ReplayCore(tally=_Log())
    core.timeline.reset()
    core._live.clear()
    core.script = ()
    core.taken = 0
    return core


def merge(core: ReplayCore, shares: Sequence[ReplayCore]) -> None:
    """Add ``shares``' instructions (``share_core``s, in region order, each run after ``core``'s own regions)
    into ``core``'s tally one by one: the busy sums are the floats the serial run adds up, in its order, so
    ``ReplayCore.matches`` holds exactly where the serial replay's would."""
    timeline = core.timeline
    busy = timeline.busy
    for share in shares:
        for engine, cost in share.timeline.log:
            busy[engine] += cost
        timeline.instructions += share.timeline.instructions


class ScriptEnded(Exception):
    """A replayed launch asked for more choices than its recording made (it issued other instructions)."""


class replayed:
    """``with replayed(kernel, device, figures) as nc:`` runs a launch's arithmetic on a ``ReplayCore`` and
    reports ``figures`` as its cost when the block completes (a block that raises reports nothing, as a
    launch that raises). Launches do not nest, replayed or not."""

    __slots__ = ("kernel", "device", "figures", "errors", "observed")

    def __init__(self, kernel: str, device: int, figures: Figures):
        self.kernel = kernel
        self.device = device
        self.figures = figures

    def __enter__(self) -> ReplayCore:
        core, self.errors, self.observed = _begin(self.kernel, self.device)
        return core

    def __exit__(self, exc_type, exc, tb) -> bool:
        _end(_core._state.replay_core, self.kernel, self.device, self.figures, exc_type is None, self.errors,
             self.observed)
        return False


def _begin(kernel: str, device: int) -> tuple[ReplayCore, Any, Any]:
    """Enter a replayed launch: this thread's replay core, reset (``reset`` inlined: every replayed launch
    comes through here), the FP error state to restore and the profiler's observer callback (or None)."""
    state = _core._state
    if state.depth:
        raise RuntimeError(f"kernel {kernel} launched from inside another kernel; launches do not nest")
    core = getattr(state, "replay_core", None)
    if core is None:
        core = state.replay_core = ReplayCore()
    timeline = core.timeline
    timeline.busy = dict(_ZERO_BUSY)
    timeline.instructions = 0
    tensor = core.tensor
    tensor.loaded = None
    tensor.last_moving = 0
    core._live.clear()
    core.script = ()
    core.taken = 0
    state.depth = 1
    errors = _core._ignore_fp_errors()
    observer = _core._observer[0]
    observed = observer(kernel, device) if _torch_profiler._is_profiler_enabled and observer else None
    return core, errors, observed


def _end(core: ReplayCore, kernel: str, device: int, figures: Figures, completed: bool, errors, observed) -> None:
    """Leave a replayed launch; a completed one reports ``figures`` as its cost (an incomplete one nothing)."""
    _core._state.depth = 0
    core.retire()
    _core._restore_fp_errors(errors)
    if completed:
        f = figures
        _core._close(kernel, device, f.device_ns, dict(f.busy), f.hbm_read, f.hbm_write, f.flops, f.instructions,
                     f.sbuf_peak, f.psum_peak, [])
    if observed is not None:
        observed(completed)


def one_tile(kernel: str, device: int, figures: Figures, plan: tuple, out_view: np.ndarray, emit, shape: tuple,
             target: np.dtype | None) -> bool:
    """A replayed launch of one tile ``shape`` holding all of out (a small elementwise op: the common case,
    whose host cost is this function's): ``replayed`` and the tile loop of ``kernels.replay.run``, inlined,
    with ``_begin``, ``_end``, ``ReplayCore.retire`` and ``matches`` written out in it (each a call and its
    argument passing on every small op; their docstrings say what each step is for).
    ``plan``: per operand (HBM view broadcast to out, scalar, convert to ``target``). Returns whether the
    instructions were the recorded ones; the figures are reported only then, and out is written either way."""
    state = _core._state
    if state.depth:
        raise RuntimeError(f"kernel {kernel} launched from inside another kernel; launches do not nest")
    nc = getattr(state, "replay_core", None)
    if nc is None:
        nc = state.replay_core = ReplayCore()
    timeline = nc.timeline
    busy = timeline.busy = _ZERO_BUSY.copy()
    timeline.instructions = 0
    tensor = nc.tensor
    tensor.loaded = None
    tensor.last_moving = 0
    nc._live.clear()
    nc.script = ()
    nc.taken = 0
    state.depth = 1
    errors = _core._ignore_fp_errors()
    observer = _core._observer[0]
    observed = observer(kernel, device) if _torch_profiler._is_profiler_enabled and observer else None
    made = nc.made
    same = False
    try:
        operands = []
        for v, s, c in plan:
            if v is None:
                operands.append(s)
                continue
            # the elements in row-major order: reshape copies a non-contiguous view in that order; copy keeps
            # a contiguous one's tile apart from HBM (what DMA.load_flat moves)
            tile = Tile(v.reshape(shape).copy(), "sbuf", 0)
            tile.initialized = True
            made.append(tile)
            if c:
                converted = nc.sbuf_tile(shape, target)
                nc.vector.tensor_copy(converted, tile)
                tile = converted
            operands.append(tile)
        result = Tile(np.empty(shape, out_view.dtype), "sbuf", 0)
        made.append(result)
        emit(nc, result, *operands)
        out_view[...] = result.read().reshape(out_view.shape)  # what DMA.store_flat moves
        # ReplayCore.matches, written out
        tensor_busy, vector, scalar, gpsimd = figures.compute_busy  # _COMPUTE's order
        same = (nc.taken == len(nc.script) and timeline.instructions == figures.compute_instructions
                and busy["vector"] == vector and busy["scalar"] == scalar and busy["tensor"] == tensor_busy
                and busy["gpsimd"] == gpsimd)
    finally:
        # _end, written out
        state.depth = 0
        for tile in made:  # ReplayCore.retire
            tile.root = None
        made.clear()
        _core._restore_fp_errors(errors)
        if same:
            f = figures
            _core._close(kernel, device, f.device_ns, f.busy.copy(), f.hbm_read, f.hbm_write, f.flops, f.instructions,
                   f.sbuf_peak, f.psum_peak, [])
        if observed is not None:
            observed(same)
    return same


_PLACEHOLDER = np.empty((1, 1), np.float32)  # a direct tile's array between launches (it holds no tensor's memory)


def _direct_tiles(nc: ReplayCore, n: int) -> list[Tile]:
    """This thread's tiles for ``one_tile_direct`` (result first, then ``n`` operands), made once per core:
    launches do not nest, so one set serves every direct launch of the thread."""
    tiles = nc.direct
    if tiles is None or len(tiles) < n + 1:
        tiles = nc.direct = [Tile(_PLACEHOLDER, "sbuf", 0) for _ in range(n + 1)]
        for tile in tiles:
            tile.initialized = True
    return tiles


def one_tile_direct(kernel: str, device: int, figures: Figures, views: tuple, out_view: np.ndarray, emit,
                    shape: tuple) -> bool:
    """``one_tile`` for a launch whose one compute instruction reads its operands in their own dtype and writes
    the result (a caller's recurring plan knows it: kernels/elementwise/recurring.py): the operand tiles are the
    operands' HBM views shaped as the tile (a broadcast or strided one copied by the reshape, as the DMA would),
    the result tile is out's C-contiguous HBM view shaped as the tile, so no tile is copied in or stored out.
    The instruction computes the same numpy arithmetic on the same values into the same dtype, so out's bits are
    ``one_tile``'s; an out that is an operand (``x.add_(y)``) is read and written by that one ufunc call, as
    numpy defines for identical memory. Same checks and reports as ``one_tile``."""
    state = _core._state
    if state.depth:
        raise RuntimeError(f"kernel {kernel} launched from inside another kernel; launches do not nest")
    nc = getattr(state, "replay_core", None)
    if nc is None:
        nc = state.replay_core = ReplayCore()
    tiles = nc.direct
    if tiles is None or len(tiles) <= len(views):
        tiles = _direct_tiles(nc, len(views))
    timeline = nc.timeline
    busy = timeline.busy = _ZERO_BUSY.copy()
    timeline.instructions = 0
    tensor = nc.tensor
    tensor.loaded = None
    tensor.last_moving = 0
    nc._live.clear()
    nc.script = ()
    nc.taken = 0
    state.depth = 1
    errors = _ignore_fp_errors()
    observer = _core._observer[0]
    observed = observer(kernel, device) if _torch_profiler._is_profiler_enabled and observer else None
    same = False
    result = tiles[0]
    try:
        result.data = out_view.reshape(shape)
        result.initialized = False  # as a fresh result tile: read before written, it is poison
        operands = tiles[1:len(views) + 1]
        for tile, v in zip(operands, views):
            tile.data = v.reshape(shape)
        emit(nc, result, *operands)
        tensor_busy, vector, scalar, gpsimd = figures.compute_busy  # ReplayCore.matches, written out
        same = (nc.taken == len(nc.script) and timeline.instructions == figures.compute_instructions
                and busy["vector"] == vector and busy["scalar"] == scalar and busy["tensor"] == tensor_busy
                and busy["gpsimd"] == gpsimd)
    finally:
        state.depth = 0
        for tile in tiles:  # they hold no tensor's memory between launches
            tile.data = _PLACEHOLDER
        result.initialized = True
        made = nc.made
        if made:  # tiles the emit allocated: ReplayCore.retire
            for tile in made:
                tile.root = None
            made.clear()
        _restore_fp_errors(errors)
        if same:
            f = figures
            _core._close(kernel, device, f.device_ns, f.busy.copy(), f.hbm_read, f.hbm_write, f.flops,
                         f.instructions, f.sbuf_peak, f.psum_peak, [])  # looked up per launch: tests spy on it
        if observed is not None:
            observed(same)
    return same


_ignore_fp_errors = _core._ignore_fp_errors
_restore_fp_errors = _core._restore_fp_errors
