"""Host threads for a compiled program's independent arithmetic (the static replay's fast path), and for a replayed
fused elementwise launch of adaptive eager (its regions: ``eager.programs``).

A simulated launch's wall time is mostly numpy: the products' BLAS calls, their epilogues and the attention
step's per-head arithmetic. Their blocks are independent (a product's output tiles, each summing its K slices in
order, then the epilogue of the share's rows where a share covers whole rows; an attention step's batches), numpy
releases the GIL inside each call, and a block computed on another thread is the same calls on the same operands,
so its bits are the serial run's. ``split`` runs such blocks on
``width()`` threads: the caller takes one share, worker threads the others.

How many threads (``width``): ``NEURON_HOST_THREADS`` where set (runtime.config.host_threads), else
``torch.get_num_threads()`` at the call, so a process that pins torch (the benchmarks' one thread, a
pytest-xdist worker set to one) gets no extra thread; and one thread, whatever was asked, while numpy's BLAS
runs more than one thread per call (it then spreads each product over the cores itself, and its threaded
kernels give other last bits than its one-thread ones, so products must stay serial to match the
instruction-level run), or where its thread count cannot be read (threadpoolctl missing). The workers are
started again in a forked child (threads do not survive a fork); one thread's split at a time uses them.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from typing import Callable

import torch

from device_impl.runtime.config import host_threads

THREADS = host_threads()  # None: follow torch.get_num_threads()

_lock = threading.Lock()  # held by the one split that uses the workers (another thread's split runs serially)
_workers: list["_Worker"] = []
_owner = 0  # the pid the workers were started in (threads do not survive a fork)
_blas: list | None = None  # threadpoolctl's controllers of the BLAS libraries loaded (numpy's), [] if unknown


class _Worker:
    """One host thread that runs a share when handed one: two locks pass the share and its completion (a
    ThreadPoolExecutor's queue and futures cost about twice as much per share, several times a launch)."""

    def __init__(self) -> None:
        self._go = threading.Lock()
        self._go.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._share: tuple | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._loop, name="neuron-host", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._go.acquire()
            context, work, start, stop = self._share
            try:
                context.run(work, start, stop)
            except BaseException as error:  # noqa: BLE001 - handed to the caller (wait)
                self._error = error
            # drop the share before waiting for the next: this frame's locals would otherwise keep the last
            # share's closure (and the tensors it reaches: an adaptive launch's operands) alive while idle
            self._share = context = work = None
            self._done.release()

    def submit(self, work: Callable[[int, int], None], start: int, stop: int) -> None:
        self._share = (contextvars.copy_context(), work, start, stop)
        self._go.release()

    def wait(self) -> BaseException | None:
        self._done.acquire()
        error, self._error = self._error, None
        return error


def _blas_controllers() -> list:
    global _blas
    if _blas is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # the count cannot be read: never add threads beside a BLAS that may be threaded
            _blas = []
        else:
            _blas = [c for c in ThreadpoolController().lib_controllers if c.user_api == "blas"]
    return _blas


def blas_threads() -> int | None:
    """The most threads numpy's BLAS (any BLAS loaded, to be safe) uses per call now; None when unknown."""
    controllers = _blas_controllers()
    if not controllers:
        return None
    return max(c.get_num_threads() for c in controllers)


def width(blas: bool = True) -> int:
    """Threads an execution's independent blocks may use now (module docstring). ``blas=False``: blocks that call
    no BLAS (a fused elementwise chain's regions: ``eager.programs``), whose bits no BLAS thread count changes, so
    numpy's BLAS threads do not hold them to one."""
    asked = THREADS if THREADS is not None else torch.get_num_threads()
    if asked <= 1 or (blas and blas_threads() != 1):
        return 1
    return asked


def _started(count: int) -> list[_Worker]:
    """``count`` workers of this process (call with ``_lock`` held)."""
    global _workers, _owner
    if _owner != os.getpid():
        _workers, _owner = [], os.getpid()
    while len(_workers) < count:
        _workers.append(_Worker())
    return _workers[:count]


def split(extent: int, work: Callable[[int, int], None], threads: int) -> None:
    """``work(start, stop)`` over ``[0, extent)`` in ``min(threads, extent)`` contiguous shares, the first (the
    one whose start is 0) on the calling thread, the others on the workers, each under a copy of the caller's
    context (numpy's errstate is a context variable); returns when every share is done, raising the first
    error a share raised. While another thread's split holds the workers, this one runs on its own thread."""
    shares = min(threads, extent)
    if shares <= 1 or not _lock.acquire(blocking=False):
        work(0, extent)
        return
    try:
        bounds = [extent * i // shares for i in range(shares + 1)]
        workers = _started(shares - 1)
        for i, worker in enumerate(workers, start=1):
            worker.submit(work, bounds[i], bounds[i + 1])
        try:
            work(bounds[0], bounds[1])
        finally:
            errors = [worker.wait() for worker in workers]  # every share is done before the split returns
    finally:
        _lock.release()
    for error in errors:
        if error is not None:
            raise error


class SplitChoice:
    """Whether one step's split pays on this host, learned from that step's own executions.

    A split's worth depends on the host, not only on the arithmetic: where the host's cores are SMT siblings of one
    physical core (this project's 2-vCPU guests), a product's BLAS calls on two threads share one core's FMA
    units, so its halves ran 1.45x faster at best and a decoder block's smaller products lost time to the
    hand-over (0.89 ms serial against 1.01 ms split), while a share of float64 exps (latency-bound) or of
    separate cores gains. So no fixed rule on flops (``replay.SHARE_FLOPS`` stays the least worth trying) can
    be right on every host. A step asks ``threads(wanted)`` at each execution and reports its wall time
    (``record``): the first ``2 * (TRIALS + 1)`` executions alternate between one thread and ``wanted`` (each
    first sample dropped: it pays the recording of plans and tiles), then the count whose median was lower is
    kept for ``RECHECK`` executions (the host's load changes: a choice made beside another busy process is
    measured again) or until ``wanted`` changes (torch.set_num_threads, NEURON_HOST_THREADS). The bits do not
    depend on the choice (``split``: the same calls on the same operands), only the wall time does."""

    TRIALS = 3
    RECHECK = 512

    def __init__(self) -> None:
        self.wanted = 0  # the width the samples were taken at
        self.samples: dict[int, list[float]] = {}
        self.choice: int | None = None
        self.kept = 0  # executions run at the choice since it was made
        self._lock = threading.Lock()

    def threads(self, wanted: int) -> int:
        """The thread count to run this execution with (1 when ``wanted`` is 1)."""
        if wanted <= 1:
            return 1
        with self._lock:
            if wanted != self.wanted:
                self.wanted, self.samples, self.choice = wanted, {1: [], wanted: []}, None
            if self.choice is not None:
                self.kept += 1
                if self.kept <= self.RECHECK:
                    return self.choice
                self.samples, self.choice = {1: [], wanted: []}, None
            one, many = len(self.samples[1]), len(self.samples[wanted])
            return 1 if one < many else wanted

    def record(self, threads: int, seconds: float) -> None:
        """The wall seconds one execution took at ``threads`` (from ``threads``)."""
        with self._lock:
            samples = self.samples.get(threads)
            if self.choice is not None or samples is None:
                return
            samples.append(seconds)
            if all(len(v) > self.TRIALS for v in self.samples.values()):
                medians = {n: sorted(v[1:])[len(v[1:]) // 2] for n, v in self.samples.items()}
                self.choice, self.kept = min(medians, key=lambda n: (medians[n], n)), 0

    def run(self, extent: int, work: Callable[[int, int], None], wanted: int) -> None:
        """``split(extent, work, n)`` at the count ``threads(wanted)`` gives, timed for ``record``."""
        wanted = min(wanted, extent)
        threads = self.threads(wanted)
        if wanted <= 1 or self.choice is not None:
            split(extent, work, threads)
            return
        started = time.perf_counter()
        split(extent, work, threads)
        self.record(threads, time.perf_counter() - started)


__all__ = ["THREADS", "blas_threads", "width", "split", "SplitChoice"]
