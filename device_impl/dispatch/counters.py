"""Per-op call counts by tier, and the once-per-op fallback warning.

Counting is on the hot path of every neuron op, so it is a dict lookup and
an integer increment, nothing more.
"""

from __future__ import annotations

import warnings

from device_impl.dispatch.tiers import Tier

_TIERS = (Tier.NATIVE, Tier.DECOMPOSED, Tier.FALLBACK)
_counts: dict[str, list[int]] = {}
_warned: set[str] = set()


def record(op: str, tier_slot: int) -> None:
    """Count one call of ``op`` served by ``_TIERS[tier_slot]``."""
    slots = _counts.get(op)
    if slots is None:
        slots = _counts[op] = [0, 0, 0]
    slots[tier_slot] += 1


NATIVE_SLOT, DECOMPOSED_SLOT, FALLBACK_SLOT = 0, 1, 2


def stats() -> dict[str, dict[str, int]]:
    """``{op: {"native": n, "decomposed": n, "fallback": n}}`` for every op called since the last reset."""
    return {op: {tier.value: n for tier, n in zip(_TIERS, slots)} for op, slots in sorted(_counts.items())}


def fallback_count() -> int:
    return sum(slots[FALLBACK_SLOT] for slots in _counts.values())


def reset_stats() -> None:
    _counts.clear()


def warn_fallback_once(op: str) -> None:
    if op not in _warned:
        _warned.add(op)
        # Same wording as TorchNeuron, so log filters written for it match.
        warnings.warn(f"Operator '{op}' executed via CPU fallback", UserWarning, stacklevel=3)
