"""Registers ``neuron`` as a torch.compile backend without importing Dynamo at ``import device_impl``.

``import torch._dynamo`` costs about two seconds, so ``import device_impl``
must not pay it. If Dynamo is already loaded, the backend is registered at
once; otherwise a one-shot import hook registers it the moment Dynamo's
backend registry module finishes loading, which happens before any
``torch.compile(backend="neuron")`` can look the name up. The same hook
tells Dynamo, once its trace rules load, not to trace the device's own
dispatched code (see DISPATCHED_PACKAGES). The registered
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


# Packages whose code runs under the dispatcher (kernels, the CPU fallback, the engine, the adaptive
# queue). Dynamo must not trace them: when a compiled function's graph-break region or a graph that
# falls back runs an op on neuron eagerly, Dynamo's frame hook would otherwise compile the Python
# kernel's own frames as user code (it compiled the CPU fallback's `to_device(host)` and refused its
# host tensor, for rrelu). The runtime (torch.neuron.*) is skipped as Dynamo skips torch.cuda's Python:
# OpInfo's freeze_rng_state calls torch.neuron.set_rng_state between graphs, and Dynamo tried to turn
# the generator's state tensor into a fake tensor inside the fallback's no_dispatch block.
DISPATCHED_PACKAGES = ("device_impl.dispatch", "device_impl.kernels", "device_impl.engine", "device_impl.eager",
                       "device_impl.runtime", "device_impl.neuron", "device_impl.dynamo_interface")
TRACE_RULES_MODULE = "torch._dynamo.trace_rules"
DEVICE_INTERFACE_MODULE = "torch._dynamo.device_interface"


USER_DEFINED_MODULE = "torch._dynamo.variables.user_defined"
TORCH_VARIABLES_MODULE = "torch._dynamo.variables.torch"
TENSOR_VARIABLES_MODULE = "torch._dynamo.variables.tensor"
DECORATORS_MODULE = "torch._dynamo.decorators"


def _register_device_interface(module) -> None:
    """Dynamo's DeviceInterface for neuron (device_impl/dynamo_interface.py)."""
    from device_impl import dynamo_interface

    dynamo_interface.register(module)


def _adapt_user_defined(module) -> None:
    from device_impl import dynamo_interface

    dynamo_interface.adapt_user_defined(module)


def _adapt_torch_functions(module) -> None:
    from device_impl import dynamo_interface

    dynamo_interface.adapt_torch_functions(module)


def _adapt_tensor_methods(module) -> None:
    from device_impl import dynamo_interface

    dynamo_interface.adapt_tensor_methods(module)


def _allow_in_graph(module) -> None:
    from device_impl import dynamo_interface

    dynamo_interface.allow_in_graph(module)


def _register(registry) -> None:
    if BACKEND_NAME not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=neuron, name=BACKEND_NAME)
    from device_impl.compiler import parity  # Dynamo runs the metas before the backend sees a graph

    parity.install_fake_checks()  # CPU's argument checks that the meta functions Dynamo traces with skip
    parity.install_meta_checks()  # metas that refuse with another class than CPU's kernel


def _skip_dispatched_code(trace_rules) -> None:
    """Add DISPATCHED_PACKAGES to Dynamo's skip list (``trace_rules.add``, an internal API since
    torch 2.2; the compat probe watches it). Without it compile still works; only the
    eager-inside-compile case above regresses, so a missing API warns instead of failing."""
    add = getattr(trace_rules, "add", None)
    if add is None:
        import warnings

        warnings.warn("torch._dynamo.trace_rules.add is missing in this torch: Dynamo may trace neuron kernels "
                      "run eagerly inside compiled functions", stacklevel=2)
        return
    for package in DISPATCHED_PACKAGES:
        add(package)


# module -> what to do with it once it has fully loaded (not before: Dynamo's modules import each
# other, so one can be in sys.modules half-executed)
_ON_LOAD = {REGISTRY_MODULE: _register, TRACE_RULES_MODULE: _skip_dispatched_code,
            DEVICE_INTERFACE_MODULE: _register_device_interface, USER_DEFINED_MODULE: _adapt_user_defined,
            TORCH_VARIABLES_MODULE: _adapt_torch_functions, TENSOR_VARIABLES_MODULE: _adapt_tensor_methods,
            DECORATORS_MODULE: _allow_in_graph}


class _ActWhenLoaded(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the real loader of the modules in _ON_LOAD to act after each runs."""

    def __init__(self) -> None:
        self.pending = set(_ON_LOAD)

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module) -> None:
            original(module)
            self.pending.discard(fullname)
            if not self.pending:
                _uninstall()
            _ON_LOAD[fullname](module)

        spec.loader.exec_module = exec_module  # an instance attribute: this spec's loader only
        return spec


_HOOK = _ActWhenLoaded()


def _uninstall() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def install() -> None:
    """Register now if Dynamo is loaded, else when it loads. Idempotent."""
    for name in list(_HOOK.pending):
        module = sys.modules.get(name)
        if module is not None:
            _HOOK.pending.discard(name)
            _ON_LOAD[name](module)
    if not _HOOK.pending:
        _uninstall()
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
