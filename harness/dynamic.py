"""Automatic dynamic shapes: one ``torch.compile``'d function called at three sizes, against CPU eager.

A user writes ``torch.compile(fn)`` with the default ``dynamic=None``: the first call compiles with static
sizes; a call at another size fails the guards and Dynamo recompiles with symbolic sizes (automatic dynamic:
the dims that changed become SymInts, ``torch.SymInt`` in the backend's example inputs); every later size runs
through that one symbolic graph. The op suite's compiled mode (``harness.modes.Compiled``, ``dynamic=False``)
never reaches the second and third steps, where a backend reads a SymInt (``csrc/attention.cpp`` read ``sizes``
where it had to read ``sym_sizes``: compiled SDPA failed on its second sequence length, and no harness check saw
it). This check does.

Per op spec and dtype (``SOURCE``/``CHECK`` in the store; op specs, not OpInfo: a spec's ``draw`` under a
``harness.strategies.Target`` with one seed gives the same call (expression, parameters, dtypes, ranks, layouts)
at any free-axis size, so a sequence is three draws of one seed at ``SIZES``; OpInfo's samples vary their
non-tensor arguments with their sizes, so few of them form a sequence), ``sequence`` builds three cases that
differ only in sizes; ``run_sequence`` compiles one function of the case's tensors with the device's backend
and the default ``dynamic``, calls it on each case in order, and judges each call as ``harness.runner`` judges
a compiled case (same tolerances, error parity, inputs after the call, gradients). A spy around the backend
records what Dynamo compiled at each call: call 1 static graphs only, call 2 at least one graph with symbolic
sizes, call 3 none (the symbolic graph reused). Where Dynamo took another path (it compiled nothing: CPU and the
device both raised while tracing; or it recompiled at call 3), the calls are still judged, but a sequence whose
calls all pass is stored as ``skip`` with what Dynamo did, since it did not test the symbolic path.

The harness never imports the device: the backend is looked up by the device type's name, as
``torch.compile(backend=<name>)`` does.
"""

from __future__ import annotations

import itertools
import time
import warnings
import zlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from harness import modes, repro
from harness import strategies as hs
from harness.cases import Case
from harness.runner import (F, Result, _check, _evaluate, _reset_stats, _stats, called_ops, cpu_side, manual_seed)
from harness.specs import SPECS, OpSpec
from harness.values import materialize

SOURCE = "dynamic"  # the store's source column of this check's results
CHECK = "dynamic_sizes"  # the store's check_name
# The free-axis sizes of the three calls: at least 2 (Dynamo specializes sizes 0 and 1, so a dim taking one of
# them would compile again instead of reusing the symbolic graph), none of the lead sizes the strategies draw (1, 2,
# 3, 5: duck sizing would tie a changed dim to an equal static one), and the last beyond a 128-partition tile, so the
# symbolic graph meets a size whose tiling differs from the first two.
SIZES = (6, 11, 130)
SEARCH_DRAWS = 96  # draws of other seeds tried for a spec whose sizes are its own (matmul, conv): see sequence()
# The value domain of the sequence's tensors of the case's dtype: ordinary values, so a failure is about sizes.
DOMAINS = {"bool": "bool", **{d: "normal" for d in hs.FLOAT_DTYPES}, **{d: "small_int" for d in hs.INT_DTYPES}}
_SYMBOLIC_PATH = "symbolic graph compiled at call 2 and reused at call 3"


@dataclass(frozen=True)
class Sequence3:
    """Three cases of one spec and dtype that differ only in their tensors' sizes (and values)."""

    spec: str
    dtype: str
    cases: tuple[Case, ...]
    how: str  # "free axis" (one seed at SIZES) or "seed search" (draws of several seeds with one signature)
    layout: str = "contiguous"  # the layout asked of the tensors of the case's dtype (harness.values.LAYOUTS)


def _signature(spec: OpSpec, case: Case) -> tuple:
    """What must be equal across a sequence: the call text (so its parameters) and each tensor's dtype, rank,
    layout and whether it requires grad."""
    names = [f"x{i}" for i in range(len(case.tensors))]
    return (spec.render(case.params, names),
            tuple((t.dtype, len(t.shape), t.layout, t.requires_grad) for t in case.tensors))


