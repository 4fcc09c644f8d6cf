"""Roofline figures of one call: compulsory HBM traffic, the TensorE/HBM roofline time, MFU and MBU.

The compulsory traffic of a call is what no schedule can avoid: every tensor the call reads but did not
make (weights, buffers, inputs) read once, and its outputs written once. It is found by running the
workload on CPU under a dispatch mode that watches which storages each aten op reads and writes, so a
case needs no hand-written byte count. A storage the call only gathers from (an embedding table) counts
whole: for such a call the figure is an upper bound.

The roofline time is max(TensorE flops / TensorE peak, compulsory bytes / DMA bandwidth) with the
platform's own peaks (device_impl.engine.PLATFORM); MFU and MBU are the device's achieved TensorE flop
rate and HBM byte rate over those peaks, from the engine's statistics of the same call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from device_impl import engine


def _storage(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class _Traffic(TorchDispatchMode):
    """Storages an op reads that no earlier op of the call wrote: the call's external inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.external: dict[int, int] = {}
        self.made: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for arg in tree_leaves((args, kwargs)):
            if isinstance(arg, torch.Tensor) and arg.device.type == "cpu":
                ptr, nbytes = _storage(arg)
                if ptr and ptr not in self.made:
                    self.external[ptr] = max(self.external.get(ptr, 0), nbytes)
        out = func(*args, **kwargs)
        for result in tree_leaves(out):
            if isinstance(result, torch.Tensor) and result.device.type == "cpu":
                ptr, _ = _storage(result)
                if ptr not in self.external:  # a view of an input is still the input
                    self.made.add(ptr)
        return out


def compulsory_bytes(cpu_workload: Callable[[], Any]) -> int:
    """Bytes a call must move: its external inputs read once plus its outputs written once (CPU run)."""
    watch = _Traffic()
    with watch:
        out = cpu_workload()
    written = sum(t.numel() * t.element_size() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
    return sum(watch.external.values()) + written


@dataclass(frozen=True)
class Roofline:
    device_seconds: float  # the launches' device time (engine statistics)
    tensore_flops: int
    hbm_bytes: int
    compulsory_bytes: int
    peak_flops: float
    peak_bytes_per_second: float

    @property
    def seconds(self) -> float:
        """The roofline: the larger of the compute time and the compulsory traffic's time at peak."""
        return max(self.tensore_flops / self.peak_flops, self.compulsory_bytes / self.peak_bytes_per_second)

    @property
    def mfu(self) -> float:
        return self.tensore_flops / (self.device_seconds * self.peak_flops) if self.device_seconds else 0.0

    @property
    def mbu(self) -> float:
        return self.hbm_bytes / (self.device_seconds * self.peak_bytes_per_second) if self.device_seconds else 0.0


def measure(fn: Callable[[], Any], dtype: torch.dtype, compulsory: int) -> Roofline:
    """The roofline figures of one neuron call of ``fn`` (after its warm-up), from the engine's statistics."""
    fn()
    torch.neuron.synchronize()
    engine.reset_stats()
    fn()
    torch.neuron.synchronize()
    launches = list(engine.stats().values())
    platform = engine.PLATFORM
    tflops = platform.bf16_tflops if dtype in (torch.bfloat16, torch.float16) else platform.fp32_tflops
    return Roofline(device_seconds=sum(s["device_ns"] for s in launches) / 1e9,
                    tensore_flops=int(sum(s.get("flops", 0) for s in launches)),
                    hbm_bytes=int(sum(s["hbm_bytes"] for s in launches)),
                    compulsory_bytes=compulsory, peak_flops=tflops * 1e12,
                    peak_bytes_per_second=platform.dma_bytes_per_second)
