"""Counters of adaptive eager: what was queued, how flushes grouped it, how often programs were reused.

Plain integers updated on the hot path; ``snapshot()`` copies them out for ``device_impl.eager.stats()``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

_FIELDS = ("ops_queued", "ops_run_eagerly", "groups", "fused_groups", "fused_ops", "programs_cached",
           "cache_hits", "stores_elided", "errors")


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        for name in _FIELDS:
            setattr(self, name, 0)
        self.flushes: Counter[str] = Counter()

    def snapshot(self) -> dict[str, Any]:
        result: dict[str, Any] = {name: getattr(self, name) for name in _FIELDS}
        result["flushes"] = dict(self.flushes)
        result["flushes_total"] = sum(self.flushes.values())
        return result


STATS = Stats()
