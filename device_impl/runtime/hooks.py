"""Where adaptive eager plugs into the runtime and into dispatch while it may hold queued work.

It lives in the runtime, the lower layer, because synchronisation points (``torch.neuron.synchronize``,
stream and event calls, the C++ guard's synchronize hook) must run queued work without the runtime
importing dispatch; ``device_impl.dispatch.table`` re-exports ``HOOKS`` for the kernels.
"""

from __future__ import annotations

import threading
from typing import Any, Callable


class Outside(threading.local):
    """How deep this thread is inside kernels that run outside the queue (per thread: autograd runs a
    device's backward on its own thread).

    A kernel that is not queued writes its outputs directly in its own launch, and may first make tensors
    with torch ops (``torch.zeros_like`` for an accumulator, ``x.to(dtype)`` for a reduction in another
    dtype). Those ops must run at once: queued, their launches would run at a later flush, after the
    kernel's own launch read or wrote the same memory (a zero fill landing over the gradient just
    scattered into it, a cast read before it was computed). While ``depth`` is positive, adaptive eager
    runs what is submitted to it immediately, after a barrier, as plain eager would.
    """

    depth = 0


class EagerHooks(threading.local):
    """``barrier(reason, op, args, kwargs)``: run the queued work that ``op``'s tensor arguments
    depend on before ``op`` runs outside the queue (``args=None``: all of it).
    ``submit(op, compute, out, args)``: queue (or run) a family kernel's computation.
    Both are None in plain eager mode, so eager pays one attribute test per op.
    ``outside``: see ``Outside``; dispatch raises its depth around every native kernel it runs after a
    barrier, adaptive eager reads it.

    Per thread where a thread asks: the process-wide mode (``eager.mode.set_eager_mode``) sets the class's
    attributes, which every thread reads; a thread's own mode (``eager.mode.thread_eager_mode``, the compiler's
    eagerly run graphs) sets the instance's, which only that thread sees (a ``threading.local``), so another
    thread's eager ops are not queued behind it.
    """

    barrier: Callable[..., None] | None = None
    submit: Callable[[str, Callable[..., None], Any, dict], None] | None = None
    outside: Outside = Outside()


HOOKS = EagerHooks()
