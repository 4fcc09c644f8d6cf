"""BoundedDict: the size-limited caches' one dict, the oldest entry dropped first, safe to share among threads.

The device's caches (eager replay's signatures, the recurring-call plans, adaptive eager's programs, flush plans,
recordings, refusals and which calls run alone) are reached from every thread that runs device work: an
autograd backward thread, a DataLoader's pin thread, a user's threads. Each used to evict with
``del d[next(iter(d))]``, which two threads can break: both read the same oldest key and the second ``del``
raises KeyError, or another thread's insertion between ``iter`` and ``next`` raises "dictionary changed size
during iteration" (a RuntimeError), either one surfacing from an innocent op call. Here every write (insert,
eviction, pop, clear) takes one lock per dict; reads (``get``, ``in``, ``[]``) stay plain dict reads, atomic
under the GIL, so a cache hit costs what it did.
"""

from __future__ import annotations

import threading
from typing import Any, Hashable

_set = dict.__setitem__
_del = dict.__delitem__


class BoundedDict(dict):
    """A dict of at most ``limit`` entries: inserting a new key into a full one drops the oldest inserted first.

    ``limit`` may be changed on the instance (tests shrink it); the next insertion evicts down to it."""

    __slots__ = ("limit", "_lock")

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self._lock = threading.Lock()

    def put(self, key: Hashable, value: Any) -> int:
        """``self[key] = value``; returns how many of the oldest entries it dropped to make room (0 or more)."""
        with self._lock:
            return self._put(key, value)

    def _put(self, key: Hashable, value: Any) -> int:  # under the lock
        dropped = 0
        if key not in self:
            while self and len(self) >= self.limit:
                _del(self, next(iter(self)))
                dropped += 1
        _set(self, key, value)
        return dropped

    def __setitem__(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._put(key, value)

    def __delitem__(self, key: Hashable) -> None:
        with self._lock:
            _del(self, key)

    def pop(self, key: Hashable, *default: Any) -> Any:
        with self._lock:
            return dict.pop(self, key, *default)

    def popitem(self) -> tuple:
        with self._lock:
            return dict.popitem(self)

    def setdefault(self, key: Hashable, default: Any = None) -> Any:
        with self._lock:
            if key not in self:
                self._put(key, default)
            return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        with self._lock:
            for key, value in dict(*args, **kwargs).items():
                self._put(key, value)

    def __ior__(self, other: Any) -> "BoundedDict":
        self.update(other)
        return self

    def clear(self) -> None:
        with self._lock:
            dict.clear(self)
