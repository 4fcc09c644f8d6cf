"""A graph torch-mlir cannot import because of a few ops: those ops run as their eager kernels, the rest compiles.

torch-mlir has no conversion for some ATen ops the device has hand-written kernels for (angle, frexp, nextafter,
cummax, kthvalue, mode, renorm, softshrink, fmax, linalg_cross, scatter_reduce, embedding_bag, the fused RNN cells
...). One such op in a graph failed the whole import, and the whole graph ran eagerly (``fallback.eager``, counted in
``stats()['fallbacks_by_op']``): about 40 of the op spec sweep's float32 specs (issue 21). compiler/opaque.py cuts
ops whose eager kernels are tile programs that take HBM arrays; an eager kernel in general takes device tensors
and opens its own launch, so it cannot be a step inside a program's launch.

Here the graph is split instead (``split``): after an import fails, each node is asked whether torch-mlir imports it
alone (``imports_alone``: the node in a graph of its own, imported once per op and argument signature, memoised); a
node it refuses whose op has a native neuron kernel (``eager_kernel``: the dispatch table's native tier, static
output shapes, no data-dependent output shape, no random stream) is an *eager cut*. The graph is split into runs of
nodes (``torch.fx.passes.split_module``, the original order kept): each run of eager cuts calls their kernels (in
adaptive eager mode, as ``fallback.eager`` runs a graph, so consecutive cuts fuse where adaptive eager fuses them),
each run between them compiles through ``driver.compile_graph`` as a graph of its own. The eager cuts compute with the
device's own kernels, so their bits are eager's; the compiled runs' are the compiler's. The split is kept only where
its first call cost no more device time than the whole graph run eagerly (``_Chosen``). Counted per op in
``stats()['eager_cuts_by_op']``; a graph that still has an op no kernel covers falls back whole, as before.
"""

from __future__ import annotations

import copy
import operator
import threading
from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler import counters, opaque
from device_impl.compiler.errors import ImportFailure

_MEMO: dict[tuple, bool] = {}
_LOCK = threading.Lock()
_KERNEL_TIERS = frozenset({"native", "composite"})
# ops whose output shapes or values a static graph cannot know, or that draw from the random stream (the compiled
# graph does not model the device's counter-based stream)
_REFUSED_TAGS = ("dynamic_output_shape", "data_dependent_output", "nondeterministic_seeded")


def _tensors(value: Any) -> list[torch.Tensor] | None:
    """The tensors of a node's ``meta['val']`` (a tensor or a tuple/list of tensors), or None for anything else."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return None


def eager_kernel(node: torch.fx.Node) -> bool:
    """Whether ``node`` may run as its eager kernel between compiled runs: an ATen overload the dispatch table
    lowers natively (or a composite of such kernels: cummax calls ``_cummax_helper``), reading some tensor (not a
    factory), whose results are non-empty neuron tensors of static shapes, with no data-dependent output shape and no
    random draw (those stay with the whole-graph fallback)."""
    from device_impl.dispatch import TABLE

    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if any(getattr(torch.Tag, tag, None) in target.tags for tag in _REFUSED_TAGS):
        return False
    if not node.all_input_nodes:
        # a factory (empty_strided(...).fill_(1) of the op spec sweep): a compiled run it fed made a contiguous
        # result that was then copied into the factory's strides, 1.13 -> 3.13 us against the graph's eager run
        return False
    results = _tensors(node.meta.get("val"))
    if results is None or any(t.device.type != "neuron" or t.numel() == 0 or t.dtype.is_complex
                              or any(not isinstance(s, int) for s in t.shape) for t in results):
        return False
    return TABLE.lookup(target.name()).tier.value in _KERNEL_TIERS


def _signature(value: Any) -> Any:
    """A hashable description of an argument: a node as its meta's shape and dtype, containers element-wise."""
    if isinstance(value, torch.fx.Node):
        tensors = _tensors(value.meta.get("val"))
        described = tuple((tuple(t.shape), str(t.dtype)) for t in tensors) if tensors else repr(value.meta.get("val"))
        return ("node", described)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_signature(v) for v in value))
    if isinstance(value, dict):
        return tuple(sorted((k, _signature(v)) for k, v in value.items()))
    return repr(value)


