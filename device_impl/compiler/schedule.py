"""The schedule: buffers, step order, dependencies and the HBM scratch plan of a program.

Steps run in the planner's order (a topological order of the graph). Each
step waits for the steps that wrote the HBM buffers it reads (read after
write) and, where the scratch arena reuses bytes, for the last readers of the
buffer that held them before (write after read). The executor turns these
waits into a start-time floor on the simulated core, so independent steps
overlap on the engines while dependent ones are ordered: the whole program
is one launch, not one per op.

Graph outputs are written in place by the step producing them when they are
a plain value; outputs that are views, inputs, constants, splats or repeats
of another output get a ``copy`` or ``fill`` step at the end.
"""

from __future__ import annotations

from typing import Any

from device_impl.compiler import memory
from device_impl.compiler.program import Program


def step_reads(step: dict[str, Any]) -> list[int]:
    kind = step["kind"]
    if kind == "fused":
        return [vid for _, vid in step["loads"]]
    if kind == "copy":
        return [step["src"]]
    if kind == "fill":
        return []
    return list(step["operands"])


def step_writes(step: dict[str, Any]) -> list[int]:
    kind = step["kind"]
    if kind == "fused":
        return [vid for _, vid in step["stores"]]
    if kind in ("copy", "fill"):
        return [step["result"]] if "result" in step else []
    return list(step["results"])


def finish(program: Program) -> Program:
    """Assign buffers, add output materialisation, plan the arena, compute waits (in place)."""
    steps = program.steps
    producer: dict[int, int] = {}
    for i, step in enumerate(steps):
        for vid in step_writes(step):
            producer[vid] = i
    buffers: dict[int, dict[str, Any]] = {}
    for i, vid in enumerate(program.inputs):
        buffers.setdefault(vid, {"kind": "input", "index": i})
    for vid in program.constants:
        buffers[vid] = {"kind": "constant"}

    # Splats read by steps other than fused groups need bytes in HBM: a fill step first.
    fills: list[dict[str, Any]] = []
    for step in steps:
        if step["kind"] == "fused":
            continue
        for vid in step_reads(step):
            base = program.base(vid)
            if base in program.splats and base not in producer and base not in buffers:
                fills.append({"kind": "fill", "result": base, "value": program.splats[base]})
                producer[base] = -1
    if fills:
        steps[:0] = fills
        producer = {vid: i for i, step in enumerate(steps) for vid in step_writes(step)}

    # Outputs: in place when possible, else a copy or fill step at the end.
    for i, vid in enumerate(program.outputs):
        base = program.base(vid)
        if vid == base and vid in producer and vid not in buffers:
            buffers[vid] = {"kind": "output", "index": i}
        elif base in program.splats and base not in producer:
            steps.append({"kind": "fill", "output": i, "value": program.splats[base]})
        else:
            steps.append({"kind": "copy", "output": i, "src": vid})

    # Scratch: every other value a step writes and a later step reads.
    last_read: dict[int, int] = {}
    for i, step in enumerate(steps):
        for vid in step_reads(step):
            last_read[program.base(vid)] = i
    lifetimes: dict[int, tuple[int, int]] = {}
    sizes: dict[int, int] = {}
    for vid, i in producer.items():
        if vid in buffers:
            continue
        shape, dtype = program.types[vid]
        lifetimes[vid] = (i, last_read.get(vid, i))
        sizes[vid] = memory.nbytes(shape, dtype)
    offsets, arena = memory.arena_plan(sizes, lifetimes)
    for vid, offset in offsets.items():
        buffers[vid] = {"kind": "scratch", "offset": offset, "nbytes": sizes[vid]}
    program.buffers = buffers

    waits: list[list[int]] = []
    for j, step in enumerate(steps):
        deps = {producer[program.base(v)] for v in step_reads(step) if producer.get(program.base(v), -1) >= 0
                and producer[program.base(v)] < j}
        for vid in step_writes(step):  # write after read on reused arena bytes
            b = buffers.get(vid)
            if b is None or b["kind"] != "scratch":
                continue
            lo, hi = b["offset"], b["offset"] + max(b["nbytes"], 1)
            for other, (first, last) in lifetimes.items():
                ob = buffers[other]
                if other != vid and last < j and ob["offset"] < hi and lo < ob["offset"] + max(ob["nbytes"], 1):
                    deps.add(last)
        step["waits"] = sorted(d for d in deps if d != j)
        waits.append(step["waits"])
    program.memory = {
        "scratch_bytes": arena,
        "scratch_buffers": len(offsets),
        "sbuf_bytes_per_partition": max((s.get("tiles", {}).get("sbuf_bytes", 0) for s in steps), default=0),
        "sbuf_capacity_per_partition": memory.PLATFORM.sbuf_bytes_per_partition,
        "steps": len(steps),
    }
    return program