def _varying_dims_fit(cases: Sequence[Case]) -> bool:
    """Whether ``cases`` take Dynamo's automatic-dynamic path, with something to compute: no tensor is empty; each
    call's shapes differ from every earlier call's;
    every dim that changes along the sequence changes at call 2 (automatic dynamic marks dynamic the dims that
    changed then; one changing only at call 3 would recompile) and is at least 2 in every call (Dynamo specializes
    0 and 1); and from call 2 on, the changing dims that are equal stay equal (duck sizing gives equal sizes one
    symbol)."""
    shapes = [tuple(c.shapes) for c in cases]
    if len(set(shapes)) != len(shapes) or any(0 in t.shape for c in cases for t in c.tensors):
        return False  # an empty tensor (index_select's index of 0 elements) makes every size's result empty
    varying = []
    for position, tensor in enumerate(cases[0].tensors):
        for dim in range(len(tensor.shape)):
            sizes = [c.tensors[position].shape[dim] for c in cases]
            if len(set(sizes)) > 1:
                if min(sizes) < 2 or (len(sizes) > 1 and sizes[1] == sizes[0]):
                    return False
                varying.append(sizes)
    pattern = [[[a[k] == b[k] for b in varying] for a in varying] for k in range(1, len(cases))]
    return all(p == pattern[0] for p in pattern)


def _cpu_raises(spec: OpSpec, case: Case) -> bool:
    """Whether CPU rejects the call: a sequence is of calls that compute (a refused one compiles no graph)."""
    names = [f"x{i}" for i in range(len(case.tensors))]
    try:
        with torch.no_grad():
            _evaluate(spec.render(case.params, names), [materialize(t, "cpu") for t in case.tensors], None, "cpu")
    except Exception:  # noqa: BLE001 - any refusal
        return True
    return False


def _draw(spec: OpSpec, dtype: str, size: int | None, seed: int, layout: str = "contiguous") -> Case | None:
    from harness.design import _draw as draw_targeted  # the designed cases' seeded draw under a Target

    try:
        tensors, params = draw_targeted(spec, hs.Target(dtype, DOMAINS.get(dtype), layout, size), seed)
    except Exception:  # noqa: BLE001 - a target the spec's constraints cannot meet (an empty range)
        return None
    return Case(spec.name, dtype, tuple(tensors), params, "compiled", "neuron", source=SOURCE)


def sequence(spec: OpSpec, dtype: str, device: str = "neuron", layout: str = "contiguous") -> Sequence3 | str:
    """The spec's sequence of three calls in ``dtype``, its tensors of that dtype made in ``layout`` on the device
    where the spec lets them have it, or why it has none.

    First one seed drawn at each of ``SIZES`` (the strategies give the free axis the target size and draw
    everything else from the same choices). A spec whose sizes are its own (matmul's m/k/n, a convolution's)
    draws the same shapes three times, and one whose parameters follow its sizes (a narrow's length) draws
    three calls; then up to ``SEARCH_DRAWS`` seeds are drawn without a target size and the first three of one
    signature (``_signature``) with distinct shapes are taken."""
    base = zlib.crc32(f"dynamic|{spec.name}|{dtype}".encode() + (f"|{layout}".encode() if layout != "contiguous"
                                                                  else b""))
    drawn = [_draw(spec, dtype, size, base, layout) for size in SIZES]
    if all(c is not None for c in drawn):
        cases = tuple(replace(c, device=device) for c in drawn)
        if len({_signature(spec, c) for c in cases}) == 1 and cases[0].tensors and _varying_dims_fit(cases) and \
                not any(_cpu_raises(spec, c) for c in cases):
            return _realized(Sequence3(spec.name, dtype, cases, "free axis", layout))
    groups: dict[tuple, list[Case]] = {}
    for k in range(SEARCH_DRAWS):
        case = _draw(spec, dtype, None, base + 1 + k, layout)
        if case is None or not case.tensors:
            continue
        group = groups.setdefault(_signature(spec, case), [])
        if _varying_dims_fit(group + [case]) and not _cpu_raises(spec, case):
            group.append(case)
        if len(group) == len(SIZES):
            return _realized(Sequence3(spec.name, dtype, tuple(replace(c, device=device) for c in group),
                                       "seed search", layout))
    if drawn[0] is not None and not drawn[0].tensors:
        return "the call has no tensor inputs (its sizes are parameters, constants of the graph)"
    return (f"no three draws of one call with different sizes (the free axis at {SIZES}, then {SEARCH_DRAWS} seeds): "
            f"its parameters follow its sizes")


def _realized(seq: Sequence3) -> Sequence3 | str:
    """``seq``, or why it does not test its layout: no tensor took it (the spec's tensors are contiguous only, or
    too small for it), so the contiguous sequence already covers the call."""
    if seq.layout == "contiguous" or any(t.layout == seq.layout for t in seq.cases[0].tensors):
        return seq
    return f"no tensor takes the {seq.layout} layout (the contiguous sequence covers the call)"


