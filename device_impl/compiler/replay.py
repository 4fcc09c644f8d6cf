"""Static programs simulate fast: the schedule recorded at compile time, the arithmetic run wide.

A NEFF's shapes are static, so what the engines' timeline ends up as after a
launch (device time, per-engine busy time, HBM bytes, TensorE flops,
instruction count, SBUF/PSUM peaks) does not depend on the values computed:
``executor.record_schedule`` runs the program once at compile time,
instruction by instruction, on zero-filled host arrays, and keeps those figures as ``Program.schedule`` (written into
the NEFF, so a process that loads the program from the disk cache has them).

Later executions take the fast path (``Executable``): each step does the same
arithmetic with the same rounding points as its tile program but without the
per-instruction bookkeeping, and the recorded figures are put into the launch
(``apply``) before it closes, so the device clock, ``engine.stats()``,
``last_launch()`` and the profiler see exactly the instruction-level numbers.

Which steps have a wide runner, which run their tile program as is (gathers
and scatters among them: their indices are data, but only their count sets the
cost), and which make a program's device time depend on data is a table on the
step kind (``STEP_KINDS``). The instruction-level path stays the reference and is taken:
  * for programs with a data-dependent step, or one that refuses the zeros it is recorded on (no
    schedule is recorded);
  * while a trace is recorded (``engine.record_trace``: it needs every instruction);
  * when an input's layout differs from the contiguous one the schedule was recorded with (DMA
    costs depend on strides);
  * with ``NEURON_STATIC_REPLAY=0`` (``runtime.config.static_replay``).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Callable

import numpy as np
from numpy.lib.array_utils import byte_bounds

from device_impl.compiler import (bitcast, factories, opaque_cnn, opaque_conv, opaque_indexing, opaque_moments,
                                  opaque_pads, opaque_products, opaque_resample, workers)
from device_impl.compiler.groups import GroupRunner
from device_impl.compiler.layout import same_bytes
from device_impl.compiler.program import Program
from device_impl.engine.core import NeuronCore
from device_impl.engine.dtypes import FP32
from device_impl.engine.isa import DMA, GpSimdE, ScalarE, TensorE, VectorE
from device_impl.engine.memory import MemoryPool, Tile
from device_impl.engine.timeline import ENGINES, Timeline
from device_impl.kernels.contiguous import fp32_contiguous

# step kind -> how a fast execution runs it:
#   "wide"  a runner over whole arrays (one tile per step or per product block), same rounding points
#   "tile"  its instruction-level runner as is (its arithmetic; its timeline is discarded)
#   "plan"  its instruction-level runner on the wide core, recorded at the first fast execution and issued as
#           recorded after (``StepPlan``): steps that only move or generate values (DMA, memset, iota,
#           casts), whose instructions follow from shapes and whose engine choices change no bits
#   "data"  cost or control flow depends on values: a program with such a step is never replayed
# A kind missing here counts as "data": a new step kind is replayed only once someone has said why it may be.
STEP_KINDS: dict[str, str] = {
    "fused": "wide",
    "dot_general": "wide",
    # SDPA's flash tile program (compiler/opaque.py): causal blocks are skipped by position, never by value;
    # its wide runner (kernels.attention.forward_wide) takes every head at once
    "attention": "wide",
    "attention_backward": "tile",
    # native_layer_norm, the eager kernel's tile program (compiler/opaque.py): its instructions follow from the
    # shapes (moments, rstd, affine step on fixed engines; the fma choice is the step's option, not a value)
    "layer_norm": "tile",
    # native_layer_norm_backward, the eager kernel's tile program: shape-only like the forward's
    "layer_norm_backward": "tile",
    # the softmax/log_softmax backward kernels' tile program (compiler/opaque.py): fixed engines, shape-only
    "softmax_backward": "tile",
    "iota": "plan",
    "concatenate": "plan",
    "pad": "plan",
    "copy": "plan",
    "fill": "plan",
    "argmax": "tile",
    "argmin": "tile",
    "reduce_window": "tile",
    "convolution": "tile",
    # indirect DMA: the indices pick the rows, their count sets the cost (descriptors, bytes); the offsets
    # program (its bounds check) and the row moves are instructions, so a plan issues them with the new indices
    "gather": "plan",
    "scatter": "tile",
    # issue 21 names sorts data-dependent; GpSimd's sort programs (ties, top-k) are not audited as shape-only
    "sort": "data",
    # the eager kernels' programs cut whole (compiler/opaque.py, ccovb): isin sorts its test values on GpSimd
    "isin": "data",
    "sort_whole": "data",
    # GradScaler's kernels: fixed engines, every tile's instructions from the shapes (the flags are data, not
    # control flow)
    "amp_unscale": "tile",
    "amp_update_scale": "tile",
    "cumprod": "tile",  # as reduce_window's scans: fixed engines, shape-only
    "unfold_backward": "tile",  # a fill and VectorE adds or DMA moves of fixed slices: shape-only
    "view_scatter": "plan",  # two DMA moves of fixed regions
    # index_add cut whole: indirect DMA rows and GpSimd adds whose instructions follow from the shapes (the index
    # count and row width), as the scatter step's; the range check's raise is the only branch on values
    "index_add": "tile",
}
STEP_KINDS.update(opaque_cnn.STEP_KINDS)  # CNN ops cut whole: the eager kernels' shape-only tile programs
STEP_KINDS.update(factories.STEP_KINDS)  # float32 linspace cut whole: a GpSimd program of fixed size
STEP_KINDS.update(opaque_products.STEP_KINDS)  # dot, vdot, addbmm cut whole: TensorE products of fixed sizes
STEP_KINDS.update(opaque_moments.STEP_KINDS)  # reduced-float moments cut whole: shape-only GpSimd passes
# embedding_dense_backward (its redirect reads the indices) and index_copy (shape-only indirect rows) cut whole
STEP_KINDS.update(opaque_indexing.STEP_KINDS)
STEP_KINDS.update(opaque_pads.STEP_KINDS)  # padding cut whole: DMA moves and adds of fixed boxes
STEP_KINDS.update(opaque_conv.STEP_KINDS)  # convolution_backward torch-mlir cannot import: its tile program
STEP_KINDS.update(opaque_resample.STEP_KINDS)  # upsampling's forward cut whole: shape-only row gathers and blends
STEP_KINDS.update(bitcast.STEP_KINDS)  # bitcast_convert: one byte copy of fixed size

SCHEDULE_VERSION = 1


def is_static(program: Program) -> bool:
    """Whether every step's cost and control flow follow from the program's shapes alone."""
    return all(STEP_KINDS.get(step["kind"], "data") != "data" for step in program.steps)


# -- recording ------------------------------------------------------------------------------------

class HostScratch:
    """Scratch HBM for recording: host arrays (a compile touches no device memory)."""

    def new(self, shape, dtype) -> np.ndarray:
        return np.zeros(tuple(int(s) for s in shape), dtype=np.dtype(dtype))


def measured(core: NeuronCore, inputs: list[np.ndarray]) -> dict[str, Any]:
    """The schedule: what ``core``'s launch measured after an instruction-level run of a program on
    ``inputs`` (``executor.record_schedule`` runs it at compile time)."""
    timeline = core.timeline
    return {
        "version": SCHEDULE_VERSION,
        "end_ns": timeline.end,
        "busy_ns": {engine: timeline.busy[engine] for engine in ENGINES},
        "hbm_read": timeline.hbm_read,
        "hbm_write": timeline.hbm_write,
        "flops": timeline.flops,
        "instructions": timeline.instructions,
        "sbuf_peak": core.sbuf.peak,
        "psum_peak": core.psum.peak,
        "input_strides": [list(a.strides) for a in inputs],
    }


def usable(schedule: dict[str, Any] | None, inputs: list[np.ndarray]) -> bool:
    """The recorded schedule describes this execution: recorded by this runtime, inputs laid out alike."""
    if schedule is None or schedule.get("version") != SCHEDULE_VERSION:
        return False
    return all(list(a.strides) == s for a, s in zip(inputs, schedule["input_strides"]))


def apply(core: NeuronCore, schedule: dict[str, Any]) -> None:
    """Make the open launch on ``core`` end exactly as its instruction-level run did."""
    timeline = core.timeline
    timeline.end = schedule["end_ns"]
    timeline.busy = dict(schedule["busy_ns"])
    timeline.hbm_read = schedule["hbm_read"]
    timeline.hbm_write = schedule["hbm_write"]
    timeline.flops = schedule["flops"]
    timeline.instructions = schedule["instructions"]
    timeline.events = []
    core.sbuf.peak = schedule["sbuf_peak"]
    core.psum.peak = schedule["psum_peak"]


# -- the wide core: the engines' arithmetic on tiles of any size ------------------------------------

class _UnboundedPool(MemoryPool):
    """Tiles of any shape, no capacity: the wide runners hold a whole step's data at once."""

    def allocate(self, shape: tuple[int, int], dtype: np.dtype, name: str = "") -> Tile:
        self.count += 1
        return Tile(np.empty(shape, dtype=dtype), self.space, name or f"{self.space}{self.count}")

    def release(self, tile: Tile) -> None:
        pass

    def recycle(self) -> None:
        self.retired.clear()  # tiles a wide step left live: plain arrays, nothing to take back for reuse


