"""Strict mode: the CPU fallback becomes an error naming the op.

On when NEURON_STRICT=1 at import, or inside ``with strict():``; a thread's
setting does not leak into other threads.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

_default = os.environ.get("NEURON_STRICT", "0").strip().lower() in {"1", "true", "yes", "on"}
_local = threading.local()


def is_strict() -> bool:
    return getattr(_local, "strict", _default)


def set_strict(enabled: bool) -> None:
    _local.strict = bool(enabled)


@contextmanager
def strict(enabled: bool = True) -> Iterator[None]:
    previous = is_strict()
    set_strict(enabled)
    try:
        yield
    finally:
        set_strict(previous)


def refuse(op: str) -> NotImplementedError:
    return NotImplementedError(
        f"Operator '{op}' has no native or decomposed lowering on the neuron device, and strict mode "
        f"(NEURON_STRICT=1 or device_impl.dispatch.strict()) forbids the CPU fallback. Rewrite the model "
        f"without this op, or leave strict mode to run it on the CPU (counted in device_impl.dispatch.stats())."
    )
