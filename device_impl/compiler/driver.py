"""Compile one AOTAutograd graph (forward, backward or inference) into a callable.

FX legalization -> torch-mlir import (StableHLO) -> cache lookup (memory,
then disk) -> passes (``build``) -> NEFF -> cache -> linked ``Executable``.
A graph with an op the passes cannot lower, or that torch-mlir cannot import,
falls back to eager on neuron (``fallback.py``). Artifacts go to
``TORCH_NEURONX_DEBUG_DIR`` when preserved.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import time
from typing import Any, Callable

import torch

from device_impl.compiler import (artifacts, build, cache, conv_padding, counters, eager_cut, fallback, importer,
                                   legalize, neff, opaque, parity)
from device_impl.compiler.errors import ImportFailure, UnsupportedOpError
from device_impl.compiler.executor import Executable, record_schedule
from device_impl.engine.constants import PLATFORM
from device_impl.runtime.config import CompilerConfig

log = logging.getLogger("torch_neuronx.compiler")
aten = torch.ops.aten


def flags() -> dict[str, Any]:
    """What besides the StableHLO decides the generated program (part of the cache key)."""
    from device_impl.compiler import memory

    return {"platform": PLATFORM.name, "group_sbuf_bytes": memory.GROUP_SBUF_BYTES, "fusion": True}


# Ops torch-mlir lowers to a formula that differs from CPU's beyond rounding, with no exact rewrite yet:
# their graphs run eagerly, where the device's kernel follows CPU.
_EAGER_ONLY = {
    torch.ops.aten.logcumsumexp.default: "torch-mlir lowers it as log(cumsum(exp(x))), which overflows where CPU's "
                                          "running log-add-exp stays finite (x = 1e4 gives inf)",
}


# Out-of-range indices: the program's gather and scatter steps raise IndexError (compiler/gather.py), as CPU's
# index, index_put, index_select, embedding and nll_loss do; CPU's gather and scatter kernels raise RuntimeError
# with the same words. Which aten op a gather/scatter node came from is its ``original_aten`` (the op AOTAutograd
# was decomposing when it traced the node: nll_loss_forward's gather stays an IndexError).
_INDEXING = frozenset({
    aten.gather.default, aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce,
    aten.scatter_add.default, aten.scatter_reduce.two, aten.index.Tensor, aten.index_put.default,
    aten._unsafe_index.Tensor, aten._unsafe_index_put.default, aten.index_select.default, aten.embedding.default,
})
_RUNTIME_ERROR_INDEXING = frozenset({aten.gather, aten.scatter, aten.scatter_add, aten.scatter_reduce})


def index_error_class(gm: torch.fx.GraphModule) -> type[Exception]:
    """The exception class CPU raises for an out-of-range index in this graph: RuntimeError when every indexing
    node comes from an op whose CPU kernel raises it (gather, scatter; index_select and index_add where CPU,
    asked at the node's shapes, does: ``parity.out_of_range_class``), else IndexError (also for a graph that
    mixes both: the program cannot tell which step's index it was)."""
    classes = set()
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _INDEXING:
            origin = getattr(node.meta.get("original_aten"), "overloadpacket", None)
            probed = parity.out_of_range_class(node)  # index_select, index_add: CPU's class depends on shapes
            classes.add(probed or (RuntimeError if origin in _RUNTIME_ERROR_INDEXING else IndexError))
    return RuntimeError if classes == {RuntimeError} else IndexError


def _unimportable(gm: torch.fx.GraphModule) -> UnsupportedOpError | None:
    """Graphs torch-mlir must not see: outputs left on the host, zero-size tensors (torch-mlir
    20261001 crashes the process on some of them, e.g. clamp of a [1, 128, 0] tensor), and complex
    tensors (it aborts the process converting float32 to complex64: ``x.cfloat()``; the engines have
    no complex arithmetic, so such graphs run eagerly, where complex ops take the counted fallback)."""
    values = gm.graph.output_node().args[0]
    for v in values if isinstance(values, (tuple, list)) else [values]:
        meta = getattr(v, "meta", {}).get("val") if v is not None else None
        if isinstance(meta, torch.Tensor) and meta.device.type != "neuron":
            return UnsupportedOpError("device transfer", f"the graph returns a tensor on {meta.device}")
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _EAGER_ONLY:
            return UnsupportedOpError(str(node.target), _EAGER_ONLY[node.target])
        meta = node.meta.get("val")
        for t in meta if isinstance(meta, (tuple, list)) else [meta]:
            if isinstance(t, torch.Tensor) and t.numel() == 0:
                return UnsupportedOpError("zero-size tensor", f"{node.name} has shape {list(t.shape)}; torch-mlir "
                                          f"does not import zero-size tensors")
            if isinstance(t, torch.Tensor) and t.dtype.is_complex:
                return UnsupportedOpError("complex tensor", f"{node.name} is {t.dtype}; the compiler has no complex "
                                          f"arithmetic")
    return None


def _empty_outputs(gm: torch.fx.GraphModule) -> list | None:
    """(shape, dtype) per output when every output is empty (or None): nothing to compute."""
    values = gm.graph.output_node().args[0]
    specs = []
    for v in values if isinstance(values, (tuple, list)) else [values]:
        if v is None:
            specs.append(None)
            continue
        meta = getattr(v, "meta", {}).get("val")
        if not isinstance(meta, torch.Tensor) or meta.numel() != 0 or meta.device.type != "neuron":
            return None
        specs.append((tuple(meta.shape), meta.dtype))
    return specs


def _empty_program(specs: list, device_index: int) -> Callable[[list], list]:
    def run(args: list) -> list:
        device = next((a.device for a in args if isinstance(a, torch.Tensor) and a.device.type == "neuron"),
                      torch.device("neuron", device_index))
        counters.count("executions")
        return [None if s is None else torch.empty(s[0], dtype=s[1], device=device) for s in specs]

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


# Failures of the import that say nothing about the graph: never memoized
_TRANSIENT = (MemoryError, OSError, RecursionError)


def _imported(work: torch.fx.GraphModule, cuts: list, memo: tuple[str, str] | None = None) -> tuple[Any, str]:
    """torch-mlir's module of ``work`` and the text that keys it: the StableHLO, and the options of the
    ops ``opaque.cut`` took out (they are not in the StableHLO). ``memo``: (cache directory, ``cache.import_key``)
    of the import memo, which gives the module parsed from the text an earlier import printed (any compiler
    version), or raises the ImportFailure it met; None: always import."""
    entry = cache.lookup_import(*memo) if memo is not None else None
    if entry is not None and "failure" in entry:
        raise ImportFailure(entry["failure"], entry["op"])
    module = importer.from_text(entry["stablehlo"]) if entry is not None else None
    if module is not None:
        counters.count("import_memo_hits")
        text = entry["stablehlo"]
    else:
        try:
            module = importer.to_stablehlo(work)
        except ImportFailure as failure:
            if memo is not None and not isinstance(failure.__cause__, _TRANSIENT):
                cache.memo_import(*memo, {"failure": str(failure), "op": failure.op})
            raise
        text = str(module)
        if memo is not None:
            cache.memo_import(*memo, {"stablehlo": text})
    if cuts:
        text += "\n// cuts: " + json.dumps([c.key() for c in cuts], sort_keys=True)
    return module, text


def compile_graph(gm: torch.fx.GraphModule, graph: str, device_index: int, config: CompilerConfig,
                  weights: frozenset[int] = frozenset(), into: dict[int, int] | None = None
                  ) -> Callable[[list], list]:
    """``weights``: positions of the inputs that hold still between executions (parameters, buffers), whose
    products' operands the program may keep in TensorE's layout (``layout``); part of the cache keys.
    ``into``: {output position: input position} for outputs that are an input's new value, which AOTAutograd
    copies into that input after the call (an in-place op): the program writes them into the input's memory
    where ``Executable.writable_into`` finds it safe, so that copy is a tensor copied onto itself."""
    started = time.perf_counter()
    build_flags = {**flags(), "weights": sorted(weights)}
    original = gm
    index_error = index_error_class(gm)
    refused = parity.refusal(gm)
    if refused is not None:  # an argument CPU refuses: the program raises as the eager op would
        return parity.raising_program(refused)
    specs = _empty_outputs(gm)
    if specs is not None:  # only empty outputs (zero-size shapes): no program to build or run
        counters.count("compiles")
        return _empty_program(specs, device_index)
    try:
        if config.preserve_artifacts:  # first the graph as AOT gave it, replaced below by what torch-mlir sees
            artifacts.write(config, graph, fx_code=gm.print_readable(print_output=False))
        work = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
        legalize.legalize(work)
        kept = legalize.drop_none_outputs(work)
        n_inputs = sum(1 for n in work.graph.nodes if n.op == "placeholder")
        n_outputs = len(work.graph.output_node().args[0]) if isinstance(work.graph.output_node().args[0],
                                                                          (tuple, list)) else 1
        cuts = opaque.cut(work)  # fused ops torch-mlir cannot carry: imported around, spliced back below
        # which convolutions CPU runs without padding products, asked here where the strides are known: in the
        # build flags, so both cache keys cover the decision (conv_padding)
        padded = conv_padding.decide(work)
        if padded:
            build_flags["conv_padding"] = sorted(padded.items())
        if config.preserve_artifacts:
            artifacts.write(config, graph, fx_code=work.print_readable(print_output=False))
        refused = _unimportable(work)
        if refused is not None:
            raise refused
        # The FX-level index (cache.fx_key) names the StableHLO key without importing: a warm compile
        # skips torch-mlir. Preserved artifacts need the StableHLO text, so they always import. The cut
        # ops' options are in neither the legalized code nor the StableHLO text: both keys take them.
        indexed = config.neff_cache and not config.preserve_artifacts
        material = cache.graph_material(work) if config.neff_cache else None
        key_of_fx = cache.fx_key(work, {**build_flags, "cuts": [c.key() for c in cuts]}, material) \
            if indexed and material is not None else None
        key = cache.lookup_fx(config.neff_cache_dir, key_of_fx) if key_of_fx is not None else None
        # the import memo (cache.import_key): a graph imported before, under any compiler version
        memo = (config.neff_cache_dir, cache.import_key(material)) if material is not None else None
        module = text = None
        if key is None:
            module, text = _imported(work, cuts, memo)
            key = cache.key(text, build_flags)
        executable = cache.from_memory(key)
        neff_bytes = None
        if executable is not None:
            counters.cache_hit("memory")
        else:
            loaded = cache.from_disk(config.neff_cache_dir, key) if config.neff_cache else None
            if loaded is None and module is None:  # indexed, but that NEFF is unusable: import and rebuild
                module, text = _imported(work, cuts, memo)
                indexed_key, key = key, cache.key(text, build_flags)
                if key != indexed_key:
                    loaded = cache.from_disk(config.neff_cache_dir, key)
            if loaded is not None:
                counters.cache_hit("disk")
                if key_of_fx is not None and module is not None:  # a NEFF written before the index existed
                    cache.index_fx(config.neff_cache_dir, key_of_fx, key)
                program = loaded.program
                program.name = graph
            else:
                imported = opaque.splice(importer.read_module(module), cuts, n_inputs, n_outputs)
                program = build.build(imported, graph, weights=weights, conv_padding=padded)
                record_schedule(program)  # the launch's figures, known from the shapes: stored in the NEFF
                neff_bytes = neff.dumps(program, build_flags, hashlib.sha256(text.encode()).hexdigest())
                if config.neff_cache and cache.store(config.neff_cache_dir, key, neff_bytes) and key_of_fx:
                    cache.index_fx(config.neff_cache_dir, key_of_fx, key)
                counters.count("compiles")
            executable = Executable(program, device_index)
            cache.remember(key, executable)
        if config.preserve_artifacts:
            if neff_bytes is None:
                neff_bytes = neff.dumps(executable.program, build_flags, hashlib.sha256(text.encode()).hexdigest())
            artifacts.write(config, graph, stablehlo=text, neff_bytes=neff_bytes)
    except (UnsupportedOpError, ImportFailure) as error:
        # ops torch-mlir refuses that eager kernels cover: only they run eagerly (not where eager execution is off)
        if isinstance(error, ImportFailure) and config.fallback:
            split = eager_cut.split(
                original, graph, device_index, lambda sub, name: compile_graph(sub, name, device_index, config),
                lambda failure=error: fallback.eager(original, failure, graph, config))
            if split is not None:
                log.info("graph %s compiles around its eager cuts: %s", graph, error)
                return split
        log.info("graph %s falls back to eager: %s", graph, error)
        return fallback.eager(original, error, graph, config)
    log.info("compiled %s in %.3f s", graph, time.perf_counter() - started)
    positions = [p for p, k in enumerate(kept) if k]  # program output index -> graph output position
    writes = {positions.index(o): k for o, k in (into or {}).items()
              if o in positions and executable.writable_into(positions.index(o), k)}
    run = _linked(executable, kept, index_error, writes)
    run.cache_key = key  # type: ignore[attr-defined]  (backend.py indexes plain inference graphs by it)
    return run


def _linked(executable: Executable, kept: list[bool], index_error: type[Exception] = IndexError,
            into: dict[int, int] | None = None, strides: dict[int, tuple[int, ...]] | None = None
            ) -> Callable[[list], list]:
    """The boxed callable AOTAutograd (or the Dynamo-level index, ``linked``) runs a program through; an
    out-of-range index raises ``index_error`` (``index_error_class``); ``into``: the program's outputs written
    into an input's memory (``compile_graph``); ``strides``: the program's outputs stored in a traced layout
    (``restrided``)."""
    def run(args: list) -> list:
        try:
            outputs = executable(args, into, strides)
        except IndexError as error:
            if index_error is IndexError:
                raise
            raise index_error(*error.args) from None
        counters.count("executions")
        return legalize.restore_none(outputs, kept)

    run._boxed_call = True  # type: ignore[attr-defined]
    run.executable = executable  # type: ignore[attr-defined]
    run.kept = kept  # type: ignore[attr-defined]
    run.index_error = index_error  # type: ignore[attr-defined]
    return run


def restrided(run: Callable[[list], list], strided: dict[int, tuple[int, ...]]) -> Callable[[list], list]:
    """``run`` (``compile_graph``'s, called with no ``into``) relinked so that its graph outputs in ``strided``
    ({graph output index: traced strides}) that the program can store in that layout
    (``Executable.writes_strided``) come back in it, with no copy after the program; the others as before."""
    executable, kept = getattr(run, "executable", None), getattr(run, "kept", None)
    if executable is None or kept is None:
        return run
    positions = [p for p, k in enumerate(kept) if k]  # program output index -> graph output position
    strides = {positions.index(g): s for g, s in strided.items()
               if g in positions and executable.writes_strided(positions.index(g))}
    if not strides:
        return run
    relinked = _linked(executable, kept, getattr(run, "index_error", IndexError), None, strides)
    relinked.cache_key = getattr(run, "cache_key", None)  # type: ignore[attr-defined]
    return relinked


def linked(cache_key: str, kept: list[bool], graph: str, device_index: int, config: CompilerConfig
           ) -> Callable[[list], list] | None:
    """The program a cache entry names, linked for ``device_index`` from memory or disk (a cache hit), or None
    when neither holds a usable one. For the Dynamo-level index of plain inference graphs (backend.py), which
    skips AOTAutograd, legalization and the import altogether."""
    executable = cache.from_memory(cache_key)
    if executable is not None:
        counters.cache_hit("memory")
        return _linked(executable, kept)
    # quiet: a damaged NEFF is reported (once) by the full compile that follows this miss and rebuilds it
    loaded = cache.from_disk(config.neff_cache_dir, cache_key, quiet=True) if config.neff_cache else None
    if loaded is None:
        return None
    counters.cache_hit("disk")
    program = loaded.program
    program.name = graph
    executable = Executable(program, device_index)
    cache.remember(cache_key, executable)
    return _linked(executable, kept)
