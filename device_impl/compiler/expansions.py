"""Functions torch-mlir expands into a formula, folded back into the one op the device evaluates.

torch-mlir lowers ``aten.erf`` to ``chlo.erf`` and legalizes that to StableHLO as XLA's rational
approximation (float32: the input clamped to [-4, 4], a degree-13 odd polynomial over a degree-8 even one,
the quotient clamped to [-1, 1]; ~40 ops). Each op rounds to float32, so the compiled erf differed from the
eager kernel's, ScalarE's ``erf`` (engine/isa.py ``ACTIVATIONS``: one rounding of the float64 value), in 56% of
the float32 values of [-5, 5], by up to several ULP; in ``ndtr = (1 + erf(x / sqrt(2))) / 2`` of x = -4.3 the
cancellation makes one ULP of erf 1% of the result (op suite contract special.ndtr out_dtype: the compiled
out= result was not the device's eager result cast to float16). gelu's erf form has the same expansion.

``fold_expansions`` finds each occurrence of an expansion in an imported graph and replaces the op that
produces its result by the function itself (``erf``, a ScalarE activation: ``lowering.ELEMENTWISE``), so the
compiled program and the eager kernel evaluate erf with one function. The expansion is not written down here:
it is asked of the running torch-mlir (``template``: the graph it imports for ``aten.erf`` alone, per dtype),
so a torch-mlir that expands differently is matched as it expands, and one that emits ``chlo.erf`` unexpanded
needs no match. The matched ops no other op reads become dead code (``build.eliminate_dead_code``).
"""

from __future__ import annotations

import functools

from device_impl.compiler.ir import Graph, Op

# function (the ScalarE activation's StableHLO name) -> the aten op torch-mlir expands; dtypes asked for
EXPANDED = {"erf": "erf"}
DTYPES = ("float32",)  # float16/bfloat16 erf computes in float32 (numerics.OPMATH); float64 stays as it was


@functools.lru_cache(maxsize=None)
def template(function: str, dtype: str) -> Graph | None:
    """The graph torch-mlir imports for ``aten.<function>`` of a 1-D ``dtype`` tensor (folded as build folds),
    or None where that import fails or is a single op already."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from device_impl.compiler import fold, importer

    op = getattr(torch.ops.aten, EXPANDED[function]).default
    try:
        gm = make_fx(lambda x: op(x))(torch.zeros(2, dtype=getattr(torch, dtype)))
        graph = fold.fold_constants(importer.read_module(importer.to_stablehlo(gm)))
    except Exception:  # noqa: BLE001  (no template: graphs keep their expansion, as before this pass)
        return None
    computing = [o for o in graph.ops if o.name != "constant"]
    if len(graph.inputs) != 1 or len(graph.outputs) != 1 or len(computing) <= 1:
        return None
    return graph


def _matches(t: Graph, t_vid: int, g: Graph, g_vid: int, t_producers: dict, g_producers: dict,
             bound: dict) -> bool:
    """Whether the graph's value ``g_vid`` is computed as the template's ``t_vid`` (same ops, attributes,
    constants and element types; any shapes), binding the template's input to one graph value."""
    if t_vid == t.inputs[0]:
        bound.setdefault("input", g_vid)
        return bound["input"] == g_vid and g.types[g_vid].dtype == t.types[t_vid].dtype
    if t_vid in t.splats:
        return g_vid in g.splats and g.splats[g_vid] == t.splats[t_vid] \
            and g.types[g_vid].dtype == t.types[t_vid].dtype
    t_op, g_op = t_producers.get(t_vid), g_producers.get(g_vid)
    if t_op is None or g_op is None or t_op.name != g_op.name or t_op.name == "constant" \
            or len(t_op.operands) != len(g_op.operands) or t_op.attrs != g_op.attrs \
            or [x.dtype for x in t_op.types] != [x.dtype for x in g_op.types]:
        return False
    return all(_matches(t, a, g, b, t_producers, g_producers, bound) for a, b in zip(t_op.operands, g_op.operands))


def fold_expansions(graph: Graph) -> Graph:
    """Replace each value computed as a known expansion (EXPANDED) by the function of its input."""
    names = graph.op_names()
    dtypes = {t.dtype for t in graph.types.values()} & set(DTYPES)
    g_producers = None
    for function in EXPANDED:
        for dtype in sorted(dtypes):
            t = template(function, dtype) if names else None
            if t is None:
                continue
            t_producers = t.producers()
            last = t_producers[t.outputs[0]]
            if last.name not in names:
                continue
            if g_producers is None:
                g_producers = graph.producers()
            for i, op in enumerate(graph.ops):
                if op.name != last.name or len(op.results) != 1 or op.type.dtype != dtype:
                    continue
                bound: dict = {}
                if _matches(t, t.outputs[0], graph, op.result, t_producers, g_producers, bound) \
                        and graph.types[bound["input"]].shape == op.type.shape:
                    graph.ops[i] = Op(function, (bound["input"],), op.results, op.types, {})
                    g_producers[op.result] = graph.ops[i]
    return graph
