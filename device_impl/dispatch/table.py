"""The lowering table: one entry per aten overload, saying how neuron serves it.

Kernels register here (``@TABLE.native("aten::add.Tensor")``), never
directly with torch.library, so the table is the single answer to "what does
the device run natively": the harness, the reports and port-check ask it
instead of keeping lists of their own. Overloads with no entry reach the
boxed CPU fallback, unless PyTorch decomposes them before they reach a
backend (tier ``composite``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from device_impl.dispatch import counters
from device_impl.dispatch.tiers import Tier

# Kernels of the C++ core (device_impl/csrc/aten_ops.cpp): metadata, views and copies.
CSRC_KERNELS = (
    "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::_reshape_alias",
    "aten::resize_", "aten::set_.source_Tensor", "aten::set_.source_Storage",
    "aten::set_.source_Storage_storage_offset", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize",
    "aten::_local_scalar_dense",
)


@dataclass(frozen=True)
class Lowering:
    op: str
    tier: Tier
    source: str  # where the kernel lives: a module path, "csrc", "torch._decomp", "cpu"


def _is_composite(op: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicitAutograd") or \
        torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeExplicitAutograd")


class LoweringTable:
    def __init__(self) -> None:
        self._entries: dict[str, Lowering] = {op: Lowering(op, Tier.NATIVE, "csrc") for op in CSRC_KERNELS}
        self._library = torch.library.Library("aten", "IMPL")

    def native(self, *ops: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register ``fn`` as the neuron kernel of each overload in ``ops``."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            for op in ops:
                self._register(op, fn, Tier.NATIVE, counters.NATIVE_SLOT, fn.__module__)
            return fn

        return register

    def decomposed(self, op: str, decomposition: Callable[..., Any]) -> None:
        """Serve ``op`` by a decomposition into ops the device runs."""
        self._register(op, decomposition, Tier.DECOMPOSED, counters.DECOMPOSED_SLOT, "torch._decomp")

    def _register(self, op: str, fn: Callable[..., Any], tier: Tier, slot: int, source: str) -> None:
        if op in self._entries:
            raise ValueError(f"{op} already has a neuron lowering ({self._entries[op].source})")
        record = counters.record

        def counted(*args: Any, **kwargs: Any) -> Any:
            record(op, slot)
            return fn(*args, **kwargs)

        counted.__name__ = f"neuron_{op.replace('::', '_').replace('.', '_')}"
        self._library.impl(op.split("::", 1)[1], counted, "PrivateUse1")
        self._entries[op] = Lowering(op, tier, source)

    def lookup(self, op: str) -> Lowering:
        entry = self._entries.get(op)
        if entry is not None:
            return entry
        if _is_composite(op):
            return Lowering(op, Tier.COMPOSITE, "torch")
        return Lowering(op, Tier.FALLBACK, "cpu")

    def entries(self) -> Iterable[Lowering]:
        return self._entries.values()

    def ops(self, tier: Tier) -> list[str]:
        return sorted(op for op, entry in self._entries.items() if entry.tier is tier)


TABLE = LoweringTable()
