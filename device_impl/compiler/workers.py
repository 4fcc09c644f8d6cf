"""Host threads for a compiled program's independent arithmetic (the static replay's fast path).

A simulated launch's wall time is mostly numpy: the products' BLAS calls and the attention step's per-head
arithmetic. Their blocks are independent (a product's output tiles, each summing its K slices in order; an
attention step's batches), numpy releases the GIL inside each call, and a block computed on another thread
is the same calls on the same operands, so its bits are the serial run's. ``split`` runs such blocks on
``width()`` threads: the caller takes one share, a small pool the others.

How many threads (``width``): ``NEURON_HOST_THREADS`` where set (runtime.config.host_threads), else
``torch.get_num_threads()`` at the call, so a process that pins torch (the benchmarks' one thread, a
pytest-xdist worker set to one) gets no extra thread; and one thread, whatever was asked, while numpy's BLAS
runs more than one thread per call (it then spreads each product over the cores itself, and its threaded
kernels give other last bits than its one-thread ones, so products must stay serial to match the
instruction-level run), or where its thread count cannot be read (threadpoolctl missing). The pool is made
again in a forked child (its threads do not survive a fork) and when more threads are asked for.
"""

from __future__ import annotations

import contextvars
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import torch

from device_impl.runtime.config import host_threads

THREADS = host_threads()  # None: follow torch.get_num_threads()

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_owner = (0, 0)  # (pid, workers) the pool was made for
_blas: list | None = None  # threadpoolctl's controllers of the BLAS libraries loaded (numpy's), [] if unknown


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


def width() -> int:
    """Threads an execution's independent blocks may use now (module docstring)."""
    asked = THREADS if THREADS is not None else torch.get_num_threads()
    if asked <= 1 or blas_threads() != 1:
        return 1
    return asked


def _workers(count: int) -> ThreadPoolExecutor:
    global _pool, _pool_owner
    pid = os.getpid()
    with _lock:
        if _pool is None or _pool_owner[0] != pid or _pool_owner[1] < count:
            if _pool is not None and _pool_owner[0] == pid:
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=count, thread_name_prefix="neuron-host")
            _pool_owner = (pid, count)
        return _pool


def split(extent: int, work: Callable[[int, int], None], threads: int) -> None:
    """``work(start, stop)`` over ``[0, extent)`` in ``min(threads, extent)`` contiguous shares, the first (the
    one whose start is 0) on the calling thread, the others on the pool, each under the caller's context (numpy's errstate is a context
    variable); returns when every share is done, raising the first share's error."""
    shares = min(threads, extent)
    if shares <= 1:
        work(0, extent)
        return
    bounds = [extent * i // shares for i in range(shares + 1)]
    pool = _workers(shares - 1)
    futures: list[Future] = [pool.submit(contextvars.copy_context().run, work, bounds[i], bounds[i + 1])
                             for i in range(1, shares)]
    try:
        work(bounds[0], bounds[1])
    finally:
        errors = [f.exception() for f in futures]  # waits for every share: none outlives the call
    for error in errors:
        if error is not None:
            raise error


__all__ = ["THREADS", "blas_threads", "width", "split"]
