"""The eager-mode switch: ``eager`` runs every op at the call, ``adaptive`` queues and fuses.

Switching to adaptive plugs the queue into dispatch (``dispatch.table.HOOKS``)
and the copy kernels (hooks.py); switching back flushes the queue first, then
unplugs both, so plain eager runs exactly the code it ran before. The mode is
process-wide, like the device it drives (``set_eager_mode``, ``eager_mode``):
autograd runs a backward on a thread of its own, which must queue as the caller
does. ``thread_eager_mode`` switches the calling thread alone (the compiler's
eagerly run graphs: another thread's eager ops must not queue behind them),
through the per-thread attributes of ``HOOKS``; the copy kernels, registered
process-wide while any thread needs them, pass a thread that does not straight to
the C++ kernels.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

from device_impl.dispatch.table import HOOKS
from device_impl.eager import hooks
from device_impl.eager.queue import QUEUE
from device_impl.runtime.hooks import EagerHooks

MODES = ("eager", "adaptive")
_mode = ["eager"]  # the process-wide mode
_thread = threading.local()  # .mode: the calling thread's own, inside a thread_eager_mode block
_holders = [0]  # the process-wide adaptive mode and each thread's adaptive block: the copy kernels stay plugged
_lock = threading.Lock()


def get_eager_mode() -> str:
    """The calling thread's mode: 'eager' or 'adaptive' (its own inside ``thread_eager_mode``, else the
    process-wide one)."""
    return getattr(_thread, "mode", None) or _mode[0]


def _plug() -> None:
    with _lock:
        if not _holders[0]:
            hooks.install()
        _holders[0] += 1


def _unplug() -> None:
    with _lock:
        _holders[0] -= 1
        if not _holders[0]:
            hooks.uninstall()


def set_eager_mode(mode: str) -> None:
    """Switch between 'eager' and 'adaptive' (NEURON_EAGER_MODE sets the initial mode)."""
    if mode not in MODES:
        raise ValueError(f"unknown eager mode {mode!r}; choose 'eager' or 'adaptive'")
    if mode == _mode[0]:
        return
    if mode == "adaptive":
        _plug()
        EagerHooks.barrier = QUEUE.barrier  # the class's: every thread without a mode of its own
        EagerHooks.submit = QUEUE.submit
    else:
        try:
            QUEUE.flush("mode_switch")
        finally:
            EagerHooks.submit = None
            EagerHooks.barrier = None
            _unplug()
    _mode[0] = mode


@contextmanager
def eager_mode(mode: str) -> Iterator[None]:
    """``with torch.neuron.eager_mode("adaptive"):`` the block runs in that mode (flushed on exit)."""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)


@contextmanager
def thread_eager_mode(mode: str) -> Iterator[None]:
    """The block runs in ``mode`` on the calling thread alone: other threads keep theirs. Leaving adaptive mode (at
    the block's start or end) flushes the queue first, as ``set_eager_mode`` does. The compiler runs the graphs it
    cannot lower so (``compiler.fallback``); switching the process-wide mode queued a second thread's eager ops
    behind the graph."""
    if mode not in MODES:
        raise ValueError(f"unknown eager mode {mode!r}; choose 'eager' or 'adaptive'")
    before = get_eager_mode()
    previous = getattr(_thread, "mode", None)
    own = {name: HOOKS.__dict__[name] for name in ("barrier", "submit") if name in HOOKS.__dict__}
    adaptive = mode == "adaptive"
    if before == "adaptive" and not adaptive:
        QUEUE.flush("mode_switch")
    if adaptive:
        _plug()
    HOOKS.barrier = QUEUE.barrier if adaptive else None  # this thread's attributes (HOOKS is a threading.local)
    HOOKS.submit = QUEUE.submit if adaptive else None
    _thread.mode = mode
    try:
        yield
    finally:
        try:
            if adaptive and before != "adaptive":
                QUEUE.flush("mode_switch")
        finally:
            for name in ("barrier", "submit"):
                if name in own:
                    setattr(HOOKS, name, own[name])
                else:
                    delattr(HOOKS, name)
            _thread.mode = previous
            if adaptive:
                _unplug()
