"""Benchmark cases shared by every benchmark front end (one-run ratio scripts, asv, pytest-benchmark).

A case builds, for a device and dtype, a zero-argument callable that runs the
workload once; inputs are created outside the timed call. The same
definition is timed on CPU eager and on neuron in the same process, so
ratios come from one run.
"""

from __future__ import annotations

import timeit
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import device_impl  # noqa: F401  (registers the neuron device when autoload is off)
from device_impl._core import C

F = torch.nn.functional
Workload = Callable[[], Any]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[str, torch.dtype], Workload]
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    description: str = ""
    tags: tuple[str, ...] = field(default=())


def _inputs(device: str, dtype: torch.dtype, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g).to(dtype).to(device) for s in shapes]


def _small_add(device: str, dtype: torch.dtype) -> Workload:
    a, b = _inputs(device, dtype, (1024,), (1024,))
    return lambda: torch.add(a, b)


def _add_1m(device: str, dtype: torch.dtype) -> Workload:
    a, b = _inputs(device, dtype, (1 << 20,), (1 << 20,))
    return lambda: torch.add(a, b)


def _matmul(n: int) -> Callable[[str, torch.dtype], Workload]:
    def build(device: str, dtype: torch.dtype) -> Workload:
        a, b = _inputs(device, dtype, (n, n), (n, n))
        return lambda: torch.mm(a, b)

    return build


def _softmax(device: str, dtype: torch.dtype) -> Workload:
    (x,) = _inputs(device, dtype, (4096, 1024))
    return lambda: torch.softmax(x, dim=-1)


def _layer_norm(device: str, dtype: torch.dtype) -> Workload:
    x, w, b = _inputs(device, dtype, (4096, 1024), (1024,), (1024,))
    return lambda: F.layer_norm(x, (1024,), w, b)


def _elementwise_chain(device: str, dtype: torch.dtype) -> Workload:
    (x,) = _inputs(device, dtype, (1 << 20,))

    def chain() -> torch.Tensor:
        y = x
        for i in range(10):
            y = torch.sigmoid(y * 1.01 + 0.1) if i % 2 else torch.tanh(y - 0.05)
        return y

    return chain


CASES: dict[str, Case] = {case.name: case for case in (
    Case("add_1k", _small_add, (torch.float32,), "a small elementwise op: 1024-element fp32 add", ("ops",)),
    Case("add_1m", _add_1m, (torch.float32, torch.bfloat16), "1M-element add", ("ops",)),
    Case("matmul_512", _matmul(512), (torch.float32, torch.bfloat16), "512^3 matmul", ("ops",)),
    Case("matmul_1024", _matmul(1024), (torch.float32, torch.bfloat16), "1024^3 matmul", ("ops",)),
    Case("softmax_4096x1024", _softmax, (torch.float32, torch.bfloat16), "softmax over 4096x1024", ("ops",)),
    Case("layer_norm_4096x1024", _layer_norm, (torch.float32, torch.bfloat16), "layer_norm over 4096x1024",
         ("ops",)),
    Case("elementwise_chain_1m", _elementwise_chain, (torch.float32,), "20 elementwise ops over 1M elements",
         ("ops",)),
)}


def synchronize(device: str) -> None:
    if device.startswith("neuron"):
        torch.neuron.synchronize()


def wall_seconds(fn: Workload, device: str, repeats: int = 5, min_time: float = 0.2) -> float:
    """Best-of-``repeats`` seconds per call, with enough calls per repeat to last ``min_time``."""
    fn()
    synchronize(device)
    timer = timeit.Timer(lambda: (fn(), synchronize(device)))
    number, _ = timer.autorange() if min_time >= 0.2 else (1, None)
    return min(timer.repeat(repeat=repeats, number=number)) / number


def device_seconds(fn: Workload, device: str = "neuron") -> float:
    """Simulated device time of one call: how far the core's device clock advances."""
    index = torch.device(device).index or 0
    before = C.device_time_ns(index)
    fn()
    return (C.device_time_ns(index) - before) / 1e9
