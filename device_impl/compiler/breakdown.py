"""Where a compiled program's HBM bytes and device time go, step by step (a diagnostic, not a fast path).

``capture()`` keeps the (executable, arguments) of every compiled-program call made inside it;
``step_figures(executable, args, weights)`` then runs that program once more at the instruction level (the
reference path: ``Executable.run_steps``) on a fresh launch, with the DMA queue's transfers attributed to
the HBM buffer they touch by address:

  reads   weight   a graph input the caller names a weight (a parameter or buffer of the module)
          input    any other graph input
          const    a NEFF constant
          scratch  the per-execution scratch arena in HBM (values crossing step boundaries), or a runner's
                   own staging scratch
          output   a graph output read back by a later step
          sbuf     the scratch arena when it is kept on chip (compiler/memory.py ``arena_space``):
                   SBUF-to-SBUF DMA, no HBM bytes
  writes  scratch / output / sbuf

Each step's row also has the device-clock advance over the step (``end`` after it minus ``end`` before:
steps overlap on the engines, so this is the step's share of the critical path, not its busy time) and its
TensorE flops. ``benches/compiled_ratio.py --breakdown`` prints the table.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
from numpy.lib.array_utils import byte_bounds

from device_impl.compiler import executor
from device_impl.engine import launch
from device_impl.engine.timeline import ENGINES

READ_CLASSES = ("weight", "input", "const", "scratch", "output", "sbuf")
WRITE_CLASSES = ("scratch", "output", "sbuf")
ONCHIP = "sbuf"  # the scratch arena kept in SBUF: DMA moves its bytes, HBM never sees them
_DMA_READS = ("load", "load_flat", "load_rows")
_DMA_WRITES = ("store", "store_flat", "store_rows")


@dataclass
class StepFigures:
    index: int
    kind: str
    what: str  # a short description: the product's sizes, a group's op count
    reads: dict[str, int] = field(default_factory=lambda: dict.fromkeys(READ_CLASSES, 0))
    writes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WRITE_CLASSES, 0))
    ns: float = 0.0
    flops: int = 0
    # the step's instructions on the launch's timeline: first start and last end (ns), and each engine's busy ns
    start: float = 0.0
    end: float = 0.0
    busy: dict[str, float] = field(default_factory=lambda: dict.fromkeys(ENGINES, 0.0))

    @property
    def bound(self) -> str:
        """The engine busiest over the step's span (the one its instructions keep longest)."""
        return max(ENGINES, key=lambda e: self.busy[e]) if any(self.busy.values()) else ""

    @property
    def read_bytes(self) -> int:
        return sum(self.reads.values())

    @property
    def write_bytes(self) -> int:
        return sum(self.writes.values())


@contextlib.contextmanager
def capture() -> Iterator[list[tuple[Any, list]]]:
    """Record (executable, args) of each compiled-program call inside the block."""
    calls: list[tuple[Any, list]] = []
    original = executor.Executable.__call__

    def recording(self, args, *rest, **kwargs):
        calls.append((self, list(args)))
        return original(self, args, *rest, **kwargs)

    executor.Executable.__call__ = recording
    try:
        yield calls
    finally:
        executor.Executable.__call__ = original


def _describe(step: dict, program) -> str:
    if step["kind"] == "dot_general":
        from device_impl.compiler.steps import dot_dims

        d = dot_dims(step, program)
        text = f"{d.batch}x[{d.m}x{d.k}]@[{d.k}x{d.n}]"
        if step.get("prologue"):
            text += f" +prologue({len(step['prologue']['ops'])} ops)"
        if step.get("epilogue"):
            text += f" +epilogue({len(step['epilogue']['ops'])} ops)"
        return text
    if step["kind"] == "fused":
        return f"{len(step['ops'])} ops over {list(step['shape'])}"
    return ""


