"""The compile cache: NEFFs keyed by StableHLO hash + compiler version + flags.

Two levels: linked programs in memory (this process) and NEFF files on disk
(``TORCH_NEURONX_NEFF_CACHE_DIR``, default ``~/.cache/neuronsim/neff``;
``TORCH_NEURONX_DISABLE_NEFF_CACHE=1`` turns the disk level off), so a second
process serves a graph without running the compiler passes. A disk entry that
is truncated or corrupted is reported once (a warning naming the file) and
rebuilt; entries are written atomically, so a crash never leaves a
half-written NEFF under a valid name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from typing import Any

from device_impl.compiler import counters, neff
from device_impl.compiler.errors import NeffFormatError

log = logging.getLogger("torch_neuronx.cache")
_MEMORY: dict[str, Any] = {}  # key -> Executable
_REPORTED: set[str] = set()  # corrupt entries already warned about


def key(stablehlo: str, flags: dict[str, Any]) -> str:
    material = json.dumps({"stablehlo": hashlib.sha256(stablehlo.encode()).hexdigest(),
                           "compiler": neff.COMPILER_VERSION, "format": neff.FORMAT_VERSION, "flags": flags},
                          sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()


def path_of(directory: str, cache_key: str) -> str:
    return os.path.join(directory, neff.COMPILER_VERSION.replace(" ", "-"), cache_key[:2], f"{cache_key}.neff")


def from_memory(cache_key: str):
    return _MEMORY.get(cache_key)


def remember(cache_key: str, executable) -> None:
    _MEMORY[cache_key] = executable


def clear_memory() -> None:
    """Forget linked programs (the next compile of a graph reads the disk cache)."""
    _MEMORY.clear()


def from_disk(directory: str, cache_key: str) -> neff.Neff | None:
    """The cached NEFF, or None when absent or damaged (damage reported once, then rebuilt by the caller)."""
    path = path_of(directory, cache_key)
    if not os.path.exists(path):
        return None
    try:
        return neff.read(path)
    except (NeffFormatError, OSError, KeyError, ValueError) as e:
        counters.count("cache_corrupt")
        if path not in _REPORTED:
            _REPORTED.add(path)
            warnings.warn(f"neuron compile cache: entry {path} is unusable ({e}); recompiling and replacing it",
                          RuntimeWarning, stacklevel=2)
        return None


def store(directory: str, cache_key: str, data: bytes) -> str | None:
    path = path_of(directory, cache_key)
    try:
        neff.write(path, data)
    except OSError as e:  # a read-only or full cache directory must not fail the compile
        log.warning("neuron compile cache: cannot write %s (%s)", path, e)
        return None
    return path