class _WideDMA(DMA):
    """Flat transfers of a whole array as one strided numpy copy (the byte moves are the same)."""

    def load_flat(self, dst: Tile, src: np.ndarray, start: int, stop: int) -> None:
        if start or stop != src.size or src.dtype != dst.dtype or dst.root is not dst:
            return super().load_flat(dst, src, start, stop)
        np.copyto(dst.write_target().reshape(src.shape), src)

    def store_flat(self, dst: np.ndarray, start: int, stop: int, src: Tile) -> None:
        if start or stop != dst.size or src.dtype != dst.dtype or src.root is not src:
            return super().store_flat(dst, start, stop, src)
        np.copyto(dst, src.read().reshape(dst.shape))

    # the byte moves of load and store, without their cost (the wide core's timeline is a scratchpad)
    def load(self, dst: Tile, src: np.ndarray) -> None:
        if src.size != dst.data.size or src.dtype != dst.dtype:
            return super().load(dst, src)  # its error
        target = dst.write_target()
        target[...] = src.reshape(target.shape) if src.shape != target.shape else src

    def store(self, dst: np.ndarray, src: Tile) -> None:
        if dst.size != src.data.size or src.dtype != dst.dtype:
            return super().store(dst, src)  # its error
        values = src.read()
        dst[...] = values.reshape(dst.shape) if values.shape != dst.shape else values

    def hbm_copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        if src.dtype != dst.dtype:
            return super().hbm_copy(dst, src)  # its error
        np.copyto(dst, src)


class _Scratchpad(Timeline):
    """The wide core's timeline: instructions are issued to it and nothing reads it (the launch reports the
    recorded schedule), so placing them (dependencies, DMA gaps) would be work for nothing."""

    __slots__ = ()

    def schedule(self, engine: str, name: str, cost_ns: float, reads=(), writes=(), latency_ns: float = 0.0) -> float:
        return 0.0


def _unscheduled(*args, **kwargs) -> float:
    return 0.0


class WideCore(NeuronCore):
    """A core whose tiles have no size limit. Its timeline is a scratchpad: nothing reads it, so the engines'
    ``_schedule`` (an instruction's cost, then its place on the timeline) is skipped altogether."""

    wide = True  # step runners that keep tiles across steps on a real core do not here (steps._held_constant)

    def __init__(self) -> None:
        super().__init__()
        platform = self.platform
        self.timeline = timeline = _Scratchpad()
        self.sbuf = _UnboundedPool("sbuf", self.sbuf.capacity, self.sbuf.partitions)
        self.psum = _UnboundedPool("psum", self.psum.capacity, self.psum.partitions)
        self.dma = _WideDMA(platform, timeline)
        self.tensor = TensorE(platform, timeline)
        self.vector = VectorE(platform, timeline)
        self.scalar = ScalarE(platform, timeline)
        self.gpsimd = GpSimdE(platform, timeline)
        for engine in (self.dma, self.vector, self.gpsimd):
            engine._schedule = _unscheduled


_local = threading.local()


def wide_core() -> WideCore:
    core = getattr(_local, "core", None)
    if core is None:
        core = _local.core = WideCore()
    core.reset(False)
    return core


# -- wide runners ---------------------------------------------------------------------------------

# A wide runner takes ``wide_core`` (called for a freshly reset wide core, by the runners that issue
# instructions: a recorded group plan and a product's arithmetic need none) and the execution's Env.
WideRunner = Callable[[Callable[[], WideCore], Any], None]

