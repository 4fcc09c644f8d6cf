"""The compile cache: NEFFs keyed by StableHLO hash + compiler version + flags.

A second, cheaper key goes in front of it: the legalized FX graph's code, its inputs' shapes,
strides and dtypes, its constants' bytes, the flags and the versions of torch and torch-mlir (the
two things besides the compiler's own source, which names the cache directory, that decide the
StableHLO torch-mlir prints). It maps to the StableHLO key in a small index file, so a warm
compile in a new process skips the torch-mlir import (about half its compile seconds on the
decoder block) and reads the NEFF straight away. The index only ever points at a NEFF written
by a full compile; an unreadable index entry is a miss.

Behind both, the import memo (``import_key``): the StableHLO text torch-mlir printed for a legalized graph
(or its refusal of it), keyed by the graph and the torch, torch-mlir and importer.py versions but not by the
compiler version, under ``stablehlo/`` in the cache directory. A compile after a change to the compiler's
sources (a new NEFF directory: every graph compiles again) parses that text instead of importing the graph,
and a graph torch-mlir refuses is not imported again to be refused. An entry carries a sha256 of itself;
one that does not match, or does not parse, is a miss and is rewritten.

Two levels: linked programs in memory (this process) and NEFF files on disk
(``TORCH_NEURONX_NEFF_CACHE_DIR``, default ``~/.cache/neuronsim/neff``;
``TORCH_NEURONX_DISABLE_NEFF_CACHE=1`` turns the disk level off), so a second
process serves a graph without running the compiler passes. A disk entry that
is truncated or corrupted is reported once (a warning naming the file) and
rebuilt; entries are written atomically, so a crash never leaves a
half-written NEFF under a valid name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pathlib
import warnings
from typing import Any

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from device_impl.compiler import counters, neff
from device_impl.compiler.errors import NeffFormatError
from device_impl.kernels import cpu_host

log = logging.getLogger("torch_neuronx.cache")
_MEMORY: dict[str, Any] = {}  # key -> Executable
_REPORTED: set[str] = set()  # corrupt entries already warned about
_STALE_REPORTED: list[bool] = []  # the changed-sources warning, once per process


def _write(path: str, data: bytes, what: str) -> bool:
    """Write one cache entry atomically; False (and nothing written) where the cache directory cannot be
    written (a read-only or full cache must not fail the compile: only the entry is lost) or where the
    compiler's sources changed since this process computed the version that names the entry's directory
    (``neff.changed_sources``: the entry might come from other code than its name says)."""
    changed = neff.changed_sources()
    if changed:
        if not _STALE_REPORTED:
            _STALE_REPORTED.append(True)
            log.warning("neuron compile cache: not writing %s or any later entry in this process: the compiler's "
                        "sources changed since it started (%s%s), so its programs may not be what the version "
                        "%s names; restart the process to cache again", what, ", ".join(changed[:3]),
                        ", ..." if len(changed) > 3 else "", neff.COMPILER_VERSION)
        return False
    try:
        neff.write(path, data)
    except OSError as e:
        log.warning("neuron compile cache: cannot write %s %s (%s)", what, path, e)
        return False
    return True


def key(stablehlo: str, flags: dict[str, Any]) -> str:
    material = json.dumps({"stablehlo": hashlib.sha256(stablehlo.encode()).hexdigest(),
                           "compiler": neff.COMPILER_VERSION, "format": neff.FORMAT_VERSION, "flags": flags},
                          sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def _versions() -> dict[str, str]:
    global _VERSIONS
    if _VERSIONS is None:
        from importlib import metadata

        try:
            mlir = metadata.version("torch-mlir")
        except metadata.PackageNotFoundError:
            mlir = "absent"
        _VERSIONS = {"torch": torch.__version__, "torch-mlir": mlir}
    return _VERSIONS


_VERSIONS: dict[str, str] | None = None


def _attrs_of(gm: torch.fx.GraphModule) -> list[list[str]]:
    """(target, digest) of every get_attr node: what a graph's constants contribute to its keys."""
    attrs = []
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            target = gm
            for part in str(node.target).split("."):
                target = getattr(target, part)
            attrs.append([str(node.target), _attr_digest(target)])
    return attrs


def _attr_digest(value: Any) -> str:
    """What a get_attr node contributes to the FX key: a tensor's metadata and bytes, a submodule's code.
    AOTAutograd calls the compiler inside its fake-tensor mode, which refuses a real constant (a device tensor
    made in the function, ``torch.tensor((0,), device=...)``: "Please convert all Tensors to FakeTensors"):
    the bytes are read outside it."""
    if isinstance(value, torch.Tensor):
        from device_impl.compiler.parity import _real_tensors

        with _real_tensors():  # AOTAutograd compiles inside its fake mode; a graph constant is a real tensor
            host = value.detach().cpu().contiguous()
            data = host.reshape(-1).view(torch.uint8).numpy().tobytes() if host.numel() else b""
        return f"{tuple(host.shape)}:{host.dtype}:{hashlib.sha256(data).hexdigest()}"
    if isinstance(value, torch.fx.GraphModule):
        return hashlib.sha256(value.code.encode()).hexdigest()
    return repr(value)


