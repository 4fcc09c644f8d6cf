"""The runtime side of a NEFF: link a ``Program`` once, then execute it with neuron tensors.

Linking builds every step's runner (``steps.make_runner``). An execution
checks the arguments, allocates the outputs on the device (the caching
allocator) and one scratch arena: an SBUF tile of the launch when the
program's plan keeps it on chip (``memory.arena_space``; DMA to and from it
moves no HBM bytes, ``Timeline.onchip``), else HBM from the allocator; loads the program's constants
to HBM once per device, and runs all steps inside a single launch on the
simulated core. Dependencies between steps go through HBM, which tiles do not
track, so ``run_steps`` states them to the timeline: a step's stores and
copies start no earlier than the steps it waits for (``Timeline.floor``: they
may overwrite bytes an earlier step reads); a load from one of its operands
waits for the recorded DMA writes of the bytes it reads (``hbm_floors``,
``hbm_targets``), and a load of the program's inputs and constants for
nothing; compute engines follow their tiles. So independent steps overlap on
the engines, weights stream in under earlier steps, and a step starts on its
producer's first stored block. The launch is named ``neff:<program>``, so
engine statistics and traces show compiled programs apart from eager kernels.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import torch
from numpy.lib.array_utils import byte_bounds

from device_impl.compiler import layout, opaque, opaque_indexing, replay, schedule, steps as step_runners
from device_impl.compiler.program import Program, apply_view
from device_impl.engine import launch
from device_impl.engine.core import NeuronCore
from device_impl.engine.dtypes import NUMPY_TO_TORCH, TORCH_TO_NUMPY
from device_impl.engine.memory import EngineError, Tile
from device_impl.kernels.common import P, hbm
from device_impl.kernels.spatial.tiles import Scratch
from device_impl.runtime.config import static_replay

STATIC_REPLAY = static_replay()  # NEURON_STATIC_REPLAY=0 forces the instruction-level path


def torch_dtype(name_or_dtype) -> torch.dtype:
    from device_impl.compiler.ir import numpy_dtype

    return NUMPY_TO_TORCH[numpy_dtype(name_or_dtype) if isinstance(name_or_dtype, str) else name_or_dtype]


class Env:
    """The HBM arrays of one execution and the views steps read through them."""

    __slots__ = ("program", "arrays", "views", "outputs", "device", "_scratch", "onchip", "shared", "recipes")

    def __init__(self, program: Program, arrays: dict[int, np.ndarray], outputs: list[np.ndarray], device,
                 onchip: tuple[tuple[int, int], ...] = (), recipes: dict | None = None):
        self.program = program
        self.arrays = arrays
        self.views: dict[int, np.ndarray] = {}
        self.outputs = outputs
        self.device = device
        self._scratch = None
        self.onchip = onchip  # byte ranges of the arena when it is an SBUF tile (Timeline.onchip)
        self.shared: dict[tuple, tuple[dict, list]] = {}  # operand tiles kept between steps (steps._dot_general)
        # vid -> how its view lies in its base buffer, kept by the Executable across executions (``access``)
        self.recipes = recipes

    def access(self, vid: int) -> np.ndarray:
        array = self.arrays.get(vid)
        if array is not None:
            return array
        array = self.views.get(vid)
        if array is None:
            recipes = self.recipes
            if recipes is not None:
                recipe = recipes.get(vid)
                if recipe is not None:
                    array = _from_recipe(self.arrays[recipe[0]], recipe)
            if array is None:
                view = self.program.views[vid]
                array = apply_view(self.access(view["src"]), view, self.program.shape(vid))
                if recipes is not None and vid not in recipes:
                    recipes[vid] = _recipe(self.program.base(vid), self.arrays.get(self.program.base(vid)), array)
            self.views[vid] = array
        return array

    def output(self, index: int) -> np.ndarray:
        return self.outputs[index]

    @property
    def scratch(self) -> Scratch:
        """Extra HBM for runners that stage data (padding, layout changes), freed after the launch."""
        if self._scratch is None:
            self._scratch = Scratch(self.device)
        return self._scratch

    def scratch_array(self, shape, dtype) -> np.ndarray:
        return self.scratch.new(shape, np.dtype(dtype))


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _recipe(base_vid: int, base: np.ndarray | None, view: np.ndarray) -> tuple | None:
    """Where a chain of layout ops (``apply_view``) put ``view`` in its base buffer: (base vid, the base's
    shape, strides and dtype, the view's byte offset, shape, strides, writeable), or None when the chain
    copied (a reshape numpy cannot express as strides) or the base is not one C-contiguous buffer. A later
    execution whose base array has the same layout rebuilds the view from it in one step (``_from_recipe``):
    the chain's per-op numpy calls are a large part of a small program's wall time."""
    if base is None or not base.size or not base.flags.c_contiguous or not np.may_share_memory(base, view):
        return None
    return (base_vid, base.shape, base.strides, base.dtype, _address(view) - _address(base), view.shape,
            view.strides, view.flags.writeable)


def _from_recipe(base: np.ndarray, recipe: tuple) -> np.ndarray | None:
    """The view ``recipe`` describes, in ``base`` (None when ``base`` is not laid out as the recipe's was)."""
    _, shape, strides, dtype, offset, view_shape, view_strides, writeable = recipe
    if base.shape != shape or base.strides != strides or base.dtype != dtype or not base.flags.c_contiguous:
        return None
    view = np.ndarray(view_shape, dtype, buffer=base, offset=offset, strides=view_strides)
    if not writeable:
        view.flags.writeable = False
    return view


def _upload(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A NEFF constant copied to HBM (once per device, as the runtime loads a NEFF)."""
    dtype = torch_dtype(array.dtype)
    host_array = np.ascontiguousarray(array)
    if dtype == torch.bfloat16:  # numpy has no bfloat16: move the bits
        host = torch.from_numpy(host_array.view(np.int16)).view(torch.bfloat16)
    else:
        host = torch.from_numpy(host_array)
    return host.to(device)


def _operand_producers(program: Program) -> list[list[tuple[int, int]]]:
    """Per step, (base value, index of the earlier step that writes it) of each buffer it reads: a load
    from one waits for that step alone (``Timeline.hbm_floors``), not for every step the step waits on."""
    producer: dict[int, int] = {}
    result = []
    for j, step in enumerate(program.steps):
        bases = dict.fromkeys(program.base(v) for v in schedule.step_reads(step))
        result.append([(b, producer[b]) for b in bases if b in producer and b in program.buffers
                       and program.buffers[b]["kind"] != "input"])
        for vid in schedule.step_writes(step):
            producer[vid] = j
    return result


class Executable:
    """A linked program: call it with the graph's input tensors, get its output tensors."""

    def __init__(self, program: Program, device_index: int):
        self.program = program
        self.name = program.name
        self.device_index = device_index
        self.runners = [step_runners.make_runner(step, program) for step in program.steps]
        self.waits = [step.get("waits", []) for step in program.steps]
        self.operands = _operand_producers(program)
        self.input_specs = [(torch.Size(program.shape(v)), torch_dtype(program.types[v][1])) for v in program.inputs]
        self.output_specs = [(program.shape(v), torch_dtype(program.types[v][1])) for v in program.outputs]
        self.scratch_bytes = int(program.memory.get("scratch_bytes", 0))
        self.arena_onchip = bool(self.scratch_bytes) and program.memory.get("arena") == "sbuf"
        # (vid, offset, shape, dtype, permutation or None): a buffer with a permutation (build.producer_layouts)
        # holds its value's elements in that order, its array the view that puts them back in the value's
        self.scratch_views = [(vid, b["offset"], tuple(program.shape(vid)), program.dtype(vid), b.get("perm"))
                              for vid, b in program.buffers.items() if b["kind"] == "scratch"]
        self.output_buffers = [(vid, b["index"], tuple(program.shape(vid))) for vid, b in program.buffers.items()
                               if b["kind"] == "output"]
        self.input_buffers = [(vid, b["index"]) for vid, b in program.buffers.items() if b["kind"] == "input"]
        self._constants: dict[int, dict[int, torch.Tensor]] = {}
        self._fast: list | None = None  # replay.fast_runners, built at the first fast execution
        self._view_recipes: dict[int, tuple | None] = {}  # Env.access: views rebuilt from their base in one step
        self.layouts = layout.Layouts(program)  # weights kept in TensorE's layout, made before the launch
        # the fast path's on-chip scratch arena kept across executions with its buffers' views (``kept_scratch``)
        self._kept_scratch: dict[int, np.ndarray] | None = None
        self._kept_arena: np.ndarray | None = None
        self._scratch_lock = threading.Lock()

    def _device(self, args: list) -> torch.device:
        for a in args:
            if isinstance(a, torch.Tensor) and a.device.type == "neuron":
                return a.device
        return torch.device("neuron", self.device_index)

    def _check(self, args: list, device: torch.device) -> list[torch.Tensor]:
        if len(args) != len(self.input_specs):
            raise RuntimeError(f"compiled graph {self.name} takes {len(self.input_specs)} inputs, got {len(args)}")
        checked = []
        for i, (a, (shape, dtype)) in enumerate(zip(args, self.input_specs)):
            if not isinstance(a, torch.Tensor):
                a = torch.tensor(a, dtype=dtype)
            if a.device != device:
                if a.device.type == "cpu" and a.dim() == 0:
                    a = a.to(device)  # a host scalar, as eager kernels accept them
                else:
                    raise RuntimeError(f"compiled graph {self.name}: input {i} is on {a.device}, the graph runs on "
                                       f"{device}; move every input to the same neuron device")
            if a.shape != shape or a.dtype != dtype:
                raise RuntimeError(f"compiled graph {self.name}: input {i} is {a.dtype} {list(a.shape)}, compiled "
                                   f"for {dtype} {list(shape)} (static shapes: a new shape needs a recompile)")
            checked.append(a)
        return checked

    def constants(self, device: torch.device) -> dict[int, torch.Tensor]:
        index = device.index or 0
        loaded = self._constants.get(index)
        if loaded is None:
            loaded = {vid: _upload(array, device) for vid, array in self.program.constants.items()}
            self._constants[index] = loaded
        return loaded

    def zero_arrays(self) -> tuple[list[np.ndarray], list[np.ndarray], dict[int, np.ndarray]]:
        """Zero-filled host inputs and outputs of the program's shapes and its constants (its layout constants of
        zeros): what a run that measures the program's figures reads and writes (``record_schedule``,
        ``costing.zero_run_ns``), whose cost follows from the shapes, not the values."""
        program = self.program
        inputs = [np.zeros(shape, dtype=TORCH_TO_NUMPY[dtype]) for shape, dtype in self.input_specs]
        outputs = [np.zeros(shape, dtype=TORCH_TO_NUMPY[dtype]) for shape, dtype in self.output_specs]
        constants = {vid: np.ascontiguousarray(array) for vid, array in program.constants.items()}
        constants.update(self.layouts.zeros(program.types))
        return inputs, outputs, constants

    def arrays(self, inputs: list[np.ndarray], outputs: list[np.ndarray], constants: dict[int, np.ndarray],
               arena: np.ndarray | None) -> dict[int, np.ndarray]:
        """The HBM array of every base value: inputs, outputs, constants and views into the scratch arena."""
        arrays: dict[int, np.ndarray] = {}
        for vid, index in self.input_buffers:
            arrays[vid] = inputs[index]
        for vid, index, shape in self.output_buffers:
            array = outputs[index]
            # a value whose output is a reshape of it (schedule.finish): the output's bytes in the value's shape
            arrays[vid] = array if array.shape == shape else array.reshape(shape)
        arrays.update(constants)
        if arena is not None:
            arrays.update(self.scratch_arrays(arena))
        return arrays

    def scratch_arrays(self, arena: np.ndarray) -> dict[int, np.ndarray]:
        """Each scratch buffer's array: a view of the arena's bytes."""
        arrays = {}
        # one constructor a buffer (slice, view and reshape were three numpy calls each, for ~50 buffers)
        for vid, offset, shape, dtype, perm in self.scratch_views:
            if perm is None:
                arrays[vid] = np.ndarray(shape, dtype, buffer=arena, offset=offset)
            else:
                laid = np.ndarray(tuple(shape[d] for d in perm), dtype, buffer=arena, offset=offset)
                arrays[vid] = laid.transpose(np.argsort(perm))
        return arrays

    def arena_tile(self, nc) -> tuple[Tile, np.ndarray]:
        """The scratch arena kept on chip (``memory.arena_space``): one SBUF tile of the launch, [128,
        ceil(bytes / 128)], and its bytes as the flat array the buffers are views of."""
        per_partition = -(-self.scratch_bytes // P)
        tile = nc.sbuf_tile((P, per_partition), np.uint8, "scratch_arena")
        tile.initialized = True  # steps write every buffer before reading it, through DMA
        return tile, tile.data.reshape(-1)[:self.scratch_bytes]

    def run_steps(self, nc, env: Env) -> None:
        """Every step at the instruction level, each starting no earlier than the steps it waits for."""
        ends: list[float] = []
        timeline = nc.timeline
        timeline.onchip = env.onchip
        vids = [vid for vid, _ in self.input_buffers] + list(self.program.constants) + \
            [vid for vid, _ in self.layouts.entries]
        settled = tuple((*byte_bounds(env.arrays[vid]), 0.0, None) for vid in vids if env.arrays[vid].size)
        written = {vid: (*byte_bounds(array), []) for vid, array in env.arrays.items()
                   if array.size and self.program.buffers.get(vid, {}).get("kind") in ("scratch", "output")}
        timeline.hbm_targets = tuple(written.values())
        try:
            for runner, waits, operands in zip(self.runners, self.waits, self.operands):
                timeline.floor = max((ends[w] for w in waits), default=0.0)
                timeline.hbm_floors = settled + tuple(
                    (*byte_bounds(env.arrays[vid]), ends[p], written[vid][2] if vid in written else None)
                    for vid, p in operands if env.arrays[vid].size)
                with nc.scope():
                    runner(nc, env)
                ends.append(timeline.end)
        finally:
            timeline.floor = 0.0
            timeline.hbm_floors = ()
            timeline.hbm_targets = ()
            timeline.onchip = ()

    def run_fast(self, nc, env: Env) -> None:
        """Every step's arithmetic without per-instruction bookkeeping (``replay``); the launch's figures
        are then the recorded ones."""
        if self._fast is None:
            self._fast = replay.fast_runners(self.program, self.runners)
        for wide, runner in self._fast:
            if wide:
                runner(replay.wide_core, env)
            else:
                with nc.scope():
                    runner(nc, env)
        replay.apply(nc, self.program.schedule)

    def writable_into(self, output: int, input: int) -> bool:
        """Whether output ``output`` may be written straight into input ``input``'s memory (an in-place op's
        result, which AOTAutograd then copies into that input: ``x.add_(y)``, ``x.zero_()``), read from the
        program: the output is a value one step writes, the input has its shape and dtype, and no step but that
        one reads the input, which reads it, if at all, as a flat fused group loading it whole, element for
        element (each tile loaded before the same tile is stored, no other tile reading it). Anything else (a
        gather, a view of the input, a reduction, another step reading it) keeps a fresh output."""
        program = self.program
        if not (0 <= output < len(program.outputs) and 0 <= input < len(program.inputs)):
            return False
        vid, source = program.outputs[output], program.inputs[input]
        if program.outputs.count(vid) != 1 or program.types[vid] != program.types[source] \
                or program.inputs.count(source) != 1:
            return False
        writer = None
        for i, step in enumerate(program.steps):
            if step.get("output") == output or vid in schedule.step_writes(step):
                writer = i
        if writer is None:
            return False
        for i, step in enumerate(program.steps):
            reads = [v for v in schedule.step_reads(step) if program.base(v) == source]
            if not reads:
                continue
            if i == writer and self._scatters_into(step, source):
                continue
            if i == writer and step["kind"] in opaque.IN_PLACE_KINDS:
                # its operand k read element for element before its result k is written (compiler/opaque.py)
                if any(v != source for v in reads) or [k for k, v in enumerate(step["operands"]) if v == source] \
                        != [k for k, r in enumerate(step["results"]) if r == vid] or vid not in step["results"]:
                    return False
                continue
            if i != writer or step["kind"] != "fused" or step["reduce_dims"] is not None or step.get("rotations") \
                    or any(v != source for v in reads) or tuple(step["shape"]) != tuple(program.shape(source)):
                return False
        return True

    def writes_strided(self, output: int) -> bool:
        """Whether output ``output`` may be given a tensor of another dense layout (``__call__``'s ``strides``), its
        step storing straight into that layout's strided HBM view (the DMA stores any strides): the output's own
        buffer, written only by the end's copy step (``schedule.finish``: a view returned) or by one flat fused group
        of the value's shape (no reduction, no rotation: its stores are row-major slices of the value). Anything
        else (a value viewed in another shape, a product, a reduction) keeps a contiguous output, copied into the
        layout after the program (``backend._restrided``)."""
        program = self.program
        if not 0 <= output < len(program.outputs):
            return False
        vid = program.outputs[output]
        if program.outputs.count(vid) != 1 or vid in program.inputs or vid in program.constants:
            return False
        writers = [step for step in program.steps if vid in schedule.step_writes(step) or step.get("output") == output]
        if len(writers) != 1:
            return False
        (step,) = writers
        if step["kind"] == "copy":
            return step.get("output") == output
        buffer = program.buffers.get(vid, {})
        return step["kind"] == "fused" and buffer.get("kind") == "output" and buffer.get("index") == output \
            and step.get("reduce_dims") is None and not step.get("rotations") \
            and tuple(step["shape"]) == tuple(program.shape(vid))

    @staticmethod
    def _scatters_into(step: dict, source: int) -> bool:
        """A scatter whose operand is ``source`` itself, read nowhere else in the step (not as its indices or
        updates): its result is the operand with rows overwritten (or added to), so written into the operand's
        memory the operand's copy is a copy onto itself (``gather.scatter_runner`` skips it, as ATen's copy_
        does) and each row is read, if added to, before it is written (``x.index_put_``, ``x.index_fill_``)."""
        return (step["kind"] == "scatter" or step["kind"] in opaque_indexing.SCATTERS_INTO) \
            and step["operands"][0] == source and source not in step["operands"][1:]

    def _copies_skipped(self, outputs: list[torch.Tensor], args: list[torch.Tensor], into: dict[int, int]) -> bool:
        """Whether an output a scatter writes is its operand's own memory (its copy skipped): the launch then runs
        at the instruction level, whose timeline has no copy; the recorded schedule (``record_schedule``, on
        fresh outputs) has one."""
        program = self.program
        for index, k in into.items():
            if outputs[index] is args[k] and any(
                    self._scatters_into(step, program.inputs[k]) and program.outputs[index] in step["results"]
                    for step in program.steps):
                return True
        return False

    def __call__(self, args: list, into: dict[int, int] | None = None,
                 strides: dict[int, tuple[int, ...]] | None = None) -> list[torch.Tensor]:
        """``into``: {output index: input index} for outputs ``writable_into`` that input, written into the
        input tensor's own memory where it is contiguous and shares no memory with another input; the output
        returned is then that tensor. ``strides``: {output index: strides} for outputs ``writes_strided`` may give
        in that dense layout (the traced one: ``backend._traced_strides``), stored straight into it; such a call
        runs at the instruction level (the recorded schedule stored contiguous outputs)."""
        device = self._device(args)
        args = self._check(list(args), device)
        eager = sys.modules.get("device_impl.eager")
        if eager is not None and eager.pending():
            eager.flush("compiled program")  # queued adaptive-eager ops may write our inputs
        outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in self.output_specs] \
            if not into else [self._into(i, args, into, device) for i in range(len(self.output_specs))]
        for i, stride in (strides or {}).items():
            shape, dtype = self.output_specs[i]
            outputs[i] = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        out_arrays = [hbm(t) for t in outputs]
        in_arrays = [hbm(a) for a in args]
        constants = {vid: hbm(tensor) for vid, tensor in self.constants(device).items()}
        if self.layouts:  # read like constants; a stale one is made first, in a launch of its own
            constants.update(self.layouts.arrays(args, in_arrays, device))
        fast = STATIC_REPLAY and replay.usable(self.program.schedule, in_arrays) and not strides \
            and not (into and self._copies_skipped(outputs, args, into))
        with launch(f"neff:{self.name}", device.index or 0) as nc:
            if fast and not nc.timeline.record:  # a trace records every instruction: run them
                if self._fast is None:
                    self._fast = replay.fast_runners(self.program, self.runners)
                if self.kept_scratch() and self._scratch_lock.acquire(blocking=False):
                    try:
                        self.run_fast(nc, self.kept_environment(device, in_arrays, out_arrays, constants))
                    finally:
                        self._scratch_lock.release()
                else:
                    self.run_fast(nc, self.environment(nc, device, in_arrays, out_arrays, constants))
            else:
                self.run_steps(nc, self.environment(nc, device, in_arrays, out_arrays, constants))
        return outputs

    def kept_scratch(self) -> bool:
        """Whether fast executions may keep one host arena and its buffers' views instead of an SBUF tile of each
        launch: the arena lies on chip (an HBM arena comes from the caching allocator, whose statistics count
        it) and every step runs wide, on the replay's own core (a step run on the launch's core allocates its
        tiles beside the arena tile, as at the recording). Building the ~50 views was a tenth of a tiny Llama's
        host time outside its steps. The arena's bytes need no clearing: every step writes a buffer before
        reading it (``arena_tile``)."""
        return self.arena_onchip and all(wide for wide, _ in self._fast)

    def kept_environment(self, device, in_arrays: list[np.ndarray], out_arrays: list[np.ndarray],
                         constants: dict[int, np.ndarray]) -> Env:
        """``environment`` with the kept arena (``kept_scratch``; the caller holds ``_scratch_lock``)."""
        if self._kept_scratch is None:
            self._kept_arena = np.empty(self.scratch_bytes, dtype=np.uint8)
            self._kept_scratch = self.scratch_arrays(self._kept_arena)
        arrays = self.arrays(in_arrays, out_arrays, constants, None)
        arrays.update(self._kept_scratch)
        return Env(self.program, arrays, out_arrays, device, (byte_bounds(self._kept_arena),), self._view_recipes)

    def _into(self, index: int, args: list[torch.Tensor], into: dict[int, int], device: torch.device
              ) -> torch.Tensor:
        """Output ``index``'s tensor: the input ``into`` names for it where its memory can take the result
        (contiguous, no other input in the same storage), else a fresh one."""
        shape, dtype = self.output_specs[index]
        k = into.get(index)
        if k is not None:
            target = args[k]
            storage = target.untyped_storage().data_ptr()
            if target.is_contiguous() and target.device == device and not any(
                    j != k and a.untyped_storage().data_ptr() == storage for j, a in enumerate(args)):
                return target
        return torch.empty(shape, dtype=dtype, device=device)

    def environment(self, nc, device, in_arrays: list[np.ndarray], out_arrays: list[np.ndarray],
                    constants: dict[int, np.ndarray]) -> Env:
        """An execution's arrays inside its launch on ``nc``: the scratch arena an SBUF tile of the launch
        (``arena_onchip``) or HBM from the caching allocator (held by the Env's arrays until it goes)."""
        onchip: tuple[tuple[int, int], ...] = ()
        arena = None
        if self.arena_onchip:
            _, arena = self.arena_tile(nc)
            onchip = (byte_bounds(arena),)
        elif self.scratch_bytes:
            arena = hbm(torch.empty(self.scratch_bytes, dtype=torch.uint8, device=device))
        return Env(self.program, self.arrays(in_arrays, out_arrays, constants, arena), out_arrays, device, onchip,
                   self._view_recipes)


def record_schedule(program: Program) -> dict[str, Any] | None:
    """Run ``program`` once at the instruction level on zero-filled host arrays and keep what its launch
    measures as ``program.schedule`` (``replay``): None for a program with a data-dependent step, or one
    that refuses zeros (an integer division by them raises), which then always runs instruction by
    instruction."""
    program.schedule = None
    if not replay.is_static(program):
        # the arena stays on chip only where this run proves the steps' tiles fit beside it
        program.memory["arena"] = "hbm"
        return None
    spaces = ["sbuf", "hbm"] if program.memory.get("arena") == "sbuf" else ["hbm"]
    for space in spaces:
        program.memory["arena"] = space
        executable = Executable(program, 0)
        inputs, outputs, constants = executable.zero_arrays()
        core = NeuronCore()
        core.reset(False)
        try:
            onchip: tuple[tuple[int, int], ...] = ()
            if executable.arena_onchip:
                _, arena = executable.arena_tile(core)
                arena[...] = 0
                onchip = (byte_bounds(arena),)
            else:
                arena = np.zeros(executable.scratch_bytes, dtype=np.uint8)
            env = Env(program, executable.arrays(inputs, outputs, constants, arena), outputs, None, onchip)
            env._scratch = replay.HostScratch()
            with np.errstate(all="ignore"):
                executable.run_steps(core, env)
        except EngineError:
            if space == "sbuf":  # the steps' tiles do not fit SBUF beside the arena: the arena goes to HBM
                continue
            return None
        except Exception:  # noqa: BLE001 - values the program refuses: it is not replayed
            return None
        program.schedule = replay.measured(core, inputs)
        return program.schedule
    return None
