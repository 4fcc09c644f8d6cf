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
# Non-dense layouts dispatch to their own keys; the device has no kernels for them.
_UNSUPPORTED_LAYOUT_KEYS = ("SparsePrivateUse1", "SparseCsrPrivateUse1", "QuantizedPrivateUse1")


def _refuse_layout(op: torch._ops.OpOverload, *args: object, **kwargs: object) -> None:
    raise NotImplementedError(
        f"neuron supports only torch.strided (dense) tensors, but {op} was called with a sparse or quantized "
        f"neuron tensor. Convert with .to_dense() (or dequantize) before moving the tensor to neuron.")


def install() -> None:
    """Register the boxed CPU fallback for every overload without a neuron kernel (idempotent)."""
    global _fallback_library
    if _fallback_library is None:
        _fallback_library = torch.library.Library("_", "IMPL")
        _fallback_library.fallback(cpu_fallback, "PrivateUse1")
        for key in _UNSUPPORTED_LAYOUT_KEYS:
            _fallback_library.fallback(_refuse_layout, key)


def tier_of(op: str) -> Tier:
    return TABLE.lookup(op).tier
