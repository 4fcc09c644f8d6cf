"""The schedule: op order, buffers, dependencies and the HBM scratch plan of a program.

``order_ops`` first reorders the StableHLO ops (a topological order still)
so that fusion finds longer chains: a heavy op (a step of its own:
dot_general, concatenate, gather ...) is issued as soon as its operands
exist, but never in the middle of an elementwise chain that can still grow;
torch-mlir's order interleaves them (``silu(gate)``, then the ``up``
projection, then their product), which would cut the chain into groups that
each write and re-read HBM. Ops that depend on no graph input (a causal mask
built from iotas) go first, so they do not split a chain either.

Steps then run in the planner's order. Each
step waits for the steps that wrote the HBM buffers it reads (read after
write) and, where the scratch arena reuses bytes, for the last readers of the
buffer that held them before (write after read). The executor turns these
waits into a start-time floor for the step's HBM writes and, for its loads,
the recorded writes of the bytes they read (``executor.Executable.run_steps``),
so independent steps overlap on the engines while dependent ones are ordered:
the whole program is one launch, not one per op.

Graph outputs are written in place by the step producing them when they are
a plain value; outputs that are views, inputs, constants, splats or repeats
of another output get a ``copy`` or ``fill`` step at the end.
"""

from __future__ import annotations

from typing import Any

from device_impl.compiler import lowering, memory
from device_impl.compiler.ir import Graph, Op
from device_impl.compiler.program import Program


def _heavy(op: Op) -> bool:
    return op.name in lowering.STEP_OPS or (op.name == "reduce" and len(op.operands) > 2)


