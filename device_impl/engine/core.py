"""One NeuronCore: its memories, its five engines, and kernel launches on it.

``with launch("add", device) as nc:`` gives a kernel the core (``nc.sbuf``,
``nc.psum``, ``nc.dma``, ``nc.tensor``, ``nc.vector``, ``nc.scalar``,
``nc.gpsimd``). When the block ends the launch's timeline is closed: its
simulated duration advances the device clock (what torch.neuron events
measure), its report joins the per-kernel statistics, and, inside
``record_trace()``, its instructions join the Chrome trace.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

import numpy as np
import torch.autograd.profiler as _torch_profiler

from device_impl._core import C
from device_impl.engine.constants import PLATFORM, Platform
from device_impl.engine.isa import DMA, GpSimdE, ScalarE, TensorE, VectorE
from device_impl.engine.memory import MemoryPool, Tile
from device_impl.engine.timeline import ENGINES, LaunchReport, Timeline, chrome_trace


def scalar_finishes_first(nc, free: int, ready: float, vector_reads: int = 1) -> bool:
    """Would ScalarE finish an instruction over ``free`` columns no later than VectorE (reading ``vector_reads``
    tiles), both starting when its operands are ready (``ready``, ns) and the engine is next free? Each engine's
    cost rule (isa: ScalarE's larger fixed cost, VectorE's per-tile reads): how the kernels place a PSUM
    evacuation and the compiler an elementwise op between the two engines that can do it."""
    p, free_at = nc.vector.platform, nc.timeline.free
    vector = max(ready, free_at["vector"]) + (p.instruction_overhead_cycles + free * vector_reads) / p.vector_hz * 1e9
    scalar = max(ready, free_at["scalar"]) + (p.scalar_overhead_cycles + free) / p.scalar_hz * 1e9
    return scalar <= vector


class Scoped:
    """``scope()`` over a core's ``mark``/``release_to``: the one definition ``NeuronCore`` and the replay core
    (engine/replay.py) share."""

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Tiles allocated inside are freed at exit (their memory reusable by later tiles)."""
        mark = self.mark()  # type: ignore[attr-defined]
        try:
            yield
        finally:
            self.release_to(mark)  # type: ignore[attr-defined]