def _alone(node: torch.fx.Node) -> torch.fx.GraphModule:
    """``node`` in a graph of its own: its node arguments placeholders (their metas kept), its tensor results the
    outputs."""
    graph = torch.fx.Graph()
    placeholders: dict[torch.fx.Node, torch.fx.Node] = {}

    def placeholder(arg: torch.fx.Node) -> torch.fx.Node:
        if arg not in placeholders:
            new = graph.placeholder(f"arg{len(placeholders)}")
            new.meta = dict(arg.meta)
            placeholders[arg] = new
        return placeholders[arg]

    args = torch.fx.map_arg(node.args, placeholder)
    kwargs = torch.fx.map_arg(node.kwargs, placeholder)
    copy = graph.call_function(node.target, args, kwargs)
    copy.meta = dict(node.meta)
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        outputs = [copy]
    else:
        outputs = []
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"{node.target}'s result is {type(value).__name__}, not tensors")
        for i, item in enumerate(value):
            got = graph.call_function(operator.getitem, (copy, i))
            got.meta = {"val": item}
            outputs.append(got)
    graph.output(tuple(outputs))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def imports_alone(node: torch.fx.Node) -> bool:
    """Whether torch-mlir imports ``node`` in a graph of its own (legalized as ``driver`` legalizes a graph), asked
    once per op and argument signature."""
    from device_impl.compiler import importer, legalize

    key = (str(node.target), _signature(node.args), _signature(node.kwargs))
    with _LOCK:
        known = _MEMO.get(key)
    if known is not None:
        return known
    try:
        alone = _alone(node)  # inside: a node whose meta is no tensor (a higher-order op's) is not known to import
        legalize.legalize(alone)
        importer.to_stablehlo(alone)
        answer = True
    except ImportFailure:
        answer = False
    except Exception:  # noqa: BLE001 - a rewrite or the importer failing otherwise: not known to import
        answer = False
    with _LOCK:
        _MEMO[key] = answer
    return answer