def order_ops(graph: Graph) -> Graph:
    """Reorder ``graph.ops`` (in place) for fusion; see the module docstring."""
    ops = graph.ops
    producer = {r: i for i, op in enumerate(ops) for r in op.results}
    deps = [{producer[v] for v in op.operands if v in producer} for op in ops]
    users: dict[int, list[int]] = {}
    for i, d in enumerate(deps):
        for j in d:
            users.setdefault(j, []).append(i)
    waiting = [len(d) for d in deps]
    ready = {i for i, n in enumerate(waiting) if n == 0}
    inputs = set(graph.inputs)
    constant = [False] * len(ops)  # depends on no graph input (iota and constant subgraphs)
    for i, op in enumerate(ops):  # ops are in a topological order already
        constant[i] = all(v not in inputs for v in op.operands) and all(constant[j] for j in deps[i])
    chain: set[int] = set()  # light ops emitted since the last heavy op (the open group's candidates)
    order: list[int] = []

    def emit(i: int) -> None:
        ready.discard(i)
        order.append(i)
        for u in users.get(i, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.add(u)

    while ready:
        views = [i for i in ready if ops[i].name in lowering.VIEWS or ops[i].name == "constant"]
        if views:
            for i in sorted(views):
                emit(i)
                if deps[i] & chain:
                    chain.add(i)
            continue
        early = sorted(i for i in ready if constant[i])
        if early:
            emit(early[0])
            continue
        light = sorted(i for i in ready if not _heavy(ops[i]))
        continuing = [i for i in light if deps[i] & chain]
        if continuing:
            chosen = continuing[0]
        else:
            heavy = sorted(i for i in ready if _heavy(ops[i]))
            if heavy:
                emit(heavy[0])
                chain.clear()
                continue
            chosen = light[0]
        emit(chosen)
        chain.add(chosen)
    assert len(order) == len(ops), "the op graph has a cycle"
    graph.ops = [ops[i] for i in order]
    return graph


# Operand positions a step's runner never reads from HBM: a padding or initial value, a constant that the
# runner takes from the program as an immediate (steps._splat_operand), and argmax/argmin's iota and initial
# values (VectorE's arg_reduce makes the indices itself, steps._arg_reduce). No fill step writes them and no iota
# step makes them (``finish``): that was a step, and its wait, before the one step the op is (issue 21: compiled
# constant_pad and argmax losing to the eager kernel by it).
# A sort's second operand likewise: torch-mlir's sort and topk sort (keys, iota along the dim), and the runner takes
# the indices from GpSimd's sort (steps._sort_rows_runner: ``indexing.sort_rows``' permutation), so the iota step
# wrote an int64 tensor nobody read (compiled topk of [3, 1, 2, 513]: 3.42 us against the eager kernel's 3.19).
UNREAD = {"pad": (1,), "reduce_window": (1,), "argmax": (1, 2, 3), "argmin": (1, 2, 3), "sort": (1,)}


def step_reads(step: dict[str, Any]) -> list[int]:
    kind = step["kind"]
    if kind == "fused":
        return [vid for _, vid in step["loads"]]
    if "epilogue" in step:  # a dot_general whose product a fused group consumes on its evacuation
        tail = step["epilogue"]
        dropped = tail.get("order", {}).get("drop", ())  # loads its rotated ops never issue (build._product_order)
        return list(step["operands"]) + [vid for slot, vid in tail["loads"]
                                         if slot != tail["product_slot"] and slot not in dropped]
    if kind == "copy":
        return [step["src"]]
    if kind == "fill":
        return []
    unread = UNREAD.get(kind)
    if unread:
        return [v for k, v in enumerate(step["operands"]) if k not in unread]
    return list(step["operands"])


def step_writes(step: dict[str, Any]) -> list[int]:
    kind = step["kind"]
    if kind == "fused":
        return [vid for _, vid in step["stores"]]
    if "epilogue" in step:  # the product itself never reaches HBM
        return [vid for _, vid in step["epilogue"]["stores"]]
    if kind in ("copy", "fill"):
        return [step["result"]] if "result" in step else []
    return list(step["results"])


def _reshapes_only(program: Program, vid: int) -> bool:
    """Whether ``vid`` is its base value through reshapes alone (row-major order kept, no element moved)."""
    while vid in program.views:
        view = program.views[vid]
        if view["op"] != "reshape":
            return False
        vid = view["src"]
    return True


def finish(program: Program) -> Program:
    """Assign buffers, add output materialisation, plan the arena, compute waits (in place)."""
    read = {program.base(vid) for step in program.steps for vid in step_reads(step)}
    read.update(program.base(vid) for vid in program.outputs)
    # an iota only an unread operand names (argmax's): nothing reads it, so it is not made
    program.steps[:] = [step for step in program.steps
                        if step["kind"] != "iota" or any(vid in read for vid in step["results"])]
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
        elif base in producer and base not in buffers and _reshapes_only(program, vid):
            # an output that is a reshape of a value (unfold's [N, C*k, L] of its stacked windows, a pooling's
            # squeezed dim): the same bytes in the same order, so the step writing the value writes the output,
            # whose array is viewed in the value's shape (executor.Executable.arrays), and no copy step runs
            buffers[base] = {"kind": "output", "index": i}
        elif base in program.splats and base not in producer:
            # first, not last: it reads nothing, so it runs while the first step waits for its loads, where at the
            # end it waited for every engine (a training SDPA's two 0-d zeros for the backward's dropout seed and
            # offset, filled after the attention step: 2.54 us against the eager kernel's 2.42). No step reads an
            # output buffer, and one written into an input's memory is one no step reads (writable_into)
            steps.insert(0, {"kind": "fill", "output": i, "value": program.splats[base]})
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
        "arena": memory.arena_space(arena),  # where the arena lives; executor.record_schedule may move it to HBM
        "scratch_buffers": len(offsets),
        "sbuf_bytes_per_partition": max((s.get("tiles", {}).get("sbuf_bytes", 0) for s in steps), default=0),
        "sbuf_capacity_per_partition": memory.PLATFORM.sbuf_bytes_per_partition,
        "steps": len(steps),
    }
    return program
