"""The eager-mode switch: ``eager`` runs every op at the call, ``adaptive`` queues and fuses.

Switching to adaptive plugs the queue into dispatch (``dispatch.table.HOOKS``)
and the copy kernels (hooks.py); switching back flushes the queue first, then
unplugs both, so plain eager runs exactly the code it ran before. The mode is
process-wide, like the device it drives.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from device_impl.dispatch.table import HOOKS
from device_impl.eager import hooks
from device_impl.eager.queue import QUEUE

MODES = ("eager", "adaptive")
_mode = ["eager"]


def get_eager_mode() -> str:
    """The current mode: 'eager' or 'adaptive'."""
    return _mode[0]


def set_eager_mode(mode: str) -> None:
    """Switch between 'eager' and 'adaptive' (NEURON_EAGER_MODE sets the initial mode)."""
    if mode not in MODES:
        raise ValueError(f"unknown eager mode {mode!r}; choose 'eager' or 'adaptive'")
    if mode == _mode[0]:
        return
    if mode == "adaptive":
        hooks.install()
        HOOKS.barrier = QUEUE.barrier
        HOOKS.submit = QUEUE.submit
    else:
        try:
            QUEUE.flush("mode_switch")
        finally:
            HOOKS.submit = None
            HOOKS.barrier = None
            hooks.uninstall()
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