def cuts(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    """The nodes of ``gm`` to run as eager kernels: each one torch-mlir refuses alone and an eager kernel covers.
    Empty when some node torch-mlir refuses has no such kernel (the graph then falls back whole)."""
    found: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if opaque.cuttable(node):  # opaque's cuts are steps of the compiled program
            continue
        if node.target in opaque.CUTTERS:  # a call its cutter refused: left eager whole, as that cutter decided
            return set()  # (a bfloat16 batch norm whose float32-traced statistics are read: CPU's are bfloat16)
        if imports_alone(node):
            continue
        if not eager_kernel(node):
            return set()
        found.add(node)
    return found


class _Compiled(torch.nn.Module):
    """A compiled run of the split graph, called as the submodule it replaces (its outputs a tuple or one value)."""

    def __init__(self, run: Callable[[list], list], single: bool) -> None:
        super().__init__()
        self.run = run
        self.single = single

    def forward(self, *args: Any) -> Any:
        outputs = self.run(list(args))
        return outputs[0] if self.single else tuple(outputs)


class _Eager(torch.nn.Module):
    """A run of eager cuts: their kernels in adaptive eager mode, flushed when it returns (``fallback.eager``)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__()
        self.gm = gm

    def forward(self, *args: Any) -> Any:
        from device_impl.eager import mode as eager_mode

        with eager_mode.thread_eager_mode("adaptive"):
            return self.gm(*args)


def _as_tuple(sub: torch.fx.GraphModule) -> bool:
    """Make ``sub`` return a tuple (``driver.compile_graph`` takes graphs whose output is a tuple); whether it
    returned one value."""
    output = sub.graph.output_node()
    value = output.args[0]
    if isinstance(value, (tuple, list)):
        return False
    output.args = ((value,),)
    sub.recompile()
    return True


class _Chosen:
    """The split graph or the whole graph run eagerly, whichever cost less device time on its first call.

    Before the split the whole graph ran eagerly (``fallback.eager``: adaptive eager, which fuses neighbouring ops of
    the graph into one launch), and the split can cost more: a compiled run is a launch of its own, can cost more
    than the eager kernels it replaces (gru_cell's and lstm_cell's products with the values a training graph saves:
    the op spec sweep's compiled gru_cell 11.53 -> 13.43 us, lstm_cell_state 58.67 -> 133.75 split), and loses the
    adaptive fusion across a cut. So the first call runs the graph both ways, each timed on the device clock
    (deterministic), returns the split's results where it was no costlier and keeps it; otherwise (or where the split
    raised: an eager kernel's result unlike its trace) it keeps the whole graph's eager run, announced and counted as
    the fallback it was (``fallback``, made only then)."""

    def __init__(self, split_gm: torch.fx.GraphModule, whole: torch.fx.GraphModule, fallback: Callable[[], Callable],
                 cut_ops: list[str], device_index: int) -> None:
        self.split_gm, self.whole, self.fallback = split_gm, whole, fallback
        self.cut_ops, self.device_index = cut_ops, device_index
        self.run: Callable[[list], list] | None = None
        self.lock = threading.Lock()

    def split(self, args: list) -> list:
        outputs = self.split_gm(*args)
        return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]

    def __call__(self, args: list) -> list:
        if self.run is None:
            with self.lock:
                if self.run is None:
                    return self._choose(args)
        return self.run(args)

    def _choose(self, args: list) -> list:
        from device_impl._core import C

        clock = lambda: C.device_time_ns(self.device_index)  # noqa: E731
        begun = clock()
        whole = _Eager(self.whole)(*args)
        eager_ns, begun = clock() - begun, clock()
        try:
            outputs = self.split(args)
        except Exception:  # noqa: BLE001 - an eager cut's result not as traced (its dtype, say): the eager run stands
            outputs = None
        split_ns = clock() - begun
        if outputs is not None and split_ns <= eager_ns:
            for op in self.cut_ops:
                counters.eager_cut(op)
            self.run = self.split
            return outputs
        self.run = self.fallback()
        return list(whole) if isinstance(whole, (tuple, list)) else [whole]


def split(gm: torch.fx.GraphModule, graph: str, device_index: int,
          compile_graph: Callable[[torch.fx.GraphModule, str], Callable[[list], list]],
          fallback: Callable[[], Callable[[list], list]]) -> Callable[[list], Any] | None:
    """``gm`` (an AOT graph whose import failed) as compiled runs around its eager cuts (see module docstring), or
    None when it has no eager cut, or a node torch-mlir refuses that no eager kernel covers. ``compile_graph(sub,
    name)``: ``driver.compile_graph`` of a run; ``fallback()``: ``fallback.eager`` of the whole graph, made (and
    announced) only where the split costs more (``_Chosen``); both passed in: driver calls this module."""
    from torch.fx.passes.split_module import split_module

    eager = cuts(gm)
    if not eager:
        return None
    whole = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    part = {}
    current, kind = 0, None
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        this = node in eager or (node.target is operator.getitem and node.args[0] in eager)
        if kind is not None and this != kind:
            current += 1
        kind = this
        part[node] = (current, this)
    split_gm = split_module(gm, None, lambda node: part[node][0], keep_original_order=True)
    kinds = {index: this for index, this in part.values()}
    for index, this in kinds.items():
        name = f"submod_{index}"
        sub = getattr(split_gm, name, None)
        if sub is None:
            continue
        if this or not any(n.op == "call_function" for n in sub.graph.nodes):
            setattr(split_gm, name, _Eager(sub))
            continue
        single = _as_tuple(sub)
        setattr(split_gm, name, _Compiled(compile_graph(sub, f"{graph}_part{index}"), single))
    chosen = _Chosen(split_gm, whole, fallback, sorted(str(node.target) for node in eager), device_index)

    def run(args: list) -> list:
        return chosen(args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
