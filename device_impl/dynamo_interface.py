"""Dynamo's DeviceInterface for neuron: what device-generic compiled code asks of a device.

``torch._dynamo.device_interface.get_interface_for_device("neuron")`` is how Dynamo (and Inductor)
find a device's streams, events, current device, synchronize, availability and properties; without
it Dynamo cannot trace code that uses ``torch.neuron.Stream``/``Event``/``stream(...)``/
``current_stream()`` (its stream handling matches calls against the registered interfaces).

Registered when Dynamo's ``device_interface`` module loads (compiler/registration.py's import hook),
so ``import device_impl`` does not pay Dynamo's import cost and no compile can look the device up
before it is registered.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import DeviceInterface, caching_worker_current_devices, \
    caching_worker_device_properties, register_interface_for_device

from device_impl import neuron
from device_impl._core import C
from device_impl.runtime.devices import device_index

DEVICE = "neuron"


class NeuronInterface(DeviceInterface):
    device = neuron.device  # type: ignore[assignment]
    Event = neuron.Event  # type: ignore[assignment]  (torch.Event subclasses, as Dynamo requires)
    Stream = neuron.Stream  # type: ignore[assignment]

    class Worker:
        """Properties recorded in the main process, for compile workers that must not touch the device."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices[DEVICE] = device

        @staticmethod
        def current_device() -> int:
            return caching_worker_current_devices.get(DEVICE, neuron.current_device())

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            index = NeuronInterface.Worker.current_device() if device is None else device_index(device)
            if DEVICE not in caching_worker_device_properties:
                caching_worker_device_properties[DEVICE] = [neuron.get_device_properties(i)
                                                            for i in range(neuron.device_count())]
            return caching_worker_device_properties[DEVICE][index]

    current_device = staticmethod(neuron.current_device)
    set_device = staticmethod(neuron.set_device)  # type: ignore[assignment]
    device_count = staticmethod(neuron.device_count)
    is_available = staticmethod(neuron.is_available)
    stream = staticmethod(neuron.stream)  # type: ignore[assignment]
    current_stream = staticmethod(neuron.current_stream)  # type: ignore[assignment]
    set_stream = staticmethod(neuron.set_stream)  # type: ignore[assignment]
    synchronize = staticmethod(neuron.synchronize)  # type: ignore[assignment]
    get_device_properties = staticmethod(neuron.get_device_properties)  # type: ignore[assignment]
    memory_allocated = staticmethod(neuron.memory_allocated)  # type: ignore[assignment]
    is_bf16_supported = staticmethod(neuron.is_bf16_supported)  # type: ignore[assignment]

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        neuron.set_stream(neuron.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

    @staticmethod
    def exchange_device(device: int) -> int:
        return C.exchange_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        """Switch only to a valid core (as torch.cuda._maybe_exchange_device); return the previous one."""
        if not 0 <= device < C.device_count():
            return C.current_device()
        return C.exchange_device(device)

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        """The current stream's id: the handle a generated kernel would launch on."""
        return neuron.current_stream(device_idx).stream_id

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> str:
        """The NeuronCore generation (what a kernel compiler would specialise on), e.g. 'NeuronCore-v2'."""
        from device_impl.engine.constants import PLATFORM

        return PLATFORM.core

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        return False  # kernels come from this device's compiler (backend="neuron"), never Triton


def register(_module: Any = None) -> None:
    """Register the interface for ``neuron`` and each ``neuron:<i>`` (idempotent)."""
    register_interface_for_device(DEVICE, NeuronInterface)
    for i in range(neuron.device_count()):
        register_interface_for_device(f"{DEVICE}:{i}", NeuronInterface)


# --- what the interface alone does not reach in torch 2.13 ----------------------------------------------
# Dynamo's stream support names CUDA's and XPU's classes and functions in hard-coded lists rather than
# asking the registered interfaces, so for neuron three things are added where Dynamo keeps them, each
# when its module has loaded (compiler/registration.py). They are internal APIs: a missing one warns
# (the compat probe watches them) and only that piece of stream tracing is lost.


def _warn_missing(what: str) -> None:
    import warnings

    warnings.warn(f"torch._dynamo has no {what} in this torch: compiled code using torch.neuron streams or "
                  "events may graph-break", stacklevel=3)


def adapt_user_defined(module: Any) -> None:
    """``torch.neuron.Event()``/``Stream()`` become graph-created objects, as torch.cuda.Event does
    (UserDefinedClassVariable._in_graph_classes)."""
    cls = getattr(module, "UserDefinedClassVariable", None)
    original = getattr(cls, "_in_graph_classes", None)
    if original is None:
        _warn_missing("UserDefinedClassVariable._in_graph_classes")
        return
    if getattr(original, "_neuron", False):
        return

    def in_graph_classes() -> set:
        return original() | {neuron.Event, neuron.Stream}

    in_graph_classes._neuron = True  # type: ignore[attr-defined]
    cls._in_graph_classes = staticmethod(in_graph_classes)


IN_GRAPH_FUNCTIONS = (neuron.stream, neuron.current_stream, neuron.synchronize)


def adapt_torch_functions(module: Any) -> None:
    """``torch.neuron.current_stream()`` and ``synchronize()`` are handled by the handlers of
    torch.accelerator's equivalents (TorchInGraphFunctionVariable._get_handlers, built on first use);
    ``torch.neuron.stream(s)`` is found there through this interface."""
    cls = getattr(module, "TorchInGraphFunctionVariable", None)
    original = getattr(cls, "_get_handlers", None)
    if original is None:
        _warn_missing("TorchInGraphFunctionVariable._get_handlers")
        return
    if getattr(original, "_neuron", False):
        return

    def get_handlers() -> dict:
        handlers = original()  # functools.cache'd: the same dict every call, so aliases are added once
        for fn, like in ((neuron.current_stream, torch.accelerator.current_stream),
                         (neuron.synchronize, torch.accelerator.synchronize)):
            if fn not in handlers and like in handlers:
                handlers[fn] = handlers[like]
        for fn in WHOLE_FUNCTIONS:
            if fn in handlers and not getattr(handlers[fn], "_neuron", False):
                handlers[fn] = _whole_on_neuron(handlers[fn])
        return handlers

    get_handlers._neuron = True  # type: ignore[attr-defined]
    cls._get_handlers = staticmethod(get_handlers)


# Calls Dynamo rewrites into other ops while it traces, with Inductor's numerics rather than CPU's: ``torch.addcdiv(x,
# t1, t2, value=v)`` becomes ``x + (t1 / t2) * v`` and ``x.addcdiv_(t1, t2, value=v)`` ``fma(t1 / t2, v, x)``, where
# CPU computes ``x + v * t1 / t2``, the product first (float32 ``3.5 * 0.001 / 1e-38`` is 3.5e35; ``3.5 / 1e-38``
# overflows: op suite addcdiv float32 denormal, "infinities differ"). On neuron tensors they reach the graph whole,
# where no decomposition table replaces aten.addcdiv and torch-mlir lowers it as CPU computes it (the product
# first; float16/bfloat16 in float32, rounded once: tests/compiler/test_compile_cpu_numerics.py). Dynamo's own switch for
# this, ``config.enable_dynamo_decompositions``, is not read by the functional handler in torch 2.13, and a backend
# cannot set it for its traces (torch.compile wraps the backend, so its ``backend_ctx_ctor`` is never entered).
WHOLE_FUNCTIONS = (torch.addcdiv,)
WHOLE_METHODS = ("method_addcdiv_",)


def _on_neuron(*variables: Any) -> bool:
    """Whether a traced tensor among ``variables`` (Dynamo's TensorVariables) lives on neuron."""
    return any(getattr(getattr(v, "device", None), "type", None) == DEVICE for v in variables)


def _whole_on_neuron(handler: Any) -> Any:
    """Dynamo's handler of a function (``TorchInGraphFunctionVariable``, arguments ``self, tx, *args``) or of a
    tensor method (``TensorVariable``, ``self`` the tensor), skipped where a tensor is on neuron: returning None
    lets Dynamo put the call in the graph as it is."""
    def handle(self: Any, tx: Any, *args: Any, **kwargs: Any) -> Any:
        if _on_neuron(self, *args, *kwargs.values()):
            return None
        return handler(self, tx, *args, **kwargs)

    handle._neuron = True  # type: ignore[attr-defined]
    return handle


def adapt_tensor_methods(module: Any) -> None:
    """TensorVariable's rewriting method handlers (WHOLE_METHODS) skipped for neuron tensors."""
    cls = getattr(module, "TensorVariable", None)
    for name in WHOLE_METHODS:
        original = getattr(cls, name, None)
        if original is None:
            continue  # this torch does not rewrite the method: it reaches the graph whole anyway
        if not getattr(original, "_neuron", False):
            setattr(cls, name, _whole_on_neuron(original))


def allow_in_graph(module: Any) -> None:
    """The stream functions trace as torch.cuda's do: in the graph (``torch._dynamo.allow_in_graph``,
    public), so Dynamo reaches the handlers above instead of skipping device_impl.runtime."""
    for fn in IN_GRAPH_FUNCTIONS:
        module.allow_in_graph(fn)
