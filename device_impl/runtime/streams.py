"""Streams and events of the neuron device.

They are PyTorch's generic torch.Stream/torch.Event bound to the neuron
device; the C++ guard implements them. Kernels complete before their launch
returns, so any order of record/wait is honoured, and an event's timestamp is
the core's device-timeline clock: elapsed_time() is device-busy time in ms.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from device_impl._core import C
from device_impl.runtime.devices import DeviceLike, device_index


class _OnNeuron(type):
    """isinstance(x, torch.neuron.Stream) holds for any torch.Stream on a neuron device."""

    _base: type

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls._base) and obj.device.type == "neuron"


class Stream(metaclass=_OnNeuron):
    """A neuron stream: ``torch.neuron.Stream()`` on the current core, or ``Stream('neuron:1')``.

    Constructs a plain ``torch.Stream`` (PyTorch's C++ checks reject subclasses
    in some methods), so it works everywhere a torch.Stream does.
    """

    _base = torch.Stream

    def __new__(cls, device: DeviceLike = None, priority: int = 0) -> torch.Stream:  # type: ignore[misc]
        return torch.Stream(device=torch.device("neuron", device_index(device)), priority=priority)


class Event(metaclass=_OnNeuron):
    """A neuron event (a plain ``torch.Event``); ``enable_timing=True`` to use elapsed_time()."""

    _base = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,  # type: ignore[misc]
                interprocess: bool = False, device: DeviceLike = None) -> torch.Event:
        return torch.Event(device=torch.device("neuron", device_index(device)), enable_timing=enable_timing,
                           blocking=blocking, interprocess=interprocess)


_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, the type index of "neuron"


def current_stream(device: DeviceLike = None) -> torch.Stream:
    return torch.accelerator.current_stream(torch.device("neuron", device_index(device)))


def default_stream(device: DeviceLike = None) -> torch.Stream:
    """Stream id 0, the default stream of every core."""
    return torch.Stream(stream_id=0, device_index=device_index(device), device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current; work adaptive eager queued on the previous stream runs first."""
    from device_impl.dispatch.table import HOOKS

    if HOOKS.barrier is not None:
        HOOKS.barrier("stream")
    torch.accelerator.set_stream(stream)


@contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Make ``s`` current on its core for the block (None: no change)."""
    if s is None:
        yield
        return
    previous = current_stream(s.device_index)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(previous)


def device_time_ns(device: DeviceLike = None) -> int:
    """The core's device-timeline clock: simulated busy time since process start, in ns."""
    return C.device_time_ns(device_index(device))
