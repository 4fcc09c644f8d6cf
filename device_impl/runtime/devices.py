"""Which NeuronCores exist and which one the calling thread uses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import torch

from device_impl._core import C
from device_impl.runtime import config as _config
from device_impl.runtime.hooks import HOOKS  # read at every synchronisation point: imported once

DeviceLike = Union[int, str, torch.device, None]

_configuration: _config.DeviceConfig | None = None


def configure(cfg: _config.DeviceConfig) -> None:
    """Apply an environment configuration to the C++ core (done once at registration)."""
    global _configuration
    _configuration = cfg
    C.set_device_count(cfg.device_count)
    C.set_hbm_capacity(cfg.hbm_bytes)
    from device_impl.engine.constants import PLATFORM

    C.set_copy_model(*PLATFORM.copy_model())


def configuration() -> _config.DeviceConfig:
    assert _configuration is not None, "device_impl is not registered yet"
    return _configuration


def device_index(device: DeviceLike, optional: bool = True) -> int:
    """Normalise 1, 'neuron:1', torch.device('neuron', 1) or None (current) to an index."""
    if device is None:
        if not optional:
            raise ValueError("a neuron device is required")
        return C.current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device, got {device}. Use 'neuron' or 'neuron:<index>'.")
        return C.current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"device must be an int, str or torch.device, not {type(device).__name__}")


def is_available() -> bool:
    return C.device_count() > 0


def device_count() -> int:
    return C.device_count()


def current_device() -> int:
    return C.current_device()


def set_device(device: DeviceLike) -> None:
    index = device_index(device)
    if index >= 0:
        C.set_device(index)


class device:
    """Context manager that makes ``device`` the current NeuronCore, then restores the previous one."""

    def __init__(self, device: Any):
        self.index = -1 if device is None else device_index(device)
        self.previous = -1

    def __enter__(self) -> "device":
        if self.index >= 0:
            self.previous = C.exchange_device(self.index)
        return self

    def __exit__(self, *exc: object) -> bool:
        if self.index >= 0:
            C.set_device(self.previous)
        return False


class device_of(device):
    """Context manager selecting the device of a tensor (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "neuron" else None)


def synchronize(device: DeviceLike = None) -> None:
    """Wait for all work on a NeuronCore. Kernels finish before their launch returns, so this validates
    and runs the work adaptive eager has queued."""
    index = device_index(device)
    if not 0 <= index < C.device_count():
        raise RuntimeError(f"Invalid device neuron:{index}: {C.device_count()} NeuronCore(s) are visible.")
    run_queued("synchronize", index)


def run_queued(reason: str, device: int) -> None:
    """Run the work adaptive eager holds back (nothing in plain eager mode).

    The C++ guard calls this at every synchronisation point (csrc/device.cpp: synchronizeDevice,
    synchronizeStream, synchronizeEvent, event record/wait/query, stream query), so
    ``torch.accelerator.synchronize()`` and plain ``torch.Stream``/``torch.Event`` see work done too."""
    if HOOKS.barrier is not None:
        HOOKS.barrier(reason)


C.set_synchronize_hook(run_queued)


@dataclass(frozen=True)
class NeuronDeviceProperties:
    name: str
    platform: str
    total_memory: int
    physical_core: int
    multi_processor_count: int = 1
    type: str = "neuron"
    # dtypes a neuron tensor can hold and convert between (the C++ core's device capability, what
    # torch.accelerator.get_device_capability reports): engine compute dtypes plus storage-only
    # float64, complex32, complex64 and complex128.
    supported_dtypes: frozenset = frozenset()

    def __repr__(self) -> str:
        return (f"_NeuronDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // 2**20}MB, physical_core={self.physical_core})")


def get_device_properties(device: DeviceLike = None) -> NeuronDeviceProperties:
    index = device_index(device)
    cfg = configuration()
    if not 0 <= index < cfg.device_count:
        raise RuntimeError(f"Invalid device neuron:{index}: {cfg.device_count} NeuronCore(s) are visible.")
    capability = torch.accelerator.get_device_capability(torch.device("neuron", index))
    return NeuronDeviceProperties(name="NeuronCore-v2 (simulated)", platform="trn1",
                                  total_memory=cfg.hbm_bytes, physical_core=cfg.visible_cores[index],
                                  supported_dtypes=frozenset(capability["supported_dtypes"]))


def get_device_name(device: DeviceLike = None) -> str:
    return get_device_properties(device).name
