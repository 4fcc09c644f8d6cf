"""torch.compile(backend="neuron"): Dynamo graph -> AOTAutograd -> per-graph compile (``driver``).

The backend checks the shape contract (static shapes only: a symbolic size
raises ShapeContractError naming the input, the dimension and the fix) and
the devices (every tensor on one neuron device; host scalars allowed), counts
the graph and, when the same function is compiled again, the recompile and
its cause, then hands the graph to AOTAutograd. AOTAutograd traces forward
and backward with the core ATen decompositions (``aten.gelu_backward`` and
friends have no StableHLO lowering in torch-mlir; core ATen ops do) and calls
``driver.compile_graph`` for each; no Inductor is involved.
"""

from __future__ import annotations

import copy
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from device_impl.compiler import cache, costing, counters, driver, fallback, parity, patterns
from device_impl.compiler.errors import ShapeContractError, UnsupportedOpError, _UserFacing
from device_impl.kernels.overlap import non_overlapping_and_dense
from device_impl.runtime.config import CompilerConfig, read_compiler

log = logging.getLogger("torch_neuronx")
_CONFIG: list[CompilerConfig | None] = [None]


class DeviceError(_UserFacing):
    """Inputs of a compiled graph are not all on one neuron device."""


def settings() -> CompilerConfig:
    """The compiler's environment variables, read once (``reload_settings()`` re-reads them)."""
    if _CONFIG[0] is None:
        config = read_compiler()
        logging.getLogger("torch_neuronx").setLevel(config.log_level)
        _CONFIG[0] = config
    return _CONFIG[0]


def reload_settings() -> CompilerConfig:
    _CONFIG[0] = None
    return settings()


def _source_name(node: torch.fx.Node) -> str:
    source = getattr(node, "_dynamo_source", None)
    name = getattr(source, "name", None)
    if callable(name):
        name = name()
    return name or node.name


def symbolic_input(gm: torch.fx.GraphModule, example_inputs: list) -> tuple[str, int | None, str] | None:
    """(input name, dimension or None for a symbolic scalar, shape text) of the first symbolic input:
    a tensor's symbolic dimension if there is one, else a symbolic scalar (a size Dynamo lifted)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    scalar = None
    for node, example in zip(placeholders, example_inputs):
        value = node.meta.get("example_value", example)
        if isinstance(value, torch.Tensor):
            for dim, size in enumerate(value.shape):
                if isinstance(size, torch.SymInt):
                    return _source_name(node), dim, "[" + ", ".join(str(s) for s in value.shape) + "]"
        elif scalar is None and (isinstance(value, (torch.SymInt, torch.SymFloat))
                                 or isinstance(example, (torch.SymInt, torch.SymFloat))):
            scalar = (_source_name(node), None, str(value))
    return scalar


def dynamic_requested(example_inputs: list) -> bool:
    """Whether the user asked for symbolic shapes: ``torch.compile(dynamic=True)`` (Dynamo then stops
    assuming static sizes) or ``torch._dynamo.mark_dynamic`` on an input. Dynamo's own "automatic
    dynamic" (a second size seen) is not a request: the backend specialises per shape instead."""
    import torch._dynamo.config as dynamo_config

    if not dynamo_config.assume_static_by_default:
        return True
    return any(isinstance(e, torch.Tensor) and getattr(e, "_dynamo_dynamic_indices", None) for e in example_inputs)


def shape_contract_error(found: tuple[str, int | None, str]) -> ShapeContractError:
    name, dim, shape = found
    what = (f"input {name} has a symbolic size at dimension {dim} (shape {shape})" if dim is not None
            else f"{name} is a symbolic value ({shape})")
    return ShapeContractError(_shape_message(what, name))


def _shape_message(what: str, name: str) -> str:
    return (f"neuron compiles static shapes only, but {what}. torch.compile(..., dynamic=True) and "
            f"torch._dynamo.mark_dynamic make sizes symbolic; use dynamic=False (backend 'neuron' recompiles for "
            f"each new static shape on its own) and pad or bucket {name} to a few fixed sizes (a multiple of 128 or "
            f"a bucket list, with an attention mask for the padding, the device_impl.shapes approach), so each "
            f"distinct shape compiles once.")


def check_devices(gm: torch.fx.GraphModule, example_inputs: list) -> int:
    """The neuron device index every tensor input lives on (host 0-d tensors are scalars)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = _written_placeholders(gm)
    found: torch.device | None = None
    for node, example in zip(placeholders, example_inputs):
        if not isinstance(example, torch.Tensor):
            continue
        device = example.device
        if device.type != "neuron":
            if device.type == "cpu" and example.dim() == 0:
                if node in written:  # a host scalar may be read, never written (as in eager: dispatch/written.py)
                    target = found or torch.device("neuron", torch.neuron.current_device())
                    raise DeviceError(f"Expected out tensor to have device {target}, but got cpu instead (input "
                                      f"{_source_name(node)} is written by the graph: an out= or in-place target); "
                                      f"allocate it on {target}")
                continue
            raise DeviceError(f"torch.compile(backend='neuron') runs graphs on neuron devices, but input "
                              f"{_source_name(node)} is on {device}; move the model and its inputs to the device "
                              f"(model.to('neuron'), x.to('neuron')).")
        if found is None:
            found = device
        elif device != found:
            raise DeviceError(f"Expected all tensors to be on the same device, but found at least two devices, "
                              f"{found} and {device}! (input {_source_name(node)})")
    if found is not None:
        return found.index or 0
    return torch.neuron.current_device()


def _written_placeholders(gm: torch.fx.GraphModule) -> set:
    """Graph inputs Dynamo's graph writes: ``out=`` arguments and the self of in-place calls."""
    written: set = set()
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        out = node.kwargs.get("out")
        for value in out if isinstance(out, (list, tuple)) else [out]:
            if isinstance(value, torch.fx.Node):
                written.add(value)
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if name.endswith("_") and not name.endswith("__") and node.args and isinstance(node.args[0], torch.fx.Node):
            written.add(node.args[0])
    return written