def graph_material(gm: torch.fx.GraphModule) -> dict[str, Any] | None:
    """What a legalized graph hands torch-mlir: its code, its inputs' shapes, strides and dtypes, its constants'
    digests. None when an input lacks the example value it needs (the caller then keys on StableHLO only).
    Computed once per compile for both keys below (``fx_key``, ``import_key``)."""
    inputs = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("val")
            if not isinstance(value, torch.Tensor):
                return None
            inputs.append([list(value.shape), list(value.stride()), str(value.dtype)])
    return {"code": gm.code, "inputs": inputs, "attrs": _attrs_of(gm)}


def fx_key(gm: torch.fx.GraphModule, flags: dict[str, Any], material: dict[str, Any] | None = None) -> str | None:
    """The FX-level key of a legalized graph (see the module docstring), or None when an input lacks the
    example value the key needs (the caller then keys on StableHLO only). ``material``: ``graph_material(gm)``
    when the caller has it."""
    material = graph_material(gm) if material is None else material
    if material is None:
        return None
    text = json.dumps({**material, "flags": flags, "versions": _versions(), "format": neff.FORMAT_VERSION},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


# The import memo: a legalized graph's StableHLO text (or torch-mlir's refusal of it), keyed by what decides
# it: the graph (``graph_material``), the torch and torch-mlir versions, and importer.py, which is how the
# compiler calls torch-mlir. Not the compiler version: a change to the passes, the kernels or the engine
# (every such change names a new NEFF directory, so every graph compiles again) reuses the import, about half a
# cold compile of an op-suite graph, and still runs every pass. Kept beside the NEFF directories.
_MEMO_FORMAT = 1


@functools.cache
def _importer_digest() -> str:
    return hashlib.sha256(pathlib.Path(__file__).with_name("importer.py").read_bytes()).hexdigest()


def import_key(material: dict[str, Any]) -> str:
    """The import memo's key of a graph with this ``graph_material``."""
    text = json.dumps({**material, "versions": _versions(), "importer": _importer_digest(), "memo": _MEMO_FORMAT},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _import_path(directory: str, key_of_import: str) -> str:
    return os.path.join(directory, "stablehlo", key_of_import[:2], f"{key_of_import}.json")


def _read_json(path: str, encoding: str) -> Any:
    """The JSON document at ``path``, or None where it cannot be read or parsed (a cache entry that is missing,
    damaged or half-written reads as a miss)."""
    try:
        with open(path, encoding=encoding) as handle:
            return json.load(handle)
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _sealed(entry: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def lookup_import(directory: str, key_of_import: str) -> dict[str, str] | None:
    """The memo entry: ``{"stablehlo": text}`` or ``{"failure": message, "op": op}`` (torch-mlir refused the
    graph: ``importer.ImportFailure``'s arguments); None for a miss or an entry whose checksum, a sha256 of the
    entry, does not match (damaged: the import runs again and rewrites it)."""
    stored = _read_json(_import_path(directory, key_of_import), "utf-8")
    try:
        entry, seal = stored["entry"], stored["sha256"]
    except (KeyError, TypeError):
        return None
    if not isinstance(entry, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in entry.items()) \
            or seal != _sealed(entry) or not ("stablehlo" in entry or {"failure", "op"} <= set(entry)):
        return None
    return entry


def memo_import(directory: str, key_of_import: str, entry: dict[str, str]) -> None:
    """Record an import's outcome (``lookup_import``'s entry), atomically; a cache directory that cannot be
    written only loses the memo."""
    sealed = json.dumps({"entry": entry, "sha256": _sealed(entry)}).encode("utf-8")
    _write(_import_path(directory, key_of_import), sealed, "the import memo")


def _index_path(directory: str, key_of_fx: str) -> str:
    return os.path.join(directory, neff.COMPILER_VERSION.replace(" ", "-"), "fx", key_of_fx[:2], f"{key_of_fx}.key")


def lookup_fx(directory: str, key_of_fx: str) -> str | None:
    """The StableHLO key a graph with this FX key compiled under, when its NEFF is on disk."""
    try:
        with open(_index_path(directory, key_of_fx), encoding="ascii") as handle:
            found = handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if len(found) != 64 or any(c not in "0123456789abcdef" for c in found):
        return None  # damaged: a miss, and the full compile below rewrites it
    return found if os.path.exists(path_of(directory, found)) else None


def index_fx(directory: str, key_of_fx: str, cache_key: str) -> None:
    """Record that the graph with this FX key compiles under ``cache_key`` (atomically, like a NEFF)."""
    _write(_index_path(directory, key_of_fx), cache_key.encode("ascii"), "the FX index")


def dynamo_key(gm: torch.fx.GraphModule, example_inputs: list, flags: dict[str, Any]) -> str | None:
    """The key of a Dynamo graph as the backend receives it (before AOTAutograd): its code, its inputs'
    shapes, strides, dtypes and ``requires_grad``, its constants' bytes, the grad and autocast modes AOTAutograd
    traces under, the CPU kernels' capability, oneDNN's state (``cpu_host.onednn_facts``), the flags and the
    versions. None when an input is not a plain tensor (the caller then compiles through AOTAutograd as usual)."""
    inputs = []
    for value in example_inputs:
        if not isinstance(value, torch.Tensor) or is_traceable_wrapper_subclass(value):
            return None
        inputs.append([list(value.shape), list(value.stride()), str(value.dtype), value.device.type,
                       bool(value.requires_grad)])
    # the CPU kernels' capability: decompositions take CPU's form for it (a fused multiply-add, oneDNN's gelu),
    # so a program traced under AVX2 is not CPU's answer under ATEN_CPU_CAPABILITY=default
    modes = {"grad": torch.is_grad_enabled(), "deterministic": torch.are_deterministic_algorithms_enabled(),
             "autocast": [[t, torch.is_autocast_enabled(t), str(torch.get_autocast_dtype(t))]
                          for t in ("cpu", "neuron")],
             "cpu_capability": torch.backends.cpu.get_cpu_capability(),
             # oneDNN's switch, threads and ISA: which convolution kernel CPU runs, so whether the program's
             # convolutions multiply their padding (compiler.conv_padding), decided after this key names a NEFF;
             # only of a graph that may convolve, so a process with another thread count still links the others
             "onednn": cpu_host.onednn_facts() if _may_convolve(gm) else None}
    material = json.dumps({"dynamo": gm.code, "inputs": inputs, "attrs": _attrs_of(gm), "modes": modes, "flags": flags,
                           "versions": _versions(), "format": neff.FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def _may_convolve(gm: torch.fx.GraphModule) -> bool:
    """Whether a Dynamo graph may call a convolution: its code names one (``torch.conv2d``,
    ``F.conv_transpose1d``, ``aten.convolution``), or it calls a submodule, whose code it does not show."""
    return "conv" in gm.code or any(node.op == "call_module" for node in gm.graph.nodes)


def _dynamo_index_path(directory: str, key_of_graph: str) -> str:
    return os.path.join(directory, neff.COMPILER_VERSION.replace(" ", "-"), "dynamo", key_of_graph[:2],
                        f"{key_of_graph}.json")


def lookup_dynamo(directory: str, key_of_graph: str) -> tuple[str, list[bool]] | None:
    """(NEFF key, which outputs are not None) of a plain inference graph with this Dynamo key, when its NEFF
    is on disk; None for a miss or an unreadable entry (the full compile below rewrites it)."""
    entry = _read_json(_dynamo_index_path(directory, key_of_graph), "ascii")
    try:
        found, kept = entry["neff"], entry["kept"]
    except (KeyError, TypeError):
        return None
    if not (isinstance(found, str) and len(found) == 64 and all(c in "0123456789abcdef" for c in found)
            and isinstance(kept, list) and all(isinstance(k, bool) for k in kept)):
        return None
    return (found, kept) if os.path.exists(path_of(directory, found)) else None


def index_dynamo(directory: str, key_of_graph: str, cache_key: str, kept: list[bool]) -> None:
    """Record that the plain inference graph with this Dynamo key runs the NEFF ``cache_key`` (atomically)."""
    _write(_dynamo_index_path(directory, key_of_graph), json.dumps({"neff": cache_key, "kept": kept}).encode("ascii"),
           "the Dynamo index")


def path_of(directory: str, cache_key: str) -> str:
    return os.path.join(directory, neff.COMPILER_VERSION.replace(" ", "-"), cache_key[:2], f"{cache_key}.neff")


def from_memory(cache_key: str):
    return _MEMORY.get(cache_key)


def remember(cache_key: str, executable) -> None:
    _MEMORY[cache_key] = executable


def clear_memory() -> None:
    """Forget linked programs (the next compile of a graph reads the disk cache)."""
    _MEMORY.clear()


def from_disk(directory: str, cache_key: str, quiet: bool = False) -> neff.Neff | None:
    """The cached NEFF, or None when absent or damaged (damage reported once, then rebuilt by the caller).
    ``quiet``: a damaged entry is a plain miss, neither counted nor reported (a caller that falls back to a
    path which reads it again, and reports it there)."""
    path = path_of(directory, cache_key)
    if not os.path.exists(path):
        return None
    try:
        return neff.read(path)
    except (NeffFormatError, OSError, KeyError, ValueError) as e:
        if quiet:
            return None
        counters.count("cache_corrupt")
        if path not in _REPORTED:
            _REPORTED.add(path)
            warnings.warn(f"neuron compile cache: entry {path} is unusable ({e}); recompiling and replacing it",
                          RuntimeWarning, stacklevel=2)
        return None


def store(directory: str, cache_key: str, data: bytes) -> str | None:
    path = path_of(directory, cache_key)
    return path if _write(path, data, "the NEFF") else None
