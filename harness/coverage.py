"""Which overloads of the device's lowering table the harness's cases reach.

The table is asked through the device module (``torch.<device>.native_overloads()`` and
``torch.<device>.lowering(op)``), never imported: the harness only speaks PyTorch. A case
reaches an overload if its expression called it above the backend (``Result.called``,
recorded on CPU) or the device's dispatch counters saw its kernel run (``Result.device_ops``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch

SERVED_TIERS = ("native", "decomposed")


def core_overloads() -> list[str]:
    """Every overload of the installed torch tagged ``core`` ('aten::name.overload')."""
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        packet = getattr(torch.ops.aten, schema.name[6:], None)
        try:
            overload = getattr(packet, schema.overload_name or "default")
        except AttributeError:
            continue
        if torch.Tag.core in overload.tags:
            names.add(f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name)
    return sorted(names)


def _module(device: str):
    return getattr(torch, torch.device(device).type, None)


def table_ops(device: str = "neuron") -> dict[str, str]:
    """op -> tier for every overload the device's table serves (native or decomposed): its own
    kernels, and the core overloads it serves through PyTorch's composite kernels. Empty for a
    device without a lowering table (cuda): nothing to cover."""
    module = _module(device)
    native = getattr(module, "native_overloads", None)
    lowering = getattr(module, "lowering", None)
    if not callable(native) or not callable(lowering):
        return {}
    ops = {op: "native" for op in native()}
    for op in core_overloads():
        tier = lowering(op)["tier"]
        if tier in SERVED_TIERS:
            ops.setdefault(op, tier)
    return ops


@dataclass
class Coverage:
    table: dict[str, str]
    reached: set[str]
    core: list[str] = field(default_factory=core_overloads)

    @property
    def core_in_table(self) -> list[str]:
        return [op for op in self.core if op in self.table]

    @property
    def missing_core(self) -> list[str]:
        return [op for op in self.core_in_table if op not in self.reached]

    @property
    def missing(self) -> list[str]:
        return sorted(op for op in self.table if op not in self.reached)

    def line(self) -> str:
        core = self.core_in_table
        return (f"device table coverage: {len(core) - len(self.missing_core)} of {len(core)} core overloads and "
                f"{len(self.table) - len(self.missing)} of {len(self.table)} table overloads reached by these cases")


def reached(results: Iterable) -> set[str]:
    """Overloads reached by ``results`` (harness.runner.Result)."""
    ops: set[str] = set()
    for result in results:
        ops.update(result.called)
        ops.update(result.device_ops)
    return ops


def measure(results: Iterable, device: str = "neuron") -> Coverage:
    return Coverage(table_ops(device), reached(results))
