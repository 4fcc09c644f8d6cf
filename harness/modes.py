"""Execution modes: how a case's expression runs on the device under test.

``eager`` evaluates it as is. ``adaptive`` (queued, fused eager) and
``compiled`` (torch.compile with the device's backend) plug in through the
same interface; a mode the device does not provide yet reports itself
unavailable and its cases are skipped with the reason, never marked
expected-to-fail.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

MODES = ("eager", "adaptive", "compiled")


class ModeUnavailable(Exception):
    """This device does not provide the mode (yet); the case is skipped, not failed."""


class Mode:
    name = ""

    def available(self, device: str) -> str | None:
        """None when usable, else the reason it is not."""
        return None

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        raise NotImplementedError

    def synchronize(self, device: str) -> None:
        module = getattr(torch, torch.device(device).type, None)
        sync = getattr(module, "synchronize", None)
        if callable(sync):
            sync()


class Eager(Mode):
    name = "eager"

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        return fn()


class Adaptive(Mode):
    """Runs the case with the device module's adaptive eager mode switched on, if it has one."""

    name = "adaptive"

    def available(self, device: str) -> str | None:
        module = getattr(torch, torch.device(device).type, None)
        if module is None or not hasattr(module, "set_eager_mode"):
            return f"adaptive eager is not available on {device} (torch.{torch.device(device).type}.set_eager_mode)"
        return None

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        module = getattr(torch, torch.device(device).type)
        previous = module.get_eager_mode()
        module.set_eager_mode("adaptive")
        try:
            result = fn()
            self.synchronize(device)
            return result
        finally:
            module.set_eager_mode(previous)


class Compiled(Mode):
    """torch.compile(backend=<device type>, fullgraph=True) over the case's expression."""

    name = "compiled"

    def available(self, device: str) -> str | None:
        backend = torch.device(device).type
        try:
            import torch._dynamo

            if backend not in torch._dynamo.list_backends(exclude_tags=()):
                return f"no torch.compile backend named {backend!r} is registered"
        except Exception as e:  # noqa: BLE001
            return f"torch.compile unavailable: {e}"
        return None

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        compiled = torch.compile(fn, backend=torch.device(device).type, fullgraph=True, dynamic=False)
        return compiled()


REGISTRY: dict[str, Mode] = {m.name: m for m in (Eager(), Adaptive(), Compiled())}


def get(name: str) -> Mode:
    if name not in REGISTRY:
        raise ValueError(f"unknown mode {name!r}; choose from {', '.join(MODES)}")
    return REGISTRY[name]
