"""The device's size-limited caches (device_impl/bounded.py) evict safely when threads share them: no KeyError or
"dictionary changed size during iteration" from an op call, never more entries than the limit, oldest first."""

from __future__ import annotations

import pathlib
import re
import sys
import threading
from typing import Callable

import device_impl
from device_impl.bounded import BoundedDict
from device_impl.eager import programs, queue
from device_impl.kernels import replay
from device_impl.kernels.elementwise import recurring

THREADS = 4
ROUNDS = 20_000


def _hammer(work: Callable[[int, int], None]) -> list[str]:
    """``work(thread, i)`` for ROUNDS i on THREADS threads switching as often as the interpreter allows (so a
    check-then-act window between two bytecodes is hit); the errors raised, as text."""
    errors: list[str] = []

    def run(t: int) -> None:
        try:
            for i in range(ROUNDS):
                work(t, i)
        except Exception as e:  # noqa: BLE001 - the test reports whatever escaped
            errors.append(repr(e))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    return errors


def test_a_full_dict_drops_its_oldest_entry_first():
    d = BoundedDict(3)
    for k in "abcd":
        d[k] = k
    assert list(d) == ["b", "c", "d"]
    d["b"] = "B"  # an existing key is updated in place: nothing dropped, its age unchanged
    assert list(d.items()) == [("b", "B"), ("c", "c"), ("d", "d")]
    assert d.put("e", "e") == 1 and list(d) == ["c", "d", "e"]
    d.limit = 1  # a shrunk limit is met at the next insertion
    assert d.setdefault("f", 0) == 0 and list(d) == ["f"]


def test_threads_inserting_popping_and_clearing_never_raise_and_stay_bounded():
    d = BoundedDict(8)

    def work(t: int, i: int) -> None:
        d[(t, i)] = i
        if i % 7 == 0:
            d.pop((t, i - 3), None)
        if i % 5000 == 0:
            d.clear()
        d.get((t, i - 1))

    assert _hammer(work) == []
    assert len(d) <= 8


def test_learning_which_calls_run_alone_from_threads(monkeypatch):
    """queue._learn is reached from every thread that flushes adaptive eager work; with the old
    ``del _ALONE[next(iter(_ALONE))]`` two threads evicting at once raised KeyError out of the flush."""
    monkeypatch.setattr(queue._ALONE, "limit", 8)
    try:
        assert _hammer(lambda t, i: queue._learn(("hammer", t, i), i % 2 == 0)) == []
        assert len(queue._ALONE) <= 8
    finally:
        queue._ALONE.clear()


def test_every_device_cache_is_bounded_and_nothing_evicts_by_hand():
    caches = {"kernels.replay._figures": replay._figures, "kernels.replay._refused": replay._refused,
              "eager.queue._ALONE": queue._ALONE}
    caches.update({f"eager.programs.{n}": getattr(programs, n)
                   for n in ("_CACHE", "_FIGURES", "_REFUSED", "_LAYOUTS", "_LAUNCHES", "_FLUSHES")})
    caches.update({f"recurring {p.name}": p.plans for p in recurring.ALL})
    assert recurring.ALL, "no recurring plans registered: the check below would see none"
    assert {name for name, d in caches.items() if not isinstance(d, BoundedDict)} == set()
    root = pathlib.Path(device_impl.__file__).parent
    by_hand = re.compile(r"del\s+[\w.]+\[next\(iter\(")
    offenders = sorted(str(p.relative_to(root)) for p in root.rglob("*.py")
                       if p.name != "bounded.py" and by_hand.search(p.read_text()))
    assert offenders == []