class _Spy:
    """The device's backend, noting for each graph Dynamo hands it whether any input has symbolic sizes."""

    def __init__(self, backend: str) -> None:
        import torch._dynamo as dynamo  # a plain `import torch._dynamo` would make `torch` local here

        self.inner: Callable = dynamo.lookup_backend(backend)
        self.graphs: list[bool] = []  # per compiled graph: symbolic (True) or static

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Callable:
        self.graphs.append(any(_symbolic(x) for x in example_inputs))
        return self.inner(gm, example_inputs, **kwargs)


def _symbolic(value: Any) -> bool:
    if isinstance(value, torch.SymInt):
        return True
    if isinstance(value, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*value.shape, *value.stride()))
    return False


_COUNTER = itertools.count()


def _compiled_function(expression: str, names: list[str], device: str, spy: _Spy) -> tuple[Callable, dict]:
    """``def dynamic_<n>(x0, x1, ...): return <expression>`` compiled with the default ``dynamic``. Its code gets a
    file and a name of its own: Dynamo keeps automatic-dynamic state per (file, line, name) of a code object
    (profile-guided ``CodeId``), so every ``eval``'d ``<lambda>`` of ``<string>`` would share it and a later
    sequence's first call would already compile symbolically (seen: the second of two such lambdas); and it caches
    a graph break's continuation by its code object, which compares by value, file name left out, so two
    sequences of one expression would share one continuation and its state (seen: add_out, mul_out)."""
    scope: dict[str, Any] = {"torch": torch, "F": F, "device": device}
    scope.update(modes._CONTINUATIONS)
    n = next(_COUNTER)
    exec(compile(f"def dynamic_{n}({', '.join(names)}):\n    return {expression}\n", f"<harness.dynamic #{n}>", "exec"),
         scope)  # noqa: S102 - the spec's own call text
    return torch.compile(scope[f"dynamic_{n}"], backend=spy), scope


def _path(graphs: list[list[bool]], errors: list[bool]) -> str:
    """What Dynamo did along the sequence; ``_SYMBOLIC_PATH`` when it took the path this check is for."""
    first, second, third = graphs
    if any(first):
        # Dynamo made a value symbolic before any size changed (a storage's nbytes() after a graph break: set_)
        return "call 1 compiled a graph with symbolic inputs: Dynamo made a value symbolic before any size changed"
    if not second:
        return ("call 2 compiled no graph" + (" (it raised while tracing)" if errors[1] else "") +
                ": no symbolic graph to reuse")
    if not any(second):
        return "call 2 recompiled with static sizes only (Dynamo specialized every changed size)"
    if third:
        return f"call 3 compiled {len(third)} graph(s) again: Dynamo did not reuse the symbolic graph"
    return _SYMBOLIC_PATH


def run_sequence(seq: Sequence3, xfails=None, device: str | None = None) -> list[Result]:
    """The sequence's three calls through one compiled function, each judged against CPU eager; one Result per
    call (``check`` = ``CHECK``), in order."""
    spec = SPECS[seq.spec]
    device = device or seq.cases[0].device
    cases = [replace(c, device=device, mode="compiled", source=SOURCE) for c in seq.cases]
    names = [f"x{i}" for i in range(len(cases[0].tensors))]
    expression = spec.render(cases[0].params, names)
    unavailable = modes.get("compiled").available(device)
    if unavailable:
        return [Result(c, "skip", unavailable, expression=expression, check=CHECK) for c in cases]
    spy = _Spy(torch.device(device).type)
    compiled, scope = _compiled_function(expression, names, device, spy)
    graphs: list[list[bool]] = []
    errors: list[bool] = []
    results: list[Result] = []
    try:
        for case in cases:
            results.append(_call(spec, case, expression, compiled, spy, graphs, errors))
    finally:
        modes._CONTINUATIONS.update((k, v) for k, v in scope.items() if k.startswith("__resume_at_"))
    path = _path(graphs, errors)
    for i, (result, case) in enumerate(zip(results, cases)):
        where = f"call {i + 1} of {len(cases)} {[list(s) for s in case.shapes]}"
        result.message = f"{where}: {result.message}" if result.message else where
        if result.verdict == "pass" and path != _SYMBOLIC_PATH:
            result.verdict = "skip"
        result.message += f" ({path})" if path != _SYMBOLIC_PATH or i else f" ({path}; {seq.how})"
        if xfails is not None and result.verdict in ("pass", "fail"):
            entry = _xfail(xfails, case, result.verdict == "fail", result.message)
            if entry is not None:
                result.xfail_reason = f"{entry.category}: {entry.reason}"
                result.verdict = "xfail" if result.verdict == "fail" else "xpass"
        if result.verdict in ("fail", "xpass"):
            result.reproducer = repro.render(spec, replace(case, mode="dynamic"), expression, result.comparison,
                                             earlier=cases[:i])
    return results


