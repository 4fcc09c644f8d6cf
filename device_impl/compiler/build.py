"""The compiler passes, in order: StableHLO (as ``ir.Graph``) -> ``Program``.

1. ``fold``: constant folding; ``dynamic_iota`` with constant lengths -> ``iota``;
2. ``check_static``: any ``?`` dimension left is a shape-contract violation;
3. dead-code elimination, then ``schedule.order_ops`` (heavy ops early, chains kept whole);
4. ``fusion.plan``: layout ops become views, elementwise chains and reductions
   fused groups, heavy ops steps (an op without a lowering raises
   UnsupportedOpError here, before anything runs);
5. ``memory.group_plan``: tile sizes of each fused group within SBUF;
6. ``schedule.finish``: buffers, output materialisation, HBM arena, waits.
"""

from __future__ import annotations

from device_impl.compiler import fold, fusion, memory, schedule
from device_impl.compiler.ir import Graph
from device_impl.compiler.program import Program


def eliminate_dead_code(graph: Graph) -> Graph:
    needed = set(graph.outputs)
    kept = []
    for op in reversed(graph.ops):
        if any(r in needed for r in op.results):
            kept.append(op)
            needed.update(op.operands)
    graph.ops = kept[::-1]
    return graph


def _group_step(group: "fusion._Group", used: set[int]) -> dict:
    rows, cols = group.rows_cols
    stores = [[slot, vid] for slot, (vid, cls, dtype) in enumerate(group.slots)
              if vid in used and slot not in group.loaded]
    step = {"kind": "fused", "shape": list(group.shape), "reduce_dims": group.reduce_dims, "rows": rows,
            "cols": cols, "slots": group.slots, "loaded": sorted(group.loaded), "loads": group.loads,
            "ops": group.ops, "stores": stores, "row_consumers": group.row_consumers}
    step["tiles"] = memory.group_plan(step)
    return step


def build(graph: Graph, name: str, input_names: list[str] | None = None) -> Program:
    graph = fold.fold_constants(graph)
    fold.check_static(graph, input_names)
    eliminate_dead_code(graph)
    schedule.order_ops(graph)
    planned, views, used = fusion.plan(graph)
    steps = []
    for step in planned:
        steps.append(_group_step(step["group"], used) if step["kind"] == "fused" else step)
    referenced = set(graph.inputs) | set(graph.outputs) | set(views) | {v["src"] for v in views.values()}
    for step in steps:
        referenced.update(schedule.step_reads(step))
        referenced.update(schedule.step_writes(step))
    constants = {vid: payload for vid, payload in graph.constants.items() if vid in referenced}
    splats = {vid: x for vid, x in graph.splats.items() if vid in referenced}
    types = {vid: (graph.types[vid].shape, graph.types[vid].dtype) for vid in referenced}
    program = Program(name=name, inputs=list(graph.inputs), outputs=list(graph.outputs), types=types,
                      views={v: views[v] for v in views if v in referenced}, splats=splats, buffers={},
                      steps=steps, constants=constants)
    return schedule.finish(program)