def step_figures(executable, args: list, weights: set[int] = frozenset()) -> list[StepFigures]:
    """Per step of ``executable``'s program, the HBM bytes by buffer class and the clock advance, from an
    instruction-level run on ``args`` (neuron tensors, as the program was called). ``weights``: the
    indices of the arguments that are weights."""
    import torch

    from device_impl.kernels.common import hbm

    program = executable.program
    device = executable._device(args)
    args = executable._check(list(args), device)
    outputs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in executable.output_specs]
    out_arrays = [hbm(t) for t in outputs]
    in_arrays = [hbm(a) for a in args]
    constants = {vid: hbm(t) for vid, t in executable.constants(device).items()}
    ranges: list[tuple[int, int, str]] = []
    if executable.layouts:  # weights kept in TensorE's layout (compiler.layout): read as weights
        kept = executable.layouts.arrays(args, in_arrays, device)
        ranges.extend((*byte_bounds(array), "weight") for array in kept.values())
        constants.update(kept)
    for vid, index in executable.input_buffers:
        ranges.append((*byte_bounds(in_arrays[index]), "weight" if index in weights else "input"))
    for vid, index, _ in executable.output_buffers:
        ranges.append((*byte_bounds(out_arrays[index]), "output"))
    for vid, array in constants.items():
        ranges.append((*byte_bounds(array), "const"))

    def classify(view: np.ndarray) -> str:
        if not view.size:
            return "scratch"
        address = view.__array_interface__["data"][0]
        for lo, hi, cls in ranges:
            if lo <= address < hi:
                return cls
        return "scratch"  # the arena in HBM, or a runner's staging scratch

    rows = [StepFigures(j, step["kind"], _describe(step, program)) for j, step in enumerate(program.steps)]
    current: list[StepFigures] = []

    with launch(f"breakdown:{executable.name}", device.index or 0) as nc:
        env = executable.environment(nc, device, in_arrays, out_arrays, constants)
        ranges.extend((lo, hi, "sbuf") for lo, hi in env.onchip)
        dma = nc.dma

        def reading(name):
            method = getattr(type(dma), name)

            def wrapped(dst, src, *rest, **options):
                if current:
                    current[0].reads[classify(src)] += int(dst.data.nbytes if name != "load_flat" else
                                                           (rest[1] - rest[0]) * src.itemsize)
                return method(dma, dst, src, *rest, **options)
            return wrapped

        def writing(name):
            method = getattr(type(dma), name)

            def wrapped(dst, *rest, **options):  # options: store_rows' accumulate, in_order (a scatter)
                if current:
                    n = rest[-1].data.nbytes if name != "store_flat" else (rest[1] - rest[0]) * dst.itemsize
                    if name == "store_rows":
                        n = rest[1].data.nbytes
                    cls = classify(dst)
                    current[0].writes[cls if cls in WRITE_CLASSES else "scratch"] += int(n)
                return method(dma, dst, *rest, **options)
            return wrapped

        def copying(dst, src):
            if current:
                current[0].reads[classify(src)] += int(src.nbytes)
                cls = classify(dst)
                current[0].writes[cls if cls in WRITE_CLASSES else "scratch"] += int(dst.nbytes)
            return type(dma).hbm_copy(dma, dst, src)

        for name in _DMA_READS:
            setattr(dma, name, reading(name))
        for name in _DMA_WRITES:
            setattr(dma, name, writing(name))
        dma.hbm_copy = copying
        timeline = nc.timeline
        runners = executable.runners

        def observed(j):
            def run(nc_, env_):
                current[:] = [rows[j]]
                before, flops, busy, first = timeline.end, timeline.flops, dict(timeline.busy), len(timeline.events)
                runners[j](nc_, env_)
                rows[j].ns = max(0.0, timeline.end - before)
                rows[j].flops = timeline.flops - flops
                rows[j].busy = {e: timeline.busy[e] - busy[e] for e in ENGINES}
                events = timeline.events[first:]
                if events:
                    rows[j].start = min(start for _, _, start, _ in events)
                    rows[j].end = max(start + cost for _, _, start, cost in events)
                current.clear()
            return run

        recording = timeline.record
        timeline.record = True  # every instruction's (engine, start, cost): each step's span
        try:
            executable.runners = [observed(j) for j in range(len(runners))]
            executable.run_steps(nc, env)
        finally:
            executable.runners = runners
            timeline.record = recording
            if not recording:
                timeline.events.clear()
            for name in _DMA_READS + _DMA_WRITES + ("hbm_copy",):
                dma.__dict__.pop(name, None)
    return rows