def _wide_fused(step: dict, program: Program, runner) -> WideRunner:
    """A fused group as one tile: flat groups [1, N]; reduce groups all rows at once with the tile
    program's column chunks (so partial reductions combine at the same points). Run as a ``StepPlan``:
    its instructions recorded at the first execution, issued as recorded at later ones."""
    if not plannable(step):
        return lambda core, env: runner.run_wide(core(), env)
    return StepPlan(runner.run_wide).run


# -- step plans: a wide step's instructions, recorded once -------------------------------------------
#
# On the wide core a fused group (and a "plan" kind step) issues the same instructions on the same tile shapes at every execution
# (its control flow follows from shapes, immediates and a timeline that never advances: _Scratchpad); only
# the HBM arrays its DMAs read and write differ (new outputs, other inputs). Working out that sequence
# (access patterns, instruction selection, tile bookkeeping in groups.GroupRunner) was most of a small
# group's wall time: a tiny Llama's RMS norm issued ~25 instructions through ~600 Python calls. A plan
# records the engine calls of one execution (the instruction, its tiles and immediates, and each HBM
# operand as a view of one of the execution's base arrays: value id, byte offset, shape, strides) and
# later executions call the same engine methods on the same tiles, the HBM views rebuilt on this
# execution's arrays. The arithmetic is the engines' own, instruction by instruction, so the bits are.

PLAN_BYTES = 16 << 20  # tile bytes a plan may keep between executions (larger groups run as before)
_INTEGER_TRAPS = frozenset({"divide", "remainder"})  # integer division by zero raises from a tile read


def plannable(step: dict) -> bool:
    """Whether a group's instructions can be recorded: none of its ops reads tile values in Python (an
    integer division checks its divisor for zeros to raise CPU's error; the plan would skip the check)."""
    return not any(op["op"] in _INTEGER_TRAPS and np.dtype(op["in_types"][0]).kind in "iub"
                   for op in step.get("ops", ()))


class _Refused(Exception):
    """A recording that cannot be replayed (an instruction that answered, an operand of no base array)."""


class _LoggedEngine:
    """An engine whose instruction calls are recorded (a plan's recording run)."""

    __slots__ = ("_engine", "_log")

    def __init__(self, engine, log: list) -> None:
        self._engine = engine
        self._log = log

    def __getattr__(self, name: str):
        attr = getattr(self._engine, name)
        if name.startswith("_") or not callable(attr):
            return attr
        log = self._log

        def instruction(*args, **kwargs):
            result = attr(*args, **kwargs)
            log.append((attr, args, kwargs, result))
            return result

        return instruction


class _KeptPool(_UnboundedPool):
    """The recording core's tiles, listed: the plan keeps them for its later executions."""

    def __init__(self, space: str, capacity: int, partitions: int) -> None:
        super().__init__(space, capacity, partitions)
        self.tiles: list[Tile] = []

    def allocate(self, shape: tuple[int, int], dtype: np.dtype, name: str = "") -> Tile:
        tile = super().allocate(shape, dtype, name)
        self.tiles.append(tile)
        return tile


class _RecordingCore(WideCore):
    def __init__(self) -> None:
        super().__init__()
        self.sbuf = _KeptPool("sbuf", self.sbuf.capacity, self.sbuf.partitions)
        self.psum = _KeptPool("psum", self.psum.capacity, self.psum.partitions)
        self.reset(False)
        self.log: list = []
        for name in ("dma", "tensor", "vector", "scalar", "gpsimd"):
            setattr(self, name, _LoggedEngine(getattr(self, name), self.log))


def _bases(env) -> list[tuple[tuple[bool, int], int, int, np.ndarray]]:
    """((is an output?, value id or output index), first byte, end byte, array) of an execution's C-contiguous
    base arrays: its values' buffers and its outputs (a copy step writes an output no buffer names)."""
    found = []
    for key, array in [*(((False, vid), a) for vid, a in env.arrays.items()),
                       *(((True, i), a) for i, a in enumerate(env.outputs))]:
        if array.size and array.flags.c_contiguous:
            lo, hi = byte_bounds(array)
            found.append((key, lo, hi, array))
    return found


def _placement(env, key: tuple[bool, int]) -> tuple:
    """What fixes where a base array lies: the scratch buffers share one arena (their relative offsets never
    change), an output buffer is its output; every other value is placed by the caller (inputs) or the loader
    (constants), so two of them that overlap in one execution need not in the next."""
    output, index = key
    if output:
        return ("output", index)
    buffer = env.program.buffers.get(index)
    if buffer is not None and buffer["kind"] == "scratch":
        return ("arena",)
    if buffer is not None and buffer["kind"] == "output":
        return ("output", buffer["index"])
    return ("value", index)


def _base(env, key: tuple[bool, int]) -> np.ndarray | None:
    output, index = key
    return env.outputs[index] if output else env.arrays.get(index)


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