def overlapping_written(gm: torch.fx.GraphModule, example_inputs: list) -> UnsupportedOpError | None:
    """Why the graph must run as Dynamo traced it: an input it writes (in place or out=) whose elements share
    memory (an expanded view: stride 0). AOTAutograd functionalises the write and copies the new values back
    with ``copy_``, which refuses such a destination ("more than one element of the written-to tensor refers
    to a single memory location"), where CPU's own in-place op may accept it: ``x.expand(n).zero_()`` fills the
    one shared element. Run eagerly, each in-place op follows CPU's own rule for it (zero_ and fill_ write,
    add_ raises), as the device's eager kernels do."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = _written_placeholders(gm) | _written_views(gm, placeholders)
    for node, example in zip(placeholders, example_inputs):
        if node in written and isinstance(example, torch.Tensor) and torch._debug_has_internal_overlap(example) == 1:
            return UnsupportedOpError("write to an overlapping input",
                                      f"input {_source_name(node)} (shape {list(example.shape)}, stride "
                                      f"{list(example.stride())}) is written and its elements share memory")
    return None


def _written_views(gm: torch.fx.GraphModule, placeholders: list) -> set:
    """Graph inputs written through a view of them: ``s`` of ``x.reshape(-1).split(1)`` passed to an in-place
    op writes x, and AOTAutograd copies x back whole (``torch._amp_update_scale_`` of each element of an
    expanded x raised "more than one element of the written-to tensor refers to a single memory location").
    A view shares its input's (fake) storage in the traced example values."""
    from torch.multiprocessing.reductions import StorageWeakRef

    def storage(node: Any) -> Any:
        value = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
        if not isinstance(value, torch.Tensor):
            return None
        try:
            return StorageWeakRef(value.untyped_storage())
        except (RuntimeError, NotImplementedError):
            return None
    inputs = {ref: node for node in placeholders if (ref := storage(node)) is not None}
    found: set = set()
    for node in _written_placeholders(gm):
        ref = storage(node)
        if node.op != "placeholder" and ref in inputs:
            found.add(inputs[ref])
    return found


# in-place random fills: CPU's kernels and the device's draw into self's elements in memory order
RANDOM_FILLS = frozenset({"bernoulli_", "random_", "uniform_", "normal_", "exponential_", "geometric_",
                          "cauchy_", "log_normal_"})


