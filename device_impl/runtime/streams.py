"""Streams and events of the neuron device.

They are PyTorch's generic torch.Stream/torch.Event bound to the neuron
device; the C++ guard implements them. Kernels complete before their launch
returns, so any order of record/wait is honoured, and an event's timestamp is
the core's device-timeline clock: elapsed_time() is device-busy time in ms.

Adaptive eager (device_impl.eager) holds work back until data must exist. The
C++ guard runs the queued work at every point where a program synchronises or
timestamps (record, wait, query, synchronize: ``devices.run_queued``), so plain
``torch.Stream``/``torch.Event`` objects and ``torch.accelerator.synchronize()``
see it done. The streams and events made here (``torch.neuron.Stream/Event``,
``current_stream``, ``default_stream``, ``Stream.record_event``) are subclasses
of torch.Stream and torch.Event that also flush before entering or leaving a
stream context. PyTorch's C++ checks reject subclasses in two places,
``torch.Stream.record_event(event)`` and ``torch.Event.elapsed_time(other)``,
so both are overridden here.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

from device_impl._core import C
from device_impl.runtime.devices import DeviceLike, device_index


class _OnNeuron(type):
    """isinstance(x, torch.neuron.Stream) holds for any torch.Stream on a neuron device (and Event alike)."""

    _base: type

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, cls._base) and obj.device.type == "neuron"


def _barrier(reason: str) -> None:
    """Run the work adaptive eager holds back (nothing in plain eager mode)."""
    from device_impl.runtime.hooks import HOOKS

    if HOOKS.barrier is not None:
        HOOKS.barrier(reason)


_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, the type index of "neuron"


class Event(torch.Event, metaclass=_OnNeuron):
    """A neuron event (a torch.Event subclass); ``enable_timing=True`` to use elapsed_time().

    Its synchronising methods run queued work first (see the module docstring). A real subclass of
    torch.Event, so Dynamo traces its construction and methods (device_impl/dynamo_interface.py).
    """

    _base = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                device: DeviceLike = None) -> "Event":
        return super().__new__(cls, device=torch.device("neuron", device_index(device)),
                               enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 device: DeviceLike = None) -> None:
        super().__init__()
        self._timing = enable_timing
        self._recorded_ns: int | None = None

    def record(self, stream: torch.Stream | None = None) -> None:
        _barrier("event")
        super().record(stream)
        index = self.device.index
        self._recorded_ns = C.device_time_ns(C.current_device() if index is None else index)

    def wait(self, stream: torch.Stream | None = None) -> None:
        _barrier("event")
        super().wait(stream)

    def query(self) -> bool:
        _barrier("event")
        return super().query()

    def synchronize(self) -> None:
        _barrier("event")
        super().synchronize()

    def elapsed_time(self, end_event: torch.Event) -> float:
        if type(end_event) is torch.Event:
            return super().elapsed_time(end_event)
        # The C++ binding accepts only exact torch.Event arguments: the same checks and clock, here.
        if self._recorded_ns is None or getattr(end_event, "_recorded_ns", None) is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self._timing and end_event._timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True' to measure "
                               "elapsed time.")
        if self.device != end_event.device:
            raise RuntimeError("Events were recorded on different neuron devices.")
        return (end_event._recorded_ns - self._recorded_ns) / 1e6


class Stream(torch.Stream, metaclass=_OnNeuron):
    """A neuron stream: ``torch.neuron.Stream()`` on the current core, or ``Stream('neuron:1')``.

    A torch.Stream subclass whose synchronising methods run queued work first (see the module
    docstring); ``Stream(stream_id=, device_index=, device_type=)`` rewraps an existing stream, as
    torch.Stream does.
    """

    _base = torch.Stream

    def __new__(cls, device: DeviceLike = None, priority: int = 0, **existing) -> "Stream":
        if existing:
            return super().__new__(cls, **existing)
        fresh = torch.Stream(device=torch.device("neuron", device_index(device)), priority=priority)
        return super().__new__(cls, stream_id=fresh.stream_id, device_index=fresh.device_index,
                               device_type=_PRIVATEUSE1)

    def __init__(self, device: DeviceLike = None, priority: int = 0, **existing) -> None:
        super().__init__()

    def synchronize(self) -> None:
        _barrier("stream")
        super().synchronize()

    def query(self) -> bool:
        _barrier("stream")
        return super().query()

    def wait_event(self, event: torch.Event) -> None:
        _barrier("event")
        super().wait_event(event)

    def wait_stream(self, stream: torch.Stream) -> None:
        _barrier("stream")
        super().wait_stream(stream)

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        if event is None:
            event = Event(device=self.device)
        event.record(self)
        return event

    def __enter__(self):
        _barrier("stream")
        return super().__enter__()

    def __exit__(self, *exc):
        _barrier("stream")
        return super().__exit__(*exc)


def _neuron_stream(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=_PRIVATEUSE1)


def current_stream(device: DeviceLike = None) -> torch.Stream:
    return _neuron_stream(torch.accelerator.current_stream(torch.device("neuron", device_index(device))))


def default_stream(device: DeviceLike = None) -> torch.Stream:
    """Stream id 0, the default stream of every core."""
    return Stream(stream_id=0, device_index=device_index(device), device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current; work adaptive eager queued on the previous stream runs first."""
    from device_impl.runtime.hooks import HOOKS

    if HOOKS.barrier is not None:
        HOOKS.barrier("stream")
    torch.accelerator.set_stream(stream)


@contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Make ``s`` current on its core for the block (None: no change). Making a stream current also makes
    its core current (torch.accelerator.set_stream, as torch.cuda.set_stream); like torch.cuda.stream,
    the block's end restores both the core's previous stream and the previously current core."""
    if s is None:
        yield
        return
    device_before = C.current_device()
    previous = current_stream(s.device_index)
    set_stream(s)
    try:
        yield
    finally:
        set_stream(previous)
        if C.current_device() != device_before:
            C.set_device(device_before)


def device_time_ns(device: DeviceLike = None) -> int:
    """The core's device-timeline clock: simulated busy time since process start, in ns."""
    return C.device_time_ns(device_index(device))
