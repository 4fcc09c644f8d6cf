"""What port-check asks of a device, through PyTorch's device module only (``torch.<device>``).

The harness never imports the simulator: everything comes from functions the
device module exposes (``torch.neuron.compiler_stats()``, ``engine_stats()``,
``dispatch_stats()``, ``lowering(op)``, ``Event``, ``shapes``). A device that
lacks one (a real accelerator, the CPU) still gets a report: each answer that
needs the missing function says "not available on this device" instead of
failing, and ``missing`` lists what was absent.
"""

from __future__ import annotations

import contextlib
from types import ModuleType
from typing import Any, Callable, Iterator

import torch

NOT_AVAILABLE = "not available on this device"

# What each optional function is used for (printed with the names a device lacks).
USES = {
    "compiler_stats": "compiles, NEFF cache hits, recompiles and compile seconds",
    "reset_compiler_stats": "compiles, NEFF cache hits, recompiles and compile seconds",
    "engine_stats": "TensorE utilization",
    "reset_engine_stats": "TensorE utilization",
    "dispatch_stats": "operator tiers as served (fallback calls)",
    "reset_dispatch_stats": "operator tiers as served (fallback calls)",
    "lowering": "operator tiers from the lowering table",
    "Event": "device latency (timed events)",
}


class DeviceProbe:
    """The optional counters of one device type, each returning None when the device lacks it."""

    def __init__(self, device: str | torch.device):
        self.device = torch.device(device)
        self.module: ModuleType | None = getattr(torch, self.device.type, None)
        self.missing = sorted(name for name in USES if not callable(getattr(self.module, name, None)))

    def _call(self, name: str, *args: Any) -> Any:
        fn: Callable[..., Any] | None = getattr(self.module, name, None)
        return fn(*args) if callable(fn) else None

    def available(self, name: str) -> bool:
        return name not in self.missing

    def compiler_stats(self) -> dict | None:
        return self._call("compiler_stats")

    def reset_compiler_stats(self) -> None:
        self._call("reset_compiler_stats")

    def engine_stats(self) -> dict | None:
        return self._call("engine_stats")

    def reset_engine_stats(self) -> None:
        self._call("reset_engine_stats")

    def dispatch_stats(self) -> dict | None:
        return self._call("dispatch_stats")

    def reset_dispatch_stats(self) -> None:
        self._call("reset_dispatch_stats")

    def lowering(self, op: str) -> dict | None:
        try:
            return self._call("lowering", op)
        except (KeyError, ValueError, RuntimeError):
            return None

    def synchronize(self) -> None:
        self._call("synchronize")

    @contextlib.contextmanager
    def timed(self) -> Iterator[dict[str, float | None]]:
        """``with probe.timed() as t: ...`` then ``t["ms"]``: device time between two events, or None."""
        result: dict[str, float | None] = {"ms": None}
        event = getattr(self.module, "Event", None)
        if event is None:
            yield result
            return
        start, end = event(enable_timing=True), event(enable_timing=True)
        start.record()
        yield result
        end.record()
        end.synchronize()
        result["ms"] = float(start.elapsed_time(end))


def bucketing() -> ModuleType:
    """The bucketing and padding helpers (policies, ``pad_batch``, ``pad_to``) from ``torch.neuron.shapes``."""
    neuron = getattr(torch, "neuron", None)
    shapes = getattr(neuron, "shapes", None) if neuron is not None else None
    if shapes is None:
        raise RuntimeError("port-check needs the bucketing helpers torch.neuron.shapes (installed with neuronsim: "
                           "`import torch` registers them); this PyTorch has no torch.neuron.shapes")
    return shapes


def tensor_busy(engine_stats: dict | None) -> tuple[float, float, float] | None:
    """(TensorE busy ns, device ns, flops) summed over every kernel of an engine_stats() snapshot."""
    if not engine_stats:
        return None
    busy = sum(k.get("tensor_busy_ns", 0.0) for k in engine_stats.values())
    device = sum(k.get("device_ns", 0.0) for k in engine_stats.values())
    flops = sum(k.get("flops", 0.0) for k in engine_stats.values())
    return busy, device, flops
