"""The neuron compiler: ``torch.compile(model, backend="neuron")``.

Dynamo graph -> AOTAutograd (forward and backward, core ATen decompositions)
-> torch-mlir StableHLO -> our passes (``build``: folding, static-shape check,
fusion, SBUF planning, schedule) -> a NEFF (``neff``) cached on disk
(``cache``) -> executed on the simulated NeuronCore (``executor``). Graphs
with an op the compiler cannot lower run eagerly on neuron (``fallback``).

This package is imported lazily: ``import device_impl`` only registers the
backend name (``registration``); Dynamo, AOTAutograd and torch-mlir load on
the first compile. Public names:

* ``stats()`` / ``reset_stats()``: compiles, cache hits, recompiles by cause (with shapes),
  compile seconds, graphs, fallbacks (see ``counters.py``);
* ``clear_cache()``: forget compiled programs held in memory (the disk cache stays);
* ``ShapeContractError``, ``UnsupportedOpError``, ``FallbackDisabledError``, ``NeffFormatError``;
* ``load_neff(path)``: read and verify a NEFF file.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "ShapeContractError": "errors", "UnsupportedOpError": "errors", "FallbackDisabledError": "errors",
    "NeffFormatError": "errors", "ImportFailure": "errors",
}


def stats() -> dict[str, Any]:
    from device_impl.compiler import counters as _stats

    return _stats.snapshot()


def reset_stats() -> None:
    from device_impl.compiler import counters as _stats

    _stats.reset()


def clear_cache() -> None:
    """Forget linked programs in this process; the next compile of a graph reads the disk cache."""
    from device_impl.compiler import cache

    cache.clear_memory()


def load_neff(path: str):
    from device_impl.compiler import neff

    return neff.read(path)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"device_impl.compiler.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'device_impl.compiler' has no attribute {name!r}")
