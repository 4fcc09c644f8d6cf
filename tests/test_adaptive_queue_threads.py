"""Adaptive eager's one queue (eager.queue.QUEUE) used by two Python threads: each thread's reads see its own
queued results, even while the other thread is flushing them.

Two threads in adaptive mode (each in ``eager.mode.thread_eager_mode``, as the compiler's eagerly run graphs are,
or both under the process-wide mode) queue into the same queue, so one thread's flush takes the other's steps off
the queue and runs them. Until that flush has run them, the other thread's reads must wait for it: its ``.cpu()``,
``.item()`` and ``torch.neuron.synchronize()`` found the queue empty and read the output before it was written.
"""

from __future__ import annotations

import gc
import itertools
import threading

import pytest
import torch

from device_impl import eager
from device_impl.eager.queue import QUEUE
from device_impl.engine import hbm

class _WatchedLock:
    """QUEUE.lock, telling ``waiting`` when a thread other than ``owner`` asks for it."""

    def __init__(self, lock, owner: list, waiting: threading.Event) -> None:
        self.lock, self.owner, self.waiting = lock, owner, waiting

    def __enter__(self):
        if self.owner and threading.get_ident() != self.owner[0]:
            self.waiting.set()
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)

    def acquire(self, *a, **k):
        return self.lock.acquire(*a, **k)

    def release(self):
        return self.lock.release()


_SEEDS = itertools.count(1)

READS = {
    "cpu": lambda y: y.cpu(),
    "item": lambda y: torch.tensor(y[3].item()),
    "synchronize": lambda y: (torch.neuron.synchronize(), torch.from_numpy(hbm.view(y).copy()))[1],
}


@pytest.mark.parametrize("read", READS, ids=list(READS))
@pytest.mark.parametrize("scope", ["thread", "process"])
def test_a_read_waits_for_another_threads_flush_of_its_step(monkeypatch, read, scope):
    """The main thread queues ``y = x * 3``; a second thread's flush takes it and pauses before running it; the
    main thread's read then must wait for that flush (the lock the flush holds) and see y's values. Failed before:
    the read found the queue empty and copied y's memory before the flush wrote it."""
    eager.forget_alone()  # else the multiply, once it headed a flush alone, runs at the call (queue._ALONE)
    host = torch.randn(4096, generator=torch.Generator().manual_seed(next(_SEEDS)))  # not a former test's y
    x = host.to("neuron")
    expected = host * 3
    taken, proceed = threading.Event(), threading.Event()
    owner: list[int] = []
    monkeypatch.setattr(QUEUE, "lock", _WatchedLock(QUEUE.lock, owner, proceed))
    real_run = QUEUE._run

    def paused_run(steps, *rest, **kw):
        if owner and threading.get_ident() == owner[0]:
            taken.set()  # the steps are off the queue, not run yet
            proceed.wait()  # set by the main thread's read, or by its asking for the lock
        return real_run(steps, *rest, **kw)

    monkeypatch.setattr(QUEUE, "_run", paused_run)
    failures: list[BaseException] = []

    def flusher():
        owner.append(threading.get_ident())
        try:
            eager.flush()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failures.append(e)
        finally:
            taken.set()

    mode = eager.mode.thread_eager_mode if scope == "thread" else eager.eager_mode
    with mode("adaptive"):
        y = x * 3
        assert len(QUEUE.steps) >= 1, "the multiply was not queued"
        worker = threading.Thread(target=flusher)
        worker.start()
        try:
            taken.wait()
            got = READS[read](y)
            proceed.set()
        finally:
            proceed.set()
            worker.join()
        got = got.cpu()
    assert not failures, failures
    if read == "item":
        assert got.item() == expected[3].item()
    else:
        assert torch.equal(got, expected)


def _failing_group(monkeypatch, victim_ids: set[int]) -> None:
    """A run-time failure of the group holding one of ``victim_ids``'s steps (a stand-in for a device fault in a
    flush: a step's emit raising), through the queue's own failure path (chain.StepError)."""
    from device_impl.eager import programs
    from device_impl.eager.chain import StepError

    real_run, real_shared = programs.run, programs.run_shared

    def check(items):
        for item in items:
            for step in item.group.steps:
                if step.out.untyped_storage()._cdata in victim_ids:
                    raise StepError(step) from RuntimeError("simulated device fault")

    monkeypatch.setattr(programs, "run", lambda item, stored: (check([item]), real_run(item, stored))[1])
    monkeypatch.setattr(programs, "run_shared", lambda items, stored: (check(items), real_shared(items, stored))[1])


def test_a_failed_flush_surfaces_at_the_owners_read_not_in_the_thread_that_flushed(monkeypatch):
    """The main thread queues y = x * 3 and z = y + 1; a second thread's flush runs them and the multiply's group
    fails at run time. The error belongs to the main thread's work: the flushing thread's call returns, and the
    main thread's reads of y and z (never written) raise it, as does an op taking y; before, the flushing thread
    raised it and the main thread read y's and z's unwritten memory as results."""
    eager.forget_alone()
    x = torch.randn(4096, generator=torch.Generator().manual_seed(next(_SEEDS))).to("neuron")
    failures: list[BaseException] = []

    def flusher():
        try:
            eager.flush()
        except BaseException as e:  # noqa: BLE001 - the assertion below reports it
            failures.append(e)

    with eager.mode.thread_eager_mode("adaptive"):
        y = x * 3
        z = y + 1
        assert len(QUEUE.steps) >= 2, "the ops were not queued"
        _failing_group(monkeypatch, {y.untyped_storage()._cdata})
        worker = threading.Thread(target=flusher)
        worker.start()
        worker.join()
        assert not failures, f"the flushing thread raised the other thread's error: {failures}"
        for read in (lambda: y.cpu(), lambda: z.cpu(), lambda: y[3].item(), lambda: torch.neg(y).cpu()):
            with pytest.raises(RuntimeError, match="simulated device fault"):
                read()
        fresh = (x * 2).cpu()  # work not touching the failed outputs runs as ever
    assert torch.equal(fresh, x.cpu() * 2)
    del y, z
    gc.collect()  # the raised errors' frames
    QUEUE.check_poisoned([])
    assert not QUEUE.poisoned  # once nothing holds the failed outputs, nothing is kept for them


def test_a_failed_flush_of_ones_own_work_raises_there_and_poisons_the_outputs(monkeypatch):
    """One thread: its flush raises the error as before, and an output the failed flush left unwritten raises it
    again when read later, instead of reading as a result."""
    eager.forget_alone()
    x = torch.randn(4096, generator=torch.Generator().manual_seed(next(_SEEDS))).to("neuron")
    with eager.mode.thread_eager_mode("adaptive"):
        y = x * 3
        z = y + 1
        _failing_group(monkeypatch, {y.untyped_storage()._cdata})
        with pytest.raises(RuntimeError, match="simulated device fault"):
            eager.flush()
        with pytest.raises(RuntimeError, match="simulated device fault"):
            z.cpu()
    del y, z
    gc.collect()  # the raised errors' frames
    QUEUE.check_poisoned([])
    assert not QUEUE.poisoned