class NeuronCore(Scoped):
    """The state one kernel launch works in. Reused across launches on a thread (cheap to reset)."""

    # The values of this launch's ``choose`` calls, in order, while a caller records them (a list it sets after
    # entering the launch; None otherwise): a replay of the launch (engine.replay) makes the same choices.
    choices: list | None = None

    def __init__(self, platform: Platform = PLATFORM):
        self.platform = platform
        self.timeline = Timeline()
        self.sbuf = MemoryPool("sbuf", platform.sbuf_bytes_per_partition, platform.partitions)
        self.psum = MemoryPool("psum", platform.psum_bytes_per_partition, platform.partitions,
                               max_tile_bytes=platform.psum_bytes_per_partition // platform.psum_banks)
        self.dma = DMA(platform, self.timeline)
        self.tensor = TensorE(platform, self.timeline)
        self.vector = VectorE(platform, self.timeline)
        self.scalar = ScalarE(platform, self.timeline)
        self.gpsimd = GpSimdE(platform, self.timeline)
        self._scopes: list[list[tuple[MemoryPool, Tile]]] = []

    def reset(self, record: bool) -> None:
        # Tiles the last launch left live: their arrays may be reused too. Handed over (in a function, whose
        # loop variables are gone when it returns) before the pools' reset, which frees what nothing holds.
        _retire_live(self._scopes)
        self._scopes = [[]]
        self.timeline.reset()
        self.timeline.record = record
        self.sbuf.reset()
        self.psum.reset()
        self.tensor.loaded = None
        self.tensor.last_moving = 0
        self.choices = None

    def choose(self, decide: Callable[[], Any]) -> Any:
        """``decide()``: a scheduling choice a kernel makes from the timeline (which engine frees up first,
        which transpose to place next). The instructions it issues then depend on the timeline, which a
        replayed launch does not keep: the value is recorded (``choices``) for the replay to take instead."""
        value = decide()
        if self.choices is not None:
            self.choices.append(value)
        return value

    def _allocate(self, pool: MemoryPool, shape, dtype, name: str) -> Tile:
        tile = pool.allocate(tuple(shape), dtype, name)
        self._scopes[-1].append((pool, tile))
        return tile

    def sbuf_tile(self, shape, dtype, name: str = "") -> Tile:
        # _allocate inlined: every elementwise tile of every launch comes through here
        pool = self.sbuf
        tile = pool.allocate(tuple(shape), dtype, name)
        self._scopes[-1].append((pool, tile))
        return tile

    def psum_tile(self, shape, dtype="float32", name: str = "") -> Tile:
        return self._allocate(self.psum, shape, dtype, name)

    def mark(self) -> int:
        """A point to release back to: ``release_to(mark)`` frees every tile allocated after it."""
        return len(self._scopes[-1])

    def release(self, tile: Tile) -> None:
        """Free one tile before the end of its scope (double buffering)."""
        release_live(self._scopes[-1], tile)

    def release_to(self, mark: int) -> None:
        release_live_to(self._scopes[-1], mark)

    @contextlib.contextmanager
    def stream(self, live: list) -> Iterator[None]:
        """Allocations, marks and releases inside work on ``live``, a scope the caller keeps between
        entries: a kernel that interleaves independent instruction streams (software pipelining: one
        block's loads and products issued while another's softmax runs; each engine runs its queue in
        order) enters each stream's scope in turn, so a stream's ``release_to`` frees only its own tiles.
        ``release_to(0)`` inside it at the end frees what the stream left live."""
        self._scopes.append(live)
        try:
            yield
        finally:
            self._scopes.pop()


def _retire_live(scopes: list[list[tuple[MemoryPool, Tile]]]) -> None:
    for scope in scopes:
        for pool, tile in scope:
            pool.retired.append(tile)


def release_live(live: list, tile: Tile) -> None:
    """Free ``tile`` from a scope's live (pool, tile) list (``NeuronCore`` and the replay core share it)."""
    for i in range(len(live) - 1, -1, -1):
        if live[i][1] is tile:
            pool, _ = live.pop(i)
            pool.release(tile)
            return
    raise ValueError(f"{tile} is not live in the current scope")


def release_live_to(live: list, mark: int) -> None:
    """Free every tile of a scope's live list allocated after ``mark`` (its length then)."""
    while len(live) > mark:
        pool, tile = live.pop()
        pool.release(tile)


class _State(threading.local):
    def __init__(self) -> None:
        self.core: NeuronCore | None = None
        self.depth = 0
        # A caller's stand-in for the next launch a kernel opens itself on this thread (``divert``).
        self.divert: Any = None


_state = _State()


def divert(stand_in: Any) -> None:
    """Hand this thread's next launch a caller's stand-in (None: none): ``stand_in.enter(kernel, device)`` returns
    the core the kernel runs on and ``stand_in.exit(exc_type, exc, tb)`` ends it, in place of the launch's own.
    Adaptive eager records or replays a recurring row-kernel launch, which its kernel opens itself, this way
    (eager/programs.py); the launch takes the stand-in and clears it."""
    _state.divert = stand_in

try:  # numpy >= 2: the error state is a context variable; setting it is ~20x cheaper than np.seterr
    from numpy._core.umath import _extobj_contextvar, _make_extobj

    _IGNORE_ERRORS = _make_extobj(all="ignore")

    def _ignore_fp_errors():
        return _extobj_contextvar.set(_IGNORE_ERRORS)

    def _restore_fp_errors(token) -> None:
        _extobj_contextvar.reset(token)
except ImportError:  # pragma: no cover - older numpy
    def _ignore_fp_errors():
        return np.seterr(all="ignore")

    def _restore_fp_errors(token) -> None:
        np.seterr(**token)
_STAT_FIELDS = ("launches", "device_ns", "hbm_bytes", "flops") + tuple(f"{e}_busy_ns" for e in ENGINES)
assert ENGINES == ("dma", "tensor", "vector", "scalar", "gpsimd"), "_close adds busy times in this order"
_stats: dict[str, list[float]] = {}
_recording: list[list[LaunchReport]] = []
_last: list[tuple | None] = [None]
# While a torch profiler runs, each launch calls observer(kernel, device) on entry and the callable it
# returns with ``completed`` on exit (device_impl.profiler: a record_function range per launch and its
# simulated time). One flag test per launch otherwise: torch sets it when any profiler starts.
_observer: list[Callable[[str, int], Callable[[bool], None]] | None] = [None]


def set_launch_observer(observer: Callable[[str, int], Callable[[bool], None]] | None) -> None:
    _observer[0] = observer


class launch:
    """``with launch("add", device) as nc:`` runs one kernel on neuron:``device`` (see module docstring).

    A kernel that raises leaves no trace: the clock, statistics and trace only
    count launches that completed.
    """

    __slots__ = ("kernel", "device", "errors", "observed", "stand_in")

    def __init__(self, kernel: str, device: int):
        self.kernel = kernel
        self.device = device

    def __enter__(self) -> NeuronCore:
        stand_in = self.stand_in = _state.divert
        if stand_in is not None:
            _state.divert = None
            return stand_in.enter(self.kernel, self.device)
        if _state.depth:
            raise RuntimeError(f"kernel {self.kernel} launched from inside another kernel; launches do not nest")
        core = _state.core
        if core is None:
            core = _state.core = NeuronCore()
        core.reset(bool(_recording))
        _state.depth = 1
        # Integer wrap and IEEE specials (inf, nan) are the semantics, not errors.
        self.errors = _ignore_fp_errors()
        observer = _observer[0]
        self.observed = observer(self.kernel, self.device) if _torch_profiler._is_profiler_enabled and observer \
            else None
        return core

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.stand_in is not None:
            return self.stand_in.exit(exc_type, exc, tb)
        _state.depth = 0
        _restore_fp_errors(self.errors)
        if exc_type is None:
            _finish(self.kernel, self.device, _state.core)
        if self.observed is not None:
            self.observed(exc_type is None)
        return False


def _finish(kernel: str, device: int, core: NeuronCore) -> None:
    timeline = core.timeline
    # ``busy`` is this launch's own dict (Timeline.reset makes new ones), so it is kept, not copied.
    _close(kernel, device, timeline.end + core.platform.launch_overhead_ns, timeline.busy, timeline.hbm_read,
           timeline.hbm_write, timeline.flops, timeline.instructions, core.sbuf.peak, core.psum.peak,
           timeline.events)


def _close(kernel: str, device: int, device_ns: float, busy: dict[str, float], hbm_read: int, hbm_write: int,
           flops: int, instructions: int, sbuf_peak: int, psum_peak: int, events: list) -> None:
    """A completed launch's figures into the device clock, the per-kernel statistics, ``last_launch()`` and
    the traces being recorded: the one place an instruction-level launch (``_finish``) and a replayed one
    (``engine.replay``) report what they cost."""
    start = C.device_time_ns(device)
    C.advance_device_time(device, int(device_ns))
    entry = _stats.get(kernel)
    if entry is None:
        entry = _stats[kernel] = [0.0] * len(_STAT_FIELDS)
    entry[0] += 1
    entry[1] += device_ns
    entry[2] += hbm_read + hbm_write
    entry[3] += flops
    entry[4] += busy["dma"]  # ENGINES' order (_STAT_FIELDS), unrolled: every launch comes through here
    entry[5] += busy["tensor"]
    entry[6] += busy["vector"]
    entry[7] += busy["scalar"]
    entry[8] += busy["gpsimd"]
    raw = (kernel, device, device_ns, busy, hbm_read, hbm_write, flops, instructions, sbuf_peak, psum_peak,
           float(start))
    _last[0] = raw
    if _recording:
        report = LaunchReport(*raw, events=list(events))
        for trace in _recording:
            trace.append(report)


def last_launch() -> LaunchReport | None:
    """The report of the most recent completed launch on any thread."""
    raw = _last[0]
    return None if raw is None else LaunchReport(*raw)


def stats() -> dict[str, dict[str, float]]:
    """Per-kernel totals since the last reset: launches, device_ns, hbm_bytes, flops, per-engine busy ns."""
    return {name: dict(zip(_STAT_FIELDS, values)) for name, values in sorted(_stats.items())}


def reset_stats() -> None:
    _stats.clear()


class Trace:
    """Launch reports collected by ``record_trace()``; ``save(path)`` writes Chrome-trace JSON."""

    def __init__(self) -> None:
        self.reports: list[LaunchReport] = []

    def chrome_trace(self) -> dict:
        return chrome_trace(self.reports)

    def save(self, path: str) -> None:
        import json

        with open(path, "w") as handle:
            json.dump(self.chrome_trace(), handle)

    @property
    def device_ns(self) -> float:
        return sum(r.device_ns for r in self.reports)


@contextlib.contextmanager
def record_trace() -> Iterator[Trace]:
    """Record every launch (with its instructions) while the block runs."""
    trace = Trace()
    _recording.append(trace.reports)
    try:
        yield trace
    finally:
        _recording.remove(trace.reports)