def _xfail(xfails, case: Case, failed: bool, message: str):
    """This check's own entries (``source = "dynamic"``: Dynamo's limitations with symbolic sizes), then, for a
    failure, the spec's compiled-mode entries (each call is that spec's case in compiled mode: a difference known
    there is known here). The spec's entries are read, not counted: whether one is stale or fixed is judged by the
    spec's own cases (a sequence's calls are not the draws it was written for)."""
    entry = xfails.match(case, failed, message)
    if entry is not None or not failed:
        return entry
    as_spec = replace(case, source="spec")
    return next((e for e in xfails.entries if e.matches(as_spec) and e.explains(message)), None)


def _call(spec: OpSpec, case: Case, expression: str, compiled: Callable, spy: _Spy, graphs: list[list[bool]],
          errors: list[bool]) -> Result:
    result = Result(case, "pass", expression=expression, check=CHECK)
    cpu_inputs, device_inputs, seed, expected, cpu_error = cpu_side(case, expression, result)
    device_error = actual = None
    _reset_stats(case.device)
    before = len(spy.graphs)
    try:
        manual_seed(seed, case.device)
        started = time.perf_counter()
        with modes._no_guard_latency_profile(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
            actual = compiled(*device_inputs)
        result.device_ms = (time.perf_counter() - started) * 1e3
    except Exception as e:  # noqa: BLE001
        device_error = e
    graphs.append(spy.graphs[before:])
    errors.append(device_error is not None)
    comparison = _check(spec, case, expression, cpu_error, device_error, expected, actual, cpu_inputs,
                        device_inputs, seed)
    result.device_ops = _stats(case.device)
    result.called = called_ops(spec, case, expression, seed)
    result.comparison = comparison
    result.verdict = "pass" if comparison.ok else "fail"
    result.message = comparison.message
    return result


# Always in the default run's sample: the op families whose compiled form reads sizes in the device's own C++ or
# Python (tests/test_compile.py's SIZE_SWEEP: compiled SDPA failed on its second sequence length there), and set_,
# whose graph break hands the backend a size to compute with.
ALWAYS = ("sdpa", "mm", "bmm", "layer_norm", "conv2d", "embedding", "cross_entropy", "cat", "index_select", "topk",
          "sort", "interpolate_bilinear", "max_pool2d", "softmax", "set_")
SAMPLE_EVERY = 5  # besides ALWAYS, one spec in SAMPLE_EVERY (by a hash of its name) in the default eager run


def specs_for(mode: str) -> list[OpSpec]:
    """The specs this check runs in ``mode``'s op-suite run: every spec in compiled mode (``make report``), in eager
    (``make test``'s default run) a fixed sample, ``ALWAYS`` and one in ``SAMPLE_EVERY`` by a hash of the name (about
    80 specs, ~30 s), none in adaptive (its compiles would be eager's sample's again)."""
    if mode == "compiled":
        return list(SPECS.values())
    if mode == "eager":
        return [s for s in SPECS.values() if s.name in ALWAYS or zlib.crc32(s.name.encode()) % SAMPLE_EVERY == 0]
    return []


# The layouts each spec's sequences are made in: in compiled mode also transposed (a symbolic size is in the
# strides too: the first sweep with it found two bugs contiguous inputs could not show, compiler/backend.py's
# specialized outputs losing a transposed clone's strides, and an in-place random fill of one compiled in logical
# order); the default eager run's sample contiguous only.
LAYOUTS = {"compiled": ("contiguous", "transposed"), "eager": ("contiguous",)}


def variants_for(spec: OpSpec, mode: str) -> list[tuple[str, str]]:
    """(dtype, layout) of each sequence of ``spec`` in ``mode``'s run."""
    return [(d, layout) for d in dtypes_for(spec, mode) for layout in LAYOUTS.get(mode, ())]


def dtypes_for(spec: OpSpec, mode: str) -> list[str]:
    """float32, else the spec's first dtype, in every mode. A sequence tests how the backend handles sizes; the
    dtype's arithmetic is every other case's (a first sweep in bfloat16 too, 277 specs, found nothing float32's
    did not, and doubled the compiled mode's cost, which ``make report`` caps)."""
    return ["float32" if "float32" in spec.dtypes else spec.dtypes[0]]


__all__ = ["CHECK", "SOURCE", "SIZES", "Sequence3", "sequence", "run_sequence", "specs_for", "dtypes_for",
           "variants_for"]