def table(rows: list[StepFigures]) -> str:
    """The per-step figures as text, with totals."""
    head = (f"{'#':>3s} {'step':12s} {'what':44s} " + " ".join(f"{'r:' + c:>9s}" for c in READ_CLASSES)
            + " " + " ".join(f"{'w:' + c:>9s}" for c in WRITE_CLASSES) + f" {'clock us':>9s}")
    lines = [head]
    for r in rows:
        lines.append(f"{r.index:3d} {r.kind:12s} {r.what[:44]:44s} "
                     + " ".join(f"{r.reads[c]:9,d}" for c in READ_CLASSES) + " "
                     + " ".join(f"{r.writes[c]:9,d}" for c in WRITE_CLASSES) + f" {r.ns / 1e3:9.2f}")
    total_r = {c: sum(r.reads[c] for r in rows) for c in READ_CLASSES}
    total_w = {c: sum(r.writes[c] for r in rows) for c in WRITE_CLASSES}
    lines.append(f"{'':3s} {'total':12s} {'':44s} " + " ".join(f"{total_r[c]:9,d}" for c in READ_CLASSES) + " "
                 + " ".join(f"{total_w[c]:9,d}" for c in WRITE_CLASSES)
                 + f" {sum(r.ns for r in rows) / 1e3:9.2f}")
    hbm_r = sum(v for c, v in total_r.items() if c != ONCHIP)
    hbm_w = sum(v for c, v in total_w.items() if c != ONCHIP)
    lines.append(f"HBM bytes {hbm_r + hbm_w:,d} (read {hbm_r:,d}, written {hbm_w:,d}); on-chip (SBUF arena) DMA "
                 f"bytes {total_r[ONCHIP] + total_w[ONCHIP]:,d}")
    return "\n".join(lines)


def engine_table(rows: list[StepFigures], device_ns: float | None = None) -> str:
    """Per step: its instructions' span on the launch's timeline, each engine's busy time in it and the engine
    that bounds it (the busiest); then each engine's busy total and its idle time over the launch (where DMA is
    not overlapped with compute, or the vector engines serialise the softmax and norm passes, shows here)."""
    head = (f"{'#':>3s} {'step':12s} {'what':44s} {'start us':>9s} {'end us':>9s} "
            + " ".join(f"{e + ' us':>9s}" for e in ENGINES) + f" {'bound':>7s}")
    lines = [head]
    for r in rows:
        lines.append(f"{r.index:3d} {r.kind:12s} {r.what[:44]:44s} {r.start / 1e3:9.2f} {r.end / 1e3:9.2f} "
                     + " ".join(f"{r.busy[e] / 1e3:9.2f}" for e in ENGINES) + f" {r.bound:>7s}")
    total = {e: sum(r.busy[e] for r in rows) for e in ENGINES}
    span = device_ns if device_ns is not None else max((r.end for r in rows), default=0.0)
    lines.append(f"{'':3s} {'busy':12s} {'':44s} {'':9s} {span / 1e3:9.2f} "
                 + " ".join(f"{total[e] / 1e3:9.2f}" for e in ENGINES))
    lines.append(f"{'':3s} {'idle':12s} {'':44s} {'':9s} {'':9s} "
                 + " ".join(f"{max(0.0, span - total[e]) / 1e3:9.2f}" for e in ENGINES))
    return "\n".join(lines)
