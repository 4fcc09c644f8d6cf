"""Registers ``neuron`` as a torch.compile backend without importing Dynamo at ``import device_impl``.

``import torch._dynamo`` costs about two seconds, so ``import device_impl``
must not pay it. If Dynamo is already loaded, the backend is registered at
once; otherwise a one-shot import hook registers it the moment Dynamo's
backend registry module finishes loading, which happens before any
``torch.compile(backend="neuron")`` can look the name up. The registered
function is a thin shim: the compiler itself (and torch-mlir) is imported on
the first compile.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

REGISTRY_MODULE = "torch._dynamo.backends.registry"
BACKEND_NAME = "neuron"


def neuron(gm, example_inputs, **kwargs: Any):
    """torch.compile(backend="neuron"): Dynamo graph -> AOTAutograd -> StableHLO -> NEFF (see compiler/backend.py)."""
    from device_impl.compiler.backend import compile_dynamo_graph

    return compile_dynamo_graph(gm, example_inputs, **kwargs)


def _static_shapes():
    """Entered by Dynamo around every call of a function compiled for this backend (``backend_ctx_ctor``).

    Dynamo's default "automatic dynamic shapes" recompiles a function with a
    symbolic dimension once it has seen two sizes; the neuron backend compiles
    static shapes only (DESIGN.md, shape contract), so a new size recompiles
    statically instead. ``dynamic=True`` or ``mark_dynamic`` still produce
    symbolic shapes, which the backend refuses with ShapeContractError.
    """
    import torch._dynamo.config as dynamo_config

    return dynamo_config.patch(automatic_dynamic_shapes=False)


neuron.backend_ctx_ctor = _static_shapes  # type: ignore[attr-defined]


def _register(registry) -> None:
    if BACKEND_NAME not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=neuron, name=BACKEND_NAME)


class _RegisterWhenLoaded(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of Dynamo's registry to register after it runs."""

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module) -> None:
            original(module)
            _uninstall()
            _register(module)

        spec.loader.exec_module = exec_module  # an instance attribute: this spec's loader only
        return spec


_HOOK = _RegisterWhenLoaded()


def _uninstall() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def install() -> None:
    """Register now if Dynamo's registry is loaded, else when it loads. Idempotent."""
    registry = sys.modules.get(REGISTRY_MODULE)
    if registry is not None:
        _register(registry)
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