class StepPlan:
    """A step's wide run (``run(core, env)``): recorded at its first execution, replayed after (see above)."""

    def __init__(self, run: Callable[[Any, Any], None]) -> None:
        self.runner = run
        # [(method, args, kwargs, [(position, base, offset, shape, strides)])]: ``base`` indexes ``layouts``
        self.instructions: list | None = None
        self.layouts: list[tuple] = []  # (_bases key, shape, strides, dtype) of each base array the plan uses
        self.roots: list[Tile] = []
        self.refused: str | bool = False  # why it was not recorded
        # the plan with its direct HBM operands (``_direct``): the instructions without the loads and stores a
        # tile bound to its HBM view stands for, and those bindings (tile, layout index, offset, shape, strides)
        self.direct: list | None = None
        self.binds: list[tuple] = []
        self.kept_data: dict[Tile, np.ndarray] = {}  # each bound tile's own array
        self.replays = 0  # executions that issued the recorded instructions (tests count them)
        self.direct_replays = 0  # of them, those that read and wrote the bound tiles where they lie in HBM
        self.lock = threading.Lock()

    def run(self, wide, env) -> None:
        if self.instructions is None:
            if self.refused or not self.lock.acquire(blocking=False):
                return self.runner(wide(), env)
            try:
                self._record(env)
            finally:
                self.lock.release()
            return None
        if not self.lock.acquire(blocking=False):  # another thread replays it: its tiles are taken
            return self.runner(wide(), env)
        try:
            bases = []
            outputs, arrays = env.outputs, env.arrays
            for (output, index), shape, strides, dtype in self.layouts:  # _base, inlined
                base = outputs[index] if output else arrays.get(index)
                if base is None or base.shape != shape or base.strides != strides or base.dtype != dtype:
                    return self.runner(wide(), env)
                bases.append(base)
            for tile in self.roots:
                tile.initialized = False  # as the recording's fresh tiles: a partial first write poisons the rest
            self.replays += 1
            instructions, bound = self.instructions, _bind(self.binds, bases)
            if bound:
                instructions = self.direct
                self.direct_replays += 1
                for tile, view in bound:
                    tile.data, tile.initialized = view, True
            try:
                for method, args, kwargs, operands in instructions:
                    if operands:
                        args = list(args)
                        for position, index, offset, shape, strides in operands:
                            base = bases[index]
                            args[position] = np.ndarray(shape, base.dtype, buffer=base, offset=offset,
                                                        strides=strides)
                    method(*args, **kwargs)
            finally:
                for tile, _ in bound:  # the tiles' own arrays back (the HBM views are this execution's)
                    tile.data = self.kept_data[tile]
        finally:
            self.lock.release()
        return None

    def _record(self, env) -> None:
        core = _RecordingCore()
        self.runner(core, env)  # this execution's results: the step runs as always, logged
        try:
            self.instructions, self.layouts = self._plan(core.log, _bases(env), lambda key: _placement(env, key))
        except _Refused as why:
            self.refused = str(why)
            return
        self.roots = [t for t in core.sbuf.tiles + core.psum.tiles]
        if sum(t.data.nbytes for t in self.roots) > PLAN_BYTES:
            self.instructions, self.layouts, self.roots = None, [], []
            self.refused = "its tiles exceed PLAN_BYTES"
            return
        self.direct, self.binds = _direct(self.instructions)
        self.kept_data = {tile: tile.data for tile, *_ in self.binds}

    @staticmethod
    def _plan(log: list, bases: list, placement: Callable[[tuple], tuple]) -> tuple[list, list]:
        instructions = []
        used: dict[tuple, int] = {}  # _bases key -> its index in the layouts
        layouts = []
        for method, args, kwargs, result in log:
            if result is not None:
                raise _Refused(f"{method.__name__} answered {result!r}")
            if any(isinstance(v, (np.ndarray, list, dict)) or isinstance(v, tuple) and any(
                    isinstance(x, np.ndarray) for x in v) for v in kwargs.values()):
                raise _Refused(f"{method.__name__}: an array keyword operand")
            operands = []
            for position, arg in enumerate(args):
                if isinstance(arg, (list, tuple, dict)) and any(
                        isinstance(x, (np.ndarray, list, tuple, dict)) for x in
                        (arg.values() if isinstance(arg, dict) else arg)):
                    raise _Refused(f"{method.__name__}: an array in a container operand")
                if not isinstance(arg, np.ndarray):
                    continue
                if not arg.size:
                    raise _Refused(f"{method.__name__}: an empty operand")
                lo, hi = byte_bounds(arg)
                within = [(key, blo, base) for key, blo, bhi, base in bases
                          if blo <= lo and hi <= bhi and arg.dtype == base.dtype]
                if not within:
                    raise _Refused(f"{method.__name__}: an operand in no base array")
                if len({placement(key) for key, _, _ in within}) > 1:  # inputs that alias in this execution
                    raise _Refused(f"{method.__name__}: an operand in base arrays placed apart")
                key, blo, base = within[0]
                if key not in used:
                    used[key] = len(layouts)
                    layouts.append((key, base.shape, base.strides, base.dtype))
                operands.append((position, used[key], _address(arg) - blo, arg.shape, arg.strides))
            if operands:  # the recording's HBM arrays are not kept: each execution puts its own in
                args = tuple(None if any(p == i for p, *_ in operands) else a for i, a in enumerate(args))
            instructions.append((method, args, kwargs, operands))
        return instructions, layouts


# -- direct HBM operands: a plan's whole-tile loads and stores skipped ----------------------------------------
#
# On the wide core a load copies a whole HBM array into a tile that elementwise instructions then read, and a
# store copies a tile an elementwise instruction wrote into an HBM array: host copies of every byte a fused
# group reads or writes (a decoder block's epilogues and norms: ~0.35 ms of a forward's ~10 ms). Where the
# instruction order allows, a plan binds such a tile to its HBM view for an execution instead (``_direct``): the
# load or store is not issued, the instructions read the input where it lies or write the result where it
# goes. The values each instruction computes are the same (the same numpy calls on arrays of the same shape,
# dtype and C-contiguous layout); only host copies go. The recorded figures are unchanged (the launch reports
# the compile-time schedule). An execution whose bound views overlap one another runs the plan as recorded.

# engine instructions that compute element by element, ``out`` (the first argument) from the others: a tile
# may be read by them where it lies in HBM, and one written by them may lie there
_ELEMENTWISE = frozenset({"tensor_tensor", "tensor_scalar", "scalar_tensor_tensor", "activation",
                          "partition_broadcast"})
_HBM_READS = frozenset({"load", "load_flat"})  # DMA instructions whose HBM operand is only read


# the wide core's whole-tile DMA instructions: method -> (position of the tile, of the HBM operand, of the
# flat range's start, or None)
_WHOLE_LOADS = {_WideDMA.load: (0, 1, None), _WideDMA.load_flat: (0, 1, 2)}
_WHOLE_STORES = {_WideDMA.store: (1, 0, None), _WideDMA.store_flat: (3, 0, 1)}


