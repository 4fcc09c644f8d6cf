"""Where adaptive eager plugs into the runtime and into dispatch while it may hold queued work.

It lives in the runtime, the lower layer, because synchronisation points (``torch.neuron.synchronize``,
stream and event calls, the C++ guard's synchronize hook) must run queued work without the runtime
importing dispatch; ``device_impl.dispatch.table`` re-exports ``HOOKS`` for the kernels.
"""

from __future__ import annotations

from typing import Any, Callable


class EagerHooks:
    """``barrier(reason, op, args, kwargs)``: run the queued work that ``op``'s tensor arguments
    depend on before ``op`` runs outside the queue (``args=None``: all of it).
    ``submit(op, compute, out, args)``: queue (or run) a family kernel's computation.
    Both are None in plain eager mode, so eager pays one attribute test per op.
    """

    barrier: Callable[..., None] | None = None
    submit: Callable[[str, Callable[..., None], Any, dict], None] | None = None


HOOKS = EagerHooks()
