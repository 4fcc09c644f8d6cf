"""The PyTorch API surface the neuron device relies on, as data, so two torch versions can be diffed.

Run inside an environment: ``python -m harness.compat.probe`` prints JSON. Each
entry names an API the device uses to register itself, dispatch, compile or
test, with what this torch has there: ``missing``, or a fingerprint (a
callable's signature, a class's public members, an enum's names). The probe
only imports torch, never the device, so it works even where the device fails
to build or import — that is when it is most useful.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from typing import Any

# (name, dotted path, why the device needs it). Grouped as DESIGN.md §3 describes the device.
APIS: tuple[tuple[str, str, str], ...] = (
    ("registration", "torch.utils.rename_privateuse1_backend", "names PrivateUse1 'neuron'"),
    ("registration", "torch._register_device_module", "installs torch.neuron"),
    ("registration", "torch.utils.generate_methods_for_privateuse1_backend", "tensor.neuron(), is_neuron"),
    ("registration", "torch._C._get_privateuse1_backend_name", "reads the registered name"),
    ("registration", "torch.utils.cpp_extension.load", "builds the C++ core"),
    ("registration", "torch._import_device_backends", "the torch.backends entry point (autoload)"),
    ("dispatch", "torch._C.DispatchKey", "PrivateUse1, AutogradPrivateUse1, AutocastPrivateUse1 keys"),
    ("dispatch", "torch.library.Library", "kernel registration on PrivateUse1"),
    ("dispatch", "torch.library.Library.impl", "kernel registration on PrivateUse1"),
    ("dispatch", "torch.library.get_kernel", "adaptive eager wraps the C++ copy kernels"),
    ("dispatch", "torch.library.register_fake", "meta kernels"),
    ("dispatch", "torch._C._storage_Use_Count", "adaptive eager's observability check"),
    ("dispatch", "torch.Tag", "the core ATen opset (torch.Tag.core)"),
    ("accelerator", "torch.accelerator.current_accelerator", "device-generic code"),
    ("accelerator", "torch.accelerator.device_count", "device-generic code"),
    ("accelerator", "torch.accelerator.synchronize", "device-generic code"),
    ("accelerator", "torch.accelerator.memory_allocated", "memory stats routing"),
    ("accelerator", "torch._C._acc", "accelerator hooks module"),
    ("compile", "torch._dynamo.register_backend", "torch.compile(backend='neuron')"),
    ("compile", "torch._dynamo.list_backends", "backend discovery"),
    ("compile", "torch._dynamo.trace_rules.add", "Dynamo skips the device's dispatched kernel code"),
    ("compile", "torch._functorch.aot_autograd.aot_module_simplified", "AOTAutograd forward/backward"),
    ("compile", "torch._decomp.core_aten_decompositions", "decompositions for backward graphs"),
    ("compile", "torch.fx.GraphModule", "graphs handed to the backend"),
    ("testing", "torch.testing._internal.common_methods_invocations.op_db", "the OpInfo sweep"),
    ("testing", "torch.testing.assert_close", "the comparator's tolerances"),
    ("autocast", "torch.amp.autocast_mode.is_autocast_available", "torch.autocast('neuron')"),
    ("distributed", "torch.distributed.Backend.register_backend", "the 'neuron' process-group backend"),
    ("serialization", "torch.serialization.register_package", "map_location='neuron'"),
)

_KEYS = ("PrivateUse1", "AutogradPrivateUse1", "AutocastPrivateUse1", "SparsePrivateUse1", "QuantizedPrivateUse1")


def _resolve(path: str) -> Any:
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 - any import failure means "not here"
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(path)


def fingerprint(obj: Any) -> str:
    """A short, stable description of what an API looks like."""
    if inspect.ismodule(obj):
        return "module: " + ", ".join(sorted(n for n in dir(obj) if not n.startswith("_"))[:80])
    if obj is not None and type(obj).__name__ == "DispatchKey":
        return str(obj)
    if inspect.isclass(obj):
        if hasattr(obj, "__members__"):  # pybind11 / Python enums
            names = [k for k in obj.__members__]
            if obj.__name__ == "DispatchKey":
                names = [k for k in names if k in _KEYS]
            return "enum: " + ", ".join(sorted(names))
        return "class: " + ", ".join(sorted(n for n in vars(obj) if not n.startswith("_")))
    if callable(obj):
        try:
            return "callable" + str(inspect.signature(obj))
        except (TypeError, ValueError):
            return "callable (builtin)"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of {len(obj)}"
    return type(obj).__name__


def probe() -> dict[str, Any]:
    import torch

    apis: dict[str, dict[str, str]] = {}
    for group, path, why in APIS:
        try:
            value = fingerprint(_resolve(path))
        except Exception as e:  # noqa: BLE001 - a missing or broken API is the finding
            value = f"missing ({type(e).__name__})"
        apis[path] = {"group": group, "why": why, "value": value}
    core = sorted(str(op) for op in _core_overloads(torch))
    return {"torch": torch.__version__, "python": sys.version.split()[0], "apis": apis,
            "core_overloads": core}


def _core_overloads(torch) -> list[str]:
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        packet, _, overload = name[len("aten::"):].partition(".")
        try:
            op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if torch.Tag.core in getattr(op, "tags", ()):
            found.append(name)
    return found


if __name__ == "__main__":
    json.dump(probe(), sys.stdout, indent=1, sort_keys=True)
    print()