def _whole(method, args, operands, store: bool) -> tuple | None:
    """The HBM operand of a whole-tile load (or ``store``) as the tile's shape: (layout index, offset, shape,
    strides), where the tile is a root and the HBM view a C-contiguous array of its element count (the load or
    store copies it in row-major order); None for any other instruction."""
    places = (_WHOLE_STORES if store else _WHOLE_LOADS).get(getattr(method, "__func__", None))
    if places is None or len(operands) != 1:
        return None
    tile_at, hbm_at, start_at = places
    tile = args[tile_at]
    position, index, offset, shape, strides = operands[0]
    if not isinstance(tile, Tile) or tile.root is not tile or position != hbm_at:
        return None
    size = math.prod(shape)
    if start_at is not None and (args[start_at] != 0 or args[start_at + 1] != size):
        return None
    data = tile.data
    if size != data.size or tuple(strides) != _c_strides(shape, data.itemsize):
        return None
    return index, offset, data.shape, _c_strides(data.shape, data.itemsize)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _uses(method, args, kwargs) -> tuple[list[Tile], list[Tile], bool]:
    """(tiles written, tiles read, plain?) by one instruction. Plain: a DMA load or store of one tile, or an
    elementwise instruction (``_ELEMENTWISE``) naming tiles only as its ``out`` and positional inputs. Any other
    counts as writing and reading every tile it names, anyhow."""
    name = getattr(method, "__name__", "")
    tiles = [a for a in args if isinstance(a, Tile)]
    nested = [x for v in (*args, *kwargs.values()) if isinstance(v, (tuple, list)) for x in v if isinstance(x, Tile)]
    keyword = [v for v in kwargs.values() if isinstance(v, Tile)]
    if not nested and not keyword and tiles:
        if name in _HBM_READS and len(tiles) == 1 and args[0] is tiles[0]:
            return tiles, [], True
        if name in ("store", "store_flat") and len(tiles) == 1:
            return [], tiles, True
        if name in _ELEMENTWISE and args[0] is tiles[0]:
            return tiles[:1], tiles[1:], True
    if name == "activation" and not nested and tiles and args[0] is tiles[0] \
            and set(k for k, v in kwargs.items() if isinstance(v, Tile)) <= {"accumulate", "scale", "bias"}:
        # its input read element by element; ``accumulate`` takes the row sums of ``out`` (written), the
        # per-partition ``scale`` and ``bias`` are read
        accumulate = kwargs.get("accumulate")
        written = tiles[:1] + ([accumulate] if isinstance(accumulate, Tile) else [])
        return written, tiles[1:] + [v for k, v in kwargs.items() if k in ("scale", "bias") and isinstance(v, Tile)], True
    everything = tiles + nested + keyword
    return everything, everything, False


def _direct(instructions: list) -> tuple[list | None, list[tuple]]:
    """The plan without the loads and stores a tile bound to its HBM view stands for, and the bindings
    ``[(tile, layout index, offset, shape, strides)]`` (``([], [])`` where none qualifies). A loaded tile is
    bound where the load is its first use, elementwise instructions only read it after, and nothing writes HBM
    (a store, any instruction with an HBM operand but a load) before its last read. A stored tile is bound
    where one elementwise instruction writes it first and nothing else does, the store follows with nothing
    touching HBM in between, elementwise instructions only read it after, and nothing writes HBM before its
    last read. No tile that has views in the plan (regions of it) is bound."""
    writes: dict[int, list[int]] = {}  # id(root) -> instruction indices writing it
    reads: dict[int, list[int]] = {}
    loose: set[int] = set()  # roots named other than elementwise-ly, or through a view
    hbm_writes: list[int] = []
    hbm_any: list[int] = []
    for i, (method, args, kwargs, operands) in enumerate(instructions):
        written, read, elementwise = _uses(method, args, kwargs)
        for tile in written:
            writes.setdefault(id(tile.root), []).append(i)
        for tile in read:
            reads.setdefault(id(tile.root), []).append(i)
        for tile in (*written, *read):
            if tile.root is not tile or not elementwise:
                loose.add(id(tile.root))
        if operands:
            hbm_any.append(i)
            if getattr(method, "__name__", "") not in _HBM_READS:
                hbm_writes.append(i)

    def clear(among: list[int], lo: int, hi: int, skip: set[int]) -> bool:  # none of ``among`` in (lo, hi]
        return not any(lo < i <= hi and i not in skip for i in among)

    skipped: set[int] = set()
    binds: list[tuple] = []
    for i, (method, args, kwargs, operands) in enumerate(instructions):
        load = _whole(method, args, operands, store=False)
        if load is not None:
            key = id(args[0])
            read = reads.get(key, [])
            if key not in loose and writes.get(key) == [i] and read and min(read) > i \
                    and clear(hbm_writes, i, max(read), set()):
                skipped.add(i)
                binds.append((args[0], *load))
            continue
        store = _whole(method, args, operands, store=True)
        if store is None:
            continue
        key = id(args[1])
        written, read = writes.get(key, []), reads.get(key, [])
        if key in loose or len(written) != 1 or not written[0] < min(read):
            continue
        method_, args_, kwargs_, operands_ = instructions[written[0]]
        if operands_ or getattr(method_, "__name__", "") not in _ELEMENTWISE or not args_ or args_[0] is not args[1] \
                or any(isinstance(v, Tile) for v in kwargs_.values()):
            continue  # its writer: elementwise, into the whole tile, no row sums of it (their order is the tile's)
        writer = written[0]
        if clear(hbm_any, writer, i - 1, set()) and clear(hbm_writes, i, max(read), {i}):
            skipped.add(i)
            binds.append((args[1], *store))
    if not binds:
        return None, []
    return [ins for i, ins in enumerate(instructions) if i not in skipped], binds


def _bind(binds: list[tuple], bases: list[np.ndarray]) -> list[tuple[Tile, np.ndarray]]:
    """This execution's HBM view of each bound tile; none (the plan runs as recorded) where two overlap."""
    if not binds:
        return []
    bound, spans = [], []
    for tile, index, offset, shape, strides in binds:
        base = bases[index]
        view = np.ndarray(shape, base.dtype, buffer=base, offset=offset, strides=strides)
        lo, hi = byte_bounds(view)
        if view.dtype != tile.data.dtype or any(lo < h and l < hi for l, h in spans):
            return []
        spans.append((lo, hi))
        bound.append((tile, view))
    return bound


