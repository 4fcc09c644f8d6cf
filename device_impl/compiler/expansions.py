"""Functions torch-mlir expands into a formula, folded back into the one op the device evaluates (erf; asinh, acosh,
atanh, asin and acos: ``EXPANDED``).

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

# function (the ScalarE activation's StableHLO name) -> the aten op torch-mlir expands; dtypes asked for.
# The inverse and hyperbolic functions expand too (chlo's legalization: asinh as a sign, abs, log, sqrt and
# log1p select over 14 ops, acosh 11, atanh 8, asin and acos through atan2): each op a pass over the tiles and
# a rounding, where the eager kernel is one ScalarE activation rounded once (float64 value): compiled asinh took
# 2.4x, acosh 3x the eager kernel's device time (benches/compiled_vs_eager_specs.py). Not sinh/cosh: numerics'
# ``_hyperbolic`` rewrites them before the import, for CPU's float32 overflow, so no expansion reaches the graph.
EXPANDED = {"erf": "erf", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "asin": "asin", "acos": "acos"}
DTYPES = ("float32",)  # float16/bfloat16 erf computes in float32 (numerics.OPMATH); float64 stays as it was

SCALAR = 1232.0  # 0b10011010 << 4: eight significant bits

# function (the engine op's name in the IR: ``lowering.ELEMENTWISE``) -> (aten call, arity): PyTorch's rounding
# divisions and remainder, which compiler/numerics.py writes out op by op as CPU's c10 formulas (div_floor_floating:
# fmod, a corrected quotient, floor, a rounding fix and a signed zero; ~16 ops, 3x the eager kernel's device time)
# and trunc (``where(x < 0, ceil(x), floor(x))``, also of a quotient: div's rounding_mode="trunc"); VectorE's ALU evaluates each formula as one op with the same
# steps (engine/isa.py ``ALU_BINARY``/``ALU_UNARY``), as the eager kernels do. The template is the graph
# numerics' rewrite imports as, so only that formula, as written there, is folded.
REWRITTEN = {  # template -> (function, aten op and overload, keyword arguments, tensor arguments, scalar)
    "floor_divide": ("floor_divide", "div.Tensor_mode", {"rounding_mode": "floor"}, 2, None),
    "python_remainder": ("python_remainder", "remainder.Tensor", {}, 2, None),
    # trunc(a / b) (numerics' trunc of the quotient) before trunc alone, whose fold would hide the division: the
    # eager kernel's one trunc_divide instruction
    "trunc_divide": ("trunc_divide", "div.Tensor_mode", {"rounding_mode": "trunc"}, 2, None),
    "trunc": ("trunc", "trunc.default", {}, 1, None),
    # a Python scalar divisor: numerics' formula takes its sign as a constant, so one template per sign, traced
    # with a stand-in value (``SCALAR``) that matches whatever splat the graph has in its place (exact in
    # float16 and bfloat16 too: the template's splat is the stand-in itself in every dtype)
    "floor_divide_scalar+": ("floor_divide", "div.Scalar_mode", {"rounding_mode": "floor"}, 1, SCALAR),
    "floor_divide_scalar-": ("floor_divide", "div.Scalar_mode", {"rounding_mode": "floor"}, 1, -SCALAR),
    "python_remainder_scalar+": ("python_remainder", "remainder.Scalar", {}, 1, SCALAR),
    "python_remainder_scalar-": ("python_remainder", "remainder.Scalar", {}, 1, -SCALAR),
    "trunc_divide_scalar": ("trunc_divide", "div.Scalar_mode", {"rounding_mode": "trunc"}, 1, SCALAR),
}
# numerics writes these formulas in float16/bfloat16 too (two reduced-float tensors: ATen's Vectorized<BFloat16>,
# every step rounded to the dtype; remainder's and trunc's steps are exact or round once either way), so their
# templates are asked in those dtypes as well and fold into the one op, which lowering computes in the dtype
# itself (``lowering.STEPWISE``), as the eager kernels (``loop._narrow``): compiled bfloat16 remainder had taken
# 3.4x, floor_divide_ 4.9x the eager kernel's device time (benches/compiled_vs_eager_specs.py --dtype bfloat16)
REWRITTEN_DTYPES = ("float32", "bfloat16", "float16")


@functools.lru_cache(maxsize=None)
def template(function: str, dtype: str) -> Graph | None:
    """The graph torch-mlir imports for ``aten.<function>`` of 1-D ``dtype`` tensors (folded as build folds),
    after compiler/legalize.py's rewrites for the ``REWRITTEN`` ones, or None where that import fails or is a
    single op already."""
    import torch
    from torch.fx.experimental.proxy_tensor import make_fx

    from device_impl.compiler import fold, importer, legalize

    scalar = None
    if function in REWRITTEN:
        _, name, kwargs, arity, scalar = REWRITTEN[function]
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
    else:
        op, kwargs, arity = getattr(torch.ops.aten, EXPANDED[function]).default, {}, 1

    def call(*args):
        return op(*args, *([] if scalar is None else [scalar]), **kwargs)

    try:
        # traced on fake tensors: numerics' rewrites compute their nodes' types on the inputs' fake values
        gm = make_fx(call, tracing_mode="fake")(*[torch.zeros(2, dtype=getattr(torch, dtype)) for _ in range(arity)])
        if function in REWRITTEN:
            legalize.legalize(gm)
        graph = fold.fold_constants(importer.read_module(importer.to_stablehlo(gm)))
    except Exception:  # noqa: BLE001  (no template: graphs keep their expansion, as before this pass)
        return None
    computing = [o for o in graph.ops if o.name != "constant"]
    if len(graph.inputs) != arity or len(graph.outputs) != 1 or len(computing) <= 1:
        return None
    if dtype != "float32" and any(o.name == "convert" for o in computing):
        # a reduced-float formula computed in float32 (floor division by a Python scalar: CPU's opmath, rounded
        # once): its float32 template folds the formula between the converts; the op folded here would compute
        # in the dtype (lowering.STEPWISE)
        return None
    return graph


def _same_scalar(a, b) -> bool:
    """Equal splat values, NaN equal to NaN (atanh's expansion selects a NaN outside [-1, 1])."""
    return a == b or (a != a and b != b)


def _through(vid: int, producers: dict, looking: bool, types: dict | None = None) -> int:
    """``vid``, or where ``looking``, the value it broadcasts (through any chain of broadcast_in_dim, and of
    reshapes that only prepend unit dims: torch-mlir says ``where(b == 0, ...)`` of a [513] divisor in a
    [2, 3, 513] result as a reshape to [1, 1, 513] and a broadcast, the same elements as the broadcast alone)."""
    while looking:
        op = producers.get(vid)
        if op is None or not (op.name == "broadcast_in_dim"
                              or op.name == "reshape" and types is not None and _prepends_units(op, types)):
            break
        vid = op.operands[0]
    return vid


def _prepends_units(op: Op, types: dict) -> bool:
    """A reshape whose result is its operand's shape with unit dims in front (a right-aligned broadcast's no-op)."""
    shape, source = op.type.shape, types[op.operands[0]].shape
    extra = len(shape) - len(source)
    return extra >= 0 and tuple(shape[extra:]) == tuple(source) and all(d == 1 for d in shape[:extra])


def _matches(t: Graph, t_vid: int, g: Graph, g_vid: int, t_producers: dict, g_producers: dict,
             bound: dict, broadcasts: bool = False, scalar: float | None = None) -> bool:
    """Whether the graph's value ``g_vid`` is computed as the template's ``t_vid`` (same ops, attributes,
    constants and element types; any shapes), binding each template input to one graph value (and the
    ``scalar`` stand-in, a splat, to one splat value of the graph, at position ``len(t.inputs)``). With
    ``broadcasts`` (an elementwise formula), broadcast_in_dim is looked through on both sides: torch-mlir
    broadcasts an operand of another shape at each op that reads it, which computes the same elements."""
    t_vid = _through(t_vid, t_producers, broadcasts, t.types)
    g_vid = _through(g_vid, g_producers, broadcasts, g.types)
    if t_vid in t.inputs:
        position = t.inputs.index(t_vid)
        bound.setdefault(position, g_vid)
        return bound[position] == g_vid and g.types[g_vid].dtype == t.types[t_vid].dtype
    if t_vid in t.splats:
        if scalar is not None and t.splats[t_vid] == scalar:  # the template's stand-in for the call's scalar
            position = len(t.inputs)
            bound.setdefault(position, g_vid)
            return g_vid in g.splats and g.splats[g_vid] == g.splats[bound[position]] \
                and g.types[g_vid].dtype == t.types[t_vid].dtype
        return g_vid in g.splats and _same_scalar(g.splats[g_vid], t.splats[t_vid]) \
            and g.types[g_vid].dtype == t.types[t_vid].dtype
    t_op, g_op = t_producers.get(t_vid), g_producers.get(g_vid)
    if t_op is None or g_op is None or t_op.name != g_op.name or t_op.name == "constant" \
            or len(t_op.operands) != len(g_op.operands) or t_op.attrs != g_op.attrs \
            or [x.dtype for x in t_op.types] != [x.dtype for x in g_op.types]:
        return False
    return all(_matches(t, a, g, b, t_producers, g_producers, bound, broadcasts, scalar)
               for a, b in zip(t_op.operands, g_op.operands))


def _full(graph: Graph, vid: int, shape: tuple[int, ...]) -> int | None:
    """``vid`` if it has ``shape``, else a value of the graph that broadcasts it to ``shape`` (None: none does)."""
    if graph.types[vid].shape == shape:
        return vid
    for op in graph.ops:
        if op.name == "broadcast_in_dim" and op.operands[0] == vid and op.type.shape == shape:
            return op.result
    return None


def fold_expansions(graph: Graph) -> Graph:
    """Replace each value computed as a known expansion (EXPANDED) by the function of its input."""
    names = graph.op_names()
    present = {t.dtype for t in graph.types.values()}
    g_producers = None
    for function in (*EXPANDED, *REWRITTEN):
        for dtype in sorted(present & set(REWRITTEN_DTYPES if function in REWRITTEN else DTYPES)):
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
                scalar = REWRITTEN[function][4] if function in REWRITTEN else None
                arity = len(t.inputs) + (scalar is not None)
                if not _matches(t, t.outputs[0], graph, op.result, t_producers, g_producers, bound,
                                function in REWRITTEN, scalar) or len(bound) != arity:
                    continue
                operands = tuple(_full(graph, bound[k], op.type.shape) for k in range(len(t.inputs)))
                if scalar is not None:
                    operands += (bound[len(t.inputs)],)  # the splat: an immediate operand
                if all(vid is not None for vid in operands):
                    name = REWRITTEN[function][0] if function in REWRITTEN else function
                    graph.ops[i] = Op(name, operands, op.results, op.types, {})
                    g_producers[op.result] = graph.ops[i]
    if g_producers is not None:
        _zero_guards(graph, g_producers)
    fold_conversions(graph)
    return graph


# dtypes a compare may write directly: its 0/1 converted on store as a convert would (engines' storage-only
# dtypes keep their convert, which the planner refuses as before)
_ENGINE_DTYPES = frozenset({"float32", "bfloat16", "float16", "int64", "int32", "int16", "int8", "uint8"})
LOGICAL = frozenset({"and", "or", "xor", "not"})


def fold_conversions(graph: Graph) -> Graph:
    """The conversions torch-mlir puts around a test, done by the test itself, as the eager kernels do:

    * ``convert(compare(a, b))`` to a number type (sign's ``(x > 0) - (x < 0)``, a mask multiplied in) is one
      compare writing 1/0 in that type (``lowering._emit_compare``: the ALU's bool result converted on store,
      the convert's own conversion); the eager sign kernel's ``tensor_scalar(..., "greater", 0)`` into a
      float tile. The compare must have no other reader.
    * ``and``/``or``/``xor``/``not`` of ``convert(x)`` to bool (logical_and of float tensors: each operand
      tested against zero first) read ``x`` itself: VectorE's logical op reads any dtype's truth (nonzero; NaN
      true, as C's), which is the convert's test (``x != 0``), so the eager kernel's one instruction. A
      broadcast between the convert and the op is kept, of ``x`` instead.

    Compiled logical_and of two float tensors had been three VectorE passes (two converts and the and) against
    the eager kernel's one (1.20x its device time), sign five against three (1.16x)."""
    producers = graph.producers()
    users = graph.users()
    outputs = set(graph.outputs)
    next_vid = max(graph.types, default=-1) + 1
    ops: list[Op] = []
    for op in graph.ops:
        if op.name == "convert" and op.type.dtype in _ENGINE_DTYPES:
            test = producers.get(op.operands[0])
            if test is not None and test.name == "compare" and len(test.results) == 1 \
                    and len(users.get(test.result, [])) == 1 and test.result not in outputs:
                op = Op("compare", test.operands, op.results, op.types, dict(test.attrs))
        elif op.name in LOGICAL and op.type.dtype == "bool":
            operands = []
            for vid in op.operands:
                spread = producers.get(vid)
                spread = spread if spread is not None and spread.name == "broadcast_in_dim" else None
                source = producers.get(spread.operands[0] if spread is not None else vid)
                if source is None or source.name != "convert" \
                        or graph.types[source.operands[0]].dtype not in _ENGINE_DTYPES:
                    operands.append(vid)
                    continue
                value = source.operands[0]
                if spread is not None:  # the broadcast, of the value before its test
                    kind = graph.types[value].dtype
                    graph.types[next_vid] = type(op.type)(spread.type.shape, kind)
                    ops.append(Op("broadcast_in_dim", (value,), (next_vid,), (graph.types[next_vid],),
                                  dict(spread.attrs)))
                    value, next_vid = next_vid, next_vid + 1
                operands.append(value)
            op = Op(op.name, tuple(operands), op.results, op.types, op.attrs)
        ops.append(op)
    graph.ops = ops
    return graph


# functions ScalarE evaluates with f(+-0) = +-0 (float64's, rounded once): numerics' ``_asinh`` guards torch-mlir's
# formula, which turned -0.0 into +0.0, as ``where(x == 0, x, asinh(x))``; on the folded op the guard selects
# what the function gives anyway, and costs a compare and a select pass (asinh 1.55 us against eager's 1.48). A
# float16/bfloat16 call computes in float32 between two converts (numerics.opmath: ``convert(f(convert(x)))``),
# which keep a zero's sign too (bfloat16 at 513 elements: 1.56 us against eager's 1.49 before the guard went)
ZERO_KEEPING = frozenset({"asinh"})


def _widened(vid: int, producers: dict, types: dict) -> int:
    """The float16/bfloat16 value a convert to float32 reads (exact, as opmath's widening), else ``vid``."""
    op = producers.get(vid)
    if op is not None and op.name == "convert" and len(op.operands) == 1 \
            and types[op.operands[0]].dtype in _NARROW_DTYPES and op.type.dtype == "float32":
        return op.operands[0]
    return vid


_NARROW_DTYPES = frozenset({"bfloat16", "float16"})


def _zero_guards(graph: Graph, producers: dict) -> None:
    """``select(x == 0, x, f(x))`` of a folded ``f`` in ``ZERO_KEEPING`` becomes ``f(x)`` (the same bits), and
    ``select(x == 0, x, convert(f(convert(x))))`` of a reduced float ``x`` its ``convert(f(convert(x)))``."""
    types = graph.types
    for i, op in enumerate(graph.ops):
        if op.name != "select" or len(op.operands) != 3:
            continue
        cond, x, y = (_through(v, producers, True, graph.types) for v in op.operands)
        test, result = producers.get(cond), producers.get(y)
        value = result
        if result is not None and result.name == "convert" and len(result.operands) == 1 \
                and types[result.operands[0]].dtype == "float32" and result.type.dtype in _NARROW_DTYPES:
            value = producers.get(result.operands[0])  # opmath's rounding back to the narrow dtype
        if test is None or value is None or value.name not in ZERO_KEEPING or test.name != "compare" \
                or test.attrs.get("comparison_direction") != "EQ" or len(test.operands) != 2 \
                or _through(test.operands[0], producers, True, graph.types) != x \
                or _widened(value.operands[0], producers, types) != x \
                or graph.splats.get(_through(test.operands[1], producers, True, graph.types)) != 0 \
                or result.type.shape != op.type.shape or result.type.dtype != op.type.dtype:
            continue
        graph.ops[i] = Op(result.name, result.operands, op.results, op.types, dict(result.attrs) if result is not value
                          else {})
        producers[op.result] = graph.ops[i]
