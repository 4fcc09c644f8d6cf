"""Counters of adaptive eager: what was queued, how flushes grouped it, how often programs were reused.

Plain integers updated on the hot path; ``snapshot()`` copies them out for ``device_impl.eager.stats()``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

_FIELDS = (
    "ops_queued",  # ops whose launches went into the queue
    "ops_run_eagerly",  # ops that could not wait (ran at the call, after a barrier)
    "ops_run_alone",  # ops run at the call because the flushes they headed ran them alone (queue.py)
    "steps",  # launches queued (an op may queue several, or none for empty tensors)
    "groups",  # launches made at flushes (fused groups and single steps)
    "fused_groups",  # of those, launches running more than one step
    "fused_ops",  # steps run inside fused launches
    "reductions_fused",  # reductions run on their producers' tiles
    "epilogue_ops",  # elementwise steps run on a matmul's output blocks
    "lhs_shared",  # products that took an earlier product's A^T tiles in one launch (programs.run_shared)
    "splits",  # groups whose fused form could not be built (SBUF, views), run unfused
    "programs_cached",  # fused programs planned (cache misses)
    "cache_hits",  # fused programs reused from the cache
    "programs_replayed",  # fused elementwise launches run from their recorded figures (programs.py)
    "stores_elided",  # outputs never written to HBM (nothing could observe them)
    "errors",  # queued steps that raised when they ran
)


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
