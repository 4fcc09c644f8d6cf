"""Dispatch of aten ops on neuron: the lowering table, counters, strict mode, CPU fallback.

``stats()`` reports per-op call counts by tier; ``strict()`` (or
NEURON_STRICT=1) turns the CPU fallback into NotImplementedError;
``TABLE.lookup(op)`` says how an overload is served.
"""

from __future__ import annotations

import torch

from device_impl.dispatch.counters import fallback_count, reset_stats, stats  # noqa: F401
from device_impl.dispatch.fallback import cpu_fallback
from device_impl.dispatch.strict import is_strict, set_strict, strict  # noqa: F401
from device_impl.dispatch.table import TABLE, Lowering  # noqa: F401
from device_impl.dispatch.tiers import Tier  # noqa: F401

_fallback_library: torch.library.Library | None = None


def install() -> None:
    """Register the boxed CPU fallback for every overload without a neuron kernel (idempotent)."""
    global _fallback_library
    if _fallback_library is None:
        _fallback_library = torch.library.Library("_", "IMPL")
        _fallback_library.fallback(cpu_fallback, "PrivateUse1")


def tier_of(op: str) -> Tier:
    return TABLE.lookup(op).tier