def strided_random_fill(gm: torch.fx.GraphModule) -> UnsupportedOpError | None:
    """Why the graph must run as Dynamo traced it: an in-place random fill (``RANDOM_FILLS``) of a tensor whose
    traced layout is not contiguous. AOTAutograd functionalises ``t.bernoulli_(p)`` into ``bernoulli(t, p)``,
    whose result is a fresh contiguous tensor filled in logical order, where the in-place op fills ``t``'s own
    (transposed, channels_last) memory in memory order: the same generator state gave other values at each
    position than the eager op (``x.t().clone().bernoulli_(0.3)``). Run eagerly, the fill is the eager one.
    Likewise a fill of any other tensor: random ops never compile (torch-mlir imports none), so the graph runs
    eagerly either way, and AOTAutograd's functional graph ran each fill into a fresh tensor that it then copied
    back into the input, device work eager does not do (eight fills of [2, 1, 513] inputs: 45.4 us against
    eager's 14.9), or ran ``bernoulli_(p)`` as its functional decomposition (8.5 us against eager's 6.4)."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method") or not node.args:
            continue
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        target = node.args[0]
        value = target.meta.get("example_value") if isinstance(target, torch.fx.Node) else None
        if name in RANDOM_FILLS and isinstance(value, torch.Tensor):
            if value.numel() > 1 and not value.is_contiguous():
                return UnsupportedOpError(f"{name} of a non-contiguous tensor",
                                          f"{name} fills a tensor of shape {list(value.shape)} and stride "
                                          f"{list(value.stride())} in memory order")
            return UnsupportedOpError(name, f"{name} is a random fill (random ops run eagerly); run as traced, it "
                                            f"fills its tensor in place, not a functional copy copied back")
    return None


def resized_out(gm: torch.fx.GraphModule) -> UnsupportedOpError | None:
    """Why the graph must run as Dynamo traced it: a call whose out= tensor has another shape than its result, so
    the call resizes it (CPU resizes with a UserWarning). Dynamo breaks the graph there the first time it traces the
    call ("Shape mismatch with out= tensor variant"), but after ``torch._dynamo.reset()`` it traced the same code
    into a graph whose traced result keeps the out tensor's old shape, and AOTAutograd's copy back of the
    functionalised result into the out tensor then failed at run time ("The size of tensor a (21) must match the
    size of tensor b (20)"; CPU's ``aot_eager`` fails too, at compile time). The result's shape is asked of the
    functional call on meta tensors of the traced values. Run eagerly, the device's out= kernel resizes as CPU's does."""
    def meta(value: Any) -> Any:  # a traced value as a meta tensor: no fake mode (a graph's values may mix two)
        if isinstance(value, torch.Tensor):
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
        return value

    for node in gm.graph.nodes:
        out = node.kwargs.get("out") if node.op == "call_function" else None
        if out is None:
            continue
        values = lambda a: torch.fx.map_arg(a, lambda n: meta(n.meta.get("example_value")))  # noqa: E731
        args, kwargs = values(node.args), {k: values(v) for k, v in node.kwargs.items() if k != "out"}
        outs = values(out if isinstance(out, (list, tuple)) else (out,))
        try:
            results = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - no meta kernel, or the call's own refusal, raised where it runs
            continue
        results = results if isinstance(results, (list, tuple)) else (results,)
        for value, result in zip(outs, results):
            if isinstance(value, torch.Tensor) and isinstance(result, torch.Tensor) and value.shape != result.shape:
                return UnsupportedOpError("out= of another shape than the result",
                                          f"out= of shape {list(value.shape)} is resized to {list(result.shape)}")
    return None


_INTEGERS = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
_REDUCED = frozenset({torch.float16, torch.bfloat16})
_ANY = None  # every dtype
# Calls whose compiled form (PyTorch's decomposition and its lowering) differs from CPU's kernel for inputs of some
# dtypes, found by the op suite's specs for them: a Dynamo graph holding one runs as traced, eagerly (counted), where
# the device's kernel follows CPU. Keyed by the op's name (torch.logit, x.logit(), torch.ops.aten.logit.default).
EAGER_CALLS: dict[str, tuple[frozenset | None, str]] = {
    "softshrink": (_ANY, "CPU's vector lambda gives +0.0 (and 0 for NaN) inside the band on full vector blocks, its "
                         "scalar lambda x * 0 elsewhere; the decomposition gives x * 0 everywhere"),
    "hardshrink": (_INTEGERS, "CPU refuses integer inputs (NotImplementedError); the decomposition computes them"),
    "log_sigmoid_forward": (_INTEGERS, "CPU refuses integer inputs; the decomposition computes them"),
    "log_sigmoid_backward": (_INTEGERS, "CPU refuses integer inputs; the decomposition computes them"),
    "softplus_backward": (_INTEGERS, "CPU refuses integer inputs; the decomposition computes them"),
    "copysign": (_INTEGERS, "CPU converts integer inputs to float first: a zero result's sign follows the operand"),
    "fmax": (frozenset({torch.float16}), "CPU's float16 tie of zeros of both signs returns its vector loop's pick"),
    "fmin": (frozenset({torch.float16}), "CPU's float16 tie of zeros of both signs returns its vector loop's pick"),
    "logaddexp2": (_REDUCED, "CPU's reduced-float logaddexp2 rounds each step to the dtype"),
    "logit": (_REDUCED, "CPU's reduced-float logit rounds each step to the dtype"),
    "threshold": (_INTEGERS, "CPU compares and replaces in the integer dtype"),
    "elu_backward": (_INTEGERS | _REDUCED, "CPU refuses integer inputs, and its reduced-float elu_backward keeps NaN "
                                          "where its vector and scalar loops differ"),
    **dict.fromkeys(("linalg_cross", "cross"), (_ANY, "CPU's scalar loop fuses a1 * b2 - a2 * b1 into one multiply-add "
                                                      "on AVX2/AVX-512 and rounds each step of a reduced float; the "
                                                      "decomposition does neither")),
    "renorm": (_ANY, "PyTorch's decomposition scales by maxnorm / (norm + 1e-7) in another order of roundings than "
                     "CPU's renorm_scale_factor and mul: an ULP or two off in float32 (the renorm_inf spec)"),
    "round": (frozenset(), "with decimals: CPU computes nearbyint(x * 10^d) / 10^d in float32, PyTorch's decomposition "
                           "multiplies by 10^-d (other rounding points; 0 * inf is not NaN for d <= -39)"),
}


def _elu_backward_in_place_negative(node: torch.fx.Node) -> bool:
    """elu_backward(..., is_result=True) with a negative alpha: CPU's RuntimeError ("In-place elu backward calculation
    is triggered with a negative slope"), which the decomposition never raises."""
    args = [*node.args, *node.kwargs.values()]
    return len(args) >= 5 and args[4] is True and isinstance(args[1], (int, float)) and args[1] < 0


# a call of EAGER_CALLS also runs eagerly, whatever its dtypes, where its predicate here holds
EAGER_WHEN = {"elu_backward": _elu_backward_in_place_negative,
              "round": lambda node: node.kwargs.get("decimals", node.args[1] if len(node.args) > 1 else 0) != 0}


def eager_calls(gm: torch.fx.GraphModule) -> UnsupportedOpError | None:
    """Why the graph must run as Dynamo traced it: a call of ``EAGER_CALLS`` with an input of a dtype it names."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        target = node.target
        name = (target if isinstance(target, str) else getattr(target, "__name__", "")).split(".")[0]
        entry = EAGER_CALLS.get(name)
        if entry is None:
            continue
        dtypes, why = entry
        when = EAGER_WHEN.get(name)
        if when is not None and when(node):
            return UnsupportedOpError(name, why)
        for arg in [*node.args, *node.kwargs.values()]:
            value = arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else None
            if isinstance(value, torch.Tensor) and (dtypes is None or value.dtype in dtypes):
                return UnsupportedOpError(f"{name} of {value.dtype}", why)
    return None


def _identity(gm: torch.fx.GraphModule) -> tuple[Any, str]:
    compile_id = gm.meta.get("dynamo_compile_id") if hasattr(gm, "meta") else None
    if compile_id is None:
        return id(gm), f"graph{id(gm) & 0xffff}"
    frame = getattr(compile_id, "frame_id", None)
    attempt = getattr(compile_id, "frame_compile_id", 0)
    return frame, f"g{frame}_{attempt}"


def _signature(gm: torch.fx.GraphModule, example_inputs: list) -> list[tuple[str, tuple[int, ...], str]]:
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [(_source_name(n), tuple(int(s) for s in e.shape), str(e.dtype)) for n, e in zip(placeholders, example_inputs)
            if isinstance(e, torch.Tensor)]


def _aot(gm: torch.fx.GraphModule, example_inputs: list, graph: str, device_index: int, config: CompilerConfig):
    """AOTAutograd over a static graph; each of its graphs compiles through ``driver``.

    A graph AOTAutograd compiles for inference (nothing requires grad, or grad mode is off) whose inference
    graph turns out *plain* (``_plain_inference``) is indexed by its Dynamo-level key (``cache.dynamo_key``):
    a warm compile of it, in this process or a new one, links the cached program straight away, skipping
    AOTAutograd's tracing (most of a warm compile: 0.4 of 0.65 s on the tiny Llama), legalization and the
    import. The program is the same one AOTAutograd's path links; only its wrapper is skipped, which for a
    plain graph passes the inputs through and returns the outputs unchanged."""
    from torch._dynamo.backends.common import aot_autograd

    inference = not torch.is_grad_enabled() or not any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)
    indexed = inference and config.neff_cache and not config.preserve_artifacts and not _has_state(gm)
    parameters = [isinstance(x, torch.nn.Parameter) for x in example_inputs]  # the programs' weight layout
    key_of_graph = cache.dynamo_key(gm, example_inputs, {**driver.flags(), "parameters": parameters}) \
        if indexed else None
    if key_of_graph is not None:
        entry = cache.lookup_dynamo(config.neff_cache_dir, key_of_graph)
        run = driver.linked(*entry, f"{graph}_inference", device_index, config) if entry is not None else None
        if run is not None:
            return lambda *args: run(list(args))

    def compiler(kind: str, timed: bool):
        def compile_aot(aot_gm: torch.fx.GraphModule, aot_inputs: list):
            begun = time.perf_counter()
            try:
                weights = _static_inputs(aot_gm) if kind != "backward" else frozenset()
                plan = _output_plan(aot_gm) if kind != "backward" else None
                strided = _traced_strides(aot_gm) if kind != "backward" else {}
                if plan is None:
                    run = driver.compile_graph(aot_gm, f"{graph}_{kind}", device_index, config, weights)
                    if strided:  # outputs the program stores in their traced layout itself: no copy after it
                        run = driver.restrided(run, strided)
                else:
                    run = driver.compile_graph(plan.graph, f"{graph}_{kind}", device_index, config, weights,
                                               plan.into)
                    run = _reassembled(run, plan)
                if kind == "backward":
                    run = _as_traced(aot_gm, run)
                if strided:
                    run = _restrided(run, strided)
                if kind == "inference" and key_of_graph is not None and getattr(run, "cache_key", None) \
                        and not strided and plan is None and getattr(run, "index_error", IndexError) is IndexError \
                        and _plain_inference(aot_gm, len(example_inputs)):  # the index links IndexError programs
                    cache.index_dynamo(config.neff_cache_dir, key_of_graph, run.cache_key, run.kept)
                return run
            finally:
                if timed:  # the backward graph compiles lazily, outside the forward's compile
                    counters.count("compile_seconds", time.perf_counter() - begun)
        return compile_aot

    backend = aot_autograd(fw_compiler=compiler("forward", False), bw_compiler=compiler("backward", True),
                           inference_compiler=compiler("inference", False), decompositions=_decompositions())
    from device_impl.compiler.numerics import traced_forms

    with traced_forms():  # CPU's arithmetic in decompositions bound to an op's Autograd key (numerics.py)
        return backend(gm, example_inputs)


def _static_inputs(aot_gm: torch.fx.GraphModule) -> frozenset[int]:
    """The positions of a forward or inference graph's inputs AOTAutograd marks static (parameters and buffers,
    the inputs cudagraphs keeps at fixed addresses): the ones a program may keep in TensorE's layout
    (``layout``). Empty where the graph's inputs are not AOTAutograd's flat arguments one for one."""
    from torch._guards import TracingContext

    context = TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None) if context is not None else None
    indices = getattr(meta, "static_input_indices", None)
    placeholders = sum(1 for n in aot_gm.graph.nodes if n.op == "placeholder")
    if not indices or len(getattr(meta, "input_info", ())) != placeholders:
        return frozenset()
    return frozenset(int(i) for i in indices)


def _traced_strides(aot_gm: torch.fx.GraphModule) -> dict[int, tuple[int, ...]]:
    """{output index: the strides AOTAutograd traced for it} for the user-visible outputs of a forward or
    inference graph whose traced layout is dense but not contiguous; empty when its metadata is unavailable.

    A compiled program writes every output contiguous, where CPU and the device's eager kernels give
    ``x.clone()`` of a transposed, channels_last or overlapping x the layout ``empty_like`` picks. The layout
    is visible to what runs after the graph: ``x.clone().resize_(n)`` breaks the graph at ``resize_``, which
    then reads the clone's storage in memory order (a transposed clone gave the elements in logical order).
    Outputs that only write back a mutated input (AOTAutograd copies them in with ``copy_``), that AOTAutograd
    replaces by a view it regenerates, or that are saved for the backward keep the program's layout: nothing
    reads their strides. The copy costs a device copy per such output and call."""
    from torch._functorch._aot_autograd.schemas import OutputType

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    try:
        first = len(meta.tokens) + meta.num_mutated_inp_runtime_indices
        last = meta.num_forward_returns
        # a user output AOTAutograd regenerates as a view of an input or of another output: its strides come
        # from that view, not from the program's tensor (intermediate bases, after the user outputs, count)
        regenerated = {first + i for i, info in enumerate(meta.output_info)
                       if info.output_type not in (OutputType.non_alias, OutputType.unsafe_view_alias,
                                                   OutputType.alias_of_intermediate_base_is_user_output)}
    except AttributeError:
        return {}
    outputs = aot_gm.graph.output_node().args[0]
    found: dict[int, tuple[int, ...]] = {}
    for index, node in enumerate(outputs if isinstance(outputs, (list, tuple)) else [outputs]):
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if not first <= index < last or index in regenerated or not isinstance(value, torch.Tensor) \
                or value.numel() < 2:
            continue
        if not value.is_contiguous() and non_overlapping_and_dense(value):
            found[index] = tuple(int(s) for s in value.stride())
    return found


@dataclass
class OutputPlan:
    """Which of a forward or inference graph's outputs its program computes (``_output_plan``).

    ``graph``: the AOT graph returning only those (``computed``: their positions in the original outputs, in
    order); ``others``: {position: ("same", p) the tensor at computed position p | ("input", k) the call's
    input k itself | ("view", k, chain) the traced view ops ``chain`` ((op, args after the first, kwargs)
    each) replayed on the call's input k | ("shape", size, stride, dtype) a tensor of that layout whose
    values nothing reads};
    ``into``: {position in ``graph``'s outputs: input index} for an in-place op's result, which the program may
    write into that input (``Executable.writable_into``)."""

    graph: torch.fx.GraphModule
    computed: list[int]
    others: dict[int, tuple]
    into: dict[int, int]


# AOTAutograd's output kinds that its runtime wrapper rebuilds from an input or another output: the graph's own
# tensor only gives the shape its view replay checks (``gen_alias_from_base``), or nothing (``is_input``)
_REPLAYED = ("alias_of_input", "alias_of_intermediate", "alias_of_intermediate_save_as_output",
             "alias_of_intermediate_base_is_user_output")


def _output_plan(aot_gm: torch.fx.GraphModule) -> OutputPlan | None:
    """The outputs of a forward or inference graph its program need not compute, read from AOTAutograd's traced
    metadata (``TracingContext.fw_metadata``); None where there are none or the metadata is not the expected.

    Issue 21 asks every single op's compiled device time to be at most its eager kernel's; a program that
    writes what nobody reads lost on each of these:

    * a user output AOTAutograd regenerates as a view of an input or of another output (``x.view(n)``,
      ``x.select(0, 1)``, ``x.t()``, dropout with p=0): its wrapper replays the traced views on the base and
      reads only the graph tensor's shape; eager launches nothing, the program copied the view (1.1 us);
    * a saved-for-backward output that is an input (``x * w`` saves x and w): the input itself, as eager
      autograd saves it, not a device copy;
    * a saved-for-backward output that is a view of an input (``adaptive_avg_pool1d`` saves
      ``x.unsqueeze(-2)`` for its 2-d backward): the traced view ops replayed on the input, which launch
      nothing, as eager autograd saves that view (the program copied it: 208 HBM bytes against eager's 80);
    * a saved-for-backward output that is also an earlier output, or an ``alias`` of one (``exp`` saves its
      result): the same tensor, not the same bytes written twice (the forward of ``torch.exp`` moved twice eager's HBM bytes);
    * an in-place op's result (``x.add_(y)``, ``x.zero_()``): AOTAutograd copies it into the input after the
      call, a second launch; written into the input's memory (``into``), that copy moves nothing.

    An input that is mutated is never returned as a saved tensor (the program may write it), and a mutated
    input that requires grad or is saved keeps a fresh output."""
    from torch._functorch import config as functorch_config

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    try:
        if meta.tokens or meta.num_outputs_rng_offset or getattr(meta, "num_graphsafe_rng_states", 0):
            return None
        mutated = list(meta.mutated_inp_runtime_indices)
        infos = list(meta.output_info)
        saved_from = meta.num_forward
        replay = bool(functorch_config.view_replay_for_aliased_outputs)
        inputs = list(meta.input_info)
    except AttributeError:
        return None
    placeholders = [n for n in aot_gm.graph.nodes if n.op == "placeholder"]
    output = aot_gm.graph.output_node()
    values = list(output.args[0]) if isinstance(output.args[0], (tuple, list)) else None
    if values is None or len(placeholders) != len(inputs) or saved_from > len(values):
        return None
    index_of = {node: k for k, node in enumerate(placeholders)}
    written = {mutated[i] for i in range(len(mutated))}
    first_user = len(mutated)
    computed: list[int] = []
    at: dict[Any, int] = {}  # node -> its first computed position
    others: dict[int, tuple] = {}
    for p, node in enumerate(values):
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if isinstance(value, torch.Tensor) and first_user <= p < first_user + len(infos):
            info = infos[p - first_user]
            kind = info.output_type.name
            if kind == "is_input" or (kind in _REPLAYED and replay and info.view_meta_sequence is not None
                                      and not any(vm.has_symbolic_inputs for vm in info.view_meta_sequence.sequence)):
                others[p] = ("shape", tuple(value.shape), tuple(value.stride()), value.dtype)
                continue
        if isinstance(value, torch.Tensor) and p >= saved_from:
            while node.target is torch.ops.aten.alias.default and isinstance(node.args[0], torch.fx.Node):
                node = node.args[0]  # a saved alias of a value (``exp`` saves its result so): the value itself
            if node in index_of and index_of[node] not in written:
                others[p] = ("input", index_of[node])
                continue
            base, chain = _view_chain(node)  # a contiguous one only: the backward's schedule was recorded so
            if chain and base in index_of and index_of[base] not in written and value.is_contiguous():
                others[p] = ("view", index_of[base], chain)
                continue
            if node in at:
                others[p] = ("same", at[node])
                continue
        if isinstance(node, torch.fx.Node) and node not in at:
            at[node] = p
        computed.append(p)
    returned = {node for node in values if isinstance(node, torch.fx.Node)}
    into: dict[int, int] = {}
    for i, k in enumerate(mutated):
        info = inputs[k]
        if info.mutates_data and not info.mutates_metadata and not info.mutates_storage_metadata \
                and not info.requires_grad and placeholders[k] not in returned and i in computed:
            into[computed.index(i)] = k
    if not others and not into:
        return None
    graph = copy.deepcopy(aot_gm.graph)
    out = graph.output_node()
    out.args = (tuple(out.args[0][p] for p in computed),)
    trimmed = torch.fx.GraphModule(aot_gm, graph)
    trimmed.graph.eliminate_dead_code()
    trimmed.recompile()
    return OutputPlan(trimmed, computed, others, into)


def _is_view_op(target: Any) -> bool:
    """Whether ``target`` is an aten overload returning one tensor that aliases its first argument without
    writing it (``unsqueeze``, ``view``, ``permute``, ``slice``...): its schema's alias annotations say so."""
    schema = getattr(target, "_schema", None)
    if schema is None or len(schema.returns) != 1 or not schema.arguments:
        return False
    returned, first = schema.returns[0].alias_info, schema.arguments[0].alias_info
    return str(schema.returns[0].type) == "Tensor" and returned is not None and first is not None \
        and not returned.is_write and not first.is_write and returned.before_set == first.before_set


def _view_chain(node: Any) -> tuple[Any, tuple]:
    """(the node a chain of view ops starts from, the chain in call order as (op, args after the first,
    kwargs)); an empty chain where ``node`` is no view or a view op's other arguments are traced values."""
    chain: list[tuple] = []
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and _is_view_op(node.target) \
            and node.args and isinstance(node.args[0], torch.fx.Node):
        rest = node.args[1:]
        if _has_node((rest, node.kwargs)):
            return node, ()
        chain.append((node.target, tuple(rest), dict(node.kwargs)))
        node = node.args[0]
    return node, tuple(reversed(chain))


def _has_node(value: Any) -> bool:
    """Whether an FX argument structure holds a traced value anywhere."""
    found = []
    torch.fx.node.map_arg(value, lambda n: found.append(n) or n)
    return bool(found)


def _reassembled(run: Callable[[list], list], plan: OutputPlan) -> Callable[[list], list]:
    """``run`` of ``plan.graph`` returning the original graph's outputs: the computed ones, and in the other
    positions the tensor each names (``OutputPlan.others``)."""
    total = len(plan.computed) + len(plan.others)

    def run_all(args: list) -> list:
        results = list(run(args))
        outputs: list[Any] = [None] * total
        for p, value in zip(plan.computed, results):
            outputs[p] = value
        device = next((r.device for r in results if isinstance(r, torch.Tensor)), None) or next(
            (a.device for a in args if isinstance(a, torch.Tensor) and a.device.type == "neuron"), None)
        for p, (how, *what) in plan.others.items():
            if how == "input":
                outputs[p] = args[what[0]]
            elif how == "view":
                k, chain = what
                value = args[k]
                for op, rest, kwargs in chain:
                    value = op(value, *rest, **kwargs)
                outputs[p] = value
            elif how == "shape":
                size, stride, dtype = what
                outputs[p] = torch.empty_strided(size, stride, dtype=dtype, device=device)
        for p, (how, *what) in plan.others.items():
            if how == "same":
                outputs[p] = outputs[what[0]]
        return outputs

    return _wrapping(run_all, run)


def _restrided(run: Callable[[list], list], strided: dict[int, tuple[int, ...]]) -> Callable[[list], list]:
    """``run`` whose outputs in ``strided`` come back with their traced strides (``_traced_strides``): the
    program's contiguous result copied into a tensor of that layout on the device, as eager's kernels write it."""
    def run_strided(args: list) -> list:
        outputs = list(run(args))
        for index, stride in strided.items():
            value = outputs[index]
            if isinstance(value, torch.Tensor) and value.stride() != stride:
                target = torch.empty_strided(value.shape, stride, dtype=value.dtype, device=value.device)
                outputs[index] = target.copy_(value)
        return outputs

    return _wrapping(run_strided, run)


def _wrapping(wrapper: Callable[[list], list], run: Callable[[list], list]) -> Callable[[list], list]:
    """``wrapper`` (a boxed call around ``run``) carrying what callers read off a compiled run: its executable,
    kept buffers, index-error class and cache key."""
    wrapper._boxed_call = True  # type: ignore[attr-defined]
    for name in ("executable", "kept", "index_error", "cache_key"):
        if hasattr(run, name):
            setattr(wrapper, name, getattr(run, name))
    return wrapper


def _as_traced(aot_gm: torch.fx.GraphModule, run: Callable[[list], list]) -> Callable[[list], list]:
    """A backward graph's run that converts each saved tensor to the dtype AOTAutograd traced for it. A forward
    that falls back to eager (``fallback.py``) returns what the device's kernels return, which is CPU's dtype and
    can differ from the trace's: ``_native_batch_norm_legit_functional`` of bfloat16 saves bfloat16 statistics
    on CPU and on the device, float32 in PyTorch's decomposition, and the compiled backward refused them
    ("input 2 is torch.bfloat16 [4], compiled for torch.float32 [4]"). The forward's user-visible outputs keep
    the kernel's (CPU's) dtype; only the backward's copies convert."""
    placeholders = [n for n in aot_gm.graph.nodes if n.op == "placeholder"]
    dtypes = [n.meta["val"].dtype if isinstance(n.meta.get("val"), torch.Tensor) else None for n in placeholders]

    def converted(args: list) -> list:
        for i, dtype in enumerate(dtypes[:len(args)]):
            if dtype is not None and isinstance(args[i], torch.Tensor) and args[i].dtype != dtype:
                args[i] = args[i].to(dtype)
        return run(args)

    converted._boxed_call = True  # type: ignore[attr-defined]
    return converted


def _has_state(gm: torch.fx.GraphModule) -> bool:
    """Parameters or buffers registered on the Dynamo graph (AOTAutograd lifts them in front of the inputs)."""
    return any(True for _ in gm.parameters()) or any(True for _ in gm.buffers())


def _plain_inference(aot_gm: torch.fx.GraphModule, n_inputs: int) -> bool:
    """Whether AOTAutograd's runtime wrapper around this inference graph is a pass-through, read from the
    metadata it traced (``TracingContext.fw_metadata``): the graph takes the Dynamo graph's inputs one for one
    (none deduplicated, no parameters lifted), mutates none of them, returns only fresh tensors (no output
    aliases an input or another output), and carries no effect tokens, RNG states or tensor subclasses.
    Anything else, or metadata this torch does not provide, is not plain: that graph always takes
    AOTAutograd's path."""
    from torch._functorch._aot_autograd.schemas import OutputType, PlainTensorMeta

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    try:
        placeholders = sum(1 for n in aot_gm.graph.nodes if n.op == "placeholder")
        return (placeholders == n_inputs == len(meta.input_info)
                and not any(i.mutates_data or i.mutates_metadata or i.mutates_storage_metadata
                            for i in meta.input_info)
                and all(o.output_type == OutputType.non_alias for o in meta.output_info)
                and meta.num_intermediate_bases == 0 and not meta.tokens
                and not getattr(meta, "num_graphsafe_rng_states", 0)
                and getattr(meta, "grad_enabled_mutation", None) is None
                and all(isinstance(m, PlainTensorMeta) or isinstance(m, int)
                        for m in (*meta.subclass_inp_meta, *meta.subclass_fw_graph_out_meta)))
    except AttributeError:
        return False


def _decompositions() -> dict:
    """AOTAutograd's table: PyTorch's core ATen decompositions plus the compiler's own (numerics.py).

    ``core_aten_decompositions()`` is export's table: it adds a decomposition for every
    CompositeImplicitAutograd op, which AOTAutograd's tracing decomposes on its own anyway, and
    building it costs about 0.1 s, a fifth of a warm compile in a new process. The post-autograd
    core table is the same table without those entries (the decoder block, Llama, a training step and
    17 ops' forward and backward graphs came out identical with both). A torch without that private
    helper gets export's table. Built once per process; each compile gets its own copy."""
    return dict(_decomposition_table())


@functools.lru_cache(maxsize=1)
def _decomposition_table() -> dict:
    import torch._decomp as decomp

    from device_impl.compiler import (activations, factories, loops, opaque_cnn, opaque_indexing, opaque_pads,
                                      opaque_products, opaque_resample, pointwise)
    from device_impl.compiler.numerics import DECOMPOSITIONS

    from device_impl.compiler.opaque import WHOLE

    core = getattr(decomp, "_core_aten_decompositions_post_autograd", None) or decomp.core_aten_decompositions
    # opaque_cnn, opaque_products: ops whose cut calls stay whole (native_batch_norm_backward, dot, vdot)
    # pointwise: heaviside and logit in the eager kernels' passes, fewer than PyTorch's forms
    # activations: silu's float32 calls stay whole, cut as ScalarE's one silu; factories: float32 linspace whole
    table = {**core(), **DECOMPOSITIONS, **loops.DECOMPOSITIONS, **opaque_cnn.DECOMPOSITIONS,
             **opaque_products.DECOMPOSITIONS, **pointwise.DECOMPOSITIONS, **activations.DECOMPOSITIONS,
             **factories.DECOMPOSITIONS}
    # opaque_pads, opaque_indexing: padding, index_copy whole where cut, else the decomposition they had
    table.update(opaque_pads.decompositions(table))
    table.update(opaque_indexing.decompositions(table))
    table.update(opaque_resample.decompositions(table))  # upsample calls whole where the eager kernel is cheaper
    for op in WHOLE:  # cut whole (compiler/opaque.py): their steps run the eager kernels' programs
        table.pop(op, None)
    for op in _CONVERTED:
        table.pop(op, None)
    table.update(_IMPORTABLE)
    return table


def _remainder_scalar_tensor(self: Any, other: torch.Tensor) -> torch.Tensor:
    """remainder(scalar, tensor) as remainder.Tensor of a 0-d tensor of the result dtype (torch-mlir converts no
    Scalar_Tensor form; numerics' remainder.Tensor rewrite then computes CPU's formula, as for a tensor, folded into
    VectorE's one op, expansions.REWRITTEN). float32 only: the integer and float16/bfloat16 forms stay op by op
    (1.76 and 2.70 us against the eager kernel's 1.34), so those calls keep the op and run eagerly."""
    dtype = torch.result_type(self, other)
    if dtype != torch.float32:
        return NotImplemented
    return torch.ops.aten.remainder.Tensor(torch.scalar_tensor(self, dtype=dtype, device=other.device), other)


def _narrow_copy(self: torch.Tensor, dim: int, start: int, length: int) -> torch.Tensor:
    """narrow_copy as narrow (its checks: CPU's IndexError for a dim out of range, RuntimeError for a start or
    length out of range) and a clone: a slice, which torch-mlir converts (it converts no narrow_copy)."""
    return torch.narrow(self, dim, start, length).clone()


def _diagonal(self: torch.Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> torch.Tensor:
    """diagonal as a strided slice: dim1 and dim2 moved last and flattened, the diagonal every (m + 1)-th element
    from its first (torch-mlir converts no diagonal; a slice with a step is a strided access, no gather). CPU's
    checks first: IndexError for a dim out of range, RuntimeError for identical dims."""
    from torch._prims_common import canonicalize_dim

    d1, d2 = canonicalize_dim(self.dim(), dim1), canonicalize_dim(self.dim(), dim2)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    n, m = self.shape[d1], self.shape[d2]
    rest = [d for d in range(self.dim()) if d not in (d1, d2)]
    flat = self.permute(*rest, d1, d2).reshape(*[self.shape[d] for d in rest], n * m)
    start, length = (offset, max(0, min(n, m - offset))) if offset >= 0 else (-offset * m, max(0, min(n + offset, m)))
    if length == 0:
        return flat[..., :0]
    return flat[..., start:start + (length - 1) * (m + 1) + 1:m + 1]


# ccovb: ops torch-mlir converts none of, said as ops it converts
_IMPORTABLE = {
    torch.ops.aten.diagonal.default: _diagonal,
    torch.ops.aten.remainder.Scalar_Tensor: _remainder_scalar_tensor,
    torch.ops.aten.narrow_copy.default: _narrow_copy,
}


# Ops torch-mlir converts whole, better than their decomposition: ``all`` is ``not any(not x)`` there, two more
# passes over a float input than a reduction with ``and`` (torch.all of 7695 floats: 1.87 us against the eager
# kernel's 1.84; kept whole, one compare and the reduction, as ``any``)
_CONVERTED = (torch.ops.aten.all.default, torch.ops.aten.all.dim)  # all.dims: torch-mlir converts no all.dims


def _specialize(gm: torch.fx.GraphModule, args: tuple) -> tuple[torch.fx.GraphModule, list]:
    """A copy of ``gm`` with its symbolic-size inputs replaced by this call's values: a static graph."""
    import copy

    static = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    kept = []
    for node, value in zip([n for n in static.graph.nodes if n.op == "placeholder"], args):
        if isinstance(value, torch.Tensor):
            kept.append(value)
            continue
        for user in list(node.users):
            user.args = torch.fx.map_arg(user.args, lambda n, node=node, value=value: value if n is node else n)
            user.kwargs = torch.fx.map_arg(user.kwargs, lambda n, node=node, value=value: value if n is node else n)
        static.graph.erase_node(node)
    static.recompile()
    return static, kept


def _split_scalar_outputs(static: torch.fx.GraphModule, kept: list) -> dict[int, Any]:
    """Take a specialized graph's non-tensor outputs out of it: returns {output position: value}, and leaves
    ``static`` returning only its tensor outputs.

    A graph Dynamo traced with symbolic sizes may return a size it computed (``return y, x.shape[-1] * 2``, or,
    after a graph break, ``n // 4`` of a size it was handed); specialized to one call's sizes that output is a
    Python number, which the StableHLO import cannot type (it raised torch-mlir's ValueError "Cannot cast type to
    RankedTensorType (from Type(i64))" on every call from the second size on, where a static compile never has
    such an output: Dynamo folds a static size into the code). Such an output depends only on sizes and the
    substituted values (Dynamo breaks the graph at ``.item()``), so it is evaluated here, once per specialization,
    by the graph's own nodes that compute it, reading the call's tensors' metadata only, and spliced back into
    the program's results (``_Spliced``)."""
    import copy

    output = next(n for n in static.graph.nodes if n.op == "output")
    results = output.args[0]
    if not isinstance(results, (tuple, list)):
        return {}
    scalars: dict[int, Any] = {}
    computed: list[int] = []
    for i, arg in enumerate(results):
        if not isinstance(arg, torch.fx.Node):
            scalars[i] = arg  # a substituted input returned as it is
        elif not isinstance(arg.meta.get("example_value"), (torch.Tensor, type(None))):
            computed.append(i)
    if computed:
        probe = torch.fx.GraphModule(static, copy.deepcopy(static.graph))
        probe_output = next(n for n in probe.graph.nodes if n.op == "output")
        probe_results = probe_output.args[0]
        probe_output.args = (tuple(probe_results[i] for i in computed),)
        probe.graph.eliminate_dead_code()
        probe.recompile()
        with torch.no_grad():
            values = probe(*kept)
        scalars.update(zip(computed, values))
    if scalars:
        output.args = (tuple(arg for i, arg in enumerate(results) if i not in scalars),)
        static.recompile()
    return scalars


class _Spliced:
    """A specialized program's tensor results with its non-tensor outputs (``_split_scalar_outputs``) put back in
    their places; ``program`` None where the graph reads no tensor and returns none (nothing to run)."""

    def __init__(self, program: Callable | None, scalars: dict[int, Any], tensor_count: int) -> None:
        self.program, self.scalars, self.tensor_count = program, scalars, tensor_count

    def __call__(self, *args: Any) -> list:
        tensors = iter(self.program(*args) if self.program is not None else ())
        return [self.scalars[i] if i in self.scalars else next(tensors)
                for i in range(len(self.scalars) + self.tensor_count)]


def _tracing_context() -> Any:
    """A tracing context for a specialization's compile. Dynamo compiles a static graph inside its own, where
    AOTAutograd leaves the forward's metadata that ``_traced_strides`` and ``_static_inputs`` read; a symbolic
    graph is specialized when Dynamo's runtime calls it, outside any, so its outputs came back contiguous where
    eager's ``x.clone()`` of a transposed x keeps x's strides (harness.dynamic: a transposed clone's ``random_``,
    run eagerly after the graph, filled memory in another order than eager's at every size after the first)."""
    from torch._guards import TracingContext, tracing
    from torch._subclasses.fake_tensor import FakeTensorMode

    return tracing(TracingContext(FakeTensorMode(allow_non_fake_inputs=True)))


class PerShape:
    """What Dynamo's automatic dynamic shapes hand the backend (a graph with symbolic sizes that the
    user did not ask for) compiled the way the neuron backend compiles everything: statically, once
    per distinct input signature, each new one counted as a recompile with its shapes."""

    def __init__(self, gm: torch.fx.GraphModule, frame: Any, graph: str, device_index: int, config: CompilerConfig):
        self.gm, self.frame, self.graph, self.device_index, self.config = gm, frame, graph, device_index, config
        self.compiled: dict[tuple, Any] = {}

    def __call__(self, *args):
        key = tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else ("value", a)
                    for a in args)
        entry = self.compiled.get(key)
        if entry is None:
            started = time.perf_counter()
            static, kept = _specialize(self.gm, args)
            scalars = _split_scalar_outputs(static, kept)
            name = f"{self.graph}_s{len(self.compiled)}"
            counters.graph_received(self.frame, name, _signature(self.gm, list(args)))
            overlapping = overlapping_written(static, kept)  # this call's tensors: is a written one expanded?
            count = len(next(n for n in static.graph.nodes if n.op == "output").args[0])
            try:
                if overlapping is not None:  # as compile_dynamo_graph: AOTAutograd's copy-back would refuse it
                    program = fallback.dynamo_graph(static, overlapping, name, self.config)
                elif kept or count or not scalars:
                    with _tracing_context():
                        program = _aot(static, kept, name, self.device_index, self.config)
                else:
                    program = None  # only sizes computed: nothing to run
                entry = self.compiled[key] = _Spliced(program, scalars, count) if scalars else program
            finally:
                counters.count("compile_seconds", time.perf_counter() - started)
        return entry(*[a for a in args if isinstance(a, torch.Tensor)])


def compile_dynamo_graph(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any):
    config = settings()
    refused = parity.out_refusal(gm, example_inputs)  # out= dtype rules AOTAutograd's functionalisation drops
    if refused is not None:
        return parity.raising_program(refused)
    refused = parity.empty_refusal(gm, example_inputs)  # CPU's size checks of zero-size calls decompositions skip
    if refused is not None:
        return parity.raising_program(refused)
    refused = parity.fill_value_refusal(gm)  # CPU's checked conversion of a fill value the reference casts
    if refused is not None:
        return parity.raising_program(refused)
    patterns.rewrite_attention(gm)  # written-out attention -> SDPA: one flash-attention step (issue 21)
    started = time.perf_counter()
    symbolic = symbolic_input(gm, example_inputs)
    if symbolic is not None and dynamic_requested(example_inputs):
        raise shape_contract_error(symbolic)
    device_index = check_devices(gm, example_inputs)
    frame, graph = _identity(gm)
    if symbolic is not None:  # automatic dynamic: compile per concrete shape when called
        strided = strided_random_fill(gm) or resized_out(gm) or eager_calls(gm)  # the symbolic graph's layouts
        if strided is not None:
            counters.graph_received(frame, graph, _signature(gm, example_inputs))
            return fallback.dynamo_graph(gm, strided, graph, config)
        return PerShape(gm, frame, graph, device_index, config)
    counters.graph_received(frame, graph, _signature(gm, example_inputs))
    overlapping = (overlapping_written(gm, example_inputs) or strided_random_fill(gm) or resized_out(gm)
                   or eager_calls(gm))
    if overlapping is not None:  # AOTAutograd's copy-back would refuse what the eager op accepts
        return fallback.dynamo_graph(gm, overlapping, graph, config)
    try:
        return _aot(gm, example_inputs, graph, device_index, config)
    finally:
        counters.count("compile_seconds", time.perf_counter() - started)


# gather, reflection padding's backward and embedding_dense_backward: cut whole or decomposed by modelled cost
costing.install(_decompositions, settings)