def _wide_dot_general(step: dict, program: Program, runner) -> WideRunner:
    """stablehlo.dot_general as ``kernels.matmul.matmul_into`` computes it: per [128, 512] output block,
    fp32 products of 128-deep K slices summed in K order in fp32 (PSUM), rounded once to the output dtype
    on evacuation. TensorE's matmul instruction is one BLAS call per K slice of a block, on contiguous
    fp32 tiles; here too, block by block (below)."""
    from device_impl.kernels.matmul import K_TILE, M_TILE, N_TILE

    from device_impl.compiler.steps import dot_dims

    lhs, rhs, result, lb, rb, lc, rc, lf, rf, batch, m, k, n = dot_dims(step, program)
    k_ranges = [(k0, min(k, k0 + K_TILE)) for k0 in range(0, k, K_TILE)]
    blocks = [(m0, min(m, m0 + M_TILE), n0, min(n, n0 + N_TILE)) for m0 in range(0, m, M_TILE)
              for n0 in range(0, n, N_TILE)]
    lhs_order, rhs_order = tuple(lb + lf + lc), tuple(rb + rc + rf)
    single = len(blocks) == 1 and len(k_ranges) == 1  # one [M, N] block, one K slice (a small Llama's products)

    # Every block is computed alone, on contiguous operands as the SBUF tiles are: BLAS's summation order is
    # its kernels' (numpy calls gemv for a one-row or one-column block, and OpenBLAS's AVX-512 gemm gave
    # other last bits for a batched [130, 300] x [300, 514] product than per [128, 512] block on an AMD EPYC
    # host), so only the same calls on the same shapes give the tile program's bits.

    # A matmul epilogue (build.attach_epilogues): the tile program rounds each evacuated block to the
    # product's dtype and runs the fused group on it; the group's ops are per element (flat groups) or per
    # whole row (row groups take rows of N <= EVACUATION_CHUNK columns, one block wide), so running it once
    # on the whole rounded product, on the wide core, computes the same values.
    epilogue = step.get("epilogue")
    tail_group = GroupRunner(epilogue) if epilogue is not None else None
    # The epilogue's instructions are the same at every execution (a fused group's, on tiles of fixed shapes):
    # where the group allows (``plannable``) they are recorded once and issued as recorded (``StepPlan``, as a
    # fused step's), the product computed into one tile kept for that plan, whose instructions name it. Working
    # the sequence out again (access patterns, instruction selection, tile bookkeeping) was ~100 us of Python
    # per epilogue in a decoder block's forward. One execution at a time uses the kept tile (``tail_lock``); a
    # concurrent one takes the way it took before, a fresh tile and the group run anew.
    tail_plan = tail_tile = None
    tail_lock = threading.Lock()
    rows = batch * m
    if epilogue is not None and plannable(epilogue) and rows * n * program.dtype(result).itemsize <= PLAN_BYTES:
        tail_tile = Tile(np.empty((rows, n), program.dtype(result)), "sbuf", "product")
        tail_plan = StepPlan(lambda core, env: tail_group.epilogue(env, rows, n, epilogue["product_slot"])(
            core, tail_tile, 0, rows, 0, n))
    # A tiled product shared among host threads by whole rows (its batch or M blocks: ``_tiled``) runs the epilogue
    # of each share's rows in that share, right after its blocks, as a plan of its own for those rows (the
    # epilogue of rows [r0, r1) of the product tile, as the tile program runs it per evacuated block): the
    # epilogues' float64 exps (silu), norms and rotations then run beside one another instead of after the
    # product on the caller, each row computed by the same numpy calls (a flat group's ops are per element, a row
    # group's per whole row). Keyed by the rows; the whole product's is ``tail_plan``.
    share_plans: dict[tuple[int, int], StepPlan] = {(0, rows): tail_plan} if tail_plan is not None else {}
    share_lock = threading.Lock()

    def share_plan(r0: int, r1: int) -> StepPlan:
        plan = share_plans.get((r0, r1))
        if plan is None:
            with share_lock:
                plan = share_plans.get((r0, r1))
                if plan is None:
                    block = tail_tile[r0:r1, :]
                    plan = share_plans[(r0, r1)] = StepPlan(
                        lambda core, env: tail_group.epilogue(env, rows, n, epilogue["product_slot"])(
                            core, block, r0, r1, 0, n))
        return plan

    # Where every tile has one shape (each of K, M, N is one tile or a whole number of them: a decoder
    # block's projections) and the operands are large enough (TILED_ELEMENTS), they are packed once into
    # their TensorE tiles and all blocks of one K slice are multiplied by one np.matmul (``_tiled``); other
    # shapes go block by block.
    kt, mt, nt = min(k, K_TILE), min(m, M_TILE), min(n, N_TILE)
    tiled = (k > 0 and m > 0 and n > 0 and k % kt == 0 and m % mt == 0 and n % nt == 0
             and batch * k * (m + n) >= TILED_ELEMENTS)
    if tiled:
        stationary = TileOperand(program, lhs, lhs_order, (batch, m, k), kt, mt, stationary=True)
        moving = TileOperand(program, rhs, rhs_order, (batch, k, n), kt, nt, stationary=False)

    def run(wide, env) -> None:
        if epilogue is None:
            product(env, env.access(result).reshape(batch, m, n))
        elif tail_plan is not None and tail_lock.acquire(blocking=False):
            try:  # the product into the plan's kept tile, then the recorded epilogue (in the shares, where they
                # cover whole rows)
                target = tail_tile.write_target().reshape(batch, m, n)
                tail = (lambda r0, r1: share_plan(r0, r1).run(wide, env)) if tiled else None
                if product(env, target, tail) and not (tiled and _row_split()):
                    tail_plan.run(wide, env)
            finally:
                tail_lock.release()
        else:  # the product computed straight into a fresh tile the epilogue reads
            core = wide()
            tile = core.sbuf_tile((batch * m, n), program.dtype(result))
            if product(env, tile.write_target().reshape(batch, m, n)):
                tail_group.epilogue(env, batch * m, n, epilogue["product_slot"])(core, tile, 0, batch * m, 0, n)

    def product(env, out: np.ndarray, tail: Callable[[int, int], None] | None = None) -> bool:
        """The product into ``out``; False where it is empty (nothing to compute, no epilogue to run). ``tail``
        (tiled only): ``tail(r0, r1)`` runs in each share after its blocks, where the shares cover whole rows
        (``_row_split``)."""
        if out.size == 0:
            return False
        if tiled:
            _tiled(env, out, tail if _row_split() else None)
        else:
            _product(env, out)
        return True

    choice = workers.SplitChoice()  # whether this product's split pays on this host (learned at run time)
    nk, nm, nl = (k // kt, m // mt, n // nt) if tiled else (0, 0, 0)
    extents = (batch, nm, nl)
    axis = max(range(3), key=extents.__getitem__)  # the block axis the shares split (the one with most blocks)

    def _row_split() -> bool:
        """Whether a share of ``axis`` is one run of whole rows of the [batch * m, n] product."""
        return axis == 0 or (axis == 1 and batch == 1)

    def _tiled(env, out: np.ndarray, tail: Callable[[int, int], None] | None = None) -> None:
        threads = min(workers.width(), max(1, 2 * batch * m * k * n // SHARE_FLOPS))
        # an activation (packed anew at every execution) split by batch or M blocks is packed by each share for
        # its own blocks (``TileOperand.share_tiles``), beside the others, not whole on the caller first
        cut = _BLOCK_AXES[0][axis]
        by_share = threads > 1 and cut is not None and stationary.packed_by_shares(env)
        # [batch, nk, nm, 1, mt, kt]: the tiles' .T
        a = None if by_share else stationary.tiles(env)[:, :, :, None].swapaxes(-1, -2)
        b = moving.tiles(env)[:, :, None]  # [batch, nk, 1, nl, kt, nt]
        # the accumulator: [batch, nm, nl, mt, nt], each block contiguous as its PSUM bank is; the output
        # itself where it is fp32 and one block wide (its blocks are then its row ranges)
        direct = nl == 1 and out.dtype == FP32 and out.flags.c_contiguous
        acc = out.reshape(batch, nm, 1, mt, nt) if direct else np.empty((batch, nm, nl, mt, nt), FP32)
        blocked = None if direct else out.reshape(batch, nm, mt, nl, nt)
        # the blocks are independent: shares of the block axis with the most blocks go to host threads
        # (workers.split), each block's calls the same as on one thread; then the epilogue of the share's rows
        # (``tail``: a recorded plan of a few numpy calls per instruction; run per block at the instruction
        # level, its many small calls and the caller's fought for the GIL)
        rows_per = m if axis == 0 else mt

        def share(start: int, stop: int) -> None:
            a_, b_, acc_, blocked_ = (_cut(x, axes[axis], start, stop)
                                      for x, axes in zip((a, b, acc, blocked), _BLOCK_AXES))
            if a_ is None:
                a_ = stationary.share_tiles(env, cut, start, stop)[:, :, :, None].swapaxes(-1, -2)
            np.matmul(a_[:, 0], b_[:, 0], out=acc_)
            if nk > 1:
                part = np.empty_like(acc_)
                for j in range(1, nk):  # PSUM accumulates the K slices in order
                    np.matmul(a_[:, j], b_[:, j], out=part)
                    np.add(acc_, part, out=acc_)
            if blocked_ is not None:  # evacuation: rounded once to the output dtype
                blocked_[...] = acc_.transpose(0, 1, 3, 2, 4)
            if tail is not None:
                tail(start * rows_per, stop * rows_per)

        choice.run(extents[axis], share, threads)

    def _product(env, out: np.ndarray) -> None:
        if k == 0:
            out[...] = 0
            return
        # stationary tiles are [K, M] blocks of A^T, moving tiles [K, N] blocks of B, both read as fp32
        a_t = fp32_contiguous(env.access(lhs).transpose(lb + lc + lf).reshape(batch, k, m))
        b = fp32_contiguous(env.access(rhs).transpose(rhs_order).reshape(batch, k, n))
        if single:  # the whole operands are the one block's tiles (the loop below would slice and copy nothing)
            out[...] = np.matmul(a_t.transpose(0, 2, 1), b)
            return
        # Every batch at once: np.matmul of stacked operands runs its 2-D loop (the BLAS call a 2-D product
        # makes: gemm, or gemv for a one-row or one-column block) once per batch on that batch's slices, and
        # each slice of a contiguous [batch, K slice, block] copy is laid out as the block's own tile is.
        for m0, m1, n0, n1 in blocks:
            acc = None
            for k0, k1 in k_ranges:
                stationary_ = np.ascontiguousarray(a_t[:, k0:k1, m0:m1])
                product = np.matmul(stationary_.transpose(0, 2, 1), np.ascontiguousarray(b[:, k0:k1, n0:n1]))
                if acc is None:
                    acc = product
                else:
                    acc += product
            out[:, m0:m1, n0:n1] = acc

    run.operands = (stationary, moving) if tiled else ()  # type: ignore[attr-defined]  (tests read them)
    run.epilogue_plan = tail_plan  # type: ignore[attr-defined]  (tests read it)
    run.share_plans = share_plans  # type: ignore[attr-defined]  (tests read them)
    return run


# where the block axes (batch, M blocks, N blocks) of ``_tiled``'s arrays lie: the stationary tiles (no N
# axis: broadcast), the moving tiles (no M axis), the accumulator, the output seen as blocks
_BLOCK_AXES = ((0, 2, None), (0, None, 3), (0, 1, 2), (0, 1, 3))


def _cut(array: np.ndarray | None, axis: int | None, start: int, stop: int) -> np.ndarray | None:
    """``array``'s blocks [start, stop) along ``axis`` (all of it where the array has no such axis)."""
    if array is None or axis is None or (start == 0 and stop == array.shape[axis]):
        return array
    return array[(slice(None),) * axis + (slice(start, stop),)]


# -- product operands packed into their TensorE tiles ---------------------------------------------------

# Operand elements (both operands, every batch) from which a product runs tiled: below, the packing's and the
# weight comparison's fixed cost (a few numpy calls each) outweighs what it saves (a tiny Llama's 64 x 64
# projections ran ~20% slower tiled); the decoder block's smallest projection has 256 x (256 + 128).
TILED_ELEMENTS = 1 << 16
# flops from which a share of a product's blocks may be worth a host thread (workers.split): handing a share over
# and waking its thread costs some tens of microseconds, a share of 4 MFLOP takes ~40 us at one core's rate;
# whether a split above it pays is then measured per step on the host (workers.SplitChoice)
SHARE_FLOPS = 1 << 22


class TileOperand:
    """One operand of a tiled product as TensorE reads it: [batch, K tiles, X tiles, kt, xt] fp32, tile
    (j, i) of batch b the block K slice j x X block i of A^T (``stationary``, X = M) or of B (X = N), each
    C-contiguous as its SBUF tile is.

    An operand whose tiles are its HBM bytes as they lie (a contiguous fp32 B of one N block) is read in
    place. Otherwise it is packed: once per execution (products of one activation share it: q, k and v);
    and where the operand lies in a program input or constant (a weight) the packing is kept for later
    executions while that buffer's bytes stay the same, compared bit for bit with a copy taken when it was
    packed. A weight updated in place, by ``load_state_dict``, an optimizer step or a write through ``.data``
    (which no version counter sees), is packed again and kept anew; an input whose bytes differ at
    ``MISSES`` executions in a row (an activation, or a weight trained at every step) is not kept from then
    on: keeping it would cost a compare and a copy per execution and save nothing."""

    MISSES = 2

    def __init__(self, program: Program, vid: int, order: tuple[int, ...], shape: tuple[int, int, int],
                 kt: int, xt: int, stationary: bool) -> None:
        self.vid, self.order, self.shape, self.kt, self.xt, self.stationary = vid, order, shape, kt, xt, stationary
        # an execution's packings are shared by the products that read one value the same way (q, k and v of
        # one activation); the same value read as another product's other operand, or tiled otherwise, is not
        self.key = ("tiles", vid, order, shape, kt, xt, stationary)
        base = program.base(vid)
        buffer = program.buffers.get(base)
        self.base = base
        # a weight: read from a graph input or a constant, the same bytes at every execution until updated
        self.keepable = base in program.constants or (buffer is not None and buffer["kind"] in ("input", "constant", "layout"))
        self.kept: tuple[np.ndarray, np.ndarray] | None = None  # (the base's bytes when packed, the tiles)
        self.misses = 0  # executions in a row that found the kept bytes changed
        self.packs = 0  # packings (tests count them)
        self.share_packs = 0  # packings of a share's blocks alone (``share_tiles``; tests count them)
        self._count = threading.Lock()

    def view(self, env) -> np.ndarray:
        """The tiles as a view of the operand's HBM array (copied only where a layout op must)."""
        batch, rows, cols = self.shape
        matrix = env.access(self.vid).transpose(self.order).reshape(batch, rows, cols)
        kt, xt = self.kt, self.xt
        if self.stationary:  # A [batch, M, K] -> A^T tiles [batch, K/kt, M/mt, kt, mt]
            return matrix.reshape(batch, rows // xt, xt, cols // kt, kt).transpose(0, 3, 1, 4, 2)
        return matrix.reshape(batch, rows // kt, kt, cols // xt, xt).transpose(0, 1, 3, 2, 4)

    def packed_by_shares(self, env) -> bool:
        """Whether shares of a product's blocks pack their own tiles (``share_tiles``): an operand packed anew at
        every execution (never kept), not packed whole already in this one (by an earlier product)."""
        return not self.keepable and self.kept is None and self.key not in env.shared

    def share_tiles(self, env, axis: int, start: int, stop: int) -> np.ndarray:
        """The tiles of blocks [start, stop) along ``axis`` of [batch, K tiles, X tiles, kt, xt] (0: batches, 2: X
        blocks) alone, packed by the share that multiplies them (``packed_by_shares``); shared, as ``tiles``, by the
        products of this execution that read the operand alike and split it the same way (q, k and v). The same
        values, each tile C-contiguous as ``tiles`` lays it out, so the same BLAS calls."""
        view = self.view(env)
        if start == 0 and stop == view.shape[axis]:
            return self.tiles(env)
        key = (self.key, axis, start, stop)
        tiles = env.shared.get(key)
        if tiles is None:
            view = _cut(view, axis, start, stop)
            if view.dtype == FP32 and view.strides[-1] == 4 and view.strides[-2] == 4 * view.shape[-1]:
                tiles = view  # each tile contiguous where it lies: read in place
            else:
                tiles = fp32_contiguous(view)
                with self._count:
                    self.share_packs += 1
            env.shared[key] = tiles
        return tiles

    def tiles(self, env) -> np.ndarray:
        kept = self.kept
        if kept is not None:
            source = env.arrays.get(self.base)
            saved, tiles = kept
            if (source is not None and source.shape == saved.shape and source.dtype == saved.dtype
                    and source.flags.c_contiguous and same_bytes(source, saved)):
                self.misses = 0
                return tiles
            self.kept = None
            self.misses += 1
            if self.misses >= self.MISSES:
                self.keepable = False
        key = self.key
        tiles = env.shared.get(key)
        if tiles is not None:
            return tiles
        view = self.view(env)
        if view.dtype == FP32 and view.strides[-1] == 4 and view.strides[-2] == 4 * view.shape[-1]:
            tiles = view  # each tile contiguous where it lies: read in place (never kept: nothing copied)
        else:
            tiles = fp32_contiguous(view, copy=True)
            self.packs += 1
            source = env.arrays.get(self.base)
            if self.keepable and source is not None and source.flags.c_contiguous:
                self.kept = (source.copy(), tiles)
        env.shared[key] = tiles
        return tiles


def _wide_attention(step: dict, program: Program, runner) -> WideRunner:
    """SDPA's forward (no dropout in a compiled program) as ``kernels.attention.forward_wide`` computes it:
    the flash tile program's instructions per element, every (batch, head) at once."""
    from device_impl.compiler.steps import attention_call, lse_read
    from device_impl.kernels.attention import forward_wide

    read = lse_read(step, program)
    choice = workers.SplitChoice()  # whether splitting its batches pays on this host (learned at run time)

    def run(wide, env) -> None:
        call = attention_call(step, program, env, read)
        if call is None:
            return
        pb, o4, lse3 = call
        # batches are independent: shares of them go to host threads (workers.split)
        flops = 2 * pb.B * pb.Hq * pb.L * pb.S * (pb.E + pb.Ev)
        threads = min(workers.width(), max(1, flops // SHARE_FLOPS))
        if threads <= 1 or pb.B <= 1:
            return forward_wide(pb, o4, lse3)
        choice.run(pb.B, lambda b0, b1: forward_wide(pb.batches(b0, b1), o4[b0:b1],
                                                     None if lse3 is None else lse3[b0:b1]), threads)

    return run


WIDE: dict[str, Callable[[dict, Program, Any], WideRunner]] = {
    "fused": _wide_fused,
    "dot_general": _wide_dot_general,
    "attention": _wide_attention,
}


def fast_runners(program: Program, runners: list) -> list[tuple[bool, Callable[[Any, Any], None]]]:
    """Per step: (wide?, runner). Wide runners take ``wide_core``; the others the launch's core."""
    plan = []
    for step, runner in zip(program.steps, runners):
        kind = STEP_KINDS.get(step["kind"])
        if kind == "wide":
            plan.append((True, WIDE[step["kind"]](step, program, runner)))
        elif kind == "plan":
            plan.append((True, StepPlan(runner).run))
        else:
            plan.append((False, runner))
    return plan


__all__ = ["STEP_KINDS", "is_static", "measured", "usable", "apply", "fast_runners", "WideCore", "StepPlan"]
